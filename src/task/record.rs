//! The record a store keeps ([`TaskRecord`]), where it stands ([`TaskStatus`]),
//! the changes it takes ([`Transition`]) and the one pure state machine that applies
//! them ([`TaskRecord::apply`]).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Principal, Scope, TaskId, Timestamp};
use crate::error::TransitionError;
use crate::wire::RpcError;

/// Where a task stands. The last three are terminal: once reached, never left.
///
/// ```text
/// working ──> input_required ──> working      (any number of rounds)
/// working | input_required ──> completed | failed | cancelled   (final)
/// ```
///
/// ```
/// use mcp_tasks::TaskStatus;
///
/// assert_eq!(TaskStatus::InputRequired.as_str(), "input_required");
/// assert!(TaskStatus::Cancelled.is_terminal());
/// assert_eq!(serde_json::to_string(&TaskStatus::Working).unwrap(), r#""working""#);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The work is running.
    Working,
    /// The work waits for the client to answer `inputRequests` with `tasks/update`.
    InputRequired,
    /// The work finished with a result (a tool result, `isError: true` included).
    Completed,
    /// The work ended with a JSON-RPC error.
    Failed,
    /// The client cancelled the task.
    Cancelled,
}

impl TaskStatus {
    /// Whether the status is final (`completed`, `failed` or `cancelled`).
    ///
    /// ```
    /// use mcp_tasks::TaskStatus;
    ///
    /// assert!(TaskStatus::Completed.is_terminal());
    /// assert!(!TaskStatus::InputRequired.is_terminal());
    /// ```
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// The wire name (`"working"`, `"input_required"`, …), also its `Display`.
    ///
    /// ```
    /// use mcp_tasks::TaskStatus;
    ///
    /// assert_eq!(TaskStatus::Failed.as_str(), "failed");
    /// assert_eq!(TaskStatus::Failed.to_string(), "failed");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A JSON-RPC error object as carried by a `failed` task (its `error` field).
///
/// ```
/// use mcp_tasks::wire::RpcError;
/// use mcp_tasks::store::ErrorObject;
///
/// let error = ErrorObject::from(RpcError::internal("backend crashed"));
/// assert_eq!((error.code, error.message.as_str()), (-32603, "backend crashed"));
/// assert_eq!(serde_json::to_value(&error).unwrap()["code"], -32603); // no `data`: left out
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The JSON-RPC error code.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Optional structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with a code and a message.
    ///
    /// ```
    /// use mcp_tasks::store::ErrorObject;
    ///
    /// let error = ErrorObject::new(-32603, "the build server is unreachable");
    /// assert_eq!(error.data, None);
    /// ```
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Adds structured detail (`data`).
    ///
    /// ```
    /// use mcp_tasks::store::ErrorObject;
    /// use serde_json::json;
    ///
    /// let error = ErrorObject::new(-32603, "upstream failed").with_data(json!({"status": 502}));
    /// assert_eq!(error.data.unwrap()["status"], 502);
    /// ```
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

impl From<RpcError> for ErrorObject {
    fn from(error: RpcError) -> Self {
        ErrorObject {
            code: error.code(),
            message: error.message().to_owned(),
            data: error.data().cloned(),
        }
    }
}

/// One stored task: everything `tasks/get` reports plus the private bookkeeping.
///
/// Stores persist records (they are `serde` types) and change them only through
/// [`TaskRecord::apply`].
///
/// ```
/// use mcp_tasks::store::{Timestamp, Transition};
/// use mcp_tasks::{Principal, TaskId, TaskRecord, TaskStatus};
///
/// let now = Timestamp::from_millis(1_785_578_400_000);
/// let mut task = TaskRecord::new(TaskId::random(), Some(Principal::from("alice")), now);
/// task.ttl_ms = Some(60_000);
/// task.apply(&Transition::Progress { message: "Half way".into() }, now.plus_ms(10)).unwrap();
/// assert_eq!((task.status, task.revision), (TaskStatus::Working, 1));
///
/// // The JSON of tasks/get (without `resultType`):
/// let json = task.to_detailed_json();
/// assert_eq!(json["statusMessage"], "Half way");
/// assert_eq!(json["ttlMs"], 60_000);
/// assert_eq!(json["lastUpdatedAt"], "2026-08-01T10:00:00.010Z");
///
/// // Stores keep the record as JSON.
/// let stored = serde_json::to_string(&task).unwrap();
/// assert_eq!(serde_json::from_str::<TaskRecord>(&stored).unwrap(), task);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TaskRecord {
    /// The task's id.
    pub id: TaskId,
    /// The principal that created it; `None` for an unauthenticated caller.
    pub owner: Option<Principal>,
    /// Where the task stands.
    pub status: TaskStatus,
    /// Human-readable status text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When the task was created.
    pub created_at: Timestamp,
    /// When the task last changed.
    pub updated_at: Timestamp,
    /// Lifetime from creation in milliseconds; `None` is unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// The tool result of a `completed` task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error of a `failed` task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
    /// The input requests still waiting for an answer, by key.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub input_requests: Map<String, Value>,
    /// Every input key ever issued for this task (keys are single-use).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub issued_keys: BTreeSet<String>,
    /// Answers collected so far, by key.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub input_responses: Map<String, Value>,
    /// Set once the client asked for cancellation.
    #[serde(default)]
    pub cancel_requested: bool,
    /// Bumped on every change; durable stores compare-and-swap on it.
    pub revision: u64,
}

impl TaskRecord {
    /// A new `working` task with no TTL, no poll interval and revision 0: what a store's
    /// `create` receives, with the fields the layer sets filled in.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    /// use mcp_tasks::{TaskId, TaskRecord, TaskStatus};
    ///
    /// let task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    /// assert_eq!((task.status, task.revision, task.ttl_ms), (TaskStatus::Working, 0, None));
    /// ```
    pub fn new(id: TaskId, owner: Option<Principal>, now: Timestamp) -> Self {
        TaskRecord {
            id,
            owner,
            status: TaskStatus::Working,
            status_message: None,
            created_at: now,
            updated_at: now,
            ttl_ms: None,
            poll_interval_ms: None,
            result: None,
            error: None,
            input_requests: Map::new(),
            issued_keys: BTreeSet::new(),
            input_responses: Map::new(),
            cancel_requested: false,
            revision: 0,
        }
    }

    /// When the task stops existing, if its lifetime is bounded: `created_at + ttl`.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    /// use mcp_tasks::{TaskId, TaskRecord};
    ///
    /// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(1_000));
    /// assert_eq!(task.expires_at(), None);
    /// task.ttl_ms = Some(500);
    /// assert_eq!(task.expires_at(), Some(Timestamp::from_millis(1_500)));
    /// ```
    pub fn expires_at(&self) -> Option<Timestamp> {
        self.ttl_ms.map(|ttl| self.created_at.plus_ms(ttl))
    }

    /// Whether the task has outlived its TTL at `now`; expired tasks read as absent.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    /// use mcp_tasks::{TaskId, TaskRecord};
    ///
    /// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(1_000));
    /// task.ttl_ms = Some(500);
    /// assert!(!task.is_expired(Timestamp::from_millis(1_499)));
    /// assert!(task.is_expired(Timestamp::from_millis(1_500)));
    /// ```
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at().is_some_and(|at| at <= now)
    }

    /// Whether a read in `scope` at `now` sees the record: its owner is visible in
    /// the scope and it has not expired. Every store reads through this rule.
    ///
    /// ```
    /// use mcp_tasks::store::{Scope, Timestamp};
    /// use mcp_tasks::{Principal, TaskId, TaskRecord};
    ///
    /// let alice = Principal::from("alice");
    /// let now = Timestamp::now();
    /// let task = TaskRecord::new(TaskId::random(), Some(alice.clone()), now);
    /// assert!(task.is_visible(Scope::Owner(Some(&alice)), now));
    /// assert!(!task.is_visible(Scope::Owner(None), now)); // reads exactly like a missing id
    /// assert!(task.is_visible(Scope::Any, now));
    /// ```
    pub fn is_visible(&self, scope: Scope<'_>, now: Timestamp) -> bool {
        scope.permits(self.owner.as_ref()) && !self.is_expired(now)
    }

    /// When a record without a TTL became terminal: the time its retention counts
    /// from. `None` for a record with a TTL (it expires instead) or still running.
    ///
    /// ```
    /// use mcp_tasks::store::{Timestamp, Transition};
    /// use mcp_tasks::{TaskId, TaskRecord};
    ///
    /// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(1_000));
    /// assert_eq!(task.retired_at(), None);
    /// task.apply(&Transition::Cancel, Timestamp::from_millis(2_000)).unwrap();
    /// assert_eq!(task.retired_at(), Some(Timestamp::from_millis(2_000)));
    /// ```
    pub fn retired_at(&self) -> Option<Timestamp> {
        (self.ttl_ms.is_none() && self.status.is_terminal()).then_some(self.updated_at)
    }

    /// Applies a transition under the state machine's rules.
    ///
    /// Returns whether the record changed. A rejected transition leaves the record as
    /// it was. On a change, `updated_at` becomes `now` and `revision` goes up by one.
    ///
    /// ```
    /// use mcp_tasks::store::{Applied, Timestamp, Transition};
    /// use mcp_tasks::error::TransitionError;
    /// use mcp_tasks::{TaskId, TaskRecord, TaskStatus};
    /// use serde_json::json;
    ///
    /// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(0));
    /// let done = Transition::Complete { result: json!({"content": []}), message: None };
    /// assert_eq!(task.apply(&done, Timestamp::from_millis(5)), Ok(Applied::Changed));
    /// assert_eq!(task.status, TaskStatus::Completed);
    /// // Terminal is final; a cancel of a finished task changes nothing.
    /// assert_eq!(task.apply(&done, Timestamp::from_millis(6)), Err(TransitionError::Terminal));
    /// assert_eq!(task.apply(&Transition::Cancel, Timestamp::from_millis(7)), Ok(Applied::Unchanged));
    /// assert_eq!(task.revision, 1);
    /// ```
    pub fn apply(
        &mut self,
        transition: &Transition,
        now: Timestamp,
    ) -> Result<Applied, TransitionError> {
        let terminal = self.status.is_terminal();
        match transition {
            Transition::Progress { message } => {
                if terminal {
                    return Err(TransitionError::Terminal);
                }
                self.status_message = Some(message.clone());
            }
            Transition::RequireInput { requests, message } => {
                if terminal {
                    return Err(TransitionError::Terminal);
                }
                validate_input_requests(requests)?;
                let reused: Vec<String> = requests
                    .keys()
                    .filter(|k| self.issued_keys.contains(*k))
                    .cloned()
                    .collect();
                if !reused.is_empty() {
                    return Err(TransitionError::DuplicateKeys(reused));
                }
                for (key, request) in requests {
                    self.issued_keys.insert(key.clone());
                    self.input_requests.insert(key.clone(), request.clone());
                }
                self.status = TaskStatus::InputRequired;
                if message.is_some() {
                    self.status_message = message.clone();
                }
            }
            Transition::Complete { result, message } => {
                if terminal {
                    return Err(TransitionError::Terminal);
                }
                if !result.is_object() {
                    return Err(TransitionError::Invalid(
                        "a task result must be a JSON object",
                    ));
                }
                self.status = TaskStatus::Completed;
                self.result = Some(result.clone());
                self.input_requests.clear();
                // Progress text describes work in flight; a finished task keeps only
                // the message its ending gave.
                self.status_message = message.clone();
            }
            Transition::Fail { error, message } => {
                if terminal {
                    return Err(TransitionError::Terminal);
                }
                self.status = TaskStatus::Failed;
                self.error = Some(error.clone());
                self.input_requests.clear();
                self.status_message =
                    Some(message.clone().unwrap_or_else(|| "Task failed".to_owned()));
            }
            Transition::Answer { responses } => {
                if self.status != TaskStatus::InputRequired {
                    return Ok(Applied::Unchanged);
                }
                // Check every answer before taking any: a refused batch changes nothing.
                if responses.iter().any(|(key, response)| {
                    self.input_requests.contains_key(key) && !response.is_object()
                }) {
                    return Err(TransitionError::Invalid(
                        "each input response must be a JSON object",
                    ));
                }
                let mut answered = false;
                for (key, response) in responses {
                    if !self.input_requests.contains_key(key) {
                        continue;
                    }
                    self.input_requests.remove(key);
                    self.input_responses.insert(key.clone(), response.clone());
                    answered = true;
                }
                if !answered {
                    return Ok(Applied::Unchanged);
                }
                if self.input_requests.is_empty() {
                    self.status = TaskStatus::Working;
                    // The message described the wait (a question's text, often);
                    // the work says what it does next.
                    self.status_message = None;
                }
            }
            Transition::Cancel => {
                if terminal {
                    return Ok(Applied::Unchanged);
                }
                self.status = TaskStatus::Cancelled;
                self.cancel_requested = true;
                self.input_requests.clear();
                self.status_message = Some("Cancelled by the client".to_owned());
            }
        }
        self.updated_at = now.max(self.updated_at);
        self.revision += 1;
        Ok(Applied::Changed)
    }
}

/// A change to a task, applied atomically by the store through [`TaskRecord::apply`].
///
/// The layer makes `Answer` (from `tasks/update`) and `Cancel` (from `tasks/cancel`);
/// the worker API ([`Tasks`](crate::worker::Tasks)) makes the others, and
/// [`Tasks::apply`](crate::worker::Tasks::apply) takes any of them.
///
/// ```
/// use mcp_tasks::store::{Timestamp, Transition};
/// use mcp_tasks::{TaskId, TaskRecord, TaskStatus};
/// use serde_json::json;
///
/// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
/// let ask = Transition::RequireInput {
///     requests: json!({"ok": {"method": "roots/list"}}).as_object().unwrap().clone(),
///     message: Some("Which folder?".into()),
/// };
/// task.apply(&ask, Timestamp::now()).unwrap();
/// assert_eq!(task.status, TaskStatus::InputRequired);
/// let answer = Transition::Answer {
///     responses: json!({"ok": {"roots": []}}).as_object().unwrap().clone(),
/// };
/// task.apply(&answer, Timestamp::now()).unwrap();
/// assert_eq!(task.status, TaskStatus::Working);
/// assert_eq!(task.status_message, None); // "Which folder?" was answered
/// assert_eq!(task.input_responses["ok"], json!({"roots": []}));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Transition {
    /// New status text; the status stays.
    Progress {
        /// The new status text.
        message: String,
    },
    /// Asks the client for input; the task becomes `input_required`.
    RequireInput {
        /// New input requests by key; keys must never have been issued before.
        requests: Map<String, Value>,
        /// Optional status text while the task waits (without it, the task keeps
        /// its current one); cleared with the last answer.
        message: Option<String>,
    },
    /// Finishes with a result.
    Complete {
        /// The tool result (a JSON object).
        result: Value,
        /// Optional status text.
        message: Option<String>,
    },
    /// Finishes with a JSON-RPC error.
    Fail {
        /// The error.
        error: ErrorObject,
        /// Optional status text (default "Task failed").
        message: Option<String>,
    },
    /// A client's `tasks/update`: answers for outstanding keys; others are ignored.
    /// Once none is outstanding the task is `working` again, without a status
    /// message: the one it had described the wait.
    Answer {
        /// Answers by key.
        responses: Map<String, Value>,
    },
    /// A client's `tasks/cancel`; a terminal task stays as it is.
    Cancel,
}

/// Whether a transition changed the record: a store writes (and announces) the
/// record only on [`Changed`](Applied::Changed).
///
/// ```
/// use mcp_tasks::store::{Applied, Timestamp, Transition};
/// use mcp_tasks::{TaskId, TaskRecord};
/// use serde_json::Map;
///
/// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
/// // An answer while no question is outstanding is ignored.
/// let answer = Transition::Answer { responses: Map::new() };
/// assert_eq!(task.apply(&answer, Timestamp::now()), Ok(Applied::Unchanged));
/// assert_eq!(task.apply(&Transition::Cancel, Timestamp::now()), Ok(Applied::Changed));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The record changed and was written.
    Changed,
    /// Nothing to do (an ignored answer, a cancel of a terminal task).
    Unchanged,
}

const INPUT_METHODS: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];

fn validate_input_requests(requests: &Map<String, Value>) -> Result<(), TransitionError> {
    if requests.is_empty() {
        return Err(TransitionError::Invalid(
            "input requests must name at least one key",
        ));
    }
    for (key, request) in requests {
        if key.is_empty() {
            return Err(TransitionError::Invalid("input keys must not be empty"));
        }
        let Some(object) = request.as_object() else {
            return Err(TransitionError::Invalid(
                "an input request must be an object",
            ));
        };
        let method = object.get("method").and_then(Value::as_str);
        if !method.is_some_and(|m| INPUT_METHODS.contains(&m)) {
            return Err(TransitionError::Invalid(
                "an input request's method must be elicitation/create, sampling/createMessage or roots/list",
            ));
        }
        if object.keys().any(|k| k != "method" && k != "params") {
            return Err(TransitionError::Invalid(
                "an input request carries only method and params",
            ));
        }
        if object.get("params").is_some_and(|p| !p.is_object()) {
            return Err(TransitionError::Invalid(
                "an input request's params must be an object",
            ));
        }
    }
    Ok(())
}
