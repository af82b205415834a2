//! Just enough Server-Sent Events to find and rewrite one JSON-RPC message in a
//! buffered response, and to write events of our own.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderMap;
use serde_json::Value;

/// Whether a response is an SSE stream (otherwise it is a single JSON message).
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// One event: its byte range in the stream (blank line included) and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) range: Range<usize>,
    pub(crate) data: Option<String>,
}

/// Splits a stream into whole events. An unterminated tail is not an event.
pub(crate) fn events(stream: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    let mut data: Option<String> = None;
    while pos < stream.len() {
        let end = stream[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(stream.len(), |i| pos + i);
        if end == stream.len() {
            break;
        }
        let line = &stream[pos..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        pos = end + 1;
        if line.is_empty() {
            if data.is_some() || pos - start > 1 {
                out.push(Event {
                    range: start..pos,
                    data: data.take(),
                });
            }
            start = pos;
            continue;
        }
        if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            let value = String::from_utf8_lossy(value);
            match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(&value);
                }
                None => data = Some(value.into_owned()),
            }
        }
    }
    out
}

/// Whether a JSON-RPC message is a response (it has an id and a result or error).
pub(crate) fn is_response(message: &Value) -> bool {
    message.get("method").is_none()
        && message.get("id").is_some()
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// The JSON-RPC response in a buffered body, JSON or SSE.
pub(crate) fn find_response(body: &[u8], sse: bool) -> Option<Value> {
    if !sse {
        return serde_json::from_slice(body).ok();
    }
    events(body)
        .into_iter()
        .filter_map(|e| e.data)
        .filter_map(|d| serde_json::from_str::<Value>(&d).ok())
        .find(is_response)
}

/// Rewrites the JSON-RPC response in a buffered body, keeping every other byte.
/// `None` when the body holds no response.
pub(crate) fn rewrite_response(
    body: &[u8],
    sse: bool,
    edit: impl FnOnce(&mut Value),
) -> Option<Bytes> {
    if !sse {
        let mut message: Value = serde_json::from_slice(body).ok()?;
        if !is_response(&message) {
            return None;
        }
        edit(&mut message);
        return serde_json::to_vec(&message).ok().map(Bytes::from);
    }
    for event in events(body) {
        let Some(mut message) = event
            .data
            .as_deref()
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
        else {
            continue;
        };
        if !is_response(&message) {
            continue;
        }
        edit(&mut message);
        let json = serde_json::to_vec(&message).ok()?;
        let mut out = BytesMut::with_capacity(body.len() + 64);
        out.put_slice(&body[..event.range.start]);
        out.put_slice(&data_event(&json));
        out.put_slice(&body[event.range.end..]);
        return Some(out.freeze());
    }
    None
}

/// One SSE event carrying a JSON message on a single `data:` line.
pub(crate) fn data_event(json: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(json.len() + 8);
    out.put_slice(b"data: ");
    out.put_slice(json);
    out.put_slice(b"\n\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const STREAM: &[u8] = b": hello\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"a\":1}}\n\ndata: {\"partial\"";

    #[test]
    fn splits_whole_events_only() {
        let events = events(STREAM);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].data, None);
        assert!(events[1].data.as_deref().unwrap().contains("progress"));
        assert_eq!(&STREAM[events[2].range.clone()][..5], b"data:");
    }

    #[test]
    fn finds_the_response_among_notifications() {
        let response = find_response(STREAM, true).unwrap();
        assert_eq!(response["id"], 3);
        assert_eq!(
            find_response(br#"{"id":1,"result":{}}"#, false).unwrap()["id"],
            1
        );
    }

    #[test]
    fn rewrites_only_the_response_event() {
        let out = rewrite_response(STREAM, true, |m| m["result"]["b"] = json!(2)).unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.starts_with(": hello\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\"")
        );
        assert!(text.contains(r#""b":2"#));
        assert!(text.ends_with("data: {\"partial\""));
        assert!(rewrite_response(b"data: {\"method\":\"x\"}\n\n", true, |_| {}).is_none());
    }
}
