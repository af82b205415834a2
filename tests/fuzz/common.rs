//! What the three fuzz targets share: the boxed service under test, one bounded
//! exchange read whole (or, for a stream that may stay open, until it goes quiet),
//! the pass criteria of a reply, the panic recorder, and the liveness check.

use std::convert::Infallible;
use std::sync::{Mutex, Once};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::error::BoxError;
use serde_json::{Value, json};
use tower::ServiceExt as _;
use tower::util::BoxCloneService;

use super::engine::{check_response_object, short};
use crate::support::requests::Call;
use crate::support::sse::EventReader;

/// The service under test, whatever is inside.
pub(crate) type Svc =
    BoxCloneService<Request<Full<Bytes>>, Response<UnsyncBoxBody<Bytes, BoxError>>, Infallible>;

/// Boxes a layered service.
pub(crate) fn boxed<S, B>(service: S) -> Svc
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    BoxCloneService::new(
        service.map_response(|r: Response<B>| r.map(|b| b.map_err(Into::into).boxed_unsync())),
    )
}

/// How long the response head may take.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a body that must end may take.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// One reply as read.
#[derive(Debug)]
pub(crate) struct Got {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// Whether the body ended (a stream allowed to stay open may not have).
    pub(crate) ended: bool,
}

impl Got {
    pub(crate) fn is_sse(&self) -> bool {
        self.content_type().starts_with("text/event-stream")
    }

    pub(crate) fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// How to read a body.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Read {
    /// It must end within [`BODY_TIMEOUT`].
    Whole,
    /// It may stay open: read until it ends, `quiet` passes without a frame, or
    /// `max` in all.
    UntilQuiet { quiet: Duration, max: Duration },
    /// A stream that stays open: read until its first whole event (or its end),
    /// which must come within `max`.
    FirstEvent { max: Duration },
}

/// Sends `request` and reads the reply; `Err` on a hang.
pub(crate) async fn exchange(
    svc: &Svc,
    request: Request<Full<Bytes>>,
    read: Read,
) -> Result<Got, String> {
    let response = match tokio::time::timeout(HEAD_TIMEOUT, svc.clone().oneshot(request)).await {
        Ok(Ok(r)) => r,
        Ok(Err(never)) => match never {},
        Err(_) => return Err(format!("hang: no response head within {HEAD_TIMEOUT:?}")),
    };
    let (parts, body) = response.into_parts();
    let (body, ended) = read_body(body, read).await?;
    Ok(Got {
        status: parts.status,
        headers: parts.headers,
        body,
        ended,
    })
}

/// Reads `body` as `read` says.
pub(crate) async fn read_body(
    mut body: UnsyncBoxBody<Bytes, BoxError>,
    read: Read,
) -> Result<(Bytes, bool), String> {
    let mut out = Vec::new();
    match read {
        Read::Whole => {
            let all = async {
                while let Some(frame) = body.frame().await {
                    match frame {
                        Ok(f) => {
                            if let Ok(data) = f.into_data() {
                                out.extend_from_slice(&data);
                            }
                        }
                        Err(e) => return Err(format!("the body failed: {e}")),
                    }
                }
                Ok(())
            };
            match tokio::time::timeout(BODY_TIMEOUT, all).await {
                Ok(Ok(())) => Ok((Bytes::from(out), true)),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(format!(
                    "hang: the body did not end within {BODY_TIMEOUT:?} ({} bytes read: {})",
                    out.len(),
                    short(&String::from_utf8_lossy(&out))
                )),
            }
        }
        Read::FirstEvent { max } => {
            let first = async {
                let mut reader = EventReader::new();
                while let Some(frame) = body.frame().await {
                    let Ok(frame) = frame else { return true };
                    if let Ok(data) = frame.into_data() {
                        out.extend_from_slice(&data);
                        reader.push(&data);
                        if reader.next_raw().is_some() {
                            return false;
                        }
                    }
                }
                true
            };
            match tokio::time::timeout(max, first).await {
                Ok(ended) => Ok((Bytes::from(out), ended)),
                Err(_) => Err(format!(
                    "hang: no first event within {max:?} ({} bytes read: {})",
                    out.len(),
                    short(&String::from_utf8_lossy(&out))
                )),
            }
        }
        Read::UntilQuiet { quiet, max } => {
            let deadline = tokio::time::Instant::now() + max;
            loop {
                let wait =
                    quiet.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                match tokio::time::timeout(wait, body.frame()).await {
                    Ok(Some(Ok(f))) => {
                        if let Ok(data) = f.into_data() {
                            out.extend_from_slice(&data);
                        }
                    }
                    // A stream that ends with an error is cut, not malformed.
                    Ok(Some(Err(_))) | Ok(None) => return Ok((Bytes::from(out), true)),
                    Err(_) => return Ok((Bytes::from(out), false)),
                }
            }
        }
    }
}

/// The pass criteria of one reply of the layer: 202 with an empty body, or a JSON
/// body that is one JSON-RPC response (or a batch of them), or an SSE stream whose
/// JSON-RPC responses are valid (`sse_events`: when the inner service's events are
/// valid too); no 5xx except a JSON-RPC -32603 error.
pub(crate) fn check_reply(got: &Got, sse_events: bool) -> Result<(), String> {
    let text = || short(&String::from_utf8_lossy(&got.body));
    if got.status == StatusCode::ACCEPTED {
        return if got.body.is_empty() {
            Ok(())
        } else {
            Err(format!("202 with a body: {}", text()))
        };
    }
    if got.is_sse() {
        if got.status.is_server_error() {
            return Err(format!("{} with an SSE body: {}", got.status, text()));
        }
        let mut reader = EventReader::new();
        reader.push(&got.body);
        while let Some(event) = reader.next_event().filter(|_| sse_events) {
            if let Some(message) = event.json()
                && message.get("id").is_some()
                && message.get("method").is_none()
            {
                check_response_object(&message)
                    .map_err(|e| format!("an SSE response event: {e}"))?;
            }
        }
        return Ok(());
    }
    let value: Value = match serde_json::from_slice(&got.body) {
        Ok(value) => value,
        Err(e) => {
            return Err(format!(
                "status {}, content-type {:?}: a body that is not JSON ({e}): {}",
                got.status,
                got.content_type(),
                text()
            ));
        }
    };
    match &value {
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                check_response_object(item)?;
            }
        }
        _ => check_response_object(&value)?,
    }
    if got.status.is_server_error() && value["error"]["code"] != json!(-32603) {
        return Err(format!("{} without a -32603 error: {}", got.status, text()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Panics anywhere (the layer's future, its spawned tasks, a worker) fail the case.

static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

thread_local! {
    /// The target the test thread runs.
    static TARGET: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}

/// Records every panic of the process with its thread's name, after printing it
/// as usual.
pub(crate) fn record_panics() {
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            PANICS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((thread, info.to_string()));
            default(info);
        }));
    });
}

/// A runtime for `target` whose threads carry its name (the test's own thread has
/// it too), so that a panic is charged to the target it happened in.
pub(crate) fn runtime(target: &'static str) -> tokio::runtime::Runtime {
    record_panics();
    TARGET.set(target);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(target)
        .enable_all()
        .build()
        .unwrap()
}

/// The panics of the current target since the last call, as an error.
pub(crate) fn take_panics() -> Result<(), String> {
    let target = TARGET.get();
    let me = std::thread::current().name().unwrap_or("").to_owned();
    let mut all = PANICS.lock().unwrap_or_else(|p| p.into_inner());
    let mine: Vec<String> = all
        .extract_if(.., |(thread, _)| *thread == target || *thread == me)
        .map(|(_, message)| message)
        .collect();
    if mine.is_empty() {
        Ok(())
    } else {
        Err(format!("panic: {}", mine.join(" | ")))
    }
}

/// A good `tasks/get` for `task` as `principal` must still answer the task.
pub(crate) async fn still_answers(svc: &Svc, task: &str, principal: &str) -> Result<(), String> {
    let request = Call::new("tasks/get")
        .id(json!(424242))
        .params(json!({"taskId": task}))
        .principal(principal)
        .build();
    let got = exchange(svc, request, Read::Whole)
        .await
        .map_err(|e| format!("the good tasks/get afterwards: {e}"))?;
    let value: Value = serde_json::from_slice(&got.body).unwrap_or(Value::Null);
    if got.status != StatusCode::OK || value["result"]["taskId"] != json!(task) {
        return Err(format!(
            "the good tasks/get afterwards answered {}: {}",
            got.status,
            short(&String::from_utf8_lossy(&got.body))
        ));
    }
    Ok(())
}

/// The task id of a `CreateTaskResult` reply, from JSON or an SSE body.
pub(crate) fn created_task(got: &Got) -> Option<String> {
    let message = if got.is_sse() {
        crate::support::sse::response(&got.body)?
    } else {
        serde_json::from_slice::<Value>(&got.body).ok()?
    };
    (message["result"]["resultType"] == "task")
        .then(|| message["result"]["taskId"].as_str().map(str::to_owned))
        .flatten()
}

/// Makes a task through `tools/call` of `tool` as `principal`.
pub(crate) async fn make_task(svc: &Svc, tool: &str, principal: &str) -> String {
    let request = Call::new("tools/call")
        .id(json!("setup"))
        .params(json!({"name": tool, "arguments": {}}))
        .principal(principal)
        .build();
    let got = exchange(svc, request, Read::Whole)
        .await
        .expect("the setup call");
    created_task(&got).unwrap_or_else(|| {
        panic!(
            "the setup call of {tool} made no task: {} {}",
            got.status,
            String::from_utf8_lossy(&got.body)
        )
    })
}
