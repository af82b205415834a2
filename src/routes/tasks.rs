//! `tasks/get`, `tasks/update` and `tasks/cancel`: answered from the store, scoped
//! to the caller, never reaching the inner service.

use bytes::Bytes;
use http::{HeaderMap, Response};
use serde_json::{Map, Value};

use crate::engine::{Engine, json_len_within};
use crate::error::{StoreError, TransitionError};
use crate::task::{Scope, TaskId, TaskJson, TaskRecord, Timestamp, Transition};
use crate::wire::{Envelope, ReplyId, RpcError, ServerInfoMeta, result_response_with, write_value};

/// What a `tasks/*` request is answered with.
#[allow(clippy::large_enum_variant)] // made once per request and answered at once
pub(crate) enum Answer {
    /// `tasks/get`: the task, written as a `DetailedTask` result.
    Task(TaskRecord),
    /// `tasks/update` and `tasks/cancel`: an empty complete result.
    Done,
}

impl Answer {
    /// The JSON-RPC response echoing `id`, in `headers` (cleared first: the
    /// request's map, reused).
    pub(crate) fn to_response(
        &self,
        engine: &Engine,
        id: Option<&str>,
        headers: HeaderMap,
    ) -> Response<Bytes> {
        let server_info = engine.config.server_info.as_ref();
        match self {
            Answer::Task(task) => result_response_with(ReplyId::Raw(id), headers, |out| {
                TaskJson::detailed(task)
                    .as_result("complete", server_info)
                    .write_json(out);
            }),
            Answer::Done => result_response_with(ReplyId::Raw(id), headers, |out| {
                out.extend_from_slice(br#"{"resultType":"complete""#);
                if let Some(info) = server_info {
                    out.extend_from_slice(br#","_meta":"#);
                    write_value(out, &ServerInfoMeta(info));
                }
                out.push(b'}');
            }),
        }
    }
}

/// [`answer`] without awaiting: a `tasks/get` the store answers at once (see
/// [`TaskStore::get_now`](crate::TaskStore::get_now)). `None` for the rest, which
/// [`answer`] takes.
pub(crate) fn answer_now(
    engine: &Engine,
    envelope: &Envelope<'_>,
    scope: Scope<'_>,
) -> Option<Result<Answer, RpcError>> {
    if envelope.method != "tasks/get" {
        return None;
    }
    let id = match task_id(envelope) {
        Ok(Some(id)) => id,
        Ok(None) => return Some(Err(not_found())),
        Err(e) => return Some(Err(e)),
    };
    let found = engine.store.get_now(&id, scope, Timestamp::now())?;
    Some(found_task(engine, found))
}

fn not_found() -> RpcError {
    RpcError::invalid_params("Failed to retrieve task: Task not found")
}

fn store_failed(e: StoreError) -> RpcError {
    tracing::error!(error = %crate::error::Chain(&e), "task store failed");
    RpcError::internal_error()
}

/// The `taskId` param: `Ok(None)` when it is not one this layer could have made
/// (it finds no task).
fn task_id(envelope: &Envelope<'_>) -> Result<Option<TaskId>, RpcError> {
    let Some(text) = envelope.param_str("taskId") else {
        return Err(RpcError::invalid_params("Missing taskId"));
    };
    Ok(text.parse().ok())
}

/// What a `tasks/get` answers with, from what the store found.
fn found_task(
    engine: &Engine,
    found: Result<Option<TaskRecord>, StoreError>,
) -> Result<Answer, RpcError> {
    let task = found.map_err(store_failed)?.ok_or_else(not_found)?;
    engine.node.stop_runner(&task);
    Ok(Answer::Task(task))
}

/// `tasks/get`, `tasks/update` and `tasks/cancel`, owner-scoped. A foreign task
/// answers exactly like a missing one, and no answer echoes the id.
pub(crate) async fn answer(
    engine: &Engine,
    envelope: &Envelope<'_>,
    scope: Scope<'_>,
) -> Result<Answer, RpcError> {
    let id = task_id(envelope)?;
    match &*envelope.method {
        "tasks/get" => {
            let Some(id) = id else {
                return Err(not_found());
            };
            let found = engine.store.get(&id, scope, Timestamp::now()).await;
            found_task(engine, found)
        }
        method => {
            let transition = if method == "tasks/update" {
                let Some(responses) = envelope.param_value("inputResponses") else {
                    return Err(RpcError::invalid_params("Missing inputResponses"));
                };
                let Value::Object(responses) = responses else {
                    return Err(RpcError::invalid_params("inputResponses must be an object"));
                };
                let Some(id) = id else {
                    return Err(not_found());
                };
                check_input_sizes(engine, &id, scope, &responses).await?;
                Transition::Answer { responses }
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
            Ok(Answer::Done)
        }
    }
}

/// The caps on `inputResponses`: each answer within `max_input_response_bytes`,
/// and the answers a task keeps (those already kept and the new ones to
/// outstanding keys) within `max_task_input_bytes`. A refusal changes nothing.
///
/// The total is read before the update, so two updates racing on one task may
/// together pass it by at most one request's answers.
pub(crate) async fn check_input_sizes(
    engine: &Engine,
    id: &TaskId,
    scope: Scope<'_>,
    responses: &Map<String, Value>,
) -> Result<(), RpcError> {
    let per_answer = engine.config.max_input_response_bytes;
    let mut sizes = Vec::with_capacity(responses.len());
    for (key, response) in responses {
        let Some(len) = json_len_within(response, per_answer) else {
            return Err(RpcError::invalid_params(format!(
                "Input response too large: each answer is limited to {per_answer} bytes \
                 (max_input_response_bytes)"
            )));
        };
        sizes.push((key, len));
    }
    let per_task = engine.config.max_task_input_bytes;
    let task = match engine.store.get(id, scope, Timestamp::now()).await {
        Ok(Some(task)) => task,
        // The update itself answers a missing task or a failing store.
        Ok(None) | Err(_) => return Ok(()),
    };
    let kept: usize = task
        .input_responses
        .iter()
        .map(|(key, value)| key.len() + json_len_within(value, usize::MAX).unwrap_or(0))
        .sum();
    let added: usize = sizes
        .iter()
        .filter(|(key, _)| task.input_requests.contains_key(key.as_str()))
        .map(|(key, len)| key.len() + len)
        .sum();
    if kept.saturating_add(added) > per_task {
        return Err(RpcError::invalid_params(format!(
            "Input responses too large: a task keeps at most {per_task} bytes of answers \
             (max_task_input_bytes)"
        )));
    }
    Ok(())
}
