//! The registry of one layer's listen streams: per task, the streams that named it
//! and may see it, each with a mailbox that keeps only the newest state per task.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Waker;

use bytes::Bytes;

use crate::observe::{self, Live};
use crate::task::{Principal, TaskId, TaskJson, TaskRecord};

/// Every open listen stream of one layer, indexed by the task ids it was agreed.
#[derive(Default)]
pub(crate) struct Registry {
    state: Mutex<RegistryState>,
}

#[derive(Default)]
struct RegistryState {
    next_id: u64,
    streams: HashMap<u64, Arc<Slot>>,
    by_task: HashMap<TaskId, HashMap<u64, Arc<Slot>>>,
    /// Open streams per principal (the anonymous callers together under `None`).
    per_principal: HashMap<Option<Principal>, usize>,
}

/// Which cap refused a new stream in [`Registry::try_register`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamLimit {
    /// The principal has the most streams one principal may hold.
    PerOwner,
    /// The layer has the most streams it may hold.
    Total,
}

impl StreamLimit {
    /// The name sent in `error.data.limit`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StreamLimit::PerOwner => "listen_per_owner",
            StreamLimit::Total => "listen_total",
        }
    }
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, RegistryState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a stream for `principal` naming `tasks`, unless the layer already holds
    /// `max_total` streams or the principal `max_per_principal`; it stays until the
    /// returned guard is dropped (or closed).
    pub(crate) fn try_register(
        self: &Arc<Self>,
        principal: Option<Principal>,
        tasks: &[TaskId],
        max_per_principal: usize,
        max_total: usize,
    ) -> Result<Subscription, StreamLimit> {
        self.insert(principal, tasks, Some((max_per_principal, max_total)))
    }

    /// Adds a stream for `principal` naming `tasks` without any cap; it stays until
    /// the returned guard is dropped.
    #[cfg(test)]
    pub(crate) fn register(
        self: &Arc<Self>,
        principal: Option<Principal>,
        tasks: &[TaskId],
    ) -> Subscription {
        match self.insert(principal, tasks, None) {
            Ok(subscription) => subscription,
            Err(_) => unreachable!("no cap"),
        }
    }

    fn insert(
        self: &Arc<Self>,
        principal: Option<Principal>,
        tasks: &[TaskId],
        caps: Option<(usize, usize)>,
    ) -> Result<Subscription, StreamLimit> {
        let slot = Arc::new(Slot {
            principal,
            state: Mutex::new(SlotState {
                tasks: tasks.iter().map(|t| (*t, TaskSlot::default())).collect(),
                order: VecDeque::new(),
                waker: None,
                closed: false,
                ending: false,
            }),
        });
        // Checked and taken under one lock, so concurrent listens never overshoot.
        let mut state = self.lock();
        let held = state
            .per_principal
            .get(&slot.principal)
            .copied()
            .unwrap_or(0);
        if let Some((max_per_principal, max_total)) = caps {
            if state.streams.len() >= max_total {
                return Err(StreamLimit::Total);
            }
            if held >= max_per_principal {
                return Err(StreamLimit::PerOwner);
            }
        }
        state.per_principal.insert(slot.principal.clone(), held + 1);
        let id = state.next_id;
        state.next_id += 1;
        state.streams.insert(id, slot.clone());
        Live::ListenStreams.up();
        for task in tasks {
            state
                .by_task
                .entry(*task)
                .or_default()
                .insert(id, slot.clone());
        }
        Ok(Subscription {
            registry: self.clone(),
            id,
            tasks: tasks.to_vec(),
            slot,
        })
    }

    /// Hands a changed task to every stream that named it and whose principal owns
    /// it. Never waits on a reader.
    pub(crate) fn deliver(&self, record: &TaskRecord) {
        let state = self.lock();
        let Some(streams) = state.by_task.get(&record.id) else {
            return;
        };
        let mut shared: Option<Arc<Change>> = None;
        for slot in streams.values() {
            if slot.principal.as_ref() != record.owner.as_ref() {
                continue;
            }
            let change = shared.get_or_insert_with(|| Arc::new(Change::new(record.clone())));
            slot.offer(change);
        }
    }

    /// Asks every open stream to end (a server-side shutdown): each writes what it
    /// has pending, then the listen result, then closes.
    pub(crate) fn end_all(&self) {
        let slots: Vec<Arc<Slot>> = self.lock().streams.values().cloned().collect();
        for slot in slots {
            let waker = {
                let mut state = slot.lock();
                state.ending = true;
                state.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    pub(crate) fn stream_count(&self) -> usize {
        self.lock().streams.len()
    }

    /// The ids some open stream named: what a re-check after missed changes re-reads.
    pub(crate) fn task_ids(&self) -> Vec<TaskId> {
        self.lock().by_task.keys().copied().collect()
    }

    pub(crate) fn pending_counts(&self) -> Vec<usize> {
        let slots: Vec<Arc<Slot>> = self.lock().streams.values().cloned().collect();
        slots.iter().map(|s| s.lock().order.len()).collect()
    }

    /// Removes a stream and its index entries.
    fn remove(&self, id: u64, tasks: &[TaskId]) {
        let mut state = self.lock();
        if let Some(slot) = state.streams.remove(&id) {
            Live::ListenStreams.down();
            if let Some(held) = state.per_principal.get_mut(&slot.principal) {
                *held = held.saturating_sub(1);
                if *held == 0 {
                    state.per_principal.remove(&slot.principal);
                }
            }
        }
        state.unindex(id, tasks);
    }

    /// Removes some tasks of a stream from the index.
    fn remove_tasks(&self, id: u64, tasks: &[TaskId]) {
        self.lock().unindex(id, tasks);
    }
}

impl RegistryState {
    fn unindex(&mut self, id: u64, tasks: &[TaskId]) {
        for task in tasks {
            if let Some(streams) = self.by_task.get_mut(task) {
                streams.remove(&id);
                if streams.is_empty() {
                    self.by_task.remove(task);
                }
            }
        }
    }
}

/// One changed task, shared by every stream it goes to.
pub(crate) struct Change {
    pub(crate) record: TaskRecord,
    /// The DetailedTask JSON, written by the first stream that needs it.
    detailed: OnceLock<Option<Bytes>>,
}

impl Change {
    fn new(record: TaskRecord) -> Self {
        Change {
            record,
            detailed: OnceLock::new(),
        }
    }

    pub(crate) fn detailed(&self) -> Option<&Bytes> {
        self.detailed
            .get_or_init(
                || match serde_json::to_vec(&TaskJson::detailed(&self.record)) {
                    Ok(json) => Some(Bytes::from(json)),
                    Err(e) => {
                        tracing::error!(error = %e, "could not serialize a task notification");
                        None
                    }
                },
            )
            .as_ref()
    }
}

/// One stream's mailbox: per named task, at most one state waiting to be written.
struct Slot {
    principal: Option<Principal>,
    state: Mutex<SlotState>,
}

struct SlotState {
    tasks: HashMap<TaskId, TaskSlot>,
    /// Tasks with a pending state, oldest first.
    order: VecDeque<TaskId>,
    waker: Option<Waker>,
    closed: bool,
    /// The server is shutting down: the stream ends once its pending states are out.
    ending: bool,
}

#[derive(Default)]
struct TaskSlot {
    pending: Option<Arc<Change>>,
    /// The newest revision queued or written, so that a late, older state is
    /// never written after a newer one.
    revision: Option<u64>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn offer(&self, change: &Arc<Change>) {
        let record = &change.record;
        let waker = {
            let mut state = self.lock();
            let state = &mut *state;
            if state.closed {
                return;
            }
            let Some(task) = state.tasks.get_mut(&record.id) else {
                return;
            };
            if task.revision.is_some_and(|r| record.revision <= r) {
                return;
            }
            task.revision = Some(record.revision);
            if task.pending.replace(change.clone()).is_none() {
                state.order.push_back(record.id);
            } else {
                observe::notification_coalesced();
            }
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Takes every pending state, oldest first; with none, keeps `waker` to be woken
    /// by the next one.
    fn take_or_wait(&self, waker: &Waker) -> Option<Vec<Arc<Change>>> {
        let mut state = self.lock();
        let state = &mut *state;
        if state.order.is_empty() {
            match &state.waker {
                Some(w) if w.will_wake(waker) => {}
                _ => state.waker = Some(waker.clone()),
            }
            return None;
        }
        let mut out = Vec::with_capacity(state.order.len());
        while let Some(task) = state.order.pop_front() {
            if let Some(record) = state.tasks.get_mut(&task).and_then(|t| t.pending.take()) {
                out.push(record);
            }
        }
        Some(out)
    }
}

/// A registered stream; dropping it removes the stream from the registry.
pub(crate) struct Subscription {
    registry: Arc<Registry>,
    id: u64,
    tasks: Vec<TaskId>,
    slot: Arc<Slot>,
}

impl Subscription {
    /// Keeps only `tasks` (the agreed ids), dropping any other id and its pending
    /// state.
    pub(crate) fn retain(&mut self, tasks: &[TaskId]) {
        let keep: HashSet<&TaskId> = tasks.iter().collect();
        let dropped: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|t| !keep.contains(t))
            .copied()
            .collect();
        if dropped.is_empty() {
            return;
        }
        self.registry.remove_tasks(self.id, &dropped);
        self.tasks.retain(|t| keep.contains(t));
        let mut state = self.slot.lock();
        for task in &dropped {
            state.tasks.remove(task);
        }
        let state = &mut *state;
        let tasks = &state.tasks;
        state.order.retain(|t| tasks.contains_key(t));
    }

    /// Queues `record` for this stream alone (its snapshot of a task), unless a state
    /// as new or newer was queued or written already.
    pub(crate) fn offer(&self, record: TaskRecord) {
        self.slot.offer(&Arc::new(Change::new(record)));
    }

    /// The pending states of this stream's tasks, oldest first, or `None` after
    /// arranging for `waker` to be woken by the next one.
    pub(crate) fn take_or_wait(&self, waker: &Waker) -> Option<Vec<Arc<Change>>> {
        self.slot.take_or_wait(waker)
    }

    /// Whether the server asked this stream to end (see [`Registry::end_all`]).
    pub(crate) fn is_ending(&self) -> bool {
        self.slot.lock().ending
    }

    /// The registry this stream is in.
    #[cfg(test)]
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Ends the stream: nothing more is delivered to it.
    pub(crate) fn close(&mut self) {
        self.slot.lock().closed = true;
        self.registry.remove(self.id, &self.tasks);
        self.tasks.clear();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.registry.remove(self.id, &self.tasks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Timestamp;
    use std::task::Wake;

    struct Count(std::sync::atomic::AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn record(id: TaskId, owner: Option<&str>, revision: u64, message: &str) -> TaskRecord {
        let mut r = TaskRecord::new(id, owner.map(Principal::from), Timestamp::from_millis(1));
        r.revision = revision;
        r.status_message = Some(message.into());
        r
    }

    #[test]
    fn a_stream_keeps_only_the_newest_state_per_task() {
        let registry = Arc::new(Registry::default());
        let (a, b) = (TaskId::random(), TaskId::random());
        let sub = registry.register(None, &[a, b]);
        for revision in 1..=10_000 {
            registry.deliver(&record(a, None, revision, &revision.to_string()));
            registry.deliver(&record(b, None, revision, "b"));
            assert!(registry.pending_counts().iter().all(|&n| n <= 2));
        }
        // A late, older state never overtakes a newer one.
        registry.deliver(&record(a, None, 3, "stale"));
        let counter = Arc::new(Count(0.into()));
        let waker = Waker::from(counter.clone());
        let taken = sub.slot.take_or_wait(&waker).unwrap();
        assert_eq!(taken.len(), 2);
        assert_eq!(taken[0].record.id, a);
        assert_eq!(taken[0].record.status_message.as_deref(), Some("10000"));
        assert!(sub.slot.take_or_wait(&waker).is_none());
        registry.deliver(&record(a, None, 10_000, "again"));
        assert!(
            sub.slot.take_or_wait(&waker).is_none(),
            "same revision twice"
        );
        registry.deliver(&record(b, None, 10_001, "b"));
        assert_eq!(counter.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn delivery_follows_ownership() {
        let registry = Arc::new(Registry::default());
        let task = TaskId::random();
        let alice = registry.register(Some(Principal::from("alice")), &[task]);
        let bob = registry.register(Some(Principal::from("bob")), &[task]);
        let anonymous = registry.register(None, &[task]);
        let waker = Waker::noop();
        registry.deliver(&record(task, Some("alice"), 1, "x"));
        assert_eq!(alice.slot.take_or_wait(waker).map(|v| v.len()), Some(1));
        assert!(bob.slot.take_or_wait(waker).is_none());
        assert!(anonymous.slot.take_or_wait(waker).is_none());
        registry.deliver(&record(task, None, 2, "x"));
        assert!(alice.slot.take_or_wait(waker).is_none());
        assert_eq!(anonymous.slot.take_or_wait(waker).map(|v| v.len()), Some(1));
    }

    #[test]
    fn stream_caps_hold_per_principal_and_in_total_and_free_on_close() {
        let registry = Arc::new(Registry::default());
        let alice = || Some(Principal::from("alice"));
        let a1 = registry.try_register(alice(), &[], 2, 3).unwrap();
        let mut a2 = registry.try_register(alice(), &[], 2, 3).unwrap();
        assert_eq!(
            registry.try_register(alice(), &[], 2, 3).err(),
            Some(StreamLimit::PerOwner)
        );
        let anonymous = registry.try_register(None, &[], 2, 3).unwrap();
        assert_eq!(
            registry.try_register(None, &[], 2, 3).err(),
            Some(StreamLimit::Total)
        );
        a2.close();
        let a3 = registry.try_register(alice(), &[], 2, 3).unwrap();
        drop(a2); // closed before: freed once only
        assert_eq!(
            registry.try_register(alice(), &[], 2, 4).err(),
            Some(StreamLimit::PerOwner)
        );
        drop((a1, a3, anonymous));
        assert_eq!(registry.stream_count(), 0);
        assert!(registry.lock().per_principal.is_empty());
    }

    #[test]
    fn dropping_and_narrowing_deregister() {
        let registry = Arc::new(Registry::default());
        let (kept, dropped) = (TaskId::random(), TaskId::random());
        let mut sub = registry.register(None, &[kept, dropped]);
        registry.deliver(&record(dropped, None, 1, "x"));
        sub.retain(&[kept]);
        assert_eq!(registry.pending_counts(), vec![0]);
        assert!(!registry.lock().by_task.contains_key(&dropped));
        registry.deliver(&record(dropped, None, 2, "x"));
        assert_eq!(registry.pending_counts(), vec![0]);
        assert_eq!(registry.stream_count(), 1);
        drop(sub);
        assert_eq!(registry.stream_count(), 0);
        assert!(registry.lock().by_task.is_empty());
    }
}
