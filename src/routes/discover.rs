//! `server/discover`: the inner service answers; the layer adds the extension to
//! the capabilities it advertises.

use bytes::Bytes;
use http::{Request, Response, header};
use http_body::Body;
use serde_json::{Map, Value};
use tower_service::Service;

use super::{Call, Reply, reply};
use crate::body::{ReadOutcome, RequestBody, ResponseBody, read_up_to};
use crate::error::BoxError;
use crate::wire::{EXTENSION_ID, RpcError, sse};

/// Forwards `server/discover` and adds the extension under `capabilities.extensions`,
/// keeping every other field as the inner service wrote it.
pub(crate) async fn call<S, B, ResBody>(call: Call<'_, S>) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let Call {
        engine,
        mut inner,
        parts,
        bytes,
        envelope,
        ..
    } = call;
    let id = envelope.id.as_ref();
    let response = inner
        .call(Request::from_parts(
            parts,
            RequestBody::buffered(bytes.clone()),
        ))
        .await?;
    let (mut head, body) = response.into_parts();
    if !head.status.is_success() {
        return Ok(Response::from_parts(head, ResponseBody::inner(body)));
    }
    let event_stream = sse::is_event_stream(&head.headers);
    let body = match read_up_to(body, engine.config().max_response_bytes).await {
        Ok(ReadOutcome::Complete(bytes)) => {
            match sse::rewrite_response(&bytes, event_stream, advertise) {
                Some(rewritten) => {
                    head.headers.remove(header::CONTENT_LENGTH);
                    ResponseBody::full(rewritten)
                }
                None => ResponseBody::full(bytes),
            }
        }
        Ok(overflow @ ReadOutcome::Overflow(..)) => overflow.into_body(),
        Err(e) => {
            let e: BoxError = e.into();
            tracing::error!(error = %crate::error::Chain(&*e), "the inner service's discover response failed mid-stream");
            return Ok(reply(RpcError::internal_error(), id));
        }
    };
    Ok(Response::from_parts(head, body))
}

/// Always `true`: the answer is written anew whether or not it had capabilities.
fn advertise(message: &mut Value) -> bool {
    let Some(capabilities) = message
        .get_mut("result")
        .and_then(|r| r.get_mut("capabilities"))
        .and_then(Value::as_object_mut)
    else {
        return true;
    };
    capabilities.remove("tasks");
    let extensions = capabilities
        .entry("extensions")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(extensions) = extensions.as_object_mut() {
        extensions.insert(EXTENSION_ID.into(), Value::Object(Map::new()));
    }
    true
}
