//! The gateway's overhead, side by side in one run: a client calling a 2026-07-28
//! server directly, against the same client calling it through
//! the gateway, `gateway/` (`TasksLayer`, every tool `Auto`, a streaming proxy).
//!
//! The upstream is `examples/conformance_server` served without its layer
//! (`MCP_PLAIN=1`). The bench process is the load: `GATEWAY_CONNS` keep-alive
//! loopback connections (default 32), each sending one request and reading its
//! whole reply before the next, for `GATEWAY_SECS` seconds (default 5) per side,
//! in `GATEWAY_ROUNDS` rounds (default 3) whose order rotates. Sides:
//!
//! - `direct pass`: `tools/call greet` straight to the upstream;
//! - `gateway pass`: the same through the gateway (answered within the `Auto`
//!   budget, so the upstream's answer passes back);
//! - `gateway create`: `tools/call slow_compute {seconds: 0.05}` through a second
//!   gateway with a 1 ms budget: each call becomes a task (its `CreateTaskResult`);
//!   `GATEWAY_CREATES` (default 2048) calls a round, by 100 principals in turn, so
//!   that a run stays under the gateway's row cap (10 000);
//! - `gateway get`: `tasks/get` on the tasks `gateway create` made.
//!
//! The table gives requests per second and the p50 and p99 latency of each side,
//! the medians over the rounds, and the pass-through ratio gateway / direct.
//!
//! ```text
//! cargo bench --bench gateway
//! GATEWAY_SMOKE=1 cargo bench --bench gateway    # one short round
//! ```
//!
//! BENCHMARKS.md has the results.

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::wire::{
    EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use support::procs::{self, Proc};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A 2026-07-28 request of `method` by `who`, declaring the extension.
fn request(method: &str, name: &str, params: &str, who: &str) -> Request<Full<Bytes>> {
    let meta = format!(
        r#""_meta":{{"{META_PROTOCOL_VERSION}":"{PROTOCOL_VERSION}","{META_CLIENT_CAPABILITIES}":{{"extensions":{{"{EXTENSION_ID}":{{}}}}}}}}"#
    );
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{{params},{meta}}}}}"#);
    Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .header("mcp-method", method)
        .header("mcp-name", name)
        .header("authorization", format!("Bearer {who}"))
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn greet() -> Request<Full<Bytes>> {
    request(
        "tools/call",
        "greet",
        r#""name":"greet","arguments":{"name":"bench"}"#,
        "bench",
    )
}

/// A call that becomes a task, by one of 100 principals in turn (so that no
/// principal reaches its cap of 1 000 tasks).
fn slow(n: usize) -> Request<Full<Bytes>> {
    request(
        "tools/call",
        "slow_compute",
        r#""name":"slow_compute","arguments":{"seconds":0.05}"#,
        &format!("bench{}", n % 100),
    )
}

fn get(id: &str, n: usize) -> Request<Full<Bytes>> {
    request(
        "tasks/get",
        id,
        &format!(r#""taskId":"{id}""#),
        &format!("bench{}", n % 100),
    )
}

/// What one side sends: the next request, given how many it sent before.
type Next = Arc<dyn Fn(usize) -> Request<Full<Bytes>> + Send + Sync>;

/// One side's figures for one round.
#[derive(Clone, Copy, Debug)]
struct Figures {
    rate: f64,
    p50_us: f64,
    p99_us: f64,
}

/// Loads `addr` with `conns` connections for `length`, or until each connection
/// sent `budget` requests; each reply must be 200 and contain `expect`. Returns
/// the figures and the first replies, by the number of the request (at most
/// `keep`).
async fn load(
    addr: SocketAddr,
    conns: usize,
    length: Duration,
    budget: usize,
    next: Next,
    expect: &'static str,
    keep: usize,
) -> (Figures, Vec<(usize, Bytes)>) {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let deadline = started + length;
    let mut workers = Vec::with_capacity(conns);
    for n in 0..conns {
        let next = next.clone();
        let kept = kept.clone();
        workers.push(tokio::spawn(async move {
            let (mut sender, _conn) = support::http::connect::<Full<Bytes>>(addr).await;
            let mut latencies = Vec::new();
            let mut sent = n;
            while Instant::now() < deadline && latencies.len() < budget {
                let at = Instant::now();
                let response = sender.send_request(next(sent)).await.expect("a reply");
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                latencies.push(at.elapsed().as_micros() as u32);
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                assert!(
                    body.windows(expect.len()).any(|w| w == expect.as_bytes()),
                    "{}",
                    String::from_utf8_lossy(&body)
                );
                let mut kept = kept.lock().unwrap();
                if kept.len() < keep {
                    kept.push((sent, body));
                }
                sent += conns;
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await.unwrap());
    }
    let took = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q) as usize] as f64;
    let figures = Figures {
        rate: latencies.len() as f64 / took,
        p50_us: at(0.50),
        p99_us: at(0.99),
    };
    let kept = std::mem::take(&mut *kept.lock().unwrap());
    (figures, kept)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let smoke = std::env::var("GATEWAY_SMOKE").is_ok_and(|v| v == "1");
    if !smoke && !std::env::args().any(|a| a == "--bench") {
        println!("gateway: run it with `cargo bench --bench gateway`");
        return;
    }
    let (rounds, secs) = match smoke {
        true => (1, 1.0),
        false => (
            env_or("GATEWAY_ROUNDS", 3usize),
            env_or("GATEWAY_SECS", 5.0f64),
        ),
    };
    let conns: usize = env_or("GATEWAY_CONNS", 32);
    let quiet = [("RUST_LOG", "error")];
    let upstream: Proc = procs::spawn(
        "conformance_server",
        &[],
        &[("MCP_PLAIN", "1"), ("RUST_LOG", "error")],
    );
    let gateway = procs::spawn_gateway(&[], &[("MCP_UPSTREAM", upstream.url.as_str()), quiet[0]]);
    let tasking = procs::spawn_gateway(
        &[],
        &[
            ("MCP_UPSTREAM", upstream.url.as_str()),
            ("MCP_AUTO_AFTER_MS", "1"),
            quiet[0],
        ],
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_or("GATEWAY_CLIENT_THREADS", 2))
        .enable_all()
        .build()
        .unwrap();
    let turn = Duration::from_secs_f64(secs);
    // The tasks `gateway get` reads, with the principal of each: made once,
    // before the rounds. Creates are counted, not timed: the gateway's row cap
    // (10 000) bounds how many tasks one run may make.
    let per_round = env_or("GATEWAY_CREATES", 2048usize).div_ceil(conns);
    let (_, made) = runtime.block_on(load(
        tasking.addr,
        conns,
        Duration::from_secs(60),
        1000usize.div_ceil(conns),
        Arc::new(slow),
        r#""resultType":"task""#,
        1000,
    ));
    let ids: Arc<Vec<(String, usize)>> = Arc::new(
        made.iter()
            .filter_map(|(n, body)| {
                let value: serde_json::Value = serde_json::from_slice(body).ok()?;
                Some((value["result"]["taskId"].as_str()?.to_owned(), *n))
            })
            .collect(),
    );
    assert!(!ids.is_empty(), "no task was made");
    // (name, address, requests, reply must contain, requests per connection)
    let sides: Vec<(&str, SocketAddr, Next, &'static str, usize)> = vec![
        (
            "direct pass",
            upstream.addr,
            Arc::new(|_| greet()),
            "Hello, bench!",
            usize::MAX,
        ),
        (
            "gateway pass",
            gateway.addr,
            Arc::new(|_| greet()),
            "Hello, bench!",
            usize::MAX,
        ),
        (
            "gateway create",
            tasking.addr,
            Arc::new(slow),
            r#""resultType":"task""#,
            per_round,
        ),
        (
            "gateway get",
            tasking.addr,
            Arc::new(move |n| {
                let (id, owner) = &ids[n % ids.len()];
                get(id, *owner)
            }),
            r#""taskId""#,
            usize::MAX,
        ),
    ];
    for (_, addr, next, expect, budget) in &sides {
        let warm = (*budget).min(4);
        runtime.block_on(load(
            *addr,
            conns,
            Duration::from_millis(300),
            warm,
            next.clone(),
            expect,
            0,
        ));
    }
    let mut figures: Vec<Vec<Figures>> = vec![Vec::new(); sides.len()];
    for round in 0..rounds {
        for k in 0..sides.len() {
            let at = (k + round) % sides.len();
            let (_, addr, next, expect, budget) = &sides[at];
            let (round_figures, _) =
                runtime.block_on(load(*addr, conns, turn, *budget, next.clone(), expect, 0));
            figures[at].push(round_figures);
        }
    }
    println!("{conns} connections, {rounds} round(s) of {secs} s per side");
    println!("| side | requests/s | p50 (ms) | p99 (ms) |");
    println!("|---|---:|---:|---:|");
    let mut rates = Vec::new();
    for (at, (name, ..)) in sides.iter().enumerate() {
        let rate = median(figures[at].iter().map(|f| f.rate).collect());
        let p50 = median(figures[at].iter().map(|f| f.p50_us).collect()) / 1000.0;
        let p99 = median(figures[at].iter().map(|f| f.p99_us).collect()) / 1000.0;
        println!("| {name} | {rate:.0} | {p50:.2} | {p99:.2} |");
        rates.push(figures[at].clone());
    }
    let ratios: Vec<f64> = (0..rounds)
        .map(|r| rates[1][r].rate / rates[0][r].rate)
        .collect();
    println!();
    println!(
        "pass-through through the gateway: {:.2}x the direct requests/s (median of per-round ratios)",
        median(ratios)
    );
}
