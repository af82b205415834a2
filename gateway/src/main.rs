//! Gateway: tasks for an MCP server written in any language.
//!
//! ```sh
//! cargo run --example retrofit                                               # an upstream on :3002
//! MCP_UPSTREAM=http://127.0.0.1:3002/mcp cargo run -p mcp-tasks-gateway      # http://127.0.0.1:3003/mcp
//! MCP_AUTO_AFTER_MS=1000 MCP_UPSTREAM=… cargo run -p mcp-tasks-gateway       # another budget
//! ```
//!
//! `TasksLayer` in front of a streaming reverse proxy: the upstream is any MCP
//! Streamable HTTP server (Python, TypeScript, Go, …) over plain HTTP that knows
//! nothing of tasks. One that speaks protocol 2026-07-28 is proxied as it is; one
//! that speaks only 2025-11-25, 2025-06-18 or 2025-03-26 is bridged for
//! 2026-07-28 clients (`bridge/`: a session per principal, requests and results
//! translated, its `elicitation/create` relayed as task input). Every tool is
//! `TaskMode::Auto`: a call that answers within the budget reaches the client
//! unchanged, a slower one becomes a task that the gateway stores and answers
//! `tasks/*` for, an MRTR `input_required` round of the upstream becomes the task's
//! input requests, and `tasks/cancel` drops the proxied request, which closes its
//! upstream connection (the upstream sees the client go away).
//!
//! A strict edge (`edge.rs`) comes first: a 2026-07-28 request whose `Mcp-Method`
//! or `Mcp-Name` header disagrees with its body gets -32020 (HTTP 400) and goes
//! no further, so that a `tools/call` cannot pass the layer as another method and
//! run upstream past `TaskMode::AutoRequired` or the `Auto` budget.
//!
//! Request and response bodies stream through; upstream connections are pooled
//! and use `TCP_NODELAY`. Which request headers go upstream is explicit: every
//! `Mcp-*` header, `Content-Type`, `Accept`, `User-Agent`, `Last-Event-ID`,
//! `traceparent` and `tracestate`, and only the ones named in `MCP_FORWARD_HEADERS`
//! besides (`Authorization` and `Cookie` only then; with `Cookie` named, the
//! upstream's `Set-Cookie` comes back too). Hop-by-hop headers never pass either way.
//! Every upstream failure is a JSON-RPC error (-32603, `id` null): 502 "Upstream
//! unavailable" when the upstream cannot be reached, 504 "Upstream connection timed
//! out after N ms" past `MCP_UPSTREAM_CONNECT_TIMEOUT_MS` (default 5000), and 504
//! "Upstream did not start its response within N ms" past
//! `MCP_UPSTREAM_RESPONSE_TIMEOUT_MS` (default 300000) — the time to the response's
//! head: an upstream that streams (SSE) starts at once, one that answers with JSON
//! only when the call ends, so set it above the longest such call. 0 turns either
//! timeout off. For a call that already became a task, the error fails the task.
//! While the upstream's era is not known (the first 2026-07-28 request learns it),
//! an upstream that cannot be reached or answers 429/502/503/504 gets the client
//! -32603 with HTTP 503, `Retry-After: 1` and `error.data`
//! `{"retryable": true, "reason": "upstream_unavailable"}`; nothing is learnt, and
//! a later request tries again (after a pause that doubles from 250 ms to 1 s).
//! An upstream restarted on another revision is learnt again at its first refusal
//! (`bridge/mod.rs`).
//!
//! Environment: `MCP_UPSTREAM` (required, an `http://` URL), `MCP_ADDR` (default
//! `127.0.0.1:3003`), `MCP_AUTO_AFTER_MS` (default 250), `MCP_TASK_REQUIRED_TOOLS`
//! (comma-separated tools that are `TaskMode::AutoRequired`: clients without the
//! extension get -32021 for them), `MCP_FORWARD_HEADERS`,
//! `MCP_UPSTREAM_CONNECT_TIMEOUT_MS`, `MCP_UPSTREAM_RESPONSE_TIMEOUT_MS` (above),
//! `MCP_TASK_TOOLS=1` (task tools for clients without the extension),
//! `MCP_UPSTREAM_MAX_SESSIONS` (default 1000), `MCP_UPSTREAM_SESSION_IDLE_MS`
//! (default 600000) and `MCP_UPSTREAM_INPUT_TIMEOUT_MS` (default 600000) for an
//! upstream on an older revision (see `bridge/mod.rs`),
//! `MCP_STORE` (see
//! `common.rs`), `RUST_LOG` (default `info,mcp_tasks=debug`). The demo
//! `Authorization: Bearer <name>` auth of `common.rs` makes tasks private to
//! `<name>`; the header reaches the upstream only with
//! `MCP_FORWARD_HEADERS=authorization`.

mod backoff;
mod bridge;
mod common;
mod edge;
mod proxy;

use std::time::Duration;

use http::{HeaderName, Uri};
use mcp_tasks::{TaskMode, TasksLayer};
use tower::ServiceBuilder;

use bridge::{Bridge, BridgeConfig};
use proxy::{Proxy, ProxyConfig};

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

/// The milliseconds in `var`, if it is set.
fn millis_from_env(var: &str) -> Result<Option<Duration>, String> {
    match std::env::var(var) {
        Err(_) => Ok(None),
        Ok(ms) => match ms.trim().parse() {
            Ok(ms) => Ok(Some(Duration::from_millis(ms))),
            Err(_) => Err(format!("{var} must be milliseconds, not {ms:?}")),
        },
    }
}

/// The comma-separated names in `var`.
fn names_from_env(var: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The proxy's settings from `MCP_FORWARD_HEADERS` (comma-separated header names),
/// `MCP_UPSTREAM_CONNECT_TIMEOUT_MS` (default 5000) and
/// `MCP_UPSTREAM_RESPONSE_TIMEOUT_MS` (default 300000); 0 means no timeout.
fn proxy_config_from_env() -> Result<ProxyConfig, String> {
    let mut config = ProxyConfig::default();
    for name in names_from_env("MCP_FORWARD_HEADERS") {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("MCP_FORWARD_HEADERS: {name:?} is not a header name"))?;
        config.forward.push(header);
    }
    let timeout = |var: &str, default: Option<Duration>| {
        Ok::<_, String>(match millis_from_env(var)? {
            None => default,
            Some(Duration::ZERO) => None,
            limit => limit,
        })
    };
    config.connect_timeout = timeout("MCP_UPSTREAM_CONNECT_TIMEOUT_MS", config.connect_timeout)?;
    config.response_timeout = timeout("MCP_UPSTREAM_RESPONSE_TIMEOUT_MS", config.response_timeout)?;
    Ok(config)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("info,mcp_tasks=debug");
    let upstream = upstream_from_env()?;
    // The `Auto` budget of every tool (default 250 ms).
    let after = millis_from_env("MCP_AUTO_AFTER_MS")?.unwrap_or(Duration::from_millis(250));
    let proxy = proxy_config_from_env()?;
    let bridge = BridgeConfig::from_env()?;

    let builder = common::with_lease_from_env(TasksLayer::builder(common::store_from_env().await?))
        .with_server_info(NAME, env!("CARGO_PKG_VERSION"))
        .with_default_mode(TaskMode::Auto { after });
    // Upstream tools too long to call synchronously: -32021 without the extension.
    let builder = names_from_env("MCP_TASK_REQUIRED_TOOLS")
        .into_iter()
        .fold(builder, |builder, tool| {
            builder.with_tool_mode(tool, TaskMode::AutoRequired { after })
        });
    let tasks_layer = common::with_task_tools_from_env(builder).build()?;
    let drain = tasks_layer.clone();
    let app = ServiceBuilder::new()
        // Outermost: a request whose headers disagree with its body goes no further.
        .layer(edge::EdgeLayer)
        .map_request(common::bearer_principal)
        .map_request(bridge::mark_call)
        .map_response(bridge::note_delivery)
        .layer(tasks_layer)
        .service(Bridge::new(
            Proxy::with_config(upstream.clone(), proxy),
            bridge,
        ));

    let listener = tokio::net::TcpListener::bind(common::listen_addr("127.0.0.1:3003")).await?;
    let addr = listener.local_addr()?;
    let signal = common::shutdown_signal();
    println!("{NAME} listening on http://{addr}/mcp, upstream {upstream}");
    common::serve(listener, app, async move {
        signal.await;
        drain.drain(Duration::from_secs(5)).await;
    })
    .await;
    Ok(())
}
