//! The usual request read in one pass over its bytes, without serde: the envelope's
//! members and the typed params [`Envelope`](super::Envelope) keeps, the rest of
//! the body checked to be JSON and skipped.
//!
//! It gives up (`None`) on anything it would not read exactly as the serde_json
//! reading in [`super::shape::parse_with_serde`] does: a syntax error, a key written with
//! an escape, a top-level member given twice, a number or an escaped string where a
//! typed member is read (serde_json checks their range and their escapes there),
//! nesting deeper than 64 in a skipped value. The caller then reads the body with
//! serde_json, which decides, and words any error. So the result here, when there is
//! one, is serde_json's; a test holds the two readings equal on generated bodies.

use super::shape::{AnyValue, Capabilities, Extensions, Members, Message, Meta, Params};

/// Reads a body already checked to be UTF-8.
pub(super) fn message(text: &str) -> Option<Message<'_>> {
    let mut scan = Scan {
        text,
        at: 0,
        suspect: false,
    };
    let message = scan.message()?;
    scan.space();
    (scan.at == text.len()).then_some(message)
}

struct Scan<'a> {
    text: &'a str,
    at: usize,
    /// Set on a `\u` escape or a number with an exponent or past 18 characters:
    /// what decoding into a `Value` may refuse.
    suspect: bool,
}

/// An object whose members the scan reads: [`Members::NAMES`] says which.
trait Shape<'a>: Members<'a> {
    /// Reads the value of the member named `NAMES[at]`.
    fn read(&mut self, at: usize, scan: &mut Scan<'a>) -> Option<()>;
}

impl<'a> Shape<'a> for Params<'a> {
    fn read(&mut self, at: usize, scan: &mut Scan<'a>) -> Option<()> {
        match at {
            0 => self.meta = Some(scan.typed()?),
            1 => self.task_id = Some(scan.value()?),
            2 => self.name = Some(scan.value()?),
            _ => self.input_responses = Some(scan.value()?),
        }
        Some(())
    }
}

impl<'a> Shape<'a> for Meta<'a> {
    fn read(&mut self, at: usize, scan: &mut Scan<'a>) -> Option<()> {
        match at {
            0 => self.version = Some(scan.value()?),
            _ => self.capabilities = Some(scan.typed()?),
        }
        Some(())
    }
}

impl<'a> Shape<'a> for Capabilities {
    fn read(&mut self, _: usize, scan: &mut Scan<'a>) -> Option<()> {
        self.declared = scan.typed::<Extensions>()?.declared;
        Some(())
    }
}

impl<'a> Shape<'a> for Extensions {
    fn read(&mut self, _: usize, scan: &mut Scan<'a>) -> Option<()> {
        self.declared = scan.typed::<AnyValue>()?.is_object;
        Some(())
    }
}

impl<'a> Shape<'a> for AnyValue {
    fn read(&mut self, _: usize, scan: &mut Scan<'a>) -> Option<()> {
        scan.value().map(drop)
    }
}

/// Deepest nesting a skipped value may have here (one bit of `skip`'s stack each).
const MAX_DEPTH: u32 = 64;

impl<'a> Scan<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after white space, not taken.
    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.bytes().get(self.at).copied()
    }

    /// The top-level object.
    fn message(&mut self) -> Option<Message<'a>> {
        if self.peek()? != b'{' {
            return None;
        }
        self.at += 1;
        let mut message = Message::default();
        let mut seen = [false; 4];
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(message);
        }
        loop {
            let at = self.key(&["jsonrpc", "id", "method", "params"])?;
            if let Some(at) = at {
                // serde refuses a repeated field of a struct.
                if std::mem::replace(&mut seen[at], true) {
                    return None;
                }
            }
            match at {
                Some(0) => message.jsonrpc = self.value()?.filter_null(),
                Some(1) => message.id = Some(self.value()?),
                Some(2) => message.method = self.value()?.filter_null(),
                Some(_) => {
                    self.suspect = false;
                    message.params = match self.peek()? {
                        b'n' => {
                            self.value()?;
                            None
                        }
                        _ => Some(self.typed()?),
                    };
                    message.params_plain = !self.suspect;
                }
                None => {
                    self.value()?;
                }
            }
            if !self.next_member()? {
                return Some(message);
            }
        }
    }

    /// After a member: `true` past a comma, `false` past the closing brace.
    fn next_member(&mut self) -> Option<bool> {
        let more = match self.peek()? {
            b',' => true,
            b'}' => false,
            _ => return None,
        };
        self.at += 1;
        Some(more)
    }

    /// A member name and its colon: which of `names` it is, if any. `None` for a
    /// name written with an escape, which serde_json decodes (strictly) before
    /// comparing.
    fn key(&mut self, names: &[&str]) -> Option<Option<usize>> {
        if self.peek()? != b'"' {
            return None;
        }
        let rest = &self.bytes()[self.at + 1..];
        let known = names.iter().position(|name| {
            rest.get(name.len()) == Some(&b'"') && rest.starts_with(name.as_bytes())
        });
        match known {
            Some(at) => self.at += names[at].len() + 2,
            None => {
                // Any other name, unescaped, equals none of them.
                let (_, escaped) = self.string()?;
                if escaped {
                    return None;
                }
            }
        }
        self.colon()?;
        Some(known)
    }

    fn colon(&mut self) -> Option<()> {
        if self.peek()? != b':' {
            return None;
        }
        self.at += 1;
        Some(())
    }

    /// A value read as [`Members`] type `T`: an object member by member, anything
    /// else as `T::default()`.
    fn typed<T: Shape<'a>>(&mut self) -> Option<T> {
        match self.peek()? {
            b'{' => {
                self.at += 1;
                let mut out = T::object();
                if self.peek()? == b'}' {
                    self.at += 1;
                    return Some(out);
                }
                loop {
                    match self.key(T::NAMES)? {
                        Some(at) => out.read(at, self)?,
                        None => {
                            self.value()?;
                        }
                    }
                    if !self.next_member()? {
                        return Some(out);
                    }
                }
            }
            b'"' => {
                let (_, escaped) = self.string()?;
                (!escaped).then(T::default)
            }
            b'[' | b't' | b'f' | b'n' => {
                self.value()?;
                Some(T::default())
            }
            _ => None,
        }
    }

    /// Any value, skipped; its text (white space around it left out).
    fn value(&mut self) -> Option<&'a str> {
        self.space();
        let start = self.at;
        // One bit per open container: 1 an object, 0 an array.
        let mut stack = 0u64;
        let mut depth = 0u32;
        loop {
            self.space();
            match *self.bytes().get(self.at)? {
                b'"' => {
                    self.string()?;
                }
                open @ (b'{' | b'[') => {
                    if depth == MAX_DEPTH {
                        return None;
                    }
                    self.at += 1;
                    let object = open == b'{';
                    let close = if object { b'}' } else { b']' };
                    if self.peek()? == close {
                        self.at += 1;
                    } else {
                        stack = stack << 1 | u64::from(object);
                        depth += 1;
                        if object {
                            self.member_name()?;
                        }
                        continue;
                    }
                }
                b't' => self.word(b"true")?,
                b'f' => self.word(b"false")?,
                b'n' => self.word(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // A value ended: close what it ends, or go on to the next one.
            loop {
                if depth == 0 {
                    return Some(&self.text[start..self.at]);
                }
                let object = stack & 1 == 1;
                match self.peek()? {
                    b',' => {
                        self.at += 1;
                        if object {
                            self.member_name()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.at += 1;
                stack >>= 1;
                depth -= 1;
            }
        }
    }

    /// A member name inside a skipped value (escapes allowed, as serde_json skips
    /// them) and its colon.
    fn member_name(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.string()?;
        self.colon()
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        if !self.bytes()[self.at..].starts_with(word) {
            return None;
        }
        self.at += word.len();
        Some(())
    }

    /// A number by JSON's grammar (its value is not read).
    fn number(&mut self) -> Option<()> {
        let start = self.at;
        let bytes = self.bytes();
        let digits = |at: &mut usize| {
            let start = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at > start
        };
        let mut at = self.at;
        if bytes[at] == b'-' {
            at += 1;
        }
        match bytes.get(at)? {
            b'0' => {
                at += 1;
                if bytes.get(at).is_some_and(u8::is_ascii_digit) {
                    return None;
                }
            }
            b'1'..=b'9' => {
                digits(&mut at);
            }
            _ => return None,
        }
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            if !digits(&mut at) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = bytes.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = bytes.get(at) {
                at += 1;
            }
            if !digits(&mut at) {
                return None;
            }
            self.suspect = true;
        }
        if at - start > 18 {
            self.suspect = true;
        }
        self.at = at;
        Some(())
    }

    /// A string starting at its opening quote: its text, quotes included, and
    /// whether it holds an escape. Escapes are checked for form only (a `\u` needs
    /// four hex digits), as serde_json checks a string it skips.
    fn string(&mut self) -> Option<(&'a str, bool)> {
        let bytes = self.bytes();
        let start = self.at;
        let mut at = start + 1;
        let mut escaped = false;
        loop {
            at += plain_run(&bytes[at..]);
            match *bytes.get(at)? {
                b'"' => {
                    self.at = at + 1;
                    return Some((&self.text[start..self.at], escaped));
                }
                b'\\' => {
                    escaped = true;
                    match *bytes.get(at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                        b'u' => {
                            self.suspect = true;
                            let hex = bytes.get(at + 2..at + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            at += 6;
                        }
                        _ => return None,
                    }
                }
                // A control character, which a JSON string may not hold as it is.
                _ => return None,
            }
        }
    }
}

/// How many bytes from the start of `bytes` are neither a quote, a backslash nor a
/// control character, looked at eight at a time.
fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // The high bit of each byte that is zero; the lowest one set is the first such
    // byte (a borrow can only mark bytes after it).
    let zeros = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let special = zeros(word ^ (ONES * u64::from(b'"')))
            | zeros(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS);
        if special != 0 {
            return at + (special.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .unwrap_or(bytes.len() - at)
}

/// `None` for a JSON `null`: an absent optional member, as serde reads one.
trait FilterNull<'a> {
    fn filter_null(self) -> Option<&'a str>;
}

impl<'a> FilterNull<'a> for &'a str {
    fn filter_null(self) -> Option<&'a str> {
        (self != "null").then_some(self)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::shape::parse_with_serde;
    use super::super::{Envelope, member};
    use super::message;
    use crate::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
    use serde_json::Value;

    fn usual(id: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tasks/get","params":{{"taskId":"abc","_meta":{{"{META_PROTOCOL_VERSION}":"2026-07-28","{META_CLIENT_CAPABILITIES}":{{"extensions":{{"{EXTENSION_ID}":{{}}}}}}}}}}}}"#
        )
    }

    #[test]
    fn the_usual_requests_are_read_by_the_scan_as_serde_json_reads_them() {
        for body in [
            usual("1"),
            usual(r#""a-string""#),
            usual("null"),
            r#" { "jsonrpc" : "2.0" , "id" : 7 , "method" : "tools/call" , "params" : { "name" : "greet" , "arguments" : { "a" : [ 1 , -2.5e3 , true , null , { } , [ ] ] } } } "#.to_owned(),
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":[1,{"a":"\u00e9\n"}]}"#.to_owned(),
            r#"{"jsonrpc":null,"method":null,"params":null}"#.to_owned(),
            "{}".to_owned(),
        ] {
            let mut scanned = message(&body).unwrap_or_else(|| panic!("not scanned: {body}"));
            scanned.params_plain = false;
            assert_eq!(Ok(scanned), parse_with_serde(&body).map_err(drop), "{body}");
        }
        let body = usual("1");
        let envelope = Envelope::parse(body.as_bytes()).unwrap().unwrap();
        assert_eq!(envelope.raw_param("taskId"), Some(r#""abc""#));
        assert_eq!(envelope.valid_raw_id(), Some("1"));
        // Plain params: a member decodes alone; anything that could refuse to decode
        // sends it through the whole params, as before.
        for (params, plain) in [
            (
                r#"{"taskId":"t","inputResponses":{"q":{"action":"accept"}}}"#,
                true,
            ),
            (
                r#"{"taskId":"t","inputResponses":{"q":1},"x":"\ud800"}"#,
                false,
            ),
            (
                r#"{"taskId":"t","inputResponses":{"q":1},"x":1e400}"#,
                false,
            ),
            (
                r#"{"taskId":"t","inputResponses":{"q":1},"x":12345678901234567890}"#,
                false,
            ),
        ] {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/update","params":{params}}}"#);
            let envelope = Envelope::parse(body.as_bytes()).unwrap().unwrap();
            assert_eq!(envelope.params_plain, plain, "{params}");
            let whole = serde_json::from_str::<Value>(params)
                .ok()
                .and_then(|p| p.get("inputResponses").cloned());
            assert_eq!(envelope.param_value("inputResponses"), whole, "{params}");
        }
    }

    #[test]
    fn what_serde_json_reads_differently_or_refuses_is_left_to_it() {
        for body in [
            // A repeated top-level member: serde refuses it.
            r#"{"id":1,"id":2,"method":"m"}"#,
            // An escaped key, decoded before comparing.
            r#"{"method":"m","params":{"task\u0049d":"x"}}"#,
            // A lone surrogate where a typed value is read strictly.
            r#"{"method":"m","params":"\ud800"}"#,
            // A number where a typed value is read: its range is checked.
            r#"{"method":"m","params":1e400}"#,
            // Errors of every kind.
            r#"{"method":"m",}"#,
            r#"{"method":"m"} x"#,
            r#"{"method":"m","params":[01]}"#,
            r#"{"method":"m","params":{"a":"x	y"}}"#,
            r#"{"method":"m","params":{"a":tru}}"#,
            "\u{c}{}",
        ] {
            assert_eq!(message(body), None, "{body}");
        }
        let deep = format!(
            r#"{{"method":"m","params":{{"a":{}{}}}}}"#,
            "[".repeat(65),
            "]".repeat(65)
        );
        assert_eq!(message(&deep), None);
        assert!(parse_with_serde(&deep).is_ok());
    }

    fn space() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            40 => prop::sample::select(vec!["", "", "", " ", "\n", "\t", "\r"]),
            1 => Just("\u{c}"),
        ]
    }

    fn string() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            30 => prop::sample::select(vec![
                "a", "taskId", "name", "_meta", "é", "\\n", "\\u0041", "\\u00e9", "\\ud800",
                "\\udc00", "\\ud83d\\ude00", "\\\"", "\\/", "\\\\", "2.0",
            ]),
            2 => prop::sample::select(vec!["\\x", "\\u12", "\t", "\u{1f}"]),
        ];
        prop::collection::vec(piece, 0..4).prop_map(|p| format!("\"{}\"", p.concat()))
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => prop::sample::select(vec![
                "jsonrpc", "id", "method", "params", "_meta", "taskId", "name", "extensions",
                "inputResponses",
                META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, EXTENSION_ID, "task\\u0049d",
            ])
            .prop_map(|k| format!("\"{k}\"")),
            1 => string(),
            1 => Just("x".to_owned()),
        ]
    }

    fn leaf() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => prop::sample::select(vec![
                "null", "true", "false", "0", "-0", "1", "-12", "1.5", "1e400", "1E-2",
                "12345678901234567890123", "\"2.0\"", "\"tasks/get\"",
            ])
            .prop_map(str::to_owned),
            2 => prop::sample::select(vec!["nul", "tru", "01", "-01", "1.", "-", "2e", "1e+", "0x"])
                .prop_map(str::to_owned),
            6 => string(),
        ]
    }

    fn value() -> impl Strategy<Value = String> {
        leaf().prop_recursive(5, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec((space(), inner.clone(), space()), 0..5).prop_map(|items| {
                    let items: Vec<String> = items
                        .into_iter()
                        .map(|(a, v, b)| format!("{a}{v}{b}"))
                        .collect();
                    format!("[{}]", items.join(","))
                }),
                prop::collection::vec((space(), key(), space(), inner, space()), 0..5).prop_map(
                    |members| {
                        let members: Vec<String> = members
                            .into_iter()
                            .map(|(a, k, b, v, c)| format!("{a}{k}{b}:{v}{c}"))
                            .collect();
                        format!("{{{}}}", members.join(","))
                    }
                ),
            ]
        })
    }

    /// A body: mostly an object, sometimes cut, or with a byte put in or taken out.
    fn body() -> impl Strategy<Value = String> {
        let top = prop::collection::vec((key(), space(), value()), 0..6).prop_map(|members| {
            let members: Vec<String> = members
                .into_iter()
                .map(|(k, s, v)| format!("{k}:{s}{v}"))
                .collect();
            format!("{{{}}}", members.join(","))
        });
        let edit = prop_oneof![
            12 => Just(""),
            1 => prop::sample::select(vec!["{", "}", "[", "]", ",", ":", "\"", "\\", " ", "-", "0"]),
        ];
        (top, any::<prop::sample::Index>(), edit, any::<bool>()).prop_map(
            |(text, at, edit, cut)| {
                let bounds: Vec<usize> = (0..=text.len())
                    .filter(|i| text.is_char_boundary(*i))
                    .collect();
                let at = bounds[at.index(bounds.len())];
                match (edit, cut) {
                    ("", true) if at.is_multiple_of(4) => text[..at].to_owned(),
                    ("", _) => text,
                    (edit, false) => format!("{}{edit}{}", &text[..at], &text[at..]),
                    (_, true) => {
                        let next = text[at..].chars().next().map_or(0, char::len_utf8);
                        format!("{}{}", &text[..at], &text[at + next..])
                    }
                }
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

        #[test]
        fn whatever_the_scan_reads_serde_json_reads_the_same(text in body()) {
            if let Some(mut scanned) = message(&text) {
                // Plain params decode whole, so a member of them decodes alone to
                // the same value.
                if scanned.params_plain {
                    let raw = member(&text, "params").unwrap();
                    prop_assert!(serde_json::from_str::<Value>(raw).is_ok(), "{}", text);
                }
                scanned.params_plain = false;
                prop_assert_eq!(Ok(scanned), parse_with_serde(&text).map_err(drop), "{}", text);
            }
        }
    }
}
