//! Gateway: tasks for an MCP server written in any language.
//!
//! ```sh
//! cargo run --example retrofit                                             # an upstream on :3002
//! MCP_UPSTREAM=http://127.0.0.1:3002/mcp cargo run --example gateway       # http://127.0.0.1:3003/mcp
//! MCP_AUTO_AFTER_MS=1000 MCP_UPSTREAM=… cargo run --example gateway        # another budget
//! ```
//!
//! `TasksLayer` in front of a streaming reverse proxy: the upstream is any MCP
//! Streamable HTTP server (Python, TypeScript, Go, …) that speaks protocol
//! 2026-07-28 over plain HTTP, and knows nothing of tasks. Every tool is
//! `TaskMode::Auto`: a call that answers within the budget reaches the client
//! unchanged, a slower one becomes a task that the gateway stores and answers
//! `tasks/*` for, an MRTR `input_required` round of the upstream becomes the task's
//! input requests, and `tasks/cancel` drops the proxied request, which closes its
//! upstream connection (the upstream sees the client go away).
//!
//! Request and response bodies stream through; end-to-end headers are forwarded
//! and hop-by-hop ones dropped; upstream connections are pooled and use
//! `TCP_NODELAY`. An unreachable upstream answers 502 with a JSON-RPC error.
//!
//! Environment: `MCP_UPSTREAM` (required, an `http://` URL), `MCP_ADDR` (default
//! `127.0.0.1:3003`), `MCP_AUTO_AFTER_MS` (default 250), `MCP_TASK_REQUIRED_TOOLS`
//! (comma-separated tools that are `TaskMode::AutoRequired`: clients without the
//! extension get -32021 for them), `MCP_STORE` (see
//! `examples/common`), `RUST_LOG` (default `info,mcp_tasks=debug`). The demo
//! `Authorization: Bearer <name>` auth of `examples/common` makes tasks private to
//! `<name>`; the header is also forwarded upstream.

#[path = "../common/mod.rs"]
mod common;
mod proxy;

use std::time::Duration;

use http::Uri;
use mcp_tasks::{TaskMode, TasksLayer};
use tower::ServiceBuilder;

use proxy::Proxy;

/// The gateway's name in `_meta.serverInfo` of the results it makes itself.
const NAME: &str = "mcp-tasks-gateway";

/// `MCP_UPSTREAM`, checked: an `http://` URL with a host.
fn upstream_from_env() -> Result<Uri, Box<dyn std::error::Error>> {
    let url = std::env::var("MCP_UPSTREAM")
        .map_err(|_| "MCP_UPSTREAM must name the upstream, e.g. http://127.0.0.1:3002/mcp")?;
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("MCP_UPSTREAM {url:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(format!("MCP_UPSTREAM {url:?} must be an http:// URL with a host").into());
    }
    Ok(uri)
}

/// `MCP_AUTO_AFTER_MS`, the `Auto` budget of every tool (default 250 ms).
fn budget_from_env() -> Result<Duration, Box<dyn std::error::Error>> {
    match std::env::var("MCP_AUTO_AFTER_MS") {
        Err(_) => Ok(Duration::from_millis(250)),
        Ok(ms) => Ok(Duration::from_millis(ms.parse().map_err(|_| {
            format!("MCP_AUTO_AFTER_MS must be milliseconds, not {ms:?}")
        })?)),
    }
}

/// `MCP_TASK_REQUIRED_TOOLS`: comma-separated names of upstream tools too long to
/// call synchronously; clients without the extension get -32021 for them.
fn required_tools_from_env() -> Vec<String> {
    std::env::var("MCP_TASK_REQUIRED_TOOLS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("info,mcp_tasks=debug");
    let upstream = upstream_from_env()?;
    let after = budget_from_env()?;

    let builder =
        common::with_lease_from_env(TasksLayer::builder(common::store_from_env().await?))
            .with_server_info(NAME, env!("CARGO_PKG_VERSION"))
            .with_default_mode(TaskMode::Auto { after });
    let tasks_layer = required_tools_from_env()
        .into_iter()
        .fold(builder, |builder, tool| {
            builder.with_tool_mode(tool, TaskMode::AutoRequired { after })
        })
        .build()?;
    let drain = tasks_layer.clone();
    let app = ServiceBuilder::new()
        .map_request(common::bearer_principal)
        .layer(tasks_layer)
        .service(Proxy::new(upstream.clone()));

    let listener = tokio::net::TcpListener::bind(common::listen_addr("127.0.0.1:3003")).await?;
    let addr = listener.local_addr()?;
    println!("{NAME} listening on http://{addr}/mcp, upstream {upstream}");
    common::serve(listener, app, async move {
        let _ = tokio::signal::ctrl_c().await;
        drain.drain(Duration::from_secs(5)).await;
    })
    .await;
    Ok(())
}
