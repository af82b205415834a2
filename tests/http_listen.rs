//! `subscriptions/listen` and `notifications/tasks` through real HTTP SSE streams on
//! loopback: the acknowledgment, ownership, every status change, merging with the
//! inner service's stream, bounded memory, disconnects and notifier failures.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::error::StoreError;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::notify::TaskNotifier;
use mcp_tasks::test_suite::{Intercept, StoreCall, StoreHooks};
use mcp_tasks::wire::RpcError;
use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
use serde_json::{Value, json};
use support::fixtures::{ListenSupport, Server, listen_builder};
use support::requests::modern_meta;
use support::sse;
use support::wait::within;
use tokio::sync::watch;

const SUB_ID: &str = "io.modelcontextprotocol/subscriptionId";

fn id(text: &str) -> TaskId {
    text.parse().unwrap()
}

/// `params` of a task notification without its `_meta`: comparable with
/// `Client::get_detailed`.
fn without_meta(params: &Value) -> Value {
    let mut params = params.clone();
    params.as_object_mut().unwrap().remove("_meta");
    params
}

/// The message is the acknowledgment, for `subscription`, agreeing to exactly
/// `notifications`.
fn assert_ack(message: &Value, subscription: Value, notifications: Value) {
    assert_eq!(
        message,
        &json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {SUB_ID: subscription}, "notifications": notifications}}),
    );
}

#[tokio::test]
async fn the_ack_comes_first_and_lists_only_the_callers_tasks() {
    let server = Server::listening(ListenSupport::NotFound).await;
    let client = server.client();
    let alice = client.create_task_id("job", json!({}), Some("alice")).await;
    let bob = client.create_task_id("job", json!({}), Some("bob")).await;
    let anonymous = client.create_task_id("job", json!({}), None).await;
    let unknown = TaskId::random().to_string();

    let mut stream = client
        .listen(
            Some("alice"),
            json!(7),
            &[&bob, &alice, &anonymous, &unknown, "not-a-task-id", &alice],
        )
        .await;
    assert_eq!(stream.status, 200);
    assert_eq!(stream.headers["content-type"], "text/event-stream");
    assert_eq!(stream.headers["x-accel-buffering"], "no");
    let first = stream.next_event().await.unwrap();
    assert_eq!(first.data_lines, 1);
    assert!(first.comments.is_empty());
    assert_ack(&first.message(), json!(7), json!({"taskIds": [alice]}));
    assert_eq!(server.listen.stream_count(), 1);

    // A caller that owns nothing it named gets an empty agreement.
    let mut empty = client
        .listen(Some("carol"), json!(8), &[&alice, &bob])
        .await;
    assert_ack(
        &empty.next_message().await,
        json!(8),
        json!({"taskIds": []}),
    );
}

#[tokio::test]
async fn the_inner_ack_keeps_its_fields_and_gains_the_task_ids() {
    let server = Server::listening(ListenSupport::Stream).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), Some("alice")).await;
    let foreign = client.create_task_id("job", json!({}), Some("bob")).await;
    let mut stream = client
        .listen_with(
            Some("alice"),
            json!("sub-1"),
            json!({"toolsListChanged": true, "promptsListChanged": true, "taskIds": [task, foreign]}),
            true,
        )
        .await;
    assert_eq!(stream.headers["x-accel-buffering"], "no");
    assert_ack(
        &stream.next_message().await,
        json!("sub-1"),
        json!({"toolsListChanged": true, "taskIds": [task]}),
    );
    // The inner service never sees the extension's field.
    let inner = server.inner_listen(0).await;
    assert_eq!(
        inner.request["params"]["notifications"],
        json!({"toolsListChanged": true, "promptsListChanged": true})
    );
    assert_eq!(inner.request["params"]["_meta"], modern_meta(true));
    assert_eq!(inner.request["id"], "sub-1");
}

#[tokio::test]
async fn the_subscription_id_keeps_its_json_type() {
    let server = Server::listening(ListenSupport::Stream).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), None).await;
    for subscription in [json!(42), json!("42"), json!("listen-α")] {
        let mut stream = client.listen(None, subscription.clone(), &[&task]).await;
        let ack = stream.next_message().await;
        assert_eq!(ack["params"]["_meta"][SUB_ID], subscription);
        let snapshot = stream.snapshot(1).await;
        assert_eq!(snapshot[&task]["_meta"], json!({SUB_ID: subscription}));
        server
            .tasks
            .progress(&id(&task), format!("for {subscription}"))
            .await
            .unwrap();
        let params = stream.next_task().await;
        assert_eq!(params["_meta"], json!({SUB_ID: subscription}));
        assert_eq!(params["statusMessage"], format!("for {subscription}"));
    }
}

#[tokio::test]
async fn a_stream_never_sees_another_principals_task() {
    let server = Server::listening(ListenSupport::NotFound).await;
    let client = server.client();
    let alice = client.create_task_id("job", json!({}), Some("alice")).await;
    let bob = client.create_task_id("job", json!({}), Some("bob")).await;
    let anonymous = client.create_task_id("job", json!({}), None).await;
    let all = [alice.as_str(), bob.as_str(), anonymous.as_str()];

    let mut streams = Vec::new();
    for (user, own) in [
        (Some("alice"), &alice),
        (Some("bob"), &bob),
        (None, &anonymous),
    ] {
        let mut stream = client.listen(user, json!(1), &all).await;
        assert_ack(
            &stream.next_message().await,
            json!(1),
            json!({"taskIds": [own]}),
        );
        streams.push((stream, own.clone()));
    }
    for round in 0..20 {
        for task in all {
            server
                .tasks
                .progress(&id(task), format!("round {round}"))
                .await
                .unwrap();
        }
    }
    // A last change per task: whatever a stream was handed before it arrives first.
    for task in all {
        server.tasks.progress(&id(task), "last").await.unwrap();
    }
    for (mut stream, own) in streams {
        let seen = stream.tasks_until(|p| p["statusMessage"] == "last").await;
        assert!(
            seen.iter().all(|p| p["taskId"] == own.as_str()),
            "a foreign task reached a stream: {seen:?}"
        );
    }
}

#[tokio::test]
async fn every_status_change_is_pushed_and_equals_tasks_get() {
    let server = Server::listening(ListenSupport::Stream).await;
    let client = server.client();
    let user = Some("alice");
    let first = client.create_task_id("job", json!({}), user).await;
    let second = client.create_task_id("job", json!({}), user).await;
    let third = client.create_task_id("job", json!({}), user).await;
    let mut stream = client
        .listen(user, json!(5), &[&first, &second, &third])
        .await;
    stream.next_message().await;
    // Right after the acknowledgment, each task as it is now.
    let snapshot = stream.snapshot(3).await;
    for task in [&first, &second, &third] {
        assert_eq!(
            without_meta(&snapshot[task.as_str()]),
            client.get_detailed(task, user).await
        );
    }
    let tasks = server.tasks.clone();

    // Each change is read, then compared with tasks/get before the next one.
    let mut check = async |task: &str, status: &str| {
        let params = stream.next_task().await;
        assert_eq!(params["_meta"], json!({SUB_ID: 5}));
        assert_eq!(params["status"], status, "{params}");
        assert!(params.get("resultType").is_none());
        assert_eq!(without_meta(&params), client.get_detailed(task, user).await);
        params
    };

    tasks.progress(&id(&first), "Step 1").await.unwrap();
    let params = check(&first, "working").await;
    assert_eq!(params["statusMessage"], "Step 1");

    let requests = InputRequests::new()
        .with("go", InputRequest::confirm("Go on?", "ok"))
        .with_status_message("Waiting");
    tasks.require_input(&id(&first), requests).await.unwrap();
    let params = check(&first, "input_required").await;
    assert_eq!(
        params["inputRequests"]["go"]["method"],
        "elicitation/create"
    );

    let waiter = tokio::spawn({
        let tasks = tasks.clone();
        let task = id(&first);
        async move { tasks.wait_for_input(&task).await }
    });
    let answer = json!({"action": "accept", "content": {"ok": true}});
    let ack = client.update(&first, json!({"go": answer}), user).await;
    assert_eq!(ack.ok()["resultType"], "complete");
    let params = check(&first, "working").await;
    assert!(params.get("inputRequests").is_none());
    let answers = within("the worker's answers", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answers["go"], answer);

    let result = json!({"content": [{"type": "text", "text": "done"}], "isError": false});
    tasks.complete(&id(&first), result).await.unwrap();
    let params = check(&first, "completed").await;
    assert_eq!(params["result"]["content"][0]["text"], "done");

    tasks
        .fail(&id(&second), RpcError::internal("backend crashed"))
        .await
        .unwrap();
    let params = check(&second, "failed").await;
    assert_eq!(
        params["error"],
        json!({"code": -32603, "message": "backend crashed"})
    );
    assert!(params.get("result").is_none());

    let ack = client.cancel(&third, user).await;
    assert_eq!(ack.ok()["resultType"], "complete");
    check(&third, "cancelled").await;
}

/// Hooks counting the store's reads, to show who polls it; each read is signalled.
#[derive(Debug)]
struct CountGets(watch::Sender<usize>);

impl StoreHooks for CountGets {
    fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
        if let StoreCall::Get { .. } = call {
            self.0.send_modify(|gets| *gets += 1);
        }
        Ok(())
    }
}

#[tokio::test]
async fn wait_for_input_wakes_on_the_answer_without_polling_the_store() {
    let (gets, mut reads) = watch::channel(0);
    let store = Arc::new(Intercept::new(MemoryStore::new(), CountGets(gets)));
    let server = Server::listening_with(ListenSupport::NotFound, listen_builder(store)).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), None).await;
    let requests = InputRequests::new().with("name", InputRequest::confirm("Name?", "name"));
    server
        .tasks
        .require_input(&id(&task), requests)
        .await
        .unwrap();

    let before = *reads.borrow_and_update();
    let mut waiter = tokio::spawn({
        let tasks = server.tasks.clone();
        let task = id(&task);
        async move { tasks.wait_for_input(&task).await }
    });
    let settled = *within("the worker's first read", reads.wait_for(|&n| n > before))
        .await
        .expect("the store is alive");
    // Nothing is answered yet: the worker waits, and reads nothing meanwhile.
    let early = tokio::time::timeout(Duration::from_millis(300), &mut waiter).await;
    assert!(early.is_err(), "wait_for_input resolved without an answer");
    assert_eq!(*reads.borrow(), settled, "the worker polled");

    let answer = json!({"action": "accept", "content": {"name": "Ada"}});
    client
        .update(&task, json!({"name": answer}), None)
        .await
        .ok();
    let answers = within("the worker's wake-up", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answers["name"], answer);
}

#[tokio::test]
async fn an_unread_stream_keeps_at_most_one_state_per_task() {
    let server = Server::listening(ListenSupport::Stream).await;
    let client = server.client();
    let a = client.create_task_id("job", json!({}), None).await;
    let b = client.create_task_id("job", json!({}), None).await;
    let mut stream = client.listen(None, json!(1), &[&a, &b]).await;
    stream.next_message().await;
    stream.snapshot(2).await;

    const UPDATES: usize = 5_000;
    for n in 1..=UPDATES {
        server.tasks.progress(&id(&a), n.to_string()).await.unwrap();
        server.tasks.progress(&id(&b), n.to_string()).await.unwrap();
        let pending = server.listen.pending_counts();
        assert_eq!(pending.len(), 1);
        assert!(pending[0] <= 2, "{pending:?} pending after {n} updates");
    }
    server
        .tasks
        .complete(&id(&a), json!({"content": []}))
        .await
        .unwrap();
    server
        .tasks
        .complete(&id(&b), json!({"content": []}))
        .await
        .unwrap();

    // Reading now: states arrive in order per task and end with the newest.
    let mut last = [0usize; 2];
    let mut done = [false; 2];
    while done != [true, true] {
        let params = stream.next_task().await;
        let k = usize::from(params["taskId"] == b.as_str());
        if params["status"] == "completed" {
            done[k] = true;
            continue;
        }
        assert!(!done[k], "a state arrived after the final one");
        let n: usize = params["statusMessage"].as_str().unwrap().parse().unwrap();
        assert!(n > last[k], "an older state after a newer one");
        last[k] = n;
    }
}

#[tokio::test]
async fn closing_a_stream_deregisters_it_at_once() {
    let server = Server::listening(ListenSupport::Stream).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), None).await;
    let mut merged = client.listen(None, json!(1), &[&task]).await;
    merged.next_message().await;
    let mut other = client.listen(None, json!(2), &[&task]).await;
    other.next_message().await;
    assert_eq!(server.listen.stream_count(), 2);
    let inner = server.inner_listen(0).await;
    let inner_sender = inner.sender.clone().unwrap();

    drop(merged);
    server
        .registry_until("one stream left", |l| l.stream_count() == 1)
        .await;
    // The inner service's stream is closed with it.
    within("the inner stream to close", inner_sender.closed()).await;

    drop(other);
    server
        .registry_until("no stream left", |l| l.stream_count() == 0)
        .await;
    assert!(server.listen.pending_counts().is_empty());
    // Changes after the disconnect go nowhere and cost nothing.
    server.tasks.progress(&id(&task), "after").await.unwrap();
    assert_eq!(server.listen.stream_count(), 0);
}

#[tokio::test]
async fn inner_events_stay_whole_and_the_inner_end_passes_through() {
    let server = Server::listening(ListenSupport::Stream).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), None).await;
    let mut stream = client
        .listen_with(
            None,
            json!(9),
            json!({"toolsListChanged": true, "taskIds": [task]}),
            true,
        )
        .await;
    stream.next_message().await;
    stream.snapshot(1).await;
    let mut inner = server.inner_listen(0).await;
    let sender = inner.sender.take().unwrap();
    within("the ack chunk taken", inner.taken.recv()).await;

    let changed = sse::event(
        &json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
        "params": {"_meta": {SUB_ID: 9}}}),
    );
    let (head, tail) = changed.split_at(25);
    sender.send(bytes::Bytes::copy_from_slice(head)).unwrap();
    within("the half event taken", inner.taken.recv()).await;
    // A task change while the inner event is half written waits for its end.
    server.tasks.progress(&id(&task), "between").await.unwrap();
    sender.send(bytes::Bytes::copy_from_slice(tail)).unwrap();
    let message = stream.next_message().await;
    assert_eq!(message["method"], "notifications/tools/list_changed");
    let params = stream.next_task().await;
    assert_eq!(params["statusMessage"], "between");

    // A graceful end: the inner result goes through, then the stream ends.
    let result = json!({"jsonrpc": "2.0", "id": 9, "result": {"resultType": "complete", "_meta": {SUB_ID: 9}}});
    sender.send(sse::event(&result)).unwrap();
    drop(sender);
    assert_eq!(stream.next_message().await, result);
    assert!(stream.next_event().await.is_none());
    server
        .registry_until("the ended stream is gone", |l| l.stream_count() == 0)
        .await;
}

#[tokio::test]
async fn an_inner_service_without_listen_support_gets_a_tasks_only_stream() {
    for support in [ListenSupport::NotFound, ListenSupport::SseError] {
        let server = Server::listening(support).await;
        let client = server.client();
        let task = client.create_task_id("job", json!({}), Some("alice")).await;
        let mut stream = client
            .listen_with(
                Some("alice"),
                json!(3),
                json!({"toolsListChanged": true, "taskIds": [task]}),
                true,
            )
            .await;
        assert_eq!(stream.status, 200, "{support:?}");
        assert_eq!(stream.headers["content-type"], "text/event-stream");
        assert_eq!(stream.headers["x-accel-buffering"], "no");
        assert_ack(
            &stream.next_message().await,
            json!(3),
            json!({"taskIds": [task]}),
        );
        stream.snapshot(1).await;
        server
            .tasks
            .complete(&id(&task), json!({"content": []}))
            .await
            .unwrap();
        let params = stream.next_task().await;
        assert_eq!(params["status"], "completed");
        assert_eq!(
            without_meta(&params),
            client.get_detailed(&task, Some("alice")).await
        );
    }
}

#[tokio::test]
async fn idle_streams_get_keep_alive_comments() {
    let layer =
        listen_builder(Arc::new(MemoryStore::new())).with_keep_alive(Duration::from_millis(50));
    let server = Server::listening_with(ListenSupport::Stream, layer).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), None).await;
    let mut stream = client.listen(None, json!(1), &[&task]).await;
    stream.next_message().await;
    stream.snapshot(1).await;
    for _ in 0..2 {
        let event = stream.next_event().await.unwrap();
        assert_eq!(event.data, None);
        assert_eq!(event.comments, vec!["keep-alive".to_owned()]);
    }
}

#[tokio::test]
async fn listen_requests_are_checked_before_anything_is_forwarded() {
    let server = Server::listening(ListenSupport::Stream).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), None).await;
    let listen = |notifications: Value, declare: bool| {
        client
            .request("subscriptions/listen")
            .id(json!(4))
            .params(json!({"notifications": notifications}))
            .declare(declare)
            .send()
    };

    let reply = listen(json!({"taskIds": [task]}), false).await;
    assert_eq!((reply.status.as_u16(), reply.code()), (400, Some(-32021)));
    assert_eq!(
        reply.json["error"]["data"]["requiredCapabilities"]["extensions"],
        json!({"io.modelcontextprotocol/tasks": {}})
    );
    assert_eq!(reply.json["id"], 4);

    let too_many: Vec<String> = (0..1001).map(|_| TaskId::random().to_string()).collect();
    for bad in [json!("x"), json!([1]), json!(too_many)] {
        let reply = listen(json!({"taskIds": bad}), true).await;
        assert_eq!(reply.code(), Some(-32602));
    }
    let at_most: Vec<String> = (0..1000).map(|_| TaskId::random().to_string()).collect();
    let mut stream = client
        .listen_with(None, json!(4), json!({"taskIds": at_most}), true)
        .await;
    assert_ack(
        &stream.next_message().await,
        json!(4),
        json!({"taskIds": []}),
    );
    drop(stream);

    // Without taskIds the listen is the inner service's alone.
    let mut plain = client
        .listen_with(None, json!(5), json!({"toolsListChanged": true}), false)
        .await;
    assert_ack(
        &plain.next_message().await,
        json!(5),
        json!({"toolsListChanged": true}),
    );
    server
        .registry_until("only the plain stream", |l| l.stream_count() == 0)
        .await;
}

#[tokio::test]
async fn a_disabled_layer_leaves_task_ids_to_the_inner_service() {
    let layer = listen_builder(Arc::new(MemoryStore::new())).with_enabled(false);
    let server = Server::listening_with(ListenSupport::Stream, layer).await;
    let client = server.client();
    let task = TaskId::random().to_string();
    let mut stream = client
        .listen_with(None, json!(1), json!({"taskIds": [task]}), true)
        .await;
    // An unknown field to the inner service, so absent from its acknowledgment.
    assert_ack(&stream.next_message().await, json!(1), json!({}));
    let inner = server.inner_listen(0).await;
    assert_eq!(
        inner.request["params"]["notifications"],
        json!({"taskIds": [task]})
    );
    assert_eq!(server.listen.stream_count(), 0);
}

#[derive(Debug)]
struct Panicking(mcp_tasks::notify::ListenNotifier);

impl TaskNotifier for Panicking {
    fn task_changed(&self, task: &TaskRecord) {
        self.0.task_changed(task);
        panic!("notifier failure");
    }
}

#[tokio::test]
async fn a_panicking_notifier_fails_neither_request_nor_worker() {
    let layer = listen_builder(Arc::new(MemoryStore::new()));
    let notifier = Panicking(layer.listen_notifier());
    let server =
        Server::listening_with(ListenSupport::NotFound, layer.with_notifier(notifier)).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), Some("alice")).await;
    let mut stream = client.listen(Some("alice"), json!(1), &[&task]).await;
    assert_ack(
        &stream.next_message().await,
        json!(1),
        json!({"taskIds": [task]}),
    );
    stream.snapshot(1).await;

    // The worker's write stands and is delivered, though the notifier panicked.
    server
        .tasks
        .progress(&id(&task), "still here")
        .await
        .unwrap();
    assert_eq!(stream.next_task().await["statusMessage"], "still here");
    // So does a client's.
    let ack = client.cancel(&task, Some("alice")).await;
    assert_eq!(ack.ok()["resultType"], "complete");
    assert_eq!(stream.next_task().await["status"], "cancelled");
    let got = client.get_detailed(&task, Some("alice")).await;
    assert_eq!(got["status"], "cancelled");
}

#[tokio::test]
async fn without_a_notifier_a_listen_agrees_to_no_task() {
    let layer = listen_builder(Arc::new(MemoryStore::new())).without_notifier();
    let server = Server::listening_with(ListenSupport::Stream, layer).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), None).await;
    let mut stream = client.listen(None, json!(1), &[&task]).await;
    assert_ack(
        &stream.next_message().await,
        json!(1),
        json!({"taskIds": []}),
    );
    server.tasks.progress(&id(&task), "unseen").await.unwrap();
    assert!(server.listen.pending_counts().iter().all(|&n| n == 0));
}

mod rmcp_inner {
    //! The layer in front of a real rmcp server (stateless, 2026-07-28).

    use std::borrow::Cow;
    use std::sync::Arc;

    use mcp_tasks::{MemoryStore, TaskContext, TaskSpec};
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
        ProtocolVersion, ServerCapabilities, ServerConfig,
    };
    use rmcp::service::{RequestContext, RoleServer};
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    use rmcp::{ErrorData, ServerHandler};
    use serde_json::json;
    use tower::Layer as _;

    use super::support::fixtures::listen_builder;
    use super::support::http::{Client, serve};
    use super::{SUB_ID, id, without_meta};

    #[derive(Clone)]
    struct Fixture;

    impl ServerHandler for Fixture {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
                .with_server_info(Implementation::new("listen-fixture", "1.0.0"))
        }

        fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
            Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
        }

        async fn call_tool(
            &self,
            _request: CallToolRequestParams,
            context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let ctx = context
                .extensions
                .get::<http::request::Parts>()
                .and_then(TaskContext::from_parts);
            let _ = ctx.map(|c| c.create(TaskSpec::new()));
            Ok(CallToolResult::success(vec![ContentBlock::text("sync")]).into())
        }
    }

    #[tokio::test]
    async fn task_notifications_in_front_of_rmcp() {
        for json_response in [true, false] {
            let layer = listen_builder(Arc::new(MemoryStore::new()))
                .build()
                .unwrap();
            let rmcp = StreamableHttpService::new(
                || Ok(Fixture),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default()
                    .with_legacy_session_mode(false)
                    .with_json_response(json_response)
                    .with_sse_keep_alive(None)
                    .with_sse_retry(None)
                    .disable_allowed_hosts(),
            );
            let server = serve(layer.layer(rmcp)).await;
            let client = Client::new(server.addr);
            let task = client.create_task_id("job", json!({}), Some("alice")).await;
            let mut stream = client
                .listen_with(
                    Some("alice"),
                    json!(11),
                    json!({"toolsListChanged": true, "taskIds": [task]}),
                    true,
                )
                .await;
            assert_eq!(stream.status, 200);
            let ack = stream.next_message().await;
            assert_eq!(
                ack["method"], "notifications/subscriptions/acknowledged",
                "{ack}"
            );
            assert_eq!(ack["params"]["_meta"][SUB_ID], 11);
            // rmcp answers listen with -32601 / 404, so the layer serves the stream
            // alone and agrees to the task ids only.
            assert_eq!(ack["params"]["notifications"], json!({"taskIds": [task]}));
            stream.snapshot(1).await;
            layer
                .tasks()
                .complete(&id(&task), json!({"content": []}))
                .await
                .unwrap();
            let params = stream.next_task().await;
            assert_eq!(params["_meta"], json!({SUB_ID: 11}));
            assert_eq!(
                without_meta(&params),
                client.get_detailed(&task, Some("alice")).await
            );
            server.abort();
        }
    }
}

#[tokio::test]
async fn an_inner_refusal_other_than_method_not_found_reaches_the_client() {
    let server = Server::listening(ListenSupport::Rejects).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), Some("alice")).await;
    let answer = client.listen(Some("alice"), json!(3), &[&task]).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.headers["content-type"], "application/json");
    let message = answer.json().await;
    assert_eq!(message["id"], 3);
    assert_eq!(message["error"]["code"], -32602);
    assert_eq!(server.listen.stream_count(), 0);
}

#[tokio::test]
async fn a_listen_opened_after_a_change_starts_with_the_current_state() {
    let server = Server::listening(ListenSupport::NotFound).await;
    let client = server.client();
    let waiting = client.create_task_id("job", json!({}), Some("alice")).await;
    let finished = client.create_task_id("job", json!({}), Some("alice")).await;
    let question = InputRequests::new()
        .with("go", InputRequest::confirm("Go on?", "ok"))
        .with_status_message("Waiting for you");
    server
        .tasks
        .require_input(&id(&waiting), question)
        .await
        .unwrap();
    server
        .tasks
        .complete(&id(&finished), json!({"content": []}))
        .await
        .unwrap();

    // Both changes happened before the stream existed.
    let mut stream = client
        .listen(Some("alice"), json!(4), &[&waiting, &finished])
        .await;
    stream.next_message().await;
    let snapshot = stream.snapshot(2).await;
    assert_eq!(snapshot[&waiting]["status"], "input_required");
    assert_eq!(snapshot[&waiting]["statusMessage"], "Waiting for you");
    assert_eq!(snapshot[&finished]["status"], "completed");
    for task in [&waiting, &finished] {
        assert_eq!(
            without_meta(&snapshot[task.as_str()]),
            client.get_detailed(task, Some("alice")).await
        );
    }
    // A change after it follows.
    let answer = json!({"go": {"action": "accept", "content": {"ok": true}}});
    client.update(&waiting, answer, Some("alice")).await.ok();
    let next = stream.next_task().await;
    assert_eq!(next["taskId"], waiting.as_str());
    assert_eq!(next["status"], "working");
}
