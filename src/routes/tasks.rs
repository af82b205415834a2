//! `tasks/get`, `tasks/update` and `tasks/cancel`: answered from the store, scoped
//! to the caller, never reaching the inner service.

use serde_json::{Map, Value};

use crate::engine::Engine;
use crate::error::{StoreError, TransitionError};
use crate::task::{Scope, TaskId, Timestamp, Transition};
use crate::wire::{Envelope, RpcError};

/// `tasks/get`, `tasks/update` and `tasks/cancel`, owner-scoped. A foreign task
/// answers exactly like a missing one, and no answer echoes the id.
pub(crate) async fn answer(
    engine: &Engine,
    envelope: &Envelope,
    scope: Scope<'_>,
) -> Result<Map<String, Value>, RpcError> {
    let not_found = || RpcError::invalid_params("Failed to retrieve task: Task not found");
    let store_failed = |e: StoreError| {
        tracing::error!(error = %e, "task store failed");
        RpcError::internal_error()
    };
    let Some(text) = envelope.param("taskId").and_then(Value::as_str) else {
        return Err(RpcError::invalid_params("Missing taskId"));
    };
    let id: Option<TaskId> = text.parse().ok();
    let mut result = match envelope.method.as_str() {
        "tasks/get" => {
            let Some(id) = id else {
                return Err(not_found());
            };
            let task = engine
                .store
                .get(&id, scope, Timestamp::now())
                .await
                .map_err(store_failed)?
                .ok_or_else(not_found)?;
            let mut result = Map::with_capacity(12);
            result.insert("resultType".into(), Value::String("complete".into()));
            result.extend(task.into_detailed_json());
            result
        }
        method => {
            let transition = if method == "tasks/update" {
                let Some(responses) = envelope.param("inputResponses") else {
                    return Err(RpcError::invalid_params("Missing inputResponses"));
                };
                let Some(responses) = responses.as_object() else {
                    return Err(RpcError::invalid_params("inputResponses must be an object"));
                };
                Transition::Answer {
                    responses: responses.clone(),
                }
            } else {
                Transition::Cancel
            };
            let Some(id) = id else {
                return Err(not_found());
            };
            let updated = engine
                .update(&id, scope, &transition)
                .await
                .map_err(store_failed)?
                .ok_or_else(not_found)?;
            if let Err(TransitionError::Invalid(reason)) = updated.outcome {
                return Err(RpcError::invalid_params(reason));
            }
            let mut ack = Map::with_capacity(2);
            ack.insert("resultType".into(), Value::String("complete".into()));
            ack
        }
    };
    engine.result_meta(&mut result);
    Ok(result)
}
