//! A delegating store with hooks: everything a test needs to watch a store's calls
//! or make them fail, without writing a whole [`TaskStore`] that forwards.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;
use crate::store::{
    BoxFuture, Budgeted, ChangeFeed, CreateLimits, ListFrom, ListPage, TaskStore, Updated,
};
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};

/// One call on an [`Intercept`] store, as [`StoreHooks::before`] sees it: the
/// method and its arguments.
///
/// ```
/// use mcp_tasks::error::StoreError;
/// use mcp_tasks::store::Transition;
/// use mcp_tasks::test_suite::{StoreCall, StoreHooks};
///
/// /// A store that refuses every cancel: what a test of a cancel lost in the
/// /// store would wrap its store in.
/// #[derive(Debug)]
/// struct NoCancel;
///
/// impl StoreHooks for NoCancel {
///     fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
///         match call {
///             StoreCall::Update { transition: Transition::Cancel, .. } => {
///                 Err(StoreError::backend("cancels are down"))
///             }
///             _ => Ok(()),
///         }
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum StoreCall<'a> {
    /// [`TaskStore::create`].
    Create {
        /// The record to insert.
        record: &'a TaskRecord,
        /// The caps the insert must respect.
        limits: CreateLimits,
    },
    /// [`TaskStore::get`].
    Get {
        /// The task asked for.
        id: &'a TaskId,
        /// Who is asking.
        scope: Scope<'a>,
        /// The time of the read.
        now: Timestamp,
    },
    /// [`TaskStore::visible`].
    Visible {
        /// The tasks asked for.
        ids: &'a [TaskId],
        /// Who is asking.
        scope: Scope<'a>,
        /// The time of the read.
        now: Timestamp,
    },
    /// [`TaskStore::get_many`].
    GetMany {
        /// The tasks asked for.
        ids: &'a [TaskId],
        /// Who is asking.
        scope: Scope<'a>,
        /// The time of the read.
        now: Timestamp,
    },
    /// [`TaskStore::get_many_within`].
    GetManyWithin {
        /// The tasks asked for.
        ids: &'a [TaskId],
        /// Who is asking.
        scope: Scope<'a>,
        /// The time of the read.
        now: Timestamp,
        /// The most bytes the records found may take together.
        budget: usize,
    },
    /// [`TaskStore::update`].
    Update {
        /// The task to change.
        id: &'a TaskId,
        /// Who is asking.
        scope: Scope<'a>,
        /// The change.
        transition: &'a Transition,
        /// The time of the write.
        now: Timestamp,
    },
    /// [`TaskStore::cleanup`].
    Cleanup {
        /// The time of the sweep.
        now: Timestamp,
        /// How long terminal records without a TTL are kept.
        retention: Duration,
    },
    /// [`TaskStore::list`].
    List {
        /// Whose tasks (`None`: the anonymous ones).
        owner: Option<&'a Principal>,
        /// Where the page starts.
        from: Option<ListFrom>,
        /// The most records the page may hold.
        limit: usize,
        /// The time of the read.
        now: Timestamp,
    },
    /// [`TaskStore::owner_bytes`].
    OwnerBytes {
        /// Whose bytes (`None`: the anonymous ones).
        owner: Option<&'a Principal>,
    },
}

/// What an [`Intercept`] store does around the store it wraps. Every method has a
/// default that changes nothing, so a test writes only the hook it needs.
///
/// `()` is the empty set of hooks, and an `Arc` of hooks is hooks too, so a test
/// can keep a handle on the state its hooks record.
///
/// ```
/// use std::sync::Mutex;
/// use mcp_tasks::TaskId;
/// use mcp_tasks::error::StoreError;
/// use mcp_tasks::store::Updated;
/// use mcp_tasks::test_suite::StoreHooks;
///
/// /// Records the errors of writes, to assert on after the test.
/// #[derive(Debug, Default)]
/// struct FailedWrites(Mutex<Vec<String>>);
///
/// impl StoreHooks for FailedWrites {
///     fn after_update(&self, _id: &TaskId, result: &Result<Option<Updated>, StoreError>) {
///         if let Err(e) = result {
///             self.0.lock().unwrap().push(e.to_string());
///         }
///     }
/// }
/// ```
pub trait StoreHooks: Debug + Send + Sync + 'static {
    /// Runs before every `create`, `get`, `get_many`, `get_many_within`, `visible`,
    /// `update`, `cleanup`, `list` and `owner_bytes`. An error is the
    /// call's answer, and the wrapped store is not called at all.
    fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
        let _ = call;
        Ok(())
    }

    /// Runs once `create` of the record `id` returned `result`.
    fn after_create(&self, id: &TaskId, result: &Result<(), StoreError>) {
        let _ = (id, result);
    }

    /// Runs once `get` of `id` returned `result`.
    fn after_get(&self, id: &TaskId, result: &Result<Option<TaskRecord>, StoreError>) {
        let _ = (id, result);
    }

    /// Runs once `visible` of `ids` returned `result`.
    fn after_visible(&self, ids: &[TaskId], result: &Result<Vec<TaskId>, StoreError>) {
        let _ = (ids, result);
    }

    /// Runs once `get_many` of `ids` returned `result`.
    fn after_get_many(&self, ids: &[TaskId], result: &Result<Vec<TaskRecord>, StoreError>) {
        let _ = (ids, result);
    }

    /// Runs once `get_many_within` of `ids` returned `result`.
    fn after_get_many_within(&self, ids: &[TaskId], result: &Result<Budgeted, StoreError>) {
        let _ = (ids, result);
    }

    /// Runs once `update` of `id` returned `result`.
    fn after_update(&self, id: &TaskId, result: &Result<Option<Updated>, StoreError>) {
        let _ = (id, result);
    }

    /// Runs once `cleanup` returned `result`.
    fn after_cleanup(&self, result: &Result<usize, StoreError>) {
        let _ = result;
    }

    /// Runs once `list` returned `result`.
    fn after_list(&self, result: &Result<ListPage, StoreError>) {
        let _ = result;
    }

    /// The change feed of the intercepted store; by default the wrapped store's.
    fn subscribe(&self, store: &dyn TaskStore) -> Option<ChangeFeed> {
        store.subscribe()
    }

    /// The worker leases of the intercepted store; by default the wrapped store's.
    fn leases(&self, store: &dyn TaskStore) -> Option<Arc<dyn crate::store::LeaseStore>> {
        store.leases()
    }
}

impl StoreHooks for () {}

impl<H: StoreHooks + ?Sized> StoreHooks for Arc<H> {
    fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
        (**self).before(call)
    }

    fn after_create(&self, id: &TaskId, result: &Result<(), StoreError>) {
        (**self).after_create(id, result);
    }

    fn after_get(&self, id: &TaskId, result: &Result<Option<TaskRecord>, StoreError>) {
        (**self).after_get(id, result);
    }

    fn after_visible(&self, ids: &[TaskId], result: &Result<Vec<TaskId>, StoreError>) {
        (**self).after_visible(ids, result);
    }

    fn after_get_many(&self, ids: &[TaskId], result: &Result<Vec<TaskRecord>, StoreError>) {
        (**self).after_get_many(ids, result);
    }

    fn after_get_many_within(&self, ids: &[TaskId], result: &Result<Budgeted, StoreError>) {
        (**self).after_get_many_within(ids, result);
    }

    fn after_update(&self, id: &TaskId, result: &Result<Option<Updated>, StoreError>) {
        (**self).after_update(id, result);
    }

    fn after_cleanup(&self, result: &Result<usize, StoreError>) {
        (**self).after_cleanup(result);
    }

    fn after_list(&self, result: &Result<ListPage, StoreError>) {
        (**self).after_list(result);
    }

    fn subscribe(&self, store: &dyn TaskStore) -> Option<ChangeFeed> {
        (**self).subscribe(store)
    }

    fn leases(&self, store: &dyn TaskStore) -> Option<Arc<dyn crate::store::LeaseStore>> {
        (**self).leases(store)
    }
}

/// A [`TaskStore`] that hands every call to `store`, running `hooks` around it:
/// to count or report reads, announce writes to other nodes, make a backend fail,
/// or keep a guard alive as long as the store.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// use mcp_tasks::store::{CreateLimits, Scope, Timestamp};
/// use mcp_tasks::test_suite::{Intercept, StoreCall, StoreHooks};
/// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
/// use mcp_tasks::error::StoreError;
/// use mcp_tasks::store::TaskStore;
///
/// /// Counts reads, and fails every cleanup.
/// #[derive(Debug, Default)]
/// struct Hooks {
///     gets: AtomicUsize,
/// }
///
/// impl StoreHooks for Hooks {
///     fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
///         match call {
///             StoreCall::Get { .. } => {
///                 self.gets.fetch_add(1, Ordering::SeqCst);
///                 Ok(())
///             }
///             StoreCall::Cleanup { .. } => Err(StoreError::backend("the disk is full")),
///             _ => Ok(()),
///         }
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let hooks = Arc::new(Hooks::default());
/// let store: Arc<dyn TaskStore> = Arc::new(Intercept::new(MemoryStore::new(), hooks.clone()));
/// let now = Timestamp::now();
/// let record = TaskRecord::new(TaskId::random(), None, now);
/// store.create(record.clone(), CreateLimits::default()).await.unwrap();
/// let found = store.get(&record.id, Scope::Any, now).await.unwrap();
/// assert_eq!(found, Some(record));
/// assert_eq!(hooks.gets.load(Ordering::SeqCst), 1);
/// assert!(store.cleanup(now, std::time::Duration::ZERO).await.is_err());
///
/// // Hooks are object safe too.
/// let hooks: Arc<dyn StoreHooks> = hooks;
/// let _dynamic: Intercept<MemoryStore, Arc<dyn StoreHooks>> =
///     Intercept::new(MemoryStore::new(), hooks);
/// # });
/// ```
#[derive(Debug, Clone, Default)]
pub struct Intercept<S, H = ()> {
    store: S,
    hooks: H,
}

impl<S, H> Intercept<S, H> {
    /// `store`, with `hooks` around each of its calls.
    pub fn new(store: S, hooks: H) -> Self {
        Intercept { store, hooks }
    }

    /// The wrapped store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The hooks.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// The wrapped store and the hooks.
    pub fn into_parts(self) -> (S, H) {
        (self.store, self.hooks)
    }
}

impl<S: TaskStore, H: StoreHooks> TaskStore for Intercept<S, H> {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let id = record.id;
            self.hooks.before(StoreCall::Create {
                record: &record,
                limits,
            })?;
            let result = self.store.create(record, limits).await;
            self.hooks.after_create(&id, &result);
            result
        })
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            self.hooks.before(StoreCall::Get { id, scope, now })?;
            let result = self.store.get(id, scope, now).await;
            self.hooks.after_get(id, &result);
            result
        })
    }

    fn visible<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>> {
        Box::pin(async move {
            self.hooks.before(StoreCall::Visible { ids, scope, now })?;
            let result = self.store.visible(ids, scope, now).await;
            self.hooks.after_visible(ids, &result);
            result
        })
    }

    fn get_many<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(async move {
            self.hooks.before(StoreCall::GetMany { ids, scope, now })?;
            let result = self.store.get_many(ids, scope, now).await;
            self.hooks.after_get_many(ids, &result);
            result
        })
    }

    fn get_many_within<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
        budget: usize,
    ) -> BoxFuture<'a, Result<Budgeted, StoreError>> {
        Box::pin(async move {
            self.hooks.before(StoreCall::GetManyWithin {
                ids,
                scope,
                now,
                budget,
            })?;
            let result = self.store.get_many_within(ids, scope, now, budget).await;
            self.hooks.after_get_many_within(ids, &result);
            result
        })
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        Box::pin(async move {
            self.hooks.before(StoreCall::Update {
                id,
                scope,
                transition,
                now,
            })?;
            let result = self.store.update(id, scope, transition, now).await;
            self.hooks.after_update(id, &result);
            result
        })
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(async move {
            self.hooks.before(StoreCall::Cleanup { now, retention })?;
            let result = self.store.cleanup(now, retention).await;
            self.hooks.after_cleanup(&result);
            result
        })
    }

    fn list<'a>(
        &'a self,
        owner: Option<&'a Principal>,
        from: Option<ListFrom>,
        limit: usize,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<ListPage, StoreError>> {
        Box::pin(async move {
            self.hooks.before(StoreCall::List {
                owner,
                from,
                limit,
                now,
            })?;
            let result = self.store.list(owner, from, limit, now).await;
            self.hooks.after_list(&result);
            result
        })
    }

    fn owner_bytes<'a>(
        &'a self,
        owner: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            self.hooks.before(StoreCall::OwnerBytes { owner })?;
            self.store.owner_bytes(owner).await
        })
    }

    fn subscribe(&self) -> Option<ChangeFeed> {
        self.hooks.subscribe(&self.store)
    }

    fn leases(&self) -> Option<Arc<dyn crate::store::LeaseStore>> {
        self.hooks.leases(&self.store)
    }
}
