//! Target `listen_params_and_input_responses`: arbitrary
//! `params.notifications.taskIds` on `subscriptions/listen`, and arbitrary
//! `inputResponses` on `tasks/update`, against real tasks: `alice`'s working,
//! waiting-for-input, completed and cancelled tasks, and `bob`'s.
//!
//! A seed is a JSON file `{"method": …, "params": …}`; `@@T0@@` is alice's working
//! task, `@@T1@@` her task waiting for input (questions `go`, a confirmation, and
//! `cfg`, a form), `@@T2@@` her completed task, `@@T3@@` bob's task, `@@T4@@` her
//! cancelled task.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderValue, Request};
use http_body_util::Full;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::worker::Tasks;
use mcp_tasks::{MemoryStore, TaskId, TaskSpec, TasksLayer};
use serde_json::{Value, json};
use tower::Layer as _;

use super::common::{self, Read, Svc, boxed, check_reply, exchange, still_answers};
use super::engine::{self, Rng, any_value, mutate_json, short};
use crate::support::fixtures::{Inner, ListenSupport, Tool, spec, text_result};
use crate::support::http::bearer;
use crate::support::requests::{Call, modern_meta};
use crate::support::sse::EventReader;

pub(crate) const TARGET: &str = "listen_params_and_input_responses";

const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

pub(crate) struct Stack {
    svc: Svc,
    /// T0 … T4.
    ids: [String; 5],
    /// Every task of alice's made so far (the waiting ones come and go).
    mine: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn questions() -> InputRequests {
    InputRequests::new()
        .with("go", InputRequest::confirm("Go on?", "confirm"))
        .with(
            "cfg",
            InputRequest::form(
                "Settings",
                json!({"type": "object", "properties": {"level": {"type": "integer"}}}),
            ),
        )
}

impl Stack {
    pub(crate) async fn new() -> Stack {
        let layer = TasksLayer::builder(MemoryStore::new())
            .with_anonymous_tasks()
            .without_janitor()
            .with_principal(|parts| bearer(&parts.headers))
            .with_listen_ack_timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let tasks: Tasks = layer.tasks();
        let started: Arc<Mutex<Vec<TaskId>>> = Arc::default();
        let ask = {
            let tasks = tasks.clone();
            spec(move |_| {
                let tasks = tasks.clone();
                TaskSpec::new().with_start(move |id| {
                    tokio::spawn(async move {
                        let _ = tasks.require_input(&id, questions()).await;
                    });
                })
            })
        };
        let done = {
            let tasks = tasks.clone();
            spec(move |_| {
                let tasks = tasks.clone();
                TaskSpec::new().with_start(move |id| {
                    tokio::spawn(async move {
                        let _ = tasks.complete(&id, text_result("done")).await;
                    });
                })
            })
        };
        let job = {
            let started = started.clone();
            spec(move |_| {
                let started = started.clone();
                TaskSpec::new()
                    .with_status_message("Queued")
                    .with_start(move |id| lock(&started).push(id))
            })
        };
        let inner = Inner::new()
            .listen(ListenSupport::Stream)
            .tool("job", Tool::Context(job))
            .tool("ask", Tool::Context(ask))
            .tool("done", Tool::Context(done));
        let svc = boxed(layer.layer(inner.service::<Full<Bytes>>()));
        let t0 = common::make_task(&svc, "job", "alice").await;
        let t1 = common::make_task(&svc, "ask", "alice").await;
        let t2 = common::make_task(&svc, "done", "alice").await;
        let t3 = common::make_task(&svc, "job", "bob").await;
        let t4 = common::make_task(&svc, "job", "alice").await;
        let cancel = Call::new("tasks/cancel")
            .params(json!({"taskId": t4}))
            .principal("alice")
            .build();
        exchange(&svc, cancel, Read::Whole)
            .await
            .expect("cancel T4");
        let stack = Stack {
            svc,
            mine: vec![t0.clone(), t1.clone(), t2.clone(), t4.clone()],
            ids: [t0, t1, t2, t3, t4],
        };
        stack.wait_status(1, "input_required").await;
        stack.wait_status(2, "completed").await;
        stack
    }

    async fn status(&self, task: &str) -> Value {
        let request = Call::new("tasks/get")
            .id(json!(99))
            .params(json!({"taskId": task}))
            .principal("alice")
            .build();
        match exchange(&self.svc, request, Read::Whole).await {
            Ok(got) => serde_json::from_slice::<Value>(&got.body).unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }

    async fn wait_status(&self, n: usize, wanted: &str) {
        for _ in 0..400 {
            if self.status(&self.ids[n]).await["result"]["status"] == wanted {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("setup: T{n} never became {wanted}");
    }

    /// A fresh waiting task as T1, when the last one is no longer waiting.
    async fn replenish(&mut self) {
        if self.status(&self.ids[1]).await["result"]["status"] == "input_required" {
            return;
        }
        let task = common::make_task(&self.svc, "ask", "alice").await;
        self.ids[1] = task.clone();
        self.mine.push(task);
        self.wait_status(1, "input_required").await;
    }
}

fn fill(seed: &[u8], ids: &[String; 5]) -> Vec<u8> {
    let mut text = String::from_utf8_lossy(seed).into_owned();
    for (i, id) in ids.iter().enumerate() {
        text = text.replace(&format!("@@T{i}@@"), id);
    }
    text.into_bytes()
}

/// Something in the place of a task id.
fn any_id(rng: &mut Rng, ids: &[String; 5]) -> Value {
    match rng.below(6) {
        0..=2 => json!(rng.pick(ids)),
        3 => {
            let id = rng.pick(ids);
            let mut s = id.clone();
            if !s.is_empty() {
                let i = rng.below(s.len());
                s.replace_range(i..i + 1, rng.pick::<&str>(&["A", "-", "_", "=", "é", ""]));
            }
            json!(s)
        }
        _ => any_value(rng, 1),
    }
}

fn mutate_listen(rng: &mut Rng, params: &mut Value, ids: &[String; 5]) {
    let slot = &mut params["notifications"]["taskIds"];
    match rng.below(10) {
        0..=3 => {
            if !slot.is_array() {
                *slot = json!([]);
            }
            let items = slot.as_array_mut().unwrap();
            for _ in 0..1 + rng.below(4) {
                match rng.below(4) {
                    0 if !items.is_empty() => {
                        let i = rng.below(items.len());
                        items.remove(i);
                    }
                    1 if !items.is_empty() => {
                        let i = rng.below(items.len());
                        items[i] = any_id(rng, ids);
                    }
                    _ => items.push(any_id(rng, ids)),
                }
            }
        }
        4 => {
            let n = *rng.pick(&[999usize, 1000, 1001, 5000]);
            let items = (0..n).map(|_| any_id(rng, ids)).collect();
            *slot = Value::Array(items);
        }
        5 => *slot = any_value(rng, 0),
        _ => {
            for _ in 0..1 + rng.below(3) {
                mutate_json(rng, params, 0);
            }
        }
    }
}

fn mutate_update(rng: &mut Rng, params: &mut Value, ids: &[String; 5]) {
    match rng.below(10) {
        0..=4 => {
            let slot = &mut params["inputResponses"];
            if !slot.is_object() || rng.one_in(6) {
                *slot = json!({});
            }
            let answers = slot.as_object_mut().unwrap();
            for _ in 0..1 + rng.below(3) {
                let key = match rng.below(5) {
                    0 => "go".to_owned(),
                    1 => "cfg".to_owned(),
                    2 => "x".repeat(rng.len(70_000)),
                    _ => engine::any_string(rng),
                };
                let value = match rng.below(6) {
                    0 => json!({"action": "accept", "content": {"confirm": true}}),
                    1 => json!({"action": engine::any_string(rng), "content": any_value(rng, 1)}),
                    2 => {
                        json!({"action": "accept", "content": {"level": "x".repeat(rng.len(2_000_000))}})
                    }
                    _ => any_value(rng, 0),
                };
                answers.insert(key, value);
            }
        }
        5 => params["inputResponses"] = any_value(rng, 0),
        6 => params["taskId"] = any_id(rng, ids),
        _ => {
            for _ in 0..1 + rng.below(3) {
                mutate_json(rng, params, 0);
            }
        }
    }
}

fn header_text(s: &str) -> Vec<u8> {
    if !s.is_empty() && s.bytes().all(|b| (0x20..0x7f).contains(&b)) && s.trim() == s {
        s.as_bytes().to_vec()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(s)).into_bytes()
    }
}

/// One execution.
pub(crate) async fn case(
    rng: &mut Rng,
    stack: &mut Stack,
    seeds: &[Vec<u8>],
) -> (Vec<u8>, Result<(), String>) {
    stack.replenish().await;
    let seed = rng.pick(seeds).clone();
    let seed = fill(&seed, &stack.ids);
    let seed: Value = serde_json::from_slice(&seed).expect("a seed is JSON");
    let method = seed["method"].as_str().unwrap_or("tasks/update").to_owned();
    let mut params = seed["params"].clone();
    if !params.is_object() {
        params = json!({});
    }
    params["_meta"] = modern_meta(!rng.one_in(10));
    if rng.below(8) != 0 {
        if method == "subscriptions/listen" {
            mutate_listen(rng, &mut params, &stack.ids);
        } else {
            mutate_update(rng, &mut params, &stack.ids);
        }
    }
    let id = if rng.one_in(4) {
        any_value(rng, 2)
    } else {
        json!(7)
    };
    let envelope = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let body = engine::serialize(rng, &envelope);
    let mut request: Request<Full<Bytes>> = Call::new(&method).principal("alice").build();
    *request.body_mut() = Full::new(Bytes::from(body.clone()));
    if method == "tasks/update" {
        let name = match params["taskId"].as_str() {
            Some(name) => Some(header_text(name)),
            None => {
                // Sometimes the header still names a task.
                rng.one_in(2).then(|| stack.ids[1].clone().into_bytes())
            }
        };
        match name.and_then(|n| HeaderValue::from_bytes(&n).ok()) {
            Some(v) => {
                request.headers_mut().insert("mcp-name", v);
            }
            None => {
                request.headers_mut().remove("mcp-name");
            }
        }
    }
    let outcome = run_case(stack, &method, request, &params).await;
    (body, outcome)
}

async fn run_case(
    stack: &Stack,
    method: &str,
    request: Request<Full<Bytes>>,
    params: &Value,
) -> Result<(), String> {
    let listen = method == "subscriptions/listen";
    let read = if listen {
        Read::FirstEvent {
            max: Duration::from_secs(3),
        }
    } else {
        Read::Whole
    };
    let got = exchange(&stack.svc, request, read).await?;
    common::take_panics()?;
    check_reply(&got, true).map_err(|e| format!("status {}: {e}", got.status))?;
    if listen && got.is_sse() {
        let mut reader = EventReader::new();
        reader.push(&got.body);
        let event = reader.next_event().ok_or_else(|| {
            format!(
                "a listen stream without an event: {}",
                short(&String::from_utf8_lossy(&got.body))
            )
        })?;
        let ack = event.json().unwrap_or(Value::Null);
        if ack["method"] != ACKNOWLEDGED {
            // Without `taskIds` the stream is the inner service's alone.
            if params["notifications"].get("taskIds").is_some() {
                return Err(format!(
                    "the first event is not the acknowledgment: {}",
                    short(&ack.to_string())
                ));
            }
        } else if let Some(agreed) = ack["params"]["notifications"].get("taskIds") {
            let Some(agreed) = agreed.as_array() else {
                return Err(format!(
                    "agreed taskIds not an array: {}",
                    short(&ack.to_string())
                ));
            };
            for id in agreed {
                let ok = id
                    .as_str()
                    .is_some_and(|id| stack.mine.iter().any(|m| m == id));
                if !ok {
                    return Err(format!("agreed a task id that is not alice's: {id}"));
                }
            }
        }
    }
    if method == "tasks/update" {
        // Whatever the answer, the tasks stay readable and consistent.
        for task in [&stack.ids[1], &stack.ids[0]] {
            let value = stack.status(task).await;
            let result = &value["result"];
            let status = result["status"].as_str().unwrap_or("");
            if ![
                "working",
                "input_required",
                "completed",
                "failed",
                "cancelled",
            ]
            .contains(&status)
            {
                return Err(format!(
                    "a task after the update: {}",
                    short(&value.to_string())
                ));
            }
            if status == "input_required" && !result["inputRequests"].is_object() {
                return Err(format!(
                    "input_required without inputRequests: {}",
                    short(&value.to_string())
                ));
            }
        }
    }
    still_answers(&stack.svc, &stack.ids[0], "alice").await?;
    common::take_panics()
}
