//! What this node runs: work under a handle, `Auto` runners, explicit holds,
//! and whether a drain has begun or ended. The lease keeper reads it to renew (and
//! to give the lease up after a drain), the drain to wait for idle and then for the
//! keeper.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::wait::Waits;
use crate::observe::Live;
use crate::task::{TaskId, TaskRecord};

/// Holds gained and given up since a lease keeper last renewed.
#[derive(Debug, Default)]
pub(crate) struct LeaseLog {
    pub(crate) hold: HashSet<TaskId>,
    pub(crate) release: HashSet<TaskId>,
    /// How many hold changes this node had recorded when the log was taken: a
    /// store that has this log applied has every change up to this number.
    pub(crate) seq: u64,
}

impl LeaseLog {
    /// Applies `newer` (a log taken after this one) on top of it: what `newer`
    /// records of a task wins.
    pub(crate) fn merge_newer(&mut self, newer: LeaseLog) {
        for id in newer.hold {
            self.release.remove(&id);
            self.hold.insert(id);
        }
        for id in newer.release {
            self.hold.remove(&id);
            self.release.insert(id);
        }
        self.seq = self.seq.max(newer.seq);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.hold.is_empty() && self.release.is_empty()
    }

    /// Puts `earlier` (a log taken before this one was recorded) back under it: what
    /// this one records of a task wins.
    fn merge_earlier(&mut self, earlier: LeaseLog) {
        for id in earlier.hold {
            if !self.release.contains(&id) {
                self.hold.insert(id);
            }
        }
        for id in earlier.release {
            if !self.hold.contains(&id) {
                self.release.insert(id);
            }
        }
    }
}

/// How far the lease keeper has brought the store's copy of this node's holds:
/// every change numbered up to `recorded` is stored; the last renewal that tried to
/// store the changes up to `failed` failed.
#[derive(Debug, Default, Clone, Copy)]
struct LeaseProgress {
    recorded: u64,
    failed: u64,
}

/// This node's running work and holds, the registry the lease keeper renews and
/// the drain waits on.
#[derive(Default)]
pub(crate) struct NodeWork {
    /// Wake-ups for workers waiting on their tasks (and the work under handles).
    pub(super) waits: Arc<Waits>,
    /// The background runners of `TaskMode::Auto` tasks, aborted on cancellation.
    runners: Mutex<HashMap<TaskId, tokio::task::AbortHandle>>,
    /// Woken whenever the last work or runner of this process ends.
    idle: Notify,
    /// Tasks worked on elsewhere that this node holds a lease on (`Tasks::hold`).
    held: Mutex<HashSet<TaskId>>,
    /// Tasks being created here: held from before their create until their work
    /// is registered, so that no stored task is ever without a hold.
    creating: Mutex<HashSet<TaskId>>,
    /// What the lease keeper has stored of the hold changes.
    lease_progress: watch::Sender<LeaseProgress>,
    /// Woken when this node starts work on a task, for the lease keeper.
    lease_changes: Arc<Notify>,
    /// Set while a lease keeper runs: only then are hold changes recorded.
    leasing: AtomicBool,
    /// Holds gained and given up since the keeper last took them.
    lease_log: Mutex<LeaseLog>,
    /// Set by a drain: no new task is admitted.
    draining: AtomicBool,
    /// Set once a drain has ended (what was left of the work failed): the lease
    /// keeper gives this node's lease up once it guards no unfinished task.
    drain_ended: AtomicBool,
    /// Set by the lease keeper once it has acted on an ended drain (given the lease
    /// up, or kept it for work still unfinished): the drain waits for it.
    lease_settled: watch::Sender<bool>,
    /// The lease length of the running lease keeper, in milliseconds (0: none runs).
    lease_bound_ms: AtomicU64,
}

impl NodeWork {
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
        self.draining.store(true, Ordering::Release);
    }

    /// Whether a drain has begun: calls that would become tasks run synchronously.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
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
        leased.extend(
            self.creating
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter(),
        );
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

    /// Starts recording hold changes for a lease keeper that renews a lease of
    /// length `bound`.
    pub(crate) fn start_leasing(&self, bound: Duration) {
        let bound_ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX).max(1);
        self.lease_bound_ms.store(bound_ms, Ordering::Release);
        self.leasing.store(true, Ordering::Release);
    }

    /// Tells the lease keeper that the drain has ended, and waits until it has
    /// given this node's lease up (or kept it, for a task held and still
    /// unfinished): at most half the lease, the time a renewal in flight and the
    /// release each get. Returns at once when no keeper runs.
    pub(crate) async fn end_drain(&self) {
        self.drain_ended.store(true, Ordering::Release);
        let bound_ms = self.lease_bound_ms.load(Ordering::Acquire);
        if bound_ms == 0 {
            return;
        }
        let mut settled = self.lease_settled.subscribe();
        self.lease_changes.notify_one();
        let wait = Duration::from_millis(bound_ms) / 2;
        let _ = tokio::time::timeout(wait, settled.wait_for(|settled| *settled)).await;
    }

    /// The lease length of the running lease keeper (zero when none runs).
    pub(crate) fn lease_bound(&self) -> Duration {
        Duration::from_millis(self.lease_bound_ms.load(Ordering::Acquire))
    }

    /// Whether a drain has ended: the lease keeper gives the lease up once it can.
    pub(crate) fn is_drain_ended(&self) -> bool {
        self.drain_ended.load(Ordering::Acquire)
    }

    /// The lease keeper has acted on the ended drain.
    pub(crate) fn lease_settled(&self) {
        self.lease_settled.send_replace(true);
    }

    fn is_leasing(&self) -> bool {
        self.leasing.load(Ordering::Acquire)
    }

    /// Records that this node now holds `id`, and wakes the keeper. The number of
    /// the change, `None` when no keeper runs.
    fn note_hold(&self, id: TaskId) -> Option<u64> {
        if !self.is_leasing() {
            return None;
        }
        let mut log = self.lease_log.lock().unwrap_or_else(|p| p.into_inner());
        log.release.remove(&id);
        log.hold.insert(id);
        log.seq += 1;
        let seq = log.seq;
        drop(log);
        self.lease_changes.notify_one();
        Some(seq)
    }

    /// Holds `id` before its create reaches the store, until
    /// [`end_creating`](Self::end_creating): the number of the change the keeper
    /// must store before the task may be created, `None` when no keeper runs.
    pub(crate) fn hold_creating(&self, id: TaskId) -> Option<u64> {
        self.creating
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
        self.note_hold(id)
    }

    /// The create of `id` is over: its work holds it from now on, if it has any.
    pub(crate) fn end_creating(&self, id: &TaskId) {
        if self
            .creating
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
        {
            self.note_release(id);
        }
    }

    /// Whether a create waits for its hold to be stored.
    pub(crate) fn has_creating(&self) -> bool {
        !self
            .creating
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Waits until the keeper has stored the hold change numbered `seq`: `true`
    /// then; `false` once a renewal meant to store it failed, or after `within`.
    pub(crate) async fn hold_stored(&self, seq: u64, within: Duration) -> bool {
        let mut progress = self.lease_progress.subscribe();
        let settled = progress.wait_for(|p| p.recorded >= seq || p.failed >= seq);
        match tokio::time::timeout(within, settled).await {
            Ok(Ok(progress)) => progress.recorded >= seq,
            _ => false,
        }
    }

    /// The keeper stored every hold change up to `seq` (`stored`), or failed to.
    pub(crate) fn holds_settled(&self, seq: u64, stored: bool) {
        self.lease_progress.send_modify(|progress| {
            if stored {
                progress.recorded = progress.recorded.max(seq);
            } else {
                progress.failed = progress.failed.max(seq);
            }
        });
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
                .contains(id)
            || self
                .creating
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(id);
        if still_held {
            return;
        }
        let mut log = self.lease_log.lock().unwrap_or_else(|p| p.into_inner());
        log.hold.remove(id);
        log.release.insert(*id);
        log.seq += 1;
    }

    /// Stops this node's work on `id`, whose lease another node claimed: its `Auto`
    /// runner is aborted, its hold dropped, and its waiting worker re-reads the
    /// task (failed by the claim), so `ended()` resolves.
    pub(crate) fn stop_lost(&self, id: &TaskId) {
        if let Some(runner) = self.take_runner(id) {
            runner.abort();
        }
        self.release(id);
        self.waits.wake(id);
        self.wake_if_idle();
    }

    /// The hold changes recorded since the last call.
    pub(crate) fn take_lease_log(&self) -> LeaseLog {
        let mut log = self.lease_log.lock().unwrap_or_else(|p| p.into_inner());
        let seq = log.seq;
        std::mem::replace(
            &mut *log,
            LeaseLog {
                seq,
                ..LeaseLog::default()
            },
        )
    }

    /// Puts back the changes [`take_lease_log`](Self::take_lease_log) took and no
    /// renewal sent, under those recorded since.
    pub(crate) fn restore_lease_log(&self, earlier: LeaseLog) {
        self.lease_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .merge_earlier(earlier);
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

    /// A terminal task needs no runner: one ended by anything but its runner's own
    /// write (a cancel, a failure written by a node that claimed this node's lease)
    /// has its runner aborted. Called on every record this process writes or reads
    /// on a waiter's behalf, so an end seen by any path stops the local runner.
    pub(crate) fn stop_runner(&self, record: &TaskRecord) {
        if !record.status.is_terminal() {
            return;
        }
        if let Some(runner) = self.take_runner(&record.id)
            && tokio::task::try_id() != Some(runner.id())
        {
            runner.abort();
        }
        self.wake_if_idle();
    }

    /// Whether this node waits on, works on, runs or holds `id`.
    pub(super) fn knows(&self, id: &TaskId) -> bool {
        self.waits.knows(id)
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

    /// The tasks held for work elsewhere ([`hold`](Self::hold)).
    pub(super) fn held(&self) -> Vec<TaskId> {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect()
    }
}
