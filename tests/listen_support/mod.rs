//! Harness for the listen tests and the notification benchmark: a hyper server on
//! 127.0.0.1:0 running `TasksLayer` over a small raw MCP service whose listen
//! behaviour the test picks, and a hyper client that reads SSE streams event by
//! event.

#![allow(dead_code, unreachable_pub)]

#[path = "../support/server.rs"]
mod server;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body::{Body, Frame};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use mcp_tasks::body::RequestBody;
use mcp_tasks::notify::ListenNotifier;
use mcp_tasks::store::{BoxFuture, CreateLimits, Scope, Timestamp, Transition, Updated};
use mcp_tasks::wire::{
    EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use mcp_tasks::{
    MemoryStore, Principal, StoreError, TaskContext, TaskId, TaskRecord, TaskSpec, TaskStore,
    Tasks, TasksLayer, TasksLayerBuilder,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower::Layer as _;

/// The longest any single step may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Runs `future` with the standard deadline, failing the test when it passes.
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(DEADLINE, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out: {what}"),
    }
}

type InnerBody = UnsyncBoxBody<Bytes, Infallible>;

/// How the inner service answers `subscriptions/listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenSupport {
    /// An SSE stream: its acknowledgment, then whatever the test pushes.
    Stream,
    /// HTTP 404 with a JSON -32601 error.
    NotFound,
    /// HTTP 200, an SSE stream holding only a -32601 error.
    SseError,
    /// HTTP 200 with a JSON -32602 error: the inner service refuses this filter.
    Rejects,
}

/// One listen stream the inner service is serving, as the test drives it.
#[derive(Debug)]
pub struct InnerListen {
    /// The request the inner service received.
    pub request: Value,
    /// Bytes to write on the stream; dropping it ends the stream.
    pub sender: Option<mpsc::UnboundedSender<Bytes>>,
    /// Signalled each time the layer takes a chunk from the stream.
    pub taken: mpsc::UnboundedReceiver<()>,
}

#[derive(Debug)]
struct InnerState {
    support: ListenSupport,
    listens: Mutex<Vec<InnerListen>>,
    arrived: tokio::sync::Notify,
}

/// A body fed by a channel that reports each chunk it hands out.
struct ChannelBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
    taken: mpsc::UnboundedSender<()>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(bytes)) => {
                let _ = self.taken.send(());
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn full(bytes: impl Into<Bytes>) -> InnerBody {
    http_body_util::Full::new(bytes.into()).boxed_unsync()
}

fn json_response(status: StatusCode, value: &Value) -> Response<InnerBody> {
    let mut response = Response::new(full(serde_json::to_vec(value).unwrap()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn sse_response(body: InnerBody) -> Response<InnerBody> {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// An SSE event holding one JSON message.
pub fn sse_event(message: &Value) -> Bytes {
    Bytes::from(format!(
        "data: {}\n\n",
        serde_json::to_string(message).unwrap()
    ))
}

async fn handle(
    state: Arc<InnerState>,
    req: Request<RequestBody<Incoming>>,
) -> Result<Response<InnerBody>, Infallible> {
    let (parts, body) = req.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let request: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = request["method"].as_str().unwrap_or_default().to_owned();
    match method.as_str() {
        "tools/call" => {
            // Every call asks for a task; the test drives it through `Tasks`.
            if let Some(ctx) = TaskContext::from_parts(&parts)
                && ctx
                    .create(TaskSpec::new().with_status_message("Queued"))
                    .is_ok()
            {
                return Ok(json_response(StatusCode::OK, &json!({})));
            }
            let result =
                json!({"content": [{"type": "text", "text": "sync"}], "resultType": "complete"});
            Ok(json_response(
                StatusCode::OK,
                &json!({"jsonrpc": "2.0", "id": id, "result": result}),
            ))
        }
        "subscriptions/listen" => match state.support {
            ListenSupport::NotFound => Ok(json_response(
                StatusCode::NOT_FOUND,
                &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
            )),
            ListenSupport::Rejects => Ok(json_response(
                StatusCode::OK,
                &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "Unsupported filter"}}),
            )),
            ListenSupport::SseError => Ok(sse_response(full(sse_event(
                &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
            )))),
            ListenSupport::Stream => {
                let mut agreed = serde_json::Map::new();
                if request["params"]["notifications"]["toolsListChanged"] == json!(true) {
                    agreed.insert("toolsListChanged".into(), json!(true));
                }
                let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id}, "notifications": agreed}});
                let (tx, rx) = mpsc::unbounded_channel();
                let (taken_tx, taken) = mpsc::unbounded_channel();
                tx.send(sse_event(&ack)).unwrap();
                state.listens.lock().unwrap().push(InnerListen {
                    request,
                    sender: Some(tx),
                    taken,
                });
                state.arrived.notify_waiters();
                Ok(sse_response(
                    ChannelBody {
                        rx,
                        taken: taken_tx,
                    }
                    .boxed_unsync(),
                ))
            }
        },
        _ => Ok(json_response(
            StatusCode::OK,
            &json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete"}}),
        )),
    }
}

/// A store that counts reads, to show who polls it.
#[derive(Debug, Default)]
pub struct CountingStore {
    inner: MemoryStore,
    /// `get` calls so far.
    pub gets: AtomicUsize,
}

impl TaskStore for CountingStore {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.create(record, limits)
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get(id, scope, now)
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        self.inner.update(id, scope, transition, now)
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        self.inner.cleanup(now, retention)
    }
}

/// A builder with the harness's settings: principals from the `x-user` header, no
/// janitor.
pub fn builder(store: Arc<dyn TaskStore>) -> TasksLayerBuilder {
    TasksLayer::builder(store)
        .with_principal(|parts| {
            parts
                .headers
                .get("x-user")
                .and_then(|v| v.to_str().ok())
                .map(Principal::from)
        })
        .without_janitor()
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The worker handle.
    pub tasks: Tasks,
    /// The layer's listen registry.
    pub listen: ListenNotifier,
    inner: Arc<InnerState>,
    /// The HTTP server; it stops with this.
    http: TestServer,
}

impl Server {
    /// A server with every default of [`builder`].
    pub async fn start(support: ListenSupport) -> Server {
        Server::with(support, builder(Arc::new(MemoryStore::new()))).await
    }

    /// A server over a layer built from `builder`.
    pub async fn with(support: ListenSupport, builder: TasksLayerBuilder) -> Server {
        let layer = builder.build().expect("valid layer settings");
        let inner = Arc::new(InnerState {
            support,
            listens: Mutex::new(Vec::new()),
            arrived: tokio::sync::Notify::new(),
        });
        let state = inner.clone();
        let service = layer.layer(tower::service_fn(move |req| handle(state.clone(), req)));
        let http = serve(service).await;
        Server {
            addr: http.addr,
            tasks: layer.handle(),
            listen: layer.listen_notifier(),
            inner,
            http,
        }
    }

    /// A client of this server.
    pub fn client(&self) -> Client {
        Client { addr: self.addr }
    }

    /// Waits for the inner service's `n`-th listen stream (from 0) and takes it.
    pub async fn inner_listen(&self, n: usize) -> InnerListen {
        within("the inner service's listen", async {
            loop {
                let arrived = self.inner.arrived.notified();
                tokio::pin!(arrived);
                arrived.as_mut().enable();
                {
                    let mut listens = self.inner.listens.lock().unwrap();
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

    /// Polls `condition` on the listen registry until it holds or the deadline
    /// passes.
    pub async fn registry_until(&self, what: &str, condition: impl Fn(&ListenNotifier) -> bool) {
        within(what, async {
            while !condition(&self.listen) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }
}

pub use server::{TestServer, serve};

/// The `_meta` of a modern request.
pub fn meta(declare: bool) -> Value {
    let extensions = if declare {
        json!({EXTENSION_ID: {}})
    } else {
        json!({})
    };
    json!({
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES: {"extensions": extensions},
    })
}

/// A JSON answer.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub message: Value,
}

impl Reply {
    /// The result, failing on an error.
    pub fn result(&self) -> &Value {
        assert!(
            self.message.get("error").is_none(),
            "unexpected error: {}",
            self.message
        );
        &self.message["result"]
    }

    /// The error code.
    pub fn code(&self) -> Option<i64> {
        self.message["error"]["code"].as_i64()
    }
}

/// A client that opens one connection per request.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    addr: SocketAddr,
}

impl Client {
    /// A client of the server at `addr`.
    pub fn new(addr: SocketAddr) -> Client {
        Client { addr }
    }

    /// Sends one request with the standard headers; `name` goes into `Mcp-Name`.
    pub async fn send(
        &self,
        user: Option<&str>,
        message: &Value,
        name: Option<&str>,
    ) -> (Response<Incoming>, JoinHandle<()>) {
        let (mut sender, conn) = server::connect(self.addr).await;
        let mut request = Request::post("/mcp")
            .header(header::HOST, self.addr.to_string())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .header("mcp-method", message["method"].as_str().unwrap());
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
        if let Some(user) = user {
            request = request.header("x-user", user);
        }
        let request = request
            .body(http_body_util::Full::new(Bytes::from(
                serde_json::to_vec(message).unwrap(),
            )))
            .unwrap();
        let response = within("a response head", sender.send_request(request))
            .await
            .unwrap();
        (response, conn)
    }

    /// Sends a request and reads a JSON (or single-response SSE) answer.
    pub async fn call(&self, user: Option<&str>, message: &Value, name: Option<&str>) -> Reply {
        let (response, _conn) = self.send(user, message, name).await;
        let (head, body) = response.into_parts();
        let bytes = within("a response body", body.collect())
            .await
            .unwrap()
            .to_bytes();
        let message = if is_sse(&head.headers) {
            parse_events(&bytes)
                .into_iter()
                .filter_map(|e| e.data)
                .find(|m| m.get("id").is_some())
                .unwrap_or(Value::Null)
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        Reply {
            status: head.status,
            headers: head.headers,
            message,
        }
    }

    /// Calls a tool declaring the extension; the inner service makes every call a
    /// task. Returns the task id.
    pub async fn create_task(&self, user: Option<&str>) -> String {
        let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "job", "arguments": {}, "_meta": meta(true)}});
        let reply = self.call(user, &message, Some("job")).await;
        let result = reply.result();
        assert_eq!(result["resultType"], "task", "{:?}", reply);
        result["taskId"].as_str().unwrap().to_owned()
    }

    /// `tasks/get` (or another `tasks/*` method) for `task`.
    pub async fn task_method(
        &self,
        user: Option<&str>,
        method: &str,
        task: &str,
        extra: Value,
    ) -> Reply {
        let mut params = json!({"taskId": task, "_meta": meta(true)});
        for (k, v) in extra.as_object().into_iter().flatten() {
            params[k] = v.clone();
        }
        let message = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params});
        self.call(user, &message, Some(task)).await
    }

    /// The task as `tasks/get` returns it, without `resultType` and `_meta`: what a
    /// notification must carry.
    pub async fn get_detailed(&self, user: Option<&str>, task: &str) -> Value {
        let reply = self.task_method(user, "tasks/get", task, json!({})).await;
        let mut result = reply.result().clone();
        let object = result.as_object_mut().unwrap();
        object.remove("resultType");
        object.remove("_meta");
        result
    }

    /// Opens a listen stream with `notifications` as the filter.
    pub async fn listen_with(
        &self,
        user: Option<&str>,
        id: Value,
        notifications: Value,
        declare: bool,
    ) -> Listen {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {"notifications": notifications, "_meta": meta(declare)}});
        let (response, conn) = self.send(user, &message, None).await;
        let (head, body) = response.into_parts();
        Listen {
            status: head.status,
            headers: head.headers,
            body,
            buf: BytesMut::new(),
            read_at: std::time::Instant::now(),
            conn,
        }
    }

    /// Opens a listen stream naming `task_ids`, declaring the extension.
    pub async fn listen(&self, user: Option<&str>, id: Value, task_ids: &[&str]) -> Listen {
        self.listen_with(user, id, json!({"taskIds": task_ids}), true)
            .await
    }
}

fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// One SSE event as read by the client.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The JSON message of its `data:` line, if any.
    pub data: Option<Value>,
    /// How many `data:` lines it had.
    pub data_lines: usize,
    /// Its comment lines, without the colon.
    pub comments: Vec<String>,
}

/// Parses whole events out of `bytes` (a trailing partial event is ignored).
pub fn parse_events(bytes: &[u8]) -> Vec<Event> {
    let text = String::from_utf8_lossy(bytes).replace("\r\n", "\n");
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(end) = rest.find("\n\n") {
        out.push(parse_event(&rest[..end]));
        rest = &rest[end + 2..];
    }
    out
}

fn parse_event(text: &str) -> Event {
    let mut event = Event {
        data: None,
        data_lines: 0,
        comments: Vec::new(),
    };
    for line in text.lines() {
        if let Some(data) = line.strip_prefix("data:") {
            event.data_lines += 1;
            event.data = Some(serde_json::from_str(data.trim_start()).unwrap_or_else(|e| {
                panic!("a data line that is not one JSON document ({e}): {data}")
            }));
        } else if let Some(comment) = line.strip_prefix(':') {
            event.comments.push(comment.trim().to_owned());
        }
    }
    event
}

/// A listen stream as the client reads it.
#[derive(Debug)]
pub struct Listen {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
    buf: BytesMut,
    read_at: std::time::Instant,
    conn: JoinHandle<()>,
}

impl Drop for Listen {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl Listen {
    /// The next whole event, or `None` when the stream ended. No deadline.
    pub async fn next_event_raw(&mut self) -> Option<Event> {
        self.next_event_at().await.map(|(event, _)| event)
    }

    /// The next whole event and when the bytes that completed it were read.
    pub async fn next_event_at(&mut self) -> Option<(Event, std::time::Instant)> {
        loop {
            let text = &self.buf[..];
            if let Some(end) = text.windows(2).position(|w| w == b"\n\n") {
                let event = self.buf.split_to(end + 2);
                let event = parse_event(&String::from_utf8_lossy(&event[..end]));
                return Some((event, self.read_at));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    self.read_at = std::time::Instant::now();
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => panic!("listen stream failed: {e}"),
                None => return None,
            }
        }
    }

    /// Everything left on the stream, as one JSON document (for answers that are not
    /// streams at all).
    pub async fn json(mut self) -> Value {
        let mut bytes = BytesMut::new();
        while let Some((chunk, _)) = within("the rest of the answer", self.next_chunk_at()).await {
            bytes.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&bytes).expect("a JSON answer")
    }

    /// The next bytes read from the stream, unparsed, and when they were read
    /// (bytes already buffered come first). `None` when the stream ended.
    pub async fn next_chunk_at(&mut self) -> Option<(Bytes, std::time::Instant)> {
        if !self.buf.is_empty() {
            return Some((self.buf.split().freeze(), self.read_at));
        }
        loop {
            match self.body.frame().await? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some((data, std::time::Instant::now()));
                    }
                }
                Err(e) => panic!("listen stream failed: {e}"),
            }
        }
    }

    /// The next whole event within the deadline; `None` when the stream ended.
    pub async fn next_event(&mut self) -> Option<Event> {
        within("the next listen event", self.next_event_raw()).await
    }

    /// The next event that carries a message (keep-alive comments are skipped).
    pub async fn next_message(&mut self) -> Value {
        within("the next listen message", async {
            loop {
                match self.next_event_raw().await {
                    Some(Event {
                        data: Some(message),
                        data_lines,
                        ..
                    }) => {
                        assert_eq!(data_lines, 1, "a message spread over several data lines");
                        return message;
                    }
                    Some(_) => continue,
                    None => panic!("the listen stream ended"),
                }
            }
        })
        .await
    }

    /// The next `notifications/tasks` params, failing on any other message.
    pub async fn next_task(&mut self) -> Value {
        let message = self.next_message().await;
        assert_eq!(message["method"], "notifications/tasks", "{message}");
        message["params"].clone()
    }

    /// Reads task notifications until one satisfies `done`; returns all of them.
    pub async fn tasks_until(&mut self, done: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let params = self.next_task().await;
            let stop = done(&params);
            seen.push(params);
            if stop {
                return seen;
            }
        }
    }
}

/// `params` of a task notification without its `_meta`: comparable with
/// [`Client::get_detailed`].
pub fn without_meta(params: &Value) -> Value {
    let mut params = params.clone();
    params.as_object_mut().unwrap().remove("_meta");
    params
}
