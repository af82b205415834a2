//! The floor: what a `tasks/*` request costs the server against what hyper itself
//! costs to answer one HTTP/1.1 request, in server CPU time per request.
//!
//! One run, one process tree. The bench process starts one server child per side:
//!
//! - `bare`: a hyper 1.x server (the same accept loop, HTTP/1.1 builder and
//!   `TCP_NODELAY` as the others) whose service reads the whole request body and
//!   answers fixed bytes, a `tasks/get` reply of the usual size;
//! - `get`: `TasksLayer` over a `MemoryStore` holding 1 000 working tasks, answering
//!   `tasks/get` on them;
//! - `update`, `cancel`, `create` (with `FLOOR_METHODS`): the same layer answering
//!   `tasks/update` (an answer to no outstanding question), `tasks/cancel` (the first
//!   cancel of each task changes it, later ones find it cancelled already) and a
//!   `tools/call` whose handler makes a task (a `CreateTaskResult`).
//!
//! Every child runs a two-worker tokio runtime. The bench process itself is the
//! load: `FLOOR_CONNS` keep-alive loopback connections (default 32), each writing
//! one pre-built request and reading its whole reply before the next, the bytes
//! written and read by hand (no HTTP client, so the load costs little). The bare
//! side receives exactly the `tasks/get` requests.
//!
//! Rounds: in each of `FLOOR_ROUNDS` rounds (default 6) every side is loaded for
//! `FLOOR_SECS` seconds (default 3), in turns, the order rotating every round, so
//! that a change of the machine's pace falls on every side alike. A side's figure
//! for a round is its server process's CPU time (user + system, from
//! `/proc/<pid>/stat`, every thread) over that turn divided by the requests it
//! answered; the ratio is taken per round against the bare side of the same round,
//! and the table reports each round and the medians.
//!
//! ```text
//! cargo bench --bench floor
//! FLOOR_METHODS=get,update,cancel,create FLOOR_ROUNDS=6 cargo bench --bench floor
//! ```
//!
//! `FLOOR_BEFORE=<path>` adds the sides of the same bench built from another commit
//! (its `target/release/deps/floor-*` binary), named `before:<method>`, to the
//! same rounds: a change measured before and after in one run.
//!
//! `FLOOR_SMOKE=1` runs one short round (well under 30 s, debug build included).
//! BENCHMARKS.md has the results.

#[path = "../tests/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use mcp_tasks::body::RequestBody;
use mcp_tasks::store::{CreateLimits, Timestamp};
use mcp_tasks::wire::{
    EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use mcp_tasks::{
    MemoryStore, Principal, TaskContext, TaskId, TaskRecord, TaskSpec, TasksLayer, store::TaskStore,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use support::http::{bearer, serve};

const PRINCIPAL: &str = "bench";
const TASKS: usize = 1_000;
/// What the bare server answers: a `tasks/get` reply of a working task, as the
/// layer writes it.
const BARE_REPLY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","taskId":"Vt0sX6n2tQm4oB8H3kzqJY7wR1aE5dCuLfN9gMpKxSA","status":"working","createdAt":"2026-12-04T23:57:40.123Z","lastUpdatedAt":"2026-12-04T23:57:40.123Z","ttlMs":3600000}}"#;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if let Ok(side) = std::env::var("FLOOR_CHILD") {
        child(&side);
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing and
    // must not run for long.
    let smoke = std::env::var("FLOOR_SMOKE").is_ok_and(|v| v == "1");
    if !smoke && !std::env::args().any(|a| a == "--bench") {
        println!("floor: run it with `cargo bench --bench floor`");
        return;
    }
    let methods = std::env::var("FLOOR_METHODS").unwrap_or_else(|_| "get".into());
    let methods: Vec<&str> = methods
        .split(',')
        .map(str::trim)
        .filter(|m| matches!(*m, "get" | "update" | "cancel" | "create"))
        .collect();
    let mut sides = vec!["bare".to_owned()];
    sides.extend(methods.iter().map(|m| m.to_string()));
    // `FLOOR_BEFORE=<path>`: the same bench built from another commit serves its own
    // sides too, interleaved with these ones (named `before:<method>`).
    if std::env::var_os("FLOOR_BEFORE").is_some() {
        sides.extend(methods.iter().map(|m| format!("before:{m}")));
    }
    let (rounds, secs) = if smoke {
        (1, 1.0)
    } else {
        (env_or("FLOOR_ROUNDS", 6usize), env_or("FLOOR_SECS", 3.0f64))
    };
    let conns: usize = env_or("FLOOR_CONNS", 32);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_or("FLOOR_CLIENT_THREADS", 2))
        .enable_all()
        .build()
        .unwrap();
    let mut servers: Vec<Server> = sides.iter().map(|side| Server::start(side)).collect();
    let ids = servers[1..]
        .iter()
        .find(|s| !s.ids.is_empty())
        .map(|s| s.ids.clone());
    let get_ids = ids.unwrap_or_else(|| (0..TASKS).map(|_| TaskId::random()).collect());
    let mut loads: Vec<Load> = servers
        .iter()
        .map(|server| {
            let ids = if server.ids.is_empty() {
                &get_ids
            } else {
                &server.ids
            };
            let method = match server.side.as_str() {
                "bare" => "get",
                side => side.trim_start_matches("before:"),
            };
            runtime.block_on(Load::open(server.addr, method, ids, conns))
        })
        .collect();
    // A short warm-up per side: connections, runtimes and allocators settle.
    for load in &mut loads {
        runtime.block_on(load.run(Duration::from_millis(if smoke { 200 } else { 1000 })));
    }
    let turn = Duration::from_secs_f64(secs);
    // per_request[side][round], in µs of server CPU.
    let mut per_request = vec![Vec::new(); sides.len()];
    let mut rates = vec![Vec::new(); sides.len()];
    for round in 0..rounds {
        for k in 0..sides.len() {
            let at = (k + round) % sides.len();
            let before = cpu_ticks(servers[at].pid());
            let (answered, took) = runtime.block_on(loads[at].run(turn));
            let after = cpu_ticks(servers[at].pid());
            let cpu_us = (after - before) as f64 * 1e6 / clock_ticks_per_s();
            per_request[at].push(cpu_us / answered as f64);
            rates[at].push(answered as f64 / took.as_secs_f64());
        }
    }
    println!("| side | round | server CPU per request (µs) | requests/s | vs bare |");
    println!("|---|---:|---:|---:|---:|");
    for (at, side) in sides.iter().enumerate() {
        for round in 0..rounds {
            println!(
                "| {side} | {} | {:.2} | {:.0} | {:.2} |",
                round + 1,
                per_request[at][round],
                rates[at][round],
                per_request[at][round] / per_request[0][round],
            );
        }
    }
    println!();
    println!(
        "| side | median server CPU per request (µs) | median requests/s | median ratio to bare (per round) |"
    );
    println!("|---|---:|---:|---:|");
    for (at, side) in sides.iter().enumerate() {
        let ratios: Vec<f64> = (0..rounds)
            .map(|r| per_request[at][r] / per_request[0][r])
            .collect();
        println!(
            "| {side} | {:.2} | {:.0} | {:.2} |",
            median(&per_request[at]),
            median(&rates[at]),
            median(&ratios),
        );
    }
    for server in &mut servers {
        server.stop();
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`, 100 on Linux).
fn clock_ticks_per_s() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// User plus system CPU time of a process, every thread, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the child's stat");
    // The command name (field 2) may hold spaces; count fields after its `)`.
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A server child: its address, its tasks' ids, and the pipe that keeps it alive.
struct Server {
    side: String,
    process: Child,
    stdin: Option<ChildStdin>,
    addr: SocketAddr,
    ids: Vec<TaskId>,
}

impl Server {
    fn start(side: &str) -> Server {
        let (exe, child_side) = match side.strip_prefix("before:") {
            Some(method) => (std::env::var_os("FLOOR_BEFORE").unwrap().into(), method),
            None => (std::env::current_exe().unwrap(), side),
        };
        let mut process = Command::new(exe)
            .env("FLOOR_CHILD", child_side)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the child runs");
        let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
        let ready = lines.next().and_then(Result::ok).unwrap_or_default();
        let mut words = ready.split(' ');
        assert_eq!(words.next(), Some("READY"), "{side}: not ready: {ready}");
        let addr = words.next().unwrap().parse().unwrap();
        let ids = words
            .next()
            .map(|ids| {
                ids.split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        eprintln!("floor: {side} serves on {addr}, pid {}", process.id());
        Server {
            side: side.to_owned(),
            stdin: process.stdin.take(),
            process,
            addr,
            ids,
        }
    }

    fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Closes the child's stdin, which ends it, and reaps it.
    fn stop(&mut self) {
        drop(self.stdin.take());
        let _ = self.process.wait();
    }
}

/// The child: serves its side until its stdin closes.
fn child(side: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (server, ids) = runtime.block_on(async {
        if side == "bare" {
            let service = tower::service_fn(|request: Request<Incoming>| async move {
                let _ = request.into_body().collect().await;
                Ok::<_, Infallible>(json_reply(BARE_REPLY))
            });
            return (serve(service).await, Vec::new());
        }
        let store = Arc::new(MemoryStore::new());
        let layer = TasksLayer::builder(store.clone())
            .with_principal(|parts| bearer(&parts.headers))
            .without_janitor()
            .without_max_rows()
            .without_max_tasks_per_owner()
            .build()
            .unwrap();
        let mut ids = Vec::with_capacity(TASKS);
        if side != "create" {
            let owner = Principal::new(PRINCIPAL);
            for _ in 0..TASKS {
                let id = TaskId::random();
                let mut record = TaskRecord::new(id, Some(owner.clone()), Timestamp::now());
                record.ttl_ms = Some(3_600_000);
                store.create(record, CreateLimits::default()).await.unwrap();
                ids.push(id);
            }
        }
        // `tools/call` makes a task (no work: it stays working until its TTL) and
        // answers; anything else gets an empty result.
        let inner = tower::service_fn(|request: Request<RequestBody<Incoming>>| async move {
            if let Some(context) = TaskContext::from_extensions(request.extensions()) {
                let _ = context.create(TaskSpec::new().with_ttl(Duration::from_secs(60)));
            }
            let _ = request.into_body().collect().await;
            Ok::<_, Infallible>(json_reply(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#))
        });
        (serve(tower::Layer::layer(&layer, inner)).await, ids)
    });
    let ids: Vec<String> = ids.iter().map(TaskId::to_string).collect();
    println!("READY {} {}", server.addr, ids.join(","));
    std::io::stdout().flush().unwrap();
    // Serve until the parent closes stdin.
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
        line.clear();
    }
    drop(server);
    runtime.shutdown_background();
}

fn json_reply(body: &'static [u8]) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The load on one side: its connections and the requests they send in turn.
struct Load {
    connections: Vec<TcpStream>,
    requests: Arc<Vec<Bytes>>,
    /// What every reply's body must contain.
    expect: &'static [u8],
}

impl Load {
    async fn open(addr: SocketAddr, method: &str, ids: &[TaskId], conns: usize) -> Load {
        let mut connections = Vec::with_capacity(conns);
        for _ in 0..conns {
            let stream = TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).expect("TCP_NODELAY");
            connections.push(stream);
        }
        let requests = ids.iter().map(|id| request(method, id)).collect();
        let expect: &[u8] = match method {
            "get" => br#""status":"working""#,
            "create" => br#""resultType":"task""#,
            _ => br#""resultType":"complete""#,
        };
        Load {
            connections,
            requests: Arc::new(requests),
            expect,
        }
    }

    /// Sends requests on every connection for `length`; returns how many were
    /// answered, and how long it took.
    async fn run(&mut self, length: Duration) -> (u64, Duration) {
        let started = Instant::now();
        let deadline = started + length;
        let mut workers = Vec::with_capacity(self.connections.len());
        for (n, mut stream) in self.connections.drain(..).enumerate() {
            let requests = self.requests.clone();
            let expect = self.expect;
            workers.push(tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                let mut answered = 0u64;
                let mut next = n * 31;
                while Instant::now() < deadline {
                    next = (next + 1) % requests.len();
                    stream.write_all(&requests[next]).await.expect("a write");
                    read_reply(&mut stream, &mut buf, expect).await;
                    answered += 1;
                }
                (stream, answered)
            }));
        }
        let mut answered = 0;
        for worker in workers {
            let (stream, mine) = worker.await.unwrap();
            self.connections.push(stream);
            answered += mine;
        }
        (answered, started.elapsed())
    }
}

/// The raw HTTP/1.1 request for `method` on task `id`, as a modern client sends it.
fn request(method: &str, id: &TaskId) -> Bytes {
    let meta = format!(
        r#""_meta":{{"{META_PROTOCOL_VERSION}":"{PROTOCOL_VERSION}","{META_CLIENT_CAPABILITIES}":{{"extensions":{{"{EXTENSION_ID}":{{}}}}}}}}"#
    );
    let (wire_method, name, params) = match method {
        "get" => ("tasks/get", id.to_string(), format!(r#""taskId":"{id}""#)),
        "cancel" => (
            "tasks/cancel",
            id.to_string(),
            format!(r#""taskId":"{id}""#),
        ),
        "update" => (
            "tasks/update",
            id.to_string(),
            format!(r#""taskId":"{id}","inputResponses":{{"q":{{"action":"accept"}}}}"#),
        ),
        "create" => (
            "tools/call",
            "make".to_owned(),
            r#""name":"make","arguments":{}"#.to_owned(),
        ),
        other => panic!("no such method: {other}"),
    };
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"{wire_method}","params":{{{params},{meta}}}}}"#
    );
    Bytes::from(format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\n\
         mcp-protocol-version: {PROTOCOL_VERSION}\r\nmcp-method: {wire_method}\r\n\
         mcp-name: {name}\r\nauthorization: Bearer {PRINCIPAL}\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    ))
}

/// Reads one whole reply (head and `content-length` body) and checks it: status
/// 200 and a body containing `expect`.
async fn read_reply(stream: &mut TcpStream, buf: &mut Vec<u8>, expect: &[u8]) {
    buf.clear();
    let (head_end, body_len) = loop {
        if let Some(at) = find(buf, b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..at]).expect("an ASCII head");
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            let len = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .expect("a content-length");
            break (at + 4, len);
        }
        read_more(stream, buf).await;
    };
    while buf.len() < head_end + body_len {
        read_more(stream, buf).await;
    }
    let body = &buf[head_end..head_end + body_len];
    assert!(
        find(body, expect).is_some(),
        "{}",
        String::from_utf8_lossy(body)
    );
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 4096];
    let n = stream.read(&mut chunk).await.expect("a read");
    assert!(n > 0, "the server closed the connection");
    buf.extend_from_slice(&chunk[..n]);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
