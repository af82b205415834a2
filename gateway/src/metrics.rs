//! `/metrics`: the layer's counters, gauges and histograms (the `mcp_tasks_*`
//! names of `mcp_tasks::observe`) in the Prometheus text format, through the
//! recorder of `metrics-exporter-prometheus` (feature `metrics`, on by default).

/// The rendering of the installed recorder; without the feature, nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct Metrics {
    #[cfg(feature = "metrics")]
    handle: Option<metrics_exporter_prometheus::PrometheusHandle>,
}

/// Latency buckets of the store call histogram, in seconds.
#[cfg(feature = "metrics")]
const STORE_BUCKETS: [f64; 11] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0, 5.0,
];

impl Metrics {
    /// Installs the Prometheus recorder as the process's `metrics` recorder, and
    /// folds histograms into their buckets every 5 s. Call within the runtime.
    #[cfg(feature = "metrics")]
    pub(crate) fn install() -> Result<Metrics, mcp_tasks::error::BoxError> {
        use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("mcp_tasks_store_call_seconds".into()),
                &STORE_BUCKETS,
            )?
            .install_recorder()?;
        let upkeep = handle.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
        Ok(Metrics {
            handle: Some(handle),
        })
    }

    /// Without the feature `metrics`: `/metrics` answers 404.
    #[cfg(not(feature = "metrics"))]
    pub(crate) fn install() -> Result<Metrics, mcp_tasks::error::BoxError> {
        Ok(Metrics::default())
    }

    /// The Prometheus text, when the recorder is installed.
    pub(crate) fn render(&self) -> Option<String> {
        #[cfg(feature = "metrics")]
        if let Some(handle) = &self.handle {
            return Some(handle.render());
        }
        None
    }
}
