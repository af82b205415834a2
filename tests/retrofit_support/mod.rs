//! Harness for the retrofit tests: the example's rmcp server behind `TasksLayer`
//! on a real hyper server (127.0.0.1, port 0), a spy between the layer and rmcp
//! that records what the inner server receives, and a small HTTP client.

#![allow(dead_code, unreachable_pub)]

#[path = "../support/server.rs"]
mod server;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, header};
use http_body::Body;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use mcp_tasks::body::RequestBody;
use mcp_tasks::error::BoxError;
use mcp_tasks::wire::{
    EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use mcp_tasks::{Principal, TaskContext, TaskRefused, TasksLayer, TasksLayerBuilder};
use serde_json::{Value, json};
use tower::{Layer as _, Service, ServiceExt as _};

use crate::retrofit_app::{Counters, Retrofit, mcp_service};

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

pub use server::{Reply, TestServer};

/// Serves `layer` around `inner` on 127.0.0.1 port 0, behind the demo auth step
/// (`Authorization: Bearer <name>`), until the returned server is dropped.
pub async fn serve<S, ResBody>(layer: TasksLayer, inner: S) -> TestServer
where
    S: Service<Request<RequestBody<Incoming>>, Response = Response<ResBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    server::serve(
        tower::ServiceBuilder::new()
            .map_request(server::authenticate::<Incoming>)
            .service(layer.layer(inner)),
    )
    .await
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
    /// The HTTP server; it stops with this.
    http: TestServer,
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
        let http = serve(layer, spy).await;
        Server {
            addr: http.addr,
            counters,
            inbox,
            http,
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
        let (mut sender, _connection) = server::connect(self.addr).await;
        sender.send_request(request).await.unwrap()
    }

    /// Sends `request` and reads the whole reply.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> Reply {
        server::exchange(self.addr, request).await
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
