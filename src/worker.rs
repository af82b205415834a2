//! The worker API: drive a task by its id ([`Tasks`]) or through its own handle
//! ([`TaskHandle`], given to the work of
//! [`TaskSpec::with_work`](crate::TaskSpec::with_work)), and learn of its end without
//! polling ([`TaskEnd`]).

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

pub use crate::engine::Cancelled;
use crate::engine::Engine;
use crate::error::{TaskError, TransitionError};
use crate::input::{InputRequests, InputResponses};
pub use crate::task::TaskEnd;
use crate::task::{ErrorObject, Scope, TaskId, TaskRecord, TaskStatus, Timestamp, Transition};

/// The worker's handle on tasks: cheap to clone, obtained from
/// [`TasksLayer::handle`](crate::TasksLayer::handle).
///
/// Workers address a task by id alone (the id is the capability; keep it out of
/// logs). Terminal states are final: after `completed`, `failed` or `cancelled`,
/// `progress`, `complete`, `fail` and `require_input` return
/// a [`TaskError`] that [`is_terminal`](TaskError::is_terminal).
///
/// ```
/// use mcp_tasks::input::{InputRequest, InputRequests};
/// use mcp_tasks::TaskId;
/// use mcp_tasks::worker::Tasks;
/// use serde_json::json;
///
/// async fn work(tasks: Tasks, id: TaskId) -> Result<(), mcp_tasks::error::TaskError> {
///     tasks.progress(&id, "Checking").await?;
///     tasks
///         .require_input(&id, InputRequests::new().with("go", InputRequest::confirm("Go on?", "ok")))
///         .await?;
///     let ok = tasks.wait_for_input(&id).await?.confirmed("go", "ok");
///     tasks
///         .complete(&id, json!({"content": [{"type": "text", "text": format!("ok: {ok}")}]}))
///         .await
/// }
/// # let _ = work;
/// ```
///
/// The handle works on any task in the layer's store, whoever made it. In a test, a
/// task can be put straight into the store and driven from there:
///
/// ```
/// use std::sync::Arc;
/// use mcp_tasks::store::{CreateLimits, Timestamp};
/// use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStatus, TasksLayer};
/// use mcp_tasks::store::TaskStore;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(MemoryStore::new());
/// let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
/// let id = TaskId::random();
/// store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
///
/// tasks.progress(&id, "Compiling").await?;
/// tasks.complete(&id, json!({"content": [{"type": "text", "text": "built"}]})).await?;
/// assert_eq!(tasks.status(&id).await?.status, TaskStatus::Completed);
/// // Terminal states are final.
/// assert!(tasks.progress(&id, "Still compiling").await.unwrap_err().is_terminal());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Tasks {
    engine: Arc<Engine>,
}

impl Tasks {
    pub(crate) fn new(engine: Arc<Engine>) -> Self {
        Tasks { engine }
    }

    /// The task as stored (not owner-scoped: workers act for the server).
    /// [`TaskError::NotFound`] for an unknown or expired id.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::TaskStatus;
    ///
    /// let task = tasks.status(&id).await?;
    /// assert_eq!(task.status, TaskStatus::Working);
    /// assert!(task.input_requests.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn status(&self, id: &TaskId) -> Result<TaskRecord, TaskError> {
        self.engine
            .store
            .get(id, Scope::Any, Timestamp::now())
            .await?
            .ok_or(TaskError::NotFound)
    }

    /// Whether the client cancelled the task; `false` for an unknown id. Long work
    /// checks it between steps (or waits on [`wait_for_input`](Self::wait_for_input),
    /// which ends on a cancel too).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::store::Transition;
    ///
    /// assert!(!tasks.is_cancelled(&id).await);
    /// tasks.apply(&id, Transition::Cancel).await?; // what a client's tasks/cancel does
    /// assert!(tasks.is_cancelled(&id).await);
    /// assert!(!tasks.is_cancelled(&TaskId::random()).await);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_cancelled(&self, id: &TaskId) -> bool {
        self.status(id)
            .await
            .is_ok_and(|t| t.cancel_requested || t.status == TaskStatus::Cancelled)
    }

    /// Waits, without polling, until the task no longer needs its worker and says
    /// why: the client cancelled it (through any node sharing the store), it ended
    /// some other way, or it expired. Costs no store read while it waits: it wakes
    /// on the change itself, or at the task's expiry. Store errors meanwhile are
    /// retried, never reported as an end.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::store::Transition;
    /// use mcp_tasks::worker::TaskEnd;
    ///
    /// let client = tasks.clone();
    /// tokio::spawn(async move { client.apply(&id, Transition::Cancel).await });
    /// assert_eq!(tasks.cancelled(&id).await, TaskEnd::Cancelled);
    /// # Ok(())
    /// # }
    /// ```
    pub fn cancelled<'a>(&'a self, id: &'a TaskId) -> Cancelled<'a> {
        self.engine.wait_for_end(id)
    }

    /// Runs `work` until it finishes or the task no longer needs it (as
    /// [`cancelled`](Self::cancelled) reports), whichever comes first; in the second
    /// case `work` is dropped mid-way and the reason returned.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::store::Transition;
    /// use mcp_tasks::worker::TaskEnd;
    ///
    /// tasks.apply(&id, Transition::Cancel).await?;
    /// let endless = std::future::pending::<()>();
    /// assert_eq!(tasks.run_until_cancelled(&id, endless).await, Err(TaskEnd::Cancelled));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_until_cancelled<T>(
        &self,
        id: &TaskId,
        work: impl Future<Output = T>,
    ) -> Result<T, TaskEnd> {
        tokio::select! {
            biased;
            end = self.cancelled(id) => Err(end),
            done = work => Ok(done),
        }
    }

    /// New status text (`statusMessage`); the status stays. Listen streams get the
    /// change as `notifications/tasks`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// tasks.progress(&id, "Step 2 of 3").await?;
    /// let task = tasks.status(&id).await?;
    /// assert_eq!(task.status_message.as_deref(), Some("Step 2 of 3"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn progress(&self, id: &TaskId, message: impl Into<String>) -> Result<(), TaskError> {
        self.apply(
            id,
            Transition::Progress {
                message: message.into(),
            },
        )
        .await
        .map(drop)
    }

    /// Finishes the task with what the tool would have returned synchronously (a
    /// `CallToolResult`, `isError: true` included). `resultType: "complete"` is
    /// added when absent.
    ///
    /// A result whose JSON is larger than
    /// [`with_max_result_bytes`](crate::TasksLayerBuilder::with_max_result_bytes)
    /// (8 MiB by default) is not stored: the task becomes `failed` with -32603
    /// "Result too large", and this returns [`TaskError::Refused`]. The same cap
    /// holds for [`apply`](Self::apply) with a `Complete` transition.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::TaskStatus;
    /// use serde_json::json;
    ///
    /// tasks.complete(&id, json!({"content": [{"type": "text", "text": "42"}]})).await?;
    /// let task = tasks.status(&id).await?;
    /// assert_eq!(task.status, TaskStatus::Completed);
    /// assert_eq!(task.result.unwrap()["resultType"], "complete");
    /// // A second ending is refused: the first one stands.
    /// assert!(tasks.complete(&id, json!({"content": []})).await.unwrap_err().is_terminal());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn complete(&self, id: &TaskId, result: impl Serialize) -> Result<(), TaskError> {
        let mut result = serde_json::to_value(result).map_err(|_| {
            TaskError::Refused(TransitionError::Invalid("the result does not serialize"))
        })?;
        if let Some(object) = result.as_object_mut() {
            object
                .entry("resultType")
                .or_insert_with(|| Value::String("complete".into()));
        }
        self.apply(
            id,
            Transition::Complete {
                result,
                message: None,
            },
        )
        .await
        .map(drop)
    }

    /// Finishes the task with a JSON-RPC error (`failed`). A tool whose work merely
    /// went wrong completes with `isError: true` instead; `failed` is for errors of
    /// the call itself. Takes an [`ErrorObject`] or an
    /// [`RpcError`].
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::TaskStatus;
    /// use mcp_tasks::wire::RpcError;
    ///
    /// tasks.fail(&id, RpcError::internal("The build server is unreachable")).await?;
    /// let task = tasks.status(&id).await?;
    /// assert_eq!(task.status, TaskStatus::Failed);
    /// assert_eq!(task.error.unwrap().code, -32603);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fail(&self, id: &TaskId, error: impl Into<ErrorObject>) -> Result<(), TaskError> {
        self.apply(
            id,
            Transition::Fail {
                error: error.into(),
                message: None,
            },
        )
        .await
        .map(drop)
    }

    /// Puts questions to the client: the task becomes `input_required` until every
    /// key is answered through `tasks/update`. Keys must be new for this task: a key
    /// used before, even one answered long ago, is refused with
    /// [`TransitionError::DuplicateKeys`].
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::input::{InputRequest, InputRequests};
    /// use mcp_tasks::TaskStatus;
    ///
    /// let ask = || InputRequests::new()
    ///     .with("confirm-1", InputRequest::confirm("Delete a.txt?", "confirm"))
    ///     .with_status_message("Waiting for confirmation");
    /// tasks.require_input(&id, ask()).await?;
    /// let task = tasks.status(&id).await?;
    /// assert_eq!(task.status, TaskStatus::InputRequired);
    /// assert!(task.input_requests.contains_key("confirm-1"));
    /// assert!(tasks.require_input(&id, ask()).await.is_err()); // the key was used
    /// # Ok(())
    /// # }
    /// ```
    pub async fn require_input(
        &self,
        id: &TaskId,
        requests: InputRequests,
    ) -> Result<(), TaskError> {
        self.apply(
            id,
            Transition::RequireInput {
                requests: requests.requests,
                message: requests.status_message,
            },
        )
        .await
        .map(drop)
    }

    /// Waits until no input request is outstanding, then returns every answer
    /// collected so far, by key. Wakes on the change itself, without polling, also
    /// when the answer arrived on another node sharing the store. Ends with a
    /// [`TaskError`] that [`is_terminal`](TaskError::is_terminal) when the task ended
    /// meanwhile (the client cancelled it, say), and with [`TaskError::NotFound`] once
    /// the task's TTL runs out unanswered. A failing store is read again with a
    /// bounded backoff rather than reported, so an outage delays the answer but
    /// never ends the wait.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::input::{InputRequest, InputRequests};
    /// use mcp_tasks::store::Transition;
    /// use serde_json::json;
    ///
    /// let question = InputRequest::confirm("Go on?", "ok");
    /// tasks.require_input(&id, InputRequests::new().with("go", question)).await?;
    /// let client = tasks.clone();
    /// tokio::spawn(async move {
    ///     // What a client's tasks/update does with its inputResponses:
    ///     let answers = json!({"go": {"action": "accept", "content": {"ok": true}}});
    ///     let answer = Transition::Answer { responses: answers.as_object().unwrap().clone() };
    ///     client.apply(&id, answer).await
    /// });
    /// let answers = tasks.wait_for_input(&id).await?;
    /// assert!(answers.confirmed("go", "ok"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_for_input(&self, id: &TaskId) -> Result<InputResponses, TaskError> {
        self.engine
            .wait_for_answers(id)
            .await
            .map(InputResponses::from_json)
    }

    /// Applies any transition and returns the record after it: the general form of
    /// the methods above, for transitions they do not cover (a completion with its
    /// own status message, say).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::store::Transition;
    /// use mcp_tasks::TaskStatus;
    /// use serde_json::json;
    ///
    /// let done = Transition::Complete {
    ///     result: json!({"content": []}),
    ///     message: Some("Built in 42 s".into()),
    /// };
    /// let task = tasks.apply(&id, done).await?;
    /// assert_eq!(task.status, TaskStatus::Completed);
    /// assert_eq!(task.status_message.as_deref(), Some("Built in 42 s"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn apply(
        &self,
        id: &TaskId,
        transition: Transition,
    ) -> Result<TaskRecord, TaskError> {
        let (transition, too_large) = match self.engine.limit_result(transition) {
            Ok(transition) => (transition, false),
            Err(fail) => (fail, true),
        };
        let updated = self
            .engine
            .update(id, Scope::Any, &transition)
            .await?
            .ok_or(TaskError::NotFound)?;
        updated.outcome?;
        if too_large {
            return Err(TaskError::Refused(TransitionError::Invalid(
                "the result is larger than max_result_bytes; the task failed with \"Result too large\"",
            )));
        }
        Ok(updated.record)
    }

    /// Takes over the worker lease of `id`, for work this node drives by id (a
    /// [`TaskSpec::with_start`](crate::TaskSpec::with_start) function, or a worker
    /// that picks the task up from a queue): if this node dies before the task
    /// ends, a surviving node fails it within the lease bound
    /// ([`with_worker_lease`](crate::TasksLayerBuilder::with_worker_lease)). The lease
    /// ends by itself when the task ends, or with [`release`](Self::release). Work
    /// under a [`TaskHandle`] and `Auto` runners hold their tasks without this call.
    ///
    /// ```
    /// # async fn run(tasks: mcp_tasks::worker::Tasks, id: mcp_tasks::TaskId) -> Result<(), mcp_tasks::error::TaskError> {
    /// tasks.hold(id);
    /// tasks.progress(&id, "Picked up from the queue").await?;
    /// tasks.complete(&id, serde_json::json!({"content": []})).await?; // the lease ends here
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold(&self, id: TaskId) {
        self.engine.node.hold(id);
    }

    /// Gives up the lease [`hold`](Self::hold) took, without ending the task: for
    /// work handed on to something that outlives this node (the task's TTL then
    /// bounds it).
    pub fn release(&self, id: &TaskId) {
        self.engine.node.release(id);
    }
}

impl fmt::Debug for Tasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
    }
}

/// One task's own handle, given to the work of
/// [`TaskSpec::with_work`](crate::TaskSpec::with_work): the [`Tasks`] calls without
/// the id, plus a guarantee. Clones share the task; once the last one is dropped
/// with the task still running (the work returned without ending it, panicked, or
/// was dropped), the task fails at once with -32603 "Task worker stopped before
/// finishing the task" instead of waiting out its TTL.
/// [`detach`](Self::detach) hands the task over to other work instead.
///
/// ```
/// use mcp_tasks::input::{InputRequest, InputRequests};
/// use mcp_tasks::worker::TaskHandle;
/// use serde_json::json;
///
/// async fn deploy(task: TaskHandle) -> Result<(), mcp_tasks::error::TaskError> {
///     task.progress("Planning").await?;
///     let question = InputRequests::new().with("go", InputRequest::confirm("Deploy?", "ok"));
///     if !task.ask(question).await?.confirmed("go", "ok") {
///         return task.complete(json!({"content": [{"type": "text", "text": "not deployed"}]})).await;
///     }
///     task.complete(json!({"content": [{"type": "text", "text": "deployed"}]})).await
/// }
/// let spec = mcp_tasks::TaskSpec::new().with_work(|task| async move {
///     let _ = deploy(task).await; // an error here leaves the task to the guarantee
/// });
/// # drop(spec);
/// ```
#[derive(Clone)]
pub struct TaskHandle {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    tasks: Tasks,
    id: TaskId,
    /// Set once nothing is left to fail: the task ended, is gone, or was detached.
    settled: AtomicBool,
    /// Status text waiting for the store, written by one writer at a time.
    progress: std::sync::Mutex<Progress>,
}

/// The status text of a handle's task on its way to the store: the newest text
/// wins, and a slow store never holds the work up for longer than
/// [`PROGRESS_WAIT`].
#[derive(Default)]
struct Progress {
    /// The newest text not written yet.
    pending: Option<String>,
    /// A writer is running.
    writing: bool,
    /// A refusal the writer met after its caller stopped waiting, for the next call.
    refused: Option<TaskError>,
}

/// How long [`TaskHandle::progress`] waits for its write before it lets the work go
/// on (the write goes on in the background).
const PROGRESS_WAIT: Duration = Duration::from_millis(100);

/// The pause before a progress write that met a store error is tried again.
const PROGRESS_RETRY: Duration = Duration::from_millis(200);

impl TaskHandle {
    fn new(tasks: Tasks, id: TaskId) -> Self {
        TaskHandle {
            inner: Arc::new(HandleInner {
                tasks,
                id,
                settled: AtomicBool::new(false),
                progress: std::sync::Mutex::default(),
            }),
        }
    }

    fn settle(&self) {
        self.inner.settled.store(true, Ordering::Release);
    }

    /// Settles the handle when `outcome` shows the task ended (or is gone).
    fn observe<T>(&self, outcome: Result<T, TaskError>) -> Result<T, TaskError> {
        if let Err(e) = &outcome
            && (e.is_terminal() || matches!(e, TaskError::NotFound))
        {
            self.settle();
        }
        outcome
    }

    /// The task's id, for handing to clients or other workers (keep it out of logs).
    pub fn id(&self) -> TaskId {
        self.inner.id
    }

    /// The worker handle for every task, to drive other tasks or build on.
    pub fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }

    /// [`Tasks::status`] of this task.
    pub async fn status(&self) -> Result<TaskRecord, TaskError> {
        let outcome = self.inner.tasks.status(&self.inner.id).await;
        self.observe(outcome)
    }

    /// [`Tasks::progress`] on this task, without holding the work up on a slow
    /// store: it waits at most 100 ms for the write, which then goes on in the
    /// background. Texts sent while a write is on its way are coalesced (the
    /// newest wins, and is written once the store answers; a store error is retried
    /// every 200 ms while the handle lives, never returned). A refusal (the task
    /// ended) is returned by this call, or by the next one when it came late.
    pub async fn progress(&self, message: impl Into<String>) -> Result<(), TaskError> {
        let written = {
            let mut progress = lock(&self.inner.progress);
            if let Some(refused) = progress.refused.take() {
                return self.observe(Err(refused));
            }
            progress.pending = Some(message.into());
            if progress.writing {
                return Ok(());
            }
            progress.writing = true;
            let (tell, written) = tokio::sync::oneshot::channel();
            tokio::spawn(write_progress(Arc::downgrade(&self.inner), tell));
            written
        };
        match tokio::time::timeout(PROGRESS_WAIT, written).await {
            Ok(Ok(outcome)) => self.observe(outcome),
            // Still on its way, or the handle is gone.
            _ => Ok(()),
        }
    }

    /// [`Tasks::complete`] of this task.
    pub async fn complete(&self, result: impl Serialize) -> Result<(), TaskError> {
        let outcome = self.inner.tasks.complete(&self.inner.id, result).await;
        if outcome.is_ok() {
            self.settle();
        }
        self.observe(outcome)
    }

    /// [`Tasks::fail`] of this task.
    pub async fn fail(&self, error: impl Into<ErrorObject>) -> Result<(), TaskError> {
        let outcome = self.inner.tasks.fail(&self.inner.id, error).await;
        if outcome.is_ok() {
            self.settle();
        }
        self.observe(outcome)
    }

    /// [`Tasks::require_input`] on this task.
    pub async fn require_input(&self, requests: InputRequests) -> Result<(), TaskError> {
        let outcome = self
            .inner
            .tasks
            .require_input(&self.inner.id, requests)
            .await;
        self.observe(outcome)
    }

    /// [`Tasks::wait_for_input`] on this task.
    pub async fn wait_for_input(&self) -> Result<InputResponses, TaskError> {
        let outcome = self.inner.tasks.wait_for_input(&self.inner.id).await;
        self.observe(outcome)
    }

    /// Puts the questions and waits for every answer: [`require_input`](Self::require_input)
    /// then [`wait_for_input`](Self::wait_for_input).
    pub async fn ask(&self, requests: InputRequests) -> Result<InputResponses, TaskError> {
        self.require_input(requests).await?;
        self.wait_for_input().await
    }

    /// [`Tasks::cancelled`] for this task.
    pub fn cancelled(&self) -> Cancelled<'_> {
        self.inner
            .tasks
            .cancelled(&self.inner.id)
            .settling(&self.inner.settled)
    }

    /// [`Tasks::run_until_cancelled`] for this task.
    pub async fn run_until_cancelled<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Result<T, TaskEnd> {
        tokio::select! {
            biased;
            end = self.cancelled() => Err(end),
            done = work => Ok(done),
        }
    }

    /// Gives the task up without failing it: for work handed to something that
    /// outlives this handle (an external durable queue, another process), which then
    /// drives the task by its id through [`Tasks`]. Until that work ends the task,
    /// only its TTL bounds it.
    pub fn detach(self) -> TaskId {
        self.settle();
        self.inner.id
    }
}

impl fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHandle")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

impl Drop for HandleInner {
    fn drop(&mut self) {
        let engine = self.tasks.engine.clone();
        engine.node.forget_work(&self.id);
        if *self.settled.get_mut() {
            return;
        }
        let id = self.id;
        let failed = async move {
            fail_abandoned(
                &engine,
                &id,
                "Task worker stopped before finishing the task",
            )
            .await
        };
        if !crate::spawn::spawn_if_runtime(failed) {
            tracing::warn!(
                "a task handle was dropped outside a runtime; its task is left to its TTL"
            );
        }
    }
}

fn lock(progress: &std::sync::Mutex<Progress>) -> std::sync::MutexGuard<'_, Progress> {
    progress.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes a handle's pending status text until none is left, telling the first
/// caller how its write went (if it still waits).
async fn write_progress(
    handle: std::sync::Weak<HandleInner>,
    tell: tokio::sync::oneshot::Sender<Result<(), TaskError>>,
) {
    let mut tell = Some(tell);
    loop {
        let Some(inner) = handle.upgrade() else {
            return;
        };
        let Some(text) = ({
            let mut progress = lock(&inner.progress);
            let text = progress.pending.take();
            progress.writing = text.is_some();
            text
        }) else {
            return;
        };
        match inner.tasks.progress(&inner.id, text.clone()).await {
            Err(TaskError::Store(_)) => {
                // Not written: kept unless a newer text came meanwhile.
                lock(&inner.progress).pending.get_or_insert(text);
                drop(tell.take());
                drop(inner);
                tokio::time::sleep(PROGRESS_RETRY).await;
            }
            Err(refused) => {
                let mut progress = lock(&inner.progress);
                progress.pending = None;
                progress.writing = false;
                // Told to the caller if it still waits, else kept for the next call.
                let unheard = match tell.take() {
                    Some(tell) => tell.send(Err(refused)).err(),
                    None => Some(Err(refused)),
                };
                progress.refused = unheard.and_then(Result::err);
                return;
            }
            Ok(()) => {
                if let Some(tell) = tell.take() {
                    let _ = tell.send(Ok(()));
                }
            }
        }
    }
}

/// Fails a task its worker can no longer finish (refused, harmlessly, once it ended).
async fn fail_abandoned(engine: &Engine, id: &TaskId, message: &str) {
    match engine.fail_internal(id, message).await {
        Ok(true) => tracing::warn!("{message}; the task is marked failed"),
        Ok(false) => {}
        Err(e) => {
            tracing::error!(error = %crate::error::Chain(&e), "could not mark a task failed: {message}")
        }
    }
}

/// How a task's work begins once the task is stored.
pub(crate) enum Start {
    /// Called with the id; the work drives its task through [`Tasks`].
    Id(Box<dyn FnOnce(TaskId) + Send + 'static>),
    /// Called with the task's own handle; the layer spawns the future it returns.
    /// Spawns the work with its handle.
    Work(Box<dyn FnOnce(TaskHandle) + Send + 'static>),
}

/// Starts the work of the task just stored as `id`: calls a `with_start` function,
/// or spawns a `with_work` future with the task's handle. A start that panics fails
/// the task.
pub(crate) async fn start(engine: &Arc<Engine>, id: TaskId, start: Option<Start>) {
    let started = match start {
        None => return,
        Some(Start::Id(start)) => catch_unwind(AssertUnwindSafe(move || start(id))),
        Some(Start::Work(work)) => {
            engine.node.register_work(id);
            let handle = TaskHandle::new(Tasks::new(engine.clone()), id);
            catch_unwind(AssertUnwindSafe(move || work(handle)))
        }
    };
    if started.is_err() {
        tracing::error!("task start function panicked; the task is marked failed");
        fail_abandoned(engine, &id, "Task failed to start").await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::TasksLayer;
    use crate::store::{CreateLimits, MemoryStore};

    async fn stored_task(layer: &TasksLayer) -> TaskId {
        let id = TaskId::random();
        let record = TaskRecord::new(id, None, Timestamp::now());
        layer
            .engine
            .store
            .create(record, CreateLimits::default())
            .await
            .unwrap();
        id
    }

    /// Lets the tasks spawned so far run (a current-thread runtime runs them in turn).
    async fn let_spawned_tasks_run() {
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_last_dropped_handle_fails_a_running_task_and_a_detached_one_does_not() {
        let layer = TasksLayer::builder(MemoryStore::new())
            .without_janitor()
            .build()
            .unwrap();
        let tasks = layer.handle();
        let dropped = stored_task(&layer).await;
        let detached = stored_task(&layer).await;

        let handle = TaskHandle::new(tasks.clone(), dropped);
        let clone = handle.clone();
        drop(handle);
        let_spawned_tasks_run().await;
        assert_eq!(
            tasks.status(&dropped).await.unwrap().status,
            TaskStatus::Working,
            "a clone still holds the task"
        );
        drop(clone);
        let_spawned_tasks_run().await;
        let failed = tasks.status(&dropped).await.unwrap();
        assert_eq!(failed.status, TaskStatus::Failed);
        assert_eq!(
            failed.error.unwrap().code,
            crate::wire::RpcError::INTERNAL_ERROR
        );

        assert_eq!(TaskHandle::new(tasks.clone(), detached).detach(), detached);
        let_spawned_tasks_run().await;
        assert_eq!(
            tasks.status(&detached).await.unwrap().status,
            TaskStatus::Working
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_handle_whose_task_completed_leaves_it_completed() {
        let layer = TasksLayer::builder(MemoryStore::new())
            .without_janitor()
            .build()
            .unwrap();
        let tasks = layer.handle();
        let id = stored_task(&layer).await;
        layer.engine.node.register_work(id);
        let handle = TaskHandle::new(tasks.clone(), id);
        assert_eq!(waiting_works(&layer), 1);
        handle
            .complete(serde_json::json!({"content": []}))
            .await
            .unwrap();
        drop(handle);
        let_spawned_tasks_run().await;
        assert_eq!(
            tasks.status(&id).await.unwrap().status,
            TaskStatus::Completed
        );
        assert_eq!(waiting_works(&layer), 0);
    }

    fn waiting_works(layer: &TasksLayer) -> usize {
        layer.engine.node.work_count()
    }

    /// A memory store whose updates wait while `stalled` is set, counting them.
    #[derive(Debug, Default)]
    struct Stalling {
        store: MemoryStore,
        stalled: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
        updates: std::sync::atomic::AtomicUsize,
    }

    impl crate::store::TaskStore for Stalling {
        fn create<'a>(
            &'a self,
            record: TaskRecord,
            limits: CreateLimits,
        ) -> crate::store::BoxFuture<'a, Result<(), crate::error::StoreError>> {
            self.store.create(record, limits)
        }

        fn get<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            now: Timestamp,
        ) -> crate::store::BoxFuture<'a, Result<Option<TaskRecord>, crate::error::StoreError>>
        {
            self.store.get(id, scope, now)
        }

        fn update<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            transition: &'a Transition,
            now: Timestamp,
        ) -> crate::store::BoxFuture<
            'a,
            Result<Option<crate::store::Updated>, crate::error::StoreError>,
        > {
            Box::pin(async move {
                self.updates.fetch_add(1, Ordering::SeqCst);
                let _ = self.stalled.subscribe().wait_for(|stalled| !stalled).await;
                self.store.update(id, scope, transition, now).await
            })
        }

        fn cleanup<'a>(
            &'a self,
            now: Timestamp,
            retention: Duration,
        ) -> crate::store::BoxFuture<'a, Result<usize, crate::error::StoreError>> {
            self.store.cleanup(now, retention)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn progress_on_a_slow_store_returns_promptly_and_the_newest_text_wins() {
        let store = std::sync::Arc::new(Stalling::default());
        let layer = TasksLayer::builder(store.clone())
            .without_janitor()
            .with_store_timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let tasks = layer.handle();
        let id = stored_task(&layer).await;
        let handle = TaskHandle::new(tasks.clone(), id);

        store.stalled.send_replace(true);
        let started = tokio::time::Instant::now();
        for step in ["one", "two", "three"] {
            handle.progress(step).await.unwrap();
        }
        assert!(
            started.elapsed() <= PROGRESS_WAIT,
            "three progress calls on a stalled store took {:?}",
            started.elapsed()
        );
        store.stalled.send_replace(false);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let task = tasks.status(&id).await.unwrap();
        assert_eq!(task.status_message.as_deref(), Some("three"));
        // The first write, then the newest text: the one in between never went out.
        assert_eq!(store.updates.load(Ordering::SeqCst), 2);

        // A refusal met in the background comes with the next call.
        tasks.apply(&id, Transition::Cancel).await.unwrap();
        let refused = handle.progress("late").await.unwrap_err();
        assert!(refused.is_terminal());
        handle.detach();
    }
}
