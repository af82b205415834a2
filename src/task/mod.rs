//! The task record, its identifier and its state machine.
//!
//! Every store keeps [`TaskRecord`]s and changes them only through
//! [`TaskRecord::apply`], a pure function of the record, a [`Transition`] and the
//! current time. Stores differ only in how they make that read-modify-write atomic,
//! so all of them behave the same by construction.
//!
//! Here: who a task belongs to ([`Principal`], [`Scope`]) and why its work ends
//! ([`TaskEnd`]). The record and its state machine are in `record.rs`, the id in
//! `id.rs`, time in `time.rs`, and the JSON a task is written as in `json.rs`.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

mod id;
mod json;
mod json_2025;
mod record;
mod time;

pub use id::TaskId;
pub(crate) use json::TaskJson;
pub(crate) use json_2025::{status_2025, task_2025, task_2025_with};
pub use record::{Applied, ErrorObject, TaskRecord, TaskStatus, Transition};
pub(crate) use time::Rfc3339;
pub use time::Timestamp;

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

    /// How many values share this principal's text, so that an intern table can
    /// drop the names only it still holds.
    pub(crate) fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
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
/// [`Tasks::ended`](crate::worker::Tasks::ended) reports it.
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

#[cfg(test)]
mod tests;
