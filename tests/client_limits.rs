//! The client helper's caps, each against a scripted server on loopback that goes
//! past it: a reply or an event too large, too many input rounds or questions
//! (before a task and once it exists), a task that never ends, and a server out of
//! reach for longer than the poll retry budget; and HTTP errors without JSON-RPC.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use mcp_tasks::client::{
    Answer, Client, ClientError, ClientLimit, InputHandler, Question, ToolCall,
};
use mcp_tasks::error::BoxError;
use mcp_tasks::store::BoxFuture;
use serde_json::{Value, json};
use support::http::{Frames, TestServer, serve};
use support::wait::within;
use tokio::sync::mpsc;

/// How the scripted server answers one request: from its method, its message, and
/// how many requests of that method came before it.
type Script = Arc<dyn Fn(&str, &Value, usize) -> Response<Frames> + Send + Sync>;

/// A server that answers as `script` says and reports every request's message.
async fn scripted(script: Script) -> (TestServer, mpsc::UnboundedReceiver<Value>) {
    let (seen, requests) = mpsc::unbounded_channel();
    let counts = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let service = tower::service_fn(move |request: Request<Incoming>| {
        let (script, seen, counts) = (script.clone(), seen.clone(), counts.clone());
        async move {
            let body = request.into_body().collect().await?.to_bytes();
            let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let method = message["method"].as_str().unwrap_or("").to_owned();
            let n = {
                let mut counts = counts.lock().unwrap();
                let n: &mut usize = counts.entry(method.clone()).or_default();
                *n += 1;
                *n - 1
            };
            let _ = seen.send(message.clone());
            Ok::<_, BoxError>(script(&method, &message, n))
        }
    });
    (serve(service).await, requests)
}

fn json_reply(message: &Value, result: Value) -> Response<Frames> {
    let body = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
    let mut response = Response::new(Frames::full(serde_json::to_vec(&body).unwrap()));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    response
}

fn sse_reply(chunks: Vec<Bytes>) -> Response<Frames> {
    let mut response = Response::new(Frames::chunked(chunks));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, "text/event-stream".parse().unwrap());
    response
}

fn event(message: &Value) -> Bytes {
    Bytes::from(format!("data: {message}\n\n"))
}

fn text(bytes: usize) -> Value {
    json!({"content": [{"type": "text", "text": "x".repeat(bytes)}]})
}

fn task(status: &str, extra: Value) -> Value {
    let mut task = json!({"taskId": "t-1", "status": status, "pollIntervalMs": 50,
        "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": null});
    for (key, value) in extra.as_object().unwrap() {
        task[key] = value.clone();
    }
    task
}

fn question() -> Value {
    json!({"method": "elicitation/create", "params": {"message": "Go on?",
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}})
}

/// `n` questions under keys `{prefix}0..`.
fn questions(prefix: &str, n: usize) -> Value {
    (0..n)
        .map(|i| (format!("{prefix}{i}"), question()))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Says yes to everything, counting the questions.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicUsize>);

impl InputHandler for Counting {
    fn capabilities(&self) -> Value {
        json!({"elicitation": {"form": {}}})
    }

    fn answer<'a>(
        &'a self,
        _key: &'a str,
        _question: &'a Question,
    ) -> BoxFuture<'a, Result<Answer, BoxError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(Answer::confirm("ok", true)) })
    }
}

fn limit_of<T: std::fmt::Debug>(outcome: Result<T, ClientError>) -> ClientLimit {
    match outcome {
        Err(ClientError::LimitExceeded(limit)) => limit,
        other => panic!("expected a limit error, got {other:?}"),
    }
}

async fn call(client: &Client) -> Result<ToolCall, ClientError> {
    client.call_tool("big", json!({})).await
}

/// Waits for a request of `method`, skipping others.
async fn request_of(requests: &mut mpsc::UnboundedReceiver<Value>, method: &str) -> Value {
    within(method, async {
        loop {
            let message = requests.recv().await.expect("the server is up");
            if message["method"] == method {
                return message;
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_json_reply_larger_than_the_cap_is_refused() {
    let (server, _requests) = scripted(Arc::new(|_, message, _| {
        json_reply(message, text(256 << 10))
    }))
    .await;
    let capped = Client::new(&server.url)
        .unwrap()
        .with_max_response_bytes(64 << 10);
    assert_eq!(limit_of(call(&capped).await), ClientLimit::ResponseBytes);
    // The default cap takes it.
    let client = Client::new(&server.url).unwrap();
    assert!(matches!(call(&client).await, Ok(ToolCall::Complete(_))));
}

#[tokio::test]
async fn an_sse_reply_of_small_events_past_the_cap_is_refused() {
    // 256 events of 1 KiB and no response: four times the cap.
    let (server, _requests) = scripted(Arc::new(|_, _, _| {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"data": "y".repeat(1 << 10)}});
        sse_reply(vec![event(&note); 256])
    }))
    .await;
    let capped = Client::new(&server.url)
        .unwrap()
        .with_max_response_bytes(64 << 10);
    assert_eq!(limit_of(call(&capped).await), ClientLimit::ResponseBytes);
    // Without the cap the client reads it all and finds no response.
    let client = Client::new(&server.url).unwrap();
    assert!(matches!(call(&client).await, Err(ClientError::Http { .. })));
}

#[tokio::test]
async fn an_event_larger_than_the_cap_is_refused_whole_or_unfinished() {
    let (server, _requests) = scripted(Arc::new(|_, message, n| {
        let big = json!({"jsonrpc": "2.0", "id": message["id"], "result": text(64 << 10)});
        if n == 0 {
            // One whole event of 64 KiB.
            sse_reply(vec![event(&big)])
        } else {
            // An event that never ends, in 1 KiB pieces.
            let line = format!("data: {big}");
            let pieces = line.as_bytes().chunks(1 << 10).map(Bytes::copy_from_slice);
            sse_reply(pieces.collect())
        }
    }))
    .await;
    let client = Client::new(&server.url)
        .unwrap()
        .with_max_event_bytes(16 << 10);
    assert_eq!(limit_of(call(&client).await), ClientLimit::EventBytes);
    assert_eq!(limit_of(call(&client).await), ClientLimit::EventBytes);
}

#[tokio::test]
async fn a_listen_event_larger_than_the_cap_ends_the_follow() {
    let (server, _requests) = scripted(Arc::new(|method, message, _| match method {
        "tools/call" => json_reply(message, task("working", json!({"resultType": "task"}))),
        "subscriptions/listen" => {
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"notifications": {"taskIds": ["t-1"]}}});
            let note = json!({"jsonrpc": "2.0", "method": "notifications/tasks",
                "params": task("completed", json!({"result": text(64 << 10)}))});
            sse_reply(vec![event(&ack), event(&note)])
        }
        _ => json_reply(message, task("working", json!({"resultType": "complete"}))),
    }))
    .await;
    let client = Client::new(&server.url)
        .unwrap()
        .with_max_event_bytes(16 << 10);
    let Ok(ToolCall::Task(task)) = call(&client).await else {
        panic!("a task");
    };
    assert_eq!(limit_of(task.wait().await), ClientLimit::EventBytes);
}

#[tokio::test]
async fn input_rounds_before_a_task_are_capped() {
    let (server, _requests) = scripted(Arc::new(|_, message, _| {
        json_reply(
            message,
            json!({"resultType": "input_required", "inputRequests": questions("k", 1)}),
        )
    }))
    .await;
    let handler = Counting::default();
    let client = Client::new(&server.url)
        .unwrap()
        .with_input_handler(handler.clone())
        .with_max_input_rounds(3);
    assert_eq!(limit_of(call(&client).await), ClientLimit::InputRounds);
    assert_eq!(handler.0.load(Ordering::SeqCst), 3, "three rounds answered");
}

#[tokio::test]
async fn questions_of_one_round_before_a_task_are_capped() {
    let (server, _requests) = scripted(Arc::new(|_, message, _| {
        json_reply(
            message,
            json!({"resultType": "input_required", "inputRequests": questions("k", 100)}),
        )
    }))
    .await;
    let handler = Counting::default();
    let client = Client::new(&server.url)
        .unwrap()
        .with_input_handler(handler.clone())
        .with_max_input_keys(10);
    assert_eq!(limit_of(call(&client).await), ClientLimit::InputKeys);
    assert_eq!(handler.0.load(Ordering::SeqCst), 0, "nothing was asked");
}

/// A task that asks `per_round` new questions at every poll.
fn asking_task(per_round: usize) -> Script {
    Arc::new(move |method, message, n| match method {
        "tools/call" => json_reply(message, task("working", json!({"resultType": "task"}))),
        "tasks/get" => json_reply(
            message,
            task(
                "input_required",
                json!({"resultType": "complete", "inputRequests": questions(&format!("r{n}."), per_round)}),
            ),
        ),
        _ => json_reply(message, json!({"resultType": "complete"})),
    })
}

/// Follows a task that asks `per_round` new questions at every poll, with the
/// client's input caps set by `capped`: the follow ends at the `hit` limit after the
/// handler was asked `asked` questions, and the task is cancelled.
async fn an_asking_task_is_cut_off(
    per_round: usize,
    capped: impl FnOnce(Client) -> Client,
    hit: ClientLimit,
    asked: usize,
) {
    let (server, mut requests) = scripted(asking_task(per_round)).await;
    let handler = Counting::default();
    let client = Client::new(&server.url)
        .unwrap()
        .poll_only()
        .with_input_handler(handler.clone());
    let Ok(ToolCall::Task(task)) = call(&capped(client)).await else {
        panic!("a task");
    };
    assert_eq!(limit_of(task.wait().await), hit);
    assert_eq!(handler.0.load(Ordering::SeqCst), asked);
    request_of(&mut requests, "tasks/cancel").await;
}

#[tokio::test]
async fn input_rounds_of_a_task_are_capped_and_the_task_cancelled() {
    let two_rounds = |client: Client| client.with_max_input_rounds(2);
    an_asking_task_is_cut_off(1, two_rounds, ClientLimit::InputRounds, 2).await;
}

#[tokio::test]
async fn questions_of_a_task_are_capped_in_all_and_the_task_cancelled() {
    // Three questions a round; a cap of 7 lets two rounds through.
    let seven_keys = |client: Client| client.with_max_input_keys(7);
    an_asking_task_is_cut_off(3, seven_keys, ClientLimit::InputKeys, 6).await;
}

#[tokio::test]
async fn a_task_followed_past_the_follow_time_is_cancelled() {
    let (server, mut requests) = scripted(Arc::new(|method, message, _| match method {
        "tools/call" => json_reply(message, task("working", json!({"resultType": "task"}))),
        "tasks/get" => json_reply(message, task("working", json!({"resultType": "complete"}))),
        _ => json_reply(message, json!({"resultType": "complete"})),
    }))
    .await;
    let client = Client::new(&server.url)
        .unwrap()
        .poll_only()
        .with_max_follow_time(Duration::from_millis(300));
    let Ok(ToolCall::Task(task)) = call(&client).await else {
        panic!("a task");
    };
    let outcome = within("the follow time", task.wait()).await;
    assert_eq!(limit_of(outcome), ClientLimit::FollowTime);
    request_of(&mut requests, "tasks/cancel").await;
    assert_eq!(ClientLimit::FollowTime.to_string(), "max_follow_time");
}

fn plain_reply(status: StatusCode, text: &'static str) -> Response<Frames> {
    let mut response = Response::new(Frames::full(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
    response
}

#[tokio::test]
async fn an_http_error_without_json_rpc_reads_as_its_status() {
    let (server, _requests) = scripted(Arc::new(|_, _, _| {
        plain_reply(StatusCode::UNAUTHORIZED, "missing\n  bearer token\n")
    }))
    .await;
    let client = Client::new(&server.url).unwrap();
    let refused = call(&client).await.unwrap_err();
    assert!(
        matches!(refused, ClientError::Http { status, .. } if status == StatusCode::UNAUTHORIZED),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        "HTTP 401 Unauthorized: missing bearer token"
    );
}

/// A task whose first `outage` polls meet a gateway's 503, then completes.
fn behind_a_restarting_gateway(outage: usize) -> Script {
    Arc::new(move |method, message, n| match method {
        "tools/call" => json_reply(message, task("working", json!({"resultType": "task"}))),
        "tasks/get" if n < outage => {
            plain_reply(StatusCode::SERVICE_UNAVAILABLE, "upstream restarting")
        }
        "tasks/get" => json_reply(
            message,
            task(
                "completed",
                json!({"resultType": "complete", "result": text(1)}),
            ),
        ),
        _ => json_reply(message, json!({"resultType": "complete"})),
    })
}

#[tokio::test]
async fn a_follow_rides_out_an_outage_within_its_poll_retry_budget() {
    // Ten failed polls 50 ms apart: half a second out of reach.
    let (server, _requests) = scripted(behind_a_restarting_gateway(10)).await;
    let client = Client::new(&server.url)
        .unwrap()
        .poll_only()
        .with_poll_retry_budget(Duration::from_secs(5));
    let Ok(ToolCall::Task(task)) = call(&client).await else {
        panic!("a task");
    };
    let result = within("the follow", task.wait()).await.unwrap();
    assert_eq!(result, text(1));
}

#[tokio::test]
async fn a_follow_gives_up_once_its_poll_retry_budget_is_spent() {
    let (server, mut requests) = scripted(behind_a_restarting_gateway(usize::MAX)).await;
    let client = Client::new(&server.url)
        .unwrap()
        .poll_only()
        .with_poll_retry_budget(Duration::from_millis(300));
    let Ok(ToolCall::Task(task)) = call(&client).await else {
        panic!("a task");
    };
    let started = std::time::Instant::now();
    let outcome = within("the follow", task.wait()).await;
    assert!(
        matches!(outcome, Err(ClientError::Http { status, .. }) if status == StatusCode::SERVICE_UNAVAILABLE),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "gave up after {:?}",
        started.elapsed()
    );
    // Returning with an error leaves the task as it is: no cancel was sent.
    drop(client);
    let mut seen = Vec::new();
    while let Ok(message) = requests.try_recv() {
        seen.push(message["method"].as_str().unwrap_or("").to_owned());
    }
    assert!(!seen.iter().any(|m| m == "tasks/cancel"), "{seen:?}");
    assert!(
        seen.iter().filter(|m| *m == "tasks/get").count() >= 3,
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_server_gone_for_good_ends_the_follow_after_the_budget() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/mcp", listener.local_addr().unwrap())
    };
    let client = Client::new(&closed)
        .unwrap()
        .with_poll_retry_budget(Duration::from_millis(200));
    let started = std::time::Instant::now();
    let outcome = within(
        "the follow",
        client.resume(mcp_tasks::client::TaskRef::new("t-1")).wait(),
    )
    .await;
    assert!(
        matches!(outcome, Err(ClientError::Transport(_))),
        "{outcome:?}"
    );
    // The first retry would come after the default interval (1 s), past the budget.
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "gave up after {:?}",
        started.elapsed()
    );
}
