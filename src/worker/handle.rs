//! [`TaskHandle`]: one task's own handle, and the guarantee that fails its task
//! once the last clone is dropped with the task still running.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::{Ended, TaskEnd, Tasks, fail_abandoned};
use crate::error::TaskError;
use crate::input::{InputRequests, InputResponses};
use crate::task::{ErrorObject, TaskId, TaskRecord};

/// One task's own handle, given to the work of
/// [`TaskSpec::with_work`](crate::TaskSpec::with_work): the [`Tasks`] calls without
/// the id, plus a guarantee. Clones share the task; once the last one is dropped
/// with the task still running (the work returned without ending it, panicked, or
/// was dropped), the task fails at once with -32603 "Task worker stopped before
/// finishing the task" instead of waiting out its TTL.
/// [`detach`](Self::detach) hands the task over to other work instead.
///
/// ```
/// use mcp_tasks::input::{InputRequest, InputRequests};
/// use mcp_tasks::worker::TaskHandle;
/// use serde_json::json;
///
/// async fn deploy(task: TaskHandle) -> Result<(), mcp_tasks::error::TaskError> {
///     task.progress("Planning").await?;
///     let question = InputRequests::new().with("go", InputRequest::confirm("Deploy?", "ok"));
///     if !task.ask(question).await?.confirmed("go", "ok") {
///         return task.complete(json!({"content": [{"type": "text", "text": "not deployed"}]})).await;
///     }
///     task.complete(json!({"content": [{"type": "text", "text": "deployed"}]})).await
/// }
/// let spec = mcp_tasks::TaskSpec::new().with_work(|task| async move {
///     let _ = deploy(task).await; // an error here leaves the task to the guarantee
/// });
/// # drop(spec);
/// ```
#[derive(Clone)]
pub struct TaskHandle {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    tasks: Tasks,
    id: TaskId,
    /// Set once nothing is left to fail: the task ended, is gone, or was detached.
    settled: AtomicBool,
    /// Status text waiting for the store, written by one writer at a time.
    progress: std::sync::Mutex<Progress>,
}

/// The status text of a handle's task on its way to the store: the newest text
/// wins, and a slow store never holds the work up for longer than
/// [`PROGRESS_WAIT`].
#[derive(Default)]
struct Progress {
    /// The newest text not written yet.
    pending: Option<String>,
    /// A writer is running.
    writing: bool,
    /// A refusal the writer met after its caller stopped waiting, for the next call.
    refused: Option<TaskError>,
}

/// How long [`TaskHandle::progress`] waits for its write before it lets the work go
/// on (the write goes on in the background).
const PROGRESS_WAIT: Duration = Duration::from_millis(100);

/// The pause before a progress write that met a store error is tried again.
const PROGRESS_RETRY: Duration = Duration::from_millis(200);

impl TaskHandle {
    pub(super) fn new(tasks: Tasks, id: TaskId) -> Self {
        TaskHandle {
            inner: Arc::new(HandleInner {
                tasks,
                id,
                settled: AtomicBool::new(false),
                progress: std::sync::Mutex::default(),
            }),
        }
    }

    fn settle(&self) {
        self.inner.settled.store(true, Ordering::Release);
    }

    /// Settles the handle when `outcome` shows the task ended (or is gone).
    fn observe<T>(&self, outcome: Result<T, TaskError>) -> Result<T, TaskError> {
        if let Err(e) = &outcome
            && (e.is_terminal() || matches!(e, TaskError::NotFound))
        {
            self.settle();
        }
        outcome
    }

    /// The task's id, for handing to clients or other workers (keep it out of logs).
    pub fn id(&self) -> TaskId {
        self.inner.id
    }

    /// The worker handle for every task, to drive other tasks or build on.
    pub fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }

    /// The task as stored: see [`Tasks::status`].
    pub async fn status(&self) -> Result<TaskRecord, TaskError> {
        let outcome = self.inner.tasks.status(&self.inner.id).await;
        self.observe(outcome)
    }

    /// [`Tasks::progress`] on this task, without holding the work up on a slow
    /// store: it waits at most 100 ms for the write, which then goes on in the
    /// background. Texts sent while a write is on its way are coalesced (the
    /// newest wins, and is written once the store answers; a store error is retried
    /// every 200 ms while the handle lives, never returned). A refusal (the task
    /// ended) is returned by this call, or by the next one when it came late.
    pub async fn progress(&self, message: impl Into<String>) -> Result<(), TaskError> {
        let written = {
            let mut progress = lock(&self.inner.progress);
            if let Some(refused) = progress.refused.take() {
                return self.observe(Err(refused));
            }
            progress.pending = Some(message.into());
            if progress.writing {
                return Ok(());
            }
            progress.writing = true;
            let (tell, written) = tokio::sync::oneshot::channel();
            tokio::spawn(write_progress(Arc::downgrade(&self.inner), tell));
            written
        };
        match tokio::time::timeout(PROGRESS_WAIT, written).await {
            Ok(Ok(outcome)) => self.observe(outcome),
            // Still on its way, or the handle is gone.
            _ => Ok(()),
        }
    }

    /// Finishes the task with its result: see [`Tasks::complete`]. Settles the
    /// guarantee: the handle no longer fails the task when dropped.
    pub async fn complete(&self, result: impl Serialize) -> Result<(), TaskError> {
        let outcome = self.inner.tasks.complete(&self.inner.id, result).await;
        if outcome.is_ok() {
            self.settle();
        }
        self.observe(outcome)
    }

    /// Finishes the task with a JSON-RPC error: see [`Tasks::fail`]. Settles the
    /// guarantee, as [`complete`](Self::complete) does.
    pub async fn fail(&self, error: impl Into<ErrorObject>) -> Result<(), TaskError> {
        let outcome = self.inner.tasks.fail(&self.inner.id, error).await;
        if outcome.is_ok() {
            self.settle();
        }
        self.observe(outcome)
    }

    /// Puts questions to the client: see [`Tasks::require_input`].
    pub async fn require_input(&self, requests: InputRequests) -> Result<(), TaskError> {
        let outcome = self
            .inner
            .tasks
            .require_input(&self.inner.id, requests)
            .await;
        self.observe(outcome)
    }

    /// Waits for every answer: see [`Tasks::wait_for_input`].
    pub async fn wait_for_input(&self) -> Result<InputResponses, TaskError> {
        let outcome = self.inner.tasks.wait_for_input(&self.inner.id).await;
        self.observe(outcome)
    }

    /// Puts the questions and waits for every answer: [`require_input`](Self::require_input)
    /// then [`wait_for_input`](Self::wait_for_input).
    pub async fn ask(&self, requests: InputRequests) -> Result<InputResponses, TaskError> {
        self.require_input(requests).await?;
        self.wait_for_input().await
    }

    /// Resolves once the task no longer needs its worker, with why: see
    /// [`Tasks::ended`]. Settles the guarantee once it resolves.
    pub fn ended(&self) -> Ended<'_> {
        self.inner
            .tasks
            .ended(&self.inner.id)
            .settling(&self.inner.settled)
    }

    /// Runs `work` until it finishes or the task ends: see [`Tasks::run_until_ended`].
    pub async fn run_until_ended<T>(&self, work: impl Future<Output = T>) -> Result<T, TaskEnd> {
        tokio::select! {
            biased;
            end = self.ended() => Err(end),
            done = work => Ok(done),
        }
    }

    /// Gives the task up without failing it: for work handed to something that
    /// outlives this handle (an external durable queue, another process), which then
    /// drives the task by its id through [`Tasks`]. Until that work ends the task,
    /// only its TTL bounds it.
    pub fn detach(self) -> TaskId {
        self.settle();
        self.inner.id
    }
}

impl fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskHandle")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

impl Drop for HandleInner {
    fn drop(&mut self) {
        let engine = self.tasks.engine.clone();
        engine.node().forget_work(&self.id);
        if *self.settled.get_mut() {
            return;
        }
        let id = self.id;
        let failed = async move {
            fail_abandoned(
                &engine,
                &id,
                "Task worker stopped before finishing the task",
            )
            .await
        };
        if !crate::spawn::spawn_if_runtime(failed) {
            tracing::warn!(
                "a task handle was dropped outside a runtime; its task is left to its TTL"
            );
        }
    }
}

fn lock(progress: &std::sync::Mutex<Progress>) -> std::sync::MutexGuard<'_, Progress> {
    progress.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes a handle's pending status text until none is left, telling the first
/// caller how its write went (if it still waits).
async fn write_progress(
    handle: std::sync::Weak<HandleInner>,
    tell: tokio::sync::oneshot::Sender<Result<(), TaskError>>,
) {
    let mut tell = Some(tell);
    loop {
        let Some(inner) = handle.upgrade() else {
            return;
        };
        let Some(text) = ({
            let mut progress = lock(&inner.progress);
            let text = progress.pending.take();
            progress.writing = text.is_some();
            text
        }) else {
            return;
        };
        match inner.tasks.progress(&inner.id, text.clone()).await {
            Err(TaskError::Store(_)) => {
                // Not written: kept unless a newer text came meanwhile.
                lock(&inner.progress).pending.get_or_insert(text);
                drop(tell.take());
                drop(inner);
                tokio::time::sleep(PROGRESS_RETRY).await;
            }
            Err(refused) => {
                let mut progress = lock(&inner.progress);
                progress.pending = None;
                progress.writing = false;
                // Told to the caller if it still waits, else kept for the next call.
                let unheard = match tell.take() {
                    Some(tell) => tell.send(Err(refused)).err(),
                    None => Some(Err(refused)),
                };
                progress.refused = unheard.and_then(Result::err);
                return;
            }
            Ok(()) => {
                if let Some(tell) = tell.take() {
                    let _ = tell.send(Ok(()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::TasksLayer;
    use crate::store::{CreateLimits, MemoryStore};
    use crate::task::{Scope, TaskStatus, Timestamp, Transition};

    async fn stored_task(layer: &TasksLayer) -> TaskId {
        let id = TaskId::random();
        let record = TaskRecord::new(id, None, Timestamp::now());
        layer
            .engine
            .store()
            .create(record, CreateLimits::default())
            .await
            .unwrap();
        id
    }

    /// Lets the tasks spawned so far run (a current-thread runtime runs them in turn).
    async fn let_spawned_tasks_run() {
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_last_dropped_handle_fails_a_running_task_and_a_detached_one_does_not() {
        let layer = TasksLayer::builder(MemoryStore::new())
            .without_janitor()
            .build()
            .unwrap();
        let tasks = layer.tasks();
        let dropped = stored_task(&layer).await;
        let detached = stored_task(&layer).await;

        let handle = TaskHandle::new(tasks.clone(), dropped);
        let clone = handle.clone();
        drop(handle);
        let_spawned_tasks_run().await;
        assert_eq!(
            tasks.status(&dropped).await.unwrap().status,
            TaskStatus::Working,
            "a clone still holds the task"
        );
        drop(clone);
        let_spawned_tasks_run().await;
        let failed = tasks.status(&dropped).await.unwrap();
        assert_eq!(failed.status, TaskStatus::Failed);
        assert_eq!(
            failed.error.unwrap().code,
            crate::wire::RpcError::INTERNAL_ERROR
        );

        assert_eq!(TaskHandle::new(tasks.clone(), detached).detach(), detached);
        let_spawned_tasks_run().await;
        assert_eq!(
            tasks.status(&detached).await.unwrap().status,
            TaskStatus::Working
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_handle_whose_task_completed_leaves_it_completed() {
        let layer = TasksLayer::builder(MemoryStore::new())
            .without_janitor()
            .build()
            .unwrap();
        let tasks = layer.tasks();
        let id = stored_task(&layer).await;
        layer.engine.node().register_work(id);
        let handle = TaskHandle::new(tasks.clone(), id);
        assert_eq!(waiting_works(&layer), 1);
        handle
            .complete(serde_json::json!({"content": []}))
            .await
            .unwrap();
        drop(handle);
        let_spawned_tasks_run().await;
        assert_eq!(
            tasks.status(&id).await.unwrap().status,
            TaskStatus::Completed
        );
        assert_eq!(waiting_works(&layer), 0);
    }

    fn waiting_works(layer: &TasksLayer) -> usize {
        layer.engine.node().work_count()
    }

    /// A memory store whose updates wait while `stalled` is set, counting them.
    #[derive(Debug, Default)]
    struct Stalling {
        store: MemoryStore,
        stalled: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
        updates: std::sync::atomic::AtomicUsize,
    }

    impl crate::store::TaskStore for Stalling {
        fn create<'a>(
            &'a self,
            record: TaskRecord,
            limits: CreateLimits,
        ) -> crate::store::BoxFuture<'a, Result<(), crate::error::StoreError>> {
            self.store.create(record, limits)
        }

        fn get<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            now: Timestamp,
        ) -> crate::store::BoxFuture<'a, Result<Option<TaskRecord>, crate::error::StoreError>>
        {
            self.store.get(id, scope, now)
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
            Box::pin(async move {
                self.updates.fetch_add(1, Ordering::SeqCst);
                let _ = self.stalled.subscribe().wait_for(|stalled| !stalled).await;
                self.store.update(id, scope, transition, now).await
            })
        }

        fn cleanup<'a>(
            &'a self,
            now: Timestamp,
            retention: Duration,
        ) -> crate::store::BoxFuture<'a, Result<usize, crate::error::StoreError>> {
            self.store.cleanup(now, retention)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn progress_on_a_slow_store_returns_promptly_and_the_newest_text_wins() {
        let store = std::sync::Arc::new(Stalling::default());
        let layer = TasksLayer::builder(store.clone())
            .without_janitor()
            .with_store_timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let tasks = layer.tasks();
        let id = stored_task(&layer).await;
        let handle = TaskHandle::new(tasks.clone(), id);

        store.stalled.send_replace(true);
        let started = tokio::time::Instant::now();
        for step in ["one", "two", "three"] {
            handle.progress(step).await.unwrap();
        }
        assert!(
            started.elapsed() <= PROGRESS_WAIT,
            "three progress calls on a stalled store took {:?}",
            started.elapsed()
        );
        store.stalled.send_replace(false);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let task = tasks.status(&id).await.unwrap();
        assert_eq!(task.status_message.as_deref(), Some("three"));
        // The first write, then the newest text: the one in between never went out.
        assert_eq!(store.updates.load(Ordering::SeqCst), 2);

        // A refusal met in the background comes with the next call.
        tasks.apply(&id, Transition::Cancel).await.unwrap();
        let refused = handle.progress("late").await.unwrap_err();
        assert!(refused.is_terminal());
        handle.detach();
    }
}
