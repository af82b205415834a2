//! Worker leases of stores shared between nodes: a lease lapses only without
//! renewals, holds follow the changes sent, and a survivor fails a stopped node's
//! unfinished tasks.

use std::sync::Arc;
use std::time::Duration;

use super::helpers::{HOUR_MS, create, get_found, record};
use crate::layer::TasksLayer;
use crate::store::{CreateLimits, LapsedNode, LeaseStore, NodeId, Renewal, TaskStore};
use crate::task::{Scope, TaskEnd, TaskId, TaskStatus, Timestamp};

/// The lease the rules give their nodes: short, so that lapsing is quick, and long
/// enough that a renewal over a network arrives in time.
const BOUND: Duration = Duration::from_millis(400);

/// How long a rule waits for a lease to lapse, or a lost task to fail.
const PATIENCE: Duration = Duration::from_secs(10);

fn leases_of<S: TaskStore>(rule: &str, store: &S) -> Arc<dyn LeaseStore> {
    store.leases().unwrap_or_else(|| {
        panic!("[{rule}] a store shared between nodes must keep worker leases (TaskStore::leases)")
    })
}

async fn renew(rule: &str, leases: &dyn LeaseStore, renewal: Renewal<'_>) -> bool {
    leases
        .renew(renewal)
        .await
        .unwrap_or_else(|e| panic!("[{rule}] renew failed: {e}"))
}

async fn lapsed(rule: &str, leases: &dyn LeaseStore, node: &NodeId) -> Option<LapsedNode> {
    leases
        .lapsed()
        .await
        .unwrap_or_else(|e| panic!("[{rule}] lapsed failed: {e}"))
        .into_iter()
        .find(|lapsed| &lapsed.node == node)
}

/// Waits (bounded) until `node`'s lease has lapsed, and returns what it held.
async fn until_lapsed(rule: &str, leases: &dyn LeaseStore, node: &NodeId) -> Vec<TaskId> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(found) = lapsed(rule, leases, node).await {
            let mut tasks = found.tasks;
            tasks.sort_unstable();
            return tasks;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "[{rule}] a lease not renewed for {PATIENCE:?} must have lapsed"
        );
        tokio::time::sleep(BOUND / 8).await;
    }
}

fn sorted(mut ids: Vec<TaskId>) -> Vec<TaskId> {
    ids.sort_unstable();
    ids
}

/// Multi-node: a lease is new on its first renewal and known on the next; it
/// lapses only once `bound` passes without a renewal, holding exactly the tasks the
/// renewals left it (holds added, releases removed, a replace starting over); a
/// lapsed lease is forgotten on request, a renewed one never. `a` and `b` are two
/// instances over the same shared state: what one node renews, the other sees.
pub async fn nodes_leases_lapse_only_without_renewals<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_leases_lapse_only_without_renewals";
    let (on_a, on_b) = (leases_of(RULE, &a), leases_of(RULE, &b));
    let node = NodeId::random();
    let ids: Vec<TaskId> = (0..4).map(|_| TaskId::random()).collect();
    let renewal = |hold: &'static [usize], release: &'static [usize], replace: bool| {
        let pick = |which: &[usize]| which.iter().map(|&i| ids[i]).collect::<Vec<_>>();
        (pick(hold), pick(release), replace)
    };

    let (hold, release, replace) = renewal(&[0, 1, 2], &[], false);
    let first = Renewal {
        node: &node,
        bound: BOUND,
        hold: &hold,
        release: &release,
        replace,
    };
    assert!(
        !renew(RULE, &*on_a, first).await,
        "[{RULE}] a first renewal must report a new lease"
    );
    let (hold, release, replace) = renewal(&[3], &[1], false);
    let second = Renewal {
        node: &node,
        bound: BOUND,
        hold: &hold,
        release: &release,
        replace,
    };
    assert!(
        renew(RULE, &*on_a, second).await,
        "[{RULE}] a second renewal must find the lease"
    );
    assert!(
        lapsed(RULE, &*on_b, &node).await.is_none(),
        "[{RULE}] a lease just renewed must not read as lapsed"
    );

    // Renewed more often than its bound, it never lapses.
    for _ in 0..4 {
        tokio::time::sleep(BOUND / 3).await;
        let keep = Renewal {
            node: &node,
            bound: BOUND,
            hold: &[],
            release: &[],
            replace: false,
        };
        renew(RULE, &*on_a, keep).await;
        assert!(
            lapsed(RULE, &*on_b, &node).await.is_none(),
            "[{RULE}] a lease renewed within its bound must not lapse"
        );
    }
    on_b.forget(&node)
        .await
        .unwrap_or_else(|e| panic!("[{RULE}] forget failed: {e}"));
    let after_forget = Renewal {
        node: &node,
        bound: BOUND,
        hold: &[],
        release: &[],
        replace: false,
    };
    assert!(
        renew(RULE, &*on_a, after_forget).await,
        "[{RULE}] forgetting a live lease must leave it in place"
    );

    let held = until_lapsed(RULE, &*on_b, &node).await;
    assert_eq!(
        held,
        sorted(vec![ids[0], ids[2], ids[3]]),
        "[{RULE}] a lapsed lease must hold what its renewals added, less what they released"
    );

    // A replace starts the set over.
    let (hold, release, replace) = renewal(&[1], &[], true);
    let replaced = Renewal {
        node: &node,
        bound: BOUND,
        hold: &hold,
        release: &release,
        replace,
    };
    renew(RULE, &*on_a, replaced).await;
    assert!(
        lapsed(RULE, &*on_b, &node).await.is_none(),
        "[{RULE}] a renewal revives a lapsed lease"
    );
    let held = until_lapsed(RULE, &*on_b, &node).await;
    assert_eq!(
        held,
        vec![ids[1]],
        "[{RULE}] a replace must leave exactly the new set"
    );

    on_b.forget(&node)
        .await
        .unwrap_or_else(|e| panic!("[{RULE}] forget failed: {e}"));
    assert!(
        lapsed(RULE, &*on_a, &node).await.is_none(),
        "[{RULE}] a forgotten lease must be gone"
    );
    let again = Renewal {
        node: &node,
        bound: BOUND,
        hold: &[],
        release: &[],
        replace: false,
    };
    assert!(
        !renew(RULE, &*on_a, again).await,
        "[{RULE}] a renewal after the lease was forgotten must report a new lease"
    );
    on_a.forget(&node).await.ok();
}

/// Multi-node: a node that stops (its layer dropped without ending its work) has
/// its unfinished tasks failed by a layer on the other node, with -32603, within
/// 1.25 × the lease bound and a margin; its finished tasks stay as they ended, and
/// the survivor's own tasks are never touched.
pub async fn nodes_lost_workers_fail_on_the_survivor<S: TaskStore>(a: S, b: S) {
    const RULE: &str = "nodes_lost_workers_fail_on_the_survivor";
    let a = Arc::new(a);
    let b = Arc::new(b);
    let node = |store: &Arc<S>| {
        TasksLayer::builder(store.clone())
            .with_worker_lease(BOUND)
            .without_janitor()
            .build()
            .unwrap_or_else(|e| panic!("[{RULE}] building a layer failed: {e}"))
    };
    let (doomed, survivor) = (node(&a), node(&b));
    let now = Timestamp::now();
    let lost = record(None, now, Some(HOUR_MS));
    let finished = record(None, now, Some(HOUR_MS));
    let own = record(None, now, Some(HOUR_MS));
    for task in [&lost, &finished, &own] {
        create(RULE, &*a, task.clone(), CreateLimits::default()).await;
    }
    doomed.handle().hold(lost.id);
    doomed.handle().hold(finished.id);
    survivor.handle().hold(own.id);
    doomed
        .handle()
        .complete(&finished.id, serde_json::json!({"content": []}))
        .await
        .unwrap_or_else(|e| panic!("[{RULE}] completing a task failed: {e}"));
    // Let both nodes renew with their holds before one stops.
    tokio::time::sleep(BOUND).await;
    assert_eq!(
        get_found(RULE, &*b, &lost.id, Scope::Any, now).await.status,
        TaskStatus::Working,
        "[{RULE}] a live node's task must not be failed"
    );

    drop(doomed);
    let stopped = tokio::time::Instant::now();
    let end = tokio::time::timeout(PATIENCE, survivor.handle().cancelled(&lost.id))
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
        crate::RpcError::INTERNAL_ERROR,
        "[{RULE}] a lost task fails -32603"
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
