//! A task as the client sees it: a serializable reference, and the state read from
//! `tasks/get` or `notifications/tasks`.

use std::fmt;
use std::time::Duration;

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::task::TaskStatus;
use crate::wire::RpcError;

use super::error::ClientError;

/// The shortest polling interval the client uses, whatever the server suggests.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// The longest polling interval the client uses, whatever the server suggests.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(30);
/// The polling interval when the server suggests none.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What it takes to follow a task again, after a restart: its id and the server's
/// polling interval. Serialize it (serde) before waiting, and give it to
/// [`Client::resume`](super::Client::resume) later. It holds no credential: the
/// resuming client needs the same token.
///
/// Its `Debug` hides the id, which is the task's only secret.
///
/// ```
/// use mcp_tasks::client::{DEFAULT_POLL_INTERVAL, TaskRef};
///
/// let saved = serde_json::to_string(&TaskRef::new("dGFzaw"))?;
/// assert_eq!(saved, r#"{"taskId":"dGFzaw"}"#);
/// let task: TaskRef = serde_json::from_str(&saved)?;
/// assert_eq!((task.task_id(), task.poll_interval()), ("dGFzaw", DEFAULT_POLL_INTERVAL));
/// assert!(!format!("{task:?}").contains("dGFzaw"));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRef {
    task_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    poll_interval_ms: Option<u64>,
}

impl TaskRef {
    /// A reference to the task `task_id`, with no polling interval known yet.
    pub fn new(task_id: impl Into<String>) -> Self {
        TaskRef {
            task_id: task_id.into(),
            poll_interval_ms: None,
        }
    }

    /// The task's id.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The polling interval the server last suggested, clamped to
    /// [`MIN_POLL_INTERVAL`]..=[`MAX_POLL_INTERVAL`]; [`DEFAULT_POLL_INTERVAL`] when it
    /// suggested none.
    pub fn poll_interval(&self) -> Duration {
        poll_interval(self.poll_interval_ms)
    }

    pub(crate) fn set_poll_interval_ms(&mut self, ms: Option<u64>) {
        if ms.is_some() {
            self.poll_interval_ms = ms;
        }
    }
}

impl fmt::Debug for TaskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskRef")
            .field("task_id", &"<redacted>")
            .field("poll_interval_ms", &self.poll_interval_ms)
            .finish()
    }
}

fn poll_interval(ms: Option<u64>) -> Duration {
    ms.map_or(DEFAULT_POLL_INTERVAL, |ms| {
        Duration::from_millis(ms).clamp(MIN_POLL_INTERVAL, MAX_POLL_INTERVAL)
    })
}

/// One state of a task, from `tasks/get`, `notifications/tasks` or the
/// `CreateTaskResult`.
///
/// ```no_run
/// use mcp_tasks::TaskStatus;
/// use mcp_tasks::client::{Client, ClientError, TaskRef};
///
/// # async fn run(client: Client, saved: TaskRef) -> Result<(), ClientError> {
/// let state = client.get_task(saved.task_id()).await?;
/// match state.status {
///     TaskStatus::Completed => println!("done: {}", state.result.unwrap_or_default()),
///     TaskStatus::Failed => println!("failed: {}", state.error.map(|e| e.to_string()).unwrap_or_default()),
///     TaskStatus::InputRequired => println!("{} questions open", state.input_requests.len()),
///     _ => println!("{}", state.status_message.as_deref().unwrap_or("working")),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct TaskSnapshot {
    /// The status.
    pub status: TaskStatus,
    /// The progress text (`statusMessage`), when there is one.
    pub status_message: Option<String>,
    /// The suggested polling interval in milliseconds (`pollIntervalMs`).
    pub poll_interval_ms: Option<u64>,
    /// The outstanding questions by key (`inputRequests`), when `input_required`.
    pub input_requests: Map<String, Value>,
    /// The tool's result, when `completed`.
    pub result: Option<Value>,
    /// The task's error, when `failed`.
    pub error: Option<RpcError>,
    task_id: String,
}

impl TaskSnapshot {
    /// Reads a DetailedTask (or a CreateTaskResult).
    pub(crate) fn from_json(value: &Value) -> Result<Self, ClientError> {
        let bad = |what: &str| ClientError::http(StatusCode::OK, format!("a task {what}"));
        let task_id = value
            .get("taskId")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("without a taskId"))?
            .to_owned();
        let status: TaskStatus = value
            .get("status")
            .cloned()
            .and_then(|s| serde_json::from_value(s).ok())
            .ok_or_else(|| bad("without a known status"))?;
        let error = match (status, value.get("error")) {
            (TaskStatus::Failed, Some(error)) => Some(rpc_error(error, StatusCode::OK)),
            (TaskStatus::Failed, None) => Some(RpcError::new(
                RpcError::INTERNAL_ERROR,
                "the task failed without an error",
                StatusCode::OK,
            )),
            _ => None,
        };
        Ok(TaskSnapshot {
            status,
            status_message: value
                .get("statusMessage")
                .and_then(Value::as_str)
                .map(str::to_owned),
            poll_interval_ms: value.get("pollIntervalMs").and_then(Value::as_u64),
            input_requests: value
                .get("inputRequests")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            result: value.get("result").cloned(),
            error,
            task_id,
        })
    }

    /// The task's id.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }
}

impl fmt::Debug for TaskSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskSnapshot")
            .field("task_id", &"<redacted>")
            .field("status", &self.status)
            .field("status_message", &self.status_message)
            .field("poll_interval_ms", &self.poll_interval_ms)
            .field("input_requests", &self.input_requests)
            .field("result", &self.result)
            .field("error", &self.error)
            .finish()
    }
}

/// A JSON-RPC `error` object as an [`RpcError`] that came with `status`.
pub(crate) fn rpc_error(error: &Value, status: StatusCode) -> RpcError {
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .unwrap_or(RpcError::INTERNAL_ERROR);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let rpc = RpcError::new(code, message, status);
    match error.get("data") {
        Some(data) => rpc.with_data(data.clone()),
        None => rpc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn poll_interval_is_clamped() {
        assert_eq!(poll_interval(Some(1)), MIN_POLL_INTERVAL);
        assert_eq!(poll_interval(Some(3_600_000)), MAX_POLL_INTERVAL);
        assert_eq!(poll_interval(Some(250)), Duration::from_millis(250));
        assert_eq!(poll_interval(None), DEFAULT_POLL_INTERVAL);
    }

    #[test]
    fn task_ref_round_trips_and_hides_its_id() {
        let mut task = TaskRef::new("secret-id");
        task.set_poll_interval_ms(Some(200));
        let text = serde_json::to_string(&task).unwrap();
        assert_eq!(text, r#"{"taskId":"secret-id","pollIntervalMs":200}"#);
        assert_eq!(serde_json::from_str::<TaskRef>(&text).unwrap(), task);
        assert!(!format!("{task:?}").contains("secret-id"));
    }

    #[test]
    fn a_failed_task_carries_its_error() {
        let snapshot = TaskSnapshot::from_json(&json!({
            "taskId": "t", "status": "failed", "statusMessage": "boom",
            "error": {"code": -32000, "message": "backend down", "data": {"retry": true}},
        }))
        .unwrap();
        let error = snapshot.error.unwrap();
        assert_eq!((error.code(), error.message()), (-32000, "backend down"));
        assert_eq!(error.data(), Some(&json!({"retry": true})));
        assert!(TaskSnapshot::from_json(&json!({"taskId": "t", "status": "odd"})).is_err());
    }
}
