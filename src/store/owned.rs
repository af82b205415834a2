//! The memory store's index for [`TaskStore::list`](super::TaskStore::list): each
//! owner's tasks in the order a list reads them, kept in a few bytes for owners
//! with few tasks.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::ops::Bound;

use super::ListFrom;
use crate::task::{TaskId, Timestamp};

/// One task in its owner's list, ordered as `list` reads them: newest first, and
/// among tasks created in the same millisecond, the larger id first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Listed {
    pub(super) created_at: Timestamp,
    pub(super) id: TaskId,
}

impl Ord for Listed {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .created_at
            .cmp(&self.created_at)
            .then_with(|| other.id.cmp(&self.id))
    }
}

impl PartialOrd for Listed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl From<ListFrom> for Listed {
    fn from(from: ListFrom) -> Self {
        Listed {
            created_at: from.created_at,
            id: from.id,
        }
    }
}

/// Owners with at most this many tasks keep them in a sorted vector, sized to
/// fit: a B-tree's first node alone takes 456 bytes, the room for 11 entries.
const FEW: usize = 8;

/// One owner's tasks, in list order. Its length is the owner's count under
/// [`CreateLimits::max_per_owner`](super::CreateLimits::max_per_owner).
#[derive(Debug)]
pub(super) enum OwnerTasks {
    /// Up to [`FEW`] entries, sorted, the vector no larger than they are.
    Few(Vec<Listed>),
    /// More: a B-tree, so that an insert or a removal costs O(log n).
    Many(BTreeSet<Listed>),
}

impl Default for OwnerTasks {
    fn default() -> Self {
        OwnerTasks::Few(Vec::new())
    }
}

impl OwnerTasks {
    pub(super) fn len(&self) -> usize {
        match self {
            OwnerTasks::Few(few) => few.len(),
            OwnerTasks::Many(many) => many.len(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `entry`; `false` when it was there already.
    pub(super) fn insert(&mut self, entry: Listed) -> bool {
        match self {
            OwnerTasks::Few(few) => {
                let Err(at) = few.binary_search(&entry) else {
                    return false;
                };
                if few.len() < FEW {
                    few.reserve_exact(1);
                    few.insert(at, entry);
                } else {
                    let mut many: BTreeSet<Listed> = few.drain(..).collect();
                    many.insert(entry);
                    *self = OwnerTasks::Many(many);
                }
                true
            }
            OwnerTasks::Many(many) => many.insert(entry),
        }
    }

    /// Removes `entry`; `false` when it was not there. A tree down to half of
    /// [`FEW`] goes back to a vector.
    pub(super) fn remove(&mut self, entry: &Listed) -> bool {
        match self {
            OwnerTasks::Few(few) => {
                let Ok(at) = few.binary_search(entry) else {
                    return false;
                };
                few.remove(at);
                few.shrink_to_fit();
                true
            }
            OwnerTasks::Many(many) => {
                let removed = many.remove(entry);
                if many.len() <= FEW / 2 {
                    *self = OwnerTasks::Few(std::mem::take(many).into_iter().collect());
                }
                removed
            }
        }
    }

    /// Up to `max` entries in list order, starting just after `after` (at the
    /// first when `None`), appended to `out`.
    pub(super) fn after(&self, after: Option<&Listed>, max: usize, out: &mut Vec<Listed>) {
        match self {
            OwnerTasks::Few(few) => {
                let start = after.map_or(0, |after| match few.binary_search(after) {
                    Ok(at) => at + 1,
                    Err(at) => at,
                });
                out.extend(few[start..].iter().take(max));
            }
            OwnerTasks::Many(many) => {
                let start = after.map_or(Bound::Unbounded, Bound::Excluded);
                out.extend(many.range((start, Bound::Unbounded)).take(max));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at: u64, first: u8) -> Listed {
        let mut bytes = [7u8; TaskId::BYTES];
        bytes[0] = first;
        Listed {
            created_at: Timestamp::from_millis(at),
            id: TaskId::from_bytes(bytes),
        }
    }

    fn read_all(tasks: &OwnerTasks, step: usize) -> Vec<Listed> {
        let mut all = Vec::new();
        loop {
            let before = all.len();
            let last = all.last().copied();
            tasks.after(last.as_ref(), step, &mut all);
            if all.len() == before {
                return all;
            }
        }
    }

    #[test]
    fn newest_first_then_the_larger_id() {
        assert!(entry(2, 0) < entry(1, 9));
        assert!(entry(1, 9) < entry(1, 3));
        assert_eq!(entry(1, 3).cmp(&entry(1, 3)), Ordering::Equal);
    }

    #[test]
    fn both_forms_keep_the_order_and_read_after_any_point() {
        let mut tasks = OwnerTasks::default();
        // Enough to pass from a vector to a tree and back.
        let entries: Vec<Listed> = (0..40u8).map(|n| entry(u64::from(n / 3), n)).collect();
        for (n, e) in entries.iter().enumerate() {
            assert!(tasks.insert(*e));
            assert!(!tasks.insert(*e), "an entry is kept once");
            assert_eq!(tasks.len(), n + 1);
            assert_eq!(matches!(tasks, OwnerTasks::Many(_)), n + 1 > FEW);
        }
        let mut sorted = entries.clone();
        sorted.sort();
        assert_eq!(read_all(&tasks, 7), sorted);
        // After an entry no longer there: from where it would be.
        let gone = sorted[10];
        assert!(tasks.remove(&gone));
        assert!(!tasks.remove(&gone));
        let mut next = Vec::new();
        tasks.after(Some(&gone), 2, &mut next);
        assert_eq!(next, sorted[11..13]);
        for e in &sorted {
            tasks.remove(e);
        }
        assert!(tasks.is_empty());
        assert!(matches!(&tasks, OwnerTasks::Few(few) if few.capacity() == 0));
        for e in &sorted[..3] {
            tasks.insert(*e);
        }
        let mut next = Vec::new();
        tasks.after(Some(&sorted[0]), 10, &mut next);
        assert_eq!(next, sorted[1..3]);
    }
}
