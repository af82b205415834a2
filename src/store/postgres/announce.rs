//! How a [`PostgresStore`](super::PostgresStore) announces its writes to the other
//! nodes: after the write has committed, in batches, one `NOTIFY` statement at a
//! time per store.
//!
//! PostgreSQL serializes the commits of every transaction that notified, database
//! wide, under one lock held until the commit is flushed. A `pg_notify` inside each
//! write would put every write behind that lock; here the writes commit without it,
//! and a background sender announces them: it takes every id written since its last
//! statement and sends them all in one statement (one notification per id, the
//! payload `<node>:<task id>` the listeners read), so the lock is taken once per
//! batch, and a batch is whatever was written while the previous one was sent.
//!
//! Bound: a write is announced by the statement that follows its commit, so it waits
//! at most for the statement in flight and its own (a round trip each). While
//! PostgreSQL refuses the statement, the ids are kept and sent again after a
//! backoff of 10 ms doubling to 1 s (the layer's one backoff, with its jitter);
//! none is dropped. A process that stops between a commit and its announcement
//! leaves that write unannounced: the change log
//! still holds it, and every listener delivers it within two of its checkpoint
//! ticks (10 s), as it delivers each tick's log entries again one tick late.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::SqlStr;
use sqlx::postgres::PgPool;
use tokio::sync::Notify;

use super::statements::one;
use crate::backoff::Backoff;
use crate::store::feed::relay::encode;
use crate::store::lease::NodeId;
use crate::task::TaskId;

/// The most ids one statement carries; a larger backlog takes several.
const MAX_BATCH: usize = 1_000;
/// Pauses between attempts while PostgreSQL refuses the statement.
const RETRY: Backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));

/// The store's side: queues ids and wakes the sender. Dropping it stops the sender
/// once what is queued has been sent (or could not be).
pub(super) struct Announcer {
    shared: Arc<Shared>,
    started: AtomicBool,
}

struct Shared {
    pending: Mutex<Vec<TaskId>>,
    wake: Notify,
    closed: AtomicBool,
    pool: PgPool,
    channel: String,
    node: NodeId,
    statement: SqlStr,
}

impl Announcer {
    pub(super) fn new(pool: PgPool, channel: String, node: NodeId) -> Self {
        Announcer {
            shared: Arc::new(Shared {
                pending: Mutex::new(Vec::new()),
                wake: Notify::new(),
                closed: AtomicBool::new(false),
                pool,
                channel,
                node,
                statement: one(include_str!("sql/announce.sql"), ""),
            }),
            started: AtomicBool::new(false),
        }
    }

    /// Queues the announcement of a committed write of `id`.
    pub(super) fn announce(&self, id: TaskId) {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
        if !self.started.swap(true, Ordering::AcqRel) {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(self.shared.clone().run());
                }
                Err(_) => {
                    self.started.store(false, Ordering::Release);
                    tracing::warn!(
                        "mcp-tasks: no tokio runtime to announce PostgreSQL writes on; other nodes learn them at their next replay"
                    );
                    return;
                }
            }
        }
        self.shared.wake.notify_one();
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

impl Shared {
    async fn run(self: Arc<Self>) {
        let mut retry = RETRY;
        loop {
            let batch = self.take();
            if batch.is_empty() {
                if self.closed.load(Ordering::Acquire) {
                    return;
                }
                self.wake.notified().await;
                continue;
            }
            match self.send(&batch).await {
                Ok(()) => retry.reset(),
                Err(e) => {
                    let pause = retry.next_delay();
                    tracing::warn!(
                        error = %e,
                        retry_in_ms = pause.as_millis() as u64,
                        "mcp-tasks: could not announce PostgreSQL writes; retrying"
                    );
                    if self.closed.load(Ordering::Acquire) {
                        return;
                    }
                    self.give_back(batch);
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Up to [`MAX_BATCH`] queued ids, each once.
    fn take(&self) -> Vec<TaskId> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch = if pending.len() <= MAX_BATCH {
            std::mem::take(&mut *pending)
        } else {
            pending.drain(..MAX_BATCH).collect()
        };
        drop(pending);
        batch.sort_unstable();
        batch.dedup();
        batch
    }

    /// Puts a batch that could not be sent back in front of the queue.
    fn give_back(&self, mut batch: Vec<TaskId>) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        batch.append(&mut pending);
        *pending = batch;
    }

    async fn send(&self, batch: &[TaskId]) -> Result<(), sqlx::Error> {
        let payloads: Vec<String> = batch.iter().map(|id| encode(&self.node, id)).collect();
        sqlx::query(self.statement.clone())
            .bind(self.channel.as_str())
            .bind(payloads)
            .execute(&self.pool)
            .await
            .map(|_| ())
    }
}
