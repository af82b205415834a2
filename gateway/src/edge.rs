//! The gateway's strict edge: a 2026-07-28 request's `Mcp-Method` and `Mcp-Name`
//! headers are checked against its body before anything routes it.
//!
//! `TasksLayer` decides from `Mcp-Method` alone whether it must read a body: a
//! request naming a method the layer does not own passes without being read. Its
//! inner service here is an upstream that routes on the body, so a `tools/call`
//! sent as `Mcp-Method: prompts/get` would run there synchronously, past
//! `TaskMode::AutoRequired` and the `Auto` budget. The edge, in front of the
//! layer, reads the body of every `POST` that carries `Mcp-Method` (at most
//! [`MAX_REQUEST_BYTES`]: 413 beyond) and answers a disagreement itself, with
//! -32020 and HTTP 400 (the 2026-07-28 rule: "validate headers against the body
//! before routing"). Nothing then reaches the layer or the upstream. An agreeing
//! request goes on with the bytes read; a request without `Mcp-Method` (an
//! earlier revision's) goes on as it is, its body unread.
//!
//! Checked, header values trimmed and `=?base64?…?=` decoded:
//! - `Mcp-Method` equals the body's `method`;
//! - `Mcp-Name` equals `params.name` of `tools/call` and `prompts/get`,
//!   `params.uri` of `resources/read`, `params.taskId` of `tasks/get`,
//!   `tasks/update` and `tasks/cancel`: present when the body has that value (as
//!   the layer does, a body without it is left to the params checks);
//! - the body is one JSON object that names each of those members once: a
//!   duplicate (`{"method":"prompts/get","method":"tools/call"}`) could be read
//!   one way here and another way upstream, so it is refused (-32600).

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::header::HeaderMap;
use http::{HeaderName, Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt as _, Either, Full, LengthLimitError, Limited};
use mcp_tasks::error::BoxError;
use mcp_tasks::wire::{MCP_METHOD, MCP_NAME, RpcError};
use serde::Deserialize;
use serde_json::Value;
use tower::{Layer, Service, ServiceExt as _};

/// The largest request body the edge reads (the bridge's bound too).
pub(crate) const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// A request body after the edge: the bytes it read, or the client's body unread.
pub(crate) type EdgeBody<B> = Either<Full<Bytes>, B>;

/// Puts [`Edge`] in front of a service.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EdgeLayer;

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge { inner }
    }
}

/// Refuses a request whose standard headers disagree with its body; see the
/// module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Edge<S> {
    inner: S,
}

impl<S, B, ResBody> Service<Request<B>> for Edge<S>
where
    S: Service<Request<EdgeBody<B>>, Response = Response<ResBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Either<ResBody, Full<Bytes>>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Each call drives a clone of the inner service to readiness itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        if request.method() != Method::POST || !request.headers().contains_key(MCP_METHOD) {
            let request = request.map(Either::Right);
            return Box::pin(async move { Ok(inner.oneshot(request).await?.map(Either::Left)) });
        }
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) => {
                    let error = if e.downcast_ref::<LengthLimitError>().is_some() {
                        RpcError::new(
                            RpcError::INVALID_REQUEST,
                            "Request body too large",
                            StatusCode::PAYLOAD_TOO_LARGE,
                        )
                    } else {
                        RpcError::invalid_request("Could not read the request body")
                    };
                    return Ok(refusal(&error, None));
                }
            };
            if let Err((error, id)) = check(&parts.headers, &bytes) {
                tracing::debug!(error = %error, "refused a request whose headers disagree with its body");
                return Ok(refusal(&error, id.as_ref()));
            }
            let request = Request::from_parts(parts, Either::Left(Full::new(bytes)));
            Ok(inner.oneshot(request).await?.map(Either::Left))
        })
    }
}

/// The edge's own answer.
fn refusal<ResBody>(
    error: &RpcError,
    id: Option<&Value>,
) -> Response<Either<ResBody, Full<Bytes>>> {
    error
        .to_response(id)
        .map(|body| Either::Right(Full::new(body)))
}

/// What the edge reads of a body. serde refuses a member named twice, so the
/// edge and the upstream cannot read two different methods or names in it.
#[derive(Debug, Deserialize)]
struct Probe {
    id: Option<Value>,
    method: Option<Value>,
    params: Option<ProbeParams>,
}

/// The members of `params` that `Mcp-Name` stands for.
#[derive(Debug, Deserialize)]
struct ProbeParams {
    name: Option<Value>,
    uri: Option<Value>,
    #[serde(rename = "taskId")]
    task_id: Option<Value>,
}

/// Checks a request's `Mcp-Method` and `Mcp-Name` against its body. `Err` holds
/// the refusal and the request's id, when the body had one.
pub(crate) fn check(headers: &HeaderMap, body: &[u8]) -> Result<(), (RpcError, Option<Value>)> {
    let probe: Probe = match serde_json::from_slice(body) {
        Ok(probe) => probe,
        Err(e) if e.is_data() => {
            let error = RpcError::invalid_request(
                "Invalid Request: the body is not one JSON-RPC message naming its method once",
            );
            return Err((error, None));
        }
        Err(_) => return Err((RpcError::parse_error(), None)),
    };
    let id = probe.id.filter(|id| !id.is_null());
    let refuse = |error: RpcError| Err((error, id.clone()));
    let Some(method) = probe.method.as_ref().and_then(Value::as_str) else {
        return refuse(RpcError::header_mismatch(
            "Mcp-Method header names a method the body does not",
        ));
    };
    if let Err(error) = check_header(headers, MCP_METHOD, method) {
        return refuse(error);
    }
    let params = probe.params.as_ref();
    let expected = match method {
        "tools/call" | "prompts/get" => params.and_then(|p| p.name.as_ref()),
        "resources/read" => params.and_then(|p| p.uri.as_ref()),
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.and_then(|p| p.task_id.as_ref()),
        _ => None,
    };
    if let Some(expected) = expected.and_then(Value::as_str)
        && let Err(error) = check_header(headers, MCP_NAME, expected)
    {
        return refuse(error);
    }
    Ok(())
}

/// One standard header: present, well-formed and equal to `expected` (-32020
/// naming which of the three failed, as the layer words it).
fn check_header(headers: &HeaderMap, name: HeaderName, expected: &str) -> Result<(), RpcError> {
    let label = if name == MCP_METHOD {
        "Mcp-Method"
    } else {
        "Mcp-Name"
    };
    match header_value(headers, &name) {
        Some(Ok(value)) if value == expected => Ok(()),
        Some(Ok(_)) => Err(RpcError::header_mismatch(format!(
            "{label} header does not match the body"
        ))),
        Some(Err(())) => Err(RpcError::header_mismatch(format!(
            "Malformed {label} header"
        ))),
        None => Err(RpcError::header_mismatch(format!("Missing {label} header"))),
    }
}

/// A standard header's value: trimmed, with `=?base64?…?=` decoded; `Err` when it
/// is not UTF-8 or not valid base64 of UTF-8. (The crate's own reader,
/// `wire::headers::header_value`, is internal to it.)
fn header_value<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<Result<Cow<'h, str>, ()>> {
    let raw = headers.get(name)?;
    let Ok(text) = std::str::from_utf8(raw.as_bytes()) else {
        return Some(Err(()));
    };
    let text = text.trim();
    let Some(encoded) = text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    else {
        return Some(Ok(Cow::Borrowed(text)));
    };
    Some(
        STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .map(Cow::Owned)
            .ok_or(()),
    )
}
