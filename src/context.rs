//! How a tool handler turns its call into a task: [`TaskSpec`], handed over through
//! the [`TaskContext`] in the request's extensions or inserted into the response's
//! extensions; and the per-tool [`TaskMode`](crate::TaskMode) configured on the layer.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::engine::NewTask;
use crate::task::TaskId;
use crate::worker::{Start, TaskHandle};

/// What a tool asks for when it answers with a task instead of a result.
///
/// Every setting is optional; `start` is where the work begins, called once the task
/// is stored (so a `tasks/get` for its id already resolves). Spawn the work there
/// and return quickly: the client's request waits on it. If `start` panics, the
/// client still gets its task handle and the task becomes `failed` with -32603.
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::TaskSpec;
///
/// let spec = TaskSpec::new()
///     .with_ttl(Duration::from_secs(1800))
///     .with_poll_interval(Duration::from_secs(2))
///     .with_status_message("Queued")
///     .with_start(|id| {
///         tokio::spawn(async move { let _ = id; /* drive the task with `Tasks` */ });
///     });
/// # drop(spec);
/// ```
///
/// What the client sees: the settings become the `CreateTaskResult`'s fields, and
/// `start` receives the id the client got. Here a tower service stands in for the
/// MCP server, and one `tools/call` goes through the layer:
///
/// ```
/// use std::time::Duration;
/// use bytes::Bytes;
/// use http::{Request, Response};
/// use http_body_util::{BodyExt as _, Full};
/// use mcp_tasks::body::RequestBody;
/// use mcp_tasks::error::BoxError;
/// use mcp_tasks::{MemoryStore, Principal, TaskContext, TaskSpec, TasksLayer};
/// use serde_json::{Value, json};
/// use tower::{Layer as _, ServiceExt as _};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let (started, start_seen) = std::sync::mpsc::channel();
/// let mcp = tower::service_fn(move |request: Request<RequestBody<Full<Bytes>>>| {
///     let started = started.clone();
///     async move {
///         let spec = TaskSpec::new()
///             .with_ttl(Duration::from_secs(1800))
///             .with_poll_interval(Duration::from_secs(2))
///             .with_status_message("Queued")
///             .with_start(move |id| started.send(id).unwrap());
///         TaskContext::from_extensions(request.extensions()).unwrap().create(spec)?;
///         Ok::<_, BoxError>(Response::new(Full::from(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)))
///     }
/// });
/// let service = TasksLayer::new(MemoryStore::new()).layer(mcp);
///
/// let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
///     "name": "build",
///     "_meta": {
///         "io.modelcontextprotocol/protocolVersion": "2026-07-28",
///         "io.modelcontextprotocol/clientCapabilities": {
///             "extensions": {"io.modelcontextprotocol/tasks": {}}
///         },
///     },
/// }});
/// let request = Request::post("/mcp")
///     .header("mcp-protocol-version", "2026-07-28")
///     .header("mcp-method", "tools/call")
///     .header("mcp-name", "build")
///     .extension(Principal::from("alice")) // what an authentication layer inserts
///     .body(Full::from(body.to_string()))?;
/// let response = service.oneshot(request).await?;
/// let reply: Value = serde_json::from_slice(&response.into_body().collect().await?.to_bytes())?;
///
/// let task = &reply["result"];
/// assert_eq!(task["resultType"], "task");
/// assert_eq!(task["ttlMs"], 1_800_000);
/// assert_eq!(task["pollIntervalMs"], 2_000);
/// assert_eq!(task["statusMessage"], "Queued");
/// assert_eq!(task["taskId"], start_seen.recv()?.to_string());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct TaskSpec {
    pub(crate) task: NewTask,
    pub(crate) start: Option<Arc<Mutex<Option<Start>>>>,
}

impl TaskSpec {
    /// A task with the layer's defaults: its TTL (1 hour unless
    /// [`with_default_ttl`](crate::TasksLayerBuilder::with_default_ttl) set another),
    /// its poll interval (none unless set), no status message and no start function.
    ///
    /// ```
    /// use mcp_tasks::{TaskContext, TaskSpec};
    ///
    /// fn as_task(parts: &http::request::Parts) -> bool {
    ///     TaskContext::from_parts(parts).is_some_and(|ctx| ctx.create(TaskSpec::new()).is_ok())
    /// }
    /// let (parts, ()) = http::Request::new(()).into_parts();
    /// assert!(!as_task(&parts)); // no layer in front: no context, so no task
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Lifetime counted from creation (longer than zero, at most
    /// [`MAX_TTL`](crate::defaults::MAX_TTL), 10 years; default: the layer's, 1 hour
    /// unless [`with_default_ttl`](crate::TasksLayerBuilder::with_default_ttl) set
    /// another). The client sees it as `ttlMs`; once it runs out the task reads as
    /// unknown (-32602). A value out of range makes the call fail with -32603 and
    /// stores nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::TaskSpec;
    ///
    /// // A report the client has half an hour to fetch.
    /// let spec = TaskSpec::new().with_ttl(Duration::from_secs(30 * 60));
    /// # drop(spec);
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.task.ttl = Some(Some(ttl));
        self
    }

    /// No lifetime limit (`"ttlMs": null`): the task is evicted only once terminal and
    /// older than the janitor's retention (default
    /// [`RETENTION`](crate::defaults::RETENTION), 1 hour).
    ///
    /// ```
    /// use mcp_tasks::TaskSpec;
    ///
    /// // A migration that may run for days; it stays readable while it runs.
    /// let spec = TaskSpec::new().without_ttl().with_status_message("Migrating");
    /// # drop(spec);
    /// ```
    pub fn without_ttl(mut self) -> Self {
        self.task.ttl = Some(None);
        self
    }

    /// The polling interval suggested to clients, `pollIntervalMs` (must be longer
    /// than zero; default: the layer's
    /// [`with_default_poll_interval`](crate::TasksLayerBuilder::with_default_poll_interval),
    /// none unless set).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::TaskSpec;
    ///
    /// let spec = TaskSpec::new().with_poll_interval(Duration::from_millis(500));
    /// # drop(spec);
    /// ```
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.task.poll_interval = Some(interval);
        self
    }

    /// The initial status message, `statusMessage` (default: none); workers change
    /// it with [`Tasks::progress`](crate::worker::Tasks::progress).
    ///
    /// ```
    /// use mcp_tasks::TaskSpec;
    ///
    /// let spec = TaskSpec::new().with_status_message("Queued behind 3 builds");
    /// # drop(spec);
    /// ```
    pub fn with_status_message(mut self, message: impl Into<String>) -> Self {
        self.task.status_message = Some(message.into());
        self
    }

    /// The function that starts the work, called with the new task's id once the
    /// task is stored (default: none, for work started some other way). It runs at
    /// most once, on the request's path: spawn and return.
    ///
    /// ```
    /// use mcp_tasks::TaskSpec;
    /// use mcp_tasks::worker::Tasks;
    /// use serde_json::json;
    ///
    /// fn spec(tasks: Tasks) -> TaskSpec {
    ///     TaskSpec::new().with_start(move |id| {
    ///         tokio::spawn(async move {
    ///             let _ = tasks.progress(&id, "Compiling").await;
    ///             let _ = tasks.complete(&id, json!({"content": []})).await;
    ///         });
    ///     })
    /// }
    /// # let _ = spec;
    /// ```
    pub fn with_start(mut self, start: impl FnOnce(TaskId) + Send + 'static) -> Self {
        self.start = Some(Arc::new(Mutex::new(Some(Start::Id(Box::new(start))))));
        self
    }

    /// The work of the task, given the task's own [`TaskHandle`] once the task is
    /// stored; the layer spawns the future it returns (default: none). The work
    /// reports through the handle, awaits a cancel with
    /// [`TaskHandle::ended`] or [`TaskHandle::run_until_ended`], and needs
    /// no `Tasks` threaded into the handler. If the last handle is dropped before
    /// the task ends (the work returned early, panicked, or was dropped), the task
    /// fails at once with -32603 instead of waiting for its TTL.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::TaskSpec;
    /// use serde_json::json;
    ///
    /// let spec = TaskSpec::new().with_work(|task| async move {
    ///     let build = async {
    ///         task.progress("Compiling").await?;
    ///         tokio::time::sleep(Duration::from_secs(5)).await;
    ///         task.complete(json!({"content": [{"type": "text", "text": "built"}]})).await
    ///     };
    ///     // Dropped at once if the client cancels.
    ///     let _ = task.run_until_ended(build).await;
    /// });
    /// # drop(spec);
    /// ```
    pub fn with_work<F, Fut>(mut self, work: F) -> Self
    where
        F: FnOnce(TaskHandle) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // Spawned as it is, not boxed: a parked worker is one allocation, its task.
        let work = Start::Work(Box::new(move |task| {
            tokio::spawn(work(task));
        }));
        self.start = Some(Arc::new(Mutex::new(Some(work))));
        self
    }

    /// The work of the task handed over to something that outlives this node (a job
    /// queue), awaited before the client gets its task; a failed hand-over fails the
    /// task with the error it returns.
    #[cfg_attr(not(feature = "queue"), allow(dead_code))]
    pub(crate) fn with_hand_over(
        mut self,
        hand_over: impl FnOnce(TaskId) -> crate::worker::HandOver + Send + 'static,
    ) -> Self {
        let start = Start::HandOver(Box::new(hand_over));
        self.start = Some(Arc::new(Mutex::new(Some(start))));
        self
    }

    pub(crate) fn take_start(&self) -> Option<Start> {
        self.start
            .as_ref()
            .and_then(|s| s.lock().unwrap_or_else(|p| p.into_inner()).take())
    }
}

impl fmt::Debug for TaskSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskSpec")
            .field("ttl", &self.task.ttl)
            .field("poll_interval", &self.task.poll_interval)
            .field("status_message", &self.task.status_message)
            .field("start", &self.start.is_some())
            .finish()
    }
}

/// Why no task may be made for this request: what [`TaskContext::create`] and
/// [`TaskContext::check`] refuse with. A handler that gets one runs the work
/// synchronously instead.
///
/// ```
/// use mcp_tasks::TaskRefused;
///
/// fn explain(reason: TaskRefused) -> &'static str {
///     match reason {
///         TaskRefused::NotDeclared | TaskRefused::LegacyEra => "the client cannot take a task",
///         TaskRefused::ToolNeverTask | TaskRefused::Disabled => "the server said no",
///         _ => "too late for this call",
///     }
/// }
/// assert_eq!(explain(TaskRefused::NotDeclared), "the client cannot take a task");
/// assert_eq!(TaskRefused::Disabled.to_string(), "the tasks extension is disabled");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskRefused {
    /// The client did not declare `io.modelcontextprotocol/tasks` on this request.
    NotDeclared,
    /// A request of an earlier revision (2025-11-25 or before) that did not ask for
    /// a task: a 2025-11-25 `tools/call` without `params.task`, or any call of an
    /// older revision.
    LegacyEra,
    /// Only `tools/call` may become a task.
    NotToolCall,
    /// The layer is configured with [`TaskMode::Never`](crate::TaskMode::Never) for this tool.
    ToolNeverTask,
    /// The extension is switched off on the layer.
    Disabled,
    /// `create` was already called for this request.
    AlreadyCreated,
    /// The layer already answered this call: a task asked for now would be lost.
    AlreadyAnswered,
    /// The server is shutting down ([`TasksLayer::drain`](crate::TasksLayer::drain)):
    /// no new task is admitted.
    ShuttingDown,
}

impl fmt::Display for TaskRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskRefused::NotDeclared => "the client did not declare the tasks extension",
            TaskRefused::LegacyEra => {
                "the call, of an earlier protocol revision, did not ask for a task"
            }
            TaskRefused::NotToolCall => "only tools/call may become a task",
            TaskRefused::ToolNeverTask => "this tool is configured never to become a task",
            TaskRefused::Disabled => "the tasks extension is disabled",
            TaskRefused::AlreadyCreated => "a task was already requested for this call",
            TaskRefused::AlreadyAnswered => "the call was already answered",
            TaskRefused::ShuttingDown => "the server is shutting down",
        })
    }
}

impl std::error::Error for TaskRefused {}

/// A handle in the request's extensions through which a handler turns its
/// `tools/call` into a task.
///
/// The layer inserts it; a handler that can see request extensions calls
/// [`create`](TaskContext::create). The layer then answers the client with a
/// `CreateTaskResult` instead of whatever the handler returned. `create` refuses at
/// once, with a reason, when no task may be made, so the handler can run the work
/// synchronously instead.
///
/// With rmcp, take `Extension<http::request::Parts>` in the tool and call
/// [`TaskContext::from_parts`]:
///
/// ```
/// use mcp_tasks::{TaskContext, TaskSpec};
///
/// fn maybe_task(parts: &http::request::Parts) -> bool {
///     TaskContext::from_parts(parts)
///         .is_some_and(|ctx| ctx.create(TaskSpec::new().with_start(|_id| {})).is_ok())
/// }
/// # let (parts, _) = http::Request::new(()).into_parts();
/// # assert!(!maybe_task(&parts));
/// ```
#[derive(Clone)]
pub struct TaskContext {
    state: ContextState,
}

#[derive(Clone)]
enum ContextState {
    Open(Arc<Mutex<Slot>>),
    Refused(TaskRefused),
}

/// Where an open context stands: nothing asked yet, a task asked for, or the layer
/// has already answered the call (a late `create` would be lost, so it is refused).
enum Slot {
    Empty,
    Requested(TaskSpec),
    Decided,
}

impl TaskContext {
    pub(crate) fn open() -> Self {
        TaskContext {
            state: ContextState::Open(Arc::new(Mutex::new(Slot::Empty))),
        }
    }

    pub(crate) fn refused(reason: TaskRefused) -> Self {
        TaskContext {
            state: ContextState::Refused(reason),
        }
    }

    /// The context the layer put into these request parts, if any (`None` when no
    /// `TasksLayer` is in front).
    ///
    /// ```
    /// use mcp_tasks::TaskContext;
    ///
    /// let (parts, ()) = http::Request::new(()).into_parts();
    /// assert!(TaskContext::from_parts(&parts).is_none());
    /// ```
    pub fn from_parts(parts: &http::request::Parts) -> Option<&TaskContext> {
        parts.extensions.get::<TaskContext>()
    }

    /// The context in a set of request extensions, if any: for frameworks that hand a
    /// handler the extensions rather than the parts.
    ///
    /// ```
    /// use mcp_tasks::{TaskContext, TaskSpec};
    ///
    /// fn handler(request: &http::Request<()>) -> &'static str {
    ///     match TaskContext::from_extensions(request.extensions()) {
    ///         Some(ctx) if ctx.create(TaskSpec::new()).is_ok() => "a task",
    ///         _ => "a plain result",
    ///     }
    /// }
    /// assert_eq!(handler(&http::Request::new(())), "a plain result");
    /// ```
    pub fn from_extensions(extensions: &http::Extensions) -> Option<&TaskContext> {
        extensions.get::<TaskContext>()
    }

    /// `Ok` when a task may be made for this request, otherwise the reason. Use it to
    /// decide before doing anything costly; [`create`](Self::create) checks again.
    ///
    /// ```
    /// use mcp_tasks::{TaskContext, TaskRefused};
    ///
    /// fn may_defer(parts: &http::request::Parts) -> Result<(), TaskRefused> {
    ///     TaskContext::from_parts(parts).map_or(Err(TaskRefused::NotToolCall), TaskContext::check)
    /// }
    /// let (parts, ()) = http::Request::new(()).into_parts();
    /// assert_eq!(may_defer(&parts), Err(TaskRefused::NotToolCall));
    /// ```
    pub fn check(&self) -> Result<(), TaskRefused> {
        match &self.state {
            ContextState::Refused(reason) => Err(*reason),
            ContextState::Open(slot) => match &*lock(slot) {
                Slot::Empty => Ok(()),
                Slot::Requested(_) => Err(TaskRefused::AlreadyCreated),
                Slot::Decided => Err(TaskRefused::AlreadyAnswered),
            },
        }
    }

    /// Asks the layer to answer this call with a task made from `spec`. The task is
    /// stored once the handler's response arrives, then `spec`'s start function runs
    /// and the client gets the `CreateTaskResult`; what the handler returned is
    /// dropped. Refused at once, with the reason, when no task may be made; a second
    /// call is refused with [`TaskRefused::AlreadyCreated`].
    ///
    /// ```
    /// use mcp_tasks::{TaskContext, TaskSpec};
    /// use serde_json::{Value, json};
    ///
    /// fn handler(parts: &http::request::Parts) -> Value {
    ///     let ctx = TaskContext::from_parts(parts);
    ///     match ctx.map(|ctx| ctx.create(TaskSpec::new().with_status_message("Queued"))) {
    ///         Some(Ok(())) => json!({"content": []}), // replaced by the CreateTaskResult
    ///         _ => json!({"content": [{"type": "text", "text": "done, synchronously"}]}),
    ///     }
    /// }
    /// let (parts, ()) = http::Request::new(()).into_parts();
    /// assert_eq!(handler(&parts)["content"][0]["text"], "done, synchronously");
    /// ```
    pub fn create(&self, spec: TaskSpec) -> Result<(), TaskRefused> {
        match &self.state {
            ContextState::Refused(reason) => {
                if *reason == TaskRefused::ShuttingDown {
                    // A call the drain kept from becoming a task: counted, so that
                    // calls still reaching a draining node show.
                    crate::observe::task_refused("shutting_down");
                }
                Err(*reason)
            }
            ContextState::Open(slot) => {
                let mut slot = lock(slot);
                match &*slot {
                    Slot::Empty => {
                        *slot = Slot::Requested(spec);
                        Ok(())
                    }
                    Slot::Requested(_) => Err(TaskRefused::AlreadyCreated),
                    Slot::Decided => Err(TaskRefused::AlreadyAnswered),
                }
            }
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        matches!(self.state, ContextState::Open(_))
    }

    /// The requested spec, if any; afterwards every `create` is refused.
    pub(crate) fn take(&self) -> Option<TaskSpec> {
        match &self.state {
            ContextState::Open(slot) => match std::mem::replace(&mut *lock(slot), Slot::Decided) {
                Slot::Requested(spec) => Some(spec),
                Slot::Empty | Slot::Decided => None,
            },
            ContextState::Refused(_) => None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            ContextState::Open(_) => f.write_str("TaskContext::Open"),
            ContextState::Refused(reason) => write!(f, "TaskContext::Refused({reason:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_context_takes_one_spec() {
        let ctx = TaskContext::open();
        assert_eq!(ctx.check(), Ok(()));
        ctx.create(TaskSpec::new()).unwrap();
        assert_eq!(
            ctx.clone().create(TaskSpec::new()),
            Err(TaskRefused::AlreadyCreated)
        );
        assert!(ctx.take().is_some());
        assert!(ctx.take().is_none());
    }

    #[test]
    fn a_create_after_the_layer_decided_is_refused_not_lost() {
        let ctx = TaskContext::open();
        assert!(ctx.take().is_none());
        assert_eq!(
            ctx.create(TaskSpec::new()),
            Err(TaskRefused::AlreadyAnswered)
        );
        assert_eq!(ctx.check(), Err(TaskRefused::AlreadyAnswered));
    }

    #[test]
    fn refused_context_names_the_reason() {
        let ctx = TaskContext::refused(TaskRefused::NotDeclared);
        assert_eq!(ctx.create(TaskSpec::new()), Err(TaskRefused::NotDeclared));
        assert!(ctx.take().is_none());
        assert!(
            TaskRefused::LegacyEra
                .to_string()
                .contains("earlier protocol revision")
        );
    }

    #[test]
    fn start_runs_at_most_once() {
        let spec = TaskSpec::new().with_start(|_| {});
        let copy = spec.clone();
        assert!(spec.take_start().is_some());
        assert!(copy.take_start().is_none());
    }
}
