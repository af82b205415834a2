//! `tasks/result` of the 2025-11-25 era: waits for the task's end without polling
//! the store (the wake-ups `ended()` parks on), then answers exactly what the
//! original call would have: the stored result, or the stored JSON-RPC error,
//! with the related-task `_meta`.
//!
//! While it waits, the answer is an SSE stream, and each question the task puts
//! (`input_required`) goes out on it as an `elicitation/create` or
//! `sampling/createMessage` request, with an id the layer mints
//! ([`v2025::input_request_id`]) and the related-task `_meta`. The client's
//! answers come back as responses in other POSTs (`answers.rs`).

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, header};
use http_body::{Body, Frame};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::body::ResponseBody;
use crate::engine::Engine;
use crate::error::BoxError;
use crate::observe::{self, Outcome};
use crate::routes::tasks::{not_found, store_failed, task_id};
use crate::task::{Principal, Scope, TaskId, TaskRecord, TaskStatus, Timestamp};
use crate::wire::v2025::{self, META_RELATED_TASK};
use crate::wire::{Envelope, RpcError, message_body_raw, sse};

/// Whether the client takes an SSE answer.
pub(crate) fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// What the wait for a task's end found.
enum Found {
    Ended(Box<TaskRecord>),
    /// Questions not yet sent on this stream, by key.
    Asks(Map<String, Value>),
    Gone,
}

/// The answer to a `tasks/result`.
pub(super) async fn answer<B>(
    engine: Arc<Engine>,
    envelope: &Envelope<'_>,
    owner: Option<Principal>,
    streams: bool,
) -> Response<ResponseBody<B>> {
    let raw_id = envelope.valid_raw_id().map(str::to_owned);
    let refuse = |e: RpcError| {
        observe::outcome(Outcome::Error(e.code()));
        e.to_response_raw(raw_id.as_deref()).map(ResponseBody::full)
    };
    let id = match task_id(envelope) {
        Ok(Some(id)) => id,
        Ok(None) => return refuse(not_found()),
        Err(e) => return refuse(e),
    };
    // Ownership is checked once, here; the waits below read by id alone.
    let first = match engine
        .store()
        .get(&id, Scope::Owner(owner.as_ref()), Timestamp::now())
        .await
    {
        Ok(Some(task)) => task,
        Ok(None) => return refuse(not_found()),
        Err(e) => return refuse(store_failed(e)),
    };
    if first.status.is_terminal() {
        observe::outcome(Outcome::Result);
        return json_response(ended(&first, raw_id.as_deref()));
    }
    if !streams {
        // No stream to put questions on: the answer waits for the end.
        let mut sent = HashSet::new();
        return match wait(&engine, &id, &mut sent, false).await {
            Found::Ended(task) => {
                observe::outcome(Outcome::Result);
                json_response(ended(&task, raw_id.as_deref()))
            }
            _ => refuse(not_found()),
        };
    }
    observe::outcome(Outcome::Stream);
    let (events, receiver) = mpsc::channel(16);
    let task = engine.clone();
    tokio::spawn(async move {
        let mut sent = HashSet::new();
        let text = id.to_string();
        loop {
            let message = match wait(&task, &id, &mut sent, true).await {
                Found::Asks(asks) => {
                    for (key, request) in asks {
                        let question = question(&text, &key, request);
                        if events.send(sse::data_event(&question)).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                Found::Ended(ended_task) => ended(&ended_task, raw_id.as_deref()),
                Found::Gone => not_found().to_body_raw(raw_id.as_deref()),
            };
            let _ = events.send(sse::data_event(&message)).await;
            return;
        }
    });
    let mut response = Response::new(ResponseBody::boxed(Box::pin(Events(receiver))));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Waits, on the task's wake-ups, until it ends, goes, or (when `asking`) puts
/// questions not in `sent`, which are then counted as sent. A store outage
/// delays the answer, never ends it.
async fn wait(engine: &Engine, id: &TaskId, sent: &mut HashSet<String>, asking: bool) -> Found {
    let found = engine
        .wait_retrying(id, |task| match task {
            None => Some(Found::Gone),
            Some(task) if task.status.is_terminal() => Some(Found::Ended(Box::new(task.clone()))),
            Some(task) if asking && task.status == TaskStatus::InputRequired => {
                let asks: Map<String, Value> = task
                    .input_requests
                    .iter()
                    .filter(|(key, _)| !sent.contains(key.as_str()))
                    .map(|(key, request)| (key.clone(), request.clone()))
                    .collect();
                (!asks.is_empty()).then_some(Found::Asks(asks))
            }
            Some(_) => None,
        })
        .await;
    if let Found::Asks(asks) = &found {
        sent.extend(asks.keys().cloned());
    }
    found
}

/// The question under `key` as a JSON-RPC request to the client.
fn question(task: &str, key: &str, request: Value) -> Vec<u8> {
    let (method, params) = match request {
        Value::Object(mut request) => (
            request.remove("method").unwrap_or(Value::Null),
            request.remove("params"),
        ),
        _ => (Value::Null, None),
    };
    let mut params = match params {
        Some(Value::Object(params)) => params,
        _ => Map::new(),
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(META_RELATED_TASK.into(), json!({ "taskId": task }));
    }
    let message = json!({
        "jsonrpc": "2.0",
        "id": v2025::input_request_id(task, key),
        "method": method,
        "params": params,
    });
    serde_json::to_vec(&message).unwrap_or_default()
}

/// The JSON-RPC response a task that ended answers `tasks/result` with: its
/// result (without the 2026-07-28 `resultType`), or its error; a cancelled task
/// answers -32603 "Task was cancelled".
fn ended(task: &TaskRecord, id: Option<&str>) -> Bytes {
    let text = task.id.to_string();
    match (task.status, &task.result, &task.error) {
        (TaskStatus::Completed, Some(Value::Object(result)), _) => {
            let mut result = result.clone();
            result.remove("resultType");
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert(META_RELATED_TASK.into(), json!({ "taskId": text }));
            }
            message_body_raw(id, crate::wire::Member::Result, &result)
        }
        (TaskStatus::Failed, _, Some(error)) => {
            message_body_raw(id, crate::wire::Member::Error, error)
        }
        (TaskStatus::Cancelled, _, _) => RpcError::internal("Task was cancelled").to_body_raw(id),
        _ => RpcError::internal("Task failed").to_body_raw(id),
    }
}

fn json_response<B>(body: Bytes) -> Response<ResponseBody<B>> {
    crate::wire::json_response(http::StatusCode::OK, body).map(ResponseBody::full)
}

/// The SSE body of a `tasks/result` that waits: the events its task sends.
struct Events(mpsc::Receiver<Bytes>);

impl Body for Events {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.get_mut()
            .0
            .poll_recv(cx)
            .map(|event| event.map(|bytes| Ok(Frame::data(bytes))))
    }
}
