//! Target `sse_inner_streams`: an inner service answering `tools/call` (a handler
//! that makes a task, one that does not, a tool in `Auto` mode) and
//! `subscriptions/listen` with arbitrary SSE bytes, cut into chunks at random
//! boundaries. The layer's output must end (or, for a listen, stay readable), and
//! every event the layer writes itself must be whole.
//!
//! A seed is a raw SSE stream; `@@ID@@` becomes the request's JSON-RPC id.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use http_body_util::Full;
use mcp_tasks::body::RequestBody;
use mcp_tasks::worker::Tasks;
use mcp_tasks::{MemoryStore, TaskContext, TaskId, TaskMode, TaskSpec, TasksLayer};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::Layer as _;

use super::common::{self, Read, Svc, boxed, check_reply, exchange, still_answers};
use super::engine::{Rng, mutate_bytes, short};
use crate::support::http::{Frames, bearer};
use crate::support::requests::Call;
use crate::support::sse::{self, EventReader};

pub(crate) const TARGET: &str = "sse_inner_streams";

/// What the inner service answers next: the body's chunks and its content type.
type Slot = Arc<Mutex<Option<(mpsc::UnboundedReceiver<Bytes>, &'static str)>>>;

pub(crate) struct Stack {
    svc: Svc,
    tasks: Tasks,
    slot: Slot,
    /// A task of `alice`, listened to and changed during the listens.
    task: String,
    task_id: TaskId,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Stack {
    pub(crate) async fn new() -> Stack {
        let slot: Slot = Arc::default();
        let made: Arc<Mutex<Option<TaskId>>> = Arc::default();
        let inner = {
            let slot = slot.clone();
            let made = made.clone();
            tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
                let slot = slot.clone();
                let made = made.clone();
                async move {
                    let name = req
                        .headers()
                        .get("mcp-name")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    let ctx = TaskContext::from_extensions(req.extensions()).cloned();
                    if name == "make" {
                        let made = made.clone();
                        let spec =
                            TaskSpec::new()
                                .with_status_message("Queued")
                                .with_start(move |id| {
                                    *lock(&made) = Some(id);
                                });
                        let ok = ctx.is_some_and(|c| c.create(spec).is_ok());
                        let body = json!({"jsonrpc": "2.0", "id": "setup",
                            "result": {"resultType": "complete", "content": [], "made": ok}});
                        let mut response =
                            Response::new(Frames::full(serde_json::to_vec(&body).unwrap()));
                        response.headers_mut().insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        );
                        return Ok::<_, Infallible>(response);
                    }
                    if name == "opt" {
                        let _ = ctx.map(|c| c.create(TaskSpec::new()));
                    }
                    let next = lock(&slot).take();
                    let (body, content_type) = match next {
                        Some((rx, ct)) => (Frames::fed(rx, mpsc::unbounded_channel().0), ct),
                        None => (Frames::full(Bytes::new()), "text/event-stream"),
                    };
                    let mut response = Response::new(body);
                    response
                        .headers_mut()
                        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
                    Ok(response)
                }
            })
        };
        let layer = TasksLayer::builder(MemoryStore::new())
            .with_anonymous_tasks()
            .without_janitor()
            .with_principal(|parts| bearer(&parts.headers))
            .with_listen_ack_timeout(Duration::from_millis(200))
            .with_tool_mode(
                "auto",
                TaskMode::Auto {
                    after: Duration::from_millis(30),
                },
            )
            .build()
            .unwrap();
        let tasks = layer.tasks();
        let svc = boxed(layer.layer(inner));
        let task = common::make_task(&svc, "make", "alice").await;
        let task_id = lock(&made).take().expect("the setup task started");
        Stack {
            svc,
            tasks,
            slot,
            task,
            task_id,
        }
    }
}

const DICT: &[&[u8]] = &[
    b"data: ",
    b"data:",
    b"event: message\n",
    b"id: 7\n",
    b"retry: 10\n",
    b": comment\n",
    b"\n\n",
    b"\r\n\r\n",
    b"\r\r",
    b"\r",
    b"\n",
    b"{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}",
    b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}",
    b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{}}",
];

/// The SSE-specific mutations, then byte-level ones.
fn mutate_stream(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        match rng.below(9) {
            0 => {
                // Every line end as one kind.
                let to: &[u8] = rng.pick::<&[u8]>(&[&b"\r\n"[..], b"\r", b"\n"]);
                let text = std::mem::take(data);
                let mut i = 0;
                while i < text.len() {
                    if text[i..].starts_with(b"\r\n") {
                        data.extend_from_slice(to);
                        i += 2;
                    } else if text[i] == b'\n' || text[i] == b'\r' {
                        data.extend_from_slice(to);
                        i += 1;
                    } else {
                        data.push(text[i]);
                        i += 1;
                    }
                }
            }
            1 => {
                // A giant event.
                let n = *rng.pick(&[70_000usize, 300_000, 100, 100, 1 << 21]);
                let at = rng.below(data.len() + 1);
                let mut event = b"data: ".to_vec();
                event.extend(std::iter::repeat_n(b'x', n));
                event.extend_from_slice(b"\n\n");
                data.splice(at..at, event);
            }
            2 => {
                // An event without data.
                let at = rng.below(data.len() + 1);
                data.splice(at..at, b"event: message\nid: 3\n\n".iter().copied());
            }
            3 => {
                // Non-JSON data.
                let at = rng.below(data.len() + 1);
                data.splice(at..at, b"data: not json {\n\n".iter().copied());
            }
            4 => {
                // The whole stream twice: a response event, then more.
                let copy = data.clone();
                data.extend_from_slice(&copy);
            }
            5 => {
                // The last line end gone: a trailing partial event.
                while data.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    data.pop();
                }
            }
            _ => {
                let rounds = 1 + rng.below(6);
                mutate_bytes(rng, data, rounds, DICT);
            }
        }
    }
}

/// `data` in chunks cut at random boundaries.
fn chunks(rng: &mut Rng, data: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut i = 0;
    let small = data.len() < 4096 && rng.one_in(3);
    while i < data.len() {
        let n = if small {
            1 + rng.below(3)
        } else {
            1 + rng.len(data.len().max(1)).max(data.len() / 2000)
        };
        let end = (i + n).min(data.len());
        out.push(Bytes::copy_from_slice(&data[i..end]));
        i = end;
    }
    out
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    if needle.is_empty() || haystack.len() < needle.len() {
        return 0;
    }
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// Every occurrence of `marker` (something only the layer writes) sits in a whole
/// event carrying one JSON object on one data line.
fn check_layer_events(body: &[u8], marker: &[u8]) -> Result<(), String> {
    let total = count(body, marker);
    if total == 0 {
        return Ok(());
    }
    let mut reader = EventReader::new();
    reader.push(body);
    let mut whole = 0;
    while let Some(raw) = reader.next_raw() {
        let here = count(&raw, marker);
        if here == 0 {
            continue;
        }
        let events = sse::events(&raw);
        let text = || short(&String::from_utf8_lossy(&raw));
        let [event] = &events[..] else {
            return Err(format!("a layer event that is not one event: {}", text()));
        };
        if event.data_lines != 1 {
            return Err(format!(
                "a layer event with {} data lines: {}",
                event.data_lines,
                text()
            ));
        }
        // The layer may write into the inner service's own acknowledgment (keeping
        // whatever else it said), so only the shape is the layer's: one JSON object.
        if !event.json().is_some_and(|m| m.is_object()) {
            return Err(format!(
                "a layer event that is not one JSON object: {}",
                text()
            ));
        }
        whole += here;
    }
    if whole != total {
        return Err(format!(
            "a layer event is not whole: {} of {total} occurrences of {} in whole events; the rest: {}",
            whole,
            String::from_utf8_lossy(marker),
            short(&String::from_utf8_lossy(&reader.take_buffered()))
        ));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Opt,
    Plain,
    Auto,
    Listen,
}

/// One execution.
pub(crate) async fn case(
    rng: &mut Rng,
    stack: &Stack,
    seeds: &[Vec<u8>],
) -> (Vec<u8>, Result<(), String>) {
    let kind = *rng.pick(&[
        Kind::Opt,
        Kind::Opt,
        Kind::Plain,
        Kind::Auto,
        Kind::Listen,
        Kind::Listen,
    ]);
    let id: Value = match rng.below(4) {
        0 => json!("s-5"),
        1 => json!(9_007_199_254_740_993u64),
        _ => json!(5),
    };
    let mut stream = rng.pick(seeds).clone();
    stream = replace_all(&stream, b"@@ID@@", id.to_string().as_bytes());
    if !rng.one_in(8) {
        mutate_stream(rng, &mut stream);
    }
    let mut input = format!("{kind:?}\n").into_bytes();
    input.extend_from_slice(&stream);
    let outcome = run_case(rng, stack, kind, id, &stream).await;
    (input, outcome)
}

fn replace_all(data: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        if data[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(data[i]);
            i += 1;
        }
    }
    out
}

async fn run_case(
    rng: &mut Rng,
    stack: &Stack,
    kind: Kind,
    id: Value,
    stream: &[u8],
) -> Result<(), String> {
    let parts = chunks(rng, stream);
    let (tx, rx) = mpsc::unbounded_channel();
    let content_type = *rng.pick(&[
        "text/event-stream",
        "text/event-stream",
        "text/event-stream; charset=utf-8",
    ]);
    *lock(&stack.slot) = Some((rx, content_type));
    let declare = !rng.one_in(6);
    let request = match kind {
        Kind::Listen => Call::new("subscriptions/listen")
            .id(id)
            .params(json!({"notifications": {"taskIds": [stack.task], "toolsListChanged": rng.one_in(2)}}))
            .declare(declare)
            .principal("alice")
            .build(),
        _ => {
            let tool = match kind {
                Kind::Opt => "opt",
                Kind::Plain => "plain",
                _ => "auto",
            };
            Call::new("tools/call")
                .id(id)
                .params(json!({"name": tool, "arguments": {}}))
                .declare(declare)
                .principal("alice")
                .build()
        }
    };
    // The inner service writes its chunks; a listen's task changes half way.
    let pause_at = rng.one_in(2).then(|| rng.below(parts.len() + 1));
    let keep_open = kind == Kind::Listen && rng.one_in(4);
    let tasks = stack.tasks.clone();
    let task_id = stack.task_id;
    let feeder = tokio::spawn(async move {
        let half = parts.len() / 2;
        for (i, chunk) in parts.into_iter().enumerate() {
            if i == half && kind == Kind::Listen {
                let _ = tasks.progress(&task_id, format!("step {i}")).await;
            }
            if Some(i) == pause_at {
                tokio::time::sleep(Duration::from_millis(40)).await;
            } else if i % 8 == 0 {
                tokio::task::yield_now().await;
            }
            if tx.send(chunk).is_err() {
                break;
            }
        }
        if kind == Kind::Listen {
            let _ = tasks.progress(&task_id, "the end").await;
        }
        if keep_open {
            tokio::time::sleep(Duration::from_millis(80)).await;
        }
        drop(tx);
    });
    let read = if kind == Kind::Listen {
        Read::UntilQuiet {
            quiet: Duration::from_millis(120),
            max: Duration::from_secs(3),
        }
    } else {
        Read::Whole
    };
    let got = exchange(&stack.svc, request, read).await;
    // The slot may not have been taken (the layer answered by itself).
    lock(&stack.slot).take();
    if tokio::time::timeout(Duration::from_secs(5), feeder)
        .await
        .is_err()
    {
        return Err("hang: the inner service's writer never finished".into());
    }
    let got = got?;
    common::take_panics()?;
    check_reply(&got, false).map_err(|e| format!("status {}: {e}", got.status))?;
    if got.is_sse() {
        let marker: &[u8] = match kind {
            Kind::Listen => stack.task.as_bytes(),
            _ => b"\"resultType\":\"task\"",
        };
        check_layer_events(&got.body, marker)?;
        if kind != Kind::Listen && !got.ended {
            return Err("the tools/call stream did not end".into());
        }
    }
    if let Some(task) = common::created_task(&got) {
        still_answers(&stack.svc, &task, "alice").await?;
    }
    still_answers(&stack.svc, &stack.task, "alice").await?;
    common::take_panics()
}
