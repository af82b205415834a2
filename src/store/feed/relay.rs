//! The one change relay of the shared stores: it keeps a connection to the
//! store's change log, forwards the tasks other nodes changed into the store's
//! [`ChangeSender`], and after every reconnect replays the log from its checkpoint
//! (or reports [`FeedEvent::Missed`](super::FeedEvent::Missed) when the log was
//! pruned past it). A backend supplies only its I/O, as a [`ChangeLog`].
//!
//! Every announcement carries the payload `<node>:<task id>` ([`encode`]); the
//! relay skips its own node's ([`decode`]), since a node already knows what it
//! wrote.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::ChangeSender;
use crate::backoff::Backoff;
use crate::error::StoreError;
use crate::store::lease::NodeId;
use crate::task::TaskId;

/// First and last pause between attempts to reconnect.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// One backend's change log, as the relay reads it: its I/O and nothing else.
pub(crate) trait ChangeLog: Send + Sync + 'static {
    /// The connection the relay listens and reads on.
    type Conn: Send;
    /// A place in the log; a later entry has a greater one.
    type Position: Copy + Ord + Send + Sync + 'static;
    /// What a failed connection or read reports.
    type Error: fmt::Display + Send;
    /// The store, as the relay's logs name it.
    const STORE: &'static str;
    /// How often the relay reads the log again behind the live announcements, one
    /// period late (a write whose node stopped before announcing it is delivered
    /// within two); `None`: never.
    const RECHECK: Option<Duration>;

    /// A new connection, listening.
    fn connect(&self) -> impl Future<Output = Result<Self::Conn, Self::Error>> + Send;

    /// The newest position in the log.
    fn head<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
    ) -> impl Future<Output = Result<Self::Position, Self::Error>> + Send + 'a;

    /// Whether entries after `position` may have been pruned from the log.
    fn lost_since<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        position: Self::Position,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send + 'a;

    /// The next entries after `from`, oldest first, each with its position.
    fn replay<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        from: Self::Position,
    ) -> impl Future<Output = Result<Batch<Self::Position>, Self::Error>> + Send + 'a;

    /// Waits for the next live changes after `after`.
    fn next<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        after: Self::Position,
    ) -> impl Future<Output = Result<Live<Self::Position>, Self::Error>> + Send + 'a;
}

/// One entry of a change log, or one live announcement.
pub(crate) struct Change<P> {
    /// Its place in the log; `None` for an announcement outside it.
    pub(crate) position: Option<P>,
    pub(crate) payload: Payload,
}

/// One read of a change log.
pub(crate) struct Batch<P> {
    /// The entries read, oldest first.
    pub(crate) changes: Vec<Change<P>>,
    /// Whether the read took as many as it may: more may follow.
    pub(crate) full: bool,
}

/// What a [`Change`] says.
pub(crate) enum Payload {
    /// An announcement, `<node>:<task id>`: delivered unless this node wrote it.
    Announced(Vec<u8>),
    /// A logged write whose node the log does not know: always delivered (a re-read
    /// of one's own write changes nothing).
    Logged(TaskId),
    /// An entry the relay cannot read: skipped.
    Unreadable,
}

/// What waiting on a live connection gave.
pub(crate) enum Live<P> {
    /// Changes, oldest first.
    Changes(Vec<Change<P>>),
    /// The connection reconnected by itself and listens again: replay what was
    /// written in between.
    Resumed,
}

/// The payload announcing that `node` wrote `id`.
pub(crate) fn encode(node: &NodeId, id: &TaskId) -> String {
    format!("{node}:{id}")
}

/// The task of an announcement from another node than `own`; `None` for this
/// node's own writes and for anything malformed. The task id holds no `:`, so a
/// node id may.
pub(crate) fn decode(payload: &[u8], own: &NodeId) -> Option<TaskId> {
    let text = std::str::from_utf8(payload).ok()?;
    let (node, id) = text.rsplit_once(':')?;
    if node == own.as_str() {
        return None;
    }
    id.parse().ok()
}

/// Log positions the relay has reached.
#[derive(Clone, Copy)]
struct Checkpoint<P> {
    /// Where a replay starts: every change after it may not have been delivered
    /// yet. With [`ChangeLog::RECHECK`], one period old.
    replay_from: P,
    /// The newest position read.
    latest: P,
}

/// Waits until the relay behind `ready` is connected and caught up: what a shared
/// store's `listen` awaits, so that no change made after it returns goes unheard.
pub(crate) async fn until_ready(mut ready: watch::Receiver<bool>) -> Result<(), StoreError> {
    ready
        .wait_for(|reading| *reading)
        .await
        .map(|_| ())
        .map_err(|_| StoreError::backend(RelayStopped))
}

/// The relay ended before it was ready (its task panicked, or its store is gone).
#[derive(Debug)]
struct RelayStopped;

impl fmt::Display for RelayStopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the change listener stopped")
    }
}

impl std::error::Error for RelayStopped {}

/// The background task of one store instance's change feed.
pub(crate) struct Relay<L: ChangeLog> {
    log: L,
    node: NodeId,
    sender: ChangeSender,
    ready: watch::Sender<bool>,
    /// `None` until the first connection.
    checkpoint: Option<Checkpoint<L::Position>>,
}

impl<L: ChangeLog> Relay<L> {
    /// A relay of `log` into `sender`, skipping `node`'s own announcements;
    /// `ready` is true while it is connected and caught up.
    pub(crate) fn new(
        log: L,
        node: NodeId,
        sender: ChangeSender,
        ready: watch::Sender<bool>,
    ) -> Self {
        Relay {
            log,
            node,
            sender,
            ready,
            checkpoint: None,
        }
    }

    /// Relays until `stop` fires (or its sender is dropped), on `first` if given,
    /// then on new connections, with backoff between failed ones.
    pub(crate) async fn run(mut self, mut first: Option<L::Conn>, mut stop: oneshot::Receiver<()>) {
        let mut backoff = Backoff::new(RECONNECT_MIN, RECONNECT_MAX);
        loop {
            let connected = match first.take() {
                Some(conn) => Ok(conn),
                None => tokio::select! {
                    _ = &mut stop => return,
                    connected = self.log.connect() => connected,
                },
            };
            let error = match connected {
                Ok(conn) => {
                    let error = tokio::select! {
                        _ = &mut stop => return,
                        error = self.serve(conn, &mut backoff) => error,
                    };
                    self.ready.send_replace(false);
                    error
                }
                Err(e) => e,
            };
            let delay = backoff.next_delay();
            tracing::warn!(
                store = L::STORE,
                error = %error,
                retry_in_ms = delay.as_millis() as u64,
                "mcp-tasks: the change feed failed; reconnecting"
            );
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Serves one connection: catches up, then forwards changes (and reads the
    /// log again every [`ChangeLog::RECHECK`]) until the connection fails.
    async fn serve(&mut self, mut conn: L::Conn, backoff: &mut Backoff) -> L::Error {
        if let Err(e) = self.catch_up(&mut conn).await {
            return e;
        }
        self.ready.send_replace(true);
        backoff.reset();
        let mut recheck = L::RECHECK.map(|period| {
            let mut timer = tokio::time::interval(period);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            timer
        });
        if let Some(timer) = &mut recheck {
            timer.tick().await;
        }
        loop {
            let after = match self.checkpoint {
                Some(checkpoint) => checkpoint.latest,
                None => match self.log.head(&mut conn).await {
                    Ok(head) => head,
                    Err(e) => return e,
                },
            };
            tokio::select! {
                next = self.log.next(&mut conn, after) => match next {
                    Ok(Live::Changes(changes)) => {
                        for change in changes {
                            self.deliver(change.payload);
                            if let Some(position) = change.position {
                                self.checkpoint = Some(Checkpoint {
                                    replay_from: position,
                                    latest: position,
                                });
                            }
                        }
                    }
                    Ok(Live::Resumed) => {
                        tracing::warn!(
                            store = L::STORE,
                            "mcp-tasks: the change feed's connection came back; replaying the change log"
                        );
                        if let Err(e) = self.catch_up(&mut conn).await {
                            return e;
                        }
                    }
                    Err(e) => return e,
                },
                () = tick(&mut recheck) => {
                    if let Err(e) = self.recheck(&mut conn).await {
                        return e;
                    }
                }
            }
        }
    }

    /// On the first connection, notes the head of the log; on the next ones,
    /// delivers every change after the checkpoint, or reports missed changes
    /// first when the log was pruned past it.
    async fn catch_up(&mut self, conn: &mut L::Conn) -> Result<(), L::Error> {
        let Some(checkpoint) = self.checkpoint else {
            let head = self.log.head(conn).await?;
            self.checkpoint = Some(Checkpoint {
                replay_from: head,
                latest: head,
            });
            return Ok(());
        };
        if self.log.lost_since(conn, checkpoint.replay_from).await? {
            tracing::warn!(
                store = L::STORE,
                "mcp-tasks: the change log was pruned past this listener's checkpoint; reporting missed changes"
            );
            self.sender.missed();
        }
        let last = self.replay(conn, checkpoint.replay_from, None).await?;
        self.checkpoint = Some(Checkpoint {
            replay_from: last,
            latest: last,
        });
        Ok(())
    }

    /// Delivers again what was logged in the period before the last (its writer,
    /// if it lived, has announced it by now), and moves the checkpoint on.
    async fn recheck(&mut self, conn: &mut L::Conn) -> Result<(), L::Error> {
        let head = self.log.head(conn).await?;
        if let Some(checkpoint) = self.checkpoint {
            self.replay(conn, checkpoint.replay_from, Some(checkpoint.latest))
                .await?;
            self.checkpoint = Some(Checkpoint {
                replay_from: checkpoint.latest,
                latest: head,
            });
        }
        Ok(())
    }

    /// Delivers every logged change after `from`, up to `until` when given.
    /// Returns the last position read (`from` when none was).
    async fn replay(
        &self,
        conn: &mut L::Conn,
        mut from: L::Position,
        until: Option<L::Position>,
    ) -> Result<L::Position, L::Error> {
        let mut replayed = 0usize;
        loop {
            let Batch { changes, full } = self.log.replay(conn, from).await?;
            let mut past_end = false;
            for change in changes {
                let Some(position) = change.position else {
                    continue;
                };
                if until.is_some_and(|until| position > until) {
                    past_end = true;
                    break;
                }
                if self.deliver(change.payload) {
                    replayed += 1;
                }
                from = position;
            }
            if !full || past_end {
                break;
            }
        }
        tracing::debug!(
            store = L::STORE,
            replayed,
            "mcp-tasks: replayed the change log"
        );
        Ok(from)
    }

    /// Sends the task of one change, unless this node wrote it; whether one was
    /// sent. No receiver right now is fine: nobody is waiting.
    fn deliver(&self, payload: Payload) -> bool {
        let id = match payload {
            Payload::Logged(id) => id,
            Payload::Announced(bytes) => match decode(&bytes, &self.node) {
                Some(id) => id,
                None => return false,
            },
            Payload::Unreadable => {
                tracing::debug!("mcp-tasks: ignored a malformed change announcement");
                return false;
            }
        };
        self.sender.send(id);
        true
    }
}

/// The next tick of `timer`; never without one.
async fn tick(timer: &mut Option<tokio::time::Interval>) {
    match timer {
        Some(timer) => {
            timer.tick().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_from_this_node_and_garbage_are_skipped() {
        let (own, other) = (NodeId::new("aaaa").unwrap(), NodeId::new("bbbb").unwrap());
        let id = TaskId::random();
        assert_eq!(decode(encode(&other, &id).as_bytes(), &own), Some(id));
        assert_eq!(decode(encode(&own, &id).as_bytes(), &own), None);
        for bad in [&b"no separator"[..], b"bbbb:not-an-id", b"\xff\xfe:x"] {
            assert_eq!(decode(bad, &own), None);
        }
        // The format other versions read and write: `<node>:<task id>`.
        assert_eq!(encode(&other, &id), format!("bbbb:{id}"));
        let random = NodeId::random();
        assert_eq!(decode(encode(&random, &id).as_bytes(), &own), Some(id));
        assert_ne!(NodeId::random(), random);
    }
}
