//! Worker leases: which node runs which task, so that the tasks of a node that
//! died are failed by the nodes that survive it, instead of lingering until their
//! TTL.
//!
//! Each node has a lease on a [`LeaseStore`]: a deadline it pushes forward in the
//! background (one round trip per node per renewal, whatever the number of tasks),
//! and the ids of the tasks it holds, sent as changes. A node whose deadline passed
//! has lapsed; any surviving node reads its holds, fails those tasks, and forgets it.

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

/// One renewal of a node's lease: push its deadline to `bound` from the store's
/// clock, and apply the changes to the set of tasks it holds.
#[derive(Clone, Debug)]
pub struct Renewal<'a> {
    /// The node renewing.
    pub node: &'a NodeId,
    /// How long the lease lasts from now, by the store's clock.
    pub bound: Duration,
    /// Tasks the node holds from now on.
    pub hold: &'a [TaskId],
    /// Tasks the node no longer holds.
    pub release: &'a [TaskId],
    /// Replace the whole set by `hold` (after an error left the store's copy
    /// uncertain, or after the node was found lapsed), instead of applying a change.
    pub replace: bool,
}

/// A node whose lease lapsed, with the tasks it held.
#[derive(Clone, Debug)]
pub struct LapsedNode {
    /// The node that stopped renewing.
    pub node: NodeId,
    /// The tasks it held when it stopped.
    pub tasks: Vec<TaskId>,
}

/// Where the nodes of a cluster keep their leases. `PostgresStore` and `RedisStore`
/// provide one on the same database as their tasks ([`TaskStore::leases`]), so
/// the layer keeps leases on them without any setting; [`MemoryLeases`] serves
/// several layers in one process (tests, or a custom store).
///
/// Every deadline is decided by one clock, the store's: nodes whose own clocks
/// differ still agree on who lapsed.
///
/// [`TaskStore::leases`]: crate::TaskStore::leases
pub trait LeaseStore: fmt::Debug + Send + Sync + 'static {
    /// Renews `renewal.node`'s lease and applies its hold changes, in one round
    /// trip. Returns `false` when the store did not know the node (its first
    /// renewal, or it had lapsed and was forgotten): the caller then sends its whole
    /// set with `replace` on the next renewal.
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// The nodes whose leases have lapsed, each with the tasks it held.
    fn lapsed(&self) -> BoxFuture<'_, Result<Vec<LapsedNode>, StoreError>>;

    /// Removes `node`'s lease and holds, if it is still lapsed (a node that renewed
    /// in the meantime keeps its lease).
    fn forget<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<L: LeaseStore + ?Sized> LeaseStore for Arc<L> {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).renew(renewal)
    }

    fn lapsed(&self) -> BoxFuture<'_, Result<Vec<LapsedNode>, StoreError>> {
        (**self).lapsed()
    }

    fn forget<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).forget(node)
    }
}

/// Leases in this process's memory, on tokio's clock: for several layers sharing
/// one store in one process.
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::store::{LeaseStore, MemoryLeases, NodeId, Renewal};
/// use mcp_tasks::TaskId;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), mcp_tasks::StoreError> {
/// let leases = MemoryLeases::new();
/// let node = NodeId::random();
/// let task = TaskId::random();
/// let renewal = Renewal { node: &node, bound: Duration::from_secs(1), hold: &[task], release: &[], replace: false };
/// assert!(!leases.renew(renewal).await?); // first renewal: the store did not know the node
/// assert!(leases.lapsed().await?.is_empty());
/// tokio::time::advance(Duration::from_secs(2)).await;
/// let lapsed = leases.lapsed().await?;
/// assert_eq!(lapsed[0].tasks, vec![task]);
/// leases.forget(&node).await?;
/// assert!(leases.lapsed().await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryLeases {
    nodes: Arc<Mutex<HashMap<NodeId, Lease>>>,
}

struct Lease {
    deadline: tokio::time::Instant,
    tasks: HashSet<TaskId>,
}

impl MemoryLeases {
    /// No leases yet.
    pub fn new() -> Self {
        MemoryLeases::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Lease>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for MemoryLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLeases")
            .field("nodes", &self.lock().len())
            .finish()
    }
}

impl LeaseStore for MemoryLeases {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
        let deadline = tokio::time::Instant::now() + renewal.bound;
        let mut nodes = self.lock();
        let known = nodes.contains_key(renewal.node);
        let lease = nodes.entry(renewal.node.clone()).or_insert_with(|| Lease {
            deadline,
            tasks: HashSet::new(),
        });
        lease.deadline = deadline;
        if renewal.replace {
            lease.tasks.clear();
        }
        lease.tasks.extend(renewal.hold.iter().copied());
        for id in renewal.release {
            lease.tasks.remove(id);
        }
        Box::pin(std::future::ready(Ok(known)))
    }

    fn lapsed(&self) -> BoxFuture<'_, Result<Vec<LapsedNode>, StoreError>> {
        let now = tokio::time::Instant::now();
        let lapsed = self
            .lock()
            .iter()
            .filter(|(_, lease)| lease.deadline <= now)
            .map(|(node, lease)| {
                let mut tasks: Vec<TaskId> = lease.tasks.iter().copied().collect();
                tasks.sort_unstable();
                LapsedNode {
                    node: node.clone(),
                    tasks,
                }
            })
            .collect();
        Box::pin(std::future::ready(Ok(lapsed)))
    }

    fn forget<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), StoreError>> {
        let now = tokio::time::Instant::now();
        let mut nodes = self.lock();
        if nodes.get(node).is_some_and(|lease| lease.deadline <= now) {
            nodes.remove(node);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}
