//! Shutting a node's tasks down: [`TasksLayer::drain`] and [`TasksLayer::is_draining`].

use std::time::Duration;

use super::TasksLayer;
use crate::engine::Interrupted;

impl TasksLayer {
    /// Shuts this node's tasks down gracefully, for a deploy, a SIGTERM or a Ctrl-C:
    /// from now on no call becomes a task; the work running here (under a
    /// [`TaskHandle`](crate::worker::TaskHandle) or an `Auto` runner) gets up to
    /// `grace` to finish; what is left then fails with -32603 "Server shut down
    /// before the task finished" and `error.data` `{"reason": "shutting_down",
    /// "retryable": true}` (the tool never finished, so the client may call it
    /// again, on another node); and every listen stream ends with the listen
    /// request's result. Returns how many tasks it failed. `tasks/get`, `update` and
    /// `cancel` keep working throughout.
    ///
    /// On a store shared between nodes, the drain then gives this node's worker
    /// lease up ([`LeaseStore::release`](crate::store::LeaseStore::release)), so
    /// that the other nodes have nothing to claim and log nothing about it; it waits
    /// for that at most half the worker lease (10 s by default), only when the store
    /// is slow to answer. A node that still holds an unfinished task
    /// ([`Tasks::hold`](crate::worker::Tasks::hold): a drain neither waits for it nor
    /// fails it) keeps its lease until that task ends, so that, should it exit
    /// first, the other nodes fail the task as lost.
    ///
    /// **Sizing `grace`.** Make it as long as the longest tool call you want to see
    /// finish, and keep it below the time the orchestrator gives the process
    /// between SIGTERM and SIGKILL (Kubernetes' `terminationGracePeriodSeconds`,
    /// 30 s by default; `docker stop -t`), which must exceed the grace plus the
    /// readiness delay before the drain (see [`is_draining`](Self::is_draining)),
    /// the lease release and the HTTP server's own shutdown. A process killed
    /// mid-drain fails nothing itself: on a shared store the other nodes fail its
    /// unfinished tasks later, as lost. Work that can outlast a deploy (minutes,
    /// hours) does not belong to a process that deploys replace: hand it to a
    /// durable job queue (the feature `queue` has one, `mcp_tasks::queue`), whose
    /// workers report on the task ([`Tasks`](crate::worker::Tasks)); a drain fails
    /// none of those tasks.
    ///
    /// Calls that arrive while it drains:
    ///
    /// - a `Required` (or `AutoRequired`) tool called with the extension is refused
    ///   with HTTP 503, `Retry-After: 1` and -32603 "Server is shutting down" with
    ///   `error.data` `{"retryable": true, "reason": "shutting_down"}`: the call never
    ///   ran, so a proxy, a load balancer or the client may send it again, to another
    ///   node;
    /// - an `Optional` tool runs synchronously: its handler's `TaskContext` refuses
    ///   with [`TaskRefused::ShuttingDown`](crate::TaskRefused::ShuttingDown), and the
    ///   client gets the tool's own result;
    /// - an `Auto` tool answers synchronously, however long it takes.
    ///
    /// Each of them counts in `mcp_tasks_refused_total{reason="shutting_down"}`
    /// (feature `metrics`). A load balancer should stop sending calls before the
    /// drain begins: see [`is_draining`](Self::is_draining).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let layer = TasksLayer::new(MemoryStore::new());
    /// // e.g. on SIGTERM, before the HTTP server stops:
    /// assert_eq!(layer.drain(Duration::from_secs(10)).await, 0); // nothing was running
    /// # }
    /// ```
    pub async fn drain(&self, grace: Duration) -> usize {
        let engine = &self.engine;
        engine.node().start_draining();
        tracing::info!(
            grace_ms = grace.as_millis() as u64,
            "mcp-tasks: draining: no call becomes a task from now on; running work has the grace period to finish"
        );
        let left = engine
            .node()
            .wait_idle(tokio::time::Instant::now() + grace)
            .await;
        let mut failed = 0;
        for id in &left {
            match engine.fail_interrupted(id, Interrupted::ShuttingDown).await {
                Ok(true) => failed += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(error = %crate::error::Chain(&e), "drain: could not fail a running task")
                }
            }
            engine.node().abort_runner(id);
        }
        if failed > 0 {
            tracing::warn!(
                failed,
                "drain: tasks still running after the grace period were failed"
            );
        }
        engine.listen().end_all();
        engine.node().end_drain().await;
        failed
    }

    /// Whether [`drain`](Self::drain) has begun on this layer: from then on no call
    /// becomes a task, and a `Required` tool is refused with HTTP 503.
    ///
    /// A load balancer sends a node calls until its readiness probe fails. For a
    /// deploy without refused calls, turn readiness off first, wait until the
    /// balancer has noticed (its probe period times its failure threshold), and only
    /// then drain; the probe also fails once a drain has begun, whoever started it:
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// /// The readiness probe: 200 while this node should get new calls.
    /// fn readiness(stopping: &AtomicBool, layer: &TasksLayer) -> StatusCode {
    ///     if stopping.load(Ordering::Acquire) || layer.is_draining() {
    ///         StatusCode::SERVICE_UNAVAILABLE
    ///     } else {
    ///         StatusCode::OK
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let layer = TasksLayer::new(MemoryStore::new());
    /// let stopping = AtomicBool::new(false);
    /// assert_eq!(readiness(&stopping, &layer), StatusCode::OK);
    /// // On SIGTERM: readiness off, and time for the balancer to see it…
    /// stopping.store(true, Ordering::Release);
    /// assert_eq!(readiness(&stopping, &layer), StatusCode::SERVICE_UNAVAILABLE);
    /// tokio::time::sleep(Duration::from_secs(10)).await;
    /// // …then the drain, then the HTTP server's graceful shutdown.
    /// assert!(!layer.is_draining());
    /// layer.drain(Duration::from_secs(30)).await;
    /// assert!(layer.is_draining());
    /// # }
    /// ```
    pub fn is_draining(&self) -> bool {
        self.engine.node().is_draining()
    }
}
