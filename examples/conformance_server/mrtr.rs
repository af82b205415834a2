//! MRTR (multi-round-trip requests): the input requests a tool or prompt answers with
//! `input_required`, read back from the retried call's `inputResponses`, and an
//! integrity-protected `requestState`.

use std::hash::BuildHasher as _;
use std::sync::OnceLock;

use rmcp::ErrorData;
use rmcp::model::{InputRequiredResult, InputResponses};
use serde_json::{Map, Value, json};

use crate::from_json;

// ---- requestState integrity: `payload.tag`, tag = keyed SipHash (per-process key) -------

fn tag(payload: &str) -> String {
    static KEY: OnceLock<std::hash::RandomState> = OnceLock::new();
    let key = KEY.get_or_init(std::hash::RandomState::new);
    format!("{:016x}", key.hash_one(payload))
}

pub(crate) fn seal(payload: &str) -> String {
    format!("{payload}.{}", tag(payload))
}

/// The payload of a sealed state, or `None` if it was tampered with.
pub(crate) fn open(state: &str) -> Option<&str> {
    let (payload, mac) = state.rsplit_once('.')?;
    (tag(payload) == mac).then_some(payload)
}

pub(crate) fn tampered() -> ErrorData {
    ErrorData::invalid_params("requestState failed its integrity check", None)
}

// ---- input requests and their answers ---------------------------------------------------

pub(crate) fn elicit(message: &str, field: &str, ty: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": ty}}, "required": [field]}}})
}

pub(crate) fn sample(prompt: &str, max_tokens: u32) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": max_tokens}})
}

pub(crate) fn roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

pub(crate) fn input_required(requests: Value, state: Option<String>) -> InputRequiredResult {
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
pub(crate) fn accepted<'a>(
    responses: Option<&'a InputResponses>,
    key: &str,
) -> Option<&'a Map<String, Value>> {
    accepted_content(responses?.get(key))
}

pub(crate) fn answered(responses: Option<&InputResponses>, key: &str) -> bool {
    responses
        .and_then(|r| r.get(key))
        .is_some_and(Value::is_object)
}
