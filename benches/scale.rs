//! Poll scaling over real HTTP: how `tasks/get` throughput and latency, creation rate
//! and resident memory per task change as the store fills up.
//!
//! For each store and size N, a fresh child process serves the layer on 127.0.0.1
//! (hyper, `TCP_NODELAY`) around a minimal inner service whose one tool, `park`,
//! makes a task whose worker (`TaskSpec::with_work`) awaits the task's end with
//! `TaskHandle::ended()`: a parked working task, as a real long job would be. The
//! child then
//!
//! 1. creates N tasks through `tools/call` over HTTP on `SCALE_CONNS` keep-alive
//!    connections (default 32), each reply checked to be a `CreateTaskResult`;
//! 2. reads its RSS (`VmRSS`) before and after, and reports the growth per task,
//!    less the client's own list of ids (32 bytes per task);
//! 3. polls `tasks/get` on random ids for `SCALE_SECS` seconds (default 10) on the
//!    same connections, every reply checked (`status` `working`, the right
//!    `taskId`), and reports requests/s and the p50/p99 latency.
//!
//! Client and server share the child's two-worker tokio runtime, as they share the
//! machine's two cores; compare sizes within one run.
//!
//! ```text
//! cargo bench --bench scale                                    # memory store: 1k, 10k, 100k, 1M
//! SCALE_SIZES=1000,100000 cargo bench --bench scale            # other sizes
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379 \
//!   SCALE_STORE=all cargo bench --bench scale --features postgres,redis,test-util
//! ```
//!
//! `SCALE_STORE` is `memory` (default), `postgres`, `redis` or `all`; the shared
//! stores default to 1k, 10k and 100k. `SCALE_CAP=N` sets the row and per-owner caps
//! to N (default: no cap). `SCALE_INTERLEAVE=1` keeps every size's child
//! alive at once and polls them in turns of one second, so that a change of the
//! machine's pace during the run falls on every size alike. BENCHMARKS.md has the
//! results.

#[path = "../tests/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use mcp_tasks::body::RequestBody;
use mcp_tasks::store::TaskStore;
use mcp_tasks::wire::{
    EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use mcp_tasks::{MemoryStore, TaskContext, TaskId, TaskSpec, TasksLayer};
use serde_json::{Value, json};

use support::http::{bearer, connect, serve_layered};
use support::requests::Call;

const PRINCIPAL: &str = "bench";
/// The `Authorization` header that authenticates as [`PRINCIPAL`].
const BEARER: &str = "Bearer bench";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if let Ok(job) = std::env::var("SCALE_CHILD") {
        let (store, size) = job.split_once(':').expect("SCALE_CHILD=store:size");
        child(store, size.parse().expect("a size"));
        return;
    }
    // `cargo bench` passes `--bench`; a plain `cargo test --benches` passes nothing
    // and must not run for minutes.
    if !std::env::args().any(|a| a == "--bench") {
        println!("scale: run it with `cargo bench --bench scale`");
        return;
    }
    let stores: Vec<&str> = match std::env::var("SCALE_STORE").as_deref() {
        Ok("all") => vec!["memory", "postgres", "redis"],
        Ok("postgres") => vec!["postgres"],
        Ok("redis") => vec!["redis"],
        _ => vec!["memory"],
    };
    println!(
        "| store | tasks | created/s | RSS per task (bytes) | tasks/get per s | p50 (µs) | p99 (µs) | get rate / smallest |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for store in stores {
        let default_sizes = if store == "memory" {
            "1000,10000,100000,1000000"
        } else {
            "1000,10000,100000"
        };
        let sizes = std::env::var("SCALE_SIZES").unwrap_or_else(|_| default_sizes.into());
        let sizes: Vec<usize> = sizes
            .split(',')
            .filter_map(|s| s.trim().parse::<usize>().ok())
            .collect();
        if std::env::var("SCALE_INTERLEAVE").is_ok_and(|v| v == "1") {
            interleaved(store, &sizes);
            continue;
        }
        let mut smallest: Option<f64> = None;
        for size in sizes {
            let output = std::process::Command::new(std::env::current_exe().unwrap())
                .env("SCALE_CHILD", format!("{store}:{size}"))
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("the child runs");
            let text = String::from_utf8_lossy(&output.stdout);
            let Some(line) = text.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
                eprintln!(
                    "{store} {size}: no result (exit {:?})\n{text}",
                    output.status
                );
                std::process::exit(1);
            };
            let r: Value = serde_json::from_str(line).unwrap();
            print_row(store, size, &r, &mut smallest);
        }
    }
}

/// One row of the results table; `smallest` is the first size's rate.
fn print_row(store: &str, size: usize, r: &Value, smallest: &mut Option<f64>) {
    let rate = r["gets_per_s"].as_f64().unwrap();
    let base = *smallest.get_or_insert(rate);
    println!(
        "| {store} | {size} | {:.0} | {:.0} | {:.0} | {} | {} | {:.2} |",
        r["created_per_s"].as_f64().unwrap(),
        r["rss_per_task"].as_f64().unwrap(),
        rate,
        r["p50_us"],
        r["p99_us"],
        rate / base,
    );
}

/// `SCALE_INTERLEAVE=1`: one child per size, alive together (created one after
/// the other), polled in turns of one second until each has polled `SCALE_SECS`,
/// so that the machine's changes of pace fall on every size alike. An idle child
/// holds its memory but uses no CPU.
fn interleaved(store: &str, sizes: &[usize]) {
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::process::{Command, Stdio};

    let secs: u64 = env_or("SCALE_SECS", 10);
    let mut children = Vec::new();
    for &size in sizes {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("SCALE_CHILD", format!("{store}:{size}"))
            .env("SCALE_TURNS", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the child runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().and_then(Result::ok);
        assert_eq!(ready.as_deref(), Some("READY"), "{store} {size}: not ready");
        children.push((size, child, lines));
    }
    for _ in 0..secs {
        for (size, child, lines) in &mut children {
            writeln!(child.stdin.as_mut().unwrap(), "POLL").unwrap();
            let done = lines.next().and_then(Result::ok);
            assert_eq!(done.as_deref(), Some("POLLED"), "{store} {size}: no turn");
        }
    }
    let mut smallest: Option<f64> = None;
    for (size, mut child, mut lines) in children {
        drop(child.stdin.take());
        let line = lines
            .find_map(|l| l.ok()?.strip_prefix("RESULT ").map(str::to_owned))
            .unwrap_or_else(|| panic!("{store} {size}: no result"));
        let _ = child.wait();
        let r: Value = serde_json::from_str(&line).unwrap();
        print_row(store, size, &r, &mut smallest);
    }
}

fn child(store: &str, size: usize) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = runtime.block_on(run(store, size));
    println!("RESULT {result}");
}

async fn shared_store(store: &str) -> Arc<dyn TaskStore> {
    match store {
        "memory" => Arc::new(MemoryStore::new()),
        #[cfg(all(feature = "postgres", feature = "test-util"))]
        "postgres" => Arc::new(
            support::stores::postgres::scratch()
                .await
                .expect("DATABASE_URL"),
        ),
        #[cfg(all(feature = "redis", feature = "test-util"))]
        "redis" => Arc::new(support::stores::redis::scratch().await.expect("REDIS_URL")),
        other => panic!("store {other}: unknown, or built without its feature"),
    }
}

async fn exchange(sender: &mut SendRequest<Full<Bytes>>, request: Request<Full<Bytes>>) -> Value {
    let response = sender.send_request(request).await.expect("a response");
    assert!(response.status().is_success(), "{}", response.status());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).expect("a JSON reply")
}

async fn run(store: &str, size: usize) -> Value {
    let conns: usize = env_or("SCALE_CONNS", 32);
    let secs: u64 = env_or("SCALE_SECS", 10);
    let builder = TasksLayer::builder(shared_store(store).await)
        .with_anonymous_tasks()
        .with_principal(|parts| bearer(&parts.headers))
        .without_janitor();
    // `SCALE_CAP=N`: the row and per-owner caps at N, so that every create takes
    // the capped path; without it, no cap.
    let builder = match std::env::var("SCALE_CAP").ok().and_then(|n| n.parse().ok()) {
        Some(cap) => builder.with_max_rows(cap).with_max_tasks_per_owner(cap),
        None => builder.without_max_rows().without_max_tasks_per_owner(),
    };
    let layer = builder.build().unwrap();
    // The minimal inner service: `tools/call` of `park` makes a parked task; anything
    // else gets an empty result.
    // `SCALE_WORK=none` stores the tasks without workers, to tell the two costs apart.
    let parked = std::env::var("SCALE_WORK").map_or(true, |w| w != "none");
    let inner = tower::service_fn(move |request: Request<RequestBody<Incoming>>| async move {
        if let Some(context) = TaskContext::from_extensions(request.extensions()) {
            let spec = TaskSpec::new();
            let _ = context.create(if parked {
                spec.with_work(|task| async move {
                    let _ = task.ended().await;
                })
            } else {
                spec
            });
        }
        let _ = request.into_body().collect().await;
        let mut response = Response::new(Full::new(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
        )));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok::<_, Infallible>(response)
    });
    let server = serve_layered(&layer, inner).await;
    let addr = server.addr;
    let mut senders = Vec::with_capacity(conns);
    for _ in 0..conns {
        senders.push(connect::<Full<Bytes>>(addr).await.0);
    }
    let create = Call::new("tools/call")
        .params(json!({"name": "park", "arguments": {}}))
        .principal(PRINCIPAL);

    // Warm up: a few creates and gets, so that the baseline includes the
    // connections, the runtime and the allocator's first arenas.
    let warm = create_many(&mut senders, &create, conns * 4).await;
    let rss_before = support::rss_kib() * 1024;

    let started = Instant::now();
    let ids = create_many(&mut senders, &create, size).await;
    let created_per_s = size as f64 / started.elapsed().as_secs_f64();
    let rss_after = support::rss_kib() * 1024;
    let id_list = (ids.capacity() * std::mem::size_of::<TaskId>()) as f64;
    let rss_per_task = (rss_after as f64 - rss_before as f64 - id_list) / size as f64;
    drop(warm);

    let ids: Arc<Vec<TaskId>> = Arc::new(ids);
    let mut latencies = Vec::new();
    let mut polled = Duration::ZERO;
    if std::env::var("SCALE_TURNS").is_ok_and(|v| v == "1") {
        // Interleaved: poll one second per `POLL` line on stdin, until it closes.
        use std::io::{BufRead as _, Write as _};
        println!("READY");
        std::io::stdout().flush().unwrap();
        let mut turns = std::io::stdin().lock().lines();
        while let Some(Ok(_)) = turns.next() {
            let (back, mine, took) = poll_for(senders, &ids, Duration::from_secs(1)).await;
            senders = back;
            latencies.extend(mine);
            polled += took;
            println!("POLLED");
            std::io::stdout().flush().unwrap();
        }
    } else {
        let (_, mine, took) = poll_for(senders, &ids, Duration::from_secs(secs)).await;
        latencies = mine;
        polled = took;
    }
    let gets_per_s = latencies.len() as f64 / polled.as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    eprintln!(
        "scale: {store} {size}: {created_per_s:.0} created/s, {rss_per_task:.0} B/task, {gets_per_s:.0} gets/s"
    );
    json!({
        "created_per_s": created_per_s,
        "rss_per_task": rss_per_task,
        "gets_per_s": gets_per_s,
        "p50_us": at(0.5),
        "p99_us": at(0.99),
    })
}

/// Polls `tasks/get` on random ids from every connection for `length`; returns
/// the connections, every request's latency (µs) and how long the polling took.
async fn poll_for(
    senders: Vec<SendRequest<Full<Bytes>>>,
    ids: &Arc<Vec<TaskId>>,
    length: Duration,
) -> (Vec<SendRequest<Full<Bytes>>>, Vec<u32>, Duration) {
    let deadline = Instant::now() + length;
    let polling = Instant::now();
    let mut workers = Vec::new();
    for (n, mut sender) in senders.into_iter().enumerate() {
        let ids = ids.clone();
        workers.push(tokio::spawn(async move {
            let mut seed =
                0x9E37_79B9_7F4A_7C15u64 ^ (n as u64 + 1) ^ polling.elapsed().as_nanos() as u64;
            let mut latencies = Vec::with_capacity(1 << 14);
            while Instant::now() < deadline {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let id = ids[(seed % ids.len() as u64) as usize];
                let sent = Instant::now();
                poll_once(&mut sender, &id).await;
                latencies.push(sent.elapsed().as_micros() as u32);
            }
            (sender, latencies)
        }));
    }
    let mut senders = Vec::with_capacity(workers.len());
    let mut latencies = Vec::new();
    for worker in workers {
        let (sender, mine) = worker.await.unwrap();
        senders.push(sender);
        latencies.extend(mine);
    }
    (senders, latencies, polling.elapsed())
}

/// One `tasks/get` of `id`, its reply checked to be that task, `working`.
///
/// The request is written as bytes and the reply read into borrowed fields: the
/// client shares the server's process and allocator, so it allocates as little as
/// it can, to leave the server's own allocations the larger part of the cost.
async fn poll_once(sender: &mut SendRequest<Full<Bytes>>, id: &TaskId) {
    #[derive(serde::Deserialize)]
    struct Reply<'a> {
        #[serde(borrow)]
        result: Task<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Task<'a> {
        #[serde(rename = "taskId")]
        task_id: &'a str,
        status: &'a str,
    }
    let id = id.to_string();
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{{"taskId":"{id}","_meta":{{"{}":"{}","{}":{{"extensions":{{"{}":{{}}}}}}}}}}}}"#,
        META_PROTOCOL_VERSION, PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, EXTENSION_ID
    );
    let mut request = Request::post("/mcp")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let headers = request.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "application/json"),
        (header::ACCEPT, "application/json, text/event-stream"),
        (
            HeaderName::from_static("mcp-protocol-version"),
            PROTOCOL_VERSION,
        ),
        (HeaderName::from_static("mcp-method"), "tasks/get"),
        (header::AUTHORIZATION, BEARER),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(
        HeaderName::from_static("mcp-name"),
        HeaderValue::from_str(&id).unwrap(),
    );
    let response = sender.send_request(request).await.expect("a response");
    assert!(response.status().is_success(), "{}", response.status());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let reply: Reply<'_> = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&body));
    });
    assert_eq!(reply.result.task_id, id);
    assert_eq!(reply.result.status, "working");
}

/// Creates `count` tasks over the connections, all at once; returns their ids.
async fn create_many(
    senders: &mut Vec<SendRequest<Full<Bytes>>>,
    create: &Call<'static>,
    count: usize,
) -> Vec<TaskId> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for mut sender in senders.drain(..) {
        let next = next.clone();
        let create = create.clone();
        workers.push(tokio::spawn(async move {
            let mut ids: Vec<TaskId> = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < count {
                let reply = exchange(&mut sender, create.build()).await;
                let result = &reply["result"];
                assert_eq!(result["resultType"], "task", "{reply}");
                ids.push(result["taskId"].as_str().unwrap().parse().unwrap());
            }
            (sender, ids)
        }));
    }
    let mut ids = Vec::with_capacity(count);
    for worker in workers {
        let (sender, mine) = worker.await.unwrap();
        senders.push(sender);
        ids.extend(mine);
    }
    ids
}
