//! The crate's errors in code: configuration errors at build time, store errors,
//! the state machine's refusals, and what worker calls fail with. JSON-RPC errors
//! on the wire are [`RpcError`](crate::wire::RpcError), in [`wire`](crate::wire).
//!
//! Each error's `Display` says what went wrong at its own level; the cause, when
//! there is one, comes from [`source`](std::error::Error::source), so a reporter
//! that walks the chain prints every level once.
//!
//! ```
//! use mcp_tasks::error::{StoreError, TaskError};
//! use mcp_tasks::error::TransitionError;
//!
//! let refused = TaskError::from(TransitionError::Terminal);
//! assert!(refused.is_terminal());
//! let failed = TaskError::from(StoreError::Backend("connection reset".into()));
//! assert_eq!(failed.to_string(), "the task store failed");
//! let cause = std::error::Error::source(&failed).unwrap();
//! assert_eq!(cause.to_string(), "the task store backend failed");
//! assert_eq!(cause.source().unwrap().to_string(), "connection reset");
//! ```

use std::fmt;
use std::time::Duration;

/// A boxed error, as tower uses: the cause inside [`StoreError::Backend`], and the
/// error type the layer's bodies report.
///
/// ```
/// use mcp_tasks::error::BoxError;
///
/// fn parse(text: &str) -> Result<u64, BoxError> {
///     Ok(text.parse::<u64>()?)
/// }
/// assert_eq!(parse("42").unwrap(), 42);
/// assert!(parse("x").is_err());
/// ```
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A setting is out of range; reported when the layer or a store is built, never at
/// request time.
///
/// ```
/// use mcp_tasks::{MemoryStore, TasksLayer};
/// use mcp_tasks::error::ConfigError;
///
/// let refused = TasksLayer::builder(MemoryStore::new()).with_max_rows(0).build();
/// assert_eq!(refused.unwrap_err(), ConfigError::ZeroLimit("max_rows"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A limit that must be positive was zero.
    ZeroLimit(&'static str),
    /// A duration that must be positive was zero.
    ZeroDuration(&'static str),
    /// A duration is longer than the layer accepts (what the wire can carry or the
    /// specification allows): the setting, and the longest accepted.
    TooLarge {
        /// The setting, as its setter names it.
        setting: &'static str,
        /// The longest value accepted.
        max: Duration,
    },
    /// A duration is shorter than the layer accepts: the setting, and the shortest
    /// accepted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let refused = TasksLayer::builder(MemoryStore::new())
    ///     .with_worker_lease(Duration::from_millis(10))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(
    ///     refused,
    ///     ConfigError::TooSmall { setting: "worker lease", min: Duration::from_millis(100) }
    /// );
    /// assert_eq!(refused.to_string(), "mcp-tasks: worker lease must be at least 100 ms");
    /// ```
    TooSmall {
        /// The setting, as its setter names it.
        setting: &'static str,
        /// The shortest value accepted.
        min: Duration,
    },
    /// The server name given for `serverInfo` is empty.
    EmptyServerName,
    /// A name (a table, a key prefix) is not one the backend accepts, with the rule.
    InvalidName(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroLimit(what) => write!(f, "mcp-tasks: {what} must be at least 1"),
            ConfigError::ZeroDuration(what) => {
                write!(f, "mcp-tasks: {what} must be longer than zero")
            }
            ConfigError::TooLarge { setting, max } => {
                write!(f, "mcp-tasks: {setting} must be at most {}", Spoken(*max))
            }
            ConfigError::TooSmall { setting, min } => {
                write!(f, "mcp-tasks: {setting} must be at least {}", Spoken(*min))
            }
            ConfigError::EmptyServerName => f.write_str("mcp-tasks: the server name is empty"),
            ConfigError::InvalidName(rule) => write!(f, "mcp-tasks: invalid name: {rule}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A duration as a person writes it: `100 ms`, `15 s`, `1 h`.
struct Spoken(Duration);

impl fmt::Display for Spoken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 && d.as_secs() > 0 {
            let secs = d.as_secs();
            if secs.is_multiple_of(3600) {
                write!(f, "{} h", secs / 3600)
            } else {
                write!(f, "{secs} s")
            }
        } else if d.subsec_nanos().is_multiple_of(1_000_000) {
            write!(f, "{} ms", d.as_millis())
        } else {
            write!(f, "{d:?}")
        }
    }
}

/// Which cap a refused `create` hit: carried by [`StoreError::LimitReached`], and
/// sent to the client as `error.data.limit` of the -32603 "Task limit reached".
///
/// ```
/// use mcp_tasks::error::StoreError;
/// use mcp_tasks::error::Limit;
///
/// let refused = StoreError::LimitReached(Limit::PerOwner);
/// assert_eq!(refused.to_string(), "task limit reached");
/// assert_eq!(Limit::PerOwner.as_str(), "per_owner");
/// assert_eq!(Limit::Rows.as_str(), "rows");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// The store holds `max_rows` records.
    Rows,
    /// The record's owner (or the anonymous owner) holds `max_per_owner` records.
    PerOwner,
    /// The owner's records take
    /// [`max_bytes_per_owner`](crate::TasksLayerBuilder::with_max_bytes_per_owner)
    /// bytes already: the layer's refusal, from the owner's stored bytes
    /// ([`TaskStore::owner_bytes`](crate::store::TaskStore::owner_bytes)).
    BytesPerOwner,
}

impl Limit {
    /// The name sent in `error.data.limit`: `"rows"`, `"per_owner"` or
    /// `"bytes_per_owner"`.
    ///
    /// ```
    /// assert_eq!(mcp_tasks::error::Limit::Rows.as_str(), "rows");
    /// assert_eq!(mcp_tasks::error::Limit::BytesPerOwner.as_str(), "bytes_per_owner");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Rows => "rows",
            Limit::PerOwner => "per_owner",
            Limit::BytesPerOwner => "bytes_per_owner",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A store operation failed.
///
/// ```
/// use mcp_tasks::error::StoreError;
///
/// let e = StoreError::Backend("pool timed out".into());
/// assert_eq!(e.to_string(), "the task store backend failed");
/// assert_eq!(std::error::Error::source(&e).unwrap().to_string(), "pool timed out");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// `create` hit a cap: the row cap ([`Limit::Rows`]) or the per-owner cap
    /// ([`Limit::PerOwner`]); or the layer refused a write because the task's owner
    /// stores too many bytes ([`Limit::BytesPerOwner`]).
    LimitReached(Limit),
    /// A task with this id already exists.
    Duplicate,
    /// A compare-and-swap lost too many times in a row.
    Contention,
    /// The backend failed; the cause is its [`source`](std::error::Error::source).
    Backend(BoxError),
    /// The store does not implement this call (named): a store of your own that
    /// leaves out an optional one, such as
    /// [`TaskStore::list`](crate::store::TaskStore::list).
    Unsupported(&'static str),
}

impl StoreError {
    /// Wraps a backend's own error, keeping it as the cause (its
    /// [`source`](std::error::Error::source)). The layer logs it and answers the
    /// client a generic -32603.
    ///
    /// ```
    /// use mcp_tasks::error::StoreError;
    ///
    /// let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "pool timed out");
    /// let e = StoreError::backend(io);
    /// assert!(matches!(e, StoreError::Backend(_)));
    /// assert_eq!(std::error::Error::source(&e).unwrap().to_string(), "pool timed out");
    /// ```
    pub fn backend(error: impl Into<BoxError>) -> Self {
        StoreError::Backend(error.into())
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreError::LimitReached(_) => "task limit reached",
            StoreError::Duplicate => "a task with this id already exists",
            StoreError::Contention => "too much contention on one task",
            StoreError::Backend(_) => "the task store backend failed",
            StoreError::Unsupported(_) => "the task store does not support this call",
        })
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Backend(e) => Some(&**e),
            _ => None,
        }
    }
}

/// The text was not a task id this crate could have issued.
///
/// ```
/// use mcp_tasks::TaskId;
/// use mcp_tasks::error::InvalidTaskId;
///
/// assert_eq!("not-an-id".parse::<TaskId>(), Err(InvalidTaskId));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTaskId;

impl fmt::Display for InvalidTaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a valid task id")
    }
}

impl std::error::Error for InvalidTaskId {}

/// Why the state machine refused a transition.
///
/// ```
/// use mcp_tasks::store::{Timestamp, Transition};
/// use mcp_tasks::error::TransitionError;
/// use mcp_tasks::{TaskId, TaskRecord};
///
/// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
/// task.apply(&Transition::Cancel, Timestamp::now()).unwrap();
/// let late = Transition::Progress { message: "still going".into() };
/// assert_eq!(task.apply(&late, Timestamp::now()), Err(TransitionError::Terminal));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransitionError {
    /// The task is already `completed`, `failed` or `cancelled`.
    Terminal,
    /// Input keys that were issued before in this task's life.
    DuplicateKeys(Vec<String>),
    /// A malformed value, with the reason.
    Invalid(&'static str),
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionError::Terminal => f.write_str("the task is already in a terminal state"),
            TransitionError::DuplicateKeys(keys) => {
                write!(
                    f,
                    "input keys already used by this task: {}",
                    keys.join(", ")
                )
            }
            TransitionError::Invalid(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for TransitionError {}

/// What a worker call on [`Tasks`](crate::worker::Tasks) can fail with.
///
/// ```
/// use mcp_tasks::error::TaskError;
/// use mcp_tasks::error::TransitionError;
///
/// fn describe(e: &TaskError) -> &'static str {
///     match e {
///         TaskError::NotFound => "gone",
///         TaskError::Refused(TransitionError::Terminal) => "already finished",
///         TaskError::Refused(_) => "refused",
///         TaskError::Store(_) => "store down",
///         _ => "other",
///     }
/// }
/// assert_eq!(describe(&TransitionError::Terminal.into()), "already finished");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum TaskError {
    /// No such task (or it expired).
    NotFound,
    /// The state machine refused the change; the reason is the source.
    Refused(TransitionError),
    /// The store failed; the cause is the source.
    Store(StoreError),
}

impl TaskError {
    /// Whether the task was already `completed`, `failed` or `cancelled`: terminal
    /// states are final. The same as matching
    /// `TaskError::Refused(TransitionError::Terminal)`.
    ///
    /// ```
    /// use mcp_tasks::error::TaskError;
    /// use mcp_tasks::error::TransitionError;
    ///
    /// assert!(TaskError::Refused(TransitionError::Terminal).is_terminal());
    /// assert!(!TaskError::NotFound.is_terminal());
    /// ```
    pub fn is_terminal(&self) -> bool {
        matches!(self, TaskError::Refused(TransitionError::Terminal))
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskError::NotFound => "task not found",
            TaskError::Refused(_) => "the task refused the change",
            TaskError::Store(_) => "the task store failed",
        })
    }
}

impl std::error::Error for TaskError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TaskError::NotFound => None,
            TaskError::Refused(e) => Some(e),
            TaskError::Store(e) => Some(e),
        }
    }
}

impl From<StoreError> for TaskError {
    fn from(e: StoreError) -> Self {
        TaskError::Store(e)
    }
}

impl From<TransitionError> for TaskError {
    fn from(e: TransitionError) -> Self {
        TaskError::Refused(e)
    }
}

/// An error and each of its causes, joined by `": "`: what the layer's own logs
/// print, so that a store failure names its cause and not only its top level.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn no_level_repeats_its_cause() {
        let e = TaskError::from(StoreError::backend("disk full"));
        let mut chain = vec![e.to_string()];
        let mut source = e.source();
        while let Some(s) = source {
            chain.push(s.to_string());
            source = s.source();
        }
        assert_eq!(
            chain,
            [
                "the task store failed",
                "the task store backend failed",
                "disk full"
            ]
        );
        let refused = TaskError::from(TransitionError::DuplicateKeys(vec!["a".into()]));
        assert!(!refused.to_string().contains("input keys"));
        assert!(refused.source().unwrap().to_string().ends_with(": a"));
    }

    #[test]
    fn a_chain_prints_every_level_once() {
        let e = TaskError::from(StoreError::backend("connection refused"));
        assert_eq!(
            Chain(&e).to_string(),
            "the task store failed: the task store backend failed: connection refused"
        );
        assert_eq!(Chain(&TaskError::NotFound).to_string(), "task not found");
    }
}
