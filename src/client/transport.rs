//! One JSON-RPC exchange over Streamable HTTP: the envelope's `_meta`, the standard
//! headers, and the reply read from JSON or from an SSE stream; and the listen stream.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body::Body;
use http_body_util::BodyExt as _;
use serde_json::{Map, Value, json};
use tower_service::Service;

use crate::error::BoxError;
use crate::wire::sse::{self, Splitter};
use crate::wire::{
    EXTENSION_ID, MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};

use super::error::{ClientError, ClientLimit};
use super::task::rpc_error;

/// `_meta` key carrying the client's name and version.
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// The default cap on one reply's bytes: a JSON body, or an SSE reply up to and
/// including its response (16 MiB; a server's results are 8 MiB at most by default).
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// The default cap on one SSE event's bytes, on replies and listen streams (16 MiB: a
/// task notification carries the task's result).
pub const MAX_EVENT_BYTES: usize = 16 << 20;
/// The default cap on questions: of one `input_required` round before a task, and
/// of one task over its whole life.
pub const MAX_INPUT_KEYS: usize = 64;
/// The default cap on `input_required` rounds: of one `tools/call` before its task or
/// result, and of one task once it exists
/// ([`Client::with_max_input_rounds`](super::Client::with_max_input_rounds) sets
/// another).
pub const MAX_INPUT_ROUNDS: usize = 16;
/// The default cap on how long [`TaskFollower::wait`](super::TaskFollower::wait)
/// follows one task (24 hours).
pub const MAX_FOLLOW_TIME: Duration = Duration::from_secs(24 * 60 * 60);
/// The default time a follower keeps polling a server it cannot reach (30 s: a
/// restart or a deploy behind a load balancer), counted from the first failed
/// `tasks/get` in a row
/// ([`Client::with_poll_retry_budget`](super::Client::with_poll_retry_budget) sets
/// another).
pub const POLL_RETRY_BUDGET: Duration = Duration::from_secs(30);

/// The client's caps on what a server may send or ask.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) response_bytes: usize,
    pub(crate) event_bytes: usize,
    pub(crate) input_rounds: usize,
    pub(crate) input_keys: usize,
    pub(crate) follow_time: Duration,
    pub(crate) poll_retry_budget: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            response_bytes: MAX_RESPONSE_BYTES,
            event_bytes: MAX_EVENT_BYTES,
            input_rounds: MAX_INPUT_ROUNDS,
            input_keys: MAX_INPUT_KEYS,
            follow_time: MAX_FOLLOW_TIME,
            poll_retry_budget: POLL_RETRY_BUDGET,
        }
    }
}

/// What every request of one client shares.
#[derive(Debug, Clone)]
pub(crate) struct Rpc<S> {
    pub(crate) service: S,
    pub(crate) endpoint: Uri,
    pub(crate) bearer: Option<HeaderValue>,
    /// `_meta` of every request: version, capabilities, client info.
    pub(crate) meta: Arc<Map<String, Value>>,
    pub(crate) timeout: Duration,
    pub(crate) limits: Limits,
    next_id: Arc<AtomicU64>,
}

impl<S> Rpc<S> {
    pub(crate) fn new(service: S, endpoint: Uri) -> Self {
        let mut rpc = Rpc {
            service,
            endpoint,
            bearer: None,
            meta: Arc::default(),
            timeout: Duration::from_secs(30),
            limits: Limits::default(),
            next_id: Arc::new(AtomicU64::new(1)),
        };
        rpc.set_meta(&json!({}), ("mcp-tasks", env!("CARGO_PKG_VERSION")));
        rpc
    }

    /// Sets `_meta`: the protocol version, `capabilities` plus the tasks extension,
    /// and the client's name and version.
    pub(crate) fn set_meta(&mut self, capabilities: &Value, (name, version): (&str, &str)) {
        let mut capabilities = capabilities.as_object().cloned().unwrap_or_default();
        let extensions = capabilities
            .entry("extensions")
            .or_insert_with(|| json!({}));
        if let Some(extensions) = extensions.as_object_mut() {
            extensions.insert(EXTENSION_ID.to_owned(), json!({}));
        }
        let mut meta = Map::new();
        meta.insert(META_PROTOCOL_VERSION.to_owned(), json!(PROTOCOL_VERSION));
        meta.insert(
            META_CLIENT_CAPABILITIES.to_owned(),
            Value::Object(capabilities),
        );
        meta.insert(
            META_CLIENT_INFO.to_owned(),
            json!({"name": name, "version": version}),
        );
        self.meta = Arc::new(meta);
    }

    fn request(
        &self,
        id: u64,
        method: &str,
        name: Option<&str>,
        mut params: Map<String, Value>,
    ) -> Result<Request<String>, ClientError> {
        params.insert("_meta".to_owned(), Value::Object((*self.meta).clone()));
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut request = Request::post(self.endpoint.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header(MCP_PROTOCOL_VERSION, PROTOCOL_VERSION)
            .header(MCP_METHOD, method);
        if let Some(name) = name {
            request = request.header(MCP_NAME, header_value(name)?);
        }
        if let Some(bearer) = &self.bearer {
            request = request.header(header::AUTHORIZATION, bearer.clone());
        }
        request
            .body(body.to_string())
            .map_err(|e| ClientError::Config(e.to_string()))
    }
}

/// A standard header's value: as is when it is plain printable ASCII without
/// surrounding spaces, otherwise `=?base64?…?=`.
fn header_value(value: &str) -> Result<HeaderValue, ClientError> {
    let plain = !value.is_empty()
        && value.trim() == value
        && value.bytes().all(|b| (0x20..0x7f).contains(&b));
    let text = if plain {
        value.to_owned()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(value))
    };
    HeaderValue::from_str(&text).map_err(|e| ClientError::Config(e.to_string()))
}

impl<S, B> Rpc<S>
where
    S: Service<Request<String>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// Sends one request and returns the HTTP response head and body.
    async fn send(&self, request: Request<String>) -> Result<Response<B>, ClientError> {
        // A clone of a ready service may not be ready: poll the clone itself.
        let mut service = self.service.clone();
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .map_err(ClientError::transport)?;
        service.call(request).await.map_err(ClientError::transport)
    }

    /// One request and its result, within the client's timeout. `name` is the
    /// `Mcp-Name` header, on the methods that carry one.
    pub(crate) async fn call(
        &self,
        method: &str,
        name: Option<&str>,
        params: Map<String, Value>,
    ) -> Result<Value, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = self.request(id, method, name, params)?;
        let exchange = async {
            let response = self.send(request).await?;
            let status = response.status();
            let is_sse = sse::is_event_stream(response.headers());
            let mut body = Box::pin(response.into_body());
            let (reply, bytes) = if is_sse {
                (read_sse_reply(&mut body, id, self.limits).await?, None)
            } else {
                let limited = http_body_util::Limited::new(body, self.limits.response_bytes);
                let bytes = match limited.collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                        return Err(ClientError::LimitExceeded(ClientLimit::ResponseBytes));
                    }
                    Err(e) => return Err(ClientError::Transport(e)),
                };
                (serde_json::from_slice(&bytes).ok(), Some(bytes))
            };
            match reply {
                Some(reply) => into_result(reply, status),
                // An authentication layer's 401, a proxy's 502: the status says it.
                None if !status.is_success() => Err(ClientError::http(
                    status,
                    bytes
                        .as_deref()
                        .and_then(excerpt)
                        .unwrap_or_else(|| "no JSON-RPC response in the body".to_owned()),
                )),
                None => Err(ClientError::http(
                    status,
                    "no JSON-RPC response in the body",
                )),
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout)?
    }

    /// Opens `subscriptions/listen` for `task_id`. `Ok(None)` when the server
    /// refused it or did not agree to notify this task; the stream otherwise, its
    /// acknowledgment read.
    pub(crate) async fn listen(&self, task_id: &str) -> Result<Option<Listen<B>>, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut params = Map::new();
        params.insert("notifications".to_owned(), json!({"taskIds": [task_id]}));
        let request = self.request(id, "subscriptions/listen", None, params)?;
        let open = async {
            let response = self.send(request).await?;
            if !response.status().is_success() || !sse::is_event_stream(response.headers()) {
                return Ok(None);
            }
            let mut listen = Listen {
                body: Box::pin(response.into_body()),
                splitter: Splitter::new(),
                event_bytes: self.limits.event_bytes,
            };
            let Some(ack) = listen.next_message().await? else {
                return Ok(None);
            };
            let agreed = ack["method"] == "notifications/subscriptions/acknowledged"
                && ack["params"]["notifications"]["taskIds"]
                    .as_array()
                    .is_some_and(|ids| ids.iter().any(|id| id == task_id));
            Ok(agreed.then_some(listen))
        };
        tokio::time::timeout(self.timeout, open)
            .await
            .map_err(|_| ClientError::Timeout)?
    }
}

/// An open listen stream.
#[derive(Debug)]
pub(crate) struct Listen<B> {
    body: Pin<Box<B>>,
    splitter: Splitter,
    event_bytes: usize,
}

impl<B> Listen<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    /// The next JSON message on the stream; `None` once it ended.
    pub(crate) async fn next_message(&mut self) -> Result<Option<Value>, ClientError> {
        let mut unbounded = usize::MAX;
        next_json(
            &mut self.body,
            &mut self.splitter,
            self.event_bytes,
            &mut unbounded,
        )
        .await
    }

    /// The next `notifications/tasks` about `task_id`; `None` once the stream ended
    /// (a graceful end with the listen result included).
    pub(crate) async fn next_task(&mut self, task_id: &str) -> Result<Option<Value>, ClientError> {
        while let Some(message) = self.next_message().await? {
            if message["method"] == "notifications/tasks" && message["params"]["taskId"] == task_id
            {
                return Ok(message.get("params").cloned());
            }
            if message.get("id").is_some() {
                return Ok(None); // the listen request's result: the server ended it
            }
        }
        Ok(None)
    }
}

/// The next JSON `data` of an SSE body; events without JSON (keep-alives) skipped.
/// An event past `event_bytes`, or more than `budget` bytes read in all (taken off
/// it), is [`ClientError::LimitExceeded`].
async fn next_json<B>(
    body: &mut Pin<Box<B>>,
    splitter: &mut Splitter,
    event_bytes: usize,
    budget: &mut usize,
) -> Result<Option<Value>, ClientError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    loop {
        while let Some(event) = splitter.next_event() {
            if event.raw.len() > event_bytes {
                return Err(ClientError::LimitExceeded(ClientLimit::EventBytes));
            }
            if let Some(json) = event.json() {
                return Ok(Some(json));
            }
        }
        // What is held now is one unfinished event.
        if splitter.buffered() > event_bytes {
            return Err(ClientError::LimitExceeded(ClientLimit::EventBytes));
        }
        match body.frame().await {
            None => return Ok(None),
            Some(Err(error)) => return Err(ClientError::transport(error)),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    *budget = budget
                        .checked_sub(data.len())
                        .ok_or(ClientError::LimitExceeded(ClientLimit::ResponseBytes))?;
                    splitter.push(&data);
                }
            }
        }
    }
}

/// The response to request `id` on an SSE reply; notifications before it skipped.
async fn read_sse_reply<B>(
    body: &mut Pin<Box<B>>,
    id: u64,
    limits: Limits,
) -> Result<Option<Value>, ClientError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut splitter = Splitter::new();
    let mut budget = limits.response_bytes;
    while let Some(message) =
        next_json(body, &mut splitter, limits.event_bytes, &mut budget).await?
    {
        if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
            return Ok(Some(message));
        }
    }
    Ok(None)
}

/// The start of a body that is text, on one line, for an error message: at most
/// [`EXCERPT_CHARS`] characters; `None` when it is empty or not UTF-8.
fn excerpt(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return None;
    }
    let mut chars = line.chars();
    let mut shown: String = chars.by_ref().take(EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        shown.push('…');
    }
    Some(shown)
}

/// How much of a non-JSON error body an error message quotes.
const EXCERPT_CHARS: usize = 200;

/// A JSON-RPC response as its result, or its error.
fn into_result(reply: Value, status: StatusCode) -> Result<Value, ClientError> {
    if let Some(error) = reply.get("error") {
        return Err(ClientError::Rpc(rpc_error(error, status)));
    }
    if !status.is_success() {
        return Err(ClientError::http(
            status,
            "an HTTP error without a JSON-RPC error",
        ));
    }
    match reply {
        Value::Object(mut reply) => reply
            .remove("result")
            .ok_or_else(|| ClientError::http(status, "a JSON-RPC response without a result")),
        _ => Err(ClientError::http(
            status,
            "a body that is not a JSON-RPC response",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_plain_ascii_are_base64() {
        assert_eq!(header_value("build").unwrap(), "build");
        assert_eq!(
            header_value("héllo").unwrap(),
            format!("=?base64?{}?=", STANDARD.encode("héllo")).as_str()
        );
        assert!(
            header_value(" padded ")
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("=?base64?")
        );
    }

    #[test]
    fn an_error_body_is_quoted_on_one_short_line() {
        assert_eq!(
            excerpt(b"  missing\n bearer   token \n").as_deref(),
            Some("missing bearer token")
        );
        assert_eq!(excerpt(b" \n"), None);
        assert_eq!(excerpt(&[0xff, 0xfe]), None);
        let long = excerpt("x".repeat(500).as_bytes()).unwrap();
        assert_eq!(long.chars().count(), EXCERPT_CHARS + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn meta_declares_the_extension_beside_the_handler_capabilities() {
        let mut rpc = Rpc::new((), Uri::from_static("http://127.0.0.1/mcp"));
        rpc.set_meta(&json!({"elicitation": {"form": {}}}), ("t", "1"));
        let capabilities = &rpc.meta[META_CLIENT_CAPABILITIES];
        assert_eq!(capabilities["elicitation"], json!({"form": {}}));
        assert_eq!(capabilities["extensions"][EXTENSION_ID], json!({}));
        assert_eq!(rpc.meta[META_PROTOCOL_VERSION], PROTOCOL_VERSION);
    }
}
