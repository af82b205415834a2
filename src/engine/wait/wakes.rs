//! Wake-ups for workers waiting on a task: a change counter and the waiting wakers
//! per task, and one timer per layer that wakes waiters when their task expires.
//! The same table records which tasks have work running in this process.
//!
//! A parked wait holds only a reference to these and the count it saw, so a
//! million parked workers cost a table entry each, not a `Notify`, a `Notified`
//! and a `Sleep` apiece.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

use crate::outage::SharedOutage;
use crate::task::{TaskId, Timestamp};

/// How often the expiry timer looks through every entry for expiries coming
/// within [`HORIZON`]; only those sit in its ordered index.
const SCAN_EVERY: Duration = Duration::from_secs(30);
/// How far ahead the index holds expiries: twice the scan interval, so every
/// expiry is indexed at least one interval before it comes.
const HORIZON: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub(crate) struct Waits {
    state: Mutex<State>,
    /// Wakes the expiry timer: an earlier expiry arrived, or the layer is gone.
    rearm: Arc<Notify>,
    /// The failed reads of every waiting worker, told as one outage.
    pub(crate) reads: SharedOutage,
    /// The waiters' reads that may be out at the store at once.
    pub(crate) read_slots: Semaphore,
}

/// How many waiting workers' reads go out to the store at once; the rest queue, in
/// the order they woke.
pub(crate) const READ_SLOTS: usize = 64;

impl Default for Waits {
    fn default() -> Self {
        Waits {
            state: Mutex::default(),
            rearm: Arc::default(),
            reads: SharedOutage::new("read a task a worker waits on"),
            read_slots: Semaphore::new(READ_SLOTS),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    tasks: HashMap<TaskId, Waiting>,
    /// How many entries have work running.
    works: usize,
    /// The expiries within [`HORIZON`] of the tasks someone waits on, soonest first.
    /// Farther ones wait in their entries for a scan to bring them in.
    expiry: BTreeSet<(Timestamp, TaskId)>,
    timer_started: bool,
}

/// One task's entry: 40 bytes, as there is one per parked worker.
#[derive(Debug, Default)]
struct Waiting {
    /// Goes up on every wake; a waiter that saw an older count re-reads its task.
    wakes: u32,
    /// The waits watching the task, plus [`WORK`] while work runs on it here, and
    /// [`INDEXED`] while its expiry is in the ordered index.
    holders: u32,
    /// The expiry the timer knows of, in Unix milliseconds (0: none).
    expires_ms: u64,
    wakers: Wakers,
}

/// The wakers of one task's waits: most tasks have one, kept inline.
#[derive(Debug, Default)]
enum Wakers {
    #[default]
    None,
    One(Waker),
    Many(Vec<Waker>),
}

impl Wakers {
    /// Keeps `waker` unless it is already kept.
    fn keep(&mut self, waker: &Waker) {
        match self {
            Wakers::None => *self = Wakers::One(waker.clone()),
            Wakers::One(kept) if kept.will_wake(waker) => {}
            Wakers::One(_) => {
                let Wakers::One(first) = std::mem::take(self) else {
                    unreachable!("matched One above");
                };
                *self = Wakers::Many(vec![first, waker.clone()]);
            }
            Wakers::Many(kept) => {
                if !kept.iter().any(|w| w.will_wake(waker)) {
                    kept.push(waker.clone());
                }
            }
        }
    }

    /// Takes every kept waker out, into `out`.
    fn take_into(&mut self, out: &mut Vec<Waker>) {
        match std::mem::take(self) {
            Wakers::None => {}
            Wakers::One(waker) => out.push(waker),
            Wakers::Many(mut wakers) => out.append(&mut wakers),
        }
    }
}

/// The bit of [`Waiting::holders`] that stands for work running on the task.
const WORK: u32 = 1 << 31;
/// The bit of [`Waiting::holders`] that says `expires_ms` is in [`State::expiry`].
const INDEXED: u32 = 1 << 30;
/// The bits of [`Waiting::holders`] that count something holding the entry.
const HELD: u32 = !INDEXED;

impl State {
    /// Drops the entry of `id` once nothing holds it.
    fn release(&mut self, id: &TaskId) {
        if self.tasks.get(id).is_some_and(|w| w.holders & HELD == 0)
            && let Some(waiting) = self.tasks.remove(id)
            && waiting.holders & INDEXED != 0
        {
            self.expiry
                .remove(&(Timestamp::from_millis(waiting.expires_ms), *id));
        }
    }
}

impl Waits {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts watching `id`; returns the current wake count.
    pub(crate) fn watch(&self, id: &TaskId) -> u32 {
        let mut state = self.lock();
        let waiting = state.tasks.entry(*id).or_default();
        waiting.holders += 1;
        waiting.wakes
    }

    /// Stops watching `id`; the last holder takes its entry away.
    pub(crate) fn unwatch(&self, id: &TaskId) {
        let mut state = self.lock();
        let Some(waiting) = state.tasks.get_mut(id) else {
            return;
        };
        waiting.holders -= 1;
        state.release(id);
    }

    /// Notes work running on `id` in this process; `false` if it already was.
    pub(crate) fn start_work(&self, id: &TaskId) -> bool {
        let mut state = self.lock();
        let waiting = state.tasks.entry(*id).or_default();
        if waiting.holders & WORK != 0 {
            return false;
        }
        waiting.holders |= WORK;
        state.works += 1;
        true
    }

    /// The work on `id` ended; `false` if none was running.
    pub(crate) fn end_work(&self, id: &TaskId) -> bool {
        let mut state = self.lock();
        let Some(waiting) = state.tasks.get_mut(id) else {
            return false;
        };
        if waiting.holders & WORK == 0 {
            return false;
        }
        waiting.holders &= !WORK;
        state.works -= 1;
        state.release(id);
        true
    }

    /// Whether anyone here waits on `id` or works on it.
    pub(crate) fn knows(&self, id: &TaskId) -> bool {
        self.lock().tasks.contains_key(id)
    }

    /// Whether work runs on `id` in this process.
    pub(crate) fn is_working(&self, id: &TaskId) -> bool {
        self.lock()
            .tasks
            .get(id)
            .is_some_and(|w| w.holders & WORK != 0)
    }

    /// How many tasks have work running in this process.
    pub(crate) fn work_count(&self) -> usize {
        self.lock().works
    }

    /// The tasks with work running in this process.
    pub(crate) fn working(&self) -> Vec<TaskId> {
        let state = self.lock();
        state
            .tasks
            .iter()
            .filter(|(_, w)| w.holders & WORK != 0)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The wake count of `id` once it differs from `seen`; until then, the waker
    /// is kept for the next wake.
    pub(crate) fn poll_changed(&self, id: &TaskId, seen: u32, cx: &mut Context<'_>) -> Poll<u32> {
        let mut state = self.lock();
        let Some(waiting) = state.tasks.get_mut(id) else {
            return Poll::Ready(seen.wrapping_add(1));
        };
        if waiting.wakes != seen {
            return Poll::Ready(waiting.wakes);
        }
        waiting.wakers.keep(cx.waker());
        Poll::Pending
    }

    /// Wakes whoever waits on `id` to re-read it.
    pub(crate) fn wake(&self, id: &TaskId) {
        let mut wakers = Vec::new();
        {
            let mut state = self.lock();
            let Some(waiting) = state.tasks.get_mut(id) else {
                return;
            };
            waiting.wakes = waiting.wakes.wrapping_add(1);
            waiting.wakers.take_into(&mut wakers);
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Wakes every waiter.
    pub(crate) fn wake_all(&self) {
        let mut wakers = Vec::new();
        for waiting in self.lock().tasks.values_mut() {
            waiting.wakes = waiting.wakes.wrapping_add(1);
            waiting.wakers.take_into(&mut wakers);
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Arranges a wake for the waiters of `id` when it expires at `at`: expiry
    /// changes nothing in the store, so no write would wake them.
    pub(crate) fn wake_at_expiry(self: &Arc<Self>, id: &TaskId, at: Timestamp) {
        let mut state = self.lock();
        let state = &mut *state;
        let Some(waiting) = state.tasks.get_mut(id) else {
            return;
        };
        if waiting.expires_ms == at.as_millis() {
            return;
        }
        let old = std::mem::replace(&mut waiting.expires_ms, at.as_millis());
        if waiting.holders & INDEXED != 0 {
            state.expiry.remove(&(Timestamp::from_millis(old), *id));
            waiting.holders &= !INDEXED;
        }
        let mut soonest = false;
        if at <= Timestamp::now().plus_ms(HORIZON.as_millis() as u64) {
            waiting.holders |= INDEXED;
            soonest = state.expiry.first().is_none_or(|(first, _)| at < *first);
            state.expiry.insert((at, *id));
        }
        if !state.timer_started {
            if !crate::spawn::spawn_if_runtime(expiry_timer(
                Arc::downgrade(self),
                self.rearm.clone(),
            )) {
                return;
            }
            state.timer_started = true;
        } else if soonest {
            self.rearm.notify_one();
        }
    }

    /// Wakes the waiters of every task expired at `now`; returns when the next
    /// one expires.
    fn expire(&self, now: Timestamp) -> Option<Timestamp> {
        let mut wakers = Vec::new();
        let next = {
            let mut state = self.lock();
            let state = &mut *state;
            while let Some(&(at, id)) = state.expiry.first() {
                if at > now {
                    break;
                }
                state.expiry.pop_first();
                if let Some(waiting) = state.tasks.get_mut(&id) {
                    waiting.expires_ms = 0;
                    waiting.holders &= !INDEXED;
                    waiting.wakes = waiting.wakes.wrapping_add(1);
                    waiting.wakers.take_into(&mut wakers);
                }
            }
            state.expiry.first().map(|(at, _)| *at)
        };
        wakers.into_iter().for_each(Waker::wake);
        next
    }

    /// Brings the expiries within [`HORIZON`] of `now` into the ordered index.
    fn scan(&self, now: Timestamp) {
        let until = now.plus_ms(HORIZON.as_millis() as u64).as_millis();
        let mut state = self.lock();
        let State { tasks, expiry, .. } = &mut *state;
        for (id, waiting) in tasks.iter_mut() {
            if waiting.expires_ms != 0
                && waiting.holders & INDEXED == 0
                && waiting.expires_ms <= until
            {
                waiting.holders |= INDEXED;
                expiry.insert((Timestamp::from_millis(waiting.expires_ms), *id));
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().tasks.len()
    }
}

impl Drop for Waits {
    fn drop(&mut self) {
        self.rearm.notify_one();
    }
}

/// The one timer of a layer's waits; ends once they are gone.
async fn expiry_timer(waits: Weak<Waits>, rearm: Arc<Notify>) {
    let mut next_scan = tokio::time::Instant::now();
    loop {
        let rearmed = rearm.notified();
        tokio::pin!(rearmed);
        rearmed.as_mut().enable();
        let next = match waits.upgrade() {
            Some(waits) => {
                if tokio::time::Instant::now() >= next_scan {
                    waits.scan(Timestamp::now());
                    next_scan = tokio::time::Instant::now() + SCAN_EVERY;
                }
                waits.expire(Timestamp::now())
            }
            None => return,
        };
        // One millisecond past the expiry: a task is gone once `now` reaches it.
        let until_scan = next_scan.saturating_duration_since(tokio::time::Instant::now());
        let sleep = next.map_or(until_scan, |at| {
            let left = at.as_millis().saturating_sub(Timestamp::now().as_millis());
            Duration::from_millis(left + 1).min(until_scan)
        });
        tokio::select! {
            _ = rearmed => {}
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn an_entry_is_small_and_each_waker_is_woken_once() {
        // One entry per parked worker: keep it at 40 bytes.
        assert_eq!(std::mem::size_of::<Waiting>(), 40);
        let waits = Waits::default();
        let id = TaskId::random();
        let counts: Vec<Arc<Count>> = (0..3)
            .map(|_| Arc::new(Count(AtomicUsize::new(0))))
            .collect();
        let seen = waits.watch(&id);
        for count in &counts {
            let waker = Waker::from(count.clone());
            let mut cx = Context::from_waker(&waker);
            // Twice: a waker is kept once however often its wait is polled.
            assert!(waits.poll_changed(&id, seen, &mut cx).is_pending());
            assert!(waits.poll_changed(&id, seen, &mut cx).is_pending());
        }
        waits.wake(&id);
        for count in &counts {
            assert_eq!(count.0.load(Ordering::Relaxed), 1);
        }
        let waker = Waker::from(counts[0].clone());
        let mut cx = Context::from_waker(&waker);
        assert_eq!(
            waits.poll_changed(&id, seen, &mut cx),
            Poll::Ready(seen + 1)
        );
        waits.unwatch(&id);
        assert_eq!(waits.len(), 0);
    }

    #[tokio::test]
    async fn a_far_expiry_joins_the_index_at_a_scan_and_wakes_its_waiter() {
        let waits = Arc::new(Waits::default());
        let id = TaskId::random();
        let seen = waits.watch(&id);
        let now = Timestamp::now();
        let at = now.plus_ms(3_600_000);
        waits.wake_at_expiry(&id, at);
        assert!(
            waits.lock().expiry.is_empty(),
            "an hour away: not indexed yet"
        );
        waits.scan(now.plus_ms(3_600_000 - 90_000));
        assert!(waits.lock().expiry.is_empty(), "still beyond the horizon");
        waits.scan(now.plus_ms(3_600_000 - 30_000));
        assert_eq!(waits.lock().expiry.len(), 1);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(waits.poll_changed(&id, seen, &mut cx).is_pending());
        waits.expire(at);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(waits.poll_changed(&id, seen, &mut cx).is_ready());
        waits.unwatch(&id);
        assert_eq!((waits.len(), waits.lock().expiry.len()), (0, 0));
    }

    #[test]
    fn work_keeps_an_entry_until_it_ends() {
        let waits = Waits::default();
        let id = TaskId::random();
        assert!(waits.start_work(&id));
        assert!(!waits.start_work(&id));
        waits.watch(&id);
        waits.unwatch(&id);
        assert_eq!((waits.len(), waits.work_count()), (1, 1));
        assert_eq!(waits.working(), vec![id]);
        assert!(waits.end_work(&id));
        assert!(!waits.end_work(&id));
        assert_eq!((waits.len(), waits.work_count()), (0, 0));
    }
}
