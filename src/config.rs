//! The layer's settings, validated when it is built.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::task::Principal;

pub(crate) type PrincipalFn =
    Arc<dyn Fn(&http::request::Parts) -> Option<Principal> + Send + Sync + 'static>;

/// Settings, validated when the layer is built.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) enabled: bool,
    pub(crate) max_rows: Option<usize>,
    pub(crate) max_per_owner: Option<usize>,
    pub(crate) default_ttl: Option<Duration>,
    pub(crate) default_poll_interval: Option<Duration>,
    pub(crate) max_request_bytes: usize,
    pub(crate) max_response_bytes: usize,
    pub(crate) max_input_response_bytes: usize,
    pub(crate) max_task_input_bytes: usize,
    pub(crate) max_result_bytes: usize,
    pub(crate) server_info: Option<Value>,
    pub(crate) tool_modes: HashMap<String, TaskMode>,
    pub(crate) default_mode: TaskMode,
    pub(crate) task_policy: Option<TaskPolicy>,
    pub(crate) task_tools: bool,
    pub(crate) janitor: Option<(Duration, Duration)>,
    pub(crate) max_listen_task_ids: usize,
    pub(crate) max_listen_streams_per_owner: usize,
    pub(crate) max_listen_streams: usize,
    pub(crate) max_listen_bytes_per_owner: usize,
    pub(crate) max_listen_bytes: usize,
    pub(crate) listen_ack_timeout: Duration,
    pub(crate) keep_alive: Duration,
    pub(crate) store_timeout: Duration,
    /// Refuse to create or read tasks for a request without a principal.
    pub(crate) require_principal: bool,
}

impl Config {
    /// The mode of a tool's calls when no policy decides.
    pub(crate) fn mode_for(&self, tool: &str) -> TaskMode {
        self.tool_modes
            .get(tool)
            .copied()
            .unwrap_or(self.default_mode)
    }

    /// The mode of one call: the policy's decision when it makes one, otherwise the
    /// tool's configured mode.
    pub(crate) fn mode_for_call(&self, tool: &str, arguments: &Value) -> TaskMode {
        self.task_policy
            .as_ref()
            .and_then(|policy| policy.decide(tool, arguments))
            .unwrap_or_else(|| self.mode_for(tool))
    }
}

/// Whether and how a tool's calls become tasks, configured per tool on the layer with
/// [`with_tool_mode`](crate::TasksLayerBuilder::with_tool_mode) (default for every
/// tool: [`Optional`](TaskMode::Optional), changed with
/// [`with_default_mode`](crate::TasksLayerBuilder::with_default_mode)) or per call
/// with [`with_task_policy`](crate::TasksLayerBuilder::with_task_policy).
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::{MemoryStore, TaskMode, TasksLayer};
///
/// assert_eq!(TaskMode::default(), TaskMode::Optional);
/// let layer = TasksLayer::builder(MemoryStore::new())
///     .with_tool_mode("greet", TaskMode::Never)
///     .with_tool_mode("build", TaskMode::Optional)
///     .with_tool_mode("deploy", TaskMode::Required)
///     .with_tool_mode("export", TaskMode::Auto { after: Duration::from_millis(250) })
///     .with_tool_mode("migrate", TaskMode::AutoRequired { after: Duration::from_secs(1) })
///     .build();
/// assert!(layer.is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TaskMode {
    /// Always synchronous: the handler cannot make a task.
    Never,
    /// The handler decides, through [`TaskContext`](crate::TaskContext) or a
    /// [`TaskSpec`](crate::TaskSpec) on the response.
    #[default]
    Optional,
    /// Task-only: a client that did not declare the extension gets -32021 (HTTP 400)
    /// before the inner service is called.
    Required,
    /// Retrofit: the layer makes the task, so the inner server needs no change.
    ///
    /// For a client that declared the extension, the layer runs the inner call in
    /// the background, detached from the client's connection. An answer within
    /// `after` reaches the client unchanged; otherwise the client gets a
    /// `CreateTaskResult` and the inner call's eventual JSON-RPC response finishes
    /// the task (`result` → `completed`, `error` → `failed`). `tasks/cancel` drops
    /// the inner call's future. An MRTR `input_required` answer is relayed as the
    /// task's input requests and the call re-sent once they are answered. A client
    /// that did not declare the extension gets the plain synchronous call.
    ///
    /// A task with a TTL stops its inner call shortly before the TTL runs out (in
    /// the last quarter of it, at most [`AUTO_EXPIRY_MARGIN`](crate::defaults::AUTO_EXPIRY_MARGIN), 5 s, before) and becomes
    /// `failed` with -32603, so that a poller learns why before the task expires.
    ///
    /// The inner handler sees a request without the tasks extension in its
    /// `_meta` client capabilities, and a [`TaskContext`](crate::TaskContext) that refuses to make a
    /// task: it cannot nest one.
    ///
    /// The call carries a `progressToken` (the layer's own when the client sent
    /// none), and the inner server's `notifications/progress` become the task's
    /// `statusMessage`: the report's `message`, otherwise "n of total"; the newest
    /// wins, written at most every 250 ms. Reports are never forwarded on listen
    /// streams, and never reach a client that sent no token.
    Auto {
        /// How long the client waits for the inner answer before it gets a task.
        after: Duration,
    },
    /// [`Auto`](TaskMode::Auto) for a client that declared the extension, and
    /// -32021 (HTTP 400, with `requiredCapabilities`) for one that did not, as
    /// [`Required`](TaskMode::Required) does: for a retrofitted tool that runs too
    /// long to be called synchronously at all. With
    /// [`with_task_tools`](crate::TasksLayerBuilder::with_task_tools), such a client
    /// gets a task it follows through the task tools instead. While the layer drains, a client with
    /// the extension gets -32603 "Server is shutting down".
    AutoRequired {
        /// How long the client waits for the inner answer before it gets a task.
        after: Duration,
    },
}

impl TaskMode {
    /// The budget of an automatic mode.
    pub(crate) fn auto_after(self) -> Option<Duration> {
        match self {
            TaskMode::Auto { after } | TaskMode::AutoRequired { after } => Some(after),
            _ => None,
        }
    }

    /// Whether a client must declare the extension to call the tool at all.
    pub(crate) fn requires_extension(self) -> bool {
        matches!(self, TaskMode::Required | TaskMode::AutoRequired { .. })
    }
}

pub(crate) type PolicyFn =
    dyn Fn(&str, &serde_json::Value) -> Option<TaskMode> + Send + Sync + 'static;

/// A per-call mode decision over the tool name and its arguments, set with
/// [`TasksLayerBuilder::with_task_policy`](crate::TasksLayerBuilder::with_task_policy).
#[derive(Clone)]
pub(crate) struct TaskPolicy(pub(crate) Arc<PolicyFn>);

impl TaskPolicy {
    pub(crate) fn decide(&self, tool: &str, arguments: &serde_json::Value) -> Option<TaskMode> {
        (self.0)(tool, arguments)
    }
}

impl fmt::Debug for TaskPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TaskPolicy")
    }
}
