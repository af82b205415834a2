//! `PostgresStore`: task records in one PostgreSQL table, shared between nodes, with
//! changes announced through `LISTEN`/`NOTIFY`.

mod announce;
mod leases;
mod ops;
mod relay;
mod schema;
mod statements;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tokio::sync::{oneshot, watch};

use self::announce::Announcer;
use self::leases::LeaseStatements;
use self::statements::{LogStatements, Statements, millis};
use super::connect::ConnectError;
use super::lease::NodeId;
use super::{ChangeSender, Clock};
use crate::error::{ConfigError, StoreError};
use crate::task::{TaskId, Timestamp};

/// Longest accepted table name, so that the derived index and channel names stay
/// within PostgreSQL's 63-byte identifier limit.
const MAX_TABLE_LEN: usize = 48;

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
/// terminal, by the same clock), `record json` (the whole [`TaskRecord`](crate::TaskRecord), as
/// written), `shard`, `owner_shard` (the counter shards the row counts in) and
/// `created_at bigint` (the record's `created_at`, milliseconds, for the index
/// `<table>_list_idx` on `(owner, created_at DESC, id DESC)` that `list` reads). The
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
/// first, since their writes do not fit the new columns. A table without
/// `created_at` gets the column, filled from each record's own `created_at`, and
/// its index; rows a node of that version inserts afterwards get the database's
/// time.
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
/// - `update` reads the row, runs [`TaskRecord::apply`](crate::TaskRecord::apply) in Rust, and writes back with
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
///   retired past [`CreateLimits::retention`](crate::store::CreateLimits::retention) (of its owner, for the owner's cap)
///   and decides on the exact sums with every shard row of both caps locked: near a
///   cap (and only there) creates wait for each other. The shares add up to the cap,
///   so the caps are exact across nodes.
/// - `visible`, `get_many` and `get_many_within` check or read all the ids of one
///   listen in one `SELECT … WHERE id = ANY($1)`. `get_many_within` sums the rows'
///   sizes (`octet_length(record::text)`) in the same statement and sends the
///   records only when they fit the budget.
/// - `cleanup` deletes through the indexes on `expires_at` and `retired_at`.
/// - `list` reads one range of the index on `(owner, created_at DESC, id DESC)`,
///   just after the previous page's last task, the expiry checked in the same
///   `SELECT`: a page costs its rows, not the table's.
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
/// single node. [`TaskStore::subscribe`](crate::store::TaskStore::subscribe) starts a background
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
/// [`cleanup`]: crate::store::TaskStore::cleanup
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
    node: NodeId,
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
        let node = NodeId::random();
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
        let options: PgConnectOptions = url.parse().map_err(StoreError::backend)?;
        let shown = shown_url(&options, super::connect::url_has_password(url));
        let statement_timeout = format!("{}ms", crate::defaults::STATEMENT_TIMEOUT.as_millis());
        let options = options.options([("statement_timeout", statement_timeout.as_str())]);
        probe(&options, &shown, timeout).await?;
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
}

impl Inner {
    fn new(pool: PgPool, table: &str, node: NodeId) -> Self {
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
            .field("node", &self.inner.node.as_str())
            .finish_non_exhaustive()
    }
}

/// One connection attempt to the server of `options` (shown as `shown`), within
/// `timeout`, closed at once: a pool retries a refused connection until its acquire
/// timeout and then reports only that it timed out, not why.
pub(super) async fn probe(
    options: &PgConnectOptions,
    shown: &str,
    timeout: Duration,
) -> Result<(), StoreError> {
    use sqlx::{ConnectOptions as _, Connection as _};
    match tokio::time::timeout(timeout, options.connect()).await {
        Ok(Ok(probe)) => {
            let _ = tokio::time::timeout(timeout, probe.close()).await;
            Ok(())
        }
        Ok(Err(e)) => Err(ConnectError::failed(shown.to_owned(), e)),
        Err(_) => Err(ConnectError::timed_out(shown.to_owned(), timeout)),
    }
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

pub(crate) fn validate_table(table: &str) -> Result<(), ConfigError> {
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

/// 32-bit FNV-1a: a stable hash for advisory lock keys.
pub(crate) fn fnv1a(bytes: &[u8]) -> i32 {
    let hash = bytes.iter().fold(0x811c_9dc5_u32, |hash, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    i32::from_ne_bytes(hash.to_ne_bytes())
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
    fn lock_keys_are_stable_per_table() {
        assert_eq!(fnv1a(b"mcp_tasks"), fnv1a(b"mcp_tasks"));
        assert_ne!(fnv1a(b"mcp_tasks"), fnv1a(b"mcp_tasks_2"));
    }

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
}
