//! The worker API: what the work behind a task uses to report on it, and to learn
//! that it should stop.
//!
//! Two handles, for two situations:
//!
//! - [`TaskHandle`] is **the task you run**. The work of
//!   [`TaskSpec::with_work`](crate::TaskSpec::with_work) gets it, and calls it without
//!   an id. It carries a guarantee: once its last clone is dropped with the task still
//!   running (the work returned without ending it, panicked, or was dropped), the task
//!   fails at once instead of waiting out its TTL. Use it for work that runs here,
//!   started by the call that made the task.
//! - [`Tasks`] is **any task, by id**, from [`TasksLayer::tasks`](crate::TasksLayer::tasks).
//!   Use it when the work is not this task's own: a queue or another node that resumes
//!   the task later (with [`Tasks::hold`] to take its lease), a
//!   [`TaskSpec::with_start`](crate::TaskSpec::with_start) function, an admin tool that
//!   reads or ends tasks, tests. Nothing fails a task when a `Tasks` is dropped.
//!
//! The calls of a `TaskHandle` are those of [`Tasks`] for its one task (each says which),
//! plus [`ask`](TaskHandle::ask) and [`detach`](TaskHandle::detach);
//! [`TaskHandle::tasks`] reaches the `Tasks` beneath it. Both learn of the end without
//! polling: `ended()` resolves, as an [`Ended`] future, to a [`TaskEnd`] once the task
//! no longer needs its worker, whatever ended it (a client's cancel, a completion or a
//! failure elsewhere, its expiry), and `run_until_ended(work)` drops `work` at that
//! moment.
//!
//! # The task you run
//!
//! ```
//! use mcp_tasks::TaskSpec;
//! use mcp_tasks::worker::{TaskEnd, TaskHandle};
//! use serde_json::json;
//!
//! /// The work of one `build` call, run in this process with its task's handle.
//! async fn build(task: TaskHandle) {
//!     let steps = async {
//!         task.progress("Compiling").await?;
//!         task.complete(json!({"content": [{"type": "text", "text": "built"}]})).await
//!     };
//!     // Any end of the task (a client's cancel, say) drops the steps mid-way. Should
//!     // they fail instead, the dropped handle fails the task.
//!     if let Err(TaskEnd::Cancelled) = task.run_until_ended(steps).await {
//!         tracing::info!("build cancelled");
//!     }
//! }
//!
//! // In the tool handler: the call becomes a task, and `build` runs with its handle.
//! let spec = TaskSpec::new().with_work(build);
//! # drop(spec);
//! ```
//!
//! # Any task, by id
//!
//! ```
//! use mcp_tasks::worker::Tasks;
//! use mcp_tasks::{MemoryStore, TaskId, TaskSpec, TasksLayer};
//! use serde_json::json;
//! use tokio::sync::mpsc;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), mcp_tasks::error::ConfigError> {
//! let layer = TasksLayer::builder(MemoryStore::new()).without_janitor().build()?;
//! let (queue, mut jobs) = mpsc::unbounded_channel::<TaskId>();
//!
//! // In the tool handler: the call becomes a task, and its id goes to a queue.
//! let spec = TaskSpec::new().with_start(move |id| {
//!     let _ = queue.send(id);
//! });
//! # drop(spec);
//!
//! // The queue's consumer drives each task by its id.
//! let tasks: Tasks = layer.tasks();
//! let consumer = tokio::spawn(async move {
//!     while let Some(id) = jobs.recv().await {
//!         tasks.hold(id); // should this node die, another fails the task
//!         let _ = tasks.progress(&id, "Picked up").await;
//!         let _ = tasks.complete(&id, json!({"content": []})).await;
//!     }
//! });
//! # consumer.abort();
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

pub use crate::engine::Ended;
use crate::engine::Engine;
use crate::error::{TaskError, TransitionError};
use crate::input::{InputRequests, InputResponses};
pub use crate::task::TaskEnd;
use crate::task::{ErrorObject, Scope, TaskId, TaskRecord, TaskStatus, Timestamp, Transition};

mod handle;

pub use handle::TaskHandle;

/// Any task in the layer's store, by id: cheap to clone, obtained from
/// [`TasksLayer::tasks`](crate::TasksLayer::tasks). For work that is not a task's
/// own (a queue, another node, an admin tool); the work a task starts with gets its
/// [`TaskHandle`] instead (the [module](self) tells the two apart).
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
/// let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
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
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
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
            .store()
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
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
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
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::store::Transition;
    /// use mcp_tasks::worker::TaskEnd;
    ///
    /// let client = tasks.clone();
    /// tokio::spawn(async move { client.apply(&id, Transition::Cancel).await });
    /// assert_eq!(tasks.ended(&id).await, TaskEnd::Cancelled);
    /// # Ok(())
    /// # }
    /// ```
    pub fn ended<'a>(&'a self, id: &'a TaskId) -> Ended<'a> {
        self.engine.wait_for_end(id)
    }

    /// Runs `work` until it finishes or the task no longer needs it (as
    /// [`ended`](Self::ended) reports), whichever comes first; in the second
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
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::store::Transition;
    /// use mcp_tasks::worker::TaskEnd;
    ///
    /// tasks.apply(&id, Transition::Cancel).await?;
    /// let endless = std::future::pending::<()>();
    /// assert_eq!(tasks.run_until_ended(&id, endless).await, Err(TaskEnd::Cancelled));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_until_ended<T>(
        &self,
        id: &TaskId,
        work: impl Future<Output = T>,
    ) -> Result<T, TaskEnd> {
        tokio::select! {
            biased;
            end = self.ended(id) => Err(end),
            done = work => Ok(done),
        }
    }

    /// New status text (`statusMessage`); the status stays. Listen streams get the
    /// change as `notifications/tasks`. Text longer than
    /// [`with_max_status_message_bytes`](crate::TasksLayerBuilder::with_max_status_message_bytes)
    /// (4 KiB) is cut, ending with "…"; once the task's principal stores
    /// [`with_max_bytes_per_owner`](crate::TasksLayerBuilder::with_max_bytes_per_owner)
    /// bytes, it is not written ([`TaskError::Store`] with
    /// [`StoreError::LimitReached`](crate::error::StoreError::LimitReached)).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
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
    /// "Result too large", and this returns [`TaskError::Refused`]. The same holds
    /// for an error given to [`fail`](Self::fail) and for the questions of
    /// [`require_input`](Self::require_input) ("Input requests too large"), through
    /// [`apply`](Self::apply) too; and for a result that its principal's stored
    /// bytes leave no room for
    /// ([`with_max_bytes_per_owner`](crate::TasksLayerBuilder::with_max_bytes_per_owner)):
    /// the task fails with -32603 "Task limit reached", `{"limit": "bytes_per_owner"}`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
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
    /// [`RpcError`](crate::wire::RpcError).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
    /// # use mcp_tasks::store::TaskStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
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
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
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
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
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
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
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
        let (updated, cut) = self.engine.write(id, Scope::Any, &transition).await?;
        let updated = updated.ok_or(TaskError::NotFound)?;
        updated.outcome?;
        if let Some(cut) = cut {
            return Err(TaskError::Refused(TransitionError::Invalid(cut.reason())));
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
    /// A task has one holder, the node that held it last: holding a task another
    /// node held (a job picked up again after its worker died), or that this node
    /// held before a restart under the same node id, takes it over once the hold
    /// reaches the store (the next renewal, within 20 ms), and the claim of the dead
    /// holder's lease no longer fails it.
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
        self.engine.node().hold(id);
    }

    /// Gives up the lease [`hold`](Self::hold) took, without ending the task: for
    /// work handed on to something that outlives this node (the task's TTL then
    /// bounds it).
    pub fn release(&self, id: &TaskId) {
        self.engine.node().release(id);
    }
}

impl fmt::Debug for Tasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
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
    /// Called with the id and awaited before the client gets its task: the hand-over
    /// of the work to something durable (a job queue). A failed hand-over fails the
    /// task with the error it returns.
    #[cfg_attr(not(feature = "queue"), allow(dead_code))]
    HandOver(Box<dyn FnOnce(TaskId) -> HandOver + Send + 'static>),
}

/// The hand-over of a task's work, awaited on the request's path: `Err` is the
/// error the task fails with.
pub(crate) type HandOver = crate::store::BoxFuture<'static, Result<(), ErrorObject>>;

/// Starts the work of the task just stored as `id`: calls a `with_start` function,
/// or spawns a `with_work` future with the task's handle. A start that panics fails
/// the task.
pub(crate) async fn start(engine: &Arc<Engine>, id: TaskId, start: Option<Start>) {
    let started = match start {
        None => return,
        Some(Start::Id(start)) => catch_unwind(AssertUnwindSafe(move || start(id))),
        Some(Start::HandOver(hand_over)) => {
            if let Err(error) = hand_over(id).await {
                let fail = Transition::Fail {
                    error,
                    message: None,
                };
                if let Err(e) = engine.update(&id, Scope::Any, &fail).await {
                    tracing::error!(error = %crate::error::Chain(&e), "could not mark a task failed after its hand-over failed");
                }
            }
            return;
        }
        Some(Start::Work(work)) => {
            engine.node().register_work(id);
            let handle = TaskHandle::new(Tasks::new(engine.clone()), id);
            catch_unwind(AssertUnwindSafe(move || work(handle)))
        }
    };
    if started.is_err() {
        tracing::error!("task start function panicked; the task is marked failed");
        fail_abandoned(engine, &id, "Task failed to start").await;
    }
}
