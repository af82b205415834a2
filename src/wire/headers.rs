//! What the headers alone say about a request, and how standard header values read.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName};

use super::{LEGACY_VERSIONS, MCP_METHOD, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};

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

pub(crate) fn is_legacy_version(value: &[u8]) -> bool {
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
    if let Some(m) = headers.get(MCP_METHOD) {
        return match owns(m.as_bytes().trim_ascii()) {
            true => HeaderRoute::Inspect,
            false => HeaderRoute::Passthrough,
        };
    }
    let legacy = headers.contains_key(MCP_SESSION_ID)
        || headers
            .get(MCP_PROTOCOL_VERSION)
            .is_some_and(|v| is_legacy_version(v.as_bytes()));
    match legacy {
        true => HeaderRoute::Legacy,
        false => HeaderRoute::Inspect,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
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
    fn base64_header_values_are_decoded() {
        let mut h = HeaderMap::new();
        let encoded = format!("=?base64?{}?=", STANDARD.encode("héllo"));
        h.insert("mcp-name", HeaderValue::from_str(&encoded).unwrap());
        assert_eq!(
            header_value(&h, super::super::MCP_NAME),
            Some(Ok("héllo".to_owned()))
        );
        h.insert("mcp-name", HeaderValue::from_static("=?base64?***?="));
        assert_eq!(header_value(&h, super::super::MCP_NAME), Some(Err(())));
    }
}
