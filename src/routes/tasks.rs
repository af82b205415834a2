//! `tasks/get`, `tasks/update` and `tasks/cancel`: answered from the store, scoped
//! to the caller, never reaching the inner service, unless the id names one of the
//! inner service's own tasks ([`is_inner`]): that request is checked, then handed
//! to the inner service. A request whose `Mcp-Method` header names one of them is
//! answered by [`tasks_now`] without awaiting when the store answers at once; any
//! other reaches [`call`].

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use serde_json::{Map, Value};

use tower_service::Service;

use super::{Call, Reply, reply};
use crate::body::{RequestBody, ResponseBody};
use crate::engine::{Engine, json_len_within};
use crate::error::{StoreError, TransitionError};
use crate::observe::{self, Outcome};
use crate::store::{Applied, Updated};
use crate::task::{
    Principal, Scope, TaskId, TaskJson, TaskRecord, TaskStatus, Timestamp, Transition,
};
use crate::wire::{
    Envelope, META_SERVER_INFO, ReplyId, RpcError, ServerInfoMeta, check_media_types,
    result_response_with, write_value,
};

/// The `tasks/*` methods the layer answers itself, never reaching the inner service.
pub(crate) fn is_tasks_method(method: &str) -> bool {
    matches!(
        method,
        "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/list" | "tasks/result"
    )
}

/// `tasks/get`, `tasks/update`, `tasks/cancel` (and the removed `tasks/list`,
/// `tasks/result`): the media types, the envelope, the notification form, then the
/// specification's validation order. Replies echo the id exactly as written.
pub(crate) async fn call<S, B, ResBody>(call: Call<'_, S>) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
{
    let Call {
        engine,
        inner,
        parts,
        bytes,
        envelope,
        ..
    } = call;
    let owner = match check_tasks(&engine, &parts, &envelope) {
        Ok(owner) => owner,
        Err(response) => return Ok(response),
    };
    if is_inner(&engine, &envelope) {
        observe::outcome(Outcome::Forwarded);
        return super::forward(inner, parts, bytes.clone(), envelope.reply_id()).await;
    }
    let answer = answer(&engine, &envelope, Scope::Owner(owner.as_ref())).await;
    Ok(respond(&engine, &envelope, parts.headers, answer))
}

/// The checks of a `tasks/*` request before the store is asked, in the
/// specification's order; the caller's principal when they pass, the reply (an
/// error, or 202 to a notification) when they do not.
#[allow(clippy::result_large_err)] // made once per request and answered at once
fn check_tasks<B>(
    engine: &Engine,
    parts: &http::request::Parts,
    envelope: &Envelope<'_>,
) -> Result<Option<Principal>, Response<ResponseBody<B>>> {
    let id = envelope.valid_raw_id();
    let error = |e: RpcError| {
        observe::outcome(Outcome::Error(e.code()));
        e.to_response_raw(id).map(ResponseBody::full)
    };
    check_media_types(&parts.headers).map_err(error)?;
    envelope.check_strict().map_err(error)?;
    if envelope.is_notification() {
        // A notification gets 202 and no body; nothing is looked up or changed.
        return Err(super::accepted());
    }
    let declared = envelope.validate(&parts.headers).map_err(error)?.0;
    if matches!(&*envelope.method, "tasks/list" | "tasks/result") {
        return Err(error(RpcError::method_not_found()));
    }
    if !declared {
        return Err(error(RpcError::tasks_extension_required()));
    }
    let owner = engine.principal(parts);
    engine.admit_owner(owner.as_ref()).map_err(error)?;
    Ok(owner)
}

/// The reply to a checked `tasks/*` request, in `headers` (the request's map,
/// which has room already).
fn respond<B>(
    engine: &Engine,
    envelope: &Envelope<'_>,
    headers: HeaderMap,
    answer: Result<Answer, RpcError>,
) -> Response<ResponseBody<B>> {
    let id = envelope.valid_raw_id();
    match answer {
        Ok(answer) => {
            observe::outcome(Outcome::Result);
            answer
                .to_response(engine, id, headers)
                .map(ResponseBody::full)
        }
        Err(e) => {
            observe::outcome(Outcome::Error(e.code()));
            e.to_response_raw(id).map(ResponseBody::full)
        }
    }
}

/// How far [`tasks_now`] got with a `tasks/*` request.
pub(crate) enum TasksNow<'a, B> {
    /// Answered (a result, or a refusal).
    Answered(Response<ResponseBody<B>>),
    /// Checked, waiting for the store.
    Later(TasksLater<'a>),
    /// Not a modern `tasks/*` request (or one whose span records): the service
    /// dispatches it by its body.
    Dispatch(http::request::Parts),
}

/// A checked `tasks/*` request whose answer needs the store's future.
pub(crate) struct TasksLater<'a> {
    envelope: Envelope<'a>,
    owner: Option<Principal>,
    headers: HeaderMap,
}

impl TasksLater<'_> {
    pub(crate) async fn answer<B>(self, engine: &Engine) -> Response<ResponseBody<B>> {
        let scope = Scope::Owner(self.owner.as_ref());
        let answer = answer(engine, &self.envelope, scope).await;
        respond(engine, &self.envelope, self.headers, answer)
    }
}

/// A `tasks/*` request under a `tasks/*` `Mcp-Method`, as far as it goes without
/// awaiting: parsed, checked, and answered when the store answers at once. Exactly
/// what [`call`] would do with it.
pub(crate) fn tasks_now<'a, B>(
    engine: &Engine,
    parts: http::request::Parts,
    bytes: &'a Bytes,
) -> TasksNow<'a, B> {
    let envelope = match Envelope::parse(bytes) {
        Ok(Some(envelope)) => envelope,
        // The header names a method the layer owns: it answers for the body.
        Ok(None) => {
            return TasksNow::Answered(reply(
                RpcError::invalid_request("Invalid Request: the body is not one JSON-RPC request"),
                None,
            ));
        }
        Err(e) => return TasksNow::Answered(reply(e, None)),
    };
    if envelope.is_legacy(&parts.headers)
        || !is_tasks_method(&envelope.method)
        || is_inner(engine, &envelope)
        || !super::route_span(&envelope.method).is_disabled()
    {
        return TasksNow::Dispatch(parts);
    }
    let owner = match check_tasks(engine, &parts, &envelope) {
        Ok(owner) => owner,
        Err(response) => return TasksNow::Answered(response),
    };
    let scope = Scope::Owner(owner.as_ref());
    match answer_now(engine, &envelope, scope) {
        Some(answer) => TasksNow::Answered(respond(engine, &envelope, parts.headers, answer)),
        None => TasksNow::Later(TasksLater {
            envelope,
            owner,
            headers: parts.headers,
        }),
    }
}

/// Whether the request's `taskId` names one of the inner service's own tasks
/// ([`with_inner_tasks`](crate::TasksLayerBuilder::with_inner_tasks)): the inner
/// service answers for it, an unknown one included.
fn is_inner(engine: &Engine, envelope: &Envelope<'_>) -> bool {
    engine.config().inner_tasks.is_some()
        && envelope
            .param_str("taskId")
            .is_some_and(|id| engine.config().is_inner_task(&id))
}

/// What a `tasks/*` request is answered with.
#[allow(clippy::large_enum_variant)] // made once per request and answered at once
pub(crate) enum Answer {
    /// `tasks/get`: the task, written as a `DetailedTask` result.
    Task(TaskRecord),
    /// `tasks/update` and `tasks/cancel`: an empty complete result.
    Done,
    /// `tasks/update` of a task that had ended: the same acknowledgment (WIRE: a
    /// task not in `input_required` is acknowledged and the answers ignored), which
    /// says in `_meta` under [`IGNORED_META`] that nothing was recorded, and why.
    Ended(TaskStatus),
}

/// The `_meta` key of a `tasks/update` acknowledgment that recorded nothing
/// because the task had ended: `{"reason": "task_ended", "status", "message"}`.
const IGNORED_META: &str = "mcp-tasks/ignored";

/// Whether an answer found its task ended, so that nothing was recorded: the
/// late answer of `tasks/update`, `task_answer` and the 2025-11-25 answers alike.
pub(crate) fn answered_too_late(updated: &Updated) -> bool {
    updated.record.status.is_terminal() && !matches!(updated.outcome, Ok(Applied::Changed))
}

/// What a late answer is told: the task had already ended, as `status`.
pub(crate) fn too_late_message(status: TaskStatus) -> String {
    format!(
        "The task had already ended ({}); these answers were not recorded.",
        status.as_str()
    )
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
        let server_info = engine.config().server_info.as_ref();
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
            Answer::Ended(status) => result_response_with(ReplyId::Raw(id), headers, |out| {
                let mut meta = Map::new();
                if let Some(info) = server_info {
                    meta.insert(META_SERVER_INFO.to_owned(), info.clone());
                }
                meta.insert(
                    IGNORED_META.to_owned(),
                    serde_json::json!({
                        "reason": "task_ended",
                        "status": status.as_str(),
                        "message": too_late_message(*status),
                    }),
                );
                let result = serde_json::json!({"resultType": "complete", "_meta": meta});
                write_value(out, &result);
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
    let found = engine.store().get_now(&id, scope, Timestamp::now())?;
    Some(found_task(engine, found))
}

/// -32602 for an unknown, expired or foreign task, in either era: the same words
/// for all three, and never the id.
pub(crate) fn not_found() -> RpcError {
    RpcError::invalid_params("Failed to retrieve task: Task not found")
}

/// -32603 for a failed store call, logged with its cause; for a write refused at
/// a cap (its owner's stored bytes), -32603 "Task limit reached" naming it.
pub(crate) fn store_failed(e: StoreError) -> RpcError {
    if let StoreError::LimitReached(limit) = e {
        return crate::engine::limit_reached(limit);
    }
    tracing::error!(error = %crate::error::Chain(&e), "task store failed");
    RpcError::internal_error()
}

/// The `taskId` param: `Ok(None)` when it is not one this layer could have made
/// (it finds no task).
pub(crate) fn task_id(envelope: &Envelope<'_>) -> Result<Option<TaskId>, RpcError> {
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
    engine.node().stop_runner(&task);
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
            let found = engine.store().get(&id, scope, Timestamp::now()).await;
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
            if method == "tasks/update" && answered_too_late(&updated) {
                return Ok(Answer::Ended(updated.record.status));
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
    let per_answer = engine.config().max_input_response_bytes;
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
    let per_task = engine.config().max_task_input_bytes;
    let task = match engine.store().get(id, scope, Timestamp::now()).await {
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
