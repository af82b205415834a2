//! [`TasksLayer`] and its builder.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tower_layer::Layer;

use crate::context::{TaskMode, TaskPolicy};
use crate::error::ConfigError;
use crate::janitor::{DEFAULT_JANITOR_INTERVAL, DEFAULT_RETENTION, Janitor};
use crate::notify::{ListenNotifier, TaskNotifier};
use crate::service::TasksService;
use crate::shared::{Config, PrincipalFn, Shared};
use crate::store::{ChangeFeed, TaskStore};
use crate::task::Principal;
use crate::worker::Tasks;

/// Most tasks a store holds by default; a client looping a task-making tool cannot
/// grow it without bound.
pub const DEFAULT_MAX_ROWS: usize = 10_000;
/// Task lifetime when a tool does not set one.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// Largest request body the layer reads for the methods it inspects.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// Largest inner response the layer buffers while deciding whether a call became a
/// task; a larger one streams through unchanged.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Most task ids one `subscriptions/listen` may name.
pub const MAX_LISTEN_TASK_IDS: usize = 1_000;
/// Interval between keep-alive comments on an idle listen stream.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The longest task lifetime the layer accepts (ten years); longer ones are refused
/// (use an unlimited TTL instead).
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// The longest keep-alive interval the layer accepts (one hour).
pub const MAX_KEEP_ALIVE: Duration = Duration::from_secs(3600);

/// The tower layer that adds the Tasks extension (`io.modelcontextprotocol/tasks`)
/// to an MCP Streamable HTTP service.
///
/// It answers `tasks/get`, `tasks/update` and `tasks/cancel` itself, turns a tool's
/// task outcome into a stored task and a `CreateTaskResult`, advertises the
/// extension in `server/discover`, and passes everything else through untouched.
/// Cloning is a reference-count bump.
///
/// ```
/// use mcp_tasks::{MemoryStore, TaskMode, TasksLayer};
///
/// # fn main() -> Result<(), mcp_tasks::ConfigError> {
/// let layer = TasksLayer::builder(MemoryStore::new())
///     .with_server_info("my-server", "1.0.0")
///     .with_tool_mode("build", TaskMode::Required)
///     .without_janitor()
///     .build()?;
/// let worker = layer.handle(); // give this to the code that runs the tasks
/// # drop(worker);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct TasksLayer {
    pub(crate) shared: Arc<Shared>,
}

impl TasksLayer {
    /// A layer with every default: the janitor starts if a tokio runtime is running.
    pub fn new(store: impl TaskStore) -> Self {
        match Self::builder(store).build() {
            Ok(layer) => layer,
            Err(e) => unreachable!("the defaults are valid: {e}"),
        }
    }

    /// A builder for a layer over `store`.
    pub fn builder(store: impl TaskStore) -> TasksLayerBuilder {
        TasksLayerBuilder::new(Arc::new(store))
    }

    /// A builder over a store that is already shared.
    pub fn builder_shared(store: Arc<dyn TaskStore>) -> TasksLayerBuilder {
        TasksLayerBuilder::new(store)
    }

    /// The worker API over this layer's store and notifier.
    pub fn handle(&self) -> Tasks {
        Tasks::new(self.shared.clone())
    }

    /// A janitor over this layer's store with its configured timings (or the
    /// defaults), to run yourself.
    pub fn janitor(&self) -> Janitor {
        let (interval, retention) = self
            .shared
            .config
            .janitor
            .unwrap_or((DEFAULT_JANITOR_INTERVAL, DEFAULT_RETENTION));
        Janitor::new(self.shared.store.clone(), interval, retention)
    }

    /// The notifier that feeds this layer's listen streams (see
    /// [`TasksLayerBuilder::listen_notifier`]).
    pub fn listen_notifier(&self) -> ListenNotifier {
        self.shared.listen.clone()
    }

    /// Whether the extension is switched on.
    pub fn is_enabled(&self) -> bool {
        self.shared.config.enabled
    }
}

impl<S> Layer<S> for TasksLayer {
    type Service = TasksService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TasksService::new(inner, self.shared.clone())
    }
}

/// Settings for a [`TasksLayer`], checked by [`build`](TasksLayerBuilder::build).
#[must_use]
pub struct TasksLayerBuilder {
    store: Arc<dyn TaskStore>,
    config: Config,
    notifier: Option<Arc<dyn TaskNotifier>>,
    listen: ListenNotifier,
    principal: Option<PrincipalFn>,
    server_name: Option<(String, String)>,
}

impl TasksLayerBuilder {
    fn new(store: Arc<dyn TaskStore>) -> Self {
        let listen = ListenNotifier::default();
        TasksLayerBuilder {
            store,
            config: Config {
                enabled: true,
                max_rows: Some(DEFAULT_MAX_ROWS),
                max_per_owner: None,
                default_ttl: Some(DEFAULT_TTL),
                default_poll_interval: None,
                max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
                max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
                server_info: None,
                tool_modes: HashMap::new(),
                default_mode: TaskMode::Optional,
                task_policy: None,
                janitor: Some((DEFAULT_JANITOR_INTERVAL, DEFAULT_RETENTION)),
                max_listen_task_ids: MAX_LISTEN_TASK_IDS,
                keep_alive: DEFAULT_KEEP_ALIVE,
            },
            notifier: Some(Arc::new(listen.clone())),
            listen,
            principal: None,
            server_name: None,
        }
    }

    /// Switches the extension on or off at run time (for rollouts from
    /// configuration). Off, everything passes through, the extension is not
    /// advertised, and a task outcome is logged and answered -32603.
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.config.enabled = enabled;
        self
    }

    /// The row cap (default [`DEFAULT_MAX_ROWS`]); a create beyond it answers
    /// -32603 "Task limit reached".
    pub fn with_max_rows(mut self, max_rows: usize) -> Self {
        self.config.max_rows = Some(max_rows);
        self
    }

    /// No row cap at all. Only for stores bounded some other way.
    pub fn with_unlimited_rows(mut self) -> Self {
        self.config.max_rows = None;
        self
    }

    /// A cap on the tasks one principal (or all anonymous callers together) may hold.
    pub fn with_max_tasks_per_owner(mut self, max: usize) -> Self {
        self.config.max_per_owner = Some(max);
        self
    }

    /// The lifetime of a task whose tool sets none (default [`DEFAULT_TTL`]).
    pub fn with_default_ttl(mut self, ttl: Duration) -> Self {
        self.config.default_ttl = Some(ttl);
        self
    }

    /// The polling interval suggested to clients when a tool sets none.
    pub fn with_default_poll_interval(mut self, interval: Duration) -> Self {
        self.config.default_poll_interval = Some(interval);
        self
    }

    /// The largest request body the layer reads (default
    /// [`DEFAULT_MAX_REQUEST_BYTES`]); larger ones get HTTP 413 with a JSON-RPC error.
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Self {
        self.config.max_request_bytes = bytes;
        self
    }

    /// The largest inner response buffered while deciding whether a call became a
    /// task (default [`DEFAULT_MAX_RESPONSE_BYTES`]).
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.config.max_response_bytes = bytes;
        self
    }

    /// `serverInfo` carried in `_meta` of the results the layer writes itself.
    pub fn with_server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.server_name = Some((name.into(), version.into()));
        self
    }

    /// How calls of one tool may become tasks (default [`TaskMode::Optional`]).
    pub fn with_tool_mode(mut self, tool: impl Into<String>, mode: TaskMode) -> Self {
        self.config.tool_modes.insert(tool.into(), mode);
        self
    }

    /// The mode of tools not configured with [`with_tool_mode`](Self::with_tool_mode).
    pub fn with_default_mode(mut self, mode: TaskMode) -> Self {
        self.config.default_mode = mode;
        self
    }

    /// Decides the mode of each call from the tool name and its arguments
    /// (`Value::Null` when the call has none). When the policy returns `Some`, that
    /// mode wins over [`with_tool_mode`](Self::with_tool_mode) and
    /// [`with_default_mode`](Self::with_default_mode); `None` falls back to them.
    ///
    /// Keep it cheap: it runs on every `tools/call` the layer sees.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TaskMode, TasksLayer};
    ///
    /// # fn main() -> Result<(), mcp_tasks::ConfigError> {
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

    /// Where the owner of a request comes from. By default the layer reads a
    /// [`Principal`] from the request's extensions, put there by an auth layer.
    pub fn with_principal<F>(mut self, principal: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Option<Principal> + Send + Sync + 'static,
    {
        self.principal = Some(Arc::new(principal));
        self
    }

    /// The hook told about every task change, in place of the default
    /// [`ListenNotifier`] (which sends `notifications/tasks` to listen streams).
    ///
    /// A custom notifier that should keep listen delivery calls
    /// [`listen_notifier`](Self::listen_notifier) from its `task_changed`. `None`
    /// turns notifications off: a listen then agrees to no task ids.
    pub fn with_notifier(mut self, notifier: Option<Arc<dyn TaskNotifier>>) -> Self {
        self.notifier = notifier;
        self
    }

    /// The notifier that feeds this layer's listen streams: the default notifier,
    /// for a custom one to call so that listen delivery keeps working.
    pub fn listen_notifier(&self) -> ListenNotifier {
        self.listen.clone()
    }

    /// Janitor timings: sweep every `interval`; keep terminal tasks without a TTL for
    /// `retention`.
    pub fn with_janitor(mut self, interval: Duration, retention: Duration) -> Self {
        self.config.janitor = Some((interval, retention));
        self
    }

    /// Do not start a janitor (run [`TasksLayer::janitor`] yourself, or rely on the
    /// store's own expiry).
    pub fn without_janitor(mut self) -> Self {
        self.config.janitor = None;
        self
    }

    /// The interval of keep-alive comments on idle listen streams.
    pub fn with_keep_alive(mut self, interval: Duration) -> Self {
        self.config.keep_alive = interval;
        self
    }

    /// Checks the settings and builds the layer. Starts the janitor on the current
    /// tokio runtime, if one is running and the janitor is on.
    pub fn build(mut self) -> Result<TasksLayer, ConfigError> {
        let c = &self.config;
        if c.max_rows == Some(0) {
            return Err(ConfigError::ZeroLimit("max_rows"));
        }
        if c.max_per_owner == Some(0) {
            return Err(ConfigError::ZeroLimit("max_tasks_per_owner"));
        }
        if c.max_request_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_request_bytes"));
        }
        if c.max_response_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_response_bytes"));
        }
        if c.default_ttl.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroDuration("default_ttl"));
        }
        if c.default_ttl.is_some_and(|d| d > MAX_TTL) {
            return Err(ConfigError::TooLarge("default_ttl"));
        }
        if c.default_poll_interval.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroDuration("default_poll_interval"));
        }
        if c.keep_alive.is_zero() {
            return Err(ConfigError::ZeroDuration("keep_alive"));
        }
        if c.keep_alive > MAX_KEEP_ALIVE {
            return Err(ConfigError::TooLarge("keep_alive"));
        }
        if let Some((interval, _)) = c.janitor
            && interval.is_zero()
        {
            return Err(ConfigError::ZeroDuration("janitor interval"));
        }
        if let Some((name, version)) = self.server_name.take() {
            if name.trim().is_empty() {
                return Err(ConfigError::EmptyServerName);
            }
            self.config.server_info = Some(json!({"name": name, "version": version}));
        }
        let janitor = self.config.janitor;
        let enabled = self.config.enabled;
        let shared = Arc::new(
            Shared::new(self.store, self.config, self.notifier, self.principal)
                .with_listen(self.listen),
        );
        let layer = TasksLayer { shared };
        if enabled && let Some(feed) = layer.shared.store.subscribe() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(relay_remote_changes(Arc::downgrade(&layer.shared), feed));
                }
                Err(_) => tracing::warn!(
                    "mcp-tasks: no tokio runtime while building the layer; changes made on other nodes are not relayed"
                ),
            }
        }
        if let (Some(_), true) = (janitor, enabled) {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                    let janitor = layer.janitor();
                    runtime.spawn(janitor.run(async {
                        let _ = stopped.await;
                    }));
                    *layer
                        .shared
                        ._janitor_stop
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(stop);
                }
                Err(_) => tracing::warn!(
                    "mcp-tasks: no tokio runtime while building the layer; the janitor is not running (spawn TasksLayer::janitor yourself)"
                ),
            }
        }
        Ok(layer)
    }
}

/// Re-reads each task another node changed and tells this node's notifier and
/// waiting workers. Ends when the layer is gone or the feed closes.
async fn relay_remote_changes(shared: std::sync::Weak<Shared>, mut feed: ChangeFeed) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let id = match feed.recv().await {
            Ok(id) => id,
            Err(RecvError::Lagged(skipped)) => {
                tracing::warn!(
                    skipped,
                    "mcp-tasks: fell behind on changes from other nodes; waking every waiting worker"
                );
                if let Some(shared) = shared.upgrade() {
                    shared.wake_all();
                }
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match shared
            .store
            .get(&id, crate::task::Scope::Any, crate::task::Timestamp::now())
            .await
        {
            Ok(Some(record)) => shared.changed(&record),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "mcp-tasks: could not read a task changed on another node")
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn bad_settings_are_refused_at_build_time() {
        let cases = [
            TasksLayer::builder(MemoryStore::new()).with_max_rows(0),
            TasksLayer::builder(MemoryStore::new()).with_default_ttl(Duration::ZERO),
            TasksLayer::builder(MemoryStore::new()).with_max_request_bytes(0),
            TasksLayer::builder(MemoryStore::new()).with_janitor(Duration::ZERO, Duration::ZERO),
            TasksLayer::builder(MemoryStore::new()).with_server_info(" ", "1"),
        ];
        for builder in cases {
            let err = builder.build().unwrap_err();
            assert!(err.to_string().starts_with("mcp-tasks: "), "{err}");
        }
    }

    #[test]
    fn defaults_build_without_a_runtime() {
        let layer = TasksLayer::new(MemoryStore::new());
        assert!(layer.is_enabled());
    }
}
