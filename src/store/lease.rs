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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::StoreError;
use crate::store::BoxFuture;
use crate::task::TaskId;

/// The identity of one layer instance (one node) in a cluster: random unless
/// [`with_node_id`](crate::TasksLayerBuilder::with_node_id) names it.
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
/// the holds of the one before are failed, never silently taken over.
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
    /// Tasks the node holds from now on.
    pub hold: &'a [TaskId],
    /// Tasks the node no longer holds.
    pub release: &'a [TaskId],
    /// Replace the whole set by `hold` (after an error left the store's copy
    /// uncertain), instead of applying a change.
    pub replace: bool,
}

/// What a renewal found.
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
/// [`TaskStore::leases`]: crate::store::TaskStore::leases
pub trait LeaseStore: fmt::Debug + Send + Sync + 'static {
    /// Renews `renewal.lease` and applies its hold changes, in one round trip, unless
    /// the lease was claimed ([`Renewed::Lost`]). Only a `first` renewal creates a
    /// lease.
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
    leases: Arc<Mutex<HashMap<LeaseId, Lease>>>,
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseId, Lease>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for MemoryLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLeases")
            .field("leases", &self.lock().len())
            .finish()
    }
}

impl LeaseStore for MemoryLeases {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
        let mut leases = self.lock();
        let renewed = match leases.get(renewal.lease) {
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
                let lease = leases
                    .entry(renewal.lease.clone())
                    .or_insert_with(|| Lease {
                        renewals: 0,
                        bound: renewal.bound,
                        claimed: false,
                        tasks: HashSet::new(),
                    });
                lease.renewals += 1;
                lease.bound = renewal.bound;
                if renewal.replace {
                    lease.tasks.clear();
                }
                lease.tasks.extend(renewal.hold.iter().copied());
                for id in renewal.release {
                    lease.tasks.remove(id);
                }
                renewed
            }
        };
        Box::pin(std::future::ready(Ok(renewed)))
    }

    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
        let mut all: Vec<LeaseState> = self
            .lock()
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
        let claimed = self.lock().get_mut(lease).and_then(|lease| {
            (lease.claimed || lease.renewals == renewals).then(|| {
                lease.claimed = true;
                lease.sorted_tasks()
            })
        });
        Box::pin(std::future::ready(Ok(claimed)))
    }

    fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut leases = self.lock();
        if leases.get(lease).is_some_and(|l| l.claimed) {
            leases.remove(lease);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}
