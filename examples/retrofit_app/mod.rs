//! The server of the `retrofit` example, apart from `main` so that the tests can
//! run it: an rmcp server written with no knowledge of tasks, and the layer
//! configuration that makes its tools task-capable.

#![allow(dead_code)]

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcp_tasks::{MemoryStore, TaskMode, TasksLayer, TasksLayerBuilder};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InputRequiredResult, JsonObject,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};

use crate::common::{schema, text};

/// The server's name in `serverInfo`.
pub(crate) const NAME: &str = "mcp-tasks-retrofit";

/// The tools the layer runs in the background.
pub(crate) const TOOLS: [&str; 5] = ["sleep", "boom", "slow_ask", "steps", "stats"];

/// How long a client waits for an answer before it gets a task instead.
pub(crate) const AFTER: Duration = Duration::from_millis(250);

/// What the server sends back as `requestState` when it asks, and expects on the
/// retry. A real server would seal its state; this one only checks it came back.
pub(crate) const REQUEST_STATE: &str = "slow_ask/awaiting-confirm";

/// How the `sleep` calls ended.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// `sleep` calls that ran to the end.
    pub(crate) finished: AtomicU64,
    /// `sleep` calls whose work was dropped before the end.
    pub(crate) dropped: AtomicU64,
}

impl Counters {
    /// `{"finished": n, "dropped": m}`.
    pub(crate) fn snapshot(&self) -> Value {
        json!({
            "finished": self.finished.load(Ordering::SeqCst),
            "dropped": self.dropped.load(Ordering::SeqCst),
        })
    }
}

/// Counts one `sleep` call as finished or dropped when it goes away.
struct SleepRun {
    counters: Arc<Counters>,
    finished: bool,
}

impl Drop for SleepRun {
    fn drop(&mut self) {
        let counter = match self.finished {
            true => &self.counters.finished,
            false => &self.counters.dropped,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// The rmcp handler. Plain rmcp: nothing here knows about tasks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Retrofit {
    pub(crate) counters: Arc<Counters>,
}

fn millis(arguments: &JsonObject) -> Duration {
    let ms = arguments.get("ms").and_then(Value::as_u64).unwrap_or(0);
    Duration::from_millis(ms.min(600_000))
}

impl Retrofit {
    /// Sleeps, unless the request is cancelled first (the client went away, or
    /// the layer dropped the call): rmcp then cancels the handler's token.
    async fn sleep(
        &self,
        duration: Duration,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut run = SleepRun {
            counters: self.counters.clone(),
            finished: false,
        };
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = context.ct.cancelled() => {
                return Err(ErrorData::internal_error("cancelled", None));
            }
        }
        run.finished = true;
        Ok(text(format!("slept {}ms", duration.as_millis())).into())
    }

    /// Round one waits, then asks for confirmation (MRTR); the retry answers.
    async fn slow_ask(
        &self,
        duration: Duration,
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(responses) = &request.input_responses {
            if request.request_state.as_deref() != Some(REQUEST_STATE) {
                return Err(ErrorData::invalid_params(
                    "requestState is missing or not ours",
                    None,
                ));
            }
            let answer = responses.get("confirm").cloned().unwrap_or(Value::Null);
            let confirmed =
                answer["action"] == "accept" && answer["content"]["confirm"] == json!(true);
            return Ok(text(format!("confirmed: {confirmed}")).into());
        }
        tokio::time::sleep(duration).await;
        let ask: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {"confirm": {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": "Go ahead?", "requestedSchema": {
                    "type": "object",
                    "properties": {"confirm": {"type": "boolean"}},
                    "required": ["confirm"],
                }},
            }},
            "requestState": REQUEST_STATE,
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(CallToolResponse::InputRequired(ask))
    }

    /// Works `steps` steps of `ms` each and reports progress, with a message, after
    /// each one (when the caller asked for progress with a token).
    async fn steps(
        &self,
        arguments: &JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let steps = arguments
            .get("steps")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .min(10_000);
        let token = context.meta.get_progress_token();
        for step in 1..=steps {
            tokio::time::sleep(millis(arguments)).await;
            if let Some(token) = &token {
                let progress = ProgressNotificationParam::new(token.clone(), step as f64)
                    .with_total(steps as f64)
                    .with_message(format!("step {step} of {steps} done"));
                let _ = context.peer.notify_progress(progress).await;
            }
        }
        Ok(text(format!("{steps} steps done")).into())
    }
}

impl ServerHandler for Retrofit {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(NAME, env!("CARGO_PKG_VERSION")))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(crate::common::PROTOCOL_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let ms = || {
            schema(json!({"type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 600000}}}))
        };
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "sleep",
                "Answers `slept {ms}ms` after ms milliseconds",
                ms(),
            ),
            Tool::new(
                "boom",
                "Fails with an internal error after ms milliseconds",
                ms(),
            ),
            Tool::new(
                "slow_ask",
                "Waits ms milliseconds, then asks for confirmation",
                ms(),
            ),
            Tool::new(
                "steps",
                "Works `steps` steps of ms milliseconds each, reporting progress after each",
                schema(json!({"type": "object", "properties": {
                    "steps": {"type": "integer", "minimum": 1, "maximum": 10000},
                    "ms": {"type": "integer", "minimum": 0, "maximum": 600000}}})),
            ),
            Tool::new(
                "stats",
                "How many sleep calls finished and how many were dropped",
                schema(json!({"type": "object"})),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        match request.name.as_ref() {
            "sleep" => self.sleep(millis(&arguments), &context).await,
            "boom" => {
                tokio::time::sleep(millis(&arguments)).await;
                Err(ErrorData::internal_error("boom", None))
            }
            "slow_ask" => self.slow_ask(millis(&arguments), &request).await,
            "steps" => self.steps(&arguments, &context).await,
            "stats" => Ok(text(self.counters.snapshot().to_string()).into()),
            other => Err(ErrorData::invalid_params(
                format!("unknown tool {other}"),
                None,
            )),
        }
    }
}

/// The rmcp service: stateless 2026-07-28 Streamable HTTP, JSON replies when
/// `json` (otherwise every reply is an SSE stream).
pub(crate) fn mcp_service(
    handler: Retrofit,
    json: bool,
) -> StreamableHttpService<Retrofit, NeverSessionManager> {
    StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(json)
            .with_sse_retry(None)
            .disable_allowed_hosts(),
    )
}

/// The whole retrofit: every tool in `Auto` mode. Nothing else changes.
pub(crate) fn layer_builder() -> TasksLayerBuilder {
    layer_builder_on(Arc::new(MemoryStore::new()))
}

/// [`layer_builder`] over `store`. The demo has no authentication: its callers
/// are anonymous, so it allows anonymous tasks (shared by every caller).
pub(crate) fn layer_builder_on(store: Arc<dyn mcp_tasks::store::TaskStore>) -> TasksLayerBuilder {
    authenticated_layer_builder_on(store).with_anonymous_tasks()
}

/// [`layer_builder_on`] for callers an authentication layer names: tasks only
/// for requests with a principal, as the layer comes.
pub(crate) fn authenticated_layer_builder_on(
    store: Arc<dyn mcp_tasks::store::TaskStore>,
) -> TasksLayerBuilder {
    TOOLS.iter().fold(
        TasksLayer::builder(store).with_server_info(NAME, env!("CARGO_PKG_VERSION")),
        |builder, tool| builder.with_tool_mode(*tool, TaskMode::Auto { after: AFTER }),
    )
}
