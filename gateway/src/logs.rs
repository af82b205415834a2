//! Structured logs on stderr: text for a terminal, or one JSON object a line
//! (`--log-format json`) for a log pipeline.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the process's subscriber; `filter` was checked with the configuration.
pub(crate) fn init(format: LogFormat, filter: &str) {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
}
