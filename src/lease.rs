//! The layer's side of worker leases: the keeper renews this node's lease with the
//! tasks it runs (and gives it up once a drain has ended and nothing unfinished is
//! held), and the sweeper claims the leases of nodes it has watched stand still, and
//! fails their unfinished tasks (see [`LeaseStore`]).
//!
//! The rule that keeps a live node's work safe: a lease is claimed only when its
//! renewal count has not moved for its own lease length, measured on the watching
//! node's monotonic clock, while the watcher's own renewals succeeded without a
//! break (a failure, or a gap longer than their regular course) for that whole
//! time and for twice that lease since the watcher's last break. An outage every node shares breaks every node's renewals, so nobody
//! claims anybody; a clock step moves no count. The claim itself is one atomic
//! store call that re-checks the count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::engine::{Engine, Interrupted, LeaseLog};
use crate::error::StoreError;
use crate::outage::Outage;
use crate::store::{LeaseId, LeaseStore, RENEW_BATCH, Renewal, Renewed};
use crate::task::{Scope, TaskId, Timestamp};

/// After new work starts, how long the keeper waits for more before it sends the
/// holds: creates that arrive together share one round trip. A create that waits
/// for its hold is not kept waiting: those that arrive while a renewal is on its
/// way share the next one.
const GATHER: Duration = Duration::from_millis(20);

/// The shortest pause before a renewal that failed is tried again.
const RETRY_MIN: Duration = Duration::from_millis(50);

/// The pauses between failed renewals: from a tenth of the renewal period (at least
/// [`RETRY_MIN`]) up to the period itself, jittered so nodes that lost the store
/// together do not come back in step.
fn renew_retries(renew_every: Duration) -> Backoff {
    Backoff::new(RETRY_MIN.max(renew_every / 10), renew_every)
}

/// How often, in leases, the explicit holds are checked against the store: a hold
/// whose task expired, or ended where this node did not see it, is given up.
const HOLDS_CHECK_EVERY: u32 = 8;

/// How many of the tasks a drained node still lists one read checks for their end,
/// before it gives its lease up.
const RELEASE_CHECK_BATCH: usize = 1_000;

/// The shortest pause between two sweeps.
const SWEEP_MIN: Duration = Duration::from_millis(10);

/// One node's leases, as the builder configured them.
#[derive(Clone, Debug)]
pub(crate) struct Leasing {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) lease: LeaseId,
    pub(crate) bound: Duration,
}

/// What the keeper tells the sweeper: the lease it renews now, and since when
/// its renewals have succeeded without a break (`None` while broken). A break is a
/// renewal that failed, or a gap between two successes longer than the keeper
/// leaves in its regular course (this process did not run: a paused host, a
/// starved machine).
#[derive(Debug)]
struct Health {
    lease: LeaseId,
    unbroken_since: Option<Instant>,
    last_ok: Option<Instant>,
    /// The longest regular gap between two successful renewals.
    max_gap: Duration,
}

impl Health {
    fn stale(&self, now: Instant) -> bool {
        self.last_ok
            .is_none_or(|ok| now.saturating_duration_since(ok) > self.max_gap)
    }

    /// A renewal succeeded at `now`.
    fn renewed(&mut self, now: Instant) {
        if self.stale(now) || self.unbroken_since.is_none() {
            self.unbroken_since = Some(now);
        }
        self.last_ok = Some(now);
    }

    /// A renewal failed.
    fn broken(&mut self) {
        self.unbroken_since = None;
    }

    /// Since when the renewals have been unbroken, as of `now`.
    fn unbroken_since(&mut self, now: Instant) -> Option<Instant> {
        if self.stale(now) {
            self.unbroken_since = None;
        }
        self.unbroken_since
    }
}

/// How a renewal went.
enum Sent {
    /// Every pending change is stored, and the count moved.
    Stored,
    /// The lease was claimed: the holds claimed, if the store still has them.
    Lost(Option<Vec<TaskId>>),
    /// A call failed or timed out (`None`); what it carried is still pending.
    Failed(Option<StoreError>),
}

/// What the sweeper saw of one lease: its count, and when it first saw it.
#[derive(Debug, Clone, Copy)]
struct Watch {
    renewals: u64,
    since: Instant,
}

impl Leasing {
    fn renew_every(&self) -> Duration {
        self.bound / 3
    }

    /// How long a renewal may take: shorter than the lease, so a renewal stuck on a
    /// stalled connection is given up and retried on a fresh one in time.
    fn renew_timeout(&self) -> Duration {
        self.bound / 4
    }

    /// Keeps this node's lease and sweeps other nodes' until `stop` resolves or the
    /// layer is gone.
    pub(crate) async fn run(
        self,
        engine: Weak<Engine>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let health = Mutex::new(Health {
            lease: self.lease.clone(),
            unbroken_since: None,
            last_ok: None,
            max_gap: self.renew_every() + self.renew_timeout() + self.bound / 8,
        });
        tokio::select! {
            _ = stop => {}
            _ = self.keep(engine.clone(), &health) => {}
            _ = self.sweep(engine, &health) => {}
        }
    }

    /// Renews this node's lease with the tasks `engine` runs until the layer is gone.
    /// Once a drain has ended, it gives the lease up as soon as no unfinished task
    /// is held, and tells the drain it has acted; work that begins after that is
    /// leased again, under a new incarnation.
    async fn keep(&self, engine: Weak<Engine>, health: &Mutex<Health>) {
        let mut lease = self.lease.clone();
        // The first renewal of an incarnation creates its lease, with every hold.
        let mut first = true;
        // The hold changes the store may lack: taken from the node, not yet
        // confirmed. After a failure they are sent again (adding and removing a
        // hold are idempotent), merged with what changed since.
        let mut pending = LeaseLog::default();
        let mut held = Held::default();
        let mut retries = renew_retries(self.renew_every());
        let mut failures = Outage::new("renew this node's worker lease");
        // Given up after a drain: no lease in the store until new work comes.
        let mut given_up = false;
        let mut giving_up = Outage::new("give this node's worker lease up after its drain");
        loop {
            let Some(strong) = engine.upgrade() else {
                return;
            };
            let changes = strong.node().lease_changes();
            let poked = changes.notified();
            tokio::pin!(poked);
            poked.as_mut().enable();
            if given_up {
                if strong.node().take_lease_log().hold.is_empty() {
                    drop(strong);
                    poked.await;
                    continue;
                }
                // Work began after the drain: a new incarnation leases it.
                lease = LeaseId::new(lease.node.clone());
                lock(health).lease = lease.clone();
                (given_up, first) = (false, true);
            } else if strong.node().is_drain_ended() {
                let gave_up = self.give_up(&strong, &lease, &mut giving_up).await;
                strong.node().lease_settled();
                if gave_up {
                    given_up = true;
                    held.set(0);
                    // Not renewing, this node claims no other's lease.
                    lock(health).broken();
                    continue;
                }
            }
            let log = strong.node().take_lease_log();
            let seq = log.seq;
            if first {
                // Read after the log was taken: it has every change the log had.
                pending = LeaseLog {
                    hold: strong.node().leased().into_iter().collect(),
                    seq,
                    ..LeaseLog::default()
                };
            } else {
                pending.merge_newer(log);
            }
            let next = match self.send(&lease, &mut first, &mut pending, health).await {
                Sent::Stored => {
                    strong.node().holds_settled(seq, true);
                    held.set(strong.node().leased().len());
                    retries.reset();
                    failures.succeeded();
                    self.renew_every()
                }
                Sent::Lost(tasks) => {
                    lost(&strong, tasks).await;
                    // A new incarnation takes over the work this node still runs.
                    lease = LeaseId::new(lease.node.clone());
                    first = true;
                    let mut health = lock(health);
                    health.lease = lease.clone();
                    health.broken();
                    continue;
                }
                Sent::Failed(e) => {
                    crate::observe::lease_renewal_failed();
                    failures.failed(e.as_ref());
                    strong.node().holds_settled(seq, false);
                    lock(health).broken();
                    retries.next_delay()
                }
            };
            drop(strong);
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = poked => gather(&engine, &changes).await,
            }
        }
    }

    /// One renewal of `lease` carrying `pending`: a renewal call per
    /// [`RENEW_BATCH`] ids (one when nothing changed), each bounded by the renewal
    /// timeout and each moving the count, so that no call grows with the holds.
    /// What each call stored leaves `pending`.
    async fn send(
        &self,
        lease: &LeaseId,
        first: &mut bool,
        pending: &mut LeaseLog,
        health: &Mutex<Health>,
    ) -> Sent {
        loop {
            let release: Vec<TaskId> = pending.release.iter().take(RENEW_BATCH).copied().collect();
            let hold: Vec<TaskId> = pending
                .hold
                .iter()
                .take(RENEW_BATCH - release.len())
                .copied()
                .collect();
            let renewal = Renewal {
                lease,
                bound: self.bound,
                first: *first,
                hold: &hold,
                release: &release,
                replace: false,
            };
            match tokio::time::timeout(self.renew_timeout(), self.store.renew(renewal)).await {
                Ok(Ok(Renewed::New | Renewed::Renewed)) => {
                    *first = false;
                    lock(health).renewed(Instant::now());
                    for id in &hold {
                        pending.hold.remove(id);
                    }
                    for id in &release {
                        pending.release.remove(id);
                    }
                    if pending.is_empty() {
                        return Sent::Stored;
                    }
                }
                Ok(Ok(Renewed::Lost { tasks })) => return Sent::Lost(tasks),
                Ok(Err(e)) => return Sent::Failed(Some(e)),
                Err(_) => return Sent::Failed(None),
            }
        }
    }

    /// After a drain: gives this node's lease up ([`LeaseStore::release`]) unless
    /// it still guards an unfinished task (what it lists may have ended, its work
    /// winding down), all within a quarter of the lease; failures are told through
    /// `failures`, and tried again before the next renewal. Whether it gave it up.
    async fn give_up(&self, engine: &Engine, lease: &LeaseId, failures: &mut Outage) -> bool {
        // Hold changes from here on stay in the log: after the release they lease
        // the new work again; if the lease is kept, they go out with the unsent ones.
        let unsent = engine.node().take_lease_log();
        let release = async {
            for batch in engine.node().leased().chunks(RELEASE_CHECK_BATCH) {
                let found = engine
                    .store()
                    .get_many(batch, Scope::Any, Timestamp::now())
                    .await?;
                if found.iter().any(|task| !task.status.is_terminal()) {
                    return Ok(false);
                }
            }
            self.store.release(lease).await.map(|()| true)
        };
        let outcome = tokio::time::timeout(self.renew_timeout(), release).await;
        let gave_up = match outcome {
            Ok(Ok(gave_up)) => {
                failures.succeeded();
                gave_up
            }
            Ok(Err(e)) => {
                failures.failed(Some(&e));
                false
            }
            Err(_) => {
                failures.failed(None);
                false
            }
        };
        if gave_up {
            tracing::info!(
                node = %lease.node,
                "mcp-tasks: drained: this node gave its worker lease up"
            );
        } else {
            engine.node().restore_lease_log(unsent);
        }
        gave_up
    }

    /// Watches the other leases and claims dead ones, on a timer, until the layer
    /// is gone.
    async fn sweep(&self, engine: Weak<Engine>, health: &Mutex<Health>) {
        let mut seen: HashMap<LeaseId, Watch> = HashMap::new();
        let mut every = self.bound / 8;
        let mut holds_checked = Instant::now();
        let mut failures = Outage::new("read the worker leases");
        loop {
            tokio::time::sleep(every.max(SWEEP_MIN)).await;
            let Some(engine) = engine.upgrade() else {
                return;
            };
            let (_, shortest) = self
                .sweep_once(&engine, health, &mut seen, &mut failures)
                .await;
            every = shortest.min(self.bound) / 8;
            if holds_checked.elapsed() >= self.bound * HOLDS_CHECK_EVERY {
                holds_checked = Instant::now();
                engine.release_ended_holds().await;
            }
        }
    }

    /// One sweep: reads every lease, notes which counts moved, and claims and fails
    /// the holds of each lease claimable by the rule (or claimed already, by a node
    /// that may have died before it finished). Returns how many tasks it failed,
    /// and the shortest lease length seen.
    async fn sweep_once(
        &self,
        engine: &Engine,
        health: &Mutex<Health>,
        seen: &mut HashMap<LeaseId, Watch>,
        failures: &mut Outage,
    ) -> (usize, Duration) {
        let leases = match tokio::time::timeout(self.renew_timeout(), self.store.leases()).await {
            Ok(Ok(leases)) => {
                failures.succeeded();
                leases
            }
            Ok(Err(e)) => {
                failures.failed(Some(&e));
                return (0, self.bound);
            }
            Err(_) => {
                failures.failed(None);
                return (0, self.bound);
            }
        };
        let now = Instant::now();
        let (own, unbroken_since) = {
            let mut health = lock(health);
            (health.lease.clone(), health.unbroken_since(now))
        };
        seen.retain(|lease, _| leases.iter().any(|state| &state.lease == lease));
        let mut shortest = self.bound;
        let mut failed = 0;
        for state in leases {
            if state.lease == own {
                continue;
            }
            shortest = shortest.min(state.bound);
            if !state.claimed {
                let watch = seen.entry(state.lease.clone()).or_insert(Watch {
                    renewals: state.renewals,
                    since: now,
                });
                if watch.renewals != state.renewals {
                    *watch = Watch {
                        renewals: state.renewals,
                        since: now,
                    };
                    continue;
                }
                if !claimable(watch, state.bound, unbroken_since, now) {
                    continue;
                }
            }
            failed += self.recover(engine, &state.lease, state.renewals).await;
        }
        (failed, shortest)
    }

    /// Claims `lease` if its count is still `renewals` (or it is claimed already),
    /// fails its holds, and forgets it once every one is failed. Returns how many
    /// tasks it failed.
    async fn recover(&self, engine: &Engine, lease: &LeaseId, renewals: u64) -> usize {
        let claimed =
            tokio::time::timeout(self.renew_timeout(), self.store.claim(lease, renewals)).await;
        let tasks = match claimed {
            Ok(Ok(Some(tasks))) => tasks,
            // Renewed since: alive.
            Ok(Ok(None)) => return 0,
            Ok(Err(e)) => {
                tracing::warn!(error = %crate::error::Chain(&e), "mcp-tasks: could not claim a dead node's worker lease");
                return 0;
            }
            Err(_) => {
                tracing::warn!("mcp-tasks: claiming a dead node's worker lease timed out");
                return 0;
            }
        };
        let mut failed = 0;
        let mut complete = true;
        for id in &tasks {
            match fail_lost(engine, id).await {
                Ok(true) => failed += 1,
                Ok(false) => {}
                Err(()) => complete = false,
            }
        }
        crate::observe::lease_recovered(failed);
        if complete {
            match tokio::time::timeout(self.renew_timeout(), self.store.forget(lease)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %crate::error::Chain(&e), "mcp-tasks: could not remove a claimed worker lease");
                }
                Err(_) => tracing::warn!("mcp-tasks: removing a claimed worker lease timed out"),
            }
        }
        tracing::warn!(
            node = %lease.node,
            held = tasks.len(),
            failed,
            "mcp-tasks: a node stopped renewing its worker lease; its unfinished tasks are failed"
        );
        failed
    }
}

/// After a change, waits up to [`GATHER`] for more, so that they share one
/// renewal; not at all, or no longer, once a create waits for its hold.
async fn gather(engine: &Weak<Engine>, changes: &tokio::sync::Notify) {
    let creating = || engine.upgrade().is_none_or(|e| e.node().has_creating());
    let gathered = tokio::time::sleep(GATHER);
    tokio::pin!(gathered);
    while !creating() {
        tokio::select! {
            _ = &mut gathered => return,
            _ = changes.notified() => {}
        }
    }
}

/// Whether a lease whose count stood still since `watch.since` may be claimed at
/// `now`: still for its whole `bound`, while this node's own renewals have been
/// unbroken since before that, and for twice `bound` since its last break.
fn claimable(
    watch: &Watch,
    bound: Duration,
    unbroken_since: Option<Instant>,
    now: Instant,
) -> bool {
    let Some(unbroken_since) = unbroken_since else {
        return false;
    };
    now >= watch.since + bound && now >= unbroken_since + bound * 2
}

fn lock(health: &Mutex<Health>) -> std::sync::MutexGuard<'_, Health> {
    health.lock().unwrap_or_else(|p| p.into_inner())
}

/// The held-tasks gauge's share of this node: moved by the difference, so that
/// several layers in one process add up.
#[derive(Debug, Default)]
struct Held(usize);

impl Held {
    fn set(&mut self, count: usize) {
        crate::observe::held_tasks(self.0, count);
        self.0 = count;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// This node's lease was claimed while it could not reach the store: the work on
/// the claimed tasks stops now. `tasks` is `None` when the claim is over and the
/// store no longer knows which: then the work on every task found ended stops.
async fn lost(engine: &Engine, tasks: Option<Vec<TaskId>>) {
    crate::observe::lease_lost();
    let ids = match tasks {
        Some(tasks) => tasks,
        None => engine.ended_among(&engine.node().leased()).await,
    };
    tracing::warn!(
        tasks = ids.len(),
        "mcp-tasks: this node lost its worker lease (other nodes judged it dead while it could not reach the store); the work on its claimed tasks stops"
    );
    for id in ids {
        engine.node().stop_lost(&id);
    }
}

/// Fails `id` as lost; `Ok(true)` when this changed it (`Ok(false)`: it had ended or
/// is gone), `Err` when the store failed, so the claimed lease is kept for the next
/// sweep.
async fn fail_lost(engine: &Engine, id: &TaskId) -> Result<bool, ()> {
    match engine.fail_interrupted(id, Interrupted::WorkerLost).await {
        Ok(changed) => Ok(changed),
        Err(e) => {
            tracing::warn!(error = %crate::error::Chain(&e), "mcp-tasks: could not fail a task whose worker was lost");
            Err(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::GATHER;
    use crate::error::StoreError;
    use crate::layer::TasksLayer;
    use crate::store::TaskStore;
    use crate::store::{
        BoxFuture, CreateLimits, LeaseId, LeaseState, LeaseStore, MemoryLeases, MemoryStore,
        NodeId, Renewal, Renewed,
    };
    use crate::task::{Scope, TaskEnd, TaskId, TaskRecord, TaskStatus, Timestamp};
    use crate::wire::RpcError;

    const BOUND: Duration = Duration::from_secs(1);
    const WORKER_LOST: &str = "Task worker lost: the node running it stopped or lost its lease";

    fn node(store: &Arc<MemoryStore>, leases: impl LeaseStore) -> TasksLayer {
        TasksLayer::builder(store.clone())
            .with_worker_lease(BOUND)
            .with_lease_store(leases)
            .without_janitor()
            .build()
            .expect("a valid layer")
    }

    async fn working_task(store: &Arc<MemoryStore>) -> TaskId {
        let id = TaskId::random();
        store
            .create(
                TaskRecord::new(id, None, Timestamp::now()),
                CreateLimits::default(),
            )
            .await
            .expect("created");
        id
    }

    async fn stored(store: &Arc<MemoryStore>, id: &TaskId) -> TaskRecord {
        store
            .get(id, Scope::Any, Timestamp::now())
            .await
            .expect("read")
            .expect("present")
    }

    /// Stops a node's lease keeper as a crash would: its work stays registered and
    /// nothing ends its tasks.
    fn crash(layer: &TasksLayer) {
        drop(layer.engine.take_lease_stop());
    }

    async fn all(leases: &impl LeaseStore) -> Vec<LeaseState> {
        leases.leases().await.expect("read")
    }

    #[tokio::test(start_paused = true)]
    async fn a_survivor_fails_the_unfinished_tasks_of_a_node_that_stopped_within_the_bound() {
        let store = Arc::new(MemoryStore::new());
        let leases = MemoryLeases::new();
        let a = node(&store, leases.clone());
        let b = node(&store, leases.clone());
        let running = working_task(&store).await;
        let held = working_task(&store).await;
        let released = working_task(&store).await;
        let finished = working_task(&store).await;
        a.engine.node().register_work(running);
        a.tasks().hold(held);
        a.tasks().hold(released);
        a.tasks().release(&released);
        a.engine.node().register_work(finished);
        a.tasks()
            .complete(&finished, serde_json::json!({"content": []}))
            .await
            .expect("completed");

        // Alive, node a renews: nothing of its work is failed however long it runs.
        tokio::time::sleep(BOUND * 5).await;
        assert_eq!(stored(&store, &running).await.status, TaskStatus::Working);
        assert_eq!(stored(&store, &held).await.status, TaskStatus::Working);

        crash(&a);
        let crashed = tokio::time::Instant::now();
        let survivor = b.tasks();
        let ends = async { (survivor.ended(&running).await, survivor.ended(&held).await) };
        let ends = tokio::time::timeout(BOUND * 3, ends)
            .await
            .expect("the lost tasks end");
        assert_eq!(ends, (TaskEnd::Failed, TaskEnd::Failed));
        assert!(
            crashed.elapsed() <= BOUND * 5 / 4 + GATHER,
            "lost work failed {:?} after the stop",
            crashed.elapsed()
        );
        let lost = stored(&store, &running).await;
        let error = lost.error.expect("the failure's error");
        assert_eq!(error.code, RpcError::INTERNAL_ERROR);
        assert_eq!(error.message, WORKER_LOST);
        assert_eq!(
            error.data,
            Some(serde_json::json!({"reason": "worker_lost", "retryable": true})),
            "a lost worker's task may be called again"
        );
        assert_eq!(lost.status_message.as_deref(), Some(WORKER_LOST));
        // What it no longer held, or had finished, is left as it was.
        assert_eq!(stored(&store, &released).await.status, TaskStatus::Working);
        assert_eq!(
            stored(&store, &finished).await.status,
            TaskStatus::Completed
        );
        // The claimed lease is forgotten once its tasks are failed: only b's is left.
        tokio::time::sleep(BOUND).await;
        assert_eq!(all(&leases).await.len(), 1);
    }

    /// Memory leases with the faults a test turns on: every call fails while
    /// `down` is set; a renewal waits, on its way, while `held` is. The holds each
    /// successful renewal stored are kept in `stored`; with `tasks`, a hold that
    /// reaches the leases after its task was created is counted in `late`.
    #[derive(Debug, Clone, Default)]
    struct Faulty {
        inner: MemoryLeases,
        down: Arc<AtomicBool>,
        held: Arc<tokio::sync::watch::Sender<bool>>,
        stored: Arc<Mutex<HashSet<TaskId>>>,
        tasks: Option<Arc<MemoryStore>>,
        late: Arc<AtomicUsize>,
    }

    impl Faulty {
        /// The same leases, down while `down` is set.
        fn over(&self, down: &Arc<AtomicBool>) -> Faulty {
            Faulty {
                down: down.clone(),
                ..self.clone()
            }
        }

        fn unreachable<T: Send + 'static>(
            &self,
        ) -> Option<BoxFuture<'static, Result<T, StoreError>>> {
            self.down.load(Ordering::Acquire).then(|| {
                Box::pin(std::future::ready(Err(StoreError::backend(
                    std::io::Error::other("store unreachable"),
                )))) as BoxFuture<'static, _>
            })
        }
    }

    impl LeaseStore for Faulty {
        fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
            Box::pin(async move {
                let _ = self.held.subscribe().wait_for(|held| !*held).await;
                if let Some(down) = self.unreachable() {
                    return down.await;
                }
                let renewed = self.inner.renew(renewal.clone()).await;
                if let Ok(Renewed::New | Renewed::Renewed) = renewed {
                    for id in renewal.hold {
                        let created = match &self.tasks {
                            Some(tasks) => tasks.get(id, Scope::Any, Timestamp::now()).await,
                            None => Ok(None),
                        };
                        let new = self.stored.lock().unwrap().insert(*id);
                        if new && matches!(created, Ok(Some(_))) {
                            self.late.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    let mut stored = self.stored.lock().unwrap();
                    for id in renewal.release {
                        stored.remove(id);
                    }
                }
                renewed
            })
        }

        fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
            self.unreachable().unwrap_or_else(|| self.inner.leases())
        }

        fn claim<'a>(
            &'a self,
            lease: &'a LeaseId,
            renewals: u64,
        ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>> {
            self.unreachable()
                .unwrap_or_else(|| self.inner.claim(lease, renewals))
        }

        fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
            self.unreachable()
                .unwrap_or_else(|| self.inner.forget(lease))
        }

        fn release<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
            self.unreachable()
                .unwrap_or_else(|| self.inner.release(lease))
        }
    }

    /// Two nodes at work over one memory store, node `a` on `for_a`, node `b` on
    /// `for_b`, each running a task of its own, settled for three leases.
    struct AtWork {
        store: Arc<MemoryStore>,
        a: TasksLayer,
        _b: TasksLayer,
        tasks: [TaskId; 2],
    }

    impl AtWork {
        async fn start(for_a: impl LeaseStore, for_b: impl LeaseStore) -> AtWork {
            let store = Arc::new(MemoryStore::new());
            let (a, b) = (node(&store, for_a), node(&store, for_b));
            let tasks = [working_task(&store).await, working_task(&store).await];
            a.engine.node().register_work(tasks[0]);
            b.engine.node().register_work(tasks[1]);
            tokio::time::sleep(BOUND * 3).await;
            AtWork {
                store,
                a,
                _b: b,
                tasks,
            }
        }

        /// Asserts that both tasks still run after `fault`.
        async fn still_working(&self, fault: &str) {
            for id in &self.tasks {
                let status = stored(&self.store, id).await.status;
                assert_eq!(
                    status,
                    TaskStatus::Working,
                    "{fault} failed a live node's task"
                );
            }
        }
    }

    /// Log lines written while it is the thread's subscriber.
    #[derive(Clone, Default)]
    struct Logged(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Logged {
        fn lines(&self, level: &str, text: &str) -> usize {
            String::from_utf8_lossy(&self.0.lock().unwrap())
                .lines()
                .filter(|line| line.contains(level) && line.contains(text))
                .count()
        }

        /// Collects what is logged on this thread until the guard is dropped.
        fn here(&self) -> tracing::subscriber::DefaultGuard {
            let writer = self.clone();
            tracing::subscriber::set_default(
                tracing_subscriber::fmt()
                    .with_max_level(tracing::Level::INFO)
                    .with_ansi(false)
                    .with_writer(move || writer.clone())
                    .finish(),
            )
        }
    }

    impl std::io::Write for Logged {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_told_once_then_summed_up_then_ended() {
        let logged = Logged::default();
        // The runtime has one thread, this one: the lease loops log here.
        let _logs = logged.here();
        let store = Arc::new(MemoryStore::new());
        let leases = Faulty::default();
        let _node = node(&store, leases.clone());
        tokio::time::sleep(BOUND * 3).await;

        // 95 s down: a renewal is retried every third of a lease at most, a sweep
        // runs every eighth, so hundreds of failures.
        leases.down.store(true, Ordering::Release);
        tokio::time::sleep(Duration::from_secs(95)).await;
        for doing in ["renew this node's worker lease", "read the worker leases"] {
            assert_eq!(
                logged.lines("WARN", &format!("mcp-tasks: could not {doing}; retrying")),
                1,
                "the first failure, once"
            );
            // One summary at 30, 60 and 90 s (give or take a retry).
            let summaries = logged.lines("WARN", &format!("still could not {doing}"));
            assert!(
                (2..=3).contains(&summaries),
                "{summaries} summaries of {doing}"
            );
            assert_eq!(
                logged.lines("INFO", &format!("mcp-tasks: could {doing} again")),
                0
            );
        }
        let summary = String::from_utf8_lossy(&logged.0.lock().unwrap())
            .lines()
            .find(|line| line.contains("still could not renew"))
            .map(str::to_owned)
            .unwrap();
        assert!(summary.contains("store unreachable"), "{summary}");
        assert!(summary.contains("failures="), "{summary}");

        leases.down.store(false, Ordering::Release);
        tokio::time::sleep(BOUND * 2).await;
        for doing in ["renew this node's worker lease", "read the worker leases"] {
            assert_eq!(
                logged.lines("INFO", &format!("mcp-tasks: could {doing} again")),
                1
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_every_node_shares_fails_nothing_whatever_its_length() {
        let leases = Faulty::default();
        let nodes = AtWork::start(leases.clone(), leases.clone()).await;
        for outage in [1, 3, 10] {
            leases.down.store(true, Ordering::Release);
            tokio::time::sleep(BOUND * outage).await;
            leases.down.store(false, Ordering::Release);
            tokio::time::sleep(BOUND * 4).await;
            nodes
                .still_working(&format!("an outage of {outage} leases"))
                .await;
        }
        // Both leases are alive and unclaimed, under their first incarnations.
        let leases = all(&leases.inner).await;
        assert_eq!(leases.len(), 2);
        assert!(leases.iter().all(|lease| !lease.claimed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_freeze_of_every_node_fails_nothing() {
        // Both nodes stop running for ten leases at once (a paused host, a starved
        // machine), then go on: whichever runs first must not claim the other.
        let leases = MemoryLeases::new();
        let nodes = AtWork::start(leases.clone(), leases).await;
        for _ in 0..5 {
            tokio::time::advance(BOUND * 10).await;
            tokio::time::sleep(BOUND * 3).await;
        }
        nodes.still_working("a freeze of ten leases").await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_cut_off_alone_loses_its_work_and_learns_it_on_its_next_renewal() {
        let leases = Faulty::default();
        let cut = Arc::new(AtomicBool::new(false));
        let nodes = AtWork::start(leases.over(&cut), leases.clone()).await;
        let (store, a, running) = (&nodes.store, &nodes.a, nodes.tasks[0]);

        cut.store(true, Ordering::Release);
        tokio::time::sleep(BOUND * 3).await;
        let lost = stored(store, &running).await;
        assert_eq!(lost.status, TaskStatus::Failed);
        assert_eq!(
            lost.error.and_then(|e| e.data),
            Some(serde_json::json!({"reason": "worker_lost", "retryable": true})),
            "the work of a node that lost its lease may be called again"
        );
        let ended = tokio::time::timeout(BOUND, a.tasks().ended(&running)).await;
        assert_eq!(
            ended,
            Ok(TaskEnd::Failed),
            "the cut-off node's worker sees the failure"
        );
        let own = stored(store, &nodes.tasks[1]).await.status;
        assert_eq!(own, TaskStatus::Working, "the survivor's own task runs on");

        cut.store(false, Ordering::Release);
        tokio::time::sleep(BOUND).await;
        // Back, it renews under a new incarnation; the claimed lease is gone.
        let now = all(&leases.inner).await;
        assert_eq!(now.len(), 2, "{now:?}");
        assert!(now.iter().all(|lease| !lease.claimed));
        // Its later work is leased again: were it to stop now, it would be failed.
        let later = working_task(store).await;
        a.engine.node().register_work(later);
        tokio::time::sleep(BOUND).await;
        crash(a);
        tokio::time::sleep(BOUND * 2).await;
        assert_eq!(stored(store, &later).await.status, TaskStatus::Failed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_under_the_same_node_id_fails_the_predecessors_work() {
        let store = Arc::new(MemoryStore::new());
        let leases = MemoryLeases::new();
        let host = NodeId::new("host-1").expect("a valid id");
        let named = |store: &Arc<MemoryStore>| {
            TasksLayer::builder(store.clone())
                .with_worker_lease(BOUND)
                .with_lease_store(leases.clone())
                .with_node_id(host.clone())
                .without_janitor()
                .build()
                .expect("a valid layer")
        };
        let first = named(&store);
        let lost = working_task(&store).await;
        first.engine.node().register_work(lost);
        tokio::time::sleep(BOUND).await;
        crash(&first);

        // The same host comes back at once, alone.
        let restarted = tokio::time::Instant::now();
        let second = named(&store);
        let own = working_task(&store).await;
        second.engine.node().register_work(own);
        let end = tokio::time::timeout(BOUND * 4, second.tasks().ended(&lost)).await;
        assert_eq!(end, Ok(TaskEnd::Failed), "the predecessor's work is failed");
        assert!(
            restarted.elapsed() <= BOUND * 2 + BOUND / 4 + GATHER,
            "failed {:?} after the restart",
            restarted.elapsed()
        );
        assert_eq!(stored(&store, &own).await.status, TaskStatus::Working);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_ends_when_its_task_ends_out_of_sight() {
        let store = Arc::new(MemoryStore::new());
        let a = node(&store, MemoryLeases::new());
        let (expiring, ended) = (TaskId::random(), working_task(&store).await);
        // Long expired.
        let mut record = TaskRecord::new(expiring, None, Timestamp::from_millis(1));
        record.ttl_ms = Some(1);
        store
            .create(record, CreateLimits::default())
            .await
            .expect("created");
        a.tasks().hold(expiring);
        a.tasks().hold(ended);
        // Ended by a write this node never saw.
        let cancel = crate::task::Transition::Cancel;
        store
            .update(&ended, Scope::Any, &cancel, Timestamp::now())
            .await
            .expect("cancelled");
        assert_eq!(a.engine.node().leased().len(), 2);
        tokio::time::sleep(BOUND * (super::HOLDS_CHECK_EVERY + 1)).await;
        assert!(
            a.engine.node().leased().is_empty(),
            "{:?}",
            a.engine.node().leased()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_send_only_what_changed_and_keep_what_is_still_held() {
        let store = Arc::new(MemoryStore::new());
        let leases = MemoryLeases::new();
        let a = node(&store, leases.clone());
        let (ended, twice, explicit) = (
            working_task(&store).await,
            working_task(&store).await,
            working_task(&store).await,
        );
        a.engine.node().register_work(ended);
        a.engine.node().register_work(twice);
        a.tasks().hold(twice);
        a.tasks().hold(explicit);
        tokio::time::sleep(BOUND).await;

        // The work on `ended` stops; `twice` loses its work but keeps its hold.
        a.engine.node().forget_work(&ended);
        a.engine.node().forget_work(&twice);
        tokio::time::sleep(BOUND).await;
        crash(&a);
        let state = all(&leases).await.remove(0);
        let held = leases
            .claim(&state.lease, state.renewals)
            .await
            .expect("claimed")
            .expect("not renewed since the crash");
        let mut expected = vec![twice, explicit];
        expected.sort_unstable();
        assert_eq!(held, expected);
    }

    /// A node named `name`.
    fn named(store: &Arc<MemoryStore>, leases: &MemoryLeases, name: &str) -> TasksLayer {
        TasksLayer::builder(store.clone())
            .with_worker_lease(BOUND)
            .with_lease_store(leases.clone())
            .with_node_id(NodeId::new(name).expect("a valid id"))
            .without_janitor()
            .build()
            .expect("a valid layer")
    }

    /// The nodes with a lease, by name.
    async fn nodes(leases: &MemoryLeases) -> Vec<String> {
        let mut nodes: Vec<String> = all(leases)
            .await
            .into_iter()
            .map(|state| state.lease.node.to_string())
            .collect();
        nodes.sort();
        nodes
    }

    /// The lease of the node named `name`, if it has one.
    async fn lease_of(leases: &MemoryLeases, name: &str) -> Option<LeaseId> {
        all(leases)
            .await
            .into_iter()
            .map(|state| state.lease)
            .find(|lease| lease.node.as_str() == name)
    }

    #[tokio::test(start_paused = true)]
    async fn a_drained_node_gives_its_lease_up_and_no_survivor_claims_it() {
        let logged = Logged::default();
        let _logs = logged.here();
        let store = Arc::new(MemoryStore::new());
        let leases = MemoryLeases::new();
        let a = named(&store, &leases, "a");
        let _b = named(&store, &leases, "b");
        let (finished, cut) = (working_task(&store).await, working_task(&store).await);
        a.engine.node().register_work(finished);
        // Work whose handle outlives the drain that fails its task.
        a.engine.node().register_work(cut);
        tokio::time::sleep(BOUND).await;
        assert_eq!(all(&leases).await.len(), 2);
        a.tasks()
            .complete(&finished, serde_json::json!({"content": []}))
            .await
            .expect("completed");
        a.engine.node().forget_work(&finished);

        assert_eq!(a.drain(BOUND / 2).await, 1);
        assert_eq!(
            nodes(&leases).await,
            ["b"],
            "a drained node gives its lease up before its drain returns"
        );
        tokio::time::sleep(BOUND * 4).await;
        assert_eq!(logged.lines("WARN", "stopped renewing its worker lease"), 0);
        assert_eq!(logged.lines("WARN", "lost its worker lease"), 0);
        let error = stored(&store, &cut).await.error.expect("failed");
        assert_eq!(
            error.data,
            Some(serde_json::json!({"reason": "shutting_down", "retryable": true}))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_drained_node_keeps_its_lease_while_it_holds_unfinished_work() {
        let store = Arc::new(MemoryStore::new());
        let leases = MemoryLeases::new();
        let a = named(&store, &leases, "a");
        let _b = named(&store, &leases, "b");
        // Held for work elsewhere: a drain neither waits for it nor fails it.
        let held = working_task(&store).await;
        a.tasks().hold(held);
        tokio::time::sleep(BOUND).await;
        let before = lease_of(&leases, "a").await.expect("a's lease");
        assert_eq!(a.drain(BOUND).await, 0);
        assert_eq!(
            lease_of(&leases, "a").await,
            Some(before.clone()),
            "the lease stays while it guards unfinished work"
        );
        a.tasks()
            .complete(&held, serde_json::json!({"content": []}))
            .await
            .expect("completed");
        tokio::time::sleep(BOUND).await;
        assert_eq!(
            nodes(&leases).await,
            ["b"],
            "once the work has ended, the lease is given up"
        );

        // Work that begins after the drain is leased again, under a new incarnation.
        let later = working_task(&store).await;
        a.engine.node().register_work(later);
        tokio::time::sleep(BOUND / 2).await;
        let after = lease_of(&leases, "a").await.expect("leased again");
        assert_ne!(after, before, "a new incarnation");
        crash(&a);
        tokio::time::sleep(BOUND * 3).await;
        assert_eq!(stored(&store, &later).await.status, TaskStatus::Failed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_does_not_wait_on_a_lease_store_out_of_reach_and_gives_the_lease_up_once_back()
    {
        let store = Arc::new(MemoryStore::new());
        let leases = Faulty::default();
        let a = node(&store, leases.clone());
        tokio::time::sleep(BOUND).await;
        leases.down.store(true, Ordering::Release);
        let started = tokio::time::Instant::now();
        assert_eq!(a.drain(BOUND).await, 0);
        assert!(
            started.elapsed() <= BOUND / 2,
            "the drain waited {:?}",
            started.elapsed()
        );
        assert_eq!(
            all(&leases.inner).await.len(),
            1,
            "the lease is still there"
        );
        leases.down.store(false, Ordering::Release);
        tokio::time::sleep(BOUND).await;
        assert!(
            all(&leases.inner).await.is_empty(),
            "back, the store gets the release"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_node_id_names_the_host_and_the_process() {
        let store = Arc::new(MemoryStore::new());
        let leases = MemoryLeases::new();
        let _a = node(&store, leases.clone());
        let _b = node(&store, leases.clone());
        tokio::time::sleep(BOUND).await;
        let ids: Vec<String> = all(&leases)
            .await
            .into_iter()
            .map(|state| state.lease.node.to_string())
            .collect();
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1], "two layers in one process, two ids");
        let pid = format!("-{}-", std::process::id());
        for id in &ids {
            let (host, suffix) = id
                .split_once(&pid)
                .unwrap_or_else(|| panic!("{id} names no process"));
            assert!(!host.is_empty(), "{id} names no host");
            if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
                assert_eq!(host, name.trim(), "{id}");
            }
            assert_eq!(suffix.len(), 6, "{id}");
            assert!(suffix.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
    }

    fn alice() -> Option<crate::task::Principal> {
        Some(crate::task::Principal::from("alice"))
    }

    /// A spec whose work runs until its task ends.
    fn endless() -> crate::TaskSpec {
        crate::TaskSpec::new().with_work(|task| async move {
            let _ = task.run_until_ended(std::future::pending::<()>()).await;
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_is_stored_only_once_its_hold_is() {
        let store = Arc::new(MemoryStore::new());
        let leases = Faulty {
            tasks: Some(store.clone()),
            ..Faulty::default()
        };
        let a = node(&store, leases.clone());
        tokio::time::sleep(BOUND).await;
        // A task made by a handler, whose work starts with it, and one made for an
        // `Auto` call, whose runner is registered after it.
        let made = crate::routes::create_task(&a.engine, alice(), endless())
            .await
            .expect("created");
        let (auto, creating) = a
            .engine
            .create_task(alice(), &crate::engine::NewTask::default())
            .await
            .expect("created");
        drop(creating);
        assert_eq!(
            leases.late.load(Ordering::SeqCst),
            0,
            "a hold reached the leases after its task was stored"
        );
        let stored_holds = leases.stored.lock().unwrap().clone();
        assert!(stored_holds.contains(&made.id) && stored_holds.contains(&auto.id));
        // The task with work stays held; the other one, with no work here, is not.
        tokio::time::sleep(BOUND).await;
        let stored_holds = leases.stored.lock().unwrap().clone();
        assert_eq!(stored_holds, HashSet::from([made.id]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_without_a_working_lease_refuses_new_tasks_until_it_has_one() {
        let logged = Logged::default();
        let _logs = logged.here();
        let store = Arc::new(MemoryStore::new());
        let leases = Faulty::default();
        leases.down.store(true, Ordering::Release);
        let a = node(&store, leases.clone());
        tokio::time::sleep(BOUND).await;
        let started = tokio::time::Instant::now();
        for _ in 0..3 {
            let refused = crate::routes::create_task(&a.engine, alice(), endless())
                .await
                .expect_err("refused without a lease");
            assert_eq!(
                (refused.code(), refused.http_status().as_u16()),
                (RpcError::INTERNAL_ERROR, 503)
            );
            assert_eq!(
                refused.data(),
                Some(&serde_json::json!({"reason": "no_worker_lease", "retryable": true}))
            );
        }
        assert!(
            started.elapsed() <= BOUND / 4,
            "refused after {:?}",
            started.elapsed()
        );
        let page = store
            .list(alice().as_ref(), None, 10, Timestamp::now())
            .await
            .expect("listed");
        assert!(page.records.is_empty(), "a refused task was stored");
        assert_eq!(logged.lines("WARN", "so new tasks are refused"), 1);
        assert_eq!(a.engine.node().work_count(), 0, "no work started");

        // The lease back, tasks are taken again.
        leases.down.store(false, Ordering::Release);
        let made = crate::routes::create_task(&a.engine, alice(), endless())
            .await
            .expect("created once the lease is back");
        assert!(leases.stored.lock().unwrap().contains(&made.id));
    }

    /// Changes gather for a moment to share a renewal, but a create that waits for
    /// its hold ends the gathering: it is never kept waiting for other changes.
    #[tokio::test(start_paused = true)]
    async fn a_create_during_a_gathering_is_not_kept_waiting() {
        let store = Arc::new(MemoryStore::new());
        let leases = Faulty::default();
        let a = node(&store, leases.clone());
        tokio::time::sleep(BOUND).await;
        // A hold of work without a create: the keeper gathers more for GATHER.
        let other = working_task(&store).await;
        a.engine.node().hold(other);
        tokio::time::sleep(GATHER / 4).await;
        let started = tokio::time::Instant::now();
        let made = crate::routes::create_task(&a.engine, alice(), endless())
            .await
            .expect("created");
        assert!(
            started.elapsed() < GATHER / 2,
            "the create waited {:?} for the gathering",
            started.elapsed()
        );
        let stored_holds = leases.stored.lock().unwrap().clone();
        assert!(stored_holds.contains(&made.id) && stored_holds.contains(&other));
    }

    /// Work handed over to a durable queue outlives the node: its create waits for
    /// no lease (so a node whose lease is down still takes it) and holds none.
    #[tokio::test(start_paused = true)]
    async fn a_task_handed_over_to_a_queue_waits_for_no_lease_and_holds_none() {
        let store = Arc::new(MemoryStore::new());
        let leases = Faulty::default();
        leases.down.store(true, Ordering::Release);
        let a = node(&store, leases.clone());
        tokio::time::sleep(BOUND).await;
        let handed = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = handed.clone();
        let spec = crate::TaskSpec::new().with_hand_over(move |id| {
            record.lock().unwrap().push(id);
            Box::pin(async { Ok(()) })
        });
        let started = tokio::time::Instant::now();
        let made = crate::routes::create_task(&a.engine, alice(), spec)
            .await
            .expect("a hand-over needs no lease");
        assert_eq!(started.elapsed(), Duration::ZERO, "it waited for a renewal");
        assert_eq!(*handed.lock().unwrap(), vec![made.id]);
        leases.down.store(false, Ordering::Release);
        tokio::time::sleep(BOUND).await;
        assert!(
            !leases.stored.lock().unwrap().contains(&made.id),
            "a handed-over task was held"
        );
        assert_eq!(a.engine.node().work_count(), 0, "no work runs here");
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_whose_lease_was_claimed_while_its_renewal_was_on_its_way_stops_its_work() {
        let store = Arc::new(MemoryStore::new());
        let leases = Faulty::default();
        let a = node(&store, leases.clone());
        let _b = node(&store, leases.inner.clone());
        let (handled, auto) = (working_task(&store).await, working_task(&store).await);
        a.engine.node().register_work(handled);
        let (dropped, runner_gone) = tokio::sync::oneshot::channel::<()>();
        let runner = tokio::spawn(async move {
            let _dropped = dropped;
            std::future::pending::<()>().await;
        });
        a.engine.node().register_runner(auto, runner.abort_handle());
        tokio::time::sleep(BOUND * 3).await;
        let before = all(&leases.inner).await;

        // Node a's renewals stay on their way until node b has claimed its lease
        // and failed its tasks; a client reads the `Auto` task meanwhile.
        leases.held.send_replace(true);
        for id in [&handled, &auto] {
            let failed = async {
                while stored(&store, id).await.status != TaskStatus::Failed {
                    tokio::time::sleep(BOUND / 8).await;
                }
            };
            tokio::time::timeout(BOUND * 4, failed)
                .await
                .expect("b fails a's tasks");
        }
        let read = tokio::time::timeout(BOUND, a.tasks().ended(&auto)).await;
        assert_eq!(read, Ok(TaskEnd::Failed));
        leases.held.send_replace(false);

        // The renewal finds the lease claimed: a's work stops, its runner included.
        let gone = tokio::time::timeout(BOUND, runner_gone).await;
        assert!(gone.is_ok(), "the auto runner of a claimed task still runs");
        let ended = tokio::time::timeout(BOUND, a.tasks().ended(&handled)).await;
        assert_eq!(ended, Ok(TaskEnd::Failed));
        a.engine.node().forget_work(&handled);
        tokio::time::sleep(BOUND).await;
        // Node a renews under a new incarnation, which holds neither task.
        let now = all(&leases.inner).await;
        let renewed: Vec<&LeaseState> = now
            .iter()
            .filter(|state| !before.iter().any(|seen| seen.lease == state.lease))
            .collect();
        assert_eq!(renewed.len(), 1, "{now:?}");
        let holds = leases
            .inner
            .claim(&renewed[0].lease, renewed[0].renewals)
            .await
            .expect("claimed")
            .expect("at its count");
        assert!(holds.is_empty(), "the new incarnation holds {holds:?}");
    }

    #[test]
    fn a_lease_is_claimable_only_after_standing_still_for_its_bound_while_the_watcher_was_unbroken()
    {
        use super::{Watch, claimable};
        let start = tokio::time::Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let watch = Watch {
            renewals: 7,
            since: at(5_000),
        };
        let bound = BOUND;
        // Unbroken for long: claimable one bound after the count was first seen.
        assert!(!claimable(&watch, bound, Some(at(0)), at(5_999)));
        assert!(claimable(&watch, bound, Some(at(0)), at(6_000)));
        // Broken now: never.
        assert!(!claimable(&watch, bound, None, at(60_000)));
        // Back from a break: only two bounds after it, whatever was seen before.
        assert!(!claimable(&watch, bound, Some(at(5_500)), at(7_499)));
        assert!(claimable(&watch, bound, Some(at(5_500)), at(7_500)));
    }

    #[test]
    fn a_lease_shorter_than_the_least_is_refused() {
        let refused = TasksLayer::builder(MemoryStore::new())
            .with_worker_lease(Duration::from_millis(10))
            .build();
        let refused = refused.unwrap_err();
        assert_eq!(
            refused,
            crate::error::ConfigError::TooSmall {
                setting: "worker lease",
                min: crate::defaults::MIN_WORKER_LEASE,
            }
        );
        assert!(
            refused.to_string().ends_with("at least 100 ms"),
            "{refused}"
        );
    }
}
