//! Cancel-to-stop latency: from a client sending `tasks/cancel` over HTTP until the
//! worker's work future has been dropped, for a worker parked in
//! `TaskHandle::run_until_ended` (no polling anywhere).
//!
//! Two nodes, each a hyper server on 127.0.0.1 with its own `TasksLayer`, share one
//! store; the worker always runs on node A. *Same node* sends the cancel to A,
//! *cross node* to B, so the cancel reaches A through the store's change feed
//! (PostgreSQL `LISTEN`/`NOTIFY`, Redis pub/sub). The memory store has one node.
//! Samples are taken one at a time: create a task on A, wait until its worker is
//! parked, send the cancel, wait for the work to be dropped (20 warm-up samples).
//!
//! ```text
//! cargo bench --bench cancel                                  # memory store
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379 \
//!   cargo bench --bench cancel --features postgres,redis,test-util
//! ```
//!
//! `CANCEL_SAMPLES` sets the samples per row (default 300). BENCHMARKS.md has the
//! results.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks::store::TaskStore;
use mcp_tasks::{MemoryStore, TaskSpec, TasksLayer};
use serde_json::json;
use support::fixtures::{Inner, Server, Tool, spec};
use support::http::bearer;
use tokio::sync::mpsc;

const WARM_UP: usize = 20;

/// What a worker reports: parked (about to await the cancel), then stopped (its work
/// future dropped), with the instant.
enum Event {
    Parked,
    Stopped(Instant),
}

/// Sends `Stopped` when the work future is dropped.
struct OnDrop(mpsc::UnboundedSender<Event>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(Event::Stopped(Instant::now()));
    }
}

async fn node(store: Arc<dyn TaskStore>, events: mpsc::UnboundedSender<Event>) -> Server {
    let layer = TasksLayer::builder(store)
        .with_anonymous_tasks()
        .with_principal(|parts| bearer(&parts.headers))
        .without_janitor()
        .build()
        .unwrap();
    let park = Tool::Context(spec(move |_| {
        let events = events.clone();
        TaskSpec::new().with_work(move |task| async move {
            let guard = OnDrop(events.clone());
            let work = async move {
                let _guard = guard;
                std::future::pending::<()>().await
            };
            let _ = events.send(Event::Parked);
            let _ = task.run_until_ended(work).await;
        })
    }));
    Server::start(layer, Inner::new().tool("park", park)).await
}

/// p50, p99 and max of `samples`, in µs.
fn summary(mut samples: Vec<Duration>) -> (u128, u128, u128) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_micros();
    (at(0.5), at(0.99), samples.last().unwrap().as_micros())
}

async fn measure(name: &str, a: Arc<dyn TaskStore>, b: Option<Arc<dyn TaskStore>>) {
    let samples: usize = std::env::var("CANCEL_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let (events, mut reports) = mpsc::unbounded_channel();
    let node_a = node(a, events.clone()).await;
    let node_b = match b {
        Some(b) => Some(node(b, events).await),
        None => None,
    };
    let alice = Some("alice");
    let mut targets = vec![("same node", &node_a)];
    if let Some(b) = &node_b {
        targets.push(("cross node", b));
    }
    for (mode, via) in targets {
        let mut latencies = Vec::with_capacity(samples);
        for n in 0..WARM_UP + samples {
            let id = node_a
                .client()
                .create_task_id("park", json!({}), alice)
                .await;
            match reports.recv().await {
                Some(Event::Parked) => {}
                _ => panic!("the worker did not start"),
            }
            let client = via.client();
            let sent = Instant::now();
            let cancel = tokio::spawn(async move { client.cancel(&id, alice).await });
            let stopped = match tokio::time::timeout(Duration::from_secs(10), reports.recv()).await
            {
                Ok(Some(Event::Stopped(at))) => at,
                _ => panic!("{name} {mode}: the worker did not stop within 10 s"),
            };
            cancel.await.unwrap().ok();
            if n >= WARM_UP {
                latencies.push(stopped.saturating_duration_since(sent));
            }
        }
        let (p50, p99, max) = summary(latencies);
        println!("| {name} | {mode} | {samples} | {p50} | {p99} | {max} |");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("cancel: run it with `cargo bench --bench cancel`");
        return;
    }
    println!("| store | cancel sent to | samples | p50 (µs) | p99 (µs) | max (µs) |");
    println!("|---|---|---:|---:|---:|---:|");
    measure("memory", Arc::new(MemoryStore::new()), None).await;
    #[cfg(all(feature = "postgres", feature = "test-util"))]
    if let Some((a, b)) = support::stores::postgres::two_nodes().await {
        measure("postgres", Arc::new(a), Some(Arc::new(b))).await;
    }
    #[cfg(all(feature = "redis", feature = "test-util"))]
    if let Some((a, b)) = support::stores::redis::two_nodes().await {
        measure("redis", Arc::new(a), Some(Arc::new(b))).await;
    }
}
