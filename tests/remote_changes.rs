//! Changes made through another node reach this node's feed, notifier and waiting
//! workers: the multi-node contract suite on an in-memory stand-in for a shared
//! database, so the suite itself is shown to hold without any server.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::error::StoreError;
use mcp_tasks::store::TaskStore;
use mcp_tasks::store::{
    ChangeFeed, ChangeSender, LeaseStore, MemoryLeases, Scope, Timestamp, Transition, Updated,
};
use mcp_tasks::test_suite::{Intercept, StoreHooks};
use mcp_tasks::{MemoryStore, TaskId};

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
        .with_anonymous_tasks()
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

/// The tasks a store was asked to read, one by one or in batches.
#[derive(Debug, Default)]
struct Reads(std::sync::Mutex<Vec<TaskId>>);

impl Reads {
    fn all(&self) -> Vec<TaskId> {
        self.0.lock().unwrap().clone()
    }
}

impl StoreHooks for Reads {
    fn before(&self, call: mcp_tasks::test_suite::StoreCall<'_>) -> Result<(), StoreError> {
        use mcp_tasks::test_suite::StoreCall;
        let mut reads = self.0.lock().unwrap();
        match call {
            StoreCall::Get { id, .. } => reads.push(*id),
            StoreCall::GetMany { ids, .. } => reads.extend_from_slice(ids),
            _ => {}
        }
        Ok(())
    }
}

/// Node B has a worker waiting on one task; node A changes many others, then
/// cancels that one. B reads the one it waits on, and none of the others.
async fn a_node_reads_only_the_remote_changes_it_has_an_interest_in<S: TaskStore>(a: S, b: S) {
    use mcp_tasks::store::CreateLimits;
    use mcp_tasks::worker::TaskEnd;
    use mcp_tasks::{TaskRecord, TasksLayer};
    use support::wait::{until, within};

    let reads = Arc::new(Reads::default());
    let layer = TasksLayer::builder(Intercept::new(b, reads.clone()))
        .with_anonymous_tasks()
        .without_janitor()
        .build()
        .unwrap();
    let tasks = layer.tasks();
    let record = || TaskRecord::new(TaskId::random(), None, Timestamp::now());
    let waited = record();
    let x = waited.id;
    a.create(waited, CreateLimits::default()).await.unwrap();
    let waiter = tokio::spawn({
        let tasks = tasks.clone();
        async move { tasks.ended(&x).await }
    });
    until("B's worker reads the task it waits on", || {
        reads.all().contains(&x)
    })
    .await;

    let mut others = Vec::new();
    for _ in 0..50 {
        let other = record();
        others.push(other.id);
        a.create(other.clone(), CreateLimits::default())
            .await
            .unwrap();
        let progress = Transition::Progress {
            message: "working".into(),
        };
        a.update(&other.id, Scope::Any, &progress, Timestamp::now())
            .await
            .unwrap();
    }
    a.update(&x, Scope::Any, &Transition::Cancel, Timestamp::now())
        .await
        .unwrap();
    // The cancel came after every other change: B has handled those too.
    let end = within("B's worker hears of the cancel made on A", waiter)
        .await
        .unwrap();
    assert_eq!(end, TaskEnd::Cancelled);
    let read = reads.all();
    let needless: Vec<&TaskId> = others.iter().filter(|id| read.contains(id)).collect();
    assert!(
        needless.is_empty(),
        "B read {} of the {} tasks it has no interest in",
        needless.len(),
        others.len()
    );
    drop(layer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reads_only_the_remote_changes_it_has_an_interest_in_on_memory() {
    let (a, b) = two_nodes().await.unwrap();
    a_node_reads_only_the_remote_changes_it_has_an_interest_in(a, b).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reads_only_the_remote_changes_it_has_an_interest_in_on_postgres() {
    let Some((a, b)) = support::stores::postgres::two_nodes().await else {
        return;
    };
    a_node_reads_only_the_remote_changes_it_has_an_interest_in(a, b).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reads_only_the_remote_changes_it_has_an_interest_in_on_redis() {
    let Some((a, b)) = support::stores::redis::two_nodes().await else {
        return;
    };
    a_node_reads_only_the_remote_changes_it_has_an_interest_in(a, b).await;
}

/// Every write fails; reads are recorded.
#[derive(Debug, Default)]
struct FailedWrites(Reads);

impl StoreHooks for FailedWrites {
    fn before(&self, call: mcp_tasks::test_suite::StoreCall<'_>) -> Result<(), StoreError> {
        if let mcp_tasks::test_suite::StoreCall::Update { .. } = call {
            return Err(StoreError::backend("the store is down"));
        }
        self.0.before(call)
    }
}

/// A failed write on an id a client made up starts no background re-read; one on
/// a task this node works on does.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_write_on_a_made_up_id_starts_no_background_re_reads() {
    use mcp_tasks::store::CreateLimits;
    use mcp_tasks::{TaskRecord, TasksLayer};
    use support::fixtures::Server;
    use support::wait::until;

    let hooks = Arc::new(FailedWrites::default());
    let store = Arc::new(Intercept::new(MemoryStore::new(), hooks.clone()));
    let layer = TasksLayer::builder(store.clone())
        .with_anonymous_tasks()
        .without_janitor();
    let server = Server::with_layer(layer).await;

    let made_up = TaskId::random();
    let reply = server.client().cancel(&made_up.to_string(), None).await;
    assert_eq!(reply.code(), Some(-32603), "{}", reply.text());

    // A task this node works on: its failed write is re-read in the background.
    let known = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    let k = known.id;
    store.create(known, CreateLimits::default()).await.unwrap();
    server.tasks.hold(k);
    assert!(server.tasks.progress(&k, "halfway").await.is_err());
    until("the failed write on a known task is re-read", || {
        hooks.0.all().contains(&k)
    })
    .await;
    // Re-reads start in the order of the failures, on this one thread: the made-up
    // id's would have come first.
    assert!(
        !hooks.0.all().contains(&made_up),
        "a made-up id was re-read after its failed write"
    );
}
