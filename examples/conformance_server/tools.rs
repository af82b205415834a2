//! The tool list, and the fixtures of the core 2026-07-28 scenarios: content tools,
//! progress, MRTR tools with an integrity-protected `requestState`, an `x-mcp-header`
//! tool and the list-changed triggers.

use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    ProgressNotificationParam, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};

use crate::common::text;
use crate::mrtr::{
    accepted, answered, elicit, input_required, open, roots, sample, seal, tampered,
};
use crate::{Fixtures, PNG_1X1, from_json};

/// A tiny WAV for `test_audio_content`.
const WAV_TINY: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

pub(crate) fn tool_error(value: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(value)])
}

pub(crate) fn arg_str<'a>(args: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
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
pub(crate) fn tools() -> Vec<Tool> {
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
    /// The fixtures of the core scenarios.
    pub(crate) async fn core_fixture(
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
                self.listeners.notify(true).await;
                text("tools list_changed sent").into()
            }
            "test_trigger_prompt_change" => {
                self.listeners.notify(false).await;
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
