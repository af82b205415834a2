//! The janitor: evicts expired tasks on a timer.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::TaskStore;
use crate::error::StoreError;
use crate::task::Timestamp;

/// Sweeps a store for expired tasks every `interval`.
///
/// A record expires `ttl` after creation; a record without a TTL is evicted once it
/// has been terminal for longer than `retention`. Expired records already read as
/// absent; the janitor frees their space. Between sweeps it sleeps (no idle CPU). A
/// failed sweep is logged and retried at the next tick. Each sweep emits a `tracing`
/// event with the number of records removed.
///
/// [`TasksLayer`](crate::TasksLayer) starts one by default (every
/// [`JANITOR_INTERVAL`](crate::defaults::JANITOR_INTERVAL), 60 s, keeping terminal
/// tasks without a TTL for [`RETENTION`](crate::defaults::RETENTION), 1 hour); build
/// your own with [`Janitor::new`], or take the layer's settings with
/// [`TasksLayer::janitor`](crate::TasksLayer::janitor), to run it under your own
/// supervision.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use mcp_tasks::store::{CreateLimits, Janitor, Timestamp};
/// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
/// use mcp_tasks::store::TaskStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
/// let store = Arc::new(MemoryStore::new());
/// let mut short_lived = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(0));
/// short_lived.ttl_ms = Some(1); // expired long ago
/// store.create(short_lived, CreateLimits::default()).await?;
///
/// let janitor = Janitor::new(store.clone(), Duration::from_secs(60), Duration::from_secs(3600));
/// assert_eq!(janitor.sweep().await?, 1);
/// assert!(store.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Janitor {
    store: Arc<dyn TaskStore>,
    interval: Duration,
    retention: Duration,
}

impl Janitor {
    /// A janitor for `store` that sweeps every `interval` (the layer's default is 60 s)
    /// and evicts terminal tasks without a TTL once they are older than `retention`
    /// (the layer's default is 1 hour).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mcp_tasks::store::Janitor;
    /// use mcp_tasks::{MemoryStore, defaults};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let janitor = Janitor::new(store, defaults::JANITOR_INTERVAL, defaults::RETENTION);
    /// # drop(janitor);
    /// ```
    pub fn new(store: Arc<dyn TaskStore>, interval: Duration, retention: Duration) -> Self {
        Janitor {
            store,
            interval,
            retention,
        }
    }

    /// One sweep now; returns how many records were removed.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mcp_tasks::store::Janitor;
    /// use mcp_tasks::{MemoryStore, defaults};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let janitor = Janitor::new(Arc::new(MemoryStore::new()), defaults::JANITOR_INTERVAL, defaults::RETENTION);
    /// assert_eq!(janitor.sweep().await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        let removed = self.store.cleanup(Timestamp::now(), self.retention).await?;
        crate::observe::janitor_swept(removed);
        tracing::debug!(removed, "mcp-tasks janitor sweep");
        Ok(removed)
    }

    /// Sweeps every `interval` until `shutdown` resolves. The first sweep comes one
    /// interval after the start.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mcp_tasks::store::Janitor;
    /// use mcp_tasks::{MemoryStore, defaults};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let janitor = Janitor::new(Arc::new(MemoryStore::new()), defaults::JANITOR_INTERVAL, defaults::RETENTION);
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let running = tokio::spawn(janitor.run(async { let _ = stopped.await; }));
    /// // … at shutdown:
    /// stop.send(()).unwrap();
    /// running.await.unwrap();
    /// # }
    /// ```
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = ticker.tick() => {
                    // A sweep the store never answers is given up at the next tick.
                    match tokio::time::timeout(self.interval, self.sweep()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(error = %crate::error::Chain(&e), "mcp-tasks janitor sweep failed; retrying at the next tick");
                        }
                        Err(_) => tracing::warn!("mcp-tasks janitor sweep timed out; retrying at the next tick"),
                    }
                }
            }
        }
    }

    /// Runs on the current tokio runtime until the returned handle is aborted.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as [`tokio::spawn`] does.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use mcp_tasks::store::Janitor;
    /// use mcp_tasks::{MemoryStore, defaults};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let janitor = Janitor::new(Arc::new(MemoryStore::new()), defaults::JANITOR_INTERVAL, defaults::RETENTION);
    /// let handle = janitor.spawn();
    /// handle.abort();
    /// # }
    /// ```
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(std::future::pending()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::RETENTION;
    use crate::store::{BoxFuture, CreateLimits, MemoryStore, Updated};
    use crate::task::{Scope, TaskId, TaskRecord, Transition};

    #[derive(Debug)]
    struct Failing;

    impl TaskStore for Failing {
        fn create<'a>(
            &'a self,
            _: TaskRecord,
            _: CreateLimits,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async { Ok(()) })
        }
        fn get<'a>(
            &'a self,
            _: &'a TaskId,
            _: Scope<'a>,
            _: Timestamp,
        ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
            Box::pin(async { Ok(None) })
        }
        fn update<'a>(
            &'a self,
            _: &'a TaskId,
            _: Scope<'a>,
            _: &'a Transition,
            _: Timestamp,
        ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
            Box::pin(async { Ok(None) })
        }
        fn cleanup<'a>(
            &'a self,
            _: Timestamp,
            _: Duration,
        ) -> BoxFuture<'a, Result<usize, StoreError>> {
            Box::pin(async { Err(StoreError::Backend("down".into())) })
        }
    }

    /// A store whose cleanup never answers, counting the calls.
    #[derive(Debug, Default)]
    struct Hanging(std::sync::atomic::AtomicUsize);

    impl TaskStore for Hanging {
        fn create<'a>(
            &'a self,
            r: TaskRecord,
            l: CreateLimits,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Failing.create(r, l)
        }
        fn get<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            now: Timestamp,
        ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
            Failing.get(id, scope, now)
        }
        fn update<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            t: &'a Transition,
            now: Timestamp,
        ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
            Failing.update(id, scope, t, now)
        }
        fn cleanup<'a>(
            &'a self,
            _: Timestamp,
            _: Duration,
        ) -> BoxFuture<'a, Result<usize, StoreError>> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_sweep_the_store_never_answers_is_given_up_at_the_next_tick() {
        let store = Arc::new(Hanging::default());
        let janitor = Janitor::new(store.clone(), Duration::from_secs(1), RETENTION);
        let handle = tokio::spawn(janitor.run(std::future::pending()));
        tokio::time::sleep(Duration::from_millis(4_500)).await;
        assert!(store.0.load(std::sync::atomic::Ordering::SeqCst) >= 3);
        handle.abort();
    }

    #[tokio::test]
    async fn sweep_removes_expired_records() {
        let store = Arc::new(MemoryStore::new());
        let mut record = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(1));
        record.ttl_ms = Some(1);
        store.create(record, CreateLimits::default()).await.unwrap();
        let janitor = Janitor::new(store.clone(), Duration::from_secs(1), RETENTION);
        assert_eq!(janitor.sweep().await.unwrap(), 1);
        assert!(store.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_sweep_does_not_stop_the_janitor() {
        let janitor = Janitor::new(Arc::new(Failing), Duration::from_secs(1), RETENTION);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(janitor.run(async {
            let _ = stopped.await;
        }));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!handle.is_finished());
        stop.send(()).unwrap();
        handle.await.unwrap();
    }
}
