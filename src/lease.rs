//! The layer's side of worker leases: the keeper renews this node's lease with the
//! tasks it runs, and the sweeper fails the unfinished tasks of nodes whose leases
//! lapsed (see [`LeaseStore`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::engine::Engine;
use crate::store::{LeaseStore, NodeId, Renewal};
use crate::task::{ErrorObject, Scope, TaskId, Transition};
use crate::wire::RpcError;

/// The message of a task failed because the node running it stopped renewing.
pub(crate) const WORKER_LOST: &str = "Task worker lost: the node running it stopped";

/// After new work starts, how long the keeper waits for more before it sends the
/// holds: creates that arrive together share one round trip.
const GATHER: Duration = Duration::from_millis(20);

/// The shortest pause before a renewal that failed is tried again.
const RETRY_MIN: Duration = Duration::from_millis(50);

/// One node's leases, as the builder configured them.
#[derive(Clone, Debug)]
pub(crate) struct Leasing {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) node: NodeId,
    pub(crate) bound: Duration,
}

impl Leasing {
    fn renew_every(&self) -> Duration {
        self.bound / 3
    }

    fn sweep_every(&self) -> Duration {
        self.bound / 4
    }

    /// Keeps this node's lease and sweeps lapsed ones until `stop` resolves or the
    /// layer is gone.
    pub(crate) async fn run(
        self,
        engine: Weak<Engine>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::select! {
            _ = stop => {}
            _ = self.keep(engine.clone()) => {}
            _ = self.sweep(engine) => {}
        }
    }

    /// Renews this node's lease with the tasks `engine` runs until the layer is gone.
    async fn keep(&self, engine: Weak<Engine>) {
        // The store's copy is unknown at first, and after any failed renewal: then
        // the whole set is sent; otherwise only what changed since the last one.
        let mut replace = true;
        if let Some(engine) = engine.upgrade() {
            engine.start_leasing();
        }
        loop {
            let Some(strong) = engine.upgrade() else {
                return;
            };
            let changes = strong.lease_changes();
            let poked = changes.notified();
            tokio::pin!(poked);
            poked.as_mut().enable();
            let log = strong.take_lease_log();
            let (hold, release): (Vec<TaskId>, Vec<TaskId>) = if replace {
                (strong.leased(), Vec::new())
            } else {
                (
                    log.hold.into_iter().collect(),
                    log.release.into_iter().collect(),
                )
            };
            drop(strong);
            let renewal = Renewal {
                node: &self.node,
                bound: self.bound,
                hold: &hold,
                release: &release,
                replace,
            };
            let next = match tokio::time::timeout(self.renew_every(), self.store.renew(renewal))
                .await
            {
                Ok(Ok(known)) => {
                    if !known && !replace {
                        // The node was declared lapsed and forgotten: its set starts over.
                        tracing::warn!(
                            "mcp-tasks: this node's worker lease had lapsed; renewing it with every task it runs"
                        );
                        replace = true;
                        continue;
                    }
                    replace = false;
                    self.renew_every()
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "mcp-tasks: could not renew this node's worker lease; retrying");
                    replace = true;
                    RETRY_MIN.max(self.renew_every() / 10)
                }
                Err(_) => {
                    tracing::warn!(
                        "mcp-tasks: renewing this node's worker lease timed out; retrying"
                    );
                    replace = true;
                    RETRY_MIN.max(self.renew_every() / 10)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = poked => tokio::time::sleep(GATHER).await,
            }
        }
    }

    /// Fails the unfinished tasks of lapsed nodes, on a timer, until the layer is
    /// gone.
    async fn sweep(&self, engine: Weak<Engine>) {
        let mut timer = tokio::time::interval(self.sweep_every());
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            timer.tick().await;
            let Some(engine) = engine.upgrade() else {
                return;
            };
            self.sweep_once(&engine).await;
        }
    }

    /// One sweep: every lapsed node but this one has its unfinished tasks failed,
    /// then is forgotten. Returns how many tasks it failed.
    pub(crate) async fn sweep_once(&self, engine: &Engine) -> usize {
        let lapsed = match tokio::time::timeout(self.sweep_every(), self.store.lapsed()).await {
            Ok(Ok(lapsed)) => lapsed,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "mcp-tasks: could not read lapsed worker leases");
                return 0;
            }
            Err(_) => {
                tracing::warn!("mcp-tasks: reading lapsed worker leases timed out");
                return 0;
            }
        };
        let mut failed = 0;
        for node in lapsed {
            if node.node == self.node {
                // This node is alive: its own lease lapsed during an outage, and the
                // keeper renews it once the store answers.
                continue;
            }
            let mut complete = true;
            for id in &node.tasks {
                match fail_lost(engine, id).await {
                    Ok(true) => failed += 1,
                    Ok(false) => {}
                    Err(()) => complete = false,
                }
            }
            if complete && let Err(e) = self.store.forget(&node.node).await {
                tracing::warn!(error = %e, "mcp-tasks: could not remove a lapsed worker lease");
            }
            tracing::warn!(
                node = %node.node,
                held = node.tasks.len(),
                "mcp-tasks: a node stopped renewing its worker lease; its unfinished tasks are failed"
            );
        }
        failed
    }
}

/// Fails `id` as lost; `Ok(true)` when this changed it (`Ok(false)`: it had ended or
/// is gone), `Err` when the store failed, so the node's lease is kept for the next
/// sweep.
async fn fail_lost(engine: &Engine, id: &TaskId) -> Result<bool, ()> {
    let fail = Transition::Fail {
        error: ErrorObject::new(RpcError::INTERNAL_ERROR, WORKER_LOST),
        message: Some(WORKER_LOST.to_owned()),
    };
    match engine.update(id, Scope::Any, &fail).await {
        Ok(updated) => Ok(updated.is_some_and(|u| u.changed())),
        Err(e) => {
            tracing::warn!(error = %e, "mcp-tasks: could not fail a task whose worker was lost");
            Err(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::{GATHER, WORKER_LOST};
    use crate::TaskStore;
    use crate::error::StoreError;
    use crate::layer::TasksLayer;
    use crate::store::NodeId;
    use crate::store::{
        BoxFuture, CreateLimits, LapsedNode, LeaseStore, MemoryLeases, MemoryStore, Renewal,
    };
    use crate::task::{Scope, TaskEnd, TaskId, TaskRecord, TaskStatus, Timestamp};
    use crate::wire::RpcError;

    const BOUND: Duration = Duration::from_secs(1);

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
        drop(
            layer
                .engine
                ._lease_stop
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
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
        a.engine.register_work(running);
        a.handle().hold(held);
        a.handle().hold(released);
        a.handle().release(&released);
        a.engine.register_work(finished);
        a.handle()
            .complete(&finished, serde_json::json!({"content": []}))
            .await
            .expect("completed");

        // Alive, node a renews: nothing of its work is failed however long it runs.
        tokio::time::sleep(BOUND * 5).await;
        assert_eq!(stored(&store, &running).await.status, TaskStatus::Working);
        assert_eq!(stored(&store, &held).await.status, TaskStatus::Working);

        crash(&a);
        let crashed = tokio::time::Instant::now();
        let survivor = b.handle();
        let ends = async {
            (
                survivor.cancelled(&running).await,
                survivor.cancelled(&held).await,
            )
        };
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
        assert_eq!(lost.status_message.as_deref(), Some(WORKER_LOST));
        // What it no longer held, or had finished, is left as it was.
        assert_eq!(stored(&store, &released).await.status, TaskStatus::Working);
        assert_eq!(
            stored(&store, &finished).await.status,
            TaskStatus::Completed
        );
        // The lapsed node is forgotten once its tasks are failed.
        tokio::time::sleep(BOUND).await;
        assert!(leases.lapsed().await.expect("read").is_empty());
    }

    /// Leases that fail every renewal while `down` is set.
    #[derive(Debug, Clone, Default)]
    struct Outage {
        inner: MemoryLeases,
        down: Arc<AtomicBool>,
    }

    impl LeaseStore for Outage {
        fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
            if self.down.load(Ordering::Acquire) {
                return Box::pin(std::future::ready(Err(StoreError::backend(
                    std::io::Error::other("store unreachable"),
                ))));
            }
            self.inner.renew(renewal)
        }

        fn lapsed(&self) -> BoxFuture<'_, Result<Vec<LapsedNode>, StoreError>> {
            self.inner.lapsed()
        }

        fn forget<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), StoreError>> {
            self.inner.forget(node)
        }
    }

    /// A node over [`Outage`] leases running one task, after its first renewals.
    async fn one_node_at_work() -> (Arc<MemoryStore>, Outage, TasksLayer, TaskId) {
        let store = Arc::new(MemoryStore::new());
        let leases = Outage::default();
        let a = node(&store, leases.clone());
        let running = working_task(&store).await;
        a.engine.register_work(running);
        tokio::time::sleep(BOUND).await;
        (store, leases, a, running)
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_never_fails_its_own_work_when_its_lease_lapsed_in_an_outage() {
        let (store, leases, _node, running) = one_node_at_work().await;

        leases.down.store(true, Ordering::Release);
        tokio::time::sleep(BOUND * 3).await;
        let lapsed = leases.inner.lapsed().await.expect("read");
        assert_eq!(lapsed.len(), 1, "the lease lapsed during the outage");
        assert_eq!(lapsed[0].tasks, vec![running]);
        assert_eq!(stored(&store, &running).await.status, TaskStatus::Working);

        leases.down.store(false, Ordering::Release);
        tokio::time::sleep(BOUND).await;
        assert!(
            leases.inner.lapsed().await.expect("read").is_empty(),
            "renewed"
        );
        assert_eq!(stored(&store, &running).await.status, TaskStatus::Working);
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_forgotten_while_alive_renews_with_every_task_it_runs() {
        let (_, leases, a, running) = one_node_at_work().await;

        // Cut off long enough for another node to declare it lost and forget it,
        // then back.
        leases.down.store(true, Ordering::Release);
        tokio::time::sleep(BOUND * 2).await;
        let lapsed = leases.inner.lapsed().await.expect("read");
        leases
            .inner
            .forget(&lapsed[0].node)
            .await
            .expect("forgotten");
        leases.down.store(false, Ordering::Release);
        tokio::time::sleep(BOUND).await;

        // Back, it holds its whole set again: were it to stop now, a survivor
        // would find its task.
        crash(&a);
        tokio::time::sleep(BOUND * 2).await;
        let lapsed = leases.inner.lapsed().await.expect("read");
        assert_eq!(lapsed.len(), 1);
        assert_eq!(lapsed[0].tasks, vec![running]);
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
        a.engine.register_work(ended);
        a.engine.register_work(twice);
        a.handle().hold(twice);
        a.handle().hold(explicit);
        tokio::time::sleep(BOUND).await;

        // The work on `ended` stops; `twice` loses its work but keeps its hold.
        a.engine.forget_work(&ended);
        a.engine.forget_work(&twice);
        tokio::time::sleep(BOUND).await;
        crash(&a);
        tokio::time::sleep(BOUND * 2).await;
        let lapsed = leases.lapsed().await.expect("read");
        let mut held = lapsed[0].tasks.clone();
        held.sort_unstable();
        let mut expected = vec![twice, explicit];
        expected.sort_unstable();
        assert_eq!(held, expected);
    }

    #[test]
    fn a_lease_shorter_than_the_least_is_refused() {
        let refused = TasksLayer::builder(MemoryStore::new())
            .with_worker_lease(Duration::from_millis(10))
            .build();
        assert_eq!(
            refused.unwrap_err(),
            crate::ConfigError::TooSmall("worker lease")
        );
    }
}
