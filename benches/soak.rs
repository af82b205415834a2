//! Soak: mixed traffic through the layer over real loopback HTTP, for minutes on
//! end, on each store, watching errors and the process's memory.
//!
//! Several client tasks, each with its own keep-alive connection and principal
//! (`Authorization: Bearer <name>`), loop over a weighted mix:
//!
//! - creates: `tools/call` of `work` (completes or fails after a short random delay,
//!   or holds until cancelled or expired) and `ask` (goes `input_required`, completes
//!   once answered);
//! - `tasks/get` polls of the caller's own live tasks;
//! - `tasks/update` answers to its `input_required` tasks;
//! - `tasks/cancel` of its held tasks;
//! - `subscriptions/listen` streams naming its tasks, read up to the acknowledgment
//!   and a little beyond, then closed;
//! - disconnects mid-request: a create, a poll or a listen whose response (or its
//!   head) is dropped after a few hundred microseconds, together with its connection.
//!
//! Besides them, in 15 s bursts once a minute, one flooder fills its principal's
//! task cap (1 000, the default) and another, rotating over four principals, fills
//! the row cap (5 000 here), with tasks of 8 s, pausing 20 ms after each refusal; a listen hog opens 20 streams at once against the
//! per-principal cap of 16. Tasks live 30 s and the janitor sweeps every 3 s, so
//! rows churn all the time.
//!
//! The only errors allowed are the cap refusals: -32603 "Task limit reached" and
//! "Too many listen streams". Anything else is a failure: it is printed, and the
//! bench exits non-zero at the end.
//!
//! Every 30 s it prints requests/s, errors by kind, the store's live tasks and the
//! process RSS (`VmRSS`); at the end a summary per store, with the RSS after warm-up
//! (`SOAK_WARM_SECS`, default 2 minutes, at most half the run) against the RSS at the
//! end.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379 \
//!   cargo bench --bench soak --features postgres,redis
//! ```
//!
//! `SOAK_SECS` sets the duration per store (default 600), `SOAK_STORE` picks
//! `memory`, `postgres`, `redis` or `all` (default). RELIABILITY.md has the results.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use mcp_tasks::body::RequestBody;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::{
    MemoryStore, TaskContext, TaskId, TaskSpec, TasksLayer, store::TaskStore, wire::RpcError,
    worker::Tasks,
};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use support::http::{Frames, bearer, serve_layered};
use support::requests::Call;
use support::rss_kib;
use support::sse::EventReader;

/// How long a task lives.
const TTL: Duration = Duration::from_secs(30);
/// How often the janitor sweeps.
const JANITOR_INTERVAL: Duration = Duration::from_secs(3);
/// The row cap of the soak (the per-principal cap stays at its default, 1 000).
const MAX_ROWS: usize = 5_000;
/// A client only touches its tasks younger than this (they live [`TTL`]).
const TRACK_FOR: Duration = Duration::from_secs(22);
/// The longest one exchange may take before it counts as a failure.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);
/// The interval between reports.
const REPORT_EVERY: Duration = Duration::from_secs(30);
/// Regular principals, and client tasks per principal.
const PRINCIPALS: usize = 4;
const CLIENTS_PER_PRINCIPAL: usize = 2;

// ---------------------------------------------------------------------------
// Small helpers

/// A small fast generator; each client seeds its own.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let id = TaskId::random();
        let bytes = id.as_bytes();
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&bytes[..8]);
        Rng(u64::from_le_bytes(seed) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn millis(&mut self, max: u64) -> Duration {
        Duration::from_millis(self.next() % max.max(1))
    }

    fn micros(&mut self, max: u64) -> Duration {
        Duration::from_micros(self.next() % max.max(1))
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

// ---------------------------------------------------------------------------
// Counters

/// What the clients saw, shared by all of them.
#[derive(Default)]
struct Stats {
    /// Requests that got a whole answer (or an acknowledged listen stream).
    requests: AtomicU64,
    /// Requests dropped on purpose mid-way.
    disconnects: AtomicU64,
    /// Operations by name that succeeded.
    ops: Mutex<BTreeMap<&'static str, u64>>,
    /// Allowed refusals by kind.
    refusals: Mutex<BTreeMap<String, u64>>,
    /// Failures by kind.
    failures: Mutex<BTreeMap<String, u64>>,
    /// Worker outcomes (not errors of the layer): how each spawned worker ended.
    workers: Mutex<BTreeMap<String, u64>>,
    /// Failures printed so far (the first ones are printed whole).
    printed: AtomicU64,
}

fn bump<K: Ord>(map: &Mutex<BTreeMap<K, u64>>, key: K) {
    *map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_default() += 1;
}

fn snapshot<K: Ord + Clone>(map: &Mutex<BTreeMap<K, u64>>) -> BTreeMap<K, u64> {
    map.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

impl Stats {
    fn ok(&self, op: &'static str) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        bump(&self.ops, op);
    }

    fn refused(&self, kind: String) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        bump(&self.refusals, kind);
    }

    /// An unexpected answer: counted by `kind`, and printed whole (the first 50).
    fn failed(&self, op: &str, kind: &str, detail: &str) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        bump(&self.failures, format!("{op}: {kind}"));
        if self.printed.fetch_add(1, Ordering::Relaxed) < 50 {
            eprintln!("FAILURE {op}: {kind}: {detail}");
        }
    }
}

// ---------------------------------------------------------------------------
// The inner MCP service

/// The inner service's response body: one chunk, then either the end or (for a
/// listen stream) nothing more until the layer drops it.
struct InnerBody {
    chunk: Option<Bytes>,
    hold: bool,
}

impl Body for InnerBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.chunk.take() {
            Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            // Nothing ever wakes it: the stream stays open until dropped.
            None if self.hold => Poll::Pending,
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunk.is_none() && !self.hold
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.chunk, self.hold) {
            (Some(c), false) => SizeHint::with_exact(c.len() as u64),
            (None, false) => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

fn inner_reply(content_type: &'static str, chunk: Bytes, hold: bool) -> Response<InnerBody> {
    let mut response = Response::new(InnerBody {
        chunk: Some(chunk),
        hold,
    });
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn inner_json(message: &Value) -> Response<InnerBody> {
    inner_reply(
        "application/json",
        Bytes::from(serde_json::to_vec(message).unwrap_or_default()),
        false,
    )
}

/// Counts the workers alive; a worker holds one for its whole life.
struct Alive(Arc<AtomicI64>);

impl Alive {
    fn new(gauge: &Arc<AtomicI64>) -> Alive {
        gauge.fetch_add(1, Ordering::Relaxed);
        Alive(gauge.clone())
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the inner service's tools share.
#[derive(Clone)]
struct Backend {
    tasks: Tasks,
    alive: Arc<AtomicI64>,
    stats: Arc<Stats>,
}

impl Backend {
    /// The task a tool asks for: `work` with `then` = `complete` | `fail` | `hold`,
    /// or `ask`.
    fn spec(&self, tool: &str, args: &Value) -> TaskSpec {
        let then = args["then"].as_str().unwrap_or("hold").to_owned();
        let delay = Duration::from_millis(args["delay_ms"].as_u64().unwrap_or(0));
        let mut spec = TaskSpec::new().with_status_message("Queued");
        if let Some(ms) = args["ttl_ms"].as_u64() {
            spec = spec.with_ttl(Duration::from_millis(ms));
        }
        let backend = self.clone();
        match (tool, then.as_str()) {
            ("work", "hold") => spec,
            ("work", _) => spec.with_start(move |id| {
                let alive = Alive::new(&backend.alive);
                tokio::spawn(async move {
                    let _alive = alive;
                    tokio::time::sleep(delay).await;
                    let tasks = &backend.tasks;
                    let outcome = if then == "complete" {
                        match tasks.progress(&id, "Working").await {
                            Ok(()) => {
                                tokio::time::sleep(delay).await;
                                let result = json!({"resultType": "complete",
                                    "content": [{"type": "text", "text": "done"}]});
                                tasks.complete(&id, result).await
                            }
                            Err(e) => Err(e),
                        }
                    } else {
                        tasks.fail(&id, RpcError::internal("backend crashed")).await
                    };
                    backend.worker_ended(&then, outcome.err());
                });
            }),
            _ => spec.with_start(move |id| {
                let alive = Alive::new(&backend.alive);
                tokio::spawn(async move {
                    let _alive = alive;
                    let tasks = &backend.tasks;
                    let question = InputRequest::confirm("Go on?", "ok");
                    let ask = InputRequests::new()
                        .with("go", question)
                        .with_status_message("Waiting for a go-ahead");
                    if let Err(e) = tasks.require_input(&id, ask).await {
                        backend.worker_ended("ask (require_input)", Some(e));
                        return;
                    }
                    // Longer than the task lives: a wait that outlives its task
                    // shows here instead of piling up.
                    let waited = tokio::time::timeout(TTL * 3, tasks.wait_for_input(&id)).await;
                    let outcome = match waited {
                        Err(_) => {
                            bump(
                                &backend.stats.workers,
                                "ask: wait_for_input timed out".into(),
                            );
                            return;
                        }
                        Ok(Err(e)) => Err(e),
                        Ok(Ok(_answers)) => {
                            let result = json!({"resultType": "complete",
                                "content": [{"type": "text", "text": "went on"}]});
                            tasks.complete(&id, result).await
                        }
                    };
                    backend.worker_ended("ask", outcome.err());
                });
            }),
        }
    }

    fn worker_ended(&self, what: &str, error: Option<mcp_tasks::error::TaskError>) {
        let key = match error {
            None => format!("{what}: ok"),
            Some(e) if e.is_terminal() => format!("{what}: task ended meanwhile"),
            Some(e) => format!("{what}: {e}"),
        };
        bump(&self.stats.workers, key);
    }

    async fn handle(self, request: Request<RequestBody<Incoming>>) -> Response<InnerBody> {
        let context = TaskContext::from_extensions(request.extensions()).cloned();
        let body = request
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        match message["method"].as_str().unwrap_or("") {
            "tools/call" => {
                let params = &message["params"];
                let tool = params["name"].as_str().unwrap_or("");
                let made = context
                    .map(|ctx| ctx.create(self.spec(tool, &params["arguments"])))
                    .is_some_and(|r| r.is_ok());
                let text = if made {
                    "replaced by the task"
                } else {
                    "ran synchronously"
                };
                inner_json(&json!({"jsonrpc": "2.0", "id": id, "result": {
                    "resultType": "complete", "content": [{"type": "text", "text": text}]}}))
            }
            "subscriptions/listen" => {
                let ack = json!({"jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id},
                               "notifications": {}}});
                let event = Bytes::from(format!("event: message\ndata: {ack}\n\n"));
                inner_reply("text/event-stream", event, true)
            }
            other => inner_json(&json!({"jsonrpc": "2.0", "id": id,
                "result": {"resultType": "complete", "echo": other}})),
        }
    }
}

// ---------------------------------------------------------------------------
// The client end

/// One keep-alive HTTP/1.1 connection, reopened after a disconnect or an error.
struct Conn {
    addr: SocketAddr,
    sender: Option<(SendRequest<Frames>, JoinHandle<()>)>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.close();
    }
}

async fn connect(addr: SocketAddr) -> Result<(SendRequest<Frames>, JoinHandle<()>), String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("TCP_NODELAY: {e}"))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((sender, task))
}

/// A whole answer.
struct Answer {
    status: StatusCode,
    content_type: String,
    body: Bytes,
}

impl Answer {
    /// The JSON-RPC response in the body (JSON, or the response event of SSE).
    fn message(&self) -> Value {
        if self.content_type.starts_with("text/event-stream") {
            support::sse::response(&self.body).unwrap_or(Value::Null)
        } else {
            serde_json::from_slice(&self.body).unwrap_or(Value::Null)
        }
    }

    fn text(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        text.chars().take(600).collect()
    }
}

impl Conn {
    fn new(addr: SocketAddr) -> Conn {
        Conn { addr, sender: None }
    }

    fn close(&mut self) {
        if let Some((_, task)) = self.sender.take() {
            task.abort();
        }
    }

    async fn ready(&mut self) -> Result<&mut SendRequest<Frames>, String> {
        if self.sender.as_ref().is_some_and(|(s, _)| s.is_closed()) {
            self.close();
        }
        if self.sender.is_none() {
            self.sender = Some(connect(self.addr).await?);
        }
        let (sender, _) = self.sender.as_mut().expect("just set");
        sender
            .ready()
            .await
            .map_err(|e| format!("not ready: {e}"))?;
        Ok(sender)
    }

    fn request(&self, call: Call<'_>) -> Request<Frames> {
        call.header("host", &self.addr.to_string()).build()
    }

    /// Sends `call` and reads the whole answer; on any error the connection is
    /// dropped.
    async fn send(&mut self, call: Call<'_>) -> Result<Answer, String> {
        let request = self.request(call);
        let result = tokio::time::timeout(EXCHANGE_TIMEOUT, async {
            let sender = self.ready().await?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("send: {e}"))?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            Ok(Answer {
                status: parts.status,
                content_type: parts
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned(),
                body,
            })
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {EXCHANGE_TIMEOUT:?}")));
        if result.is_err() {
            self.close();
        }
        result
    }

    /// Sends `call` and drops it, with the connection, after `after`.
    async fn send_and_drop(&mut self, call: Call<'_>, after: Duration) {
        let request = self.request(call);
        let _ = tokio::time::timeout(after, async {
            let sender = self.ready().await?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("send: {e}"))?;
            // Read a little of the body at most.
            let mut body = response.into_body();
            let _ = body.frame().await;
            Ok::<(), String>(())
        })
        .await;
        self.close();
    }
}

/// How an answer came out.
enum Outcome {
    /// A result.
    Result(Value),
    /// An allowed refusal, by kind.
    Refused(String),
    /// Anything else, with a description.
    Unexpected(String, String),
}

fn classify(answer: Result<Answer, String>) -> Outcome {
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => return Outcome::Unexpected("transport".into(), e),
    };
    let message = answer.message();
    if let Some(error) = message.get("error") {
        let code = error["code"].as_i64().unwrap_or(0);
        let text = error["message"].as_str().unwrap_or("");
        let limit = error["data"]["limit"].as_str().unwrap_or("?");
        return match (code, text) {
            (-32603, "Task limit reached") => {
                Outcome::Refused(format!("Task limit reached ({limit})"))
            }
            (-32603, "Too many listen streams") => {
                Outcome::Refused(format!("Too many listen streams ({limit})"))
            }
            _ => Outcome::Unexpected(
                format!("error {code} {text:?} (HTTP {})", answer.status.as_u16()),
                answer.text(),
            ),
        };
    }
    if answer.status != StatusCode::OK || !message["result"].is_object() {
        return Outcome::Unexpected(
            format!("HTTP {} without a result", answer.status.as_u16()),
            answer.text(),
        );
    }
    Outcome::Result(message["result"].clone())
}

/// What a client knows of one of its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Complete,
    Fail,
    Hold,
    Ask,
}

struct Tracked {
    id: String,
    kind: Kind,
    created: Instant,
    /// Cancelled, or answered: no more updates or cancels.
    settled: bool,
}

const STATUSES: &[&str] = &[
    "working",
    "input_required",
    "completed",
    "failed",
    "cancelled",
];

/// One client task: a principal, a connection, its own tasks.
struct Client {
    principal: String,
    conn: Conn,
    rng: Rng,
    tasks: Vec<Tracked>,
    stats: Arc<Stats>,
    next_id: i64,
}

impl Client {
    fn new(addr: SocketAddr, principal: String, stats: Arc<Stats>) -> Client {
        Client {
            principal,
            conn: Conn::new(addr),
            rng: Rng::seeded(),
            tasks: Vec::new(),
            stats,
            next_id: 1,
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Call<'static> {
        self.next_id += 1;
        Call::new(method)
            .id(json!(self.next_id))
            .params(params)
            .principal(&self.principal)
    }

    fn prune(&mut self) {
        self.tasks.retain(|t| t.created.elapsed() < TRACK_FOR);
        if self.tasks.len() > 300 {
            let excess = self.tasks.len() - 300;
            self.tasks.drain(..excess);
        }
    }

    fn pick(&mut self, want: impl Fn(&Tracked) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| want(&self.tasks[i]))
            .collect();
        (!candidates.is_empty()).then(|| candidates[self.rng.below(candidates.len())])
    }

    fn record(&mut self, op: &'static str, outcome: Outcome) -> Option<Value> {
        match outcome {
            Outcome::Result(result) => {
                self.stats.ok(op);
                Some(result)
            }
            Outcome::Refused(kind) => {
                self.stats.refused(kind);
                None
            }
            Outcome::Unexpected(kind, detail) => {
                self.stats.failed(op, &kind, &detail);
                None
            }
        }
    }

    fn create_call(&mut self) -> (Call<'static>, Kind) {
        let (tool, then, kind) = match self.rng.below(10) {
            0..=2 => ("work", "complete", Kind::Complete),
            3 => ("work", "fail", Kind::Fail),
            4..=6 => ("work", "hold", Kind::Hold),
            _ => ("ask", "", Kind::Ask),
        };
        let delay = self.rng.below(400);
        let params = json!({"name": tool, "arguments": {"then": then, "delay_ms": delay}});
        (self.call("tools/call", params), kind)
    }

    async fn create(&mut self) {
        let (call, kind) = self.create_call();
        let answer = self.conn.send(call).await;
        let outcome = classify(answer);
        let Some(result) = self.record("create", outcome) else {
            return;
        };
        match (result["resultType"].as_str(), result["taskId"].as_str()) {
            (Some("task"), Some(id)) => self.tasks.push(Tracked {
                id: id.to_owned(),
                kind,
                created: Instant::now(),
                settled: false,
            }),
            _ => self
                .stats
                .failed("create", "no task made", &result.to_string()),
        }
    }

    async fn get(&mut self, index: usize) -> Option<Value> {
        let id = self.tasks[index].id.clone();
        let call = self.call("tasks/get", json!({"taskId": id}));
        let answer = self.conn.send(call).await;
        let result = self.record("get", classify(answer))?;
        let status = result["status"].as_str().unwrap_or("");
        if result["taskId"] != json!(id) || !STATUSES.contains(&status) {
            self.stats
                .failed("get", "a malformed task", &result.to_string());
            return None;
        }
        let kind = self.tasks[index].kind;
        let possible = match kind {
            Kind::Complete => ["working", "completed"].contains(&status),
            Kind::Fail => ["working", "failed"].contains(&status),
            Kind::Hold => ["working", "cancelled"].contains(&status),
            Kind::Ask => ["working", "input_required", "completed"].contains(&status),
        };
        if !possible {
            self.stats.failed(
                "get",
                &format!("status {status} for a {kind:?} task"),
                &result.to_string(),
            );
        }
        Some(result)
    }

    async fn poll(&mut self) {
        if let Some(index) = self.pick(|_| true) {
            self.get(index).await;
        } else {
            self.create().await;
        }
    }

    async fn answer(&mut self) {
        let Some(index) = self.pick(|t| t.kind == Kind::Ask && !t.settled) else {
            return self.create().await;
        };
        let Some(task) = self.get(index).await else {
            return;
        };
        if task["status"] != "input_required" {
            return;
        }
        let Some(key) = task["inputRequests"]
            .as_object()
            .and_then(|m| m.keys().next().cloned())
        else {
            self.stats.failed(
                "get",
                "input_required without inputRequests",
                &task.to_string(),
            );
            return;
        };
        let id = self.tasks[index].id.clone();
        let responses = json!({key: {"action": "accept", "content": {"ok": true}}});
        let call = self.call(
            "tasks/update",
            json!({"taskId": id, "inputResponses": responses}),
        );
        let answer = self.conn.send(call).await;
        self.tasks[index].settled = true;
        self.record("update", classify(answer));
    }

    async fn cancel(&mut self) {
        let Some(index) = self.pick(|t| t.kind == Kind::Hold && !t.settled) else {
            return self.create().await;
        };
        let id = self.tasks[index].id.clone();
        let call = self.call("tasks/cancel", json!({"taskId": id}));
        let answer = self.conn.send(call).await;
        self.tasks[index].settled = true;
        self.record("cancel", classify(answer));
    }

    fn listen_call(&mut self) -> Call<'static> {
        let count = 1 + self.rng.below(8);
        let mut ids: Vec<String> = Vec::new();
        for _ in 0..count {
            if let Some(i) = self.pick(|_| true) {
                ids.push(self.tasks[i].id.clone());
            }
        }
        self.call(
            "subscriptions/listen",
            json!({"notifications": {"taskIds": ids}}),
        )
    }

    /// Opens a listen stream on a connection of its own, reads it up to the
    /// acknowledgment and for `linger` more, and closes it.
    async fn listen(&mut self, linger: Duration) {
        let call = self.listen_call();
        let outcome = listen_once(self.conn.addr, call, linger).await;
        self.record("listen", outcome);
    }

    async fn disconnect(&mut self) {
        let after = self.rng.micros(1_500);
        let call = match self.rng.below(3) {
            0 => self.create_call().0,
            1 => match self.pick(|_| true) {
                Some(i) => {
                    let id = self.tasks[i].id.clone();
                    self.call("tasks/get", json!({"taskId": id}))
                }
                None => self.create_call().0,
            },
            _ => self.listen_call(),
        };
        self.conn.send_and_drop(call, after).await;
        self.stats.disconnects.fetch_add(1, Ordering::Relaxed);
    }

    async fn step(&mut self) {
        self.prune();
        match self.rng.below(100) {
            0..=24 => self.create().await,
            25..=59 => self.poll().await,
            60..=71 => self.answer().await,
            72..=79 => self.cancel().await,
            80..=89 => {
                let linger = self.rng.millis(100);
                self.listen(linger).await
            }
            _ => self.disconnect().await,
        }
    }
}

/// One listen stream: the acknowledgment must come first; a refusal is a JSON
/// error.
async fn listen_once(addr: SocketAddr, call: Call<'_>, linger: Duration) -> Outcome {
    let request: Request<Frames> = call.header("host", &addr.to_string()).build();
    let opened = tokio::time::timeout(EXCHANGE_TIMEOUT, async {
        let (mut sender, task) = connect(addr).await?;
        let guard = AbortOnDrop(task);
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut body = response.into_body();
        if !content_type.starts_with("text/event-stream") {
            let body = body
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            return Ok(Err(Answer {
                status,
                content_type,
                body,
            }));
        }
        let mut reader = EventReader::new();
        let first = loop {
            if let Some(event) = reader.next_event() {
                if let Some(message) = event.json() {
                    break message;
                }
                continue;
            }
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        reader.push(&data);
                    }
                }
                Some(Err(e)) => return Err(format!("stream: {e}")),
                None => return Err("the stream ended before its acknowledgment".into()),
            }
        };
        Ok(Ok((first, body, guard)))
    })
    .await
    .unwrap_or_else(|_| Err(format!("no acknowledgment within {EXCHANGE_TIMEOUT:?}")));
    match opened {
        Err(e) => Outcome::Unexpected("listen transport".into(), e),
        Ok(Err(answer)) => classify(Ok(answer)),
        Ok(Ok((first, mut body, guard))) => {
            if first["method"] != "notifications/subscriptions/acknowledged" {
                return Outcome::Unexpected(
                    "listen: no acknowledgment first".into(),
                    first.to_string(),
                );
            }
            let _ = tokio::time::timeout(linger, async {
                while let Some(Ok(_)) = body.frame().await {}
            })
            .await;
            drop(body);
            drop(guard);
            Outcome::Result(first)
        }
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long a flood task lives.
const FLOOD_TTL_MS: u64 = 8_000;

/// Whether the flood bursts are on: 15 s of every minute, from 10 s in.
fn flooding(started: Instant) -> bool {
    let t = started.elapsed().as_secs();
    t >= 10 && (t - 10) % 60 < 15
}

/// Creates held tasks back to back during the bursts, as `principals` in turn.
async fn flooder(
    addr: SocketAddr,
    principals: Vec<String>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    started: Instant,
) {
    let mut client = Client::new(addr, principals[0].clone(), stats);
    let mut turn = 0;
    while !stop.load(Ordering::Relaxed) {
        if !flooding(started) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        client.principal = principals[turn % principals.len()].clone();
        turn += 1;
        let call = client.call(
            "tools/call",
            json!({"name": "work", "arguments": {"then": "hold", "ttl_ms": FLOOD_TTL_MS}}),
        );
        let answer = client.conn.send(call).await;
        match client.record("create (flood)", classify(answer)) {
            Some(result) if result["resultType"] != "task" => {
                client
                    .stats
                    .failed("create (flood)", "no task made", &result.to_string());
            }
            Some(_) => {}
            // At the cap: keep it full without spinning on refusals.
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Every 5 s: 20 listen streams at once for one principal (the cap is 16), held
/// for 2 s, over a held task refreshed as it ages.
async fn listen_hog(addr: SocketAddr, stats: Arc<Stats>, stop: Arc<AtomicBool>) {
    let mut client = Client::new(addr, "hog".into(), stats);
    while !stop.load(Ordering::Relaxed) {
        client.prune();
        if client.tasks.is_empty() {
            let call = client.call(
                "tools/call",
                json!({"name": "work", "arguments": {"then": "hold"}}),
            );
            let answer = client.conn.send(call).await;
            if let Some(result) = client.record("create", classify(answer))
                && let Some(id) = result["taskId"].as_str()
            {
                client.tasks.push(Tracked {
                    id: id.to_owned(),
                    kind: Kind::Hold,
                    created: Instant::now(),
                    settled: false,
                });
            }
        }
        let calls: Vec<Call<'static>> = (0..20).map(|_| client.listen_call()).collect();
        let streams = calls
            .into_iter()
            .map(|call| listen_once(addr, call, Duration::from_secs(2)));
        for outcome in futures_join_all(streams).await {
            client.record("listen", outcome);
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// Runs the futures concurrently (on this task) and returns their outputs.
async fn futures_join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in set.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("ready")).collect()
}

// ---------------------------------------------------------------------------
// Stores

/// How to count a store's live tasks.
enum Live {
    Memory(Arc<MemoryStore>),
    #[cfg(feature = "postgres")]
    Postgres(mcp_tasks::sqlx::PgPool, String),
    #[cfg(feature = "redis")]
    Redis(mcp_tasks::redis::aio::MultiplexedConnection, String),
}

impl Live {
    async fn count(&self) -> String {
        match self {
            Live::Memory(store) => format!("{} rows", store.len()),
            #[cfg(feature = "postgres")]
            Live::Postgres(pool, table) => {
                let sql = format!("SELECT count(*) FROM \"{table}\"");
                match mcp_tasks::sqlx::query_scalar::<_, i64>(mcp_tasks::sqlx::AssertSqlSafe(sql))
                    .fetch_one(pool)
                    .await
                {
                    Ok(n) => format!("{n} rows"),
                    Err(e) => format!("? rows ({e})"),
                }
            }
            #[cfg(feature = "redis")]
            Live::Redis(conn, prefix) => {
                let mut conn = conn.clone();
                let counted: Result<i64, _> = mcp_tasks::redis::cmd("ZCARD")
                    .arg(format!("{prefix}expiry"))
                    .query_async(&mut conn)
                    .await;
                match counted {
                    Ok(n) => format!("{n} in {prefix}expiry"),
                    Err(e) => format!("? ({e})"),
                }
            }
        }
    }

    /// Removes the scratch table or keys.
    async fn cleanup(&self) {
        match self {
            Live::Memory(_) => {}
            #[cfg(feature = "postgres")]
            Live::Postgres(pool, table) => {
                let sql = format!("DROP TABLE IF EXISTS \"{table}\"");
                if let Err(e) = mcp_tasks::sqlx::query(mcp_tasks::sqlx::AssertSqlSafe(sql))
                    .execute(pool)
                    .await
                {
                    eprintln!("could not drop {table}: {e}");
                }
            }
            #[cfg(feature = "redis")]
            Live::Redis(conn, prefix) => {
                let mut conn = conn.clone();
                let mut cursor: u64 = 0;
                loop {
                    let scanned: Result<(u64, Vec<String>), _> = mcp_tasks::redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(format!("{prefix}*"))
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await;
                    let Ok((next, keys)) = scanned else { return };
                    if !keys.is_empty() {
                        let _: Result<u64, _> = mcp_tasks::redis::cmd("DEL")
                            .arg(&keys)
                            .query_async(&mut conn)
                            .await;
                    }
                    if next == 0 {
                        return;
                    }
                    cursor = next;
                }
            }
        }
    }
}

async fn open_store(name: &str) -> Result<(Arc<dyn TaskStore>, Live), String> {
    match name {
        "memory" => {
            let store = Arc::new(MemoryStore::new());
            Ok((store.clone(), Live::Memory(store)))
        }
        #[cfg(feature = "postgres")]
        "postgres" => {
            let url = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
            let pool = mcp_tasks::sqlx::postgres::PgPoolOptions::new()
                .max_connections(8)
                .connect(&url)
                .await
                .map_err(|e| format!("connect to {url}: {e}"))?;
            let table = support::stores::unique_name("mcp_tasks_soak_");
            let store = mcp_tasks::PostgresStore::new(pool.clone())
                .with_table(&table)
                .map_err(|e| e.to_string())?;
            store.migrate().await.map_err(|e| format!("migrate: {e}"))?;
            store.listen().await.map_err(|e| format!("listen: {e}"))?;
            println!("postgres: table {table}");
            Ok((Arc::new(store), Live::Postgres(pool, table)))
        }
        #[cfg(feature = "redis")]
        "redis" => {
            let url = std::env::var("REDIS_URL").map_err(|_| "REDIS_URL is not set")?;
            let prefix = format!("{}:", support::stores::unique_name("mcp-tasks-soak:"));
            let store = mcp_tasks::RedisStore::connect(url.as_str())
                .await
                .map_err(|e| format!("connect to {url}: {e}"))?
                .with_prefix(&prefix);
            let client = mcp_tasks::redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            println!("redis: prefix {prefix}");
            Ok((Arc::new(store), Live::Redis(conn, prefix)))
        }
        #[cfg(not(feature = "postgres"))]
        "postgres" => {
            Err("the postgres store is not built: run with --features postgres,redis".into())
        }
        #[cfg(not(feature = "redis"))]
        "redis" => Err("the redis store is not built: run with --features postgres,redis".into()),
        other => Err(format!(
            "unknown store {other:?} (memory, postgres, redis, all)"
        )),
    }
}

// ---------------------------------------------------------------------------
// One soak

struct Summary {
    store: String,
    duration: Duration,
    requests: u64,
    disconnects: u64,
    ops: BTreeMap<&'static str, u64>,
    refusals: BTreeMap<String, u64>,
    failures: BTreeMap<String, u64>,
    workers: BTreeMap<String, u64>,
    rss_warm: Option<(Duration, u64)>,
    rss_end: u64,
}

impl Summary {
    fn growth(&self) -> Option<f64> {
        self.rss_warm
            .map(|(_, warm)| (self.rss_end as f64 - warm as f64) / warm as f64 * 100.0)
    }

    fn print(&self) {
        let secs = self.duration.as_secs_f64();
        println!("=== soak summary: {} ===", self.store);
        println!("duration      {secs:.0} s");
        println!(
            "requests      {} ({:.0} req/s), plus {} dropped mid-request",
            self.requests,
            self.requests as f64 / secs,
            self.disconnects
        );
        println!("succeeded     {:?}", self.ops);
        println!("refusals      {:?}", self.refusals);
        println!("failures      {:?}", self.failures);
        println!("workers       {:?}", self.workers);
        match self.rss_warm {
            Some((at, warm)) => println!(
                "RSS           {:.1} MiB at {} s, {:.1} MiB at the end: {:+.2} %",
                mib(warm),
                at.as_secs(),
                mib(self.rss_end),
                self.growth().unwrap_or(0.0)
            ),
            None => println!("RSS           {:.1} MiB at the end", mib(self.rss_end)),
        }
    }
}

fn kinds<K: std::fmt::Display>(map: &BTreeMap<K, u64>) -> String {
    if map.is_empty() {
        return "none".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn soak(name: &str, duration: Duration) -> Result<Summary, String> {
    let (store, live) = open_store(name).await?;
    let stats = Arc::new(Stats::default());
    let alive = Arc::new(AtomicI64::new(0));
    let layer = TasksLayer::builder(store)
        .with_anonymous_tasks()
        .with_principal(|parts| bearer(&parts.headers))
        .with_default_ttl(TTL)
        .with_janitor(JANITOR_INTERVAL, TTL)
        .with_max_rows(MAX_ROWS)
        .build()
        .map_err(|e| e.to_string())?;
    let backend = Backend {
        tasks: layer.tasks(),
        alive: alive.clone(),
        stats: stats.clone(),
    };
    let inner = tower::service_fn(move |request: Request<RequestBody<Incoming>>| {
        let backend = backend.clone();
        async move { Ok::<_, Infallible>(backend.handle(request).await) }
    });
    let server = serve_layered(&layer, inner).await;
    let addr = server.addr;
    let notifier = layer.listen_notifier();
    println!(
        "=== soak: {name} store, {} s, on {} ===",
        duration.as_secs(),
        server.url
    );

    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for p in 0..PRINCIPALS {
        for _ in 0..CLIENTS_PER_PRINCIPAL {
            let mut client = Client::new(addr, format!("user-{p}"), stats.clone());
            let stop = stop.clone();
            clients.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    client.step().await;
                }
            }));
        }
    }
    clients.push(tokio::spawn(flooder(
        addr,
        vec!["flood-owner".into()],
        stats.clone(),
        stop.clone(),
        started,
    )));
    clients.push(tokio::spawn(flooder(
        addr,
        (0..4).map(|i| format!("flood-rows-{i}")).collect(),
        stats.clone(),
        stop.clone(),
        started,
    )));
    clients.push(tokio::spawn(listen_hog(addr, stats.clone(), stop.clone())));

    let warm_at = match std::env::var("SOAK_WARM_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(secs) => Duration::from_secs(secs).min(duration / 2),
        None if duration >= Duration::from_secs(240) => Duration::from_secs(120),
        None => duration / 2,
    };
    let mut rss_warm = None;
    let mut last_requests = 0;
    let mut last_report = started;
    loop {
        let elapsed = started.elapsed();
        if elapsed >= duration {
            break;
        }
        let next_report = last_report + REPORT_EVERY;
        let warm_deadline = started + warm_at;
        let mut wake = (started + duration).min(next_report);
        if rss_warm.is_none() && warm_deadline > Instant::now() {
            wake = wake.min(warm_deadline);
        }
        tokio::time::sleep_until(wake.into()).await;
        if rss_warm.is_none() && started.elapsed() >= warm_at {
            rss_warm = Some((started.elapsed(), rss_kib()));
        }
        if Instant::now() >= next_report {
            let requests = stats.requests.load(Ordering::Relaxed);
            let rate = (requests - last_requests) as f64 / last_report.elapsed().as_secs_f64();
            last_requests = requests;
            last_report = Instant::now();
            println!(
                "[{name} {:>4} s] {rate:>6.0} req/s | total {requests} (+{} dropped) | refusals: {} | failures: {} | live tasks: {} | workers {} | listen streams {} | RSS {:.1} MiB",
                started.elapsed().as_secs(),
                stats.disconnects.load(Ordering::Relaxed),
                kinds(&snapshot(&stats.refusals)),
                kinds(&snapshot(&stats.failures)),
                live.count().await,
                alive.load(Ordering::Relaxed),
                notifier.stream_count(),
                mib(rss_kib()),
            );
        }
    }
    let elapsed = started.elapsed();
    let rss_end = rss_kib();
    stop.store(true, Ordering::Relaxed);
    let mut panicked = 0;
    for client in clients {
        match tokio::time::timeout(Duration::from_secs(20), client).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.is_panic() => panicked += 1,
            _ => {}
        }
    }
    if panicked > 0 {
        bump(
            &stats.failures,
            format!("client tasks panicked ({panicked})"),
        );
    }
    drop(server);
    live.cleanup().await;
    Ok(Summary {
        store: name.to_owned(),
        duration: elapsed,
        requests: stats.requests.load(Ordering::Relaxed),
        disconnects: stats.disconnects.load(Ordering::Relaxed),
        ops: snapshot(&stats.ops),
        refusals: snapshot(&stats.refusals),
        failures: snapshot(&stats.failures),
        workers: snapshot(&stats.workers),
        rss_warm,
        rss_end,
    })
}

fn main() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let which = std::env::var("SOAK_STORE").unwrap_or_else(|_| "all".into());
    let stores: Vec<&str> = match which.as_str() {
        "all" => vec!["memory", "postgres", "redis"],
        one => vec![one],
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let mut summaries = Vec::new();
    let mut broken = false;
    for store in stores {
        match runtime.block_on(soak(store, Duration::from_secs(secs))) {
            Ok(summary) => {
                summary.print();
                summaries.push(summary);
            }
            Err(e) => {
                eprintln!("soak on {store} could not run: {e}");
                broken = true;
            }
        }
    }
    println!("=== soak: all stores ===");
    for s in &summaries {
        println!(
            "{:<9} {:>5.0} s {:>9} requests {:>6.0} req/s | refusals: {} | failures: {} | RSS {} -> {:.1} MiB ({})",
            s.store,
            s.duration.as_secs_f64(),
            s.requests,
            s.requests as f64 / s.duration.as_secs_f64(),
            kinds(&s.refusals),
            kinds(&s.failures),
            s.rss_warm
                .map(|(_, w)| format!("{:.1}", mib(w)))
                .unwrap_or_else(|| "?".into()),
            mib(s.rss_end),
            s.growth()
                .map(|g| format!("{g:+.2} %"))
                .unwrap_or_else(|| "?".into()),
        );
        broken |= !s.failures.is_empty();
    }
    if broken {
        eprintln!("soak: unexpected errors, see above");
        std::process::exit(1);
    }
}
