//! A store handle that keeps a cleanup guard alive, for the tests against a real
//! backend: the scratch table or key prefix goes away with the last handle over it.
//!
//! Included by path (`#[path = "support/scratch_store.rs"] mod scratch_store;`).

#![allow(dead_code, unreachable_pub)]

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::store::{
    BoxFuture, ChangeFeed, CreateLimits, Scope, Timestamp, Transition, Updated,
};
use mcp_tasks::{StoreError, TaskId, TaskRecord, TaskStore};

/// `store` with a `guard` whose `Drop` removes what the tests wrote; clones (other
/// nodes over the same namespace) share the guard.
#[derive(Debug)]
pub struct Scratch<S, G> {
    /// The store under test.
    pub store: S,
    _guard: Arc<G>,
}

impl<S, G> Scratch<S, G> {
    /// `store`, keeping `guard` alive.
    pub fn new(store: S, guard: Arc<G>) -> Self {
        Scratch {
            store,
            _guard: guard,
        }
    }
}

impl<S: Clone, G> Clone for Scratch<S, G> {
    fn clone(&self) -> Self {
        Scratch {
            store: self.store.clone(),
            _guard: self._guard.clone(),
        }
    }
}

impl<S: TaskStore, G: Debug + Send + Sync + 'static> TaskStore for Scratch<S, G> {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.store.create(record, limits)
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        self.store.get(id, scope, now)
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        self.store.update(id, scope, transition, now)
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        self.store.cleanup(now, retention)
    }

    fn subscribe(&self) -> Option<ChangeFeed> {
        self.store.subscribe()
    }
}
