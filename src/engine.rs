//! The engine: the state shared by the layer, every service clone and every worker
//! handle, with one job: create tasks, change them, and tell everyone who waits
//! (the notifier, waiting workers, `Auto` runners), including of changes made on
//! other nodes.

use std::collections::HashMap;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::Notify;

use crate::backoff::Backoff;
use crate::config::{Config, PrincipalFn};
use crate::defaults::MAX_TTL;
use crate::error::{StoreError, TaskError};
use crate::notify::{ListenNotifier, TaskNotifier};
use crate::observe::{self, Live};
use crate::store::StoreCalls;
use crate::store::{BoxFuture, ChangeFeed, CreateLimits, FeedEvent, TaskStore, Updated};
use crate::task::{
    ErrorObject, Principal, Scope, TaskEnd, TaskId, TaskRecord, TaskStatus, Timestamp, Transition,
};
use crate::waits::Waits;
use crate::wire::{RpcError, ServerInfoMeta};

/// What a new task starts with: the settings of a
/// [`TaskSpec`](crate::TaskSpec) that end up in its record.
#[derive(Clone, Debug, Default)]
pub(crate) struct NewTask {
    pub(crate) ttl: Option<Option<Duration>>,
    pub(crate) poll_interval: Option<Duration>,
    pub(crate) status_message: Option<String>,
}

/// Holds gained and given up since a lease keeper last renewed.
#[derive(Debug, Default)]
pub(crate) struct LeaseLog {
    pub(crate) hold: std::collections::HashSet<TaskId>,
    pub(crate) release: std::collections::HashSet<TaskId>,
}

pub(crate) struct Engine {
    pub(crate) store: StoreCalls,
    pub(crate) config: Config,
    pub(crate) notifier: Option<Arc<dyn TaskNotifier>>,
    pub(crate) principal: Option<PrincipalFn>,
    /// The registry of this layer's listen streams (fed by the default notifier).
    pub(crate) listen: ListenNotifier,
    /// Wake-ups for workers waiting on their tasks.
    waits: Arc<Waits>,
    /// The background runners of `TaskMode::Auto` tasks, aborted on cancellation.
    runners: Mutex<HashMap<TaskId, tokio::task::AbortHandle>>,
    /// Woken whenever the last work or runner of this process ends.
    idle: Notify,
    /// Tasks worked on elsewhere that this node holds a lease on (`Tasks::hold`).
    held: Mutex<std::collections::HashSet<TaskId>>,
    /// Woken when this node starts work on a task, for the lease keeper.
    lease_changes: Arc<Notify>,
    /// Set while a lease keeper runs: only then are hold changes recorded.
    leasing: std::sync::atomic::AtomicBool,
    /// Holds gained and given up since the keeper last took them.
    lease_log: Mutex<LeaseLog>,
    /// Set by a drain: no new task is admitted.
    draining: std::sync::atomic::AtomicBool,
    pub(crate) _janitor_stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// The engine itself, for the re-reads it starts in the background.
    me: std::sync::OnceLock<std::sync::Weak<Engine>>,
    /// The tasks being re-read in the background after a failed write (one re-read
    /// per task at a time).
    reconciling: Mutex<std::collections::HashSet<TaskId>>,
    /// Every change another node made is re-read (a custom notifier wants them
    /// all), not only those of tasks this node knows.
    relay_all: bool,
    /// Dropped with the engine: stops the lease keeper.
    pub(crate) _lease_stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// Set once this layer has warned about a task without a principal.
    anonymous_warned: std::sync::atomic::AtomicBool,
}

impl Engine {
    pub(crate) fn new(
        store: Arc<dyn TaskStore>,
        config: Config,
        notifier: Option<Arc<dyn TaskNotifier>>,
        principal: Option<PrincipalFn>,
    ) -> Self {
        Engine {
            store: StoreCalls::new(store, config.store_timeout),
            config,
            notifier,
            principal,
            listen: ListenNotifier::default(),
            waits: Arc::default(),
            runners: Mutex::new(HashMap::new()),
            idle: Notify::new(),
            held: Mutex::default(),
            lease_changes: Arc::default(),
            leasing: std::sync::atomic::AtomicBool::new(false),
            lease_log: Mutex::default(),
            draining: std::sync::atomic::AtomicBool::new(false),
            _janitor_stop: Mutex::new(None),
            me: std::sync::OnceLock::new(),
            reconciling: Mutex::default(),
            relay_all: false,
            _lease_stop: Mutex::new(None),
            anonymous_warned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Puts the engine in its `Arc`, so that it can start background re-reads of
    /// its own.
    pub(crate) fn shared(self) -> Arc<Engine> {
        let engine = Arc::new(self);
        let _ = engine.me.set(Arc::downgrade(&engine));
        engine
    }

    /// Uses `listen` (the builder's, which its default notifier feeds) as the
    /// registry of listen streams.
    pub(crate) fn with_listen(mut self, listen: ListenNotifier) -> Self {
        self.listen = listen;
        self
    }

    /// Re-reads every change other nodes make, for a custom notifier.
    pub(crate) fn relaying_all(mut self, all: bool) -> Self {
        self.relay_all = all;
        self
    }

    /// Whether this node has anyone to tell of a change to `id`: a worker waiting
    /// on it or working on it, an `Auto` runner, a listen stream naming it, or a
    /// hold. A task this node does not know is never re-read on its account.
    pub(crate) fn knows(&self, id: &TaskId) -> bool {
        self.waits.knows(id)
            || self.listen.registry().names(id)
            || self
                .runners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(id)
            || self
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(id)
    }

    pub(crate) fn principal(&self, parts: &http::request::Parts) -> Option<Principal> {
        match &self.principal {
            Some(f) => f(parts),
            None => parts.extensions.get::<Principal>().cloned(),
        }
    }

    /// Whether a request of `owner` may have tasks: always with a principal; without
    /// one, refused (-32603) under
    /// [`with_require_principal`](crate::TasksLayerBuilder::with_require_principal),
    /// and otherwise allowed after one warning per layer.
    pub(crate) fn admit_owner(&self, owner: Option<&Principal>) -> Result<(), RpcError> {
        self.refuse_anonymous(owner)?;
        if owner.is_none()
            && !self
                .anonymous_warned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                "a task was made or read without a Principal: anonymous tasks are shared by \
                 every unauthenticated caller. If requests are authenticated, the \
                 authentication layer is probably placed below TasksLayer (it must run \
                 first, as an outer layer); with_require_principal() refuses anonymous tasks"
            );
        }
        Ok(())
    }

    /// The refusal of [`admit_owner`](Self::admit_owner) alone, with no warning.
    pub(crate) fn refuse_anonymous(&self, owner: Option<&Principal>) -> Result<(), RpcError> {
        if owner.is_some() || !self.config.require_principal {
            return Ok(());
        }
        observe::task_refused("principal_required");
        Err(
            RpcError::internal("Tasks require an authenticated principal")
                .with_data(serde_json::json!({"reason": "principal_required"})),
        )
    }

    /// Registers the background runner of an auto task, so that cancelling the
    /// task aborts it (and drops the inner call it is awaiting).
    pub(crate) fn register_runner(&self, id: TaskId, runner: tokio::task::AbortHandle) {
        if self
            .runners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, runner)
            .is_none()
        {
            Live::Runners.up();
            self.note_hold(id);
        }
    }

    /// Forgets a runner that ended on its own.
    pub(crate) fn forget_runner(&self, id: &TaskId) {
        self.take_runner(id);
        self.wake_if_idle();
    }

    /// Removes the runner of `id` from the register, the one place a runner leaves it.
    fn take_runner(&self, id: &TaskId) -> Option<tokio::task::AbortHandle> {
        let runner = self
            .runners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        if runner.is_some() {
            Live::Runners.down();
            self.note_release(id);
        }
        runner
    }

    /// The tasks this process is running (work under a handle, `Auto` runners).
    pub(crate) fn running(&self) -> Vec<TaskId> {
        let mut running = self.waits.working();
        running.extend(
            self.runners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .copied(),
        );
        running.sort_unstable();
        running.dedup();
        running
    }

    /// Wakes a drain waiting for this process to run no task (nothing to do, and no
    /// lock taken, when no drain has begun).
    fn wake_if_idle(&self) {
        if !self.is_draining() {
            return;
        }
        let no_work = self.waits.work_count() == 0;
        let no_runner = self
            .runners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        if no_work && no_runner {
            self.idle.notify_waiters();
        }
    }

    /// Waits until this process runs no task, or until `deadline`; the tasks still
    /// running then.
    pub(crate) async fn wait_idle(&self, deadline: tokio::time::Instant) -> Vec<TaskId> {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            let running = self.running();
            if running.is_empty() || tokio::time::Instant::now() >= deadline {
                return running;
            }
            tokio::select! {
                _ = idle => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Stops admitting new tasks (see `TasksLayer::drain`).
    pub(crate) fn start_draining(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether a drain has begun: calls that would become tasks run synchronously.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Aborts the `Auto` runner of `id`, if this process has one.
    pub(crate) fn abort_runner(&self, id: &TaskId) {
        if let Some(runner) = self.take_runner(id) {
            runner.abort();
        }
        self.wake_if_idle();
    }

    /// Counts `id` as worked on in this process, until [`forget_work`](Self::forget_work).
    pub(crate) fn register_work(&self, id: TaskId) {
        if self.waits.start_work(&id) {
            Live::Workers.up();
            self.note_hold(id);
        }
    }

    /// The tasks this node holds a worker lease on: those it runs, and those held
    /// for work elsewhere ([`hold`](Self::hold)).
    pub(crate) fn leased(&self) -> Vec<TaskId> {
        let mut leased = self.running();
        leased.extend(self.held.lock().unwrap_or_else(|p| p.into_inner()).iter());
        leased.sort_unstable();
        leased.dedup();
        leased
    }

    /// Woken when this node starts work on a task.
    pub(crate) fn lease_changes(&self) -> Arc<Notify> {
        self.lease_changes.clone()
    }

    /// Holds a worker lease on `id` for work this node drives without a handle.
    pub(crate) fn hold(&self, id: TaskId) {
        if self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id)
        {
            self.note_hold(id);
        }
    }

    /// Gives up the lease [`hold`](Self::hold) took.
    pub(crate) fn release(&self, id: &TaskId) {
        if self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
        {
            self.note_release(id);
        }
    }

    /// Starts recording hold changes for a lease keeper.
    pub(crate) fn start_leasing(&self) {
        self.leasing
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn is_leasing(&self) -> bool {
        self.leasing.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records that this node now holds `id`, and wakes the keeper.
    fn note_hold(&self, id: TaskId) {
        if !self.is_leasing() {
            return;
        }
        let mut log = self.lease_log.lock().unwrap_or_else(|p| p.into_inner());
        log.release.remove(&id);
        log.hold.insert(id);
        drop(log);
        self.lease_changes.notify_one();
    }

    /// Records that this node no longer holds `id`, unless something else on it
    /// (work, a runner, an explicit hold) still does.
    fn note_release(&self, id: &TaskId) {
        if !self.is_leasing() {
            return;
        }
        let still_held = self.waits.is_working(id)
            || self
                .runners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(id)
            || self
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(id);
        if still_held {
            return;
        }
        let mut log = self.lease_log.lock().unwrap_or_else(|p| p.into_inner());
        log.hold.remove(id);
        log.release.insert(*id);
    }

    /// Stops this node's work on `id`, whose lease another node claimed: its `Auto`
    /// runner is aborted, its hold dropped, and its waiting worker re-reads the
    /// task (failed by the claim), so `cancelled()` resolves.
    pub(crate) fn stop_lost(&self, id: &TaskId) {
        if let Some(runner) = self.take_runner(id) {
            runner.abort();
        }
        self.release(id);
        self.waits.wake(id);
        self.wake_if_idle();
    }

    /// Gives up the explicit holds ([`hold`](Self::hold)) of tasks the store has
    /// ended or no longer has (they expired, or ended on a node whose change this
    /// one never saw).
    pub(crate) async fn release_ended_holds(&self) {
        let held: Vec<TaskId> = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        for id in held {
            if self.has_ended(&id).await {
                self.release(&id);
            }
        }
    }

    /// Whether the store has `id` ended or gone (`false` when it cannot tell).
    pub(crate) async fn has_ended(&self, id: &TaskId) -> bool {
        match self.store.get(id, Scope::Any, Timestamp::now()).await {
            Ok(None) => true,
            Ok(Some(record)) => record.status.is_terminal(),
            Err(_) => false,
        }
    }

    /// The hold changes recorded since the last call.
    pub(crate) fn take_lease_log(&self) -> LeaseLog {
        std::mem::take(&mut *self.lease_log.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// How many tasks have work running in this process under a live handle.
    #[cfg(test)]
    pub(crate) fn work_count(&self) -> usize {
        self.waits.work_count()
    }

    /// The work on `id` in this process ended (its last handle was dropped).
    pub(crate) fn forget_work(&self, id: &TaskId) {
        if self.waits.end_work(id) {
            Live::Workers.down();
            self.note_release(id);
        }
        self.wake_if_idle();
    }

    /// A terminal task needs no runner: a cancelled one has its runner aborted.
    /// Called on every record this process writes or reads on a waiter's behalf, so
    /// a cancel seen by any path stops the local runner.
    pub(crate) fn stop_runner(&self, record: &TaskRecord) {
        if !record.status.is_terminal() {
            return;
        }
        if let Some(runner) = self.take_runner(&record.id)
            && record.status == TaskStatus::Cancelled
        {
            runner.abort();
        }
        self.wake_if_idle();
    }

    pub(crate) fn limits(&self) -> CreateLimits {
        // Retired records the janitor would remove never block a create; without a
        // janitor, the default retention still bounds how long they count.
        let retention = self
            .config
            .janitor
            .map_or(crate::defaults::RETENTION, |(_, retention)| retention);
        CreateLimits::new(self.config.max_rows, self.config.max_per_owner).with_retention(retention)
    }

    /// `serverInfo` for the `_meta` of results the layer writes.
    pub(crate) fn result_meta(&self, result: &mut Map<String, Value>) {
        if let Some(info) = &self.config.server_info {
            let meta = serde_json::to_value(ServerInfoMeta(info)).unwrap_or(Value::Null);
            result.insert("_meta".into(), meta);
        }
    }

    /// The JSON-RPC response carrying the `CreateTaskResult` for `task`, written
    /// straight into its body.
    pub(crate) fn create_task_response(
        &self,
        task: &TaskRecord,
        id: crate::wire::ReplyId<'_>,
    ) -> http::Response<bytes::Bytes> {
        let server_info = self.config.server_info.as_ref();
        crate::wire::result_response_with(id, http::HeaderMap::new(), |out| {
            crate::task::TaskJson::summary(task)
                .as_result("task", server_info)
                .write_json(out);
        })
    }

    /// The `CreateTaskResult` answering the call that made `task`.
    pub(crate) fn create_task_result(&self, task: &TaskRecord) -> Map<String, Value> {
        let mut result = Map::with_capacity(10);
        result.insert("resultType".into(), Value::String("task".into()));
        result.extend(task.to_summary_json());
        self.result_meta(&mut result);
        result
    }

    /// Runs after every store write that changed a task, in this process.
    pub(crate) fn changed(&self, record: &TaskRecord) {
        if let Some(notifier) = &self.notifier
            && catch_unwind(AssertUnwindSafe(|| notifier.task_changed(record))).is_err()
        {
            tracing::error!(status = %record.status, "task notifier panicked; the change is stored");
        }
        self.waits.wake(&record.id);
        self.stop_runner(record);
        if record.status.is_terminal() {
            self.release(&record.id);
        }
    }

    /// A store update that tells the notifier and any waiting worker when it changed
    /// the task.
    pub(crate) async fn update(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        transition: &Transition,
    ) -> Result<Option<Updated>, StoreError> {
        let updated = match self
            .store
            .update(id, scope, transition, Timestamp::now())
            .await
        {
            Ok(updated) => updated,
            Err(e) => {
                // The write may have landed with its answer lost: find out in the
                // background, so the local runner, waiters and listen streams learn
                // it. Only for a task this node knows: nobody here would learn
                // anything of another (an id a client made up, say).
                if self.knows(id) {
                    self.reconcile(*id);
                }
                return Err(e);
            }
        };
        if let Some(u) = &updated
            && u.changed()
        {
            if u.record.status.is_terminal() {
                observe::task_finished(u.record.status);
            }
            self.changed(&u.record);
        }
        Ok(updated)
    }

    /// A create whose outcome is unknown (the store failed or timed out after it may
    /// have committed): fails the task, if it was stored, by a compensating write
    /// once the store answers, so it never stays `working` with no worker on it.
    /// The task is held meanwhile, so a survivor fails it if this node dies first.
    /// A create still on its way lands within the store timeout: the task is looked
    /// for twice, that far apart, before it is taken for never stored.
    pub(crate) fn compensate_create(&self, id: TaskId) {
        let Some(engine) = self.me.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.hold(id);
        runtime.spawn(async move {
            let fail = Transition::Fail {
                error: ErrorObject::new(RpcError::INTERNAL_ERROR, CREATE_UNCONFIRMED),
                message: Some(CREATE_UNCONFIRMED.to_owned()),
            };
            let deadline = tokio::time::Instant::now() + RECONCILE_FOR;
            let mut backoff = RETRY;
            let mut absent = 0;
            loop {
                let delay = backoff.next_delay();
                match engine.update(&id, Scope::Any, &fail).await {
                    Ok(Some(_)) => break,
                    Ok(None) if absent == 0 => {
                        absent += 1;
                        tokio::time::sleep(engine.config.store_timeout).await;
                    }
                    Ok(None) => break,
                    Err(_) if tokio::time::Instant::now() + delay < deadline => {
                        tokio::time::sleep(delay).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %crate::error::Chain(&e), "mcp-tasks: could not fail a task whose create was not confirmed");
                        break;
                    }
                }
            }
            engine.release(&id);
        });
    }

    /// Re-reads `id` in the background until the store answers (with a bounded
    /// backoff, for at most [`RECONCILE_FOR`]) and tells everyone of the record
    /// found: after a write whose outcome is unknown.
    fn reconcile(&self, id: TaskId) {
        let Some(engine) = self.me.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let reconciling = || self.reconciling.lock().unwrap_or_else(|p| p.into_inner());
        if !reconciling().insert(id) {
            return;
        }
        runtime.spawn(async move {
            let deadline = tokio::time::Instant::now() + RECONCILE_FOR;
            let mut backoff = RETRY;
            let found = loop {
                let delay = backoff.next_delay();
                match engine.store.get(&id, Scope::Any, Timestamp::now()).await {
                    Ok(found) => break found,
                    Err(_) if tokio::time::Instant::now() + delay < deadline => {
                        tokio::time::sleep(delay).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %crate::error::Chain(&e), "mcp-tasks: could not re-read a task after a failed write");
                        break None;
                    }
                }
            };
            engine
                .reconciling
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            match found {
                Some(record) => engine.changed(&record),
                None => engine.waits.wake(&id),
            }
        });
    }

    /// Re-reads `ids`, in batches of one store call each, and tells everyone of each
    /// record found; the ids not read. After a failed batch the rest are left for
    /// the retry: the store is down, and each call would only wait out the store
    /// timeout.
    async fn recheck(&self, ids: Vec<TaskId>) -> Vec<TaskId> {
        let mut batches = ids.chunks(RECHECK_BATCH);
        for batch in batches.by_ref() {
            match self
                .store
                .get_many(batch, Scope::Any, Timestamp::now())
                .await
            {
                Ok(found) => {
                    let mut gone: std::collections::HashSet<&TaskId> = batch.iter().collect();
                    for record in &found {
                        gone.remove(&record.id);
                        self.changed(record);
                    }
                    for id in gone {
                        self.waits.wake(id);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %crate::error::Chain(&e), "mcp-tasks: could not read tasks changed on another node; retrying");
                    let mut failed = batch.to_vec();
                    failed.extend(batches.flatten());
                    return failed;
                }
            }
        }
        Vec::new()
    }

    /// Of `ids`, the ones to re-read after other nodes changed them: those this
    /// node knows (all of them for a custom notifier), each once.
    fn of_interest(&self, mut ids: Vec<TaskId>) -> Vec<TaskId> {
        if !self.relay_all {
            ids.retain(|id| self.knows(id));
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Waits until `id` has no outstanding input request and returns every answer
    /// collected so far. Wakes on the change itself (a write in this process, or one
    /// relayed from another node), never by polling. Store errors are retried with a
    /// bounded backoff, so a store outage delays the answer but never ends the wait.
    pub(crate) async fn wait_for_answers(
        &self,
        id: &TaskId,
    ) -> Result<Map<String, Value>, TaskError> {
        let mut backoff = RETRY;
        loop {
            let answered = self
                .wait_until(id, |task| match task {
                    None => Some(Err(TaskError::NotFound)),
                    Some(task) if task.status.is_terminal() => Some(Err(TaskError::Refused(
                        crate::error::TransitionError::Terminal,
                    ))),
                    Some(task) if task.status != TaskStatus::InputRequired => {
                        Some(Ok(task.input_responses.clone()))
                    }
                    Some(_) => None,
                })
                .await;
            match answered {
                Ok(answer) => return answer,
                Err(e) => {
                    tracing::warn!(error = %crate::error::Chain(&e), "mcp-tasks: could not read a task a worker waits on for input; retrying");
                    backoff.wait().await;
                }
            }
        }
    }

    /// Waits until the task no longer needs its worker: cancelled, ended some other
    /// way, or gone (expired or removed). Store errors are retried with a bounded
    /// backoff, so an outage never reads as an end.
    pub(crate) fn wait_for_end<'a>(&'a self, id: &'a TaskId) -> Cancelled<'a> {
        Cancelled {
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

    /// Wakes every waiting worker to re-read its task: after changes from other nodes
    /// may have been missed.
    pub(crate) fn wake_all(&self) {
        self.waits.wake_all();
    }

    /// Validates a new task's settings, stores it, and returns the stored record.
    pub(crate) async fn create_task(
        &self,
        owner: Option<Principal>,
        spec: &NewTask,
    ) -> Result<TaskRecord, RpcError> {
        self.create_task_as(TaskId::random(), owner, spec).await
    }

    /// [`create_task`](Self::create_task) under an id the caller drew, so that it
    /// can make up for a create it abandons midway.
    pub(crate) async fn create_task_as(
        &self,
        id: TaskId,
        owner: Option<Principal>,
        spec: &NewTask,
    ) -> Result<TaskRecord, RpcError> {
        let ttl = match spec.ttl {
            Some(ttl) => ttl,
            None => self.config.default_ttl,
        };
        let ttl_ms = match ttl {
            None => None,
            Some(t) if t.is_zero() || t > MAX_TTL => {
                tracing::warn!(
                    "task spec rejected: the ttl must be longer than zero and at most MAX_TTL"
                );
                return Err(RpcError::internal_error());
            }
            Some(t) => duration_ms(t),
        };
        let poll_ms = match spec.poll_interval.map(duration_ms) {
            Some(Some(0)) | Some(None) => {
                tracing::warn!("task spec rejected: the poll interval must be longer than zero");
                return Err(RpcError::internal_error());
            }
            Some(Some(ms)) => Some(ms),
            None => self.config.default_poll_interval.and_then(duration_ms),
        };
        let mut record = TaskRecord::new(id, owner, Timestamp::now());
        record.ttl_ms = ttl_ms;
        record.poll_interval_ms = poll_ms;
        record.status_message = spec.status_message.clone();
        match self.store.create(record.clone(), self.limits()).await {
            Ok(()) => {}
            Err(StoreError::LimitReached(limit)) => {
                observe::task_refused(limit.as_str());
                tracing::warn!(limit = limit.as_str(), "task refused: task limit reached");
                return Err(RpcError::internal("Task limit reached")
                    .with_data(serde_json::json!({"limit": limit.as_str()})));
            }
            Err(e) => {
                tracing::error!(error = %crate::error::Chain(&e), "task store failed to create a task");
                // It may have been stored all the same, with no worker to run it.
                self.compensate_create(record.id);
                return Err(RpcError::internal_error());
            }
        }
        observe::task_created();
        self.changed(&record);
        Ok(record)
    }
}

/// The message of a task failed because its create was not confirmed by the store.
pub(crate) const CREATE_UNCONFIRMED: &str =
    "Task creation not confirmed: the store failed while storing it";

/// How long a background re-read after a failed write keeps trying.
const RECONCILE_FOR: Duration = Duration::from_secs(120);

/// How many tasks one re-read of other nodes' changes asks the store for at once.
const RECHECK_BATCH: usize = 1_000;

/// Re-reads the tasks other nodes changed that this node knows (a worker waits on
/// it or works on it, an `Auto` runner, a listen stream names it; every task for a
/// custom notifier) and tells this node's notifier, waiting workers and `Auto`
/// runners. The changes waiting in the feed are read together, in one store call.
/// A read that fails is retried with a bounded backoff, so a store outage delays a
/// change but never loses it. After missed changes every waiter re-reads its task,
/// and the tasks of every runner and listen stream of this node are re-read. Ends
/// when the layer is gone or the feed closes.
pub(crate) async fn relay_remote_changes(engine: std::sync::Weak<Engine>, mut feed: ChangeFeed) {
    let mut pending: Vec<TaskId> = Vec::new();
    let mut backoff = RETRY;
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        let event = tokio::select! {
            event = feed.recv() => event,
            () = sleep_until_some(retry_at) => {
                retry_at = None;
                let Some(engine) = engine.upgrade() else { return };
                let ids = engine.of_interest(std::mem::take(&mut pending));
                let failed = engine.recheck(ids).await;
                if failed.is_empty() {
                    backoff.reset();
                } else {
                    pending.extend(failed);
                    retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
                }
                continue;
            }
        };
        let Some(engine) = engine.upgrade() else {
            return;
        };
        // This change and those already waiting behind it, read together.
        let mut ids = Vec::new();
        let mut next = event;
        loop {
            match next {
                Some(FeedEvent::Changed(id)) => ids.push(id),
                Some(FeedEvent::Missed(skipped)) => {
                    tracing::warn!(
                        skipped,
                        "mcp-tasks: changes from other nodes were missed; re-reading every task waited on here"
                    );
                    engine.wake_all();
                    ids.extend(engine.running());
                    ids.extend(engine.listen.registry().task_ids());
                }
                None => return,
            }
            if ids.len() >= RECHECK_BATCH {
                break;
            }
            match feed.try_recv() {
                Some(event) => next = Some(event),
                None => break,
            }
        }
        let failed = engine.recheck(engine.of_interest(ids)).await;
        if !failed.is_empty() {
            pending.extend(failed);
            retry_at.get_or_insert_with(|| tokio::time::Instant::now() + backoff.next_delay());
        }
    }
}

/// Sleeps until `at`; never returns without one.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
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
                    this.seen = engine.waits.watch(id);
                    this.state = WaitState::Reading(read(engine, id));
                }
                WaitState::Reading(reading) => {
                    let task = match reading.as_mut().poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => {
                            this.finish();
                            return Poll::Ready(Err(e));
                        }
                        Poll::Ready(Ok(task)) => task,
                    };
                    if let Some(task) = &task {
                        engine.stop_runner(task);
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
                        engine.waits.wake_at_expiry(id, at);
                    }
                    this.state = WaitState::Waiting;
                }
                WaitState::Waiting => match engine.waits.poll_changed(id, this.seen, cx) {
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
        self.engine.waits.unwatch(self.id);
    }
}

impl<F> Drop for WaitUntil<'_, F> {
    fn drop(&mut self) {
        if matches!(self.state, WaitState::Reading(_) | WaitState::Waiting) {
            self.engine.waits.unwatch(self.id);
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

/// The pauses before a read that failed is tried again: from 50 ms, doubling up
/// to 5 s, with jitter.
const RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));

/// The future of [`Tasks::cancelled`](crate::worker::Tasks::cancelled) and
/// [`TaskHandle::cancelled`](crate::worker::TaskHandle::cancelled): resolves to
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
/// # let tasks = TasksLayer::builder(store.clone()).without_janitor().build()?.handle();
/// # let id = TaskId::random();
/// # store.create(TaskRecord::new(id, None, Timestamp::now()), CreateLimits::default()).await?;
/// use mcp_tasks::worker::{Cancelled, TaskEnd};
///
/// let end: Cancelled<'_> = tasks.cancelled(&id);
/// tasks.complete(&id, serde_json::json!({"content": []})).await?;
/// // Any end resolves it, not only a cancel; `TaskEnd` says which.
/// assert_eq!(end.await, TaskEnd::Completed);
/// # Ok(())
/// # }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct Cancelled<'a> {
    wait: WaitUntil<'a, EndOf>,
    backoff: Option<Pin<Box<tokio::time::Sleep>>>,
    retry: Backoff,
    settles: Option<&'a std::sync::atomic::AtomicBool>,
}

impl<'a> Cancelled<'a> {
    /// Also marks `settled` once the wait ends (a task handle's own flag).
    pub(crate) fn settling(mut self, settled: &'a std::sync::atomic::AtomicBool) -> Self {
        self.settles = Some(settled);
        self
    }
}

impl Future for Cancelled<'_> {
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
                    tracing::warn!(error = %crate::error::Chain(&e), "mcp-tasks: could not read a task a worker waits on; retrying");
                    let delay = this.retry.next_delay();
                    this.backoff = Some(Box::pin(tokio::time::sleep(delay)));
                }
            }
        }
    }
}

impl std::fmt::Debug for Cancelled<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancelled").finish_non_exhaustive()
    }
}

/// One read of a waited-on task, boxed: brief, while the wait is long.
fn read<'a>(
    engine: &'a Engine,
    id: &'a TaskId,
) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
    Box::pin(engine.store.get(id, Scope::Any, Timestamp::now()))
}

/// The length of `value` serialized as JSON, or `None` once it passes `cap`
/// (serializing stops there, so a huge value costs at most `cap` bytes of work).
pub(crate) fn json_len_within(value: &Value, cap: usize) -> Option<usize> {
    struct Count {
        len: usize,
        cap: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.len += buf.len();
            if self.len > self.cap {
                return Err(std::io::Error::other("over the cap"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { len: 0, cap };
    serde_json::to_writer(&mut count, value).ok()?;
    Some(count.len)
}

impl Engine {
    /// A completion whose serialized result passes `max_result_bytes` is refused:
    /// `Err` carries the failure to store instead (-32603 "Result too large").
    pub(crate) fn limit_result(&self, transition: Transition) -> Result<Transition, Transition> {
        let Transition::Complete { result, .. } = &transition else {
            return Ok(transition);
        };
        if json_len_within(result, self.config.max_result_bytes).is_some() {
            return Ok(transition);
        }
        tracing::warn!(
            max_result_bytes = self.config.max_result_bytes,
            "a task result is too large; the task fails instead"
        );
        Err(Transition::Fail {
            error: ErrorObject::new(RpcError::INTERNAL_ERROR, "Result too large"),
            message: Some("Result too large".into()),
        })
    }
}

fn duration_ms(d: Duration) -> Option<u64> {
    u64::try_from(d.as_millis()).ok()
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
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
        layer.engine.waits.len()
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
        layer.handle().apply(&id, ask).await.unwrap();
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
        // A worker parked on `cancelled()` holds this future for the task's whole
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
