//! The public contract suite for [`TaskStore`] implementations.
//!
//! Every store, the built-in [`MemoryStore`](crate::MemoryStore) or one of your own,
//! must keep the same rules: a foreign owner reads exactly like a missing id,
//! terminal states never change, expired records read as absent before any cleanup,
//! the row caps hold under concurrent creates, and concurrent writers on one task
//! never lose an update. This module checks each rule with one public async
//! function, and [`task_store_tests!`](crate::task_store_tests) turns them all into
//! `#[tokio::test]`s for a store of your choice.
//!
//! # Running the suite on your store
//!
//! Enable the `test-util` feature in your dev-dependencies, then invoke the macro in a
//! module of its own with an expression that evaluates to a future of a fresh, empty
//! store (an `async` block or a call to an `async fn`). The expression is evaluated
//! once per test, so every rule gets its own store.
//!
//! ```no_run
//! use mcp_tasks::store::{BoxFuture, CreateLimits, Scope, Timestamp, Transition, Updated};
//! use mcp_tasks::{MemoryStore, StoreError, TaskId, TaskRecord, TaskStore};
//! use std::time::Duration;
//!
//! /// A store that adds an audit trail around the memory store.
//! #[derive(Debug, Default)]
//! pub struct AuditedStore {
//!     inner: MemoryStore,
//! }
//!
//! impl TaskStore for AuditedStore {
//!     fn create<'a>(
//!         &'a self,
//!         record: TaskRecord,
//!         limits: CreateLimits,
//!     ) -> BoxFuture<'a, Result<(), StoreError>> {
//!         self.inner.create(record, limits)
//!     }
//!
//!     fn get<'a>(
//!         &'a self,
//!         id: &'a TaskId,
//!         scope: Scope<'a>,
//!         now: Timestamp,
//!     ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
//!         self.inner.get(id, scope, now)
//!     }
//!
//!     fn update<'a>(
//!         &'a self,
//!         id: &'a TaskId,
//!         scope: Scope<'a>,
//!         transition: &'a Transition,
//!         now: Timestamp,
//!     ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
//!         self.inner.update(id, scope, transition, now)
//!     }
//!
//!     fn cleanup<'a>(
//!         &'a self,
//!         now: Timestamp,
//!         retention: Duration,
//!     ) -> BoxFuture<'a, Result<usize, StoreError>> {
//!         self.inner.cleanup(now, retention)
//!     }
//! }
//!
//! async fn fresh_store() -> AuditedStore {
//!     AuditedStore::default()
//! }
//!
//! #[cfg(test)]
//! mod audited_store_contract {
//!     mcp_tasks::task_store_tests!(super::fresh_store());
//! }
//! # fn main() {}
//! ```
//!
//! The generated tests run on a multi-thread tokio runtime, so the test crate needs
//! `tokio` with the `macros` and `rt-multi-thread` features. A store backed by a
//! shared database should hand each test its own namespace (a schema, a key
//! prefix): `cleanup` counts and the row caps are checked exactly.
//!
//! # Calling the rules directly
//!
//! Each function takes a fresh, empty store **by value** (any `S: TaskStore`, which
//! includes `Arc<dyn TaskStore>`) and panics with a message naming the broken rule.
//! They read the wall clock only to pick a starting time, and pass explicit `now`
//! values afterwards, as the [`TaskStore`] contract requires. The contention rules
//! spawn tasks and need a multi-thread runtime.
//!
//! A store may answer [`StoreError::Contention`] when a compare-and-swap keeps
//! losing. That answer promises that nothing was written, so the concurrent rules
//! retry it (a bounded number of times) instead of counting it as a loss.
//!
//! # Stores shared between nodes
//!
//! A store that several processes share implements
//! [`TaskStore::subscribe`]: each instance announces the writes made through it to
//! the *other* instances, and the layer relays them to its notifier and waiting
//! workers. The `nodes_*` functions check that contract on two (or more) instances
//! over the same fresh shared state, as two nodes would hold them: a write is
//! announced to the other node only, a layer on one node sees answers and cancels
//! given through the other, and concurrent writers spread over the nodes still see
//! exactly one terminal write win and no update lost.
//! [`task_store_node_tests!`](crate::task_store_node_tests) turns them into tests.
//! Every wait in them is bounded, and a store may start listening in the
//! background: the rules first write until each node has heard the other.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::Barrier;
use tokio::sync::mpsc;

use crate::error::{StoreError, TransitionError};
use crate::input::{InputRequest, InputRequests};
use crate::layer::TasksLayer;
use crate::store::{BoxFuture, ChangeFeed, CreateLimits, FeedEvent, TaskStore, Updated};
use crate::task::{
    Applied, ErrorObject, Principal, Scope, TaskId, TaskRecord, TaskStatus, Timestamp, Transition,
};

/// Concurrent writers in the contention rules.
const WRITERS: usize = 64;
/// Times a concurrent writer retries a [`StoreError::Contention`] answer.
const CONTENTION_RETRIES: usize = 1_000;
/// A lifetime long enough never to run out during a test.
const HOUR_MS: u64 = 3_600_000;

/// `create` returns only once `get` finds the record, and `get` returns the record
/// as it was stored, for its owner and for [`Scope::Any`].
pub async fn create_then_get<S: TaskStore>(store: S) {
    const RULE: &str = "create_then_get";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let mut owned = record(Some(alice.clone()), now, Some(HOUR_MS));
    owned.status_message = Some("Queued".to_owned());
    owned.poll_interval_ms = Some(250);
    let anonymous = record(None, now, None);
    for r in [&owned, &anonymous] {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    let found = get(RULE, &store, &owned.id, Scope::Owner(Some(&alice)), now).await;
    assert_eq!(
        found.as_ref(),
        Some(&owned),
        "[{RULE}] get by the owner right after create must return the stored record unchanged"
    );
    let found = get(RULE, &store, &owned.id, Scope::Any, now).await;
    assert_eq!(
        found.as_ref(),
        Some(&owned),
        "[{RULE}] get with Scope::Any right after create must return the stored record"
    );
    let found = get(RULE, &store, &anonymous.id, Scope::Owner(None), now).await;
    assert_eq!(
        found.as_ref(),
        Some(&anonymous),
        "[{RULE}] an unowned record must be found by Scope::Owner(None) right after create"
    );
}

/// Creating a second record with an id that exists fails with
/// [`StoreError::Duplicate`], leaves the first record as it was, and does not use up
/// room under the row cap.
pub async fn create_rejects_duplicate_id<S: TaskStore>(store: S) {
    const RULE: &str = "create_rejects_duplicate_id";
    let now = Timestamp::now();
    let limits = CreateLimits::new(Some(2), None);
    let first = record(Some(Principal::from("alice")), now, Some(HOUR_MS));
    create(RULE, &store, first.clone(), limits).await;
    let mut twin = record(Some(Principal::from("mallory")), now, None);
    twin.id = first.id;
    match store.create(twin, limits).await {
        Err(StoreError::Duplicate) => {}
        other => panic!(
            "[{RULE}] a second create with an existing id must fail with StoreError::Duplicate, got {other:?}"
        ),
    }
    let found = get(RULE, &store, &first.id, Scope::Any, now).await;
    assert_eq!(
        found.as_ref(),
        Some(&first),
        "[{RULE}] a refused duplicate must leave the existing record untouched"
    );
    let second = record(None, now, Some(HOUR_MS));
    match store.create(second, limits).await {
        Ok(()) => {}
        other => panic!(
            "[{RULE}] a refused duplicate must not take a row: with max_rows 2 and one record, create must succeed, got {other:?}"
        ),
    }
}

/// A task owned by someone else reads exactly like a missing id, for `get` and for
/// `update`: `Ok(None)` every time, and the record is left untouched.
/// `Scope::Owner(None)` (an unauthenticated caller) and `Scope::Owner(Some(_))` never
/// see each other's tasks.
pub async fn foreign_owner_reads_as_missing<S: TaskStore>(store: S) {
    const RULE: &str = "foreign_owner_reads_as_missing";
    let now = Timestamp::now();
    let alice = Principal::from("alice");
    let bob = Principal::from("bob");
    let owned = record(Some(alice.clone()), now, Some(HOUR_MS));
    let anonymous = record(None, now, Some(HOUR_MS));
    for r in [&owned, &anonymous] {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    let missing = TaskId::random();
    let cases: [(&TaskId, Scope<'_>, &str); 5] = [
        (
            &owned.id,
            Scope::Owner(Some(&bob)),
            "alice's task read by bob",
        ),
        (
            &owned.id,
            Scope::Owner(None),
            "alice's task read by an unauthenticated caller",
        ),
        (
            &anonymous.id,
            Scope::Owner(Some(&alice)),
            "an unowned task read by alice",
        ),
        (&missing, Scope::Owner(Some(&alice)), "a missing id"),
        (
            &missing,
            Scope::Owner(None),
            "a missing id (unauthenticated)",
        ),
    ];
    let writes = [
        Transition::Cancel,
        Transition::Progress {
            message: "hijacked".to_owned(),
        },
        Transition::Complete {
            result: json!({"content": []}),
            message: None,
        },
        Transition::RequireInput {
            requests: input_requests(&["stolen"]),
            message: None,
        },
    ];
    for (id, scope, what) in cases {
        match store.get(id, scope, now).await {
            Ok(None) => {}
            Ok(Some(_)) => {
                panic!("[{RULE}] get of {what} must return Ok(None), it returned the record")
            }
            Err(e) => panic!(
                "[{RULE}] get of {what} must return Ok(None) like a missing id, got Err({e})"
            ),
        }
        for transition in &writes {
            match store.update(id, scope, transition, now.plus_ms(1)).await {
                Ok(None) => {}
                Ok(Some(u)) => panic!(
                    "[{RULE}] update of {what} must return Ok(None) like a missing id, got an update with outcome {:?}",
                    u.outcome
                ),
                Err(e) => panic!(
                    "[{RULE}] update of {what} must return Ok(None) like a missing id, got Err({e})"
                ),
            }
        }
    }
    for r in [&owned, &anonymous] {
        let found = get(RULE, &store, &r.id, Scope::Any, now.plus_ms(2)).await;
        assert_eq!(
            found.as_ref(),
            Some(r),
            "[{RULE}] updates in a foreign scope must leave the record untouched"
        );
    }
}

/// [`Scope::Any`] sees and changes every task, owned or not.
pub async fn scope_any_sees_all<S: TaskStore>(store: S) {
    const RULE: &str = "scope_any_sees_all";
    let now = Timestamp::now();
    let owned = record(Some(Principal::from("alice")), now, Some(HOUR_MS));
    let anonymous = record(None, now, None);
    for r in [&owned, &anonymous] {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    for r in [&owned, &anonymous] {
        let who = if r.owner.is_some() {
            "owned"
        } else {
            "unowned"
        };
        let found = get(RULE, &store, &r.id, Scope::Any, now).await;
        assert_eq!(
            found.as_ref(),
            Some(r),
            "[{RULE}] Scope::Any must see an {who} task"
        );
        let progress = Transition::Progress {
            message: "half way".to_owned(),
        };
        let updated = update(RULE, &store, &r.id, Scope::Any, &progress, now.plus_ms(1))
            .await
            .unwrap_or_else(|| panic!("[{RULE}] update with Scope::Any must find an {who} task"));
        assert_eq!(
            updated.outcome,
            Ok(Applied::Changed),
            "[{RULE}] progress on an {who} working task through Scope::Any must be applied"
        );
        assert_eq!(
            updated.record.status_message.as_deref(),
            Some("half way"),
            "[{RULE}] the record returned by update must carry the change"
        );
    }
}

/// Once `completed`, `failed` or `cancelled`, a task never changes: every later
/// transition is refused with [`TransitionError::Terminal`] (a cancel is accepted as
/// [`Applied::Unchanged`]), and neither the stored record nor its revision moves.
pub async fn terminal_states_never_change<S: TaskStore>(store: S) {
    const RULE: &str = "terminal_states_never_change";
    let now = Timestamp::now();
    let finishers = [
        (
            TaskStatus::Completed,
            Transition::Complete {
                result: json!({"content": [{"type": "text", "text": "done"}]}),
                message: None,
            },
        ),
        (
            TaskStatus::Failed,
            Transition::Fail {
                error: ErrorObject::new(-32603, "broke"),
                message: None,
            },
        ),
        (TaskStatus::Cancelled, Transition::Cancel),
    ];
    let later = [
        Transition::Complete {
            result: json!({"content": []}),
            message: Some("again".to_owned()),
        },
        Transition::Fail {
            error: ErrorObject::new(-32000, "late"),
            message: None,
        },
        Transition::Progress {
            message: "still going?".to_owned(),
        },
        Transition::RequireInput {
            requests: input_requests(&["late"]),
            message: None,
        },
    ];
    for (status, finish) in finishers {
        let task = record(None, now, Some(HOUR_MS));
        let id = task.id;
        create(RULE, &store, task, CreateLimits::default()).await;
        let done = update(RULE, &store, &id, Scope::Any, &finish, now.plus_ms(1))
            .await
            .unwrap_or_else(|| panic!("[{RULE}] a new task must be found by update"));
        assert_eq!(
            done.outcome,
            Ok(Applied::Changed),
            "[{RULE}] finishing a working task as {status} must be applied"
        );
        assert_eq!(
            done.record.status, status,
            "[{RULE}] the task must now be {status}"
        );
        let frozen = get(RULE, &store, &id, Scope::Any, now.plus_ms(1))
            .await
            .unwrap_or_else(|| panic!("[{RULE}] a {status} task must still be found"));
        for (i, transition) in later.iter().enumerate() {
            let at = now.plus_ms(10 + i as u64);
            let refused = update(RULE, &store, &id, Scope::Any, transition, at)
                .await
                .unwrap_or_else(|| panic!("[{RULE}] a {status} task must still be found"));
            assert_eq!(
                refused.outcome,
                Err(TransitionError::Terminal),
                "[{RULE}] {transition:?} on a {status} task must be refused as Terminal"
            );
        }
        let cancel = update(
            RULE,
            &store,
            &id,
            Scope::Any,
            &Transition::Cancel,
            now.plus_ms(20),
        )
        .await
        .unwrap_or_else(|| panic!("[{RULE}] a {status} task must still be found"));
        assert_eq!(
            cancel.outcome,
            Ok(Applied::Unchanged),
            "[{RULE}] cancelling a {status} task must answer Unchanged"
        );
        let after = get(RULE, &store, &id, Scope::Any, now.plus_ms(30)).await;
        assert_eq!(
            after.as_ref(),
            Some(&frozen),
            "[{RULE}] a {status} task must not change at all (status, fields, revision {}) after later transitions",
            frozen.revision
        );
    }
}

/// A transition the state machine refuses leaves the stored record exactly as it
/// was, even when part of it looked valid (an answer batch with one malformed
/// response, a request batch reusing one old key, a non-object result).
pub async fn rejected_transition_changes_nothing<S: TaskStore>(store: S) {
    const RULE: &str = "rejected_transition_changes_nothing";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let ask = Transition::RequireInput {
        requests: input_requests(&["a", "b"]),
        message: Some("Need two answers".to_owned()),
    };
    update(RULE, &store, &id, Scope::Any, &ask, now.plus_ms(1)).await;
    let before = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(1)).await;
    let mut mixed = Map::new();
    mixed.insert("a".to_owned(), answer());
    mixed.insert("b".to_owned(), json!("not an object"));
    let refused = [
        Transition::Answer { responses: mixed },
        Transition::RequireInput {
            requests: input_requests(&["c", "a"]),
            message: Some("reuses a".to_owned()),
        },
        Transition::RequireInput {
            requests: [("d".to_owned(), json!({"method": "tools/call"}))]
                .into_iter()
                .collect(),
            message: None,
        },
        Transition::Complete {
            result: json!("not an object"),
            message: None,
        },
    ];
    for (i, transition) in refused.iter().enumerate() {
        let outcome = update_found(
            RULE,
            &store,
            &id,
            Scope::Any,
            transition,
            now.plus_ms(10 + i as u64),
        )
        .await
        .outcome;
        assert!(
            outcome.is_err(),
            "[{RULE}] {transition:?} must be refused, got {outcome:?}"
        );
        let after = get(RULE, &store, &id, Scope::Any, now.plus_ms(20)).await;
        assert_eq!(
            after.as_ref(),
            Some(&before),
            "[{RULE}] the refused {transition:?} ({outcome:?}) must leave the stored record as it was"
        );
    }
}

/// Answers for keys that are not outstanding (never issued, already answered, or
/// sent while the task is `working`) are ignored: [`Applied::Unchanged`], no write.
pub async fn answers_for_keys_not_outstanding_are_ignored<S: TaskStore>(store: S) {
    const RULE: &str = "answers_for_keys_not_outstanding_are_ignored";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let early = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["a"]),
        now.plus_ms(1),
    )
    .await;
    assert_eq!(
        early.outcome,
        Ok(Applied::Unchanged),
        "[{RULE}] an answer while the task is working must be ignored"
    );
    assert_eq!(
        early.record.revision, 0,
        "[{RULE}] an ignored answer must not bump the revision"
    );
    let ask = Transition::RequireInput {
        requests: input_requests(&["a", "b"]),
        message: None,
    };
    update(RULE, &store, &id, Scope::Any, &ask, now.plus_ms(2)).await;
    let asked = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(2)).await;
    let stray = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["zzz"]),
        now.plus_ms(3),
    )
    .await;
    assert_eq!(
        stray.outcome,
        Ok(Applied::Unchanged),
        "[{RULE}] an answer for a key never issued must be ignored"
    );
    assert_eq!(
        get(RULE, &store, &id, Scope::Any, now.plus_ms(3))
            .await
            .as_ref(),
        Some(&asked),
        "[{RULE}] an ignored answer must not write anything"
    );
    let first = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["a"]),
        now.plus_ms(4),
    )
    .await;
    assert_eq!(
        first.outcome,
        Ok(Applied::Changed),
        "[{RULE}] an answer for an outstanding key must be applied"
    );
    let again = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["a"]),
        now.plus_ms(5),
    )
    .await;
    assert_eq!(
        again.outcome,
        Ok(Applied::Unchanged),
        "[{RULE}] a second answer for an already answered key must be ignored"
    );
    assert_eq!(
        again.record.revision, first.record.revision,
        "[{RULE}] an ignored answer must not bump the revision"
    );
    let mixed = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["b", "zzz"]),
        now.plus_ms(6),
    )
    .await;
    assert_eq!(
        mixed.outcome,
        Ok(Applied::Changed),
        "[{RULE}] the outstanding part of an answer batch must be applied"
    );
    assert!(
        !mixed.record.input_responses.contains_key("zzz"),
        "[{RULE}] an answer for a key never issued must not be stored"
    );
}

/// Answering some of the outstanding keys keeps the task `input_required` with the
/// rest still outstanding; answering the last one returns it to `working`, with every
/// answer kept.
pub async fn partial_answers_keep_input_required<S: TaskStore>(store: S) {
    const RULE: &str = "partial_answers_keep_input_required";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let ask = Transition::RequireInput {
        requests: input_requests(&["a", "b", "c"]),
        message: None,
    };
    update(RULE, &store, &id, Scope::Any, &ask, now.plus_ms(1)).await;
    for (step, (keys, left)) in [(&["a"][..], &["b", "c"][..]), (&["b"][..], &["c"][..])]
        .into_iter()
        .enumerate()
    {
        update(
            RULE,
            &store,
            &id,
            Scope::Any,
            &answer_for(keys),
            now.plus_ms(2 + step as u64),
        )
        .await;
        let task = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(5)).await;
        assert_eq!(
            task.status,
            TaskStatus::InputRequired,
            "[{RULE}] after answering {keys:?} of [a, b, c] the task must stay input_required"
        );
        let outstanding: Vec<&str> = task.input_requests.keys().map(String::as_str).collect();
        assert_eq!(
            outstanding, left,
            "[{RULE}] after answering {keys:?} the outstanding keys must be {left:?}"
        );
    }
    update(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["c"]),
        now.plus_ms(4),
    )
    .await;
    let task = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(5)).await;
    assert_eq!(
        task.status,
        TaskStatus::Working,
        "[{RULE}] once every key is answered the task must be working again"
    );
    assert!(
        task.input_requests.is_empty(),
        "[{RULE}] no request may stay outstanding"
    );
    let answered: Vec<&str> = task.input_responses.keys().map(String::as_str).collect();
    assert_eq!(
        answered,
        ["a", "b", "c"],
        "[{RULE}] every answer must be kept"
    );
}

/// Input keys are single-use for the task's whole life: asking again with a key that
/// was ever issued (outstanding or answered) is refused with
/// [`TransitionError::DuplicateKeys`] and nothing is written.
pub async fn duplicate_input_keys_rejected<S: TaskStore>(store: S) {
    const RULE: &str = "duplicate_input_keys_rejected";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let ask = |keys: &[&str]| Transition::RequireInput {
        requests: input_requests(keys),
        message: None,
    };
    update(RULE, &store, &id, Scope::Any, &ask(&["a"]), now.plus_ms(1)).await;
    let outstanding = get_found(RULE, &store, &id, Scope::Any, now.plus_ms(1)).await;
    let refused = update_found(
        RULE,
        &store,
        &id,
        Scope::Any,
        &ask(&["a", "b"]),
        now.plus_ms(2),
    )
    .await;
    assert_eq!(
        refused.outcome,
        Err(TransitionError::DuplicateKeys(vec!["a".to_owned()])),
        "[{RULE}] re-issuing an outstanding key must be refused as DuplicateKeys([\"a\"])"
    );
    assert_eq!(
        get(RULE, &store, &id, Scope::Any, now.plus_ms(2))
            .await
            .as_ref(),
        Some(&outstanding),
        "[{RULE}] a refused request batch must not add its other keys"
    );
    update(
        RULE,
        &store,
        &id,
        Scope::Any,
        &answer_for(&["a"]),
        now.plus_ms(3),
    )
    .await;
    let refused = update_found(RULE, &store, &id, Scope::Any, &ask(&["a"]), now.plus_ms(4)).await;
    assert_eq!(
        refused.outcome,
        Err(TransitionError::DuplicateKeys(vec!["a".to_owned()])),
        "[{RULE}] re-issuing an answered key must be refused as DuplicateKeys([\"a\"])"
    );
    let fresh = update_found(RULE, &store, &id, Scope::Any, &ask(&["b"]), now.plus_ms(5)).await;
    assert_eq!(
        fresh.outcome,
        Ok(Applied::Changed),
        "[{RULE}] a never-issued key must be accepted"
    );
}

/// A record whose `created_at + ttl` has passed reads as absent on `get` and
/// `update`, in every scope, before any cleanup ran; one instant earlier it is there.
/// An update at or after expiry writes nothing.
pub async fn expired_reads_as_absent<S: TaskStore>(store: S) {
    const RULE: &str = "expired_reads_as_absent";
    let now = Timestamp::now();
    let ttl = 60_000;
    let alice = Principal::from("alice");
    let task = record(Some(alice.clone()), now, Some(ttl));
    let id = task.id;
    create(RULE, &store, task.clone(), CreateLimits::default()).await;
    let last_live = now.plus_ms(ttl - 1);
    let expiry = now.plus_ms(ttl);
    assert!(
        get(RULE, &store, &id, Scope::Owner(Some(&alice)), last_live)
            .await
            .is_some(),
        "[{RULE}] a record must still be found 1 ms before created_at + ttl"
    );
    for (at, when) in [
        (expiry, "exactly at created_at + ttl"),
        (now.plus_ms(10 * ttl), "long after expiry"),
    ] {
        for scope in [Scope::Owner(Some(&alice)), Scope::Any] {
            assert!(
                get(RULE, &store, &id, scope, at).await.is_none(),
                "[{RULE}] get {when} with {scope:?} must return Ok(None) before any cleanup"
            );
            for transition in [
                Transition::Progress {
                    message: "late".to_owned(),
                },
                Transition::Cancel,
            ] {
                assert!(
                    update(RULE, &store, &id, scope, &transition, at)
                        .await
                        .is_none(),
                    "[{RULE}] update ({transition:?}) {when} with {scope:?} must return Ok(None) before any cleanup"
                );
            }
        }
    }
    assert_eq!(
        get(RULE, &store, &id, Scope::Any, last_live).await.as_ref(),
        Some(&task),
        "[{RULE}] updates of an expired record must not write anything"
    );
}

/// `cleanup` removes the records that expired at `now` and returns how many it
/// removed; live records stay, terminal records with a TTL stay until their TTL runs
/// out, and a second sweep finds nothing.
pub async fn cleanup_removes_expired<S: TaskStore>(store: S) {
    const RULE: &str = "cleanup_removes_expired";
    let now = Timestamp::now();
    let retention = Duration::from_secs(24 * 3600);
    let expiring: Vec<TaskRecord> = [1_000, 2_000, 3_000]
        .into_iter()
        .map(|ttl| record(None, now, Some(ttl)))
        .collect();
    let live = record(Some(Principal::from("alice")), now, Some(HOUR_MS));
    let forever = record(None, now, None);
    let finished = record(None, now, Some(HOUR_MS));
    for r in expiring.iter().chain([&live, &forever, &finished]) {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    let done = Transition::Complete {
        result: json!({"content": []}),
        message: None,
    };
    update(
        RULE,
        &store,
        &finished.id,
        Scope::Any,
        &done,
        now.plus_ms(1),
    )
    .await;
    let removed = cleanup(RULE, &store, now.plus_ms(500), retention).await;
    assert_eq!(
        removed, 0,
        "[{RULE}] cleanup before any TTL ran out must remove nothing"
    );
    let sweep = now.plus_ms(2_500);
    let removed = cleanup(RULE, &store, sweep, retention).await;
    assert_eq!(
        removed, 2,
        "[{RULE}] cleanup must remove exactly the 2 records whose TTL ran out and return 2"
    );
    assert!(
        get(RULE, &store, &expiring[2].id, Scope::Any, sweep)
            .await
            .is_some(),
        "[{RULE}] a record with TTL left must survive cleanup"
    );
    for r in [&live, &forever, &finished] {
        assert!(
            get(RULE, &store, &r.id, Scope::Any, sweep).await.is_some(),
            "[{RULE}] cleanup removed a record that had not expired (ttl {:?}, status {:?})",
            r.ttl_ms,
            r.status
        );
    }
    assert_eq!(
        cleanup(RULE, &store, sweep, retention).await,
        0,
        "[{RULE}] a second cleanup at the same time must find nothing"
    );
    let removed = cleanup(RULE, &store, now.plus_ms(HOUR_MS), retention).await;
    assert_eq!(
        removed, 3,
        "[{RULE}] at created_at + 1 h the last short record, the live one and the finished one (TTL 1 h) must go"
    );
    assert!(
        get(RULE, &store, &forever.id, Scope::Any, now.plus_ms(HOUR_MS))
            .await
            .is_some(),
        "[{RULE}] a working record without a TTL must never be cleaned up"
    );
}

/// A terminal record without a TTL is removed by `cleanup` only once it has been
/// terminal for longer than the retention; a working record without a TTL is never
/// removed.
pub async fn terminal_without_ttl_evicted_after_retention<S: TaskStore>(store: S) {
    const RULE: &str = "terminal_without_ttl_evicted_after_retention";
    let now = Timestamp::now();
    let retention = Duration::from_secs(600);
    let retention_ms = 600_000;
    let working = record(None, now, None);
    let finished = record(Some(Principal::from("alice")), now, None);
    for r in [&working, &finished] {
        create(RULE, &store, r.clone(), CreateLimits::default()).await;
    }
    let done_at = now.plus_ms(5_000);
    let fail = Transition::Fail {
        error: ErrorObject::new(-32603, "broke"),
        message: None,
    };
    update(RULE, &store, &finished.id, Scope::Any, &fail, done_at).await;
    let early = done_at.plus_ms(retention_ms - 1);
    assert_eq!(
        cleanup(RULE, &store, early, retention).await,
        0,
        "[{RULE}] a terminal record without TTL must be kept until it has been terminal for the retention"
    );
    assert!(
        get(RULE, &store, &finished.id, Scope::Any, early)
            .await
            .is_some(),
        "[{RULE}] a terminal record without TTL must be readable within the retention"
    );
    let late = done_at.plus_ms(retention_ms + 1);
    assert_eq!(
        cleanup(RULE, &store, late, retention).await,
        1,
        "[{RULE}] a terminal record without TTL must be removed once terminal for longer than the retention"
    );
    assert!(
        get(RULE, &store, &finished.id, Scope::Any, late)
            .await
            .is_none(),
        "[{RULE}] the evicted record must be gone"
    );
    let far = now.plus_ms(1_000 * retention_ms);
    assert_eq!(
        cleanup(RULE, &store, far, Duration::ZERO).await,
        0,
        "[{RULE}] a working record without TTL must never be removed, whatever the retention"
    );
    assert!(
        get(RULE, &store, &working.id, Scope::Any, far)
            .await
            .is_some(),
        "[{RULE}] a working record without TTL must stay readable"
    );
}

/// `max_rows` holds atomically: of many concurrent creates against a cap of K,
/// exactly K succeed and the rest fail with [`StoreError::LimitReached`]; a record
/// removed by `cleanup` frees its row.
pub async fn max_rows_enforced_atomically<S: TaskStore>(store: S) {
    const RULE: &str = "max_rows_enforced_atomically";
    const CAP: usize = 10;
    require_multi_thread(RULE);
    let now = Timestamp::now();
    let store = Arc::new(store);
    let limits = CreateLimits::new(Some(CAP), None);
    let records: Vec<TaskRecord> = (0..WRITERS)
        .map(|i| {
            let owner = (i % 3 != 0).then(|| Principal::from(format!("owner-{}", i % 5)));
            record(owner, now, Some(1_000))
        })
        .collect();
    let results = race(records.clone(), {
        let store = store.clone();
        move |r: TaskRecord| {
            let store = store.clone();
            async move { store.create(r, limits).await }
        }
    })
    .await;
    let mut created = Vec::new();
    for (r, result) in records.iter().zip(results) {
        match result {
            Ok(()) => created.push(r.id),
            Err(StoreError::LimitReached) => {}
            Err(e) => {
                panic!("[{RULE}] a create over the cap must fail with LimitReached, got Err({e})")
            }
        }
    }
    assert_eq!(
        created.len(),
        CAP,
        "[{RULE}] {WRITERS} concurrent creates with max_rows {CAP} must create exactly {CAP}"
    );
    for id in &created {
        assert!(
            get(RULE, &*store, id, Scope::Any, now).await.is_some(),
            "[{RULE}] every successful create must be readable"
        );
    }
    match store.create(record(None, now, None), limits).await {
        Err(StoreError::LimitReached) => {}
        other => {
            panic!("[{RULE}] a create on a full store must fail with LimitReached, got {other:?}")
        }
    }
    let swept = now.plus_ms(1_000);
    assert_eq!(
        cleanup(RULE, &*store, swept, Duration::ZERO).await,
        CAP,
        "[{RULE}] cleanup must remove the {CAP} expired records"
    );
    match store.create(record(None, swept, None), limits).await {
        Ok(()) => {}
        other => panic!("[{RULE}] rows freed by cleanup must be usable again, got {other:?}"),
    }
}

/// The per-owner cap counts each owner (and the anonymous owner) separately, holds
/// under concurrent creates, and frees a slot when `cleanup` removes a record.
pub async fn per_owner_cap_enforced<S: TaskStore>(store: S) {
    const RULE: &str = "per_owner_cap_enforced";
    const PER_OWNER: usize = 3;
    require_multi_thread(RULE);
    let now = Timestamp::now();
    let store = Arc::new(store);
    let limits = CreateLimits::new(None, Some(PER_OWNER));
    let alice = Principal::from("alice");
    let records: Vec<TaskRecord> = (0..WRITERS)
        .map(|i| match i % 4 {
            0 => record(None, now, Some(1_000)),
            1 => record(Some(Principal::from("bob")), now, Some(HOUR_MS)),
            _ => record(Some(alice.clone()), now, Some(1_000)),
        })
        .collect();
    let results = race(records.clone(), {
        let store = store.clone();
        move |r: TaskRecord| {
            let store = store.clone();
            async move { store.create(r, limits).await }
        }
    })
    .await;
    let mut per_owner = std::collections::BTreeMap::<Option<Principal>, usize>::new();
    for (r, result) in records.iter().zip(results) {
        match result {
            Ok(()) => *per_owner.entry(r.owner.clone()).or_default() += 1,
            Err(StoreError::LimitReached) => {}
            Err(e) => panic!(
                "[{RULE}] a create over the per-owner cap must fail with LimitReached, got Err({e})"
            ),
        }
    }
    for owner in [None, Some(Principal::from("bob")), Some(alice.clone())] {
        assert_eq!(
            per_owner.get(&owner).copied().unwrap_or(0),
            PER_OWNER,
            "[{RULE}] concurrent creates by {owner:?} with a per-owner cap of {PER_OWNER} must create exactly {PER_OWNER}"
        );
    }
    match store
        .create(record(Some(alice.clone()), now, None), limits)
        .await
    {
        Err(StoreError::LimitReached) => {}
        other => {
            panic!("[{RULE}] alice at her cap must be refused with LimitReached, got {other:?}")
        }
    }
    match store
        .create(record(Some(Principal::from("carol")), now, None), limits)
        .await
    {
        Ok(()) => {}
        other => panic!("[{RULE}] another owner must not be limited by alice's cap, got {other:?}"),
    }
    let swept = now.plus_ms(1_000);
    assert_eq!(
        cleanup(RULE, &*store, swept, Duration::ZERO).await,
        2 * PER_OWNER,
        "[{RULE}] cleanup must remove alice's and the anonymous owner's expired records"
    );
    match store.create(record(Some(alice), swept, None), limits).await {
        Ok(()) => {}
        other => panic!(
            "[{RULE}] a slot freed by cleanup must be usable by its owner again, got {other:?}"
        ),
    }
    match store
        .create(record(Some(Principal::from("bob")), swept, None), limits)
        .await
    {
        Err(StoreError::LimitReached) => {}
        other => panic!(
            "[{RULE}] bob's records did not expire, so bob must still be at his cap, got {other:?}"
        ),
    }
}

/// Every applied change bumps `revision` by exactly one and sets `updated_at`;
/// ignored and refused transitions leave both alone. The record `update` returns is
/// the record `get` reads afterwards.
pub async fn revision_increments_on_every_change<S: TaskStore>(store: S) {
    const RULE: &str = "revision_increments_on_every_change";
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(RULE, &store, task, CreateLimits::default()).await;
    let steps = [
        (
            Transition::Progress {
                message: "1".to_owned(),
            },
            true,
        ),
        (
            Transition::Progress {
                message: "2".to_owned(),
            },
            true,
        ),
        (answer_for(&["x"]), false),
        (
            Transition::RequireInput {
                requests: input_requests(&["x", "y"]),
                message: None,
            },
            true,
        ),
        (answer_for(&["x"]), true),
        (answer_for(&["x"]), false),
        (
            Transition::RequireInput {
                requests: input_requests(&["y"]),
                message: None,
            },
            false,
        ),
        (answer_for(&["y"]), true),
        (
            Transition::Progress {
                message: "3".to_owned(),
            },
            true,
        ),
        (
            Transition::Complete {
                result: json!({"content": []}),
                message: None,
            },
            true,
        ),
        (Transition::Cancel, false),
    ];
    let mut revision = 0;
    let mut updated_at = now;
    for (i, (transition, changes)) in steps.iter().enumerate() {
        let at = now.plus_ms(1 + i as u64);
        let updated = update_found(RULE, &store, &id, Scope::Any, transition, at).await;
        assert_eq!(
            updated.changed(),
            *changes,
            "[{RULE}] step {i}: {transition:?} must {}be applied, got {:?}",
            if *changes { "" } else { "not " },
            updated.outcome
        );
        if *changes {
            revision += 1;
            updated_at = at;
        }
        assert_eq!(
            updated.record.revision, revision,
            "[{RULE}] step {i}: after {transition:?} the revision must be {revision}"
        );
        assert_eq!(
            updated.record.updated_at, updated_at,
            "[{RULE}] step {i}: updated_at must move with every change and only then"
        );
        let stored = get(RULE, &store, &id, Scope::Any, at).await;
        assert_eq!(
            stored.as_ref(),
            Some(&updated.record),
            "[{RULE}] step {i}: the record update returned must be the record stored"
        );
    }
}

/// Contention: 64 concurrent tasks on a multi-thread runtime write to
/// ONE task — half try `Complete`, half `Cancel`, and progress writers each ask for
/// a distinct input key. Exactly one terminal write wins, the final status is the
/// winner's, every writer that was told its change applied finds it in the record,
/// and the revision counts every applied change.
pub async fn concurrent_terminal_writes_one_wins<S: TaskStore>(store: S) {
    race_terminal_writes("concurrent_terminal_writes_one_wins", vec![store], 8).await;
}

/// Contention: 64 concurrent `RequireInput` writers, each with a
/// distinct key, plus as many `Progress` writers, on ONE working task. None may be
/// lost: every key is outstanding afterwards and the revision counts every write.
pub async fn concurrent_updates_never_lost<S: TaskStore>(store: S) {
    race_updates("concurrent_updates_never_lost", vec![store]).await;
}

// ---------------------------------------------------------------------------
// Stores shared between nodes

/// How long the multi-node rules wait for any one thing they expect to happen
/// (an announcement, a woken worker, a notification).
const NODE_PATIENCE: Duration = Duration::from_secs(10);
/// How long one warm-up write waits to be heard before it is written again.
const WARM_UP_TRY: Duration = Duration::from_millis(100);
/// Rounds of the cross-node terminal race.
const NODE_ROUNDS: u64 = 4;

/// Multi-node: a write made through one node is announced on the *other* node's
/// [`subscribe`](TaskStore::subscribe) feed, and never on the writer's own; a
/// transition that writes nothing (an ignored answer) announces nothing.
///
/// `a` and `b` are two instances of the store over the same shared state (one
/// database, one key prefix), as two processes would hold them. The rule relies on
/// one node's announcements arriving in the order of its writes.
pub async fn nodes_announce_to_the_other_node_only<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_announce_to_the_other_node_only";
    let (mut on_a, mut on_b) = warm_up(RULE, &a, &b).await;
    let now = Timestamp::now();

    let x = record(None, now, Some(HOUR_MS));
    create(RULE, &b, x.clone(), CreateLimits::default()).await;
    on_a.next_is(RULE, x.id, "b's create of x on a's feed")
        .await;
    progress(RULE, &b, &x.id).await;
    on_a.next_is(RULE, x.id, "b's update of x on a's feed")
        .await;
    let stray = answer_for(&["nobody-asked"]);
    let ignored = update(RULE, &b, &x.id, Scope::Any, &stray, Timestamp::now())
        .await
        .unwrap_or_else(|| panic!("[{RULE}] node b must find the task it created"));
    assert_eq!(
        ignored.outcome,
        Ok(Applied::Unchanged),
        "[{RULE}] an answer while the task is working must be ignored"
    );

    let y = record(Some(Principal::from("alice")), now, Some(HOUR_MS));
    create(RULE, &a, y.clone(), CreateLimits::default()).await;
    // b's own writes of x must not come first.
    on_b.next_is(RULE, y.id, "a's create of y on b's feed")
        .await;
    let z = record(None, now, Some(HOUR_MS));
    create(RULE, &b, z.clone(), CreateLimits::default()).await;
    // Neither the ignored answer nor a's own create of y may come first.
    on_a.next_is(RULE, z.id, "b's create of z on a's feed")
        .await;
    let w = record(None, now, Some(HOUR_MS));
    create(RULE, &a, w.clone(), CreateLimits::default()).await;
    on_b.next_is(RULE, w.id, "a's create of w on b's feed")
        .await;
    progress(RULE, &a, &w.id).await;
    on_b.next_is(RULE, w.id, "a's update of w on b's feed")
        .await;
    on_a.assert_drained(RULE, "a");
    on_b.assert_drained(RULE, "b");
}

/// Multi-node: a [`TasksLayer`] built over node `a` sees what is
/// written through node `b`. An answer given through `b` wakes
/// [`Tasks::wait_for_input`](crate::Tasks::wait_for_input) on `a`, and a cancel
/// through `b` reaches `a`'s notifier and [`Tasks::is_cancelled`](crate::Tasks::is_cancelled).
/// `a`'s notifier sees the task exactly as `input_required` (its own write),
/// `working` and `cancelled` (`b`'s two writes): a store that also announced a
/// node's own writes would notify twice.
///
/// `a` and `b` share state as in [`nodes_announce_to_the_other_node_only`].
pub async fn nodes_remote_writes_reach_the_layer<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_remote_writes_reach_the_layer";
    let a = Arc::new(a);
    let (sink, mut notified) = mpsc::unbounded_channel::<(TaskId, TaskStatus)>();
    let (reads, mut read) = mpsc::unbounded_channel::<TaskId>();
    let layer = TasksLayer::builder(ReadsReported {
        node: a.clone(),
        reads,
    })
    .without_janitor()
    .with_notifier(move |task: &TaskRecord| {
        let _ = sink.send((task.id, task.status));
    })
    .build()
    .unwrap_or_else(|e| panic!("[{RULE}] a layer over node a: {e}"));
    let tasks = layer.handle();

    // The layer's relay may start listening in the background: write through b
    // until a's notifier hears it, so that the writes below cannot go unheard.
    let probe = record(None, Timestamp::now(), Some(HOUR_MS));
    create(RULE, &b, probe.clone(), CreateLimits::default()).await;
    let deadline = tokio::time::Instant::now() + NODE_PATIENCE;
    'warm: loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "[{RULE}] no write through b reached a's notifier within {NODE_PATIENCE:?}"
        );
        progress(RULE, &b, &probe.id).await;
        let tried = tokio::time::Instant::now() + WARM_UP_TRY;
        while let Ok(event) = tokio::time::timeout_at(tried, notified.recv()).await {
            match event {
                Some((id, _)) if id == probe.id => break 'warm,
                Some(_) => {}
                None => panic!("[{RULE}] the notifier was dropped"),
            }
        }
    }

    let task = record(None, Timestamp::now(), Some(HOUR_MS));
    let id = task.id;
    create(RULE, &*a, task, CreateLimits::default()).await;
    let ask = InputRequests::new().with("go", InputRequest::confirm("Go?", "ok"));
    tasks
        .require_input(&id, ask)
        .await
        .unwrap_or_else(|e| panic!("[{RULE}] require_input through the layer on a: {e}"));
    while read.try_recv().is_ok() {}
    let waiter = tokio::spawn({
        let tasks = tasks.clone();
        async move { tasks.wait_for_input(&id).await }
    });
    // Answer only once the worker has read the task as input_required: from then on
    // it can only return by being woken.
    let deadline = tokio::time::Instant::now() + NODE_PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, read.recv()).await {
            Ok(Some(other)) if other == id => break,
            Ok(Some(_)) => {}
            Ok(None) => panic!("[{RULE}] the layer's store was dropped"),
            Err(_) => {
                panic!("[{RULE}] the worker on a did not read its task within {NODE_PATIENCE:?}")
            }
        }
    }

    // The client's tasks/update lands on node b.
    let answer = Transition::Answer {
        responses: [("go".to_owned(), json!({"action": "accept"}))]
            .into_iter()
            .collect(),
    };
    let answered = update(RULE, &b, &id, Scope::Owner(None), &answer, Timestamp::now())
        .await
        .unwrap_or_else(|| panic!("[{RULE}] node b must see the task node a created"));
    assert!(
        answered.changed(),
        "[{RULE}] the answer through b must be applied"
    );
    assert_eq!(
        answered.record.status,
        TaskStatus::Working,
        "[{RULE}] the last answer must make the task working again"
    );
    let answers = match tokio::time::timeout(NODE_PATIENCE, waiter).await {
        Ok(Ok(Ok(answers))) => answers,
        Ok(Ok(Err(e))) => panic!("[{RULE}] wait_for_input on a failed: {e}"),
        Ok(Err(e)) => panic!("[{RULE}] the worker on a did not finish: {e}"),
        Err(_) => panic!(
            "[{RULE}] the worker waiting on a must wake on the answer given through b within {NODE_PATIENCE:?}"
        ),
    };
    assert_eq!(
        answers["go"]["action"], "accept",
        "[{RULE}] the worker on a must receive the answer given through b"
    );

    let cancelled = update(
        RULE,
        &b,
        &id,
        Scope::Owner(None),
        &Transition::Cancel,
        Timestamp::now(),
    )
    .await
    .unwrap_or_else(|| panic!("[{RULE}] node b must see the task node a created"));
    assert!(
        cancelled.changed(),
        "[{RULE}] the cancel through b must be applied"
    );
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + NODE_PATIENCE;
    while seen.last() != Some(&TaskStatus::Cancelled) {
        match tokio::time::timeout_at(deadline, notified.recv()).await {
            Ok(Some((changed, status))) if changed == id => seen.push(status),
            Ok(Some(_)) => {}
            Ok(None) => panic!("[{RULE}] the notifier was dropped"),
            Err(_) => panic!(
                "[{RULE}] the cancel through b never reached a's notifier within {NODE_PATIENCE:?}; it saw {seen:?}"
            ),
        }
    }
    assert!(
        tasks.is_cancelled(&id).await,
        "[{RULE}] the worker on a must see the cancel given through b"
    );
    assert_eq!(
        seen,
        [
            TaskStatus::InputRequired,
            TaskStatus::Working,
            TaskStatus::Cancelled
        ],
        "[{RULE}] a's notifier must see its own write once and b's two writes once each"
    );
}

/// Multi-node contention: the race of [`concurrent_terminal_writes_one_wins`] with
/// its writers spread over `nodes` (two or more instances sharing state). In every
/// round exactly one terminal write wins across all the nodes, and every node then
/// reads the very record the winner's `update` returned. Needs a multi-thread
/// runtime.
pub async fn nodes_concurrent_terminal_writes_one_wins<S: TaskStore>(nodes: Vec<S>) {
    const RULE: &str = "nodes_concurrent_terminal_writes_one_wins";
    require_nodes(RULE, &nodes);
    race_terminal_writes(RULE, nodes, NODE_ROUNDS).await;
}

/// Multi-node contention: the writers of [`concurrent_updates_never_lost`] spread
/// over `nodes` (two or more instances sharing state). None may be lost, and every
/// node reads the same record. Needs a multi-thread runtime.
pub async fn nodes_concurrent_updates_never_lost<S: TaskStore>(nodes: Vec<S>) {
    const RULE: &str = "nodes_concurrent_updates_never_lost";
    require_nodes(RULE, &nodes);
    race_updates(RULE, nodes).await;
}

/// Runs every rule of the suite as a `#[tokio::test]` on a multi-thread runtime.
///
/// The argument is an expression evaluating to a future of a fresh, empty store; it
/// is evaluated once per test. Invoke the macro inside a module of its own, since
/// each rule becomes a test function named after it.
///
/// ```no_run
/// mod memory_store_contract {
///     mcp_tasks::task_store_tests!(async { mcp_tasks::MemoryStore::new() });
/// }
///
/// mod shared_store_contract {
///     use std::sync::Arc;
///
///     async fn shared() -> Arc<dyn mcp_tasks::TaskStore> {
///         Arc::new(mcp_tasks::MemoryStore::new())
///     }
///
///     mcp_tasks::task_store_tests!(shared());
/// }
/// # fn main() {}
/// ```
///
/// The test crate needs `tokio` with the `macros` and `rt-multi-thread` features.
#[macro_export]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
macro_rules! task_store_tests {
    ($factory:expr $(,)?) => {
        $crate::task_store_tests!(@rules $factory;
            create_then_get,
            create_rejects_duplicate_id,
            foreign_owner_reads_as_missing,
            scope_any_sees_all,
            terminal_states_never_change,
            rejected_transition_changes_nothing,
            answers_for_keys_not_outstanding_are_ignored,
            partial_answers_keep_input_required,
            duplicate_input_keys_rejected,
            expired_reads_as_absent,
            cleanup_removes_expired,
            terminal_without_ttl_evicted_after_retention,
            max_rows_enforced_atomically,
            per_owner_cap_enforced,
            revision_increments_on_every_change,
            concurrent_terminal_writes_one_wins,
            concurrent_updates_never_lost,
        );
    };
    (@rules $factory:expr; $($rule:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $rule() {
                $crate::test_suite::$rule($factory.await).await;
            }
        )*
    };
}

/// Runs every multi-node rule of the suite (the `nodes_*` functions) as a
/// `#[tokio::test]` on a multi-thread runtime: the contract any store that
/// implements [`TaskStore::subscribe`](crate::TaskStore::subscribe) must keep.
///
/// The argument is an expression evaluating to a future of
/// `Option<(S, S)>`: two instances of the store over the same fresh shared state
/// (one database table, one key prefix), as two processes would hold them. It is
/// evaluated once per test. `None` skips the test, for a backend that is not
/// available where the tests run (say so before returning it). Invoke the macro
/// inside a module of its own, next to [`task_store_tests!`](crate::task_store_tests).
///
/// ```no_run
/// mod shared_store_nodes {
///     use std::sync::Arc;
///
///     use mcp_tasks::TaskStore;
///
///     /// Two handles on one shared database, or `None` where none is configured.
///     async fn two_nodes() -> Option<(Arc<dyn TaskStore>, Arc<dyn TaskStore>)> {
///         let url = std::env::var("MY_STORE_URL").ok()?;
///         Some((connect(&url).await, connect(&url).await))
///     }
///     # async fn connect(_url: &str) -> Arc<dyn TaskStore> { Arc::new(mcp_tasks::MemoryStore::new()) }
///
///     mcp_tasks::task_store_node_tests!(two_nodes());
/// }
/// # fn main() {}
/// ```
///
/// The test crate needs `tokio` with the `macros` and `rt-multi-thread` features.
#[macro_export]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
macro_rules! task_store_node_tests {
    ($factory:expr $(,)?) => {
        $crate::task_store_node_tests!(@pair $factory;
            nodes_announce_to_the_other_node_only,
            nodes_remote_writes_reach_the_layer,
        );
        $crate::task_store_node_tests!(@all $factory;
            nodes_concurrent_terminal_writes_one_wins,
            nodes_concurrent_updates_never_lost,
        );
    };
    (@pair $factory:expr; $($rule:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $rule() {
                if let ::core::option::Option::Some((a, b)) = $factory.await {
                    $crate::test_suite::$rule(a, b).await;
                }
            }
        )*
    };
    (@all $factory:expr; $($rule:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $rule() {
                if let ::core::option::Option::Some((a, b)) = $factory.await {
                    $crate::test_suite::$rule(::std::vec![a, b]).await;
                }
            }
        )*
    };
}

fn record(owner: Option<Principal>, now: Timestamp, ttl_ms: Option<u64>) -> TaskRecord {
    let mut record = TaskRecord::new(TaskId::random(), owner, now);
    record.ttl_ms = ttl_ms;
    record
}

fn input_requests(keys: &[&str]) -> Map<String, Value> {
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

fn answer() -> Value {
    json!({"action": "accept", "content": {"ok": true}})
}

fn answer_for(keys: &[&str]) -> Transition {
    Transition::Answer {
        responses: keys.iter().map(|k| ((*k).to_owned(), answer())).collect(),
    }
}

fn require_multi_thread(rule: &str) {
    let flavor = tokio::runtime::Handle::current().runtime_flavor();
    assert_eq!(
        flavor,
        tokio::runtime::RuntimeFlavor::MultiThread,
        "[{rule}] this rule checks concurrent writers and must run on a multi-thread tokio runtime"
    );
}

fn require_nodes<S>(rule: &str, nodes: &[S]) {
    assert!(
        nodes.len() >= 2,
        "[{rule}] this rule needs two or more nodes sharing one store, got {}",
        nodes.len()
    );
}

/// A node as a layer sees it, reporting the id of every `get` once it returned, so
/// a rule can tell when a worker has read a task.
#[derive(Debug)]
struct ReadsReported<S> {
    node: Arc<S>,
    reads: mpsc::UnboundedSender<TaskId>,
}

impl<S: TaskStore> TaskStore for ReadsReported<S> {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.node.create(record, limits)
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let found = self.node.get(id, scope, now).await;
            let _ = self.reads.send(*id);
            found
        })
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        self.node.update(id, scope, transition, now)
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        self.node.cleanup(now, retention)
    }

    fn subscribe(&self) -> Option<ChangeFeed> {
        self.node.subscribe()
    }
}

/// A progress write on the working task `id` through `node`, which must find the
/// task and apply the write.
async fn progress<S: TaskStore + ?Sized>(rule: &str, node: &S, id: &TaskId) {
    let progress = Transition::Progress {
        message: "ping".to_owned(),
    };
    let updated = update(rule, node, id, Scope::Any, &progress, Timestamp::now())
        .await
        .unwrap_or_else(|| panic!("[{rule}] the task must be found through every node"));
    assert!(
        updated.changed(),
        "[{rule}] progress on a working task must be applied"
    );
}

/// A node's change feed, as a multi-node rule reads it.
struct Announcements {
    feed: ChangeFeed,
    /// The warm-up task, whose late announcements are skipped.
    probe: TaskId,
}

impl Announcements {
    /// Asserts that the next id announced (after any late warm-up ones) is
    /// `expected`.
    async fn next_is(&mut self, rule: &str, expected: TaskId, what: &str) {
        let announced = loop {
            match tokio::time::timeout(NODE_PATIENCE, self.feed.recv()).await {
                Ok(Some(FeedEvent::Changed(id))) if id == self.probe => continue,
                Ok(Some(FeedEvent::Changed(id))) => break id,
                Ok(Some(FeedEvent::Missed(n))) => {
                    panic!("[{rule}] {what}: the feed skipped {n} ids")
                }
                Ok(None) => panic!("[{rule}] {what}: the feed closed"),
                Err(_) => {
                    panic!("[{rule}] {what}: nothing was announced within {NODE_PATIENCE:?}")
                }
            }
        };
        assert!(
            announced == expected,
            "[{rule}] {what}: another task's id was announced first"
        );
    }

    /// Asserts that nothing more was announced.
    fn assert_drained(&mut self, rule: &str, node: &str) {
        match self.feed.try_recv() {
            None if !self.feed.is_closed() => {}
            None => panic!("[{rule}] node {node}'s feed closed"),
            Some(FeedEvent::Changed(_)) => {
                panic!("[{rule}] node {node}'s feed carried one of node {node}'s own writes")
            }
            Some(event) => panic!("[{rule}] node {node}'s feed failed: {event:?}"),
        }
    }
}

/// Subscribes to both nodes' feeds and makes sure each node hears the other before
/// a rule starts: a store may start listening in the background on `subscribe`, so
/// its first writes may go unheard. Creates a probe task through `a`, then writes
/// it through `a` until `b`'s feed announces it, and through `b` until `a`'s does.
async fn warm_up<S: TaskStore + ?Sized>(
    rule: &str,
    a: &S,
    b: &S,
) -> (Announcements, Announcements) {
    let subscribe = |node: &S, name: &str| {
        node.subscribe().unwrap_or_else(|| {
            panic!("[{rule}] node {name} must have a change feed: subscribe() returned None")
        })
    };
    let (mut feed_a, mut feed_b) = (subscribe(a, "a"), subscribe(b, "b"));
    let probe = record(None, Timestamp::now(), Some(HOUR_MS));
    create(rule, a, probe.clone(), CreateLimits::default()).await;
    for (writer, feed, what) in [
        (a, &mut feed_b, "a on b's feed"),
        (b, &mut feed_a, "b on a's feed"),
    ] {
        let deadline = tokio::time::Instant::now() + NODE_PATIENCE;
        'heard: loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "[{rule}] no write by {what} was announced within {NODE_PATIENCE:?}"
            );
            progress(rule, writer, &probe.id).await;
            let tried = tokio::time::Instant::now() + WARM_UP_TRY;
            while let Ok(announced) = tokio::time::timeout_at(tried, feed.recv()).await {
                match announced {
                    Some(FeedEvent::Changed(id)) if id == probe.id => break 'heard,
                    Some(FeedEvent::Changed(_)) => {}
                    other => panic!("[{rule}] the change feed failed while warming up: {other:?}"),
                }
            }
        }
    }
    let on = |feed| Announcements {
        feed,
        probe: probe.id,
    };
    (on(feed_a), on(feed_b))
}

async fn create<S: TaskStore + ?Sized>(
    rule: &str,
    store: &S,
    record: TaskRecord,
    limits: CreateLimits,
) {
    if let Err(e) = store.create(record, limits).await {
        panic!("[{rule}] create of a fresh record failed: {e}");
    }
}

async fn get<S: TaskStore + ?Sized>(
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

async fn update<S: TaskStore + ?Sized>(
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
async fn get_found<S: TaskStore + ?Sized>(
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
async fn update_found<S: TaskStore + ?Sized>(
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

async fn cleanup<S: TaskStore + ?Sized>(
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

/// The terminal race of [`concurrent_terminal_writes_one_wins`], `rounds` times,
/// writer `i` writing through `nodes[i % nodes.len()]`; afterwards every node must
/// read the winner's record.
async fn race_terminal_writes<S: TaskStore>(rule: &'static str, nodes: Vec<S>, rounds: u64) {
    require_multi_thread(rule);
    let nodes = Arc::new(nodes);
    let alice = Principal::from("alice");
    for round in 0..rounds {
        let now = Timestamp::now();
        let task = record(Some(alice.clone()), now, Some(HOUR_MS));
        let id = task.id;
        create(rule, &nodes[0], task, CreateLimits::default()).await;
        let writers: Vec<(usize, Transition)> = (0..WRITERS)
            .map(|i| {
                let transition = match i % 4 {
                    0 => Transition::Complete {
                        result: json!({"content": [{"type": "text", "text": format!("writer {i}")}]}),
                        message: None,
                    },
                    1 => Transition::Cancel,
                    _ => Transition::RequireInput {
                        requests: input_requests(&[&format!("key-{i}")]),
                        message: Some(format!("writer {i}")),
                    },
                };
                (i, transition)
            })
            .collect();
        let results = race_over(&nodes, id, &writers, |i| now.plus_ms(1 + (i as u64 % 7))).await;
        let mut winners = Vec::new();
        let mut applied_keys = BTreeSet::new();
        let mut refused_keys = BTreeSet::new();
        let mut changes = 0u64;
        for ((i, transition), result) in writers.iter().zip(results) {
            let updated = match result {
                Ok(Some(updated)) => updated,
                Ok(None) => panic!("[{rule}] round {round}: writer {i} did not find the task"),
                Err(e) => panic!("[{rule}] round {round}: writer {i} got Err({e})"),
            };
            if updated.changed() {
                changes += 1;
            }
            match transition {
                Transition::Complete { .. } | Transition::Cancel => {
                    if updated.changed() {
                        winners.push((*i, transition, updated.record));
                    } else {
                        let expected = if matches!(transition, Transition::Cancel) {
                            Ok(Applied::Unchanged)
                        } else {
                            Err(TransitionError::Terminal)
                        };
                        assert_eq!(
                            updated.outcome, expected,
                            "[{rule}] round {round}: a losing terminal write must be refused as the state machine says"
                        );
                    }
                }
                _ => {
                    let key = format!("key-{i}");
                    match updated.outcome {
                        Ok(Applied::Changed) => applied_keys.insert(key),
                        Err(TransitionError::Terminal) => refused_keys.insert(key),
                        other => panic!(
                            "[{rule}] round {round}: writer {i}'s fresh key must be applied or refused as Terminal, got {other:?}"
                        ),
                    };
                }
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "[{rule}] round {round}: exactly one terminal write must win among {WRITERS} writers on {} node(s), {} did",
            nodes.len(),
            winners.len()
        );
        let (winner, winning, written) = &winners[0];
        for (n, node) in nodes.iter().enumerate() {
            let scope = if n % 2 == 0 {
                Scope::Any
            } else {
                Scope::Owner(Some(&alice))
            };
            let stored = get(rule, node, &id, scope, now.plus_ms(10)).await;
            assert_eq!(
                stored.as_ref(),
                Some(written),
                "[{rule}] round {round}: node {n} must read the record the winning write returned"
            );
        }
        let expected_status = match winning {
            Transition::Cancel => TaskStatus::Cancelled,
            _ => TaskStatus::Completed,
        };
        assert_eq!(
            written.status, expected_status,
            "[{rule}] round {round}: the final status must be the winner's"
        );
        if expected_status == TaskStatus::Completed {
            assert_eq!(
                written.result,
                Some(json!({"content": [{"type": "text", "text": format!("writer {winner}")}]})),
                "[{rule}] round {round}: the stored result must be the winning writer's"
            );
        }
        for key in &applied_keys {
            assert!(
                written.issued_keys.contains(key),
                "[{rule}] round {round}: {key} was reported applied but is missing: an update was lost"
            );
        }
        for key in &refused_keys {
            assert!(
                !written.issued_keys.contains(key),
                "[{rule}] round {round}: {key} was refused but is in the record"
            );
        }
        assert_eq!(
            written.revision, changes,
            "[{rule}] round {round}: the revision must count every applied change"
        );
    }
}

/// The writers of [`concurrent_updates_never_lost`], writer `i` writing through
/// `nodes[i % nodes.len()]`; afterwards every node must read the same record.
async fn race_updates<S: TaskStore>(rule: &'static str, nodes: Vec<S>) {
    require_multi_thread(rule);
    let nodes = Arc::new(nodes);
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    let id = task.id;
    create(rule, &nodes[0], task, CreateLimits::default()).await;
    let writers: Vec<(usize, Transition)> = (0..2 * WRITERS)
        .map(|i| {
            let transition = if i % 2 == 0 {
                Transition::RequireInput {
                    requests: input_requests(&[&format!("key-{i}")]),
                    message: None,
                }
            } else {
                Transition::Progress {
                    message: format!("progress {i}"),
                }
            };
            (i, transition)
        })
        .collect();
    let results = race_over(&nodes, id, &writers, |i| now.plus_ms(1 + i as u64)).await;
    for ((i, transition), result) in writers.iter().zip(results) {
        match result {
            Ok(Some(updated)) if updated.changed() => {}
            other => panic!(
                "[{rule}] writer {i} ({transition:?}) on a live task must be applied, got {:?}",
                other.map(|o| o.map(|u| u.outcome))
            ),
        }
    }
    let at = now.plus_ms(1 + 2 * WRITERS as u64);
    let final_record = get_found(rule, &nodes[0], &id, Scope::Any, at).await;
    let expected: BTreeSet<String> = (0..2 * WRITERS)
        .step_by(2)
        .map(|i| format!("key-{i}"))
        .collect();
    let lost: Vec<&String> = expected
        .iter()
        .filter(|k| !final_record.input_requests.contains_key(*k))
        .collect();
    assert!(
        lost.is_empty(),
        "[{rule}] {} of {WRITERS} concurrent input requests were lost: {lost:?}",
        lost.len()
    );
    assert_eq!(
        final_record.issued_keys, expected,
        "[{rule}] issued_keys must hold exactly the {WRITERS} keys asked for"
    );
    assert_eq!(
        final_record.status,
        TaskStatus::InputRequired,
        "[{rule}] the task must be input_required"
    );
    assert_eq!(
        final_record.revision,
        2 * WRITERS as u64,
        "[{rule}] the revision must count all {} applied writes",
        2 * WRITERS
    );
    for (n, node) in nodes.iter().enumerate().skip(1) {
        assert_eq!(
            get(rule, node, &id, Scope::Any, at).await.as_ref(),
            Some(&final_record),
            "[{rule}] node {n} must read the same record as node 0"
        );
    }
}

/// Runs every writer at once, writer `i` applying its transition to `id` at `at(i)`
/// through `nodes[i % nodes.len()]`; the results in writer order.
async fn race_over<S: TaskStore>(
    nodes: &Arc<Vec<S>>,
    id: TaskId,
    writers: &[(usize, Transition)],
    at: impl Fn(usize) -> Timestamp,
) -> Vec<Result<Option<Updated>, StoreError>> {
    race(writers.to_vec(), |(i, transition): (usize, Transition)| {
        let nodes = nodes.clone();
        let at = at(i);
        async move {
            let node = &nodes[i % nodes.len()];
            update_retrying(node, &id, &transition, at).await
        }
    })
    .await
}

/// An update that retries [`StoreError::Contention`], which promises nothing was
/// written.
async fn update_retrying<S: TaskStore + ?Sized>(
    store: &S,
    id: &TaskId,
    transition: &Transition,
    now: Timestamp,
) -> Result<Option<Updated>, StoreError> {
    let mut tries = 0;
    loop {
        match store.update(id, Scope::Any, transition, now).await {
            Err(StoreError::Contention) if tries < CONTENTION_RETRIES => {
                tries += 1;
                tokio::task::yield_now().await;
            }
            result => return result,
        }
    }
}

/// Runs `op` on every input in its own tokio task, all released at once by a
/// barrier, and returns the results in input order.
async fn race<I, F, Fut, T>(inputs: Vec<I>, op: F) -> Vec<T>
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
