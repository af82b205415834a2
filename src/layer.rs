//! [`TasksLayer`] and its builder.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tower_layer::Layer;

use crate::config::{Config, PrincipalFn};
use crate::context::{TaskMode, TaskPolicy};
use crate::defaults;
use crate::engine::{Engine, relay_remote_changes};
use crate::error::ConfigError;
use crate::notify::{ListenNotifier, TaskNotifier};
use crate::service::TasksService;
use crate::store::{Janitor, TaskStore};
use crate::task::Principal;
use crate::worker::Tasks;

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
    pub(crate) engine: Arc<Engine>,
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

    /// The worker API over this layer's store and notifier.
    pub fn handle(&self) -> Tasks {
        Tasks::new(self.engine.clone())
    }

    /// A janitor over this layer's store with its configured timings (or the
    /// defaults), to run yourself.
    pub fn janitor(&self) -> Janitor {
        let (interval, retention) = self
            .engine
            .config
            .janitor
            .unwrap_or((defaults::JANITOR_INTERVAL, defaults::RETENTION));
        Janitor::new(self.engine.store.clone(), interval, retention)
    }

    /// The notifier that feeds this layer's listen streams (see
    /// [`TasksLayerBuilder::listen_notifier`]).
    pub fn listen_notifier(&self) -> ListenNotifier {
        self.engine.listen.clone()
    }

    /// Whether the extension is switched on.
    pub fn is_enabled(&self) -> bool {
        self.engine.config.enabled
    }
}

impl<S> Layer<S> for TasksLayer {
    type Service = TasksService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TasksService::new(inner, self.engine.clone())
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
                max_rows: Some(defaults::MAX_ROWS),
                max_per_owner: None,
                default_ttl: Some(defaults::TTL),
                default_poll_interval: None,
                max_request_bytes: defaults::MAX_REQUEST_BYTES,
                max_response_bytes: defaults::MAX_RESPONSE_BYTES,
                server_info: None,
                tool_modes: HashMap::new(),
                default_mode: TaskMode::Optional,
                task_policy: None,
                janitor: Some((defaults::JANITOR_INTERVAL, defaults::RETENTION)),
                max_listen_task_ids: defaults::MAX_LISTEN_TASK_IDS,
                keep_alive: defaults::KEEP_ALIVE,
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

    /// The row cap (default [`defaults::MAX_ROWS`], 10 000); a create beyond it
    /// answers -32603 "Task limit reached".
    pub fn with_max_rows(mut self, max_rows: usize) -> Self {
        self.config.max_rows = Some(max_rows);
        self
    }

    /// No row cap at all. Only for stores bounded some other way.
    pub fn without_max_rows(mut self) -> Self {
        self.config.max_rows = None;
        self
    }

    /// A cap on the tasks one principal (or all anonymous callers together) may
    /// hold (default: none).
    pub fn with_max_tasks_per_owner(mut self, max: usize) -> Self {
        self.config.max_per_owner = Some(max);
        self
    }

    /// No cap per principal (the default): only the row cap applies.
    pub fn without_max_tasks_per_owner(mut self) -> Self {
        self.config.max_per_owner = None;
        self
    }

    /// The lifetime of a task whose tool sets none (default [`defaults::TTL`], 1 hour).
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
    /// [`defaults::MAX_REQUEST_BYTES`], 4 MiB); larger ones get HTTP 413 with a
    /// JSON-RPC error.
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Self {
        self.config.max_request_bytes = bytes;
        self
    }

    /// The largest inner response buffered while deciding whether a call became a
    /// task (default [`defaults::MAX_RESPONSE_BYTES`], 16 MiB).
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
    /// [`without_notifier`](Self::without_notifier) turns notifications off.
    pub fn with_notifier(mut self, notifier: impl TaskNotifier) -> Self {
        self.notifier = Some(Arc::new(notifier));
        self
    }

    /// No notifier at all: a listen then agrees to no task ids.
    pub fn without_notifier(mut self) -> Self {
        self.notifier = None;
        self
    }

    /// The notifier that feeds this layer's listen streams: the default notifier,
    /// for a custom one to call so that listen delivery keeps working.
    pub fn listen_notifier(&self) -> ListenNotifier {
        self.listen.clone()
    }

    /// Janitor timings: sweep every `interval` (default
    /// [`defaults::JANITOR_INTERVAL`], 60 s); keep terminal tasks without a TTL for
    /// `retention` (default [`defaults::RETENTION`], 1 hour).
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

    /// The interval of keep-alive comments on idle listen streams (default
    /// [`defaults::KEEP_ALIVE`], 15 s; at most [`defaults::MAX_KEEP_ALIVE`], 1 hour).
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
        if c.default_ttl.is_some_and(|d| d > defaults::MAX_TTL) {
            return Err(ConfigError::TooLarge("default_ttl"));
        }
        if c.default_poll_interval.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroDuration("default_poll_interval"));
        }
        if c.keep_alive.is_zero() {
            return Err(ConfigError::ZeroDuration("keep_alive"));
        }
        if c.keep_alive > defaults::MAX_KEEP_ALIVE {
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
        let engine = Arc::new(
            Engine::new(self.store, self.config, self.notifier, self.principal)
                .with_listen(self.listen),
        );
        let layer = TasksLayer { engine };
        if enabled && let Some(feed) = layer.engine.store.subscribe() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(relay_remote_changes(Arc::downgrade(&layer.engine), feed));
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
                        .engine
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
