//! The requests of clients without the extension when the task tools are on: the
//! task tools answered from the store, `tools/list` extended, and every other
//! `tools/call` run so that a task it becomes is answered as a tool result.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use serde_json::Value;
use tower_service::Service;

use super::Reply;
use super::task_tools;
use crate::body::RequestBody;
use crate::config::TaskMode;
use crate::context::{TaskContext, TaskRefused};
use crate::engine::Engine;
use crate::error::BoxError;
use crate::wire::Envelope;

/// `tools/list` or `tools/call` of a client without the extension.
pub(crate) async fn call<S, B, ResBody>(
    engine: Arc<Engine>,
    inner: S,
    mut parts: http::request::Parts,
    bytes: Bytes,
    envelope: &Envelope<'_>,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let legacy = envelope.is_legacy(&parts.headers);
    let id = envelope.id.as_ref();
    if envelope.method == "tools/list" {
        return task_tools::list(&engine, inner, parts, bytes, id).await;
    }
    let tool = envelope.param_str("name");
    let tool = tool.as_deref().unwrap_or("");
    let arguments = envelope.param("arguments").unwrap_or(&Value::Null);
    if task_tools::is_task_tool(tool) {
        return Ok(task_tools::answer_tool(&engine, &parts, envelope).await);
    }
    let mode = engine.config.mode_for_call(tool, arguments);
    let refused = match mode {
        _ if engine.node.is_draining() => Some(TaskRefused::ShuttingDown),
        TaskMode::Never => Some(TaskRefused::ToolNeverTask),
        _ => None,
    };
    if let Some(reason) = refused {
        let context = TaskContext::refused(reason);
        return super::tools_call::call(&engine, inner, parts, bytes, id, context).await;
    }
    if mode == TaskMode::Required
        && let Err(e) = engine.refuse_anonymous(engine.principal(&parts).as_ref())
    {
        return Ok(super::reply(e, id));
    }
    parts.extensions.insert(task_tools::as_tool_result(legacy));
    if let Some(after) = mode.auto_after() {
        return super::auto::call(engine, inner, parts, bytes, id.cloned(), after).await;
    }
    super::tools_call::call(&engine, inner, parts, bytes, id, TaskContext::open()).await
}
