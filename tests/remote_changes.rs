//! Changes made through another node reach this node's feed, notifier and waiting
//! workers: the multi-node contract suite on an in-memory stand-in for a shared
//! database, so the suite itself is shown to hold without any server.

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::{
    BoxFuture, ChangeFeed, CreateLimits, MemoryStore, Scope, StoreError, TaskId, TaskRecord,
    TaskStore, Timestamp, Transition, Updated,
};
use tokio::sync::broadcast;

/// One node over a memory store that every node shares, as processes share a
/// database: each write that changed something is announced to the other nodes'
/// feeds, never to the writer's own.
#[derive(Debug, Clone)]
struct Node {
    shared: Arc<MemoryStore>,
    feeds: Arc<[broadcast::Sender<TaskId>]>,
    me: usize,
}

/// `n` nodes over one fresh store.
fn nodes(n: usize) -> Vec<Node> {
    let shared = Arc::new(MemoryStore::new());
    let feeds: Arc<[broadcast::Sender<TaskId>]> =
        (0..n).map(|_| broadcast::channel(256).0).collect();
    (0..n)
        .map(|me| Node {
            shared: shared.clone(),
            feeds: feeds.clone(),
            me,
        })
        .collect()
}

async fn two_nodes() -> Option<(Node, Node)> {
    let mut nodes = nodes(2);
    let b = nodes.pop()?;
    let a = nodes.pop()?;
    Some((a, b))
}

impl Node {
    fn announce(&self, id: &TaskId) {
        for (node, feed) in self.feeds.iter().enumerate() {
            if node != self.me {
                // No subscriber on that node is fine: nobody is listening there.
                let _ = feed.send(*id);
            }
        }
    }
}

impl TaskStore for Node {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let id = record.id;
            self.shared.create(record, limits).await?;
            self.announce(&id);
            Ok(())
        })
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        self.shared.get(id, scope, now)
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        Box::pin(async move {
            let updated = self.shared.update(id, scope, transition, now).await?;
            if updated.as_ref().is_some_and(Updated::changed) {
                self.announce(id);
            }
            Ok(updated)
        })
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        self.shared.cleanup(now, retention)
    }

    fn subscribe(&self) -> Option<ChangeFeed> {
        Some(self.feeds[self.me].subscribe())
    }
}

mod memory_nodes {
    mcp_tasks::task_store_node_tests!(super::two_nodes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_through_four_nodes_are_never_lost() {
    mcp_tasks::test_suite::nodes_concurrent_updates_never_lost(nodes(4)).await;
}
