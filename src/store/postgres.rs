//! `PostgresStore`: task records in one PostgreSQL table, shared between nodes, with
//! changes announced through `LISTEN`/`NOTIFY`.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{Row, SqlStr};
use tokio::sync::{oneshot, watch};

use super::LeaseStore;
use super::postgres_leases::{LeaseStatements, PgLeases, sql};
use super::rules::{CompareAndSwap, Written, compare_and_swap, node_id};
use super::{
    BoxFuture, ChangeFeed, ChangeSender, CreateLimits, FEED_CAPACITY, TaskStore, Updated,
    retention_cutoff,
};
use crate::error::{ConfigError, Limit, StoreError};
use crate::task::{Scope, TaskId, TaskRecord, Timestamp, Transition};

/// Longest accepted table name, so that the derived index and channel names stay
/// within PostgreSQL's 63-byte identifier limit.
const MAX_TABLE_LEN: usize = 48;
/// First and last pause between attempts to reconnect the listener.
const LISTEN_BACKOFF_MIN: Duration = Duration::from_millis(100);
const LISTEN_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// How often a listener notes how far the change log has come: after a reconnect it
/// replays the log from the position noted one tick before the last.
const FEED_CHECKPOINT: Duration = Duration::from_secs(5);
/// How long the change log keeps an entry; a listener away longer than this
/// reports [`FeedEvent::Missed`](super::FeedEvent::Missed).
const FEED_RETENTION: Duration = Duration::from_secs(600);
/// Entries one catch-up query reads.
const CATCH_UP_BATCH: i64 = 1_000;
/// The longest a change-log query on the listener's connection may take; past it
/// the connection counts as dead (the checkpoint query doubles as its liveness
/// check).
const LOG_QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// A durable store for several nodes: task records live in one PostgreSQL table, and
/// every write is announced to the other nodes with `NOTIFY`.
///
/// # Setup
///
/// ```no_run
/// use mcp_tasks::{PostgresStore, TasksLayer};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://app@db.internal/app")
///     .await?
///     .with_table("mcp_tasks")?;
/// // Once at startup, on every node: idempotent.
/// store.migrate().await?;
/// // Optional: start listening for other nodes' changes before serving.
/// store.listen().await?;
/// let layer = TasksLayer::new(store);
/// # let _ = layer;
/// # Ok(())
/// # }
/// # fn main() {}
/// ```
///
/// [`migrate`](Self::migrate) creates the table and its indexes if they do not exist
/// yet; the store never creates them on its own. The table (default `mcp_tasks`) has
/// the columns `id bytea` (primary key, the id's 32 bytes), `owner text`, `revision
/// bigint`, `status text`, `expires_at bigint` (milliseconds since the epoch, for
/// records with a TTL), `retired_at bigint` (when a record without a TTL became
/// terminal) and `record jsonb` (the whole [`TaskRecord`]). The other columns are
/// copies of fields of `record`, kept for indexes and for operators reading the table.
///
/// # How the contract is kept
///
/// - `update` reads the row, runs [`TaskRecord::apply`] in Rust, and writes back with
///   `UPDATE … WHERE id = $1 AND revision = $old`. A writer that lost the race reads
///   again, up to 32 times with a short jittered pause, then answers
///   [`StoreError::Contention`] (nothing was written).
/// - A record expired at the `now` passed in reads as absent, swept or not; a record
///   of another owner reads exactly like a missing one, at the same cost: an
///   owner-scoped `get` or `update` puts the owner and the expiry in its `SELECT`,
///   so a foreign row is never sent nor decoded.
/// - Records retired past [`CreateLimits::retention`] are left out of the cap
///   counts, swept or not.
/// - `create` with limits takes a transaction-scoped advisory lock (one for the table
///   when `max_rows` is set, one per owner when `max_per_owner` is), counts, then
///   inserts, so the caps hold across nodes. The lock serializes capped creates on the
///   table, and each count stops at the cap; rows expired at the new record's
///   creation never count, swept or not.
/// - `visible` checks all the ids of one listen in one `SELECT … WHERE id = ANY($1)`.
/// - `cleanup` deletes through the indexes on `expires_at` and `retired_at`.
///
/// # Several nodes
///
/// Every successful write (a create, an update that changed the record) runs
/// `pg_notify` in the same statement, on the channel `<table>_changes`, with the
/// payload `<node id>:<task id>`. [`TaskStore::subscribe`] starts a background
/// listener (on a dedicated connection, not one of the pool's) that forwards the ids
/// written by *other* store instances; [`TasksLayer`](crate::TasksLayer) subscribes
/// when it is built, so a `tasks/update` or `tasks/cancel` handled on one node wakes
/// the worker waiting on another.
///
/// A trigger also appends every insert and update to the change log
/// `<table>_feed` (a `bigserial` position and the task id). The listener notes its
/// position in the log every 5 s; when its connection drops it reconnects with
/// backoff, listens again, then replays the log from the position it noted, so a
/// change made while it was away is delivered all the same. [`cleanup`] prunes log
/// entries older than 10 minutes; a listener away longer than that reports
/// [`FeedEvent::Missed`](super::FeedEvent::Missed), and the layer re-reads every
/// task it waits on. The listener's connection carries the `application_name`
/// [`feed_connection_name`](Self::feed_connection_name), so operators can find it
/// in `pg_stat_activity`.
///
/// [`cleanup`]: TaskStore::cleanup
///
/// Task ids are secrets, and the notification payload carries them: any session of
/// the same database that runs `LISTEN` on the channel sees the ids of changed tasks.
/// Give the application its own database, or at least keep untrusted roles off it.
/// The crate never logs an id and never puts one in an error.
///
/// # Connections
///
/// The `postgres` feature builds sqlx with the tokio runtime and no TLS. To connect
/// with TLS, enable one of sqlx's `tls-*` features in your own `Cargo.toml` (Cargo
/// merges features) and pass a pool to [`new`](Self::new).
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    table: String,
    channel: String,
    /// Tags this instance's notifications so its own listener can skip them.
    node: String,
    /// The first half of every advisory lock key this table's creates take.
    lock_key: i32,
    sql: Statements,
    log: LogStatements,
    leases: Arc<LeaseStatements>,
    feed: Mutex<Option<Feed>>,
}

/// The SQL of the change log, built once.
struct LogStatements {
    head: SqlStr,
    since: SqlStr,
    oldest: SqlStr,
    prune: SqlStr,
    migrate: Vec<SqlStr>,
}

/// The SQL for one table, built once.
struct Statements {
    insert: SqlStr,
    lock: SqlStr,
    count_all: SqlStr,
    count_owner: SqlStr,
    count_unowned: SqlStr,
    visible: SqlStr,
    select: SqlStr,
    select_owned: SqlStr,
    write: SqlStr,
    cleanup: SqlStr,
    migrate: Vec<SqlStr>,
}

/// The background listener of one store instance; dropping it stops the listener.
struct Feed {
    sender: ChangeSender,
    ready: watch::Receiver<bool>,
    _stop: oneshot::Sender<()>,
}

impl PostgresStore {
    /// The table name used unless [`with_table`](Self::with_table) says otherwise:
    /// `mcp_tasks`, announcing on the channel `mcp_tasks_changes`.
    ///
    /// ```
    /// assert_eq!(mcp_tasks::PostgresStore::DEFAULT_TABLE, "mcp_tasks");
    /// ```
    pub const DEFAULT_TABLE: &'static str = "mcp_tasks";

    /// A store over an existing pool (sized, timed out and secured as you like), on
    /// the table [`DEFAULT_TABLE`](Self::DEFAULT_TABLE), `mcp_tasks`.
    ///
    /// ```no_run
    /// use mcp_tasks::PostgresStore;
    /// use mcp_tasks::sqlx::postgres::PgPoolOptions;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = PgPoolOptions::new()
    ///     .max_connections(20)
    ///     .connect("postgres://app@db.internal/app")
    ///     .await?;
    /// let store = PostgresStore::new(pool);
    /// assert_eq!(store.table(), "mcp_tasks");
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(pool: PgPool) -> Self {
        let node = node_id();
        PostgresStore {
            inner: Arc::new(Inner::new(pool, Self::DEFAULT_TABLE, node)),
        }
    }

    /// Connects a pool with sqlx's default settings (at most 10 connections), but an
    /// acquire timeout of [`STORE_TIMEOUT`](crate::defaults::STORE_TIMEOUT) (5 s, the
    /// layer's default store timeout), to the database at `url`, on the table
    /// [`DEFAULT_TABLE`](Self::DEFAULT_TABLE).
    /// Fails with [`StoreError::Backend`] when the database cannot be reached.
    ///
    /// ```no_run
    /// use mcp_tasks::PostgresStore;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let url = std::env::var("DATABASE_URL")?;
    /// let store = PostgresStore::connect(&url).await?;
    /// store.migrate().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .acquire_timeout(crate::defaults::STORE_TIMEOUT)
            .connect(url)
            .await
            .map_err(StoreError::backend)?;
        Ok(Self::new(pool))
    }

    /// The same store on another table.
    ///
    /// The name must be a plain identifier: an ASCII letter or `_`, then letters,
    /// digits or `_`, at most 48 characters (no schema prefix; the connection's
    /// `search_path` decides the schema). It is always quoted, so its case is kept.
    ///
    /// ```
    /// # async fn demo(store: mcp_tasks::PostgresStore) {
    /// let tenant = store.clone().with_table("tenant_a_tasks").unwrap();
    /// assert_eq!(tenant.channel(), "tenant_a_tasks_changes");
    /// assert!(store.with_table("public.tasks").is_err()); // a ConfigError
    /// # }
    /// ```
    pub fn with_table(self, table: &str) -> Result<Self, ConfigError> {
        validate_table(table)?;
        let node = self.inner.node.clone();
        Ok(PostgresStore {
            inner: Arc::new(Inner::new(self.inner.pool.clone(), table, node)),
        })
    }

    /// The pool the store runs its queries on.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// let rows: i64 = mcp_tasks::sqlx::query_scalar("SELECT count(*) FROM mcp_tasks")
    ///     .fetch_one(store.pool())
    ///     .await?;
    /// println!("{rows} tasks stored");
    /// # Ok(())
    /// # }
    /// ```
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The table the store keeps its records in.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// assert_eq!(store.with_table("billing_tasks")?.table(), "billing_tasks");
    /// # Ok(())
    /// # }
    /// ```
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// The `NOTIFY` channel the store announces its writes on: `<table>_changes`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// assert_eq!(store.channel(), "mcp_tasks_changes");
    /// # Ok(())
    /// # }
    /// ```
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }

    /// The `application_name` of this instance's listener connection:
    /// `mcp-tasks feed <node>`, where `<node>` tells the store instances apart (so
    /// `pg_stat_activity` shows which connection listens for which node).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// assert!(store.feed_connection_name().starts_with("mcp-tasks feed "));
    /// # Ok(())
    /// # }
    /// ```
    pub fn feed_connection_name(&self) -> String {
        format!("mcp-tasks feed {}", self.inner.node)
    }

    /// Creates the table and its indexes unless they exist. Safe to run on every node
    /// at every start, concurrently too (an advisory lock orders the runs).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// store.migrate().await?; // once per start, before the layer serves
    /// store.migrate().await?; // and again: nothing to do
    /// # Ok(())
    /// # }
    /// ```
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        let mut tx = inner.pool.begin().await.map_err(StoreError::backend)?;
        sqlx::query(inner.sql.lock.clone())
            .bind(inner.lock_key)
            .bind(i32::MIN)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        for statement in inner.sql.migrate.iter().chain(&inner.log.migrate) {
            sqlx::query(statement.clone())
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        for statement in super::postgres_leases::migration(&inner.table) {
            sqlx::query(sql(statement))
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        tx.commit().await.map_err(StoreError::backend)
    }

    /// Starts the listener for other nodes' changes, if it is not running, and waits
    /// until it listens.
    ///
    /// [`TaskStore::subscribe`] starts the listener too, but cannot wait for it: a
    /// change made in the instant before the `LISTEN` took effect is not announced.
    /// Call this once at startup, before building the layer, to close that gap; an
    /// unreachable database fails here instead of in the background. If the listener
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
        let mut ready = match running {
            Some(ready) => ready,
            None => {
                let runtime = tokio::runtime::Handle::try_current().map_err(StoreError::backend)?;
                let listener = connect_listener(&self.listen_options(), &self.inner.channel)
                    .await
                    .map_err(StoreError::backend)?;
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
        ready
            .wait_for(|listening| *listening)
            .await
            .map(|_| ())
            .map_err(|_| StoreError::backend(Failure("the change listener stopped")))
    }

    fn lock_feed(&self) -> MutexGuard<'_, Option<Feed>> {
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

    fn start_feed(&self, runtime: &tokio::runtime::Handle, first: Option<PgListener>) -> Feed {
        let sender = ChangeSender::new(FEED_CAPACITY);
        let (ready_tx, ready) = watch::channel(false);
        let (stop, stopped) = oneshot::channel();
        let relay = Relay {
            options: self.listen_options(),
            channel: self.inner.channel.clone(),
            node: self.inner.node.clone(),
            sender: sender.clone(),
            ready: ready_tx,
            log: LogStatements::new(&self.inner.table),
            position: None,
        };
        runtime.spawn(relay.run(first, stopped));
        Feed {
            sender,
            ready,
            _stop: stop,
        }
    }

    fn payload(&self, id: &TaskId) -> String {
        format!("{}:{id}", self.inner.node)
    }

    async fn insert(&self, record: &TaskRecord, limits: CreateLimits) -> Result<(), StoreError> {
        let inner = &self.inner;
        let columns = Columns::of(record)?;
        let insert = sqlx::query_scalar::<_, i64>(inner.sql.insert.clone())
            .bind(record.id.as_bytes().to_vec())
            .bind(columns.owner)
            .bind(columns.revision)
            .bind(columns.status)
            .bind(columns.expires_at)
            .bind(columns.retired_at)
            .bind(columns.record)
            .bind(inner.channel.clone())
            .bind(self.payload(&record.id));
        if limits.max_rows.is_none() && limits.max_per_owner.is_none() {
            let inserted = insert
                .fetch_one(&inner.pool)
                .await
                .map_err(StoreError::backend)?;
            return if inserted == 1 {
                Ok(())
            } else {
                Err(StoreError::Duplicate)
            };
        }
        let owner = record.owner.as_ref().map(|p| p.as_str());
        let mut tx = inner.pool.begin().await.map_err(StoreError::backend)?;
        // Lock order is always table, then owner, so capped creates never deadlock.
        let mut locks = Vec::with_capacity(2);
        if limits.max_rows.is_some() {
            locks.push(0);
        }
        if limits.max_per_owner.is_some() {
            locks.push(owner_lock_key(owner));
        }
        for key in locks {
            sqlx::query(inner.sql.lock.clone())
                .bind(inner.lock_key)
                .bind(key)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        // Each count runs after the locks, so it sees every create committed before.
        let now = millis(record.created_at.as_millis());
        // Without a retention every retired record counts: no row retired that early.
        let retired_before = limits.retention.map_or(i64::MIN, |retention| {
            millis(retention_cutoff(record.created_at, retention).as_millis())
        });
        if let Some(max) = limits.max_rows {
            let max = count_limit(max);
            let rows: i64 = sqlx::query_scalar(inner.sql.count_all.clone())
                .bind(max)
                .bind(now)
                .bind(retired_before)
                .fetch_one(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
            if rows >= max {
                return Err(StoreError::LimitReached(Limit::Rows));
            }
        }
        if let Some(max) = limits.max_per_owner {
            let max = count_limit(max);
            let count = match owner {
                Some(owner) => sqlx::query_scalar(inner.sql.count_owner.clone())
                    .bind(owner.to_owned())
                    .bind(max)
                    .bind(now)
                    .bind(retired_before),
                None => sqlx::query_scalar(inner.sql.count_unowned.clone())
                    .bind(max)
                    .bind(now)
                    .bind(retired_before),
            };
            let rows: i64 = count
                .fetch_one(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
            if rows >= max {
                return Err(StoreError::LimitReached(Limit::PerOwner));
            }
        }
        let inserted = insert
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        if inserted != 1 {
            return Err(StoreError::Duplicate);
        }
        tx.commit().await.map_err(StoreError::backend)
    }

    /// The row of `id` if it is visible in `scope` at `now`: for [`Scope::Owner`] the
    /// owner and the expiry are part of the `SELECT`, so a foreign row costs what a
    /// missing one costs.
    async fn read(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        now: Timestamp,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let key = id.as_bytes().to_vec();
        let query = match scope {
            Scope::Any => sqlx::query(self.inner.sql.select.clone()).bind(key),
            Scope::Owner(owner) => sqlx::query(self.inner.sql.select_owned.clone())
                .bind(key)
                .bind(owner.map(|p| p.as_str().to_owned()))
                .bind(millis(now.as_millis())),
        };
        let row = query
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(StoreError::backend)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let text: &str = row.try_get(1).map_err(StoreError::backend)?;
        let record: TaskRecord = serde_json::from_str(text).map_err(StoreError::backend)?;
        if record.id != *id {
            return Err(StoreError::backend(Failure(
                "a stored record does not match its row id",
            )));
        }
        Ok(Some(record))
    }
}

impl CompareAndSwap for PostgresStore {
    fn read<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(PostgresStore::read(self, id, scope, now))
    }

    fn write_if<'a>(
        &'a self,
        expected: u64,
        record: &'a TaskRecord,
    ) -> BoxFuture<'a, Result<Written, StoreError>> {
        Box::pin(async move {
            let inner = &self.inner;
            let columns = Columns::of(record)?;
            let written: i64 = sqlx::query_scalar(inner.sql.write.clone())
                .bind(record.id.as_bytes().to_vec())
                .bind(i64::try_from(expected).map_err(StoreError::backend)?)
                .bind(columns.revision)
                .bind(columns.status)
                .bind(columns.expires_at)
                .bind(columns.retired_at)
                .bind(columns.record)
                .bind(inner.channel.clone())
                .bind(self.payload(&record.id))
                .fetch_one(&inner.pool)
                .await
                .map_err(StoreError::backend)?;
            Ok(match written {
                1 => Written::Done,
                _ => Written::Lost(None),
            })
        })
    }
}

impl Inner {
    fn new(pool: PgPool, table: &str, node: String) -> Self {
        Inner {
            pool,
            table: table.to_owned(),
            channel: format!("{table}_changes"),
            node,
            lock_key: fnv1a(table.as_bytes()),
            sql: Statements::new(table),
            log: LogStatements::new(table),
            leases: Arc::new(LeaseStatements::new(table)),
            feed: Mutex::new(None),
        }
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.inner.table)
            .field("node", &self.inner.node)
            .finish_non_exhaustive()
    }
}

impl Statements {
    fn new(table: &str) -> Self {
        // `table` passed `validate_table` (or is the default): a plain identifier,
        // quoted everywhere, so it cannot change the statements' meaning.
        let t = format!("\"{table}\"");
        Statements {
            insert: sql(format!(
                "WITH inserted AS (\
                     INSERT INTO {t} (id, owner, revision, status, expires_at, retired_at, record) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) \
                     ON CONFLICT (id) DO NOTHING RETURNING 1) \
                 SELECT count(*) FROM (SELECT pg_notify($8, $9) FROM inserted) announced"
            )),
            lock: sql("SELECT pg_advisory_xact_lock($1, $2)".to_owned()),
            // Records expired at the new record's creation never count, nor do
            // records retired at or before the retention cutoff (when one is given).
            count_all: sql(format!(
                "SELECT count(*) FROM (SELECT 1 FROM {t} \
                 WHERE (expires_at IS NULL OR expires_at > $2) \
                 AND NOT (retired_at IS NOT NULL AND retired_at <= $3) \
                 LIMIT $1) counted"
            )),
            count_owner: sql(format!(
                "SELECT count(*) FROM (SELECT 1 FROM {t} WHERE owner = $1 \
                 AND (expires_at IS NULL OR expires_at > $3) \
                 AND NOT (retired_at IS NOT NULL AND retired_at <= $4) \
                 LIMIT $2) counted"
            )),
            count_unowned: sql(format!(
                "SELECT count(*) FROM (SELECT 1 FROM {t} WHERE owner IS NULL \
                 AND (expires_at IS NULL OR expires_at > $2) \
                 AND NOT (retired_at IS NOT NULL AND retired_at <= $3) \
                 LIMIT $1) counted"
            )),
            visible: sql(format!(
                "SELECT id FROM {t} WHERE id = ANY($1) \
                 AND (expires_at IS NULL OR expires_at > $2) \
                 AND ($3 OR owner IS NOT DISTINCT FROM $4)"
            )),
            select: sql(format!(
                "SELECT revision, record::text FROM {t} WHERE id = $1"
            )),
            // Owner-scoped reads check the owner and the expiry in the database: a
            // foreign or expired row is never sent, nor decoded, exactly like a
            // missing one.
            select_owned: sql(format!(
                "SELECT revision, record::text FROM {t} WHERE id = $1 \
                 AND owner IS NOT DISTINCT FROM $2 \
                 AND (expires_at IS NULL OR expires_at > $3)"
            )),
            write: sql(format!(
                "WITH written AS (\
                     UPDATE {t} SET revision = $3, status = $4, expires_at = $5, \
                     retired_at = $6, record = $7::jsonb \
                     WHERE id = $1 AND revision = $2 RETURNING 1) \
                 SELECT count(*) FROM (SELECT pg_notify($8, $9) FROM written) announced"
            )),
            cleanup: sql(format!(
                "DELETE FROM {t} WHERE expires_at <= $1 OR retired_at <= $2"
            )),
            migrate: vec![
                sql(format!(
                    "CREATE TABLE IF NOT EXISTS {t} (\
                         id bytea PRIMARY KEY, \
                         owner text, \
                         revision bigint NOT NULL, \
                         status text NOT NULL, \
                         expires_at bigint, \
                         retired_at bigint, \
                         record jsonb NOT NULL)"
                )),
                sql(format!(
                    "CREATE INDEX IF NOT EXISTS \"{table}_owner_idx\" ON {t} (owner)"
                )),
                sql(format!(
                    "CREATE INDEX IF NOT EXISTS \"{table}_expires_at_idx\" ON {t} (expires_at) \
                     WHERE expires_at IS NOT NULL"
                )),
                sql(format!(
                    "CREATE INDEX IF NOT EXISTS \"{table}_retired_at_idx\" ON {t} (retired_at) \
                     WHERE retired_at IS NOT NULL"
                )),
            ],
        }
    }
}

impl LogStatements {
    fn new(table: &str) -> Self {
        // As in `Statements::new`: `table` is a validated plain identifier.
        let t = format!("\"{table}\"");
        let log = format!("\"{table}_feed\"");
        let function = format!("\"{table}_feed_fn\"");
        let trigger = format!("\"{table}_feed_trg\"");
        LogStatements {
            head: sql(format!("SELECT coalesce(max(seq), 0) FROM {log}")),
            since: sql(format!(
                "SELECT seq, id FROM {log} WHERE seq > $1 ORDER BY seq LIMIT $2"
            )),
            oldest: sql(format!("SELECT min(seq) FROM {log}")),
            prune: sql(format!("DELETE FROM {log} WHERE at <= $1")),
            migrate: vec![
                sql(format!(
                    "CREATE TABLE IF NOT EXISTS {log} (\
                         seq bigserial PRIMARY KEY, \
                         id bytea NOT NULL, \
                         at bigint NOT NULL DEFAULT \
                             (extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
                )),
                sql(format!(
                    "CREATE INDEX IF NOT EXISTS \"{table}_feed_at_idx\" ON {log} (at)"
                )),
                sql(format!(
                    "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger \
                     LANGUAGE plpgsql AS $$ \
                     BEGIN INSERT INTO {log} (id) VALUES (NEW.id); RETURN NULL; END $$"
                )),
                // Created only when missing, so a restart takes no table lock.
                sql(format!(
                    "DO $do$ BEGIN \
                       IF NOT EXISTS (SELECT 1 FROM pg_trigger \
                         WHERE tgname = '{table}_feed_trg' AND tgrelid = '{t}'::regclass) THEN \
                         CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE ON {t} \
                         FOR EACH ROW EXECUTE FUNCTION {function}(); \
                       END IF; \
                     END $do$"
                )),
            ],
        }
    }
}

/// The indexed copies of a record's fields, and the record itself as JSON text.
struct Columns {
    owner: Option<String>,
    revision: i64,
    status: &'static str,
    expires_at: Option<i64>,
    retired_at: Option<i64>,
    record: String,
}

impl Columns {
    fn of(record: &TaskRecord) -> Result<Self, StoreError> {
        let retired_at = record.retired_at().map(|at| millis(at.as_millis()));
        Ok(Columns {
            owner: record.owner.as_ref().map(|p| p.as_str().to_owned()),
            revision: i64::try_from(record.revision).map_err(StoreError::backend)?,
            status: record.status.as_str(),
            expires_at: record.expires_at().map(|at| millis(at.as_millis())),
            retired_at,
            record: serde_json::to_string(record).map_err(StoreError::backend)?,
        })
    }
}

impl TaskStore for PostgresStore {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.insert(&record, limits).await })
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            Ok(self
                .read(id, scope, now)
                .await?
                .filter(|r| r.is_visible(scope, now)))
        })
    }

    fn visible<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let (any, owner) = match scope {
                Scope::Any => (true, None),
                Scope::Owner(owner) => (false, owner.map(|p| p.as_str().to_owned())),
            };
            let keys: Vec<Vec<u8>> = ids.iter().map(|id| id.as_bytes().to_vec()).collect();
            let found: Vec<Vec<u8>> = sqlx::query_scalar(self.inner.sql.visible.clone())
                .bind(keys)
                .bind(millis(now.as_millis()))
                .bind(any)
                .bind(owner)
                .fetch_all(&self.inner.pool)
                .await
                .map_err(StoreError::backend)?;
            let found: std::collections::HashSet<Vec<u8>> = found.into_iter().collect();
            // In the order asked, each id once.
            let mut seen = std::collections::HashSet::with_capacity(found.len());
            Ok(ids
                .iter()
                .filter(|id| found.contains(&id.as_bytes()[..]) && seen.insert(**id))
                .copied()
                .collect())
        })
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        Box::pin(compare_and_swap(self, id, scope, transition, now))
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(async move {
            let retired_before = retention_cutoff(now, retention);
            let done = sqlx::query(self.inner.sql.cleanup.clone())
                .bind(millis(now.as_millis()))
                .bind(millis(retired_before.as_millis()))
                .execute(&self.inner.pool)
                .await
                .map_err(StoreError::backend)?;
            let log_before = now
                .as_millis()
                .saturating_sub(FEED_RETENTION.as_millis() as u64);
            sqlx::query(self.inner.log.prune.clone())
                .bind(millis(log_before))
                .execute(&self.inner.pool)
                .await
                .map_err(StoreError::backend)?;
            Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
        })
    }

    /// Leases in the tables `T_nodes` and `T_holds` beside the task table `T`
    /// (created by [`migrate`](PostgresStore::migrate)), on the same pool, with
    /// deadlines on the database's clock.
    fn leases(&self) -> Option<Arc<dyn LeaseStore>> {
        Some(Arc::new(PgLeases {
            pool: self.inner.pool.clone(),
            sql: self.inner.leases.clone(),
        }))
    }

    /// Starts the background listener on first use (it needs a tokio runtime; without
    /// one this returns `None`) and hands out a receiver of the ids other instances
    /// wrote. See [`PostgresStore::listen`] to wait until the listener is ready.
    fn subscribe(&self) -> Option<ChangeFeed> {
        let mut feed = self.lock_feed();
        if let Some(running) = &*feed {
            return Some(running.sender.subscribe());
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "mcp-tasks: no tokio runtime for the PostgreSQL change listener; changes made on other nodes are not announced"
            );
            return None;
        };
        let started = self.start_feed(&runtime, None);
        let receiver = started.sender.subscribe();
        *feed = Some(started);
        Some(receiver)
    }
}

/// The background task behind a [`Feed`]: receives notifications and forwards the
/// ids written by other nodes, and after every reconnect replays the change log
/// from its last checkpoint, so nothing written meanwhile is lost.
struct Relay {
    options: PgConnectOptions,
    channel: String,
    node: String,
    sender: ChangeSender,
    ready: watch::Sender<bool>,
    log: LogStatements,
    /// Where a replay starts: a log position every change after which may not
    /// have been delivered yet. `None` until the first connection.
    position: Option<Checkpoint>,
}

/// Log positions noted on the checkpoint timer.
#[derive(Clone, Copy)]
struct Checkpoint {
    /// The position a replay starts from: one tick old, so that a write whose
    /// position was taken before the last tick but committed after it is replayed.
    replay_from: i64,
    /// The newest position read, the next tick's `replay_from`.
    latest: i64,
}

impl Relay {
    async fn run(mut self, mut first: Option<PgListener>, mut stop: oneshot::Receiver<()>) {
        let mut backoff = LISTEN_BACKOFF_MIN;
        loop {
            let connected = match first.take() {
                Some(listener) => Ok(listener),
                None => tokio::select! {
                    _ = &mut stop => return,
                    connected = connect_listener(&self.options, &self.channel) => connected,
                },
            };
            let error = match connected {
                Ok(listener) => {
                    let error = tokio::select! {
                        _ = &mut stop => return,
                        error = self.serve(listener, &mut backoff) => error,
                    };
                    self.ready.send_replace(false);
                    error
                }
                Err(e) => e,
            };
            tracing::warn!(
                error = %error,
                retry_in_ms = backoff.as_millis() as u64,
                "mcp-tasks: the PostgreSQL change listener failed; reconnecting"
            );
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(LISTEN_BACKOFF_MAX);
        }
    }

    /// Serves one connection, already listening: catches up, then forwards
    /// notifications and keeps the checkpoint, until the connection fails.
    async fn serve(&mut self, mut listener: PgListener, backoff: &mut Duration) -> sqlx::Error {
        if let Err(e) = self.catch_up(&mut listener).await {
            return e;
        }
        self.ready.send_replace(true);
        *backoff = LISTEN_BACKOFF_MIN;
        let mut checkpoint = tokio::time::interval(FEED_CHECKPOINT);
        checkpoint.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        checkpoint.tick().await;
        loop {
            tokio::select! {
                next = listener.try_recv() => match next {
                    Ok(Some(notification)) => self.forward(notification.payload()),
                    // sqlx reconnected and listens again: replay what was written in
                    // between.
                    Ok(None) => {
                        tracing::warn!("mcp-tasks: the PostgreSQL change listener reconnected; replaying the change log");
                        if let Err(e) = self.catch_up(&mut listener).await {
                            return e;
                        }
                    }
                    Err(e) => return e,
                },
                _ = checkpoint.tick() => {
                    let latest = match head(&mut listener, &self.log).await {
                        Ok(latest) => latest,
                        Err(e) => return e,
                    };
                    if let Some(position) = &mut self.position {
                        position.replay_from = position.latest;
                        position.latest = latest;
                    }
                }
            }
        }
    }

    /// On the first connection, notes the head of the log; on the next ones,
    /// delivers every logged change after the checkpoint (this node's own too: a
    /// re-read of one's own write changes nothing), or reports missed changes when
    /// the log was pruned past it.
    async fn catch_up(&mut self, listener: &mut PgListener) -> Result<(), sqlx::Error> {
        let Some(position) = self.position else {
            let latest = head(listener, &self.log).await?;
            self.position = Some(Checkpoint {
                replay_from: latest,
                latest,
            });
            return Ok(());
        };
        let mut from = position.replay_from;
        let oldest: Option<i64> =
            bounded(sqlx::query_scalar(self.log.oldest.clone()).fetch_one(&mut *listener)).await?;
        let pruned = match oldest {
            Some(oldest) => oldest > from.saturating_add(1),
            None => from > 0,
        };
        if pruned {
            // Entries after the checkpoint may have been pruned: say so, then
            // deliver what is left.
            tracing::warn!(
                "mcp-tasks: the PostgreSQL change log was pruned past this listener's checkpoint; reporting missed changes"
            );
            self.sender.missed();
        }
        let mut replayed = 0usize;
        loop {
            let rows: Vec<(i64, Vec<u8>)> = bounded(
                sqlx::query_as(self.log.since.clone())
                    .bind(from)
                    .bind(CATCH_UP_BATCH)
                    .fetch_all(&mut *listener),
            )
            .await?;
            let last = rows.last().map(|(seq, _)| *seq);
            let full = rows.len() as i64 >= CATCH_UP_BATCH;
            for (_, id) in rows {
                if let Ok(bytes) = <[u8; 32]>::try_from(id.as_slice()) {
                    self.sender.send(TaskId::from_bytes(bytes));
                    replayed += 1;
                }
            }
            if let Some(last) = last {
                from = last;
            }
            if !full {
                break;
            }
        }
        tracing::debug!(replayed, "mcp-tasks: replayed the PostgreSQL change log");
        self.position = Some(Checkpoint {
            replay_from: from,
            latest: from,
        });
        Ok(())
    }

    fn forward(&self, payload: &str) {
        let Some((node, id)) = payload.split_once(':') else {
            tracing::debug!("mcp-tasks: ignored a malformed change notification");
            return;
        };
        if node == self.node {
            return;
        }
        match id.parse::<TaskId>() {
            // No receiver right now is fine: nobody is waiting.
            Ok(id) => self.sender.send(id),
            Err(_) => tracing::debug!("mcp-tasks: ignored a malformed change notification"),
        }
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

fn validate_table(table: &str) -> Result<(), ConfigError> {
    let mut chars = table.chars();
    let starts_well = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if starts_well && rest_ok && table.len() <= MAX_TABLE_LEN {
        Ok(())
    } else {
        Err(ConfigError::InvalidName(
            "a table name is a letter or _, then letters, digits or _, at most 48 characters",
        ))
    }
}

/// The second half of the advisory lock key for one owner's creates. Collisions only
/// make two owners wait for each other.
fn owner_lock_key(owner: Option<&str>) -> i32 {
    match owner {
        // 0 is the table-wide lock.
        None => 1,
        Some(owner) => match fnv1a(owner.as_bytes()) {
            0 | 1 => 2,
            key => key,
        },
    }
}

/// 32-bit FNV-1a: a stable hash for advisory lock keys.
fn fnv1a(bytes: &[u8]) -> i32 {
    let hash = bytes.iter().fold(0x811c_9dc5_u32, |hash, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    i32::from_ne_bytes(hash.to_ne_bytes())
}

fn millis(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn count_limit(max: usize) -> i64 {
    i64::try_from(max).unwrap_or(i64::MAX)
}

/// A failure this store detects itself.
#[derive(Debug)]
struct Failure(&'static str);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Failure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_must_be_plain_identifiers() {
        for good in ["mcp_tasks", "_t", "Tasks2", &"a".repeat(MAX_TABLE_LEN)] {
            assert!(validate_table(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1tasks",
            "public.tasks",
            "tasks\"; DROP TABLE x; --",
            "täsks",
            "a b",
            &"a".repeat(MAX_TABLE_LEN + 1),
        ] {
            assert!(
                matches!(validate_table(bad), Err(ConfigError::InvalidName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn columns_mirror_the_record() {
        let mut record = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(1_000));
        record.ttl_ms = Some(500);
        let columns = Columns::of(&record).unwrap();
        assert_eq!(columns.expires_at, Some(1_500));
        assert_eq!(columns.retired_at, None);
        assert_eq!(columns.status, "working");

        record.ttl_ms = None;
        record
            .apply(&Transition::Cancel, Timestamp::from_millis(2_000))
            .unwrap();
        let columns = Columns::of(&record).unwrap();
        assert_eq!(columns.expires_at, None);
        assert_eq!(columns.retired_at, Some(2_000));
        assert_eq!(columns.revision, 1);
        let back: TaskRecord = serde_json::from_str(&columns.record).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn owner_scoped_reads_filter_the_owner_and_the_expiry_in_sql() {
        let sql = Statements::new("mcp_tasks");
        let owned = sql.select_owned.as_str();
        assert!(owned.contains("owner IS NOT DISTINCT FROM $2"), "{owned}");
        assert!(owned.contains("expires_at > $3"), "{owned}");
        assert!(!sql.select.as_str().contains("owner"));
        for count in [&sql.count_all, &sql.count_owner, &sql.count_unowned] {
            assert!(
                count.as_str().contains("retired_at <="),
                "{}",
                count.as_str()
            );
        }
    }

    #[test]
    fn the_change_log_is_named_after_the_table_and_fed_by_a_trigger() {
        let log = LogStatements::new("mcp_tasks");
        assert!(
            log.since
                .as_str()
                .contains("\"mcp_tasks_feed\" WHERE seq > $1 ORDER BY seq")
        );
        assert!(log.prune.as_str().contains("WHERE at <= $1"));
        let migrate: Vec<&str> = log.migrate.iter().map(|s| s.as_str()).collect();
        assert!(
            migrate
                .iter()
                .any(|s| s.contains("AFTER INSERT OR UPDATE ON \"mcp_tasks\""))
        );
        // The longest table name still leaves every derived name within 63 bytes.
        let longest = "t".repeat(MAX_TABLE_LEN);
        for suffix in [
            "_feed_trg",
            "_feed_fn",
            "_feed_at_idx",
            "_feed_seq_seq",
            "_feed_pkey",
        ] {
            assert!(longest.len() + suffix.len() <= 63, "{suffix}");
        }
    }

    #[test]
    fn owner_lock_keys_never_take_the_table_key() {
        assert_ne!(owner_lock_key(None), 0);
        for owner in ["alice", "bob", ""] {
            assert!(!matches!(owner_lock_key(Some(owner)), 0 | 1), "{owner}");
        }
        assert_eq!(fnv1a(b"mcp_tasks"), fnv1a(b"mcp_tasks"));
        assert_ne!(fnv1a(b"mcp_tasks"), fnv1a(b"mcp_tasks_2"));
    }
}
