//! What a job-backed task costs against an in-process one: the same call, create and
//! complete, side by side in one run, on PostgreSQL.
//!
//! A node (a hyper server on 127.0.0.1 with its `TasksLayer` over a listening
//! `PostgresStore`) serves two tools whose work does nothing but complete:
//!
//! - `in_process`: `TaskSpec::with_work`, the work spawned in the node's process;
//! - `queued`: `JobQueue::task`, the work a job that a `Worker` runs, on a store
//!   instance and layer of its own (its own pool and change feed, as a worker
//!   process would have), in the same process as the bench.
//!
//! For each tool, one sample is a `tools/call` over HTTP (`create`: until the
//! `CreateTaskResult` arrives) and then the wait, on the node's worker API
//! (`Tasks::ended`, woken by the store's change feed, no polling), until the task is
//! `completed` (`complete`: from sending the call). Samples alternate between the
//! tools, one at a time (latency, after 20 warm-up samples each); then each tool's
//! throughput with `QUEUE_IN_FLIGHT` calls in flight (default 32) for
//! `QUEUE_TASKS` tasks (default 2 000), the tools one after the other, twice.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo bench --bench queue --features queue,test-util
//! ```
//!
//! `QUEUE_SAMPLES` sets the latency samples per tool (default 300). BENCHMARKS.md
//! ("Job-backed tasks") has the results.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use mcp_tasks::queue::{JobQueue, Worker};
use mcp_tasks::worker::{TaskEnd, Tasks};
use mcp_tasks::{PostgresStore, TaskId, TaskSpec, TasksLayer};
use serde_json::{Value, json};
use support::fixtures::{Inner, Server, Tool, spec};
use support::http::{Client, bearer};
use support::stores::postgres::{DropTable, scratch_table};

const WARM_UP: usize = 20;
const TOOLS: [&str; 2] = ["in_process", "queued"];

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn done() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

/// A listening store instance on `table`, with a pool of its own.
async fn store(url: &str, table: &str) -> PostgresStore {
    let store = PostgresStore::connect(url)
        .await
        .expect("connect to DATABASE_URL")
        .with_table(table)
        .expect("a valid table");
    store.migrate().await.expect("migrate");
    store.listen().await.expect("listen");
    store
}

/// p50 and p99 of `samples`, in µs.
fn summary(mut samples: Vec<Duration>) -> (u128, u128) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_micros();
    (at(0.5), at(0.99))
}

/// One call of `tool`, followed to its completion: (create, complete).
async fn one(client: &Client, tasks: &Tasks, tool: &str) -> (Duration, Duration) {
    let sent = Instant::now();
    let id = client.create_task_id(tool, json!({}), Some("alice")).await;
    let created = sent.elapsed();
    let id: TaskId = id.parse().unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), tasks.ended(&id))
        .await
        .unwrap_or_else(|_| panic!("{tool}: the task did not complete within 10 s"));
    assert_eq!(end, TaskEnd::Completed, "{tool}");
    (created, sent.elapsed())
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` must not run for minutes.
    if !std::env::args().any(|a| a == "--bench") {
        println!("queue: run it with `cargo bench --bench queue --features queue,test-util`");
        return;
    }
    let Some(url) = support::stores::postgres::database_url() else {
        return;
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(url));
}

async fn run(url: String) {
    let samples: usize = env_or("QUEUE_SAMPLES", 300);
    let in_flight: usize = env_or("QUEUE_IN_FLIGHT", 32);
    let total: usize = env_or("QUEUE_TASKS", 2_000);
    let table = scratch_table();
    let _drop = DropTable::new(url.clone(), table.clone());

    // The node.
    let node_store = store(&url, &table).await;
    let queue = JobQueue::on(&node_store);
    queue.migrate().await.expect("migrate the queue");
    let layer = TasksLayer::builder(node_store)
        .with_principal(|parts| bearer(&parts.headers))
        .without_max_tasks_per_owner()
        .without_janitor()
        .build()
        .unwrap();
    let in_process = Tool::Context(spec(|_| {
        TaskSpec::new().with_work(|task| async move {
            let _ = task.complete(done()).await;
        })
    }));
    let queued = {
        let queue = queue.clone();
        Tool::Context(spec(move |args| queue.task("queued", args.clone())))
    };
    let inner = Inner::new()
        .tool("in_process", in_process)
        .tool("queued", queued);
    let server = Server::start(layer, inner).await;
    let tasks = server.tasks.clone();
    let client = server.client();

    // The worker: a store instance and a layer of its own.
    let worker_store = store(&url, &table).await;
    let worker_queue = JobQueue::on(&worker_store);
    let worker_tasks = TasksLayer::builder(worker_store)
        .without_worker_leases()
        .without_janitor()
        .build()
        .unwrap()
        .tasks();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(
        Worker::new(worker_queue, worker_tasks, |_job| async { Ok(done()) })
            .with_concurrency(in_flight)
            .run(async {
                let _ = stopped.await;
            }),
    );

    println!(
        "job-backed against in-process tasks, PostgreSQL, {samples} samples each, alternating (µs)"
    );
    let mut created: [Vec<Duration>; 2] = Default::default();
    let mut completed: [Vec<Duration>; 2] = Default::default();
    for n in 0..WARM_UP + samples {
        for (i, tool) in TOOLS.iter().enumerate() {
            let (create, complete) = one(&client, &tasks, tool).await;
            if n >= WARM_UP {
                created[i].push(create);
                completed[i].push(complete);
            }
        }
    }
    let create = [summary(created[0].clone()), summary(created[1].clone())];
    let complete = [summary(completed[0].clone()), summary(completed[1].clone())];
    println!("| | in process p50 | queued p50 | ratio | in process p99 | queued p99 | ratio |");
    println!("|---|---|---|---|---|---|---|");
    for (what, [a, b]) in [("create", create), ("create → completed", complete)] {
        println!(
            "| {what} | {} | {} | {:.2}x | {} | {} | {:.2}x |",
            a.0,
            b.0,
            b.0 as f64 / a.0 as f64,
            a.1,
            b.1,
            b.1 as f64 / a.1 as f64
        );
    }

    println!(
        "\nthroughput, {total} tasks, {in_flight} in flight (created and completed per second)"
    );
    for round in 1..=2 {
        let mut rates = Vec::new();
        for tool in TOOLS {
            let started = Instant::now();
            let mut running = tokio::task::JoinSet::new();
            let per = total / in_flight;
            for _ in 0..in_flight {
                let client = client.clone();
                let tasks = tasks.clone();
                running.spawn(async move {
                    for _ in 0..per {
                        one(&client, &tasks, tool).await;
                    }
                });
            }
            while let Some(done) = running.join_next().await {
                done.unwrap();
            }
            let rate = (per * in_flight) as f64 / started.elapsed().as_secs_f64();
            rates.push(rate);
        }
        println!(
            "round {round}: in process {:.0}/s, queued {:.0}/s ({:.2}x)",
            rates[0],
            rates[1],
            rates[1] / rates[0]
        );
    }
    let _ = stop.send(());
    worker.await.unwrap();
}
