//! Gateway: tasks for an MCP server written in any language.
//!
//! ```sh
//! cargo run --example retrofit                                             # an upstream on :3002
//! MCP_UPSTREAM=http://127.0.0.1:3002/mcp cargo run --example gateway       # http://127.0.0.1:3003/mcp
//! MCP_AUTO_AFTER_MS=1000 MCP_UPSTREAM=… cargo run --example gateway        # another budget
//! ```
//!
//! `TasksLayer` in front of a streaming reverse proxy: the upstream is any MCP
//! Streamable HTTP server (Python, TypeScript, Go, …) that speaks protocol
//! 2026-07-28 over plain HTTP, and knows nothing of tasks. Every tool is
//! `TaskMode::Auto`: a call that answers within the budget reaches the client
//! unchanged, a slower one becomes a task that the gateway stores and answers
//! `tasks/*` for, an MRTR `input_required` round of the upstream becomes the task's
//! input requests, and `tasks/cancel` drops the proxied request, which closes its
//! upstream connection (the upstream sees the client go away).
//!
//! Request and response bodies stream through; end-to-end headers are forwarded
//! and hop-by-hop ones dropped; upstream connections are pooled and use
//! `TCP_NODELAY`. An unreachable upstream answers 502 with a JSON-RPC error.
//!
//! Environment: `MCP_UPSTREAM` (required, an `http://` URL), `MCP_ADDR` (default
//! `127.0.0.1:3003`), `MCP_AUTO_AFTER_MS` (default 250), `MCP_STORE` (see
//! `examples/common`), `RUST_LOG` (default `info,mcp_tasks=debug`). The demo
//! `Authorization: Bearer <name>` auth of `examples/common` makes tasks private to
//! `<name>`; the header is also forwarded upstream.

mod common;

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
use mcp_tasks::{TaskMode, TasksLayer};
use tower::{Service, ServiceBuilder};

/// The gateway's name in `_meta.serverInfo` of the results it makes itself.
const NAME: &str = "mcp-tasks-gateway";

/// A body streamed through the proxy, in either direction.
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

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
struct Proxy {
    client: Client<HttpConnector, ProxyBody>,
    upstream: Uri,
}

impl Proxy {
    fn new(upstream: Uri) -> Proxy {
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

/// `MCP_UPSTREAM`, checked: an `http://` URL with a host.
fn upstream_from_env() -> Result<Uri, Box<dyn std::error::Error>> {
    let url = std::env::var("MCP_UPSTREAM")
        .map_err(|_| "MCP_UPSTREAM must name the upstream, e.g. http://127.0.0.1:3002/mcp")?;
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("MCP_UPSTREAM {url:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(format!("MCP_UPSTREAM {url:?} must be an http:// URL with a host").into());
    }
    Ok(uri)
}

/// `MCP_AUTO_AFTER_MS`, the `Auto` budget of every tool (default 250 ms).
fn budget_from_env() -> Result<Duration, Box<dyn std::error::Error>> {
    match std::env::var("MCP_AUTO_AFTER_MS") {
        Err(_) => Ok(Duration::from_millis(250)),
        Ok(ms) => Ok(Duration::from_millis(ms.parse().map_err(|_| {
            format!("MCP_AUTO_AFTER_MS must be milliseconds, not {ms:?}")
        })?)),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("info,mcp_tasks=debug");
    let upstream = upstream_from_env()?;
    let after = budget_from_env()?;

    let tasks_layer = TasksLayer::builder(common::store_from_env().await?)
        .with_server_info(NAME, env!("CARGO_PKG_VERSION"))
        .with_default_mode(TaskMode::Auto { after })
        .build()?;
    let drain = tasks_layer.clone();
    let app = ServiceBuilder::new()
        .map_request(common::bearer_principal)
        .layer(tasks_layer)
        .service(Proxy::new(upstream.clone()));

    let listener = tokio::net::TcpListener::bind(common::listen_addr("127.0.0.1:3003")).await?;
    let addr = listener.local_addr()?;
    println!("{NAME} listening on http://{addr}/mcp, upstream {upstream}");
    common::serve(listener, app, async move {
        let _ = tokio::signal::ctrl_c().await;
        drain.drain(Duration::from_secs(5)).await;
    })
    .await;
    Ok(())
}
