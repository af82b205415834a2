//! Metrics: the `retrofit` server with the layer's metrics exported for Prometheus.
//!
//! ```sh
//! cargo run --example metrics --features metrics   # MCP at http://127.0.0.1:3005/mcp
//! curl -s http://127.0.0.1:3005/metrics            # Prometheus text format
//! ```
//!
//! The layer writes to the `metrics` facade; this example installs the Prometheus
//! recorder of `metrics-exporter-prometheus` and serves its rendering at `/metrics`
//! beside `/mcp`, with axum. Store call latencies are histograms with buckets from
//! 100 µs to 5 s. The docs of `mcp_tasks::observe` list every name and label.
//!
//! Try it with the curl session of `examples/README.md` (retrofit part, with
//! `URL=http://127.0.0.1:3005/mcp`), then read `/metrics`:
//! `mcp_tasks_created_total`, `mcp_tasks_finished_total{status="cancelled"}`, …

mod common;
mod retrofit_app;

use std::time::Duration;

use axum::routing::get;
use axum::serve::ListenerExt as _;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tower::ServiceBuilder;

/// Latency buckets of the store call histogram, in seconds.
const STORE_BUCKETS: [f64; 11] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0, 5.0,
];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("info,mcp_tasks=debug");

    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("mcp_tasks_store_call_seconds".into()),
            &STORE_BUCKETS,
        )?
        .install_recorder()?;
    // Histograms are folded into their buckets by the exporter's upkeep.
    tokio::spawn({
        let prometheus = prometheus.clone();
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                prometheus.run_upkeep();
            }
        }
    });

    let tasks_layer = common::with_lease_from_env(retrofit_app::layer_builder_on(
        common::store_from_env().await?,
    ))
    .build()?;
    let mcp = ServiceBuilder::new()
        .map_request(common::bearer_principal)
        .layer(tasks_layer.clone())
        .service(retrofit_app::mcp_service(
            retrofit_app::Retrofit::default(),
            true,
        ));
    let app = axum::Router::new()
        .route_service("/mcp", mcp)
        .route("/metrics", get(move || async move { prometheus.render() }));

    let addr = common::listen_addr("127.0.0.1:3005");
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let signal = common::shutdown_signal();
    println!(
        "{} listening on http://{addr}/mcp, metrics at http://{addr}/metrics",
        retrofit_app::NAME
    );
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            signal.await;
            tasks_layer.drain(Duration::from_secs(5)).await;
        })
        .await?;
    Ok(())
}
