//! The routes the layer owns, one file each, and what they share: handing a read
//! request to the inner service, and answering with a JSON-RPC error.
//!
//! | method | file |
//! |---|---|
//! | `tasks/get`, `tasks/update`, `tasks/cancel` | `tasks.rs` |
//! | `tools/call` (a handler's task) | `tools_call.rs` |
//! | `tools/call` (`TaskMode::Auto`) | `auto.rs` |
//! | `server/discover` | `discover.rs` |
//! | `subscriptions/listen` | `listen.rs` |
//! | `tools/list`, `tools/call` of clients without the extension (task tools) | `fallback.rs`, `task_tools.rs` |

use bytes::Bytes;
use http::{Request, Response};
use serde_json::Value;
use tower_service::Service;

use std::sync::Arc;

use crate::body::{RequestBody, ResponseBody};
use crate::context::TaskSpec;
use crate::engine::Engine;
use crate::observe::{self, Outcome};
use crate::task::{Principal, TaskRecord};
use crate::wire::RpcError;
use crate::worker;

pub(crate) mod auto;
pub(crate) mod discover;
pub(crate) mod fallback;
pub(crate) mod listen;
pub(crate) mod progress;
pub(crate) mod task_tools;
pub(crate) mod tasks;
pub(crate) mod tools_call;

/// What the layer's own routes resolve to.
pub(crate) type Reply<B, E> = Result<Response<ResponseBody<B>>, E>;

/// A JSON-RPC error response written by the layer.
pub(crate) fn reply<B>(error: RpcError, id: Option<&Value>) -> Response<ResponseBody<B>> {
    observe::outcome(Outcome::Error(error.code()));
    error.to_response(id).map(ResponseBody::full)
}

/// Stores the task a spec asks for and starts its work. Both run to the end even
/// when the request is dropped meanwhile (the client went away): a task once stored
/// always gets its worker.
pub(crate) async fn create_task(
    engine: &Arc<Engine>,
    owner: Option<Principal>,
    spec: TaskSpec,
) -> Result<TaskRecord, RpcError> {
    let start = spec.take_start();
    engine.admit_owner(owner.as_ref())?;
    let engine = engine.clone();
    let new = spec.task.clone();
    let created = tokio::spawn(async move {
        let record = engine.create_task(owner, &new).await?;
        worker::start(&engine, record.id, start).await;
        Ok(record)
    });
    created
        .await
        .unwrap_or_else(|_| Err(RpcError::internal_error()))
}

/// Hands a request the layer has read to the inner service, unchanged.
pub(crate) async fn forward<S, B, ResBody>(
    mut inner: S,
    parts: http::request::Parts,
    bytes: Bytes,
    id: Option<&Value>,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
{
    let response = inner
        .call(Request::from_parts(parts, RequestBody::buffered(bytes)))
        .await?;
    Ok(refuse_stray_task(response, id))
}

/// A task outcome outside a `tools/call` the layer inspected (another method, the
/// legacy era, the extension switched off) is logged and answered -32603, echoing
/// the request id when the layer read it (`null` on the header-only fast path).
pub(crate) fn refuse_stray_task<B>(
    mut response: Response<B>,
    id: Option<&serde_json::Value>,
) -> Response<ResponseBody<B>> {
    if response.extensions_mut().remove::<TaskSpec>().is_none() {
        return response.map(ResponseBody::inner);
    }
    tracing::warn!("a task outcome arrived where no task may be made; answering -32603");
    reply(RpcError::internal_error(), id)
}
