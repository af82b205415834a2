//! Property tests of the stores against one model: `MemoryStore` always,
//! `PostgresStore` and `RedisStore` when `DATABASE_URL` / `REDIS_URL` name a server
//! (skipped with a message otherwise, except under CI, where they fail).
//!
//! - **Sequences.** Random sequences of `create` (owners from a small set, with or
//!   without a TTL), `get` and `visible` (in the owner's scope, a foreign one, and
//!   `Scope::Any`), `update` with every kind of transition, clock advances and
//!   `cleanup` with a random retention. Every answer is compared with the model: a
//!   foreign owner reads as missing, an expired task reads as absent, `cleanup`
//!   removes exactly the expired tasks and the terminal tasks without a TTL retired
//!   for longer than the retention.
//! - **Concurrent writers.** For a few tasks at once, N writers (tokio tasks) apply
//!   random transitions, each ending with a terminal one. Exactly one terminal write
//!   wins; the revisions of the `Changed` outcomes are exactly 1..=n (no update is
//!   lost); replaying the changed transitions in revision order through the model
//!   gives every intermediate record returned and the final one.
//!
//! Cases: 64 for the memory store, 16 for each backend; `PROPTEST_CASES` overrides
//! both.
//!
//! Simulated time starts at the wall clock and only moves forward, and every TTL is
//! at least a minute, so Redis's native expiry (wall clock) never drops a record
//! before the simulated clock expires it.

mod support;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks::error::TransitionError;
use mcp_tasks::store::TaskStore;
use mcp_tasks::store::{Applied, CreateLimits, ErrorObject, Scope, Timestamp, Transition, Updated};
use mcp_tasks::{MemoryStore, Principal, TaskId, TaskRecord, TaskStatus};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde_json::{Value, json};
use support::model::{METHODS, Model, Outcome, terminal};

// ---------------------------------------------------------------------------------
// Running properties against stores.
// ---------------------------------------------------------------------------------

/// The number of cases: `PROPTEST_CASES`, or `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `test` on `cases` values of `strategy`, each on a fresh multi-thread runtime
/// (so pools and connections never outlive the case that made them); panics with
/// the minimal failing input.
fn check<S, F, Fut>(what: &str, cases: u32, strategy: S, test: F)
where
    S: Strategy,
    S::Value: Debug,
    F: Fn(S::Value) -> Fut,
    Fut: Future<Output = Result<(), TestCaseError>>,
{
    let config = ProptestConfig {
        cases,
        source_file: Some(file!()),
        max_shrink_iters: 512,
        ..ProptestConfig::default()
    };
    let started = Instant::now();
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy, |value| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(test(value))
    });
    match result {
        Ok(()) => eprintln!("{what}: {cases} cases passed in {:?}", started.elapsed()),
        Err(e) => panic!("{what}: {e}"),
    }
}

type Fresh = fn() -> std::pin::Pin<Box<dyn Future<Output = Arc<dyn TaskStore>> + Send>>;

fn memory() -> std::pin::Pin<Box<dyn Future<Output = Arc<dyn TaskStore>> + Send>> {
    Box::pin(async { Arc::new(MemoryStore::new()) as Arc<dyn TaskStore> })
}

#[cfg(feature = "postgres")]
fn postgres() -> std::pin::Pin<Box<dyn Future<Output = Arc<dyn TaskStore>> + Send>> {
    Box::pin(async {
        let store = support::stores::postgres::scratch()
            .await
            .expect("DATABASE_URL was checked");
        Arc::new(store) as Arc<dyn TaskStore>
    })
}

#[cfg(feature = "redis")]
fn redis() -> std::pin::Pin<Box<dyn Future<Output = Arc<dyn TaskStore>> + Send>> {
    Box::pin(async {
        let store = support::stores::redis::scratch()
            .await
            .expect("REDIS_URL was checked");
        Arc::new(store) as Arc<dyn TaskStore>
    })
}

/// Fails the case with `what` when `cond` does not hold (the `prop_assert!` of an
/// async block).
fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), TestCaseError> {
    if cond {
        Ok(())
    } else {
        Err(TestCaseError::fail(what()))
    }
}

fn store_ok<T>(what: &str, r: Result<T, mcp_tasks::error::StoreError>) -> Result<T, TestCaseError> {
    r.map_err(|e| {
        let cause = std::error::Error::source(&e).map(|c| c.to_string());
        TestCaseError::fail(format!("{what}: the store failed: {e} ({cause:?})"))
    })
}

// ---------------------------------------------------------------------------------
// Strategies.
// ---------------------------------------------------------------------------------

const KEYS: [&str; 4] = ["a", "b", "c", "d"];
const OWNERS: usize = 3;

fn owner(i: usize) -> Option<Principal> {
    match i {
        0 => None,
        1 => Some(Principal::from("alice")),
        _ => Some(Principal::from("bob")),
    }
}

fn request() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop::sample::select(METHODS.to_vec()).prop_map(|m| json!({"method": m, "params": {}})),
        1 => Just(json!({"method": "tools/call"})),
        1 => Just(json!({"method": "roots/list", "id": 1})),
    ]
}

fn keyed<V: Debug + Clone>(
    value: impl Strategy<Value = V>,
    keys: &'static [&'static str],
) -> impl Strategy<Value = Vec<(String, V)>> {
    prop::collection::vec(
        (prop::sample::select(keys).prop_map(str::to_owned), value),
        0..3,
    )
}

fn transition() -> impl Strategy<Value = Transition> {
    let message = prop::option::of(Just("Working on it".to_owned()));
    prop_oneof![
        2 => Just(Transition::Progress { message: "Half way".into() }),
        3 => (keyed(request(), &KEYS), message.clone()).prop_map(|(requests, message)| {
            Transition::RequireInput { requests: requests.into_iter().collect(), message }
        }),
        1 => (
            prop_oneof![4 => Just(json!({"content": []})), 1 => Just(json!("nope"))],
            message.clone()
        )
            .prop_map(|(result, message)| Transition::Complete { result, message }),
        1 => message.prop_map(|message| Transition::Fail {
            error: ErrorObject::new(-32603, "backend crashed").with_data(json!({"status": 502})),
            message,
        }),
        3 => keyed(
            prop_oneof![6 => Just(json!({"action": "accept"})), 1 => Just(json!(42))],
            &["a", "b", "c", "d", "zzz"],
        )
        .prop_map(|responses| Transition::Answer { responses: responses.into_iter().collect() }),
        1 => Just(Transition::Cancel),
    ]
}

/// Who reads: an owner (index into the owners) or anyone.
#[derive(Debug, Clone, Copy)]
enum Who {
    Owner(usize),
    Any,
}

fn who() -> impl Strategy<Value = Who> {
    prop_oneof![3 => (0..OWNERS).prop_map(Who::Owner), 1 => Just(Who::Any)]
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        owner: usize,
        ttl_ms: Option<u64>,
    },
    Get {
        task: prop::sample::Index,
        who: Who,
    },
    Update {
        task: prop::sample::Index,
        who: Who,
        transition: Transition,
    },
    Advance(u64),
    /// The clock to a task's expiry, or to 1 ms before it (the boundary).
    ToExpiry {
        task: prop::sample::Index,
        before: bool,
    },
    Cleanup {
        retention_ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..OWNERS, prop::option::of(60_000u64..600_000))
            .prop_map(|(owner, ttl_ms)| Op::Create { owner, ttl_ms }),
        2 => (any::<prop::sample::Index>(), who()).prop_map(|(task, who)| Op::Get { task, who }),
        6 => (any::<prop::sample::Index>(), who(), transition())
            .prop_map(|(task, who, transition)| Op::Update { task, who, transition }),
        2 => prop_oneof![0u64..1_000, 1_000u64..120_000].prop_map(Op::Advance),
        1 => (any::<prop::sample::Index>(), any::<bool>())
            .prop_map(|(task, before)| Op::ToExpiry { task, before }),
        1 => prop::sample::select(vec![0u64, 1_000, 60_000, 600_000])
            .prop_map(|retention_ms| Op::Cleanup { retention_ms }),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..50)
}

// ---------------------------------------------------------------------------------
// Sequences.
// ---------------------------------------------------------------------------------

/// One task as the model has it.
#[derive(Debug)]
struct Slot {
    id: TaskId,
    owner: usize,
    created_at: u64,
    ttl_ms: Option<u64>,
    model: Model,
    /// Removed by a `cleanup`.
    removed: bool,
}

impl Slot {
    fn expired(&self, now: u64) -> bool {
        self.ttl_ms.is_some_and(|ttl| self.created_at + ttl <= now)
    }

    fn visible(&self, who: Who, now: u64) -> bool {
        let permitted = match who {
            Who::Any => true,
            Who::Owner(i) => owner(i) == owner(self.owner),
        };
        !self.removed && !self.expired(now) && permitted
    }

    fn check(&self, record: &TaskRecord) -> Result<(), TestCaseError> {
        ensure(record.id == self.id, || "another task's record".into())?;
        ensure(record.owner == owner(self.owner), || {
            format!("owner {:?}, expected {:?}", record.owner, owner(self.owner))
        })?;
        ensure(
            record.created_at.as_millis() == self.created_at && record.ttl_ms == self.ttl_ms,
            || "created_at or ttl_ms changed".into(),
        )?;
        let actual = Model::of(record);
        ensure(actual == self.model, || {
            format!("expected {:#?}\nactual {actual:#?}", self.model)
        })?;
        ensure(
            record.result.is_some() == (record.status == TaskStatus::Completed)
                && record.error.is_some() == (record.status == TaskStatus::Failed),
            || "a result or an error in the wrong status".into(),
        )
    }
}

fn scope(who: Who, owners: &[Option<Principal>]) -> Scope<'_> {
    match who {
        Who::Any => Scope::Any,
        Who::Owner(i) => Scope::Owner(owners[i].as_ref()),
    }
}

async fn sequence(store: Arc<dyn TaskStore>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let owners: Vec<Option<Principal>> = (0..OWNERS).map(owner).collect();
    let mut now = Timestamp::now().as_millis();
    let mut slots: Vec<Slot> = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        let at = Timestamp::from_millis(now);
        match op {
            Op::Create { owner: o, ttl_ms } => {
                let mut record = TaskRecord::new(TaskId::random(), owner(o), at);
                record.ttl_ms = ttl_ms;
                let id = record.id;
                store_ok(
                    &format!("op {i}: create"),
                    store.create(record, CreateLimits::default()).await,
                )?;
                slots.push(Slot {
                    id,
                    owner: o,
                    created_at: now,
                    ttl_ms,
                    model: Model::new(now),
                    removed: false,
                });
            }
            Op::Get { task, who } => {
                if slots.is_empty() {
                    continue;
                }
                let slot = &slots[task.index(slots.len())];
                let found = store_ok(
                    &format!("op {i}: get"),
                    store.get(&slot.id, scope(who, &owners), at).await,
                )?;
                let expected = slot.visible(who, now);
                ensure(found.is_some() == expected, || {
                    format!(
                        "op {i}: get({who:?}) of a task owned by {:?}, removed {}, expired {}: found {}",
                        owner(slot.owner),
                        slot.removed,
                        slot.expired(now),
                        found.is_some()
                    )
                })?;
                if let Some(record) = &found {
                    slot.check(record)?;
                }
                let unknown = TaskId::random();
                let ids = [slot.id, unknown, slot.id];
                let visible = store_ok(
                    &format!("op {i}: visible"),
                    store.visible(&ids, scope(who, &owners), at).await,
                )?;
                let want = if expected { vec![slot.id] } else { vec![] };
                ensure(visible == want, || {
                    format!("op {i}: visible({who:?}) = {visible:?}, expected {want:?}")
                })?;
            }
            Op::Update {
                task,
                who,
                transition,
            } => {
                if slots.is_empty() {
                    continue;
                }
                let n = slots.len();
                let slot = &mut slots[task.index(n)];
                let updated = store_ok(
                    &format!("op {i}: update"),
                    store
                        .update(&slot.id, scope(who, &owners), &transition, at)
                        .await,
                )?;
                if !slot.visible(who, now) {
                    ensure(updated.is_none(), || {
                        format!("op {i}: update({who:?}) of an invisible task found it")
                    })?;
                    continue;
                }
                let Some(Updated {
                    record, outcome, ..
                }) = updated
                else {
                    return Err(TestCaseError::fail(format!(
                        "op {i}: update({who:?}) of a visible task found nothing"
                    )));
                };
                let expected = slot.model.step(&transition, now);
                ensure(Outcome::of(&outcome) == expected, || {
                    format!("op {i}: {transition:?}: outcome {outcome:?}, expected {expected:?}")
                })?;
                slot.check(&record)?;
            }
            Op::Advance(ms) => now += ms,
            Op::ToExpiry { task, before } => {
                if slots.is_empty() {
                    continue;
                }
                let slot = &slots[task.index(slots.len())];
                if let Some(ttl) = slot.ttl_ms {
                    now = now.max(slot.created_at + ttl - u64::from(before));
                }
            }
            Op::Cleanup { retention_ms } => {
                let cutoff = now.saturating_sub(retention_ms);
                let removed = store_ok(
                    &format!("op {i}: cleanup"),
                    store.cleanup(at, Duration::from_millis(retention_ms)).await,
                )?;
                let mut expected = 0;
                for slot in slots.iter_mut().filter(|s| !s.removed) {
                    let retired = slot.ttl_ms.is_none()
                        && terminal(slot.model.status)
                        && slot.model.updated_at <= cutoff;
                    if slot.expired(now) || retired {
                        slot.removed = true;
                        expected += 1;
                    }
                }
                ensure(removed == expected, || {
                    format!(
                        "op {i}: cleanup({retention_ms} ms) removed {removed}, expected {expected}"
                    )
                })?;
                // What is left reads exactly as the model says.
                for slot in &slots {
                    let found = store_ok(
                        &format!("op {i}: get after cleanup"),
                        store.get(&slot.id, Scope::Any, at).await,
                    )?;
                    ensure(found.is_some() == slot.visible(Who::Any, now), || {
                        format!(
                            "op {i}: after cleanup, a task removed {} expired {} found {}",
                            slot.removed,
                            slot.expired(now),
                            found.is_some()
                        )
                    })?;
                    if let Some(record) = &found {
                        slot.check(record)?;
                    }
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Concurrent writers.
// ---------------------------------------------------------------------------------

/// A writer's step; keys are the writer's own (`w<writer>-<j>`), answers may name
/// any writer's.
#[derive(Debug, Clone)]
enum Step {
    Progress,
    Ask(usize),
    Answer(usize, usize),
    Complete,
    Fail,
    Cancel,
}

fn step(writers: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => Just(Step::Progress),
        2 => (0usize..3).prop_map(Step::Ask),
        2 => (0..writers, 0usize..3).prop_map(|(w, j)| Step::Answer(w, j)),
    ]
}

fn last_step() -> impl Strategy<Value = Step> {
    prop_oneof![Just(Step::Complete), Just(Step::Fail), Just(Step::Cancel)]
}

fn key(writer: usize, j: usize) -> String {
    format!("w{writer}-{j}")
}

fn to_transition(writer: usize, step: &Step) -> Transition {
    match step {
        Step::Progress => Transition::Progress {
            message: format!("writer {writer}"),
        },
        Step::Ask(j) => Transition::RequireInput {
            requests: [(key(writer, *j), json!({"method": "roots/list"}))]
                .into_iter()
                .collect(),
            message: None,
        },
        Step::Answer(w, j) => Transition::Answer {
            responses: [(key(*w, *j), json!({"roots": [], "by": writer}))]
                .into_iter()
                .collect(),
        },
        Step::Complete => Transition::Complete {
            result: json!({"content": [], "writer": writer}),
            message: None,
        },
        Step::Fail => Transition::Fail {
            error: ErrorObject::new(-32000 - writer as i64, "writer failed"),
            message: None,
        },
        Step::Cancel => Transition::Cancel,
    }
}

/// For one task: each writer's steps, the last one terminal.
fn writers() -> impl Strategy<Value = Vec<Vec<Step>>> {
    (2usize..=6).prop_flat_map(|n| {
        prop::collection::vec(
            (prop::collection::vec(step(n), 0..4), last_step()).prop_map(|(mut steps, last)| {
                steps.push(last);
                steps
            }),
            n,
        )
    })
}

fn contended() -> impl Strategy<Value = Vec<Vec<Vec<Step>>>> {
    prop::collection::vec(writers(), 1..=3)
}

/// What one writer saw: the transition, when, and what the store answered.
type Seen = (Transition, u64, Updated);

async fn concurrent(
    store: Arc<dyn TaskStore>,
    tasks: Vec<Vec<Vec<Step>>>,
) -> Result<(), TestCaseError> {
    let base = Timestamp::now().as_millis();
    let mut ids = Vec::new();
    for _ in &tasks {
        let record = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(base));
        ids.push(record.id);
        store_ok(
            "create",
            store.create(record, CreateLimits::default()).await,
        )?;
    }
    // Every writer of every task at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(
        tasks.iter().map(Vec::len).sum::<usize>(),
    ));
    let mut handles = Vec::new();
    for (t, writers) in tasks.iter().enumerate() {
        for (w, steps) in writers.iter().enumerate() {
            let (store, barrier, id) = (store.clone(), barrier.clone(), ids[t]);
            let transitions: Vec<Transition> = steps.iter().map(|s| to_transition(w, s)).collect();
            handles.push((
                t,
                tokio::spawn(async move {
                    barrier.wait().await;
                    let mut seen: Vec<Seen> = Vec::new();
                    for (k, transition) in transitions.into_iter().enumerate() {
                        let now = base + 1 + (k as u64) * 10 + w as u64;
                        let updated = store
                            .update(&id, Scope::Any, &transition, Timestamp::from_millis(now))
                            .await;
                        match updated {
                            Ok(Some(updated)) => seen.push((transition, now, updated)),
                            Ok(None) => return Err(format!("writer {w}: the task vanished")),
                            Err(e) => {
                                let cause = std::error::Error::source(&e).map(|c| c.to_string());
                                return Err(format!(
                                    "writer {w}: the store failed: {e} ({cause:?})"
                                ));
                            }
                        }
                    }
                    Ok(seen)
                }),
            ));
        }
    }
    let mut seen_by_task: Vec<Vec<Seen>> = tasks.iter().map(|_| Vec::new()).collect();
    for (t, handle) in handles {
        let seen = handle
            .await
            .map_err(|e| TestCaseError::fail(format!("a writer panicked: {e}")))?
            .map_err(TestCaseError::fail)?;
        seen_by_task[t].extend(seen);
    }
    for (t, seen) in seen_by_task.into_iter().enumerate() {
        let final_record = store_ok(
            "get",
            store
                .get(&ids[t], Scope::Any, Timestamp::from_millis(base))
                .await,
        )?
        .ok_or_else(|| TestCaseError::fail(format!("task {t}: gone at the end")))?;
        let mut changed: Vec<&Seen> = seen.iter().filter(|(_, _, u)| u.changed()).collect();
        changed.sort_by_key(|(_, _, u)| u.record.revision);
        let revisions: Vec<u64> = changed.iter().map(|(_, _, u)| u.record.revision).collect();
        let n = changed.len() as u64;
        ensure(revisions == (1..=n).collect::<Vec<_>>(), || {
            format!("task {t}: the changed writes have revisions {revisions:?}, expected 1..={n}")
        })?;
        ensure(final_record.revision == n, || {
            format!(
                "task {t}: final revision {}, {n} changed writes",
                final_record.revision
            )
        })?;
        let terminal_wins = changed
            .iter()
            .filter(|(tr, _, _)| {
                matches!(
                    tr,
                    Transition::Complete { .. } | Transition::Fail { .. } | Transition::Cancel
                )
            })
            .count();
        ensure(terminal_wins == 1, || {
            format!("task {t}: {terminal_wins} terminal writes won")
        })?;
        ensure(terminal(final_record.status), || {
            format!("task {t}: final status {:?}", final_record.status)
        })?;
        // Replaying the changed writes in revision order gives every record returned.
        let mut model = Model::new(base);
        for (transition, now, updated) in &changed {
            let outcome = model.step(transition, *now);
            ensure(outcome == Outcome::Changed, || {
                format!(
                    "task {t}: revision {} ({transition:?}) replays as {outcome:?}",
                    updated.record.revision
                )
            })?;
            let actual = Model::of(&updated.record);
            ensure(actual == model, || {
                format!(
                    "task {t}: revision {} differs from the replay:\nexpected {model:#?}\nactual {actual:#?}",
                    updated.record.revision
                )
            })?;
        }
        let actual = Model::of(&final_record);
        ensure(actual == model, || {
            format!(
                "task {t}: the final record differs from the replay:\nexpected {model:#?}\nactual {actual:#?}"
            )
        })?;
        // After the terminal write every other terminal attempt was refused.
        for (transition, _, updated) in seen.iter().filter(|(_, _, u)| !u.changed()) {
            let ok = match transition {
                Transition::Complete { .. }
                | Transition::Fail { .. }
                | Transition::Progress { .. } => updated.outcome == Err(TransitionError::Terminal),
                Transition::Cancel | Transition::Answer { .. } => {
                    updated.outcome == Ok(Applied::Unchanged)
                }
                Transition::RequireInput { .. } => matches!(
                    updated.outcome,
                    Err(TransitionError::Terminal | TransitionError::DuplicateKeys(_))
                ),
                _ => false,
            };
            ensure(ok, || {
                format!("task {t}: {transition:?} answered {:?}", updated.outcome)
            })?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------

fn sequences_on(what: &str, default_cases: u32, fresh: Fresh) {
    check(what, cases(default_cases), ops(), move |ops| async move {
        sequence(fresh().await, ops).await
    });
}

fn concurrent_on(what: &str, default_cases: u32, fresh: Fresh) {
    check(
        what,
        cases(default_cases),
        contended(),
        move |tasks| async move { concurrent(fresh().await, tasks).await },
    );
}

#[test]
fn memory_store_sequences_follow_the_model() {
    sequences_on("memory sequences", 64, memory);
}

#[test]
fn memory_store_concurrent_writers_lose_nothing() {
    concurrent_on("memory concurrent writers", 64, memory);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_store_sequences_follow_the_model() {
    if support::stores::postgres::database_url().is_some() {
        sequences_on("postgres sequences", 16, postgres);
    }
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_store_concurrent_writers_lose_nothing() {
    if support::stores::postgres::database_url().is_some() {
        concurrent_on("postgres concurrent writers", 16, postgres);
    }
}

#[cfg(feature = "redis")]
#[test]
fn redis_store_sequences_follow_the_model() {
    if support::stores::redis::redis_url().is_some() {
        sequences_on("redis sequences", 16, redis);
    }
}

#[cfg(feature = "redis")]
#[test]
fn redis_store_concurrent_writers_lose_nothing() {
    if support::stores::redis::redis_url().is_some() {
        concurrent_on("redis concurrent writers", 16, redis);
    }
}
