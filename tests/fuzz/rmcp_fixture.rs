//! A small rmcp server (2026-07-28, stateless) for the fuzz targets: the tool `echo`,
//! and `job`, which makes a task (no worker) whenever the layer lets it.

use std::borrow::Cow;
use std::sync::Arc;

use mcp_tasks::{TaskContext, TaskSpec};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler};
use serde_json::Value;

#[derive(Clone)]
pub(crate) struct Fixture;

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        crate::support::rmcp_server::tools_server("rmcp-fixture")
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let any = Arc::new(
            serde_json::json!({"type": "object"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Echoes its text", any.clone()),
            Tool::new("job", "A task when possible", any),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let text = |s: &str| CallToolResult::success(vec![ContentBlock::text(s.to_owned())]);
        match request.name.as_ref() {
            "echo" => Ok(text(args.get("text").and_then(Value::as_str).unwrap_or("")).into()),
            "job" => {
                let ctx = context
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(TaskContext::from_parts);
                match ctx.map(|c| c.create(TaskSpec::new().with_status_message("Queued"))) {
                    Some(Ok(())) => Ok(text("replaced by the task").into()),
                    _ => Ok(text("job done synchronously").into()),
                }
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// The rmcp service, JSON replies or SSE replies.
pub(crate) fn service(json_response: bool) -> StreamableHttpService<Fixture, LocalSessionManager> {
    StreamableHttpService::new(
        || Ok(Fixture),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(json_response)
            .with_sse_keep_alive(None)
            .with_sse_retry(None)
            .disable_allowed_hosts(),
    )
}
