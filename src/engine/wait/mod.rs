//! Waiting on a task: the futures a worker awaits for its answers or its end, in
//! this file, and the wake-ups they park on (`wakes.rs`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::{Map, Value};

use super::{Engine, RETRY};
use crate::backoff::Backoff;
use crate::error::{StoreError, TaskError};
use crate::store::BoxFuture;
use crate::task::{Scope, TaskEnd, TaskId, TaskRecord, TaskStatus, Timestamp};

mod wakes;

pub(crate) use wakes::Waits;

impl Engine {
    /// Waits until `id` has no outstanding input request and returns every answer
    /// collected so far. Wakes on the change itself (a write in this process, or one
    /// relayed from another node), never by polling. Store errors are retried with a
    /// bounded backoff, so a store outage delays the answer but never ends the wait.
    pub(crate) async fn wait_for_answers(
        &self,
        id: &TaskId,
    ) -> Result<Map<String, Value>, TaskError> {
        self.wait_retrying(id, |task| match task {
            None => Some(Err(TaskError::NotFound)),
            Some(task) if task.status.is_terminal() => Some(Err(TaskError::Refused(
                crate::error::TransitionError::Terminal,
            ))),
            Some(task) if task.status != TaskStatus::InputRequired => {
                Some(Ok(task.input_responses.clone()))
            }
            Some(_) => None,
        })
        .await
    }

    /// [`wait_until`](Self::wait_until) through store failures: each is told to the
    /// layer's outage log and retried with a bounded backoff, so an outage delays
    /// the answer but never ends the wait.
    pub(crate) async fn wait_retrying<R, F>(&self, id: &TaskId, mut ready: F) -> R
    where
        F: FnMut(Option<&TaskRecord>) -> Option<R> + Unpin,
    {
        let mut backoff = RETRY;
        loop {
            match self.wait_until(id, &mut ready).await {
                Ok(answer) => return answer,
                Err(e) => {
                    self.node.waits.reads.failed(&e);
                    backoff.wait().await;
                }
            }
        }
    }

    /// Waits until the task no longer needs its worker: cancelled, ended some other
    /// way, or gone (expired or removed). Store errors are retried with a bounded
    /// backoff, so an outage never reads as an end.
    pub(crate) fn wait_for_end<'a>(&'a self, id: &'a TaskId) -> Ended<'a> {
        Ended {
            wait: self.wait_until(id, end_of),
            backoff: None,
            retry: RETRY,
            settles: None,
        }
    }

    /// Re-reads `id` each time it may have changed (a change in this process or one
    /// relayed from another node, or its expiry) until `ready` gives an answer;
    /// `ready` sees `None` once the task is gone.
    fn wait_until<'a, R, F>(&'a self, id: &'a TaskId, ready: F) -> WaitUntil<'a, F>
    where
        F: FnMut(Option<&TaskRecord>) -> Option<R> + Unpin,
    {
        WaitUntil {
            engine: self,
            id,
            ready,
            seen: 0,
            state: WaitState::Start,
        }
    }
}

/// The future of [`Engine::wait_until`], written by hand so that a parked wait is a
/// few words: the engine, the id, the wake count it saw and, while it reads, the
/// boxed read. Its registration with the engine's waits ends when it is dropped.
struct WaitUntil<'a, F> {
    engine: &'a Engine,
    id: &'a TaskId,
    ready: F,
    seen: u32,
    state: WaitState<'a>,
}

enum WaitState<'a> {
    Start,
    Reading(BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>),
    Waiting,
    Done,
}

impl<'a, R, F> Future for WaitUntil<'a, F>
where
    F: FnMut(Option<&TaskRecord>) -> Option<R> + Unpin,
{
    type Output = Result<R, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let engine = this.engine;
        let id = this.id;
        loop {
            match &mut this.state {
                WaitState::Start => {
                    // Counted before the first read, so a change during it is seen.
                    this.seen = engine.node.waits.watch(id);
                    this.state = WaitState::Reading(read(engine, id));
                }
                WaitState::Reading(reading) => {
                    let task = match reading.as_mut().poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => {
                            this.finish();
                            return Poll::Ready(Err(e));
                        }
                        Poll::Ready(Ok(task)) => {
                            engine.node.waits.reads.succeeded();
                            task
                        }
                    };
                    if let Some(task) = &task {
                        engine.node.stop_runner(task);
                    }
                    if let Some(answer) = (this.ready)(task.as_ref()) {
                        this.finish();
                        return Poll::Ready(Ok(answer));
                    }
                    // Expiry changes nothing in the store, so no write would wake the
                    // wait: the waits' timer does, and the next read finds it gone.
                    if let Some(at) = task.and_then(|t| t.expires_at()) {
                        // A store deciding expiry by its own clock may keep a task this
                        // node's clock says has expired: look again in a while, not
                        // at once and again and again.
                        let now = Timestamp::now();
                        let at = if at <= now {
                            now.plus_ms(EXPIRY_RECHECK_MS)
                        } else {
                            at
                        };
                        engine.node.waits.wake_at_expiry(id, at);
                    }
                    this.state = WaitState::Waiting;
                }
                WaitState::Waiting => match engine.node.waits.poll_changed(id, this.seen, cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(wakes) => {
                        this.seen = wakes;
                        this.state = WaitState::Reading(read(engine, id));
                    }
                },
                WaitState::Done => panic!("a wait polled after it finished"),
            }
        }
    }
}

impl<F> WaitUntil<'_, F> {
    /// Starts over after it finished (a retry after a store error).
    fn restart(&mut self) {
        self.state = WaitState::Start;
    }

    fn finish(&mut self) {
        self.state = WaitState::Done;
        self.engine.node.waits.unwatch(self.id);
    }
}

impl<F> Drop for WaitUntil<'_, F> {
    fn drop(&mut self) {
        if matches!(self.state, WaitState::Reading(_) | WaitState::Waiting) {
            self.engine.node.waits.unwatch(self.id);
        }
    }
}

/// The test of [`end_of`], as a field type.
type EndOf = fn(Option<&TaskRecord>) -> Option<TaskEnd>;

/// Why a waiting worker's task no longer needs it, or `None` while it does.
fn end_of(task: Option<&TaskRecord>) -> Option<TaskEnd> {
    match task {
        None => Some(TaskEnd::Gone),
        Some(task) if task.cancel_requested => Some(TaskEnd::Cancelled),
        Some(task) => match task.status {
            TaskStatus::Cancelled => Some(TaskEnd::Cancelled),
            TaskStatus::Completed => Some(TaskEnd::Completed),
            TaskStatus::Failed => Some(TaskEnd::Failed),
            TaskStatus::Working | TaskStatus::InputRequired => None,
        },
    }
}

/// How long a wait leaves a task that the store still holds past its expiry (by
/// this node's clock) before it reads it again.
const EXPIRY_RECHECK_MS: u64 = 200;

/// The future of [`Tasks::ended`](crate::worker::Tasks::ended) and
/// [`TaskHandle::ended`](crate::worker::TaskHandle::ended): resolves to
/// why the task no longer needs its worker.
///
/// It holds no record and no timer while it waits, only its registration with the
/// layer, so a parked worker costs little more than its own task. Dropping it ends
/// the registration.
///
/// ```
/// # use std::sync::Arc;
/// # use mcp_tasks::store::{CreateLimits, TaskStore, Timestamp};
/// # use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let store = Arc::new(MemoryStore::new());
/// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.tasks();
/// # let id = TaskId::random();
/// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
/// use mcp_tasks::worker::{Ended, TaskEnd};
///
/// let end: Ended<'_> = tasks.ended(&id);
/// tasks.complete(&id, serde_json::json!({"content": []})).await?;
/// // Any end resolves it, not only a cancel; `TaskEnd` says which.
/// assert_eq!(end.await, TaskEnd::Completed);
/// # Ok(())
/// # }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct Ended<'a> {
    wait: WaitUntil<'a, EndOf>,
    backoff: Option<Pin<Box<tokio::time::Sleep>>>,
    retry: Backoff,
    settles: Option<&'a std::sync::atomic::AtomicBool>,
}

impl<'a> Ended<'a> {
    /// Also marks `settled` once the wait ends (a task handle's own flag).
    pub(crate) fn settling(mut self, settled: &'a std::sync::atomic::AtomicBool) -> Self {
        self.settles = Some(settled);
        self
    }
}

impl Future for Ended<'_> {
    type Output = TaskEnd;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<TaskEnd> {
        let this = self.get_mut();
        loop {
            if let Some(backoff) = &mut this.backoff {
                if backoff.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.backoff = None;
                this.wait.restart();
            }
            match Pin::new(&mut this.wait).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(end)) => {
                    if let Some(settled) = this.settles {
                        settled.store(true, std::sync::atomic::Ordering::Release);
                    }
                    return Poll::Ready(end);
                }
                Poll::Ready(Err(e)) => {
                    this.wait.engine.node.waits.reads.failed(&e);
                    let delay = this.retry.next_delay();
                    this.backoff = Some(Box::pin(tokio::time::sleep(delay)));
                }
            }
        }
    }
}

impl std::fmt::Debug for Ended<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ended").finish_non_exhaustive()
    }
}

/// One read of a waited-on task, boxed: brief, while the wait is long. A store that
/// must go out for it is read by at most [`READ_SLOTS`](wakes::READ_SLOTS) waiters
/// at a time, so a burst of wake-ups (after missed changes, every waiter at once)
/// reaches the store as a bounded queue, not as one read per waiter at the same
/// moment.
fn read<'a>(
    engine: &'a Engine,
    id: &'a TaskId,
) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
    let slots = &engine.node.waits.read_slots;
    Box::pin(
        engine
            .store
            .get_in_turn(id, Scope::Any, Timestamp::now(), slots),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::EXPIRY_RECHECK_MS;
    use crate::error::TaskError;
    use crate::layer::TasksLayer;
    use crate::store::{CreateLimits, MemoryStore};
    use crate::task::{Scope, TaskId, TaskRecord, Timestamp, Transition};

    fn waiting_count(layer: &TasksLayer) -> usize {
        layer.engine.node.waits.len()
    }

    /// A stored task, `input_required` with one question, living `ttl_ms`.
    async fn asking_task(layer: &TasksLayer, ttl_ms: Option<u64>) -> TaskId {
        let id = TaskId::random();
        let mut record = TaskRecord::new(id, None, Timestamp::now());
        record.ttl_ms = ttl_ms;
        layer
            .engine
            .store
            .create(record, CreateLimits::default())
            .await
            .unwrap();
        let ask = Transition::RequireInput {
            requests: [("k".to_string(), json!({"method": "roots/list"}))]
                .into_iter()
                .collect(),
            message: None,
        };
        layer.tasks().apply(&id, ask).await.unwrap();
        id
    }

    /// A store whose clock runs ten minutes behind this node's: it decides expiry
    /// itself, as PostgreSQL and Redis do. Counts its reads.
    #[derive(Debug, Default)]
    struct Behind {
        inner: MemoryStore,
        reads: std::sync::atomic::AtomicUsize,
    }

    const BEHIND_MS: u64 = 600_000;

    impl crate::store::TaskStore for Behind {
        fn create<'a>(
            &'a self,
            record: TaskRecord,
            limits: CreateLimits,
        ) -> crate::store::BoxFuture<'a, Result<(), crate::error::StoreError>> {
            self.inner.create(record, limits)
        }

        fn get<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            now: Timestamp,
        ) -> crate::store::BoxFuture<'a, Result<Option<TaskRecord>, crate::error::StoreError>>
        {
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.get(id, scope, now.minus_ms(BEHIND_MS))
        }

        fn update<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            transition: &'a Transition,
            now: Timestamp,
        ) -> crate::store::BoxFuture<
            'a,
            Result<Option<crate::store::Updated>, crate::error::StoreError>,
        > {
            self.inner
                .update(id, scope, transition, now.minus_ms(BEHIND_MS))
        }

        fn cleanup<'a>(
            &'a self,
            now: Timestamp,
            retention: Duration,
        ) -> crate::store::BoxFuture<'a, Result<usize, crate::error::StoreError>> {
            self.inner.cleanup(now.minus_ms(BEHIND_MS), retention)
        }
    }

    #[tokio::test]
    async fn a_wait_on_a_task_the_store_keeps_past_its_expiry_reads_it_seldom() {
        let store = std::sync::Arc::new(Behind::default());
        let layer = TasksLayer::builder(store.clone())
            .without_janitor()
            .build()
            .unwrap();
        let id = asking_task(&layer, Some(20)).await;
        // By this node's clock the task expires at once; by the store's, in ten
        // minutes. The wait must neither end nor spin on reads meanwhile.
        let window = Duration::from_millis(600);
        let waited = tokio::time::timeout(window, layer.engine.wait_for_answers(&id)).await;
        assert!(waited.is_err(), "the store still holds the task");
        let reads = store.reads.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            reads <= 2 + (window.as_millis() as usize) / EXPIRY_RECHECK_MS as usize,
            "{reads} reads in {window:?}"
        );
    }

    #[tokio::test]
    async fn a_wait_dropped_midway_leaves_no_registration() {
        let layer = TasksLayer::builder(MemoryStore::new())
            .without_janitor()
            .build()
            .unwrap();
        let id = asking_task(&layer, None).await;
        let waited = tokio::time::timeout(
            Duration::from_millis(20),
            layer.engine.wait_for_answers(&id),
        )
        .await;
        assert!(waited.is_err(), "nobody answered, so the wait times out");
        assert_eq!(waiting_count(&layer), 0);
    }

    #[tokio::test]
    async fn a_wait_ends_when_its_task_expires_unanswered() {
        let layer = TasksLayer::builder(MemoryStore::new())
            .without_janitor()
            .build()
            .unwrap();
        let id = asking_task(&layer, Some(200)).await;
        let waited =
            tokio::time::timeout(Duration::from_secs(10), layer.engine.wait_for_answers(&id))
                .await
                .expect("the wait ends at the task's expiry, not never");
        assert!(matches!(waited, Err(TaskError::NotFound)));
        assert_eq!(waiting_count(&layer), 0);
    }

    #[tokio::test]
    async fn waking_everyone_makes_waiters_re_read_their_task() {
        let layer = TasksLayer::builder(MemoryStore::new())
            .without_janitor()
            .build()
            .unwrap();
        let id = asking_task(&layer, None).await;
        let engine = layer.engine.clone();
        let waiter = tokio::spawn(async move { engine.wait_for_answers(&id).await });
        while waiting_count(&layer) == 0 {
            tokio::task::yield_now().await;
        }
        // A write the layer never saw (as when a change feed lagged).
        let cancel = Transition::Cancel;
        layer
            .engine
            .store
            .update(&id, Scope::Any, &cancel, Timestamp::now())
            .await
            .unwrap();
        layer.engine.wake_all();
        let outcome = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter wakes")
            .unwrap();
        assert!(outcome.is_err_and(|e| e.is_terminal()));
        assert_eq!(waiting_count(&layer), 0);
    }

    #[tokio::test]
    async fn a_parked_wait_keeps_no_copy_of_the_record() {
        // A worker parked on `ended()` holds this future for the task's whole
        // life; a record (over 300 bytes) kept in it would show here.
        let layer = TasksLayer::new(MemoryStore::new());
        let id = TaskId::random();
        let wait = layer.engine.wait_for_end(&id);
        assert!(
            std::mem::size_of_val(&wait) < std::mem::size_of::<TaskRecord>() + 128,
            "{} bytes",
            std::mem::size_of_val(&wait)
        );
    }
}
