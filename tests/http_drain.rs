//! A graceful drain over real HTTP: running work gets its grace period, what is left
//! fails (retryable), new calls stay synchronous, and listen streams end with the
//! listen result. On a shared store, the drained node gives its worker lease up, so
//! the nodes that stay claim nothing and log nothing about it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::store::{CreateLimits, LeaseStore, MemoryLeases, NodeId, TaskStore, Timestamp};
use mcp_tasks::{MemoryStore, TaskId, TaskMode, TaskRecord, TaskSpec};
use serde_json::json;
use support::fixtures::{
    ListenSupport, Server, Tool, listen_builder, listen_inner, spec, standard_inner, sync_fallback,
    text_result,
};
use support::logs::Logged;

const SUB_ID: &str = "io.modelcontextprotocol/subscriptionId";

#[tokio::test]
async fn a_drain_lets_work_finish_fails_the_rest_and_ends_listen_streams() {
    let layer = listen_builder(Arc::new(MemoryStore::new()))
        .with_tool_mode("task_only", TaskMode::Required)
        .build()
        .unwrap();
    let (release, released) = tokio::sync::watch::channel(false);
    let inner = standard_inner(&layer.tasks())
        .listen(ListenSupport::NotFound)
        // Finishes once the test lets it: inside the grace period.
        .tool(
            "finishes",
            Tool::Context(spec(move |_| {
                let mut released = released.clone();
                TaskSpec::new().with_work(move |task| async move {
                    let _ = released.wait_for(|go| *go).await;
                    let _ = task.complete(text_result("finished in time")).await;
                })
            })),
        )
        // Never finishes on its own.
        .tool(
            "endless",
            Tool::Context(spec(|_| {
                TaskSpec::new().with_work(|task| async move {
                    let _ = task.run_until_ended(std::future::pending::<()>()).await;
                })
            })),
        );
    let server = Server::start(layer.clone(), inner).await;
    let client = server.client();
    let alice = Some("alice");
    let finishes = client.create_task_id("finishes", json!({}), alice).await;
    let endless = client.create_task_id("endless", json!({}), alice).await;
    let mut stream = client
        .listen(alice, json!(21), &[&finishes, &endless])
        .await;
    stream.next_message().await;
    stream.snapshot(2).await;

    assert!(!layer.is_draining());
    let drain = tokio::spawn({
        let layer = layer.clone();
        async move { layer.drain(Duration::from_millis(500)).await }
    });
    release.send(true).unwrap();
    let failed = drain.await.unwrap();
    assert_eq!(
        failed, 1,
        "only the endless task was left after the grace period"
    );

    let done = client.get(&finishes, alice).await.ok().clone();
    assert_eq!(done["status"], "completed", "{done}");
    let cut = client.get(&endless, alice).await.ok().clone();
    assert_eq!(cut["status"], "failed", "{cut}");
    assert_eq!(cut["error"]["code"], -32603);
    assert_eq!(
        cut["error"]["message"],
        "Server shut down before the task finished"
    );
    // The work never finished: the client may call again, on another node.
    assert_eq!(
        cut["error"]["data"],
        json!({"reason": "shutting_down", "retryable": true}),
        "{cut}"
    );

    // The stream carries both endings, then the listen result, then ends.
    let mut ended = std::collections::HashMap::new();
    loop {
        let message = stream.next_message().await;
        if message["method"] == "notifications/tasks" {
            let params = &message["params"];
            ended.insert(
                params["taskId"].as_str().unwrap().to_owned(),
                params["status"].clone(),
            );
            continue;
        }
        assert_eq!(
            message,
            json!({"jsonrpc": "2.0", "id": 21,
                "result": {"resultType": "complete", "_meta": {SUB_ID: 21}}})
        );
        break;
    }
    assert_eq!(ended[&finishes], "completed");
    assert_eq!(ended[&endless], "failed");
    assert!(stream.next_event().await.is_none(), "the stream closes");

    // After the drain no call becomes a task: an optional one runs synchronously…
    assert!(layer.is_draining());
    let reply = client.call_tool("work", json!({}), true, alice).await;
    assert_eq!(reply.ok(), &sync_fallback("ShuttingDown"));
    // …and a task-only one is refused as retryable elsewhere, before it runs.
    let runs = server.inner.calls("task_only");
    let refused = client.call_tool("task_only", json!({}), true, alice).await;
    refused.assert_error(-32603, 503);
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(refused.json["error"]["message"], "Server is shutting down");
    assert_eq!(
        refused.json["error"]["data"],
        json!({"retryable": true, "reason": "shutting_down"})
    );
    assert_eq!(
        server.inner.calls("task_only"),
        runs,
        "the refused call never ran"
    );
    // Reads keep working.
    assert_eq!(
        client.get(&finishes, alice).await.ok()["status"],
        "completed"
    );
}

#[tokio::test]
async fn a_drain_with_nothing_running_returns_at_once() {
    let layer = listen_builder(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    let drained = tokio::time::timeout(
        Duration::from_secs(5),
        layer.drain(Duration::from_secs(3600)),
    )
    .await
    .expect("no grace period is waited out when nothing runs");
    assert_eq!(drained, 0);
}

#[tokio::test]
async fn a_drain_also_ends_a_stream_served_beside_the_inner_services() {
    let layer = listen_builder(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    let server = Server::start(layer.clone(), listen_inner(ListenSupport::Stream)).await;
    let client = server.client();
    let alice = Some("alice");
    let task = client.create_task_id("job", json!({}), alice).await;
    let mut stream = client
        .listen_with(
            alice,
            json!(7),
            json!({"toolsListChanged": true, "taskIds": [task]}),
            true,
        )
        .await;
    stream.next_message().await; // the acknowledgment
    stream.snapshot(1).await;
    let inner = server.inner_listen(0).await;

    layer.drain(Duration::from_millis(100)).await;
    assert_eq!(
        stream.next_message().await,
        json!({"jsonrpc": "2.0", "id": 7,
            "result": {"resultType": "complete", "_meta": {SUB_ID: 7}}})
    );
    assert!(stream.next_event().await.is_none(), "the stream closes");
    drop(inner);
}

/// The worker lease of the lease tests below: short, so that a survivor would claim
/// a stopped node's lease well within a second.
const LEASE: Duration = Duration::from_millis(400);

/// A node named `name` on `store`, with a short worker lease kept in `leases` (the
/// store's own when `None`).
fn leased_node(
    store: Arc<dyn TaskStore>,
    leases: Option<&MemoryLeases>,
    name: &str,
) -> mcp_tasks::TasksLayer {
    let builder = mcp_tasks::TasksLayer::builder(store)
        .with_anonymous_tasks()
        .with_worker_lease(LEASE)
        .with_node_id(NodeId::new(name).expect("a valid node id"))
        .without_janitor();
    match leases {
        Some(leases) => builder.with_lease_store(leases.clone()),
        None => builder,
    }
    .build()
    .expect("a valid layer")
}

/// Two nodes on one shared store (`a` and `b`, two instances over the same data;
/// `leases` the lease store they share, when not the store's own): the drained node
/// gives its worker lease up before `drain` returns, and the survivor, watching for
/// several leases, claims nothing and logs nothing about it.
async fn a_drained_node_gives_its_lease_up(
    name: &str,
    a: Arc<dyn TaskStore>,
    b: Arc<dyn TaskStore>,
    leases: Option<MemoryLeases>,
) {
    let (logged, _logs) = Logged::capture(tracing::Level::INFO);
    let lease_store: Arc<dyn LeaseStore> = match &leases {
        Some(leases) => Arc::new(leases.clone()),
        None => a.leases().expect("a shared store keeps worker leases"),
    };
    let drained = leased_node(a.clone(), leases.as_ref(), "drained");
    let survivor = leased_node(b, leases.as_ref(), "survivor");
    let nodes = async || {
        let mut nodes: Vec<String> = lease_store
            .leases()
            .await
            .expect("the leases read")
            .into_iter()
            .map(|state| state.lease.node.to_string())
            .collect();
        nodes.sort();
        nodes
    };
    // A task the drained node holds until it completes it.
    let id = TaskId::random();
    a.create(
        TaskRecord::new(id, None, Timestamp::now()),
        CreateLimits::default(),
    )
    .await
    .expect("created");
    drained.tasks().hold(id);
    let both = support::wait::poll(async || (nodes().await.len() == 2).then_some(())).await;
    assert!(both.is_some(), "both nodes renew: {:?}", nodes().await);
    drained
        .tasks()
        .complete(&id, json!({"content": []}))
        .await
        .expect("completed");

    let started = std::time::Instant::now();
    assert_eq!(drained.drain(Duration::from_secs(1)).await, 0);
    let took = started.elapsed();
    assert_eq!(
        nodes().await,
        ["survivor"],
        "a drained node gives its lease up before its drain returns"
    );
    // Long past the time the survivor claims a stopped node's lease (1.25 × the
    // lease), it has claimed nothing. Nothing announces that nothing happened: the
    // test watches for that long.
    tokio::time::sleep(LEASE * 3).await;
    for alarm in ["stopped renewing its worker lease", "lost its worker lease"] {
        assert!(
            logged.lines_with(alarm).is_empty(),
            "a clean drain must log no lease alarm:\n{}",
            logged.text()
        );
    }
    assert_eq!(nodes().await, ["survivor"]);
    drop(survivor);
    eprintln!(
        "{name}: a drain with nothing left to run returned in {} ms with its lease given up; the survivor, watched for {} ms, claimed nothing and logged no lease warning",
        took.as_millis(),
        (LEASE * 3).as_millis()
    );
}

#[tokio::test]
async fn a_drained_node_gives_its_lease_up_on_memory_leases() {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryStore::new());
    let leases = Some(MemoryLeases::new());
    a_drained_node_gives_its_lease_up("memory", store.clone(), store, leases).await;
}

#[cfg(all(feature = "postgres", feature = "test-util"))]
#[tokio::test]
async fn a_drained_node_gives_its_lease_up_on_postgres() {
    if let Some((a, b)) = support::stores::postgres::two_nodes().await {
        a_drained_node_gives_its_lease_up("PostgreSQL", Arc::new(a), Arc::new(b), None).await;
    }
}

#[cfg(all(feature = "redis", feature = "test-util"))]
#[tokio::test]
async fn a_drained_node_gives_its_lease_up_on_redis() {
    if let Some((a, b)) = support::stores::redis::two_nodes().await {
        a_drained_node_gives_its_lease_up("Redis", Arc::new(a), Arc::new(b), None).await;
    }
}
