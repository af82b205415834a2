//! The modern (2026-07-28) request envelope: parsing only what the layer needs, and
//! the validation order of the specification.

use http::HeaderMap;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::headers::{header_value, is_legacy_version};
use super::{
    EXTENSION_ID, MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, MCP_SESSION_ID,
    META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, RpcError, SUPPORTED_VERSIONS,
};

/// A parsed JSON-RPC request (only what the layer needs).
#[derive(Debug)]
pub(crate) struct Envelope {
    /// The id as a JSON value (`None` when absent; a number past `i64`/`u64` is
    /// read as a float here, so replies echo [`raw_id`](Self::raw_id) instead).
    pub(crate) id: Option<Value>,
    /// The id exactly as the client wrote it; `None` when the member is absent
    /// (a notification), `Some("null")` for `"id": null`.
    pub(crate) raw_id: Option<Box<RawValue>>,
    /// Whether `jsonrpc` is exactly `"2.0"`.
    pub(crate) jsonrpc_ok: bool,
    pub(crate) method: String,
    pub(crate) params: Option<Value>,
}

/// Any JSON object, read in one pass; fields it does not name are skipped.
#[derive(Deserialize)]
struct RawMessage {
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Value>,
}

/// A member that is present, `null` included, is `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// Whether raw JSON text is a string or an integer (no fraction, no exponent):
/// the only ids JSON-RPC requests may carry. A string must also decode (no lone
/// surrogate escape such as `"\ud800"`): replies echo it, and a strict client could
/// not read them otherwise.
fn is_valid_id(raw: &str) -> bool {
    if raw.starts_with('"') {
        return serde_json::from_str::<String>(raw).is_ok();
    }
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
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
                id: raw
                    .id
                    .as_deref()
                    .and_then(|raw| serde_json::from_str(raw.get()).ok()),
                raw_id: raw.id,
                jsonrpc_ok: raw.jsonrpc.as_ref().and_then(Value::as_str) == Some("2.0"),
                method,
                params: raw.params,
            }),
            _ => None,
        })
    }

    /// A notification: the `id` member is absent.
    pub(crate) fn is_notification(&self) -> bool {
        self.raw_id.is_none()
    }

    /// The raw id when it is one a request may carry (a string or an integer); the
    /// id replies echo.
    pub(crate) fn valid_raw_id(&self) -> Option<&RawValue> {
        self.raw_id.as_deref().filter(|raw| is_valid_id(raw.get()))
    }

    /// JSON-RPC envelope strictness: `jsonrpc` exactly `"2.0"`, and an id that is a
    /// string or an integer. Notifications pass (they have no id to check).
    pub(crate) fn check_strict(&self) -> Result<(), RpcError> {
        if !self.jsonrpc_ok {
            return Err(RpcError::invalid_request(
                "Invalid Request: jsonrpc must be \"2.0\"",
            ));
        }
        if self.raw_id.is_some() && self.valid_raw_id().is_none() {
            return Err(RpcError::invalid_request(
                "Invalid Request: id must be a string or an integer",
            ));
        }
        Ok(())
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
        if headers.contains_key(MCP_SESSION_ID) {
            return true;
        }
        if self.meta().is_some() {
            return false;
        }
        match headers.get(MCP_PROTOCOL_VERSION) {
            None => true,
            Some(v) => is_legacy_version(v.as_bytes()),
        }
    }

    /// Runs steps 1–5 of the validation order on a modern request, returning whether
    /// it declared the tasks extension.
    pub(crate) fn validate(&self, headers: &HeaderMap) -> Result<Declared, RpcError> {
        let Some(header_version) = headers.get(MCP_PROTOCOL_VERSION) else {
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
        match header_value(headers, MCP_METHOD) {
            Some(Ok(m)) if m == self.method => {}
            _ => {
                return Err(RpcError::header_mismatch(
                    "Mcp-Method header does not match the body",
                ));
            }
        }
        if let Some(expected) = self.expected_name() {
            match header_value(headers, MCP_NAME) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::PROTOCOL_VERSION;
    use crate::wire::headers::{HeaderRoute, route_by_headers};
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
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
    fn ids_and_versions_are_checked_strictly() {
        let parse = |text: &str| Envelope::parse(text.as_bytes()).unwrap().unwrap();
        let good = parse(r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"tasks/get"}"#);
        assert_eq!(good.check_strict(), Ok(()));
        assert_eq!(good.valid_raw_id().unwrap().get(), "18446744073709551616");
        for id in ["\"a\"", "-7", "0"] {
            let e = parse(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#));
            assert_eq!(e.check_strict(), Ok(()), "{id}");
        }
        for id in [
            "null",
            "true",
            "1.5",
            "[1]",
            "{}",
            "1e3",
            "-1E3",
            r#""\ud800""#,
            r#""\udc00\ud800x""#,
        ] {
            let e = parse(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#));
            assert!(!e.is_notification(), "{id}");
            assert_eq!(e.check_strict().unwrap_err().code(), -32600, "{id}");
            assert!(e.valid_raw_id().is_none(), "{id}");
        }
        let notification = parse(r#"{"jsonrpc":"2.0","method":"tasks/get"}"#);
        assert!(notification.is_notification());
        assert_eq!(notification.check_strict(), Ok(()));
        for version in [r#""1.0""#, "2.0", "null"] {
            let e = parse(&format!(r#"{{"jsonrpc":{version},"id":1,"method":"m"}}"#));
            assert_eq!(e.check_strict().unwrap_err().code(), -32600, "{version}");
        }
        let missing = parse(r#"{"id":1,"method":"m"}"#);
        assert_eq!(missing.check_strict().unwrap_err().http_status(), 400);
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
