//! `with_inner_tasks`: a layer in front of a server with tasks of its own carries
//! them (its `CreateTaskResult`, `tasks/get|update|cancel` and listen pass
//! through), while the layer's own `Auto` tasks go on beside them.

mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use mcp_tasks::body::RequestBody;
use mcp_tasks::error::ConfigError;
use mcp_tasks::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES};
use mcp_tasks::{MemoryStore, TaskId, TaskMode, TasksLayer, TasksLayerBuilder};
use serde_json::{Value, json};
use support::http::{Client, Frames, TestServer, serve_layered};
use support::is_task_id;
use support::logs::Logged;
use tokio::sync::{mpsc, watch};

const PREFIX: &str = "in.";
/// The budget of the tools that answer at once: never reached.
const LONG: Duration = Duration::from_secs(30);
/// The budget of the gated tools: past it long before the test opens the gate.
const SHORT: Duration = Duration::from_millis(20);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A server with tasks of its own, ids `in.<n>`:
/// - `own`: answers at once with a task of its own;
/// - `slow`: a plain result, once the gate opens;
/// - `late`: a task of its own, once the gate opens;
/// - `tasks/get|update|cancel`: from its own table (-32602 "inner: no such task"
///   for an id it does not know);
/// - `subscriptions/listen`: an acknowledgment of the `taskIds` it was sent, then a
///   `notifications/tasks` for each.
#[derive(Clone)]
struct Own {
    tasks: Arc<Mutex<HashMap<String, Value>>>,
    received: Arc<Mutex<Vec<Value>>>,
    sent: Arc<Mutex<Vec<Bytes>>>,
    gate: watch::Sender<bool>,
    /// Keeps listen streams open.
    streams: Arc<Mutex<Vec<mpsc::UnboundedSender<Bytes>>>>,
}

impl Own {
    fn new() -> Own {
        Own {
            tasks: Arc::default(),
            received: Arc::default(),
            sent: Arc::default(),
            gate: watch::channel(false).0,
            streams: Arc::default(),
        }
    }

    fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    /// Every message received with `method`.
    fn received(&self, method: &str) -> Vec<Value> {
        lock(&self.received)
            .iter()
            .filter(|m| m["method"] == method)
            .cloned()
            .collect()
    }

    fn last_sent(&self) -> Bytes {
        lock(&self.sent).last().cloned().expect("sent something")
    }

    fn new_task(&self) -> Value {
        let mut tasks = lock(&self.tasks);
        let id = format!("{PREFIX}{}", tasks.len() + 1);
        let task = json!({"taskId": id, "status": "working",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
            "ttlMs": 60000, "pollIntervalMs": 500});
        tasks.insert(id, task.clone());
        task
    }

    async fn handle(self, request: Request<RequestBody<Incoming>>) -> Response<Frames> {
        let bytes = request.into_body().collect().await.unwrap().to_bytes();
        let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        lock(&self.received).push(message.clone());
        let id = message["id"].clone();
        let params = &message["params"];
        let result = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
        let created = |task: Value| {
            let mut task = task;
            task["resultType"] = json!("task");
            result(task)
        };
        let answer = match message["method"].as_str().unwrap_or("") {
            "tools/call" => match params["name"].as_str().unwrap_or("") {
                "own" => created(self.new_task()),
                "slow" | "late" => {
                    let mut gate = self.gate.subscribe();
                    let _ = gate.wait_for(|open| *open).await;
                    if params["name"] == "late" {
                        created(self.new_task())
                    } else {
                        result(json!({"content": [{"type": "text", "text": "slow done"}]}))
                    }
                }
                _ => json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32602, "message": "Unknown tool"}}),
            },
            method @ ("tasks/get" | "tasks/update" | "tasks/cancel") => {
                let task_id = params["taskId"].as_str().unwrap_or("");
                let mut tasks = lock(&self.tasks);
                match tasks.get_mut(task_id) {
                    None => json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32602, "message": "inner: no such task"}}),
                    Some(task) => match method {
                        "tasks/get" => {
                            let mut task = task.clone();
                            task["resultType"] = json!("complete");
                            task["_meta"] = json!({"answeredBy": "inner"});
                            result(task)
                        }
                        "tasks/update" => {
                            task["answers"] = params["inputResponses"].clone();
                            result(json!({"resultType": "complete"}))
                        }
                        _ => {
                            task["status"] = json!("cancelled");
                            result(json!({"resultType": "complete"}))
                        }
                    },
                }
            }
            "subscriptions/listen" => return self.listen(&message),
            other => result(json!({"resultType": "complete", "echo": other})),
        };
        let body = Bytes::from(serde_json::to_vec(&answer).unwrap());
        lock(&self.sent).push(body.clone());
        let mut response = Response::new(Frames::full(body));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }

    fn listen(&self, request: &Value) -> Response<Frames> {
        let ids = request["params"]["notifications"]["taskIds"].clone();
        let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": request["id"]},
                "notifications": {"taskIds": ids}}});
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(support::sse::event(&ack)).unwrap();
        for id in ids.as_array().into_iter().flatten() {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/tasks",
                "params": {"taskId": id, "status": "working", "statusMessage": "from inner"}});
            tx.send(support::sse::event(&note)).unwrap();
        }
        lock(&self.streams).push(tx);
        let mut response = Response::new(Frames::fed(rx, mpsc::unbounded_channel().0));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response
    }
}

/// The layer's settings here: `own` answers within its budget, `slow` and `late`
/// run past theirs.
/// The layer under test, serving callers without a principal (most tests send none).
fn builder() -> TasksLayerBuilder {
    refusing_anonymous().with_anonymous_tasks()
}

/// The same layer as it is by default: tasks need a principal.
fn refusing_anonymous() -> TasksLayerBuilder {
    TasksLayer::builder(MemoryStore::new())
        .without_janitor()
        .with_default_mode(TaskMode::Auto { after: LONG })
        .with_tool_mode("slow", TaskMode::Auto { after: SHORT })
        .with_tool_mode("late", TaskMode::Auto { after: SHORT })
}

async fn start(builder: TasksLayerBuilder) -> (TestServer, Client, Own) {
    let layer = builder.build().expect("a valid layer");
    let own = Own::new();
    let inner = own.clone();
    let service = tower::service_fn(move |request: Request<RequestBody<Incoming>>| {
        let inner = inner.clone();
        async move { Ok::<_, Infallible>(inner.handle(request).await) }
    });
    let server = serve_layered(&layer, service).await;
    let client = Client::new(server.addr);
    (server, client, own)
}

async fn carrying() -> (TestServer, Client, Own) {
    start(builder().with_inner_tasks(PREFIX)).await
}

#[tokio::test]
async fn an_inner_task_reaches_the_client_unchanged() {
    let (_server, client, own) = carrying().await;
    let reply = client.call_tool("own", json!({}), true, None).await;
    let result = reply.ok();
    assert_eq!(result["resultType"], "task");
    assert_eq!(result["taskId"], "in.1");
    assert_eq!(reply.body, own.last_sent(), "byte for byte");
    // The call went on with the extension: the inner server may make tasks.
    let call = &own.received("tools/call")[0];
    assert!(
        call["params"]["_meta"][META_CLIENT_CAPABILITIES]["extensions"]
            .get(EXTENSION_ID)
            .is_some(),
        "{call}"
    );
}

#[tokio::test]
async fn get_update_and_cancel_of_inner_ids_reach_the_inner_server() {
    let (_server, client, own) = carrying().await;
    let task = client.create_task_id("own", json!({}), None).await;

    let got = client.get(&task, None).await;
    assert_eq!(got.ok()["_meta"]["answeredBy"], "inner", "{}", got.text());
    assert_eq!(got.ok()["status"], "working");

    let answers = json!({"q": {"action": "accept", "content": {"ok": true}}});
    client.update(&task, answers.clone(), None).await.ok();
    assert_eq!(lock(&own.tasks)[&task]["answers"], answers);

    client.cancel(&task, None).await.ok();
    // Forwarded with every log on, the id is never logged.
    let (logged, guard) = Logged::capture(tracing::Level::TRACE);
    let got = client.get(&task, None).await;
    drop(guard);
    assert_eq!(got.ok()["status"], "cancelled");
    assert_eq!(own.received("tasks/get").len(), 2);
    assert!(!logged.text().contains(&task), "{}", logged.text());
}

#[tokio::test]
async fn an_unknown_inner_id_is_the_inner_servers_to_answer() {
    let (_server, client, own) = carrying().await;
    let reply = client.get("in.404", None).await;
    assert_eq!(reply.code(), Some(-32602), "{}", reply.text());
    assert_eq!(reply.json["error"]["message"], "inner: no such task");
    // The layer's own ids stay the layer's: the inner server never hears of them.
    let reply = client.get(&TaskId::random().to_string(), None).await;
    reply.assert_error(-32602, 200);
    assert_eq!(
        reply.json["error"]["message"],
        "Failed to retrieve task: Task not found"
    );
    assert_eq!(own.received("tasks/get").len(), 1);
}

#[tokio::test]
async fn the_layers_checks_come_before_the_inner_server() {
    let (_server, client, own) = carrying().await;
    let task = client.create_task_id("own", json!({}), None).await;
    client
        .request("tasks/get")
        .params(json!({"taskId": task}))
        .declare(false)
        .send()
        .await
        .assert_capability_error();
    let (_server, client, own_strict) = start(refusing_anonymous().with_inner_tasks(PREFIX)).await;
    let reply = client.get("in.1", None).await;
    assert!(reply.code().is_some(), "{}", reply.text());
    assert!(own_strict.received("tasks/get").is_empty());
    assert!(own.received("tasks/get").is_empty());
}

#[tokio::test]
async fn slow_tools_still_become_the_layers_tasks() {
    let (_server, client, own) = carrying().await;
    let task = client.create_task_id("slow", json!({}), None).await;
    assert!(is_task_id(&json!(task)), "{task}");
    let got = client.get(&task, None).await;
    assert_eq!(got.ok()["status"], "working");
    own.open_gate();
    let ended = client.wait_for_end(&task, None).await;
    assert_eq!(ended["status"], "completed", "{ended}");
    assert_eq!(ended["result"]["content"][0]["text"], "slow done");
    assert!(own.received("tasks/get").is_empty());
}

#[tokio::test]
async fn an_inner_task_after_the_budget_fails_the_layers_task_naming_it() {
    let (_server, client, own) = carrying().await;
    let task = client.create_task_id("late", json!({}), None).await;
    assert!(is_task_id(&json!(task)), "{task}");
    own.open_gate();
    let ended = client.wait_for_end(&task, None).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["error"]["code"], -32603);
    assert_eq!(ended["error"]["data"], json!({"taskId": "in.1"}));
    assert!(
        ended["error"]["message"]
            .as_str()
            .unwrap()
            .contains("task of its own"),
        "{ended}"
    );
    // The inner task it names is reachable.
    let got = client.get("in.1", None).await;
    assert_eq!(got.ok()["_meta"]["answeredBy"], "inner");
}

#[tokio::test]
async fn listen_sends_inner_ids_on_and_follows_its_own() {
    let (_server, client, own) = carrying().await;
    let inner = client.create_task_id("own", json!({}), None).await;
    let layer = client.create_task_id("slow", json!({}), None).await;
    let foreign = client
        .create_task_id("slow", json!({}), Some("someone-else"))
        .await;
    let mut stream = client
        .listen(None, json!(9), &[&layer, &inner, &foreign])
        .await;
    let ack = stream.next_message().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([layer, inner])
    );
    let listens = own.received("subscriptions/listen");
    assert_eq!(listens.len(), 1);
    assert_eq!(
        listens[0]["params"]["notifications"]["taskIds"],
        json!([inner])
    );
    // Both follow: the inner server's notification and the layer's snapshot.
    let mut seen = HashMap::new();
    for _ in 0..2 {
        let params = stream.next_task().await;
        seen.insert(params["taskId"].as_str().unwrap().to_owned(), params);
    }
    assert_eq!(seen[&inner]["statusMessage"], "from inner");
    assert_eq!(seen[&layer]["status"], "working");
    own.open_gate();
    let done = stream
        .tasks_until(|t| t["taskId"] == layer.as_str() && t["status"] == "completed")
        .await;
    assert!(done.iter().all(|t| t["taskId"] != foreign.as_str()));
}

#[tokio::test]
async fn without_it_the_inner_servers_tasks_are_not_reached() {
    let (_server, client, own) = start(builder()).await;
    client.call_tool("own", json!({}), true, None).await.ok();
    let call = &own.received("tools/call")[0];
    assert!(
        call["params"]["_meta"][META_CLIENT_CAPABILITIES]["extensions"]
            .get(EXTENSION_ID)
            .is_none(),
        "{call}"
    );
    client.get("in.1", None).await.assert_error(-32602, 200);
    assert!(own.received("tasks/get").is_empty());
    // A late task of the inner server's own is a plain failure there.
    let task = client.create_task_id("late", json!({}), None).await;
    own.open_gate();
    let ended = client.wait_for_end(&task, None).await;
    assert_eq!(ended["status"], "failed");
    assert!(ended["error"].get("data").is_none(), "{ended}");
}

#[test]
fn a_prefix_that_could_start_the_layers_own_ids_is_refused() {
    for prefix in ["", "in", "up-", "A_9"] {
        let refused = TasksLayer::builder(MemoryStore::new())
            .without_janitor()
            .with_inner_tasks(prefix)
            .build()
            .map(drop)
            .unwrap_err();
        assert!(matches!(refused, ConfigError::InvalidName(_)), "{prefix:?}");
    }
    for prefix in ["in.", "up:", "x/"] {
        assert!(
            TasksLayer::builder(MemoryStore::new())
                .without_janitor()
                .with_inner_tasks(prefix)
                .build()
                .is_ok(),
            "{prefix:?}"
        );
    }
}
