//! What the layer tells operators: a `tracing` span for each request it answers,
//! and metrics on the `metrics` facade (feature `metrics`). No field and no label
//! ever carries a task id or a principal: labels are fixed words.
//!
//! # Tracing
//!
//! Every request the layer answers itself (the `tasks/*` methods, `tools/call`,
//! `server/discover`, `subscriptions/listen`) runs in a DEBUG span named `mcp_tasks`
//! with these fields:
//!
//! | field | what it holds |
//! |---|---|
//! | `method` | the JSON-RPC method |
//! | `outcome` | `result` (the layer answered), `task` (the call became a task), `error` (the layer answered a JSON-RPC error), `stream` (a listen stream opened), `forwarded` (the inner service answered) |
//! | `error_code` | with `outcome=error`: the JSON-RPC code (`-32602`, `-32021`, …) |
//! | `store_us` | microseconds spent in store calls for this request |
//! | `elapsed_us` | microseconds for the whole request, up to the response head |
//!
//! Stacked under `tower_http::trace::TraceLayer` (as the quickstart does), each
//! `mcp_tasks` span nests inside the HTTP request's span. With no subscriber
//! interested, nothing is collected: the span is disabled and the route runs as it is.
//!
//! # Metrics
//!
//! With the feature `metrics`, the layer writes to the
//! [`metrics`](https://docs.rs/metrics) facade, so any recorder sees them (Prometheus,
//! StatsD, OpenTelemetry…). Install the recorder before building the layer.
//!
//! | name | type | labels | moves when |
//! |---|---|---|---|
//! | `mcp_tasks_created_total` | counter | | a task is stored |
//! | `mcp_tasks_refused_total` | counter | `reason`: `rows`, `per_owner`, `bytes_per_owner`, `shutting_down`, `no_worker_lease`, `extension_required`, `principal_required`, `task_required`, `task_forbidden` | a call that would have been a task is refused (a cap, a drain, a node that cannot store its worker lease on the task, a principal's stored bytes, a `Required` tool called without the extension, an anonymous request without `with_anonymous_tasks`; on 2025-11-25 a `required` tool called without `task`, a `forbidden` one with it), or a write to a task is (`bytes_per_owner`: answers or a status message left out, a result that fails its task instead) |
//! | `mcp_tasks_finished_total` | counter | `status`: `completed`, `failed`, `cancelled` | a write of this node moves a task to a terminal status |
//! | `mcp_tasks_notifications_sent_total` | counter | | a `notifications/tasks` event is written to a listen stream |
//! | `mcp_tasks_notifications_coalesced_total` | counter | | a pending notification is replaced by a newer state of its task before its stream wrote it |
//! | `mcp_tasks_janitor_sweeps_total` | counter | | the janitor sweeps |
//! | `mcp_tasks_janitor_removed_total` | counter | | the janitor removes expired or retired records |
//! | `mcp_tasks_listen_streams` | gauge | | a listen stream opens or closes |
//! | `mcp_tasks_runners` | gauge | | a `TaskMode::Auto` runner starts or ends |
//! | `mcp_tasks_workers` | gauge | | work under a `TaskHandle` starts or its last handle is dropped |
//! | `mcp_tasks_store_call_seconds` | histogram (in Prometheus: a summary, unless buckets are set) | `op`: `create`, `get`, `get_many`, `get_many_within`, `update`, `owner_bytes` | a store call of a route or a worker returns |
//! | `mcp_tasks_store_errors_total` | counter | `op`, as above | a store call fails |
//! | `mcp_tasks_lease_recovered_total` | counter | | this node fails a task held by a lease it claimed (a dead node's work) |
//! | `mcp_tasks_leases_lost_total` | counter | | this node learns that other nodes claimed its lease (it was cut off longer than its lease) |
//! | `mcp_tasks_held_tasks` | gauge | | this node's count of leased tasks changes, at each renewal |
//! | `mcp_tasks_lease_renewals_failed_total` | counter | | a renewal of this node's lease fails or times out (renewals are late: past the lease, its work is failed by others) |
//! | `mcp_tasks_listen_refused_total` | counter | `limit`: `listen_per_owner`, `listen_total`, `listen_bytes_per_owner`, `listen_bytes_total` | a listen is refused, or a stream ended, at a stream cap or a byte bound |
//! | `mcp_tasks_max_rows` | gauge | | set once when the layer is built: the row cap (`with_max_rows`), 0 without one |
//!
//! Every counter exists from the moment the layer is built, at zero for each of its
//! labels above, so that an alert on its `rate()` has a series on a fresh node.
//! `ops/prometheus/` in the repository holds alert rules for these metrics (tested
//! with `promtool test rules`) and a Grafana dashboard.
//!
//! The one histogram is recorded through the facade's `histogram!`;
//! `metrics-exporter-prometheus` exports it as a summary (quantiles, `_sum`, `_count`)
//! unless `set_buckets_for_metric` gives it buckets, which `examples/metrics.rs` does.
//!
//! In the repository, `cargo run --example metrics --features metrics` serves the
//! `retrofit` example with a Prometheus `/metrics` endpoint beside `/mcp`
//! (127.0.0.1:3005), and `tests/metrics.rs` reads each metric after the event that
//! moves it.

use std::cell::Cell;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::task::TaskStatus;

/// How a route ended, for its span's `outcome` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The inner service answered (the default).
    Forwarded,
    /// The layer answered with a result of its own.
    Result,
    /// The call became a task.
    Task,
    /// A listen stream opened.
    Stream,
    /// The layer answered with a JSON-RPC error of this code.
    Error(i64),
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Result => "result",
            Outcome::Task => "task",
            Outcome::Stream => "stream",
            Outcome::Error(_) => "error",
        }
    }
}

/// What one route collects while it runs, when its span is enabled.
struct RouteStats {
    store: Cell<Duration>,
    outcome: Cell<Outcome>,
}

tokio::task_local! {
    static ROUTE: RouteStats;
}

pin_project_lite::pin_project! {
    /// A route as [`route`] runs it: the route's own future, held once (with its
    /// span disabled), or boxed with what records its span.
    #[project = RoutedProj]
    pub(crate) enum Routed<'a, F: Future> {
        Plain { #[pin] route: F },
        Traced { route: std::pin::Pin<Box<dyn Future<Output = F::Output> + Send + 'a>> },
    }
}

impl<F: Future> Future for Routed<'_, F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        match self.project() {
            RoutedProj::Plain { route } => route.poll(cx),
            RoutedProj::Traced { route } => route.as_mut().poll(cx),
        }
    }
}

/// Runs the route `make` makes inside `span`, and records on it the route's
/// outcome, the time spent in store calls and the total time. With the span
/// disabled the route runs as it is, with nothing collected and nothing added to its
/// future.
pub(crate) fn route<'a, F>(span: tracing::Span, make: impl FnOnce() -> F) -> Routed<'a, F>
where
    F: Future + Send + 'a,
{
    if span.is_disabled() {
        return Routed::Plain { route: make() };
    }
    Routed::Traced {
        route: Box::pin(traced(span, make())),
    }
}

async fn traced<T>(span: tracing::Span, route: impl Future<Output = T>) -> T {
    use tracing::Instrument as _;
    let stats = RouteStats {
        store: Cell::new(Duration::ZERO),
        outcome: Cell::new(Outcome::Forwarded),
    };
    let started = Instant::now();
    let (out, stats) = ROUTE
        .scope(stats, async {
            let out = route.await;
            let stats = ROUTE.with(|s| (s.outcome.get(), s.store.get()));
            (out, stats)
        })
        .instrument(span.clone())
        .await;
    let (outcome, store) = stats;
    span.record("outcome", tracing::field::display(outcome.as_str()));
    if let Outcome::Error(code) = outcome {
        span.record("error_code", code);
    }
    span.record("store_us", store.as_micros() as u64);
    span.record("elapsed_us", started.elapsed().as_micros() as u64);
    out
}

/// Notes how the current route ended (nothing outside a recorded route).
pub(crate) fn outcome(outcome: Outcome) {
    let _ = ROUTE.try_with(|s| s.outcome.set(outcome));
}

/// Whether a recorded route is running on this task (its span takes store time).
pub(crate) fn in_route() -> bool {
    ROUTE.try_with(|_| ()).is_ok()
}

/// Notes a store call that began at `started`: in the current route's span and
/// the store call metrics.
pub(crate) fn store_call_done(op: &'static str, started: Instant, ok: bool) {
    let in_route = in_route();
    if !in_route && !cfg!(feature = "metrics") {
        return;
    }
    let took = started.elapsed();
    if in_route {
        let _ = ROUTE.try_with(|s| s.store.set(s.store.get() + took));
    }
    store_call(op, took, ok);
}

#[cfg(feature = "metrics")]
fn store_call(op: &'static str, took: Duration, ok: bool) {
    // Each operation's name as a literal, so that its keys are static: a key with
    // a label from a variable is built (and allocated) on every call.
    macro_rules! record {
        ($($name:literal),*) => {
            match op {
                $($name => {
                    metrics::histogram!("mcp_tasks_store_call_seconds", "op" => $name)
                        .record(took.as_secs_f64());
                    if !ok {
                        metrics::counter!("mcp_tasks_store_errors_total", "op" => $name)
                            .increment(1);
                    }
                })*
                _ => {
                    metrics::histogram!("mcp_tasks_store_call_seconds", "op" => op)
                        .record(took.as_secs_f64());
                    if !ok {
                        metrics::counter!("mcp_tasks_store_errors_total", "op" => op).increment(1);
                    }
                }
            }
        };
    }
    record!(
        "create",
        "get",
        "get_many",
        "visible",
        "update",
        "owner_bytes"
    );
}

#[cfg(not(feature = "metrics"))]
fn store_call(_: &'static str, _: Duration, _: bool) {}

/// A task was stored.
pub(crate) fn task_created() {
    #[cfg(feature = "metrics")]
    metrics::counter!("mcp_tasks_created_total").increment(1);
}

/// A call that would have become a task did not: `reason` is a fixed word (a limit's
/// name, `shutting_down`, `no_worker_lease`, `extension_required`,
/// `principal_required`).
pub(crate) fn task_refused(reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("mcp_tasks_refused_total", "reason" => reason).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// A write of this process moved a task to a terminal status.
pub(crate) fn task_finished(status: TaskStatus) {
    #[cfg(feature = "metrics")]
    metrics::counter!("mcp_tasks_finished_total", "status" => status.as_str()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = status;
}

/// `count` task notifications were written to a listen stream.
pub(crate) fn notifications_sent(count: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!("mcp_tasks_notifications_sent_total").increment(count as u64);
    #[cfg(not(feature = "metrics"))]
    let _ = count;
}

/// A pending notification was replaced by a newer state of its task before a
/// stream wrote it.
pub(crate) fn notification_coalesced() {
    #[cfg(feature = "metrics")]
    metrics::counter!("mcp_tasks_notifications_coalesced_total").increment(1);
}

/// One janitor sweep removed `removed` records.
pub(crate) fn janitor_swept(removed: usize) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("mcp_tasks_janitor_sweeps_total").increment(1);
        metrics::counter!("mcp_tasks_janitor_removed_total").increment(removed as u64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = removed;
}

/// This node's sweeper failed `failed` tasks of a lease it claimed.
pub(crate) fn lease_recovered(failed: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!("mcp_tasks_lease_recovered_total").increment(failed as u64);
    #[cfg(not(feature = "metrics"))]
    let _ = failed;
}

/// This node learned that other nodes claimed its lease.
pub(crate) fn lease_lost() {
    #[cfg(feature = "metrics")]
    metrics::counter!("mcp_tasks_leases_lost_total").increment(1);
}

/// This node's share of the held-tasks gauge went from `was` to `now`.
pub(crate) fn held_tasks(was: usize, now: usize) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("mcp_tasks_held_tasks").increment(now as f64 - was as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = (was, now);
}

/// A renewal of this node's lease failed or timed out.
pub(crate) fn lease_renewal_failed() {
    #[cfg(feature = "metrics")]
    metrics::counter!("mcp_tasks_lease_renewals_failed_total").increment(1);
}

/// A listen was refused, or a stream ended, at the limit named `limit` (a fixed
/// word: `listen_per_owner`, `listen_total`, `listen_bytes_per_owner`,
/// `listen_bytes_total`).
pub(crate) fn listen_refused(limit: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("mcp_tasks_listen_refused_total", "limit" => limit).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = limit;
}

/// Registers every counter at zero for each of its labels, and the caps as
/// gauges, when a layer is built: a fresh node's `/metrics` then has a series for
/// each alert to read.
pub(crate) fn register(max_rows: Option<usize>) {
    #[cfg(feature = "metrics")]
    {
        use metrics::{counter, gauge};
        for name in [
            "mcp_tasks_created_total",
            "mcp_tasks_notifications_sent_total",
            "mcp_tasks_notifications_coalesced_total",
            "mcp_tasks_janitor_sweeps_total",
            "mcp_tasks_janitor_removed_total",
            "mcp_tasks_lease_recovered_total",
            "mcp_tasks_leases_lost_total",
            "mcp_tasks_lease_renewals_failed_total",
        ] {
            counter!(name).increment(0);
        }
        for reason in [
            "rows",
            "per_owner",
            "bytes_per_owner",
            "shutting_down",
            "no_worker_lease",
            "extension_required",
            "principal_required",
            "task_required",
            "task_forbidden",
        ] {
            counter!("mcp_tasks_refused_total", "reason" => reason).increment(0);
        }
        for status in ["completed", "failed", "cancelled"] {
            counter!("mcp_tasks_finished_total", "status" => status).increment(0);
        }
        for op in [
            "create",
            "get",
            "get_many",
            "visible",
            "update",
            "owner_bytes",
        ] {
            counter!("mcp_tasks_store_errors_total", "op" => op).increment(0);
        }
        for limit in [
            "listen_per_owner",
            "listen_total",
            "listen_bytes_per_owner",
            "listen_bytes_total",
        ] {
            counter!("mcp_tasks_listen_refused_total", "limit" => limit).increment(0);
        }
        for name in [
            "mcp_tasks_listen_streams",
            "mcp_tasks_runners",
            "mcp_tasks_workers",
            "mcp_tasks_held_tasks",
        ] {
            gauge!(name).increment(0.0);
        }
        gauge!("mcp_tasks_max_rows").set(max_rows.unwrap_or(0) as f64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = max_rows;
}

/// The live things a process holds, each a gauge moved up and down by those that
/// start and end them (so several layers in one process add up).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Live {
    /// Open `subscriptions/listen` streams.
    ListenStreams,
    /// `TaskMode::Auto` runners.
    Runners,
    /// Task work under a live task handle.
    Workers,
}

impl Live {
    #[cfg(feature = "metrics")]
    fn name(self) -> &'static str {
        match self {
            Live::ListenStreams => "mcp_tasks_listen_streams",
            Live::Runners => "mcp_tasks_runners",
            Live::Workers => "mcp_tasks_workers",
        }
    }

    pub(crate) fn up(self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(self.name()).increment(1.0);
    }

    pub(crate) fn down(self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(self.name()).decrement(1.0);
    }
}
