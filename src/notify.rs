//! Change notifications: a hook that runs right after each store write.

use crate::task::TaskRecord;

/// Told about every change to a task, right after the store write, in the process
/// that made it.
///
/// It runs on the writer's path (a request or a worker), so it must return quickly
/// and never block. A panic in it is caught and logged; the write stands. Anything
/// that delivers a change to clients must deliver it only to the record's owner.
pub trait TaskNotifier: Send + Sync + 'static {
    /// `task` is the record as stored after the change.
    fn task_changed(&self, task: &TaskRecord);
}

impl<F> TaskNotifier for F
where
    F: Fn(&TaskRecord) + Send + Sync + 'static,
{
    fn task_changed(&self, task: &TaskRecord) {
        self(task)
    }
}
