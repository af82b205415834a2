//! The engine: the state shared by the layer, every service clone and every worker
//! handle, with one job: create tasks, change them, and tell everyone who waits
//! (the notifier, waiting workers, `Auto` runners), including of changes made on
//! other nodes. Its neighbours: what this node runs (`node_work`), the futures a
//! worker awaits and the wake-ups they park on (`wait`), the relay of other nodes'
//! changes (`relay`), and the rendering of results (`render`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::{Config, PrincipalFn};
use crate::defaults::MAX_TTL;
use crate::error::StoreError;
use crate::notify::{ListenNotifier, TaskNotifier};
use crate::observe;
use crate::outage::{Outage, SharedOutage};
use crate::store::StoreCalls;
use crate::store::{CreateLimits, TaskStore, Updated};
use crate::task::{ErrorObject, Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};
use crate::wire::RpcError;

mod bytes;
mod node_work;
mod relay;
mod render;
mod wait;

pub(crate) use bytes::{Cut, Ledger, limit_reached};
pub(crate) use node_work::{LeaseLog, NodeWork};
pub(crate) use relay::relay_remote_changes;
pub(crate) use render::json_len_within;
pub use wait::Ended;

/// Whether a new task is held under this node's worker lease while it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Its work runs on this node (or is not started yet): held before it is
    /// stored, so that a survivor fails it should this node die.
    Leased,
    /// Its work is handed over to something durable (a job queue) that outlives
    /// the node: no lease covers it, and its create waits for none.
    Durable,
}

/// What a new task starts with: the settings of a
/// [`TaskSpec`](crate::TaskSpec) that end up in its record.
#[derive(Clone, Debug, Default)]
pub(crate) struct NewTask {
    pub(crate) ttl: Option<Option<Duration>>,
    pub(crate) poll_interval: Option<Duration>,
    pub(crate) status_message: Option<String>,
}

pub(crate) struct Engine {
    store: StoreCalls,
    config: Config,
    notifier: Option<Arc<dyn TaskNotifier>>,
    principal: Option<PrincipalFn>,
    /// The registry of this layer's listen streams (fed by the default notifier).
    listen: ListenNotifier,
    /// What this node runs: handle work, `Auto` runners, holds, the drain.
    node: NodeWork,
    /// Dropped with the engine: stops the janitor.
    janitor_stop: Mutex<Option<crate::spawn::Stop>>,
    /// The engine itself, for the re-reads it starts in the background.
    me: std::sync::OnceLock<std::sync::Weak<Engine>>,
    /// The tasks being re-read in the background after a failed write (one re-read
    /// per task at a time).
    reconciling: Mutex<std::collections::HashSet<TaskId>>,
    /// Every change another node made is re-read (a custom notifier wants them
    /// all), not only those of tasks this node knows.
    relay_all: bool,
    /// Dropped with the engine: stops the lease keeper.
    lease_stop: Mutex<Option<crate::spawn::Stop>>,
    /// Set once this layer has warned about a task without a principal.
    anonymous_warned: std::sync::atomic::AtomicBool,
    /// What bounds each owner's stored bytes.
    bytes: Ledger,
    /// The warnings of new tasks refused for want of a worker lease.
    lease_refusals: SharedOutage,
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
            node: NodeWork::default(),
            janitor_stop: Mutex::new(None),
            me: std::sync::OnceLock::new(),
            reconciling: Mutex::default(),
            relay_all: false,
            lease_stop: Mutex::new(None),
            anonymous_warned: std::sync::atomic::AtomicBool::new(false),
            bytes: Ledger::default(),
            lease_refusals: SharedOutage::new(
                "store the worker lease of a new task, so new tasks are refused",
            ),
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

    /// The store, as the layer calls it: each call bounded by the store timeout
    /// and timed.
    /// Keeps the janitor running for as long as the engine lives.
    pub(crate) fn keep_janitor(&self, stop: crate::spawn::Stop) {
        *self.janitor_stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop);
    }

    /// Keeps the lease keeper running for as long as the engine lives.
    pub(crate) fn keep_lease(&self, stop: crate::spawn::Stop) {
        *self.lease_stop.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop);
    }

    /// The lease keeper's stop, taken so that dropping it stops the keeper as a
    /// crash would.
    #[cfg(test)]
    pub(crate) fn take_lease_stop(&self) -> Option<crate::spawn::Stop> {
        self.lease_stop
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    pub(crate) fn store(&self) -> &StoreCalls {
        &self.store
    }

    /// The settings the builder validated.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// What this node runs: handle work, `Auto` runners, holds, the drain.
    pub(crate) fn node(&self) -> &NodeWork {
        &self.node
    }

    /// The registry of this layer's listen streams.
    pub(crate) fn listen(&self) -> &ListenNotifier {
        &self.listen
    }

    /// Whether changes are told to a notifier (none after
    /// [`without_notifier`](crate::TasksLayerBuilder::without_notifier)): without
    /// one, a listen agrees to no task ids.
    pub(crate) fn has_notifier(&self) -> bool {
        self.notifier.is_some()
    }

    /// Whether this node has anyone to tell of a change to `id`: a worker waiting
    /// on it or working on it, an `Auto` runner, a listen stream naming it, or a
    /// hold. A task this node does not know is never re-read on its account.
    pub(crate) fn knows(&self, id: &TaskId) -> bool {
        self.node.knows(id) || self.listen.names(id)
    }

    pub(crate) fn principal(&self, parts: &http::request::Parts) -> Option<Principal> {
        match &self.principal {
            Some(f) => f(parts),
            None => parts.extensions.get::<Principal>().cloned(),
        }
    }

    /// Whether a request of `owner` may have tasks: always with a principal; without
    /// one, only under
    /// [`with_anonymous_tasks`](crate::TasksLayerBuilder::with_anonymous_tasks), and
    /// otherwise refused (-32603, naming that setter). The first refusal of a layer
    /// logs one warning.
    pub(crate) fn admit_owner(&self, owner: Option<&Principal>) -> Result<(), RpcError> {
        if owner.is_some() || self.config.anonymous_tasks {
            return Ok(());
        }
        if !self
            .anonymous_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                "a task was refused to a request without a Principal. If requests are \
                 authenticated, the authentication layer is probably placed below \
                 TasksLayer (it must run first, as an outer layer); a server without \
                 authentication allows anonymous tasks with with_anonymous_tasks()"
            );
        }
        observe::task_refused("principal_required");
        Err(RpcError::internal(PRINCIPAL_REQUIRED)
            .with_data(serde_json::json!({"reason": "principal_required"})))
    }

    /// Gives up the explicit holds ([`hold`](NodeWork::hold)) of tasks the store has
    /// ended or no longer has (they expired, or ended on a node whose change this
    /// one never saw).
    pub(crate) async fn release_ended_holds(&self) {
        for id in self.ended_among(&self.node.held()).await {
            self.node.release(&id);
        }
    }

    /// Those of `ids` the store has ended or no longer has, read
    /// [`HOLDS_READ_BATCH`] at a time; a batch the store fails to read counts as
    /// unfinished.
    pub(crate) async fn ended_among(&self, ids: &[TaskId]) -> Vec<TaskId> {
        let mut ended = Vec::new();
        for batch in ids.chunks(HOLDS_READ_BATCH) {
            let Ok(found) = self
                .store
                .get_many(batch, Scope::Any, Timestamp::now())
                .await
            else {
                continue;
            };
            let unfinished: std::collections::HashSet<TaskId> = found
                .iter()
                .filter(|task| !task.status.is_terminal())
                .map(|task| task.id)
                .collect();
            ended.extend(batch.iter().filter(|id| !unfinished.contains(id)));
        }
        ended
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

    /// Fails `id` with -32603 and `message` as both its error and its status
    /// message, whoever holds it: `Ok(true)` when this changed it, `Ok(false)` when
    /// it had already ended or is gone.
    pub(crate) async fn fail_internal(
        &self,
        id: &TaskId,
        message: &str,
    ) -> Result<bool, StoreError> {
        self.fail(id, &internal_failure(message)).await
    }

    /// Fails `id`, whose work was cut short for `why`, with the error `why` decides
    /// ([`Interrupted::error`]), whoever holds it: `Ok(true)` when this changed it,
    /// `Ok(false)` when it had already ended or is gone.
    pub(crate) async fn fail_interrupted(
        &self,
        id: &TaskId,
        why: Interrupted,
    ) -> Result<bool, StoreError> {
        let fail = Transition::Fail {
            error: why.error(),
            message: Some(why.message().to_owned()),
        };
        self.fail(id, &fail).await
    }

    async fn fail(&self, id: &TaskId, fail: &Transition) -> Result<bool, StoreError> {
        let updated = self.update(id, Scope::Any, fail).await?;
        Ok(updated.is_some_and(|u| u.changed()))
    }

    /// Runs after every store write that changed a task, in this process.
    pub(crate) fn changed(&self, record: &TaskRecord) {
        if let Some(notifier) = &self.notifier
            && catch_unwind(AssertUnwindSafe(|| notifier.task_changed(record))).is_err()
        {
            tracing::error!(status = %record.status, "task notifier panicked; the change is stored");
        }
        self.node.waits.wake(&record.id);
        self.node.stop_runner(record);
        if record.status.is_terminal() {
            self.node.release(&record.id);
            self.bytes.forget_owner(&record.id);
        }
    }

    /// A store update that tells the notifier and any waiting worker when it changed
    /// the task: [`write`](Self::write), for a caller that need not know whether
    /// the bounds changed the transition.
    pub(crate) async fn update(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        transition: &Transition,
    ) -> Result<Option<Updated>, StoreError> {
        Ok(self.write(id, scope, transition).await?.0)
    }

    /// Every write to a task: the transition within the size bounds and its owner's
    /// bytes ([`bound`](Self::bound), which may refuse it or replace it with the
    /// task's failure, said by the [`Cut`]), then the store update, then everyone
    /// who waits is told when it changed the task.
    pub(crate) async fn write(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        transition: &Transition,
    ) -> Result<(Option<Updated>, Option<Cut>), StoreError> {
        let bounded = self.bound(id, scope, transition).await?;
        let transition = &*bounded.transition;
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
            } else {
                self.bytes.note_owner(u.record.id, &u.record.owner);
            }
            self.changed(&u.record);
        }
        Ok((updated, bounded.cut))
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
        if !crate::spawn::has_runtime() {
            return;
        }
        self.node.hold(id);
        crate::spawn::spawn_if_runtime(async move {
            let fail = internal_failure(CREATE_UNCONFIRMED);
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
            engine.node.release(&id);
        });
    }

    /// Re-reads `id` in the background until the store answers (with a bounded
    /// backoff, for at most [`RECONCILE_FOR`]) and tells everyone of the record
    /// found: after a write whose outcome is unknown.
    fn reconcile(&self, id: TaskId) {
        let Some(engine) = self.me.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        if !crate::spawn::has_runtime() {
            return;
        }
        let reconciling = || self.reconciling.lock().unwrap_or_else(|p| p.into_inner());
        if !reconciling().insert(id) {
            return;
        }
        crate::spawn::spawn_if_runtime(async move {
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
                None => engine.node.waits.wake(&id),
            }
        });
    }

    /// Re-reads `ids`, in batches of one store call each, and tells everyone of each
    /// record found; the ids not read. After a failed batch the rest are left for
    /// the retry: the store is down, and each call would only wait out the store
    /// timeout. Failures and the recovery are told through `reads`.
    async fn recheck(&self, ids: Vec<TaskId>, reads: &mut Outage) -> Vec<TaskId> {
        let mut batches = ids.chunks(RECHECK_BATCH);
        for batch in batches.by_ref() {
            match self
                .store
                .get_many(batch, Scope::Any, Timestamp::now())
                .await
            {
                Ok(found) => {
                    reads.succeeded();
                    let mut gone: std::collections::HashSet<&TaskId> = batch.iter().collect();
                    for record in &found {
                        gone.remove(&record.id);
                        self.changed(record);
                    }
                    for id in gone {
                        self.node.waits.wake(id);
                    }
                }
                Err(e) => {
                    reads.failed(Some(&e));
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

    /// Wakes every waiting worker to re-read its task: after changes from other nodes
    /// may have been missed.
    pub(crate) fn wake_all(&self) {
        self.node.waits.wake_all();
    }

    /// Validates a new task's settings, stores it, and returns the stored record,
    /// with the hold that covers it until its work is registered.
    pub(crate) async fn create_task(
        &self,
        owner: Option<Principal>,
        spec: &NewTask,
    ) -> Result<(TaskRecord, Creating<'_>), RpcError> {
        self.create_task_as(TaskId::random(), owner, spec, Hold::Leased)
            .await
    }

    /// [`create_task`](Self::create_task) under an id the caller drew, so that it
    /// can make up for a create it abandons midway.
    ///
    /// While worker leases are kept, the task is held, and the hold stored, before
    /// the create: a node that dies at any point after it leaves a task a survivor
    /// fails. A node whose keeper cannot store the hold refuses the task
    /// ([`no_worker_lease`]) rather than run it unleased.
    pub(crate) async fn create_task_as(
        &self,
        id: TaskId,
        owner: Option<Principal>,
        spec: &NewTask,
        hold: Hold,
    ) -> Result<(TaskRecord, Creating<'_>), RpcError> {
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
        let creating = Creating { engine: self, id };
        let seq = match hold {
            Hold::Leased => self.node.hold_creating(id),
            Hold::Durable => None,
        };
        if let Some(seq) = seq {
            let within = self.node.lease_bound() / 2;
            if !self.node.hold_stored(seq, within).await {
                observe::task_refused("no_worker_lease");
                self.lease_refusals
                    .failed(&StoreError::backend(NO_WORKER_LEASE));
                return Err(no_worker_lease());
            }
            self.lease_refusals.succeeded();
        }
        let mut record = TaskRecord::new(id, owner, Timestamp::now());
        record.ttl_ms = ttl_ms;
        record.poll_interval_ms = poll_ms;
        record.status_message = spec.status_message.clone();
        let admitted = match self.admit_create(&mut record).await {
            Ok(admitted) => admitted,
            Err(StoreError::LimitReached(limit)) => return Err(limit_reached(limit)),
            Err(e) => {
                tracing::error!(error = %crate::error::Chain(&e), "task store failed before a create");
                return Err(RpcError::internal_error());
            }
        };
        let created = self.store.create(record.clone(), self.limits()).await;
        drop(admitted);
        match created {
            Ok(()) => {}
            Err(StoreError::LimitReached(limit)) => {
                observe::task_refused(limit.as_str());
                return Err(limit_reached(limit));
            }
            Err(e) => {
                tracing::error!(error = %crate::error::Chain(&e), "task store failed to create a task");
                // It may have been stored all the same, with no worker to run it.
                self.compensate_create(record.id);
                return Err(RpcError::internal_error());
            }
        }
        observe::task_created();
        self.bytes.note_owner(record.id, &record.owner);
        self.changed(&record);
        Ok((record, creating))
    }
}

/// The hold of a task being created, from before its create until the caller
/// has registered its work (or handed it on): dropped, it ends.
#[must_use = "the hold ends when this is dropped"]
pub(crate) struct Creating<'a> {
    engine: &'a Engine,
    id: TaskId,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.engine.node.end_creating(&self.id);
    }
}

/// How many explicit holds one read checks for their end.
const HOLDS_READ_BATCH: usize = 1_000;

/// Why a node without a working lease refuses new tasks, in its log.
const NO_WORKER_LEASE: &str = "this node could not store its worker lease on a new task";

/// The refusal of a call that would have become a task on a node whose lease
/// keeper cannot store the task's hold (the lease store is out of reach): HTTP 503
/// with `Retry-After`, as a drain's refusal, so that the call is sent again, to
/// this node or another. No task is stored, and no work for one started.
pub(crate) fn no_worker_lease() -> RpcError {
    RpcError::new(
        RpcError::INTERNAL_ERROR,
        "No worker lease: this node cannot take new tasks now",
        http::StatusCode::SERVICE_UNAVAILABLE,
    )
    .with_data(retryable("no_worker_lease"))
}

/// Why the work on a task stopped before the task ended, through no fault of the
/// tool: the task fails, and the client may call the tool again (on another node).
/// Every such failure is written with [`Engine::fail_interrupted`], which takes its
/// error from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interrupted {
    /// A drain's grace period ran out ([`TasksLayer::drain`](crate::TasksLayer::drain)).
    ShuttingDown,
    /// The node running it stopped renewing its worker lease, or lost it: another
    /// node claimed the lease and fails what it held.
    WorkerLost,
}

impl Interrupted {
    /// The `reason` in the error's `data`.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Interrupted::ShuttingDown => "shutting_down",
            Interrupted::WorkerLost => "worker_lost",
        }
    }

    /// The task's error message, and its status message.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Interrupted::ShuttingDown => "Server shut down before the task finished",
            Interrupted::WorkerLost => {
                "Task worker lost: the node running it stopped or lost its lease"
            }
        }
    }

    /// The error the task fails with: -32603, [`message`](Self::message), and
    /// `data` `{"reason": …, "retryable": true}` ([`retryable`]).
    pub(crate) fn error(self) -> ErrorObject {
        ErrorObject::new(RpcError::INTERNAL_ERROR, self.message())
            .with_data(retryable(self.reason()))
    }
}

/// The `error.data` of a call that may be sent again, to this node or another:
/// `{"reason": reason, "retryable": true}` (a task [`Interrupted`], a call refused
/// while the layer drains).
pub(crate) fn retryable(reason: &str) -> serde_json::Value {
    serde_json::json!({"reason": reason, "retryable": true})
}

/// The failure of a task with -32603, `message` its error and its status message.
fn internal_failure(message: &str) -> Transition {
    Transition::Fail {
        error: ErrorObject::new(RpcError::INTERNAL_ERROR, message),
        message: Some(message.to_owned()),
    }
}

/// The message of the refusal of a task to a request without a principal: it names
/// the setting that allows anonymous tasks.
pub(crate) const PRINCIPAL_REQUIRED: &str =
    "Tasks require an authenticated principal (anonymous tasks need with_anonymous_tasks())";

/// The message of a task failed because its create was not confirmed by the store.
pub(crate) const CREATE_UNCONFIRMED: &str =
    "Task creation not confirmed: the store failed while storing it";

/// The pauses before a read that failed is tried again: from 50 ms, doubling up
/// to 5 s, with jitter.
pub(super) const RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));

/// How many tasks one re-read of other nodes' changes asks the store for at once.
pub(super) const RECHECK_BATCH: usize = 1_000;

/// How long a background re-read after a failed write keeps trying.
const RECONCILE_FOR: Duration = Duration::from_secs(120);

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
