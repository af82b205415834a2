//! Upstream tasks carried (federation): a 2026-07-28 upstream with tasks of its own
//! keeps them, and the client reaches them through the gateway by handles that any
//! gateway replica can reverse.
//!
//! Below `TasksLayer` (built `with_inner_tasks("up.")`), in front of the bridge:
//! every upstream task id leaving the gateway is wrapped in a handle, and every
//! handle arriving is unwrapped before the request goes upstream. A handle is
//! `up.<base64url(upstream id)>.<tag>`, the tag the first 128 bits of
//! HMAC-SHA256 under the gateway's key over the backend (the upstream URL) and the
//! upstream id. It holds no state: a replica with the same key and upstream reverses
//! it, and one made under another key or for another upstream is refused. A
//! refused handle (forged, foreign or malformed) answers as a missing task does,
//! -32602 "Failed to retrieve task: Task not found", and never reaches the
//! upstream. Upstream task ids are unguessable; holding a handle is holding the id,
//! and the upstream's own checks of the caller still apply.
//!
//! Wrapped on the way out: `result.taskId` of the answers to `tools/call`
//! (`CreateTaskResult`) and `tasks/*` (a JSON body, or the response event of an SSE
//! stream); on a listen stream, the acknowledgment's `taskIds` and the `taskId` of
//! each `notifications/tasks`. Unwrapped on the way in: `params.taskId` of
//! `tasks/get`, `tasks/update` and `tasks/cancel` (with `Mcp-Name`), and the
//! `taskIds` of `subscriptions/listen` (a refused one is left out, so it is not
//! agreed). Any other request, and any answer that is not one of those, passes
//! untouched and unread; a `tools/call` answer is read only up to its JSON-RPC
//! response (at most [`PEEK_BYTES`] of JSON: a larger answer is no task), and the
//! rest of a stream passes as it comes.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::{Bytes, BytesMut};
use hmac::{Hmac, KeyInit as _, Mac as _};
use http::{HeaderValue, Request, Response, header};
use http_body::{Body, Frame};
use http_body_util::{BodyExt as _, Either, Full};
use mcp_tasks::error::BoxError;
use mcp_tasks::wire::{MCP_METHOD, MCP_NAME, RpcError};
use serde_json::Value;
use sha2::Sha256;
use tower::Service;

use crate::proxy::ProxyBody;

/// The prefix of every handle: the layer sends ids with it to the upstream.
pub(crate) const HANDLE_PREFIX: &str = "up.";

/// The shortest key accepted (`MCP_TASK_HANDLE_KEY`).
pub(crate) const MIN_KEY_BYTES: usize = 32;

/// The tag's length: the first 128 bits of the HMAC.
const TAG_BYTES: usize = 16;

/// How much of a JSON `tools/call` answer is read to see whether it is a task.
pub(crate) const PEEK_BYTES: usize = 64 * 1024;

/// The most of an answer to `tasks/*` read to rewrite its id; a larger one passes
/// as it is.
const MAX_REWRITE_BYTES: usize = 16 * 1024 * 1024;

/// Whether and how the upstream's own tasks are carried.
#[derive(Clone)]
pub(crate) struct FederationConfig {
    /// Carry the upstream's own tasks (`MCP_UPSTREAM_TASKS=on`, the default).
    /// Off, an upstream task is no task to the gateway: its `tools/call` answer
    /// reaches the client as it is, but no `tasks/*` request reaches the upstream.
    pub(crate) upstream_tasks: bool,
    /// The key of the task handles (`MCP_TASK_HANDLE_KEY`).
    pub(crate) handle_key: Vec<u8>,
}

impl std::fmt::Debug for FederationConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FederationConfig")
            .field("upstream_tasks", &self.upstream_tasks)
            .finish_non_exhaustive()
    }
}

impl FederationConfig {
    /// `MCP_UPSTREAM_TASKS` (`on` or `off`, default `on`) and `MCP_TASK_HANDLE_KEY`
    /// (at least [`MIN_KEY_BYTES`] bytes). Without a key, a random key of this
    /// process, and a warning: another replica cannot reverse its handles, nor can
    /// this one after a restart.
    pub(crate) fn from_env() -> Result<FederationConfig, String> {
        let upstream_tasks = match std::env::var("MCP_UPSTREAM_TASKS") {
            Err(_) => true,
            Ok(value) => match value.trim() {
                "on" => true,
                "off" => false,
                _ => {
                    return Err(format!(
                        "MCP_UPSTREAM_TASKS must be on or off, not {value:?}"
                    ));
                }
            },
        };
        let handle_key = match std::env::var("MCP_TASK_HANDLE_KEY") {
            Ok(key) if key.len() >= MIN_KEY_BYTES => key.into_bytes(),
            Ok(_) => {
                return Err(format!(
                    "MCP_TASK_HANDLE_KEY must be at least {MIN_KEY_BYTES} bytes (e.g. `openssl rand -base64 48`)"
                ));
            }
            Err(_) => {
                if upstream_tasks {
                    tracing::warn!(
                        "MCP_TASK_HANDLE_KEY is not set: upstream task handles use a random key of this process, so other replicas (and this one after a restart) cannot reverse them"
                    );
                }
                random_key()
            }
        };
        Ok(FederationConfig {
            upstream_tasks,
            handle_key,
        })
    }
}

fn random_key() -> Vec<u8> {
    use rand::TryRng as _;
    let mut key = vec![0u8; MIN_KEY_BYTES];
    rand::rngs::SysRng
        .try_fill_bytes(&mut key)
        .expect("the operating system's random source is unavailable");
    key
}

/// Wraps and unwraps upstream task ids for one upstream under one key.
#[derive(Clone)]
pub(crate) struct Handles {
    /// Keyed, with the backend already taken in: cloned for each id.
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handles")
    }
}

impl Handles {
    /// The handles of `backend`'s tasks under `key`.
    pub(crate) fn new(key: &[u8], backend: &str) -> Handles {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
        mac.update(&(backend.len() as u64).to_be_bytes());
        mac.update(backend.as_bytes());
        Handles { mac }
    }

    fn tag(&self, id: &str) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        mac.update(id.as_bytes());
        mac
    }

    /// The handle of the upstream task `id`.
    pub(crate) fn wrap(&self, id: &str) -> String {
        let tag = self.tag(id).finalize().into_bytes();
        let mut handle = String::with_capacity(HANDLE_PREFIX.len() + id.len() * 4 / 3 + 28);
        handle.push_str(HANDLE_PREFIX);
        URL_SAFE_NO_PAD.encode_string(id.as_bytes(), &mut handle);
        handle.push('.');
        URL_SAFE_NO_PAD.encode_string(&tag[..TAG_BYTES], &mut handle);
        handle
    }

    /// The upstream id inside `handle`, when this key made it for this upstream.
    pub(crate) fn unwrap(&self, handle: &str) -> Option<String> {
        let rest = handle.strip_prefix(HANDLE_PREFIX)?;
        let (id, tag) = rest.split_once('.')?;
        let id = String::from_utf8(URL_SAFE_NO_PAD.decode(id).ok()?).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        if tag.len() != TAG_BYTES {
            return None;
        }
        self.tag(&id).verify_truncated_left(&tag).ok()?;
        Some(id)
    }

    /// Wraps every upstream id `message` carries: `result.taskId`, the
    /// `taskId` of a task notification, the `taskIds` of a listen acknowledgment.
    /// Whether it changed anything.
    fn wrap_message(&self, message: &mut Value) -> bool {
        let wrap = |id: &mut Value| match id {
            Value::String(text) => {
                *text = self.wrap(text);
                true
            }
            _ => false,
        };
        if let Some(id) = message.get_mut("result").and_then(|r| r.get_mut("taskId")) {
            return wrap(id);
        }
        match message.get("method").and_then(Value::as_str) {
            Some("notifications/tasks") => message
                .get_mut("params")
                .and_then(|p| p.get_mut("taskId"))
                .is_some_and(wrap),
            Some("notifications/subscriptions/acknowledged") => {
                let ids = message
                    .get_mut("params")
                    .and_then(|p| p.get_mut("notifications"))
                    .and_then(|n| n.get_mut("taskIds"))
                    .and_then(Value::as_array_mut);
                ids.is_some_and(|ids| ids.iter_mut().fold(false, |any, id| wrap(id) | any))
            }
            _ => false,
        }
    }
}

/// What a request is to the federation, from its `Mcp-Method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Its answer may be a task.
    Call,
    /// `tasks/get`, `tasks/update`, `tasks/cancel`: a handle to unwrap.
    Task,
    Listen,
    /// Nothing to do with tasks.
    Other,
}

fn kind(headers: &http::HeaderMap) -> Kind {
    match headers.get(MCP_METHOD).map(HeaderValue::as_bytes) {
        Some(b"tools/call") => Kind::Call,
        Some(b"tasks/get" | b"tasks/update" | b"tasks/cancel") => Kind::Task,
        Some(b"subscriptions/listen") => Kind::Listen,
        _ => Kind::Other,
    }
}

/// The request body the service below receives: the client's, or one rewritten.
pub(crate) type FederatedBody<B> = Either<B, Full<Bytes>>;

/// Carries the upstream's tasks; see the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Federate<S> {
    inner: S,
    /// `None`: the upstream's tasks are not carried, and every request passes.
    handles: Option<Arc<Handles>>,
}

impl<S> Federate<S> {
    /// `inner` with its upstream's task ids wrapped by `handles` (`None`: passed
    /// through untouched).
    pub(crate) fn new(inner: S, handles: Option<Handles>) -> Federate<S> {
        Federate {
            inner,
            handles: handles.map(Arc::new),
        }
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

/// The future of [`Federate`]: the service's own, unboxed, for a request it does
/// not touch.
pub(crate) enum FederateFuture<F> {
    Inner(F),
    Own(BoxFuture),
}

impl<F> Future for FederateFuture<F>
where
    F: Future<Output = Result<Response<ProxyBody>, Infallible>> + Unpin,
{
    type Output = Result<Response<ProxyBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            FederateFuture::Inner(future) => Pin::new(future).poll(cx),
            FederateFuture::Own(future) => future.as_mut().poll(cx),
        }
    }
}

impl<S, B> Service<Request<B>> for Federate<S>
where
    S: Service<Request<FederatedBody<B>>, Response = Response<ProxyBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + Unpin + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = FederateFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let kind = match &self.handles {
            Some(_) if request.method() == http::Method::POST => kind(request.headers()),
            _ => Kind::Other,
        };
        let Some(handles) = self.handles.clone().filter(|_| kind != Kind::Other) else {
            return FederateFuture::Inner(self.inner.call(request.map(Either::Left)));
        };
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        FederateFuture::Own(Box::pin(async move {
            Ok(carry(inner, handles, kind, request).await)
        }))
    }
}

async fn carry<S, B>(
    mut inner: S,
    handles: Arc<Handles>,
    kind: Kind,
    request: Request<B>,
) -> Response<ProxyBody>
where
    S: Service<Request<FederatedBody<B>>, Response = Response<ProxyBody>, Error = Infallible>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let request = match kind {
        Kind::Call => request.map(Either::Left),
        Kind::Task | Kind::Listen => match unwrap_request(&handles, kind, request).await {
            Ok(request) => request,
            Err(refused) => return refused,
        },
        Kind::Other => unreachable!("passed on unread"),
    };
    let response = match inner.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    if !response.status().is_success() {
        return response;
    }
    let (mut head, body) = response.into_parts();
    let stream = is_event_stream(&head.headers);
    let body = match (kind, stream) {
        (Kind::Listen, true) => Rewriting::new(body, handles, Scope::Every).boxed_unsync(),
        (_, true) => Rewriting::new(body, handles, Scope::UntilResponse).boxed_unsync(),
        (Kind::Listen, false) => body,
        (_, false) => {
            let cap = if kind == Kind::Call {
                PEEK_BYTES
            } else {
                MAX_REWRITE_BYTES
            };
            match read_up_to(body, cap).await {
                Read::Whole(bytes) => match rewrite_json(&handles, &bytes) {
                    Some(rewritten) => {
                        head.headers.remove(header::CONTENT_LENGTH);
                        full(rewritten)
                    }
                    None => full(bytes),
                },
                Read::Partial(prefix, rest) => prefixed(prefix, rest),
                Read::Failed(e) => {
                    tracing::warn!(error = %e, "the upstream's answer failed mid-stream");
                    return error_response(RpcError::internal_error(), &Value::Null);
                }
            }
        }
    };
    Response::from_parts(head, body)
}

/// A `tasks/*` or listen request with its handles unwrapped; a refused handle of
/// `tasks/*` is answered as a missing task.
#[allow(clippy::result_large_err)] // made once per request and answered at once
async fn unwrap_request<B>(
    handles: &Handles,
    kind: Kind,
    request: Request<B>,
) -> Result<Request<FederatedBody<B>>, Response<ProxyBody>>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (mut parts, body) = request.into_parts();
    // The layer above read and checked it already: these are its bytes.
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            let refused = RpcError::invalid_request("Could not read the request body");
            return Err(error_response(refused, &Value::Null));
        }
    };
    let Ok(mut message) = serde_json::from_slice::<Value>(&bytes) else {
        return Ok(Request::from_parts(parts, Either::Right(Full::new(bytes))));
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    match kind {
        Kind::Task => {
            let Some(Value::String(handle)) =
                message.get_mut("params").and_then(|p| p.get_mut("taskId"))
            else {
                return Ok(Request::from_parts(parts, Either::Right(Full::new(bytes))));
            };
            let Some(upstream) = handles.unwrap(handle) else {
                return Err(error_response(not_found(), &id));
            };
            parts.headers.insert(MCP_NAME, header_value(&upstream));
            *handle = upstream;
        }
        _ => {
            let ids = message
                .get_mut("params")
                .and_then(|p| p.get_mut("notifications"))
                .and_then(|n| n.get_mut("taskIds"))
                .and_then(Value::as_array_mut);
            let Some(ids) = ids else {
                return Ok(Request::from_parts(parts, Either::Right(Full::new(bytes))));
            };
            let kept = ids
                .iter()
                .filter_map(|id| handles.unwrap(id.as_str()?))
                .map(Value::String)
                .collect();
            *ids = kept;
        }
    }
    let bytes = Bytes::from(serde_json::to_vec(&message).unwrap_or_default());
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Request::from_parts(parts, Either::Right(Full::new(bytes))))
}

/// What a missing task answers, whichever `tasks/*` method asked: the layer's words.
fn not_found() -> RpcError {
    RpcError::invalid_params("Failed to retrieve task: Task not found")
}

/// `Mcp-Name` for an upstream id: as it is when it is visible ASCII, otherwise in
/// the `=?base64?…?=` form.
fn header_value(id: &str) -> HeaderValue {
    let plain =
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_graphic()) && !id.starts_with("=?base64?");
    if plain && let Ok(value) = HeaderValue::from_str(id) {
        return value;
    }
    let encoded = format!("=?base64?{}?=", STANDARD.encode(id));
    HeaderValue::from_str(&encoded).expect("base64 is a valid header value")
}

fn error_response(error: RpcError, id: &Value) -> Response<ProxyBody> {
    error.to_response(Some(id)).map(full)
}

fn full(bytes: Bytes) -> ProxyBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn prefixed(prefix: Bytes, rest: ProxyBody) -> ProxyBody {
    Prefixed {
        prefix: Some(prefix),
        rest,
    }
    .boxed_unsync()
}

/// Bytes already read, then the rest of the body they came from.
struct Prefixed {
    prefix: Option<Bytes>,
    rest: ProxyBody,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}

fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// A JSON answer with its upstream ids wrapped, or `None` when it has none.
fn rewrite_json(handles: &Handles, bytes: &[u8]) -> Option<Bytes> {
    if !contains(bytes, b"\"taskId\"") {
        return None;
    }
    let mut message: Value = serde_json::from_slice(bytes).ok()?;
    handles
        .wrap_message(&mut message)
        .then(|| Bytes::from(serde_json::to_vec(&message).unwrap_or_default()))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// How much of a body was read.
enum Read {
    Whole(Bytes),
    /// More than the cap: what was read, and the rest still to come.
    Partial(Bytes, ProxyBody),
    Failed(BoxError),
}

async fn read_up_to(mut body: ProxyBody, cap: usize) -> Read {
    let mut read = BytesMut::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    read.extend_from_slice(&data);
                    if read.len() > cap {
                        return Read::Partial(read.freeze(), body);
                    }
                }
            }
            Err(e) => return Read::Failed(e),
        }
    }
    Read::Whole(read.freeze())
}

/// Which events of a stream are rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Each one that carries upstream ids (a listen stream).
    Every,
    /// Up to the JSON-RPC response; the rest passes unread.
    UntilResponse,
}

/// An SSE body with the upstream ids of its events wrapped, event by event; the
/// fields of an event other than `data` are kept as they were.
struct Rewriting {
    inner: ProxyBody,
    handles: Arc<Handles>,
    scope: Scope,
    /// Bytes of an event not yet complete.
    pending: BytesMut,
    /// Past the response (or the stream failed to parse): bytes pass as they come.
    through: bool,
    ready: VecDeque<Bytes>,
}

impl Rewriting {
    fn new(inner: ProxyBody, handles: Arc<Handles>, scope: Scope) -> Rewriting {
        Rewriting {
            inner,
            handles,
            scope,
            pending: BytesMut::new(),
            through: false,
            ready: VecDeque::new(),
        }
    }

    /// Moves every complete event of `pending` to `ready`, rewritten as needed.
    fn split(&mut self) {
        while !self.through {
            let Some(end) = event_end(&self.pending) else {
                return;
            };
            let raw = self.pending.split_to(end).freeze();
            let (event, response) = rewrite_event(&self.handles, &raw);
            self.ready.push_back(event);
            if response && self.scope == Scope::UntilResponse {
                self.through = true;
                if !self.pending.is_empty() {
                    self.ready.push_back(self.pending.split().freeze());
                }
            }
        }
    }
}

/// Where the first event of `buf` ends (after its blank line), whatever the line
/// ends (LF, CRLF or CR).
fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    let mut line_start = true;
    while i < buf.len() {
        let ending = match buf[i] {
            b'\n' => 1,
            b'\r' if buf.get(i + 1) == Some(&b'\n') => 2,
            // A lone CR at the end may be half of a CRLF.
            b'\r' if i + 1 == buf.len() => return None,
            b'\r' => 1,
            _ => {
                line_start = false;
                i += 1;
                continue;
            }
        };
        i += ending;
        if line_start {
            return Some(i);
        }
        line_start = true;
    }
    None
}

/// One event with its upstream ids wrapped (the raw bytes when it has none), and
/// whether it held a JSON-RPC response.
fn rewrite_event(handles: &Handles, raw: &Bytes) -> (Bytes, bool) {
    let text = String::from_utf8_lossy(raw);
    let mut data: Option<String> = None;
    let mut others = Vec::new();
    for line in text.split(['\n', '\r']).filter(|l| !l.is_empty()) {
        match line.strip_prefix("data:") {
            Some(value) => {
                let value = value.strip_prefix(' ').unwrap_or(value);
                match &mut data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => data = Some(value.to_owned()),
                }
            }
            None => others.push(line),
        }
    }
    let Some(data) = data else {
        return (raw.clone(), false);
    };
    let Ok(mut message) = serde_json::from_str::<Value>(&data) else {
        return (raw.clone(), false);
    };
    let response = message.get("id").is_some()
        && message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some());
    if !data.contains("\"taskId") || !handles.wrap_message(&mut message) {
        return (raw.clone(), response);
    }
    let mut event = String::with_capacity(raw.len() + 64);
    for line in others {
        event.push_str(line);
        event.push('\n');
    }
    event.push_str("data: ");
    event.push_str(&message.to_string());
    event.push_str("\n\n");
    (Bytes::from(event), response)
}

impl Body for Rewriting {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(bytes) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if this.through => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(data) => {
                        this.pending.extend_from_slice(&data);
                        this.split();
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    if this.pending.is_empty() {
                        return Poll::Ready(None);
                    }
                    let rest = this.pending.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(rest))));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    const BACKEND: &str = "http://127.0.0.1:3002/mcp";

    #[test]
    fn a_handle_is_reversed_only_under_its_key_and_backend() {
        let handles = Handles::new(KEY, BACKEND);
        let handle = handles.wrap("tsk_A/ü");
        assert!(handle.starts_with(HANDLE_PREFIX), "{handle}");
        assert!(
            handle.bytes().all(|b| b.is_ascii_graphic()),
            "header-safe: {handle}"
        );
        assert_eq!(handles.unwrap(&handle).as_deref(), Some("tsk_A/ü"));
        // Any replica with the same key and upstream reverses it.
        assert_eq!(
            Handles::new(KEY, BACKEND).unwrap(&handle).as_deref(),
            Some("tsk_A/ü")
        );
        let other_key = Handles::new(b"another key of thirty-two bytes!", BACKEND);
        assert_eq!(other_key.unwrap(&handle), None);
        let other_backend = Handles::new(KEY, "http://127.0.0.1:3004/mcp");
        assert_eq!(other_backend.unwrap(&handle), None);
    }

    #[test]
    fn forged_and_malformed_handles_are_refused() {
        let handles = Handles::new(KEY, BACKEND);
        let handle = handles.wrap("tsk_A");
        let (head, tag) = handle.rsplit_once('.').unwrap();
        // Another id under the same tag.
        let forged = format!("{HANDLE_PREFIX}{}.{tag}", URL_SAFE_NO_PAD.encode("tsk_B"));
        assert_eq!(handles.unwrap(&forged), None);
        // A shortened tag.
        assert_eq!(handles.unwrap(&format!("{head}.{}", &tag[..8])), None);
        for bad in [
            "",
            "up.",
            "up..",
            "tsk_A",
            "up.dHNrX0E",
            "up.!!.AAAA",
            &handle[3..],
            &format!("{handle}x"),
        ] {
            assert_eq!(handles.unwrap(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ids_are_wrapped_where_the_wire_carries_them() {
        let handles = Handles::new(KEY, BACKEND);
        let mut created =
            json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "task", "taskId": "a"}});
        assert!(handles.wrap_message(&mut created));
        assert_eq!(created["result"]["taskId"], handles.wrap("a"));
        let mut note = json!({"jsonrpc": "2.0", "method": "notifications/tasks",
            "params": {"taskId": "b", "status": "working"}});
        assert!(handles.wrap_message(&mut note));
        assert_eq!(note["params"]["taskId"], handles.wrap("b"));
        let mut ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"notifications": {"taskIds": ["c", "d"], "toolsListChanged": true}}});
        assert!(handles.wrap_message(&mut ack));
        assert_eq!(
            ack["params"]["notifications"]["taskIds"],
            json!([handles.wrap("c"), handles.wrap("d")])
        );
        let mut plain = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}});
        assert!(!handles.wrap_message(&mut plain));
    }

    #[test]
    fn events_end_at_a_blank_line_whatever_the_line_ends() {
        assert_eq!(event_end(b"data: x\n\nrest"), Some(9));
        assert_eq!(event_end(b"data: x\r\n\r\nrest"), Some(11));
        assert_eq!(event_end(b"data: x\r\rrest"), Some(9));
        assert_eq!(event_end(b"data: x\n"), None);
        assert_eq!(event_end(b"data: x\r\n\r"), None);
        assert_eq!(event_end(b": keep-alive\n\n"), Some(14));
    }

    #[tokio::test]
    async fn a_stream_is_rewritten_event_by_event_and_then_passes() {
        let handles = Arc::new(Handles::new(KEY, BACKEND));
        let progress =
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#;
        let created = r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"task","taskId":"u1"}}"#;
        let late = r#"{"jsonrpc":"2.0","method":"notifications/tasks","params":{"taskId":"u1"}}"#;
        let stream = format!(
            "event: message\ndata: {progress}\n\nid: 3\ndata: {created}\r\n\r\ndata: {late}\n\n"
        );
        // Cut anywhere: the events come out the same.
        for cut in [1, 7, 30, stream.len() / 2, stream.len() - 3] {
            let chunks = vec![
                Bytes::copy_from_slice(&stream.as_bytes()[..cut]),
                Bytes::copy_from_slice(&stream.as_bytes()[cut..]),
            ];
            let body = Chunks(chunks.into()).boxed_unsync();
            let rewritten = Rewriting::new(body, handles.clone(), Scope::UntilResponse)
                .collect()
                .await
                .unwrap()
                .to_bytes();
            let text = String::from_utf8(rewritten.to_vec()).unwrap();
            let expected_created = created.replace("u1", &handles.wrap("u1"));
            assert!(
                text.starts_with(&format!("event: message\ndata: {progress}\n\n")),
                "{text}"
            );
            assert!(
                text.contains(&format!(
                    "id: 3\ndata: {}\n\n",
                    serde_json::from_str::<Value>(&expected_created).unwrap()
                )),
                "{text}"
            );
            // Past the response, events pass unread.
            assert!(text.ends_with(&format!("data: {late}\n\n")), "{text}");
        }
    }

    type Seen = Arc<std::sync::Mutex<Vec<(http::HeaderMap, Value)>>>;

    /// A service below the federation that records what reaches it and answers
    /// `answer` (as JSON).
    #[allow(clippy::type_complexity)] // the service's type, spelt out once
    fn upstream(
        answer: Value,
    ) -> (
        impl Service<
            Request<FederatedBody<Full<Bytes>>>,
            Response = Response<ProxyBody>,
            Error = Infallible,
            Future = BoxFuture,
        > + Clone,
        Seen,
    ) {
        let seen = Seen::default();
        let record = seen.clone();
        let service = tower::service_fn(move |request: Request<FederatedBody<Full<Bytes>>>| {
            let record = record.clone();
            let answer = answer.clone();
            Box::pin(async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                let message = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                record.lock().unwrap().push((parts.headers, message));
                let mut response = Response::new(full(Bytes::from(answer.to_string())));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                Ok::<_, Infallible>(response)
            }) as BoxFuture
        });
        (service, seen)
    }

    fn request(method: &str, params: Value) -> Request<Full<Bytes>> {
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params});
        let mut request = Request::post("/mcp")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        request
            .headers_mut()
            .insert(MCP_METHOD, HeaderValue::from_str(method).unwrap());
        if let Some(id) = params["taskId"].as_str() {
            request
                .headers_mut()
                .insert(MCP_NAME, HeaderValue::from_str(id).unwrap());
        }
        request
    }

    async fn send<S>(service: &mut Federate<S>, request: Request<Full<Bytes>>) -> (Value, Bytes)
    where
        S: Service<
                Request<FederatedBody<Full<Bytes>>>,
                Response = Response<ProxyBody>,
                Error = Infallible,
                Future = BoxFuture,
            > + Clone
            + Send
            + 'static,
    {
        let response = service.call(request).await.unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (serde_json::from_slice(&bytes).unwrap(), bytes)
    }

    #[tokio::test]
    async fn a_forged_handle_answers_as_a_missing_task_and_goes_no_further() {
        let (inner, seen) = upstream(json!({"jsonrpc": "2.0", "id": 5, "result": {}}));
        let handles = Handles::new(KEY, BACKEND);
        let foreign = Handles::new(KEY, "http://elsewhere/mcp").wrap("tsk_A");
        let mut service = Federate::new(inner, Some(handles));
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let params = json!({"taskId": foreign, "inputResponses": {}});
            let (answer, _) = send(&mut service, request(method, params)).await;
            assert_eq!(
                answer,
                json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32602,
                    "message": "Failed to retrieve task: Task not found"}}),
                "{method}"
            );
        }
        assert!(
            seen.lock().unwrap().is_empty(),
            "nothing reached the upstream"
        );
    }

    #[tokio::test]
    async fn a_handle_goes_upstream_as_the_upstream_id_and_comes_back_wrapped() {
        let answer = json!({"jsonrpc": "2.0", "id": 5, "result": {"resultType": "complete",
            "taskId": "tsk A", "status": "working"}});
        let (inner, seen) = upstream(answer);
        let handles = Handles::new(KEY, BACKEND);
        let handle = handles.wrap("tsk A");
        let mut service = Federate::new(inner, Some(handles.clone()));
        let (answer, _) = send(
            &mut service,
            request("tasks/get", json!({"taskId": handle})),
        )
        .await;
        assert_eq!(answer["result"]["taskId"], handle.as_str());
        let (headers, message) = seen.lock().unwrap().pop().unwrap();
        assert_eq!(message["params"]["taskId"], "tsk A");
        // Not visible ASCII: `Mcp-Name` in its base64 form.
        assert_eq!(headers[MCP_NAME], "=?base64?dHNrIEE=?=");
    }

    #[tokio::test]
    async fn a_task_answer_is_wrapped_and_any_other_passes_byte_for_byte() {
        let created = json!({"jsonrpc": "2.0", "id": 5, "result": {"resultType": "task",
            "taskId": "u1", "status": "working"}});
        let (inner, _) = upstream(created);
        let handles = Handles::new(KEY, BACKEND);
        let mut service = Federate::new(inner, Some(handles.clone()));
        let call = || request("tools/call", json!({"name": "t"}));
        let (answer, _) = send(&mut service, call()).await;
        assert_eq!(answer["result"]["taskId"], handles.wrap("u1"));
        let plain = r#"{ "jsonrpc":"2.0","id":5, "result":{"content":[]} }"#;
        let (inner, _) = upstream(serde_json::from_str(plain).unwrap());
        let mut service = Federate::new(inner, Some(handles));
        let (_, bytes) = send(&mut service, call()).await;
        assert_eq!(
            bytes,
            serde_json::from_str::<Value>(plain).unwrap().to_string()
        );
    }

    #[tokio::test]
    async fn listen_ids_are_unwrapped_and_foreign_ones_left_out() {
        let (inner, seen) = upstream(json!({"jsonrpc": "2.0", "id": 5, "result": {}}));
        let handles = Handles::new(KEY, BACKEND);
        let foreign = Handles::new(b"another key of thirty-two bytes!", BACKEND).wrap("b");
        let mut service = Federate::new(inner, Some(handles.clone()));
        let ids = json!({"notifications": {"taskIds": [handles.wrap("a"), foreign, 7]}});
        send(&mut service, request("subscriptions/listen", ids)).await;
        let (_, message) = seen.lock().unwrap().pop().unwrap();
        assert_eq!(message["params"]["notifications"]["taskIds"], json!(["a"]));
    }

    #[tokio::test]
    async fn switched_off_everything_passes() {
        let (inner, seen) = upstream(json!({"jsonrpc": "2.0", "id": 5, "result": {}}));
        let mut service = Federate::new(inner, None);
        let handle = Handles::new(KEY, BACKEND).wrap("a");
        send(
            &mut service,
            request("tasks/get", json!({"taskId": handle})),
        )
        .await;
        assert_eq!(
            seen.lock().unwrap()[0].1["params"]["taskId"],
            handle.as_str()
        );
    }

    /// A body of these chunks, one frame each.
    struct Chunks(VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Ready(self.0.pop_front().map(|c| Ok(Frame::data(c))))
        }
    }
}
