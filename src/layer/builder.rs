//! [`TasksLayerBuilder`]: the settings of a layer, and their setters.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use super::TasksLayer;
use crate::config::{Config, PrincipalFn};
use crate::config::{TaskMode, TaskPolicy};
use crate::defaults;
#[cfg(doc)]
use crate::error::ConfigError;
use crate::notify::{ListenNotifier, TaskNotifier};
use crate::store::{LeaseStore, NodeId, TaskStore};
use crate::task::Principal;

/// Settings for a [`TasksLayer`], checked by [`build`](TasksLayerBuilder::build).
///
/// Made by [`TasksLayer::builder`]; every setting starts at its default (the values are
/// in [`defaults`](crate::defaults) and on each setter). A setting out of range is a
/// [`ConfigError`] from `build`, never a failure at request time.
///
/// Its methods come in groups, each under its own heading below: which calls become
/// tasks; who owns a task; notifications and listen streams; the store, other nodes
/// and background work; how many tasks, and for how long; how large; and `build`.
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::{MemoryStore, Principal, TaskMode, TasksLayer};
///
/// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
/// let layer = TasksLayer::builder(MemoryStore::new())
///     // Identity and advertising.
///     .with_server_info("billing", "2.1.0")
///     .with_principal(|parts| {
///         let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
///         Some(Principal::from(tenant))
///     })
///     // Which calls become tasks.
///     .with_default_mode(TaskMode::Never)
///     .with_tool_mode("export", TaskMode::Optional)
///     .with_tool_mode("reindex", TaskMode::Auto { after: Duration::from_millis(500) })
///     // Limits.
///     .with_max_rows(100_000)
///     .with_max_tasks_per_owner(100)
///     .with_default_ttl(Duration::from_secs(24 * 3600))
///     .with_default_poll_interval(Duration::from_secs(2))
///     .with_max_request_bytes(1024 * 1024)
///     .with_max_response_bytes(64 * 1024 * 1024)
///     // Background work.
///     .with_janitor(Duration::from_secs(300), Duration::from_secs(3600))
///     .with_keep_alive(Duration::from_secs(30))
///     .build()?;
/// assert!(layer.is_enabled());
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct TasksLayerBuilder {
    pub(super) store: Arc<dyn TaskStore>,
    pub(super) config: Config,
    pub(super) notifier: Option<Arc<dyn TaskNotifier>>,
    pub(super) listen: ListenNotifier,
    pub(super) principal: Option<PrincipalFn>,
    pub(super) server_name: Option<(String, String)>,
    /// The worker lease's bound, `None` without leases.
    pub(super) lease_bound: Option<Duration>,
    pub(super) lease_store: Option<Arc<dyn LeaseStore>>,
    pub(super) node_id: Option<NodeId>,
    /// A notifier of the application's own: told of every change other nodes make.
    pub(super) custom_notifier: bool,
}

/// # Which calls become tasks
///
/// The switch for the whole extension, and the [`TaskMode`] of each call: by default,
/// per tool, or decided per call by a policy; and tasks for clients that do not speak
/// the extension.
impl TasksLayerBuilder {
    pub(super) fn new(store: Arc<dyn TaskStore>) -> Self {
        let listen = ListenNotifier::default();
        TasksLayerBuilder {
            store,
            config: Config {
                enabled: true,
                max_rows: Some(defaults::MAX_ROWS),
                max_per_owner: Some(defaults::MAX_TASKS_PER_OWNER),
                default_ttl: Some(defaults::TTL),
                default_poll_interval: None,
                max_request_bytes: defaults::MAX_REQUEST_BYTES,
                max_response_bytes: defaults::MAX_RESPONSE_BYTES,
                max_input_response_bytes: defaults::MAX_INPUT_RESPONSE_BYTES,
                max_task_input_bytes: defaults::MAX_TASK_INPUT_BYTES,
                max_result_bytes: defaults::MAX_RESULT_BYTES,
                max_bytes_per_owner: defaults::MAX_BYTES_PER_OWNER,
                max_status_message_bytes: defaults::MAX_STATUS_MESSAGE_BYTES,
                server_info: None,
                tool_modes: HashMap::new(),
                default_mode: TaskMode::Optional,
                task_policy: None,
                task_tools: false,
                janitor: Some((defaults::JANITOR_INTERVAL, defaults::RETENTION)),
                max_listen_task_ids: defaults::MAX_LISTEN_TASK_IDS,
                max_listen_streams_per_owner: defaults::MAX_LISTEN_STREAMS_PER_OWNER,
                max_listen_streams: defaults::MAX_LISTEN_STREAMS,
                max_listen_bytes_per_owner: defaults::MAX_LISTEN_BYTES_PER_OWNER,
                max_listen_bytes: defaults::MAX_LISTEN_BYTES,
                listen_ack_timeout: defaults::LISTEN_ACK_TIMEOUT,
                edited_answer_timeout: defaults::EDITED_ANSWER_TIMEOUT,
                keep_alive: defaults::KEEP_ALIVE,
                store_timeout: defaults::STORE_TIMEOUT,
                anonymous_tasks: false,
                inner_tasks: None,
            },
            notifier: Some(Arc::new(listen.clone())),
            listen,
            principal: None,
            server_name: None,
            lease_bound: Some(defaults::WORKER_LEASE),
            lease_store: None,
            node_id: None,
            custom_notifier: false,
        }
    }

    /// Switches the extension on or off at run time (for rollouts from
    /// configuration; default: on). Off, everything passes through, the extension is
    /// not advertised, no janitor starts, and a task outcome is logged and answered
    /// -32603; a handler's [`TaskContext`](crate::TaskContext) refuses with
    /// [`TaskRefused::Disabled`](crate::TaskRefused::Disabled).
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
    /// let enabled = std::env::var("MCP_TASKS").map_or(true, |v| v != "off");
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_enabled(enabled).build()?;
    /// assert_eq!(layer.is_enabled(), enabled);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.config.enabled = enabled;
        self
    }

    /// The mode of tools not configured with [`with_tool_mode`](Self::with_tool_mode)
    /// (default [`TaskMode::Optional`]: the handler decides).
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TaskMode, TasksLayer};
    ///
    /// // Only the tools named here may ever become tasks.
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_default_mode(TaskMode::Never)
    ///     .with_tool_mode("build", TaskMode::Optional)
    ///     .build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn with_default_mode(mut self, mode: TaskMode) -> Self {
        self.config.default_mode = mode;
        self
    }

    /// How calls of one tool may become tasks (default: the
    /// [`with_default_mode`](Self::with_default_mode), itself [`TaskMode::Optional`]
    /// unless set). Call it once per tool; a later call for the same tool wins.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TaskMode, TasksLayer};
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_tool_mode("deploy", TaskMode::Required) // -32021 for clients without tasks
    ///     .with_tool_mode("greet", TaskMode::Never)     // always synchronous
    ///     .with_tool_mode("export", TaskMode::Auto { after: Duration::from_secs(1) })
    ///     .build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn with_tool_mode(mut self, tool: impl Into<String>, mode: TaskMode) -> Self {
        self.config.tool_modes.insert(tool.into(), mode);
        self
    }

    /// Decides the mode of each call from the tool name and its arguments
    /// (`Value::Null` when the call has none; default: no policy, so each tool's
    /// configured mode applies). When the policy returns `Some`, that
    /// mode wins over [`with_tool_mode`](Self::with_tool_mode) and
    /// [`with_default_mode`](Self::with_default_mode); `None` falls back to them.
    ///
    /// Keep it cheap: it runs on every `tools/call` the layer sees.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TaskMode, TasksLayer};
    ///
    /// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
    /// // Large exports run in the background; small ones keep the tool's own mode.
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_task_policy(|tool, arguments| {
    ///         let rows = arguments.get("rows").and_then(|r| r.as_u64()).unwrap_or(0);
    ///         (tool == "export" && rows > 10_000)
    ///             .then_some(TaskMode::Auto { after: Duration::from_millis(500) })
    ///     })
    ///     .without_janitor()
    ///     .build()?;
    /// # drop(layer);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_task_policy<F>(mut self, policy: F) -> Self
    where
        F: Fn(&str, &serde_json::Value) -> Option<TaskMode> + Send + Sync + 'static,
    {
        self.config.task_policy = Some(TaskPolicy(Arc::new(policy)));
        self
    }

    /// Tasks for clients that do not speak the extension (default: off): a call of
    /// theirs that becomes a task answers with a tool result that says so, and their
    /// `tools/list` gains `task_status`, `task_answer` and `task_cancel`;
    /// [`TaskMode`](crate::TaskMode#clients-without-the-tasks-extension) describes
    /// what such a client sees. With it on, the layer reads the body of every
    /// earlier-revision `POST` and of `tools/list` (up to
    /// [`with_max_request_bytes`](Self::with_max_request_bytes)), to find the calls
    /// it answers.
    ///
    /// Beside each text, written for a language model, app code gets the task as
    /// JSON: `{taskId, status, pollIntervalMs, statusMessage?}`, plus `inputRequests`
    /// (key → `{method, params}`) when `input_required`, `result` (the tool's
    /// `CallToolResult`) when `completed`, `error` (the JSON-RPC error) when `failed`.
    /// The three tools answer it as `structuredContent` and declare it as their
    /// `outputSchema`; errors that report no task (an unknown id, say) are
    /// `isError: true` without it. The hand-off carries it in `_meta` under
    /// `"mcp-tasks/task"`, never as `structuredContent`, which clients check against
    /// the called tool's own `outputSchema`. A tool that declares an `outputSchema`
    /// gets a hand-off such validating clients refuse (it has no `structuredContent`
    /// matching that schema), so leave such a tool [`TaskMode::Never`] if those
    /// clients call it.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_task_tools().build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn with_task_tools(mut self) -> Self {
        self.config.task_tools = true;
        self
    }

    /// Carries the inner service's own tasks (default: off), for a layer in front
    /// of a server that has tasks of its own, such as a gateway in front of another
    /// 2026-07-28 server. The inner service's task ids must start with `prefix`,
    /// which must hold a character outside `A-Z a-z 0-9 - _` so that none of the
    /// layer's own ids starts with it (otherwise [`build`](Self::build) fails with
    /// [`ConfigError::InvalidName`]).
    ///
    /// With it:
    /// - a `tools/call` that the inner service answers with a task of its own
    ///   (`resultType: "task"`) reaches the client unchanged; an
    ///   [`Auto`](TaskMode::Auto) call keeps the tasks extension in the capabilities
    ///   it forwards, so that the inner service may make one;
    /// - `tasks/get`, `tasks/update` and `tasks/cancel` of an id with `prefix` go to
    ///   the inner service, after the layer's own checks (media types, the envelope,
    ///   the declared extension, an anonymous caller), and its answer is the
    ///   client's;
    /// - `subscriptions/listen` sends the ids with `prefix` on to the inner
    ///   service's listen and follows the rest itself; the acknowledgment lists
    ///   both;
    /// - the layer's own `Auto` tasks go on beside them. An inner task that arrives
    ///   after an `Auto` call became a layer task fails that task with -32603, its
    ///   `error.data.taskId` naming the inner task.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_inner_tasks("up.").build();
    /// assert!(layer.is_ok());
    /// let refused = TasksLayer::builder(MemoryStore::new()).with_inner_tasks("up").build();
    /// assert!(refused.is_err());
    /// ```
    pub fn with_inner_tasks(mut self, prefix: impl Into<String>) -> Self {
        self.config.inner_tasks = Some(prefix.into().into());
        self
    }
}

/// # Who owns a task, and who answers
///
/// Where the [`Principal`] of a request comes from, whether anonymous requests may
/// have tasks, and the `serverInfo` the layer puts in its own results.
impl TasksLayerBuilder {
    /// Where the owner of a request comes from. By default the layer reads a
    /// [`Principal`] from the request's extensions, put there by an auth layer; a
    /// request without one is anonymous (`None`), and sees only anonymous tasks.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, Principal, TasksLayer};
    ///
    /// /// What your authentication puts into the request extensions.
    /// #[derive(Clone)]
    /// struct User {
    ///     id: String,
    /// }
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_principal(|parts: &http::request::Parts| {
    ///         parts.extensions.get::<User>().map(|user| Principal::from(user.id.as_str()))
    ///     })
    ///     .build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn with_principal<F>(mut self, principal: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Option<Principal> + Send + Sync + 'static,
    {
        self.principal = Some(Arc::new(principal));
        self
    }

    /// Lets requests without a [`Principal`] have tasks: anonymous tasks, which
    /// every unauthenticated caller shares (each sees only the anonymous ones). For
    /// a server with no authentication at all: a local tool, a test, a demo.
    ///
    /// By default they are refused: a request without a principal may not create,
    /// read, answer, cancel or listen to tasks. The refusal is -32603 with the
    /// message "Tasks require an authenticated principal (anonymous tasks need
    /// with_anonymous_tasks())" and `error.data` `{"reason": "principal_required"}`,
    /// with HTTP 200, after the capability check: a tool that would become a task
    /// (`Required`, `Auto`, or a handler asking for one) is answered with it, and so
    /// are `tasks/get`, `tasks/update`, `tasks/cancel` and a listen naming task ids.
    /// A call that stays synchronous is not affected. It is a server-side refusal,
    /// not a challenge: answering 401 is the authentication layer's job, with the
    /// `WWW-Authenticate` header only it can fill in; a request that reaches this
    /// layer without a principal means that layer let it through, most often
    /// because it sits below `TasksLayer` instead of above it. The first refusal of
    /// a layer logs one `tracing` warning naming that likely cause.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// // A local server without authentication: every caller is anonymous.
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_anonymous_tasks()
    ///     .build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn with_anonymous_tasks(mut self) -> Self {
        self.config.anonymous_tasks = true;
        self
    }

    /// `serverInfo` carried in `_meta` of the results the layer writes itself
    /// (`tasks/*` answers and `CreateTaskResult`s; default: none). An empty name is
    /// refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let named = TasksLayer::builder(MemoryStore::new())
    ///     .with_server_info("my-server", env!("CARGO_PKG_VERSION"))
    ///     .build();
    /// assert!(named.is_ok());
    /// let blank = TasksLayer::builder(MemoryStore::new()).with_server_info(" ", "1.0").build();
    /// assert_eq!(blank.unwrap_err(), ConfigError::EmptyServerName);
    /// ```
    pub fn with_server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.server_name = Some((name.into(), version.into()));
        self
    }
}

/// # Notifications and listen streams
///
/// Who is told of each task change, and the bounds of the listen streams that carry
/// `notifications/tasks` to clients.
impl TasksLayerBuilder {
    /// The hook told about every task change, in place of the default
    /// [`ListenNotifier`] (which sends `notifications/tasks` to listen streams). Any
    /// `Fn(&TaskRecord) + Send + Sync` is a [`TaskNotifier`].
    ///
    /// A custom notifier that should keep listen delivery calls
    /// [`listen_notifier`](Self::listen_notifier) from its `task_changed`;
    /// [`without_notifier`](Self::without_notifier) turns notifications off.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use mcp_tasks::{MemoryStore, TaskRecord, TasksLayer};
    ///
    /// // Counts changes, and sends nothing to listen streams.
    /// let changes = Arc::new(AtomicUsize::new(0));
    /// let counter = changes.clone();
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_notifier(move |_task: &TaskRecord| {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///     })
    ///     .build();
    /// assert!(layer.is_ok());
    /// assert_eq!(changes.load(Ordering::Relaxed), 0);
    /// ```
    pub fn with_notifier(mut self, notifier: impl TaskNotifier) -> Self {
        self.notifier = Some(Arc::new(notifier));
        self.custom_notifier = true;
        self
    }

    /// No notifier at all (the default is the layer's [`ListenNotifier`]): a listen
    /// then agrees to no task ids, and clients poll `tasks/get`.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new()).without_notifier().build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn without_notifier(mut self) -> Self {
        self.notifier = None;
        self.custom_notifier = false;
        self
    }

    /// The notifier that feeds this layer's listen streams: the default notifier,
    /// for a custom one to call so that listen delivery keeps working.
    ///
    /// ```
    /// use mcp_tasks::notify::TaskNotifier;
    /// use mcp_tasks::{MemoryStore, TaskRecord, TasksLayer};
    ///
    /// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
    /// let builder = TasksLayer::builder(MemoryStore::new());
    /// let listen = builder.listen_notifier();
    /// let layer = builder
    ///     .with_notifier(move |task: &TaskRecord| {
    ///         listen.task_changed(task); // notifications/tasks, as by default
    ///         tracing::debug!(status = %task.status, "task changed"); // and a hook of ours
    ///     })
    ///     .build()?;
    /// assert_eq!(layer.listen_notifier().stream_count(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn listen_notifier(&self) -> ListenNotifier {
        self.listen.clone()
    }

    /// The interval of keep-alive comments on idle listen streams (default
    /// [`defaults::KEEP_ALIVE`], 15 s; at most [`defaults::MAX_KEEP_ALIVE`], 1 hour).
    /// Zero is refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let proxy_friendly = TasksLayer::builder(MemoryStore::new())
    ///     .with_keep_alive(Duration::from_secs(5))
    ///     .build();
    /// assert!(proxy_friendly.is_ok());
    /// let too_long = TasksLayer::builder(MemoryStore::new())
    ///     .with_keep_alive(Duration::from_secs(2 * 3600))
    ///     .build();
    /// let refused = too_long.unwrap_err();
    /// assert_eq!(refused.to_string(), "mcp-tasks: keep_alive must be at most 1 h");
    /// ```
    pub fn with_keep_alive(mut self, interval: Duration) -> Self {
        self.config.keep_alive = interval;
        self
    }

    /// How long the layer waits for the inner service's listen response and its
    /// first message, the acknowledgment (default [`defaults::LISTEN_ACK_TIMEOUT`],
    /// 5 s). After it the inner stream is dropped and the client gets the layer's own
    /// acknowledgment and a stream of task notifications alone. Zero is refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_listen_ack_timeout(Duration::from_secs(1))
    ///     .build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new())
    ///     .with_listen_ack_timeout(Duration::ZERO)
    ///     .build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroDuration("listen_ack_timeout"));
    /// ```
    pub fn with_listen_ack_timeout(mut self, timeout: Duration) -> Self {
        self.config.listen_ack_timeout = timeout;
        self
    }

    /// How long the layer waits for an inner answer it edits before passing it on
    /// (`server/discover`, `tools/list` with the task tools, a 2025-11-25
    /// `initialize`), an SSE answer read to its end (default
    /// [`defaults::EDITED_ANSWER_TIMEOUT`], 30 s). Past it the inner call is dropped
    /// and the client gets -32603 "The server did not finish its answer in time",
    /// with HTTP 504. Zero is refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_edited_answer_timeout(Duration::from_secs(10))
    ///     .build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new())
    ///     .with_edited_answer_timeout(Duration::ZERO)
    ///     .build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroDuration("edited_answer_timeout"));
    /// ```
    pub fn with_edited_answer_timeout(mut self, timeout: Duration) -> Self {
        self.config.edited_answer_timeout = timeout;
        self
    }

    /// The most listen streams carrying task ids one principal (or all anonymous
    /// callers together) may hold open at once (default
    /// [`defaults::MAX_LISTEN_STREAMS_PER_OWNER`], 16). One more is answered -32603
    /// "Too many listen streams" with `error.data` `{"limit": "listen_per_owner"}`
    /// (HTTP 200) until one of them closes. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_max_listen_streams_per_owner(4)
    ///     .build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new())
    ///     .with_max_listen_streams_per_owner(0)
    ///     .build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_listen_streams_per_owner"));
    /// ```
    pub fn with_max_listen_streams_per_owner(mut self, max: usize) -> Self {
        self.config.max_listen_streams_per_owner = max;
        self
    }

    /// The most listen streams carrying task ids the layer holds open at once,
    /// whoever opened them (default [`defaults::MAX_LISTEN_STREAMS`], 1 000). One more
    /// is answered -32603 "Too many listen streams" with `error.data`
    /// `{"limit": "listen_total"}` (HTTP 200) until one closes. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_max_listen_streams(10_000).build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_listen_streams(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_listen_streams"));
    /// ```
    pub fn with_max_listen_streams(mut self, max: usize) -> Self {
        self.config.max_listen_streams = max;
        self
    }

    /// The most bytes of task notifications one principal's listen streams (all
    /// anonymous callers together counting as one) hold before their readers take
    /// them (default [`defaults::MAX_LISTEN_BYTES_PER_OWNER`], 32 MiB). A change is
    /// serialized once and counted once, however many streams name it, until the
    /// last of them has written it. A listen whose snapshot would pass the bound is
    /// answered -32603 "Too many listen bytes" with `error.data`
    /// `{"limit": "listen_bytes_per_owner"}`; an open stream whose next change would
    /// pass it drops what it holds and ends with the listen result, so a reader that
    /// stalls never makes the node hold more. Keep it above
    /// [`with_max_result_bytes`](Self::with_max_result_bytes), or a finished task's
    /// notification never fits. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_max_listen_bytes_per_owner(64 * 1024 * 1024)
    ///     .build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_listen_bytes_per_owner(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_listen_bytes_per_owner"));
    /// ```
    pub fn with_max_listen_bytes_per_owner(mut self, max: usize) -> Self {
        self.config.max_listen_bytes_per_owner = max;
        self
    }

    /// The most bytes of task notifications all listen streams of the layer hold
    /// before their readers take them (default [`defaults::MAX_LISTEN_BYTES`],
    /// 256 MiB); past it, as for
    /// [`with_max_listen_bytes_per_owner`](Self::with_max_listen_bytes_per_owner),
    /// with `{"limit": "listen_bytes_total"}`. The principal whose streams hold the
    /// most pays for this bound: when a change of another principal's, who holds
    /// less, would pass it, or a new listen's snapshot would, the largest holder's
    /// streams end first (dropping what they hold queued) and the change is
    /// delivered (the listen opened) if it then fits. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_max_listen_bytes(1024 * 1024 * 1024)
    ///     .build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_listen_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_listen_bytes"));
    /// ```
    pub fn with_max_listen_bytes(mut self, max: usize) -> Self {
        self.config.max_listen_bytes = max;
        self
    }
}

/// # The store, other nodes and background work
///
/// How long a store call may take, the worker leases that let a surviving node fail
/// a dead node's tasks, and the janitor that frees the space of expired ones.
impl TasksLayerBuilder {
    /// The longest one store call made by the layer may take (default
    /// [`defaults::STORE_TIMEOUT`], 5 s). A call still unanswered then is dropped and
    /// counts as a store failure: a request gets -32603 at once instead of hanging on
    /// a stalled store or an exhausted pool, and background writers (the `Auto`
    /// runners) retry. Zero is refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_store_timeout(Duration::from_secs(2))
    ///     .build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new())
    ///     .with_store_timeout(Duration::ZERO)
    ///     .build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroDuration("store_timeout"));
    /// ```
    pub fn with_store_timeout(mut self, timeout: Duration) -> Self {
        self.config.store_timeout = timeout;
        self
    }

    /// How long this node's lease on the tasks it runs lasts without a renewal
    /// (default [`defaults::WORKER_LEASE`], 20 s; at least
    /// [`defaults::MIN_WORKER_LEASE`]).
    ///
    /// On a store shared between nodes ([`TaskStore::leases`]), each node holds the
    /// tasks it runs (work under a [`TaskHandle`](crate::worker::TaskHandle), `Auto`
    /// runners, and tasks taken with [`Tasks::hold`](crate::worker::Tasks::hold)) and renews
    /// its lease every third of `bound`. When a node stops (killed, out of memory,
    /// cut off alone from the store for longer than `bound`), a surviving node fails
    /// its unfinished tasks with -32603 at most 1.25 × `bound` after the stop, instead
    /// of leaving them to their TTL. A store outage every node shares fails nothing,
    /// however long: a node claims another's lease only while its own renewals run
    /// without a break ([`store`](crate::store#worker-leases) has the whole story).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_worker_lease(Duration::from_secs(8)) // lost work failed within 10 s
    ///     .build()?;
    /// # drop(layer);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_worker_lease(mut self, bound: Duration) -> Self {
        self.lease_bound = Some(bound);
        self
    }

    /// No worker leases: the tasks of a node that dies end only at their TTL. For
    /// deployments where every task's work lives in an external durable queue.
    pub fn without_worker_leases(mut self) -> Self {
        self.lease_bound = None;
        self
    }

    /// Keeps worker leases in `leases` instead of the store's own
    /// ([`TaskStore::leases`]): for a custom store, or several layers over one
    /// [`MemoryStore`](crate::MemoryStore) in one process ([`MemoryLeases`](crate::store::MemoryLeases)).
    pub fn with_lease_store(mut self, leases: impl LeaseStore) -> Self {
        self.lease_store = Some(Arc::new(leases));
        self
    }

    /// Names this node in its worker lease and its lease log lines (default: the
    /// host name, the process id and six random hex digits, such as
    /// `web-1-4242-9f3a1c`). Nodes sharing a store must have different ids; a pod
    /// or host name keeps them readable and stable across restarts (a restarted
    /// process is a new incarnation of its node all the same, see
    /// [`LeaseId`](crate::store::LeaseId)).
    pub fn with_node_id(mut self, node: NodeId) -> Self {
        self.node_id = Some(node);
        self
    }

    /// Janitor timings: sweep every `interval` (default
    /// [`defaults::JANITOR_INTERVAL`], 60 s); keep terminal tasks without a TTL for
    /// `retention` (default [`defaults::RETENTION`], 1 hour). A zero interval is
    /// refused. The janitor starts at [`build`](Self::build) when a tokio runtime is
    /// running.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let (five_minutes, a_day) = (Duration::from_secs(300), Duration::from_secs(24 * 3600));
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_janitor(five_minutes, a_day).build();
    /// assert!(layer.is_ok());
    /// let never = TasksLayer::builder(MemoryStore::new()).with_janitor(Duration::ZERO, a_day).build();
    /// assert_eq!(never.unwrap_err(), ConfigError::ZeroDuration("janitor interval"));
    /// ```
    pub fn with_janitor(mut self, interval: Duration, retention: Duration) -> Self {
        self.config.janitor = Some((interval, retention));
        self
    }

    /// Do not start a janitor (the default starts one that sweeps every 60 s). Run
    /// [`TasksLayer::janitor`] yourself on at least one node. Expired tasks read as
    /// absent either way; the janitor frees their space, and on the shared stores
    /// more: on `PostgresStore` it alone removes expired and retired rows and prunes
    /// the change-feed table, which gains a row per write (progress included), so
    /// some node must sweep; on `RedisStore` it removes retired tasks without a TTL,
    /// and the index entries (expiry, per-owner lists and counts) of tasks whose own
    /// key Redis expired. On `MemoryStore` nothing else frees expired records.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::ConfigError> {
    /// let layer = TasksLayer::builder(MemoryStore::new()).without_janitor().build()?;
    /// // Under your own supervision instead:
    /// let janitor = layer.janitor().spawn();
    /// # janitor.abort();
    /// # Ok(())
    /// # }
    /// ```
    pub fn without_janitor(mut self) -> Self {
        self.config.janitor = None;
        self
    }
}

impl std::fmt::Debug for TasksLayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TasksLayerBuilder")
            .field("store", &self.store)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
