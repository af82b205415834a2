//! The 2025-11-25 Tasks wire, beside the 2026-07-28 one: the `Task` object and the
//! results that carry it, the server capability, the ids the layer mints for the
//! questions it puts on a `tasks/result` stream, and the `tasks/list` cursor.
//!
//! Everything here is bytes and values; which record is shown, and to whom, is the
//! routes' business (`routes/legacy/`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::{RpcError, write_rfc3339, write_value};

/// `_meta` key naming the task a message belongs to (`{"taskId": …}`): on a
/// `tasks/result` answer and on each question sent on its stream.
pub(crate) const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The first characters of every JSON-RPC request id the layer mints for a
/// question it sends on a `tasks/result` stream. An answer whose id starts with
/// it is the layer's, on any node.
pub(crate) const INPUT_ID_PREFIX: &str = "mcp-tasks.input.";

/// The most tasks one `tasks/list` page holds.
pub(crate) const LIST_PAGE: usize = 100;

/// A task in the 2025-11-25 shape, borrowed from a record: `{taskId, status,
/// statusMessage?, createdAt, lastUpdatedAt, ttl, pollInterval?}`. `ttl` is always
/// present (`null` for unlimited); times are RFC 3339 with milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Task2025<'a> {
    /// The id's text.
    pub(crate) id: &'a [u8],
    /// The status as this revision names it (a tool error is `failed` here).
    pub(crate) status: &'static str,
    pub(crate) status_message: Option<&'a str>,
    pub(crate) created_ms: u64,
    pub(crate) updated_ms: u64,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) poll_ms: Option<u64>,
}

impl Task2025<'_> {
    /// Writes the `Task` object.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"taskId\":\"");
        out.extend_from_slice(self.id);
        out.extend_from_slice(b"\",\"status\":\"");
        out.extend_from_slice(self.status.as_bytes());
        out.push(b'"');
        if let Some(message) = self.status_message {
            out.extend_from_slice(b",\"statusMessage\":");
            write_value(out, message);
        }
        out.extend_from_slice(b",\"createdAt\":\"");
        write_rfc3339(out, self.created_ms);
        out.extend_from_slice(b"\",\"lastUpdatedAt\":\"");
        write_rfc3339(out, self.updated_ms);
        out.extend_from_slice(b"\",\"ttl\":");
        write_value(out, &self.ttl_ms);
        if let Some(poll) = self.poll_ms {
            out.extend_from_slice(b",\"pollInterval\":");
            write_value(out, &poll);
        }
        out.push(b'}');
    }

    /// Writes the `CreateTaskResult` answering the call that made the task:
    /// `{"task": Task}`.
    pub(crate) fn write_create_result(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"task\":");
        self.write_json(out);
        out.push(b'}');
    }
}

/// Writes a `tasks/list` result: `{"tasks": [...], "nextCursor"?}`.
pub(crate) fn write_list_result<'a>(
    out: &mut Vec<u8>,
    tasks: impl IntoIterator<Item = Task2025<'a>>,
    next_cursor: Option<&str>,
) {
    out.extend_from_slice(b"{\"tasks\":[");
    for (n, task) in tasks.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        task.write_json(out);
    }
    out.push(b']');
    if let Some(cursor) = next_cursor {
        out.extend_from_slice(b",\"nextCursor\":");
        write_value(out, cursor);
    }
    out.push(b'}');
}

/// The server capability a layer serving this revision's tasks declares in its
/// `initialize` result: listing, cancelling, and task-augmented `tools/call`.
pub(crate) fn server_capability() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
}

/// The id the layer gives the question under `key` of task `task` (its id's
/// text) when it sends it on a `tasks/result` stream: the prefix, the task id,
/// and the key in base64url. It names the task, so it is as unguessable as the
/// task's id; it carries no owner, which the store checks when the answer comes.
pub(crate) fn input_request_id(task: &str, key: &str) -> String {
    let mut id = String::with_capacity(INPUT_ID_PREFIX.len() + task.len() + 1 + key.len() * 2);
    id.push_str(INPUT_ID_PREFIX);
    id.push_str(task);
    id.push('.');
    URL_SAFE_NO_PAD.encode_string(key.as_bytes(), &mut id);
    id
}

/// The task id's text and the input key an id of [`input_request_id`] names;
/// `None` for an id the layer did not mint in that form.
pub(crate) fn read_input_request_id(id: &str) -> Option<(&str, String)> {
    let rest = id.strip_prefix(INPUT_ID_PREFIX)?;
    let (task, key) = rest.split_once('.')?;
    let key = URL_SAFE_NO_PAD.decode(key).ok()?;
    Some((task, String::from_utf8(key).ok()?))
}

/// Where a `tasks/list` page starts, as the client holds it: the position after
/// the last task of the page before, bound to the principal it was given to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) created_ms: u64,
    pub(crate) id: [u8; 32],
    /// [`owner_tag`] of the principal the cursor was given to.
    pub(crate) owner: u64,
}

const CURSOR_VERSION: u8 = 1;
const CURSOR_BYTES: usize = 1 + 8 + 32 + 8;

impl Cursor {
    /// The opaque text handed to the client.
    pub(crate) fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(CURSOR_BYTES);
        bytes.push(CURSOR_VERSION);
        bytes.extend_from_slice(&self.created_ms.to_be_bytes());
        bytes.extend_from_slice(&self.id);
        bytes.extend_from_slice(&self.owner.to_be_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Reads a cursor the client sent back; `-32602` for one the layer did not
    /// write, or wrote for another principal (`owner`).
    pub(crate) fn decode(text: &str, owner: u64) -> Result<Cursor, RpcError> {
        let invalid = || RpcError::invalid_params("Invalid cursor");
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
        if bytes.len() != CURSOR_BYTES || bytes[0] != CURSOR_VERSION {
            return Err(invalid());
        }
        let created_ms = u64::from_be_bytes(bytes[1..9].try_into().map_err(|_| invalid())?);
        let id: [u8; 32] = bytes[9..41].try_into().map_err(|_| invalid())?;
        let tag = u64::from_be_bytes(bytes[41..49].try_into().map_err(|_| invalid())?);
        if tag != owner {
            return Err(invalid());
        }
        Ok(Cursor {
            created_ms,
            id,
            owner: tag,
        })
    }
}

/// A stable 64-bit tag of a principal's name (FNV-1a; `0` for anonymous callers),
/// so that a cursor answers only the principal it was given to. Not a secret: the
/// listing itself is scoped to the caller, the tag only turns another principal's
/// cursor into a clear error.
pub(crate) fn owner_tag(owner: Option<&str>) -> u64 {
    let Some(name) = owner else {
        return 0;
    };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash | 1
}

/// `-32601` for a `tools/call` whose `task` the tool's support refuses: a
/// `required` tool called without one, a `forbidden` tool called with one.
pub(crate) fn task_support_refused(tool_requires: bool) -> RpcError {
    let message = match tool_requires {
        true => "Tool requires task-augmented execution: call it with params.task",
        false => "Tool does not support task-augmented execution",
    };
    RpcError::new(RpcError::METHOD_NOT_FOUND, message, http::StatusCode::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_ids_name_the_task_and_the_key_and_nothing_else_reads_as_one() {
        let id = input_request_id("abc_DEF-123", "r1.confirm/ü");
        assert!(id.starts_with(INPUT_ID_PREFIX));
        let (task, key) = read_input_request_id(&id).unwrap();
        assert_eq!((task, key.as_str()), ("abc_DEF-123", "r1.confirm/ü"));
        for foreign in [
            "",
            "7",
            "mcp-tasks.input.",
            "mcp-tasks.input.abc",
            "mcp-tasks.input.abc.!!",
        ] {
            assert!(read_input_request_id(foreign).is_none(), "{foreign:?}");
        }
    }

    #[test]
    fn cursors_read_back_only_for_their_principal() {
        let alice = owner_tag(Some("alice"));
        let cursor = Cursor {
            created_ms: 1_785_578_400_123,
            id: [7; 32],
            owner: alice,
        };
        let text = cursor.encode();
        assert_eq!(Cursor::decode(&text, alice).unwrap(), cursor);
        assert_ne!(alice, owner_tag(Some("bob")));
        assert_ne!(alice, owner_tag(None));
        let refused = Cursor::decode(&text, owner_tag(Some("bob"))).unwrap_err();
        assert_eq!(refused.code(), RpcError::INVALID_PARAMS);
        for forged in ["", "AAAA", "not base64!", &text[..text.len() - 2]] {
            assert!(Cursor::decode(forged, alice).is_err(), "{forged:?}");
        }
    }

    #[test]
    fn a_task_is_written_in_this_revisions_shape() {
        let task = Task2025 {
            id: b"id",
            status: "working",
            status_message: Some("Half \"done\""),
            created_ms: 0,
            updated_ms: 1_000,
            ttl_ms: None,
            poll_ms: Some(500),
        };
        let mut out = Vec::new();
        task.write_create_result(&mut out);
        let value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            value,
            json!({"task": {"taskId": "id", "status": "working", "statusMessage": "Half \"done\"",
                "createdAt": "1970-01-01T00:00:00.000Z", "lastUpdatedAt": "1970-01-01T00:00:01.000Z",
                "ttl": null, "pollInterval": 500}})
        );
        let mut out = Vec::new();
        write_list_result(&mut out, [task, task], Some("next"));
        let value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["tasks"].as_array().unwrap().len(), 2);
        assert_eq!(value["nextCursor"], "next");
    }
}
