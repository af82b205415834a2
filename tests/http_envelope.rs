//! Hostile load at the envelope and the size caps, over real HTTP: the strict
//! JSON-RPC envelope and the notification form of the routes the layer answers
//! itself, the media-type checks, exact id echo, the caps on input responses and
//! results, and SSE decisions bounded by the response cap and taken from the
//! response event rather than the end of the stream.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use mcp_tasks::body::RequestBody;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::test_suite::{Intercept, StoreCall, StoreHooks};
use mcp_tasks::{
    MemoryStore, TaskContext, TaskMode, TaskSpec, TasksLayer, error::StoreError, wire::RpcError,
};
use serde_json::{Value, json};
use support::fixtures::{Server, layer_builder, text_result};
use support::http::{Client, Frames, serve_layered};
use support::wait::{recv, within};
use tokio::sync::mpsc;

const TASK_METHODS: [&str; 5] = [
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/list",
    "tasks/result",
];

fn task_params(method: &str, id: &str) -> Value {
    if method == "tasks/update" {
        json!({"taskId": id, "inputResponses": {"k": {"action": "accept"}}})
    } else {
        json!({"taskId": id})
    }
}

/// The body of a modern request for `method`, with `id_and_version` spliced in as
/// written (`"jsonrpc":"2.0","id":7`, say).
fn raw_request(method: &str, params: &Value, id_and_version: &str) -> String {
    let mut params = params.clone();
    params["_meta"] = support::requests::modern_meta(true);
    format!(r#"{{{id_and_version},"method":"{method}","params":{params}}}"#)
}

/// Counts every store call.
#[derive(Debug, Clone, Default)]
struct Counting(Arc<AtomicUsize>);

impl StoreHooks for Counting {
    fn before(&self, _call: StoreCall<'_>) -> Result<(), StoreError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

async fn counting_server() -> (Server, Arc<AtomicUsize>) {
    let hooks = Counting::default();
    let calls = hooks.0.clone();
    let store = Intercept::new(MemoryStore::new(), hooks);
    let server = Server::with_layer(
        TasksLayer::builder(store)
            .with_anonymous_tasks()
            .without_janitor(),
    )
    .await;
    (server, calls)
}

// ---------------------------------------------------------------------------
// A. The envelope and the notification form

#[tokio::test]
async fn a_tasks_notification_gets_202_and_touches_nothing() {
    let (server, calls) = counting_server().await;
    let client = server.client();
    let existing = client.create_task_id("work", json!({}), None).await;
    let before = calls.load(Ordering::SeqCst);
    for method in TASK_METHODS {
        let params = task_params(method, &existing);
        let reply = client
            .request(method)
            .params(params.clone())
            .raw_body(raw_request(method, &params, r#""jsonrpc":"2.0""#))
            .send()
            .await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "{method}: {}",
            reply.text()
        );
        assert!(reply.body.is_empty(), "{method}: {}", reply.text());
    }
    assert_eq!(calls.load(Ordering::SeqCst), before, "no store access");
    // The notification form of tasks/cancel cancelled nothing.
    assert_eq!(client.get(&existing, None).await.ok()["status"], "working");
    assert_eq!(
        server.inner.request_count(),
        1,
        "only the tools/call reached it"
    );
}

#[tokio::test]
async fn jsonrpc_must_be_exactly_2_0() {
    let (server, calls) = counting_server().await;
    let client = server.client();
    let id = client.create_task_id("work", json!({}), None).await;
    let before = calls.load(Ordering::SeqCst);
    for version in [
        r#""jsonrpc":"1.0","id":3"#,
        r#""jsonrpc":2.0,"id":3"#,
        r#""jsonrpc":null,"id":3"#,
        r#""id":3"#,
    ] {
        let params = task_params("tasks/get", &id);
        let reply = client
            .request("tasks/get")
            .params(params.clone())
            .raw_body(raw_request("tasks/get", &params, version))
            .send()
            .await;
        reply.assert_error(RpcError::INVALID_REQUEST, 400);
        assert_eq!(reply.json["id"], 3, "{version}: a valid id is echoed");
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        before,
        "refused before any lookup"
    );
}

#[tokio::test]
async fn an_id_that_is_not_a_string_or_an_integer_is_invalid_request_with_a_null_id() {
    let (server, calls) = counting_server().await;
    let client = server.client();
    let task = client.create_task_id("work", json!({}), None).await;
    let before = calls.load(Ordering::SeqCst);
    for method in TASK_METHODS {
        for id in ["null", "true", "1.5", "[1]", "{}", "1e3"] {
            let params = task_params(method, &task);
            let reply = client
                .request(method)
                .params(params.clone())
                .raw_body(raw_request(
                    method,
                    &params,
                    &format!(r#""jsonrpc":"2.0","id":{id}"#),
                ))
                .send()
                .await;
            reply.assert_error(RpcError::INVALID_REQUEST, 400);
            assert!(
                reply.json["id"].is_null(),
                "{method} {id}: {}",
                reply.text()
            );
        }
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        before,
        "refused before any lookup"
    );
    assert_eq!(client.get(&task, None).await.ok()["status"], "working");
}

#[tokio::test]
async fn ids_are_echoed_exactly_as_sent() {
    let server = Server::standard().await;
    let client = server.client();
    let task = client.create_task_id("work", json!({}), None).await;
    for (id, echoed) in [
        ("18446744073709551616", "18446744073709551616"),
        ("-9223372036854775809", "-9223372036854775809"),
        (
            "123456789012345678901234567890",
            "123456789012345678901234567890",
        ),
        (r#""\u0041b""#, r#""\u0041b""#),
    ] {
        // A success, and an error (unknown task), both echo the id as written.
        for task_id in [task.as_str(), "unknown"] {
            let params = task_params("tasks/get", task_id);
            let reply = client
                .request("tasks/get")
                .params(params.clone())
                .raw_body(raw_request(
                    "tasks/get",
                    &params,
                    &format!(r#""jsonrpc":"2.0","id":{id}"#),
                ))
                .send()
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
            let expected = format!(r#""id":{echoed},"#);
            assert!(reply.text().contains(&expected), "{id}: {}", reply.text());
            assert!(!reply.text().contains("e+"), "{}", reply.text());
        }
    }
}

#[tokio::test]
async fn a_wrong_content_type_is_415_with_a_json_rpc_error() {
    let server = Server::standard().await;
    let client = server.client();
    let task = client.create_task_id("work", json!({}), None).await;
    for method in TASK_METHODS {
        for content_type in ["text/plain", "application/x-www-form-urlencoded", "json"] {
            let reply = client
                .request(method)
                .params(task_params(method, &task))
                .id(json!(8))
                .header("content-type", content_type)
                .send()
                .await;
            reply.assert_error(RpcError::INVALID_REQUEST, 415);
            assert!(
                reply.json["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("application/json"),
                "{}",
                reply.text()
            );
            assert_eq!(reply.json["id"], 8);
        }
        let missing = client
            .request(method)
            .params(task_params(method, &task))
            .without_header("content-type")
            .send()
            .await;
        missing.assert_error(RpcError::INVALID_REQUEST, 415);
    }
    // Parameters and case do not matter.
    let reply = client
        .request("tasks/get")
        .params(json!({"taskId": task}))
        .header("content-type", "Application/JSON; charset=utf-8")
        .send()
        .await;
    assert_eq!(reply.ok()["taskId"], task.as_str());
}

#[tokio::test]
async fn an_accept_without_json_is_406_and_is_checked_before_the_content_type() {
    let server = Server::standard().await;
    let client = server.client();
    let task = client.create_task_id("work", json!({}), None).await;
    for method in TASK_METHODS {
        for accept in [
            "text/event-stream",
            "application/json;q=0",
            "text/html, */*;q=0",
        ] {
            let reply = client
                .request(method)
                .params(task_params(method, &task))
                .header("accept", accept)
                .send()
                .await;
            reply.assert_error(RpcError::INVALID_REQUEST, 406);
            assert!(
                reply.json["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("Not Acceptable"),
                "{}",
                reply.text()
            );
        }
    }
    let both = client
        .request("tasks/get")
        .params(json!({"taskId": task}))
        .header("accept", "text/html")
        .header("content-type", "text/plain")
        .send()
        .await;
    both.assert_error(RpcError::INVALID_REQUEST, 406);
    for accept in [
        "*/*",
        "application/*",
        "text/html;q=0.9, application/json;q=0.1",
    ] {
        let reply = client
            .request("tasks/get")
            .params(json!({"taskId": task}))
            .header("accept", accept)
            .send()
            .await;
        assert_eq!(reply.ok()["status"], "working", "{accept}");
    }
}

#[tokio::test]
async fn a_well_formed_request_still_works() {
    let server = Server::standard().await;
    let client = server.client();
    let task = client.create_task_id("work", json!({}), None).await;
    let reply = client
        .request("tasks/get")
        .params(json!({"taskId": task}))
        .id(json!("req-1"))
        .send()
        .await;
    assert_eq!(reply.ok()["taskId"], task.as_str());
    assert_eq!(reply.json["id"], "req-1");
    assert_eq!(reply.content_type(), "application/json");
    let cancelled = client.cancel(&task, None).await;
    assert_eq!(cancelled.ok()["resultType"], "complete");
    let removed = client.request("tasks/list").id(json!(-4)).send().await;
    removed.assert_error(RpcError::METHOD_NOT_FOUND, 404);
    assert_eq!(removed.json["id"], -4);
}

// ---------------------------------------------------------------------------
// B. Size caps

/// A task waiting for the answer `key`, made through the worker API.
async fn asking_task(server: &Server, client: &Client, keys: &[&str]) -> String {
    let id = client.create_task_id("work", json!({}), None).await;
    let mut ask = InputRequests::new();
    for key in keys {
        ask = ask.with(*key, InputRequest::confirm("Go on?", "ok"));
    }
    server
        .tasks
        .require_input(&id.parse().unwrap(), ask)
        .await
        .unwrap();
    id
}

fn answer_of(bytes: usize) -> Value {
    json!({"action": "accept", "content": {"ok": true, "pad": "x".repeat(bytes)}})
}

#[tokio::test]
async fn an_oversized_answer_is_refused_and_the_task_stays_answerable() {
    let server = Server::with_layer(layer_builder().with_max_input_response_bytes(1024)).await;
    let client = server.client();
    let id = asking_task(&server, &client, &["go"]).await;
    let reply = client
        .update(&id, json!({"go": answer_of(2048)}), None)
        .await;
    reply.assert_error(RpcError::INVALID_PARAMS, 200);
    let message = reply.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_input_response_bytes"), "{message}");
    assert!(message.contains("1024"), "{message}");
    let task = client.get(&id, None).await;
    assert_eq!(task.ok()["status"], "input_required");
    assert!(task.ok()["inputRequests"]["go"].is_object());
    // A small answer still goes through.
    let small = client.update(&id, json!({"go": answer_of(10)}), None).await;
    assert_eq!(small.ok()["resultType"], "complete");
    assert_eq!(client.get(&id, None).await.ok()["status"], "working");
    let answers = server
        .tasks
        .wait_for_input(&id.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(answers["go"]["content"]["pad"], "x".repeat(10));
}

#[tokio::test]
async fn answers_kept_per_task_are_capped() {
    let server = Server::with_layer(
        layer_builder()
            .with_max_input_response_bytes(4096)
            .with_max_task_input_bytes(5000),
    )
    .await;
    let client = server.client();
    let id = asking_task(&server, &client, &["a", "b", "c"]).await;
    let first = client
        .update(&id, json!({"a": answer_of(3000)}), None)
        .await;
    assert_eq!(first.ok()["resultType"], "complete");
    // 3 000 kept plus 3 000 more passes the 5 000 bytes a task keeps.
    let second = client
        .update(&id, json!({"b": answer_of(3000)}), None)
        .await;
    second.assert_error(RpcError::INVALID_PARAMS, 200);
    let message = second.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_task_input_bytes"), "{message}");
    let task = client.get(&id, None).await;
    assert_eq!(task.ok()["status"], "input_required");
    let outstanding = task.ok()["inputRequests"].as_object().unwrap();
    assert!(outstanding.contains_key("b") && outstanding.contains_key("c"));
    // Answers to keys that are not outstanding are ignored, and count for nothing.
    let both = json!({"b": answer_of(100), "c": answer_of(100), "zzz": answer_of(3000)});
    assert_eq!(
        client.update(&id, both, None).await.ok()["resultType"],
        "complete"
    );
    assert_eq!(client.get(&id, None).await.ok()["status"], "working");
}

#[tokio::test]
async fn an_oversized_worker_result_fails_the_task() {
    let server = Server::with_layer(layer_builder().with_max_result_bytes(4096)).await;
    let client = server.client();
    let id = client.create_task_id("work", json!({}), None).await;
    let task_id = id.parse().unwrap();
    let big = text_result(&"x".repeat(5000));
    let refused = server.tasks.complete(&task_id, big).await.unwrap_err();
    assert!(
        matches!(refused, mcp_tasks::error::TaskError::Refused(_)),
        "{refused:?}"
    );
    let task = client.get(&id, None).await;
    assert_eq!(task.ok()["status"], "failed", "{}", task.text());
    assert_eq!(task.ok()["error"]["code"], RpcError::INTERNAL_ERROR);
    assert_eq!(task.ok()["error"]["message"], "Result too large");
    assert!(task.ok().get("result").is_none());
    // Within the cap, a result is stored as before.
    let other = client.create_task_id("work", json!({}), None).await;
    let small = text_result(&"x".repeat(100));
    server
        .tasks
        .complete(&other.parse().unwrap(), small)
        .await
        .unwrap();
    assert_eq!(client.get(&other, None).await.ok()["status"], "completed");
}

/// A layer whose inner `tools/call` answers with the SSE body the test writes on
/// the returned sender.
async fn sse_server(builder: mcp_tasks::TasksLayerBuilder, wants_task: bool) -> SseServer {
    let (bodies_tx, bodies) = mpsc::unbounded_channel();
    let inner = tower::service_fn(move |req: Request<RequestBody<hyper::body::Incoming>>| {
        let bodies_tx = bodies_tx.clone();
        async move {
            if wants_task && let Some(ctx) = TaskContext::from_extensions(req.extensions()) {
                let _ = ctx.create(TaskSpec::new());
            }
            let (tx, rx) = mpsc::unbounded_channel();
            bodies_tx.send(tx).unwrap();
            let mut response = Response::new(Frames::fed(rx, mpsc::unbounded_channel().0));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/event-stream"),
            );
            Ok::<_, Infallible>(response)
        }
    });
    let layer = builder.without_janitor().build().unwrap();
    let http = serve_layered(&layer, inner).await;
    let client = Client::new(http.addr);
    SseServer {
        _http: http,
        client,
        bodies,
    }
}

/// The server of [`sse_server`]: its client, and the body sender of each call the
/// inner service received, in order.
struct SseServer {
    _http: support::http::TestServer,
    client: Client,
    bodies: mpsc::UnboundedReceiver<mpsc::UnboundedSender<Bytes>>,
}

impl SseServer {
    /// Sends `tools/call` of `tool` (request id `id`) in the background, read whole,
    /// and waits until the inner service has it: the reply to come and the inner
    /// call's body, which the test feeds.
    async fn call(
        &mut self,
        id: u64,
        tool: &str,
    ) -> (
        tokio::task::JoinHandle<support::http::Reply>,
        mpsc::UnboundedSender<Bytes>,
    ) {
        let call = self.client.clone();
        let params = json!({"name": tool, "arguments": {}});
        let sending = tokio::spawn(async move {
            call.request("tools/call")
                .id(json!(id))
                .params(params)
                .send()
                .await
        });
        (sending, recv("the inner call", &mut self.bodies).await)
    }

    /// As [`call`](Self::call), with the reply opened as a stream.
    async fn open(
        &mut self,
        id: u64,
        tool: &str,
    ) -> (
        tokio::task::JoinHandle<support::http::EventStream>,
        mpsc::UnboundedSender<Bytes>,
    ) {
        let call = self.client.clone();
        let params = json!({"name": tool, "arguments": {}});
        let opening = tokio::spawn(async move {
            call.request("tools/call")
                .id(json!(id))
                .params(params)
                .open()
                .await
        });
        (opening, recv("the inner call", &mut self.bodies).await)
    }
}

fn call_response(id: i64, result: Value) -> Bytes {
    support::sse::event(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

#[tokio::test]
async fn an_oversized_auto_result_fails_the_task() {
    let builder = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .with_max_result_bytes(4096)
        .with_tool_mode(
            "slow",
            TaskMode::Auto {
                after: Duration::from_millis(1),
            },
        );
    let mut server = sse_server(builder, false).await;
    let (sending, body) = server.call(1, "slow").await;
    let created = within("the call becomes a task", sending).await.unwrap();
    assert_eq!(created.ok()["resultType"], "task", "{}", created.text());
    let id = created.ok()["taskId"].as_str().unwrap().to_owned();
    body.send(call_response(1, text_result(&"x".repeat(5000))))
        .unwrap();
    let task = server.client.wait_for_end(&id, None).await;
    assert_eq!(task["status"], "failed", "{task}");
    assert_eq!(task["error"]["code"], RpcError::INTERNAL_ERROR);
    assert_eq!(task["error"]["message"], "Result too large");
    drop(body);
}

// ---------------------------------------------------------------------------
// C. SSE decisions: bounded, and taken from the response event

#[tokio::test]
async fn an_sse_tool_whose_stream_stays_open_still_becomes_a_task() {
    let mut server = sse_server(
        TasksLayer::builder(MemoryStore::new()).with_anonymous_tasks(),
        true,
    )
    .await;
    let (sending, body) = server.call(2, "any").await;
    body.send(call_response(2, json!({"content": []}))).unwrap();
    // `body` stays open: the decision must not wait for the end of the stream.
    let reply = within("the task handle", sending).await.unwrap();
    assert_eq!(reply.result()["resultType"], "task", "{}", reply.text());
    assert!(support::is_task_id(&reply.result()["taskId"]));
    drop(body);
}

#[tokio::test]
async fn an_auto_task_completes_from_the_response_event_of_an_open_stream() {
    let builder = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .with_tool_mode(
            "slow",
            TaskMode::Auto {
                after: Duration::from_millis(1),
            },
        );
    let mut server = sse_server(builder, false).await;
    let (sending, body) = server.call(3, "slow").await;
    let created = within("the call becomes a task", sending).await.unwrap();
    let id = created.ok()["taskId"].as_str().unwrap().to_owned();
    body.send(call_response(3, text_result("done"))).unwrap();
    // The stream stays open; the task completes from the response event alone.
    let task = server.client.wait_for_end(&id, None).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["result"]["content"][0]["text"], "done");
    drop(body);
}

#[tokio::test]
async fn an_auto_call_answered_in_time_streams_on_after_its_response() {
    let builder = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .with_tool_mode(
            "quick",
            TaskMode::Auto {
                after: Duration::from_secs(30),
            },
        );
    let mut server = sse_server(builder, false).await;
    let (opening, body) = server.open(4, "quick").await;
    let answer = call_response(4, text_result("quick"));
    body.send(answer.clone()).unwrap();
    // The answer arrives while the inner stream is still open (well within 30 s).
    let mut stream = within("the answer", opening).await.unwrap();
    let event = stream.next_event().await.expect("the response event");
    assert_eq!(event.message()["result"]["content"][0]["text"], "quick");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
    body.send(support::sse::event(&note)).unwrap();
    let after = stream
        .next_event()
        .await
        .expect("what follows the response");
    assert_eq!(after.message()["method"], "notifications/message");
    drop(body);
    assert!(stream.next_event().await.is_none());
}

#[tokio::test]
async fn an_unterminated_event_larger_than_the_cap_passes_through() {
    let builder = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .with_max_response_bytes(1024);
    let mut server = sse_server(builder, true).await;
    let (opening, body) = server.open(5, "any").await;
    let huge = Bytes::from(format!("data: {}", "y".repeat(4096)));
    body.send(huge.clone()).unwrap();
    let mut stream = within("the stream head", opening).await.unwrap();
    // The unfinished event passes as it is, before the event ends.
    let mut seen = Vec::new();
    within("the oversized event passes before it ends", async {
        while seen.len() < huge.len() {
            let (chunk, _) = stream.next_chunk_at().await.expect("the oversized event");
            seen.extend_from_slice(&chunk);
        }
    })
    .await;
    assert_eq!(seen, huge.to_vec());
    // The decision was given up: the handler's own response follows unchanged.
    let rest = Bytes::from_static(b"\n\n");
    body.send(rest).unwrap();
    let answer = call_response(5, text_result("the handler's own"));
    body.send(answer.clone()).unwrap();
    drop(body);
    let mut tail = Vec::new();
    within("the rest of the stream", async {
        while let Some((chunk, _)) = stream.next_chunk_at().await {
            tail.extend_from_slice(&chunk);
        }
    })
    .await;
    assert_eq!(tail, [&b"\n\n"[..], &answer[..]].concat());
}
