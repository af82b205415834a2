//! The tests' one Server-Sent Events parser, written apart from the library's so
//! that it checks the library rather than agreeing with it. Lines end with CRLF, LF
//! or a lone CR; an empty line ends an event. Also the writer of test events.

use bytes::{Buf as _, Bytes, BytesMut};
use serde_json::Value;

/// One whole SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// The value of its `data` fields, joined with LF; `None` without any.
    pub(crate) data: Option<String>,
    /// How many `data` fields it had.
    pub(crate) data_lines: usize,
    /// Its comment lines, without the colon, trimmed.
    pub(crate) comments: Vec<String>,
}

impl Event {
    /// Parses the lines of one event (its closing blank line excluded).
    fn from_lines<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Event {
        let mut event = Event {
            data: None,
            data_lines: 0,
            comments: Vec::new(),
        };
        for line in lines {
            let line = String::from_utf8_lossy(line);
            if let Some(comment) = line.strip_prefix(':') {
                event.comments.push(comment.trim().to_owned());
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (&*line, ""),
            };
            if field == "data" {
                event.data_lines += 1;
                match &mut event.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => event.data = Some(value.to_owned()),
                }
            }
        }
        event
    }

    /// The data as JSON, if it is JSON.
    pub(crate) fn json(&self) -> Option<Value> {
        self.data
            .as_deref()
            .and_then(|d| serde_json::from_str(d).ok())
    }

    /// The one JSON message the event carries, failing the test when it carries
    /// none or spreads it over several `data` lines.
    #[track_caller]
    pub(crate) fn message(&self) -> Value {
        assert_eq!(
            self.data_lines, 1,
            "an event must carry its message on one data line: {self:?}"
        );
        let data = self.data.as_deref().unwrap_or_default();
        serde_json::from_str(data)
            .unwrap_or_else(|e| panic!("a data line that is not one JSON document ({e}): {data}"))
    }
}

/// Cuts a byte stream, however it arrives in chunks, into whole events.
#[derive(Debug, Default)]
pub(crate) struct EventReader {
    buf: BytesMut,
    /// The last event ended with a CR as the buffer's last byte: a LF right after
    /// it belongs to that line end.
    skip_lf: bool,
}

impl EventReader {
    /// An empty reader.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Whether bytes of an unfinished event are buffered.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Everything buffered, unparsed.
    pub(crate) fn take_buffered(&mut self) -> Bytes {
        self.buf.split().freeze()
    }

    /// The next whole event's bytes (its closing blank line included), if one has
    /// arrived.
    pub(crate) fn next_raw(&mut self) -> Option<Bytes> {
        self.next_lines().map(|(raw, _)| raw)
    }

    /// The next whole event, if one has arrived.
    pub(crate) fn next_event(&mut self) -> Option<Event> {
        self.next_lines().map(|(raw, lines)| {
            Event::from_lines(lines.into_iter().map(|(start, end)| &raw[start..end]))
        })
    }

    /// The next event's bytes and the spans of its lines within them.
    fn next_lines(&mut self) -> Option<(Bytes, Vec<(usize, usize)>)> {
        if self.skip_lf && !self.buf.is_empty() {
            if self.buf[0] == b'\n' {
                self.buf.advance(1);
            }
            self.skip_lf = false;
        }
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.buf[start..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = start + offset;
            let next = match (self.buf[end], self.buf.get(end + 1)) {
                (b'\r', Some(b'\n')) => end + 2,
                // A CR as the last byte: a LF may still follow. A line with text
                // cannot end an event anyway, so wait for more.
                (b'\r', None) if end > start => return None,
                _ => end + 1,
            };
            if end == start {
                self.skip_lf = self.buf[end] == b'\r' && next == self.buf.len();
                let raw = self.buf.split_to(next).freeze();
                return Some((raw, lines));
            }
            lines.push((start, end));
            start = next;
        }
        None
    }
}

/// Every whole event in `bytes`; a trailing partial event is ignored.
pub(crate) fn events(bytes: &[u8]) -> Vec<Event> {
    let mut reader = EventReader::new();
    reader.push(bytes);
    std::iter::from_fn(|| reader.next_event()).collect()
}

/// The JSON messages of the events in `bytes`, in order (events without JSON data
/// are skipped).
pub(crate) fn messages(bytes: &[u8]) -> Vec<Value> {
    events(bytes).iter().filter_map(Event::json).collect()
}

/// The JSON-RPC response among the messages of `bytes`: the last message with an
/// `id` and no `method`.
pub(crate) fn response(bytes: &[u8]) -> Option<Value> {
    messages(bytes)
        .into_iter()
        .rev()
        .find(|m| m.get("id").is_some() && m.get("method").is_none())
}

/// An SSE event holding one JSON message on one `data` line.
pub(crate) fn event(message: &Value) -> Bytes {
    Bytes::from(format!("data: {message}\n\n"))
}
