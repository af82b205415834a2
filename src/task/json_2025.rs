//! A record in the 2025-11-25 shape: the view [`Task2025`] the wire writes, with the
//! status as that revision names it.

use serde_json::Value;

use super::{TaskRecord, TaskStatus};
use crate::wire::v2025::Task2025;

/// The status a 2025-11-25 client reads: that revision counts a tool error (a
/// completed `CallToolResult` with `isError: true`) as a failed task.
pub(crate) fn status_2025(task: &TaskRecord) -> &'static str {
    let tool_error = task.status == TaskStatus::Completed
        && task
            .result
            .as_ref()
            .and_then(|r| r.get("isError"))
            .and_then(Value::as_bool)
            == Some(true);
    match tool_error {
        true => TaskStatus::Failed.as_str(),
        false => task.status.as_str(),
    }
}

/// A record in the 2025-11-25 shape. The id's text lives in `id`, which the
/// caller keeps.
pub(crate) fn task_2025_with<'a>(task: &'a TaskRecord, id: &'a [u8]) -> Task2025<'a> {
    Task2025 {
        id,
        status: status_2025(task),
        status_message: task.status_message.as_deref(),
        created_ms: task.created_at.as_millis(),
        updated_ms: task.updated_at.as_millis(),
        ttl_ms: task.ttl_ms,
        poll_ms: task.poll_interval_ms,
    }
}

/// [`task_2025_with`], keeping the id's text itself.
pub(crate) struct Owned2025<'a> {
    task: &'a TaskRecord,
    id: [u8; super::TaskId::LEN],
}

impl Owned2025<'_> {
    pub(crate) fn view(&self) -> Task2025<'_> {
        task_2025_with(self.task, &self.id)
    }

    pub(crate) fn write_create_result(&self, out: &mut Vec<u8>) {
        self.view().write_create_result(out);
    }
}

/// A record in the 2025-11-25 shape.
pub(crate) fn task_2025(task: &TaskRecord) -> Owned2025<'_> {
    Owned2025 {
        task,
        id: task.id.encode(),
    }
}
