//! Bounded listen: the ids of one listen are checked in one store round trip, the
//! open streams are capped per principal and in total, and an inner stream that
//! never acknowledges is replaced by the layer's own acknowledgment in time.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::{MemoryStore, TaskId};
use serde_json::{Value, json};
use support::fixtures::{ListenSupport, Server, listen_builder};
use support::http::EventStream;

fn assert_refused(answer: &Value, limit: &str) {
    assert_eq!(answer["jsonrpc"], "2.0");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(answer["error"]["message"], "Too many listen streams");
    assert_eq!(answer["error"]["data"], json!({"limit": limit}));
    assert!(answer.get("result").is_none());
}

/// Opens a listen naming `task` as `principal` and checks that it was accepted
/// (its first message is the acknowledgment).
async fn open(server: &Server, principal: &str, id: u64, task: &str) -> EventStream {
    let mut stream = server
        .client()
        .listen(Some(principal), json!(id), &[task])
        .await;
    assert_eq!(stream.status, 200);
    let ack = stream.next_message().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    stream
}

/// Opens a listen that must be refused with `limit`: HTTP 200, a JSON-RPC error.
async fn refused(server: &Server, principal: &str, id: u64, task: &str, limit: &str) {
    let stream = server
        .client()
        .listen(Some(principal), json!(id), &[task])
        .await;
    assert_eq!(stream.status, 200);
    assert!(
        stream.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let answer = stream.json().await;
    assert_eq!(answer["id"], id);
    assert_refused(&answer, limit);
}

#[tokio::test]
async fn listen_caps_refuse_beyond_their_limit_and_accept_again_once_a_stream_closes() {
    let builder = listen_builder(Arc::new(MemoryStore::new()))
        .with_max_listen_streams_per_owner(2)
        .with_max_listen_streams(3);
    let server = Server::listening_with(ListenSupport::NotFound, builder).await;
    let task = TaskId::random().to_string();

    let alice_1 = open(&server, "alice", 1, &task).await;
    let _alice_2 = open(&server, "alice", 2, &task).await;
    refused(&server, "alice", 3, &task, "listen_per_owner").await;
    let bob = open(&server, "bob", 4, &task).await;
    refused(&server, "carol", 5, &task, "listen_total").await;
    assert_eq!(server.listen.stream_count(), 3);

    // A listen without task ids is the inner service's alone: never capped.
    let plain = server
        .client()
        .listen_with(
            Some("carol"),
            json!(6),
            json!({"toolsListChanged": true}),
            true,
        )
        .await;
    assert_eq!(plain.status, 404, "passed through to the inner service");

    drop(alice_1);
    server
        .registry_until("alice's closed stream is deregistered", |l| {
            l.stream_count() == 2
        })
        .await;
    let _alice_3 = open(&server, "alice", 7, &task).await;
    refused(&server, "carol", 8, &task, "listen_total").await;

    drop(bob);
    server
        .registry_until("bob's closed stream is deregistered", |l| {
            l.stream_count() == 2
        })
        .await;
    let _carol = open(&server, "carol", 9, &task).await;
}

#[tokio::test]
async fn a_stalled_inner_acknowledgment_is_replaced_after_the_timeout() {
    let builder = listen_builder(Arc::new(MemoryStore::new()))
        .with_listen_ack_timeout(Duration::from_millis(200));
    let server = Server::listening_with(ListenSupport::Silent, builder).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), Some("alice")).await;

    let started = tokio::time::Instant::now();
    let mut stream = client.listen(Some("alice"), json!("s-1"), &[&task]).await;
    let inner = server.inner_listen(0).await;
    assert!(
        inner.request["params"]["notifications"]
            .get("taskIds")
            .is_none()
    );
    let ack = stream.next_message().await;
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "the layer waited for the inner acknowledgment first"
    );
    assert_eq!(
        ack,
        json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "_meta": {"io.modelcontextprotocol/subscriptionId": "s-1"},
                "notifications": {"taskIds": [task]},
            },
        })
    );
    // The stalled inner stream was dropped: nothing it sends arrives any more.
    let sender = inner.sender.expect("the inner stream's sender");
    assert!(
        sender
            .send(bytes::Bytes::from_static(b": late\n\n"))
            .is_err(),
        "the inner stream was dropped after the timeout"
    );
    // The tasks-only stream carries the task as it is, then its changes.
    assert_eq!(stream.snapshot(1).await[&task]["status"], "working");
    let id: TaskId = task.parse().unwrap();
    server.tasks.progress(&id, "Halfway").await.unwrap();
    let note = stream.next_message().await;
    assert_eq!(note["method"], "notifications/tasks");
    assert_eq!(note["params"]["taskId"], task.as_str());
    assert_eq!(note["params"]["statusMessage"], "Halfway");
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_listens_of_a_thousand_unknown_ids_over_postgres_are_acknowledged_within_2s() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use mcp_tasks::error::StoreError;
    use mcp_tasks::test_suite::{Intercept, StoreCall, StoreHooks};

    /// Counts the store's reads by kind.
    #[derive(Debug, Default)]
    struct Reads {
        gets: AtomicUsize,
        batches: AtomicUsize,
    }

    impl StoreHooks for Reads {
        fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
            match call {
                StoreCall::Get { .. } => self.gets.fetch_add(1, Ordering::SeqCst),
                StoreCall::GetMany { .. } | StoreCall::GetManyWithin { .. } => {
                    self.batches.fetch_add(1, Ordering::SeqCst)
                }
                _ => 0,
            };
            Ok(())
        }
    }

    let Some(store) = support::stores::postgres::scratch().await else {
        return;
    };
    let reads = Arc::new(Reads::default());
    let store = Arc::new(Intercept::new(store, reads.clone()));
    let server =
        Server::listening_with(ListenSupport::NotFound, listen_builder(store.clone())).await;
    let started = tokio::time::Instant::now();
    let listens: Vec<_> = (0..20)
        .map(|n| {
            let client = server.client();
            tokio::spawn(async move {
                let ids: Vec<String> = (0..1_000).map(|_| TaskId::random().to_string()).collect();
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                let principal = format!("p{n}");
                let mut stream = client.listen(Some(&principal), json!(n), &ids).await;
                assert_eq!(stream.status, 200);
                let ack = stream.next_message().await;
                assert_eq!(ack["params"]["notifications"], json!({"taskIds": []}));
                (stream, tokio::time::Instant::now())
            })
        })
        .collect();
    let mut streams = Vec::new();
    for listen in listens {
        streams.push(support::wait::within("a listen", listen).await.unwrap());
    }
    for (_, acknowledged) in &streams {
        let took = *acknowledged - started;
        assert!(
            took < Duration::from_secs(2),
            "a listen was acknowledged after {took:?}"
        );
    }
    assert_eq!(server.listen.stream_count(), 20);
    assert_eq!(
        reads.batches.load(Ordering::SeqCst),
        20,
        "one batch read per listen"
    );
    assert_eq!(reads.gets.load(Ordering::SeqCst), 0, "no read per id");
}
