//! Tasks for clients without the extension
//! ([`with_task_tools`](crate::TasksLayerBuilder::with_task_tools)): a call that
//! becomes a task answers with an ordinary tool result that says so (the hand-off),
//! and the client's `tools/list` gains `task_status`, `task_answer` and
//! `task_cancel`, answered here from the store with the caller's owner scope.
//! `fallback.rs` routes the requests here.
//!
//! Every answer has two readers. Its text is written for a language model to act
//! on; app code gets the same facts as one JSON object ([`task_state`]), so that it
//! never parses English: `taskId`, `status`, `pollIntervalMs` (the task's, else
//! [`DEFAULT_POLL_MS`], as the text has it), `statusMessage` when there is one, and
//! by status `inputRequests` (the outstanding questions as stored, key →
//! `{method, params}`), `result` (the tool's stored `CallToolResult`) or `error` (the
//! JSON-RPC error object).
//!
//! - The task tools answer it as `structuredContent`, and their `tools/list` entries
//!   declare its `outputSchema`, so a client that validates results (the TypeScript
//!   and Python SDKs do) accepts them. Every answer about a task carries it, a failed
//!   task's (`isError: true`) too; only the errors that report no task (an unknown
//!   or foreign id, missing or refused arguments, a store outage) go without, which
//!   `isError: true` allows.
//! - The hand-off carries it in `_meta` under [`HAND_OFF_META`], never as
//!   `structuredContent`: that field belongs to the tool that was called, and a
//!   validating client checks it against that tool's own `outputSchema`, which the
//!   layer does not see. There the object would fail the check, or, worse, pass a
//!   loose schema and be read as the tool's output. `_meta` is checked against no
//!   schema on any revision, and hosts do not hand it to the model in place of the
//!   text. A tool that declares an `outputSchema` stays a limit the layer cannot
//!   mend: those clients want matching `structuredContent` in every result of it that
//!   is not an error, so they refuse its hand-off, whatever `_meta` holds.
//!
//! Clients of a revision before 2026-07-28 get no `resultType` and no `serverInfo`
//! in `_meta`; their hand-off's `_meta` holds the task object alone.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::fmt::Write as _;
use tower_service::Service;

use super::{Call, Reply, reply};
use crate::body::{RequestBody, ResponseBody};
use crate::engine::Engine;
use crate::error::{BoxError, StoreError, TransitionError};
use crate::observe::{self, Outcome};
use crate::store::Applied;
use crate::task::{ErrorObject, Scope, TaskId, TaskRecord, TaskStatus, Timestamp, Transition};
use crate::wire::{HeaderRoute, MCP_METHOD, RpcError, result_response};

/// The tools the layer adds.
const STATUS: &str = "task_status";
const ANSWER: &str = "task_answer";
const CANCEL: &str = "task_cancel";

/// The hand-off's `_meta` key for the task object: the layer's own prefix, as
/// `_meta` keys outside the specification take one.
const HAND_OFF_META: &str = "mcp-tasks/task";

/// The poll interval the texts and `pollIntervalMs` give for a task that has none.
const DEFAULT_POLL_MS: u64 = 5_000;

/// Every status, in the order the output schema lists them.
const STATUSES: [TaskStatus; 5] = [
    TaskStatus::Working,
    TaskStatus::InputRequired,
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
];

/// Put in a `tools/call`'s extensions when a task it makes must be answered as a
/// tool result, not a `CreateTaskResult`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AsToolResult {
    /// The client speaks a revision before 2026-07-28: no `resultType`, no `_meta`.
    legacy: bool,
}

/// Which requests the layer reads with task tools on: a modern `tools/list` too
/// (earlier revisions' requests are read anyway).
pub(crate) fn reroute(route: HeaderRoute, headers: &http::HeaderMap) -> HeaderRoute {
    match route {
        HeaderRoute::Passthrough
            if headers
                .get(MCP_METHOD)
                .is_some_and(|m| m.as_bytes().trim_ascii() == b"tools/list") =>
        {
            HeaderRoute::Inspect
        }
        route => route,
    }
}

/// Whether this request is the fallback's: task tools on, a client that did not
/// declare the extension, `tools/list` or `tools/call`.
pub(crate) fn handles(engine: &Engine, method: &str, declared: bool) -> bool {
    engine.config().task_tools && !declared && matches!(method, "tools/list" | "tools/call")
}

/// `task_status`, `task_answer` or `task_cancel` of a client without the
/// extension, answered from the store with the caller's owner scope.
pub(crate) async fn answer_tool<S, B>(call: Call<'_, S>) -> Response<ResponseBody<B>> {
    let owner = call.principal();
    let Call {
        engine,
        parts,
        envelope,
        ..
    } = call;
    let legacy = envelope.is_legacy(&parts.headers);
    let tool = envelope.param_str("name");
    let arguments = envelope.param("arguments").unwrap_or(&Value::Null);
    if let Err(e) = engine.admit_owner(owner.as_ref()) {
        return reply(e, envelope.reply_id());
    }
    let scope = Scope::Owner(owner.as_ref());
    let result = answer(&engine, tool.as_deref().unwrap_or(""), arguments, scope).await;
    observe::outcome(Outcome::Result);
    tool_response(&engine, envelope.reply_id(), result, legacy)
}

/// Whether a `tools/call` names one of the task tools.
pub(crate) fn is_task_tool(tool: &str) -> bool {
    matches!(tool, STATUS | ANSWER | CANCEL)
}

/// A marker that a task made by this `tools/call` is answered as a tool result.
pub(crate) fn as_tool_result(legacy: bool) -> AsToolResult {
    AsToolResult { legacy }
}

/// What a call that became a task answers: a `CreateTaskResult`, or for a client
/// without the extension, a tool result saying how to follow the task, with the
/// task object in `_meta` (the module doc says why not in `structuredContent`).
pub(crate) fn task_result(
    engine: &Engine,
    task: &TaskRecord,
    as_tool: AsToolResult,
) -> Map<String, Value> {
    let AsToolResult { legacy } = as_tool;
    let id = task.id;
    let text = format!(
        "This call takes longer than a direct answer allows, so it goes on in the background \
         as task {id}. Follow it with the tool {STATUS} and the arguments \
         {{\"taskId\": \"{id}\"}}: it tells how the task is doing, asks any question the task \
         needs answered, and returns this call's result once the task is done. Check about \
         {}. To stop the task, call {CANCEL} with the same arguments.",
        every(task)
    );
    let mut result = tool_result(engine, vec![text_block(text)], false, legacy);
    // Beside `serverInfo` on 2026-07-28, alone before.
    let meta = result.entry("_meta").or_insert(Value::Null);
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert(HAND_OFF_META.into(), task_state(task));
    }
    result
}

/// The `outputSchema` of the three tools: the task object of [`task_state`].
fn output_schema() -> Value {
    let statuses = STATUSES.map(TaskStatus::as_str);
    json!({
        "type": "object",
        "properties": {
            "taskId": {"type": "string", "description": "The task's id"},
            "status": {"type": "string", "enum": statuses},
            "pollIntervalMs": {"type": "integer", "minimum": 0,
                "description": "About how long to wait between two task_status calls"},
            "statusMessage": {"type": "string", "description": "The task's latest news"},
            "inputRequests": {"type": "object",
                "description": "With input_required: the questions the task waits on, by \
                    the key task_answer answers them under",
                "additionalProperties": {"type": "object", "properties": {
                    "method": {"type": "string"}, "params": {"type": "object"}},
                    "required": ["method"]}},
            "result": {"type": "object",
                "description": "With completed: the original tool's CallToolResult"},
            "error": {"type": "object",
                "description": "With failed: the JSON-RPC error the task ended with",
                "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
                "required": ["code", "message"]},
        },
        "required": ["taskId", "status"],
    })
}

/// The three tools' definitions.
fn definitions() -> [Value; 3] {
    let task_id = json!({"type": "string",
        "description": "The task id from the tool result that started the task"});
    let output = output_schema();
    [
        json!({
            "name": STATUS,
            "description": "Reports on a task that a long tool call started: its status, its \
                latest progress, any question it waits on, and once it has finished, the \
                original tool's result.",
            "inputSchema": {"type": "object", "properties": {"taskId": task_id},
                "required": ["taskId"]},
            "outputSchema": output.clone(),
        }),
        json!({
            "name": ANSWER,
            "description": "Answers the questions a task waits on (task_status lists them \
                with their keys), so that it can go on.",
            "inputSchema": {"type": "object", "properties": {
                "taskId": task_id,
                "answers": {"type": "object", "description": "One entry per question key, \
                    e.g. {\"confirm\": {\"action\": \"accept\", \"content\": {\"confirm\": true}}}; \
                    {\"action\": \"decline\"} refuses a question"},
            }, "required": ["taskId", "answers"]},
            "outputSchema": output.clone(),
        }),
        json!({
            "name": CANCEL,
            "description": "Stops a task that a long tool call started. A finished task \
                stays as it is.",
            "inputSchema": {"type": "object", "properties": {"taskId": task_id},
                "required": ["taskId"]},
            "outputSchema": output,
        }),
    ]
}

/// Forwards `tools/list` and adds the three tools to its last page (the one without
/// `nextCursor`). An answer past the response cap or with no tool list passes as it
/// is.
pub(crate) async fn list<S, B, ResBody>(call: Call<'_, S>) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    call.forward_edited(add_tools).await
}

/// Adds the three tools to a `tools/list` response; `false` (nothing changed)
/// unless it is a last page of tools.
pub(crate) fn add_tools(message: &mut Value) -> bool {
    let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
        return false;
    };
    if result.get("nextCursor").is_some_and(|c| !c.is_null()) {
        return false;
    }
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return false;
    };
    for tool in definitions() {
        if !tools.iter().any(|t| t["name"] == tool["name"]) {
            tools.push(tool);
        }
    }
    true
}

/// What one of the three tools answers: its content, the task object (`None` only
/// for an error about no task) and whether it is an error.
struct ToolAnswer {
    content: Vec<Value>,
    structured: Option<Value>,
    is_error: bool,
}

impl ToolAnswer {
    /// An error that concerns no task: text only, as `isError` allows.
    fn error(text: String) -> ToolAnswer {
        ToolAnswer {
            content: vec![text_block(text)],
            structured: None,
            is_error: true,
        }
    }

    /// A text about `task`, with its task object.
    fn about(task: &TaskRecord, text: String, is_error: bool) -> ToolAnswer {
        ToolAnswer {
            content: vec![text_block(text)],
            structured: Some(task_state(task)),
            is_error,
        }
    }
}

/// The task as app code reads it: the `structuredContent` of the task tools and the
/// hand-off's `_meta` entry, as [`output_schema`] describes it.
fn task_state(task: &TaskRecord) -> Value {
    let mut state = Map::with_capacity(6);
    state.insert("taskId".into(), Value::String(task.id.to_string()));
    state.insert("status".into(), Value::String(task.status.as_str().into()));
    state.insert("pollIntervalMs".into(), Value::from(poll_ms(task)));
    if let Some(message) = &task.status_message {
        state.insert("statusMessage".into(), Value::String(message.clone()));
    }
    match task.status {
        TaskStatus::InputRequired => {
            let questions = outstanding(task)
                .map(|(key, request)| (key.clone(), request.clone()))
                .collect();
            state.insert("inputRequests".into(), Value::Object(questions));
        }
        TaskStatus::Completed => {
            if let Some(result) = &task.result {
                state.insert("result".into(), result.clone());
            }
        }
        TaskStatus::Failed => {
            let error = serde_json::to_value(failure(task)).unwrap_or(Value::Null);
            state.insert("error".into(), error);
        }
        TaskStatus::Working | TaskStatus::Cancelled => {}
    }
    Value::Object(state)
}

/// The questions `task` still waits on, by key.
fn outstanding(task: &TaskRecord) -> impl Iterator<Item = (&String, &Value)> {
    task.input_requests
        .iter()
        .filter(|(key, _)| !task.input_responses.contains_key(*key))
}

/// The error a failed task ended with; `tasks/get`'s stand-in when none was kept.
fn failure(task: &TaskRecord) -> Cow<'_, ErrorObject> {
    match &task.error {
        Some(error) => Cow::Borrowed(error),
        None => Cow::Owned(ErrorObject::new(RpcError::INTERNAL_ERROR, "Task failed")),
    }
}

fn text_block(text: String) -> Value {
    json!({"type": "text", "text": text})
}

/// A `CallToolResult` as this client's revision writes it.
fn tool_result(
    engine: &Engine,
    content: Vec<Value>,
    is_error: bool,
    legacy: bool,
) -> Map<String, Value> {
    let mut result = Map::with_capacity(4);
    if !legacy {
        result.insert("resultType".into(), Value::String("complete".into()));
    }
    result.insert("content".into(), Value::Array(content));
    result.insert("isError".into(), Value::Bool(is_error));
    if !legacy {
        engine.result_meta(&mut result);
    }
    result
}

fn tool_response<B>(
    engine: &Engine,
    id: Option<&str>,
    answer: ToolAnswer,
    legacy: bool,
) -> Response<ResponseBody<B>> {
    let mut result = tool_result(engine, answer.content, answer.is_error, legacy);
    if let Some(structured) = answer.structured {
        result.insert("structuredContent".into(), structured);
    }
    result_response(id, result).map(ResponseBody::full)
}

/// `task_status`, `task_answer` or `task_cancel`, scoped to the caller.
async fn answer(engine: &Engine, tool: &str, arguments: &Value, scope: Scope<'_>) -> ToolAnswer {
    let Some(text) = arguments["taskId"].as_str() else {
        return ToolAnswer::error(format!(
            "{tool} needs the argument taskId, the task id a tool result gave."
        ));
    };
    let unknown = || {
        ToolAnswer::error(format!(
            "There is no task {text}: the id is wrong, or the task has expired. Task ids \
             come from the tool result that started the task."
        ))
    };
    let Ok(id) = text.parse::<TaskId>() else {
        return unknown();
    };
    let outcome = match tool {
        STATUS => status(engine, &id, scope).await,
        ANSWER => answer_questions(engine, &id, scope, &arguments["answers"]).await,
        _ => cancel(engine, &id, scope).await,
    };
    match outcome {
        Ok(Some(answer)) => answer,
        Ok(None) => unknown(),
        Err(StoreError::LimitReached(limit)) => {
            let refused = crate::engine::limit_reached(limit);
            ToolAnswer::error(format!(
                "The answers were not accepted: the tasks of this principal store as many \
                 bytes as they may ({}); cancel a task, or wait until some expire.",
                refused.message()
            ))
        }
        Err(e) => {
            tracing::error!(error = %crate::error::Chain(&e), "task store failed");
            ToolAnswer::error(format!(
                "The task store did not answer; try {tool} again in a few seconds."
            ))
        }
    }
}

async fn status(
    engine: &Engine,
    id: &TaskId,
    scope: Scope<'_>,
) -> Result<Option<ToolAnswer>, StoreError> {
    let Some(task) = engine.store().get(id, scope, Timestamp::now()).await? else {
        return Ok(None);
    };
    engine.node().stop_runner(&task);
    Ok(Some(describe(&task, String::new())))
}

async fn answer_questions(
    engine: &Engine,
    id: &TaskId,
    scope: Scope<'_>,
    answers: &Value,
) -> Result<Option<ToolAnswer>, StoreError> {
    let Some(responses) = answers.as_object() else {
        return Ok(Some(ToolAnswer::error(format!(
            "{ANSWER} needs the argument answers, an object with one entry per question key, \
             as {STATUS} lists them."
        ))));
    };
    if let Err(e) = super::tasks::check_input_sizes(engine, id, scope, responses).await {
        return Ok(Some(ToolAnswer::error(e.message().to_owned())));
    }
    let transition = Transition::Answer {
        responses: responses.clone(),
    };
    let Some(updated) = engine.update(id, scope, &transition).await? else {
        return Ok(None);
    };
    if super::tasks::answered_too_late(&updated) {
        let lead = super::tasks::too_late_message(updated.record.status);
        return Ok(Some(describe(&updated.record, format!("{lead} "))));
    }
    let lead = match updated.outcome {
        Ok(Applied::Changed) => "Thank you, the answers are recorded. ".to_owned(),
        Ok(Applied::Unchanged) => format!(
            "None of these answers matched a question the task waits on (keys given: {}). ",
            responses.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        Err(TransitionError::Invalid(reason)) => {
            return Ok(Some(ToolAnswer::error(format!(
                "The answers were not accepted: {reason}"
            ))));
        }
        Err(_) => String::new(),
    };
    Ok(Some(describe(&updated.record, lead)))
}

async fn cancel(
    engine: &Engine,
    id: &TaskId,
    scope: Scope<'_>,
) -> Result<Option<ToolAnswer>, StoreError> {
    let Some(updated) = engine.update(id, scope, &Transition::Cancel).await? else {
        return Ok(None);
    };
    let task = &updated.record;
    let id = task.id;
    let text = match (updated.outcome, task.status) {
        (Ok(Applied::Changed), _) | (_, TaskStatus::Cancelled) => {
            format!("Task {id} is cancelled: its work has stopped, and it has no result.")
        }
        (_, status) => format!(
            "Task {id} had already ended ({}), so there was nothing to cancel. Call {STATUS} for \
             its outcome.",
            status.as_str()
        ),
    };
    Ok(Some(ToolAnswer::about(task, text, false)))
}

/// The task's poll interval in milliseconds, or [`DEFAULT_POLL_MS`].
fn poll_ms(task: &TaskRecord) -> u64 {
    task.poll_interval_ms.unwrap_or(DEFAULT_POLL_MS)
}

/// About how many seconds to wait between two `task_status` calls (at least one).
fn poll_seconds(task: &TaskRecord) -> u64 {
    poll_ms(task).div_ceil(1_000).max(1)
}

/// "every second" or "every N seconds": how often to check `task`.
fn every(task: &TaskRecord) -> String {
    match poll_seconds(task) {
        1 => "every second".to_owned(),
        n => format!("every {n} seconds"),
    }
}

/// "a second" or "N seconds": when to check `task` next.
fn in_about(task: &TaskRecord) -> String {
    match poll_seconds(task) {
        1 => "a second".to_owned(),
        n => format!("{n} seconds"),
    }
}

/// The task as a language model reads it, after `lead`.
fn describe(task: &TaskRecord, lead: String) -> ToolAnswer {
    let id = task.id;
    let mut text = lead;
    let latest = task
        .status_message
        .as_deref()
        .map(|m| format!(" Latest status: {m}."))
        .unwrap_or_default();
    match task.status {
        TaskStatus::Working => {
            let _ = write!(
                text,
                "Task {id} is still working.{latest} Call {STATUS} again in about {}; call \
                 {CANCEL} to stop it.",
                in_about(task)
            );
            ToolAnswer::about(task, text, false)
        }
        TaskStatus::InputRequired => {
            let _ = write!(
                text,
                "Task {id} is waiting for answers before it can go on.{latest} Questions, by \
                 key:"
            );
            for (key, request) in outstanding(task) {
                let _ = write!(text, "\n- {key}: {}", question(request));
            }
            let _ = write!(
                text,
                "\nAnswer with {ANSWER}, for example {{\"taskId\": \"{id}\", \"answers\": \
                 {{\"<key>\": {{\"action\": \"accept\", \"content\": {{<the requested fields>}}}}}}}}; \
                 {{\"action\": \"decline\"}} refuses a question."
            );
            ToolAnswer::about(task, text, false)
        }
        TaskStatus::Completed => {
            let _ = write!(text, "Task {id} has completed. The tool's result follows.");
            let result = task.result.as_ref();
            let mut content = vec![text_block(text)];
            if let Some(Value::Array(blocks)) = result.and_then(|r| r.get("content")) {
                content.extend(blocks.iter().cloned());
            }
            // The tool's own `structuredContent` stays inside `result`: this
            // tool's schema is the task object's.
            ToolAnswer {
                content,
                structured: Some(task_state(task)),
                is_error: result.is_some_and(|r| r["isError"] == true),
            }
        }
        TaskStatus::Failed => {
            let error = failure(task);
            let _ = write!(
                text,
                "Task {id} failed: {} (error {}). It has no result.",
                error.message, error.code,
            );
            ToolAnswer::about(task, text, true)
        }
        TaskStatus::Cancelled => {
            let _ = write!(text, "Task {id} was cancelled; it has no result.");
            ToolAnswer::about(task, text, false)
        }
    }
}

/// One input request in words: a form's message and the fields it wants, a URL to
/// open, or the request as it is.
fn question(request: &Value) -> String {
    let params = &request["params"];
    match request["method"].as_str() {
        Some("elicitation/create") if params["mode"] == "url" => format!(
            "{} (open {} and accept when done)",
            params["message"]
                .as_str()
                .unwrap_or("Please visit the page"),
            params["url"].as_str().unwrap_or("the given URL")
        ),
        Some("elicitation/create") => format!(
            "{} (fields, as a JSON schema: {})",
            params["message"]
                .as_str()
                .unwrap_or("Please fill in the form"),
            params["requestedSchema"]
        ),
        Some(method) => format!("a {method} request: {params}"),
        None => format!("a request: {request}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::sse;

    fn extend_message(mut message: Value) -> Option<Vec<u8>> {
        add_tools(&mut message).then(|| serde_json::to_vec(&message).unwrap())
    }

    fn extend_events(stream: &[u8]) -> Option<Bytes> {
        sse::rewrite_response(stream, true, add_tools)
    }

    #[test]
    fn only_a_last_page_of_tools_is_extended_once() {
        let page = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a"}]}});
        let extended: Value = serde_json::from_slice(&extend_message(page).unwrap()).unwrap();
        let names: Vec<&str> = extended["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(names, ["a", STATUS, ANSWER, CANCEL]);
        assert!(extend_message(extended.clone()).is_some());
        let again: Value = serde_json::from_slice(&extend_message(extended).unwrap()).unwrap();
        assert_eq!(again["result"]["tools"].as_array().unwrap().len(), 4);
        let first = json!({"jsonrpc": "2.0", "id": 1,
            "result": {"tools": [], "nextCursor": "2"}});
        assert!(extend_message(first).is_none());
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "x"}});
        assert!(extend_message(error).is_none());

        let note = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n";
        let stream = format!(
            "{note}data: {}\n\n",
            json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}})
        );
        let out = extend_events(stream.as_bytes()).unwrap();
        let out = std::str::from_utf8(&out).unwrap();
        assert!(out.starts_with(note), "{out}");
        assert!(out.contains(CANCEL), "{out}");
    }
}
