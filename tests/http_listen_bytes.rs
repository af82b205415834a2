//! A greedy tenant: one principal holds the most listen streams it may, all naming
//! many tasks with large results, and never reads them. What the layer holds for
//! those streams stays within the documented byte bound, on every store, and
//! another principal is served all along.

mod support;

use std::sync::Arc;

use mcp_tasks::defaults::{MAX_LISTEN_BYTES_PER_OWNER, MAX_LISTEN_STREAMS_PER_OWNER};
use mcp_tasks::store::TaskStore;
use mcp_tasks::{MemoryStore, TaskId};
use serde_json::json;
use support::fixtures::{ListenSupport, Server, listen_builder};
use support::wait::within;

/// Tasks the greedy principal names in each stream.
const TASKS: usize = 100;
/// The size of each task's result.
const RESULT_BYTES: usize = 512 * 1024;

async fn greedy_tenant_stays_within_the_byte_bound(store: Arc<dyn TaskStore>) {
    // Sized beyond the bound: the results together are more than it allows.
    const { assert!(TASKS * RESULT_BYTES > MAX_LISTEN_BYTES_PER_OWNER * 3 / 2) };
    let server = Server::listening_with(ListenSupport::NotFound, listen_builder(store)).await;
    let client = server.client();
    let mut ids = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        ids.push(
            client
                .create_task_id("job", json!({}), Some("greedy"))
                .await,
        );
    }
    let bobs = client.create_task_id("job", json!({}), Some("bob")).await;
    let named: Vec<&str> = ids.iter().map(String::as_str).collect();

    // The most streams one principal may hold, each naming every task, each read
    // only up to its acknowledgment and the snapshot of the running tasks.
    let mut streams = Vec::with_capacity(MAX_LISTEN_STREAMS_PER_OWNER);
    for n in 0..MAX_LISTEN_STREAMS_PER_OWNER {
        let mut stream = client.listen(Some("greedy"), json!(n), &named).await;
        assert_eq!(stream.status, 200);
        let ack = stream.next_message().await;
        assert_eq!(
            ack["params"]["notifications"]["taskIds"]
                .as_array()
                .map(Vec::len),
            Some(TASKS)
        );
        streams.push(stream);
    }
    assert_eq!(server.listen.stream_count(), MAX_LISTEN_STREAMS_PER_OWNER);

    let text = "x".repeat(RESULT_BYTES);
    for id in &ids {
        let id: TaskId = id.parse().unwrap();
        let result = json!({"content": [{"type": "text", "text": text}]});
        within("a completion", server.tasks.complete(&id, result))
            .await
            .unwrap();
        let (held, peak) = server.listen.held_bytes();
        assert!(
            held <= MAX_LISTEN_BYTES_PER_OWNER && peak <= MAX_LISTEN_BYTES_PER_OWNER,
            "the unread streams hold {held} bytes (at most {peak}), over the bound"
        );
        // Another principal is answered all along.
        let reply = client.get(&bobs, Some("bob")).await;
        assert_eq!(reply.ok()["status"], "working");
    }
    // The streams were ended rather than grown: one read to its end finishes with
    // the listen result.
    let stream = &mut streams[0];
    let last = within("the end of an ended stream", async {
        let mut last = None;
        while let Some(event) = stream.next_event_raw().await {
            if event.data.is_some() {
                last = event.data;
            }
        }
        last
    })
    .await
    .expect("messages before the end");
    let last: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(last["id"], 0, "{last}");
    assert_eq!(last["result"]["resultType"], "complete");
    let (_, peak) = server.listen.held_bytes();
    assert!(
        peak > RESULT_BYTES,
        "the streams held changes at all: {peak}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_tenant_on_the_memory_store_stays_within_the_byte_bound() {
    greedy_tenant_stays_within_the_byte_bound(Arc::new(MemoryStore::new())).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_tenant_on_postgres_stays_within_the_byte_bound() {
    let Some(store) = support::stores::postgres::scratch().await else {
        return;
    };
    greedy_tenant_stays_within_the_byte_bound(Arc::new(store)).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_tenant_on_redis_stays_within_the_byte_bound() {
    let Some(store) = support::stores::redis::scratch().await else {
        return;
    };
    greedy_tenant_stays_within_the_byte_bound(Arc::new(store)).await;
}

/// A listen whose snapshot alone would pass the principal's bound is refused with
/// a JSON-RPC error naming the bound; a smaller one is accepted.
#[tokio::test]
async fn a_listen_whose_snapshot_passes_the_bound_is_refused() {
    let builder =
        listen_builder(Arc::new(MemoryStore::new())).with_max_listen_bytes_per_owner(64 * 1024);
    let server = Server::listening_with(ListenSupport::NotFound, builder).await;
    let client = server.client();
    let big = client.create_task_id("job", json!({}), Some("alice")).await;
    let small = client.create_task_id("job", json!({}), Some("alice")).await;
    let result = json!({"content": [{"type": "text", "text": "x".repeat(128 * 1024)}]});
    server
        .tasks
        .complete(&big.parse().unwrap(), result)
        .await
        .unwrap();

    let refused = client
        .listen(Some("alice"), json!(1), &[&big, &small])
        .await;
    assert_eq!(refused.status, 200);
    let answer = refused.json().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(answer["error"]["message"], "Too many listen bytes");
    assert_eq!(
        answer["error"]["data"],
        json!({"limit": "listen_bytes_per_owner"})
    );
    assert_eq!(server.listen.held_bytes().0, 0, "nothing is kept");

    let mut accepted = client.listen(Some("alice"), json!(2), &[&small]).await;
    let ack = accepted.next_message().await;
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([small]));
    assert_eq!(accepted.next_message().await["params"]["taskId"], small);
}
