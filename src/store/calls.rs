//! The store as the layer calls it: every call bounded by the layer's store timeout
//! and timed for `observe`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Budgeted, ChangeFeed, CreateLimits, ListFrom, ListPage, TaskStore, Updated};
use crate::error::StoreError;
use crate::observe;
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};

/// The store as the layer calls it: each call bounded by the layer's store timeout,
/// and timed for the current route's span and the `mcp_tasks_store_call_seconds`
/// histogram (recorded by `observe`). Inherent methods mirror [`TaskStore`], so no second boxed future is
/// made per call.
#[derive(Debug, Clone)]
pub(crate) struct StoreCalls {
    store: Arc<dyn TaskStore>,
    timeout: Duration,
}

impl StoreCalls {
    pub(crate) fn new(store: Arc<dyn TaskStore>, timeout: Duration) -> Self {
        StoreCalls { store, timeout }
    }

    /// The store itself, for those that call it on their own (the janitor).
    pub(crate) fn shared(&self) -> Arc<dyn TaskStore> {
        self.store.clone()
    }

    pub(crate) async fn create(
        &self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> Result<(), StoreError> {
        timed("create", self.timeout, self.store.create(record, limits)).await
    }

    pub(crate) async fn list(
        &self,
        owner: Option<&Principal>,
        from: Option<ListFrom>,
        limit: usize,
        now: Timestamp,
    ) -> Result<ListPage, StoreError> {
        timed(
            "list",
            self.timeout,
            self.store.list(owner, from, limit, now),
        )
        .await
    }

    pub(crate) async fn get(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        now: Timestamp,
    ) -> Result<Option<TaskRecord>, StoreError> {
        if let Some(out) = self.get_now(id, scope, now) {
            return out;
        }
        timed("get", self.timeout, self.store.get(id, scope, now)).await
    }

    /// [`get`](Self::get), where a read that must go out to the store first takes
    /// one of `slots` (held until it answers); an answer the store has at once needs
    /// none. Waiting for a slot does not count against the store timeout.
    pub(crate) async fn get_in_turn(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        now: Timestamp,
        slots: &tokio::sync::Semaphore,
    ) -> Result<Option<TaskRecord>, StoreError> {
        if let Some(out) = self.get_now(id, scope, now) {
            return out;
        }
        let _slot = slots.acquire().await;
        timed("get", self.timeout, self.store.get(id, scope, now)).await
    }

    /// [`TaskStore::get_now`], timed as `get`: `None` when the store would have
    /// the caller await.
    pub(crate) fn get_now(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        now: Timestamp,
    ) -> Option<Result<Option<TaskRecord>, StoreError>> {
        let started = Instant::now();
        let out = self.store.get_now(id, scope, now)?;
        observe::store_call_done("get", started, out.is_ok());
        Some(out)
    }

    pub(crate) async fn get_many(
        &self,
        ids: &[TaskId],
        scope: Scope<'_>,
        now: Timestamp,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        timed(
            "get_many",
            self.timeout,
            self.store.get_many(ids, scope, now),
        )
        .await
    }

    pub(crate) async fn get_many_within(
        &self,
        ids: &[TaskId],
        scope: Scope<'_>,
        now: Timestamp,
        budget: usize,
    ) -> Result<Budgeted, StoreError> {
        timed(
            "get_many_within",
            self.timeout,
            self.store.get_many_within(ids, scope, now, budget),
        )
        .await
    }

    pub(crate) async fn update(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        transition: &Transition,
        now: Timestamp,
    ) -> Result<Option<Updated>, StoreError> {
        timed(
            "update",
            self.timeout,
            self.store.update(id, scope, transition, now),
        )
        .await
    }

    pub(crate) async fn owner_bytes(&self, owner: Option<&Principal>) -> Result<u64, StoreError> {
        timed("owner_bytes", self.timeout, self.store.owner_bytes(owner)).await
    }

    pub(crate) fn subscribe(&self) -> Option<ChangeFeed> {
        self.store.subscribe()
    }
}

async fn timed<T>(
    op: &'static str,
    limit: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let call = bounded(limit, call);
    if !observe::in_route() && !cfg!(feature = "metrics") {
        return call.await;
    }
    let started = Instant::now();
    let out = call.await;
    observe::store_call_done(op, started, out.is_ok());
    out
}

/// `call`, or a [`StoreError::Backend`] ([`StoreTimeout`]) once `limit` has passed
/// without an answer; the call is dropped then.
async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(limit, call).await {
        Ok(out) => out,
        Err(_) => Err(StoreError::backend(StoreTimeout(limit))),
    }
}

/// A store call outlasted the layer's store timeout.
#[derive(Debug)]
pub(crate) struct StoreTimeout(Duration);

impl std::fmt::Display for StoreTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the store did not answer within {} ms",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for StoreTimeout {}
