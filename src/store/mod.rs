// The module's page (choosing a store, several nodes, worker leases, failures,
// writing a store) is long enough to live in its own file.
#![doc = include_str!("docs.md")]

use std::collections::HashSet;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;
pub use crate::task::{Applied, ErrorObject, Scope, Timestamp, Transition};
use crate::task::{Principal, TaskId, TaskRecord};

mod calls;
mod compact;
#[cfg(any(feature = "postgres", feature = "redis"))]
mod connect;
mod feed;
mod janitor;
mod lease;
pub(crate) mod memory;
mod owned;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) mod retry;
pub(crate) mod rules;
mod values;

pub(crate) use calls::StoreCalls;
pub use feed::{ChangeFeed, ChangeSender, FEED_CAPACITY, FeedEvent};
pub use janitor::Janitor;
pub(crate) use lease::RENEW_BATCH;
pub use lease::{LeaseId, LeaseState, LeaseStore, MemoryLeases, NodeId, Renewal, Renewed};
pub use rules::retention_cutoff;
pub use values::{Budgeted, Clock, CreateLimits, ListFrom, ListPage, Updated, encoded_len};
pub(crate) use values::{COUNT_SLACK, json_len};
// The in-file tests name the memory store from here; everyone else from the root.
#[cfg(test)]
pub(crate) use memory::MemoryStore;

/// A boxed, sendable future: what [`TaskStore`] methods return, so the trait stays
/// object safe.
///
/// An implementation wraps its `async` block in `Box::pin`:
///
/// ```
/// use mcp_tasks::error::StoreError;
/// use mcp_tasks::store::BoxFuture;
///
/// fn count<'a>(rows: &'a [u32]) -> BoxFuture<'a, Result<usize, StoreError>> {
///     Box::pin(async move { Ok(rows.len()) })
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(count(&[1, 2, 3]).await.unwrap(), 3);
/// # }
/// ```
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Storage for task records.
///
/// Implement it for a database to make tasks durable or shared between nodes; run
/// `mcp_tasks::task_store_tests!` (feature `test-util`) against the implementation.
///
/// Every method returns a [`BoxFuture`], so the trait is object safe and needs no
/// macro. A store that wraps the memory store and counts the writes made through it:
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
/// use mcp_tasks::store::{BoxFuture, ChangeFeed, CreateLimits, Scope, Timestamp, Transition, Updated};
/// use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
/// use mcp_tasks::error::StoreError;
/// use mcp_tasks::store::TaskStore;
///
/// #[derive(Debug, Default)]
/// struct CountingStore {
///     inner: MemoryStore,
///     writes: AtomicUsize,
/// }
///
/// impl TaskStore for CountingStore {
///     fn create<'a>(
///         &'a self,
///         record: TaskRecord,
///         limits: CreateLimits,
///     ) -> BoxFuture<'a, Result<(), StoreError>> {
///         Box::pin(async move {
///             self.inner.create(record, limits).await?;
///             self.writes.fetch_add(1, Ordering::Relaxed);
///             Ok(())
///         })
///     }
///
///     fn get<'a>(
///         &'a self,
///         id: &'a TaskId,
///         scope: Scope<'a>,
///         now: Timestamp,
///     ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
///         self.inner.get(id, scope, now)
///     }
///
///     fn update<'a>(
///         &'a self,
///         id: &'a TaskId,
///         scope: Scope<'a>,
///         transition: &'a Transition,
///         now: Timestamp,
///     ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
///         Box::pin(async move {
///             let updated = self.inner.update(id, scope, transition, now).await?;
///             if updated.as_ref().is_some_and(Updated::changed) {
///                 self.writes.fetch_add(1, Ordering::Relaxed);
///             }
///             Ok(updated)
///         })
///     }
///
///     fn cleanup<'a>(
///         &'a self,
///         now: Timestamp,
///         retention: Duration,
///     ) -> BoxFuture<'a, Result<usize, StoreError>> {
///         Box::pin(async move {
///             let removed = self.inner.cleanup(now, retention).await?;
///             tracing::debug!(removed, "swept");
///             Ok(removed)
///         })
///     }
///
///     fn subscribe(&self) -> Option<ChangeFeed> {
///         self.inner.subscribe() // `None`: one process, nothing to hear from other nodes
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = CountingStore::default();
/// let id = TaskId::random();
/// store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
/// let found = store.get(&id, Scope::Any, Timestamp::now()).await?;
/// assert_eq!(found.map(|task| task.id), Some(id));
/// assert_eq!(store.writes.load(Ordering::Relaxed), 1);
///
/// let layer = TasksLayer::new(store); // or `Arc<dyn TaskStore>`
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
pub trait TaskStore: std::fmt::Debug + Send + Sync + 'static {
    /// Inserts a new record, enforcing `limits` atomically with the insert
    /// ([`StoreError::LimitReached`] with the [`Limit`](crate::error::Limit) hit when full; records
    /// expired at `record.created_at`, and records retired past
    /// [`CreateLimits::retention`], do not count). Returns once `get` would find it.
    /// An id already stored is [`StoreError::Duplicate`].
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Scope, Timestamp, Transition};
    /// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let id = TaskId::random();
    /// let limits = CreateLimits::new(Some(10_000), None);
    /// store.create(TaskRecord::new(id, None, Timestamp::now()), limits).await?;
    /// let again = store.create(TaskRecord::new(id, None, Timestamp::now()), limits).await;
    /// assert!(matches!(again, Err(mcp_tasks::error::StoreError::Duplicate)));
    /// # Ok(())
    /// # }
    /// ```
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The record, if it exists, has not expired at `now`, and is visible in `scope`.
    /// `Ok(None)` otherwise: missing, expired and foreign read the same.
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Scope, Timestamp, Transition};
    /// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let id = TaskId::random();
    /// let mut record = TaskRecord::new(id, None, Timestamp::from_millis(1_000));
    /// record.ttl_ms = Some(1_000);
    /// store.create(record, CreateLimits::default()).await?;
    /// assert!(store.get(&id, Scope::Any, Timestamp::from_millis(1_999)).await?.is_some());
    /// assert!(store.get(&id, Scope::Any, Timestamp::from_millis(2_000)).await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;

    /// [`get`](Self::get) answered at once, without a future, by a store that
    /// never waits to read (one that keeps its records in memory); `None` to have
    /// the caller await `get`, which the default does. The layer tries it first on
    /// every read, so a `tasks/get` from memory makes no boxed future.
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Scope, Timestamp};
    /// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let id = TaskId::random();
    /// store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
    /// let now = store.get_now(&id, Scope::Any, Timestamp::now());
    /// assert!(matches!(now, Some(Ok(Some(_)))));
    /// # Ok(())
    /// # }
    /// ```
    fn get_now(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        now: Timestamp,
    ) -> Option<Result<Option<TaskRecord>, StoreError>> {
        let _ = (id, scope, now);
        None
    }

    /// The ids among `ids` whose records exist, have not expired at `now`, and are
    /// visible in `scope`, in the order given, each once: what `get` would find, for
    /// many ids at once, without the records (see [`get_many`](Self::get_many) for
    /// them).
    ///
    /// The default calls [`get`](Self::get) for each id in turn; a store over a
    /// network overrides it with one round trip (the built-in stores do).
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Scope, Timestamp};
    /// use mcp_tasks::{MemoryStore, Principal, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let alice = Principal::from("alice");
    /// let now = Timestamp::now();
    /// let mine = TaskRecord::new(TaskId::random(), Some(alice.clone()), now);
    /// let theirs = TaskRecord::new(TaskId::random(), None, now);
    /// let (a, b) = (mine.id, theirs.id);
    /// store.create(mine, CreateLimits::default()).await?;
    /// store.create(theirs, CreateLimits::default()).await?;
    /// let unknown = TaskId::random();
    /// let ids = [unknown, b, a, a];
    /// assert_eq!(store.visible(&ids, Scope::Owner(Some(&alice)), now).await?, vec![a]);
    /// assert_eq!(store.visible(&ids, Scope::Any, now).await?, vec![b, a]);
    /// # Ok(())
    /// # }
    /// ```
    fn visible<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>> {
        Box::pin(async move {
            let mut found = Vec::new();
            each_found(self, ids, scope, now, |record| {
                found.push(record.id);
                ControlFlow::Continue(())
            })
            .await?;
            Ok(found)
        })
    }

    /// The records among `ids` that exist, have not expired at `now`, and are visible
    /// in `scope`, in the order given, each once: what `get` would return, for many
    /// ids at once. The layer reads the snapshot of one `subscriptions/listen` (up to
    /// 1 000 ids, owner-scoped) and the tasks other nodes changed with one call.
    ///
    /// The default calls [`get`](Self::get) for each id in turn, one round trip
    /// each; a store over a network overrides it with one round trip (the built-in
    /// stores do).
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Scope, Timestamp};
    /// use mcp_tasks::{MemoryStore, Principal, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let alice = Principal::from("alice");
    /// let now = Timestamp::now();
    /// let mine = TaskRecord::new(TaskId::random(), Some(alice.clone()), now);
    /// let theirs = TaskRecord::new(TaskId::random(), None, now);
    /// let (a, b) = (mine.id, theirs.id);
    /// store.create(mine, CreateLimits::default()).await?;
    /// store.create(theirs, CreateLimits::default()).await?;
    /// let ids = [TaskId::random(), b, a, a];
    /// let owned = store.get_many(&ids, Scope::Owner(Some(&alice)), now).await?;
    /// assert_eq!(owned.iter().map(|r| r.id).collect::<Vec<_>>(), vec![a]);
    /// let any = store.get_many(&ids, Scope::Any, now).await?;
    /// assert_eq!(any.iter().map(|r| r.id).collect::<Vec<_>>(), vec![b, a]);
    /// # Ok(())
    /// # }
    /// ```
    fn get_many<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let mut found = Vec::new();
            each_found(self, ids, scope, now, |record| {
                found.push(record);
                ControlFlow::Continue(())
            })
            .await?;
            Ok(found)
        })
    }

    /// [`get_many`](Self::get_many) within a byte budget: the records found, unless
    /// their encoded size together passes `budget` ([`Budgeted::OverBudget`], with
    /// no record). The layer reads the snapshot of a `subscriptions/listen` with it,
    /// the budget being what the principal's listen streams may still hold, so a
    /// listen that is going to be refused never brings more than that into memory.
    ///
    /// A record's encoded size is the length of its JSON, [`encoded_len`], which
    /// is what `PostgresStore` and `RedisStore` keep; a store may count more for a
    /// record (an upper bound), never less. Only the records `get_many` would return
    /// count: foreign, expired and unknown ids cost nothing. A store should find
    /// out before it fetches a record whether it fits (the built-in stores do, on
    /// the server for the shared ones), and must never hold more than `budget` plus
    /// one record for the read.
    ///
    /// The default reads the ids one [`get`](Self::get) at a time and stops at the
    /// first record that passes the budget; a store that overrides `get_many` with
    /// one round trip should override this too (the built-in stores do).
    ///
    /// ```
    /// use mcp_tasks::store::{Budgeted, CreateLimits, Scope, Timestamp, encoded_len};
    /// use mcp_tasks::{MemoryStore, Principal, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let alice = Principal::from("alice");
    /// let now = Timestamp::now();
    /// let mut big = TaskRecord::new(TaskId::random(), Some(alice.clone()), now);
    /// big.status_message = Some("x".repeat(64 * 1024));
    /// let ids = [big.id];
    /// let size = encoded_len(&big);
    /// store.create(big, CreateLimits::default()).await?;
    /// let mine = Scope::Owner(Some(&alice));
    /// let read = store.get_many_within(&ids, mine, now, 2 * size).await?;
    /// assert!(matches!(read, Budgeted::Within(records) if records.len() == 1));
    /// let read = store.get_many_within(&ids, mine, now, size / 2).await?;
    /// assert_eq!(read, Budgeted::OverBudget);
    /// // Another caller's read finds nothing, so nothing counts against its budget.
    /// let read = store.get_many_within(&ids, Scope::Owner(None), now, 0).await?;
    /// assert_eq!(read, Budgeted::Within(Vec::new()));
    /// # Ok(())
    /// # }
    /// ```
    fn get_many_within<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
        budget: usize,
    ) -> BoxFuture<'a, Result<Budgeted, StoreError>> {
        Box::pin(async move {
            let mut found = Vec::new();
            let mut taken = 0usize;
            let read = each_found(self, ids, scope, now, |record| {
                taken = taken.saturating_add(encoded_len(&record));
                if taken > budget {
                    return ControlFlow::Break(());
                }
                found.push(record);
                ControlFlow::Continue(())
            })
            .await?;
            Ok(if read {
                Budgeted::Within(found)
            } else {
                Budgeted::OverBudget
            })
        })
    }

    /// Applies `transition` atomically with [`TaskRecord::apply`]. `Ok(None)` when the
    /// task is missing, expired or not visible in `scope`. A transition the state
    /// machine refuses is `Ok(Some(_))` with the refusal in
    /// [`Updated::outcome`] and nothing written.
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Scope, Timestamp, Transition};
    /// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let id = TaskId::random();
    /// use mcp_tasks::Principal;
    ///
    /// let alice = Principal::from("alice");
    /// store.create(TaskRecord::new(id, Some(alice.clone()), Timestamp::now()), CreateLimits::default()).await?;
    /// let cancel = Transition::Cancel;
    /// // Another caller's update finds nothing, exactly as for a missing id.
    /// assert!(store.update(&id, Scope::Owner(None), &cancel, Timestamp::now()).await?.is_none());
    /// let updated = store.update(&id, Scope::Owner(Some(&alice)), &cancel, Timestamp::now()).await?;
    /// assert!(updated.unwrap().changed());
    /// # Ok(())
    /// # }
    /// ```
    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>>;

    /// Removes records that expired at `now`, and records without a TTL that have been
    /// terminal for longer than `retention`. Returns how many were removed. The
    /// [`Janitor`] calls it on a timer.
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Scope, Timestamp, Transition};
    /// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let id = TaskId::random();
    /// use std::time::Duration;
    ///
    /// let mut record = TaskRecord::new(id, None, Timestamp::from_millis(0));
    /// record.ttl_ms = Some(10);
    /// store.create(record, CreateLimits::default()).await?;
    /// let removed = store.cleanup(Timestamp::from_millis(10), Duration::from_secs(3600)).await?;
    /// assert_eq!(removed, 1);
    /// # Ok(())
    /// # }
    /// ```
    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>>;

    /// One page of the tasks `owner` owns that have not expired at `now`, newest
    /// first (by `created_at`, then by id, larger first), starting just after
    /// `from` (at the newest when `None`), at most `limit` records. `next` is
    /// where the following page starts, `None` when this page holds the last
    /// record. The 2025-11-25 `tasks/list` reads it, so it must cost in proportion
    /// to the page, never to every stored task (the built-in stores keep an index
    /// per owner).
    ///
    /// The default is [`StoreError::Unsupported`]: a store of your own that does
    /// not list serves everything else, and a `tasks/list` gets -32603.
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Timestamp};
    /// use mcp_tasks::{MemoryStore, Principal, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let alice = Principal::from("alice");
    /// for ms in [1_000, 2_000, 3_000] {
    ///     let record = TaskRecord::new(TaskId::random(), Some(alice.clone()), Timestamp::from_millis(ms));
    ///     store.create(record, CreateLimits::default()).await?;
    /// }
    /// let now = Timestamp::from_millis(4_000);
    /// let first = store.list(Some(&alice), None, 2, now).await?;
    /// assert_eq!(first.records[0].created_at, Timestamp::from_millis(3_000));
    /// let rest = store.list(Some(&alice), first.next, 2, now).await?;
    /// assert_eq!(rest.records.len(), 1);
    /// assert!(rest.next.is_none());
    /// assert!(store.list(None, None, 2, now).await?.records.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    fn list<'a>(
        &'a self,
        owner: Option<&'a Principal>,
        from: Option<ListFrom>,
        limit: usize,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<ListPage, StoreError>> {
        let _ = (owner, from, limit, now);
        Box::pin(async { Err(StoreError::Unsupported("list")) })
    }

    /// How many bytes `owner`'s records take (`None`: the anonymous ones): the sum
    /// of their encoded sizes, [`encoded_len`], counted from the moment a write
    /// lands until the record is removed (by [`cleanup`](Self::cleanup), or by a
    /// create that prunes to make room), expired records not yet removed included.
    /// A store may count more for a record (an upper bound, at most 1 KiB over),
    /// never less. The layer
    /// reads it before a write that grows a task, to hold each principal within
    /// [`with_max_bytes_per_owner`](crate::TasksLayerBuilder::with_max_bytes_per_owner),
    /// so it must cost what reading one counter costs, never a scan of the owner's
    /// records (the built-in stores keep a count per owner, changed with each write).
    ///
    /// The default is [`StoreError::Unsupported`]: a store of your own that does not
    /// count serves everything else, and the layer then leaves the per-principal
    /// byte bound out (it says so once, in a warning).
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Scope, Timestamp, Transition, encoded_len};
    /// use mcp_tasks::{MemoryStore, Principal, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let alice = Principal::from("alice");
    /// let id = TaskId::random();
    /// store.create(TaskRecord::new(id, Some(alice.clone()), Timestamp::now()), CreateLimits::default()).await?;
    /// let done = Transition::Complete { result: json!({"text": "x".repeat(100_000)}), message: None };
    /// let task = store.update(&id, Scope::Any, &done, Timestamp::now()).await?.unwrap().record;
    /// assert!(store.owner_bytes(Some(&alice)).await? >= encoded_len(&task) as u64);
    /// assert_eq!(store.owner_bytes(None).await?, 0); // nobody else's records count
    /// # Ok(())
    /// # }
    /// ```
    fn owner_bytes<'a>(
        &'a self,
        owner: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let _ = owner;
        Box::pin(async { Err(StoreError::Unsupported("owner_bytes")) })
    }

    /// Ids of tasks changed by *other* processes sharing this store, for stores
    /// shared between nodes (`None`, the default, for a single-process store).
    ///
    /// The layer re-reads each announced task and tells its notifier and any worker
    /// waiting on it, so listen streams, `wait_for_input` and `Auto` runners on this
    /// node see changes made on another. A store should deliver, once it is back
    /// in touch with its backend, every change made while it was not (the built-in
    /// stores replay a change log). A receiver that lags skips ids, and a store
    /// that cannot catch up sends [`FeedEvent::Missed`]; the layer then wakes every
    /// waiting worker to re-read its task and re-reads the tasks of its listen
    /// streams and `Auto` runners.
    ///
    /// A shared store keeps a [`ChangeSender`], feeds it from its backend's
    /// notifications, and hands out its feeds:
    ///
    /// ```
    /// use mcp_tasks::store::{ChangeFeed, ChangeSender};
    /// use mcp_tasks::MemoryStore;
    /// use mcp_tasks::store::TaskStore;
    ///
    /// struct Shared {
    ///     changes: ChangeSender, // fed by the backend's listener with other nodes' ids
    /// }
    ///
    /// impl Shared {
    ///     fn subscribe(&self) -> Option<ChangeFeed> {
    ///         Some(self.changes.subscribe())
    ///     }
    /// }
    ///
    /// assert!(MemoryStore::new().subscribe().is_none()); // one process: nothing to hear
    /// let shared = Shared { changes: ChangeSender::default() };
    /// assert!(shared.subscribe().is_some());
    /// ```
    fn subscribe(&self) -> Option<ChangeFeed> {
        None
    }

    /// Where the layer keeps its worker leases on this store, for stores shared
    /// between nodes (`None`, the default, for a single-process store: a worker that
    /// stops there is seen at once, without a lease).
    ///
    /// With leases, a surviving node fails the unfinished tasks of a node that
    /// stopped renewing (killed, out of memory, cut off) within a bound, instead of
    /// leaving them to their TTL. `PostgresStore` and `RedisStore` keep them next to
    /// their tasks.
    ///
    /// ```
    /// use mcp_tasks::MemoryStore;
    /// use mcp_tasks::store::TaskStore;
    ///
    /// assert!(MemoryStore::new().leases().is_none()); // one process: no other node
    /// ```
    fn leases(&self) -> Option<Arc<dyn LeaseStore>> {
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

    fn get_now(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        now: Timestamp,
    ) -> Option<Result<Option<TaskRecord>, StoreError>> {
        (**self).get_now(id, scope, now)
    }

    fn visible<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>> {
        (**self).visible(ids, scope, now)
    }

    fn get_many<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>> {
        (**self).get_many(ids, scope, now)
    }

    fn get_many_within<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
        budget: usize,
    ) -> BoxFuture<'a, Result<Budgeted, StoreError>> {
        (**self).get_many_within(ids, scope, now, budget)
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

    fn list<'a>(
        &'a self,
        owner: Option<&'a Principal>,
        from: Option<ListFrom>,
        limit: usize,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<ListPage, StoreError>> {
        (**self).list(owner, from, limit, now)
    }

    fn owner_bytes<'a>(
        &'a self,
        owner: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        (**self).owner_bytes(owner)
    }

    fn subscribe(&self) -> Option<ChangeFeed> {
        (**self).subscribe()
    }

    fn leases(&self) -> Option<Arc<dyn LeaseStore>> {
        (**self).leases()
    }
}

/// Calls [`TaskStore::get`] for each of `ids` once, in order, and hands every record
/// found to `found` until it breaks: the one-round-trip-per-id reads the defaults
/// of the batched methods share. Whether every id was read (`false`: `found`
/// broke off).
async fn each_found<S: TaskStore + ?Sized>(
    store: &S,
    ids: &[TaskId],
    scope: Scope<'_>,
    now: Timestamp,
    mut found: impl FnMut(TaskRecord) -> ControlFlow<()>,
) -> Result<bool, StoreError> {
    let mut seen = HashSet::with_capacity(ids.len());
    for id in ids {
        if seen.insert(*id)
            && let Some(record) = store.get(id, scope, now).await?
            && found(record).is_break()
        {
            return Ok(false);
        }
    }
    Ok(true)
}
