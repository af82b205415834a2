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
//! - `get2025` (with `FLOOR_METHODS`): the same layer answering a 2025-11-25
//!   `tasks/get` (no `Mcp-Method`, no `_meta`: the body decides);
//! - `update`, `cancel`, `create` (with `FLOOR_METHODS`): the same layer answering
//!   `tasks/update` (an answer to no outstanding question), `tasks/cancel` (the first
//!   cancel of each task changes it, later ones find it cancelled already) and a
//!   `tools/call` whose handler makes a task (a `CreateTaskResult`);
//! - `pass`: a `tools/list` the layer passes to its inner service on the header
//!   alone (the fast path), answered `{}` there.
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
//!
//! `FLOOR_CALLGRIND=<requests>` counts instead of timing: each side's child runs
//! under `valgrind --tool=callgrind`, twice (a warm-up's worth of requests, then as
//! many more), and the table gives instructions per request, the difference of the
//! two runs' totals over `requests`: repeatable on a machine others load.
//! `FLOOR_CACHE_SIM=1` adds callgrind's cache simulation (data misses per request),
//! `FLOOR_VALGRIND_ARGS` more valgrind options (`--LL=33554432,16,64`). A side
//! `method@N` (`FLOOR_METHODS=get,get@1000000`) serves over `N` stored tasks instead
//! of 1 000, and a store past 20 000 tasks has every id polled in a scrambled order.
//!
//! ```text
//! FLOOR_CALLGRIND=12800 FLOOR_METHODS=get,update,cancel,create cargo bench --bench floor
//! FLOOR_CALLGRIND=32000 FLOOR_CACHE_SIM=1 FLOOR_VALGRIND_ARGS="--LL=33554432,16,64" \
//!   FLOOR_METHODS=get,get@1000000 cargo bench --bench floor
//! ```
//!
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
        .filter(|m| {
            let (method, size) = m.split_once('@').unwrap_or((m, "1000"));
            matches!(
                method,
                "get" | "get2025" | "update" | "cancel" | "create" | "pass"
            ) && size.parse::<usize>().is_ok()
        })
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
    if let Some(requests) = std::env::var("FLOOR_CALLGRIND")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        callgrind(&runtime, &sides, requests, conns);
        return;
    }
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
            runtime.block_on(Load::open(server.addr, method_of(&server.side), ids, conns))
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

/// The method a side's load sends: `bare` receives `tasks/get`; `before:` and a
/// store size (`get@1000000`) name the same method.
fn method_of(side: &str) -> &str {
    let side = side.trim_start_matches("before:");
    match side.split_once('@').map_or(side, |(method, _)| method) {
        "bare" => "get",
        method => method,
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
        Server::start_under(side, None, false)
    }

    /// [`start`](Self::start), the child run by callgrind writing its counts to
    /// `callgrind_out` when one is given (with its cache simulation on `cache_sim`).
    fn start_under(side: &str, callgrind_out: Option<&std::path::Path>, cache_sim: bool) -> Server {
        let (exe, child_side): (std::path::PathBuf, &str) = match side.strip_prefix("before:") {
            Some(method) => (std::env::var_os("FLOOR_BEFORE").unwrap().into(), method),
            None => (std::env::current_exe().unwrap(), side),
        };
        let mut command = match callgrind_out {
            Some(out) => {
                let mut command = Command::new("valgrind");
                command
                    .arg("--tool=callgrind")
                    .arg(format!(
                        "--cache-sim={}",
                        if cache_sim { "yes" } else { "no" }
                    ))
                    .args(
                        std::env::var("FLOOR_VALGRIND_ARGS")
                            .unwrap_or_default()
                            .split_whitespace(),
                    )
                    .arg("-q")
                    .arg(format!("--callgrind-out-file={}", out.display()))
                    .arg(exe);
                command
            }
            None => Command::new(exe),
        };
        let mut process = command
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

/// The child: serves its side until its stdin closes. A side `method@N` serves
/// over `N` stored tasks (default 1 000).
fn child(side: &str) {
    let (side, tasks) = match side.split_once('@') {
        Some((side, n)) => (side, n.parse().expect("a store size")),
        None => (side, TASKS),
    };
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
            .with_anonymous_tasks()
            .with_principal(|parts| bearer(&parts.headers))
            .without_janitor()
            .without_max_rows()
            .without_max_tasks_per_owner()
            .build()
            .unwrap();
        let mut ids = Vec::with_capacity(tasks);
        if side != "create" {
            for _ in 0..tasks {
                let id = TaskId::random();
                // Each its own principal, as each create request brings its own.
                let owner = Principal::new(PRINCIPAL);
                let mut record = TaskRecord::new(id, Some(owner), Timestamp::now());
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
    // Out at once: tearing a large store down would add its own cost to the
    // counts of a run under callgrind.
    drop(server);
    std::process::exit(0);
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
    requests: Arc<Requests>,
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
        let requests = Requests::new(method, ids);
        let expect: &[u8] = match method {
            "get" | "get2025" => br#""status":"working""#,
            "create" => br#""resultType":"task""#,
            "pass" => br#""result":{}"#,
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
        let conns = self.connections.len();
        let mut workers = Vec::with_capacity(conns);
        for (n, mut stream) in self.connections.drain(..).enumerate() {
            let requests = self.requests.clone();
            let expect = self.expect;
            workers.push(tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                let mut answered = 0u64;
                // Connections start apart: 31 requests apart at 1 000 tasks.
                let mut next = n * (requests.len() / conns).max(1);
                while Instant::now() < deadline {
                    next = (next + 1) % requests.len();
                    stream
                        .write_all(&requests.get(next))
                        .await
                        .expect("a write");
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

/// `FLOOR_CALLGRIND=<requests>`: instructions per request of each side's server,
/// counted by callgrind (repeatable on a busy machine, where CPU time is not).
///
/// Each side is served twice by a child under `valgrind --tool=callgrind`: once
/// answering `warm` requests, once `warm + requests`, spread evenly over `conns`
/// connections; the difference of the two runs' totals over `requests` is what one
/// request costs, start-up and the fixture cancelling out. Only user space is
/// counted: the kernel's share of the sockets is not, so the ratio is of the code
/// that differs, and larger than the CPU-time ratio of the timed rounds.
///
/// `FLOOR_CACHE_SIM=1` adds callgrind's cache simulation (first-level and
/// last-level data misses per request), for the store-size sides (`get@1000000`);
/// `FLOOR_VALGRIND_ARGS` passes more options (the cache sizes: `--LL=33554432,16,64`).
fn callgrind(runtime: &tokio::runtime::Runtime, sides: &[String], requests: usize, conns: usize) {
    let dir = std::env::temp_dir().join(format!("floor-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for callgrind's files");
    let cache_sim = std::env::var("FLOOR_CACHE_SIM").is_ok_and(|v| v == "1");
    let per_conn = requests.div_ceil(conns).max(1);
    let requests = per_conn * conns;
    // Every task of the fixture is visited in the warm-up (connection `n` starts at
    // the `31 n`-th), so the first cancel of each falls there and the two runs differ
    // only in requests alike.
    let warm_per_conn = TASKS.saturating_sub(31 * (conns - 1)).max(32) + 8;
    let mut table = Vec::new();
    for side in sides {
        let mut totals = [Events::default(), Events::default()];
        for (run, per) in [warm_per_conn, warm_per_conn + per_conn]
            .into_iter()
            .enumerate()
        {
            let name = side.replace(':', "-");
            let out = dir.join(format!("{name}.{run}.out"));
            let mut server = Server::start_under(side, Some(&out), cache_sim);
            let ids = if server.ids.is_empty() {
                (0..TASKS).map(|_| TaskId::random()).collect()
            } else {
                server.ids.clone()
            };
            let took = runtime.block_on(async {
                let mut load = Load::open(server.addr, method_of(side), &ids, conns).await;
                let started = Instant::now();
                load.run_count(per).await;
                started.elapsed()
            });
            server.stop();
            totals[run] = Events::read(&out);
            eprintln!(
                "floor: {side} run {run}: {} requests, {} instructions, {:.1} s",
                per * conns,
                totals[run].get("Ir"),
                took.as_secs_f64()
            );
        }
        let per_request = |event: &str| {
            totals[1].get(event).saturating_sub(totals[0].get(event)) as f64 / requests as f64
        };
        let misses = |events: [&str; 2]| events.iter().map(|e| per_request(e)).sum::<f64>();
        table.push((
            side.clone(),
            per_request("Ir"),
            misses(["D1mr", "D1mw"]),
            misses(["DLmr", "DLmw"]),
        ));
    }
    println!(
        "callgrind: {requests} requests per side over {conns} connections; files in {}",
        dir.display()
    );
    println!();
    if cache_sim {
        println!(
            "| side | instructions per request | vs bare | beyond bare | D1 misses per request | LL misses per request |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
    } else {
        println!("| side | instructions per request | vs bare | beyond bare |");
        println!("|---|---:|---:|---:|");
    }
    let bare = table[0].1;
    for (side, per_request, d1, ll) in &table {
        let row = format!(
            "| {side} | {per_request:.0} | {:.2} | {:.0} |",
            per_request / bare,
            per_request - bare
        );
        match cache_sim {
            true => println!("{row} {d1:.1} | {ll:.1} |"),
            false => println!("{row}"),
        }
    }
}

/// The event totals callgrind wrote to a file (its `events:` and `totals:` lines).
#[derive(Default)]
struct Events(Vec<(String, u64)>);

impl Events {
    fn read(path: &std::path::Path) -> Events {
        let text = std::fs::read_to_string(path).expect("callgrind's output file");
        let line = |prefix: &str| {
            text.lines()
                .rev()
                .find_map(|line| line.strip_prefix(prefix))
                .unwrap_or_default()
                .split_whitespace()
        };
        let names = line("events:");
        let totals = line("totals:").map(|n| n.parse().expect("a count"));
        Events(names.map(str::to_owned).zip(totals).collect())
    }

    fn get(&self, event: &str) -> u64 {
        self.0
            .iter()
            .find(|(name, _)| name == event)
            .map_or(0, |(_, n)| *n)
    }
}

/// The raw HTTP/1.1 request for `method` on task `id`, as a modern client sends it
/// (`get2025`: a `tasks/get` as a 2025-11-25 client sends it, without `_meta` and
/// `Mcp-Method`).
fn request(method: &str, id: &TaskId) -> Bytes {
    if method == "get2025" {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{{"taskId":"{id}"}}}}"#
        );
        return Bytes::from(format!(
            "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\n\
             mcp-protocol-version: 2025-11-25\r\nauthorization: Bearer {PRINCIPAL}\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        ));
    }
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
        // A method the layer does not own: the header-only fast path to the inner
        // service.
        "pass" => (
            "tools/list",
            "tools".to_owned(),
            r#""cursor":"0""#.to_owned(),
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

impl Load {
    /// Sends exactly `per_conn` requests on every connection, then closes them.
    async fn run_count(&mut self, per_conn: usize) {
        let conns = self.connections.len();
        let mut workers = Vec::with_capacity(conns);
        for (n, mut stream) in self.connections.drain(..).enumerate() {
            let requests = self.requests.clone();
            let expect = self.expect;
            workers.push(tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                // Connections start apart: 31 requests apart at 1 000 tasks.
                let mut next = n * (requests.len() / conns).max(1);
                for _ in 0..per_conn {
                    next = (next + 1) % requests.len();
                    stream
                        .write_all(&requests.get(next))
                        .await
                        .expect("a write");
                    read_reply(&mut stream, &mut buf, expect).await;
                }
            }));
        }
        for worker in workers {
            worker.await.unwrap();
        }
    }
}

/// The requests a load sends in turn: built once, or for a large store (whose
/// every id is polled, so that its size shows) each as it is sent.
struct Requests {
    method: String,
    ids: Vec<TaskId>,
    built: Vec<Bytes>,
}

impl Requests {
    fn new(method: &str, ids: &[TaskId]) -> Requests {
        let large = ids.len() > 20_000;
        Requests {
            method: method.to_owned(),
            ids: if large { ids.to_vec() } else { Vec::new() },
            built: match large {
                true => Vec::new(),
                false => ids.iter().map(|id| request(method, id)).collect(),
            },
        }
    }

    fn len(&self) -> usize {
        self.built.len().max(self.ids.len())
    }

    /// The `n`-th request. A large store's ids are taken in a scrambled order
    /// (`n` times an odd number prime to 5, modulo the count): consecutive requests
    /// do not read records made one after the other, which lie side by side.
    fn get(&self, n: usize) -> Bytes {
        match self.built.get(n) {
            Some(built) => built.clone(),
            None => {
                let at = (n as u64).wrapping_mul(2_654_435_761) % self.ids.len() as u64;
                request(&self.method, &self.ids[at as usize])
            }
        }
    }
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
