//! Notification latency: from `Tasks::complete()` to the client reading the
//! `notifications/tasks` event, with 1, 100 and 1 000 listen streams open over
//! loopback HTTP/1.1 (one connection per stream).
//!
//! Every stream names the same tasks, so each completion fans out to all of them.
//! Samples are taken one at a time: a task is completed, every stream's reader
//! reports when it read the event, and only then is the next task completed.
//! Server, layer and clients share one process and the same tokio runtime.
//!
//! Run with `cargo bench --bench notify`; `-- --quick` takes fewer samples.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks::{MemoryStore, TaskId};
use serde_json::json;
use support::fixtures::{ListenSupport, Server, listen_builder};
use support::sse::EventReader;
use tokio::sync::mpsc;

const WARMUP: usize = 20;

struct Row {
    mode: &'static str,
    streams: usize,
    samples: usize,
    delivery: Vec<Duration>,
    all: Vec<Duration>,
    /// How long `complete()` itself took: the writer's share of the fan-out.
    call: Vec<Duration>,
}

/// The sample index of the task a `notifications/tasks` event names.
fn task_of(event: &[u8], index: &HashMap<String, usize>) -> Option<usize> {
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

async fn run(support: ListenSupport, mode: &'static str, streams: usize, samples: usize) -> Row {
    let server =
        Server::listening_with(support, listen_builder(Arc::new(MemoryStore::new()))).await;
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
        server.tasks.complete(&task, &result).await.unwrap();
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
    for (support, mode) in [
        (ListenSupport::Stream, "merged"),
        (ListenSupport::NotFound, "tasks-only"),
    ] {
        for &(streams, samples) in plan {
            let row = runtime.block_on(run(support, mode, streams, samples));
            eprintln!(
                "{mode} {streams} streams: p50 {} us",
                micros(percentile(&row.delivery, 0.5))
            );
            rows.push(row);
        }
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
