//! The bridge's wire, free of I/O: Server-Sent Events cut into messages, and the
//! translations between a 2026-07-28 message and its form in the older revisions
//! (2025-11-25, 2025-06-18, 2025-03-26). Standalone, so that the tests can
//! include it.

use mcp_tasks::wire::{
    META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, META_SERVER_INFO, PROTOCOL_VERSION,
};
use serde_json::{Map, Value, json};

/// The revisions the bridge speaks to an upstream, newest first: it asks for the
/// first in `initialize` and accepts any of them in the answer.
pub(crate) const BRIDGED_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// `_meta` key of the client's name and version on a 2026-07-28 request.
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of the lowest log level a 2026-07-28 request wants to hear of.
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// The per-request envelope of 2026-07-28, which the older revisions carry in the
/// `initialize` handshake instead.
const ENVELOPE_KEYS: [&str; 4] = [
    META_PROTOCOL_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
];

/// Log levels, least severe first (RFC 5424 names, as MCP uses them).
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// How long a client may keep the derived `server/discover` result.
const DISCOVER_TTL_MS: u64 = 60_000;

/// The server-to-client requests the bridge relays to a client (as MRTR input
/// requests), each with the client capability it needs. That name is also the
/// request's key among the result's `inputRequests`, and what an upstream session
/// declares in `initialize` for a client that declared it.
pub(crate) const RELAYED_QUESTIONS: [(&str, &str); 3] = [
    ("elicitation/create", "elicitation"),
    ("sampling/createMessage", "sampling"),
    ("roots/list", "roots"),
];

/// The methods whose 2026-07-28 results carry the cache hints `ttlMs` and
/// `cacheScope` (the schema's `CacheableResult`; `server/discover` is answered by
/// the bridge itself).
const CACHEABLE_METHODS: [&str; 5] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// One event of a Server-Sent Events stream that matters to the bridge.
#[derive(Debug, PartialEq)]
pub(crate) enum Event {
    /// The event's `data` lines, joined with `\n`.
    Data(String),
    /// Only comments (a keep-alive).
    Comment,
}

/// Cuts a Server-Sent Events stream into events, whatever its chunking and line
/// ends (CRLF, LF or CR). `id`, `event` and `retry` fields are read past: the
/// bridge writes its own stream without them.
#[derive(Debug, Default)]
pub(crate) struct Events {
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start.
    pos: usize,
    data: Option<String>,
    comment: bool,
}

impl Events {
    /// Appends bytes of the stream.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The bytes held for events not yet complete.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len() - self.pos + self.data.as_ref().map_or(0, String::len)
    }

    /// The next complete event, if one is in.
    pub(crate) fn next_event(&mut self) -> Option<Event> {
        loop {
            let rest = &self.buf[self.pos..];
            let end = rest.iter().position(|&b| b == b'\n' || b == b'\r')?;
            let ending = match rest[end] {
                b'\r' if end + 1 == rest.len() => return None, // maybe half of a CRLF
                b'\r' if rest[end + 1] == b'\n' => 2,
                _ => 1,
            };
            let line = String::from_utf8_lossy(&rest[..end]).into_owned();
            self.pos += end + ending;
            if line.is_empty() {
                let data = self.data.take();
                let comment = std::mem::take(&mut self.comment);
                match data {
                    Some(data) if !data.trim().is_empty() => return Some(Event::Data(data)),
                    _ if comment => return Some(Event::Comment),
                    _ => continue,
                }
            }
            if line.starts_with(':') {
                self.comment = true;
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((&line, ""));
            if field == "data" {
                let value = value.strip_prefix(' ').unwrap_or(value);
                match &mut self.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                }
            }
        }
    }
}

/// One message as a Server-Sent Event of the 2026-07-28 form: a single `data:` line.
pub(crate) fn data_event(message: &Value) -> Vec<u8> {
    let mut event = b"data: ".to_vec();
    event.extend_from_slice(message.to_string().as_bytes());
    event.extend_from_slice(b"\n\n");
    event
}

/// What a message of the upstream's stream is.
#[derive(Debug, PartialEq)]
pub(crate) enum Kind {
    /// A request of the server to the client (it has a method and an id).
    Request,
    Notification,
    Response,
    Other,
}

/// The kind of a JSON-RPC message.
pub(crate) fn kind(message: &Map<String, Value>) -> Kind {
    match (message.contains_key("method"), message.contains_key("id")) {
        (true, true) => Kind::Request,
        (true, false) => Kind::Notification,
        (false, true) if message.contains_key("result") || message.contains_key("error") => {
            Kind::Response
        }
        _ => Kind::Other,
    }
}

/// A 2026-07-28 request in the older form: `params._meta` without the envelope
/// (`progressToken`, trace context and every other key stay), without the MRTR
/// fields, and under the bridge's own id (`None` keeps none: a notification).
pub(crate) fn to_legacy_request(
    mut message: Map<String, Value>,
    id: Option<u64>,
) -> Map<String, Value> {
    if let Some(id) = id {
        message.insert("id".into(), id.into());
    }
    if let Some(Value::Object(params)) = message.get_mut("params") {
        params.remove("inputResponses");
        params.remove("requestState");
        if let Some(Value::Object(meta)) = params.get_mut("_meta") {
            for key in ENVELOPE_KEYS {
                meta.remove(key);
            }
            if meta.is_empty() {
                params.remove("_meta");
            }
        }
    }
    message
}

/// The upstream's response as the client's: the client's id and, on a result,
/// the `resultType` and `serverInfo` that 2026-07-28 results carry.
pub(crate) fn to_modern_response(
    mut message: Map<String, Value>,
    id: &Value,
    server_info: &Value,
) -> Map<String, Value> {
    message.insert("id".into(), id.clone());
    if let Some(Value::Object(result)) = message.get_mut("result") {
        result
            .entry("resultType")
            .or_insert_with(|| "complete".into());
        if let Value::Object(meta) = result
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()))
        {
            meta.entry(META_SERVER_INFO)
                .or_insert_with(|| server_info.clone());
        }
    }
    message
}

/// Gives a cacheable result of the upstream the cache hints 2026-07-28 requires of
/// it, unless it has them: `ttlMs` 0 (stale at once) and `cacheScope` `"private"`.
/// An older revision says nothing of caching; its lists change (and the bridge
/// relays no list changes), and they depend on the session's declared
/// capabilities (server-everything lists its sampling tool only to a client that
/// declared sampling), so nothing may be reused, nor shared between users.
pub(crate) fn add_cache_hints(method: &str, result: &mut Map<String, Value>) {
    if !CACHEABLE_METHODS.contains(&method) {
        return;
    }
    result.entry("ttlMs").or_insert_with(|| 0.into());
    result
        .entry("cacheScope")
        .or_insert_with(|| "private".into());
}

/// Drops the 2025-11-25 `execution.taskSupport` of each tool in a `tools/list`
/// result: it speaks of that revision's tasks, not of the extension's.
pub(crate) fn drop_legacy_task_support(result: &mut Map<String, Value>) {
    let Some(Value::Array(tools)) = result.get_mut("tools") else {
        return;
    };
    for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
        if let Some(Value::Object(execution)) = tool.get_mut("execution") {
            execution.remove("taskSupport");
            if execution.is_empty() {
                tool.remove("execution");
            }
        }
    }
}

/// A JSON-RPC error message for `id`.
pub(crate) fn error_message(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The JSON-RPC error code of a message, if it is an error.
pub(crate) fn error_code(message: &Value) -> Option<i64> {
    message.get("error")?.get("code")?.as_i64()
}

/// The `initialize` request the bridge opens a session with, declaring
/// `capabilities` (see [`relayed_capabilities`]).
pub(crate) fn initialize_request(
    id: u64,
    name: &str,
    version: &str,
    capabilities: &Value,
) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": BRIDGED_VERSIONS[0],
        "capabilities": capabilities,
        "clientInfo": {"name": name, "version": version},
    }})
}

/// The capabilities a 2026-07-28 request's `_meta` declares for the requests the
/// bridge relays (`elicitation`, `sampling`, `roots`), as declared: what its
/// upstream session declares in `initialize`, so that the upstream offers that
/// client what it can answer (and asks nothing it cannot). `{}` when it declares
/// none of them.
pub(crate) fn relayed_capabilities(message: &Map<String, Value>) -> Value {
    let declared =
        &message.get("params").unwrap_or(&Value::Null)["_meta"][META_CLIENT_CAPABILITIES];
    let relayed = RELAYED_QUESTIONS
        .iter()
        .filter_map(|(_, capability)| {
            let settings = declared.get(capability).filter(|s| s.is_object())?;
            Some(((*capability).to_owned(), settings.clone()))
        })
        .collect();
    Value::Object(relayed)
}

/// `value` as JSON text with every object's keys sorted, so that equal values
/// (whatever their key order) write the same.
pub(crate) fn canonical(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_unstable();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::from(key.as_str()).to_string());
                    out.push(':');
                    write(&map[key], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// The `server/discover` request that tells a 2026-07-28 upstream from an older one.
pub(crate) fn discover_request(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": {"_meta": {
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES: {},
    }}})
}

/// Whether a `server/discover` answer comes from a 2026-07-28 server.
pub(crate) fn is_modern_discover(message: &Value) -> bool {
    message["result"]["supportedVersions"].is_array()
}

/// The revision an `initialize` result settled on, if the bridge speaks it.
pub(crate) fn bridged_version(result: &Value) -> Option<&'static str> {
    let version = result["protocolVersion"].as_str()?;
    BRIDGED_VERSIONS.into_iter().find(|v| *v == version)
}

/// An older server's capabilities as 2026-07-28 ones: without the legacy `tasks`
/// slot, and without list-change and resource subscriptions, which the bridge
/// does not relay.
pub(crate) fn modern_capabilities(capabilities: &Value) -> Value {
    let mut capabilities = capabilities.as_object().cloned().unwrap_or_default();
    capabilities.remove("tasks");
    for kind in ["tools", "prompts", "resources"] {
        if let Some(Value::Object(settings)) = capabilities.get_mut(kind) {
            settings.remove("listChanged");
            settings.remove("subscribe");
        }
    }
    Value::Object(capabilities)
}

/// The `server/discover` result derived from an `initialize` result: its
/// capabilities, instructions and server info.
pub(crate) fn discover_result(initialize: &Value) -> Value {
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": [PROTOCOL_VERSION],
        "capabilities": modern_capabilities(&initialize["capabilities"]),
        "ttlMs": DISCOVER_TTL_MS,
        "cacheScope": "public",
        "_meta": {META_SERVER_INFO: server_info(initialize)},
    });
    if let Some(instructions) = initialize.get("instructions").filter(|i| i.is_string()) {
        result["instructions"] = instructions.clone();
    }
    result
}

/// The `serverInfo` of an `initialize` result (`{}` when it has none).
pub(crate) fn server_info(initialize: &Value) -> Value {
    initialize
        .get("serverInfo")
        .filter(|i| i.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}))
}

/// What one 2026-07-28 request wants from the upstream's stream.
#[derive(Clone, Debug, Default)]
pub(crate) struct Wants {
    /// Its `progressToken`: progress reports go back under it.
    pub(crate) progress_token: Option<Value>,
    /// The lowest log level it asked for (an index into the levels); no log
    /// messages without one.
    pub(crate) log_level: Option<usize>,
    /// It declared the `elicitation` capability.
    pub(crate) elicitation: bool,
    /// It declared the `sampling` capability.
    pub(crate) sampling: bool,
    /// It declared the `roots` capability.
    pub(crate) roots: bool,
}

impl Wants {
    /// What the request `message` asked for in its `_meta`.
    pub(crate) fn of(message: &Map<String, Value>) -> Wants {
        let meta = &message.get("params").unwrap_or(&Value::Null)["_meta"];
        let declared = |capability: &str| meta[META_CLIENT_CAPABILITIES][capability].is_object();
        Wants {
            progress_token: meta.get("progressToken").cloned(),
            log_level: meta[META_LOG_LEVEL].as_str().and_then(log_level),
            elicitation: declared("elicitation"),
            sampling: declared("sampling"),
            roots: declared("roots"),
        }
    }

    /// Whether the request declared `capability`.
    pub(crate) fn declared(&self, capability: &str) -> bool {
        match capability {
            "elicitation" => self.elicitation,
            "sampling" => self.sampling,
            "roots" => self.roots,
            _ => false,
        }
    }
}

fn log_level(name: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|level| *level == name)
}

/// A notification of the upstream's stream as the client should see it:
/// progress under the client's own token, log messages at or above the level it
/// asked for; `None` for anything else (a 2026-07-28 response stream carries
/// nothing more).
pub(crate) fn relayed_notification(mut message: Value, wants: &Wants) -> Option<Value> {
    match message["method"].as_str()? {
        "notifications/progress" => {
            let token = wants.progress_token.clone()?;
            message
                .get_mut("params")?
                .as_object_mut()?
                .insert("progressToken".into(), token);
            Some(message)
        }
        "notifications/message" => {
            let wanted = wants.log_level?;
            let level = message["params"]["level"].as_str().and_then(log_level)?;
            (level >= wanted).then_some(message)
        }
        _ => None,
    }
}

/// A request of the upstream as an MRTR input request (`{method, params}`, without
/// `jsonrpc` and `id`): its `params` only when it has some (`roots/list` may not).
pub(crate) fn input_request(method: &str, params: Option<Value>) -> Value {
    match params {
        Some(params) if !params.is_null() => json!({"method": method, "params": params}),
        _ => json!({"method": method}),
    }
}

/// The MRTR result that puts an upstream's question to the client: one input
/// request under `key`, and the state to send back with the answer.
pub(crate) fn input_required(
    id: &Value,
    key: &str,
    request: Value,
    state: &str,
    server_info: &Value,
) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {
        "resultType": "input_required",
        "inputRequests": {key: request},
        "requestState": state,
        "_meta": {META_SERVER_INFO: server_info},
    }})
}

/// Whether an error answer says the session is gone: HTTP 404 (what the
/// specification prescribes), or a 400 whose JSON-RPC error speaks of the
/// session (what some servers answer for a session they no longer know).
pub(crate) fn is_session_gone(status: u16, body: &[u8]) -> bool {
    match status {
        404 => true,
        400 => serde_json::from_slice::<Value>(body).is_ok_and(|message| {
            message["error"]["message"]
                .as_str()
                .is_some_and(|m| m.to_ascii_lowercase().contains("session"))
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(events: &mut Events) -> Vec<Event> {
        std::iter::from_fn(|| events.next_event()).collect()
    }

    #[test]
    fn events_are_cut_whatever_the_chunks_and_line_ends() {
        let stream = "id: 1\nevent: message\ndata: {\"a\":1}\n\n: ping\n\nid: 2\ndata: \n\n\
                      data: {\"b\":\r\ndata: 2}\r\n\r\ndata: {\"c\":3}\r\r: end\n\n";
        let mut whole = Events::default();
        whole.push(stream.as_bytes());
        let expected = vec![
            Event::Data("{\"a\":1}".into()),
            Event::Comment,
            Event::Data("{\"b\":\n2}".into()),
            Event::Data("{\"c\":3}".into()),
            Event::Comment,
        ];
        assert_eq!(all(&mut whole), expected);
        // Byte by byte: a CR at a chunk's end waits to see whether an LF follows.
        let mut split = Events::default();
        let mut seen = Vec::new();
        for byte in stream.as_bytes() {
            split.push(&[*byte]);
            seen.extend(all(&mut split));
        }
        assert_eq!(seen, expected);
        assert_eq!(split.buffered(), 0);
    }

    #[test]
    fn the_envelope_goes_and_everything_else_stays() {
        let message = json!({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {
            "name": "echo", "arguments": {"message": "hi"}, "requestState": "s", "inputResponses": {},
            "_meta": {META_PROTOCOL_VERSION: PROTOCOL_VERSION, META_CLIENT_CAPABILITIES: {},
                META_CLIENT_INFO: {"name": "c", "version": "1"}, META_LOG_LEVEL: "info",
                "progressToken": 7, "traceparent": "00-1-2-01"}}});
        let Value::Object(message) = message else {
            unreachable!()
        };
        let legacy = Value::Object(to_legacy_request(message, Some(42)));
        assert_eq!(
            legacy,
            json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {
                "name": "echo", "arguments": {"message": "hi"},
                "_meta": {"progressToken": 7, "traceparent": "00-1-2-01"}}})
        );
        let bare = json!({"jsonrpc": "2.0", "method": "tools/list",
            "params": {"_meta": {META_PROTOCOL_VERSION: PROTOCOL_VERSION}}});
        let Value::Object(bare) = bare else {
            unreachable!()
        };
        assert_eq!(
            Value::Object(to_legacy_request(bare, None)),
            json!({"jsonrpc": "2.0", "method": "tools/list", "params": {}})
        );
    }

    #[test]
    fn results_gain_the_modern_fields_and_the_client_id() {
        let info = json!({"name": "up", "version": "1"});
        let Value::Object(result) = json!({"jsonrpc": "2.0", "id": 42, "result": {"content": []}})
        else {
            unreachable!()
        };
        let modern = Value::Object(to_modern_response(result, &json!("c-1"), &info));
        assert_eq!(modern["id"], "c-1");
        assert_eq!(modern["result"]["resultType"], "complete");
        assert_eq!(modern["result"]["_meta"][META_SERVER_INFO], info);
        let Value::Object(error) = error_message(&json!(42), -32601, "Method not found") else {
            unreachable!()
        };
        let modern = Value::Object(to_modern_response(error, &json!(3), &info));
        assert_eq!(modern, error_message(&json!(3), -32601, "Method not found"));
    }

    #[test]
    fn discover_is_derived_from_initialize() {
        let initialize = json!({"protocolVersion": "2025-11-25", "instructions": "Be nice",
            "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true},
                "logging": {}, "tasks": {"list": {}}},
            "serverInfo": {"name": "everything", "version": "2"}});
        assert_eq!(bridged_version(&initialize), Some("2025-11-25"));
        assert_eq!(
            bridged_version(&json!({"protocolVersion": "2024-11-05"})),
            None
        );
        let discover = discover_result(&initialize);
        assert_eq!(
            discover["capabilities"],
            json!({"tools": {}, "resources": {}, "logging": {}})
        );
        assert_eq!(discover["supportedVersions"], json!([PROTOCOL_VERSION]));
        assert_eq!(discover["instructions"], "Be nice");
        assert_eq!(discover["_meta"][META_SERVER_INFO]["name"], "everything");
        assert!(discover["ttlMs"].is_u64() && discover["cacheScope"].is_string());
    }

    #[test]
    fn only_wanted_notifications_are_relayed() {
        let Value::Object(request) = json!({"params": {"_meta": {"progressToken": "mine",
            META_LOG_LEVEL: "warning", META_CLIENT_CAPABILITIES: {"elicitation": {}}}}})
        else {
            unreachable!()
        };
        let wants = Wants::of(&request);
        assert!(wants.elicitation);
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": 9, "progress": 1, "total": 5}});
        let relayed = relayed_notification(progress.clone(), &wants).unwrap();
        assert_eq!(relayed["params"]["progressToken"], "mine");
        assert!(relayed_notification(progress, &Wants::default()).is_none());
        let log = |level: &str| {
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": level, "data": "x"}})
        };
        assert!(relayed_notification(log("error"), &wants).is_some());
        assert!(relayed_notification(log("info"), &wants).is_none());
        let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        assert!(relayed_notification(changed, &wants).is_none());
    }

    #[test]
    fn cacheable_results_gain_cache_hints_and_keep_their_own() {
        let mut list = json!({"tools": []}).as_object().cloned().unwrap();
        add_cache_hints("tools/list", &mut list);
        assert_eq!(list["ttlMs"], 0);
        assert_eq!(list["cacheScope"], "private");
        let mut read = json!({"contents": [], "ttlMs": 5000, "cacheScope": "public"})
            .as_object()
            .cloned()
            .unwrap();
        add_cache_hints("resources/read", &mut read);
        assert_eq!(read["ttlMs"], 5000);
        assert_eq!(read["cacheScope"], "public");
        let mut call = json!({"content": []}).as_object().cloned().unwrap();
        add_cache_hints("tools/call", &mut call);
        assert!(!call.contains_key("ttlMs") && !call.contains_key("cacheScope"));
    }

    #[test]
    fn the_relayed_capabilities_are_those_the_client_declared() {
        let Value::Object(request) = json!({"params": {"_meta": {META_CLIENT_CAPABILITIES: {
            "roots": {"listChanged": true}, "sampling": {}, "elicitation": {"form": {}},
            "extensions": {"io.modelcontextprotocol/tasks": {}}, "experimental": {}}}}})
        else {
            unreachable!()
        };
        let relayed = relayed_capabilities(&request);
        assert_eq!(
            relayed,
            json!({"roots": {"listChanged": true}, "sampling": {}, "elicitation": {"form": {}}})
        );
        let Value::Object(bare) = json!({"params": {}}) else {
            unreachable!()
        };
        assert_eq!(relayed_capabilities(&bare), json!({}));
        let wants = Wants::of(&request);
        assert!(wants.declared("sampling") && wants.declared("roots"));
        assert!(!wants.declared("extensions"));
        // Equal declarations in another key order are told apart by nothing.
        let reordered =
            json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true}});
        assert_eq!(canonical(&relayed), canonical(&reordered));
        assert_ne!(canonical(&json!({"a": 1})), canonical(&json!({"a": "1"})));
        assert_eq!(
            canonical(&json!([{"b": 1, "a": [2, null]}])),
            r#"[{"a":[2,null],"b":1}]"#
        );
    }

    #[test]
    fn an_input_request_has_params_only_when_the_upstream_sent_some() {
        assert_eq!(
            input_request("roots/list", None),
            json!({"method": "roots/list"})
        );
        assert_eq!(
            input_request("roots/list", Some(Value::Null)),
            json!({"method": "roots/list"})
        );
        let sampling = input_request("sampling/createMessage", Some(json!({"maxTokens": 5})));
        assert_eq!(sampling["params"]["maxTokens"], 5);
    }

    #[test]
    fn a_forgotten_session_is_told_from_other_errors() {
        assert!(is_session_gone(404, b""));
        let gone = br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#;
        assert!(is_session_gone(400, gone));
        let other =
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;
        assert!(!is_session_gone(400, other));
        assert!(!is_session_gone(500, gone));
    }
}
