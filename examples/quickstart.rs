//! Quickstart: an rmcp server (protocol 2026-07-28, stateless Streamable HTTP)
//! whose slow tools become tasks through `TasksLayer`.
//!
//! ```text
//! cargo run --example quickstart          # listens on MCP_ADDR, default 127.0.0.1:3000
//! ```
//!
//! Tools:
//! - `build {seconds}`: becomes a task when the client declared the extension,
//!   reports progress every second and completes; runs synchronously otherwise.
//! - `deploy {target}`: a task that asks the client to confirm mid-flight
//!   (`input_required`), then completes with what the client answered.
//!
//! A demo auth layer in front makes `Authorization: Bearer <name>` the principal
//! (no header is anonymous), so tasks are private to whoever made them. The
//! program prints a copy-paste curl session.

mod common;

use common::{schema, task_context, text};

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::{MemoryStore, TaskId, TaskMode, TaskSpec, Tasks, TasksLayer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use tower::ServiceBuilder;

const NAME: &str = "mcp-tasks-quickstart";

#[derive(Clone)]
struct Demo {
    tasks: Tasks,
}

impl Demo {
    async fn build(tasks: Tasks, id: TaskId, seconds: u64) {
        for step in 1..=seconds {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if tasks.is_cancelled(&id).await {
                return;
            }
            let _ = tasks
                .progress(&id, format!("Built {step} of {seconds} steps"))
                .await;
        }
        let _ = tasks
            .complete(&id, text(format!("Build finished after {seconds}s")))
            .await;
    }

    async fn deploy(tasks: Tasks, id: TaskId, target: String) {
        let question = InputRequests::new()
            .with(
                "confirm",
                InputRequest::confirm(format!("Deploy to {target}?"), "confirm"),
            )
            .with_status_message("Waiting for confirmation");
        if tasks.require_input(&id, question).await.is_err() {
            return;
        }
        let answer = match tasks.wait_for_input(&id).await {
            Ok(answers) => answers,
            Err(_) => return, // cancelled or expired while waiting
        };
        let confirmed = answer["confirm"]["action"] == "accept"
            && answer["confirm"]["content"]["confirm"] == json!(true);
        let outcome = if confirmed {
            format!("Deployed to {target}")
        } else {
            format!("Deployment to {target} called off")
        };
        let _ = tasks.complete(&id, text(outcome)).await;
    }
}

impl ServerHandler for Demo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(NAME, env!("CARGO_PKG_VERSION")))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "build",
                "Builds for a number of seconds; a task when the client supports tasks",
                schema(json!({"type": "object",
                    "properties": {"seconds": {"type": "integer", "minimum": 0, "maximum": 600}}})),
            ),
            Tool::new(
                "deploy",
                "Deploys after asking for confirmation (task only)",
                schema(json!({"type": "object",
                    "properties": {"target": {"type": "string"}}, "required": ["target"]})),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        match request.name.as_ref() {
            "build" => {
                let seconds = args
                    .get("seconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(3)
                    .min(600);
                let tasks = self.tasks.clone();
                let spec = TaskSpec::new()
                    .with_poll_interval(Duration::from_secs(1))
                    .with_status_message("Queued")
                    .with_start(move |id| {
                        tokio::spawn(Demo::build(tasks, id, seconds));
                    });
                if task_context(&context).is_some_and(|ctx| ctx.create(spec).is_ok()) {
                    // The layer answers with the task; this result is never sent.
                    return Ok(text("").into());
                }
                tokio::time::sleep(Duration::from_secs(seconds)).await;
                Ok(text(format!("Build finished after {seconds}s")).into())
            }
            "deploy" => {
                let target = args
                    .get("target")
                    .and_then(Value::as_str)
                    .unwrap_or("staging")
                    .to_owned();
                let tasks = self.tasks.clone();
                let spec = TaskSpec::new().with_start(move |id| {
                    tokio::spawn(Demo::deploy(tasks, id, target));
                });
                match task_context(&context).map(|ctx| ctx.create(spec)) {
                    Some(Ok(())) => Ok(text("").into()),
                    Some(Err(refused)) => Err(ErrorData::internal_error(refused.to_string(), None)),
                    None => Err(ErrorData::internal_error("tasks are not available", None)),
                }
            }
            other => Err(ErrorData::invalid_params(
                format!("unknown tool {other}"),
                None,
            )),
        }
    }
}

fn curl_session(addr: std::net::SocketAddr) -> String {
    let url = format!("http://{addr}/mcp");
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;
    let headers = "-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' -H 'Authorization: Bearer alice'";
    format!(
        r#"Try it (copy and paste):

  # 1. Start a build: the answer is a task handle (resultType "task")
  curl -s {url} {headers} -H 'Mcp-Method: tools/call' -H 'Mcp-Name: build' \
    -d '{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"build","arguments":{{"seconds":5}},{meta}}}}}'

  # 2. Poll it (replace TASK with the taskId from step 1)
  TASK=...
  curl -s {url} {headers} -H 'Mcp-Method: tasks/get' -H "Mcp-Name: $TASK" \
    -d '{{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{{"taskId":"'$TASK'",{meta}}}}}'

  # 3. Start a deploy, poll until input_required, then answer:
  curl -s {url} {headers} -H 'Mcp-Method: tools/call' -H 'Mcp-Name: deploy' \
    -d '{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"deploy","arguments":{{"target":"prod"}},{meta}}}}}'
  curl -s {url} {headers} -H 'Mcp-Method: tasks/update' -H "Mcp-Name: $TASK" \
    -d '{{"jsonrpc":"2.0","id":4,"method":"tasks/update","params":{{"taskId":"'$TASK'","inputResponses":{{"confirm":{{"action":"accept","content":{{"confirm":true}}}}}},{meta}}}}}'

  # 4. Cancel a task
  curl -s {url} {headers} -H 'Mcp-Method: tasks/cancel' -H "Mcp-Name: $TASK" \
    -d '{{"jsonrpc":"2.0","id":5,"method":"tasks/cancel","params":{{"taskId":"'$TASK'",{meta}}}}}'

  (Another bearer name, or none, cannot see alice's tasks.)
"#
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("info,mcp_tasks=debug");

    let tasks_layer = TasksLayer::builder(MemoryStore::new())
        .with_server_info(NAME, env!("CARGO_PKG_VERSION"))
        .with_tool_mode("deploy", TaskMode::Required)
        .build()?;
    let demo = Demo {
        tasks: tasks_layer.handle(),
    };
    let mcp = StreamableHttpService::new(
        move || Ok(demo.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .disable_allowed_hosts(),
    );
    let app = ServiceBuilder::new()
        .map_request(common::bearer_principal)
        .layer(tasks_layer)
        .service(mcp);

    let addr = common::listen_addr("127.0.0.1:3000");
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    println!("{NAME} listening on http://{addr}/mcp\n");
    println!("{}", curl_session(addr));
    common::serve(listener, app, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}
