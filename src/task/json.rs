//! The JSON of a task as the wire carries it: [`TaskJson`], written straight from
//! the record, and the record's `to_*_json` maps built from it.

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use super::time::{RFC3339_LEN, write_rfc3339};
use super::{ErrorObject, Rfc3339, TaskRecord, TaskStatus};
use crate::wire::{RpcError, write_value};

impl TaskRecord {
    /// The DetailedTask JSON of this record: what `tasks/get` returns (without
    /// `resultType`) and what `notifications/tasks` carries.
    ///
    /// `ttlMs` is always present (`null` when unlimited); every other absent field is
    /// left out, never `null`.
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    /// use mcp_tasks::{TaskId, TaskRecord};
    ///
    /// let task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    /// let json = task.to_detailed_json();
    /// assert!(json["ttlMs"].is_null());
    /// assert!(!json.contains_key("statusMessage") && !json.contains_key("result"));
    /// ```
    pub fn to_detailed_json(&self) -> Map<String, Value> {
        TaskJson::detailed(self).to_map()
    }

    /// [`to_detailed_json`](Self::to_detailed_json) for a record the caller no longer
    /// needs.
    ///
    /// ```
    /// use mcp_tasks::store::{Timestamp, Transition};
    /// use mcp_tasks::{TaskId, TaskRecord};
    /// use serde_json::json;
    ///
    /// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    /// let done = Transition::Complete { result: json!({"content": []}), message: None };
    /// task.apply(&done, Timestamp::now()).unwrap();
    /// let json = task.into_detailed_json();
    /// assert_eq!(json["status"], "completed");
    /// assert_eq!(json["result"], json!({"content": []}));
    /// ```
    pub fn into_detailed_json(self) -> Map<String, Value> {
        self.to_detailed_json()
    }

    /// The task fields common to every status: the body of a `CreateTaskResult`
    /// (without `resultType`).
    ///
    /// ```
    /// use mcp_tasks::store::Timestamp;
    /// use mcp_tasks::{TaskId, TaskRecord};
    ///
    /// let id = TaskId::random();
    /// let json = TaskRecord::new(id, None, Timestamp::from_millis(0)).to_summary_json();
    /// assert_eq!(json["taskId"], id.to_string());
    /// assert_eq!(json["createdAt"], "1970-01-01T00:00:00.000Z");
    /// for key in ["status", "lastUpdatedAt", "ttlMs"] {
    ///     assert!(json.contains_key(key));
    /// }
    /// ```
    pub fn to_summary_json(&self) -> Map<String, Value> {
        TaskJson::summary(self).to_map()
    }
}

/// The JSON of a task, serialized straight from the record: the one definition of
/// which fields a `CreateTaskResult`, a `tasks/get` result and a
/// `notifications/tasks` carry. Writing it needs no intermediate map or string.
///
/// `ttlMs` is always present (`null` when unlimited); every other absent field is
/// left out, never `null`.
#[derive(Clone, Copy)]
pub(crate) struct TaskJson<'a> {
    task: &'a TaskRecord,
    /// With the status's detail: `inputRequests`, `result` or `error`.
    detailed: bool,
    /// `resultType`, first, when the JSON is a whole result.
    result_type: Option<&'static str>,
    /// `_meta` with the server's info, when the JSON is a whole result.
    server_info: Option<&'a Value>,
}

impl<'a> TaskJson<'a> {
    pub(crate) fn summary(task: &'a TaskRecord) -> Self {
        TaskJson {
            task,
            detailed: false,
            result_type: None,
            server_info: None,
        }
    }

    pub(crate) fn detailed(task: &'a TaskRecord) -> Self {
        TaskJson {
            detailed: true,
            ..TaskJson::summary(task)
        }
    }

    /// As a whole result: `resultType` first and `_meta` with `server_info`, if any.
    pub(crate) fn as_result(
        self,
        result_type: &'static str,
        server_info: Option<&'a Value>,
    ) -> Self {
        TaskJson {
            result_type: Some(result_type),
            server_info,
            ..self
        }
    }

    fn to_map(self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("a task serializes as an object with string keys"),
        }
    }
}

impl TaskJson<'_> {
    /// Writes the same JSON as serializing `self` with serde_json, byte for byte,
    /// straight into `out`: the fixed keys as literal bytes, the id, status and
    /// timestamps without formatting machinery; only the free-form values
    /// (`statusMessage`, `inputRequests`, `result`, `error`, `_meta`) go through
    /// serde_json's writer.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        let task = self.task;
        out.push(b'{');
        if let Some(result_type) = self.result_type {
            out.extend_from_slice(b"\"resultType\":");
            write_value(out, result_type);
            out.push(b',');
        }
        out.extend_from_slice(b"\"taskId\":\"");
        out.extend_from_slice(&task.id.encode());
        out.extend_from_slice(b"\",\"status\":\"");
        out.extend_from_slice(task.status.as_str().as_bytes());
        out.push(b'"');
        if let Some(message) = &task.status_message {
            out.extend_from_slice(b",\"statusMessage\":");
            write_value(out, message);
        }
        out.extend_from_slice(b",\"createdAt\":\"");
        let created = out.len();
        write_rfc3339(out, task.created_at);
        out.extend_from_slice(b"\",\"lastUpdatedAt\":\"");
        if task.updated_at == task.created_at {
            // A task that never changed: the same text again.
            out.extend_from_within(created..created + RFC3339_LEN);
        } else {
            write_rfc3339(out, task.updated_at);
        }
        out.extend_from_slice(b"\",\"ttlMs\":");
        write_value(out, &task.ttl_ms);
        if let Some(poll) = task.poll_interval_ms {
            out.extend_from_slice(b",\"pollIntervalMs\":");
            write_value(out, &poll);
        }
        if self.detailed {
            match task.status {
                TaskStatus::InputRequired => {
                    out.extend_from_slice(b",\"inputRequests\":");
                    write_value(out, &task.input_requests);
                }
                TaskStatus::Completed => {
                    if let Some(result) = &task.result {
                        out.extend_from_slice(b",\"result\":");
                        write_value(out, result);
                    }
                }
                TaskStatus::Failed => {
                    out.extend_from_slice(b",\"error\":");
                    match &task.error {
                        Some(error) => write_value(out, error),
                        None => write_value(
                            out,
                            &ErrorObject::new(RpcError::INTERNAL_ERROR, "Task failed"),
                        ),
                    }
                }
                TaskStatus::Working | TaskStatus::Cancelled => {}
            }
        }
        if let Some(info) = self.server_info {
            out.extend_from_slice(b",\"_meta\":");
            write_value(out, &crate::wire::ServerInfoMeta(info));
        }
        out.push(b'}');
    }
}

/// Serializes through `Display`, with no intermediate string.
struct Displayed<T>(T);

impl<T: fmt::Display> Serialize for Displayed<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl Serialize for TaskJson<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let task = self.task;
        let mut map = serializer.serialize_map(None)?;
        if let Some(result_type) = self.result_type {
            map.serialize_entry("resultType", result_type)?;
        }
        map.serialize_entry("taskId", &Displayed(task.id))?;
        map.serialize_entry("status", task.status.as_str())?;
        if let Some(message) = &task.status_message {
            map.serialize_entry("statusMessage", message)?;
        }
        map.serialize_entry("createdAt", &Displayed(Rfc3339(task.created_at)))?;
        map.serialize_entry("lastUpdatedAt", &Displayed(Rfc3339(task.updated_at)))?;
        map.serialize_entry("ttlMs", &task.ttl_ms)?;
        if let Some(poll) = task.poll_interval_ms {
            map.serialize_entry("pollIntervalMs", &poll)?;
        }
        if self.detailed {
            match task.status {
                TaskStatus::InputRequired => {
                    map.serialize_entry("inputRequests", &task.input_requests)?;
                }
                TaskStatus::Completed => {
                    if let Some(result) = &task.result {
                        map.serialize_entry("result", result)?;
                    }
                }
                TaskStatus::Failed => match &task.error {
                    Some(error) => map.serialize_entry("error", error)?,
                    None => map.serialize_entry(
                        "error",
                        &ErrorObject::new(RpcError::INTERNAL_ERROR, "Task failed"),
                    )?,
                },
                TaskStatus::Working | TaskStatus::Cancelled => {}
            }
        }
        if let Some(info) = self.server_info {
            map.serialize_entry("_meta", &crate::wire::ServerInfoMeta(info))?;
        }
        map.end()
    }
}
