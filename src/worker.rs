//! The worker API: drive a task by its id.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::engine::Engine;
use crate::error::{TaskError, TransitionError};
use crate::input::InputRequests;
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
/// use mcp_tasks::{TaskId, Tasks};
/// use serde_json::json;
///
/// async fn work(tasks: Tasks, id: TaskId) -> Result<(), mcp_tasks::TaskError> {
///     tasks.progress(&id, "Checking").await?;
///     tasks
///         .require_input(&id, InputRequests::new().with("go", InputRequest::confirm("Go on?", "ok")))
///         .await?;
///     let answers = tasks.wait_for_input(&id).await?;
///     let ok = answers["go"]["content"]["ok"] == json!(true);
///     if tasks.is_cancelled(&id).await {
///         return Ok(());
///     }
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
/// use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStatus, TaskStore, TasksLayer};
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
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStore, TasksLayer};
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
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStore, TasksLayer};
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

    /// New status text (`statusMessage`); the status stays. Listen streams get the
    /// change as `notifications/tasks`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStore, TasksLayer};
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
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStore, TasksLayer};
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
    /// [`RpcError`](crate::RpcError).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStore, TasksLayer};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let store = Arc::new(MemoryStore::new());
    /// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
    /// # let id = TaskId::random();
    /// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// use mcp_tasks::{RpcError, TaskStatus};
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
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStore, TasksLayer};
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
    /// the task's TTL runs out unanswered.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStore, TasksLayer};
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
    /// assert_eq!(answers["go"]["content"]["ok"], true);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_for_input(&self, id: &TaskId) -> Result<Map<String, Value>, TaskError> {
        self.engine.wait_for_answers(id).await
    }

    /// Applies any transition and returns the record after it: the general form of
    /// the methods above, for transitions they do not cover (a completion with its
    /// own status message, say).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use mcp_tasks::store::{CreateLimits, Timestamp};
    /// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStore, TasksLayer};
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
}

impl fmt::Debug for Tasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
    }
}
