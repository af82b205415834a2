//! What the layer wraps in the tests: a small raw MCP service whose tools and
//! listen behaviour each test picks ([`Inner`]), a spy that records what a real
//! server receives ([`spy`]), the standard layer settings, and a [`Server`] that
//! runs them on loopback.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::body::RequestBody;
use mcp_tasks::notify::ListenNotifier;
use mcp_tasks::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES};
use mcp_tasks::{
    MemoryStore, Principal, TaskContext, TaskMode, TaskRefused, TaskSpec, TasksLayer,
    TasksLayerBuilder, store::TaskStore, wire::RpcError, worker::Tasks,
};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tower::ServiceExt as _;

use super::http::{Client, Frames, TestServer, bearer, serve_layered};
use super::sse;
use super::wait::{self, within};

/// The server name the standard layer puts into `_meta.serverInfo`.
pub(crate) const SERVER_NAME: &str = "layer-test";
/// The server version the standard layer puts into `_meta.serverInfo`.
pub(crate) const SERVER_VERSION: &str = "1.2.3";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------
// What an inner service received

/// One request as an inner service received it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    /// Its headers.
    pub(crate) headers: HeaderMap,
    /// Its body, byte for byte.
    pub(crate) body: Bytes,
    /// Its body as JSON (`Null` when it is not JSON).
    pub(crate) message: Value,
    /// The `TaskContext` in its extensions, as `Debug` text.
    pub(crate) context: Option<String>,
    /// What that context said about making a task, before anyone asked for one.
    pub(crate) verdict: Option<Result<(), TaskRefused>>,
    /// The `Principal` in its extensions.
    pub(crate) principal: Option<Principal>,
}

impl Received {
    fn new(parts: &http::request::Parts, body: Bytes) -> Received {
        let context = TaskContext::from_parts(parts);
        Received {
            headers: parts.headers.clone(),
            message: serde_json::from_slice(&body).unwrap_or(Value::Null),
            body,
            context: context.map(|c| format!("{c:?}")),
            verdict: context.map(TaskContext::check),
            principal: parts.extensions.get::<Principal>().cloned(),
        }
    }

    /// Whether the message's client capabilities declare the tasks extension.
    pub(crate) fn declares_tasks(&self) -> bool {
        self.message["params"]["_meta"][META_CLIENT_CAPABILITIES]["extensions"]
            .get(EXTENSION_ID)
            .is_some()
    }

    /// A header as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The principal's name.
    pub(crate) fn principal_name(&self) -> Option<&str> {
        self.principal.as_ref().map(Principal::as_str)
    }
}

/// Every request an inner service received, in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inbox(Arc<Mutex<Vec<Received>>>);

impl Inbox {
    fn push(&self, received: Received) {
        lock(&self.0).push(received);
    }

    /// Everything received so far.
    pub(crate) fn all(&self) -> Vec<Received> {
        lock(&self.0).clone()
    }

    /// How many requests arrived.
    pub(crate) fn len(&self) -> usize {
        lock(&self.0).len()
    }

    /// The last request received.
    pub(crate) fn last(&self) -> Received {
        lock(&self.0)
            .last()
            .cloned()
            .expect("the inner service received nothing")
    }

    /// Every `tools/call` of `tool`, in order.
    pub(crate) fn calls(&self, tool: &str) -> Vec<Received> {
        lock(&self.0)
            .iter()
            .filter(|r| r.message["method"] == "tools/call" && r.message["params"]["name"] == tool)
            .cloned()
            .collect()
    }
}

/// `inner` behind a spy that records each request into the returned [`Inbox`]
/// before passing it on unchanged.
pub(crate) fn spy<S>(inner: S) -> (Spy<S>, Inbox) {
    let inbox = Inbox::default();
    let spy = Spy {
        inner,
        inbox: inbox.clone(),
    };
    (spy, inbox)
}

/// A service recording each request into an [`Inbox`] before handing it to the
/// service it wraps; see [`spy`].
#[derive(Debug, Clone)]
pub(crate) struct Spy<S> {
    inner: S,
    inbox: Inbox,
}

impl<S, B> tower::Service<Request<RequestBody<B>>> for Spy<S>
where
    S: tower::Service<Request<Full<Bytes>>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Debug,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Readiness is the wrapped service's, checked per call by `oneshot`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<RequestBody<B>>) -> Self::Future {
        let inner = self.inner.clone();
        let inbox = self.inbox.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            inbox.push(Received::new(&parts, bytes.clone()));
            inner
                .oneshot(Request::from_parts(parts, Full::new(bytes)))
                .await
        })
    }
}

// ---------------------------------------------------------------------------
// The inner MCP service

/// Builds the `TaskSpec` of a task-making tool from the call's arguments.
pub(crate) type SpecFn = Arc<dyn Fn(&Value) -> TaskSpec + Send + Sync>;

/// How a tool of the inner service answers `tools/call`.
#[derive(Clone)]
pub(crate) enum Tool {
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
pub(crate) fn spec(f: impl Fn(&Value) -> TaskSpec + Send + Sync + 'static) -> SpecFn {
    Arc::new(f)
}

/// How the inner service answers `subscriptions/listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenSupport {
    /// An SSE stream: its acknowledgment, then whatever the test pushes.
    Stream,
    /// HTTP 404 with a JSON -32601 error.
    NotFound,
    /// HTTP 200, an SSE stream holding only a -32601 error.
    SseError,
    /// HTTP 200 with a JSON -32602 error: the inner service refuses this filter.
    Rejects,
    /// An SSE stream that sends no acknowledgment: only what the test pushes.
    Silent,
}

/// One listen stream the inner service is serving, as the test drives it.
#[derive(Debug)]
pub(crate) struct InnerListen {
    /// The request the inner service received.
    pub(crate) request: Value,
    /// Bytes to write on the stream; dropping it ends the stream.
    pub(crate) sender: Option<mpsc::UnboundedSender<Bytes>>,
    /// Signalled each time the layer takes a chunk from the stream.
    pub(crate) taken: mpsc::UnboundedReceiver<()>,
}

#[derive(Default)]
struct InnerState {
    tools: Mutex<HashMap<String, Tool>>,
    discover: Mutex<Option<Value>>,
    listen: Mutex<Option<ListenSupport>>,
    calls: Mutex<HashMap<String, usize>>,
    inbox: Inbox,
    sent: Mutex<Vec<Bytes>>,
    listens: Mutex<Vec<InnerListen>>,
    listen_arrived: Notify,
}

/// A raw MCP server: answers `server/discover`, `tools/list` and `tools/call`,
/// `subscriptions/listen` as [`ListenSupport`] says (when set), and echoes any
/// other method. It records what it receives and what it sends.
#[derive(Clone, Default)]
pub(crate) struct Inner {
    state: Arc<InnerState>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

/// The `server/discover` result the inner service answers with by default. It
/// advertises a legacy `capabilities.tasks` slot on purpose: the layer must drop it.
pub(crate) fn inner_discover_result() -> Value {
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

type InnerFuture = Pin<Box<dyn Future<Output = Result<Response<Frames>, Infallible>> + Send>>;

impl Inner {
    /// No tools.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds a tool.
    pub(crate) fn tool(self, name: &str, tool: Tool) -> Self {
        lock(&self.state.tools).insert(name.to_owned(), tool);
        self
    }

    /// Replaces the `server/discover` result.
    pub(crate) fn discover(self, result: Value) -> Self {
        *lock(&self.state.discover) = Some(result);
        self
    }

    /// Answers `subscriptions/listen` as `support` says (instead of echoing it).
    pub(crate) fn listen(self, support: ListenSupport) -> Self {
        *lock(&self.state.listen) = Some(support);
        self
    }

    /// How many times `tools/call` reached the tool `name`.
    pub(crate) fn calls(&self, name: &str) -> usize {
        lock(&self.state.calls).get(name).copied().unwrap_or(0)
    }

    /// Every request received so far.
    pub(crate) fn received(&self) -> Vec<Received> {
        self.state.inbox.all()
    }

    /// The last request received.
    pub(crate) fn last_received(&self) -> Received {
        self.state.inbox.last()
    }

    /// The body of the last response sent.
    pub(crate) fn last_sent(&self) -> Bytes {
        lock(&self.state.sent)
            .last()
            .cloned()
            .expect("the inner service sent nothing")
    }

    /// How many requests reached the inner service.
    pub(crate) fn request_count(&self) -> usize {
        self.state.inbox.len()
    }

    /// Waits for the `n`-th listen stream (from 0) the inner service served, and
    /// takes it.
    pub(crate) async fn listen_stream(&self, n: usize) -> InnerListen {
        within("the inner service's listen", async {
            loop {
                let arrived = self.state.listen_arrived.notified();
                tokio::pin!(arrived);
                arrived.as_mut().enable();
                {
                    let mut listens = lock(&self.state.listens);
                    if listens.len() > n {
                        let placeholder = InnerListen {
                            request: Value::Null,
                            sender: None,
                            taken: mpsc::unbounded_channel().1,
                        };
                        return std::mem::replace(&mut listens[n], placeholder);
                    }
                }
                arrived.await;
            }
        })
        .await
    }

    /// The inner service as a tower `service_fn`.
    pub(crate) fn service<B>(
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

fn reply(status: StatusCode, body: Frames, content_type: &'static str) -> Response<Frames> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json_reply(value: &Value) -> Response<Frames> {
    json_reply_with(StatusCode::OK, value)
}

fn json_reply_with(status: StatusCode, value: &Value) -> Response<Frames> {
    let body = Frames::full(serde_json::to_vec(value).unwrap());
    reply(status, body, "application/json")
}

/// The text result of a synchronous run.
pub(crate) fn text_result(text: &str) -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": text}]})
}

/// The exact bytes the inner service answers `tools/list` with: odd spacing and
/// key order, so any re-serialisation on the way would show.
pub(crate) fn tools_list_bytes(id: &Value) -> Bytes {
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
    let (parts, body) = req.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let received = Received::new(&parts, bytes.clone());
    let message = received.message.clone();
    state.inbox.push(received);
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let listen = *lock(&state.listen);
    let response: Response<Frames> = match (method, listen) {
        ("server/discover", _) => {
            let result = lock(&state.discover)
                .clone()
                .unwrap_or_else(inner_discover_result);
            json_reply(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
        }
        ("tools/list", _) => {
            let mut r = reply(
                StatusCode::OK,
                Frames::full(tools_list_bytes(&id)),
                "application/json",
            );
            r.headers_mut()
                .insert("x-inner", HeaderValue::from_static("tools-list"));
            r
        }
        ("tools/call", _) => call_tool(&state, context.as_ref(), &id, &message["params"]),
        ("subscriptions/listen", Some(support)) => answer_listen(&state, support, message),
        (other, _) => {
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

fn answer_listen(state: &InnerState, support: ListenSupport, request: Value) -> Response<Frames> {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let not_found = json!({"jsonrpc": "2.0", "id": id,
        "error": {"code": -32601, "message": "Method not found"}});
    match support {
        ListenSupport::NotFound => json_reply_with(StatusCode::NOT_FOUND, &not_found),
        ListenSupport::Rejects => json_reply(&json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32602, "message": "Unsupported filter"}})),
        ListenSupport::SseError => reply(
            StatusCode::OK,
            Frames::full(sse::event(&not_found)),
            "text/event-stream",
        ),
        ListenSupport::Stream | ListenSupport::Silent => {
            let mut agreed = serde_json::Map::new();
            if request["params"]["notifications"]["toolsListChanged"] == json!(true) {
                agreed.insert("toolsListChanged".into(), json!(true));
            }
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id}, "notifications": agreed}});
            let (tx, rx) = mpsc::unbounded_channel();
            let (taken_tx, taken) = mpsc::unbounded_channel();
            if support == ListenSupport::Stream {
                tx.send(sse::event(&ack)).unwrap();
            }
            lock(&state.listens).push(InnerListen {
                request,
                sender: Some(tx),
                taken,
            });
            state.listen_arrived.notify_waiters();
            reply(
                StatusCode::OK,
                Frames::fed(rx, taken_tx),
                "text/event-stream",
            )
        }
    }
}

fn sse_frames(id: &Value, result: &Value) -> Response<Frames> {
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "p-1", "progress": 1, "total": 2, "message": "halfway"}});
    let done = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let chunks = [
        Bytes::from(format!("event: message\ndata: {progress}\n\n")),
        Bytes::from(format!("event: message\ndata: {done}\n\n")),
    ];
    reply(StatusCode::OK, Frames::chunked(chunks), "text/event-stream")
}

/// The result the inner service writes when a tool ran synchronously because no
/// task could be made; `refused` names why.
pub(crate) fn sync_fallback(refused: &str) -> Value {
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
pub(crate) fn standard_inner(tasks: &Tasks) -> Inner {
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
pub(crate) fn spec_from_args(args: &Value) -> TaskSpec {
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
pub(crate) fn work_spec(tasks: Tasks) -> SpecFn {
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

/// The builder most HTTP tests start from: no janitor, `serverInfo` set,
/// `task_only` configured `Required` and `never` configured `Never`, anonymous
/// tasks allowed (the tests' clients send no principal unless they say so).
pub(crate) fn layer_builder() -> TasksLayerBuilder {
    strict_layer_builder().with_anonymous_tasks()
}

/// [`layer_builder`] as the layer comes: tasks only for requests with a principal.
pub(crate) fn strict_layer_builder() -> TasksLayerBuilder {
    TasksLayer::builder(MemoryStore::new())
        .without_janitor()
        .with_server_info(SERVER_NAME, SERVER_VERSION)
        .with_tool_mode("task_only", TaskMode::Required)
        .with_tool_mode("never", TaskMode::Never)
}

/// The builder of the listen tests: principals from the builder's own hook (the
/// `Authorization: Bearer` name), no janitor, anonymous tasks allowed.
pub(crate) fn listen_builder(store: Arc<dyn TaskStore>) -> TasksLayerBuilder {
    strict_listen_builder(store).with_anonymous_tasks()
}

/// [`listen_builder`] as the layer comes: tasks only for requests with a principal.
pub(crate) fn strict_listen_builder(store: Arc<dyn TaskStore>) -> TasksLayerBuilder {
    TasksLayer::builder(store)
        .with_principal(|parts| bearer(&parts.headers))
        .without_janitor()
}

/// The inner service of the listen tests: `subscriptions/listen` answered as
/// `support` says, and the tool `job`, which asks for a task (status message
/// `Queued`) that the test then drives through `Tasks`.
pub(crate) fn listen_inner(support: ListenSupport) -> Inner {
    Inner::new().listen(support).tool(
        "job",
        Tool::Context(spec(|_| TaskSpec::new().with_status_message("Queued"))),
    )
}

// ---------------------------------------------------------------------------
// The server

/// A running server: hyper, the demo auth step, `TasksLayer`, an [`Inner`].
#[derive(Debug)]
pub(crate) struct Server {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// The inner service, for its records.
    pub(crate) inner: Inner,
    /// The worker handle of the layer.
    pub(crate) tasks: Tasks,
    /// The layer's listen registry.
    pub(crate) listen: ListenNotifier,
    /// The HTTP server; it stops with this.
    http: TestServer,
}

impl Server {
    /// Serves `layer` around `inner` on 127.0.0.1, port 0.
    pub(crate) async fn start(layer: TasksLayer, inner: Inner) -> Server {
        let http = serve_layered(&layer, inner.service()).await;
        Server {
            addr: http.addr,
            inner,
            tasks: layer.tasks(),
            listen: layer.listen_notifier(),
            http,
        }
    }

    /// The standard server: [`layer_builder`] and [`standard_inner`].
    pub(crate) async fn standard() -> Server {
        Self::with_layer(layer_builder()).await
    }

    /// The standard tools behind a customised layer.
    pub(crate) async fn with_layer(builder: TasksLayerBuilder) -> Server {
        let layer = builder.build().unwrap();
        let inner = standard_inner(&layer.tasks());
        Server::start(layer, inner).await
    }

    /// The listen tests' server: [`listen_builder`] over a memory store, and
    /// [`listen_inner`].
    pub(crate) async fn listening(support: ListenSupport) -> Server {
        Self::listening_with(support, listen_builder(Arc::new(MemoryStore::new()))).await
    }

    /// [`listen_inner`] behind a layer built from `builder`.
    pub(crate) async fn listening_with(
        support: ListenSupport,
        builder: TasksLayerBuilder,
    ) -> Server {
        let layer = builder.build().expect("valid layer settings");
        Server::start(layer, listen_inner(support)).await
    }

    /// A client for this server.
    pub(crate) fn client(&self) -> Client {
        Client::new(self.addr)
    }

    /// Waits for the inner service's `n`-th listen stream (from 0) and takes it.
    pub(crate) async fn inner_listen(&self, n: usize) -> InnerListen {
        self.inner.listen_stream(n).await
    }

    /// Polls `condition` on the listen registry (which announces nothing) until it
    /// holds, failing the test after the deadline.
    pub(crate) async fn registry_until(
        &self,
        what: &str,
        condition: impl Fn(&ListenNotifier) -> bool,
    ) {
        wait::until(what, || condition(&self.listen)).await;
    }
}
