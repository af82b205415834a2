//! The server of the job-queue example: its tools' calls become tasks whose work is
//! a job in PostgreSQL, run by `queue_worker` processes. Run two of these and a
//! worker; stop, restart or kill any of them while a task runs.
//!
//! ```sh
//! export MCP_STORE=postgres://postgres@127.0.0.1:5432/test
//! MCP_ADDR=127.0.0.1:3010 cargo run --example queue_server --features queue &
//! MCP_ADDR=127.0.0.1:3011 cargo run --example queue_server --features queue &
//! cargo run --example queue_worker --features queue &
//! ```
//!
//! Tools (both always tasks, `TaskMode::Required`):
//! - `report {seconds}`: a report that takes `seconds` (default 30, at most 3600),
//!   one status message a second;
//! - `deploy {target}`: asks the client to confirm, then deploys (or not). While it
//!   waits for the answer no process holds it.
//!
//! A server takes calls and serves `tasks/*`; it runs no work. On SIGTERM it drains
//! with the grace `MCP_DRAIN_GRACE_MS` (default 10000): nothing of the queue's tasks
//! is failed, they go on in the workers. Environment: `MCP_STORE` (a `postgres://`
//! URL, required), `MCP_STORE_TABLE` (default `mcp_tasks`; the jobs are in
//! `<table>_jobs`), `MCP_ADDR` (default `127.0.0.1:3010`), `MCP_LEASE_MS`,
//! `MCP_NODE_ID`, `RUST_LOG`. The demo bearer auth makes `Authorization: Bearer
//! <name>` the principal.

#[path = "../common/mod.rs"]
mod common;
mod setup;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::queue::JobQueue;
use mcp_tasks::{TaskMode, TasksLayer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use tower::ServiceBuilder;

const NAME: &str = "mcp-tasks-queue-server";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("info,mcp_tasks=debug");
    let (store, queue) = setup::store_and_queue().await?;
    let grace = setup::millis_from_env("MCP_DRAIN_GRACE_MS", 10_000);

    let builder = TasksLayer::builder(store)
        .with_server_info(NAME, env!("CARGO_PKG_VERSION"))
        .with_tool_mode("report", TaskMode::Required)
        .with_tool_mode("deploy", TaskMode::Required);
    let tasks_layer = common::with_lease_from_env(builder).build()?;
    let handler = Queued { queue };
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .disable_allowed_hosts(),
    );
    let drain = tasks_layer.clone();
    let app = ServiceBuilder::new()
        .map_request(common::bearer_principal)
        .layer(tasks_layer)
        .service(mcp);

    let listener = tokio::net::TcpListener::bind(common::listen_addr("127.0.0.1:3010")).await?;
    let addr = listener.local_addr()?;
    let signal = common::shutdown_signal();
    println!("{NAME} listening on http://{addr}/mcp");
    common::serve(listener, app, async move {
        signal.await;
        // The queue's tasks are not this node's: the drain fails none of them.
        let failed = drain.drain(grace).await;
        println!("shut down; {failed} unfinished task(s) failed");
    })
    .await;
    Ok(())
}

/// The tools: each call becomes a task, and its work a job.
#[derive(Clone)]
struct Queued {
    queue: JobQueue,
}

impl ServerHandler for Queued {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(NAME, env!("CARGO_PKG_VERSION")))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(common::PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "report",
                "Writes a report that takes `seconds` (default 30)",
                common::schema(json!({"type": "object", "properties": {
                    "seconds": {"type": "integer", "minimum": 1, "maximum": 3600}}})),
            ),
            Tool::new(
                "deploy",
                "Deploys to `target` once the client confirms",
                common::schema(json!({"type": "object", "properties": {
                    "target": {"type": "string"}}, "required": ["target"]})),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.as_ref();
        if !matches!(tool, "report" | "deploy") {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {tool}"),
                None,
            ));
        }
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        // The task is stored, the job queued, and the client gets the task: the
        // handler's own answer is dropped.
        let spec = self
            .queue
            .task(tool, arguments)
            .with_poll_interval(Duration::from_secs(1));
        let ctx = common::task_context(&context)
            .ok_or_else(|| ErrorData::internal_error("no TasksLayer in front", None))?;
        ctx.create(spec)
            .map_err(|refused| ErrorData::internal_error(refused.to_string(), None))?;
        Ok(common::text("").into())
    }
}
