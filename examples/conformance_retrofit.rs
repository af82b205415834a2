//! Test fixture, not a user example: the tasks fixtures of the official MCP
//! conformance suite written as a plain rmcp server with no task code at all, made
//! task-capable by layer configuration alone (`TaskMode::Auto`). It shows how far a
//! retrofit gets on the suite's tasks scenarios; `conformance_server` is the
//! fixture written against the task API.
//!
//! ```sh
//! bash scripts/conformance.sh --server conformance_retrofit   # the ten tasks scenarios
//! bash scripts/conformance.sh --server gateway                # the same, through the gateway
//! cargo run --example conformance_retrofit                    # http://127.0.0.1:3004/mcp
//! ```
//!
//! The handlers: `slow_compute` sleeps and answers; `failing_job` sleeps and answers
//! with a tool error (`isError`); `protocol_error_job` sleeps and answers with a
//! JSON-RPC error; `confirm_delete`, `multi_input` and `test_tool_with_task` ask
//! through plain MRTR `input_required` rounds and answer the retry. Every tool is
//! `Auto` with a 250 ms budget, except `greet` (`Never`) and `failing_job`
//! (`AutoRequired`: task-only). What a retrofit cannot do by construction would be
//! listed in `scripts/conformance-retrofit-expected-failures.txt`.
//!
//! Environment: `MCP_ADDR` (default `127.0.0.1:3004`), `MCP_STORE`, `RUST_LOG`
//! (default `warn,mcp_tasks=info`). `MCP_PLAIN=1` serves the handlers without the
//! layer, a server with no tasks support at all: `scripts/conformance.sh --server
//! gateway` puts the gateway (`gateway/`) in front of it. `MCP_SSE=1` makes rmcp answer
//! every request with an event stream.

mod common;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::{TaskMode, TasksLayer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value, json};
use tower::ServiceBuilder;

use common::{schema, text};

const NAME: &str = "mcp-tasks-conformance-retrofit";

/// How long a call may take before the layer makes it a task.
const AFTER: Duration = Duration::from_millis(250);

/// How long the slow fixtures work before they answer or ask: past [`AFTER`], so
/// that the call is a task by then.
const WORK: Duration = Duration::from_secs(1);

/// A form asking for one field of type `ty`.
fn elicit(message: &str, field: &str, ty: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": ty}}, "required": [field]}}})
}

/// An MRTR `input_required` result asking `requests`.
fn ask(requests: Value, state: Option<&str>) -> Result<CallToolResponse, ErrorData> {
    let mut result = json!({"resultType": "input_required", "inputRequests": requests});
    if let Some(state) = state {
        result["requestState"] = Value::String(state.to_owned());
    }
    let result: InputRequiredResult = serde_json::from_value(result)
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    Ok(CallToolResponse::InputRequired(result))
}

/// The fields of an accepted answer under `key` of the retry's `inputResponses`.
fn accepted<'a>(request: &'a CallToolRequestParams, key: &str) -> Option<&'a Map<String, Value>> {
    let answer = request.input_responses.as_ref()?.get(key)?;
    (answer["action"] == "accept")
        .then(|| answer["content"].as_object())
        .flatten()
}

fn arg<'a>(arguments: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    arguments.get(key).and_then(Value::as_str)
}

/// The handlers: plain rmcp, nothing here knows about tasks.
#[derive(Clone, Debug)]
struct Fixtures;

impl ServerHandler for Fixtures {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(NAME, env!("CARGO_PKG_VERSION")))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(common::PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let empty = || schema(json!({"type": "object", "properties": {}}));
        let one = |field: &str, ty: &str| {
            schema(json!({"type": "object", "properties": {field: {"type": ty}}}))
        };
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("greet", "Greets by name", one("name", "string")),
            Tool::new(
                "slow_compute",
                "Sleeps `seconds`, then answers",
                schema(json!({"type": "object", "properties": {
                    "seconds": {"type": "number"}, "label": {"type": "string"}}})),
            ),
            Tool::new(
                "failing_job",
                "Answers with a tool error after 1 s",
                empty(),
            ),
            Tool::new(
                "protocol_error_job",
                "Fails with a JSON-RPC error after 1 s",
                empty(),
            ),
            Tool::new(
                "confirm_delete",
                "Asks for confirmation, then deletes",
                one("filename", "string"),
            ),
            Tool::new("multi_input", "Asks two questions at once", empty()),
            Tool::new(
                "test_tool_with_task",
                "Asks for a name, then greets",
                empty(),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        match request.name.as_ref() {
            "greet" => {
                let name = arg(&arguments, "name").unwrap_or("World");
                Ok(text(format!("Hello, {name}!")).into())
            }
            "slow_compute" => {
                let seconds = arguments
                    .get("seconds")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
                    .clamp(0.0, 600.0);
                let label = arg(&arguments, "label").unwrap_or("job");
                tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                Ok(text(format!("{label}: done after {seconds} s")).into())
            }
            "failing_job" => {
                tokio::time::sleep(WORK).await;
                let failed = CallToolResult::error(vec![ContentBlock::text("The job failed")]);
                Ok(failed.into())
            }
            "protocol_error_job" => {
                tokio::time::sleep(WORK).await;
                Err(ErrorData::internal_error("The job's backend crashed", None))
            }
            "confirm_delete" => {
                let filename = arg(&arguments, "filename").unwrap_or("nothing.txt");
                match accepted(&request, "confirm") {
                    Some(c) if c.get("confirm") == Some(&Value::Bool(true)) => {
                        Ok(text(format!("Deleted {filename}")).into())
                    }
                    Some(_) => Ok(text(format!("Kept {filename}")).into()),
                    None => {
                        // Looks the file up first, which takes a while.
                        tokio::time::sleep(WORK).await;
                        let question = elicit(&format!("Delete {filename}?"), "confirm", "boolean");
                        ask(json!({"confirm": question}), None)
                    }
                }
            }
            "multi_input" => {
                let name = accepted(&request, "name").and_then(|c| arg(c, "name"));
                let confirmed = accepted(&request, "confirm").is_some();
                match (name, confirmed) {
                    (Some(name), true) => {
                        Ok(text(format!("Thanks for both answers, {name}")).into())
                    }
                    _ => {
                        tokio::time::sleep(WORK).await;
                        ask(
                            json!({"name": elicit("Your name?", "name", "string"),
                                "confirm": elicit("Proceed?", "confirm", "boolean")}),
                            None,
                        )
                    }
                }
            }
            "test_tool_with_task" => {
                const ASKED: &str = "test_tool_with_task/asked-name";
                let name = accepted(&request, "user_name").and_then(|c| arg(c, "name"));
                match name {
                    // Round 1 answers at once: a plain MRTR question, no task.
                    None => ask(
                        json!({"user_name": elicit("What is your name?", "name", "string")}),
                        Some(ASKED),
                    ),
                    Some(_) if request.request_state.as_deref() != Some(ASKED) => Err(
                        ErrorData::invalid_params("requestState is missing or not ours", None),
                    ),
                    // The retry works past the budget: the layer makes it a task.
                    Some(name) => {
                        tokio::time::sleep(WORK).await;
                        Ok(text(format!("Hello, {name}!")).into())
                    }
                }
            }
            other => Err(ErrorData::invalid_params(
                format!("unknown tool {other}"),
                None,
            )),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("warn,mcp_tasks=info");
    let sse = std::env::var("MCP_SSE").is_ok_and(|v| v == "1");

    // The whole retrofit: layer configuration, no handler change.
    let tasks_layer =
        common::with_lease_from_env(TasksLayer::builder(common::store_from_env().await?))
            .with_server_info(NAME, env!("CARGO_PKG_VERSION"))
            // The conformance suite's clients send no principal.
            .with_anonymous_tasks()
            .with_default_mode(TaskMode::Auto { after: AFTER })
            .with_tool_mode("greet", TaskMode::Never)
            // Task-required in the fixture table: too long to run synchronously.
            .with_tool_mode("failing_job", TaskMode::AutoRequired { after: AFTER })
            .build()?;
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(!sse)
        .with_sse_retry(None)
        .disable_allowed_hosts();
    let rmcp_service = StreamableHttpService::new(
        || Ok(Fixtures),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind(common::listen_addr("127.0.0.1:3004")).await?;
    let signal = common::shutdown_signal();
    if std::env::var("MCP_PLAIN").is_ok_and(|v| v == "1") {
        // No layer at all: an MCP server without tasks, for the gateway to front.
        println!(
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

    println!("{NAME} listening on http://{}/mcp", listener.local_addr()?);
    common::serve(listener, app, async move {
        signal.await;
        drain.drain(Duration::from_secs(5)).await;
    })
    .await;
    Ok(())
}
