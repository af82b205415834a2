//! Worker leases at scale: one node holds many tasks (12 000 by default, above the
//! default row cap, which the node raises) with a 2 s lease, while a peer watches
//! its lease, both over one PostgreSQL table or one Redis key prefix, each through
//! a loopback TCP proxy of its own that the test owns.
//!
//! - The holder's store stalls for 1 s (no byte moves), the peer's does not: the
//!   peer, its own renewals unbroken, would claim the holder's lease had its count
//!   stood still for the lease. It does not: the holder's first renewal after the
//!   stall ends within a quarter of the lease.
//! - Both stores are refused for 5 s, longer than the lease: nobody claims anybody.
//!
//! After each, every held task is still `working` and the holder's lease is the
//! one it had (unclaimed, same incarnation). The tasks are made through the store
//! and held through the worker API, so that seeding them costs seconds.
//!
//! Larger runs (RELIABILITY.md) set the size, the lease and the faults:
//!
//! ```text
//! LEASE_SCALE_TASKS=100000 LEASE_SCALE_LEASE_MS=2000 LEASE_SCALE_STALL_MS=1000 \
//!   LEASE_SCALE_OUTAGE_MS=5000 cargo test --release --all-features --test lease_scale -- --nocapture
//! ```

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_tasks::error::StoreError;
use mcp_tasks::store::{
    BoxFuture, CreateLimits, LeaseId, LeaseState, LeaseStore, NodeId, Renewal, Renewed, Scope,
    TaskStore, Timestamp,
};
use mcp_tasks::test_suite::{Intercept, StoreHooks};
use mcp_tasks::{TaskId, TaskRecord, TaskStatus, TasksLayer};
use support::proxy::{Mode, Proxy, target, via};

/// A setting from the environment, or its default.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The run's sizes and faults.
#[derive(Debug, Clone, Copy)]
struct Plan {
    tasks: usize,
    lease: Duration,
    stall: Duration,
    outage: Duration,
}

impl Plan {
    fn from_env() -> Plan {
        Plan {
            tasks: setting("LEASE_SCALE_TASKS", 12_000) as usize,
            lease: Duration::from_millis(setting("LEASE_SCALE_LEASE_MS", 2_000)),
            stall: Duration::from_millis(setting("LEASE_SCALE_STALL_MS", 1_000)),
            outage: Duration::from_millis(setting("LEASE_SCALE_OUTAGE_MS", 5_000)),
        }
    }

    /// The row cap the holder runs with: above the tasks it holds.
    fn cap(&self) -> usize {
        self.tasks + self.tasks / 10
    }
}

/// One renewal as the holder's lease store saw it.
#[derive(Debug, Clone, Copy)]
struct Timed {
    at: Instant,
    took: Duration,
    ids: usize,
    ok: bool,
}

/// The holder's lease store, timing each renewal.
#[derive(Debug)]
struct Timing {
    inner: Arc<dyn LeaseStore>,
    renewals: Arc<Mutex<Vec<Timed>>>,
}

/// Notes one renewal when dropped: unless marked `ok`, it failed, or was given
/// up (timed out) on the way.
struct Noting<'a> {
    renewals: &'a Mutex<Vec<Timed>>,
    at: Instant,
    ids: usize,
    ok: bool,
}

impl Drop for Noting<'_> {
    fn drop(&mut self) {
        let timed = Timed {
            at: self.at,
            took: self.at.elapsed(),
            ids: self.ids,
            ok: self.ok,
        };
        self.renewals.lock().unwrap().push(timed);
    }
}

impl LeaseStore for Timing {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
        Box::pin(async move {
            let mut noting = Noting {
                renewals: &self.renewals,
                at: Instant::now(),
                ids: renewal.hold.len() + renewal.release.len(),
                ok: false,
            };
            let renewed = self.inner.renew(renewal).await;
            noting.ok = matches!(renewed, Ok(Renewed::New | Renewed::Renewed));
            renewed
        })
    }

    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
        self.inner.leases()
    }

    fn claim<'a>(
        &'a self,
        lease: &'a LeaseId,
        renewals: u64,
    ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>> {
        self.inner.claim(lease, renewals)
    }

    fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.forget(lease)
    }

    fn release<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.release(lease)
    }
}

/// Hooks that hand the layer a [`Timing`] lease store.
#[derive(Debug, Default)]
struct TimeRenewals {
    renewals: Arc<Mutex<Vec<Timed>>>,
}

impl StoreHooks for TimeRenewals {
    fn leases(&self, store: &dyn TaskStore) -> Option<Arc<dyn LeaseStore>> {
        let inner = store.leases()?;
        Some(Arc::new(Timing {
            inner,
            renewals: self.renewals.clone(),
        }))
    }
}

impl TimeRenewals {
    /// The renewals that began at or after `since`.
    fn since(&self, since: Instant) -> Vec<Timed> {
        self.renewals
            .lock()
            .unwrap()
            .iter()
            .filter(|timed| timed.at >= since)
            .copied()
            .collect()
    }
}

const HOLDER: &str = "scale-holder";
const PEER: &str = "scale-peer";

/// `tasks` working tasks, made through `store` by 16 writers at once.
async fn seed(store: Arc<dyn TaskStore>, plan: Plan) -> Vec<TaskId> {
    let ids: Vec<TaskId> = (0..plan.tasks).map(|_| TaskId::random()).collect();
    let limits = CreateLimits::default();
    let mut writers = tokio::task::JoinSet::new();
    for part in ids.chunks(plan.tasks.div_ceil(16).max(1)) {
        let (store, part) = (store.clone(), part.to_vec());
        writers.spawn(async move {
            for id in part {
                let record = TaskRecord::new(id, None, Timestamp::now());
                store.create(record, limits).await.expect("a task stored");
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.expect("a writer");
    }
    ids
}

/// How many of `ids` are not `working`, read 1 000 at a time.
async fn not_working(store: &dyn TaskStore, ids: &[TaskId]) -> usize {
    let mut ended = 0;
    for batch in ids.chunks(1_000) {
        let found = store
            .get_many(batch, Scope::Any, Timestamp::now())
            .await
            .expect("a read");
        ended += batch.len()
            - found
                .iter()
                .filter(|task| task.status == TaskStatus::Working)
                .count();
    }
    ended
}

/// The leases of the node named `name`.
async fn leases_of(leases: &dyn LeaseStore, name: &str) -> Vec<LeaseState> {
    leases
        .leases()
        .await
        .expect("the leases read")
        .into_iter()
        .filter(|state| state.lease.node.as_str() == name)
        .collect()
}

/// What the checks after each fault compare with.
struct Watched<'a> {
    backend: &'a str,
    plan: Plan,
    direct: &'a dyn TaskStore,
    ids: &'a [TaskId],
    /// The holder's lease before the faults.
    lease: LeaseId,
    timing: &'a TimeRenewals,
}

impl Watched<'_> {
    /// Asserts that no task failed, that the holder still has its lease,
    /// unclaimed, and that its renewals succeed again within a lease of `ended`
    /// (each within a quarter of the lease); prints the renewals since `since`,
    /// when `what` began.
    async fn nothing_failed(&self, since: Instant, ended: Instant, what: &str) {
        let leases = self.direct.leases().expect("the store keeps leases");
        let holder = leases_of(leases.as_ref(), HOLDER).await;
        let failed = not_working(self.direct, self.ids).await;
        let renewals = self.timing.since(since);
        let failures = renewals.iter().filter(|timed| !timed.ok).count();
        let slowest = renewals
            .iter()
            .filter(|timed| timed.ok)
            .map(|timed| timed.took)
            .max()
            .unwrap_or_default();
        let back = renewals
            .iter()
            .skip_while(|timed| timed.ok)
            .find(|timed| timed.ok)
            .map(|timed| timed.took.as_millis());
        eprintln!(
            "{}: {} tasks held, lease {} ms, {what}: {failed} failed; {} renewals ({failures} failed or timed out), the slowest that succeeded took {} ms, the first success after a failure {back:?} ms",
            self.backend,
            self.ids.len(),
            self.plan.lease.as_millis(),
            renewals.len(),
            slowest.as_millis(),
        );
        assert_eq!(failed, 0, "{what} failed held tasks on {}", self.backend);
        assert_eq!(holder.len(), 1, "{what}: the holder's leases {holder:?}");
        assert_eq!(
            holder[0].lease, self.lease,
            "{what}: the holder lost its lease"
        );
        assert!(!holder[0].claimed, "{what}: the holder's lease was claimed");
        assert!(
            slowest < self.plan.lease / 4,
            "{what}: a renewal took {slowest:?}, past a quarter of the lease"
        );
        let settled: Vec<&Timed> = renewals
            .iter()
            .filter(|timed| timed.at >= ended + self.plan.lease)
            .collect();
        assert!(
            !settled.is_empty() && settled.iter().all(|timed| timed.ok),
            "{what}: the holder's renewals did not recover within a lease: {settled:?}"
        );
    }
}

/// The run on one backend: `stores` are three instances over one table or prefix,
/// the holder's through `proxies[0]`, the peer's through `proxies[1]`, the test's
/// direct.
async fn run(backend: &str, stores: [Arc<dyn TaskStore>; 3], proxies: [Proxy; 2]) {
    let plan = Plan::from_env();
    let [holder_store, peer_store, direct] = stores;
    let started = Instant::now();
    let ids = seed(direct.clone(), plan).await;
    let seeded = started.elapsed();
    let timing = Arc::new(TimeRenewals::default());
    let holder = TasksLayer::builder(Intercept::new(holder_store, timing.clone()))
        .with_worker_lease(plan.lease)
        .with_node_id(NodeId::new(HOLDER).unwrap())
        .with_max_rows(plan.cap())
        .with_max_tasks_per_owner(plan.cap())
        .without_janitor()
        .build()
        .expect("the holder");
    let _peer = TasksLayer::builder(peer_store)
        .with_worker_lease(plan.lease)
        .with_node_id(NodeId::new(PEER).unwrap())
        .without_janitor()
        .build()
        .expect("the peer");
    let tasks = holder.tasks();
    let holding = Instant::now();
    for id in &ids {
        tasks.hold(*id);
    }
    // Every hold stored, then the peer watches for three leases: its own renewals
    // have been unbroken for more than twice the lease, so it would claim a lease
    // that stands still.
    let all_stored = support::wait::poll(async || {
        let sent: usize = timing
            .since(holding)
            .iter()
            .filter(|timed| timed.ok)
            .map(|timed| timed.ids)
            .sum();
        (sent >= ids.len()).then_some(())
    })
    .await;
    assert!(all_stored.is_some(), "the holds were never all stored");
    let stored_in = holding.elapsed();
    tokio::time::sleep(plan.lease * 3).await;
    let leases = direct.leases().expect("the store keeps leases");
    let holder_lease = leases_of(leases.as_ref(), HOLDER).await;
    assert_eq!(holder_lease.len(), 1, "{holder_lease:?}");
    eprintln!(
        "{backend}: {} tasks seeded in {} ms, their holds stored in {} ms",
        ids.len(),
        seeded.as_millis(),
        stored_in.as_millis()
    );
    let watched = Watched {
        backend,
        plan,
        direct: direct.as_ref(),
        ids: &ids,
        lease: holder_lease[0].lease.clone(),
        timing: &timing,
    };

    // The holder alone stalls, shorter than the lease.
    let stalled = Instant::now();
    proxies[0].set(Mode::Stall);
    tokio::time::sleep(plan.stall).await;
    proxies[0].set(Mode::Pass);
    let ended = Instant::now();
    tokio::time::sleep(plan.lease * 3).await;
    let what = format!("a {} ms stall of the holder", plan.stall.as_millis());
    watched.nothing_failed(stalled, ended, &what).await;

    // Both are cut off, longer than the lease.
    let down = Instant::now();
    for proxy in &proxies {
        proxy.down();
    }
    tokio::time::sleep(plan.outage).await;
    for proxy in &proxies {
        proxy.set(Mode::Pass);
    }
    let ended = Instant::now();
    tokio::time::sleep(plan.lease * 4).await;
    let what = format!("a {} ms outage of both nodes", plan.outage.as_millis());
    watched.nothing_failed(down, ended, &what).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_holds_survive_a_stall_and_an_outage() {
    let Some(url) = support::stores::postgres::database_url() else {
        return;
    };
    let to = target(&url);
    let proxies = [Proxy::start(to).await, Proxy::start(to).await];
    // The holder plans every statement generically, as PostgreSQL may after a
    // statement's fifth run: a plan that cannot see the size of an array.
    let generic = "options[plan_cache_mode]=force_generic_plan";
    let holder = via(&url, proxies[0].addr);
    let holder = match holder.contains('?') {
        true => format!("{holder}&{generic}"),
        false => format!("{holder}?{generic}"),
    };
    // No store listens: nothing here waits on a change, and 12 000 creates would
    // each be read back by every listener.
    use support::stores::postgres::{DropTable, node, scratch_table};
    let table = scratch_table();
    let dropped = Arc::new(DropTable::new(url.clone(), table.clone()));
    let mut stores = Vec::new();
    for url in [holder, via(&url, proxies[1].addr), url.clone()] {
        let store = node(&url, &table).await;
        stores.push(Arc::new(Intercept::new(store, dropped.clone())) as Arc<dyn TaskStore>);
    }
    let stores: [_; 3] = stores.try_into().expect("three stores");
    run("PostgreSQL", stores, proxies).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_holds_survive_a_stall_and_an_outage() {
    let Some(url) = support::stores::redis::redis_url() else {
        return;
    };
    let to = target(&url);
    let proxies = [Proxy::start(to).await, Proxy::start(to).await];
    let urls = [
        via(&url, proxies[0].addr),
        via(&url, proxies[1].addr),
        url.clone(),
    ];
    let stores = support::stores::redis::nodes_at(&url, &urls).await;
    let [a, b, c]: [_; 3] = stores.try_into().expect("three stores");
    run("Redis", [Arc::new(a), Arc::new(b), Arc::new(c)], proxies).await;
}
