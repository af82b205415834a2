//! The registry of one layer's listen streams: per task, the streams that named it
//! and may see it, each with a mailbox that keeps only the newest state per task.
//!
//! A change is serialized once and shared by every stream that names it; what the
//! streams hold (pending or being written) is counted in bytes per principal and in
//! total, and a stream whose change would pass a bound is ended instead of grown.
//! A new stream's snapshot is read within a reservation of what its principal's
//! streams may still take, so concurrent listens never read more than the bounds
//! between them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;

use bytes::Bytes;

use super::budget::{Budget, Charge};
pub(crate) use super::budget::{ByteLimit, Reservation};
use crate::observe::{self, Live};
use crate::task::{Principal, TaskId, TaskJson, TaskRecord};

/// Every open listen stream of one layer, indexed by the task ids it was agreed.
#[derive(Default)]
pub(crate) struct Registry {
    state: Mutex<RegistryState>,
    /// The bytes the streams' changes hold.
    budget: Arc<Budget>,
}

#[derive(Default)]
struct RegistryState {
    next_id: u64,
    streams: HashMap<u64, Arc<Slot>>,
    by_task: HashMap<TaskId, HashMap<u64, Arc<Slot>>>,
    /// Open streams per principal (the anonymous callers together under `None`).
    per_principal: HashMap<Option<Principal>, usize>,
    /// The newest change of each named task still held somewhere, so that a
    /// snapshot of the same state shares it instead of holding a copy.
    live: HashMap<TaskId, Weak<Change>>,
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

    /// Sets the byte bounds of what the streams hold: per principal, and in all.
    pub(crate) fn set_byte_bounds(&self, per_owner: usize, total: usize) {
        self.budget.set_bounds(per_owner, total);
    }

    /// The bytes the streams hold now plus those reserved for snapshot reads in
    /// progress, and the most that has been at once.
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn held_bytes(&self) -> (usize, usize) {
        self.budget.held_and_peak()
    }

    /// Reserves room for the snapshot read of a new stream of `owner`'s: what its
    /// streams may still take under both bounds, once no other read's reservation
    /// takes part of it (waiting until then).
    pub(crate) async fn reserve(&self, owner: &Option<Principal>) -> Reservation {
        self.budget.reserve(owner).await
    }

    /// Hands a changed task to every stream that named it and whose principal owns
    /// it. Never waits on a reader: a stream whose principal (or the layer) would
    /// hold more bytes than its bound with this change is ended instead.
    pub(crate) fn deliver(&self, record: &TaskRecord) {
        let slots: Vec<Arc<Slot>> = {
            let state = self.lock();
            let Some(streams) = state.by_task.get(&record.id) else {
                return;
            };
            streams
                .values()
                .filter(|slot| slot.principal.as_ref() == record.owner.as_ref())
                .cloned()
                .collect()
        };
        if slots.is_empty() {
            return;
        }
        // The new state replaces the older ones pending: they no longer count.
        let replaced: Vec<Arc<Change>> = slots
            .iter()
            .filter_map(|slot| slot.take_older(&record.id, record.revision))
            .collect();
        drop(replaced);
        let change = match self.change(record, None) {
            Err(ByteLimit::Total) => self.change_after_ending_the_largest(record),
            other => other,
        };
        match change {
            Ok(Some(change)) => {
                for slot in &slots {
                    slot.offer(&change);
                }
            }
            Ok(None) => {}
            Err(limit) => {
                for slot in &slots {
                    slot.shed(limit);
                }
            }
        }
    }

    /// `record`'s change once the layer's total bound made room for it
    /// ([`make_room`](Self::make_room)), and tried again.
    fn change_after_ending_the_largest(
        &self,
        record: &TaskRecord,
    ) -> Result<Option<Arc<Change>>, ByteLimit> {
        if !self.make_room(&record.owner) {
            return Err(ByteLimit::Total);
        }
        self.change(record, None)
    }

    /// Makes room under the layer's total bound for `owner`: the open streams of
    /// the principal holding the most bytes, among those holding more than `owner`
    /// does, are ended, dropping what they hold queued. So the principal holding
    /// the most pays for the total, not one whose small change (or new listen)
    /// came last. `false` when no such principal has an open stream left.
    pub(super) fn make_room(&self, owner: &Option<Principal>) -> bool {
        for larger in self.budget.larger_than(owner) {
            let theirs: Vec<Arc<Slot>> = self
                .lock()
                .streams
                .values()
                .filter(|slot| slot.principal == larger)
                .cloned()
                .collect();
            let mut ended = false;
            for slot in &theirs {
                ended |= slot.shed(ByteLimit::Total);
            }
            if ended {
                return true;
            }
        }
        false
    }

    /// Queues `records` for `subscription` alone (its snapshot), each sharing the
    /// change already held for the same state, and counted out of the `reservation`
    /// they were read within; refused, with nothing queued, when the bytes would
    /// pass a bound.
    pub(crate) fn snapshot(
        &self,
        subscription: &Subscription,
        records: Vec<TaskRecord>,
        mut reservation: Option<Reservation>,
    ) -> Result<(), ByteLimit> {
        let mut changes = Vec::with_capacity(records.len());
        for record in records {
            if let Some(change) = self.change(&record, reservation.as_mut())? {
                changes.push(change);
            }
        }
        drop(reservation);
        for change in &changes {
            subscription.slot.offer(change);
        }
        Ok(())
    }

    /// The shared change for `record`: the one held already for this state, or a
    /// new one, serialized once and counted against the owner's bounds (out of
    /// `reservation`, for a snapshot). `None` if it cannot be serialized.
    fn change(
        &self,
        record: &TaskRecord,
        reservation: Option<&mut Reservation>,
    ) -> Result<Option<Arc<Change>>, ByteLimit> {
        let held = self
            .lock()
            .live
            .get(&record.id)
            .and_then(Weak::upgrade)
            .filter(|c| c.revision == record.revision);
        if let Some(change) = held {
            return Ok(Some(change));
        }
        let Some(tail) = Change::tail(record) else {
            return Ok(None);
        };
        let charge = self.budget.charge(&record.owner, tail.len(), reservation)?;
        let change = Arc::new(Change {
            id: record.id,
            revision: record.revision,
            tail,
            _charge: charge,
        });
        let mut state = self.lock();
        if state.by_task.contains_key(&record.id) {
            let newer = state
                .live
                .get(&record.id)
                .and_then(Weak::upgrade)
                .is_some_and(|c| c.revision >= record.revision);
            if !newer {
                state.live.insert(record.id, Arc::downgrade(&change));
            }
        }
        Ok(Some(change))
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

    /// Whether some open stream names `task`.
    pub(crate) fn names(&self, task: &TaskId) -> bool {
        self.lock().by_task.contains_key(task)
    }

    /// The ids some open stream named: what a re-check after missed changes re-reads.
    pub(crate) fn task_ids(&self) -> Vec<TaskId> {
        self.lock().by_task.keys().copied().collect()
    }

    #[cfg(any(test, feature = "test-util"))]
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
                    self.live.remove(task);
                }
            }
        }
    }
}

/// One changed task, serialized once and shared by every stream it goes to; its
/// bytes count against its owner's bounds until the last stream has written it.
pub(crate) struct Change {
    id: TaskId,
    revision: u64,
    /// The task's DetailedTask JSON without its opening brace, then `}\n\n`: what
    /// follows a stream's notification prefix.
    tail: Bytes,
    _charge: Charge,
}

/// A change's bytes as a frame: the frame keeps the change (and its count) alive
/// until the connection has written it.
struct Written(Arc<Change>);

impl AsRef<[u8]> for Written {
    fn as_ref(&self) -> &[u8] {
        &self.0.tail
    }
}

impl Change {
    fn tail(record: &TaskRecord) -> Option<Bytes> {
        match serde_json::to_vec(&TaskJson::detailed(record)) {
            Ok(mut json) if json.first() == Some(&b'{') => {
                json.extend_from_slice(b"}\n\n");
                Some(Bytes::from(json).slice(1..))
            }
            Ok(_) => None,
            Err(e) => {
                tracing::error!(error = %e, "could not serialize a task notification");
                None
            }
        }
    }

    /// The end of this change's notification, sharing the change's bytes.
    pub(crate) fn frame(self: &Arc<Self>) -> Bytes {
        Bytes::from_owner(Written(self.clone()))
    }

    #[cfg(test)]
    pub(crate) fn json(&self) -> serde_json::Value {
        let mut text = b"{".to_vec();
        text.extend_from_slice(self.tail.strip_suffix(b"}\n\n").unwrap_or(&self.tail));
        serde_json::from_slice(&text).expect("a change is JSON")
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
    /// In the stream's order already (a replaced state keeps its place).
    queued: bool,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn offer(&self, change: &Arc<Change>) {
        let (waker, replaced) = {
            let mut state = self.lock();
            let state = &mut *state;
            if state.closed {
                return;
            }
            let Some(task) = state.tasks.get_mut(&change.id) else {
                return;
            };
            if task.revision.is_some_and(|r| change.revision <= r) {
                return;
            }
            task.revision = Some(change.revision);
            let replaced = task.pending.replace(change.clone());
            if task.queued {
                observe::notification_coalesced();
            } else {
                task.queued = true;
                state.order.push_back(change.id);
            }
            (state.waker.take(), replaced)
        };
        drop(replaced);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Takes the pending state of `task` if `revision` is newer: about to be
    /// replaced.
    fn take_older(&self, task: &TaskId, revision: u64) -> Option<Arc<Change>> {
        let mut state = self.lock();
        let task = state.tasks.get_mut(task)?;
        if task.revision.is_some_and(|r| revision <= r) {
            return None;
        }
        task.pending.take()
    }

    /// Ends the stream because its reader is too far behind: everything pending
    /// is dropped, nothing more is queued, and the stream writes the listen result
    /// next. `false` when it had ended already.
    fn shed(&self, limit: ByteLimit) -> bool {
        let (waker, dropped) = {
            let mut state = self.lock();
            if state.closed {
                return false;
            }
            state.closed = true;
            state.ending = true;
            state.order.clear();
            let dropped: Vec<Arc<Change>> = state
                .tasks
                .values_mut()
                .filter_map(|t| {
                    t.queued = false;
                    t.pending.take()
                })
                .collect();
            (state.waker.take(), dropped)
        };
        drop(dropped);
        tracing::warn!(
            limit = limit.as_str(),
            "listen stream ended: its reader fell behind by more bytes than the bound allows"
        );
        crate::observe::listen_refused(limit.as_str());
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    /// Takes every pending state, oldest first; with none, keeps `waker` to be woken
    /// by the next one.
    fn take_or_wait(&self, waker: &Waker) -> Option<Vec<Arc<Change>>> {
        let mut state = self.lock();
        let state = &mut *state;
        let mut out = Vec::with_capacity(state.order.len());
        while let Some(task) = state.order.pop_front() {
            if let Some(task) = state.tasks.get_mut(&task) {
                task.queued = false;
                out.extend(task.pending.take());
            }
        }
        if out.is_empty() {
            match &state.waker {
                Some(w) if w.will_wake(waker) => {}
                _ => state.waker = Some(waker.clone()),
            }
            return None;
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

    /// Queues `records` for this stream alone (its snapshot), unless a state as new
    /// or newer was queued already, counting them out of the `reservation` they were
    /// read within; refused, with nothing queued, when their bytes would pass a
    /// bound.
    pub(crate) fn snapshot(
        &self,
        records: Vec<TaskRecord>,
        reservation: Option<Reservation>,
    ) -> Result<(), ByteLimit> {
        self.registry.snapshot(self, records, reservation)
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
    use std::task::{Poll, Wake};

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
        assert_eq!(taken[0].id, a);
        assert_eq!(taken[0].json()["statusMessage"], "10000");
        assert!(sub.slot.take_or_wait(&waker).is_none());
        registry.deliver(&record(a, None, 10_000, "again"));
        assert!(
            sub.slot.take_or_wait(&waker).is_none(),
            "same revision twice"
        );
        registry.deliver(&record(b, None, 10_001, "b"));
        assert_eq!(counter.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    fn big(id: TaskId, owner: &str, revision: u64, bytes: usize) -> TaskRecord {
        record(id, Some(owner), revision, &"x".repeat(bytes))
    }

    #[test]
    fn a_change_is_counted_once_however_many_streams_hold_it() {
        let registry = Arc::new(Registry::default());
        registry.set_byte_bounds(10_000, 100_000);
        let task = TaskId::random();
        let streams: Vec<Subscription> = (0..16)
            .map(|_| registry.register(Some(Principal::from("a")), &[task]))
            .collect();
        for stream in &streams {
            stream
                .snapshot(vec![big(task, "a", 1, 4_000)], None)
                .unwrap();
        }
        let (held, _) = registry.held_bytes();
        assert!((4_000..5_000).contains(&held), "{held}");
        registry.deliver(&big(task, "a", 2, 6_000));
        // The older state was replaced everywhere before the newer one was counted.
        let (held, peak) = registry.held_bytes();
        assert!((6_000..7_000).contains(&held), "{held}");
        assert!(peak < 10_000, "{peak}");
        // A frame keeps its change counted until the connection drops it.
        let taken: Vec<_> = streams
            .iter()
            .map(|s| s.take_or_wait(Waker::noop()).unwrap())
            .collect();
        let frame = taken[0][0].frame();
        drop(taken);
        assert_eq!(registry.held_bytes().0, held);
        assert!(frame.ends_with(b"}}\n\n"));
        drop(frame);
        assert_eq!(registry.held_bytes().0, 0);
    }

    #[test]
    fn a_stream_that_would_pass_the_bound_is_ended_not_grown() {
        let registry = Arc::new(Registry::default());
        registry.set_byte_bounds(10_000, 100_000);
        let (a, b, c) = (TaskId::random(), TaskId::random(), TaskId::random());
        let greedy = registry.register(Some(Principal::from("g")), &[a, b]);
        let other = registry.register(Some(Principal::from("o")), &[c]);
        registry.deliver(&big(a, "g", 1, 6_000));
        registry.deliver(&big(c, "o", 1, 6_000));
        assert!(!greedy.is_ending());
        registry.deliver(&big(b, "g", 1, 6_000));
        // Ended: what it held is dropped, nothing more is queued.
        assert!(greedy.is_ending());
        assert!(greedy.take_or_wait(Waker::noop()).is_none());
        registry.deliver(&big(a, "g", 2, 10));
        assert!(greedy.take_or_wait(Waker::noop()).is_none());
        let (held, peak) = registry.held_bytes();
        assert!(
            (6_000..7_000).contains(&held),
            "only the other principal's: {held}"
        );
        assert!(peak < 16_000, "{peak}");
        // The other principal's stream is untouched.
        assert!(!other.is_ending());
        assert_eq!(other.take_or_wait(Waker::noop()).map(|v| v.len()), Some(1));
        // A snapshot that would pass the bound is refused, with nothing queued.
        let late = registry.register(Some(Principal::from("o")), &[a, c]);
        let refused = late.snapshot(vec![big(a, "o", 1, 6_000), big(c, "o", 2, 6_000)], None);
        assert_eq!(refused.err(), Some(ByteLimit::PerOwner));
        assert!(late.take_or_wait(Waker::noop()).is_none());
        assert_eq!(registry.held_bytes().0, 0);
        registry.set_byte_bounds(10_000, 5_000);
        assert_eq!(
            late.snapshot(vec![big(a, "o", 1, 6_000)], None).err(),
            Some(ByteLimit::Total)
        );
    }

    /// At the layer's total bound the principal holding the most pays, not the one
    /// whose small change arrived last: the largest holder's streams are ended, which
    /// frees what they held, and the small change is delivered. A change of the
    /// largest holder's own that would pass the total ends its own stream, as
    /// before, and one that still does not fit once the largest holder's queued
    /// bytes are gone (they sit in frames its connection holds) ends both.
    #[test]
    fn at_the_total_bound_the_largest_holder_is_ended_not_a_small_one() {
        let registry = Arc::new(Registry::default());
        registry.set_byte_bounds(10_000, 15_000);
        let ids: Vec<TaskId> = (0..6).map(|_| TaskId::random()).collect();
        let greedy = registry.register(Some(Principal::from("g")), &ids[0..2]);
        let middle = registry.register(Some(Principal::from("m")), &ids[2..3]);
        let small = registry.register(Some(Principal::from("s")), &ids[3..4]);
        registry.deliver(&big(ids[0], "g", 1, 5_000));
        registry.deliver(&big(ids[1], "g", 1, 4_000));
        registry.deliver(&big(ids[2], "m", 1, 4_000));
        // 13 000 held of 15 000: the small principal's 3 000 would pass the total.
        registry.deliver(&big(ids[3], "s", 1, 3_000));
        assert!(greedy.is_ending(), "the largest holder is ended");
        assert!(!middle.is_ending() && !small.is_ending());
        let (held, peak) = registry.held_bytes();
        assert!(
            (7_000..8_000).contains(&held),
            "the middle's and the small's: {held}"
        );
        assert!(peak <= 15_000, "the total was never passed: {peak}");
        assert_eq!(small.take_or_wait(Waker::noop()).map(|v| v.len()), Some(1));

        // The largest holder's own change ends its own stream only.
        let registry = Arc::new(Registry::default());
        registry.set_byte_bounds(10_000, 15_000);
        let greedy = registry.register(Some(Principal::from("g")), &ids[0..2]);
        let small = registry.register(Some(Principal::from("s")), &ids[3..4]);
        registry.deliver(&big(ids[0], "g", 1, 8_000));
        registry.deliver(&big(ids[3], "s", 1, 5_000));
        registry.deliver(&big(ids[1], "g", 1, 2_500));
        assert!(greedy.is_ending());
        assert!(!small.is_ending());

        // Bytes already taken by the largest holder's connection are not freed by
        // ending it: the small change still does not fit, and both end.
        let registry = Arc::new(Registry::default());
        registry.set_byte_bounds(10_000, 15_000);
        let greedy = registry.register(Some(Principal::from("g")), &ids[0..2]);
        let small = registry.register(Some(Principal::from("s")), &ids[3..5]);
        registry.deliver(&big(ids[0], "g", 1, 9_000));
        let in_flight = greedy.take_or_wait(Waker::noop()).unwrap();
        registry.deliver(&big(ids[3], "s", 1, 4_000));
        registry.deliver(&big(ids[4], "s", 1, 3_000));
        assert!(greedy.is_ending() && small.is_ending());
        assert!(registry.held_bytes().1 <= 15_000);
        drop(in_flight);
    }

    /// Polls `future` once, without a runtime.
    fn poll_once<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut std::task::Context::from_waker(Waker::noop()))
    }

    #[test]
    fn snapshot_reads_share_the_room_and_never_end_an_open_stream() {
        let registry = Arc::new(Registry::default());
        registry.set_byte_bounds(10_000, 15_000);
        let (g, o) = (Some(Principal::from("g")), Some(Principal::from("o")));
        let task = TaskId::random();
        let first = match poll_once(std::pin::pin!(registry.reserve(&g))) {
            Poll::Ready(r) => r,
            Poll::Pending => panic!("nothing else reserved: no wait"),
        };
        assert_eq!(
            (first.bytes(), first.limit()),
            (10_000, ByteLimit::PerOwner)
        );
        assert_eq!(registry.held_bytes(), (10_000, 10_000));
        // The principal's next read, and another principal's whose room in all the
        // first one takes part of, wait for it.
        let mut second = std::pin::pin!(registry.reserve(&g));
        let mut other = std::pin::pin!(registry.reserve(&o));
        assert!(poll_once(second.as_mut()).is_pending());
        assert!(poll_once(other.as_mut()).is_pending());
        // An open stream of the principal's still gets its change.
        let open = registry.register(g.clone(), &[task]);
        registry.deliver(&big(task, "g", 1, 4_000));
        assert!(!open.is_ending());
        let (held, _) = registry.held_bytes();
        assert!((14_000..15_000).contains(&held), "{held}");
        drop(first);
        let Poll::Ready(second) = poll_once(second.as_mut()) else {
            panic!("the first read is done");
        };
        assert!(
            (5_000..6_000).contains(&second.bytes()),
            "the room the open stream left: {}",
            second.bytes()
        );
        assert_eq!(second.limit(), ByteLimit::PerOwner);
        assert!(poll_once(other.as_mut()).is_pending(), "5 000 left in all");
        // A snapshot read within a reservation is counted out of it, not twice.
        let late = registry.register(g.clone(), &[TaskId::random()]);
        let id = late.tasks[0];
        late.snapshot(vec![big(id, "g", 1, 2_000)], Some(second))
            .unwrap();
        let (held, peak) = registry.held_bytes();
        assert!((6_000..7_000).contains(&held), "{held}");
        assert!(peak <= 15_000, "{peak}");
        let Poll::Ready(other) = poll_once(other.as_mut()) else {
            panic!("no read in progress");
        };
        assert_eq!(
            (other.bytes(), other.limit()),
            (15_000 - held, ByteLimit::Total)
        );
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
