//! `tasks/get`, `tasks/list`, `tasks/cancel` and `tasks/result` of the 2025-11-25
//! era: owner-scoped, never reaching the inner service; an unknown, expired or
//! foreign id answers alike and is never echoed.

use http::{Request, Response};
use serde_json::Value;
use tower_service::Service;

use crate::body::{RequestBody, ResponseBody};
use crate::engine::Engine;
use crate::observe::{self, Outcome};
use crate::routes::tasks::{not_found, store_failed, task_id};
use crate::routes::{Call, Reply};
use crate::store::{Applied, ListFrom};
use crate::task::{Principal, Scope, TaskId, Timestamp, Transition};
use crate::task::{status_2025, task_2025, task_2025_with};
use crate::wire::v2025::{self, Cursor, LIST_PAGE, owner_tag};
use crate::wire::{Envelope, ReplyId, RpcError, result_response_with};

/// The longest `task.ttl` a call may ask for: one year, in milliseconds.
const MAX_REQUESTED_TTL_MS: u64 = 365 * 24 * 3600 * 1000;

/// A `tools/call`'s `params.task`: an object whose `ttl`, when present, is a
/// whole number of milliseconds from 0 to a year. The layer checks it before the
/// tool runs; the task's lifetime stays the server's to choose, as this revision
/// allows.
pub(crate) fn check_task_param(envelope: &Envelope<'_>) -> Result<(), RpcError> {
    let Some(Value::Object(task)) = envelope.param("task") else {
        return Err(RpcError::invalid_params(
            "Invalid params: task must be an object",
        ));
    };
    match task.get("ttl") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|ms| ms <= MAX_REQUESTED_TTL_MS) => Ok(()),
        Some(_) => Err(RpcError::invalid_params(format!(
            "Invalid params: task.ttl must be a whole number of milliseconds from 0 to \
             {MAX_REQUESTED_TTL_MS}"
        ))),
    }
}

/// A 2025-11-25 `tasks/*` request.
pub(crate) async fn call<S, B, ResBody>(call: Call<'_, S>) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
{
    let owner = call.principal();
    let Call {
        engine,
        parts,
        envelope,
        ..
    } = call;
    let id = envelope.valid_raw_id();
    if let Err(e) = envelope.check_strict() {
        return Ok(refused(e, id));
    }
    if envelope.is_notification() {
        return Ok(crate::routes::accepted());
    }
    if let Err(e) = engine.admit_owner(owner.as_ref()) {
        return Ok(refused(e, id));
    }
    let scope = Scope::Owner(owner.as_ref());
    let answer = match &*envelope.method {
        "tasks/get" => get(&engine, &envelope, scope).await,
        "tasks/cancel" => cancel(&engine, &envelope, scope).await,
        "tasks/list" => list(&engine, &envelope, owner.as_ref()).await,
        _ => {
            let streams = super::result::accepts_event_stream(&parts.headers);
            return Ok(super::result::answer(engine, &envelope, owner, streams).await);
        }
    };
    Ok(match answer {
        Ok(body) => {
            observe::outcome(Outcome::Result);
            result_response_with(ReplyId::Raw(id), http::HeaderMap::new(), |out| {
                out.extend_from_slice(&body)
            })
            .map(ResponseBody::full)
        }
        Err(e) => refused(e, id),
    })
}

fn refused<B>(e: RpcError, id: Option<&str>) -> Response<ResponseBody<B>> {
    observe::outcome(Outcome::Error(e.code()));
    e.to_response_raw(id).map(ResponseBody::full)
}

async fn get(
    engine: &Engine,
    envelope: &Envelope<'_>,
    scope: Scope<'_>,
) -> Result<Vec<u8>, RpcError> {
    let id = task_id(envelope)?.ok_or_else(not_found)?;
    let task = engine
        .store()
        .get(&id, scope, Timestamp::now())
        .await
        .map_err(store_failed)?
        .ok_or_else(not_found)?;
    engine.node().stop_runner(&task);
    let mut out = Vec::with_capacity(256);
    task_2025(&task).view().write_json(&mut out);
    Ok(out)
}

/// Cancels a task that has not ended; one that has is -32602 in this revision.
async fn cancel(
    engine: &Engine,
    envelope: &Envelope<'_>,
    scope: Scope<'_>,
) -> Result<Vec<u8>, RpcError> {
    let id = task_id(envelope)?.ok_or_else(not_found)?;
    let updated = engine
        .update(&id, scope, &Transition::Cancel)
        .await
        .map_err(store_failed)?
        .ok_or_else(not_found)?;
    if updated.outcome != Ok(Applied::Changed) {
        return Err(RpcError::invalid_params(format!(
            "Cannot cancel task: already in terminal status '{}'",
            status_2025(&updated.record)
        )));
    }
    let mut out = Vec::with_capacity(256);
    task_2025(&updated.record).view().write_json(&mut out);
    Ok(out)
}

/// One page of the caller's tasks, newest first; the cursor names where the next
/// page starts and answers only the principal it was given to.
async fn list(
    engine: &Engine,
    envelope: &Envelope<'_>,
    owner: Option<&Principal>,
) -> Result<Vec<u8>, RpcError> {
    let tag = owner_tag(owner.map(Principal::as_str));
    let from = match envelope.param("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            let cursor = Cursor::decode(text, tag)?;
            Some(ListFrom {
                created_at: Timestamp::from_millis(cursor.created_ms),
                id: TaskId::from_bytes(cursor.id),
            })
        }
        Some(_) => return Err(RpcError::invalid_params("Invalid cursor")),
    };
    let page = engine
        .store()
        .list(owner, from, LIST_PAGE, Timestamp::now())
        .await
        .map_err(store_failed)?;
    let next = page.next.map(|from| {
        Cursor {
            created_ms: from.created_at.as_millis(),
            id: *from.id.as_bytes(),
            owner: tag,
        }
        .encode()
    });
    let ids: Vec<_> = page.records.iter().map(|task| task.id.encode()).collect();
    let mut out = Vec::with_capacity(64 + page.records.len() * 256);
    v2025::write_list_result(
        &mut out,
        page.records
            .iter()
            .zip(&ids)
            .map(|(task, id)| task_2025_with(task, id)),
        next.as_deref(),
    );
    Ok(out)
}
