//! The change feed of one store instance: `listen`, which starts it, and the I/O
//! the one feed relay (`store/feed/relay.rs`) runs it with: `LISTEN` on the store's
//! channel, and the change log, replayed after every reconnect and re-read every
//! checkpoint tick.

use std::sync::MutexGuard;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{oneshot, watch};

use super::statements::LogStatements;
use super::{Feed, PostgresStore, probe, shown_url};
use crate::error::StoreError;
use crate::store::connect::ConnectError;
use crate::store::feed::relay::{Batch, Change, ChangeLog, Live, Payload, Relay, until_ready};
use crate::store::{ChangeSender, FEED_CAPACITY};
use crate::task::TaskId;

/// How often a listener notes how far the change log has come: after a reconnect it
/// replays the log from the position noted one tick before the last. Each tick also
/// delivers again what was logged in the tick before the last, so a write whose node
/// died between its commit and its announcement is heard within two ticks.
const FEED_CHECKPOINT: Duration = Duration::from_secs(5);
/// Entries one catch-up query reads.
const CATCH_UP_BATCH: i64 = 1_000;
/// The longest a change-log query on the listener's connection may take; past it
/// the connection counts as dead (the checkpoint query doubles as its liveness
/// check).
const LOG_QUERY_TIMEOUT: Duration = Duration::from_secs(10);

impl PostgresStore {
    /// Starts the listener for other nodes' changes, if it is not running, and waits
    /// until it listens.
    ///
    /// [`TaskStore::subscribe`](crate::store::TaskStore::subscribe) starts the listener too, but cannot wait for it: a
    /// change made in the instant before the `LISTEN` took effect is not announced.
    /// Call this once at startup, before building the layer, to close that gap; an
    /// unreachable database fails here, naming the server (password hidden), within
    /// [`CONNECT_TIMEOUT`](crate::defaults::CONNECT_TIMEOUT), instead of in the
    /// background. If the listener
    /// was started already and is reconnecting, this waits until it is back.
    ///
    /// ```no_run
    /// use mcp_tasks::{PostgresStore, TasksLayer};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// store.migrate().await?;
    /// store.listen().await?; // other nodes' changes reach this node from now on
    /// let layer = TasksLayer::new(store);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn listen(&self) -> Result<(), StoreError> {
        let running = self.lock_feed().as_ref().map(|feed| feed.ready.clone());
        let ready = match running {
            Some(ready) => ready,
            None => {
                let runtime = tokio::runtime::Handle::try_current().map_err(StoreError::backend)?;
                let options = self.listen_options();
                let shown = shown_url(&options, false);
                probe(&options, &shown, crate::defaults::CONNECT_TIMEOUT).await?;
                let listener = connect_listener(&options, &self.inner.channel)
                    .await
                    .map_err(|e| ConnectError::failed(shown, e))?;
                let mut feed = self.lock_feed();
                match &*feed {
                    // Another caller won the race; its listener serves both.
                    Some(running) => running.ready.clone(),
                    None => {
                        let started = self.start_feed(&runtime, Some(listener));
                        let ready = started.ready.clone();
                        *feed = Some(started);
                        ready
                    }
                }
            }
        };
        until_ready(ready).await
    }

    pub(super) fn lock_feed(&self) -> MutexGuard<'_, Option<Feed>> {
        // The guarded value is replaced whole; a panic elsewhere cannot leave it torn.
        self.inner
            .feed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn listen_options(&self) -> PgConnectOptions {
        (*self.inner.pool.connect_options())
            .clone()
            .application_name(&self.feed_connection_name())
    }

    pub(super) fn start_feed(
        &self,
        runtime: &tokio::runtime::Handle,
        first: Option<PgListener>,
    ) -> Feed {
        // Once per store: a node on another table (or database) sees none of these
        // tasks, and answers "not found" for them without any other sign.
        tracing::info!(
            server = %shown_url(&self.inner.pool.connect_options(), false),
            table = %self.inner.table,
            "mcp-tasks: PostgreSQL store; nodes share tasks only on the same table"
        );
        let sender = ChangeSender::new(FEED_CAPACITY);
        let (ready_tx, ready) = watch::channel(false);
        let (stop, stopped) = oneshot::channel();
        let log = ChangeLogTable {
            options: self.listen_options(),
            channel: self.inner.channel.clone(),
            sql: LogStatements::new(&self.inner.table),
        };
        let relay = Relay::new(log, self.inner.node.clone(), sender.clone(), ready_tx);
        runtime.spawn(relay.run(first, stopped));
        Feed {
            sender,
            ready,
            _stop: stop,
        }
    }
}

/// The change log of one table as the relay reads it: `NOTIFY` on the channel,
/// the log table `<table>_feed` behind it.
struct ChangeLogTable {
    options: PgConnectOptions,
    channel: String,
    sql: LogStatements,
}

impl ChangeLog for ChangeLogTable {
    type Conn = PgListener;
    type Position = i64;
    type Error = sqlx::Error;
    const STORE: &'static str = "postgres";
    const RECHECK: Option<Duration> = Some(FEED_CHECKPOINT);

    async fn connect(&self) -> Result<PgListener, sqlx::Error> {
        connect_listener(&self.options, &self.channel).await
    }

    async fn head(&self, listener: &mut PgListener) -> Result<i64, sqlx::Error> {
        head(listener, &self.sql).await
    }

    async fn lost_since(&self, listener: &mut PgListener, from: i64) -> Result<bool, sqlx::Error> {
        let oldest: Option<i64> =
            bounded(sqlx::query_scalar(self.sql.oldest.clone()).fetch_one(&mut *listener)).await?;
        Ok(match oldest {
            Some(oldest) => oldest > from.saturating_add(1),
            None => from > 0,
        })
    }

    async fn replay(
        &self,
        listener: &mut PgListener,
        from: i64,
    ) -> Result<Batch<i64>, sqlx::Error> {
        let rows: Vec<(i64, Vec<u8>)> = bounded(
            sqlx::query_as(self.sql.since.clone())
                .bind(from)
                .bind(CATCH_UP_BATCH)
                .fetch_all(&mut *listener),
        )
        .await?;
        let full = rows.len() as i64 >= CATCH_UP_BATCH;
        let changes = rows
            .into_iter()
            .map(|(seq, id)| Change {
                position: Some(seq),
                payload: match <[u8; 32]>::try_from(id.as_slice()) {
                    Ok(bytes) => Payload::Logged(TaskId::from_bytes(bytes)),
                    Err(_) => Payload::Unreadable,
                },
            })
            .collect();
        Ok(Batch { changes, full })
    }

    async fn next(&self, listener: &mut PgListener, _after: i64) -> Result<Live<i64>, sqlx::Error> {
        Ok(match listener.try_recv().await? {
            Some(notification) => Live::Changes(vec![Change {
                position: None,
                payload: Payload::Announced(notification.payload().as_bytes().to_vec()),
            }]),
            // sqlx reconnected and listens again.
            None => Live::Resumed,
        })
    }
}

/// The newest position in the change log (0 when it is empty).
async fn head(listener: &mut PgListener, log: &LogStatements) -> Result<i64, sqlx::Error> {
    bounded(sqlx::query_scalar(log.head.clone()).fetch_one(&mut *listener)).await
}

/// A change-log query, or an I/O error once [`LOG_QUERY_TIMEOUT`] has passed.
async fn bounded<T>(
    query: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    match tokio::time::timeout(LOG_QUERY_TIMEOUT, query).await {
        Ok(result) => result,
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the change listener's connection stopped answering",
        ))),
    }
}

/// A listener on its own single-connection pool, so it never takes a connection the
/// store's queries need.
async fn connect_listener(
    options: &PgConnectOptions,
    channel: &str,
) -> Result<PgListener, sqlx::Error> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(LOG_QUERY_TIMEOUT)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options.clone());
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.ignore_pool_close_event(true);
    listener.listen(channel).await?;
    Ok(listener)
}
