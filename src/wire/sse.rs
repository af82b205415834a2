//! Server-Sent Events: the one splitter that cuts a byte stream into whole events,
//! and the few helpers that find or rewrite a JSON-RPC message inside one.
//!
//! Lines end with CRLF, LF or a lone CR, as the SSE rules allow; an empty line ends
//! an event. The splitter is incremental: each byte is scanned once, however the
//! stream is cut into chunks.

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

/// One whole event: its bytes as received (its closing blank line included) and
/// the joined value of its `data` fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) raw: Bytes,
    pub(crate) data: Option<String>,
}

impl Event {
    /// The event's data parsed as JSON, when it is JSON.
    pub(crate) fn json(&self) -> Option<Value> {
        self.data
            .as_deref()
            .and_then(|d| serde_json::from_str(d).ok())
    }
}

/// Cuts a byte stream into whole events.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    buf: BytesMut,
    /// Bytes of `buf` already scanned.
    scanned: usize,
    /// Where the line being scanned starts.
    line_start: usize,
    /// The last line ended with a CR: a LF right after it belongs to that ending.
    after_cr: bool,
    /// The data of the event being read.
    data: Option<String>,
    /// `buf` starts with the LF of a CRLF whose CR ended the previous event.
    leading_lf: bool,
}

impl Splitter {
    /// An empty splitter.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// How many bytes wait for the end of their event.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether bytes of an unfinished event are buffered (the LF left over from a
    /// CRLF cut between chunks is not an event of its own).
    pub(crate) fn is_mid_event(&self) -> bool {
        self.buf.len() > usize::from(self.leading_lf)
    }

    /// Takes what is left: bytes of an event that never ended.
    pub(crate) fn take_rest(&mut self) -> Bytes {
        self.scanned = 0;
        self.line_start = 0;
        self.data = None;
        self.leading_lf = false;
        self.buf.split().freeze()
    }

    /// The next whole event, if the bytes pushed so far complete one.
    pub(crate) fn next_event(&mut self) -> Option<Event> {
        while self.scanned < self.buf.len() {
            let at = self.scanned;
            let byte = self.buf[at];
            self.scanned += 1;
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    self.leading_lf = at == 0;
                    self.line_start = self.scanned;
                    continue;
                }
            }
            if byte != b'\n' && byte != b'\r' {
                continue;
            }
            self.after_cr = byte == b'\r';
            let line = self.line_start..at;
            self.line_start = self.scanned;
            if line.is_empty() {
                return Some(self.cut());
            }
            self.field(line);
        }
        None
    }

    /// Ends the current event at the scan position.
    fn cut(&mut self) -> Event {
        let mut end = self.scanned;
        // A CRLF cut between chunks: keep the LF with its CR when it has arrived.
        if self.after_cr && self.buf.get(end) == Some(&b'\n') {
            end += 1;
            self.after_cr = false;
        }
        self.leading_lf = false;
        let raw = self.buf.split_to(end).freeze();
        self.scanned -= end.min(self.scanned);
        self.line_start = self.scanned;
        Event {
            raw,
            data: self.data.take(),
        }
    }

    fn field(&mut self, line: std::ops::Range<usize>) {
        let line = &self.buf[line];
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return, // a comment
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if name != b"data" {
            return;
        }
        let value = String::from_utf8_lossy(value);
        match &mut self.data {
            Some(d) => {
                d.push('\n');
                d.push_str(&value);
            }
            None => self.data = Some(value.into_owned()),
        }
    }
}

/// Every whole event of a buffered stream; an unterminated tail is not an event.
pub(crate) fn events(stream: &[u8]) -> Vec<Event> {
    let mut splitter = Splitter::new();
    splitter.push(stream);
    std::iter::from_fn(|| splitter.next_event()).collect()
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
        .iter()
        .filter_map(Event::json)
        .find(is_response)
}

/// Rewrites the JSON-RPC response in a buffered body, keeping every other byte.
/// `None` when the body holds no response, or when `edit` says it changed nothing.
pub(crate) fn rewrite_response(
    body: &[u8],
    sse: bool,
    edit: impl FnOnce(&mut Value) -> bool,
) -> Option<Bytes> {
    if !sse {
        let mut message: Value = serde_json::from_slice(body).ok()?;
        if !is_response(&message) || !edit(&mut message) {
            return None;
        }
        return serde_json::to_vec(&message).ok().map(Bytes::from);
    }
    let mut start = 0;
    for event in events(body) {
        let end = start + event.raw.len();
        if let Some(mut message) = event.json().filter(is_response) {
            if !edit(&mut message) {
                return None;
            }
            let json = serde_json::to_vec(&message).ok()?;
            let mut out = BytesMut::with_capacity(body.len() + 64);
            out.put_slice(&body[..start]);
            out.put_slice(&data_event(&json));
            out.put_slice(&body[end..]);
            return Some(out.freeze());
        }
        start = end;
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

    fn split_in_chunks(stream: &[u8], chunk: usize) -> (Vec<Event>, Bytes) {
        let mut splitter = Splitter::new();
        let mut out = Vec::new();
        for part in stream.chunks(chunk.max(1)) {
            splitter.push(part);
            out.extend(std::iter::from_fn(|| splitter.next_event()));
        }
        (out, splitter.take_rest())
    }

    #[test]
    fn every_line_ending_ends_lines_and_events() {
        for (stream, data) in [
            (&b"data: a\n\n"[..], "a"),
            (b"data: a\r\n\r\n", "a"),
            (b"data: a\r\r", "a"),
            (b"data: a\ndata: b\r\n\r", "a\nb"),
            (b"data:a\r\ndata\r\n\n", "a\n"),
        ] {
            let events = events(stream);
            assert_eq!(events.len(), 1, "{stream:?}");
            assert_eq!(events[0].data.as_deref(), Some(data), "{stream:?}");
            assert_eq!(&events[0].raw[..], stream, "{stream:?}");
        }
    }

    #[test]
    fn chunking_never_changes_the_events() {
        let stream =
            b": hi\r\n\r\ndata: {\"a\":1}\r\rid: 7\ndata: x\r\n\r\nevent: y\ndata: z\n\ndata: tail";
        let (whole, rest) = split_in_chunks(stream, stream.len());
        assert_eq!(whole.len(), 4);
        assert_eq!(&rest[..], b"data: tail");
        for chunk in 1..stream.len() {
            let (events, tail) = split_in_chunks(stream, chunk);
            let data: Vec<_> = events.iter().map(|e| e.data.clone()).collect();
            let expected: Vec<_> = whole.iter().map(|e| e.data.clone()).collect();
            assert_eq!(data, expected, "chunk size {chunk}");
            let mut raw: Vec<u8> = events.iter().flat_map(|e| e.raw.to_vec()).collect();
            raw.extend_from_slice(&tail);
            assert_eq!(&raw[..], &stream[..], "chunk size {chunk}");
        }
    }

    #[test]
    fn a_crlf_split_between_chunks_stays_with_its_event() {
        let mut splitter = Splitter::new();
        splitter.push(b"data: a\r\n\r");
        let first = splitter.next_event().expect("the CR ends the event");
        assert_eq!(&first.raw[..], b"data: a\r\n\r");
        splitter.push(b"\ndata: b\n\n");
        let second = splitter.next_event().unwrap();
        assert_eq!(second.data.as_deref(), Some("b"));
        assert_eq!(&second.raw[..], b"\ndata: b\n\n");
        splitter.push(b"data: c\r");
        assert!(splitter.next_event().is_none());
        splitter.push(b"\r");
        assert!(splitter.next_event().is_some());
        assert!(!splitter.is_mid_event());
        splitter.push(b"\n");
        assert!(splitter.next_event().is_none());
        assert!(!splitter.is_mid_event(), "a leftover LF is not an event");
        splitter.push(b"d");
        assert!(splitter.is_mid_event());
        assert!(splitter.next_event().is_none());
    }

    #[test]
    fn comments_and_other_fields_carry_no_data() {
        let events = events(b": keep-alive\n\nevent: x\nid: 1\n\n");
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| e.data.is_none()));
    }

    #[test]
    fn finds_and_rewrites_the_response_event_only() {
        let stream = b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\r\n\r\n: after\n\n";
        let found = find_response(stream, true).unwrap();
        assert_eq!(found["id"], 1);
        let rewritten = rewrite_response(stream, true, |m| {
            m["result"]["x"] = json!(true);
            true
        })
        .unwrap();
        let text = std::str::from_utf8(&rewritten).unwrap();
        assert!(text.starts_with(
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n"
        ));
        assert!(text.contains("\"x\":true"));
        assert!(text.ends_with(": after\n\n"));
        assert!(rewrite_response(b": only\n\n", true, |_| true).is_none());
    }
}
