//! `mcp-tasks-gateway`: tasks for an MCP server written in any language.
//!
//! ```sh
//! cargo install --locked --path gateway
//! mcp-tasks-gateway --upstream http://127.0.0.1:3002/mcp --principal none   # http://127.0.0.1:3003/mcp
//! mcp-tasks-gateway --help                                                  # every flag
//! ```
//!
//! `TasksLayer` in front of a streaming reverse proxy: the upstream is any MCP
//! Streamable HTTP server (Python, TypeScript, Go, …) over plain HTTP that knows
//! nothing of tasks. One that speaks protocol 2026-07-28 is proxied as it is; one
//! that speaks only 2025-11-25, 2025-06-18 or 2025-03-26 is bridged for
//! 2026-07-28 clients (`bridge/`: a session per principal, requests and results
//! translated, its `elicitation/create` relayed as task input, its own tasks of
//! task-only tools carried as 2026-07-28 tasks). Every tool is `TaskMode::Auto`: a
//! call that answers within its deadline reaches the client unchanged, a slower one
//! becomes a task that the gateway stores and answers `tasks/*` for, an MRTR
//! `input_required` round of the upstream becomes the task's input requests, and
//! `tasks/cancel` drops the proxied request, which closes its upstream connection
//! (the upstream sees the client go away).
//!
//! The service, outermost first ([`service_stack`]): the principal (`auth.rs`),
//! the strict edge (`edge.rs`: a 2026-07-28 request whose `Mcp-Method` or
//! `Mcp-Name` header disagrees with its body gets -32020, HTTP 400, and goes no
//! further), the layer, the era bridge, the proxy (`proxy.rs`: bodies streamed,
//! an explicit set of request headers forwarded, every upstream failure a
//! JSON-RPC error). Around it, `serve.rs` answers `/healthz`, `/readyz` and
//! `/metrics`, and drains on SIGTERM. `gateway/README.md` documents every flag.
//!
//! While the upstream's era is not known (the first 2026-07-28 request learns it),
//! an upstream that cannot be reached or answers 429/502/503/504 gets the client
//! -32603 with HTTP 503, `Retry-After: 1` and `error.data`
//! `{"retryable": true, "reason": "upstream_unavailable"}`; nothing is learnt, and
//! a later request tries again (after a pause that doubles from 250 ms to 1 s).
//! An upstream restarted on another revision is learnt again at its first refusal
//! (`bridge/mod.rs`).

mod auth;
mod backoff;
mod bridge;
mod config;
mod edge;
mod federate;
mod logs;
mod metrics;
mod proxy;
mod serve;
mod store;

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use mcp_tasks::error::BoxError;
use mcp_tasks::{TaskMode, TasksLayer};
use tower::ServiceBuilder;
use tower::util::BoxCloneService;

use auth::PrincipalLayer;
use bridge::Bridge;
use config::{Config, Parsed};
use edge::EdgeLayer;
use federate::{Federate, Handles};
use metrics::Metrics;
use proxy::Proxy;
use serve::Readiness;

/// The gateway's name: its binary, and `_meta.serverInfo` of the results it makes
/// itself.
const NAME: &str = "mcp-tasks-gateway";

/// The body of the gateway service's responses.
pub(crate) type ServiceBody = UnsyncBoxBody<Bytes, BoxError>;

/// The gateway's service at `/mcp`.
pub(crate) type GatewayService =
    BoxCloneService<Request<Incoming>, Response<ServiceBody>, Infallible>;

fn main() -> ExitCode {
    let config = match config::parse(std::env::args_os().skip(1), |name| std::env::var(name).ok()) {
        Ok(Parsed::Run(config)) => config,
        Ok(Parsed::Help) => {
            print!("{}", config::help());
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("{NAME} {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{NAME}: {e}\n(run {NAME} --help for every flag)");
            return ExitCode::from(2);
        }
    };
    logs::init(config.log_format, &config.log_filter);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "could not start the runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(*config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "{NAME} stopped");
            ExitCode::FAILURE
        }
    }
}

/// Opens the store, serves until SIGTERM or Ctrl-C, then drains: `/readyz` turns
/// 503 at once, running tasks get the grace period, and the server stops.
async fn run(config: Config) -> Result<(), BoxError> {
    let metrics = Metrics::install()?;
    let store = store::open(&config.store).await?;
    let tasks = tasks_layer(
        &config,
        store::with_node(TasksLayer::builder(store), &config.store),
    )?;
    let service = service_stack(&config, tasks.clone());

    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let readiness = Arc::new(Readiness::default());
    let signal = serve::shutdown_signal();
    tracing::info!(%addr, upstream = %config.upstream, "{NAME} listening");
    println!(
        "{NAME} listening on http://{addr}/mcp, upstream {}",
        config.upstream
    );
    let grace = config.drain_grace;
    serve::serve(listener, service, readiness.clone(), metrics, async move {
        signal.await;
        readiness.start_draining();
        let failed = tasks.drain(grace).await;
        tracing::info!(failed, "{NAME} drained; exiting");
    })
    .await;
    Ok(())
}

/// The layer: every tool `Auto` with its deadline, the task-required tools
/// `AutoRequired`, the task tools if asked for.
fn tasks_layer(
    config: &Config,
    builder: mcp_tasks::TasksLayerBuilder,
) -> Result<TasksLayer, BoxError> {
    let mut builder = builder
        .with_server_info(NAME, env!("CARGO_PKG_VERSION"))
        // Who may see a task is decided by `--principal`: under `bearer-jwt` a
        // request without a token never reaches the layer; under `none` every task
        // is shared, which the operator chose.
        .with_anonymous_tasks()
        .with_default_mode(TaskMode::Auto {
            after: config.auto_after,
        });
    for (tool, after) in &config.auto_after_tools {
        builder = builder.with_tool_mode(tool.clone(), TaskMode::Auto { after: *after });
    }
    // Upstream tools too long to call synchronously: -32021 without the extension.
    for tool in &config.task_required {
        let after = config.auto_after_of(tool);
        builder = builder.with_tool_mode(tool.clone(), TaskMode::AutoRequired { after });
    }
    if config.task_tools {
        builder = builder.with_task_tools();
    }
    if config.federation.upstream_tasks {
        builder = builder.with_inner_tasks(federate::HANDLE_PREFIX);
    }
    Ok(builder.build()?)
}

/// A response with its body boxed.
fn boxed<B>(response: Response<B>) -> Response<ServiceBody>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    response.map(|body| body.map_err(Into::into).boxed_unsync())
}

/// The gateway's service at `/mcp`, outermost first: the principal, the strict
/// edge, the bridge's marks around the layer, the layer, the era bridge over the
/// proxy to the upstream.
fn service_stack(config: &Config, tasks: TasksLayer) -> GatewayService {
    let proxy = Proxy::with_config(config.upstream.clone(), config.proxy.clone());
    // A 2026-07-28 upstream's own tasks, carried under handles (`federate.rs`).
    let federation = &config.federation;
    let handles = federation
        .upstream_tasks
        .then(|| Handles::new(&federation.key(), &config.upstream.to_string()));
    let mut bridging = config.bridge.clone();
    bridging.upstream_tasks = federation.upstream_tasks;
    let service = ServiceBuilder::new()
        .map_response(boxed)
        // A missing or refused token goes no further.
        .layer(PrincipalLayer::new(config.principal.clone()))
        // A request whose headers disagree with its body goes no further.
        .layer(EdgeLayer)
        .map_request(bridge::mark_call)
        .map_response(bridge::note_delivery)
        .layer(tasks)
        .service(Federate::new(Bridge::new(proxy, bridging), handles));
    BoxCloneService::new(service)
}
