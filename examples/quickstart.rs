//! Quickstart: an rmcp server whose tools become MCP tasks, served with axum.
//!
//! ```sh
//! cargo run --example quickstart                          # http://127.0.0.1:3000/mcp
//! MCP_ADDR=127.0.0.1:4000 cargo run --example quickstart  # another address
//! MCP_STORE=postgres://postgres@127.0.0.1:5432/test cargo run --example quickstart --features postgres
//! RUST_LOG=trace cargo run --example quickstart           # default filter: info,tower_http=debug,mcp_tasks=debug
//! MCP_TASK_TOOLS=1 cargo run --example quickstart         # task tools for clients without the extension
//! ```
//!
//! The whole wiring, outermost first: `axum::serve` (with `TCP_NODELAY`), an
//! `axum::Router` mounting `/mcp`, `tower_http`'s `TraceLayer` (a span per HTTP
//! request), a demo bearer-auth middleware that inserts a [`Principal`],
//! [`TasksLayer`], and rmcp's stateless Streamable HTTP service (protocol
//! 2026-07-28).
//!
//! Each request the layer answers itself logs, inside the `TraceLayer` span, an
//! `mcp_tasks` span with `method`, `outcome` (`result`, `task`, `error` with
//! `error_code`, `stream`, `forwarded`), `store_us` and `elapsed_us`; never a task
//! id or a principal.
//!
//! Tools:
//! - `build {seconds}`: a task when the client declared the tasks extension, with a
//!   progress message every second; otherwise it runs while the request waits.
//! - `deploy {target}`: always a task; it asks the client to confirm mid-flight
//!   (`input_required`), then completes with what the client answered.
//!
//! `examples/README.md` has a curl session to paste: start a task, poll it, answer its
//! question, cancel one.

mod common;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::serve::ListenerExt as _;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::worker::TaskHandle;
use mcp_tasks::{Principal, TaskContext, TaskMode, TaskSpec, TasksLayer};
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ProtocolVersion};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use tower::Layer as _;
use tower_http::trace::TraceLayer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_http=debug,mcp_tasks=debug".into()),
        )
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .init();

    // The layer and its store. `deploy` only ever runs as a task.
    let builder = common::with_lease_from_env(TasksLayer::builder(common::store_from_env().await?))
        .with_server_info("mcp-tasks-quickstart", env!("CARGO_PKG_VERSION"))
        // A demo: a caller without a Bearer name may have tasks too, shared by every
        // such caller. A server whose callers all authenticate leaves this out.
        .with_anonymous_tasks()
        .with_tool_mode("deploy", TaskMode::Required);
    let tasks_layer = common::with_task_tools_from_env(builder).build()?;

    // The rmcp server: stateless Streamable HTTP, JSON replies. Each task's work gets
    // its own handle from the layer.
    let mcp = StreamableHttpService::new(
        || Ok(Demo),
        Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true),
    );

    // Tracing wraps everything; authentication runs before the layer, so the layer
    // knows who owns each task.
    let app = axum::Router::new()
        .route_service("/mcp", tasks_layer.layer(mcp))
        .layer(middleware::from_fn(demo_auth))
        .layer(TraceLayer::new_for_http());

    let addr = std::env::var("MCP_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    // Installed before the address is printed: a SIGTERM from then on drains.
    let signal = common::shutdown_signal();
    println!("listening on http://{}/mcp", listener.local_addr()?);
    // axum 0.8 no longer sets TCP_NODELAY; task notifications go out as small SSE writes.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // Ctrl-C or SIGTERM: running tasks get 10 s to finish, the rest fail, listen
    // streams end with their result, then the server stops.
    let shutdown = async move {
        signal.await;
        let failed = tasks_layer.drain(Duration::from_secs(10)).await;
        println!("shut down; {failed} unfinished task(s) failed");
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// Demo authentication: `Authorization: Bearer <name>` makes `<name>` the principal,
/// and tasks are private to it. A real server verifies a token here and answers 401
/// without one; this one trusts any name and lets a request without one through
/// as anonymous.
async fn demo_auth(mut request: Request, next: Next) -> Response {
    let name = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(Principal::from);
    if let Some(principal) = name {
        request.extensions_mut().insert(principal);
    }
    next.run(request).await
}

#[derive(Clone)]
struct Demo;

#[derive(Deserialize, schemars::JsonSchema)]
struct BuildArgs {
    /// How long the build takes, in seconds (default 3, at most 600).
    seconds: Option<u64>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct DeployArgs {
    /// Where to deploy.
    target: String,
}

#[tool_router]
impl Demo {
    /// Builds for a number of seconds; a task when the client supports tasks.
    #[tool]
    async fn build(
        &self,
        Parameters(BuildArgs { seconds }): Parameters<BuildArgs>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> String {
        let seconds = seconds.unwrap_or(3).min(600);
        let spec = TaskSpec::new()
            .with_poll_interval(Duration::from_secs(1))
            .with_status_message("Queued")
            .with_work(move |task| run_build(task, seconds));
        // `None` without the layer; `Err` when this call may not become a task.
        if TaskContext::from_parts(&parts).is_some_and(|ctx| ctx.create(spec).is_ok()) {
            return String::new(); // the layer answers with the task instead
        }
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        format!("Build finished after {seconds}s")
    }

    /// Deploys after asking for confirmation (task only).
    #[tool]
    async fn deploy(
        &self,
        Parameters(DeployArgs { target }): Parameters<DeployArgs>,
        Extension(parts): Extension<http::request::Parts>,
    ) -> Result<String, ErrorData> {
        let spec = TaskSpec::new().with_work(move |task| run_deploy(task, target));
        let ctx = TaskContext::from_parts(&parts)
            .ok_or_else(|| ErrorData::internal_error("no TasksLayer in front", None))?;
        ctx.create(spec)
            .map_err(|refused| ErrorData::internal_error(refused.to_string(), None))?;
        Ok(String::new())
    }
}

#[tool_handler(name = "mcp-tasks-quickstart")]
impl ServerHandler for Demo {
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(common::PROTOCOL_VERSIONS)
    }
}

/// The `build` task: one progress message a second, then the result. A cancel
/// stops it at once, mid-step.
async fn run_build(task: TaskHandle, seconds: u64) {
    let steps = async {
        for step in 1..=seconds {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = task
                .progress(format!("Built {step} of {seconds} steps"))
                .await;
        }
    };
    if task.run_until_ended(steps).await.is_ok() {
        let _ = task
            .complete(text(format!("Build finished after {seconds}s")))
            .await;
    }
}

/// The `deploy` task: asks, waits for the answer without polling, completes.
async fn run_deploy(task: TaskHandle, target: String) {
    let question = InputRequests::new()
        .with(
            "confirm",
            InputRequest::confirm(format!("Deploy to {target}?"), "confirm"),
        )
        .with_status_message("Waiting for confirmation");
    let Ok(answers) = task.ask(question).await else {
        return; // cancelled or expired while waiting
    };
    let outcome = match answers.confirmed("confirm", "confirm") {
        true => format!("Deployed to {target}"),
        false => format!("Deployment to {target} called off"),
    };
    let _ = task.complete(text(outcome)).await;
}

/// A tool result with one text block: what `tasks/get` shows once the task is done.
fn text(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}
