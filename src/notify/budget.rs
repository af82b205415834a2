//! The bytes listen streams hold, per principal and in total, against two bounds:
//! what a change is charged when it is accepted, the room a snapshot read reserves,
//! and which principal pays when the total is reached.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::task::Principal;

/// Which byte bound a change would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ByteLimit {
    /// What one principal's streams hold.
    PerOwner,
    /// What every stream of the layer holds.
    Total,
}

impl ByteLimit {
    /// The name sent in `error.data.limit`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ByteLimit::PerOwner => "listen_bytes_per_owner",
            ByteLimit::Total => "listen_bytes_total",
        }
    }
}

/// The bytes held by changes on their way to listen streams, per principal and in
/// total, against two bounds. A change is counted once, however many streams
/// hold it, from the moment it is accepted until the last stream has written it
/// (its frames dropped by the connection).
///
/// Snapshot reads take a [`Reservation`] first: the room left under both bounds,
/// after what the streams hold and what other reads reserved. A change on its way
/// to open streams is checked against what the streams hold alone, so a read in
/// progress never ends a stream; the reads in progress together never pass a bound.
pub(super) struct Budget {
    per_owner: AtomicUsize,
    total: AtomicUsize,
    held: Mutex<Held>,
    /// Woken whenever a reservation shrinks, for the reads waiting on one.
    released: tokio::sync::Notify,
}

#[derive(Default)]
struct Held {
    total: usize,
    /// The most `total + reserved` has been.
    peak: usize,
    per_owner: HashMap<Option<Principal>, usize>,
    reserved: usize,
    reserved_per_owner: HashMap<Option<Principal>, usize>,
}

impl Held {
    fn note_peak(&mut self) {
        self.peak = self.peak.max(self.total.saturating_add(self.reserved));
    }

    fn unreserve(&mut self, owner: &Option<Principal>, bytes: usize) {
        self.reserved = self.reserved.saturating_sub(bytes);
        if let Some(mine) = self.reserved_per_owner.get_mut(owner) {
            *mine = mine.saturating_sub(bytes);
            if *mine == 0 {
                self.reserved_per_owner.remove(owner);
            }
        }
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            per_owner: AtomicUsize::new(usize::MAX),
            total: AtomicUsize::new(usize::MAX),
            held: Mutex::new(Held::default()),
            released: tokio::sync::Notify::new(),
        }
    }
}

impl Budget {
    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the bounds: per principal, and in all.
    pub(super) fn set_bounds(&self, per_owner: usize, total: usize) {
        self.per_owner.store(per_owner, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
    }

    /// The bytes held now plus those reserved, and the most that has been at once.
    #[cfg(any(test, feature = "test-util"))]
    pub(super) fn held_and_peak(&self) -> (usize, usize) {
        let held = self.lock();
        (held.total.saturating_add(held.reserved), held.peak)
    }

    /// Counts `bytes` for `owner`, unless that would pass a bound; taken out of
    /// `reservation` as far as it goes (a snapshot read within it).
    pub(super) fn charge(
        self: &Arc<Self>,
        owner: &Option<Principal>,
        bytes: usize,
        reservation: Option<&mut Reservation>,
    ) -> Result<Charge, ByteLimit> {
        let mut held = self.lock();
        let mine = held.per_owner.get(owner).copied().unwrap_or(0);
        if mine.saturating_add(bytes) > self.per_owner.load(Ordering::Relaxed) {
            return Err(ByteLimit::PerOwner);
        }
        if held.total.saturating_add(bytes) > self.total.load(Ordering::Relaxed) {
            return Err(ByteLimit::Total);
        }
        held.per_owner.insert(owner.clone(), mine + bytes);
        held.total += bytes;
        if let Some(reservation) = reservation {
            let used = bytes.min(reservation.bytes);
            reservation.bytes -= used;
            held.unreserve(&reservation.owner, used);
        }
        held.note_peak();
        Ok(Charge {
            budget: self.clone(),
            owner: owner.clone(),
            bytes,
        })
    }

    /// Reserves, for one snapshot read of `owner`'s, the room its streams have left
    /// under both bounds. While other reads' reservations take part of that room,
    /// waits for them to end first, so a read is never refused only because another
    /// was in progress.
    pub(super) async fn reserve(self: &Arc<Self>, owner: &Option<Principal>) -> Reservation {
        loop {
            let released = self.released.notified();
            let mut released = std::pin::pin!(released);
            released.as_mut().enable();
            {
                let mut held = self.lock();
                let held = &mut *held;
                let mine = held.per_owner.get(owner).copied().unwrap_or(0);
                let mine_reserved = held.reserved_per_owner.get(owner).copied().unwrap_or(0);
                let owner_room = self.per_owner.load(Ordering::Relaxed).saturating_sub(mine);
                let total_room = self
                    .total
                    .load(Ordering::Relaxed)
                    .saturating_sub(held.total);
                let owner_free = owner_room.saturating_sub(mine_reserved);
                let total_free = total_room.saturating_sub(held.reserved);
                let bytes = owner_free.min(total_free);
                if bytes == owner_room.min(total_room) {
                    held.reserved += bytes;
                    *held.reserved_per_owner.entry(owner.clone()).or_insert(0) += bytes;
                    held.note_peak();
                    return Reservation {
                        budget: self.clone(),
                        owner: owner.clone(),
                        bytes,
                        limit: if owner_free <= total_free {
                            ByteLimit::PerOwner
                        } else {
                            ByteLimit::Total
                        },
                    };
                }
            }
            released.await;
        }
    }

    /// The principals whose streams hold more bytes than `owner`'s, the most
    /// first: who pays for the total.
    pub(super) fn larger_than(&self, owner: &Option<Principal>) -> Vec<Option<Principal>> {
        let held = self.lock();
        let mine = held.per_owner.get(owner).copied().unwrap_or(0);
        let mut larger: Vec<(&Option<Principal>, usize)> = held
            .per_owner
            .iter()
            .filter(|(other, bytes)| *other != owner && **bytes > mine)
            .map(|(other, bytes)| (other, *bytes))
            .collect();
        larger.sort_by_key(|&(_, bytes)| std::cmp::Reverse(bytes));
        larger.into_iter().map(|(other, _)| other.clone()).collect()
    }

    fn release(&self, owner: &Option<Principal>, bytes: usize) {
        let mut held = self.lock();
        held.total = held.total.saturating_sub(bytes);
        if let Some(mine) = held.per_owner.get_mut(owner) {
            *mine = mine.saturating_sub(bytes);
            if *mine == 0 {
                held.per_owner.remove(owner);
            }
        }
    }
}

/// Room reserved in a [`Budget`] for one snapshot read, until dropped.
pub(crate) struct Reservation {
    budget: Arc<Budget>,
    owner: Option<Principal>,
    bytes: usize,
    /// The bound that left no more room.
    limit: ByteLimit,
}

impl Reservation {
    /// The most bytes the read may take.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The bound a read over [`bytes`](Self::bytes) passes.
    pub(crate) fn limit(&self) -> ByteLimit {
        self.limit
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.lock().unreserve(&self.owner, self.bytes);
        }
        // Also for an empty one: a waiter may have waited on the part charged.
        self.budget.released.notify_waiters();
    }
}

/// Bytes counted in a [`Budget`] until dropped.
pub(super) struct Charge {
    budget: Arc<Budget>,
    owner: Option<Principal>,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(&self.owner, self.bytes);
    }
}
