//! The task record, its identifier and its state machine.
//!
//! Every store keeps [`TaskRecord`]s and changes them only through
//! [`TaskRecord::apply`], a pure function of the record, a [`Transition`] and the
//! current time. Stores differ only in how they make that read-modify-write atomic,
//! so all of them behave the same by construction.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{InvalidTaskId, TransitionError};
use crate::wire::{RpcError, write_value};

/// An unguessable task identifier: 32 bytes from the operating system's CSPRNG.
///
/// The id is the only thing standing between a task and anyone who learns it, so it
/// behaves like a secret: its `Debug` output is redacted and the crate never logs it.
/// Its text form (`Display`, `FromStr`, serde) is 43 characters of base64url, safe to
/// carry in an `Mcp-Name` header as is.
///
/// ```
/// use mcp_tasks::TaskId;
///
/// let id = TaskId::random();
/// let text = id.to_string();
/// assert_eq!(text.len(), TaskId::LEN);
/// assert_eq!(text.parse::<TaskId>(), Ok(id));
/// assert_eq!(format!("{id:?}"), "TaskId(<redacted>)");
/// assert!("not-an-id".parse::<TaskId>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId([u8; TaskId::BYTES]);

impl TaskId {
    /// Number of random bytes behind an id (32).
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// assert_eq!(TaskId::random().as_bytes().len(), TaskId::BYTES);
    /// ```
    pub const BYTES: usize = 32;
    /// Length of an id in its text form (43: base64url, no padding).
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// assert_eq!(TaskId::random().to_string().len(), TaskId::LEN);
    /// ```
    pub const LEN: usize = 43;

    /// Draws a fresh id from the operating system's random source.
    ///
    /// # Panics
    ///
    /// Panics only if the operating system cannot provide randomness at all, in which
    /// case no id could be safe.
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// assert_ne!(TaskId::random(), TaskId::random());
    /// ```
    pub fn random() -> Self {
        use rand::TryRng as _;
        let mut bytes = [0u8; Self::BYTES];
        rand::rngs::SysRng
            .try_fill_bytes(&mut bytes)
            .expect("the operating system's random source is unavailable");
        TaskId(bytes)
    }

    /// The raw random bytes, for stores that key on binary values.
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// let id = TaskId::random();
    /// let key: Vec<u8> = id.as_bytes().to_vec(); // e.g. a `bytea` primary key
    /// assert_eq!(key.len(), 32);
    /// ```
    pub fn as_bytes(&self) -> &[u8; Self::BYTES] {
        &self.0
    }

    /// Rebuilds an id from the bytes returned by [`TaskId::as_bytes`].
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    ///
    /// let id = TaskId::random();
    /// assert_eq!(TaskId::from_bytes(*id.as_bytes()), id);
    /// ```
    pub fn from_bytes(bytes: [u8; Self::BYTES]) -> Self {
        TaskId(bytes)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TaskId(<redacted>)")
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; Self::LEN];
        let n = URL_SAFE_NO_PAD
            .encode_slice(self.0, &mut buf)
            .map_err(|_| fmt::Error)?;
        f.write_str(std::str::from_utf8(&buf[..n]).map_err(|_| fmt::Error)?)
    }
}

impl FromStr for TaskId {
    type Err = InvalidTaskId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != Self::LEN {
            return Err(InvalidTaskId);
        }
        let mut bytes = [0u8; Self::BYTES + 2];
        match URL_SAFE_NO_PAD.decode_slice(s, &mut bytes) {
            Ok(Self::BYTES) => {
                let mut id = [0u8; Self::BYTES];
                id.copy_from_slice(&bytes[..Self::BYTES]);
                Ok(TaskId(id))
            }
            _ => Err(InvalidTaskId),
        }
    }
}

impl Serialize for TaskId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The authenticated identity a task belongs to.
///
/// An authentication layer in front of [`TasksLayer`](crate::TasksLayer) inserts it
/// into the request's extensions; the layer reads it from there unless configured
/// otherwise with [`TasksLayerBuilder::with_principal`](crate::TasksLayerBuilder::with_principal).
/// A request without one is anonymous, and sees only tasks made anonymously.
///
/// ```
/// use mcp_tasks::Principal;
///
/// // In an authentication middleware, once the token checks out:
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(Principal::from("user-42"));
/// assert_eq!(request.extensions().get::<Principal>().unwrap().as_str(), "user-42");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Principal(Arc<str>);

impl Principal {
    /// Wraps an identity (a user id, a client id, a tenant-qualified name, …). Two
    /// principals are the same owner exactly when their text is equal.
    ///
    /// ```
    /// use mcp_tasks::Principal;
    ///
    /// let tenant = "acme";
    /// let user = Principal::new(format!("{tenant}/alice"));
    /// assert_eq!(user, Principal::from("acme/alice"));
    /// ```
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Principal(id.into())
    }

    /// The identity as text.
    ///
    /// ```
    /// use mcp_tasks::Principal;
    ///
    /// assert_eq!(Principal::from("alice").as_str(), "alice");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Principal").field(&&*self.0).finish()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Principal {
    fn from(value: &str) -> Self {
        Principal::new(value)
    }
}

impl From<String> for Principal {
    fn from(value: String) -> Self {
        Principal::new(value)
    }
}

/// Who may see a task in a store call: its owner, or anyone (server-side callers).
///
/// `Owner(None)` is an unauthenticated caller; it sees only tasks created without a
/// principal.
///
/// ```
/// use mcp_tasks::Principal;
/// use mcp_tasks::store::Scope;
///
/// let alice = Principal::from("alice");
/// assert!(Scope::Owner(Some(&alice)).permits(Some(&alice)));
/// assert!(!Scope::Owner(None).permits(Some(&alice))); // anonymous sees only anonymous tasks
/// assert!(Scope::Any.permits(None));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Only a task whose owner equals this one.
    Owner(Option<&'a Principal>),
    /// Any task: for workers and the layer's own bookkeeping, never for clients.
    Any,
}

impl Scope<'_> {
    /// Whether a task owned by `owner` is visible in this scope.
    ///
    /// ```
    /// use mcp_tasks::Principal;
    /// use mcp_tasks::store::Scope;
    ///
    /// let (alice, bob) = (Principal::from("alice"), Principal::from("bob"));
    /// assert!(!Scope::Owner(Some(&bob)).permits(Some(&alice)));
    /// ```
    pub fn permits(&self, owner: Option<&Principal>) -> bool {
        match self {
            Scope::Any => true,
            Scope::Owner(me) => *me == owner,
        }
    }
}

/// Why a task no longer needs its worker, as
/// [`Tasks::cancelled`](crate::worker::Tasks::cancelled) reports it.
///
/// ```
/// use mcp_tasks::worker::TaskEnd;
///
/// fn log_line(end: TaskEnd) -> &'static str {
///     match end {
///         TaskEnd::Cancelled => "stopped: the client cancelled",
///         TaskEnd::Gone => "stopped: the task expired",
///         _ => "stopped: the task ended elsewhere",
///     }
/// }
/// assert_eq!(log_line(TaskEnd::Gone), "stopped: the task expired");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskEnd {
    /// The client cancelled it (`tasks/cancel`, on any node).
    Cancelled,
    /// It completed (its result was stored, by this worker or another).
    Completed,
    /// It failed (by its worker, or because its worker was lost).
    Failed,
    /// It expired (its TTL ran out) or was removed.
    Gone,
}

/// A point in time, in milliseconds since the Unix epoch.
///
/// Stores receive the current time as an argument so that tests control it.
///
/// ```
/// use mcp_tasks::store::Timestamp;
///
/// let created = Timestamp::from_millis(1_785_578_400_000);
/// let expires = created.plus_ms(3_600_000);
/// assert!(expires > created);
/// assert_eq!(expires.to_rfc3339(), "2026-08-01T11:00:00.000Z");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The time `ms` milliseconds after the Unix epoch.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// assert_eq!(Timestamp::from_millis(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
    /// ```
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch (what the SQL store keeps in `expires_at`).
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// assert_eq!(Timestamp::from_millis(1_234).as_millis(), 1_234);
    /// ```
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// This time minus `ms` milliseconds, saturating at the epoch.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// let now = Timestamp::from_millis(10_000);
    /// assert_eq!(now.minus_ms(4_000), Timestamp::from_millis(6_000));
    /// assert_eq!(now.minus_ms(u64::MAX), Timestamp::from_millis(0));
    /// ```
    pub fn minus_ms(self, ms: u64) -> Self {
        Timestamp(self.0.saturating_sub(ms))
    }

    /// The current wall-clock time.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// assert!(Timestamp::now() > Timestamp::from_millis(1_700_000_000_000)); // after 2023
    /// ```
    pub fn now() -> Self {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Timestamp(ms)
    }

    /// This time plus `ms` milliseconds, saturating.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// assert_eq!(Timestamp::from_millis(1).plus_ms(2), Timestamp::from_millis(3));
    /// assert_eq!(Timestamp::from_millis(1).plus_ms(u64::MAX).as_millis(), u64::MAX);
    /// ```
    pub fn plus_ms(self, ms: u64) -> Self {
        Timestamp(self.0.saturating_add(ms))
    }

    /// ISO 8601 / RFC 3339 in UTC with millisecond precision, e.g.
    /// `2026-08-01T10:00:00.000Z`: the form of `createdAt` and `lastUpdatedAt`.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    ///
    /// let t = Timestamp::from_millis(1_785_578_400_123);
    /// assert_eq!(t.to_rfc3339(), "2026-08-01T10:00:00.123Z");
    /// ```
    pub fn to_rfc3339(self) -> String {
        Rfc3339(self).to_string()
    }
}

/// A [`Timestamp`] displayed as RFC 3339, written without an intermediate string.
#[derive(Clone, Copy)]
pub(crate) struct Rfc3339(pub(crate) Timestamp);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.0 % 1000;
        match time::OffsetDateTime::from_unix_timestamp((self.0.0 / 1000) as i64) {
            Ok(t) => write!(
                f,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{millis:03}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
            ),
            Err(_) => f.write_str("9999-12-31T23:59:59.999Z"),
        }
    }
}

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

    /// The DetailedTask JSON of this record: what `tasks/get` returns (without
    /// `resultType`) and what `notifications/tasks` carries.
    ///
    /// `ttlMs` is always present (`null` when unlimited); every other absent field is
    /// left out, never `null`.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    /// use mcp_tasks::{TaskId, TaskRecord};
    ///
    /// let task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    /// let json = task.to_detailed_json();
    /// assert!(json["ttlMs"].is_null());
    /// assert!(!json.contains_key("statusMessage") && !json.contains_key("result"));
    /// ```
    pub fn to_detailed_json(&self) -> Map<String, Value> {
        TaskJson::detailed(self).to_map()
    }

    /// [`to_detailed_json`](Self::to_detailed_json) for a record the caller no longer
    /// needs.
    ///
    /// ```
    /// use mcp_tasks::store::{Timestamp, Transition};
    /// use mcp_tasks::{TaskId, TaskRecord};
    /// use serde_json::json;
    ///
    /// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    /// let done = Transition::Complete { result: json!({"content": []}), message: None };
    /// task.apply(&done, Timestamp::now()).unwrap();
    /// let json = task.into_detailed_json();
    /// assert_eq!(json["status"], "completed");
    /// assert_eq!(json["result"], json!({"content": []}));
    /// ```
    pub fn into_detailed_json(self) -> Map<String, Value> {
        self.to_detailed_json()
    }

    /// The task fields common to every status: the body of a `CreateTaskResult`
    /// (without `resultType`).
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    /// use mcp_tasks::{TaskId, TaskRecord};
    ///
    /// let id = TaskId::random();
    /// let json = TaskRecord::new(id, None, Timestamp::from_millis(0)).to_summary_json();
    /// assert_eq!(json["taskId"], id.to_string());
    /// assert_eq!(json["createdAt"], "1970-01-01T00:00:00.000Z");
    /// for key in ["status", "lastUpdatedAt", "ttlMs"] {
    ///     assert!(json.contains_key(key));
    /// }
    /// ```
    pub fn to_summary_json(&self) -> Map<String, Value> {
        TaskJson::summary(self).to_map()
    }
}

/// The JSON of a task, serialized straight from the record: the one definition of
/// which fields a `CreateTaskResult`, a `tasks/get` result and a
/// `notifications/tasks` carry. Writing it needs no intermediate map or string.
///
/// `ttlMs` is always present (`null` when unlimited); every other absent field is
/// left out, never `null`.
#[derive(Clone, Copy)]
pub(crate) struct TaskJson<'a> {
    task: &'a TaskRecord,
    /// With the status's detail: `inputRequests`, `result` or `error`.
    detailed: bool,
    /// `resultType`, first, when the JSON is a whole result.
    result_type: Option<&'static str>,
    /// `_meta` with the server's info, when the JSON is a whole result.
    server_info: Option<&'a Value>,
}

impl<'a> TaskJson<'a> {
    pub(crate) fn summary(task: &'a TaskRecord) -> Self {
        TaskJson {
            task,
            detailed: false,
            result_type: None,
            server_info: None,
        }
    }

    pub(crate) fn detailed(task: &'a TaskRecord) -> Self {
        TaskJson {
            detailed: true,
            ..TaskJson::summary(task)
        }
    }

    /// As a whole result: `resultType` first and `_meta` with `server_info`, if any.
    pub(crate) fn as_result(
        self,
        result_type: &'static str,
        server_info: Option<&'a Value>,
    ) -> Self {
        TaskJson {
            result_type: Some(result_type),
            server_info,
            ..self
        }
    }

    fn to_map(self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("a task serializes as an object with string keys"),
        }
    }
}

impl TaskJson<'_> {
    /// Writes the same JSON as serializing `self` with serde_json, byte for byte,
    /// straight into `out`: the fixed keys as literal bytes, the id, status and
    /// timestamps without formatting machinery; only the free-form values
    /// (`statusMessage`, `inputRequests`, `result`, `error`, `_meta`) go through
    /// serde_json's writer.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        let task = self.task;
        out.push(b'{');
        if let Some(result_type) = self.result_type {
            out.extend_from_slice(b"\"resultType\":");
            write_value(out, result_type);
            out.push(b',');
        }
        out.extend_from_slice(b"\"taskId\":\"");
        let mut id = [0u8; TaskId::LEN];
        let n = URL_SAFE_NO_PAD
            .encode_slice(task.id.0, &mut id)
            .unwrap_or(0);
        out.extend_from_slice(&id[..n]);
        out.extend_from_slice(b"\",\"status\":\"");
        out.extend_from_slice(task.status.as_str().as_bytes());
        out.push(b'"');
        if let Some(message) = &task.status_message {
            out.extend_from_slice(b",\"statusMessage\":");
            write_value(out, message);
        }
        out.extend_from_slice(b",\"createdAt\":\"");
        write_rfc3339(out, task.created_at);
        out.extend_from_slice(b"\",\"lastUpdatedAt\":\"");
        write_rfc3339(out, task.updated_at);
        out.extend_from_slice(b"\",\"ttlMs\":");
        write_value(out, &task.ttl_ms);
        if let Some(poll) = task.poll_interval_ms {
            out.extend_from_slice(b",\"pollIntervalMs\":");
            write_value(out, &poll);
        }
        if self.detailed {
            match task.status {
                TaskStatus::InputRequired => {
                    out.extend_from_slice(b",\"inputRequests\":");
                    write_value(out, &task.input_requests);
                }
                TaskStatus::Completed => {
                    if let Some(result) = &task.result {
                        out.extend_from_slice(b",\"result\":");
                        write_value(out, result);
                    }
                }
                TaskStatus::Failed => {
                    out.extend_from_slice(b",\"error\":");
                    match &task.error {
                        Some(error) => write_value(out, error),
                        None => write_value(
                            out,
                            &ErrorObject::new(RpcError::INTERNAL_ERROR, "Task failed"),
                        ),
                    }
                }
                TaskStatus::Working | TaskStatus::Cancelled => {}
            }
        }
        if let Some(info) = self.server_info {
            out.extend_from_slice(b",\"_meta\":");
            write_value(out, &crate::wire::ServerInfoMeta(info));
        }
        out.push(b'}');
    }
}

/// The latest instant [`Rfc3339`] writes as a date: 9999-12-31T23:59:59.999Z.
const LAST_RFC3339_MS: u64 = 253_402_300_799_999;

/// Appends [`Rfc3339`]'s text for `t`, computed from the civil calendar without
/// `fmt` (the same text, tested against it).
fn write_rfc3339(out: &mut Vec<u8>, t: Timestamp) {
    let ms = t.0.min(LAST_RFC3339_MS);
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, of_day) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a proleptic Gregorian date (Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let digits = |out: &mut Vec<u8>, value: u64, width: u32| {
        for place in (0..width).rev() {
            out.push(b'0' + (value / 10u64.pow(place) % 10) as u8);
        }
    };
    digits(out, year, 4);
    out.push(b'-');
    digits(out, month, 2);
    out.push(b'-');
    digits(out, day, 2);
    out.push(b'T');
    digits(out, of_day / 3_600, 2);
    out.push(b':');
    digits(out, of_day / 60 % 60, 2);
    out.push(b':');
    digits(out, of_day % 60, 2);
    out.push(b'.');
    digits(out, millis, 3);
    out.push(b'Z');
}

/// Serializes through `Display`, with no intermediate string.
struct Displayed<T>(T);

impl<T: fmt::Display> Serialize for Displayed<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl Serialize for TaskJson<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let task = self.task;
        let mut map = serializer.serialize_map(None)?;
        if let Some(result_type) = self.result_type {
            map.serialize_entry("resultType", result_type)?;
        }
        map.serialize_entry("taskId", &Displayed(task.id))?;
        map.serialize_entry("status", task.status.as_str())?;
        if let Some(message) = &task.status_message {
            map.serialize_entry("statusMessage", message)?;
        }
        map.serialize_entry("createdAt", &Displayed(Rfc3339(task.created_at)))?;
        map.serialize_entry("lastUpdatedAt", &Displayed(Rfc3339(task.updated_at)))?;
        map.serialize_entry("ttlMs", &task.ttl_ms)?;
        if let Some(poll) = task.poll_interval_ms {
            map.serialize_entry("pollIntervalMs", &poll)?;
        }
        if self.detailed {
            match task.status {
                TaskStatus::InputRequired => {
                    map.serialize_entry("inputRequests", &task.input_requests)?;
                }
                TaskStatus::Completed => {
                    if let Some(result) = &task.result {
                        map.serialize_entry("result", result)?;
                    }
                }
                TaskStatus::Failed => match &task.error {
                    Some(error) => map.serialize_entry("error", error)?,
                    None => map.serialize_entry(
                        "error",
                        &ErrorObject::new(RpcError::INTERNAL_ERROR, "Task failed"),
                    )?,
                },
                TaskStatus::Working | TaskStatus::Cancelled => {}
            }
        }
        if let Some(info) = self.server_info {
            map.serialize_entry("_meta", &crate::wire::ServerInfoMeta(info))?;
        }
        map.end()
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record() -> TaskRecord {
        TaskRecord::new(TaskId::random(), None, Timestamp(1_000))
    }

    fn form(message: &str) -> Value {
        json!({"method":"elicitation/create","params":{"mode":"form","message":message,
            "requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}})
    }

    fn requests(keys: &[&str]) -> Map<String, Value> {
        keys.iter().map(|k| (k.to_string(), form(k))).collect()
    }

    #[test]
    fn ids_are_43_url_safe_chars_and_round_trip() {
        let id = TaskId::random();
        let text = id.to_string();
        assert_eq!(text.len(), TaskId::LEN);
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(text.parse::<TaskId>().unwrap(), id);
        assert_ne!(TaskId::random(), id);
    }

    #[test]
    fn id_debug_is_redacted() {
        let id = TaskId::random();
        let debug = format!("{id:?} {:?}", Some(id));
        assert!(!debug.contains(&id.to_string()));
        assert!(debug.contains("redacted"));
    }

    #[test]
    fn malformed_ids_are_rejected() {
        for bad in ["", "abc", &"a".repeat(44), &"!".repeat(43), &"A".repeat(42)] {
            assert!(bad.parse::<TaskId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn timestamps_format_as_rfc3339_millis() {
        assert_eq!(
            Timestamp(1_785_578_400_123).to_rfc3339(),
            "2026-08-01T10:00:00.123Z"
        );
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn timestamps_written_by_hand_match_their_display() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut times = vec![
            0,
            999,
            1_000,
            86_399_999,
            951_782_400_000,   // 2000-02-29
            4_107_542_400_000, // 2100-03-01
            LAST_RFC3339_MS - 1_000,
            LAST_RFC3339_MS,
            LAST_RFC3339_MS + 1,
            u64::MAX,
        ];
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            times.push(seed % (LAST_RFC3339_MS + 10_000));
        }
        for ms in times {
            let mut out = Vec::new();
            write_rfc3339(&mut out, Timestamp(ms));
            assert_eq!(
                std::str::from_utf8(&out).unwrap(),
                Rfc3339(Timestamp(ms)).to_string(),
                "{ms}"
            );
        }
    }

    #[test]
    fn task_json_written_by_hand_matches_serde_byte_for_byte() {
        let info = json!({"name": "srv", "version": "1.0"});
        let mut records = Vec::new();
        let mut task = TaskRecord::new(TaskId::random(), None, Timestamp(1_785_578_400_123));
        records.push(task.clone());
        task.ttl_ms = Some(60_000);
        task.poll_interval_ms = Some(250);
        task.status_message = Some("quote \" backslash \\ tab \t \u{1} é \u{2028} 😀".into());
        records.push(task.clone());
        let mut asking = task.clone();
        asking
            .apply(
                &Transition::RequireInput {
                    requests: requests(&["a", "b\"c"]),
                    message: None,
                },
                Timestamp(1_785_578_400_500),
            )
            .unwrap();
        records.push(asking);
        let mut done = task.clone();
        done.apply(
            &Transition::Complete {
                result: json!({"content": [{"type": "text", "text": "x\ny"}], "n": 1.5e300}),
                message: None,
            },
            Timestamp(1_785_578_401_000),
        )
        .unwrap();
        records.push(done);
        let mut failed = task.clone();
        failed
            .apply(
                &Transition::Fail {
                    error: ErrorObject::new(-32603, "boom").with_data(json!({"why": [1, 2]})),
                    message: None,
                },
                Timestamp(1_785_578_401_000),
            )
            .unwrap();
        records.push(failed.clone());
        failed.error = None;
        records.push(failed);
        let mut cancelled = task.clone();
        cancelled
            .apply(&Transition::Cancel, Timestamp(u64::MAX))
            .unwrap();
        records.push(cancelled);
        for record in &records {
            let forms = [
                TaskJson::summary(record),
                TaskJson::detailed(record),
                TaskJson::detailed(record).as_result("complete", None),
                TaskJson::summary(record).as_result("task", Some(&info)),
                TaskJson::detailed(record).as_result("complete", Some(&info)),
            ];
            for form in forms {
                let mut out = Vec::new();
                form.write_json(&mut out);
                assert_eq!(
                    std::str::from_utf8(&out).unwrap(),
                    serde_json::to_string(&form).unwrap()
                );
            }
        }
    }

    #[test]
    fn detailed_json_always_has_ttl_and_omits_absent_fields() {
        let mut task = record();
        let json = Value::Object(task.to_detailed_json());
        assert_eq!(json["ttlMs"], Value::Null);
        assert!(json.as_object().unwrap().contains_key("ttlMs"));
        for absent in [
            "statusMessage",
            "pollIntervalMs",
            "result",
            "error",
            "inputRequests",
        ] {
            assert!(json.get(absent).is_none(), "{absent}");
        }
        task.ttl_ms = Some(60_000);
        task.poll_interval_ms = Some(500);
        let json = Value::Object(task.to_detailed_json());
        assert_eq!(json["ttlMs"], 60_000);
        assert_eq!(json["pollIntervalMs"], 500);
        assert_eq!(json["status"], "working");
    }

    #[test]
    fn terminal_states_are_final() {
        let mut task = record();
        let done = Transition::Complete {
            result: json!({"content": []}),
            message: None,
        };
        assert_eq!(task.apply(&done, Timestamp(2_000)), Ok(Applied::Changed));
        let revision = task.revision;
        for t in [
            done.clone(),
            Transition::Fail {
                error: ErrorObject::new(-32603, "x"),
                message: None,
            },
            Transition::Progress {
                message: "x".into(),
            },
            Transition::RequireInput {
                requests: requests(&["a"]),
                message: None,
            },
        ] {
            assert_eq!(
                task.apply(&t, Timestamp(3_000)),
                Err(TransitionError::Terminal)
            );
        }
        assert_eq!(
            task.apply(&Transition::Cancel, Timestamp(3_000)),
            Ok(Applied::Unchanged)
        );
        assert_eq!(task.status, TaskStatus::Completed);
        assert_eq!(task.revision, revision);
    }

    #[test]
    fn partial_answers_keep_input_required_until_all_keys_are_answered() {
        let mut task = record();
        task.apply(
            &Transition::RequireInput {
                requests: requests(&["a", "b"]),
                message: Some("Delete a.txt and b.txt?".into()),
            },
            Timestamp(2_000),
        )
        .unwrap();
        let answer = |key: &str| Transition::Answer {
            responses: [(key.to_string(), json!({"action":"accept"}))]
                .into_iter()
                .collect(),
        };
        assert_eq!(
            task.apply(&answer("zzz"), Timestamp(2_100)),
            Ok(Applied::Unchanged)
        );
        assert_eq!(
            task.apply(&answer("a"), Timestamp(2_200)),
            Ok(Applied::Changed)
        );
        assert_eq!(task.status, TaskStatus::InputRequired);
        assert!(task.input_requests.contains_key("b"));
        assert!(!task.input_requests.contains_key("a"));
        // Still waiting: the question stays the status message.
        assert_eq!(
            task.status_message.as_deref(),
            Some("Delete a.txt and b.txt?")
        );
        assert_eq!(
            task.apply(&answer("a"), Timestamp(2_300)),
            Ok(Applied::Unchanged)
        );
        task.apply(&answer("b"), Timestamp(2_400)).unwrap();
        assert_eq!(task.status, TaskStatus::Working);
        assert_eq!(task.status_message, None, "the answered question is gone");
        assert_eq!(task.input_responses.len(), 2);
        assert_eq!(task.updated_at, Timestamp(2_400));
    }

    #[test]
    fn input_keys_are_single_use_for_the_whole_life() {
        let mut task = record();
        let ask = |keys: &[&str]| Transition::RequireInput {
            requests: requests(keys),
            message: None,
        };
        task.apply(&ask(&["a"]), Timestamp(2)).unwrap();
        assert_eq!(
            task.apply(&ask(&["a", "b"]), Timestamp(3)),
            Err(TransitionError::DuplicateKeys(vec!["a".into()]))
        );
        assert!(!task.input_requests.contains_key("b"));
    }

    #[test]
    fn malformed_input_requests_are_rejected() {
        let mut task = record();
        for bad in [
            Map::new(),
            [("k".to_string(), json!("text"))].into_iter().collect(),
            [("k".to_string(), json!({"method":"tools/call"}))]
                .into_iter()
                .collect(),
            [("k".to_string(), json!({"method":"roots/list","id":1}))]
                .into_iter()
                .collect(),
        ] {
            let t = Transition::RequireInput {
                requests: bad,
                message: None,
            };
            assert!(matches!(
                task.apply(&t, Timestamp(2)),
                Err(TransitionError::Invalid(_))
            ));
        }
        assert_eq!(task.status, TaskStatus::Working);
        assert_eq!(task.revision, 0);
    }

    #[test]
    fn failed_tasks_carry_error_and_never_result() {
        let mut task = record();
        task.apply(
            &Transition::Fail {
                error: ErrorObject::new(-32603, "backend crashed"),
                message: None,
            },
            Timestamp(5),
        )
        .unwrap();
        let json = Value::Object(task.to_detailed_json());
        assert_eq!(json["error"]["code"], -32603);
        assert_eq!(json["statusMessage"], "Task failed");
        assert!(json.get("result").is_none());
    }

    #[test]
    fn scopes_separate_owners() {
        let alice = Principal::from("alice");
        let bob = Principal::from("bob");
        assert!(Scope::Owner(Some(&alice)).permits(Some(&alice)));
        assert!(!Scope::Owner(Some(&bob)).permits(Some(&alice)));
        assert!(!Scope::Owner(None).permits(Some(&alice)));
        assert!(!Scope::Owner(Some(&alice)).permits(None));
        assert!(Scope::Owner(None).permits(None));
        assert!(Scope::Any.permits(Some(&alice)));
    }
}
