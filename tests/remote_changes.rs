//! Changes made through another node reach this node's feed, notifier and waiting
//! workers: the multi-node contract suite on an in-memory stand-in for a shared
//! database, so the suite itself is shown to hold without any server.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::store::{
    ChangeFeed, ChangeSender, LeaseStore, MemoryLeases, Scope, Timestamp, Transition, Updated,
};
use mcp_tasks::test_suite::{Intercept, StoreHooks};
use mcp_tasks::{MemoryStore, StoreError, TaskId, TaskStore};

/// What makes one node of a memory store that every node shares, as processes
/// share a database: each write that changed something is announced to the other
/// nodes' feeds, never to the writer's own.
#[derive(Debug, Clone)]
struct Announce {
    feeds: Arc<[ChangeSender]>,
    me: usize,
    /// The leases every node shares, as they would share a database's.
    leases: MemoryLeases,
}

impl Announce {
    fn announce(&self, id: &TaskId) {
        for (node, feed) in self.feeds.iter().enumerate() {
            if node != self.me {
                // No subscriber on that node is fine: nobody is listening there.
                feed.send(*id);
            }
        }
    }
}

impl StoreHooks for Announce {
    fn after_create(&self, id: &TaskId, result: &Result<(), StoreError>) {
        if result.is_ok() {
            self.announce(id);
        }
    }

    fn after_update(&self, id: &TaskId, result: &Result<Option<Updated>, StoreError>) {
        if let Ok(Some(updated)) = result
            && updated.changed()
        {
            self.announce(id);
        }
    }

    fn subscribe(&self, _store: &dyn TaskStore) -> Option<ChangeFeed> {
        Some(self.feeds[self.me].subscribe())
    }

    fn leases(&self, _store: &dyn TaskStore) -> Option<Arc<dyn LeaseStore>> {
        Some(Arc::new(self.leases.clone()))
    }
}

/// One node over the shared memory store.
type Node = Intercept<Arc<MemoryStore>, Announce>;

/// `n` nodes over one fresh store.
fn nodes(n: usize) -> Vec<Node> {
    let shared = Arc::new(MemoryStore::new());
    let feeds: Arc<[ChangeSender]> = (0..n).map(|_| ChangeSender::new(256)).collect();
    let leases = MemoryLeases::new();
    (0..n)
        .map(|me| {
            let feeds = feeds.clone();
            let leases = leases.clone();
            Intercept::new(shared.clone(), Announce { feeds, me, leases })
        })
        .collect()
}

async fn two_nodes() -> Option<(Node, Node)> {
    let mut nodes = nodes(2);
    let b = nodes.pop()?;
    let a = nodes.pop()?;
    Some((a, b))
}

mod memory_nodes {
    mcp_tasks::task_store_node_tests!(super::two_nodes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_through_four_nodes_are_never_lost() {
    mcp_tasks::test_suite::nodes_concurrent_updates_never_lost(nodes(4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_another_node_drops_the_auto_call_running_here() {
    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Full};
    use mcp_tasks::body::RequestBody;
    use mcp_tasks::{TaskMode, TasksLayer};
    use serde_json::{Value, json};
    use std::convert::Infallible;
    use support::requests::Call;
    use support::wait::{SendOnDrop, recv, within};
    use tower::{Layer as _, ServiceExt as _};

    let (a, b) = two_nodes().await.unwrap();
    let (dropped_tx, mut dropped_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let inner = tower::service_fn(move |_req: http::Request<RequestBody<Full<Bytes>>>| {
        let guard = SendOnDrop::new(dropped_tx.clone(), ());
        async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::new())))
        }
    });
    let layer = TasksLayer::builder(a)
        .without_janitor()
        .with_tool_mode(
            "slow",
            TaskMode::Auto {
                after: Duration::from_millis(20),
            },
        )
        .build()
        .unwrap();
    let service = layer.layer(inner);
    let request = Call::new("tools/call")
        .params(json!({"name": "slow", "arguments": {}}))
        .without_header("accept")
        .build::<Full<Bytes>>();
    let response = within("the call becomes a task", service.oneshot(request))
        .await
        .unwrap();
    let created: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id: TaskId = created["result"]["taskId"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    let cancelled = b
        .update(&id, Scope::Any, &Transition::Cancel, Timestamp::now())
        .await
        .unwrap()
        .unwrap();
    assert!(cancelled.changed());
    recv(
        "the cancel on node B drops the call running on node A",
        &mut dropped_rx,
    )
    .await;
}
