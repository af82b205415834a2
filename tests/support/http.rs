//! Loopback HTTP: a hyper HTTP/1.1 server on 127.0.0.1, port 0, that stops
//! accepting when dropped; the demo authentication in front of the layer; a client
//! that opens one connection per exchange; a [`Reply`] read whole and an
//! [`EventStream`] read event by event. Every socket has `TCP_NODELAY` set.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use mcp_tasks::body::RequestBody;
use mcp_tasks::error::BoxError;
use mcp_tasks::wire::EXTENSION_ID;
use mcp_tasks::wire::RpcError;
use mcp_tasks::{Principal, TasksLayer};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower::Layer as _;

use super::requests::Call;
use super::sse::{self, Event, EventReader};
use super::wait::{self, within};

/// The longest one whole HTTP exchange ([`exchange`]) may take.
pub(crate) const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// The server

/// A running test server. Dropping it stops accepting connections; the ones
/// already accepted run on.
#[derive(Debug)]
pub(crate) struct TestServer {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// Its MCP endpoint, `http://<addr>/mcp`.
    pub(crate) url: String,
    accept: JoinHandle<()>,
}

impl TestServer {
    /// Stops accepting connections now, as dropping the server does.
    pub(crate) fn abort(&self) {
        self.accept.abort();
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Serves `service` over HTTP/1.1 on 127.0.0.1, port 0, one task per connection.
pub(crate) async fn serve<S, B>(service: S) -> TestServer
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

/// Serves `layer` around `inner`, behind [`authenticate`].
pub(crate) async fn serve_layered<S, ResBody>(layer: &TasksLayer, inner: S) -> TestServer
where
    S: tower::Service<
            Request<RequestBody<Incoming>>,
            Response = Response<ResBody>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    serve(
        tower::ServiceBuilder::new()
            .map_request(authenticate::<Incoming>)
            .service(layer.layer(inner)),
    )
    .await
}

/// The principal a request names with `Authorization: Bearer <name>`.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<Principal> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(Principal::from)
}

/// The harness's demo authentication step, for `map_request`: the [`bearer`]
/// principal goes into the request's extensions; no header is anonymous.
pub(crate) fn authenticate<B>(mut req: Request<B>) -> Request<B> {
    if let Some(principal) = bearer(req.headers()) {
        req.extensions_mut().insert(principal);
    }
    req
}

// ---------------------------------------------------------------------------
// Bodies

/// A body made of the given chunks, each one frame, and then of whatever a feed
/// delivers. With `exact` the length is announced (`Content-Length`); without it,
/// hyper sends it chunked.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    chunks: VecDeque<Bytes>,
    exact: bool,
    feed: Option<Feed>,
}

/// Chunks written by a test, and a signal for each one the body hands out.
#[derive(Debug)]
struct Feed {
    chunks: mpsc::UnboundedReceiver<Bytes>,
    taken: mpsc::UnboundedSender<()>,
}

impl Frames {
    /// One chunk, with a known length.
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        Frames {
            chunks: VecDeque::from([bytes.into()]),
            exact: true,
            feed: None,
        }
    }

    /// Several chunks of unannounced length.
    pub(crate) fn chunked(chunks: impl IntoIterator<Item = Bytes>) -> Self {
        Frames {
            chunks: chunks.into_iter().collect(),
            exact: false,
            feed: None,
        }
    }

    /// A body of unannounced length that hands out what is written on `chunks`,
    /// signalling `taken` for each chunk, and ends when `chunks` closes.
    pub(crate) fn fed(
        chunks: mpsc::UnboundedReceiver<Bytes>,
        taken: mpsc::UnboundedSender<()>,
    ) -> Self {
        Frames {
            chunks: VecDeque::new(),
            exact: false,
            feed: Some(Feed { chunks, taken }),
        }
    }

    /// The chunks the body holds (not what a feed will deliver), in one piece.
    pub(crate) fn bytes(&self) -> Bytes {
        let mut out = Vec::new();
        for chunk in &self.chunks {
            out.extend_from_slice(chunk);
        }
        Bytes::from(out)
    }
}

impl From<Bytes> for Frames {
    fn from(bytes: Bytes) -> Self {
        Frames::full(bytes)
    }
}

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(chunk) = self.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        let Some(feed) = &mut self.feed else {
            return Poll::Ready(None);
        };
        match feed.chunks.poll_recv(cx) {
            Poll::Ready(Some(chunk)) => {
                let _ = feed.taken.send(());
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.feed.is_none()
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
// The client end

/// A fresh HTTP/1.1 connection to `addr`; the connection is driven by the
/// returned task.
pub(crate) async fn connect<B>(addr: SocketAddr) -> (SendRequest<B>, JoinHandle<()>)
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
pub(crate) async fn exchange<B>(addr: SocketAddr, request: Request<B>) -> Reply
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

/// Whether a response is an SSE stream.
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

fn response_message(headers: &HeaderMap, body: &[u8]) -> Value {
    if is_event_stream(headers) {
        sse::response(body).unwrap_or(Value::Null)
    } else {
        serde_json::from_slice(body).unwrap_or(Value::Null)
    }
}

/// An HTTP response, read whole.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// The HTTP status.
    pub(crate) status: StatusCode,
    /// The response headers.
    pub(crate) headers: HeaderMap,
    /// The body, byte for byte.
    pub(crate) body: Bytes,
    /// The JSON-RPC response: the body, or for SSE the response event; `Null` when
    /// there is none.
    pub(crate) json: Value,
}

impl Reply {
    /// `error.code`, if this is an error.
    pub(crate) fn code(&self) -> Option<i64> {
        self.json["error"]["code"].as_i64()
    }

    /// The `result` object (`Null` if absent).
    pub(crate) fn result(&self) -> &Value {
        &self.json["result"]
    }

    /// The JSON-RPC response, failing the test when the body holds none.
    #[track_caller]
    pub(crate) fn message(&self) -> &Value {
        assert!(
            !self.json.is_null(),
            "no JSON-RPC response in the body: {}",
            self.text()
        );
        &self.json
    }

    /// The body as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `Content-Type`, or "".
    pub(crate) fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Asserts an HTTP 200 success and returns the result.
    #[track_caller]
    pub(crate) fn ok(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "{}", self.text());
        assert!(
            self.json.get("error").is_none() && self.json["result"].is_object(),
            "expected a result, got {}",
            self.text()
        );
        &self.json["result"]
    }

    /// Asserts a JSON-RPC error with this code, travelling with this HTTP status,
    /// as a well-formed `application/json` body.
    #[track_caller]
    pub(crate) fn assert_error(&self, code: i64, status: u16) -> &Self {
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
    pub(crate) fn assert_capability_error(&self) -> &Self {
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

/// A response read event by event as it arrives (a listen stream, say). Dropping
/// it closes the connection.
#[derive(Debug)]
pub(crate) struct EventStream {
    /// The HTTP status.
    pub(crate) status: StatusCode,
    /// The response headers.
    pub(crate) headers: HeaderMap,
    body: Incoming,
    reader: EventReader,
    read_at: Instant,
    conn: JoinHandle<()>,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl EventStream {
    /// The next whole event, or `None` when the stream ended. No deadline.
    pub(crate) async fn next_event_raw(&mut self) -> Option<Event> {
        self.next_event_at().await.map(|(event, _)| event)
    }

    /// The next whole event and when the bytes that completed it were read.
    pub(crate) async fn next_event_at(&mut self) -> Option<(Event, Instant)> {
        loop {
            if let Some(event) = self.reader.next_event() {
                return Some((event, self.read_at));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    self.read_at = Instant::now();
                    if let Ok(data) = frame.into_data() {
                        self.reader.push(&data);
                    }
                }
                Some(Err(e)) => panic!("the event stream failed: {e}"),
                None => return None,
            }
        }
    }

    /// The next bytes read from the stream, unparsed, and when they were read
    /// (bytes already buffered come first). `None` when the stream ended.
    pub(crate) async fn next_chunk_at(&mut self) -> Option<(Bytes, Instant)> {
        if !self.reader.is_empty() {
            return Some((self.reader.take_buffered(), self.read_at));
        }
        loop {
            match self.body.frame().await? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some((data, Instant::now()));
                    }
                }
                Err(e) => panic!("the event stream failed: {e}"),
            }
        }
    }

    /// Everything left on the stream, as one JSON document (for answers that are not
    /// streams at all).
    pub(crate) async fn json(mut self) -> Value {
        let mut bytes = BytesMut::new();
        while let Some((chunk, _)) = within("the rest of the answer", self.next_chunk_at()).await {
            bytes.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&bytes).expect("a JSON answer")
    }

    /// The next whole event within the deadline; `None` when the stream ended.
    pub(crate) async fn next_event(&mut self) -> Option<Event> {
        within("the next event", self.next_event_raw()).await
    }

    /// The message of the next event that carries one (keep-alive comments are
    /// skipped); it must be one JSON document on one `data` line.
    pub(crate) async fn next_message(&mut self) -> Value {
        within("the next message", async {
            loop {
                match self.next_event_raw().await {
                    Some(event) if event.data.is_some() => return event.message(),
                    Some(_) => continue,
                    None => panic!("the event stream ended"),
                }
            }
        })
        .await
    }

    /// The next `notifications/tasks` params, failing on any other message.
    pub(crate) async fn next_task(&mut self) -> Value {
        let message = self.next_message().await;
        assert_eq!(message["method"], "notifications/tasks", "{message}");
        message["params"].clone()
    }

    /// The snapshot that follows the acknowledgment: one `notifications/tasks` per
    /// agreed task, in any order, returned by task id.
    pub(crate) async fn snapshot(&mut self, tasks: usize) -> HashMap<String, Value> {
        let mut seen = HashMap::new();
        while seen.len() < tasks {
            let params = self.next_task().await;
            let id = params["taskId"].as_str().expect("a task id").to_owned();
            assert!(seen.insert(id, params).is_none(), "one snapshot per task");
        }
        seen
    }

    /// Reads task notifications until one satisfies `done`; returns all of them.
    pub(crate) async fn tasks_until(&mut self, done: impl Fn(&Value) -> bool) -> Vec<Value> {
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

/// A client for one server; every exchange uses a fresh connection, and each
/// request it builds gets the next JSON-RPC id, from 1.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    addr: SocketAddr,
    next_id: Arc<AtomicI64>,
}

impl Client {
    /// A client for the server at `addr`.
    pub(crate) fn new(addr: SocketAddr) -> Client {
        Client {
            addr,
            next_id: Arc::new(AtomicI64::new(1)),
        }
    }

    /// A modern request for `method`, declaring the tasks extension unless told
    /// otherwise.
    pub(crate) fn request(&self, method: &str) -> Call<'_> {
        Call::on(
            self,
            method,
            json!(self.next_id.fetch_add(1, Ordering::Relaxed)),
        )
    }

    /// Sends a raw request (the host header is added) and reads the whole reply.
    pub(crate) async fn send<B>(&self, mut request: Request<B>) -> Reply
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        request.headers_mut().insert(
            header::HOST,
            HeaderValue::from_str(&self.addr.to_string()).unwrap(),
        );
        exchange(self.addr, request).await
    }

    /// Sends a raw request (the host header is added) and returns the response as
    /// an [`EventStream`] once its head arrived.
    pub(crate) async fn open<B>(&self, mut request: Request<B>) -> EventStream
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        request.headers_mut().insert(
            header::HOST,
            HeaderValue::from_str(&self.addr.to_string()).unwrap(),
        );
        let (mut sender, conn) = connect(self.addr).await;
        let response = within("a response head", sender.send_request(request))
            .await
            .expect("a response");
        let (head, body) = response.into_parts();
        EventStream {
            status: head.status,
            headers: head.headers,
            body,
            reader: EventReader::new(),
            read_at: Instant::now(),
            conn,
        }
    }

    /// `tools/call` of `tool` as `principal`.
    pub(crate) async fn call_tool(
        &self,
        tool: &str,
        arguments: Value,
        declare: bool,
        principal: Option<&str>,
    ) -> Reply {
        self.request("tools/call")
            .params(json!({"name": tool, "arguments": arguments}))
            .declare(declare)
            .principal_opt(principal)
            .send()
            .await
    }

    /// Calls a tool that should become a task; returns the `CreateTaskResult`.
    pub(crate) async fn create_task(
        &self,
        tool: &str,
        arguments: Value,
        principal: Option<&str>,
    ) -> Value {
        let reply = self.call_tool(tool, arguments, true, principal).await;
        let result = reply.ok().clone();
        assert_eq!(result["resultType"], "task", "{}", reply.text());
        result
    }

    /// Same as [`create_task`](Self::create_task), returning only the id.
    pub(crate) async fn create_task_id(
        &self,
        tool: &str,
        arguments: Value,
        principal: Option<&str>,
    ) -> String {
        let result = self.create_task(tool, arguments, principal).await;
        result["taskId"].as_str().unwrap().to_owned()
    }

    /// `method` with `params`, the extension declared, as `principal`.
    pub(crate) async fn task_method(
        &self,
        method: &str,
        params: Value,
        principal: Option<&str>,
    ) -> Reply {
        self.request(method)
            .params(params)
            .principal_opt(principal)
            .send()
            .await
    }

    /// `tasks/get` with the extension declared.
    pub(crate) async fn get(&self, id: &str, principal: Option<&str>) -> Reply {
        self.task_method("tasks/get", json!({"taskId": id}), principal)
            .await
    }

    /// `tasks/update` with the extension declared.
    pub(crate) async fn update(
        &self,
        id: &str,
        responses: Value,
        principal: Option<&str>,
    ) -> Reply {
        let params = json!({"taskId": id, "inputResponses": responses});
        self.task_method("tasks/update", params, principal).await
    }

    /// `tasks/cancel` with the extension declared.
    pub(crate) async fn cancel(&self, id: &str, principal: Option<&str>) -> Reply {
        self.task_method("tasks/cancel", json!({"taskId": id}), principal)
            .await
    }

    /// The task as `tasks/get` returns it, without `resultType` and `_meta`: what a
    /// notification must carry.
    pub(crate) async fn get_detailed(&self, id: &str, principal: Option<&str>) -> Value {
        let reply = self.get(id, principal).await;
        let mut result = reply.ok().clone();
        let object = result.as_object_mut().unwrap();
        object.remove("resultType");
        object.remove("_meta");
        result
    }

    /// Polls `tasks/get` until `done` holds for the result; every reply is also
    /// handed to `inspect`. Fails the test after [`wait::DEADLINE`].
    pub(crate) async fn wait_for_inspecting(
        &self,
        id: &str,
        principal: Option<&str>,
        done: impl Fn(&Value) -> bool,
        inspect: impl Fn(&Reply),
    ) -> Value {
        let mut last = Value::Null;
        let reached = wait::poll(async || {
            let reply = self.get(id, principal).await;
            inspect(&reply);
            last = reply.ok().clone();
            done(&last).then(|| last.clone())
        })
        .await;
        reached.unwrap_or_else(|| panic!("the task never reached the expected state; last: {last}"))
    }

    /// Polls `tasks/get` until `done` holds for the result.
    pub(crate) async fn wait_for(
        &self,
        id: &str,
        principal: Option<&str>,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        self.wait_for_inspecting(id, principal, done, |_| {}).await
    }

    /// Polls until the task has `status`.
    pub(crate) async fn wait_for_status(
        &self,
        id: &str,
        principal: Option<&str>,
        status: &str,
    ) -> Value {
        self.wait_for(id, principal, |t| t["status"] == status)
            .await
    }

    /// Polls until the task is terminal.
    pub(crate) async fn wait_for_end(&self, id: &str, principal: Option<&str>) -> Value {
        self.wait_for(id, principal, |t| {
            matches!(
                t["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
        })
        .await
    }

    /// Opens a listen stream with `notifications` as the filter.
    pub(crate) async fn listen_with(
        &self,
        principal: Option<&str>,
        id: Value,
        notifications: Value,
        declare: bool,
    ) -> EventStream {
        self.request("subscriptions/listen")
            .id(id)
            .params(json!({"notifications": notifications}))
            .declare(declare)
            .principal_opt(principal)
            .open()
            .await
    }

    /// Opens a listen stream naming `task_ids`, declaring the extension.
    pub(crate) async fn listen(
        &self,
        principal: Option<&str>,
        id: Value,
        task_ids: &[&str],
    ) -> EventStream {
        self.listen_with(principal, id, json!({"taskIds": task_ids}), true)
            .await
    }
}
