//! What a greedy tenant and a slow store cost one node, over loopback HTTP/1.1.
//!
//! `PRESSURE=tenant` (the default): one principal makes 100 tasks, opens the most
//! listen streams it may (16), each naming all 100, and never reads past the
//! acknowledgment; then every task completes with a 512 KiB result (50 MiB stored).
//! Meanwhile another principal polls `tasks/get` on a task of its own. Printed: the
//! stored bytes, the streams, the peak of the process's resident memory over its
//! level before the completions, the peak of what the layer counts as held for the
//! streams, and the other principal's `tasks/get` latency.
//!
//! `PRESSURE=slow` (PostgreSQL or Redis): eight clients send `tasks/cancel` for ids
//! they made up, as fast as they are answered, to a layer whose store sits behind a
//! loopback proxy. The store is healthy for 10 s, then every reply is held 1 s
//! (twice the layer's 500 ms store timeout) for 10 s, then healthy again for 10 s.
//! Printed per phase: requests answered, store calls made for them (one `update`
//! each), background re-reads (`get`/`get_many`), and all store calls, per second.
//!
//! `PRESSURE=bytes`: one principal asks for ten times its stored-byte bound
//! (`with_max_bytes_per_owner`, 64 MiB by default) in task results, 1 MiB each, four
//! calls at a time; another principal, whose task completed before, polls
//! `tasks/get` on it meanwhile. Printed: what the greedy principal asked for and has
//! stored, its calls completed and held back, the peak of the process's resident
//! memory over its level before, the other principal's latency, and whether its
//! result is intact. `PRESSURE_BOUND=off` runs the same without a bound (the bound
//! set to `usize::MAX`), as the code before it behaved.
//!
//! `PRESSURE_LISTEN=after` opens the streams once every task has completed instead,
//! one after another, so that each listen's snapshot carries every result;
//! `PRESSURE_LISTEN=at-once` opens them then all at the same time.
//!
//! `PRESSURE_STORE` picks the store: `memory` (tenant only), `postgres`
//! (`DATABASE_URL`) or `redis` (`REDIS_URL`). One store per run, so that each run's
//! memory is its own.
//!
//! ```text
//! PRESSURE=tenant PRESSURE_STORE=memory cargo bench --bench pressure --features test-util
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test PRESSURE=slow PRESSURE_STORE=postgres \
//!   cargo bench --bench pressure --features postgres,redis,test-util
//! ```

// Without PostgreSQL and Redis only the tenant run on the memory store is built.
#![cfg_attr(
    not(any(feature = "postgres", feature = "redis")),
    allow(dead_code, unused_imports)
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcp_tasks::error::StoreError;
use mcp_tasks::store::TaskStore;
use mcp_tasks::test_suite::{Intercept, StoreCall, StoreHooks};
use mcp_tasks::{MemoryStore, TaskId};
use serde_json::json;
use support::fixtures::{ListenSupport, Server, listen_builder};

const TASKS: usize = 100;
const RESULT_BYTES: usize = 512 * 1024;
const STREAMS: usize = mcp_tasks::defaults::MAX_LISTEN_STREAMS_PER_OWNER;

/// The process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Samples the resident memory every 2 ms and keeps the highest.
struct RssPeak {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssPeak {
    fn start() -> Self {
        let peak = Arc::new(AtomicU64::new(rss()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (peak, stop) = (peak.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(rss(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        });
        RssPeak {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Opens the greedy principal's streams, each naming every task; how many were
/// accepted (the others were refused with a JSON-RPC error).
async fn open_streams(
    client: &support::http::Client,
    named: &[&str],
) -> (Vec<support::http::EventStream>, usize) {
    let mut streams = Vec::with_capacity(STREAMS);
    let mut accepted = 0;
    for n in 0..STREAMS {
        let mut stream = client.listen(Some("greedy"), json!(n), named).await;
        let sse = stream.headers[http::header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/event-stream"));
        if sse {
            let _ack = stream.next_message().await;
            accepted += 1;
        }
        streams.push(stream);
    }
    (streams, accepted)
}

/// Opens the greedy principal's streams all at once, each naming every task; how
/// many were accepted.
async fn open_streams_at_once(
    client: &support::http::Client,
    named: &[&str],
) -> (Vec<support::http::EventStream>, usize) {
    let opening: Vec<_> = (0..STREAMS)
        .map(|n| {
            let client = client.clone();
            let named: Vec<String> = named.iter().map(|s| (*s).to_owned()).collect();
            tokio::spawn(async move {
                let named: Vec<&str> = named.iter().map(String::as_str).collect();
                let mut stream = client.listen(Some("greedy"), json!(n), &named).await;
                let sse = stream.headers[http::header::CONTENT_TYPE]
                    .to_str()
                    .is_ok_and(|t| t.starts_with("text/event-stream"));
                if sse {
                    let _ack = stream.next_message().await;
                }
                (stream, sse)
            })
        })
        .collect();
    let mut streams = Vec::with_capacity(STREAMS);
    let mut accepted = 0;
    for opened in opening {
        let (stream, sse) = opened.await.unwrap();
        accepted += usize::from(sse);
        streams.push(stream);
    }
    (streams, accepted)
}

/// When the greedy principal opens its streams.
#[derive(Clone, Copy, PartialEq)]
enum Open {
    /// Before the tasks complete: each change reaches them as it happens.
    Before,
    /// After, one after another, each with a snapshot of every finished task.
    After,
    /// After, all at the same time.
    AtOnce,
}

async fn tenant(store: Arc<dyn TaskStore>, name: &str, open: Open) {
    let server = Server::listening_with(ListenSupport::NotFound, listen_builder(store)).await;
    let client = server.client();
    let mut ids = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        ids.push(
            client
                .create_task_id("job", json!({}), Some("greedy"))
                .await,
        );
    }
    let bobs = client.create_task_id("job", json!({}), Some("bob")).await;
    let named: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut opened = if open == Open::Before {
        Some(open_streams(&client, &named).await)
    } else {
        None
    };
    let text = "x".repeat(RESULT_BYTES);
    let before = rss();
    let peak = RssPeak::start();
    let polling = Arc::new(AtomicBool::new(true));
    let poller = tokio::spawn({
        let (client, polling) = (server.client(), polling.clone());
        async move {
            let mut took = Vec::new();
            while polling.load(Ordering::Relaxed) {
                let started = Instant::now();
                let reply = client.get(&bobs, Some("bob")).await;
                took.push(started.elapsed());
                assert_eq!(reply.ok()["status"], "working");
            }
            took
        }
    });
    let started = Instant::now();
    for id in &ids {
        let id: TaskId = id.parse().unwrap();
        let result = json!({"content": [{"type": "text", "text": text}]});
        server.tasks.complete(&id, result).await.unwrap();
    }
    let completing = started.elapsed();
    if open == Open::After {
        opened = Some(open_streams(&client, &named).await);
    } else if open == Open::AtOnce {
        opened = Some(open_streams_at_once(&client, &named).await);
    }
    let (streams, accepted) = opened.unwrap_or_default();
    // What the streams hold settles once the connections stop taking bytes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    polling.store(false, Ordering::Relaxed);
    let mut took = poller.await.unwrap();
    took.sort();
    let peak = peak.finish();
    let (_, held_peak) = server.listen.held_bytes();
    eprintln!(
        "{name}: completions took {completing:?}, {} gets",
        took.len()
    );
    let when = match open {
        Open::Before => "before",
        Open::After => "after",
        Open::AtOnce => "after, at once",
    };
    println!(
        "| {name} | {} | {when} | {accepted} of {STREAMS} | {} | {} | {} | {} |",
        mib((TASKS * RESULT_BYTES) as u64),
        mib(peak.saturating_sub(before)),
        mib(held_peak as u64),
        percentile(&took, 0.5).as_micros() as f64 / 1000.0,
        percentile(&took, 0.99).as_micros() as f64 / 1000.0,
    );
    drop(streams);
}

/// The greedy principal's results in the `bytes` run.
const GREEDY_RESULT: usize = 1024 * 1024;

/// `PRESSURE=bytes`: see the top of the file.
async fn bytes(store: Arc<dyn TaskStore>, name: &str, bounded: bool) {
    use mcp_tasks::defaults::MAX_BYTES_PER_OWNER;
    let bound = if bounded {
        MAX_BYTES_PER_OWNER
    } else {
        usize::MAX
    };
    let builder = listen_builder(store.clone()).with_max_bytes_per_owner(bound);
    let server = Server::listening_with(ListenSupport::NotFound, builder).await;
    let client = server.client();
    let text = "x".repeat(GREEDY_RESULT);
    let result = json!({"content": [{"type": "text", "text": text}]});
    let bobs = client.create_task_id("job", json!({}), Some("bob")).await;
    let bobs_id: TaskId = bobs.parse().unwrap();
    server
        .tasks
        .complete(&bobs_id, result.clone())
        .await
        .unwrap();

    let before = rss();
    let peak = RssPeak::start();
    let polling = Arc::new(AtomicBool::new(true));
    let poller = tokio::spawn({
        let (client, polling, bobs) = (server.client(), polling.clone(), bobs.clone());
        async move {
            let mut took = Vec::new();
            while polling.load(Ordering::Relaxed) {
                let started = Instant::now();
                let reply = client.get(&bobs, Some("bob")).await;
                took.push(started.elapsed());
                let text = &reply.ok()["result"]["content"][0]["text"];
                assert_eq!(text.as_str().map(str::len), Some(GREEDY_RESULT));
            }
            took
        }
    });
    let calls = 10 * MAX_BYTES_PER_OWNER / GREEDY_RESULT;
    let (mut completed, mut held_back) = (0usize, 0usize);
    let started = Instant::now();
    for _ in 0..calls / 4 {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let (client, tasks, result) = (server.client(), server.tasks.clone(), result.clone());
            batch.spawn(async move {
                let reply = client
                    .call_tool("job", json!({}), true, Some("greedy"))
                    .await;
                if reply.json.get("error").is_some() {
                    return false;
                }
                let id: TaskId = reply.ok()["taskId"].as_str().unwrap().parse().unwrap();
                tasks.complete(&id, result).await.is_ok()
            });
        }
        for done in batch.join_all().await {
            if done {
                completed += 1;
            } else {
                held_back += 1;
            }
        }
    }
    let asking = started.elapsed();
    polling.store(false, Ordering::Relaxed);
    let mut took = poller.await.unwrap();
    took.sort();
    let peak = peak.finish();
    let greedy = mcp_tasks::Principal::from("greedy");
    let stored = store.owner_bytes(Some(&greedy)).await.unwrap_or(0);
    let reply = client.get(&bobs, Some("bob")).await;
    let intact = reply.ok()["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|text| text.len() == GREEDY_RESULT);
    eprintln!("{name}: {calls} calls took {asking:?}, {} gets", took.len());
    println!(
        "| {name} | {} | {} | {} | {completed} | {held_back} | {} | {} | {} | {} |",
        if bounded { "64 MiB" } else { "none" },
        mib((calls * GREEDY_RESULT) as u64),
        mib(stored),
        mib(peak.saturating_sub(before)),
        percentile(&took, 0.5).as_micros() as f64 / 1000.0,
        percentile(&took, 0.99).as_micros() as f64 / 1000.0,
        if intact { "yes" } else { "no" },
    );
}

/// Counts the store calls: the writes the requests make, and the reads nobody asked
/// for.
#[derive(Debug, Default)]
struct Calls {
    updates: AtomicUsize,
    reads: AtomicUsize,
    all: AtomicUsize,
}

impl StoreHooks for Calls {
    fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
        self.all.fetch_add(1, Ordering::Relaxed);
        match call {
            StoreCall::Update { .. } => self.updates.fetch_add(1, Ordering::Relaxed),
            StoreCall::Get { .. } => self.reads.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        Ok(())
    }

    fn after_get_many(
        &self,
        _ids: &[TaskId],
        _result: &Result<Vec<mcp_tasks::TaskRecord>, StoreError>,
    ) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }
}

async fn slow(store: impl TaskStore, proxy: &support::proxy::Proxy, name: &str) {
    const PHASE: Duration = Duration::from_secs(10);
    const CLIENTS: usize = 8;
    let calls = Arc::new(Calls::default());
    let store: Arc<dyn TaskStore> = Arc::new(Intercept::new(store, calls.clone()));
    let builder = listen_builder(store).with_store_timeout(Duration::from_millis(500));
    let server = Server::listening_with(ListenSupport::NotFound, builder).await;
    let answered = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, answered, running) = (server.client(), answered.clone(), running.clone());
            tokio::spawn(async move {
                while running.load(Ordering::Relaxed) {
                    let made_up = TaskId::random().to_string();
                    let _ = client.cancel(&made_up, Some("alice")).await;
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let phases = [
        ("healthy", Duration::ZERO),
        ("1 s replies (store timeout 500 ms)", Duration::from_secs(1)),
        ("healthy again", Duration::ZERO),
    ];
    for (phase, delay) in phases {
        proxy.set_delay(delay);
        let at = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        let start = (
            at(&answered),
            at(&calls.updates),
            at(&calls.reads),
            at(&calls.all),
        );
        tokio::time::sleep(PHASE).await;
        let per_s = |now: usize, then: usize| (now - then) as f64 / PHASE.as_secs_f64();
        println!(
            "| {name} | {phase} | {:.0} | {:.0} | {:.1} | {:.0} |",
            per_s(at(&answered), start.0),
            per_s(at(&calls.updates), start.1),
            per_s(at(&calls.reads), start.2),
            per_s(at(&calls.all), start.3),
        );
    }
    running.store(false, Ordering::Relaxed);
    for client in clients {
        let _ = client.await;
    }
}

fn main() {
    let mode = std::env::var("PRESSURE").unwrap_or_else(|_| "tenant".into());
    let which = std::env::var("PRESSURE_STORE").unwrap_or_else(|_| "memory".into());
    let bounded = std::env::var("PRESSURE_BOUND").as_deref() != Ok("off");
    let open = match std::env::var("PRESSURE_LISTEN").as_deref() {
        Ok("after") => Open::After,
        Ok("at-once") => Open::AtOnce,
        _ => Open::Before,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        match (mode.as_str(), which.as_str()) {
            ("tenant", "memory") => {
                print_tenant_head();
                tenant(Arc::new(MemoryStore::new()), "memory", open).await;
            }
            ("bytes", "memory") => {
                print_bytes_head();
                bytes(Arc::new(MemoryStore::new()), "memory", bounded).await;
            }
            #[cfg(all(feature = "postgres", feature = "test-util"))]
            ("bytes", "postgres") => {
                let store = support::stores::postgres::scratch()
                    .await
                    .expect("DATABASE_URL");
                print_bytes_head();
                bytes(Arc::new(store), "PostgreSQL", bounded).await;
            }
            #[cfg(all(feature = "redis", feature = "test-util"))]
            ("bytes", "redis") => {
                let store = support::stores::redis::scratch().await.expect("REDIS_URL");
                print_bytes_head();
                bytes(Arc::new(store), "Redis", bounded).await;
            }
            #[cfg(all(feature = "postgres", feature = "test-util"))]
            ("tenant", "postgres") => {
                let store = support::stores::postgres::scratch()
                    .await
                    .expect("DATABASE_URL");
                print_tenant_head();
                tenant(Arc::new(store), "PostgreSQL", open).await;
            }
            #[cfg(all(feature = "redis", feature = "test-util"))]
            ("tenant", "redis") => {
                let store = support::stores::redis::scratch().await.expect("REDIS_URL");
                print_tenant_head();
                tenant(Arc::new(store), "Redis", open).await;
            }
            #[cfg(all(feature = "postgres", feature = "test-util"))]
            ("slow", "postgres") => {
                let url = support::stores::postgres::database_url().expect("DATABASE_URL");
                let proxy = support::proxy::Proxy::start(support::proxy::target(&url)).await;
                let via = support::proxy::via(&url, proxy.addr);
                let mut nodes = support::stores::postgres::nodes_at(&url, &[via]).await;
                print_slow_head();
                slow(nodes.remove(0), &proxy, "PostgreSQL").await;
            }
            #[cfg(all(feature = "redis", feature = "test-util"))]
            ("slow", "redis") => {
                let url = support::stores::redis::redis_url().expect("REDIS_URL");
                let proxy = support::proxy::Proxy::start(support::proxy::target(&url)).await;
                let via = support::proxy::via(&url, proxy.addr);
                let mut nodes = support::stores::redis::nodes_at(&url, &[via]).await;
                print_slow_head();
                slow(nodes.remove(0), &proxy, "Redis").await;
            }
            other => panic!(
                "no such run: PRESSURE={} PRESSURE_STORE={}",
                other.0, other.1
            ),
        }
    });
}

fn print_tenant_head() {
    println!(
        "| store | stored (MiB) | streams opened | streams accepted | peak RSS over start (MiB) | peak held by the layer (MiB) | other principal's `tasks/get` p50 (ms) | p99 (ms) |"
    );
    println!("|---|---:|---|---|---:|---:|---:|---:|");
}

fn print_bytes_head() {
    println!(
        "| store | bound | asked for (MiB) | stored by the greedy principal (MiB) | calls completed | held back | peak RSS over start (MiB) | other principal's `tasks/get` p50 (ms) | p99 (ms) | its result intact |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
}

fn print_slow_head() {
    println!(
        "| store | phase | requests/s | their store writes/s | background re-reads/s | store calls/s |"
    );
    println!("|---|---|---:|---:|---:|---:|");
}
