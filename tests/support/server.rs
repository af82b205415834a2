//! Loopback HTTP for the test harnesses and benchmarks: a hyper HTTP/1.1 server on
//! 127.0.0.1, port 0, that stops accepting when dropped, and the client end: a
//! connection to it, and one whole exchange read into a [`Reply`]. Every socket has
//! `TCP_NODELAY` set.
//!
//! Included by path (`#[path = "support/server.rs"] mod server;`), so each test
//! crate compiles its own copy and uses what it needs.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use mcp_tasks::Principal;
use mcp_tasks::error::BoxError;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The longest one whole HTTP exchange ([`exchange`]) may take.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// A running test server. Dropping it stops accepting connections; the ones
/// already accepted run on.
#[derive(Debug)]
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its MCP endpoint, `http://<addr>/mcp`.
    pub url: String,
    accept: JoinHandle<()>,
}

impl TestServer {
    /// Stops accepting connections now, as dropping the server does.
    pub fn abort(&self) {
        self.accept.abort();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Serves `service` over HTTP/1.1 on 127.0.0.1, port 0, one task per connection.
pub async fn serve<S, B>(service: S) -> TestServer
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("the bound address");
    let accept = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            stream.set_nodelay(true).expect("TCP_NODELAY");
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    TestServer {
        addr,
        url: format!("http://{addr}/mcp"),
        accept,
    }
}

/// The harnesses' demo authentication step, for `map_request`:
/// `Authorization: Bearer <name>` makes `<name>` the request's principal; no
/// header is anonymous.
pub fn authenticate<B>(mut req: Request<B>) -> Request<B> {
    let name = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    if let Some(name) = name {
        req.extensions_mut().insert(Principal::from(name));
    }
    req
}

/// A fresh HTTP/1.1 connection to `addr`; the connection is driven by the
/// returned task.
pub async fn connect<B>(addr: SocketAddr) -> (SendRequest<B>, JoinHandle<()>)
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let stream = TcpStream::connect(addr)
        .await
        .expect("connect to the server");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("an HTTP/1.1 handshake");
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, connection)
}

/// Sends `request` to `addr` on a fresh connection and reads the whole reply,
/// failing the test after [`EXCHANGE_TIMEOUT`].
pub async fn exchange<B>(addr: SocketAddr, request: Request<B>) -> Reply
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let exchange = async {
        let (mut sender, _connection) = connect(addr).await;
        let response = sender.send_request(request).await.expect("a response");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("the whole body").to_bytes();
        (parts, body)
    };
    let (parts, body) = tokio::time::timeout(EXCHANGE_TIMEOUT, exchange)
        .await
        .expect("the exchange did not finish in time");
    Reply {
        json: response_message(&parts.headers, &body),
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// An HTTP response, read whole.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    /// The body, byte for byte.
    pub body: Bytes,
    /// The JSON-RPC response: the body, or for SSE the response event; `Null` when
    /// there is none.
    pub json: Value,
}

impl Reply {
    /// `error.code`, if this is an error.
    pub fn code(&self) -> Option<i64> {
        self.json["error"]["code"].as_i64()
    }

    /// The `result` object (`Null` if absent).
    pub fn result(&self) -> &Value {
        &self.json["result"]
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `Content-Type`, or "".
    pub fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Asserts an HTTP 200 success and returns the result.
    #[track_caller]
    pub fn ok(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "{}", self.text());
        assert!(
            self.json.get("error").is_none() && self.json["result"].is_object(),
            "expected a result, got {}",
            self.text()
        );
        &self.json["result"]
    }
}

/// The JSON-RPC messages in an SSE body, in order.
pub fn sse_messages(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|event| {
            event
                .lines()
                .find_map(|l| l.strip_prefix("data:"))
                .and_then(|d| serde_json::from_str(d.trim_start()).ok())
        })
        .collect()
}

fn response_message(headers: &HeaderMap, body: &[u8]) -> Value {
    let sse = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !sse {
        return serde_json::from_slice(body).unwrap_or(Value::Null);
    }
    sse_messages(body)
        .into_iter()
        .rev()
        .find(|m| m.get("id").is_some() && m.get("method").is_none())
        .unwrap_or(Value::Null)
}
