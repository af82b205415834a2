//! Task stores, and everything needed to write one.
//!
//! A server author picks a store ([`MemoryStore`], the default; `PostgresStore` and
//! `RedisStore` behind the `postgres` and `redis` features) and hands it to the
//! layer. A store author implements [`TaskStore`] with the types of this module:
//! the [`Transition`]s the layer asks for, applied through the one pure state
//! machine [`TaskRecord::apply`](crate::TaskRecord::apply), the [`Scope`] a read is
//! made in, the [`CreateLimits`] a create must enforce, and, for a store shared
//! between nodes, a [`ChangeFeed`].
//!
//! [`TaskStore`] is object safe (`Arc<dyn TaskStore>` works). Every store keeps the
//! same contract, checked by the public suite in `mcp_tasks::test_suite` (feature
//! `test-util`):
//!
//! - a foreign owner is indistinguishable from a missing id (`Ok(None)` for both);
//! - `update` is an atomic read-modify-write through [`TaskRecord::apply`], so
//!   terminal states never change and concurrent writers never lose an update;
//! - an expired record reads as absent everywhere; `cleanup` only frees the space;
//! - `create` returns only once `get` would find the record.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;
pub use crate::error::TransitionError;
pub use crate::task::{Applied, ErrorObject, Scope, Timestamp, Transition};
use crate::task::{TaskId, TaskRecord};

mod feed;
mod janitor;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
pub(crate) mod rules;

pub use feed::{ChangeFeed, ChangeSender, FEED_CAPACITY, FeedEvent};
pub use janitor::Janitor;
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::RedisStore;
pub use rules::retention_cutoff;

/// A boxed, sendable future: what [`TaskStore`] methods return, so the trait stays
/// object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Caps that `create` enforces atomically with the insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CreateLimits {
    /// Most records the store may hold; `None` is unlimited.
    pub max_rows: Option<usize>,
    /// Most records one owner (or the anonymous owner) may hold; `None` is unlimited.
    pub max_per_owner: Option<usize>,
}

impl CreateLimits {
    /// Limits with a row cap and an optional per-owner cap.
    pub fn new(max_rows: Option<usize>, max_per_owner: Option<usize>) -> Self {
        CreateLimits {
            max_rows,
            max_per_owner,
        }
    }
}

/// The result of a successful [`TaskStore::update`] on an existing task.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Updated {
    /// The record after the transition (unchanged if it was refused or a no-op).
    pub record: TaskRecord,
    /// What the state machine said.
    pub outcome: Result<Applied, TransitionError>,
}

impl Updated {
    /// Bundles a record and the state machine's verdict.
    pub fn new(record: TaskRecord, outcome: Result<Applied, TransitionError>) -> Self {
        Updated { record, outcome }
    }

    /// Whether the record was written.
    pub fn changed(&self) -> bool {
        matches!(self.outcome, Ok(Applied::Changed))
    }
}

/// Storage for task records.
///
/// Implement it for a database to make tasks durable or shared between nodes; run
/// `mcp_tasks::task_store_tests!` (feature `test-util`) against the implementation.
pub trait TaskStore: std::fmt::Debug + Send + Sync + 'static {
    /// Inserts a new record, enforcing `limits` atomically with the insert
    /// ([`StoreError::LimitReached`] when full). Returns once `get` would find it.
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The record, if it exists, has not expired at `now`, and is visible in `scope`.
    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;

    /// Applies `transition` atomically with [`TaskRecord::apply`]. `Ok(None)` when the
    /// task is missing, expired or not visible in `scope`.
    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>>;

    /// Removes records that expired at `now`, and records without a TTL that have been
    /// terminal for longer than `retention`. Returns how many were removed.
    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>>;

    /// Ids of tasks changed by *other* processes sharing this store, for stores
    /// shared between nodes (`None`, the default, for a single-process store).
    ///
    /// The layer re-reads each announced task and tells its notifier and any worker
    /// waiting on it, so listen streams and `wait_for_input` on this node see changes
    /// made on another. A receiver that lags skips ids; the layer then wakes every
    /// waiting worker to re-read its task, and listen streams get the next change.
    fn subscribe(&self) -> Option<ChangeFeed> {
        None
    }
}

impl<T: TaskStore + ?Sized> TaskStore for Arc<T> {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).create(record, limits)
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        (**self).get(id, scope, now)
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        (**self).update(id, scope, transition, now)
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        (**self).cleanup(now, retention)
    }

    fn subscribe(&self) -> Option<ChangeFeed> {
        (**self).subscribe()
    }
}
