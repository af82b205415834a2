//! Test fixture, not a user example: the server the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) runs against, through `scripts/conformance.sh`.
//! An rmcp server (protocol 2026-07-28, stateless Streamable HTTP) wrapped in
//! `TasksLayer`, with every tool, prompt and resource the suite's scenarios call.
//! For how to wire a server, read `examples/quickstart.rs` instead.
//!
//! ```sh
//! bash scripts/conformance.sh                  # builds and starts it, runs the suite, stops it
//! MCP_SSE=1 bash scripts/conformance.sh        # the same with every reply an SSE stream
//! cargo run --example conformance_server       # just the server, on http://127.0.0.1:3001/mcp
//! ```
//!
//! Environment: `MCP_ADDR` (default `127.0.0.1:3001`); `MCP_SSE=1` makes rmcp answer
//! with an event stream even where one JSON message would do, which sends every reply
//! through the layer's SSE paths (default: JSON replies); `RUST_LOG` (default
//! `warn,mcp_tasks=info`). `MCP_PLAIN=1` serves the handlers without the layer (no
//! tasks): `scripts/interop-gateway.sh` puts the gateway (`gateway/`) in front of it. `Authorization: Bearer <name>` makes `<name>` the
//! principal (the demo auth of `examples/common`); without it requests are anonymous.
//!
//! One module per concern:
//! - `tasks`: the fixtures of the ten tasks scenarios and their workers;
//! - `tools`: the tool list and the fixtures of the core scenarios;
//! - `mrtr`: input requests answered by retrying the call, and a sealed `requestState`;
//! - `prompts`, `resources` (with completion), `listen` (`subscriptions/listen`).

#[path = "../common/mod.rs"]
mod common;
mod listen;
mod mrtr;
mod prompts;
mod resources;
mod tasks;
mod tools;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::{TaskMode, TasksLayer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
};
use rmcp::{ErrorData, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tower::ServiceBuilder;

const NAME: &str = "mcp-tasks-conformance";

/// A 1×1 PNG for the content, prompt and resource fixtures.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// Fixture JSON as an rmcp model type.
fn from_json<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("fixture JSON matches the rmcp model")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("warn,mcp_tasks=info");
    let sse = std::env::var("MCP_SSE").is_ok_and(|v| v == "1");

    let tasks_layer =
        common::with_lease_from_env(TasksLayer::builder(common::store_from_env().await?))
            .with_server_info(NAME, env!("CARGO_PKG_VERSION"))
            // The conformance suite's clients send no principal.
            .with_anonymous_tasks()
            .with_tool_mode("greet", TaskMode::Never)
            .with_tool_mode("failing_job", TaskMode::Required)
            .with_tool_mode("test_tool_with_task", TaskMode::Required)
            .build()?;
    let fixtures = Fixtures {
        listeners: Arc::default(),
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(!sse)
        .with_sse_retry(None)
        .with_sse_keep_alive(Some(Duration::from_secs(15)));
    let rmcp_service = StreamableHttpService::new(
        move || Ok(fixtures.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind(common::listen_addr("127.0.0.1:3001")).await?;
    let signal = common::shutdown_signal();
    if std::env::var("MCP_PLAIN").is_ok_and(|v| v == "1") {
        // No layer: a plain 2026-07-28 server for the gateway to front
        // (`scripts/interop-gateway.sh`). The tasks fixtures need the layer.
        eprintln!(
            "{NAME} (plain) listening on http://{}/mcp",
            listener.local_addr()?
        );
        common::serve(listener, rmcp_service, signal).await;
        return Ok(());
    }
    let drain = tasks_layer.clone();
    let app = ServiceBuilder::new()
        .map_request(common::bearer_principal)
        .layer(tasks_layer)
        .service(rmcp_service);
    eprintln!(
        "{NAME} listening on http://{}/mcp ({} replies)",
        listener.local_addr()?,
        if sse { "SSE" } else { "JSON" }
    );
    common::serve(listener, app, async move {
        signal.await;
        // Running tasks get 5 s, the rest fail, listen streams end with their result.
        drain.drain(Duration::from_secs(5)).await;
    })
    .await;
    Ok(())
}

/// The rmcp handler: routes each request to the module of its concern.
#[derive(Clone)]
struct Fixtures {
    listeners: Arc<listen::Listeners>,
}

impl ServerHandler for Fixtures {
    fn get_info(&self) -> ServerConfig {
        let capabilities: ServerCapabilities = from_json(json!({
            "tools": {"listChanged": true},
            "prompts": {"listChanged": true},
            "resources": {},
            "completions": {}
        }));
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(NAME, env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::V_2026_07_28)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(common::PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::tools()))
    }

    /// Lets rmcp check `Mcp-Param-*` headers against the tool's `x-mcp-header` fields.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(answer) = self.task_fixture(&request, &context).await {
            return answer;
        }
        self.core_fixture(request, context).await
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(prompts::list())
    }

    async fn get_prompt(
        &self,
        p: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        prompts::get(p)
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(resources::list())
    }

    async fn list_resource_templates(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        p: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        resources::read(p)
    }

    async fn complete(
        &self,
        p: CompleteRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Ok(resources::complete(p))
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(listen::accepted_filter())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.listeners.listen(context).await;
        Ok(())
    }
}
