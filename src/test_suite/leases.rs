//! Worker leases of stores shared between nodes: a lease counts its renewals and
//! keeps its node's lease length and holds; a claim re-checks the count atomically
//! and a claimed lease is never renewed again; a survivor fails a stopped node's
//! unfinished tasks; an outage of the leases that every node shares fails nothing;
//! a node cut off alone loses its work and learns it; a hold takes a task over, so
//! the death of its earlier holder fails nothing a live node holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::helpers::{HOUR_MS, create, get_found, record};
use crate::error::StoreError;
use crate::layer::TasksLayer;
use crate::store::{
    BoxFuture, CreateLimits, LeaseId, LeaseState, LeaseStore, NodeId, Renewal, Renewed, TaskStore,
};
use crate::task::{Scope, TaskEnd, TaskId, TaskStatus, Timestamp};

/// The lease the rules give their nodes: short, so that the rules are quick, and
/// long enough that a renewal (given a quarter of it) arrives in time on a store
/// shared with a busy test run.
const BOUND: Duration = Duration::from_millis(800);

/// How long a rule waits for a lost task to fail.
const PATIENCE: Duration = Duration::from_secs(20);

fn leases_of<S: TaskStore>(rule: &str, store: &S) -> Arc<dyn LeaseStore> {
    store.leases().unwrap_or_else(|| {
        panic!("[{rule}] a store shared between nodes must keep worker leases (TaskStore::leases)")
    })
}

async fn renew(rule: &str, leases: &dyn LeaseStore, renewal: Renewal<'_>) -> Renewed {
    leases
        .renew(renewal)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] renew failed: {e}"))
}

/// A renewal of `lease` with these changes.
fn renewal<'a>(
    lease: &'a LeaseId,
    first: bool,
    hold: &'a [TaskId],
    release: &'a [TaskId],
    replace: bool,
) -> Renewal<'a> {
    Renewal {
        lease,
        bound: BOUND,
        first,
        hold,
        release,
        replace,
    }
}

async fn state(rule: &str, leases: &dyn LeaseStore, lease: &LeaseId) -> Option<LeaseState> {
    leases
        .leases()
        .await
        .unwrap_or_else(|e| panic!("[{rule}] leases failed: {e}"))
        .into_iter()
        .find(|state| &state.lease == lease)
}

async fn claim(
    rule: &str,
    leases: &dyn LeaseStore,
    lease: &LeaseId,
    renewals: u64,
) -> Option<Vec<TaskId>> {
    leases
        .claim(lease, renewals)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] claim failed: {e}"))
        .map(sorted)
}

async fn forget(rule: &str, leases: &dyn LeaseStore, lease: &LeaseId) {
    leases
        .forget(lease)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] forget failed: {e}"));
}

async fn release(rule: &str, leases: &dyn LeaseStore, lease: &LeaseId) {
    leases
        .release(lease)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] release failed: {e}"));
}

fn sorted(mut ids: Vec<TaskId>) -> Vec<TaskId> {
    ids.sort_unstable();
    ids
}

/// Multi-node: only a first renewal creates a lease; each renewal moves its count
/// and stores its node's lease length; holds follow the changes sent (a replace
/// starts over). A claim with a stale count takes nothing; one with the current
/// count takes the holds; a claimed lease is never renewed again (the renewal
/// reports it lost, with the claimed holds) and is claimed again by anyone who
/// finishes the claim; forgetting removes only a claimed lease. A renewal and a
/// claim racing on one count never both win. Releasing removes an unclaimed lease
/// and its holds, and leaves a claimed one to its claimer. Renewals larger than a
/// store's batches are applied whole. `a` and `b` are two
/// instances over the same shared state: what one node renews, the other sees.
pub async fn nodes_leases_count_renewals_and_claim_atomically<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_leases_count_renewals_and_claim_atomically";
    let (on_a, on_b) = (leases_of(RULE, &a), leases_of(RULE, &b));
    let lease = LeaseId::new(NodeId::random());
    let ids: Vec<TaskId> = (0..4).map(|_| TaskId::random()).collect();

    let stray = LeaseId::new(NodeId::random());
    assert_eq!(
        renew(RULE, &*on_a, renewal(&stray, false, &ids[..1], &[], true)).await,
        Renewed::Lost { tasks: None },
        "[{RULE}] a later renewal of a lease the store lacks must report it lost"
    );
    assert!(
        state(RULE, &*on_b, &stray).await.is_none(),
        "[{RULE}] only a first renewal creates a lease"
    );

    assert_eq!(
        renew(RULE, &*on_a, renewal(&lease, true, &ids[..3], &[], true)).await,
        Renewed::New,
        "[{RULE}] a first renewal must report a new lease"
    );
    assert_eq!(
        renew(
            RULE,
            &*on_a,
            renewal(&lease, false, &ids[3..], &ids[1..2], false)
        )
        .await,
        Renewed::Renewed,
        "[{RULE}] a second renewal must find the lease"
    );
    let seen = state(RULE, &*on_b, &lease)
        .await
        .unwrap_or_else(|| panic!("[{RULE}] a renewed lease must be listed"));
    assert_eq!(
        (seen.renewals, seen.bound, seen.claimed),
        (2, BOUND, false),
        "[{RULE}] a lease counts its renewals and keeps its node's lease length"
    );
    let longer = Renewal {
        bound: BOUND * 3,
        ..renewal(&lease, false, &[], &[], false)
    };
    renew(RULE, &*on_a, longer).await;
    let seen = state(RULE, &*on_b, &lease).await.expect("listed");
    assert_eq!(
        (seen.renewals, seen.bound),
        (3, BOUND * 3),
        "[{RULE}] each renewal stores the lease length it brings"
    );

    // A stale count claims nothing; a live lease is not forgotten.
    assert_eq!(
        claim(RULE, &*on_b, &lease, 2).await,
        None,
        "[{RULE}] a claim with a count the lease moved past must take nothing"
    );
    forget(RULE, &*on_b, &lease).await;
    let seen = state(RULE, &*on_b, &lease).await.unwrap_or_else(|| {
        panic!("[{RULE}] forgetting a lease nobody claimed must leave it in place")
    });
    assert!(
        !seen.claimed,
        "[{RULE}] a stale claim must not mark the lease"
    );

    let held = claim(RULE, &*on_b, &lease, 3).await;
    assert_eq!(
        held,
        Some(sorted(vec![ids[0], ids[2], ids[3]])),
        "[{RULE}] a claim must take what the renewals held, less what they released"
    );
    assert!(
        state(RULE, &*on_a, &lease).await.expect("listed").claimed,
        "[{RULE}] a claimed lease reads as claimed"
    );
    assert_eq!(
        renew(RULE, &*on_a, renewal(&lease, false, &ids[1..2], &[], true)).await,
        Renewed::Lost {
            tasks: held.clone()
        },
        "[{RULE}] a claimed lease's renewal must report it lost, with the claimed holds"
    );
    assert_eq!(
        state(RULE, &*on_b, &lease).await.expect("listed").renewals,
        3,
        "[{RULE}] a claimed lease's count never moves again"
    );
    assert_eq!(
        claim(RULE, &*on_b, &lease, 0).await,
        held,
        "[{RULE}] a claimed lease can be claimed again, to finish the claim"
    );
    forget(RULE, &*on_b, &lease).await;
    assert!(
        state(RULE, &*on_a, &lease).await.is_none(),
        "[{RULE}] a forgotten lease must be gone"
    );
    assert_eq!(
        renew(RULE, &*on_a, renewal(&lease, false, &[], &[], false)).await,
        Renewed::Lost { tasks: None },
        "[{RULE}] a renewal after the claim is over must report the lease lost"
    );

    // A replace starts the set over.
    let other = LeaseId::new(NodeId::random());
    renew(RULE, &*on_a, renewal(&other, true, &ids[..2], &[], true)).await;
    renew(RULE, &*on_a, renewal(&other, false, &ids[2..3], &[], true)).await;
    assert_eq!(
        claim(RULE, &*on_b, &other, 2).await,
        Some(vec![ids[2]]),
        "[{RULE}] a replace must leave exactly the new set"
    );
    forget(RULE, &*on_b, &other).await;

    // Changes larger than any one statement or script takes (the layer sends at
    // most 5 000 ids at once; a store may split) are applied whole, a replace too:
    // with the default lease, whose quarter a store may give a renewal.
    let many: Vec<TaskId> = (0..12_000).map(|_| TaskId::random()).collect();
    let large = LeaseId::new(NodeId::random());
    let long = |first, hold, release, replace| Renewal {
        bound: crate::defaults::WORKER_LEASE,
        ..renewal(&large, first, hold, release, replace)
    };
    renew(RULE, &*on_a, long(true, &many[..7_000], &[], true)).await;
    renew(
        RULE,
        &*on_a,
        long(false, &many[7_000..], &many[..6_000], false),
    )
    .await;
    assert_eq!(
        claim(RULE, &*on_b, &large, 2).await,
        Some(sorted(many[6_000..].to_vec())),
        "[{RULE}] a renewal of 11 000 changes must be applied whole"
    );
    forget(RULE, &*on_b, &large).await;
    renew(RULE, &*on_a, long(true, &many[..6_000], &[], true)).await;
    renew(RULE, &*on_a, long(false, &many[5_000..], &[], true)).await;
    assert_eq!(
        claim(RULE, &*on_b, &large, 2).await,
        Some(sorted(many[5_000..].to_vec())),
        "[{RULE}] a replace by 7 000 holds must leave exactly them"
    );
    forget(RULE, &*on_b, &large).await;

    // A renewal and a claim on the count it moves: exactly one wins.
    let racer = LeaseId::new(NodeId::random());
    renew(RULE, &*on_a, renewal(&racer, true, &ids[..1], &[], true)).await;
    for count in 1..=20u64 {
        let (renewed, claimed) = tokio::join!(
            renew(RULE, &*on_a, renewal(&racer, false, &[], &[], false)),
            claim(RULE, &*on_b, &racer, count),
        );
        match (renewed, claimed) {
            (Renewed::Renewed, None) => {}
            (Renewed::Lost { .. }, Some(held)) => {
                assert_eq!(held, vec![ids[0]], "[{RULE}] the claim takes the holds");
                break;
            }
            (renewed, claimed) => panic!(
                "[{RULE}] a renewal and a claim racing must not both win or both lose: {renewed:?}, {claimed:?}"
            ),
        }
    }
    on_b.claim(&racer, 0).await.ok();
    forget(RULE, &*on_b, &racer).await;

    // A node gives its own lease up, holds and all; a claimed one stays the claimer's.
    let leaving = LeaseId::new(NodeId::random());
    renew(RULE, &*on_a, renewal(&leaving, true, &ids[..2], &[], true)).await;
    release(RULE, &*on_a, &leaving).await;
    assert!(
        state(RULE, &*on_b, &leaving).await.is_none(),
        "[{RULE}] a released lease must be gone"
    );
    assert_eq!(
        claim(RULE, &*on_b, &leaving, 1).await,
        None,
        "[{RULE}] a released lease has nothing left to claim"
    );
    assert_eq!(
        renew(RULE, &*on_a, renewal(&leaving, false, &[], &[], false)).await,
        Renewed::Lost { tasks: None },
        "[{RULE}] only a first renewal brings a released lease back"
    );
    release(RULE, &*on_a, &leaving).await;
    let claimed = LeaseId::new(NodeId::random());
    renew(RULE, &*on_a, renewal(&claimed, true, &ids[..1], &[], true)).await;
    assert_eq!(claim(RULE, &*on_b, &claimed, 1).await, Some(vec![ids[0]]));
    release(RULE, &*on_a, &claimed).await;
    assert_eq!(
        claim(RULE, &*on_b, &claimed, 0).await,
        Some(vec![ids[0]]),
        "[{RULE}] releasing a claimed lease must leave it, and its holds, to the claimer"
    );
    forget(RULE, &*on_b, &claimed).await;
}

/// Multi-node: a renewal that holds a task another lease holds takes it over, in
/// the same atomic step: the earlier holder (another node's lease, or an earlier
/// incarnation of the same node) no longer lists it, so its claim does not either,
/// and a renewal of the earlier holder that sends no change does not take it back.
/// The taker's claim lists it. A task its holder let go is listed by no claim, and
/// a lease that takes it afterwards holds it.
pub async fn nodes_a_hold_takes_the_task_over<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_a_hold_takes_the_task_over";
    let (on_a, on_b) = (leases_of(RULE, &a), leases_of(RULE, &b));
    let ids: Vec<TaskId> = (0..4).map(|_| TaskId::random()).collect();
    let node = NodeId::random();
    let (earlier, restarted) = (LeaseId::new(node.clone()), LeaseId::new(node));
    let other = LeaseId::new(NodeId::random());

    renew(RULE, &*on_a, renewal(&earlier, true, &ids[..3], &[], true)).await;
    // Another node takes one task; the same node, restarted, another.
    renew(RULE, &*on_b, renewal(&other, true, &ids[..1], &[], true)).await;
    renew(
        RULE,
        &*on_b,
        renewal(&restarted, true, &ids[1..2], &[], true),
    )
    .await;
    renew(RULE, &*on_a, renewal(&earlier, false, &[], &[], false)).await;
    assert_eq!(
        claim(RULE, &*on_b, &earlier, 2).await,
        Some(vec![ids[2]]),
        "[{RULE}] a claim of a task's earlier holder must not list what another lease took over"
    );
    forget(RULE, &*on_b, &earlier).await;
    // What a lease holds already stays its own through a replace.
    renew(RULE, &*on_b, renewal(&other, false, &ids[..1], &[], true)).await;
    assert_eq!(
        claim(RULE, &*on_a, &other, 2).await,
        Some(vec![ids[0]]),
        "[{RULE}] the lease that took a task over holds it"
    );
    assert_eq!(
        claim(RULE, &*on_a, &restarted, 1).await,
        Some(vec![ids[1]]),
        "[{RULE}] a restarted node's new incarnation holds what it took over"
    );
    forget(RULE, &*on_a, &other).await;
    forget(RULE, &*on_a, &restarted).await;

    // Let go by its last holder: no earlier holder gets the task back.
    let (first, second, third) = (
        LeaseId::new(NodeId::random()),
        LeaseId::new(NodeId::random()),
        LeaseId::new(NodeId::random()),
    );
    renew(RULE, &*on_a, renewal(&first, true, &ids[3..], &[], true)).await;
    renew(RULE, &*on_b, renewal(&second, true, &ids[3..], &[], true)).await;
    renew(RULE, &*on_b, renewal(&second, false, &[], &ids[3..], false)).await;
    assert_eq!(
        claim(RULE, &*on_b, &first, 1).await,
        Some(Vec::new()),
        "[{RULE}] a task taken over and then let go must not return to its earlier holder"
    );
    forget(RULE, &*on_b, &first).await;
    renew(RULE, &*on_a, renewal(&third, true, &ids[3..], &[], true)).await;
    assert_eq!(
        claim(RULE, &*on_b, &third, 1).await,
        Some(ids[3..].to_vec()),
        "[{RULE}] a task nobody holds is taken by the next lease that holds it"
    );
    forget(RULE, &*on_b, &third).await;
    release(RULE, &*on_b, &second).await;
}

/// Multi-node: a node holds three tasks and stops. Before its lease is judged dead,
/// a node on the other store takes one over (`Tasks::hold`), and the stopped node
/// comes back under the same node id and takes another: only the third is failed,
/// and the two taken over are still `working` once the stopped node's lease is
/// gone.
pub async fn nodes_work_taken_over_outlives_its_earlier_holder<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_work_taken_over_outlives_its_earlier_holder";
    let (a, b) = (Arc::new(a), Arc::new(b));
    let node = NodeId::new(format!("host-{}", &NodeId::random().as_str()[..8]))
        .unwrap_or_else(|| panic!("[{RULE}] a valid node id"));
    let layer = |store: &Arc<S>, node: Option<&NodeId>| {
        let builder = TasksLayer::builder(store.clone())
            .with_worker_lease(BOUND)
            .without_janitor();
        match node {
            Some(node) => builder.with_node_id(node.clone()),
            None => builder,
        }
        .build()
        .unwrap_or_else(|e| panic!("[{rule}] building a layer failed: {e}", rule = RULE))
    };
    let doomed = layer(&a, Some(&node));
    let survivor = layer(&b, None);
    let now = Timestamp::now();
    let tasks: Vec<_> = (0..3).map(|_| record(None, now, Some(HOUR_MS))).collect();
    for task in &tasks {
        create(RULE, &*a, task.clone(), CreateLimits::default()).await;
        doomed.tasks().hold(task.id);
    }
    let (moved, resumed, lost) = (tasks[0].id, tasks[1].id, tasks[2].id);
    // The holds reach the store with a renewal after the first.
    let leases = leases_of(RULE, &*b);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let dead = loop {
        let found = leases
            .leases()
            .await
            .unwrap_or_else(|e| panic!("[{RULE}] leases failed: {e}"))
            .into_iter()
            .find(|state| state.lease.node == node && state.renewals >= 2);
        if let Some(state) = found {
            break state.lease;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "[{RULE}] the holding node must renew"
        );
        tokio::time::sleep(BOUND / 8).await;
    };

    drop(doomed);
    survivor.tasks().hold(moved);
    let restarted = layer(&b, Some(&node));
    restarted.tasks().hold(resumed);
    let end = tokio::time::timeout(PATIENCE, survivor.tasks().ended(&lost))
        .await
        .unwrap_or_else(|_| panic!("[{RULE}] the stopped node's own task must fail"));
    assert_eq!(end, TaskEnd::Failed, "[{RULE}] a lost task must end failed");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while state(RULE, &*leases, &dead).await.is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "[{RULE}] the stopped node's lease must be claimed and forgotten"
        );
        tokio::time::sleep(BOUND / 8).await;
    }
    for (id, taker) in [(moved, "another node"), (resumed, "the restarted node")] {
        assert_eq!(
            get_found(RULE, &*b, &id, Scope::Any, Timestamp::now())
                .await
                .status,
            TaskStatus::Working,
            "[{RULE}] a task {taker} took over must not be failed with its earlier holder"
        );
    }
}

/// Two layers, `doomed` and `survivor`, on `a` and `b`.
fn pair<S: TaskStore>(rule: &str, a: &Arc<S>, b: &Arc<S>) -> (TasksLayer, TasksLayer) {
    let node = |store: &Arc<S>| {
        TasksLayer::builder(store.clone())
            .with_worker_lease(BOUND)
            .without_janitor()
            .build()
            .unwrap_or_else(|e| panic!("[{rule}] building a layer failed: {e}"))
    };
    (node(a), node(b))
}

/// Multi-node: a node that stops (its layer dropped without ending its work) has
/// its unfinished tasks failed by a layer on the other node, with -32603 and
/// `error.data` `{"reason": "worker_lost", "retryable": true}`, within 1.25 × the
/// lease bound and a margin; its finished tasks stay as they ended, and
/// the survivor's own tasks are never touched.
pub async fn nodes_lost_workers_fail_on_the_survivor<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_lost_workers_fail_on_the_survivor";
    let (a, b) = (Arc::new(a), Arc::new(b));
    let (doomed, survivor) = pair(RULE, &a, &b);
    let now = Timestamp::now();
    let lost = record(None, now, Some(HOUR_MS));
    let finished = record(None, now, Some(HOUR_MS));
    let own = record(None, now, Some(HOUR_MS));
    for task in [&lost, &finished, &own] {
        create(RULE, &*a, task.clone(), CreateLimits::default()).await;
    }
    doomed.tasks().hold(lost.id);
    doomed.tasks().hold(finished.id);
    survivor.tasks().hold(own.id);
    doomed
        .tasks()
        .complete(&finished.id, serde_json::json!({"content": []}))
        .await
        .unwrap_or_else(|e| panic!("[{RULE}] completing a task failed: {e}"));
    // Let both nodes renew with their holds, and the survivor watch long enough
    // to claim, before one stops.
    tokio::time::sleep(BOUND * 2).await;
    assert_eq!(
        get_found(RULE, &*b, &lost.id, Scope::Any, now).await.status,
        TaskStatus::Working,
        "[{RULE}] a live node's task must not be failed"
    );

    drop(doomed);
    let stopped = tokio::time::Instant::now();
    let end = tokio::time::timeout(PATIENCE, survivor.tasks().ended(&lost.id))
        .await
        .unwrap_or_else(|_| panic!("[{RULE}] a stopped node's task must fail within {PATIENCE:?}"));
    let took = stopped.elapsed();
    assert_eq!(end, TaskEnd::Failed, "[{RULE}] a lost task must end failed");
    assert!(
        took <= BOUND * 5 / 4 + Duration::from_millis(600),
        "[{RULE}] a lost task failed {took:?} after its node stopped, past 1.25 × {BOUND:?}"
    );
    let failed = get_found(RULE, &*b, &lost.id, Scope::Any, Timestamp::now()).await;
    let error = failed
        .error
        .unwrap_or_else(|| panic!("[{RULE}] a lost task must carry an error"));
    assert_eq!(
        error.code,
        crate::wire::RpcError::INTERNAL_ERROR,
        "[{RULE}] a lost task fails -32603"
    );
    assert!(
        error.message.contains("stopped or lost its lease"),
        "[{RULE}] a lost task says why: {}",
        error.message
    );
    assert_eq!(
        error.data,
        Some(serde_json::json!({"reason": "worker_lost", "retryable": true})),
        "[{RULE}] a lost task tells the client it may call again"
    );
    assert_eq!(
        get_found(RULE, &*b, &finished.id, Scope::Any, Timestamp::now())
            .await
            .status,
        TaskStatus::Completed,
        "[{RULE}] a finished task must stay as it ended"
    );
    assert_eq!(
        get_found(RULE, &*b, &own.id, Scope::Any, Timestamp::now())
            .await
            .status,
        TaskStatus::Working,
        "[{RULE}] the survivor's own task must not be failed"
    );
}

/// Leases that answer with an error while `down` is set, as an unreachable store.
#[derive(Debug, Clone)]
struct Cut {
    inner: Arc<dyn LeaseStore>,
    down: Arc<AtomicBool>,
}

impl Cut {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::Acquire) {
            return Err(StoreError::backend(std::io::Error::other(
                "the store is unreachable",
            )));
        }
        Ok(())
    }
}

impl LeaseStore for Cut {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.renew(renewal).await
        })
    }

    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.leases().await
        })
    }

    fn claim<'a>(
        &'a self,
        lease: &'a LeaseId,
        renewals: u64,
    ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.claim(lease, renewals).await
        })
    }

    fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.forget(lease).await
        })
    }

    fn release<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.release(lease).await
        })
    }
}

/// A layer on `store` whose leases go through `down`.
fn cut_node<S: TaskStore>(rule: &str, store: &Arc<S>, down: &Arc<AtomicBool>) -> TasksLayer {
    let leases = Cut {
        inner: leases_of(rule, &**store),
        down: down.clone(),
    };
    TasksLayer::builder(store.clone())
        .with_worker_lease(BOUND)
        .with_lease_store(leases)
        .without_janitor()
        .build()
        .unwrap_or_else(|e| panic!("[{rule}] building a layer failed: {e}"))
}

/// Multi-node: the leases of both nodes are unreachable for 3 × the lease, then
/// back: neither node's task is failed, then or after.
pub async fn nodes_a_shared_lease_outage_fails_nothing<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_a_shared_lease_outage_fails_nothing";
    let (a, b) = (Arc::new(a), Arc::new(b));
    let down = Arc::new(AtomicBool::new(false));
    let (one, two) = (cut_node(RULE, &a, &down), cut_node(RULE, &b, &down));
    let now = Timestamp::now();
    let tasks = [
        record(None, now, Some(HOUR_MS)),
        record(None, now, Some(HOUR_MS)),
    ];
    for task in &tasks {
        create(RULE, &*a, task.clone(), CreateLimits::default()).await;
    }
    one.tasks().hold(tasks[0].id);
    two.tasks().hold(tasks[1].id);
    tokio::time::sleep(BOUND * 3).await;

    down.store(true, Ordering::Release);
    tokio::time::sleep(BOUND * 3).await;
    down.store(false, Ordering::Release);
    tokio::time::sleep(BOUND * 4).await;
    for task in &tasks {
        assert_eq!(
            get_found(RULE, &*a, &task.id, Scope::Any, Timestamp::now())
                .await
                .status,
            TaskStatus::Working,
            "[{RULE}] an outage every node shares must fail no task"
        );
    }
}

/// Multi-node: one node's leases are unreachable for 3 × the lease while the
/// other's are not: the other fails the cut-off node's task within the bound; back,
/// the cut-off node learns it (its wait on the task ends), and renews under a new
/// incarnation, so its later work is leased again.
pub async fn nodes_a_node_cut_off_learns_it_lost_its_lease<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_a_node_cut_off_learns_it_lost_its_lease";
    let (a, b) = (Arc::new(a), Arc::new(b));
    let down = Arc::new(AtomicBool::new(false));
    let cut = cut_node(RULE, &a, &down);
    let keeps = cut_node(RULE, &b, &Arc::new(AtomicBool::new(false)));
    let now = Timestamp::now();
    let task = record(None, now, Some(HOUR_MS));
    create(RULE, &*a, task.clone(), CreateLimits::default()).await;
    cut.tasks().hold(task.id);
    tokio::time::sleep(BOUND * 3).await;
    let before: Vec<LeaseId> = leases_of(RULE, &*b)
        .leases()
        .await
        .unwrap_or_else(|e| panic!("[{RULE}] leases failed: {e}"))
        .into_iter()
        .map(|state| state.lease)
        .collect();

    down.store(true, Ordering::Release);
    let cut_at = tokio::time::Instant::now();
    let end = tokio::time::timeout(PATIENCE, keeps.tasks().ended(&task.id))
        .await
        .unwrap_or_else(|_| panic!("[{RULE}] a cut-off node's task must fail"));
    let took = cut_at.elapsed();
    assert_eq!(end, TaskEnd::Failed, "[{RULE}] a lost task must end failed");
    assert!(
        took <= BOUND * 5 / 4 + Duration::from_millis(600),
        "[{RULE}] a cut-off node's task failed {took:?} after the cut, past 1.25 × {BOUND:?}"
    );
    tokio::time::sleep((BOUND * 3).saturating_sub(took)).await;
    down.store(false, Ordering::Release);
    let end = tokio::time::timeout(PATIENCE, cut.tasks().ended(&task.id))
        .await
        .unwrap_or_else(|_| panic!("[{RULE}] the cut-off node must stop the lost work"));
    assert_eq!(
        end,
        TaskEnd::Failed,
        "[{RULE}] the cut-off node sees it failed"
    );
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let now = leases_of(RULE, &*b)
            .leases()
            .await
            .unwrap_or_else(|e| panic!("[{RULE}] leases failed: {e}"));
        let fresh = now
            .iter()
            .filter(|state| !before.contains(&state.lease) && !state.claimed)
            .count();
        if fresh >= 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "[{RULE}] back, the cut-off node must renew under a new incarnation"
        );
        tokio::time::sleep(BOUND / 8).await;
    }
}
