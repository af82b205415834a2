//! Messages the bridge sends upstream on its own account, through the gateway's
//! proxy: handshakes, answers to the upstream's questions, cancellations. Counts
//! the upstream's refusals of the older revision's requests, a hint that it was
//! restarted on another revision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::wire::{LEGACY_VERSIONS, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use serde_json::{Map, Value, json};
use tower::Service as _;

use super::session::Lease;
use super::wire::{self, Event, Events, Kind};
use crate::proxy::{Proxy, ProxyBody, ProxyFailure};

/// The largest upstream message (or unfinished event) the bridge holds.
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The longest a handshake or discovery exchange may take once its answer started.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// The upstream, as the bridge talks to it.
#[derive(Debug)]
pub(crate) struct Upstream {
    proxy: Proxy,
    next_id: AtomicU64,
    /// How many requests of the older revision (on a session, with an older
    /// `MCP-Protocol-Version`, or `initialize`) the upstream refused with HTTP 400 or
    /// 404: a forgotten session, or an upstream that no longer speaks that revision.
    refusals: AtomicU64,
}

/// How a short exchange ended.
#[derive(Debug)]
pub(crate) enum Exchanged {
    /// Nothing the bridge can judge: the proxy's own error (unreachable, timed
    /// out) or the upstream's 401/403, for the client to see as it is, or an
    /// upstream not serving yet (HTTP 429, 502, 503 or 504), as [`unavailable`].
    Refused(Response<ProxyBody>),
    /// The upstream answered: its status and headers, and its JSON-RPC response
    /// if it sent one.
    Answered {
        status: StatusCode,
        headers: HeaderMap,
        message: Option<Value>,
    },
}

impl Upstream {
    pub(crate) fn new(proxy: Proxy) -> Upstream {
        Upstream {
            proxy,
            next_id: AtomicU64::new(1),
            refusals: AtomicU64::new(0),
        }
    }

    /// How many requests of the older revision the upstream refused so far (HTTP
    /// 400 or 404): a change around a bridged request means it may have been
    /// restarted on another revision.
    pub(crate) fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// A request id unique among the bridge's upstream requests: clients' own ids
    /// may collide on a shared session.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends one request upstream (`POST` with a body, or `DELETE` without).
    pub(crate) async fn send(
        &self,
        method: Method,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response<ProxyBody> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        // The proxy takes only the query from this URI; the upstream's URL is its own.
        *request.uri_mut() = Uri::from_static("/");
        *request.headers_mut() = headers;
        match self.proxy.clone().call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// Posts one JSON-RPC message, counting a refusal of the older revision's form.
    pub(crate) async fn post(&self, headers: HeaderMap, message: &Value) -> Response<ProxyBody> {
        let older_form = message["method"] == "initialize" || is_older_form(&headers);
        let body = Bytes::from(message.to_string());
        let response = self.send(Method::POST, headers, body).await;
        let refused = matches!(
            response.status(),
            StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND
        );
        if older_form && refused && response.extensions().get::<ProxyFailure>().is_none() {
            self.refusals.fetch_add(1, Ordering::Relaxed);
        }
        response
    }

    /// Posts a request and reads its answer, JSON or a stream, up to its JSON-RPC
    /// response (anything else on the stream is ignored).
    pub(crate) async fn exchange(&self, headers: HeaderMap, message: &Value) -> Exchanged {
        let response = self.post(headers, message).await;
        let refused = response.extensions().get::<ProxyFailure>().is_some()
            || matches!(
                response.status(),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
            );
        if refused {
            return Exchanged::Refused(response);
        }
        if is_not_serving(response.status()) {
            tracing::debug!(status = %response.status(), "the upstream is not serving yet");
            return Exchanged::Refused(unavailable(Unavailable::NotServing));
        }
        let (head, body) = response.into_parts();
        let stream = is_event_stream(&head.headers);
        let id = message["id"].clone();
        let read = tokio::time::timeout(EXCHANGE_TIMEOUT, read_answer(body, stream, &id)).await;
        let message = read.ok().flatten();
        Exchanged::Answered {
            status: head.status,
            headers: head.headers,
            message,
        }
    }

    /// Tells the upstream that the client gave up request `id` (2025-11-25 does not
    /// take a closed stream for a cancellation).
    pub(crate) async fn cancel(&self, headers: HeaderMap, id: u64) {
        let message = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "The client cancelled the request"}});
        let response = self.post(headers, &message).await;
        if !response.status().is_success() {
            tracing::debug!(status = %response.status(), "the upstream refused a cancellation");
        }
    }
}

/// Whether request headers carry the older revisions' form: a session, or an
/// older `MCP-Protocol-Version`.
fn is_older_form(headers: &HeaderMap) -> bool {
    headers.contains_key(MCP_SESSION_ID)
        || headers
            .get(MCP_PROTOCOL_VERSION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| LEGACY_VERSIONS.contains(&v.trim()))
}

/// Whether an upstream's status says "not now" (starting, overloaded, or a proxy
/// in front of it without a backend): 429, 502, 503, 504.
pub(crate) fn is_not_serving(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
    )
}

/// Why a request got [`unavailable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unavailable {
    /// The upstream could not be reached or said it is not serving, so its era
    /// is not known.
    NotServing,
    /// The upstream refused the request in a way that showed it now speaks
    /// another revision; it did not run the request.
    Changed,
}

/// The answer to a request the upstream cannot take now: -32603 with HTTP 503,
/// `Retry-After: 1` and `error.data` `{"retryable": true, "reason": …}`
/// (`upstream_unavailable` or `upstream_changed`), so that a client knows that
/// the same request may simply be sent again. The request's id is not known
/// here.
pub(crate) fn unavailable(why: Unavailable) -> Response<ProxyBody> {
    let (message, reason) = match why {
        Unavailable::NotServing => ("Upstream unavailable", "upstream_unavailable"),
        Unavailable::Changed => (
            "The upstream changed its protocol revision",
            "upstream_changed",
        ),
    };
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {
        "code": mcp_tasks::wire::RpcError::INTERNAL_ERROR,
        "message": message,
        "data": {"retryable": true, "reason": reason},
    }});
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Whether a response is a Server-Sent Events stream.
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// Reads a body whole, up to `cap` bytes; `None` past it or on a failure.
pub(crate) async fn read_capped(mut body: ProxyBody, cap: usize) -> Option<Bytes> {
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.ok()?.into_data() {
            if read.len() + data.len() > cap {
                return None;
            }
            read.extend_from_slice(&data);
        }
    }
    Some(Bytes::from(read))
}

/// The JSON-RPC response with `id` in a JSON body or an event stream.
async fn read_answer(mut body: ProxyBody, stream: bool, id: &Value) -> Option<Value> {
    if !stream {
        let bytes = read_capped(body, MAX_MESSAGE_BYTES).await?;
        return serde_json::from_slice(&bytes).ok();
    }
    let mut events = Events::default();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.ok()?.into_data() else {
            continue;
        };
        events.push(&data);
        while let Some(event) = events.next_event() {
            let Event::Data(data) = event else { continue };
            let Ok(Value::Object(message)) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if wire::kind(&message) == Kind::Response && message.get("id") == Some(id) {
                return Some(Value::Object(message));
            }
        }
        if events.buffered() > MAX_MESSAGE_BYTES {
            return None;
        }
    }
    None
}

/// The headers of a request the bridge sends for a client: the client's (the
/// proxy forwards only its configured set of them) without its 2026-07-28
/// `Mcp-*` headers, and the media types the older revisions require.
pub(crate) fn base_headers(client: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(client.len() + 2);
    for (name, value) in client {
        let name_str = name.as_str();
        if name_str.starts_with("mcp-") || name == header::CONTENT_LENGTH || name == header::HOST {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers
}

/// A request the bridge sent upstream for a client and whose response has not
/// arrived. Dropped before [`answered`](Self::answered), it tells the upstream
/// with `notifications/cancelled` on the request's session.
#[derive(Debug)]
pub(crate) struct InFlight {
    upstream: std::sync::Arc<Upstream>,
    /// The session it runs on, kept in use until the request ends.
    pub(crate) lease: Lease,
    /// The bridge's id of the request.
    pub(crate) id: u64,
    /// The headers it was sent with (the cancellation goes with them too).
    pub(crate) headers: HeaderMap,
    answered: bool,
}

impl InFlight {
    pub(crate) fn new(
        upstream: std::sync::Arc<Upstream>,
        lease: Lease,
        id: u64,
        headers: HeaderMap,
    ) -> InFlight {
        InFlight {
            upstream,
            lease,
            id,
            headers,
            answered: false,
        }
    }

    /// The upstream answered (or refused) the request: nothing to cancel.
    pub(crate) fn answered(&mut self) {
        self.answered = true;
    }

    /// Sends a JSON-RPC message on the request's session, in the background.
    pub(crate) fn post_aside(&self, message: Value) {
        let upstream = self.upstream.clone();
        let headers = self.headers.clone();
        tokio::spawn(async move {
            let response = upstream.post(headers, &message).await;
            if !response.status().is_success() {
                tracing::debug!(status = %response.status(), "the upstream refused a reply of the bridge");
            }
        });
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tracing::debug!("a bridged request ended before its answer; cancelling it upstream");
        let upstream = self.upstream.clone();
        let headers = std::mem::take(&mut self.headers);
        let id = self.id;
        let lease = self.lease.clone();
        runtime.spawn(async move {
            upstream.cancel(headers, id).await;
            drop(lease);
        });
    }
}

/// A request's `params` as an object, if it has one.
pub(crate) fn params(message: &Map<String, Value>) -> Option<&Map<String, Value>> {
    message.get("params").and_then(Value::as_object)
}
