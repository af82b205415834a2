//! The one place a JSON-RPC reply or error becomes an HTTP response.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use serde::Serialize;
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
pub(crate) fn message_body(id: Option<&Value>, key: Member, value: &impl Serialize) -> Bytes {
    let id = id.map(|id| serde_json::to_string(id).unwrap_or_else(|_| "null".into()));
    render(id.as_deref(), key, value)
}

/// [`message_body`] echoing the request id exactly as the client wrote it (its
/// JSON text: a 2^64 stays an integer, an escaped string keeps its escapes).
pub(crate) fn message_body_raw(id: Option<&str>, key: Member, value: &impl Serialize) -> Bytes {
    render(id, key, value)
}

/// A result's `_meta` with the server's info: `{"io.modelcontextprotocol/serverInfo": …}`.
pub(crate) struct ServerInfoMeta<'a>(pub(crate) &'a Value);

impl Serialize for ServerInfoMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(super::META_SERVER_INFO, self.0)?;
        map.end()
    }
}

/// The member of a response that carries its outcome.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Member {
    Result,
    Error,
}

/// Writes the message with `id` as JSON text (`null` when `None`) into one buffer.
fn render(id: Option<&str>, key: Member, value: &impl Serialize) -> Bytes {
    let id = id.unwrap_or("null");
    let key: &[u8] = match key {
        Member::Result => b",\"result\":",
        Member::Error => b",\"error\":",
    };
    // Room for a task's result: most replies are written without growing.
    let mut out = Vec::with_capacity(512 + id.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(key);
    let start = out.len();
    if serde_json::to_writer(&mut out, value).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"null");
    }
    out.push(b'}');
    Bytes::from(out)
}

/// The id a reply echoes: as the client wrote it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReplyId<'a> {
    /// The id's JSON text as the request holds it (`None`: `null`).
    Raw(Option<&'a str>),
}

/// Scratch space for [`result_response_with`], one per thread: a reply is written
/// here, then copied once into bytes of exactly its length.
const SCRATCH_KEPT: usize = 16 * 1024;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A JSON-RPC success response, HTTP 200, whose result `write` appends as JSON
/// text. The body is one allocation of exactly its size: it is written in a
/// per-thread scratch buffer (kept up to 16 KiB) and copied out. `headers` is
/// cleared and becomes the response's (with its `Content-Type`): passing the
/// request's own map, which has room already, saves allocating another.
pub(crate) fn result_response_with<W: FnOnce(&mut Vec<u8>)>(
    id: ReplyId<'_>,
    mut headers: HeaderMap,
    write: W,
) -> Response<Bytes> {
    let fill = |out: &mut Vec<u8>, write: W| {
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        match id {
            ReplyId::Raw(Some(raw)) => out.extend_from_slice(raw.as_bytes()),
            ReplyId::Raw(None) => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"result\":");
        write(out);
        out.push(b'}');
    };
    let mut write = Some(write);
    let written = SCRATCH
        .try_with(|scratch| {
            let mut out = scratch.try_borrow_mut().ok()?;
            out.clear();
            fill(&mut out, write.take()?);
            let body = Bytes::from(out.to_vec());
            if out.capacity() > SCRATCH_KEPT {
                *out = Vec::new();
            }
            Some(body)
        })
        .ok()
        .flatten();
    // Without the scratch buffer (a nested reply, or a thread being torn down), a
    // buffer of its own.
    let body = match (written, write) {
        (Some(body), _) => body,
        (None, write) => {
            let mut out = Vec::with_capacity(512);
            if let Some(write) = write {
                fill(&mut out, write);
            }
            Bytes::from(out)
        }
    };
    headers.clear();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let mut response = Response::new(body);
    *response.headers_mut() = headers;
    response
}

/// A JSON-RPC success response with the layer's result, HTTP 200, echoing the
/// request's id as the client wrote it.
pub(crate) fn result_response(id: Option<&str>, result: Map<String, Value>) -> Response<Bytes> {
    json_response(
        StatusCode::OK,
        message_body_raw(id, Member::Result, &result),
    )
}

/// Appends `value` as JSON; a value that cannot be written (a map with non-string
/// keys, which no reply holds) is written as `null`.
pub(crate) fn write_value(out: &mut Vec<u8>, value: &(impl Serialize + ?Sized)) {
    let start = out.len();
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use serde_json::value::RawValue;

    #[test]
    fn a_result_is_a_json_rpc_response_with_the_request_id() {
        let mut result = Map::new();
        result.insert("resultType".into(), json!("complete"));
        let response = result_response(Some("\"a\""), result);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(
            body,
            json!({"jsonrpc": "2.0", "id": "a", "result": {"resultType": "complete"}})
        );
    }

    #[test]
    fn a_raw_id_is_echoed_as_written() {
        let id: Box<RawValue> = serde_json::from_str("18446744073709551616").unwrap();
        let response =
            result_response_with(ReplyId::Raw(Some(id.get())), HeaderMap::new(), |out| {
                out.extend(b"{}")
            });
        let text = std::str::from_utf8(response.body()).unwrap();
        assert!(text.contains("\"id\":18446744073709551616,"), "{text}");
        let escaped: Box<RawValue> = serde_json::from_str(r#""\u0041""#).unwrap();
        let body = message_body_raw(Some(escaped.get()), Member::Result, &json!({}));
        assert!(
            std::str::from_utf8(&body)
                .unwrap()
                .contains(r#""id":"\u0041""#)
        );
        let none = message_body_raw(None, Member::Error, &json!({"code": 1}));
        let parsed: Value = serde_json::from_slice(&none).unwrap();
        assert_eq!(
            parsed,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": 1}})
        );
    }
}
