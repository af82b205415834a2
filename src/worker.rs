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
/// ```no_run
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
    pub async fn status(&self, id: &TaskId) -> Result<TaskRecord, TaskError> {
        self.engine
            .store
            .get(id, Scope::Any, Timestamp::now())
            .await?
            .ok_or(TaskError::NotFound)
    }

    /// Whether the client cancelled the task; `false` for an unknown id.
    pub async fn is_cancelled(&self, id: &TaskId) -> bool {
        self.status(id)
            .await
            .is_ok_and(|t| t.cancel_requested || t.status == TaskStatus::Cancelled)
    }

    /// New status text; the status stays.
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

    /// Finishes the task with a JSON-RPC error (`failed`).
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
    /// key is answered through `tasks/update`. Keys must be new for this task.
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
    /// collected so far, by key. Wakes on the change itself, without polling.
    pub async fn wait_for_input(&self, id: &TaskId) -> Result<Map<String, Value>, TaskError> {
        self.engine.wait_for_answers(id).await
    }

    /// Applies any transition and returns the record after it.
    pub async fn apply(
        &self,
        id: &TaskId,
        transition: Transition,
    ) -> Result<TaskRecord, TaskError> {
        let updated = self
            .engine
            .update(id, Scope::Any, &transition)
            .await?
            .ok_or(TaskError::NotFound)?;
        updated.outcome?;
        Ok(updated.record)
    }
}

impl fmt::Debug for Tasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
    }
}
