//! The server `scripts/conformance.sh` runs the official MCP conformance suite
//! against: an rmcp server (protocol 2026-07-28, stateless Streamable HTTP) wrapped
//! in `TasksLayer`, with every fixture the suite calls.
//!
//! ```text
//! cargo run --example conformance_server   # listens on MCP_ADDR, default 127.0.0.1:3001, at /mcp
//! bash scripts/conformance.sh              # builds and starts it, runs the suite, stops it
//! ```
//!
//! - Task fixtures (the ten tasks scenarios): `greet`, `slow_compute`, `failing_job`,
//!   `protocol_error_job`, `confirm_delete`, `multi_input`, `test_tool_with_task`.
//!   Each worker is a small async fn driving its task through the `Tasks` handle.
//! - Core fixtures (the core 2026-07-28 scenarios): content tools, progress, MRTR
//!   tools with an integrity-protected `requestState`, an `x-mcp-header` tool,
//!   prompts, resources and templates, completion, and `subscriptions/listen`.
//!
//! `Authorization: Bearer <name>` makes `<name>` the principal (a demo, see
//! `examples/common`); without it requests are anonymous. `MCP_SSE=1` makes rmcp
//! answer with an event stream even where one JSON message would do, which sends
//! every reply through the layer's SSE paths.

mod common;

use common::{task_context, text};

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::{MemoryStore, RpcError, TaskId, TaskMode, TaskSpec, Tasks, TasksLayer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    InputRequiredResult, InputResponses, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext, SubscriptionSink};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
};
use rmcp::{ErrorData, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tower::ServiceBuilder;

const NAME: &str = "mcp-tasks-conformance";

/// How often a sleeping worker looks whether its task was cancelled.
const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// A 1×1 PNG and a tiny WAV for the content fixtures.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV_TINY: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

// ---- small helpers ---------------------------------------------------------------------

fn from_json<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("fixture JSON matches the rmcp model")
}

fn tool_error(value: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(value)])
}

fn arg_str<'a>(args: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// What a handler returns once it has handed its call to a task: the layer answers
/// with the task instead, so this result is never sent.
fn handed_to_task() -> Result<CallToolResponse, ErrorData> {
    Ok(text("").into())
}

// ---- requestState integrity: `payload.tag`, tag = keyed SipHash (per-process key) -------

fn tag(payload: &str) -> String {
    static KEY: OnceLock<std::hash::RandomState> = OnceLock::new();
    let key = KEY.get_or_init(std::hash::RandomState::new);
    format!("{:016x}", key.hash_one(payload))
}

fn seal(payload: &str) -> String {
    format!("{payload}.{}", tag(payload))
}

/// The payload of a sealed state, or `None` if it was tampered with.
fn open(state: &str) -> Option<&str> {
    let (payload, mac) = state.rsplit_once('.')?;
    (tag(payload) == mac).then_some(payload)
}

fn tampered() -> ErrorData {
    ErrorData::invalid_params("requestState failed its integrity check", None)
}

// ---- MRTR helpers (input requests answered by retrying the call) -------------------------

fn elicit(message: &str, field: &str, ty: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": ty}}, "required": [field]}}})
}

fn sample(prompt: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": max_tokens}})
}

fn roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

fn input_required(requests: Value, state: Option<String>) -> InputRequiredResult {
    let mut result = json!({"resultType": "input_required", "inputRequests": requests});
    if let Some(state) = state {
        result["requestState"] = Value::String(state);
    }
    from_json(result)
}

/// The `content` of an accepted elicitation answer.
fn accepted_content(response: Option<&Value>) -> Option<&Map<String, Value>> {
    let response = response?.as_object()?;
    if response.get("action")?.as_str()? != "accept" {
        return None;
    }
    response.get("content")?.as_object()
}

/// The `content` of an accepted elicitation answer under `key` of a retried call.
fn accepted<'a>(
    responses: Option<&'a InputResponses>,
    key: &str,
) -> Option<&'a Map<String, Value>> {
    accepted_content(responses?.get(key))
}

fn answered(responses: Option<&InputResponses>, key: &str) -> bool {
    responses
        .and_then(|r| r.get(key))
        .is_some_and(Value::is_object)
}

// ---- task workers ----------------------------------------------------------------------
//
// Each returns early once its task is terminal: a cancelled or expired task refuses
// further transitions, so the `Err` of a final `complete`/`fail` is ignored.

/// Sleeps `duration`, looking every `CANCEL_CHECK` whether the client cancelled.
/// `false` when it did.
async fn sleep_unless_cancelled(tasks: &Tasks, id: &TaskId, duration: Duration) -> bool {
    let deadline = Instant::now() + duration;
    loop {
        if tasks.is_cancelled(id).await {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        tokio::time::sleep(left.min(CANCEL_CHECK)).await;
    }
}

/// `slow_compute`: sleeps, then completes with text content.
async fn slow_compute_worker(tasks: Tasks, id: TaskId, seconds: f64, label: String) {
    if sleep_unless_cancelled(&tasks, &id, Duration::from_secs_f64(seconds)).await {
        let _ = tasks
            .complete(&id, text(format!("{label}: done after {seconds} s")))
            .await;
    }
}

/// `failing_job`: after about a second, completes with a tool error (`isError: true`).
async fn failing_job_worker(tasks: Tasks, id: TaskId) {
    if sleep_unless_cancelled(&tasks, &id, Duration::from_secs(1)).await {
        let _ = tasks.complete(&id, tool_error("The job failed")).await;
    }
}

/// `protocol_error_job`: after a short delay, fails with a JSON-RPC error (`failed`).
async fn protocol_error_job_worker(tasks: Tasks, id: TaskId) {
    if sleep_unless_cancelled(&tasks, &id, Duration::from_millis(300)).await {
        let _ = tasks
            .fail(&id, RpcError::internal("The job's backend crashed"))
            .await;
    }
}

/// `confirm_delete`: asks one yes/no question (`input_required`), then completes.
async fn confirm_delete_worker(tasks: Tasks, id: TaskId, filename: String) {
    let question = InputRequests::new()
        .with(
            "confirm",
            InputRequest::confirm(format!("Delete {filename}?"), "confirm"),
        )
        .with_status_message(format!("Waiting for confirmation to delete {filename}"));
    if tasks.require_input(&id, question).await.is_err() {
        return;
    }
    let Ok(answers) = tasks.wait_for_input(&id).await else {
        return; // cancelled or expired while waiting
    };
    let confirmed = accepted_content(answers.get("confirm"))
        .is_some_and(|content| content.get("confirm") == Some(&Value::Bool(true)));
    let outcome = match confirmed {
        true => format!("Deleted {filename}"),
        false => format!("Kept {filename}"),
    };
    let _ = tasks.complete(&id, text(outcome)).await;
}

/// `multi_input`: asks two questions at once; completes once both are answered.
async fn multi_input_worker(tasks: Tasks, id: TaskId) {
    let questions = InputRequests::new()
        .with(
            "name",
            InputRequest::form(
                "Your name?",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ),
        )
        .with("confirm", InputRequest::confirm("Proceed?", "confirm"))
        .with_status_message("Waiting for two answers");
    if tasks.require_input(&id, questions).await.is_err() {
        return;
    }
    // Wakes once both keys are answered, whether in one update or two.
    let Ok(answers) = tasks.wait_for_input(&id).await else {
        return;
    };
    let name = accepted_content(answers.get("name"))
        .and_then(|c| c.get("name")?.as_str())
        .unwrap_or("nobody");
    let _ = tasks
        .complete(&id, text(format!("Thanks for both answers, {name}")))
        .await;
}

/// `test_tool_with_task`: greets the name gathered before the task existed.
async fn greeting_worker(tasks: Tasks, id: TaskId, name: String) {
    let _ = tasks.complete(&id, text(format!("Hello, {name}!"))).await;
}

// ---- the fixture server ------------------------------------------------------------------

/// The open `subscriptions/listen` streams, for the list-changed trigger tools.
#[derive(Default)]
struct Listeners {
    next: AtomicU64,
    sinks: Mutex<HashMap<u64, SubscriptionSink>>,
}

#[derive(Clone)]
struct Fixtures {
    tasks: Tasks,
    listeners: Arc<Listeners>,
}

/// The core fixtures whose input schema is an empty object.
#[rustfmt::skip]
const PLAIN_TOOLS: &[(&str, &str)] = &[
    ("test_simple_text",                           "Returns simple text"),
    ("test_image_content",                         "Returns an image"),
    ("test_audio_content",                         "Returns audio"),
    ("test_embedded_resource",                     "Returns an embedded resource"),
    ("test_multiple_content_types",                "Returns text, image and resource"),
    ("test_error_handling",                        "Always fails with isError"),
    ("test_tool_with_progress",                    "Reports progress 0/50/100"),
    ("test_missing_capability",                    "Needs the client's sampling capability"),
    ("test_streaming_elicitation",                 "Asks for input through MRTR"),
    ("test_logging_tool",                          "Would log only when a logLevel is set"),
    ("test_trigger_tool_change",                   "Sends tools list_changed to listen streams"),
    ("test_trigger_prompt_change",                 "Sends prompts list_changed to listen streams"),
    ("test_input_required_result_elicitation",     "MRTR: one elicitation"),
    ("test_input_required_result_sampling",        "MRTR: one sampling request"),
    ("test_input_required_result_list_roots",      "MRTR: one roots/list request"),
    ("test_input_required_result_request_state",   "MRTR: requestState round trip"),
    ("test_input_required_result_multiple_inputs", "MRTR: three requests at once"),
    ("test_input_required_result_multi_round",     "MRTR: two rounds"),
    ("test_input_required_result_tampered_state",  "MRTR: integrity-protected state"),
    ("test_input_required_result_capabilities",    "MRTR: only declared capabilities"),
];

/// The tools, in `tools/list` order. `greet` comes first on purpose: the suite's
/// header-whitespace probe calls the first listed tool with `{}` and no extension,
/// and needs a plain success.
fn tools() -> Vec<Tool> {
    let empty = json!({"type": "object", "properties": {}});
    let mut list = vec![
        json!({"name": "greet", "description": "Greets by name; never a task.",
            "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}),
        json!({"name": "slow_compute", "description": "Sleeps `seconds`, then answers; a task when the client supports tasks.",
            "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}}}),
        json!({"name": "failing_job", "description": "A task that ends with a tool error (isError).", "inputSchema": empty}),
        json!({"name": "protocol_error_job", "description": "A task that fails with a JSON-RPC error.", "inputSchema": empty}),
        json!({"name": "confirm_delete", "description": "Asks for confirmation, then deletes.",
            "inputSchema": {"type": "object", "properties": {"filename": {"type": "string"}}}}),
        json!({"name": "multi_input", "description": "Asks two questions at once.", "inputSchema": empty}),
        json!({"name": "test_tool_with_task", "description": "One input round, then a task.", "inputSchema": empty}),
        json!({"name": "test_mcp_param_header", "description": "Echoes a header-mirrored argument (SEP-2243).",
            "inputSchema": {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
                "required": ["region"]}}),
        json!({"name": "json_schema_2020_12_tool", "description": "Tool with JSON Schema 2020-12 features",
            "inputSchema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"}, "email": {"type": "string"}},
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]}, "else": {"required": ["email"]},
                "additionalProperties": false}}),
    ];
    for (name, description) in PLAIN_TOOLS {
        list.push(json!({"name": name, "description": description, "inputSchema": empty}));
    }
    list.into_iter().map(from_json).collect()
}

impl Fixtures {
    /// Hands this call to a new task running `work`, if the layer allows one here
    /// (the client declared the extension and the tool may become a task).
    fn try_task<F, Fut>(&self, cx: &RequestContext<RoleServer>, work: F) -> bool
    where
        F: FnOnce(Tasks, TaskId) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(context) = task_context(cx) else {
            return false;
        };
        let tasks = self.tasks.clone();
        let spec = TaskSpec::new().with_start(move |id| {
            tokio::spawn(work(tasks, id));
        });
        context.create(spec).is_ok()
    }

    async fn notify_listeners(&self, tools: bool) {
        let sinks: Vec<SubscriptionSink> = self
            .listeners
            .sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for sink in sinks {
            let sent = match tools {
                true => sink.notify_tool_list_changed().await,
                false => sink.notify_prompt_list_changed().await,
            };
            if let Err(e) = sent {
                tracing::debug!(error = %e, "a listen stream refused the notification");
            }
        }
    }

    /// The seven fixtures of the tasks scenarios; `None` for any other tool.
    async fn task_fixture(
        &self,
        p: &CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        let args = p.arguments.clone().unwrap_or_default();
        let responses = p.input_responses.as_ref();
        let can_elicit = cx
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some());
        let answer = match p.name.as_ref() {
            // TaskMode::Never on the layer: always synchronous.
            "greet" => {
                let name = arg_str(&args, "name").unwrap_or("World");
                Ok(text(format!("Hello, {name}!")).into())
            }
            "slow_compute" => {
                let seconds = args
                    .get("seconds")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
                    .clamp(0.0, 600.0);
                let label = arg_str(&args, "label").unwrap_or("job").to_owned();
                if seconds >= 1.0 {
                    let task_label = label.clone();
                    if self.try_task(cx, move |tasks, id| {
                        slow_compute_worker(tasks, id, seconds, task_label)
                    }) {
                        return Some(handed_to_task());
                    }
                }
                tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                Ok(text(format!("{label}: done after {seconds} s")).into())
            }
            // TaskMode::Required: the layer answers -32021 when the client cannot take a task.
            "failing_job" => match self.try_task(cx, failing_job_worker) {
                true => handed_to_task(),
                false => Err(ErrorData::internal_error("tasks are not available", None)),
            },
            "protocol_error_job" => match self.try_task(cx, protocol_error_job_worker) {
                true => handed_to_task(),
                // Synchronously, the same protocol error as a plain JSON-RPC error.
                false => Err(ErrorData::internal_error("The job's backend crashed", None)),
            },
            "confirm_delete" => {
                let filename = arg_str(&args, "filename")
                    .unwrap_or("nothing.txt")
                    .to_owned();
                let task_filename = filename.clone();
                if can_elicit
                    && self.try_task(cx, move |tasks, id| {
                        confirm_delete_worker(tasks, id, task_filename)
                    })
                {
                    return Some(handed_to_task());
                }
                // No task: ask through MRTR instead, or keep the file.
                match accepted(responses, "confirm") {
                    Some(c) if c.get("confirm") == Some(&Value::Bool(true)) => {
                        Ok(text(format!("Deleted {filename}")).into())
                    }
                    Some(_) => Ok(text(format!("Kept {filename}")).into()),
                    None if can_elicit => Ok(input_required(
                        json!({"confirm": elicit(&format!("Delete {filename}?"), "confirm", "boolean")}),
                        None,
                    )
                    .into()),
                    None => Ok(text(format!("Kept {filename}: the client cannot confirm")).into()),
                }
            }
            "multi_input" => {
                if can_elicit && self.try_task(cx, multi_input_worker) {
                    return Some(handed_to_task());
                }
                if answered(responses, "name") && answered(responses, "confirm") {
                    Ok(text("Thanks for both answers").into())
                } else if can_elicit {
                    Ok(input_required(
                        json!({"name": elicit("Your name?", "name", "string"),
                            "confirm": elicit("Proceed?", "confirm", "boolean")}),
                        None,
                    )
                    .into())
                } else {
                    Ok(text("Nothing asked: the client cannot answer questions").into())
                }
            }
            // TaskMode::Required. Round 1 asks for a name through MRTR, with no task;
            // the retry carrying the answer becomes the task.
            "test_tool_with_task" => self.tool_with_task(p, cx),
            _ => return None,
        };
        Some(answer)
    }

    fn tool_with_task(
        &self,
        p: &CallToolRequestParams,
        cx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        const ROUND_1: &str = "user_name-asked";
        let ask = || {
            input_required(
                json!({"user_name": elicit("What is your name?", "name", "string")}),
                Some(seal(ROUND_1)),
            )
            .into()
        };
        if let Some(state) = p.request_state.as_deref()
            && open(state) != Some(ROUND_1)
        {
            return Err(tampered());
        }
        let Some(name) = accepted(p.input_responses.as_ref(), "user_name")
            .and_then(|c| c.get("name")?.as_str())
            .map(str::to_owned)
        else {
            return Ok(ask());
        };
        match self.try_task(cx, move |tasks, id| greeting_worker(tasks, id, name)) {
            true => handed_to_task(),
            false => Err(ErrorData::internal_error("tasks are not available", None)),
        }
    }

    /// The fixtures of the core scenarios.
    async fn core_fixture(
        &self,
        p: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = p.arguments.unwrap_or_default();
        let responses = p.input_responses.as_ref();
        let state = p.request_state.as_deref();
        let caps = cx.client_capabilities().unwrap_or_default();
        let answer: CallToolResponse = match p.name.as_ref() {
            "test_mcp_param_header" => {
                let region = arg_str(&args, "region").unwrap_or_default();
                text(format!("region={region}")).into()
            }
            "json_schema_2020_12_tool" => text("ok").into(),
            "test_simple_text" => text("This is a simple text response for testing.").into(),
            "test_image_content" => {
                CallToolResult::success(vec![ContentBlock::image(PNG_1X1, "image/png")]).into()
            }
            "test_audio_content" => {
                CallToolResult::success(vec![ContentBlock::audio(WAV_TINY, "audio/wav")]).into()
            }
            "test_embedded_resource" => CallToolResult::success(vec![ContentBlock::resource(
                from_json(json!({"uri": "test://embedded-resource", "mimeType": "text/plain",
                    "text": "This is an embedded resource content."})),
            )])
            .into(),
            "test_multiple_content_types" => CallToolResult::success(vec![
                ContentBlock::text("Multiple content types test:"),
                ContentBlock::image(PNG_1X1, "image/png"),
                ContentBlock::resource(from_json(json!({"uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}))),
            ])
            .into(),
            "test_error_handling" => {
                tool_error("This tool intentionally returns an error for testing").into()
            }
            "test_tool_with_progress" => {
                let token = cx.meta.get_progress_token();
                for step in [0.0, 50.0, 100.0] {
                    if let Some(token) = token.clone() {
                        let mut progress = ProgressNotificationParam::new(token, step);
                        progress.total = Some(100.0);
                        progress.message = Some(format!("Completed step {step} of 100"));
                        let _ = cx.peer.notify_progress(progress).await;
                    }
                    if step < 100.0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                let shown = token
                    .map(|t| serde_json::to_string(&t).unwrap_or_default())
                    .unwrap_or_default();
                text(format!("progress token {shown}")).into()
            }
            "test_missing_capability" => {
                if caps.sampling.is_none() {
                    return Err(ErrorData::missing_required_client_capability(from_json(
                        json!({"sampling": {}}),
                    )));
                }
                match responses.and_then(|r| r.get("answer")) {
                    Some(_) => text("sampled").into(),
                    None => input_required(json!({"answer": sample("Say hi", 20)}), None).into(),
                }
            }
            "test_streaming_elicitation" => match accepted(responses, "answer") {
                Some(_) => text("thanks").into(),
                None if caps.elicitation.is_some() => input_required(
                    json!({"answer": elicit("Anything to add?", "answer", "string")}),
                    None,
                )
                .into(),
                None => text("no elicitation capability").into(),
            },
            "test_logging_tool" => text("done without logging").into(),
            "test_trigger_tool_change" => {
                self.notify_listeners(true).await;
                text("tools list_changed sent").into()
            }
            "test_trigger_prompt_change" => {
                self.notify_listeners(false).await;
                text("prompts list_changed sent").into()
            }
            "test_input_required_result_elicitation" => {
                match accepted(responses, "user_name").and_then(|c| c.get("name")?.as_str()) {
                    Some(name) => text(format!("Hello, {name}!")).into(),
                    None => input_required(
                        json!({"user_name": elicit("What is your name?", "name", "string")}),
                        None,
                    )
                    .into(),
                }
            }
            "test_input_required_result_sampling" => {
                let answer = responses
                    .and_then(|r| r.get("capital_question"))
                    .and_then(|r| r.pointer("/content/text")?.as_str());
                match answer {
                    Some(answer) => text(format!("The model said: {answer}")).into(),
                    None => input_required(
                        json!({"capital_question": sample("What is the capital of France?", 100)}),
                        None,
                    )
                    .into(),
                }
            }
            "test_input_required_result_list_roots" => {
                let listed = responses
                    .and_then(|r| r.get("client_roots"))
                    .and_then(|r| r.get("roots")?.as_array());
                match listed {
                    Some(list) => {
                        let uris: Vec<&str> =
                            list.iter().filter_map(|r| r.get("uri")?.as_str()).collect();
                        text(format!("Roots: {}", uris.join(", "))).into()
                    }
                    None => input_required(json!({"client_roots": roots()}), None).into(),
                }
            }
            "test_input_required_result_request_state"
            | "test_input_required_result_tampered_state" => {
                let question = json!({"confirm": elicit("Please confirm", "ok", "boolean")});
                match state.map(open) {
                    None => input_required(question, Some(seal("confirm-round-1"))).into(),
                    Some(Some("confirm-round-1")) if answered(responses, "confirm") => {
                        text("state-ok: confirmed").into()
                    }
                    Some(Some("confirm-round-1")) => {
                        input_required(question, Some(seal("confirm-round-1"))).into()
                    }
                    Some(_) => return Err(tampered()),
                }
            }
            "test_input_required_result_multiple_inputs" => {
                let all = ["user_name", "greeting", "client_roots"]
                    .iter()
                    .all(|k| answered(responses, k));
                if state.and_then(open) == Some("multi-1") && all {
                    text("Got all three answers").into()
                } else {
                    input_required(
                        json!({"user_name": elicit("What is your name?", "name", "string"),
                            "greeting": sample("Generate a greeting", 50),
                            "client_roots": roots()}),
                        Some(seal("multi-1")),
                    )
                    .into()
                }
            }
            "test_input_required_result_multi_round" => match state.map(open) {
                Some(Some("round-1")) if answered(responses, "step1") => input_required(
                    json!({"step2": elicit("Step 2: What is your favorite color?", "color", "string")}),
                    Some(seal("round-2")),
                )
                .into(),
                Some(Some("round-2")) if answered(responses, "step2") => {
                    text("Both steps done").into()
                }
                Some(None) => return Err(tampered()),
                _ => input_required(
                    json!({"step1": elicit("Step 1: What is your name?", "name", "string")}),
                    Some(seal("round-1")),
                )
                .into(),
            },
            "test_input_required_result_capabilities" => {
                if responses.is_some_and(|r| !r.is_empty()) {
                    text("answered").into()
                } else {
                    let mut requests = Map::new();
                    if caps.sampling.is_some() {
                        requests.insert("sample".into(), sample("Say something", 20));
                    }
                    if caps.elicitation.is_some() {
                        requests.insert("ask".into(), elicit("Anything?", "answer", "string"));
                    }
                    if caps.roots.is_some() {
                        requests.insert("roots".into(), roots());
                    }
                    if requests.is_empty() {
                        text("the client declared nothing to ask through").into()
                    } else {
                        input_required(Value::Object(requests), None).into()
                    }
                }
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ));
            }
        };
        Ok(answer)
    }
}

// ---- prompts and resources ----------------------------------------------------------------

fn prompts() -> ListPromptsResult {
    from_json(json!({"resultType": "complete", "prompts": [
        {"name": "test_simple_prompt", "description": "A simple prompt"},
        {"name": "test_prompt_with_arguments", "description": "A prompt with arguments", "arguments": [
            {"name": "arg1", "description": "First test argument", "required": true},
            {"name": "arg2", "description": "Second test argument", "required": true}]},
        {"name": "test_prompt_with_embedded_resource", "description": "A prompt with a resource", "arguments": [
            {"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
        {"name": "test_prompt_with_image", "description": "A prompt with an image"},
        {"name": "test_input_required_result_prompt", "description": "A prompt that asks for context first"}
    ]}))
}

fn resource_contents(uri: &str) -> Option<Value> {
    match uri {
        "test://static-text" => Some(json!({"uri": uri, "mimeType": "text/plain",
            "text": "This is the content of the static text resource."})),
        "test://static-binary" => {
            Some(json!({"uri": uri, "mimeType": "image/png", "blob": PNG_1X1}))
        }
        _ => {
            let id = uri
                .strip_prefix("test://template/")?
                .strip_suffix("/data")?;
            (!id.is_empty() && !id.contains('/')).then(|| {
                let body =
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                json!({"uri": uri, "mimeType": "application/json", "text": body.to_string()})
            })
        }
    }
}

// ---- the rmcp handler -----------------------------------------------------------------------

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
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    /// Lets rmcp check `Mcp-Param-*` headers against the tool's `x-mcp-header` fields.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
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
        Ok(prompts())
    }

    async fn get_prompt(
        &self,
        p: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let arg = |k: &str| {
            p.arguments
                .as_ref()
                .and_then(|a| a.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let user = |content: Value| json!({"role": "user", "content": content});
        let messages = match p.name.as_str() {
            "test_simple_prompt" => vec![user(
                json!({"type": "text", "text": "This is a simple prompt for testing."}),
            )],
            "test_prompt_with_arguments" => {
                let (a, b) = (
                    arg("arg1").unwrap_or_default(),
                    arg("arg2").unwrap_or_default(),
                );
                vec![user(
                    json!({"type": "text", "text": format!("Prompt with arguments: arg1='{a}', arg2='{b}'")}),
                )]
            }
            "test_prompt_with_embedded_resource" => {
                let uri = arg("resourceUri")
                    .ok_or_else(|| ErrorData::invalid_params("resourceUri is required", None))?;
                vec![
                    user(
                        json!({"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain",
                        "text": "Embedded resource content for testing."}}),
                    ),
                    user(
                        json!({"type": "text", "text": "Please process the embedded resource above."}),
                    ),
                ]
            }
            "test_prompt_with_image" => vec![
                user(json!({"type": "image", "data": PNG_1X1, "mimeType": "image/png"})),
                user(json!({"type": "text", "text": "Please analyze the image above."})),
            ],
            "test_input_required_result_prompt" => {
                let context = accepted(p.input_responses.as_ref(), "user_context")
                    .and_then(|c| c.get("context")?.as_str());
                match context {
                    Some(context) => vec![user(
                        json!({"type": "text", "text": format!("Use this context: {context}")}),
                    )],
                    None => {
                        return Ok(input_required(
                            json!({"user_context": elicit("What context should the prompt use?", "context", "string")}),
                            None,
                        )
                        .into());
                    }
                }
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown prompt {other}"),
                    None,
                ));
            }
        };
        // `resultType` must be written out: rmcp adds it only through its constructors.
        let result: GetPromptResult =
            from_json(json!({"resultType": "complete", "messages": messages}));
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(from_json(json!({"resultType": "complete", "resources": [
            {"uri": "test://static-text", "name": "static-text",
             "description": "A static text resource", "mimeType": "text/plain"},
            {"uri": "test://static-binary", "name": "static-binary",
             "description": "A static PNG", "mimeType": "image/png"}
        ]})))
    }

    async fn list_resource_templates(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(from_json(
            json!({"resultType": "complete", "resourceTemplates": [
                {"uriTemplate": "test://template/{id}/data", "name": "template-data",
                 "description": "Data for one id", "mimeType": "application/json"}
            ]}),
        ))
    }

    async fn read_resource(
        &self,
        p: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match resource_contents(&p.uri) {
            Some(contents) => {
                let result: ReadResourceResult =
                    from_json(json!({"resultType": "complete", "contents": [contents]}));
                Ok(result.into())
            }
            None => Err(ErrorData::resource_not_found(
                "Resource not found",
                Some(json!({"uri": p.uri})),
            )),
        }
    }

    async fn complete(
        &self,
        p: CompleteRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let prefix = p.argument.value.to_lowercase();
        let values: Vec<&str> = ["paris", "park", "party", "test", "testing"]
            .into_iter()
            .filter(|v| v.starts_with(&prefix))
            .collect();
        Ok(from_json(json!({"resultType": "complete",
            "completion": {"values": values, "total": values.len(), "hasMore": false}})))
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let key = self.listeners.next.fetch_add(1, Ordering::Relaxed);
        let sinks = &self.listeners.sinks;
        let lock = || sinks.lock().unwrap_or_else(|p| p.into_inner());
        lock().insert(key, context.sink().clone());
        context.cancelled().await;
        lock().remove(&key);
        Ok(())
    }
}

// ---- main ----------------------------------------------------------------------------------

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("warn,mcp_tasks=info");
    let sse = std::env::var("MCP_SSE").is_ok_and(|v| v == "1");

    let tasks_layer = TasksLayer::builder(MemoryStore::new())
        .with_server_info(NAME, env!("CARGO_PKG_VERSION"))
        .with_tool_mode("greet", TaskMode::Never)
        .with_tool_mode("failing_job", TaskMode::Required)
        .with_tool_mode("test_tool_with_task", TaskMode::Required)
        .build()?;
    let fixtures = Fixtures {
        tasks: tasks_layer.handle(),
        listeners: Arc::default(),
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(!sse)
        .with_stateless_protocol_metadata_required(true)
        .with_sse_retry(None)
        .with_sse_keep_alive(Some(Duration::from_secs(15)));
    let rmcp_service = StreamableHttpService::new(
        move || Ok(fixtures.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let app = ServiceBuilder::new()
        .map_request(common::bearer_principal)
        .layer(tasks_layer)
        .service(rmcp_service);

    let listener = tokio::net::TcpListener::bind(common::listen_addr("127.0.0.1:3001")).await?;
    eprintln!(
        "{NAME} listening on http://{}/mcp ({} replies)",
        listener.local_addr()?,
        if sse { "SSE" } else { "JSON" }
    );
    common::serve(listener, app, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}
