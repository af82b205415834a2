//! `PostgresStore`: task records in one PostgreSQL table, shared between nodes, with
//! changes announced through `LISTEN`/`NOTIFY`.

mod announce;
mod leases;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{Row, SqlStr};
use tokio::sync::{oneshot, watch};

use self::announce::Announcer;
use self::leases::{LeaseStatements, PgLeases, sql};
use super::LeaseStore;
use super::connect::ConnectError;
use super::rules::{CompareAndSwap, Written, compare_and_swap, node_id};
use super::{
    BoxFuture, Budgeted, ChangeFeed, ChangeSender, Clock, CreateLimits, FEED_CAPACITY, TaskStore,
    Updated,
};
use crate::backoff::Backoff;
use crate::error::{ConfigError, Limit, StoreError};
use crate::task::{Scope, TaskId, TaskRecord, Timestamp, Transition};

/// Longest accepted table name, so that the derived index and channel names stay
/// within PostgreSQL's 63-byte identifier limit.
const MAX_TABLE_LEN: usize = 48;
/// First and last pause between attempts to reconnect the listener.
const LISTEN_BACKOFF_MIN: Duration = Duration::from_millis(100);
const LISTEN_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// How often a listener notes how far the change log has come: after a reconnect it
/// replays the log from the position noted one tick before the last. Each tick also
/// delivers again what was logged in the tick before the last, so a write whose node
/// died between its commit and its announcement is heard within two ticks.
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
/// Counter rows per cap: creates on different shards never wait for each other.
const COUNT_SHARDS: i16 = 32;
/// Shards a create tries before it decides on the exact counts.
const FAST_TRIES: u8 = 3;
/// Expired or retired records a create that finds a cap full removes first.
const PRUNE_BATCH: i64 = 256;
/// Records one cleanup transaction removes.
const CLEANUP_BATCH: i64 = 10_000;
/// The counter scope of the row cap; owners' scopes start with 1 (unowned) or 2.
const ROWS_SCOPE: &[u8] = &[0];

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
/// yet, and upgrades a table of the previous layout in place. The table (default
/// `mcp_tasks`) has the columns `id bytea` (primary key, the id's 32 bytes), `owner
/// bytea` (the principal's UTF-8 bytes), `revision bigint`, `status text`,
/// `expires_at bigint` (milliseconds since the epoch by the store's clock, for
/// records with a TTL), `retired_at bigint` (when a record without a TTL became
/// terminal, by the same clock), `record json` (the whole [`TaskRecord`], as
/// written) and `shard`, `owner_shard` (the counter shards the row counts in). The
/// other columns are copies of fields of `record`, kept for indexes and for operators
/// reading the table. `record` is `json`, not `jsonb`, and `owner` is `bytea`, not
/// `text`: PostgreSQL refuses U+0000 in both of those, and `jsonb` rewrites numbers
/// (`-0.0`, `1e300`); any value the memory store keeps comes back unchanged.
///
/// A second table, `<table>_counts` (`scope bytea`, `shard smallint`, `n bigint`),
/// counts the rows: 32 shards for the whole table and up to 32 per owner, updated in
/// the same transaction as every insert and delete. An owner's rows at zero are
/// deleted by the delete that took them there (a sweep or a create's pruning), so a
/// principal without tasks keeps no row; writers take counter rows in one order
/// (the row cap's first, then the owner's, each by shard), so a create racing that
/// delete is counted, never lost.
///
/// Upgrading from the previous layout (`owner text`, `record jsonb`, no counters)
/// rewrites the table once, under `migrate`'s lock: stop nodes of the older version
/// first, since their writes do not fit the new columns.
///
/// # One clock
///
/// Every decision on time is made by the database server's `clock_timestamp()`
/// (the default [`Clock::Store`]): a record with a TTL expires `ttl` after the row
/// was inserted, a terminal record retires when the row was written, and reads,
/// writes, sweeps and full creates compare against the server's time. Nodes whose
/// clocks disagree agree on all of it; the `now` they pass only stamps the record
/// (`updatedAt`). With [`Clock::Caller`] the statements bind the caller's `now` (a
/// new record's `created_at`) instead.
///
/// # How the contract is kept
///
/// - `update` reads the row, runs [`TaskRecord::apply`] in Rust, and writes back with
///   `UPDATE … WHERE id = $1 AND revision = $old` and not expired. A writer that lost
///   the race reads again, up to 32 times with a short jittered pause, then answers
///   [`StoreError::Contention`] (nothing was written).
/// - An expired record reads as absent, swept or not; a record of another owner
///   reads exactly like a missing one, at the same cost: an owner-scoped `get` or
///   `update` puts the owner and the expiry in its `SELECT`, so a foreign row is
///   never sent nor decoded.
/// - `create` checks the caps in counter rows, not by counting the table: the cap is
///   split in 32 shares, one per shard, and a create increments one shard of the
///   row cap and one of its owner's cap (`… SET n = n + 1 WHERE n < share`), then
///   inserts, in one statement of one transaction. Creates on different shards never
///   wait for each other, and the cost does not grow with the table. A create whose
///   shard is full tries two more, then removes up to 256 records that expired or
///   retired past [`CreateLimits::retention`] (of its owner, for the owner's cap)
///   and decides on the exact sums with every shard row of both caps locked: near a
///   cap (and only there) creates wait for each other. The shares add up to the cap,
///   so the caps are exact across nodes.
/// - `visible`, `get_many` and `get_many_within` check or read all the ids of one
///   listen in one `SELECT … WHERE id = ANY($1)`. `get_many_within` sums the rows'
///   sizes (`octet_length(record::text)`) in the same statement and sends the
///   records only when they fit the budget.
/// - `cleanup` deletes through the indexes on `expires_at` and `retired_at`.
///
/// # Several nodes
///
/// Every successful write (a create, an update that changed the record) is announced
/// once it has committed, on the channel `<table>_changes`, with the payload
/// `<node id>:<task id>`. The writes themselves never notify: PostgreSQL serializes
/// the commits of notifying transactions under one database-wide lock, so a
/// background sender per store announces everything written since its last
/// statement in one statement, one at a time. A write is announced by the statement
/// after its commit (a round trip or two later); a statement PostgreSQL refuses is
/// retried, its ids kept, after a backoff growing to 1 s.
/// [`without_announcements`](Self::without_announcements) switches them off for a
/// single node. [`TaskStore::subscribe`] starts a background
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
    /// The first half of the advisory lock key `migrate` takes.
    lock_key: i32,
    clock: Clock,
    sql: Statements,
    log: LogStatements,
    leases: Arc<LeaseStatements>,
    feed: Mutex<Option<Feed>>,
    /// Announces committed writes to other nodes; `None` when switched off.
    announcer: Option<Announcer>,
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
    ensure_scope: SqlStr,
    lock_scope: SqlStr,
    lock_counts: SqlStr,
    uncount: SqlStr,
    drop_empty: SqlStr,
    prune_all: SqlStr,
    prune_owner: SqlStr,
    prune_unowned: SqlStr,
    visible: SqlStr,
    select_many: SqlStr,
    select_within: SqlStr,
    select: SqlStr,
    select_owned: SqlStr,
    write: SqlStr,
    columns: SqlStr,
    exists: SqlStr,
    create: Vec<SqlStr>,
    upgrade_owner: SqlStr,
    upgrade_record: SqlStr,
    upgrade_shards: Vec<SqlStr>,
    create_counts: SqlStr,
    fill_counts: Vec<SqlStr>,
}

/// Where one try of the create counts the new row: a shard of the row cap and one
/// of its owner's cap, each with the cap's [`shares`] to check (`None`: no cap).
#[derive(Clone, Copy)]
struct Placement {
    rows_shard: i16,
    owner_shard: i16,
    rows_share: Option<(i64, i16)>,
    owner_share: Option<(i64, i16)>,
}

/// What one try of the create statement did.
enum Inserted {
    Done,
    Duplicate,
    Full(Limit),
}

/// Whose expired and retired records a full create removes first.
#[derive(Clone, Copy)]
enum PruneGroup<'a> {
    All,
    Owner(Option<&'a [u8]>),
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
    /// layer's default store timeout) and a `statement_timeout` of
    /// [`STATEMENT_TIMEOUT`](crate::defaults::STATEMENT_TIMEOUT) (6 s) on every
    /// connection, to the database at `url`, on the table
    /// [`DEFAULT_TABLE`](Self::DEFAULT_TABLE).
    /// Fails with [`StoreError::Backend`] when the database cannot be reached.
    ///
    /// The layer gives up on a store call after its store timeout; the
    /// `statement_timeout` makes PostgreSQL cancel the abandoned statement too,
    /// instead of running it to the end for nobody. With a pool of your own
    /// ([`new`](Self::new)), set it on the pool's connections the same way, a
    /// little above the layer's
    /// [`with_store_timeout`](crate::TasksLayerBuilder::with_store_timeout):
    ///
    /// ```no_run
    /// use mcp_tasks::PostgresStore;
    /// use mcp_tasks::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let options: PgConnectOptions = "postgres://app@db.internal/app".parse()?;
    /// let pool = PgPoolOptions::new()
    ///     .connect_with(options.options([("statement_timeout", "6s")]))
    ///     .await?;
    /// let store = PostgresStore::new(pool);
    /// # drop(store);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`migrate`](Self::migrate) lifts the timeout for its own transaction.
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
    ///
    /// A server that refuses the connection (or the login) fails it at once; one
    /// that does not answer fails it after
    /// [`CONNECT_TIMEOUT`](crate::defaults::CONNECT_TIMEOUT) (5 s;
    /// [`connect_with_timeout`](Self::connect_with_timeout) sets another). The
    /// error's cause names the server, its password shown as `***`, and why:
    ///
    /// ```no_run
    /// # async fn run() {
    /// let refused = mcp_tasks::PostgresStore::connect("postgres://app:s3cret@127.0.0.1:1/app").await;
    /// let cause = std::error::Error::source(&refused.unwrap_err()).unwrap().to_string();
    /// assert_eq!(cause, "could not connect to postgres://app:***@127.0.0.1:1/app");
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with_timeout(url, crate::defaults::CONNECT_TIMEOUT).await
    }

    /// [`connect`](Self::connect), giving up on reaching the server after `timeout`
    /// instead of [`CONNECT_TIMEOUT`](crate::defaults::CONNECT_TIMEOUT). It bounds
    /// the first connect only; the pool opens later connections within its acquire
    /// timeout.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use mcp_tasks::PostgresStore;
    ///
    /// # async fn run() -> Result<(), mcp_tasks::error::StoreError> {
    /// let url = "postgres://app@db.internal/app";
    /// let store = PostgresStore::connect_with_timeout(url, Duration::from_secs(2)).await?;
    /// # drop(store);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with_timeout(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        use sqlx::{ConnectOptions as _, Connection as _};
        let options: PgConnectOptions = url.parse().map_err(StoreError::backend)?;
        let shown = shown_url(&options, super::connect::url_has_password(url));
        let statement_timeout = format!("{}ms", crate::defaults::STATEMENT_TIMEOUT.as_millis());
        let options = options.options([("statement_timeout", statement_timeout.as_str())]);
        // One attempt first: the pool retries a refused connection until its acquire
        // timeout and then reports only that it timed out, not why.
        match tokio::time::timeout(timeout, options.connect()).await {
            Ok(Ok(probe)) => {
                let _ = tokio::time::timeout(timeout, probe.close()).await;
            }
            Ok(Err(e)) => return Err(ConnectError::failed(shown, e)),
            Err(_) => return Err(ConnectError::timed_out(shown, timeout)),
        }
        let pool = PgPoolOptions::new()
            .acquire_timeout(timeout.min(crate::defaults::STORE_TIMEOUT))
            .connect_with(options);
        let pool = match tokio::time::timeout(timeout, pool).await {
            Ok(Ok(pool)) => pool,
            Ok(Err(e)) => return Err(ConnectError::failed(shown, e)),
            Err(_) => return Err(ConnectError::timed_out(shown, timeout)),
        };
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
        let inner = Inner::new(self.inner.pool.clone(), table, node).keep_settings(&self.inner);
        Ok(PostgresStore {
            inner: Arc::new(inner),
        })
    }

    /// The same store, deciding expiry and retention by `clock`: by default
    /// [`Clock::Store`], the database server's `clock_timestamp()`, so that nodes
    /// whose clocks disagree still agree on when a task expires. [`Clock::Caller`]
    /// takes the `now` of each call (and a new record's `created_at`) instead, for
    /// tests that drive time. Call it before using the store.
    ///
    /// ```no_run
    /// use mcp_tasks::PostgresStore;
    /// use mcp_tasks::store::Clock;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// assert_eq!(store.clock(), Clock::Store);
    /// let driven = store.with_clock(Clock::Caller);
    /// assert_eq!(driven.clock(), Clock::Caller);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(self, clock: Clock) -> Self {
        let mut inner = Inner::new(
            self.inner.pool.clone(),
            &self.inner.table,
            self.inner.node.clone(),
        )
        .keep_settings(&self.inner);
        inner.clock = clock;
        PostgresStore {
            inner: Arc::new(inner),
        }
    }

    /// The same store, announcing none of its writes to other nodes: for a single
    /// node, where no other store instance listens on the table. By default every
    /// create and every update that changed a record is announced (see
    /// [Several nodes](Self#several-nodes)). Call it before using the store.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// let alone = store.without_announcements();
    /// # let _ = alone;
    /// # Ok(())
    /// # }
    /// ```
    pub fn without_announcements(self) -> Self {
        let mut inner = Inner::new(
            self.inner.pool.clone(),
            &self.inner.table,
            self.inner.node.clone(),
        )
        .keep_settings(&self.inner);
        inner.announcer = None;
        PostgresStore {
            inner: Arc::new(inner),
        }
    }

    /// The clock this store decides expiry and retention by.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// assert_eq!(store.clock(), mcp_tasks::store::Clock::Store);
    /// # Ok(())
    /// # }
    /// ```
    pub fn clock(&self) -> Clock {
        self.inner.clock
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
        // Upgrading a large table may take longer than a statement timeout allows.
        sqlx::query("SET LOCAL statement_timeout = 0")
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        sqlx::query(inner.sql.lock.clone())
            .bind(inner.lock_key)
            .bind(i32::MIN)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        let statements = &inner.sql;
        let run = |statement: &SqlStr| sqlx::query(statement.clone());
        for statement in statements.create.iter().chain(&inner.log.migrate) {
            run(statement)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        // A table of an earlier layout is upgraded in place.
        let table = format!("\"{}\"", inner.table);
        let columns: Vec<(String, String)> = sqlx::query_as(statements.columns.clone())
            .bind(&table)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        let type_of = |name: &str| {
            columns
                .iter()
                .find(|(column, _)| column == name)
                .map(|(_, kind)| kind.as_str())
        };
        let mut upgrades = Vec::new();
        if type_of("owner") == Some("text") {
            upgrades.push(&statements.upgrade_owner);
        }
        if type_of("record") == Some("jsonb") {
            upgrades.push(&statements.upgrade_record);
        }
        if type_of("shard").is_none() {
            upgrades.extend(&statements.upgrade_shards);
        }
        let counts = format!("\"{}_counts\"", inner.table);
        let counted: bool = sqlx::query_scalar(statements.exists.clone())
            .bind(&counts)
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        if !counted {
            upgrades.push(&statements.create_counts);
            upgrades.extend(&statements.fill_counts);
        }
        for statement in upgrades {
            run(statement)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        for statement in leases::migration(&inner.table) {
            sqlx::query(sql(statement))
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        sqlx::query(statements.ensure_scope.clone())
            .bind(ROWS_SCOPE)
            .bind(COUNT_SHARDS)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
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

    /// Commits a create, then announces it.
    async fn commit_create(
        &self,
        tx: sqlx::Transaction<'_, sqlx::Postgres>,
        id: TaskId,
    ) -> Result<(), StoreError> {
        tx.commit().await.map_err(StoreError::backend)?;
        self.announce(id);
        Ok(())
    }

    /// Queues the announcement of a committed write (see [`announce`]).
    ///
    /// [`announce`]: self::announce
    fn announce(&self, id: TaskId) {
        if let Some(announcer) = &self.inner.announcer {
            announcer.announce(id);
        }
    }

    /// The `now` bound into a statement: the caller's time with [`Clock::Caller`],
    /// `NULL` (the database's `clock_timestamp()`) with [`Clock::Store`].
    fn clock_arg(&self, now: Timestamp) -> Option<i64> {
        match self.inner.clock {
            Clock::Caller => Some(millis(now.as_millis())),
            Clock::Store => None,
        }
    }

    /// A batched read of `ids` in `scope`, its first arguments bound: the ids' keys
    /// ($1), the clock ($2), whether any owner's rows may be read ($3) and the owner
    /// ($4).
    fn batch<'q, O>(
        &self,
        statement: &SqlStr,
        ids: &'q [TaskId],
        scope: Scope<'q>,
        now: Timestamp,
    ) -> sqlx::query::QueryScalar<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>
    where
        (O,): for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    {
        let (any, owner) = match scope {
            Scope::Any => (true, None),
            Scope::Owner(owner) => (false, owner.map(|p| p.as_str().as_bytes())),
        };
        let keys: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes().as_slice()).collect();
        sqlx::query_scalar(statement.clone())
            .bind(keys)
            .bind(self.clock_arg(now))
            .bind(any)
            .bind(owner)
    }

    async fn insert(&self, record: &TaskRecord, limits: CreateLimits) -> Result<(), StoreError> {
        let inner = &self.inner;
        let columns = Columns::of(record)?;
        let owner_scope = owner_scope(columns.owner.as_deref());
        let now = self.clock_arg(record.created_at);
        let bytes = record.id.as_bytes();
        let (mut rows_short, mut owner_short) = (false, false);
        // A few tries on shards picked from the id's random bytes; a full shard
        // only means that this shard's share of the cap is taken.
        for attempt in 0..FAST_TRIES {
            let rows_shard = pick_shard(
                bytes[2].wrapping_add(attempt.wrapping_mul(7)),
                limits.max_rows,
            );
            let owner_shard = pick_shard(
                bytes[3].wrapping_add(attempt.wrapping_mul(11)),
                limits.max_per_owner,
            );
            let placement = Placement {
                rows_shard,
                owner_shard,
                rows_share: limits.max_rows.map(shares),
                owner_share: limits.max_per_owner.map(shares),
            };
            let mut tx = inner.pool.begin().await.map_err(StoreError::backend)?;
            let outcome = self
                .insert_row(&mut tx, record, &columns, &owner_scope, now, placement)
                .await?;
            match outcome {
                Inserted::Done => return self.commit_create(tx, record.id).await,
                Inserted::Duplicate => return Err(StoreError::Duplicate),
                Inserted::Full(Limit::Rows) => rows_short = true,
                Inserted::Full(_) => owner_short = true,
            }
        }
        // Near a cap: free what no longer counts, then decide on the exact counts
        // with every shard of the caps locked.
        if rows_short {
            self.prune(PruneGroup::All, now, limits.retention, PRUNE_BATCH)
                .await?;
        }
        if owner_short {
            let group = PruneGroup::Owner(columns.owner.as_deref());
            self.prune(group, now, limits.retention, PRUNE_BATCH)
                .await?;
        }
        let mut tx = inner.pool.begin().await.map_err(StoreError::backend)?;
        let rows_shard = match limits.max_rows {
            Some(max) => {
                self.locked_shard(&mut tx, ROWS_SCOPE, max, Limit::Rows)
                    .await?
            }
            None => {
                // Locked before the owner's rows below: every writer takes the row
                // cap's counters first, or a create on the fast path and this one
                // would each wait for the other.
                let shard = pick_shard(bytes[2], None);
                sqlx::query(inner.sql.lock_counts.clone())
                    .bind([ROWS_SCOPE])
                    .bind([shard])
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::backend)?;
                shard
            }
        };
        let owner_shard = match limits.max_per_owner {
            Some(max) => {
                sqlx::query(inner.sql.ensure_scope.clone())
                    .bind(&owner_scope)
                    .bind(COUNT_SHARDS)
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::backend)?;
                self.locked_shard(&mut tx, &owner_scope, max, Limit::PerOwner)
                    .await?
            }
            None => pick_shard(bytes[3], None),
        };
        match self
            .insert_row(
                &mut tx,
                record,
                &columns,
                &owner_scope,
                now,
                Placement {
                    rows_shard,
                    owner_shard,
                    rows_share: None,
                    owner_share: None,
                },
            )
            .await?
        {
            Inserted::Done => self.commit_create(tx, record.id).await,
            Inserted::Duplicate => Err(StoreError::Duplicate),
            Inserted::Full(limit) => Err(StoreError::LimitReached(limit)),
        }
    }

    /// One try of the create statement: the two counter rows, then the row.
    async fn insert_row(
        &self,
        tx: &mut sqlx::PgConnection,
        record: &TaskRecord,
        columns: &Columns,
        owner_scope: &[u8],
        now: Option<i64>,
        placement: Placement,
    ) -> Result<Inserted, StoreError> {
        let inner = &self.inner;
        let Placement {
            rows_shard,
            owner_shard,
            rows_share: rows_cap,
            owner_share: owner_cap,
        } = placement;
        let row = sqlx::query(inner.sql.insert.clone())
            .bind(rows_shard)
            .bind(rows_cap.map(|(base, _)| base))
            .bind(owner_scope)
            .bind(owner_shard)
            .bind(owner_cap.map(|(base, _)| base))
            .bind(record.id.as_bytes().as_slice())
            .bind(columns.owner.as_deref())
            .bind(columns.revision)
            .bind(columns.status)
            .bind(columns.ttl)
            .bind(now)
            .bind(columns.retired)
            .bind(columns.record.as_str())
            .bind(rows_cap.map_or(0, |(_, rem)| rem))
            .bind(owner_cap.map_or(0, |(_, rem)| rem))
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        let counted: (i64, i64, i64) = (
            row.try_get(0).map_err(StoreError::backend)?,
            row.try_get(1).map_err(StoreError::backend)?,
            row.try_get(2).map_err(StoreError::backend)?,
        );
        Ok(match counted {
            (0, _, _) => Inserted::Full(Limit::Rows),
            (_, 0, _) => Inserted::Full(Limit::PerOwner),
            (_, _, 0) => Inserted::Duplicate,
            _ => Inserted::Done,
        })
    }

    /// Locks every counter row of `scope` (in shard order, as every writer takes
    /// them) and picks a shard whose share of `max` has room: the exact decision.
    async fn locked_shard(
        &self,
        tx: &mut sqlx::PgConnection,
        scope: &[u8],
        max: usize,
        limit: Limit,
    ) -> Result<i16, StoreError> {
        let rows: Vec<(i16, i64)> = sqlx::query_as(self.inner.sql.lock_scope.clone())
            .bind(scope)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        // Exact on the sum: shards may hold more than their share (rows created
        // without this cap), and then some other shard has room.
        let held: i64 = rows.iter().map(|&(_, n)| n).sum();
        if held >= i64::try_from(max).unwrap_or(i64::MAX) {
            return Err(StoreError::LimitReached(limit));
        }
        Ok(rows
            .iter()
            .find(|&&(shard, n)| n < shard_cap(max, shard))
            .or_else(|| rows.iter().min_by_key(|&&(_, n)| n))
            .map_or(0, |&(shard, _)| shard))
    }

    /// Deletes up to `batch` records of `group` that expired at `now` or retired
    /// past `retention`, and takes them off the counts, in one transaction. Returns
    /// how many went.
    async fn prune(
        &self,
        group: PruneGroup<'_>,
        now: Option<i64>,
        retention: Option<Duration>,
        batch: i64,
    ) -> Result<usize, StoreError> {
        let inner = &self.inner;
        let retention = retention.map(|r| millis(u64::try_from(r.as_millis()).unwrap_or(u64::MAX)));
        let mut tx = inner.pool.begin().await.map_err(StoreError::backend)?;
        let statement = match group {
            PruneGroup::All => &inner.sql.prune_all,
            PruneGroup::Owner(Some(_)) => &inner.sql.prune_owner,
            PruneGroup::Owner(None) => &inner.sql.prune_unowned,
        };
        let mut query = sqlx::query_as(statement.clone())
            .bind(now)
            .bind(retention)
            .bind(batch);
        if let PruneGroup::Owner(Some(owner)) = group {
            query = query.bind(owner);
        }
        let gone: Vec<(Vec<u8>, i16, i64)> = query
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        if gone.is_empty() {
            return Ok(0);
        }
        let removed = gone
            .iter()
            .filter(|(scope, _, _)| scope.as_slice() == ROWS_SCOPE)
            .map(|&(_, _, n)| usize::try_from(n).unwrap_or(0))
            .sum();
        let mut scopes = Vec::with_capacity(gone.len());
        let mut shards = Vec::with_capacity(gone.len());
        let mut counts = Vec::with_capacity(gone.len());
        for (scope, shard, n) in gone {
            scopes.push(scope);
            shards.push(shard);
            counts.push(n);
        }
        // The counter rows in (scope, shard) order, the order creates take them in.
        sqlx::query(inner.sql.lock_counts.clone())
            .bind(&scopes)
            .bind(&shards)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        sqlx::query(inner.sql.uncount.clone())
            .bind(&scopes)
            .bind(&shards)
            .bind(&counts)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        sqlx::query(inner.sql.drop_empty.clone())
            .bind(&scopes)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        tx.commit().await.map_err(StoreError::backend)?;
        Ok(removed)
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
        let key = id.as_bytes().as_slice();
        let now = self.clock_arg(now);
        let query = match scope {
            Scope::Any => sqlx::query(self.inner.sql.select.clone())
                .bind(key)
                .bind(now),
            Scope::Owner(owner) => sqlx::query(self.inner.sql.select_owned.clone())
                .bind(key)
                .bind(owner.map(|p| p.as_str().as_bytes()))
                .bind(now),
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
                .bind(record.id.as_bytes().as_slice())
                .bind(i64::try_from(expected).map_err(StoreError::backend)?)
                .bind(columns.revision)
                .bind(columns.status)
                .bind(columns.retired)
                .bind(self.clock_arg(record.updated_at))
                .bind(columns.record.as_str())
                .fetch_one(&inner.pool)
                .await
                .map_err(StoreError::backend)?;
            Ok(match written {
                1 => {
                    self.announce(record.id);
                    Written::Done
                }
                _ => Written::Lost(None),
            })
        })
    }
}

impl Inner {
    fn new(pool: PgPool, table: &str, node: String) -> Self {
        Inner {
            pool: pool.clone(),
            table: table.to_owned(),
            channel: format!("{table}_changes"),
            node: node.clone(),
            lock_key: fnv1a(table.as_bytes()),
            clock: Clock::Store,
            sql: Statements::new(table),
            log: LogStatements::new(table),
            leases: Arc::new(LeaseStatements::new(table)),
            feed: Mutex::new(None),
            announcer: Some(Announcer::new(pool, format!("{table}_changes"), node)),
        }
    }

    /// The same settings on another `Inner` (another table, another clock).
    fn keep_settings(mut self, from: &Inner) -> Self {
        self.clock = from.clock;
        if from.announcer.is_none() {
            self.announcer = None;
        }
        self
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
        let c = format!("\"{table}_counts\"");
        // The time every decision of one statement is made at: the caller's (bound)
        // or the database server's.
        let clock = |n: u8| {
            format!(
                "clock AS (SELECT COALESCE(${n}::bigint, \
                 floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now)"
            )
        };
        let live = "(expires_at IS NULL OR expires_at > (SELECT now FROM clock))";
        // Rows a sweep at `now` removes: expired, or retired at or before the
        // retention cutoff ($2, the retention in milliseconds; NULL: none).
        let prune = |filter: &str| {
            sql(format!(
                "WITH {clock}, gone AS (\
                     DELETE FROM {t} WHERE id IN (\
                         SELECT id FROM {t} WHERE {filter} \
                         AND (expires_at <= (SELECT now FROM clock) \
                              OR ($2::bigint IS NOT NULL AND retired_at <= \
                                  GREATEST((SELECT now FROM clock) - $2::bigint, 0))) \
                         LIMIT $3) \
                     RETURNING shard, owner, owner_shard) \
                 SELECT scope, shard, count(*) FROM (\
                     SELECT '\\x00'::bytea AS scope, shard FROM gone \
                     UNION ALL \
                     SELECT CASE WHEN owner IS NULL THEN '\\x01'::bytea \
                                 ELSE '\\x02'::bytea || owner END, owner_shard FROM gone) counted \
                 GROUP BY scope, shard ORDER BY scope, shard",
                clock = clock(1),
            ))
        };
        Statements {
            // The row cap's share ($1, $2 and $14: the shard, and the cap's base share
            // and remainder), then the owner's ($3..$5, $15), then the row: each step
            // runs only on the one before's row, so a full counter writes nothing
            // after it (the caller rolls back what came before). A shard over its
            // share (rows created without the cap, or under a larger one) sends the
            // create to the exact path.
            insert: sql(format!(
                "WITH {clock}, \
                 rows_counted AS (\
                     UPDATE {c} SET n = n + 1 \
                     WHERE scope = '\\x00'::bytea AND shard = $1 AND ($2::bigint IS NULL OR (\
                         n < $2::bigint + (shard < $14::smallint)::int \
                         AND NOT EXISTS (SELECT 1 FROM {c} other WHERE other.scope = '\\x00'::bytea \
                             AND other.n > $2::bigint + (other.shard < $14::smallint)::int))) \
                     RETURNING 1), \
                 owner_counted AS (\
                     INSERT INTO {c} (scope, shard, n) SELECT $3, $4, 1 FROM rows_counted \
                     WHERE $5::bigint IS NULL OR NOT EXISTS (SELECT 1 FROM {c} other \
                         WHERE other.scope = $3 AND other.n > $5::bigint + (other.shard < $15::smallint)::int) \
                     ON CONFLICT (scope, shard) DO UPDATE SET n = {c}.n + 1 \
                     WHERE $5::bigint IS NULL OR {c}.n < $5::bigint + ({c}.shard < $15::smallint)::int \
                     RETURNING 1), \
                 inserted AS (\
                     INSERT INTO {t} (id, owner, revision, status, expires_at, retired_at, record, shard, owner_shard) \
                     SELECT $6, $7, $8, $9, \
                         CASE WHEN $10::bigint IS NULL THEN NULL \
                              WHEN $10::bigint >= 9223372036854775807 - clock.now THEN 9223372036854775807 \
                              ELSE clock.now + $10::bigint END, \
                         CASE WHEN $12 THEN clock.now END, $13::json, $1, $4 \
                     FROM owner_counted, clock \
                     ON CONFLICT (id) DO NOTHING RETURNING 1) \
                 SELECT (SELECT count(*) FROM rows_counted), (SELECT count(*) FROM owner_counted), \
                     (SELECT count(*) FROM inserted)",
                clock = clock(11),
            )),
            lock: sql("SELECT pg_advisory_xact_lock($1, $2)".to_owned()),
            ensure_scope: sql(format!(
                "INSERT INTO {c} (scope, shard, n) SELECT $1, s, 0 FROM generate_series(0, $2::smallint - 1) s \
                 ON CONFLICT (scope, shard) DO NOTHING"
            )),
            lock_scope: sql(format!(
                "SELECT shard, n FROM {c} WHERE scope = $1 ORDER BY shard FOR UPDATE"
            )),
            // The shards of the row cap that lost rows, and every counter row of the
            // owners that did (to drop those left at zero), in the one order every
            // writer takes them in.
            lock_counts: sql(format!(
                "SELECT 1 FROM {c} WHERE scope = ANY($1::bytea[]) AND (scope <> '\\x00'::bytea \
                     OR (scope, shard) IN (SELECT d.scope, d.shard \
                         FROM unnest($1::bytea[], $2::smallint[]) AS d(scope, shard))) \
                 ORDER BY scope, shard FOR UPDATE OF {c}"
            )),
            uncount: sql(format!(
                "UPDATE {c} SET n = {c}.n - d.k \
                 FROM unnest($1::bytea[], $2::smallint[], $3::bigint[]) AS d(scope, shard, k) \
                 WHERE {c}.scope = d.scope AND {c}.shard = d.shard"
            )),
            // An owner's counter rows at zero: a principal without tasks keeps no row
            // (a create brings its row back with `INSERT … ON CONFLICT`). The row cap's
            // own rows stay.
            drop_empty: sql(format!(
                "DELETE FROM {c} WHERE scope = ANY($1::bytea[]) AND scope <> '\\x00'::bytea AND n = 0"
            )),
            prune_all: prune("true"),
            prune_owner: prune("owner = $4"),
            prune_unowned: prune("owner IS NULL"),
            visible: sql(format!(
                "WITH {clock} SELECT id FROM {t} WHERE id = ANY($1) AND {live} \
                 AND ($3 OR owner IS NOT DISTINCT FROM $4)",
                clock = clock(2),
            )),
            select_many: sql(format!(
                "WITH {clock} SELECT record::text FROM {t} WHERE id = ANY($1) AND {live} \
                 AND ($3 OR owner IS NOT DISTINCT FROM $4)",
                clock = clock(2),
            )),
            // The sizes of the rows found come first; the records are sent only when
            // they fit the budget ($5) together, otherwise one NULL says they do not.
            select_within: sql(format!(
                "WITH {clock}, \
                 found AS (SELECT id, octet_length(record::text) AS size FROM {t} \
                     WHERE id = ANY($1) AND {live} AND ($3 OR owner IS NOT DISTINCT FROM $4)), \
                 total AS (SELECT coalesce(sum(size), 0) AS size FROM found) \
                 SELECT NULL::text FROM total WHERE total.size > $5 \
                 UNION ALL \
                 SELECT {t}.record::text FROM {t} JOIN found ON found.id = {t}.id \
                 WHERE (SELECT size FROM total) <= $5",
                clock = clock(2),
            )),
            select: sql(format!(
                "WITH {clock} SELECT revision, record::text FROM {t} WHERE id = $1 AND {live}",
                clock = clock(2),
            )),
            // Owner-scoped reads check the owner and the expiry in the database: a
            // foreign or expired row is never sent, nor decoded, exactly like a
            // missing one.
            select_owned: sql(format!(
                "WITH {clock} SELECT revision, record::text FROM {t} WHERE id = $1 \
                 AND owner IS NOT DISTINCT FROM $2 AND {live}",
                clock = clock(3),
            )),
            // An expired row is never written, whatever the caller read before.
            write: sql(format!(
                "WITH {clock}, written AS (\
                     UPDATE {t} SET revision = $3, status = $4, \
                     retired_at = CASE WHEN $5 THEN (SELECT now FROM clock) END, record = $7::json \
                     WHERE id = $1 AND revision = $2 AND {live} RETURNING 1) \
                 SELECT count(*) FROM written",
                clock = clock(6),
            )),
            columns: sql(
                "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute \
                 WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped"
                    .to_owned(),
            ),
            exists: sql("SELECT to_regclass($1) IS NOT NULL".to_owned()),
            create: vec![
                sql(format!(
                    "CREATE TABLE IF NOT EXISTS {t} (\
                         id bytea PRIMARY KEY, \
                         owner bytea, \
                         revision bigint NOT NULL, \
                         status text NOT NULL, \
                         expires_at bigint, \
                         retired_at bigint, \
                         record json NOT NULL, \
                         shard smallint NOT NULL DEFAULT 0, \
                         owner_shard smallint NOT NULL DEFAULT 0)"
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
            upgrade_owner: sql(format!(
                "ALTER TABLE {t} ALTER COLUMN owner TYPE bytea USING convert_to(owner, 'UTF8')"
            )),
            upgrade_record: sql(format!(
                "ALTER TABLE {t} ALTER COLUMN record TYPE json USING record::json"
            )),
            upgrade_shards: vec![
                sql(format!(
                    "ALTER TABLE {t} ADD COLUMN shard smallint NOT NULL DEFAULT 0, \
                     ADD COLUMN owner_shard smallint NOT NULL DEFAULT 0"
                )),
                // Round robin, so no shard holds more than its share of a cap the
                // table is within.
                sql(format!(
                    "UPDATE {t} SET shard = (spread.i % {COUNT_SHARDS})::smallint, \
                     owner_shard = (spread.j % {COUNT_SHARDS})::smallint \
                     FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS i, \
                           row_number() OVER (PARTITION BY owner ORDER BY id) - 1 AS j FROM {t}) spread \
                     WHERE {t}.id = spread.id"
                )),
            ],
            create_counts: sql(format!(
                "CREATE TABLE {c} (scope bytea NOT NULL, shard smallint NOT NULL, n bigint NOT NULL, \
                 PRIMARY KEY (scope, shard))"
            )),
            fill_counts: vec![
                sql(format!(
                    "INSERT INTO {c} (scope, shard, n) SELECT '\\x00'::bytea, shard, count(*) FROM {t} GROUP BY shard"
                )),
                sql(format!(
                    "INSERT INTO {c} (scope, shard, n) \
                     SELECT CASE WHEN owner IS NULL THEN '\\x01'::bytea ELSE '\\x02'::bytea || owner END, \
                         owner_shard, count(*) FROM {t} GROUP BY 1, 2"
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
            // By the database's clock, as `at` was written.
            prune: sql(format!(
                "DELETE FROM {log} \
                 WHERE at <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1"
            )),
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
    /// The owner's UTF-8 bytes: `bytea` keeps any principal, U+0000 included.
    owner: Option<Vec<u8>>,
    revision: i64,
    status: &'static str,
    /// The TTL: the row's `expires_at` is the store's `now` at creation plus this.
    ttl: Option<i64>,
    /// Whether the record is retired (terminal without a TTL): `retired_at` is
    /// the store's `now` when it became so.
    retired: bool,
    /// `json`, not `jsonb`: kept as written, so `\u0000` and every number survive.
    record: String,
}

impl Columns {
    fn of(record: &TaskRecord) -> Result<Self, StoreError> {
        Ok(Columns {
            owner: record
                .owner
                .as_ref()
                .map(|p| p.as_str().as_bytes().to_vec()),
            revision: i64::try_from(record.revision).map_err(StoreError::backend)?,
            status: record.status.as_str(),
            ttl: record.ttl_ms.map(millis),
            retired: record.retired_at().is_some(),
            record: serde_json::to_string(record).map_err(StoreError::backend)?,
        })
    }
}

/// The records of a batched read, decoded, in the order of `ids`, each once.
fn in_order(
    ids: &[TaskId],
    scope: Scope<'_>,
    rows: Vec<String>,
) -> Result<Vec<TaskRecord>, StoreError> {
    let mut found = std::collections::HashMap::with_capacity(rows.len());
    for text in rows {
        let record: TaskRecord = serde_json::from_str(&text).map_err(StoreError::backend)?;
        if scope.permits(record.owner.as_ref()) {
            found.insert(record.id, record);
        }
    }
    Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
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
            // The expiry was decided in the `SELECT`, by the store's clock.
            Ok(self
                .read(id, scope, now)
                .await?
                .filter(|r| scope.permits(r.owner.as_ref())))
        })
    }

    /// One `SELECT … WHERE id = ANY($1)`, the owner and the expiry checked in the
    /// database: a foreign or expired row is never sent.
    fn get_many<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let rows: Vec<String> = self
                .batch(&self.inner.sql.select_many, ids, scope, now)
                .fetch_all(&self.inner.pool)
                .await
                .map_err(StoreError::backend)?;
            in_order(ids, scope, rows)
        })
    }

    /// One statement: PostgreSQL sums the sizes of the rows found
    /// (`octet_length(record::text)`, the record's JSON as stored) and sends the
    /// records only when they fit the budget; over it, nothing but one `NULL`.
    fn get_many_within<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
        budget: usize,
    ) -> BoxFuture<'a, Result<Budgeted, StoreError>> {
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Budgeted::Within(Vec::new()));
            }
            let rows: Vec<Option<String>> = self
                .batch(&self.inner.sql.select_within, ids, scope, now)
                .bind(i64::try_from(budget).unwrap_or(i64::MAX))
                .fetch_all(&self.inner.pool)
                .await
                .map_err(StoreError::backend)?;
            match rows.into_iter().collect::<Option<Vec<String>>>() {
                Some(rows) => in_order(ids, scope, rows).map(Budgeted::Within),
                None => Ok(Budgeted::OverBudget),
            }
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
            let found: Vec<Vec<u8>> = self
                .batch(&self.inner.sql.visible, ids, scope, now)
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
        Box::pin(compare_and_swap(
            self,
            self.inner.clock,
            id,
            scope,
            transition,
            now,
        ))
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(async move {
            let retention_ms = i64::try_from(FEED_RETENTION.as_millis()).unwrap_or(i64::MAX);
            sqlx::query(self.inner.log.prune.clone())
                .bind(retention_ms)
                .execute(&self.inner.pool)
                .await
                .map_err(StoreError::backend)?;
            let now = self.clock_arg(now);
            let mut total = 0;
            loop {
                let removed = self
                    .prune(PruneGroup::All, now, Some(retention), CLEANUP_BATCH)
                    .await?;
                total += removed;
                if removed < CLEANUP_BATCH as usize {
                    return Ok(total);
                }
            }
        })
    }

    /// Leases in the tables `T_leases` and `T_lease_holds` beside the task table
    /// `T` (created by [`migrate`](PostgresStore::migrate)), on a pool of two
    /// connections of their own (the store pool's settings), so renewals never
    /// wait behind requests.
    fn leases(&self) -> Option<Arc<dyn LeaseStore>> {
        Some(Arc::new(PgLeases::new(
            self.inner.pool.clone(),
            self.inner.leases.clone(),
        )))
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
        let mut backoff = Backoff::new(LISTEN_BACKOFF_MIN, LISTEN_BACKOFF_MAX);
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
            let delay = backoff.next_delay();
            tracing::warn!(
                error = %error,
                retry_in_ms = delay.as_millis() as u64,
                "mcp-tasks: the PostgreSQL change listener failed; reconnecting"
            );
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Serves one connection, already listening: catches up, then forwards
    /// notifications and keeps the checkpoint, until the connection fails.
    async fn serve(&mut self, mut listener: PgListener, backoff: &mut Backoff) -> sqlx::Error {
        if let Err(e) = self.catch_up(&mut listener).await {
            return e;
        }
        self.ready.send_replace(true);
        backoff.reset();
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
                    if let Some(position) = self.position {
                        // What was logged a tick ago has been announced by now if
                        // its writer lived to announce it (announcements follow the
                        // commit): delivering it again here is what bounds the
                        // delay of a write whose node died in between.
                        if let Err(e) = self
                            .deliver(&mut listener, position.replay_from, Some(position.latest))
                            .await
                        {
                            return e;
                        }
                        self.position = Some(Checkpoint {
                            replay_from: position.latest,
                            latest,
                        });
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
        from = self.deliver(listener, from, None).await?;
        self.position = Some(Checkpoint {
            replay_from: from,
            latest: from,
        });
        Ok(())
    }

    /// Delivers every logged change after position `from`, up to `until` when
    /// given (this node's own too: a re-read of one's own write changes nothing).
    /// Returns the last position delivered (`from` when none was).
    async fn deliver(
        &self,
        listener: &mut PgListener,
        mut from: i64,
        until: Option<i64>,
    ) -> Result<i64, sqlx::Error> {
        let mut replayed = 0usize;
        loop {
            let rows: Vec<(i64, Vec<u8>)> = bounded(
                sqlx::query_as(self.log.since.clone())
                    .bind(from)
                    .bind(CATCH_UP_BATCH)
                    .fetch_all(&mut *listener),
            )
            .await?;
            let full = rows.len() as i64 >= CATCH_UP_BATCH;
            let mut past_end = false;
            for (seq, id) in rows {
                if until.is_some_and(|until| seq > until) {
                    past_end = true;
                    break;
                }
                if let Ok(bytes) = <[u8; 32]>::try_from(id.as_slice()) {
                    self.sender.send(TaskId::from_bytes(bytes));
                    replayed += 1;
                }
                from = seq;
            }
            if !full || past_end {
                break;
            }
        }
        tracing::debug!(replayed, "mcp-tasks: replayed the PostgreSQL change log");
        Ok(from)
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

/// The server of `options` as errors and logs show it: a URL without the
/// password (`***` in its place when the URL had one).
fn shown_url(options: &PgConnectOptions, has_password: bool) -> String {
    let place = match options.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", options.get_host(), options.get_port()),
    };
    let place = match options.get_database() {
        Some(database) => format!("{place}/{database}"),
        None => place,
    };
    super::connect::shown_url(
        "postgres",
        Some(options.get_username()),
        has_password,
        &place,
    )
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

/// The counter scope of one owner's cap: `[1]` for the anonymous owner, `[2]` and
/// the principal's bytes otherwise (never the row cap's `[0]`).
fn owner_scope(owner: Option<&[u8]>) -> Vec<u8> {
    match owner {
        None => vec![1],
        Some(owner) => {
            let mut scope = Vec::with_capacity(owner.len() + 1);
            scope.push(2);
            scope.extend_from_slice(owner);
            scope
        }
    }
}

/// Shard `shard`'s share of a cap of `max`: the shares add up to `max` exactly.
fn shard_cap(max: usize, shard: i16) -> i64 {
    let shards = COUNT_SHARDS as usize;
    let shard = usize::try_from(shard).unwrap_or(0);
    let share = max / shards + usize::from(shard < max % shards);
    i64::try_from(share).unwrap_or(i64::MAX)
}

/// A cap's base share per shard and the remainder: shard `s` may hold
/// `base + (s < remainder)`.
fn shares(max: usize) -> (i64, i16) {
    let shards = COUNT_SHARDS as usize;
    (
        i64::try_from(max / shards).unwrap_or(i64::MAX),
        i16::try_from(max % shards).unwrap_or(0),
    )
}

/// A shard from a random byte, among those with a share of `max` (all without a
/// cap).
fn pick_shard(random: u8, max: Option<usize>) -> i16 {
    let usable = max.map_or(COUNT_SHARDS as usize, |max| {
        max.clamp(1, COUNT_SHARDS as usize)
    });
    i16::try_from(usize::from(random) % usable).unwrap_or(0)
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
    use crate::task::Principal;

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
        let mut record = TaskRecord::new(
            TaskId::random(),
            Some(Principal::from("a\u{0}b")),
            Timestamp::from_millis(1_000),
        );
        record.ttl_ms = Some(500);
        let columns = Columns::of(&record).unwrap();
        assert_eq!(columns.ttl, Some(500));
        assert!(!columns.retired);
        assert_eq!(columns.status, "working");
        assert_eq!(columns.owner.as_deref(), Some(&b"a\0b"[..]));

        record.ttl_ms = None;
        record
            .apply(&Transition::Cancel, Timestamp::from_millis(2_000))
            .unwrap();
        let columns = Columns::of(&record).unwrap();
        assert_eq!(columns.ttl, None);
        assert!(columns.retired);
        assert_eq!(columns.revision, 1);
        let back: TaskRecord = serde_json::from_str(&columns.record).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn reads_and_writes_decide_expiry_in_sql_on_one_clock() {
        let sql = Statements::new("mcp_tasks");
        let owned = sql.select_owned.as_str();
        assert!(owned.contains("owner IS NOT DISTINCT FROM $2"), "{owned}");
        for statement in [
            &sql.select,
            &sql.select_owned,
            &sql.visible,
            &sql.select_many,
            &sql.select_within,
            &sql.write,
            &sql.insert,
        ] {
            let text = statement.as_str();
            assert!(text.contains("clock_timestamp()"), "{text}");
        }
        for statement in [
            &sql.select,
            &sql.select_owned,
            &sql.visible,
            &sql.select_many,
            &sql.select_within,
            &sql.write,
        ] {
            assert!(
                statement
                    .as_str()
                    .contains("expires_at > (SELECT now FROM clock)")
            );
        }
        assert!(sql.prune_all.as_str().contains("retired_at <="));
        // No statement hands PostgreSQL a `jsonb` it would refuse `\u0000` in.
        assert!(!sql.insert.as_str().contains("jsonb") && !sql.write.as_str().contains("jsonb"));
    }

    #[test]
    fn the_change_log_is_named_after_the_table_and_fed_by_a_trigger() {
        let log = LogStatements::new("mcp_tasks");
        assert!(
            log.since
                .as_str()
                .contains("\"mcp_tasks_feed\" WHERE seq > $1 ORDER BY seq")
        );
        assert!(log.prune.as_str().contains("clock_timestamp()"));
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
    fn shard_shares_add_up_to_the_cap() {
        for max in [0, 1, 5, 31, 32, 33, 1_000, 10_000, 1_000_001] {
            let total: i64 = (0..COUNT_SHARDS).map(|shard| shard_cap(max, shard)).sum();
            assert_eq!(total, max as i64, "{max}");
            for random in [0, 1, 200, 255] {
                let shard = pick_shard(random, Some(max));
                assert!(max == 0 || shard_cap(max, shard) > 0, "{max} {shard}");
            }
        }
        assert_ne!(owner_scope(None), owner_scope(Some(b"")));
        assert_ne!(owner_scope(Some(b"")), ROWS_SCOPE);
        assert_eq!(fnv1a(b"mcp_tasks"), fnv1a(b"mcp_tasks"));
        assert_ne!(fnv1a(b"mcp_tasks"), fnv1a(b"mcp_tasks_2"));
    }
}
