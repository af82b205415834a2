//! The gateway's reverse proxy: one upstream MCP endpoint, bodies streamed both
//! ways, hop-by-hop headers dropped, pooled `TCP_NODELAY` connections. Apart from
//! `main` so that the tests can run it in process.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
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

/// The reply when the upstream cannot be reached or breaks off before its head.
fn bad_gateway() -> Response<ProxyBody> {
    let body =
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Upstream unavailable"}}"#;
    let mut response = Response::new(
        Full::from(body)
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A reverse proxy to one upstream MCP endpoint. Dropping its response future or
/// body mid-flight drops the pooled connection it used, so the upstream sees the
/// request end.
#[derive(Clone, Debug)]
pub(crate) struct Proxy {
    client: Client<HttpConnector, ProxyBody>,
    upstream: Uri,
}

impl Proxy {
    /// A proxy to `upstream`, an `http://` URL.
    pub(crate) fn new(upstream: Uri) -> Proxy {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Proxy { client, upstream }
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
        drop_hop_by_hop(&mut parts.headers);
        // hyper sets the upstream's own `Host`.
        parts.headers.remove(header::HOST);
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
        Box::pin(async move {
            match response.await {
                Ok(response) => {
                    let (mut parts, body) = response.into_parts();
                    drop_hop_by_hop(&mut parts.headers);
                    Ok(Response::from_parts(
                        parts,
                        body.map_err(Into::into).boxed_unsync(),
                    ))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the upstream request failed");
                    Ok(bad_gateway())
                }
            }
        })
    }
}
