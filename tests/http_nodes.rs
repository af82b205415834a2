//! Two nodes over one shared store (PostgreSQL, Redis), each a real HTTP server with
//! its own layer: a worker running on one node stops when its task is cancelled
//! through the other, with no poll interval anywhere, and also when cancelled through
//! its own node.

mod support;

use std::sync::Arc;

use mcp_tasks::store::TaskStore;
use mcp_tasks::worker::TaskEnd;
use mcp_tasks::{TaskSpec, TasksLayer};
use serde_json::json;
use support::fixtures::{Inner, Server, Tool, spec};
use support::http::bearer;
use support::wait::{SendOnDrop, recv};
use tokio::sync::mpsc;

/// A node: the layer over `store` and one tool, `park`, whose work waits for its
/// task's end and reports it (and whether the work future was dropped).
async fn node(store: Arc<dyn TaskStore>) -> (Server, mpsc::UnboundedReceiver<(TaskEnd, bool)>) {
    let layer = TasksLayer::builder(store)
        .with_anonymous_tasks()
        .with_principal(|parts| bearer(&parts.headers))
        .without_janitor()
        .build()
        .unwrap();
    let (events, ended) = mpsc::unbounded_channel();
    let park = Tool::Context(spec(move |_| {
        let events = events.clone();
        TaskSpec::new().with_work(move |task| async move {
            let (dropped, mut work_dropped) = mpsc::unbounded_channel();
            let endless = async move {
                let _guard = SendOnDrop::new(dropped, ());
                std::future::pending::<()>().await
            };
            let end = task.run_until_ended(endless).await.unwrap_err();
            let _ = events.send((end, work_dropped.try_recv().is_ok()));
        })
    }));
    let server = Server::start(layer, Inner::new().tool("park", park)).await;
    (server, ended)
}

/// Cancels through `via` a task whose work runs on `a`.
async fn cancel_stops_the_worker(a: Arc<dyn TaskStore>, b: Arc<dyn TaskStore>) {
    let (node_a, mut ended_a) = node(a).await;
    let (node_b, _ended_b) = node(b).await;
    let alice = Some("alice");
    for via in [&node_a, &node_b] {
        let id = node_a
            .client()
            .create_task_id("park", json!({}), alice)
            .await;
        assert_eq!(
            via.client().get(&id, alice).await.ok()["status"],
            "working",
            "every node sees the task"
        );
        via.client().cancel(&id, alice).await.ok();
        let (end, work_dropped) = recv("the worker on node a to stop", &mut ended_a).await;
        assert_eq!(end, TaskEnd::Cancelled);
        assert!(work_dropped, "the work future is dropped on the cancel");
        assert_eq!(
            node_a.client().get(&id, alice).await.ok()["status"],
            "cancelled"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_on_either_node_stops_the_worker() {
    let Some((a, b)) = support::stores::postgres::two_nodes().await else {
        return;
    };
    cancel_stops_the_worker(Arc::new(a), Arc::new(b)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_cancel_on_either_node_stops_the_worker() {
    let Some((a, b)) = support::stores::redis::two_nodes().await else {
        return;
    };
    cancel_stops_the_worker(Arc::new(a), Arc::new(b)).await;
}
