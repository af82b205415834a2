//! Harness for the retrofit tests: the example's rmcp server behind `TasksLayer`
//! on a real hyper server (127.0.0.1, port 0), a spy between the layer and rmcp
//! that records what the inner server receives, and a small HTTP client.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use mcp_tasks::{
    BoxError, EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
    Principal, RequestBody, TaskContext, TaskRefused, TasksLayer, TasksLayerBuilder,
};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tower::{Layer as _, Service, ServiceExt as _};

use crate::retrofit_app::{Counters, Retrofit, mcp_service};

/// The longest one HTTP exchange may take.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a test waits for a state it expects.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// One request as the inner server received it.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// The JSON-RPC message.
    pub message: Value,
    /// The request headers.
    pub headers: HeaderMap,
    /// The principal in the request's extensions.
    pub principal: Option<Principal>,
    /// What the layer's task context said about making a task.
    pub context: Option<Result<(), TaskRefused>>,
}

impl Inbound {
    /// Whether the message's client capabilities declare the tasks extension.
    pub fn declares_tasks(&self) -> bool {
        self.message["params"]["_meta"][META_CLIENT_CAPABILITIES]["extensions"]
            .get(EXTENSION_ID)
            .is_some()
    }

    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What the inner server has received so far.
#[derive(Debug, Clone, Default)]
pub struct Inbox(Arc<Mutex<Vec<Inbound>>>);

impl Inbox {
    /// Every `tools/call` of `tool`, in order.
    pub fn calls(&self, tool: &str) -> Vec<Inbound> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|i| i.message["method"] == "tools/call" && i.message["params"]["name"] == tool)
            .cloned()
            .collect()
    }

    fn push(&self, inbound: Inbound) {
        self.0.lock().unwrap().push(inbound);
    }
}

/// The demo authentication step: `Authorization: Bearer <name>`.
pub fn authenticate<B>(req: &mut Request<B>) {
    let name = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    if let Some(name) = name {
        req.extensions_mut().insert(Principal::from(name));
    }
}

/// Serves `layer` around `inner` on 127.0.0.1 port 0, behind the demo auth step,
/// with `TCP_NODELAY` on every accepted socket.
pub async fn serve<S, ResBody>(layer: TasksLayer, inner: S) -> (SocketAddr, JoinHandle<()>)
where
    S: Service<Request<RequestBody<Incoming>>, Response = Response<ResBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let service = layer.layer(inner);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            stream.set_nodelay(true).unwrap();
            let service = service.clone();
            tokio::spawn(async move {
                let hyper_service =
                    hyper::service::service_fn(move |mut req: Request<Incoming>| {
                        authenticate(&mut req);
                        service.clone().oneshot(req)
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), hyper_service)
                    .await;
            });
        }
    });
    (addr, accept)
}

/// The example server, running.
#[derive(Debug)]
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// How the `sleep` calls ended.
    pub counters: Arc<Counters>,
    /// What the inner server received.
    pub inbox: Inbox,
    accept: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Server {
    /// The example's rmcp server behind a layer built from `builder`; rmcp answers
    /// with JSON when `json`, with SSE otherwise.
    pub async fn start(builder: TasksLayerBuilder, json: bool) -> Server {
        let handler = Retrofit::default();
        let counters = handler.counters.clone();
        let mcp = mcp_service(handler, json);
        let inbox = Inbox::default();
        let spy_inbox = inbox.clone();
        let spy = tower::service_fn(move |req: Request<RequestBody<Incoming>>| {
            let mcp = mcp.clone();
            let inbox = spy_inbox.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                inbox.push(Inbound {
                    message: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                    headers: parts.headers.clone(),
                    principal: parts.extensions.get::<Principal>().cloned(),
                    context: TaskContext::from_parts(&parts).map(TaskContext::check),
                });
                mcp.oneshot(Request::from_parts(parts, Full::new(bytes)))
                    .await
            }
        });
        let layer = builder.without_janitor().build().unwrap();
        let (addr, accept) = serve(layer, spy).await;
        Server {
            addr,
            counters,
            inbox,
            accept,
        }
    }

    /// The example's own configuration, JSON replies.
    pub async fn example() -> Server {
        Self::start(crate::retrofit_app::layer_builder(), true).await
    }

    /// A client for this server.
    pub fn client(&self) -> Client {
        Client::new(self.addr)
    }

    /// `sleep` calls that ran to the end.
    pub fn finished(&self) -> u64 {
        self.counters.finished.load(Ordering::SeqCst)
    }

    /// `sleep` calls dropped before the end.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::SeqCst)
    }

    /// Waits until `condition` holds, failing the test after [`DEADLINE`].
    pub async fn until(&self, what: &str, condition: impl Fn(&Server) -> bool) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !condition(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting until {what}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// An HTTP reply, read whole.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
    /// The JSON-RPC response (for SSE, the response event).
    pub json: Value,
}

impl Reply {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `Content-Type`.
    pub fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The result of a successful reply.
    #[track_caller]
    pub fn ok(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "{}", self.text());
        assert!(self.json["result"].is_object(), "{}", self.text());
        &self.json["result"]
    }
}

fn response_message(headers: &HeaderMap, body: &[u8]) -> Value {
    let sse = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !sse {
        return serde_json::from_slice(body).unwrap_or(Value::Null);
    }
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|event| {
            event
                .lines()
                .find_map(|l| l.strip_prefix("data:"))
                .and_then(|d| serde_json::from_str::<Value>(d.trim_start()).ok())
        })
        .find(|m| m.get("id").is_some() && m.get("method").is_none())
        .unwrap_or(Value::Null)
}

/// The text of a tool result's first content block.
pub fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or("")
}

/// A client speaking the 2026-07-28 envelope; one connection per exchange.
#[derive(Debug)]
pub struct Client {
    addr: SocketAddr,
    next_id: AtomicI64,
}

impl Client {
    /// A client for the server at `addr`.
    pub fn new(addr: SocketAddr) -> Client {
        Client {
            addr,
            next_id: AtomicI64::new(1),
        }
    }

    /// A modern request with the standard headers; `declare` adds the tasks
    /// extension to the client capabilities.
    pub fn request(
        &self,
        method: &str,
        mut params: Value,
        declare: bool,
        principal: Option<&str>,
    ) -> Request<Full<Bytes>> {
        let extensions = if declare {
            json!({"extensions": {EXTENSION_ID: {}}})
        } else {
            json!({})
        };
        params["_meta"] = json!({
            META_PROTOCOL_VERSION: PROTOCOL_VERSION,
            META_CLIENT_CAPABILITIES: extensions,
        });
        let name = match method {
            "tools/call" => params["name"].as_str().map(str::to_owned),
            _ => params["taskId"].as_str().map(str::to_owned),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut request = Request::post("/mcp")
            .header(header::HOST, self.addr.to_string())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .header("mcp-method", method)
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let headers = request.headers_mut();
        if let Some(name) = name {
            headers.insert("mcp-name", HeaderValue::from_str(&name).unwrap());
        }
        if let Some(p) = principal {
            let value = HeaderValue::from_str(&format!("Bearer {p}")).unwrap();
            headers.insert(header::AUTHORIZATION, value);
        }
        request
    }

    /// Opens a connection and sends `request`; the response head once it arrives.
    pub async fn open(&self, request: Request<Full<Bytes>>) -> Response<Incoming> {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        sender.send_request(request).await.unwrap()
    }

    /// Sends `request` and reads the whole reply.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> Reply {
        let exchange = async {
            let response = self.open(request).await;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
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

    /// `tools/call` of `tool` as alice.
    pub async fn call_tool(&self, tool: &str, arguments: Value, declare: bool) -> Reply {
        let params = json!({"name": tool, "arguments": arguments});
        self.send(self.request("tools/call", params, declare, Some("alice")))
            .await
    }

    /// Calls `tool` as alice, expecting a task; its id.
    pub async fn create_task(&self, tool: &str, arguments: Value) -> String {
        let reply = self.call_tool(tool, arguments, true).await;
        let result = reply.ok();
        assert_eq!(result["resultType"], "task", "{}", reply.text());
        result["taskId"].as_str().unwrap().to_owned()
    }

    /// A `tasks/*` request as `principal`.
    pub async fn task_method(&self, method: &str, params: Value, principal: Option<&str>) -> Reply {
        self.send(self.request(method, params, true, principal))
            .await
    }

    /// `tasks/get` as alice.
    pub async fn get(&self, id: &str) -> Reply {
        self.task_method("tasks/get", json!({"taskId": id}), Some("alice"))
            .await
    }

    /// `tasks/update` as alice.
    pub async fn update(&self, id: &str, responses: Value) -> Reply {
        let params = json!({"taskId": id, "inputResponses": responses});
        self.task_method("tasks/update", params, Some("alice"))
            .await
    }

    /// `tasks/cancel` as alice.
    pub async fn cancel(&self, id: &str) -> Reply {
        self.task_method("tasks/cancel", json!({"taskId": id}), Some("alice"))
            .await
    }

    /// Polls `tasks/get` until `done` holds; every reply is also handed to
    /// `inspect`. Fails the test after [`DEADLINE`].
    pub async fn wait_for(
        &self,
        id: &str,
        done: impl Fn(&Value) -> bool,
        inspect: impl Fn(&Reply),
    ) -> Value {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let reply = self.get(id).await;
            inspect(&reply);
            let result = reply.ok().clone();
            if done(&result) {
                return result;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the task never reached the expected state; last: {result}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Polls until the task has `status`.
    pub async fn wait_for_status(&self, id: &str, status: &str) -> Value {
        self.wait_for(id, |t| t["status"] == status, |_| {}).await
    }

    /// Polls until the task is terminal.
    pub async fn wait_for_end(&self, id: &str) -> Value {
        self.wait_for(
            id,
            |t| {
                matches!(
                    t["status"].as_str(),
                    Some("completed" | "failed" | "cancelled")
                )
            },
            |_| {},
        )
        .await
    }
}
