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
    pub(crate) max_bytes_per_owner: usize,
    pub(crate) max_status_message_bytes: usize,
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
    pub(crate) edited_answer_timeout: Duration,
    pub(crate) keep_alive: Duration,
    pub(crate) store_timeout: Duration,
    /// Let a request without a principal create and read (anonymous) tasks.
    pub(crate) anonymous_tasks: bool,
    /// The prefix of the inner service's own task ids, when its tasks are carried.
    pub(crate) inner_tasks: Option<Arc<str>>,
}

impl Config {
    /// Whether `id` names a task of the inner service's own (see
    /// [`with_inner_tasks`](crate::TasksLayerBuilder::with_inner_tasks)).
    pub(crate) fn is_inner_task(&self, id: &str) -> bool {
        self.inner_tasks
            .as_deref()
            .is_some_and(|prefix| id.starts_with(prefix))
    }

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
///
/// # Retrofit an existing server
///
/// An MCP server that knows nothing about tasks gets them from layer configuration
/// alone: mark its slow tools `Auto { after }`.
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::{MemoryStore, TaskMode, TasksLayer};
///
/// fn layer() -> Result<TasksLayer, mcp_tasks::error::ConfigError> {
///     let auto = TaskMode::Auto { after: Duration::from_millis(250) };
///     TasksLayer::builder(MemoryStore::new())
///         .with_tool_mode("export", auto)             // these tools become tasks when slow
///         .with_tool_mode("reindex", auto)
///         .with_task_policy(move |tool, arguments| {  // or decide per call; wins when Some
///             (tool == "search" && arguments["deep"] == true).then_some(auto)
///         })
///         .build()
/// }
/// # layer().unwrap();
/// ```
///
/// For a client that declared the extension, the layer runs the call in the
/// background, detached from the client's connection:
///
/// - an answer within `after` reaches the client unchanged (JSON or SSE);
/// - otherwise the client gets a `CreateTaskResult`, and the inner response finishes
///   the task: a `result` completes it, a JSON-RPC `error` fails it with that error;
/// - `tasks/cancel` drops the inner call's future: the work really stops. With rmcp,
///   dropping the request cancels the handler's `RequestContext::ct`; a handler that
///   waits on it stops at once;
/// - an MRTR `input_required` answer becomes the task's `inputRequests` (keys renamed
///   `r1.confirm`, `r2.…` so that they stay unique over the task's life). Once the
///   client has answered them all through `tasks/update`, the layer re-sends the
///   original call with the answers under the server's own keys and its
///   `requestState`, which never leaves the layer;
/// - a running task is stopped shortly before its TTL (in the last quarter of it, at
///   most [`AUTO_EXPIRY_MARGIN`](crate::defaults::AUTO_EXPIRY_MARGIN), 5 s, before it)
///   and marked `failed` with -32603, so pollers see why before it expires;
/// - the inner server's `notifications/progress` become the task's `statusMessage`
///   (the report's `message`, otherwise "n of total"): coalesced, the newest wins,
///   written at most every 250 ms. The layer sends the call with a `progressToken` of
///   its own when the client gave none (and then keeps the reports from that client);
///   the raw notifications never reach a listen stream.
///
/// The inner handler sees a request without the tasks extension in its `_meta`, and a
/// [`TaskContext`](crate::TaskContext) that refuses to make a task, so it cannot nest
/// one. A client that did not declare the extension simply waits for the plain
/// answer, unless the tool is `AutoRequired { after }`: automatic for clients with the
/// extension, -32021 with `requiredCapabilities` for the others, for a tool too long
/// to call synchronously at all.
///
/// In the repository, `cargo run --example retrofit` (127.0.0.1:3002) runs an
/// unmodified rmcp server configured this way, and the gateway (`gateway/`, the `mcp-tasks-gateway` binary) puts the
/// layer in front of a reverse proxy, so that an MCP server written in any language
/// gets tasks without a line changed (examples/README.md describes both).
///
/// # Clients without the tasks extension
///
/// Most MCP clients do not declare the tasks extension yet, and a long tool call then
/// holds their request open until it ends, or until a timeout of the client or a proxy
/// kills it. [`with_task_tools`](crate::TasksLayerBuilder::with_task_tools) gives them
/// tasks too, in a form a language model can use:
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::{MemoryStore, TaskMode, TasksLayer};
///
/// fn layer() -> Result<TasksLayer, mcp_tasks::error::ConfigError> {
///     TasksLayer::builder(MemoryStore::new())
///         .with_default_mode(TaskMode::Auto { after: Duration::from_secs(2) })
///         .with_task_tools()
///         .build()
/// }
/// # layer().unwrap();
/// ```
///
/// For a client that did not declare the extension, on 2026-07-28 or on an earlier
/// revision (2025-03-26 … 2025-11-25, with or without a session):
///
/// - a call that becomes a task (an `Auto` or `AutoRequired` tool past its budget, an
///   `Optional` or `Required` tool whose handler makes one) answers with an ordinary
///   tool result: "This call takes longer than a direct answer allows, so it goes on
///   in the background as task `<id>`. Follow it with the tool task_status …";
/// - its `tools/list` gains `task_status {taskId}` (the status, the latest status
///   message, the questions the task waits on with their keys, and once completed the
///   tool's own result: its content, `structuredContent` and `isError`), `task_answer
///   {taskId, answers}` (answers by key, as `tasks/update` takes them) and
///   `task_cancel {taskId}`. The layer answers them from the store with the caller's
///   owner scope, like `tasks/*`: a foreign or unknown id reads "There is no task …"
///   (`isError: true`).
///
/// A tool that answers within its budget answers as before, `Never` tools are
/// untouched, and a client that declared the extension sees no change at all. The
/// `retrofit` and `quickstart` examples and the gateway turn it on with `MCP_TASK_TOOLS=1`.
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
    /// before the inner service is called, and a 2025-11-25 call without `task`
    /// gets -32601 (its `tools/list` says `taskSupport: "required"`). With
    /// [`with_task_tools`](crate::TasksLayerBuilder::with_task_tools) both get a task
    /// instead, answered as a tool result that they follow with `task_status`.
    Required,
    /// Retrofit: the layer makes the task when the inner call runs longer than
    /// `after`, so the inner server needs no change ([above](TaskMode#retrofit-an-existing-server)).
    /// A client that did not declare the extension gets the plain synchronous call.
    Auto {
        /// How long the client waits for the inner answer before it gets a task.
        after: Duration,
    },
    /// [`Auto`](TaskMode::Auto) for a client that declared the extension, and
    /// -32021 (HTTP 400, with `requiredCapabilities`) for one that did not, as
    /// [`Required`](TaskMode::Required) does. With
    /// [`with_task_tools`](crate::TasksLayerBuilder::with_task_tools), such a client
    /// gets a task it follows through the task tools instead. While the layer drains,
    /// a client with the extension gets -32603 "Server is shutting down".
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
