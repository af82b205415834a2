//! [`TasksLayer`] and its builder: the layer in this file; the builder, its
//! setters and `build` in `builder.rs`, `limits.rs` and `build.rs`; the drain in `drain.rs`.

use std::sync::Arc;

use tower_layer::Layer;

use crate::defaults;
use crate::engine::Engine;
use crate::notify::ListenNotifier;
use crate::service::TasksService;
use crate::store::{Janitor, TaskStore};
use crate::worker::Tasks;

// The builder's setters first, by concern, then `build`: rustdoc shows them in
// this order.
mod builder;
mod limits;

mod build;
mod drain;

pub use builder::TasksLayerBuilder;

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
/// let worker = layer.tasks(); // give this to the code that runs the tasks
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
/// use mcp_tasks::{MemoryStore, Principal, TaskId, TasksLayer};
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
///     .extension(Principal::from("alice")) // what an authentication layer inserts
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

    /// Every task of this layer's store, by id: hand it (it is cheap to clone) to the
    /// code that drives tasks by id: a queue's consumer, another node, an admin tool.
    /// The work a task starts with gets its own
    /// [`TaskHandle`](crate::worker::TaskHandle) instead; [`worker`](crate::worker)
    /// tells the two apart.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TaskId, TasksLayer};
    /// use mcp_tasks::error::TaskError;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let layer = TasksLayer::new(MemoryStore::new());
    /// let tasks = layer.tasks();
    /// let unknown = TaskId::random();
    /// assert!(matches!(tasks.status(&unknown).await, Err(TaskError::NotFound)));
    /// # }
    /// ```
    pub fn tasks(&self) -> Tasks {
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
            .config()
            .janitor
            .unwrap_or((defaults::JANITOR_INTERVAL, defaults::RETENTION));
        Janitor::new(self.engine.store().shared(), interval, retention)
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
        self.engine.listen().clone()
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
        self.engine.config().enabled
    }
}

impl<S> Layer<S> for TasksLayer {
    type Service = TasksService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TasksService::new(inner, self.engine.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
