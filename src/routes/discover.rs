//! `server/discover`: the inner service answers; the layer adds the extension to
//! the capabilities it advertises.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use serde_json::{Map, Value};
use tower_service::Service;

use super::{Call, Reply};
use crate::body::RequestBody;
use crate::error::BoxError;
use crate::wire::EXTENSION_ID;

/// Forwards `server/discover` and adds the extension under `capabilities.extensions`,
/// keeping every other field as the inner service wrote it.
pub(crate) async fn call<S, B, ResBody>(call: Call<'_, S>) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    call.forward_edited(advertise).await
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
