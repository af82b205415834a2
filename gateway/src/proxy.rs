//! The gateway's reverse proxy: one upstream MCP endpoint, bodies streamed both
//! ways, an explicit set of request headers forwarded, hop-by-hop headers dropped,
//! connect and response-start timeouts, pooled `TCP_NODELAY` connections. Apart
//! from `main` so that the tests can run it in process.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcp_tasks::error::BoxError;
use tower::Service;

/// A body streamed through the proxy, in either direction.
pub(crate) type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Headers that describe one connection, not the message (RFC 9110, section 7.6.1).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Request headers forwarded upstream besides every `mcp-*` header: what an MCP
/// request needs to be understood. Anything else, `Authorization` and `Cookie`
/// included, goes only when configured ([`ProxyConfig::forward`]).
const FORWARDED: [&str; 6] = [
    "content-type",
    "accept",
    "user-agent",
    "last-event-id",
    "traceparent",
    "tracestate",
];

/// What the proxy forwards and how long it waits.
#[derive(Clone, Debug)]
pub(crate) struct ProxyConfig {
    /// Request headers forwarded on top of the standard set (`authorization`,
    /// `cookie`, …). Hop-by-hop headers are never forwarded. When `cookie` is
    /// named, the upstream's `Set-Cookie` reaches the client too.
    pub(crate) forward: Vec<HeaderName>,
    /// The longest wait for a connection to the upstream.
    pub(crate) connect_timeout: Option<Duration>,
    /// The longest wait, once connected, for the upstream's response head. A
    /// streamed (SSE) answer starts at once; a JSON answer starts when the call ends.
    pub(crate) response_timeout: Option<Duration>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            forward: Vec::new(),
            connect_timeout: Some(Duration::from_secs(5)),
            response_timeout: Some(Duration::from_secs(300)),
        }
    }
}

impl ProxyConfig {
    /// Whether a request header goes upstream.
    fn forwards(&self, name: &HeaderName) -> bool {
        name.as_str().starts_with("mcp-")
            || FORWARDED.contains(&name.as_str())
            || self.forward.contains(name)
    }
}

/// Drops the hop-by-hop headers, those the `Connection` header names included.
fn drop_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The request headers that go upstream: the standard set and the configured ones,
/// never a hop-by-hop one.
fn forwarded_headers(headers: HeaderMap, config: &ProxyConfig) -> HeaderMap {
    let mut headers = headers;
    drop_hop_by_hop(&mut headers);
    let mut kept = HeaderMap::with_capacity(headers.len());
    let mut current = None;
    for (name, value) in headers {
        if let Some(name) = name {
            current = Some(name);
        }
        if let Some(name) = current.as_ref().filter(|n| config.forwards(n)) {
            kept.append(name.clone(), value);
        }
    }
    kept
}

/// Whether an error, or what caused it, is a timeout.
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Marks a response the proxy wrote itself because the upstream could not be
/// reached or did not answer in time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProxyFailure;

/// A JSON-RPC error from the proxy itself (the request id is not known here).
fn proxy_error(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32603, "message": message}});
    let mut response = Response::new(
        Full::from(body.to_string())
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.extensions_mut().insert(ProxyFailure);
    response
}

/// A reverse proxy to one upstream MCP endpoint. Dropping its response future or
/// body mid-flight drops the pooled connection it used, so the upstream sees the
/// request end.
#[derive(Clone, Debug)]
pub(crate) struct Proxy {
    client: Client<HttpConnector, ProxyBody>,
    upstream: Uri,
    config: Arc<ProxyConfig>,
}

impl Proxy {
    /// A proxy to `upstream`, an `http://` URL, with `config`.
    pub(crate) fn with_config(upstream: Uri, config: ProxyConfig) -> Proxy {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(true);
        connector.set_connect_timeout(config.connect_timeout);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Proxy {
            client,
            upstream,
            config: Arc::new(config),
        }
    }

    /// The upstream URL with the request's query, if any.
    fn target(&self, uri: &Uri) -> Uri {
        let mut parts = self.upstream.clone().into_parts();
        if let Some(query) = uri.query() {
            let path = self.upstream.path();
            parts.path_and_query = format!("{path}?{query}").parse().ok();
        }
        Uri::from_parts(parts).unwrap_or_else(|_| self.upstream.clone())
    }
}

impl<B> Service<Request<B>> for Proxy
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        // hyper sets the upstream's own `Host`; the length is set below.
        parts.headers = forwarded_headers(std::mem::take(&mut parts.headers), &self.config);
        if let Some(length) = body.size_hint().exact() {
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        }
        parts.uri = self.target(&parts.uri);
        parts.version = http::Version::HTTP_11;
        // Only the head is kept: extensions belong to this process.
        let mut outbound = Request::new(body.map_err(Into::into).boxed_unsync());
        *outbound.method_mut() = parts.method;
        *outbound.uri_mut() = parts.uri;
        *outbound.headers_mut() = parts.headers;
        let response = self.client.request(outbound);
        let config = self.config.clone();
        Box::pin(async move {
            let response = match config.response_timeout {
                Some(limit) => match tokio::time::timeout(limit, response).await {
                    Ok(response) => response,
                    Err(_) => {
                        tracing::warn!(?limit, "the upstream did not start its response in time");
                        let message = format!(
                            "Upstream did not start its response within {} ms",
                            limit.as_millis()
                        );
                        return Ok(proxy_error(StatusCode::GATEWAY_TIMEOUT, &message));
                    }
                },
                None => response.await,
            };
            match response {
                Ok(response) => {
                    let (mut parts, body) = response.into_parts();
                    drop_hop_by_hop(&mut parts.headers);
                    if !config.forward.contains(&header::COOKIE) {
                        parts.headers.remove(header::SET_COOKIE);
                    }
                    Ok(Response::from_parts(
                        parts,
                        body.map_err(Into::into).boxed_unsync(),
                    ))
                }
                Err(e) if e.is_connect() && timed_out(&e) => {
                    tracing::warn!(error = %e, "the upstream connection timed out");
                    let limit = config.connect_timeout.unwrap_or_default().as_millis();
                    let message = format!("Upstream connection timed out after {limit} ms");
                    Ok(proxy_error(StatusCode::GATEWAY_TIMEOUT, &message))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the upstream request failed");
                    Ok(proxy_error(StatusCode::BAD_GATEWAY, "Upstream unavailable"))
                }
            }
        })
    }
}
