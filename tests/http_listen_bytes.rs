//! A greedy tenant: one principal holds the most listen streams it may, all naming
//! many tasks with large results, and never reads them; or opens them all at once
//! over results larger than its bound, and is refused. What the layer holds and
//! reads for those streams stays within the documented byte bound, on every store,
//! and another principal is served all along.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use mcp_tasks::defaults::{MAX_LISTEN_BYTES_PER_OWNER, MAX_LISTEN_STREAMS_PER_OWNER};
use mcp_tasks::error::StoreError;
use mcp_tasks::store::{Budgeted, TaskStore};
use mcp_tasks::test_suite::{Intercept, StoreCall, StoreHooks};
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

/// A listen stream of `principal`'s naming `tasks`, opened in process on `service`
/// (no socket to absorb what it is sent): read up to its acknowledgment, and then
/// only as the test says.
async fn open_in_process<S>(service: &S, principal: &str, tasks: &[TaskId]) -> ListenBody
where
    S: tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<
                mcp_tasks::body::ResponseBody<http_body_util::Full<bytes::Bytes>>,
            >,
        > + Clone,
    S::Error: std::fmt::Debug,
{
    use tower::ServiceExt as _;
    let ids: Vec<String> = tasks.iter().map(TaskId::to_string).collect();
    let request = support::requests::Call::new("subscriptions/listen")
        .params(json!({"notifications": {"taskIds": ids}}))
        .principal(principal)
        .build();
    let response = service.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = ListenBody(response.into_body(), support::sse::EventReader::new());
    let ack = body.next_text().await.expect("the acknowledgment");
    assert!(ack.contains("taskIds"), "{ack}");
    body
}

/// The body of a listen stream opened in process, cut into events.
struct ListenBody(
    mcp_tasks::body::ResponseBody<http_body_util::Full<bytes::Bytes>>,
    support::sse::EventReader,
);

impl ListenBody {
    /// The data of the next event that has some; `None` once the stream ended.
    async fn next_text(&mut self) -> Option<String> {
        use http_body_util::BodyExt as _;
        loop {
            while let Some(event) = self.1.next_event() {
                if event.data.is_some() {
                    return event.data;
                }
            }
            let frame = within("a frame of the stream", self.0.frame())
                .await?
                .unwrap();
            if let Ok(data) = frame.into_data() {
                self.1.push(&data);
            }
        }
    }
}

/// Two greedy principals that never read fill the layer's total bound between them
/// (each within its own); then alice, who reads, gets a change that would pass the
/// total. The largest holder's stream ends, not alice's: she gets her notification,
/// and the total is never passed.
#[tokio::test]
async fn at_the_total_bound_the_largest_holder_pays_not_a_reader() {
    use mcp_tasks::store::{CreateLimits, Timestamp};
    use mcp_tasks::{Principal, TaskRecord};
    use tower::Layer as _;

    const PER_OWNER: usize = 1024 * 1024;
    const TOTAL: usize = 3 * PER_OWNER / 2;
    const RESULT: usize = 256 * 1024;
    let store = Arc::new(MemoryStore::new());
    let layer = listen_builder(store.clone())
        .with_max_listen_bytes_per_owner(PER_OWNER)
        .with_max_listen_bytes(TOTAL)
        .build()
        .unwrap();
    let not_found = tower::service_fn(|_: http::Request<mcp_tasks::body::RequestBody<_>>| async {
        let error = json!({"jsonrpc": "2.0", "id": 1,
            "error": {"code": -32601, "message": "Method not found"}});
        let mut response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(
            error.to_string(),
        )));
        *response.status_mut() = http::StatusCode::NOT_FOUND;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok::<_, std::convert::Infallible>(response)
    });
    let service = layer.layer(not_found);
    let tasks = layer.tasks();
    let listen = layer.listen_notifier();
    let task_of = async |owner: &str| {
        let record = TaskRecord::new(
            TaskId::random(),
            Some(Principal::from(owner)),
            Timestamp::now(),
        );
        let id = record.id;
        store.create(record, CreateLimits::default()).await.unwrap();
        id
    };
    let result = json!({"content": [{"type": "text", "text": "x".repeat(RESULT)}]});

    let alices = task_of("alice").await;
    let mut alice = open_in_process(&service, "alice", &[alices]).await;
    let mut greedy = Vec::new();
    for (name, count) in [("g1", 3), ("g2", 2)] {
        let mut ids = Vec::new();
        for _ in 0..count {
            ids.push(task_of(name).await);
        }
        let stream = open_in_process(&service, name, &ids).await;
        for id in &ids {
            tasks.complete(id, result.clone()).await.unwrap();
        }
        greedy.push(stream);
    }
    let (held, peak) = listen.held_bytes();
    assert!(
        held > TOTAL - RESULT,
        "the greedy streams fill the total: {held}"
    );
    assert!(peak <= TOTAL, "{peak}");

    // Alice's result would pass the total.
    tasks.complete(&alices, result).await.unwrap();
    let note = loop {
        let text = alice.next_text().await.expect("alice's stream goes on");
        if text.contains("notifications/tasks") && text.contains("completed") {
            break text;
        }
    };
    assert!(note.contains(&alices.to_string()), "{note}");
    assert!(listen.held_bytes().1 <= TOTAL);
    // The largest holder's stream was ended: read now, it finishes with the listen
    // result, and the other greedy one's is still open.
    let mut last = None;
    while let Some(text) = greedy[0].next_text().await {
        last = Some(text);
    }
    let last = last.expect("the listen result");
    assert!(last.contains(r#""resultType":"complete""#), "{last}");
    let next = greedy[1]
        .next_text()
        .await
        .expect("the other greedy stream goes on");
    assert!(next.contains("notifications/tasks"), "{next}");
}

/// At the defaults, eight principals that never read fill the layer's total
/// bound with their listen streams' snapshots (each within its own bound). A
/// ninth principal's listen, whose snapshot would pass the total, still opens: the
/// largest holder's stream ends (with the listen result) to make room, as for a
/// change to an open stream, the others go on, and the total is never passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_total_bound_a_new_listen_makes_room_from_the_largest_holder() {
    use mcp_tasks::defaults::MAX_LISTEN_BYTES;
    use mcp_tasks::store::{CreateLimits, Timestamp};
    use mcp_tasks::{Principal, TaskRecord};
    use tower::Layer as _;

    /// The greedy principals, and their tasks each.
    const GREEDY: usize = 8;
    const TASKS_EACH: usize = 4;
    /// Each task's result: four of them come just under a principal's bound.
    const RESULT: usize = MAX_LISTEN_BYTES_PER_OWNER / TASKS_EACH - 16 * 1024;
    /// The ninth principal's result: more than the room the others leave.
    const CAROL: usize = 4 * 1024 * 1024;
    const { assert!(GREEDY * MAX_LISTEN_BYTES_PER_OWNER == MAX_LISTEN_BYTES) };
    let store = Arc::new(MemoryStore::new());
    let layer = listen_builder(store.clone()).build().unwrap();
    let not_found = tower::service_fn(|_: http::Request<mcp_tasks::body::RequestBody<_>>| async {
        let error = json!({"jsonrpc": "2.0", "id": 1,
            "error": {"code": -32601, "message": "Method not found"}});
        let mut response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(
            error.to_string(),
        )));
        *response.status_mut() = http::StatusCode::NOT_FOUND;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok::<_, std::convert::Infallible>(response)
    });
    let service = layer.layer(not_found);
    let listen = layer.listen_notifier();
    // Stored completed at once: the bytes are the point, not how they got there.
    let completed = async |owner: &str, size: usize| {
        let mut record = TaskRecord::new(
            TaskId::random(),
            Some(Principal::from(owner)),
            Timestamp::now(),
        );
        record.status = mcp_tasks::TaskStatus::Completed;
        record.result = Some(json!({"content": [{"type": "text", "text": "x".repeat(size)}]}));
        let id = record.id;
        store.create(record, CreateLimits::default()).await.unwrap();
        id
    };

    let mut greedy = Vec::new();
    for n in 0..GREEDY {
        let name = format!("g{n}");
        let mut ids = Vec::new();
        for _ in 0..TASKS_EACH {
            ids.push(completed(&name, RESULT).await);
        }
        // Opened in process and never read past the acknowledgment: the snapshot
        // stays held.
        greedy.push(open_in_process(&service, &name, &ids).await);
    }
    let (held, peak) = listen.held_bytes();
    assert!(
        held > MAX_LISTEN_BYTES - CAROL,
        "the greedy streams fill the total: {held}"
    );
    assert!(peak <= MAX_LISTEN_BYTES, "{peak}");

    let carols = completed("carol", CAROL).await;
    let mut carol = open_in_process(&service, "carol", &[carols]).await;
    let note = carol.next_text().await.expect("carol's snapshot");
    assert!(note.contains("notifications/tasks"), "{note}");
    assert!(
        note.contains(&carols.to_string()),
        "a snapshot of carol's task"
    );
    let (_, peak) = listen.held_bytes();
    assert!(peak <= MAX_LISTEN_BYTES, "{peak}");

    // One greedy stream paid: read now, it ends with the listen result. The
    // others still hold their snapshots.
    let mut ended = 0;
    for stream in &mut greedy {
        let first = stream
            .next_text()
            .await
            .expect("a greedy stream's next event");
        if first.contains("notifications/tasks") {
            continue;
        }
        let result: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(result["result"]["resultType"], "complete", "{first}");
        assert!(stream.next_text().await.is_none(), "it ended");
        ended += 1;
    }
    assert_eq!(ended, 1, "the largest holder's stream alone paid");
}

/// Tasks of the principal whose listens are refused.
const REFUSED_TASKS: usize = 40;
/// Their results: together more than the principal's bound.
const REFUSED_RESULT_BYTES: usize = 1024 * 1024;

/// The budgets of the snapshot reads in progress, summed, and the most they came to.
#[derive(Debug, Default)]
struct Budgets {
    reads: std::sync::atomic::AtomicUsize,
    in_flight: std::sync::Mutex<std::collections::HashMap<usize, usize>>,
    most: std::sync::atomic::AtomicUsize,
}

impl StoreHooks for Budgets {
    fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
        if let StoreCall::GetManyWithin { ids, budget, .. } = call {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let mut in_flight = self.in_flight.lock().unwrap();
            in_flight.insert(ids.as_ptr() as usize, budget);
            let sum = in_flight.values().sum();
            self.most.fetch_max(sum, Ordering::SeqCst);
        }
        Ok(())
    }

    fn after_get_many_within(&self, ids: &[TaskId], _: &Result<Budgeted, StoreError>) {
        self.in_flight
            .lock()
            .unwrap()
            .remove(&(ids.as_ptr() as usize));
    }
}

/// A principal whose finished tasks hold more than its bound opens the most listens
/// it may, all at once, each naming every task: each is refused, the reads within
/// their budgets never take more than the bound between them, the layer's count
/// never passes it, and another principal is answered all along.
async fn listens_over_the_bound_at_once_are_refused_within_it(store: Arc<dyn TaskStore>) {
    const { assert!(REFUSED_TASKS * REFUSED_RESULT_BYTES > MAX_LISTEN_BYTES_PER_OWNER) };
    let budgets = Arc::new(Budgets::default());
    let store: Arc<dyn TaskStore> = Arc::new(Intercept::new(store, budgets.clone()));
    let server = Server::listening_with(ListenSupport::NotFound, listen_builder(store)).await;
    let client = server.client();
    let text = "x".repeat(REFUSED_RESULT_BYTES);
    let mut ids = Vec::with_capacity(REFUSED_TASKS);
    for _ in 0..REFUSED_TASKS {
        let id = client
            .create_task_id("job", json!({}), Some("greedy"))
            .await;
        let result = json!({"content": [{"type": "text", "text": text}]});
        within(
            "a completion",
            server.tasks.complete(&id.parse().unwrap(), result),
        )
        .await
        .unwrap();
        ids.push(id);
    }
    let bobs = client.create_task_id("job", json!({}), Some("bob")).await;

    let listens: Vec<_> = (0..MAX_LISTEN_STREAMS_PER_OWNER)
        .map(|n| {
            let (client, ids) = (server.client(), ids.clone());
            tokio::spawn(async move {
                let named: Vec<&str> = ids.iter().map(String::as_str).collect();
                let refused = client.listen(Some("greedy"), json!(n), &named).await;
                assert_eq!(refused.status, 200);
                (n, refused.json().await)
            })
        })
        .collect();
    // Another principal is answered while the listens are read and refused.
    for _ in 0..10 {
        let reply = client.get(&bobs, Some("bob")).await;
        assert_eq!(reply.ok()["status"], "working");
    }
    for listen in listens {
        let (n, answer) = within("a refused listen", listen).await.unwrap();
        assert_eq!(answer["id"], n, "{answer}");
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        assert_eq!(answer["error"]["message"], "Too many listen bytes");
        assert_eq!(
            answer["error"]["data"],
            json!({"limit": "listen_bytes_per_owner"})
        );
    }
    assert_eq!(
        budgets.reads.load(Ordering::SeqCst),
        MAX_LISTEN_STREAMS_PER_OWNER,
        "one store read per listen"
    );
    let most = budgets.most.load(Ordering::SeqCst);
    assert!(
        most <= MAX_LISTEN_BYTES_PER_OWNER,
        "the reads in progress had budgets of {most} bytes between them"
    );
    let (held, peak) = server.listen.held_bytes();
    assert_eq!(held, 0, "nothing is kept for refused listens");
    assert!(
        peak <= MAX_LISTEN_BYTES_PER_OWNER,
        "the layer counted {peak} bytes at most, over the bound"
    );
    assert_eq!(server.listen.stream_count(), 0);
    let reply = client.get(&bobs, Some("bob")).await;
    assert_eq!(reply.ok()["status"], "working");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listens_over_the_bound_at_once_on_the_memory_store_are_refused_within_it() {
    listens_over_the_bound_at_once_are_refused_within_it(Arc::new(MemoryStore::new())).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listens_over_the_bound_at_once_on_postgres_are_refused_within_it() {
    let Some(store) = support::stores::postgres::scratch().await else {
        return;
    };
    listens_over_the_bound_at_once_are_refused_within_it(Arc::new(store)).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listens_over_the_bound_at_once_on_redis_are_refused_within_it() {
    let Some(store) = support::stores::redis::scratch().await else {
        return;
    };
    listens_over_the_bound_at_once_are_refused_within_it(Arc::new(store)).await;
}
