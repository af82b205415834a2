//! Changes made through another node reach this node's feed, notifier and waiting
//! workers: the multi-node contract suite on an in-memory stand-in for a shared
//! database, so the suite itself is shown to hold without any server.

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::store::{
    BoxFuture, ChangeFeed, ChangeSender, CreateLimits, Scope, Timestamp, Transition, Updated,
};
use mcp_tasks::{MemoryStore, StoreError, TaskId, TaskRecord, TaskStore};

/// One node over a memory store that every node shares, as processes share a
/// database: each write that changed something is announced to the other nodes'
/// feeds, never to the writer's own.
#[derive(Debug, Clone)]
struct Node {
    shared: Arc<MemoryStore>,
    feeds: Arc<[ChangeSender]>,
    me: usize,
}

/// `n` nodes over one fresh store.
fn nodes(n: usize) -> Vec<Node> {
    let shared = Arc::new(MemoryStore::new());
    let feeds: Arc<[ChangeSender]> = (0..n).map(|_| ChangeSender::new(256)).collect();
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
                feed.send(*id);
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

/// Signals once when dropped: the inner call's future went away.
struct DroppedSignal(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for DroppedSignal {
    fn drop(&mut self) {
        if let Some(signal) = self.0.take() {
            let _ = signal.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_another_node_drops_the_auto_call_running_here() {
    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Full};
    use mcp_tasks::body::RequestBody;
    use mcp_tasks::{TaskMode, TasksLayer};
    use serde_json::{Value, json};
    use std::convert::Infallible;
    use std::sync::Mutex;
    use tower::{Layer as _, ServiceExt as _};

    let (a, b) = two_nodes().await.unwrap();
    let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
    let dropped_tx = Arc::new(Mutex::new(Some(dropped_tx)));
    let inner = tower::service_fn(move |_req: http::Request<RequestBody<Full<Bytes>>>| {
        let guard = DroppedSignal(dropped_tx.lock().unwrap().take());
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
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "slow", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}}});
    let request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "slow")
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), service.oneshot(request))
        .await
        .expect("the call becomes a task in time")
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
    tokio::time::timeout(Duration::from_secs(5), dropped_rx)
        .await
        .expect("the cancel on node B drops the call running on node A")
        .unwrap();
}
