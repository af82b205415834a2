//! The values the [`TaskStore`](super::TaskStore) calls take and give back: which
//! clock a store keeps, the caps a create enforces, what an update did, what a
//! budgeted read found, and how a record's size is counted.

use std::time::Duration;

use crate::error::TransitionError;
use crate::task::{Applied, TaskRecord};

/// Which clock a store decides expiry and retention by.
///
/// The layer passes its node's time as `now` to every store call and stamps new
/// records with it (`createdAt`, `lastUpdatedAt`). Nodes' clocks differ, so a store
/// shared between nodes decides *when* a record expires and when a retired record
/// may go by one clock of its own: with [`Clock::Store`], a record with a TTL
/// expires `ttl` after the store received it, by the store's clock, and a node whose
/// clock runs minutes ahead or behind neither removes other nodes' tasks early nor
/// sees expired ones again. The times shown to clients stay the nodes' own.
///
/// ```
/// use mcp_tasks::MemoryStore;
/// use mcp_tasks::store::Clock;
///
/// // One process, one clock: the memory store takes the caller's by default.
/// assert_eq!(MemoryStore::new().clock(), Clock::Caller);
/// assert_eq!(MemoryStore::new().with_clock(Clock::Store).clock(), Clock::Store);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Clock {
    /// The store's own clock: PostgreSQL's `clock_timestamp()`, Redis's `TIME`,
    /// the process's for the memory store. The `now` passed in only stamps records.
    /// The default of `PostgresStore` and `RedisStore`.
    Store,
    /// The `now` passed to each call, and a new record's `created_at`: exact for
    /// one process, and what tests that drive time with explicit timestamps need.
    /// The default of [`MemoryStore`](crate::MemoryStore).
    Caller,
}

/// Caps that `create` enforces atomically with the insert.
///
/// The layer passes its [`with_max_rows`](crate::TasksLayerBuilder::with_max_rows)
/// (default 10 000) and
/// [`with_max_tasks_per_owner`](crate::TasksLayerBuilder::with_max_tasks_per_owner)
/// (default 1 000) on every create, with its janitor's retention (default
/// [`RETENTION`](crate::defaults::RETENTION), 1 hour). Records expired at the new
/// record's `created_at` never count against either cap, nor do terminal records
/// without a TTL that retired at or before
/// [`retention_cutoff`](super::retention_cutoff)`(created_at, retention)`: the ones
/// the next sweep removes. The `Default` is no cap at all (and no retention: retired
/// records count until `cleanup` removes them).
///
/// ```
/// use mcp_tasks::store::{CreateLimits, Timestamp};
/// use mcp_tasks::error::Limit;
/// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
/// use mcp_tasks::error::StoreError;
/// use mcp_tasks::store::TaskStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let one = CreateLimits::new(Some(1), None);
/// let record = || TaskRecord::new(TaskId::random(), None, Timestamp::now());
/// store.create(record(), one).await.unwrap();
/// assert!(matches!(store.create(record(), one).await, Err(StoreError::LimitReached(Limit::Rows))));
/// assert!(store.create(record(), CreateLimits::default()).await.is_ok());
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CreateLimits {
    /// Most records the store may hold; `None` is unlimited.
    pub max_rows: Option<usize>,
    /// Most records one owner (or the anonymous owner) may hold; `None` is unlimited.
    pub max_per_owner: Option<usize>,
    /// How long a terminal record without a TTL is kept (the janitor's retention):
    /// records retired at or before
    /// [`retention_cutoff`](super::retention_cutoff)`(created_at, retention)` never
    /// count against either cap. `None`: they count until `cleanup` removes
    /// them.
    pub retention: Option<Duration>,
}

impl CreateLimits {
    /// Limits with a row cap and an optional per-owner cap (`None`: unlimited).
    ///
    /// ```
    /// use mcp_tasks::store::CreateLimits;
    ///
    /// let limits = CreateLimits::new(Some(10_000), Some(100));
    /// assert_eq!((limits.max_rows, limits.max_per_owner), (Some(10_000), Some(100)));
    /// ```
    pub fn new(max_rows: Option<usize>, max_per_owner: Option<usize>) -> Self {
        CreateLimits {
            max_rows,
            max_per_owner,
            retention: None,
        }
    }

    /// The same limits, with records retired longer than `retention` ago left out of
    /// the counts (the layer passes its janitor's retention).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::store::{CreateLimits, Timestamp, Transition};
    /// use mcp_tasks::error::Limit;
    /// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
    /// use mcp_tasks::error::StoreError;
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), StoreError> {
    /// let store = MemoryStore::new();
    /// let one = CreateLimits::new(Some(1), None).with_retention(Duration::from_secs(1));
    /// let id = TaskId::random();
    /// store.create(TaskRecord::new(id, None, Timestamp::from_millis(0)), one).await?;
    /// let cancel = Transition::Cancel;
    /// store.update(&id, mcp_tasks::store::Scope::Any, &cancel, Timestamp::from_millis(10)).await?;
    /// let next = |at| TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(at));
    /// // Still within its retention: the cancelled task keeps its row.
    /// assert!(matches!(store.create(next(1_000), one).await, Err(StoreError::LimitReached(Limit::Rows))));
    /// // Retired for longer than the retention: it no longer counts.
    /// store.create(next(1_010), one).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = Some(retention);
        self
    }
}

/// The result of a successful [`TaskStore::update`](super::TaskStore::update) on an
/// existing task.
///
/// ```
/// use mcp_tasks::store::{CreateLimits, Scope, Timestamp, Transition};
/// use mcp_tasks::error::TransitionError;
/// use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStatus};
/// use mcp_tasks::store::TaskStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
/// let store = MemoryStore::new();
/// let id = TaskId::random();
/// store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
///
/// let cancel = Transition::Cancel;
/// let updated = store.update(&id, Scope::Any, &cancel, Timestamp::now()).await?.unwrap();
/// assert!(updated.changed());
/// assert_eq!(updated.record.status, TaskStatus::Cancelled);
///
/// let late = Transition::Progress { message: "still going".into() };
/// let refused = store.update(&id, Scope::Any, &late, Timestamp::now()).await?.unwrap();
/// assert_eq!(refused.outcome, Err(TransitionError::Terminal));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Updated {
    /// The record after the transition (unchanged if it was refused or a no-op).
    pub record: TaskRecord,
    /// What the state machine said.
    pub outcome: Result<Applied, TransitionError>,
}

impl Updated {
    /// Bundles a record and the state machine's verdict: what a store's `update`
    /// returns after [`TaskRecord::apply`].
    ///
    /// ```
    /// use mcp_tasks::store::{Timestamp, Transition, Updated};
    /// use mcp_tasks::{TaskId, TaskRecord};
    ///
    /// let mut record = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    /// let outcome = record.apply(&Transition::Cancel, Timestamp::now());
    /// let updated = Updated::new(record, outcome);
    /// assert!(updated.changed());
    /// ```
    pub fn new(record: TaskRecord, outcome: Result<Applied, TransitionError>) -> Self {
        Updated { record, outcome }
    }

    /// Whether the record was written (the transition was applied and changed it).
    ///
    /// ```
    /// use mcp_tasks::store::{Applied, Timestamp, Updated};
    /// use mcp_tasks::{TaskId, TaskRecord};
    ///
    /// let record = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    /// assert!(!Updated::new(record, Ok(Applied::Unchanged)).changed());
    /// ```
    pub fn changed(&self) -> bool {
        matches!(self.outcome, Ok(Applied::Changed))
    }
}

/// What [`TaskStore::get_many_within`](super::TaskStore::get_many_within) read.
///
/// ```
/// use mcp_tasks::store::Budgeted;
///
/// /// How many bytes of the budget a read leaves, or `None` when it was over.
/// fn room_left(read: &Budgeted, budget: usize) -> Option<usize> {
///     match read {
///         Budgeted::Within(records) => {
///             let used: usize = records.iter().map(mcp_tasks::store::encoded_len).sum();
///             Some(budget - used)
///         }
///         // `OverBudget`, or an outcome a later version adds.
///         _ => None,
///     }
/// }
/// assert_eq!(room_left(&Budgeted::Within(Vec::new()), 1024), Some(1024));
/// assert_eq!(room_left(&Budgeted::OverBudget, 1024), None);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Budgeted {
    /// The records found, in the order asked, each once, exactly as
    /// [`TaskStore::get_many`](super::TaskStore::get_many) returns them; their encoded
    /// size is within the budget.
    Within(Vec<TaskRecord>),
    /// The records found pass the budget together, so none is returned: the read
    /// stopped there. Not a failure of the store; the caller decides what it means.
    OverBudget,
}

/// The encoded size of `record`: the length of its JSON (`serde_json::to_vec`),
/// counted without building it. What
/// [`TaskStore::get_many_within`](super::TaskStore::get_many_within) measures a budget
/// in.
///
/// ```
/// use mcp_tasks::store::{Timestamp, encoded_len};
/// use mcp_tasks::{TaskId, TaskRecord};
///
/// let record = TaskRecord::new(TaskId::random(), None, Timestamp::now());
/// assert_eq!(encoded_len(&record), serde_json::to_vec(&record).unwrap().len());
/// ```
pub fn encoded_len(record: &TaskRecord) -> usize {
    json_len(record)
}

/// How many bytes more than its encoded size a store may count for one record in
/// [`TaskStore::owner_bytes`](super::TaskStore::owner_bytes) (1 KiB).
pub(crate) const COUNT_SLACK: usize = 1024;

/// The length of `value`'s JSON, counted without building it.
pub(crate) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    /// A writer that keeps only the count.
    struct Count(usize);

    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let mut count = Count(0);
    // Writing to `Count` cannot fail, and the values counted always serialize.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Where a page of [`TaskStore::list`](super::TaskStore::list) starts: just after
/// the task created at `created_at` with id `id`, in the list's order (newest
/// first, and among tasks created in the same millisecond, the larger id first).
///
/// ```
/// use mcp_tasks::TaskId;
/// use mcp_tasks::store::{ListFrom, Timestamp};
///
/// let from = ListFrom { created_at: Timestamp::from_millis(1_000), id: TaskId::random() };
/// assert_eq!(from.created_at.as_millis(), 1_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListFrom {
    /// When the last task of the previous page was created.
    pub created_at: crate::task::Timestamp,
    /// That task's id.
    pub id: crate::task::TaskId,
}

impl ListFrom {
    /// Where the page after `record` starts.
    pub(crate) fn after(record: &TaskRecord) -> ListFrom {
        ListFrom {
            created_at: record.created_at,
            id: record.id,
        }
    }
}

/// One page of [`TaskStore::list`](super::TaskStore::list): the records, newest
/// first, and where the next page starts (`None` when there is no more).
///
/// ```
/// use mcp_tasks::store::ListPage;
///
/// let page = ListPage::default();
/// assert!(page.records.is_empty() && page.next.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListPage {
    /// The records of this page, newest first.
    pub records: Vec<TaskRecord>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<ListFrom>,
}

impl ListPage {
    /// The page of `records`, whose next starts after its last record when the
    /// store saw `more` beyond it.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "redis")),
        allow(dead_code, reason = "the database stores page with it")
    )]
    pub(crate) fn of(records: Vec<TaskRecord>, more: bool) -> ListPage {
        let next = more.then(|| records.last().map(ListFrom::after)).flatten();
        ListPage { records, next }
    }
}
