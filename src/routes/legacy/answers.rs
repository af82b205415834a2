//! The client's answers to the questions a `tasks/result` stream carried: JSON-RPC
//! responses whose id the layer minted ([`v2025::input_request_id`]), POSTed on
//! their own, to any node. The id names the task and the input key; the store
//! checks the caller owns the task, and the answer becomes the task's input
//! response, exactly as a 2026-07-28 `tasks/update` would store it. The worker
//! waiting in `ask` carries on.

use http::{Response, StatusCode};
use serde_json::{Map, Value, json};

use crate::body::ResponseBody;
use crate::engine::Engine;
use crate::observe::{self, Outcome};
use crate::routes::tasks::store_failed;
use crate::routes::tasks::{answered_too_late, check_input_sizes};
use crate::store::Applied;
use crate::task::{Principal, Scope, TaskId, Transition};
use crate::wire::RpcError;
use crate::wire::v2025::{self, INPUT_ID_PREFIX};

/// Whether `body` may be an answer to a question the layer sent: it holds the
/// prefix of the ids the layer mints. Cheap, and false for every other message.
pub(crate) fn is_answer(body: &[u8]) -> bool {
    let prefix = INPUT_ID_PREFIX.as_bytes();
    body.windows(prefix.len()).any(|w| w == prefix)
}

/// Stores a client's answer; `None` when `body` is not a response to an id the
/// layer minted (it then goes on its way). Every refusal changes nothing and is
/// a JSON-RPC error with HTTP 400.
pub(crate) async fn answer<B>(
    engine: &Engine,
    owner: Option<Principal>,
    body: &[u8],
) -> Option<Response<ResponseBody<B>>> {
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    if message.contains_key("method") {
        return None;
    }
    let Some(Value::String(id)) = message.get("id") else {
        return None;
    };
    if !id.starts_with(INPUT_ID_PREFIX) {
        return None;
    }
    let refused = |message: &'static str| {
        let error = RpcError::new(RpcError::INVALID_PARAMS, message, StatusCode::BAD_REQUEST);
        observe::outcome(Outcome::Error(error.code()));
        Some(error.to_response(None).map(ResponseBody::full))
    };
    let Some((task, key)) = v2025::read_input_request_id(id) else {
        return refused("Invalid params: an answer to a request id the server did not send");
    };
    let Ok(task) = task.parse::<TaskId>() else {
        return refused("Invalid params: an answer to a request id the server did not send");
    };
    let answer = match (message.remove("result"), message.remove("error")) {
        (Some(Value::Object(result)), None) => Value::Object(result),
        // The client could not handle the question: it is declined.
        (None, Some(Value::Object(_))) => json!({"action": "cancel"}),
        _ => return refused("Invalid params: an answer needs a result object or an error object"),
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return refused("Invalid Request: jsonrpc must be \"2.0\"");
    }
    if let Err(e) = engine.admit_owner(owner.as_ref()) {
        observe::outcome(Outcome::Error(e.code()));
        return Some(e.to_response(None).map(ResponseBody::full));
    }
    let scope = Scope::Owner(owner.as_ref());
    let mut responses = Map::new();
    responses.insert(key, answer);
    if let Err(e) = check_input_sizes(engine, &task, scope, &responses).await {
        observe::outcome(Outcome::Error(e.code()));
        return Some(e.to_response(None).map(ResponseBody::full));
    }
    let updated = match engine
        .update(&task, scope, &Transition::Answer { responses })
        .await
    {
        Ok(Some(updated)) => updated,
        Ok(None) => return refused("Failed to retrieve task: Task not found"),
        Err(e) => {
            let e = store_failed(e);
            observe::outcome(Outcome::Error(e.code()));
            return Some(e.to_response(None).map(ResponseBody::full));
        }
    };
    match updated.outcome {
        Ok(Applied::Changed) => {}
        _ if answered_too_late(&updated) => return refused("Invalid params: the task has ended"),
        Ok(Applied::Unchanged) => {
            return refused("Invalid params: the task is not waiting for this answer");
        }
        Err(_) => return refused("Invalid params: the answer was refused"),
    }
    Some(crate::routes::accepted())
}
