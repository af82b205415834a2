//! Notification latency: from `Tasks::complete()` to the client reading the
//! `notifications/tasks` event, with 1, 100 and 1 000 listen streams open over
//! loopback HTTP/1.1 (one connection per stream).
//!
//! Every stream names the same tasks, so each completion fans out to all of them.
//! Samples are taken one at a time: a task is completed, every stream's reader
//! reports when it read the event, and only then is the next task completed.
//! Server, layer and clients share one process and the same tokio runtime.
//!
//! Across nodes: with `--features postgres,redis,test-util` and `DATABASE_URL` /
//! `REDIS_URL` set, it also measures two nodes on one PostgreSQL and on one Redis:
//! the task is completed through node A's `Tasks`, and the streams are open on node
//! B, so each change travels through the store's change feed before B reads the task
//! and writes the event.
//!
//! Run with `cargo bench --bench notify`; `-- --quick` takes fewer samples.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379 \
//!   cargo bench --bench notify --features postgres,redis,test-util
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks::store::TaskStore;
use mcp_tasks::{MemoryStore, TaskId};
use serde_json::json;
use support::fixtures::{ListenSupport, Server, listen_builder};
use support::sse::EventReader;
use tokio::sync::mpsc;

const WARMUP: usize = 20;

struct Row {
    mode: String,
    streams: usize,
    samples: usize,
    delivery: Vec<Duration>,
    all: Vec<Duration>,
    /// How long `complete()` itself took: the writer's share of the fan-out.
    call: Vec<Duration>,
}

/// The sample index of the task a `notifications/tasks` event names, when it tells
/// of the completion (not the snapshot of the task's state sent after the
/// acknowledgment).
fn task_of(event: &[u8], index: &HashMap<String, usize>) -> Option<usize> {
    const DONE: &[u8] = b"\"status\":\"completed\"";
    event.windows(DONE.len()).position(|w| w == DONE)?;
    const KEY: &[u8] = b"\"taskId\":\"";
    let at = event.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let id = event.get(at..at + TaskId::LEN)?;
    index.get(std::str::from_utf8(id).ok()?).copied()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn micros(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

/// The listen tests' layer, with room for the bench's 1 000 streams of one principal.
fn streams_builder(store: Arc<dyn TaskStore>) -> mcp_tasks::TasksLayerBuilder {
    listen_builder(store)
        .with_max_listen_streams(2_000)
        .with_max_listen_streams_per_owner(2_000)
}

/// Two nodes on one shared store: the writer's and the listeners'.
type Nodes = (Arc<dyn TaskStore>, Arc<dyn TaskStore>);

async fn run(
    support: ListenSupport,
    mode: String,
    nodes: Option<Nodes>,
    streams: usize,
    samples: usize,
) -> Row {
    let (writer, server) = match nodes {
        None => {
            let server =
                Server::listening_with(support, streams_builder(Arc::new(MemoryStore::new())))
                    .await;
            (None, server)
        }
        Some((a, b)) => {
            let writer = Server::listening_with(ListenSupport::NotFound, streams_builder(a)).await;
            let listener = Server::listening_with(support, streams_builder(b)).await;
            (Some(writer), listener)
        }
    };
    let tasks = writer.as_ref().map_or(&server.tasks, |w| &w.tasks).clone();
    let client = server.client();
    let total = WARMUP + samples;
    let mut ids = Vec::with_capacity(total);
    for _ in 0..total {
        ids.push(client.create_task_id("job", json!({}), None).await);
    }
    let index: Arc<HashMap<String, usize>> = Arc::new(
        ids.iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect(),
    );
    let named: Vec<&str> = ids.iter().map(String::as_str).collect();

    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Instant)>();
    let mut readers = Vec::with_capacity(streams);
    for n in 0..streams {
        let mut listen = client.listen(None, json!(n), &named).await;
        let ack = listen.next_message().await;
        assert_eq!(
            ack["params"]["notifications"]["taskIds"]
                .as_array()
                .map(Vec::len),
            Some(total),
            "the listen was not agreed"
        );
        let tx = tx.clone();
        let index = index.clone();
        readers.push(tokio::spawn(async move {
            // A lean reader: split whole events and pick out the task id, so that
            // the client's own parsing weighs little in the numbers.
            let mut events = EventReader::new();
            while let Some((chunk, at)) = listen.next_chunk_at().await {
                events.push(&chunk);
                while let Some(event) = events.next_raw() {
                    if let Some(i) = task_of(&event, &index) {
                        let _ = tx.send((i, at));
                    }
                }
            }
        }));
    }
    assert_eq!(server.listen.stream_count(), streams);

    let result = json!({"content": [{"type": "text", "text": "done"}]});
    let mut delivery = Vec::with_capacity(samples * streams);
    let mut all = Vec::with_capacity(samples);
    let mut call = Vec::with_capacity(samples);
    for (i, id) in ids.iter().enumerate() {
        let task: TaskId = id.parse().unwrap();
        let started = Instant::now();
        tasks.complete(&task, &result).await.unwrap();
        let call_took = started.elapsed();
        let mut last = Duration::ZERO;
        for _ in 0..streams {
            let (got, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .expect("a stream missed a notification")
                .unwrap();
            assert_eq!(got, i, "notifications out of step");
            let latency = at.saturating_duration_since(started);
            last = last.max(latency);
            if i >= WARMUP {
                delivery.push(latency);
            }
        }
        if i >= WARMUP {
            all.push(last);
            call.push(call_took);
        }
    }
    for reader in readers {
        reader.abort();
    }
    delivery.sort();
    all.sort();
    call.sort();
    Row {
        mode,
        streams,
        samples,
        delivery,
        all,
        call,
    }
}

/// Two scratch nodes of a shared store, as [`run`] takes them.
#[cfg(all(feature = "test-util", any(feature = "postgres", feature = "redis")))]
fn as_nodes(pair: Option<(impl TaskStore, impl TaskStore)>) -> Option<Nodes> {
    pair.map(|(a, b)| {
        (
            Arc::new(a) as Arc<dyn TaskStore>,
            Arc::new(b) as Arc<dyn TaskStore>,
        )
    })
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let plan: &[(usize, usize)] = if quick {
        &[(1, 100), (100, 50), (1000, 20)]
    } else {
        &[(1, 900), (100, 400), (1000, 100)]
    };
    let mut rows = Vec::new();
    let mut measure = |support, mode: &str, nodes: &dyn Fn() -> Option<Nodes>| {
        for &(streams, samples) in plan {
            let row = runtime.block_on(run(support, mode.to_owned(), nodes(), streams, samples));
            eprintln!(
                "{mode} {streams} streams: p50 {} us",
                micros(percentile(&row.delivery, 0.5))
            );
            rows.push(row);
        }
    };
    measure(ListenSupport::Stream, "merged", &|| None);
    measure(ListenSupport::NotFound, "tasks-only", &|| None);
    #[cfg(all(feature = "postgres", feature = "test-util"))]
    if support::stores::postgres::database_url().is_some() {
        let nodes = || as_nodes(runtime.block_on(support::stores::postgres::two_nodes()));
        measure(
            ListenSupport::NotFound,
            "tasks-only, PostgreSQL, node A → node B",
            &nodes,
        );
    }
    #[cfg(all(feature = "redis", feature = "test-util"))]
    if support::stores::redis::redis_url().is_some() {
        let nodes = || as_nodes(runtime.block_on(support::stores::redis::two_nodes()));
        measure(
            ListenSupport::NotFound,
            "tasks-only, Redis, node A → node B",
            &nodes,
        );
    }
    println!(
        "| stream body | streams | samples | p50 per stream (µs) | p99 per stream (µs) | p50 all streams (µs) | p99 all streams (µs) | p50 `complete()` call (µs) | p99 `complete()` call (µs) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.mode,
            row.streams,
            row.samples,
            micros(percentile(&row.delivery, 0.5)),
            micros(percentile(&row.delivery, 0.99)),
            micros(percentile(&row.all, 0.5)),
            micros(percentile(&row.all, 0.99)),
            micros(percentile(&row.call, 0.5)),
            micros(percentile(&row.call, 0.99)),
        );
    }
}
