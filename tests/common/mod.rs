//! Shared harness for the HTTP tests: a real hyper server on 127.0.0.1:0 running
//! `TasksLayer` over a small raw MCP service, and a hyper client that speaks the
//! 2026-07-28 envelope with the standard headers.

#![allow(dead_code, unreachable_pub)]

#[path = "../support/server.rs"]
mod server;

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use mcp_tasks::body::RequestBody;
use mcp_tasks::wire::{
    EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use mcp_tasks::{
    Principal, RpcError, TaskContext, TaskMode, TaskSpec, Tasks, TasksLayer, TasksLayerBuilder,
};
use serde_json::{Value, json};
use tower::Layer as _;

pub use server::Reply;
// Not every test crate reads SSE bodies itself.
#[allow(unused_imports)]
pub use server::sse_messages;
use server::{TestServer, authenticate};

/// The longest a test polls for a state it expects.
pub const POLL_DEADLINE: Duration = Duration::from_secs(10);

/// The server name the standard layer puts into `_meta.serverInfo`.
pub const SERVER_NAME: &str = "layer-test";
/// The server version the standard layer puts into `_meta.serverInfo`.
pub const SERVER_VERSION: &str = "1.2.3";

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type InnerFuture = BoxFut<Result<Response<Frames>, Infallible>>;

// ---------------------------------------------------------------------------
// Bodies

/// A body made of the given chunks, each one frame. With `exact` the length is
/// announced (`Content-Length`); without it, hyper sends it chunked.
#[derive(Debug, Default)]
pub struct Frames {
    chunks: VecDeque<Bytes>,
    exact: bool,
}

impl Frames {
    /// One chunk, with a known length.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        Frames {
            chunks: VecDeque::from([bytes.into()]),
            exact: true,
        }
    }

    /// Everything the body holds, in one piece.
    pub fn bytes(&self) -> Bytes {
        let mut out = Vec::new();
        for chunk in &self.chunks {
            out.extend_from_slice(chunk);
        }
        Bytes::from(out)
    }

    /// Several chunks of unannounced length.
    pub fn chunked(chunks: impl IntoIterator<Item = Bytes>) -> Self {
        Frames {
            chunks: chunks.into_iter().collect(),
            exact: false,
        }
    }
}

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.chunks.pop_front().map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        if self.exact {
            SizeHint::with_exact(self.chunks.iter().map(|c| c.len() as u64).sum())
        } else {
            SizeHint::default()
        }
    }
}

// ---------------------------------------------------------------------------
// The inner MCP service

/// Builds the `TaskSpec` of a task-making tool from the call's arguments.
pub type SpecFn = Arc<dyn Fn(&Value) -> TaskSpec + Send + Sync>;

/// How a tool of the inner service answers `tools/call`.
#[derive(Clone)]
pub enum Tool {
    /// A plain synchronous result: `Hello, {name}!`.
    Sync,
    /// Asks for a task through the `TaskContext` in the request's extensions; when
    /// refused (or absent) it runs synchronously and names the reason.
    Context(SpecFn),
    /// Answers a synchronous result and puts a `TaskSpec` into the *response*
    /// extensions.
    OnResponse(SpecFn),
    /// Answers with `text/event-stream`: a progress notification, then the result,
    /// in separate frames.
    Sse,
    /// Asks for a task through the `TaskContext`, and still answers with SSE.
    SseTask(SpecFn),
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tool::Sync => "Sync",
            Tool::Context(_) => "Context",
            Tool::OnResponse(_) => "OnResponse",
            Tool::Sse => "Sse",
            Tool::SseTask(_) => "SseTask",
        })
    }
}

/// Wraps a closure as a [`SpecFn`].
pub fn spec(f: impl Fn(&Value) -> TaskSpec + Send + Sync + 'static) -> SpecFn {
    Arc::new(f)
}

/// One request as the inner service saw it.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body, byte for byte.
    pub body: Bytes,
    /// The `TaskContext` in its extensions, as `Debug` text.
    pub context: Option<String>,
    /// Whether a `Principal` was in its extensions.
    pub principal: Option<String>,
}

#[derive(Default)]
struct InnerState {
    tools: Mutex<HashMap<String, Tool>>,
    discover: Mutex<Option<Value>>,
    calls: Mutex<HashMap<String, usize>>,
    received: Mutex<Vec<Received>>,
    sent: Mutex<Vec<Bytes>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A raw MCP server: answers `server/discover`, `tools/list` and `tools/call`, and
/// echoes any other method. It records what it receives and what it sends.
#[derive(Clone, Default)]
pub struct Inner {
    state: Arc<InnerState>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

/// The `server/discover` result the inner service answers with by default. It
/// advertises a legacy `capabilities.tasks` slot on purpose: the layer must drop it.
pub fn inner_discover_result() -> Value {
    json!({
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {
            "tools": {"listChanged": true},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            "extensions": {"com.example/other": {"level": 3}}
        },
        "ttlMs": 60000,
        "cacheScope": "public",
        "instructions": "A test server.",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "inner", "version": "0.0.1"}}
    })
}

impl Inner {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool.
    pub fn tool(self, name: &str, tool: Tool) -> Self {
        lock(&self.state.tools).insert(name.to_owned(), tool);
        self
    }

    /// Replaces the `server/discover` result.
    pub fn discover(self, result: Value) -> Self {
        *lock(&self.state.discover) = Some(result);
        self
    }

    /// How many times `tools/call` reached the tool `name`.
    pub fn calls(&self, name: &str) -> usize {
        lock(&self.state.calls).get(name).copied().unwrap_or(0)
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.state.received).clone()
    }

    /// The last request received.
    pub fn last_received(&self) -> Received {
        lock(&self.state.received)
            .last()
            .cloned()
            .expect("the inner service received nothing")
    }

    /// The body of the last response sent.
    pub fn last_sent(&self) -> Bytes {
        lock(&self.state.sent)
            .last()
            .cloned()
            .expect("the inner service sent nothing")
    }

    /// How many requests reached the inner service.
    pub fn request_count(&self) -> usize {
        lock(&self.state.received).len()
    }

    /// The inner service as a tower `service_fn`.
    pub fn service<B>(
        &self,
    ) -> tower::util::ServiceFn<
        impl Fn(Request<RequestBody<B>>) -> InnerFuture + Clone + Send + Sync + 'static,
    >
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Debug,
    {
        let state = self.state.clone();
        tower::service_fn(move |req: Request<RequestBody<B>>| {
            let state = state.clone();
            Box::pin(async move { Ok(handle(state, req).await) }) as InnerFuture
        })
    }
}

fn json_reply(value: &Value) -> Response<Frames> {
    let mut response = Response::new(Frames::full(serde_json::to_vec(value).unwrap()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn bytes_reply(bytes: Bytes, content_type: &'static str) -> Response<Frames> {
    let mut response = Response::new(Frames::full(bytes));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The text result of a synchronous run.
pub fn text_result(text: &str) -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": text}]})
}

/// The exact bytes the inner service answers `tools/list` with: odd spacing and
/// key order, so any re-serialisation on the way would show.
pub fn tools_list_bytes(id: &Value) -> Bytes {
    Bytes::from(format!(
        "{{ \"result\" : {{\"tools\":[ {{\"name\":\"greet\",\"inputSchema\":{{\"type\":\"object\"}}}} ],\"resultType\":\"complete\"}} ,\"id\" : {id}, \"jsonrpc\":\"2.0\" }}\n"
    ))
}

async fn handle<B>(state: Arc<InnerState>, req: Request<RequestBody<B>>) -> Response<Frames>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Debug,
{
    let context = TaskContext::from_extensions(req.extensions()).cloned();
    let principal = req
        .extensions()
        .get::<Principal>()
        .map(|p| p.as_str().to_owned());
    let (parts, body) = req.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    lock(&state.received).push(Received {
        headers: parts.headers.clone(),
        body: bytes.clone(),
        context: context.as_ref().map(|c| format!("{c:?}")),
        principal,
    });
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let response: Response<Frames> = match method {
        "server/discover" => {
            let result = lock(&state.discover)
                .clone()
                .unwrap_or_else(inner_discover_result);
            json_reply(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
        }
        "tools/list" => {
            let mut r = bytes_reply(tools_list_bytes(&id), "application/json");
            r.headers_mut()
                .insert("x-inner", HeaderValue::from_static("tools-list"));
            r
        }
        "tools/call" => call_tool(&state, context.as_ref(), &id, &message["params"]),
        other => {
            let mut r = json_reply(&json!({"jsonrpc": "2.0", "id": id, "result": {
                "resultType": "complete",
                "echo": {"method": other, "bytes": bytes.len()},
            }}));
            r.headers_mut()
                .insert("x-inner", HeaderValue::from_static("echo"));
            r
        }
    };
    lock(&state.sent).push(response.body().bytes());
    response
}

fn sse_frames(id: &Value, result: &Value) -> Response<Frames> {
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "p-1", "progress": 1, "total": 2, "message": "halfway"}});
    let done = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let chunks = [
        Bytes::from(format!("event: message\ndata: {progress}\n\n")),
        Bytes::from(format!("event: message\ndata: {done}\n\n")),
    ];
    let mut response = Response::new(Frames::chunked(chunks));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// The result the inner service writes when a tool ran synchronously because no
/// task could be made; `refused` names why.
pub fn sync_fallback(refused: &str) -> Value {
    let mut result = text_result("ran synchronously");
    result["structuredContent"] = json!({"refused": refused});
    result
}

fn call_tool(
    state: &InnerState,
    context: Option<&TaskContext>,
    id: &Value,
    params: &Value,
) -> Response<Frames> {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    *lock(&state.calls).entry(name.to_owned()).or_default() += 1;
    let args = params
        .get("arguments")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let tool = lock(&state.tools).get(name).cloned();
    let try_task = |make: &SpecFn| -> Option<Value> {
        match context {
            None => Some(sync_fallback("absent")),
            Some(ctx) => match ctx.create(make(&args)) {
                Ok(()) => None,
                Err(reason) => Some(sync_fallback(&format!("{reason:?}"))),
            },
        }
    };
    let result = |result: Value| json_reply(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    match tool {
        None => json_reply(&json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32602, "message": "Unknown tool"}})),
        Some(Tool::Sync) => {
            let who = args.get("name").and_then(Value::as_str).unwrap_or("world");
            result(text_result(&format!("Hello, {who}!")))
        }
        Some(Tool::Context(make)) => match try_task(&make) {
            Some(fallback) => result(fallback),
            None => result(text_result("this reply is replaced by the task")),
        },
        Some(Tool::OnResponse(make)) => {
            let mut response = result(text_result("answered with a task on the response"));
            response.extensions_mut().insert(make(&args));
            response
        }
        Some(Tool::Sse) => sse_frames(id, &text_result("streamed")),
        Some(Tool::SseTask(make)) => {
            let r = try_task(&make).unwrap_or_else(|| text_result("streamed, replaced"));
            sse_frames(id, &r)
        }
    }
}

/// The standard tool set:
/// - `greet`: synchronous;
/// - `work`: a task through `TaskContext` whose `start` spawns a worker (arguments:
///   `then` = `complete` | `complete_error` | `fail` | anything else to hold;
///   `ttl_ms`, `poll_ms`, `message` set the spec);
/// - `respond_task`: a task spec on the response (way 2), no worker;
/// - `sse`: a synchronous SSE answer; `sse_task`: a task answered over SSE;
/// - `panics`: `start` panics; `bad_ttl`: a zero TTL;
/// - `task_only` and `never`: like `work`, configured `Required` and `Never` by
///   [`layer_builder`].
pub fn standard_inner(tasks: &Tasks) -> Inner {
    let worker = work_spec(tasks.clone());
    Inner::new()
        .tool("greet", Tool::Sync)
        .tool("work", Tool::Context(worker.clone()))
        .tool("task_only", Tool::Context(worker.clone()))
        .tool("never", Tool::Context(worker.clone()))
        .tool("respond_task", Tool::OnResponse(spec(spec_from_args)))
        .tool("sse", Tool::Sse)
        .tool("sse_task", Tool::SseTask(worker))
        .tool(
            "panics",
            Tool::Context(spec(|_| {
                TaskSpec::new().with_start(|_id| panic!("the start function failed on purpose"))
            })),
        )
        .tool(
            "bad_ttl",
            Tool::Context(spec(|_| {
                TaskSpec::new().with_ttl(Duration::ZERO).with_start(|_id| {
                    panic!("start must not run for an invalid spec");
                })
            })),
        )
}

/// A spec from the call's arguments `ttl_ms`, `poll_ms` and `message`.
pub fn spec_from_args(args: &Value) -> TaskSpec {
    let mut spec = TaskSpec::new();
    if let Some(ms) = args.get("ttl_ms").and_then(Value::as_u64) {
        spec = spec.with_ttl(Duration::from_millis(ms));
    }
    if let Some(ms) = args.get("poll_ms").and_then(Value::as_u64) {
        spec = spec.with_poll_interval(Duration::from_millis(ms));
    }
    if let Some(message) = args.get("message").and_then(Value::as_str) {
        spec = spec.with_status_message(message);
    }
    spec
}

/// The `work` tool: a worker driven by the `then` argument.
pub fn work_spec(tasks: Tasks) -> SpecFn {
    spec(move |args| {
        let tasks = tasks.clone();
        let then = args
            .get("then")
            .and_then(Value::as_str)
            .unwrap_or("hold")
            .to_owned();
        spec_from_args(args).with_start(move |id| {
            tokio::spawn(async move {
                match then.as_str() {
                    "complete" => {
                        tasks.progress(&id, "Working").await.unwrap();
                        tasks.complete(&id, text_result("done")).await.unwrap();
                    }
                    "complete_error" => {
                        let mut result = text_result("it went wrong");
                        result["isError"] = json!(true);
                        tasks.complete(&id, result).await.unwrap();
                    }
                    "fail" => {
                        tasks
                            .fail(&id, RpcError::internal("backend crashed"))
                            .await
                            .unwrap();
                    }
                    _ => {}
                }
            });
        })
    })
}

/// The builder every test starts from: no janitor, `serverInfo` set, `task_only`
/// configured `Required` and `never` configured `Never`.
pub fn layer_builder() -> TasksLayerBuilder {
    TasksLayer::builder(mcp_tasks::MemoryStore::new())
        .without_janitor()
        .with_server_info(SERVER_NAME, SERVER_VERSION)
        .with_tool_mode("task_only", TaskMode::Required)
        .with_tool_mode("never", TaskMode::Never)
}

// ---------------------------------------------------------------------------
// The server

/// A running server: hyper, a demo auth step, `TasksLayer`, the inner service.
#[derive(Debug)]
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The inner service, for its records.
    pub inner: Inner,
    /// The worker handle of the layer.
    pub tasks: Tasks,
    /// The HTTP server; it stops with this.
    http: TestServer,
}

impl Server {
    /// Serves `layer` around `inner` on 127.0.0.1, port 0.
    pub async fn start(layer: TasksLayer, inner: Inner) -> Server {
        let tasks = layer.handle();
        let service = tower::ServiceBuilder::new()
            .map_request(authenticate::<Incoming>)
            .service(layer.layer(inner.service::<Incoming>()));
        let http = server::serve(service).await;
        Server {
            addr: http.addr,
            inner,
            tasks,
            http,
        }
    }

    /// The standard server: [`layer_builder`] and [`standard_inner`].
    pub async fn standard() -> Server {
        Self::with_layer(layer_builder()).await
    }

    /// The standard tools behind a customised layer.
    pub async fn with_layer(builder: TasksLayerBuilder) -> Server {
        let layer = builder.build().unwrap();
        let inner = standard_inner(&layer.handle());
        Server::start(layer, inner).await
    }

    /// A client for this server.
    pub fn client(&self) -> Client {
        Client {
            addr: self.addr,
            next_id: Arc::new(AtomicI64::new(1)),
        }
    }
}

// ---------------------------------------------------------------------------
// The client

/// The harness's own checks on a [`Reply`].
impl Reply {
    /// Asserts a JSON-RPC error with this code, travelling with this HTTP status,
    /// as a well-formed `application/json` body.
    #[track_caller]
    pub fn assert_error(&self, code: i64, status: u16) -> &Self {
        assert_eq!(
            (self.code(), self.status.as_u16()),
            (Some(code), status),
            "expected error {code} with HTTP {status}, got: {} {}",
            self.status,
            self.text()
        );
        assert!(
            self.content_type().starts_with("application/json"),
            "error content type {:?}",
            self.content_type()
        );
        assert_eq!(self.json["jsonrpc"], "2.0");
        assert!(self.json["error"]["message"].is_string());
        assert!(self.json.get("result").is_none());
        self
    }

    /// Asserts -32021 naming the tasks extension in `data.requiredCapabilities`.
    #[track_caller]
    pub fn assert_capability_error(&self) -> &Self {
        self.assert_error(RpcError::MISSING_REQUIRED_CLIENT_CAPABILITY, 400);
        assert_eq!(
            self.json["error"]["data"]["requiredCapabilities"]["extensions"][EXTENSION_ID],
            json!({}),
            "{}",
            self.text()
        );
        self
    }
}

/// A hyper HTTP/1 client for one server; every exchange uses a fresh connection.
#[derive(Debug, Clone)]
pub struct Client {
    addr: SocketAddr,
    next_id: Arc<AtomicI64>,
}

/// The `_meta` a modern request carries; `declare` adds the tasks extension.
pub fn modern_meta(declare: bool) -> Value {
    let capabilities = if declare {
        json!({"extensions": {EXTENSION_ID: {}}})
    } else {
        json!({})
    };
    json!({
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES: capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "http-tests", "version": "1.0.0"},
    })
}

impl Client {
    /// Sends a raw request (the host header is added) and reads the whole reply.
    pub async fn send(&self, mut request: Request<Frames>) -> Reply {
        request.headers_mut().insert(
            header::HOST,
            HeaderValue::from_str(&self.addr.to_string()).unwrap(),
        );
        server::exchange(self.addr, request).await
    }

    /// A modern request for `method`, declaring the tasks extension unless told
    /// otherwise.
    pub fn request(&self, method: &str) -> Call<'_> {
        Call {
            client: self,
            method: method.to_owned(),
            id: json!(self.next_id.fetch_add(1, Ordering::Relaxed)),
            params: json!({}),
            meta: Some(modern_meta(true)),
            principal: None,
            overrides: Vec::new(),
            body: None,
        }
    }

    /// A modern request with `params`, the extension declared, header overrides
    /// (`None` removes a header) and an optional principal; returns the HTTP status
    /// and the JSON-RPC response.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        headers: &[(&str, Option<&str>)],
        principal: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut call = self.request(method).params(params);
        for (name, value) in headers {
            call = match value {
                Some(v) => call.header(name, v),
                None => call.without_header(name),
            };
        }
        if let Some(p) = principal {
            call = call.principal(p);
        }
        let reply = call.send().await;
        (reply.status, reply.json)
    }

    /// Calls a tool that should become a task; returns the `CreateTaskResult`.
    pub async fn create_task(
        &self,
        tool: &str,
        arguments: Value,
        principal: Option<&str>,
    ) -> Value {
        let mut call = self
            .request("tools/call")
            .params(json!({"name": tool, "arguments": arguments}));
        if let Some(p) = principal {
            call = call.principal(p);
        }
        let reply = call.send().await;
        let result = reply.ok().clone();
        assert_eq!(result["resultType"], "task", "{}", reply.text());
        result
    }

    /// Same as [`create_task`](Self::create_task), returning only the id.
    pub async fn create_task_id(
        &self,
        tool: &str,
        arguments: Value,
        principal: Option<&str>,
    ) -> String {
        let result = self.create_task(tool, arguments, principal).await;
        result["taskId"].as_str().unwrap().to_owned()
    }

    fn task_call(&self, method: &str, params: Value, principal: Option<&str>) -> Call<'_> {
        let call = self.request(method).params(params);
        match principal {
            Some(p) => call.principal(p),
            None => call,
        }
    }

    /// `tasks/get` with the extension declared.
    pub async fn get(&self, id: &str, principal: Option<&str>) -> Reply {
        self.task_call("tasks/get", json!({"taskId": id}), principal)
            .send()
            .await
    }

    /// `tasks/update` with the extension declared.
    pub async fn update(&self, id: &str, responses: Value, principal: Option<&str>) -> Reply {
        self.task_call(
            "tasks/update",
            json!({"taskId": id, "inputResponses": responses}),
            principal,
        )
        .send()
        .await
    }

    /// `tasks/cancel` with the extension declared.
    pub async fn cancel(&self, id: &str, principal: Option<&str>) -> Reply {
        self.task_call("tasks/cancel", json!({"taskId": id}), principal)
            .send()
            .await
    }

    /// Polls `tasks/get` until `done` holds for the result, or fails the test after
    /// [`POLL_DEADLINE`].
    pub async fn wait_for(
        &self,
        id: &str,
        principal: Option<&str>,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + POLL_DEADLINE;
        loop {
            let reply = self.get(id, principal).await;
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
    pub async fn wait_for_status(&self, id: &str, principal: Option<&str>, status: &str) -> Value {
        self.wait_for(id, principal, |t| t["status"] == status)
            .await
    }
}

/// One request being built; see [`Client::request`].
#[derive(Debug)]
pub struct Call<'a> {
    client: &'a Client,
    method: String,
    id: Value,
    params: Value,
    meta: Option<Value>,
    principal: Option<String>,
    overrides: Vec<(String, Option<String>)>,
    body: Option<Bytes>,
}

impl Call<'_> {
    /// The params (without `_meta`, which is added).
    pub fn params(mut self, params: Value) -> Self {
        self.params = params;
        self
    }

    /// Whether `_meta.clientCapabilities` declares the tasks extension.
    pub fn declare(mut self, declare: bool) -> Self {
        self.meta = Some(modern_meta(declare));
        self
    }

    /// Replaces the whole `_meta`.
    pub fn meta(mut self, meta: Value) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Sends no `_meta` at all.
    pub fn without_meta(mut self) -> Self {
        self.meta = None;
        self
    }

    /// The JSON-RPC id.
    pub fn id(mut self, id: Value) -> Self {
        self.id = id;
        self
    }

    /// Authenticates as `name`.
    pub fn principal(mut self, name: &str) -> Self {
        self.principal = Some(name.to_owned());
        self
    }

    /// Sets (or replaces) a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.overrides
            .push((name.to_ascii_lowercase(), Some(value.to_owned())));
        self
    }

    /// Removes a header the request would otherwise carry.
    pub fn without_header(mut self, name: &str) -> Self {
        self.overrides.push((name.to_ascii_lowercase(), None));
        self
    }

    /// Sends these bytes as the body instead of the envelope.
    pub fn raw_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// The body this request sends.
    pub fn body_bytes(&self) -> Bytes {
        if let Some(body) = &self.body {
            return body.clone();
        }
        let mut params = self.params.clone();
        if let Some(meta) = &self.meta {
            params["_meta"] = meta.clone();
        }
        let envelope =
            json!({"jsonrpc": "2.0", "id": self.id, "method": self.method, "params": params});
        Bytes::from(serde_json::to_vec(&envelope).unwrap())
    }

    /// The headers this request sends.
    pub fn headers(&self) -> HeaderMap {
        fn set(headers: &mut HeaderMap, name: &str, value: &str) {
            headers.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let mut headers = HeaderMap::new();
        set(&mut headers, "content-type", "application/json");
        set(
            &mut headers,
            "accept",
            "application/json, text/event-stream",
        );
        set(&mut headers, "mcp-protocol-version", PROTOCOL_VERSION);
        set(&mut headers, "mcp-method", &self.method);
        let name_key = match self.method.as_str() {
            "tools/call" => Some("name"),
            "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
            _ => None,
        };
        if let Some(name) = name_key
            .and_then(|k| self.params.get(k))
            .and_then(Value::as_str)
        {
            set(&mut headers, "mcp-name", name);
        }
        if let Some(p) = &self.principal {
            set(&mut headers, "authorization", &format!("Bearer {p}"));
        }
        for (name, value) in &self.overrides {
            match value {
                Some(v) => set(&mut headers, name, v),
                None => {
                    headers.remove(name.as_str());
                }
            }
        }
        headers
    }

    /// Sends it.
    pub async fn send(self) -> Reply {
        let mut request = Request::post("/mcp")
            .body(Frames::full(self.body_bytes()))
            .unwrap();
        *request.headers_mut() = self.headers();
        self.client.send(request).await
    }
}

/// Whether `s` is an RFC 3339 timestamp.
pub fn is_rfc3339(s: &Value) -> bool {
    s.as_str().is_some_and(|s| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).is_ok()
    })
}

/// Whether `s` looks like a task id: 43 base64url characters.
pub fn is_task_id(s: &Value) -> bool {
    s.as_str().is_some_and(|s| {
        s.len() == 43
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}
