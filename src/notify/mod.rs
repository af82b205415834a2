// The module's page, listen streams and notifiers, lives in its own file.
#![doc = include_str!("docs.md")]

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::task::{Principal, TaskId, TaskRecord};

mod budget;
mod registry;

use registry::Registry;
pub(crate) use registry::{ByteLimit, Reservation, StreamLimit, Subscription};

/// Told about every change to a task, right after the store write, in the process
/// that made it. With a store shared between nodes ([`TaskStore::subscribe`]), a
/// notifier set with [`with_notifier`](crate::TasksLayerBuilder::with_notifier) is
/// also told about every change other nodes made, once this node has re-read it.
/// With the default [`ListenNotifier`] (or none), the layer re-reads only the tasks
/// this node knows: named by one of its listen streams, waited on or worked on by
/// one of its workers, or run by one of its `Auto` runners.
///
/// [`TaskStore::subscribe`]: crate::store::TaskStore::subscribe
///
/// It runs on the writer's path (a request or a worker), so it must return quickly
/// and never block. A panic in it is caught and logged; the write stands. Anything
/// that delivers a change to clients must deliver it only to the record's owner.
///
/// Any `Fn(&TaskRecord) + Send + Sync + 'static` is a notifier; a type can implement
/// it too, e.g. to forward changes to a queue without blocking:
///
/// ```
/// use mcp_tasks::notify::TaskNotifier;
/// use mcp_tasks::store::{Timestamp, Transition};
/// use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskStatus, TasksLayer};
/// use tokio::sync::mpsc;
///
/// /// Sends every finished task to an audit log, dropping changes when the log lags.
/// struct Audit(mpsc::Sender<(TaskId, TaskStatus)>);
///
/// impl TaskNotifier for Audit {
///     fn task_changed(&self, task: &TaskRecord) {
///         if task.status.is_terminal() {
///             let _ = self.0.try_send((task.id, task.status)); // never wait here
///         }
///     }
/// }
///
/// let (sender, mut log) = mpsc::channel(1_024);
/// let audit = Audit(sender);
/// let mut task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
/// task.apply(&Transition::Cancel, Timestamp::now()).unwrap();
/// audit.task_changed(&task);
/// assert_eq!(log.try_recv().unwrap(), (task.id, TaskStatus::Cancelled));
///
/// let layer = TasksLayer::builder(MemoryStore::new()).with_notifier(audit).build();
/// assert!(layer.is_ok());
/// ```
pub trait TaskNotifier: Send + Sync + 'static {
    /// `task` is the record as stored after the change.
    ///
    /// ```
    /// use mcp_tasks::notify::TaskNotifier;
    /// use mcp_tasks::store::Timestamp;
    /// use mcp_tasks::{TaskId, TaskRecord, TaskStatus};
    ///
    /// let notifier = |task: &TaskRecord| assert_eq!(task.status, TaskStatus::Working);
    /// notifier.task_changed(&TaskRecord::new(TaskId::random(), None, Timestamp::now()));
    /// ```
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

impl<T: TaskNotifier + ?Sized> TaskNotifier for Arc<T> {
    fn task_changed(&self, task: &TaskRecord) {
        (**self).task_changed(task)
    }
}

/// The default notifier: sends each change as `notifications/tasks` to the
/// `subscriptions/listen` streams that named the task.
///
/// A stream receives a task only when its principal owns the task (a task made
/// without a principal reaches only unauthenticated streams) and its
/// acknowledgment listed the id. Delivery never waits: the change is left in the
/// stream's slot for that task, replacing any older state the stream has not sent
/// yet, so a slow or stalled client holds at most one pending state per task it
/// named. Each change is serialized once and shared by every stream that names it,
/// and what the streams hold is bounded in bytes, per principal and in total
/// ([`with_max_listen_bytes_per_owner`](crate::TasksLayerBuilder::with_max_listen_bytes_per_owner),
/// [`with_max_listen_bytes`](crate::TasksLayerBuilder::with_max_listen_bytes)): a
/// stream whose next change would pass a bound is ended with the listen result
/// instead. Closing a stream removes it at once.
///
/// Every layer has one, over the registry of that layer's streams; get it from
/// [`TasksLayerBuilder::listen_notifier`](crate::TasksLayerBuilder::listen_notifier).
/// A custom notifier that should keep listen delivery calls it:
///
/// ```
/// use mcp_tasks::notify::TaskNotifier;
/// use mcp_tasks::{MemoryStore, TaskRecord, TasksLayer};
///
/// # fn main() -> Result<(), mcp_tasks::error::ConfigError> {
/// let builder = TasksLayer::builder(MemoryStore::new()).without_janitor();
/// let listen = builder.listen_notifier();
/// let notifier = move |task: &TaskRecord| {
///     listen.task_changed(task); // keep notifications/tasks on listen streams
///     tracing::info!(status = %task.status, "task changed");
/// };
/// let layer = builder.with_notifier(notifier).build()?;
/// # drop(layer);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct ListenNotifier {
    registry: Arc<Registry>,
}

/// What a snapshot read within the listen byte bounds
/// ([`ListenNotifier::read_snapshot`]) came to.
pub(crate) enum SnapshotRead<E> {
    /// The records read, and the room reserved for them: both go to
    /// [`Subscription::snapshot`].
    Read(Vec<TaskRecord>, Reservation),
    /// The records would pass this bound, even once the largest holders paid.
    TooManyBytes(ByteLimit),
    /// The read failed.
    Failed(E),
}

impl ListenNotifier {
    /// Opens a stream for `owner` naming `tasks`, unless the layer holds
    /// `max_total` streams or the principal `max_per_owner` already; it stays until
    /// the subscription is dropped (or closed).
    pub(crate) fn open(
        &self,
        owner: Option<Principal>,
        tasks: &[TaskId],
        max_per_owner: usize,
        max_total: usize,
    ) -> Result<Subscription, StreamLimit> {
        self.registry
            .try_register(owner, tasks, max_per_owner, max_total)
    }

    /// A stream for `owner` naming `tasks`, without any cap.
    #[cfg(test)]
    pub(crate) fn register(&self, owner: Option<Principal>, tasks: &[TaskId]) -> Subscription {
        self.registry.register(owner, tasks)
    }

    /// Reads the snapshot of a new stream of `owner`'s with `read`, given the most
    /// bytes the records may take (`Ok(None)` when they would take more): within
    /// the room its principal's streams have left under both byte bounds, reserved
    /// first. When the layer's total is what leaves too little, room is made as for
    /// a change to open streams: the principal holding the most, if it holds more
    /// than `owner`, pays with its streams, and the read is made again, until it
    /// fits or nobody holding more has a stream left.
    pub(crate) async fn read_snapshot<E, Fut>(
        &self,
        owner: &Option<Principal>,
        mut read: impl FnMut(usize) -> Fut,
    ) -> SnapshotRead<E>
    where
        Fut: Future<Output = Result<Option<Vec<TaskRecord>>, E>>,
    {
        loop {
            let reservation = self.registry.reserve(owner).await;
            match read(reservation.bytes()).await {
                Ok(Some(records)) => return SnapshotRead::Read(records, reservation),
                Ok(None) => {
                    let limit = reservation.limit();
                    drop(reservation);
                    if limit != ByteLimit::Total || !self.registry.make_room(owner) {
                        return SnapshotRead::TooManyBytes(limit);
                    }
                }
                Err(e) => return SnapshotRead::Failed(e),
            }
        }
    }

    /// Whether some open stream names `task`.
    pub(crate) fn names(&self, task: &TaskId) -> bool {
        self.registry.names(task)
    }

    /// The ids some open stream named: what a re-check after missed changes re-reads.
    pub(crate) fn task_ids(&self) -> Vec<TaskId> {
        self.registry.task_ids()
    }

    /// Asks every open stream to end (a server-side shutdown): each writes what it
    /// has pending, then the listen result, then closes.
    pub(crate) fn end_all(&self) {
        self.registry.end_all();
    }

    /// Sets the byte bounds of what the streams hold: per principal, and in all.
    pub(crate) fn set_byte_bounds(&self, per_owner: usize, total: usize) {
        self.registry.set_byte_bounds(per_owner, total);
    }

    /// How many listen streams are open on this layer (each one a client's
    /// `subscriptions/listen` that named task ids), e.g. for a metrics gauge.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// let layer = TasksLayer::new(MemoryStore::new());
    /// assert_eq!(layer.listen_notifier().stream_count(), 0);
    /// ```
    pub fn stream_count(&self) -> usize {
        self.registry.stream_count()
    }

    /// For each open stream, how many task states wait to be written to it: never
    /// more than the number of tasks the stream named. For tests that check a slow
    /// reader holds one state per task (feature `test-util`).
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn pending_counts(&self) -> Vec<usize> {
        self.registry.pending_counts()
    }

    /// The bytes of task notifications this layer's listen streams hold unwritten
    /// now, with the bytes reserved for the snapshots being read, and the most that
    /// has been at once: what
    /// [`with_max_listen_bytes`](crate::TasksLayerBuilder::with_max_listen_bytes)
    /// bounds. For tests and benchmarks of that bound (feature `test-util`).
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn held_bytes(&self) -> (usize, usize) {
        self.registry.held_bytes()
    }
}

impl TaskNotifier for ListenNotifier {
    fn task_changed(&self, task: &TaskRecord) {
        self.registry.deliver(task);
    }
}

impl fmt::Debug for ListenNotifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenNotifier")
            .field("streams", &self.stream_count())
            .finish()
    }
}
