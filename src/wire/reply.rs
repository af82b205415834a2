//! The one place a JSON-RPC reply or error becomes an HTTP response.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value};

/// A JSON body with `Content-Type: application/json`.
pub(crate) fn json_response(status: StatusCode, body: Bytes) -> Response<Bytes> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The JSON-RPC message `{"jsonrpc":"2.0","id":…,<key>:<value>}`; the id is `null`
/// when the request's id is unknown.
pub(crate) fn message_body(id: Option<&Value>, key: &str, value: Value) -> Bytes {
    let mut body = Map::with_capacity(3);
    body.insert("jsonrpc".into(), Value::String("2.0".into()));
    body.insert("id".into(), id.cloned().unwrap_or(Value::Null));
    body.insert(key.into(), value);
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// A JSON-RPC success response with the layer's result, HTTP 200.
pub(crate) fn result_response(id: Option<&Value>, result: Map<String, Value>) -> Response<Bytes> {
    json_response(
        StatusCode::OK,
        message_body(id, "result", Value::Object(result)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_result_is_a_json_rpc_response_with_the_request_id() {
        let mut result = Map::new();
        result.insert("resultType".into(), json!("complete"));
        let response = result_response(Some(&json!("a")), result);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(
            body,
            json!({"jsonrpc": "2.0", "id": "a", "result": {"resultType": "complete"}})
        );
    }
}
