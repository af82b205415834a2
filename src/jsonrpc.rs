//! Wire types and checks for the modern (2026-07-28) Streamable HTTP envelope.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{EXTENSION_ID, RpcError, json_response};

/// The protocol revision this crate implements.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// Modern protocol versions the layer accepts.
pub const SUPPORTED_VERSIONS: &[&str] = &[PROTOCOL_VERSION];
const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// `_meta` key carrying the protocol version of a request.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the client capabilities of a request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key carrying `serverInfo` on results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key carrying the subscription id on listen-stream notifications.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

pub(crate) const HEADER_PROTOCOL_VERSION: HeaderName =
    HeaderName::from_static("mcp-protocol-version");
pub(crate) const HEADER_METHOD: HeaderName = HeaderName::from_static("mcp-method");
pub(crate) const HEADER_NAME: HeaderName = HeaderName::from_static("mcp-name");
pub(crate) const HEADER_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

/// The methods the layer itself handles or inspects; everything else passes through.
pub(crate) fn is_owned_method(method: &str) -> bool {
    owns(method.as_bytes())
}

/// [`is_owned_method`] on raw header bytes, with no UTF-8 check on the fast path.
fn owns(method: &[u8]) -> bool {
    matches!(
        method,
        b"tasks/get"
            | b"tasks/update"
            | b"tasks/cancel"
            | b"tasks/list"
            | b"tasks/result"
            | b"tools/call"
            | b"server/discover"
            | b"subscriptions/listen"
    )
}

fn is_legacy_version(value: &[u8]) -> bool {
    let value = value.trim_ascii();
    LEGACY_VERSIONS.iter().any(|v| v.as_bytes() == value)
}

/// What the headers alone say about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderRoute {
    /// Legacy-era traffic: leave it alone.
    Legacy,
    /// A modern method the layer does not own: forward without reading the body.
    Passthrough,
    /// The body must be read to decide.
    Inspect,
}

/// Decides from headers only, without touching the body.
///
/// `Mcp-Method` comes first: a modern request for a method the layer does not own
/// passes after a single header lookup, and one for a method it owns is read, so the
/// body decides its era (only modern clients send the header). Without it, a session
/// id or a legacy version header marks legacy traffic.
pub(crate) fn route_by_headers(method: &http::Method, headers: &HeaderMap) -> HeaderRoute {
    if method != http::Method::POST {
        return HeaderRoute::Passthrough;
    }
    if let Some(m) = headers.get(HEADER_METHOD) {
        return match owns(m.as_bytes().trim_ascii()) {
            true => HeaderRoute::Inspect,
            false => HeaderRoute::Passthrough,
        };
    }
    let legacy = headers.contains_key(HEADER_SESSION_ID)
        || headers
            .get(HEADER_PROTOCOL_VERSION)
            .is_some_and(|v| is_legacy_version(v.as_bytes()));
    match legacy {
        true => HeaderRoute::Legacy,
        false => HeaderRoute::Inspect,
    }
}

/// A parsed JSON-RPC request (only what the layer needs).
#[derive(Debug)]
pub(crate) struct Envelope {
    pub(crate) id: Option<Value>,
    pub(crate) method: String,
    pub(crate) params: Option<Value>,
}

/// Any JSON object, read in one pass; fields it does not name are skipped.
#[derive(Deserialize)]
struct RawMessage {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Value>,
}

impl Envelope {
    /// Parses a body; `Ok(None)` when it is JSON but not a request (a response, a
    /// batch, …) and belongs to the inner service.
    pub(crate) fn parse(body: &[u8]) -> Result<Option<Envelope>, RpcError> {
        let is_object = body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{');
        if !is_object {
            // A batch or a scalar: valid JSON is the inner service's business.
            return serde_json::from_slice::<serde::de::IgnoredAny>(body)
                .map(|_| None)
                .map_err(|_| RpcError::parse_error());
        }
        let raw: RawMessage = serde_json::from_slice(body).map_err(|_| RpcError::parse_error())?;
        Ok(match raw.method {
            Some(Value::String(method)) => Some(Envelope {
                id: raw.id,
                method,
                params: raw.params,
            }),
            _ => None,
        })
    }

    pub(crate) fn params(&self) -> Option<&Map<String, Value>> {
        self.params.as_ref().and_then(Value::as_object)
    }

    pub(crate) fn param(&self, key: &str) -> Option<&Value> {
        self.params().and_then(|p| p.get(key))
    }

    fn meta(&self) -> Option<&Map<String, Value>> {
        self.param("_meta").and_then(Value::as_object)
    }

    /// Legacy by the dual-era rule: a session id, or no `_meta` and a version header
    /// that is missing or names a legacy version.
    pub(crate) fn is_legacy(&self, headers: &HeaderMap) -> bool {
        if headers.contains_key(HEADER_SESSION_ID) {
            return true;
        }
        if self.meta().is_some() {
            return false;
        }
        match headers.get(HEADER_PROTOCOL_VERSION) {
            None => true,
            Some(v) => is_legacy_version(v.as_bytes()),
        }
    }

    /// Runs steps 1–5 of the validation order on a modern request, returning whether
    /// it declared the tasks extension.
    pub(crate) fn validate(&self, headers: &HeaderMap) -> Result<Declared, RpcError> {
        let Some(header_version) = headers.get(HEADER_PROTOCOL_VERSION) else {
            return Err(RpcError::header_mismatch(
                "Missing MCP-Protocol-Version header",
            ));
        };
        let meta = self
            .meta()
            .ok_or_else(|| RpcError::missing_meta("Missing params._meta"))?;
        let version = meta
            .get(META_PROTOCOL_VERSION)
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::missing_meta("Missing _meta protocolVersion"))?;
        let capabilities = meta
            .get(META_CLIENT_CAPABILITIES)
            .and_then(Value::as_object)
            .ok_or_else(|| RpcError::missing_meta("Missing _meta clientCapabilities"))?;
        if header_version.as_bytes().trim_ascii() != version.as_bytes() {
            return Err(RpcError::header_mismatch(
                "MCP-Protocol-Version header does not match _meta",
            ));
        }
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(RpcError::unsupported_protocol_version(
                SUPPORTED_VERSIONS,
                version,
            ));
        }
        match header_value(headers, HEADER_METHOD) {
            Some(Ok(m)) if m == self.method => {}
            _ => {
                return Err(RpcError::header_mismatch(
                    "Mcp-Method header does not match the body",
                ));
            }
        }
        if let Some(expected) = self.expected_name() {
            match header_value(headers, HEADER_NAME) {
                Some(Ok(name)) if name == expected => {}
                _ => {
                    return Err(RpcError::header_mismatch(
                        "Mcp-Name header does not match the body",
                    ));
                }
            }
        }
        let declared = capabilities
            .get("extensions")
            .and_then(Value::as_object)
            .and_then(|e| e.get(EXTENSION_ID))
            .is_some_and(Value::is_object);
        Ok(Declared(declared))
    }

    /// What `Mcp-Name` must equal, for the methods the layer checks it on. Skipped
    /// when the body lacks the value, so that the params check can name the problem.
    fn expected_name(&self) -> Option<&str> {
        let key = match self.method.as_str() {
            "tools/call" => "name",
            "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
            _ => return None,
        };
        self.param(key).and_then(Value::as_str)
    }
}

/// Whether the request declared the tasks extension in its client capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Declared(pub(crate) bool);

/// A standard header's value: trimmed, with `=?base64?…?=` decoded. `Err` when it
/// is malformed.
pub(crate) fn header_value(headers: &HeaderMap, name: HeaderName) -> Option<Result<String, ()>> {
    let raw = headers.get(name)?;
    let text = match std::str::from_utf8(raw.as_bytes()) {
        Ok(t) => t.trim(),
        Err(_) => return Some(Err(())),
    };
    if let Some(encoded) = text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    {
        return Some(
            STANDARD
                .decode(encoded)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or(()),
        );
    }
    Some(Ok(text.to_owned()))
}

/// A JSON-RPC success response with the layer's result.
pub(crate) fn result_response(
    id: Option<&Value>,
    result: Map<String, Value>,
) -> http::Response<Bytes> {
    let mut body = Map::with_capacity(3);
    body.insert("jsonrpc".into(), Value::String("2.0".into()));
    body.insert("id".into(), id.cloned().unwrap_or(Value::Null));
    body.insert("result".into(), Value::Object(result));
    json_response(
        StatusCode::OK,
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::json;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn envelope(value: Value) -> Envelope {
        Envelope::parse(&serde_json::to_vec(&value).unwrap())
            .unwrap()
            .unwrap()
    }

    fn modern(method: &str, extra: Value) -> Envelope {
        let mut params = json!({"_meta": {META_PROTOCOL_VERSION: PROTOCOL_VERSION,
            META_CLIENT_CAPABILITIES: {"extensions": {EXTENSION_ID: {}}}}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        envelope(json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}))
    }

    #[test]
    fn fast_path_decides_from_headers() {
        let post = http::Method::POST;
        assert_eq!(
            route_by_headers(&post, &headers(&[("mcp-method", "tools/list")])),
            HeaderRoute::Passthrough
        );
        assert_eq!(
            route_by_headers(&post, &headers(&[("mcp-method", " tasks/get ")])),
            HeaderRoute::Inspect
        );
        assert_eq!(
            route_by_headers(&post, &headers(&[("mcp-session-id", "abc")])),
            HeaderRoute::Legacy
        );
        assert_eq!(
            route_by_headers(&post, &headers(&[("mcp-protocol-version", "2025-11-25")])),
            HeaderRoute::Legacy
        );
        assert_eq!(
            route_by_headers(&post, &HeaderMap::new()),
            HeaderRoute::Inspect
        );
        assert_eq!(
            route_by_headers(&http::Method::GET, &HeaderMap::new()),
            HeaderRoute::Passthrough
        );
    }

    #[test]
    fn validation_order_matches_the_spec() {
        let get = modern("tasks/get", json!({"taskId": "abc"}));
        let ok = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tasks/get"),
            ("mcp-name", "  abc "),
        ]);
        assert_eq!(get.validate(&ok), Ok(Declared(true)));
        let no_version = headers(&[("mcp-method", "tasks/get"), ("mcp-name", "abc")]);
        assert_eq!(get.validate(&no_version).unwrap_err().code(), -32020);

        let no_meta = envelope(
            json!({"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"abc"}}),
        );
        let e = no_meta.validate(&ok).unwrap_err();
        assert_eq!((e.code(), e.http_status().as_u16()), (-32602, 400));

        let mut future = modern("tasks/get", json!({"taskId": "abc"}));
        future.params.as_mut().unwrap()["_meta"][META_PROTOCOL_VERSION] = json!("v999.0.0");
        assert_eq!(future.validate(&ok).unwrap_err().code(), -32020);
        let v999 = headers(&[
            ("mcp-protocol-version", "v999.0.0"),
            ("mcp-method", "tasks/get"),
            ("mcp-name", "abc"),
        ]);
        let e = future.validate(&v999).unwrap_err();
        assert_eq!(e.code(), -32022);
        assert_eq!(e.data().unwrap()["requested"], "v999.0.0");

        let wrong_name = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tasks/get"),
            ("mcp-name", "abd"),
        ]);
        assert_eq!(get.validate(&wrong_name).unwrap_err().code(), -32020);
        let upper = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "TASKS/GET"),
            ("mcp-name", "abc"),
        ]);
        assert_eq!(get.validate(&upper).unwrap_err().code(), -32020);
    }

    #[test]
    fn base64_header_values_are_decoded() {
        let call = modern("tools/call", json!({"name": "héllo"}));
        let h = headers(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            (
                "mcp-name",
                &format!("=?base64?{}?=", STANDARD.encode("héllo")),
            ),
        ]);
        assert_eq!(call.validate(&h), Ok(Declared(true)));
    }

    #[test]
    fn an_owned_method_header_is_read_whatever_the_version_header_says() {
        let post = http::Method::POST;
        let h = headers(&[
            ("mcp-method", "tasks/get"),
            ("mcp-protocol-version", "2025-11-25"),
        ]);
        assert_eq!(route_by_headers(&post, &h), HeaderRoute::Inspect);
        let with_meta = modern("tasks/get", json!({"taskId": "abc"}));
        assert!(!with_meta.is_legacy(&h));
        let session = headers(&[("mcp-method", "tasks/get"), ("mcp-session-id", "s")]);
        assert!(with_meta.is_legacy(&session));
    }

    #[test]
    fn legacy_is_detected_from_body_and_headers() {
        let init = envelope(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}));
        assert!(init.is_legacy(&HeaderMap::new()));
        assert!(!init.is_legacy(&headers(&[("mcp-protocol-version", "2026-07-28")])));
        let modern_init = modern("initialize", json!({}));
        assert!(!modern_init.is_legacy(&HeaderMap::new()));
    }

    #[test]
    fn non_requests_are_left_to_the_inner_service() {
        assert!(
            Envelope::parse(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}")
                .unwrap()
                .is_none()
        );
        assert!(Envelope::parse(b"[]").unwrap().is_none());
        assert_eq!(Envelope::parse(b"{nope").unwrap_err().code(), -32700);
    }
}
