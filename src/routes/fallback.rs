//! The requests of clients without the extension when the task tools are on: the
//! task tools answered from the store, `tools/list` extended, and every other
//! `tools/call` run so that a task it becomes is answered as a tool result.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::decide::Era;
use super::task_tools;
use super::{Call, Reply};
use crate::body::RequestBody;
use crate::error::BoxError;

/// `tools/list` or `tools/call` of a client without the extension: the list gains
/// the task tools, and a call is decided by [`decide::plan`](super::decide::plan)
/// like every other.
pub(crate) async fn call<S, B, ResBody>(call: Call<'_, S>) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    if call.envelope.method == "tools/list" {
        return task_tools::list(call).await;
    }
    let era = match call.envelope.is_legacy(&call.parts.headers) {
        true => Era::Legacy {
            task: call.envelope.raw_param("task").is_some(),
        },
        false => Era::Modern {
            declared: call.declared,
        },
    };
    super::tools_call::call(call, era).await
}
