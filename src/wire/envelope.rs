//! The modern (2026-07-28) request envelope: parsing only what the layer needs, and
//! the validation order of the specification.

use http::{HeaderMap, HeaderName};
use std::borrow::Cow;
use std::sync::OnceLock;

use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use super::headers::{header_value, is_legacy_version};
use super::{
    MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, MCP_SESSION_ID, RpcError, SUPPORTED_VERSIONS,
};

/// A parsed JSON-RPC request (only what the layer needs), borrowing the body.
///
/// One pass reads the envelope and, typed and borrowed from the body, the params
/// every owned route reads (`taskId`, `name`, `_meta`'s version and capabilities);
/// a typical request allocates nothing. Another member is found in place when a
/// route asks for it ([`param_str`](Self::param_str)), and the whole params become
/// a [`Value`] only when a route asks for one ([`params`](Self::params)), once.
#[derive(Debug)]
pub(crate) struct Envelope<'a> {
    /// The id's JSON text exactly as the client wrote it; `None` when the member
    /// is absent (a notification), `Some("null")` for `"id": null`. Replies echo it
    /// as it is ([`reply_id`](Self::reply_id)), never as a decoded number.
    raw_id: Option<&'a str>,
    /// Whether `jsonrpc` is exactly `"2.0"`.
    jsonrpc_ok: bool,
    pub(crate) method: Cow<'a, str>,
    /// The body, for the params' raw text when a route reads a member
    /// [`Params`] does not keep.
    body: &'a str,
    /// The members every owned route reads, typed, found in the parse.
    known: Params<'a>,
    /// Whether the params hold nothing their decoding could refuse (see
    /// [`param_value`](Self::param_value)); `false` when unsure.
    params_plain: bool,
    /// Where `params` is in the body, found on first use.
    raw_params: OnceLock<Option<&'a str>>,
    params: OnceLock<Option<Value>>,
}

mod scan;
mod shape;

use shape::{Meta, Params, parse_with_serde};

/// The text of a JSON string, borrowed when it has no escape; `None` for any other
/// value, or a string whose escapes do not decode (a lone surrogate).
fn as_str(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    // Short strings: a plain loop beats a call to memchr.
    if !inner.bytes().any(|b| b == b'\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
}

/// Member `key` of a JSON object, as raw text, found in place with no copy and no
/// allocation; the last one when the key repeats, as when the object is read into a
/// map. `None` when absent or not an object.
///
/// The text is a part of a body the parser has already accepted, so a lexical scan
/// is enough; on text that is not JSON it answers `None` or a wrong slice, never a
/// panic.
fn member<'a>(object: &'a str, key: &str) -> Option<&'a str> {
    let [found] = members(object, [key]);
    found
}

/// [`member`] for several keys in one walk of the object.
fn members<'a, const N: usize>(object: &'a str, keys: [&str; N]) -> [Option<&'a str>; N] {
    let mut found = [None; N];
    let _ = walk(object, |key, value| {
        for (slot, wanted) in found.iter_mut().zip(keys) {
            if key_is(key, wanted) {
                *slot = Some(value);
            }
        }
    });
    found
}

/// Calls `each` with every member of a JSON object (its raw key and raw value),
/// in order; `None` where the text stops being an object.
fn walk<'a>(object: &'a str, mut each: impl FnMut(&'a str, &'a str)) -> Option<()> {
    let bytes = object.as_bytes();
    let mut at = skip_space(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_space(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return Some(());
    }
    loop {
        let key_end = string_end(bytes, at)?;
        let key = object.get(at..key_end)?;
        at = skip_space(bytes, key_end);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_space(bytes, at + 1);
        let end = value_end(bytes, start)?;
        each(key, object.get(start..end)?);
        at = skip_space(bytes, end);
        match bytes.get(at) {
            Some(b',') => at = skip_space(bytes, at + 1),
            _ => return Some(()),
        }
    }
}

/// Whether a raw key (a JSON string) decodes to `key`.
fn key_is(raw: &str, key: &str) -> bool {
    // Most keys are written without escapes: compare the bytes first.
    match raw.get(1..raw.len().saturating_sub(1)) {
        Some(inner) if !inner.contains('\\') => inner == key,
        _ => as_str(raw).is_some_and(|text| text == key),
    }
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(|b| b" \t\r\n".contains(b)) {
        at += 1;
    }
    at
}

/// Where the string starting at `at` ends (just past its closing quote).
fn string_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    at += 1;
    loop {
        match bytes.get(at)? {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
}

/// Where the value starting at `at` ends.
fn value_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            loop {
                match bytes.get(at)? {
                    b'"' => {
                        at = string_end(bytes, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        _ => {
            while bytes.get(at).is_some_and(|b| !b",}] \t\r\n".contains(b)) {
                at += 1;
            }
            Some(at)
        }
    }
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

impl<'a> Envelope<'a> {
    /// Parses a body; `Ok(None)` when it is JSON but not a request (a response, a
    /// batch, …) and belongs to the inner service.
    ///
    /// The body must be well-formed JSON; values inside it are decoded only when a
    /// route reads them, so a string or number that no route reads is the inner
    /// service's to judge.
    pub(crate) fn parse(body: &'a [u8]) -> Result<Option<Envelope<'a>>, RpcError> {
        let an_object = body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{');
        if !an_object {
            // A batch or a scalar: valid JSON is the inner service's business.
            return serde_json::from_slice::<IgnoredAny>(body)
                .map(|_| None)
                .map_err(|_| RpcError::parse_error());
        }
        // Checked whole at once, so the parsers' strings need no check of their own
        // (JSON that is not UTF-8 is refused either way).
        let body = std::str::from_utf8(body).map_err(|_| RpcError::parse_error())?;
        // The usual request is read by a scan of its bytes; whatever the scan does
        // not read as serde_json would for certain, serde_json reads.
        let raw = match scan::message(body) {
            Some(raw) => raw,
            None => parse_with_serde(body).map_err(|_| RpcError::parse_error())?,
        };
        let Some(method) = raw.method.and_then(as_str) else {
            return Ok(None);
        };
        Ok(Some(Envelope {
            raw_id: raw.id,
            jsonrpc_ok: raw.jsonrpc.and_then(as_str).as_deref() == Some("2.0"),
            method,
            body,
            known: raw.params.unwrap_or_default(),
            params_plain: raw.params_plain,
            raw_params: OnceLock::new(),
            params: OnceLock::new(),
        }))
    }

    /// A notification: the `id` member is absent.
    pub(crate) fn is_notification(&self) -> bool {
        self.raw_id.is_none()
    }

    /// The raw id when it is one a request may carry (a string or an integer); the
    /// id replies echo.
    pub(crate) fn valid_raw_id(&self) -> Option<&'a str> {
        self.raw_id.filter(|raw| is_valid_id(raw))
    }

    /// The id every reply the layer writes echoes, byte for byte as the client
    /// wrote it (`18446744073709551616`, `-0` and a string's escapes stay as they
    /// are); `None`, written `null`, for an id of a type a request may not carry.
    pub(crate) fn reply_id(&self) -> Option<&'a str> {
        self.valid_raw_id()
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

    /// The params as a JSON object, decoded on first use; `None` when absent, not an
    /// object, or beyond what the decoder keeps (nesting deeper than 128, a number
    /// past `f64`, a lone surrogate).
    pub(crate) fn params(&self) -> Option<&Map<String, Value>> {
        self.params
            .get_or_init(|| {
                self.raw_params()
                    .and_then(|raw| serde_json::from_str(raw).ok())
            })
            .as_ref()
            .and_then(Value::as_object)
    }

    pub(crate) fn param(&self, key: &str) -> Option<&Value> {
        self.params().and_then(|p| p.get(key))
    }

    /// [`param`](Self::param), owned. A member the parse kept in place is decoded
    /// alone when the params hold nothing that could fail to decode (no `\\u`
    /// escape, no number with an exponent or past 18 characters): the whole params
    /// would then decode too, and give the same value.
    pub(crate) fn param_value(&self, key: &str) -> Option<Value> {
        if self.params_plain
            && self.params.get().is_none()
            && let Some(raw) = self.raw_param(key)
        {
            return serde_json::from_str(raw).ok();
        }
        self.param(key).cloned()
    }

    /// A string param, read in place.
    pub(crate) fn param_str(&self, key: &str) -> Option<Cow<'a, str>> {
        self.raw_param(key).and_then(as_str)
    }

    /// A param as raw JSON text, found in place.
    pub(crate) fn raw_param(&self, key: &str) -> Option<&'a str> {
        match key {
            "taskId" => self.known.task_id,
            "name" => self.known.name,
            "inputResponses" => self.known.input_responses,
            _ => self.raw_params().and_then(|params| member(params, key)),
        }
    }

    /// The raw text of `params`, found in the (already parsed) body on first use.
    fn raw_params(&self) -> Option<&'a str> {
        *self.raw_params.get_or_init(|| member(self.body, "params"))
    }

    /// `params._meta`, when it is an object.
    fn meta(&self) -> Option<&Meta<'a>> {
        self.known.meta.as_ref().filter(|meta| meta.is_object)
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

    /// Whether the request mixes the eras, which the layer refuses (-32600, HTTP
    /// 400) whatever its method: an `Mcp-Session-Id` (sessions ended with
    /// 2026-07-28) beside any 2026-07-28 marker, an `Mcp-Method` header or a
    /// `_meta` protocol version. Without the session id, `_meta`'s version decides
    /// the era, and a version header that disagrees with it is -32020.
    pub(crate) fn mixes_eras(&self, headers: &HeaderMap) -> bool {
        headers.contains_key(MCP_SESSION_ID)
            && (headers.contains_key(MCP_METHOD)
                || self.meta().is_some_and(|meta| meta.version.is_some()))
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
            .version
            .and_then(as_str)
            .ok_or_else(|| RpcError::missing_meta("Missing _meta protocolVersion"))?;
        let capabilities = meta
            .capabilities
            .filter(|c| c.is_object)
            .ok_or_else(|| RpcError::missing_meta("Missing _meta clientCapabilities"))?;
        if header_version.as_bytes().trim_ascii() != version.as_bytes() {
            return Err(RpcError::header_mismatch(
                "MCP-Protocol-Version header does not match _meta",
            ));
        }
        if !SUPPORTED_VERSIONS.contains(&version.as_ref()) {
            return Err(RpcError::unsupported_protocol_version(
                SUPPORTED_VERSIONS,
                &version,
            ));
        }
        check_header(headers, MCP_METHOD, &self.method)?;
        if let Some(expected) = self.expected_name() {
            check_header(headers, MCP_NAME, &expected)?;
        }
        Ok(Declared(capabilities.declared))
    }

    /// What `Mcp-Name` must equal, for the methods the layer checks it on. Skipped
    /// when the body lacks the value, so that the params check can name the problem.
    fn expected_name(&self) -> Option<Cow<'a, str>> {
        let key = match &*self.method {
            "tools/call" => "name",
            "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
            _ => return None,
        };
        self.param_str(key)
    }
}

/// Step 5 for one standard header: present, well-formed, and equal to `expected`
/// (-32020 naming which of the three failed).
fn check_header(headers: &HeaderMap, name: HeaderName, expected: &str) -> Result<(), RpcError> {
    let label = match name.as_str() {
        "mcp-method" => "Mcp-Method",
        _ => "Mcp-Name",
    };
    match header_value(headers, name) {
        Some(Ok(value)) if value == expected => Ok(()),
        Some(Ok(_)) => Err(RpcError::header_mismatch(format!(
            "{label} header does not match the body"
        ))),
        Some(Err(())) => Err(RpcError::header_mismatch(format!(
            "Malformed {label} header"
        ))),
        None => Err(RpcError::header_mismatch(format!("Missing {label} header"))),
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
    use crate::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
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

    /// An envelope over a body that lives as long as the test.
    fn envelope(value: Value) -> Envelope<'static> {
        let body = serde_json::to_vec(&value).unwrap().leak();
        Envelope::parse(body).unwrap().unwrap()
    }

    fn modern(method: &str, extra: Value) -> Envelope<'static> {
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

        let future = envelope(json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
            "params": {"taskId": "abc", "_meta": {META_PROTOCOL_VERSION: "v999.0.0",
                META_CLIENT_CAPABILITIES: {"extensions": {EXTENSION_ID: {}}}}}}));
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
        assert_eq!(route_by_headers(&post, &h), HeaderRoute::Tasks);
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
        let parse = |text: &str| {
            let body: &'static [u8] = text.to_owned().leak().as_bytes();
            Envelope::parse(body).unwrap().unwrap()
        };
        let good = parse(r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"tasks/get"}"#);
        assert_eq!(good.check_strict(), Ok(()));
        assert_eq!(good.valid_raw_id(), Some("18446744073709551616"));
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
    fn members_are_read_in_place_as_a_map_would_read_them() {
        let object = r#" { "a" : 1 , "b":{"c":[{"d":"}]\"{"}], "e": []},"a":"last",
            "e\u0041":3, "n": -1.5e3 , "t":true,"z":null } "#;
        // A repeated key answers with its last value, as `Map` keeps it.
        assert_eq!(member(object, "a"), Some(r#""last""#));
        assert_eq!(
            member(object, "b"),
            Some(r#"{"c":[{"d":"}]\"{"}], "e": []}"#)
        );
        // Keys compare by their decoded text.
        assert_eq!(member(object, "eA"), Some("3"));
        assert_eq!(member(object, "n"), Some("-1.5e3"));
        assert_eq!(member(object, "t"), Some("true"));
        assert_eq!(member(object, "z"), Some("null"));
        assert_eq!(member(object, "c"), None);
        assert_eq!(member("{}", "a"), None);
        assert_eq!(member("[1]", "a"), None);
        assert_eq!(member(r#""a""#, "a"), None);
        // Text that is not JSON answers something or nothing, never a panic.
        for broken in [
            r#"{"a""#,
            r#"{"a":"#,
            r#"{"a":{"#,
            r#"{"a":"x"#,
            "{",
            r#"{"\"#,
        ] {
            let _ = member(broken, "a");
        }
        // Every member of a map read back from its text.
        let map = json!({"k": {"x": [1, "]"]}, "s": "a\"b", "u": "\u{2028}", "": 0});
        let text = serde_json::to_string(&map).unwrap();
        for (key, value) in map.as_object().unwrap() {
            let found: Value = serde_json::from_str(member(&text, key).unwrap()).unwrap();
            assert_eq!(&found, value, "{key}");
        }

        // Several keys in one walk answer as one walk per key does.
        let keys = ["a", "eA", "b", "n", "missing", "z"];
        let found = members(object, keys);
        for (key, value) in keys.iter().zip(found) {
            assert_eq!(value, member(object, key), "{key}");
        }
        assert_eq!(members("[1]", ["a"]), [None]);

        assert_eq!(as_str(r#""plain""#), Some(Cow::Borrowed("plain")));
        assert_eq!(
            as_str(r#""tab\tand \u00e9""#).as_deref(),
            Some("tab\tand é")
        );
        assert_eq!(as_str(r#""\ud800""#), None);
        assert_eq!(as_str("12"), None);
    }

    #[test]
    fn params_decode_once_and_only_when_read() {
        let call = modern(
            "tools/call",
            json!({"name": "n\u{e9}", "arguments": {"x": [1]}}),
        );
        assert_eq!(call.param_str("name").as_deref(), Some("n\u{e9}"));
        assert!(
            call.params.get().is_none(),
            "reading a string param decodes nothing"
        );
        assert_eq!(call.param("arguments"), Some(&json!({"x": [1]})));
        assert!(call.params.get().is_some());
        // Deeper than the decoder keeps: the params read as absent, the string
        // params still in place.
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{}1{}}}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        let deep = Envelope::parse(deep.leak().as_bytes()).unwrap().unwrap();
        assert_eq!(deep.param_str("name").as_deref(), Some("t"));
        assert!(deep.params().is_none());
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
