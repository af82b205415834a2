//! Every metric of the table in `mcp_tasks::observe`, read from a Prometheus recorder right after
//! the event that moves it, over real HTTP. One test, because the recorder is
//! process-wide; each step compares with the value before it.

mod support;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::pending;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use mcp_tasks::body::RequestBody;
use mcp_tasks::store::{
    BoxFuture, LeaseId, LeaseState, LeaseStore, MemoryLeases, Renewal, Renewed,
};
use mcp_tasks::test_suite::{Intercept, StoreCall, StoreHooks};
use mcp_tasks::{
    MemoryStore, TaskId, TaskMode, TaskSpec, TasksLayer, error::StoreError, wire::RpcError,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::json;
use support::fixtures::{ListenSupport, Server, Tool, layer_builder, spec, standard_inner};
use support::http::{Client, serve_layered};
use support::wait;

/// The rendered metrics, as `name{labels}` → value.
struct Metrics(PrometheusHandle);

impl Metrics {
    fn read(&self) -> BTreeMap<String, f64> {
        self.0
            .render()
            .lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .filter_map(|line| {
                let (key, value) = line.rsplit_once(' ')?;
                Some((key.to_owned(), value.parse().ok()?))
            })
            .collect()
    }

    /// One series: `key` is the name with its labels as Prometheus writes them;
    /// a series never written reads 0.
    fn value(&self, key: &str) -> f64 {
        self.read().get(key).copied().unwrap_or(0.0)
    }

    async fn until(&self, key: &str, expected: f64) {
        wait::until(&format!("{key} = {expected}"), || {
            self.value(key) == expected
        })
        .await;
    }
}

/// Moves a value read before an event, and checks how much the event moved it.
macro_rules! moved {
    ($metrics:expr, $key:expr, $by:expr, $event:expr) => {{
        let before = $metrics.value($key);
        let out = $event;
        let after = $metrics.value($key);
        assert_eq!(
            after - before,
            $by as f64,
            "{} moved by {}",
            $key,
            after - before
        );
        out
    }};
}

/// Fails every `get` while switched on.
#[derive(Debug, Default)]
struct FailingGets(AtomicBool);

impl StoreHooks for FailingGets {
    fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
        if matches!(call, StoreCall::Get { .. }) && self.0.load(Ordering::Relaxed) {
            return Err(StoreError::backend("the store is down"));
        }
        Ok(())
    }
}

// One current-thread runtime: a listen stream's body runs only when the test yields,
// so two quick changes coalesce deterministically.
#[tokio::test]
async fn each_metric_moves_with_the_event_it_counts() {
    let metrics = Metrics(PrometheusBuilder::new().install_recorder().unwrap());
    let mut ids: Vec<String> = Vec::new();

    // --- tasks created, finished by status, refused, workers, listen, janitor
    let layer = layer_builder()
        .with_keep_alive(Duration::from_millis(50))
        .with_janitor(Duration::from_secs(3600), Duration::from_secs(3600))
        .build()
        .unwrap();
    let inner = standard_inner(&layer.tasks())
        .listen(ListenSupport::NotFound)
        .tool(
            "parked",
            Tool::Context(spec(|_| {
                TaskSpec::new().with_work(|task| async move {
                    let _ = task.run_until_ended(pending::<()>()).await;
                })
            })),
        );
    let server = Server::start(layer.clone(), inner).await;
    let client = server.client();
    let alice = Some("alice");

    // Every counter is there from the start, at zero, with each of its labels.
    let fresh = metrics.0.render();
    for series in [
        "mcp_tasks_leases_lost_total 0",
        "mcp_tasks_lease_renewals_failed_total 0",
        "mcp_tasks_janitor_removed_total 0",
        "mcp_tasks_refused_total{reason=\"rows\"} 0",
        "mcp_tasks_finished_total{status=\"failed\"} 0",
        "mcp_tasks_store_errors_total{op=\"update\"} 0",
        "mcp_tasks_listen_refused_total{limit=\"listen_bytes_total\"} 0",
        "mcp_tasks_max_rows 10000",
    ] {
        assert!(fresh.contains(series), "{series} in {fresh}");
    }

    let held = moved!(metrics, "mcp_tasks_created_total", 1, {
        client.create_task_id("work", json!({}), alice).await
    });
    assert!(metrics.value("mcp_tasks_store_call_seconds_count{op=\"create\"}") >= 1.0);
    // Without buckets the exporter writes the histogram as a summary, as the
    // table of `mcp_tasks::observe` says.
    assert!(
        metrics
            .0
            .render()
            .contains("# TYPE mcp_tasks_store_call_seconds summary"),
        "{}",
        metrics.0.render()
    );
    ids.push(held.clone());

    moved!(
        metrics,
        "mcp_tasks_refused_total{reason=\"extension_required\"}",
        1,
        {
            client
                .call_tool("task_only", json!({}), false, alice)
                .await
                .assert_capability_error();
        }
    );

    for (then, status) in [("complete", "completed"), ("fail", "failed")] {
        let key = format!("mcp_tasks_finished_total{{status=\"{status}\"}}");
        let before = metrics.value(&key);
        let id = client
            .create_task_id("work", json!({"then": then}), alice)
            .await;
        client.wait_for_end(&id, alice).await;
        assert_eq!(metrics.value(&key) - before, 1.0, "{key}");
        ids.push(id);
    }
    moved!(
        metrics,
        "mcp_tasks_finished_total{status=\"cancelled\"}",
        1,
        {
            client.cancel(&held, alice).await.ok();
        }
    );

    let workers = metrics.value("mcp_tasks_workers");
    let parked = client.create_task_id("parked", json!({}), alice).await;
    metrics.until("mcp_tasks_workers", workers + 1.0).await;
    client.cancel(&parked, alice).await.ok();
    metrics.until("mcp_tasks_workers", workers).await;
    ids.push(parked);

    let watched = client.create_task_id("work", json!({}), alice).await;
    ids.push(watched.clone());
    let streams = metrics.value("mcp_tasks_listen_streams");
    let sent = metrics.value("mcp_tasks_notifications_sent_total");
    let mut stream = client.listen(alice, json!(7), &[&watched]).await;
    stream.next_message().await;
    stream.snapshot(1).await;
    assert_eq!(metrics.value("mcp_tasks_listen_streams"), streams + 1.0);
    assert_eq!(
        metrics.value("mcp_tasks_notifications_sent_total") - sent,
        1.0,
        "the snapshot"
    );
    let id: TaskId = watched.parse().unwrap();
    moved!(metrics, "mcp_tasks_notifications_coalesced_total", 1, {
        server.tasks.progress(&id, "first").await.unwrap();
        server.tasks.progress(&id, "second").await.unwrap();
    });
    let latest = stream.next_message().await;
    assert_eq!(latest["params"]["statusMessage"], "second");
    assert_eq!(
        metrics.value("mcp_tasks_notifications_sent_total") - sent,
        2.0,
        "the snapshot and the newest state"
    );
    drop(stream);
    metrics.until("mcp_tasks_listen_streams", streams).await;

    let sweeps = metrics.value("mcp_tasks_janitor_sweeps_total");
    let removed_before = metrics.value("mcp_tasks_janitor_removed_total");
    for _ in 0..2 {
        ids.push(
            client
                .create_task_id("work", json!({"ttl_ms": 1}), alice)
                .await,
        );
    }
    tokio::time::sleep(Duration::from_millis(5)).await; // past their 1 ms TTL
    let removed = layer.janitor().sweep().await.unwrap();
    assert_eq!(removed, 2, "the expired tasks");
    assert_eq!(
        metrics.value("mcp_tasks_janitor_sweeps_total") - sweeps,
        1.0
    );
    assert_eq!(
        metrics.value("mcp_tasks_janitor_removed_total") - removed_before,
        removed as f64
    );

    // --- the row cap
    let capped = Server::with_layer(layer_builder().with_max_rows(1)).await;
    let capped_client = capped.client();
    ids.push(capped_client.create_task_id("work", json!({}), alice).await);
    moved!(metrics, "mcp_tasks_refused_total{reason=\"rows\"}", 1, {
        capped_client
            .call_tool("work", json!({}), true, alice)
            .await
            .assert_error(RpcError::INTERNAL_ERROR, 200);
    });

    // --- a drain: an optional call runs synchronously, a task-only one is refused
    let draining = layer_builder().build().unwrap();
    let draining_server = Server::start(draining.clone(), standard_inner(&draining.tasks())).await;
    let draining_client = draining_server.client();
    draining.drain(Duration::from_secs(1)).await;
    moved!(
        metrics,
        "mcp_tasks_refused_total{reason=\"shutting_down\"}",
        2,
        {
            let sync = draining_client
                .call_tool("work", json!({}), true, alice)
                .await;
            assert!(sync.json["result"].is_object(), "{}", sync.text());
            draining_client
                .call_tool("task_only", json!({}), true, alice)
                .await
                .assert_error(RpcError::INTERNAL_ERROR, 503);
        }
    );

    // --- a node that cannot store its worker lease on a new task refuses it
    let unleased =
        Server::with_layer(layer_builder().with_lease_store(support::faults::NoLeases)).await;
    moved!(
        metrics,
        "mcp_tasks_refused_total{reason=\"no_worker_lease\"}",
        1,
        {
            unleased
                .client()
                .call_tool("work", json!({}), true, alice)
                .await
                .assert_error(RpcError::INTERNAL_ERROR, 503);
        }
    );

    // --- Auto runners
    let auto = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .without_janitor()
        .with_default_mode(TaskMode::Auto {
            after: Duration::from_millis(20),
        })
        .build()
        .unwrap();
    // Every call stays unanswered: past its budget, it becomes a task with a runner.
    let never_answers =
        tower::service_fn(|_req: Request<RequestBody<hyper::body::Incoming>>| async {
            pending::<()>().await;
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
        });
    let auto_server = serve_layered(&auto, never_answers).await;
    let auto_client = Client::new(auto_server.addr);
    let runners = metrics.value("mcp_tasks_runners");
    let running = auto_client
        .create_task_id("anything", json!({}), alice)
        .await;
    assert_eq!(metrics.value("mcp_tasks_runners"), runners + 1.0);
    auto_client.cancel(&running, alice).await.ok();
    metrics.until("mcp_tasks_runners", runners).await;
    ids.push(running);

    // --- store errors
    let store = Arc::new(Intercept::new(MemoryStore::new(), FailingGets::default()));
    let failing = Server::with_layer(
        TasksLayer::builder(store.clone())
            .with_anonymous_tasks()
            .without_janitor()
            .with_server_info("metrics", "0"),
    )
    .await;
    let failing_client = failing.client();
    let task = failing_client
        .create_task_id("work", json!({}), alice)
        .await;
    store.hooks().0.store(true, Ordering::Relaxed);
    moved!(metrics, "mcp_tasks_store_errors_total{op=\"get\"}", 1, {
        failing_client
            .get(&task, alice)
            .await
            .assert_error(RpcError::INTERNAL_ERROR, 200);
    });
    ids.push(task);

    // --- worker leases: a node cut off from its leases loses its task to the other
    leases_move_their_metrics(&metrics).await;

    // No label carries a task id or a principal.
    let text = metrics.0.render();
    for id in &ids {
        assert!(
            !text.contains(&id[..16]),
            "a task id in the metrics:\n{text}"
        );
    }
    assert!(
        !text.contains("alice"),
        "a principal in the metrics:\n{text}"
    );
}

/// Leases that answer with an error while `down` is set.
#[derive(Debug, Clone, Default)]
struct CutLeases {
    inner: MemoryLeases,
    down: Arc<AtomicBool>,
}

impl CutLeases {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::Acquire) {
            return Err(StoreError::backend("the store is unreachable"));
        }
        Ok(())
    }
}

impl LeaseStore for CutLeases {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
        match self.check() {
            Ok(()) => self.inner.renew(renewal),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
        match self.check() {
            Ok(()) => self.inner.leases(),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn claim<'a>(
        &'a self,
        lease: &'a LeaseId,
        renewals: u64,
    ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>> {
        match self.check() {
            Ok(()) => self.inner.claim(lease, renewals),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        match self.check() {
            Ok(()) => self.inner.forget(lease),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// Two layers over one store sharing leases: one holds a task (the held gauge),
/// is cut off from the leases until the other fails its task (recovered), and
/// learns it when it is back (lost).
async fn leases_move_their_metrics(metrics: &Metrics) {
    const LEASE: Duration = Duration::from_millis(200);
    let store = Arc::new(MemoryStore::new());
    let leases = CutLeases::default();
    let node = |leases: CutLeases| {
        TasksLayer::builder(store.clone())
            .with_anonymous_tasks()
            .with_worker_lease(LEASE)
            .with_lease_store(leases)
            .without_janitor()
            .build()
            .unwrap()
    };
    let cut = node(leases.clone());
    let _keeps = node(CutLeases {
        inner: leases.inner.clone(),
        down: Arc::default(),
    });
    let id = TaskId::random();
    mcp_tasks::store::TaskStore::create(
        &*store,
        mcp_tasks::TaskRecord::new(id, None, mcp_tasks::store::Timestamp::now()),
        mcp_tasks::store::CreateLimits::default(),
    )
    .await
    .unwrap();
    let held = metrics.value("mcp_tasks_held_tasks");
    cut.tasks().hold(id);
    metrics.until("mcp_tasks_held_tasks", held + 1.0).await;
    // Let the other node watch long enough to claim.
    tokio::time::sleep(LEASE * 3).await;

    let (recovered, lost, late) = (
        metrics.value("mcp_tasks_lease_recovered_total"),
        metrics.value("mcp_tasks_leases_lost_total"),
        metrics.value("mcp_tasks_lease_renewals_failed_total"),
    );
    leases.down.store(true, Ordering::Release);
    metrics
        .until("mcp_tasks_lease_recovered_total", recovered + 1.0)
        .await;
    assert!(metrics.value("mcp_tasks_lease_renewals_failed_total") > late);
    leases.down.store(false, Ordering::Release);
    metrics
        .until("mcp_tasks_leases_lost_total", lost + 1.0)
        .await;
    metrics.until("mcp_tasks_held_tasks", held).await;
}
