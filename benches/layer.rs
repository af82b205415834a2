//! In-process cost of the layer, measured through tower's `Service` calls.
//!
//! - `pass_through`: a bare inner service answering `tools/list` against the same
//!   service wrapped in `TasksLayer`, on the same modern request. The layer decides
//!   from the headers alone and must add nothing measurable.
//! - `pass_through_rmcp`: the same comparison with a real rmcp server (stateless,
//!   2026-07-28) as the inner service, on a current-thread tokio runtime: what the
//!   layer costs a real server's `tools/list`.
//! - `tasks_get`: `tasks/get` answered by the layer from a `MemoryStore` holding
//!   1 000 and 1 000 000 tasks, for a random existing id each iteration. The cost
//!   must not grow with the number of stored tasks.
//!
//! Each pair is measured twice: by criterion, one benchmark after the other, and
//! then interleaved (short alternating batches, median of the per-round ratios),
//! which a busy shared machine disturbs far less. The interleaved lines are
//! printed after each group.
//!
//! Run with `cargo bench --bench layer`; BENCHMARKS.md explains the numbers.

#[path = "../tests/support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BatchSize, Criterion, criterion_main};
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::body::RequestBody;
use mcp_tasks::error::BoxError;
use mcp_tasks::store::TaskStore;
use mcp_tasks::store::{CreateLimits, Timestamp};
use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TasksLayer};
use serde_json::json;
use support::requests::Call;
use tower::{Layer as _, Service, ServiceExt as _};

/// The result every `tools/list` call answers with.
const TOOLS_LIST_RESULT: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","description":"Echoes its input","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}],"resultType":"complete"}}"#;

/// The inner MCP service: reads the request body, as a real server would, and
/// answers a small `tools/list` result.
async fn inner<B>(request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let body = request
        .into_body()
        .collect()
        .await
        .expect("the request body reads")
        .to_bytes();
    black_box(body);
    let mut response = Response::new(Full::new(Bytes::from_static(TOOLS_LIST_RESULT.as_bytes())));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// A modern request (the test harness's) with the host header a client sends.
fn modern(call: Call<'_>) -> Call<'_> {
    call.header("host", "127.0.0.1")
}

fn tasks_get_request(id: &str) -> Request<Full<Bytes>> {
    modern(
        Call::new("tasks/get")
            .id(json!(7))
            .params(json!({"taskId": id})),
    )
    .build()
}

/// Drives a future that never waits on anything (in-memory store, in-memory
/// bodies) to completion without an executor, so the measurement holds only the
/// services' own work.
fn run<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => {
            panic!("a benchmarked call waited on something; the bench assumes it never does")
        }
    }
}

/// One full exchange: readiness, call, and reading the whole response body.
async fn exchange<S, B, RB>(service: &mut S, request: Request<B>) -> Bytes
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: std::fmt::Debug,
    RB: Body<Data = Bytes>,
    RB::Error: std::fmt::Debug,
{
    let response = service
        .ready()
        .await
        .expect("ready")
        .call(request)
        .await
        .expect("the service answers");
    assert!(
        response.status().is_success(),
        "status {}",
        response.status()
    );
    response
        .into_body()
        .collect()
        .await
        .expect("the response body reads")
        .to_bytes()
}

fn pass_through(c: &mut Criterion) {
    let call = modern(Call::new("tools/list"));
    let request = || call.build::<Full<Bytes>>();

    let mut bare = tower::service_fn(inner::<Full<Bytes>>);
    let layer = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .without_janitor()
        .build()
        .expect("a valid layer");
    let mut layered = layer.layer(tower::service_fn(inner::<RequestBody<Full<Bytes>>>));

    let expected = Bytes::from_static(TOOLS_LIST_RESULT.as_bytes());
    assert_eq!(run(exchange(&mut bare, request())), expected);
    assert_eq!(run(exchange(&mut layered, request())), expected);

    let mut group = c.benchmark_group("pass_through");
    group
        .sample_size(100)
        .warm_up_time(Duration::from_secs(3))
        .measurement_time(Duration::from_secs(15));
    group.bench_function("bare", |b| {
        b.iter_batched(
            request,
            |req| run(exchange(&mut bare, req)),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("layered", |b| {
        b.iter_batched(
            request,
            |req| run(exchange(&mut layered, req)),
            BatchSize::SmallInput,
        )
    });
    group.finish();

    let (bare_ns, layered_ns, ratio) = interleaved(
        |_| request(),
        |req| {
            black_box(run(exchange(&mut bare, req)));
        },
        |req| {
            black_box(run(exchange(&mut layered, req)));
        },
    );
    println!(
        "pass_through interleaved: bare {bare_ns:.1} ns, layered {layered_ns:.1} ns, \
         layered/bare {ratio:.4} ({:+.2} %)",
        (ratio - 1.0) * 100.0
    );
}

/// A minimal rmcp server: one tool, nothing else.
#[derive(Clone)]
struct RmcpFixture;

impl rmcp::ServerHandler for RmcpFixture {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        std::borrow::Cow::Borrowed(&[rmcp::model::ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![
            rmcp::model::Tool::new(
                "echo",
                "Echoes its input",
                Arc::new(schema.as_object().cloned().unwrap_or_default()),
            ),
        ]))
    }
}

fn rmcp_service() -> rmcp::transport::StreamableHttpService<
    RmcpFixture,
    rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
> {
    rmcp::transport::StreamableHttpService::new(
        || Ok(RmcpFixture),
        Arc::default(),
        rmcp::transport::StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .with_sse_retry(None)
            .disable_allowed_hosts(),
    )
}

fn pass_through_rmcp(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let call = modern(Call::new("tools/list"));
    let request = || call.build::<Full<Bytes>>();
    let mut bare = rmcp_service();
    let layer = runtime.block_on(async {
        TasksLayer::builder(MemoryStore::new())
            .with_anonymous_tasks()
            .without_janitor()
            .build()
            .expect("a valid layer")
    });
    let mut layered = layer.layer(rmcp_service());
    let plain = runtime.block_on(exchange(&mut bare, request()));
    assert_eq!(runtime.block_on(exchange(&mut layered, request())), plain);

    let mut group = c.benchmark_group("pass_through_rmcp");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(8));
    group.bench_function("bare", |b| {
        b.iter_batched(
            request,
            |req| runtime.block_on(exchange(&mut bare, req)),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("layered", |b| {
        b.iter_batched(
            request,
            |req| runtime.block_on(exchange(&mut layered, req)),
            BatchSize::SmallInput,
        )
    });
    group.finish();

    let (bare_ns, layered_ns, ratio) = interleaved_rounds(
        200,
        100,
        |_| request(),
        |req| {
            black_box(runtime.block_on(exchange(&mut bare, req)));
        },
        |req| {
            black_box(runtime.block_on(exchange(&mut layered, req)));
        },
    );
    println!(
        "pass_through_rmcp interleaved: bare {:.2} us, layered {:.2} us, \
         layered/bare {ratio:.4} ({:+.2} %)",
        bare_ns / 1000.0,
        layered_ns / 1000.0,
        (ratio - 1.0) * 100.0
    );
}

/// A layer over a store filled with `count` working tasks, and their ids.
fn filled_layer(count: usize) -> (TasksLayer, Vec<String>) {
    let store = Arc::new(MemoryStore::new());
    let now = Timestamp::now();
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        let id = TaskId::random();
        let mut record = TaskRecord::new(id, None, now);
        record.ttl_ms = Some(24 * 3_600_000);
        record.poll_interval_ms = Some(1_000);
        record.status_message = Some("Working".to_owned());
        run(store.create(record, CreateLimits::default())).expect("room for every task");
        ids.push(id.to_string());
    }
    assert_eq!(store.len(), count);
    let layer = TasksLayer::builder(store)
        .with_anonymous_tasks()
        .without_max_rows()
        .without_janitor()
        .build()
        .expect("a valid layer");
    (layer, ids)
}

/// A small deterministic generator, so both sizes see the same access pattern.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A layer over a store of `count` tasks around the inner service, and the ids.
fn tasks_get_service(
    count: usize,
) -> (
    impl Service<
        Request<Full<Bytes>>,
        Response = Response<impl Body<Data = Bytes, Error = BoxError>>,
        Error = Infallible,
    >,
    Vec<String>,
) {
    let (layer, ids) = filled_layer(count);
    let mut service = layer.layer(tower::service_fn(inner::<RequestBody<Full<Bytes>>>));
    let probe = run(exchange(&mut service, tasks_get_request(&ids[0])));
    let probe: serde_json::Value = serde_json::from_slice(&probe).expect("JSON");
    assert_eq!(probe["result"]["status"], "working", "{probe}");
    (service, ids)
}

fn tasks_get(c: &mut Criterion) {
    let started = Instant::now();
    let (mut small, small_ids) = tasks_get_service(1_000);
    let (mut large, large_ids) = tasks_get_service(1_000_000);
    println!(
        "tasks_get: stores filled in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let mut group = c.benchmark_group("tasks_get");
    group
        .sample_size(100)
        .warm_up_time(Duration::from_secs(3))
        .measurement_time(Duration::from_secs(10));
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    group.bench_function("1k", |b| {
        b.iter_batched(
            || tasks_get_request(&small_ids[rng.below(small_ids.len())]),
            |req| run(exchange(&mut small, req)),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("1M", |b| {
        b.iter_batched(
            || tasks_get_request(&large_ids[rng.below(large_ids.len())]),
            |req| run(exchange(&mut large, req)),
            BatchSize::SmallInput,
        )
    });
    group.finish();

    let (small_ns, large_ns, ratio) = interleaved(
        |side| {
            let ids = if side == 0 { &small_ids } else { &large_ids };
            tasks_get_request(&ids[rng.below(ids.len())])
        },
        |req| {
            black_box(run(exchange(&mut small, req)));
        },
        |req| {
            black_box(run(exchange(&mut large, req)));
        },
    );
    println!(
        "tasks_get interleaved: 1k {small_ns:.1} ns, 1M {large_ns:.1} ns, \
         1M/1k {ratio:.4} ({:+.2} %)",
        (ratio - 1.0) * 100.0
    );
}

/// Rounds of the interleaved comparison, and calls per batch.
const ROUNDS: usize = 400;
const BATCH: usize = 1_000;

/// Alternates short batches of `a` and `b` (in alternating order), so that load
/// changes on a shared machine hit both alike. `make(side)` builds one input
/// outside the timed part (`side` is 0 for `a`, 1 for `b`). Returns the median
/// per-call time of each, in nanoseconds, and the median of the per-round ratios
/// b/a.
fn interleaved<I>(
    make: impl FnMut(usize) -> I,
    a: impl FnMut(I),
    b: impl FnMut(I),
) -> (f64, f64, f64) {
    interleaved_rounds(ROUNDS, BATCH, make, a, b)
}

/// [`interleaved`] with an explicit number of rounds and calls per batch.
fn interleaved_rounds<I>(
    rounds: usize,
    batch: usize,
    mut make: impl FnMut(usize) -> I,
    mut a: impl FnMut(I),
    mut b: impl FnMut(I),
) -> (f64, f64, f64) {
    let mut times_a = Vec::with_capacity(rounds);
    let mut times_b = Vec::with_capacity(rounds);
    let mut ratios = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let inputs_a: Vec<I> = (0..batch).map(|_| make(0)).collect();
        let inputs_b: Vec<I> = (0..batch).map(|_| make(1)).collect();
        let mut time = |side: usize, inputs: Vec<I>| {
            let started = Instant::now();
            for input in inputs {
                if side == 0 { a(input) } else { b(input) }
            }
            started.elapsed().as_nanos() as f64 / batch as f64
        };
        let (ta, tb) = if round % 2 == 0 {
            let ta = time(0, inputs_a);
            (ta, time(1, inputs_b))
        } else {
            let tb = time(1, inputs_b);
            (time(0, inputs_a), tb)
        };
        times_a.push(ta);
        times_b.push(tb);
        ratios.push(tb / ta);
    }
    (median(times_a), median(times_b), median(ratios))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Every benchmark of this file, with criterion's command-line settings.
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    if selected(&["pass_through/bare", "pass_through/layered"]) {
        pass_through(&mut criterion);
    }
    if selected(&["pass_through_rmcp/bare", "pass_through_rmcp/layered"]) {
        pass_through_rmcp(&mut criterion);
    }
    if selected(&["tasks_get/1k", "tasks_get/1M"]) {
        tasks_get(&mut criterion);
    }
}

/// Whether the command line's benchmark filter (if any) names one of these
/// benchmarks, so a filtered run skips filling a million tasks it would not use.
/// Filters are taken as plain substrings.
fn selected(benchmarks: &[&str]) -> bool {
    const TAKES_VALUE: &[&str] = &[
        "--baseline",
        "--color",
        "--confidence-level",
        "--format",
        "--load-baseline",
        "--measurement-time",
        "--noise-threshold",
        "--nresamples",
        "--output-format",
        "--plotting-backend",
        "--profile-time",
        "--sample-size",
        "--save-baseline",
        "--significance-level",
        "--warm-up-time",
    ];
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if TAKES_VALUE.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            filters.push(arg);
        }
    }
    filters.is_empty()
        || filters
            .iter()
            .any(|f| benchmarks.iter().any(|b| b.contains(f.as_str())))
}

criterion_main!(benches);
