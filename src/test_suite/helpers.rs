//! What the rules share: records and requests to write, and store calls that
//! panic with the rule's name when the store fails.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::Barrier;

use crate::error::{Limit, StoreError};
use crate::store::{CreateLimits, TaskStore, Updated};
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};

/// Concurrent writers in the contention rules.
pub(super) const WRITERS: usize = 64;

/// A lifetime long enough never to run out during a test.
pub(super) const HOUR_MS: u64 = 3_600_000;

pub(super) fn record(owner: Option<Principal>, now: Timestamp, ttl_ms: Option<u64>) -> TaskRecord {
    let mut record = TaskRecord::new(TaskId::random(), owner, now);
    record.ttl_ms = ttl_ms;
    record
}

pub(super) fn input_requests(keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .map(|key| {
            let request = json!({
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": format!("Question {key}"),
                    "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                },
            });
            ((*key).to_owned(), request)
        })
        .collect()
}

pub(super) fn answer() -> Value {
    json!({"action": "accept", "content": {"ok": true}})
}

pub(super) fn answer_for(keys: &[&str]) -> Transition {
    Transition::Answer {
        responses: keys.iter().map(|k| ((*k).to_owned(), answer())).collect(),
    }
}

pub(super) fn require_multi_thread(rule: &str) {
    let flavor = tokio::runtime::Handle::current().runtime_flavor();
    assert_eq!(
        flavor,
        tokio::runtime::RuntimeFlavor::MultiThread,
        "[{rule}] this rule checks concurrent writers and must run on a multi-thread tokio runtime"
    );
}

pub(super) async fn create<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    record: TaskRecord,
    limits: CreateLimits,
) {
    if let Err(e) = store.create(record, limits).await {
        panic!("[{rule}] create of a fresh record failed: {e}");
    }
}

/// Asserts that `create` of `record` succeeds; `why` says why the rule expects it.
pub(super) async fn create_accepted<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    record: TaskRecord,
    limits: CreateLimits,
    why: &str,
) {
    if let Err(e) = store.create(record, limits).await {
        panic!("[{rule}] {why}, got {e:?}");
    }
}

/// Asserts that `create` of `record` is refused at `limit`; `why` says why the rule
/// expects it.
pub(super) async fn create_refused<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    record: TaskRecord,
    limits: CreateLimits,
    limit: Limit,
    why: &str,
) {
    match store.create(record, limits).await {
        Err(StoreError::LimitReached(refused)) if refused == limit => {}
        other => panic!("[{rule}] {why}: LimitReached({limit:?}) expected, got {other:?}"),
    }
}

pub(super) async fn get<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    id: &TaskId,
    scope: Scope<'_>,
    now: Timestamp,
) -> Option<TaskRecord> {
    store
        .get(id, scope, now)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] get failed: {e}"))
}

pub(super) async fn update<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    id: &TaskId,
    scope: Scope<'_>,
    transition: &Transition,
    now: Timestamp,
) -> Option<Updated> {
    store
        .update(id, scope, transition, now)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] update ({transition:?}) failed: {e}"))
}

/// [`get`], panicking when the task is not there.
pub(super) async fn get_found<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    id: &TaskId,
    scope: Scope<'_>,
    now: Timestamp,
) -> TaskRecord {
    get(rule, store, id, scope, now)
        .await
        .unwrap_or_else(|| panic!("[{rule}] the task must be found"))
}

/// [`update`], panicking when the task is not there.
pub(super) async fn update_found<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    id: &TaskId,
    scope: Scope<'_>,
    transition: &Transition,
    now: Timestamp,
) -> Updated {
    update(rule, store, id, scope, transition, now)
        .await
        .unwrap_or_else(|| panic!("[{rule}] the task must be found"))
}

pub(super) async fn cleanup<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    now: Timestamp,
    retention: Duration,
) -> usize {
    store
        .cleanup(now, retention)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] cleanup failed: {e}"))
}

/// Runs `op` on every input in its own tokio task, all released at once by a
/// barrier, and returns the results in input order.
pub(super) async fn race<I, F, Fut, T>(inputs: Vec<I>, op: F) -> Vec<T>
where
    I: Send + 'static,
    F: Fn(I) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(inputs.len()));
    let handles: Vec<_> = inputs
        .into_iter()
        .map(|input| {
            let barrier = barrier.clone();
            let work = op(input);
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(handles.len());
    for handle in handles {
        match handle.await {
            Ok(result) => results.push(result),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a concurrent writer did not finish: {e}"),
        }
    }
    results
}
