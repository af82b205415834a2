//! What the headers alone say about a request, and how standard header values read.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName, StatusCode, header};

use super::{LEGACY_VERSIONS, MCP_METHOD, RpcError};

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

/// Whether the request's `Mcp-Method` header names a method the layer owns: the
/// layer then answers for the body, whatever it holds.
pub(crate) fn names_owned_method(headers: &HeaderMap) -> bool {
    headers
        .get(MCP_METHOD)
        .is_some_and(|m| owns(m.as_bytes().trim_ascii()))
}

pub(crate) fn is_legacy_version(value: &[u8]) -> bool {
    let value = value.trim_ascii();
    LEGACY_VERSIONS.iter().any(|v| v.as_bytes() == value)
}

/// What the headers alone say about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderRoute {
    /// A modern method the layer does not own: forward without reading the body.
    Passthrough,
    /// The body must be read to decide.
    Inspect,
    /// The body must be read, and `Mcp-Method` names a `tasks/*` method, which the
    /// layer answers itself when the body agrees.
    Tasks,
    /// `Mcp-Method` appears more than once: refused (-32020) before anything is
    /// read, whatever the values name.
    DuplicateMethod,
}

/// Decides from headers only, without touching the body.
///
/// `Mcp-Method` comes first: a modern request for a method the layer does not own
/// passes after a single header lookup, and one for a method it owns is read, so the
/// body decides its era (only modern clients send the header). Any other POST is
/// read: an earlier revision's request may be about tasks too, and its body decides
/// (`Envelope::is_legacy`).
pub(crate) fn route_by_headers(method: &http::Method, headers: &HeaderMap) -> HeaderRoute {
    if method != http::Method::POST {
        return HeaderRoute::Passthrough;
    }
    let mut methods = headers.get_all(MCP_METHOD).iter();
    if let Some(m) = methods.next() {
        if methods.next().is_some() {
            return HeaderRoute::DuplicateMethod;
        }
        let m = m.as_bytes().trim_ascii();
        return match owns(m) {
            true if m.starts_with(b"tasks/") => HeaderRoute::Tasks,
            true => HeaderRoute::Inspect,
            false => HeaderRoute::Passthrough,
        };
    }
    HeaderRoute::Inspect
}

/// The Streamable HTTP checks on a request the layer answers itself, in rmcp's
/// order: an `Accept` that rules out `application/json` (406), then a
/// `Content-Type` other than `application/json` (415). A missing `Accept` accepts
/// anything (RFC 9110); a missing `Content-Type` is refused.
pub(crate) fn check_media_types(headers: &HeaderMap) -> Result<(), RpcError> {
    // What clients send, told at a glance: an `Accept` whose first entry is plain
    // `application/json`, and exactly `application/json` as the content type.
    let accepted = headers.get(header::ACCEPT).is_none_or(|first| {
        let first = first.as_bytes();
        let plain_json = first.starts_with(b"application/json")
            && matches!(first.get(b"application/json".len()), None | Some(b','));
        plain_json || accepts_json(headers)
    });
    if !accepted {
        return Err(RpcError::new(
            RpcError::INVALID_REQUEST,
            "Not Acceptable: the client must accept application/json",
            StatusCode::NOT_ACCEPTABLE,
        ));
    }
    let json = headers.get(header::CONTENT_TYPE).is_some_and(|v| {
        v.as_bytes() == b"application/json"
            || v.to_str().is_ok_and(|v| {
                let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
                essence.trim().eq_ignore_ascii_case("application/json")
            })
    });
    if !json {
        return Err(RpcError::new(
            RpcError::INVALID_REQUEST,
            "Unsupported Media Type: Content-Type must be application/json",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ));
    }
    Ok(())
}

/// Whether some `Accept` entry with a non-zero weight covers `application/json`
/// (`application/json`, `application/*` or `*/*`).
fn accepts_json(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|entry| {
            let mut parts = entry.split(';');
            let essence = parts.next().unwrap_or("").trim();
            let covers = ["application/json", "application/*", "*/*"]
                .iter()
                .any(|m| essence.eq_ignore_ascii_case(m));
            covers
                && parts.all(|param| match param.split_once('=') {
                    Some((name, q)) if name.trim().eq_ignore_ascii_case("q") => {
                        !is_zero_weight(q.trim())
                    }
                    _ => true,
                })
        })
}

/// `q=0`, `q=0.`, `q=0.000`: an explicit refusal (a malformed weight is ignored,
/// as rmcp does).
fn is_zero_weight(q: &str) -> bool {
    let (whole, fraction) = q.split_once('.').unwrap_or((q, ""));
    whole == "0" && fraction.len() <= 3 && fraction.bytes().all(|b| b == b'0')
}

/// A standard header's value: trimmed, with `=?base64?…?=` decoded. `Err` when it
/// is malformed.
pub(crate) fn header_value(
    headers: &HeaderMap,
    name: HeaderName,
) -> Option<Result<Cow<'_, str>, ()>> {
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
                .map(Cow::Owned)
                .ok_or(()),
        );
    }
    Some(Ok(Cow::Borrowed(text)))
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
    fn a_second_mcp_method_is_refused_whatever_either_names() {
        let post = http::Method::POST;
        for (first, second) in [("tools/list", "tasks/get"), ("tasks/get", "tools/list")] {
            let mut h = HeaderMap::new();
            h.append(MCP_METHOD, HeaderValue::from_static(first));
            h.append(MCP_METHOD, HeaderValue::from_static(second));
            assert_eq!(route_by_headers(&post, &h), HeaderRoute::DuplicateMethod);
        }
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
            HeaderRoute::Tasks
        );
        assert_eq!(
            route_by_headers(&post, &headers(&[("mcp-method", "tools/call")])),
            HeaderRoute::Inspect
        );
        assert_eq!(
            route_by_headers(&post, &headers(&[("mcp-session-id", "abc")])),
            HeaderRoute::Inspect
        );
        assert_eq!(
            route_by_headers(&post, &headers(&[("mcp-protocol-version", "2025-11-25")])),
            HeaderRoute::Inspect
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
    fn media_types_are_checked_accept_first() {
        let status = |pairs: &[(&'static str, &str)]| {
            check_media_types(&headers(pairs)).map_err(|e| (e.code(), e.http_status().as_u16()))
        };
        let json = ("content-type", "application/json");
        assert_eq!(status(&[json]), Ok(()));
        assert_eq!(
            status(&[("content-type", "Application/JSON; charset=utf-8")]),
            Ok(())
        );
        for accept in [
            "application/json, text/event-stream",
            "*/*",
            "application/*;q=0.5",
            "text/html, APPLICATION/JSON;q=0.1",
            "application/json;q=abc",
        ] {
            assert_eq!(status(&[json, ("accept", accept)]), Ok(()), "{accept}");
        }
        for accept in [
            "text/event-stream",
            "application/json;q=0",
            "application/json; q=0.000, text/html",
            "*/*;q=0",
        ] {
            assert_eq!(
                status(&[json, ("accept", accept)]),
                Err((-32600, 406)),
                "{accept}"
            );
        }
        for content_type in ["text/plain", "application/jsonx", ""] {
            let pairs = [("content-type", content_type)];
            assert_eq!(status(&pairs), Err((-32600, 415)), "{content_type}");
        }
        assert_eq!(status(&[]), Err((-32600, 415)));
        // Accept is checked first.
        let both = [("content-type", "text/plain"), ("accept", "text/html")];
        assert_eq!(status(&both), Err((-32600, 406)));
    }

    #[test]
    fn base64_header_values_are_decoded() {
        let mut h = HeaderMap::new();
        let encoded = format!("=?base64?{}?=", STANDARD.encode("héllo"));
        h.insert("mcp-name", HeaderValue::from_str(&encoded).unwrap());
        assert_eq!(
            header_value(&h, super::super::MCP_NAME),
            Some(Ok(Cow::Borrowed("héllo")))
        );
        h.insert("mcp-name", HeaderValue::from_static("=?base64?***?="));
        assert_eq!(header_value(&h, super::super::MCP_NAME), Some(Err(())));
    }
}
