//! [`TasksLayer`] and its builder.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tower_layer::Layer;

use crate::config::{Config, PrincipalFn};
use crate::config::{TaskMode, TaskPolicy};
use crate::defaults;
use crate::engine::{Engine, relay_remote_changes};
use crate::error::ConfigError;
use crate::lease::Leasing;
use crate::notify::{ListenNotifier, TaskNotifier};
use crate::service::TasksService;
use crate::store::{Janitor, LeaseId, LeaseStore, NodeId, TaskStore};
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
/// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
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
///
/// One request through it with tower's `ServiceExt::oneshot`: a `tasks/get` for a task
/// that does not exist is answered by the layer itself, -32602 over HTTP 200, without
/// reaching the inner service and without echoing the id.
///
/// ```
/// use bytes::Bytes;
/// use http::{Request, Response};
/// use http_body_util::{BodyExt as _, Full};
/// use mcp_tasks::body::RequestBody;
/// use mcp_tasks::wire::{EXTENSION_ID, MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION};
/// use mcp_tasks::wire::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION};
/// use mcp_tasks::{MemoryStore, TaskId, TasksLayer};
/// use serde_json::{Value, json};
/// use tower::{Layer as _, ServiceExt as _};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), mcp_tasks::error::BoxError> {
/// // The MCP service behind the layer: tasks/get never reaches it.
/// let mcp = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(Full::<Bytes>::default()))
/// });
/// let service = TasksLayer::new(MemoryStore::new()).layer(mcp);
///
/// let task_id = TaskId::random().to_string(); // never issued by this layer
/// let body = json!({
///     "jsonrpc": "2.0", "id": 1, "method": "tasks/get",
///     "params": {"taskId": task_id, "_meta": {
///         META_PROTOCOL_VERSION: PROTOCOL_VERSION,
///         META_CLIENT_CAPABILITIES: {"extensions": {EXTENSION_ID: {}}},
///     }},
/// });
/// let request = Request::post("/mcp")
///     .header("content-type", "application/json")
///     .header(MCP_PROTOCOL_VERSION, PROTOCOL_VERSION)
///     .header(MCP_METHOD, "tasks/get")
///     .header(MCP_NAME, &task_id) // the task id, on tasks/get, tasks/update, tasks/cancel
///     .body(Full::from(body.to_string()))?;
///
/// let response = service.oneshot(request).await?;
/// assert_eq!(response.status(), 200);
/// let body = response.into_body().collect().await?.to_bytes();
/// let reply: Value = serde_json::from_slice(&body)?;
/// assert_eq!(reply["id"], 1);
/// assert_eq!(reply["error"]["code"], -32602);
/// assert_eq!(reply["error"]["message"], "Failed to retrieve task: Task not found");
/// assert!(!String::from_utf8_lossy(&body).contains(&task_id));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct TasksLayer {
    pub(crate) engine: Arc<Engine>,
}

impl TasksLayer {
    /// A layer with every default (see [`defaults`](crate::defaults): 10 000 tasks,
    /// a 1-hour TTL, 4 MiB request bodies, …). The janitor starts, sweeping every 60 s,
    /// if a tokio runtime is running.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// let layer = TasksLayer::new(MemoryStore::new());
    /// assert!(layer.is_enabled());
    /// ```
    pub fn new(store: impl TaskStore) -> Self {
        match Self::builder(store).build() {
            Ok(layer) => layer,
            Err(e) => unreachable!("the defaults are valid: {e}"),
        }
    }

    /// A builder for a layer over `store`, starting from every default.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_max_rows(50_000)
    ///     .build()?;
    /// assert!(layer.is_enabled());
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(store: impl TaskStore) -> TasksLayerBuilder {
        TasksLayerBuilder::new(Arc::new(store))
    }

    /// The worker API over this layer's store and notifier: hand it (it is cheap to
    /// clone) to the code that runs the tasks.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TaskId, TasksLayer};
    /// use mcp_tasks::error::TaskError;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let layer = TasksLayer::new(MemoryStore::new());
    /// let tasks = layer.handle();
    /// let unknown = TaskId::random();
    /// assert!(matches!(tasks.status(&unknown).await, Err(TaskError::NotFound)));
    /// # }
    /// ```
    pub fn handle(&self) -> Tasks {
        Tasks::new(self.engine.clone())
    }

    /// A janitor over this layer's store with its configured timings (or the
    /// defaults: a sweep every 60 s, 1 hour of retention), to run yourself, e.g. after
    /// [`without_janitor`](TasksLayerBuilder::without_janitor).
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = TasksLayer::builder(MemoryStore::new()).without_janitor().build()?;
    /// let janitor = layer.janitor();
    /// assert_eq!(janitor.sweep().await?, 0); // one sweep now: nothing has expired
    /// let running = janitor.spawn(); // or sweep on its timer until aborted
    /// running.abort();
    /// # Ok(())
    /// # }
    /// ```
    pub fn janitor(&self) -> Janitor {
        let (interval, retention) = self
            .engine
            .config
            .janitor
            .unwrap_or((defaults::JANITOR_INTERVAL, defaults::RETENTION));
        Janitor::new(self.engine.store.shared(), interval, retention)
    }

    /// The notifier that feeds this layer's listen streams (see
    /// [`TasksLayerBuilder::listen_notifier`]).
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// let layer = TasksLayer::new(MemoryStore::new());
    /// assert_eq!(layer.listen_notifier().stream_count(), 0); // no client is listening yet
    /// ```
    pub fn listen_notifier(&self) -> ListenNotifier {
        self.engine.listen.clone()
    }

    /// Shuts this node's tasks down gracefully, for a deploy, a SIGTERM or a Ctrl-C:
    /// from now on no call becomes a task; the work running here (under a
    /// [`TaskHandle`](crate::worker::TaskHandle) or an `Auto` runner) gets up to
    /// `grace` to finish; what is left then fails with -32603 "Server shut down
    /// before the task finished"; and every listen stream ends with the listen
    /// request's result. Returns how many tasks it failed. `tasks/get`, `update` and
    /// `cancel` keep working throughout.
    ///
    /// Calls that arrive while it drains:
    ///
    /// - a `Required` (or `AutoRequired`) tool called with the extension is refused
    ///   with HTTP 503, `Retry-After: 1` and -32603 "Server is shutting down" with
    ///   `error.data` `{"retryable": true, "reason": "shutting_down"}`: the call never
    ///   ran, so a proxy, a load balancer or the client may send it again, to another
    ///   node;
    /// - an `Optional` tool runs synchronously: its handler's `TaskContext` refuses
    ///   with [`TaskRefused::ShuttingDown`](crate::TaskRefused::ShuttingDown), and the
    ///   client gets the tool's own result;
    /// - an `Auto` tool answers synchronously, however long it takes.
    ///
    /// Each of them counts in `mcp_tasks_refused_total{reason="shutting_down"}`
    /// (feature `metrics`). A load balancer should stop sending calls before the
    /// drain begins: see [`is_draining`](Self::is_draining).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let layer = TasksLayer::new(MemoryStore::new());
    /// // e.g. on SIGTERM, before the HTTP server stops:
    /// assert_eq!(layer.drain(Duration::from_secs(10)).await, 0); // nothing was running
    /// # }
    /// ```
    pub async fn drain(&self, grace: Duration) -> usize {
        const SHUT_DOWN: &str = "Server shut down before the task finished";
        let engine = &self.engine;
        engine.node.start_draining();
        tracing::info!(
            grace_ms = grace.as_millis() as u64,
            "mcp-tasks: draining: no call becomes a task from now on; running work has the grace period to finish"
        );
        let left = engine
            .node
            .wait_idle(tokio::time::Instant::now() + grace)
            .await;
        let mut failed = 0;
        for id in &left {
            match engine.fail_internal(id, SHUT_DOWN).await {
                Ok(true) => failed += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(error = %crate::error::Chain(&e), "drain: could not fail a running task")
                }
            }
            engine.node.abort_runner(id);
        }
        if failed > 0 {
            tracing::warn!(
                failed,
                "drain: tasks still running after the grace period were failed"
            );
        }
        engine.listen.registry().end_all();
        failed
    }

    /// Whether [`drain`](Self::drain) has begun on this layer: from then on no call
    /// becomes a task, and a `Required` tool is refused with HTTP 503.
    ///
    /// A load balancer sends a node calls until its readiness probe fails. For a
    /// deploy without refused calls, turn readiness off first, wait until the
    /// balancer has noticed (its probe period times its failure threshold), and only
    /// then drain; the probe also fails once a drain has begun, whoever started it:
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// /// The readiness probe: 200 while this node should get new calls.
    /// fn readiness(stopping: &AtomicBool, layer: &TasksLayer) -> StatusCode {
    ///     if stopping.load(Ordering::Acquire) || layer.is_draining() {
    ///         StatusCode::SERVICE_UNAVAILABLE
    ///     } else {
    ///         StatusCode::OK
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let layer = TasksLayer::new(MemoryStore::new());
    /// let stopping = AtomicBool::new(false);
    /// assert_eq!(readiness(&stopping, &layer), StatusCode::OK);
    /// // On SIGTERM: readiness off, and time for the balancer to see it…
    /// stopping.store(true, Ordering::Release);
    /// assert_eq!(readiness(&stopping, &layer), StatusCode::SERVICE_UNAVAILABLE);
    /// tokio::time::sleep(Duration::from_secs(10)).await;
    /// // …then the drain, then the HTTP server's graceful shutdown.
    /// assert!(!layer.is_draining());
    /// layer.drain(Duration::from_secs(30)).await;
    /// assert!(layer.is_draining());
    /// # }
    /// ```
    pub fn is_draining(&self) -> bool {
        self.engine.node.is_draining()
    }

    /// Whether the extension is switched on (the default; see
    /// [`with_enabled`](TasksLayerBuilder::with_enabled)).
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
    /// assert!(TasksLayer::new(MemoryStore::new()).is_enabled());
    /// let off = TasksLayer::builder(MemoryStore::new()).with_enabled(false).build()?;
    /// assert!(!off.is_enabled());
    /// # Ok(())
    /// # }
    /// ```
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
///
/// Made by [`TasksLayer::builder`]; every setting starts at its default (the values are
/// in [`defaults`](crate::defaults) and on each setter). A setting out of range is a
/// [`ConfigError`] from `build`, never a failure at request time.
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
    store: Arc<dyn TaskStore>,
    config: Config,
    notifier: Option<Arc<dyn TaskNotifier>>,
    listen: ListenNotifier,
    principal: Option<PrincipalFn>,
    server_name: Option<(String, String)>,
    /// The worker lease's bound, `None` without leases.
    lease_bound: Option<Duration>,
    lease_store: Option<Arc<dyn LeaseStore>>,
    node_id: Option<NodeId>,
    /// A notifier of the application's own: told of every change other nodes make.
    custom_notifier: bool,
}

impl TasksLayerBuilder {
    fn new(store: Arc<dyn TaskStore>) -> Self {
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
                keep_alive: defaults::KEEP_ALIVE,
                store_timeout: defaults::STORE_TIMEOUT,
                require_principal: false,
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

    /// The row cap (default [`defaults::MAX_ROWS`], 10 000); a create beyond it
    /// answers -32603 "Task limit reached" with `error.data` `{"limit": "rows"}`.
    /// Expired tasks never count. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_max_rows(50_000).build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_rows(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_rows"));
    /// ```
    pub fn with_max_rows(mut self, max_rows: usize) -> Self {
        self.config.max_rows = Some(max_rows);
        self
    }

    /// No row cap at all (the default is [`defaults::MAX_ROWS`], 10 000). Only for
    /// stores bounded some other way.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// // A per-principal cap bounds the store instead.
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .without_max_rows()
    ///     .with_max_tasks_per_owner(20)
    ///     .build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn without_max_rows(mut self) -> Self {
        self.config.max_rows = None;
        self
    }

    /// A cap on the tasks one principal (or all anonymous callers together) may
    /// hold (default [`defaults::MAX_TASKS_PER_OWNER`], 1 000), so that one client's
    /// flood never locks out another. A create beyond it answers -32603 "Task limit
    /// reached" with `error.data` `{"limit": "per_owner"}` (the row cap's refusal
    /// says `"rows"`). Expired tasks never count. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_max_tasks_per_owner(100).build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_tasks_per_owner(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_tasks_per_owner"));
    /// ```
    pub fn with_max_tasks_per_owner(mut self, max: usize) -> Self {
        self.config.max_per_owner = Some(max);
        self
    }

    /// No cap per principal (the default is [`defaults::MAX_TASKS_PER_OWNER`],
    /// 1 000): only the row cap applies, so one client can fill the store for all.
    /// Only for deployments where every caller is trusted.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// // A cap from configuration, or none.
    /// let per_owner: Option<usize> = None;
    /// let builder = TasksLayer::builder(MemoryStore::new());
    /// let builder = match per_owner {
    ///     Some(max) => builder.with_max_tasks_per_owner(max),
    ///     None => builder.without_max_tasks_per_owner(),
    /// };
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn without_max_tasks_per_owner(mut self) -> Self {
        self.config.max_per_owner = None;
        self
    }

    /// The lifetime of a task whose tool sets none (default [`defaults::TTL`], 1 hour),
    /// counted from its creation; a tool sets its own with
    /// [`TaskSpec::with_ttl`](crate::TaskSpec::with_ttl). Zero and anything over
    /// [`defaults::MAX_TTL`] (10 years) are refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let day = Duration::from_secs(24 * 3600);
    /// assert!(TasksLayer::builder(MemoryStore::new()).with_default_ttl(day).build().is_ok());
    /// let forever = TasksLayer::builder(MemoryStore::new()).with_default_ttl(Duration::MAX).build();
    /// let refused = forever.unwrap_err();
    /// assert_eq!(refused, ConfigError::TooLarge { setting: "default_ttl", max: mcp_tasks::defaults::MAX_TTL });
    /// assert_eq!(refused.to_string(), "mcp-tasks: default_ttl must be at most 87600 h");
    /// ```
    pub fn with_default_ttl(mut self, ttl: Duration) -> Self {
        self.config.default_ttl = Some(ttl);
        self
    }

    /// The polling interval suggested to clients (`pollIntervalMs`) when a tool sets
    /// none (default: none, and the field is left out). Zero is refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let two_s = TasksLayer::builder(MemoryStore::new())
    ///     .with_default_poll_interval(Duration::from_secs(2))
    ///     .build();
    /// assert!(two_s.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new())
    ///     .with_default_poll_interval(Duration::ZERO)
    ///     .build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroDuration("default_poll_interval"));
    /// ```
    pub fn with_default_poll_interval(mut self, interval: Duration) -> Self {
        self.config.default_poll_interval = Some(interval);
        self
    }

    /// The largest request body the layer reads (default
    /// [`defaults::MAX_REQUEST_BYTES`], 4 MiB); larger ones get HTTP 413 with a
    /// JSON-RPC error. A request whose `Mcp-Method` names a method the layer does not
    /// own streams to the inner service unread, whatever its size. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let mib = TasksLayer::builder(MemoryStore::new()).with_max_request_bytes(1 << 20).build();
    /// assert!(mib.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_request_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_request_bytes"));
    /// ```
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Self {
        self.config.max_request_bytes = bytes;
        self
    }

    /// The largest inner response buffered while deciding whether a call became a
    /// task (default [`defaults::MAX_RESPONSE_BYTES`], 16 MiB). Beyond it the layer
    /// stops buffering and, unless the handler asked for a task, sends the answer on
    /// unchanged. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let big = TasksLayer::builder(MemoryStore::new()).with_max_response_bytes(64 << 20).build();
    /// assert!(big.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_response_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_response_bytes"));
    /// ```
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.config.max_response_bytes = bytes;
        self
    }

    /// The largest serialized answer a `tasks/update` may give to one input request
    /// (default [`defaults::MAX_INPUT_RESPONSE_BYTES`], 256 KiB). A larger one is
    /// refused with -32602 naming the limit; the task is unchanged and still
    /// answerable. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let small = TasksLayer::builder(MemoryStore::new()).with_max_input_response_bytes(4096);
    /// assert!(small.build().is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_input_response_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_input_response_bytes"));
    /// ```
    pub fn with_max_input_response_bytes(mut self, bytes: usize) -> Self {
        self.config.max_input_response_bytes = bytes;
        self
    }

    /// The most bytes of answers (keys and serialized values) one task keeps
    /// (default [`defaults::MAX_TASK_INPUT_BYTES`], 1 MiB). A `tasks/update` that
    /// would pass it is refused with -32602 naming the limit; the task is unchanged.
    /// Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let big = TasksLayer::builder(MemoryStore::new()).with_max_task_input_bytes(8 << 20);
    /// assert!(big.build().is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_task_input_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_task_input_bytes"));
    /// ```
    pub fn with_max_task_input_bytes(mut self, bytes: usize) -> Self {
        self.config.max_task_input_bytes = bytes;
        self
    }

    /// The largest serialized result a task stores (default
    /// [`defaults::MAX_RESULT_BYTES`], 8 MiB, below rmcp's 16 MiB client limit). A
    /// completion with a larger result, from [`Tasks::complete`](crate::worker::Tasks::complete)
    /// or a [`TaskMode::Auto`] call, fails the task with -32603 "Result too large"
    /// instead. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let big = TasksLayer::builder(MemoryStore::new()).with_max_result_bytes(12 << 20);
    /// assert!(big.build().is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_result_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_result_bytes"));
    /// ```
    pub fn with_max_result_bytes(mut self, bytes: usize) -> Self {
        self.config.max_result_bytes = bytes;
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

    /// Refuses tasks to anonymous requests: a request without a [`Principal`] may
    /// not create, read, answer, cancel or listen to tasks (default: it may, and
    /// sees only anonymous tasks).
    ///
    /// The refusal is -32603 with the message "Tasks require an authenticated
    /// principal" and `error.data` `{"reason": "principal_required"}`, with HTTP 200,
    /// after the capability check: a tool that would become a task (`Required`,
    /// `Auto`, or a handler asking for one) is answered with it, and so are
    /// `tasks/get`, `tasks/update`, `tasks/cancel` and a listen naming task ids. A
    /// call that stays synchronous is not affected. It is a server-side refusal,
    /// not a challenge: answering 401 is the authentication layer's job, with the
    /// `WWW-Authenticate` header only it can fill in; a request that reaches this
    /// layer without a principal means that layer let it through, most often
    /// because it sits below `TasksLayer` instead of above it.
    ///
    /// Without this setting, the first task a layer sees made or read without a
    /// principal logs one `tracing` warning naming that likely cause.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .with_require_principal()
    ///     .build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn with_require_principal(mut self) -> Self {
        self.config.require_principal = true;
        self
    }

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
    /// [`TasksLayer::janitor`] yourself, or rely on the store's own expiry. Expired
    /// tasks read as absent either way; the janitor only frees their space.
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
    /// with `{"limit": "listen_bytes_total"}`. Zero is refused.
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

    /// Names this node in its worker lease (default: a random id per layer).
    /// Nodes sharing a store must have different ids.
    pub fn with_node_id(mut self, node: NodeId) -> Self {
        self.node_id = Some(node);
        self
    }

    /// Checks the settings and builds the layer. Starts the janitor on the current
    /// tokio runtime, if one is running and the janitor is on, and, for a store
    /// shared between nodes ([`TaskStore::subscribe`]), the relay of other nodes'
    /// changes. Without a runtime both are skipped with a `tracing` warning.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first setting out of range: a zero cap, size or
    /// duration, a default TTL over [`defaults::MAX_TTL`] (10 years), a keep-alive
    /// over [`defaults::MAX_KEEP_ALIVE`] (1 hour), an empty server name.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// # fn main() -> Result<(), ConfigError> {
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_max_rows(1_000).build()?;
    /// assert!(layer.is_enabled());
    /// let refused = TasksLayer::builder(MemoryStore::new()).with_max_rows(0).build();
    /// assert_eq!(refused.unwrap_err().to_string(), "mcp-tasks: max_rows must be at least 1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(mut self) -> Result<TasksLayer, ConfigError> {
        let c = &self.config;
        if c.max_rows == Some(0) {
            return Err(ConfigError::ZeroLimit("max_rows"));
        }
        if c.max_per_owner == Some(0) {
            return Err(ConfigError::ZeroLimit("max_tasks_per_owner"));
        }
        if c.max_listen_streams_per_owner == 0 {
            return Err(ConfigError::ZeroLimit("max_listen_streams_per_owner"));
        }
        if c.max_listen_streams == 0 {
            return Err(ConfigError::ZeroLimit("max_listen_streams"));
        }
        if c.max_listen_bytes_per_owner == 0 {
            return Err(ConfigError::ZeroLimit("max_listen_bytes_per_owner"));
        }
        if c.max_listen_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_listen_bytes"));
        }
        if c.store_timeout.is_zero() {
            return Err(ConfigError::ZeroDuration("store_timeout"));
        }
        if c.listen_ack_timeout.is_zero() {
            return Err(ConfigError::ZeroDuration("listen_ack_timeout"));
        }
        if c.max_request_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_request_bytes"));
        }
        if c.max_response_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_response_bytes"));
        }
        if c.max_input_response_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_input_response_bytes"));
        }
        if c.max_task_input_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_task_input_bytes"));
        }
        if c.max_result_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_result_bytes"));
        }
        if c.default_ttl.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroDuration("default_ttl"));
        }
        if c.default_ttl.is_some_and(|d| d > defaults::MAX_TTL) {
            return Err(ConfigError::TooLarge {
                setting: "default_ttl",
                max: defaults::MAX_TTL,
            });
        }
        if c.default_poll_interval.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroDuration("default_poll_interval"));
        }
        if c.keep_alive.is_zero() {
            return Err(ConfigError::ZeroDuration("keep_alive"));
        }
        if c.keep_alive > defaults::MAX_KEEP_ALIVE {
            return Err(ConfigError::TooLarge {
                setting: "keep_alive",
                max: defaults::MAX_KEEP_ALIVE,
            });
        }
        if let Some((interval, _)) = c.janitor
            && interval.is_zero()
        {
            return Err(ConfigError::ZeroDuration("janitor interval"));
        }
        if self
            .lease_bound
            .is_some_and(|bound| bound < defaults::MIN_WORKER_LEASE)
        {
            return Err(ConfigError::TooSmall {
                setting: "worker lease",
                min: defaults::MIN_WORKER_LEASE,
            });
        }
        if self
            .lease_bound
            .is_some_and(|bound| bound > defaults::MAX_TTL)
        {
            return Err(ConfigError::TooLarge {
                setting: "worker lease",
                max: defaults::MAX_TTL,
            });
        }
        if let Some((name, version)) = self.server_name.take() {
            if name.trim().is_empty() {
                return Err(ConfigError::EmptyServerName);
            }
            self.config.server_info = Some(json!({"name": name, "version": version}));
        }
        let janitor = self.config.janitor;
        let enabled = self.config.enabled;
        let leasing = match self.lease_bound {
            Some(bound) => self
                .lease_store
                .take()
                .or_else(|| self.store.leases())
                .map(|store| Leasing {
                    store,
                    lease: LeaseId::new(self.node_id.take().unwrap_or_else(NodeId::random)),
                    bound,
                }),
            None => None,
        };
        self.listen.registry().set_byte_bounds(
            self.config.max_listen_bytes_per_owner,
            self.config.max_listen_bytes,
        );
        let engine = Engine::new(self.store, self.config, self.notifier, self.principal)
            .with_listen(self.listen)
            .relaying_all(self.custom_notifier)
            .shared();
        let layer = TasksLayer { engine };
        if enabled
            && let Some(feed) = layer.engine.store.subscribe()
            && !crate::spawn::spawn_if_runtime(relay_remote_changes(
                Arc::downgrade(&layer.engine),
                feed,
            ))
        {
            tracing::warn!(
                "mcp-tasks: no tokio runtime while building the layer; changes made on other nodes are not relayed"
            );
        }
        if let (Some(_), true) = (janitor, enabled) {
            let janitor = layer.janitor();
            match crate::spawn::spawn_loop(|stopped| janitor.run(stopped)) {
                Some(stop) => {
                    *layer
                        .engine
                        ._janitor_stop
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(stop);
                }
                None => tracing::warn!(
                    "mcp-tasks: no tokio runtime while building the layer; the janitor is not running (spawn TasksLayer::janitor yourself)"
                ),
            }
        }
        if let (Some(leasing), true) = (leasing, enabled) {
            let engine = Arc::downgrade(&layer.engine);
            match crate::spawn::spawn_loop(|stopped| leasing.run(engine, stopped)) {
                Some(stop) => {
                    *layer
                        .engine
                        ._lease_stop
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(stop);
                }
                None => tracing::warn!(
                    "mcp-tasks: no tokio runtime while building the layer; no worker lease is kept, so tasks of a node that dies end only at their TTL"
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
