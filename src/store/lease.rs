//! Worker leases: which node runs which task, so that the tasks of a node that
//! died are failed by the nodes that survive it, instead of lingering until their
//! TTL.
//!
//! Each node has a lease on a [`LeaseStore`], keyed by its [`LeaseId`] (its node id
//! and the incarnation of this process): a renewal counter it moves forward in the
//! background (one round trip per node per renewal, whatever the number of tasks),
//! the lease length it runs with, and the ids of the tasks it holds, sent as
//! changes. No clock is stored: the other nodes judge a lease dead by watching its
//! counter stand still on their own monotonic clocks, then claim it in one atomic
//! step that re-checks the counter, fail its holds, and forget it.
//!
//! A task has one holder: the lease that took it last. A renewal that holds a task
//! another lease holds (another node's, or an earlier incarnation's of the same
//! node) takes it over in the same atomic step, so a claim of the earlier holder
//! no longer lists it and the work of the live node is never failed for a death
//! that is not its own.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::StoreError;
use crate::store::BoxFuture;
use crate::task::TaskId;

/// The most task ids the layer sends in one renewal, and the most the shared
/// stores put in one statement or script: a larger change is split, so that no
/// single store call grows with the number of holds.
pub(crate) const RENEW_BATCH: usize = 5_000;

/// The identity of one layer instance (one node) in a cluster, in log lines and
/// lease keys. By default the host name, the process id and six random hex digits
/// (`web-1-4242-9f3a1c`: two layers in one process differ by the digits);
/// [`with_node_id`](crate::TasksLayerBuilder::with_node_id) names it otherwise.
///
/// ```
/// use mcp_tasks::store::NodeId;
/// use mcp_tasks::{MemoryStore, TasksLayer};
///
/// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
/// // A pod or host name keeps log lines and lease keys readable.
/// let node = NodeId::new("web-1").expect("1 to 128 bytes");
/// let layer = TasksLayer::builder(MemoryStore::new()).with_node_id(node).build()?;
/// # drop(layer);
/// assert!(NodeId::new("").is_none());
/// assert_eq!(NodeId::random().as_str().len(), 32);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(Arc<str>);

impl NodeId {
    /// The longest node id the stores accept.
    pub const MAX_LEN: usize = 128;

    /// A fresh random id (32 hex digits).
    pub fn random() -> Self {
        let id = TaskId::random();
        let hex: String = id.as_bytes()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        NodeId(hex.into())
    }

    /// The default id of a layer: this host's name (letters, digits, `.`, `-` and
    /// `_`, anything else as `_`, at most 64 of them; `node` when none is found),
    /// the process id and six random hex digits.
    pub(crate) fn of_this_process() -> Self {
        let digits = &NodeId::random().0[..6];
        NodeId(format!("{}-{}-{digits}", host_name(), std::process::id()).into())
    }

    /// A chosen id, such as a host or pod name; `None` when it is empty or longer
    /// than [`MAX_LEN`](Self::MAX_LEN).
    pub fn new(id: impl Into<String>) -> Option<Self> {
        let id = id.into();
        (!id.is_empty() && id.len() <= Self::MAX_LEN && !id.contains('\0'))
            .then(|| NodeId(id.into()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// This host's name as [`NodeId::of_this_process`] writes it: from the kernel
/// (Linux), `/etc/hostname`, or `HOSTNAME` / `COMPUTERNAME`.
fn host_name() -> String {
    let found = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .chain(
            ["HOSTNAME", "COMPUTERNAME"]
                .iter()
                .filter_map(|var| std::env::var(var).ok()),
        )
        .find(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "node".to_owned());
    found
        .trim()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One lease: a node, and the incarnation of the process running as that node.
/// A process that restarts under the same [`NodeId`] is a new incarnation, so
/// the holds of the one before are failed, but for those the new one holds again
/// (it took them over).
///
/// ```
/// use mcp_tasks::store::{LeaseId, NodeId};
///
/// let node = NodeId::new("web-1").unwrap();
/// let before = LeaseId::new(node.clone());
/// let after_restart = LeaseId::new(node);
/// assert_eq!(before.node, after_restart.node);
/// assert_ne!(before, after_restart); // another incarnation, another lease
/// assert!(before.to_string().starts_with("web-1#"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct LeaseId {
    /// The node.
    pub node: NodeId,
    /// Random per process start (per layer).
    pub incarnation: u64,
}

impl LeaseId {
    /// A new incarnation of `node`.
    pub fn new(node: NodeId) -> Self {
        let bytes = TaskId::random();
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes.as_bytes()[..8]);
        // Kept positive, so that it fits a signed 64-bit column as it is.
        let incarnation = u64::from_le_bytes(word) >> 1;
        LeaseId { node, incarnation }
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{:016x}", self.node, self.incarnation)
    }
}

/// One renewal of a lease: count one more renewal, store the lease length the
/// node runs with, and apply the changes to the set of tasks it holds.
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::TaskId;
/// use mcp_tasks::store::{LeaseId, LeaseStore, MemoryLeases, NodeId, Renewal};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
/// let (leases, lease) = (MemoryLeases::new(), LeaseId::new(NodeId::random()));
/// let (a, b) = (TaskId::random(), TaskId::random());
/// let bound = Duration::from_secs(20);
/// // The first renewal creates the lease with the whole set.
/// let first = Renewal { lease: &lease, bound, first: true, hold: &[a, b], release: &[], replace: true };
/// leases.renew(first).await?;
/// // Later ones carry only the changes: `b` has finished.
/// let next = Renewal { lease: &lease, bound, first: false, hold: &[], release: &[b], replace: false };
/// leases.renew(next).await?;
/// assert_eq!(leases.claim(&lease, 2).await?, Some(vec![a]));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Renewal<'a> {
    /// The lease renewed.
    pub lease: &'a LeaseId,
    /// The node's lease length: how long its counter may stand still before other
    /// nodes judge it dead. Stored with the lease.
    pub bound: Duration,
    /// The first renewal of this incarnation: only it may create the lease. A later
    /// renewal that finds no lease learns that it was claimed and forgotten.
    pub first: bool,
    /// Tasks the node holds from now on. A task the lease does not hold yet is
    /// taken over from the lease that holds it, if any: it leaves that lease's holds.
    pub hold: &'a [TaskId],
    /// Tasks the node no longer holds.
    pub release: &'a [TaskId],
    /// Replace the whole set by `hold` (after an error left the store's copy
    /// uncertain), instead of applying a change.
    pub replace: bool,
}

/// What a renewal found.
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::TaskId;
/// use mcp_tasks::store::{LeaseId, LeaseStore, MemoryLeases, NodeId, Renewal, Renewed};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
/// let (leases, lease, task) = (MemoryLeases::new(), LeaseId::new(NodeId::random()), TaskId::random());
/// let hold = [task];
/// let renewal = |first| Renewal {
///     lease: &lease, bound: Duration::from_secs(20), first, hold: &hold, release: &[], replace: false,
/// };
/// assert_eq!(leases.renew(renewal(true)).await?, Renewed::New);
/// assert_eq!(leases.renew(renewal(false)).await?, Renewed::Renewed);
/// // Cut off for too long: another node claimed the lease and is failing its task.
/// leases.claim(&lease, 2).await?;
/// assert_eq!(leases.renew(renewal(false)).await?, Renewed::Lost { tasks: Some(vec![task]) });
/// leases.forget(&lease).await?;
/// assert_eq!(leases.renew(renewal(false)).await?, Renewed::Lost { tasks: None });
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewed {
    /// The lease was created (a first renewal).
    New,
    /// The lease was there and is renewed.
    Renewed,
    /// Another node claimed the lease: nothing was renewed or changed. `tasks` are
    /// the holds it claimed, or `None` once the claim is over and the lease
    /// forgotten (a later renewal that found no lease).
    Lost {
        /// The tasks claimed, when the store still has them.
        tasks: Option<Vec<TaskId>>,
    },
}

/// One lease as the store has it, for the nodes that watch it.
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::store::{LeaseId, LeaseStore, MemoryLeases, NodeId, Renewal};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
/// let (leases, lease) = (MemoryLeases::new(), LeaseId::new(NodeId::random()));
/// let bound = Duration::from_secs(20);
/// leases.renew(Renewal { lease: &lease, bound, first: true, hold: &[], release: &[], replace: false }).await?;
/// // What a watching node reads: it compares `renewals` with what it saw `bound` ago.
/// let seen = &leases.leases().await?[0];
/// assert_eq!((&seen.lease, seen.renewals, seen.bound, seen.claimed), (&lease, 1, bound, false));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseState {
    /// The lease.
    pub lease: LeaseId,
    /// How many renewals it has had; it moves on every renewal.
    pub renewals: u64,
    /// The lease length its node runs with.
    pub bound: Duration,
    /// Claimed by some node, which is failing its holds (or died doing so).
    pub claimed: bool,
}

/// Where the nodes of a cluster keep their leases. `PostgresStore` and `RedisStore`
/// provide one on the same database as their tasks ([`TaskStore::leases`]), so
/// the layer keeps leases on them without any setting; [`MemoryLeases`] serves
/// several layers in one process (tests, or a custom store).
///
/// No deadline is stored and no clock read: a node judges another dead by
/// watching the other's renewal counter stand still for that node's own lease
/// length, on the watcher's monotonic clock, then [`claim`](Self::claim)s it. A
/// clock step on the store or on any node therefore fails nothing.
///
/// Two layers in one process over one memory store share one lease store, so that
/// each sees the other's leases:
///
/// ```
/// use std::sync::Arc;
/// use mcp_tasks::store::MemoryLeases;
/// use mcp_tasks::{MemoryStore, TasksLayer};
///
/// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
/// let (store, leases) = (Arc::new(MemoryStore::new()), MemoryLeases::new());
/// let one = TasksLayer::builder(store.clone()).with_lease_store(leases.clone()).build()?;
/// let two = TasksLayer::builder(store).with_lease_store(leases).build()?;
/// # drop((one, two));
/// # Ok(())
/// # }
/// ```
///
/// [`TaskStore::leases`]: crate::store::TaskStore::leases
pub trait LeaseStore: fmt::Debug + Send + Sync + 'static {
    /// Renews `renewal.lease` and applies its hold changes, in one round trip, unless
    /// the lease was claimed ([`Renewed::Lost`]). Only a `first` renewal creates a
    /// lease. A task newly held is taken over in the same atomic step: it leaves
    /// the holds of any other lease, so that only its last holder's claim lists it.
    /// One the lease holds already keeps its holder as it is.
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>>;

    /// Every lease, with its renewal count, length and claim.
    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>>;

    /// Claims `lease` if its renewal count is still `renewals` (or it is claimed
    /// already), in one atomic step, and returns the tasks it holds; `None` when it
    /// was renewed since, or is gone. A claimed lease is never renewed again.
    fn claim<'a>(
        &'a self,
        lease: &'a LeaseId,
        renewals: u64,
    ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>>;

    /// Removes a claimed lease and its holds (a lease not claimed is left alone).
    fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Removes `lease` and its holds, unless it is claimed: its node gives it up
    /// after a drain ([`TasksLayer::drain`](crate::TasksLayer::drain)), with no
    /// unfinished task left to guard, so that no other node judges it dead. A
    /// claimed lease is left to its claimer, and an unknown one is no error.
    ///
    /// The default reads the leases, claims this one at its count and forgets it:
    /// three calls, between which a watching node may find it claimed and finish
    /// the claim (failing nothing, but logging it as a stopped node's).
    /// `PostgresStore`, `RedisStore` and [`MemoryLeases`] remove it in one atomic
    /// step.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::store::{LeaseId, LeaseStore, MemoryLeases, NodeId, Renewal};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let (leases, lease) = (MemoryLeases::new(), LeaseId::new(NodeId::random()));
    /// let bound = Duration::from_secs(20);
    /// leases.renew(Renewal { lease: &lease, bound, first: true, hold: &[], release: &[], replace: true }).await?;
    /// leases.release(&lease).await?;
    /// assert!(leases.leases().await?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    fn release<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let listed = self.leases().await?;
            let Some(state) = listed.into_iter().find(|state| &state.lease == lease) else {
                return Ok(());
            };
            if !state.claimed && self.claim(lease, state.renewals).await?.is_some() {
                self.forget(lease).await?;
            }
            Ok(())
        })
    }
}

impl<L: LeaseStore + ?Sized> LeaseStore for Arc<L> {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
        (**self).renew(renewal)
    }

    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
        (**self).leases()
    }

    fn claim<'a>(
        &'a self,
        lease: &'a LeaseId,
        renewals: u64,
    ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>> {
        (**self).claim(lease, renewals)
    }

    fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).forget(lease)
    }

    fn release<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).release(lease)
    }
}

/// Leases in this process's memory: for several layers sharing one store in one
/// process.
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::store::{LeaseId, LeaseStore, MemoryLeases, NodeId, Renewal, Renewed};
/// use mcp_tasks::TaskId;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
/// let leases = MemoryLeases::new();
/// let lease = LeaseId::new(NodeId::random());
/// let task = TaskId::random();
/// let bound = Duration::from_secs(1);
/// let renewal = Renewal { lease: &lease, bound, first: true, hold: &[task], release: &[], replace: true };
/// assert_eq!(leases.renew(renewal).await?, Renewed::New);
/// let seen = leases.leases().await?;
/// assert_eq!((seen[0].renewals, seen[0].bound), (1, bound));
/// // Another node saw the count stand still for `bound`: it claims the lease.
/// assert_eq!(leases.claim(&lease, 1).await?, Some(vec![task]));
/// leases.forget(&lease).await?;
/// assert!(leases.leases().await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryLeases {
    leases: Arc<Mutex<Leases>>,
}

/// Every lease, and which lease holds each held task.
#[derive(Default)]
struct Leases {
    leases: HashMap<LeaseId, Lease>,
    holders: HashMap<TaskId, LeaseId>,
}

impl Leases {
    /// `lease` holds `id` from now on: taken from its previous holder, if any.
    fn take(&mut self, lease: &LeaseId, id: TaskId) {
        if let Some(before) = self.holders.insert(id, lease.clone())
            && &before != lease
            && let Some(earlier) = self.leases.get_mut(&before)
        {
            earlier.tasks.remove(&id);
        }
    }

    /// `lease` no longer holds `id`.
    fn let_go(&mut self, lease: &LeaseId, id: &TaskId) {
        if self.holders.get(id) == Some(lease) {
            self.holders.remove(id);
        }
    }

    /// Removes `lease` and its holds.
    fn remove(&mut self, lease: &LeaseId) {
        if let Some(gone) = self.leases.remove(lease) {
            for id in &gone.tasks {
                self.let_go(lease, id);
            }
        }
    }
}

struct Lease {
    renewals: u64,
    bound: Duration,
    claimed: bool,
    tasks: HashSet<TaskId>,
}

impl Lease {
    fn sorted_tasks(&self) -> Vec<TaskId> {
        let mut tasks: Vec<TaskId> = self.tasks.iter().copied().collect();
        tasks.sort_unstable();
        tasks
    }
}

impl MemoryLeases {
    /// No leases yet.
    pub fn new() -> Self {
        MemoryLeases::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Leases> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for MemoryLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLeases")
            .field("leases", &self.lock().leases.len())
            .finish()
    }
}

impl LeaseStore for MemoryLeases {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
        let mut leases = self.lock();
        let renewed = match leases.leases.get(renewal.lease) {
            None if !renewal.first => Renewed::Lost { tasks: None },
            Some(lease) if lease.claimed => Renewed::Lost {
                tasks: Some(lease.sorted_tasks()),
            },
            found => {
                let renewed = if found.is_some() {
                    Renewed::Renewed
                } else {
                    Renewed::New
                };
                let me = renewal.lease;
                let lease = leases.leases.entry(me.clone()).or_insert_with(|| Lease {
                    renewals: 0,
                    bound: renewal.bound,
                    claimed: false,
                    tasks: HashSet::new(),
                });
                lease.renewals += 1;
                lease.bound = renewal.bound;
                let mut dropped = Vec::new();
                if renewal.replace {
                    let keep: HashSet<&TaskId> = renewal.hold.iter().collect();
                    lease.tasks.retain(|id| {
                        let kept = keep.contains(id);
                        if !kept {
                            dropped.push(*id);
                        }
                        kept
                    });
                }
                let new: Vec<TaskId> = renewal
                    .hold
                    .iter()
                    .filter(|id| lease.tasks.insert(**id))
                    .copied()
                    .collect();
                for id in renewal.release {
                    if lease.tasks.remove(id) {
                        dropped.push(*id);
                    }
                }
                for id in &dropped {
                    leases.let_go(me, id);
                }
                for id in new {
                    leases.take(me, id);
                }
                renewed
            }
        };
        Box::pin(std::future::ready(Ok(renewed)))
    }

    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
        let mut all: Vec<LeaseState> = self
            .lock()
            .leases
            .iter()
            .map(|(id, lease)| LeaseState {
                lease: id.clone(),
                renewals: lease.renewals,
                bound: lease.bound,
                claimed: lease.claimed,
            })
            .collect();
        all.sort_unstable_by(|a, b| a.lease.cmp(&b.lease));
        Box::pin(std::future::ready(Ok(all)))
    }

    fn claim<'a>(
        &'a self,
        lease: &'a LeaseId,
        renewals: u64,
    ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>> {
        let claimed = self.lock().leases.get_mut(lease).and_then(|lease| {
            (lease.claimed || lease.renewals == renewals).then(|| {
                lease.claimed = true;
                lease.sorted_tasks()
            })
        });
        Box::pin(std::future::ready(Ok(claimed)))
    }

    fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut leases = self.lock();
        if leases.leases.get(lease).is_some_and(|l| l.claimed) {
            leases.remove(lease);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn release<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut leases = self.lock();
        if leases.leases.get(lease).is_some_and(|l| !l.claimed) {
            leases.remove(lease);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{
        BoxFuture, LeaseId, LeaseState, LeaseStore, MemoryLeases, NodeId, Renewal, Renewed,
    };
    use crate::error::StoreError;
    use crate::task::TaskId;

    /// Leases with the four required calls only: `release` is the trait's default.
    #[derive(Debug)]
    struct Plain(MemoryLeases);

    impl LeaseStore for Plain {
        fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
            self.0.renew(renewal)
        }

        fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
            self.0.leases()
        }

        fn claim<'a>(
            &'a self,
            lease: &'a LeaseId,
            renewals: u64,
        ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>> {
            self.0.claim(lease, renewals)
        }

        fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
            self.0.forget(lease)
        }
    }

    #[tokio::test]
    async fn the_default_release_removes_an_unclaimed_lease_and_leaves_a_claimed_one() {
        let leases = Plain(MemoryLeases::new());
        let (leaving, claimed) = (
            LeaseId::new(NodeId::random()),
            LeaseId::new(NodeId::random()),
        );
        let task = TaskId::random();
        for lease in [&leaving, &claimed] {
            let renewal = Renewal {
                lease,
                bound: Duration::from_secs(1),
                first: true,
                hold: &[task],
                release: &[],
                replace: true,
            };
            leases.renew(renewal).await.expect("renewed");
        }
        leases.claim(&claimed, 1).await.expect("claimed");
        leases.release(&leaving).await.expect("released");
        leases.release(&claimed).await.expect("left alone");
        leases
            .release(&leaving)
            .await
            .expect("an unknown lease is no error");
        let left = leases.leases().await.expect("read");
        assert_eq!(left.len(), 1);
        assert_eq!((&left[0].lease, left[0].claimed), (&claimed, true));
        assert_eq!(
            leases.claim(&claimed, 0).await.expect("claimed"),
            Some(vec![task])
        );
    }
}
