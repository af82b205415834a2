//! The requests of clients without the extension when the task tools are on: the
//! task tools answered from the store, `tools/list` extended, and every other
//! `tools/call` run so that a task it becomes is answered as a tool result.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use serde_json::Value;
use tower_service::Service;

use super::task_tools;
use super::{Call, Reply};
use crate::body::RequestBody;
use crate::config::TaskMode;
use crate::context::{TaskContext, TaskRefused};
use crate::error::BoxError;

/// `tools/list` or `tools/call` of a client without the extension.
pub(crate) async fn call<S, B, ResBody>(mut call: Call<'_, S>) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let legacy = call.envelope.is_legacy(&call.parts.headers);
    if call.envelope.method == "tools/list" {
        return task_tools::list(call).await;
    }
    // `None` for a task tool: the layer's own, never put to the task policy.
    let mode = {
        let tool = call.envelope.param_str("name");
        let tool = tool.as_deref().unwrap_or("");
        let arguments = call.envelope.param("arguments").unwrap_or(&Value::Null);
        (!task_tools::is_task_tool(tool))
            .then(|| call.engine.config().mode_for_call(tool, arguments))
    };
    let Some(mode) = mode else {
        return Ok(task_tools::answer_tool(call).await);
    };
    let refused = match mode {
        _ if call.engine.node().is_draining() => Some(TaskRefused::ShuttingDown),
        TaskMode::Never => Some(TaskRefused::ToolNeverTask),
        _ => None,
    };
    if let Some(reason) = refused {
        return super::tools_call::run(call, TaskContext::refused(reason)).await;
    }
    if mode == TaskMode::Required
        && let Err(e) = call.engine.refuse_anonymous(call.principal().as_ref())
    {
        return Ok(super::reply(e, call.id()));
    }
    call.parts
        .extensions
        .insert(task_tools::as_tool_result(legacy));
    if let Some(after) = mode.auto_after() {
        return super::auto::run(call, after).await;
    }
    super::tools_call::run(call, TaskContext::open()).await
}
