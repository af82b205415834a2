//! The Redis store: records shared between nodes, compare-and-swap through
//! server-side scripts, native key expiry, change announcements on a stream.
//!
//! # Layout
//!
//! With the prefix `P` (default `mcp-tasks:`), the store keeps:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P task:<id>` | hash | `rec`: the record as JSON; `rev`: its revision, the CAS token; `own`: the owner tag, so owner-scoped reads compare it on the server and never fetch a foreign record. Expires natively `ttl` after the create (`PEXPIRE`). |
//! | `P owners` | hash | one field per stored record: id → owner tag. Its length is the row count. |
//! | `P counts` | hash | owner tag → how many records that owner holds. |
//! | `P sizes` | hash | one field per stored record: id → the length of its `rec`, as last written. |
//! | `P bytes` | hash | owner tag → the sum of that owner's records' sizes: what [`TaskStore::owner_bytes`](crate::store::TaskStore::owner_bytes) reads. |
//! | `P expiry` | sorted set | ids of records with a TTL, scored by expiry time. |
//! | `P retired` | sorted set | ids of terminal records without a TTL, scored by when they finished. |
//! | `P owner-expiry:<tag>`, `P owner-retired:<tag>` | sorted sets | the same two indexes for one owner, so an owner at its cap prunes its own expired and retired records. |
//! | `P owner-list:<tag>` | sorted set | one owner's tasks for `list`, scored by `created_at`; the member is the id in an alphabet in byte order, so that tasks created in one millisecond sort as their ids do. |
//! | `P changes` | stream | an entry `c` = `<node>:<id>` after every write, trimmed to about 100 000 entries (`MAXLEN ~`). |
//! | `P leases` | set | worker leases: `<incarnation hex>:<node id>` of each. |
//! | `P lease:<lease>` | hash | one lease's renewal count, lease length (ms) and claim. |
//! | `P holds:<lease>` | set | the task ids one lease holds. |
//!
//! Native expiry deletes a record's key but not its index entries, so the row and
//! per-owner counts (and bytes) keep counting a record until `cleanup` (or a `create` that finds
//! the store full, which first prunes records whose TTL ran out and records retired
//! past [`CreateLimits::retention`](crate::store::CreateLimits::retention)) removes its index entries. The counts and the data only ever change inside the scripts below, so
//! they always agree.

mod leases;
mod ops;
mod relay;
mod scripts;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Client, IntoConnectionInfo};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::connect::ConnectError;
use super::feed::relay::encode as announcement;
use super::lease::NodeId;
use super::{ChangeSender, Clock, FEED_CAPACITY};
use crate::error::{BoxError, StoreError};
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp};

/// Local queues for writers on one task (striped by id): writers on one node wait
/// their turn instead of racing each other's compare-and-swap.
const WRITE_STRIPES: usize = 128;

/// A store in Redis, shared by every node that uses the same server and key prefix.
///
/// - **Atomicity.** `update` reads the record, runs [`TaskRecord::apply`](crate::TaskRecord::apply) here, and
///   writes the result with a server-side script that succeeds only if the stored
///   revision is still the one it read; on a conflict it retries from the fresh
///   record (at most 32 times, then [`StoreError::Contention`], which promises that
///   nothing was written). Updates to one task from one node queue locally, so
///   the compare-and-swap only ever races other nodes. `create` checks the id, the row cap and the per-owner cap
///   and inserts in one script.
/// - **Expiry, on one clock.** A record with a TTL expires natively `ttl` after the
///   create (`PEXPIRE`, a duration, so no node's clock sets it), and the scripts
///   score expiry and retirement by the server's `TIME` (the default
///   [`Clock::Store`]): nodes whose clocks disagree agree on when a task expires and
///   when a finished one may go. With [`Clock::Caller`] the scripts take the
///   caller's `now` instead and reads compare against it too. `cleanup`
///   removes expired records and terminal records without a TTL older than the
///   retention, and counts index entries, so records Redis already dropped count too.
///   Until then an expired record still takes its row under the caps, as in
///   [`MemoryStore`](crate::MemoryStore); a `create` that finds the store full first
///   prunes the records whose TTL ran out by the new record's creation time, and
///   the terminal records retired past [`CreateLimits::retention`](crate::store::CreateLimits::retention): the oldest of
///   any owner when the row cap is hit, the owner's own (from per-owner indexes)
///   when its cap is, so the per-owner cap is exact.
/// - **Listing.** `create` adds each task to its owner's sorted set (scored by
///   `created_at`) in the same script, and every delete takes it out; `list` reads
///   a page from it by rank in one script, skipping records gone or expired. Tasks
///   stored by a version without these sets are not listed.
/// - **Ownership.** Every record keeps its owner tag in a field of its own; an
///   owner-scoped `get`, `get_many`, `update` or `visible` compares it in a server-side script
///   and gets nothing back for a foreign record, so a foreign id costs what an
///   unknown one costs (one round trip, nothing decoded).
/// - **Other nodes.** Every write appends `<node>:<task id>` to the stream
///   `<prefix>changes` in the same script (`XADD … MAXLEN ~ 100000`).
///   [`listen`](Self::listen) (or else the first
///   [`TaskStore::subscribe`](crate::store::TaskStore::subscribe)) starts, once, on the
///   current tokio runtime, a listener on its own connection (named
///   [`feed_connection_name`](Self::feed_connection_name) with `CLIENT SETNAME`) that
///   reads the stream from the last entry it saw and forwards the ids written by other
///   `RedisStore` instances. When its connection drops it reconnects with backoff and
///   goes on from that entry, so a change made while it was away is delivered all the
///   same; if the stream was trimmed past it meanwhile, it reports
///   [`FeedEvent::Missed`](super::FeedEvent::Missed) and the layer re-reads every task
///   it waits on. Clones of one `RedisStore` are one node.
///
/// Every key starts with the prefix, so several deployments (or tests) can share a
/// server. The scripts touch several keys, so on a Redis Cluster the prefix must
/// carry a hash tag (`{mcp-tasks}:`) to keep them in one slot.
///
/// ```no_run
/// use mcp_tasks::{RedisStore, TasksLayer};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379")
///     .await?
///     .with_prefix("billing-tasks:");
/// // Optional: start listening for other nodes' changes before serving.
/// store.listen().await?;
/// let layer = TasksLayer::new(store);
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    keys: Arc<Keys>,
    node: NodeId,
    feed: Option<Arc<Feed>>,
    writers: Arc<[tokio::sync::Mutex<()>]>,
    clock: Clock,
    /// The server as logged (no password), when this store made the connection.
    server: Option<Arc<str>>,
    /// Set once this store said where it keeps its tasks.
    announced: Arc<std::sync::atomic::AtomicBool>,
}

struct Keys {
    prefix: String,
    task: String,
    owners: String,
    counts: String,
    sizes: String,
    bytes: String,
    expiry: String,
    retired: String,
    /// Prefixes of the per-owner indexes, completed by the owner tag.
    owner_expiry: String,
    owner_retired: String,
    owner_list: String,
    channel: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_owned(),
            task: format!("{prefix}task:"),
            owners: format!("{prefix}owners"),
            counts: format!("{prefix}counts"),
            sizes: format!("{prefix}sizes"),
            bytes: format!("{prefix}bytes"),
            expiry: format!("{prefix}expiry"),
            retired: format!("{prefix}retired"),
            owner_expiry: format!("{prefix}owner-expiry:"),
            owner_retired: format!("{prefix}owner-retired:"),
            owner_list: format!("{prefix}owner-list:"),
            channel: format!("{prefix}changes"),
        }
    }

    fn task(&self, id: &str) -> String {
        format!("{}{id}", self.task)
    }
}

/// The server of `info` as errors and logs show it: a URL whose password, if
/// any, is `***`.
fn shown_url(info: &redis::ConnectionInfo) -> String {
    let settings = info.redis_settings();
    let (scheme, place) = match info.addr() {
        redis::ConnectionAddr::Tcp(..) => ("redis", format!("{}/{}", info.addr(), settings.db())),
        redis::ConnectionAddr::TcpTls { .. } => {
            ("rediss", format!("{}/{}", info.addr(), settings.db()))
        }
        _ => ("redis+unix", info.addr().to_string()),
    };
    super::connect::shown_url(
        scheme,
        settings.username(),
        settings.password().is_some(),
        &place,
    )
}

/// The change feed of one node: its broadcast channel and its listener task.
struct Feed {
    client: Client,
    sender: ChangeSender,
    listener: Mutex<Option<Listener>>,
}

struct Listener {
    /// Dropped with the store, which stops the listener.
    _stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    /// True while the listener is connected and caught up.
    ready: watch::Receiver<bool>,
}

impl Feed {
    fn new(client: Client) -> Arc<Self> {
        Arc::new(Feed {
            client,
            sender: ChangeSender::new(FEED_CAPACITY),
            listener: Mutex::new(None),
        })
    }

    fn lock_listener(&self) -> MutexGuard<'_, Option<Listener>> {
        // The guarded value is replaced whole; a panic elsewhere cannot leave it torn.
        self.listener
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Listener {
    /// The readiness of this listener, unless its task has ended.
    fn running(&self) -> Option<watch::Receiver<bool>> {
        (!self.task.is_finished()).then(|| self.ready.clone())
    }
}

impl RedisStore {
    /// The key prefix used unless [`RedisStore::with_prefix`] says otherwise:
    /// `mcp-tasks:`, announcing on the channel `mcp-tasks:changes`.
    ///
    /// ```
    /// assert_eq!(mcp_tasks::RedisStore::DEFAULT_PREFIX, "mcp-tasks:");
    /// ```
    pub const DEFAULT_PREFIX: &'static str = "mcp-tasks:";

    /// Connects to the server at `url` (e.g. `redis://127.0.0.1:6379`), with a
    /// reconnecting connection for the records and, once [`listen`](Self::listen) or
    /// [`TaskStore::subscribe`](crate::store::TaskStore::subscribe) is called, a
    /// second one for the change feed. Keys go under
    /// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX), `mcp-tasks:`.
    ///
    /// ```no_run
    /// use mcp_tasks::{RedisStore, TasksLayer};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.prefix(), "mcp-tasks:");
    /// let layer = TasksLayer::new(store); // subscribes to other nodes' changes
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A server that refuses the connection fails it at once; one that does not
    /// answer fails it after [`CONNECT_TIMEOUT`](crate::defaults::CONNECT_TIMEOUT)
    /// (5 s; [`connect_with_timeout`](Self::connect_with_timeout) sets another). The
    /// error's cause names the server, its password shown as `***`, and why:
    ///
    /// ```no_run
    /// # async fn run() {
    /// let refused = mcp_tasks::RedisStore::connect("redis://:s3cret@127.0.0.1:1").await;
    /// let cause = std::error::Error::source(&refused.unwrap_err()).unwrap().to_string();
    /// assert_eq!(cause, "could not connect to redis://:***@127.0.0.1:1/0");
    /// # }
    /// ```
    pub async fn connect(url: impl IntoConnectionInfo) -> Result<Self, StoreError> {
        Self::connect_with_timeout(url, crate::defaults::CONNECT_TIMEOUT).await
    }

    /// [`connect`](Self::connect), giving up on reaching the server after `timeout`
    /// instead of [`CONNECT_TIMEOUT`](crate::defaults::CONNECT_TIMEOUT). It bounds
    /// the first connect only; a connection lost later is re-made in the background.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use mcp_tasks::RedisStore;
    ///
    /// # async fn run() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store =
    ///     RedisStore::connect_with_timeout("redis://127.0.0.1:6379", Duration::from_secs(2)).await?;
    /// # drop(store);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with_timeout(
        url: impl IntoConnectionInfo,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        let client = Client::open(url).map_err(StoreError::backend)?;
        let shown = shown_url(client.get_connection_info());
        // One attempt first: the manager's own retries would hide a wrong address
        // behind seconds of backoff and report no cause.
        // `timeout` alone bounds it, so that running out says which limit it was.
        let once = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        match tokio::time::timeout(
            timeout,
            client.get_multiplexed_async_connection_with_config(&once),
        )
        .await
        {
            Ok(Ok(probe)) => drop(probe),
            Ok(Err(e)) => return Err(ConnectError::failed(shown, e)),
            Err(_) => return Err(ConnectError::timed_out(shown, timeout)),
        }
        let conn = match tokio::time::timeout(timeout, ConnectionManager::new(client.clone())).await
        {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(ConnectError::failed(shown, e)),
            Err(_) => return Err(ConnectError::timed_out(shown, timeout)),
        };
        Ok(RedisStore::new(conn)
            .with_change_feed(client)
            .with_server(shown))
    }

    /// A store on an existing connection manager (configured as you like).
    ///
    /// It announces its writes to other nodes but, until
    /// [`RedisStore::with_change_feed`] gives it a client to listen with, does not
    /// hear theirs: [`TaskStore::subscribe`](crate::store::TaskStore::subscribe) answers `None`.
    ///
    /// ```no_run
    /// use mcp_tasks::RedisStore;
    /// use mcp_tasks::redis::Client;
    /// use mcp_tasks::redis::aio::ConnectionManager;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::open("redis://127.0.0.1:6379")?;
    /// let conn = ConnectionManager::new(client.clone()).await?;
    /// let store = RedisStore::new(conn).with_change_feed(client);
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(conn: ConnectionManager) -> Self {
        RedisStore {
            conn,
            keys: Arc::new(Keys::new(Self::DEFAULT_PREFIX)),
            node: NodeId::random(),
            feed: None,
            writers: (0..WRITE_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            clock: Clock::Store,
            server: None,
            announced: Arc::default(),
        }
    }

    fn with_server(mut self, shown: String) -> Self {
        self.server = Some(shown.into());
        self
    }

    /// Logs, once per store, the server and key prefix this node keeps its tasks
    /// under: a node on another prefix (or database) sees none of them, and
    /// answers "not found" for them without any other sign.
    fn announce(&self) {
        if self
            .announced
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        tracing::info!(
            server = %self.server.as_deref().unwrap_or("(a connection of the caller's)"),
            prefix = %self.keys.prefix,
            "mcp-tasks: Redis store; nodes share tasks only under the same key prefix"
        );
    }

    /// The same store, deciding expiry and retention by `clock`: by default
    /// [`Clock::Store`], the server's `TIME` inside each script (and native key
    /// expiry set as a duration), so that nodes whose clocks disagree still agree
    /// on when a task expires. [`Clock::Caller`] takes the `now` of each call (and a
    /// new record's `created_at`) instead, for tests that drive time.
    ///
    /// ```no_run
    /// use mcp_tasks::RedisStore;
    /// use mcp_tasks::store::Clock;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.clock(), Clock::Store);
    /// assert_eq!(store.with_clock(Clock::Caller).clock(), Clock::Caller);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The clock this store decides expiry and retention by.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.clock(), mcp_tasks::store::Clock::Store);
    /// # Ok(())
    /// # }
    /// ```
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The `now` a script gets: the caller's, or empty for the server's `TIME`.
    fn clock_arg(&self, now: Timestamp) -> String {
        match self.clock {
            Clock::Caller => now.as_millis().to_string(),
            Clock::Store => String::new(),
        }
    }

    /// Whether a read at `now` in `scope` sees `record`: on the store's clock the
    /// server already left expired records out (native expiry).
    fn sees(&self, record: &TaskRecord, scope: Scope<'_>, now: Timestamp) -> bool {
        match self.clock {
            Clock::Caller => record.is_visible(scope, now),
            Clock::Store => scope.permits(record.owner.as_ref()),
        }
    }

    /// Listens for other nodes' changes with a dedicated connection from `client`
    /// (its blocking stream reads need a connection of their own). The connection
    /// opens at [`listen`](Self::listen), or else on the first
    /// [`TaskStore::subscribe`](crate::store::TaskStore::subscribe), which the layer
    /// calls when it is built.
    ///
    /// ```no_run
    /// use mcp_tasks::RedisStore;
    /// use mcp_tasks::store::TaskStore;
    /// use mcp_tasks::redis::Client;
    /// use mcp_tasks::redis::aio::ConnectionManager;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::open("redis://127.0.0.1:6379")?;
    /// let store = RedisStore::new(ConnectionManager::new(client.clone()).await?);
    /// assert!(store.subscribe().is_none()); // deaf to other nodes
    /// let store = store.with_change_feed(client);
    /// assert!(store.subscribe().is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_change_feed(mut self, client: Client) -> Self {
        self.feed = Some(Feed::new(client));
        self
    }

    /// Puts every key (and the change channel) under `prefix` instead of
    /// `mcp-tasks:`. Nodes that share tasks must use the same prefix. Call it before
    /// using the store.
    ///
    /// ```no_run
    /// use mcp_tasks::RedisStore;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// // On Redis Cluster: a hash tag keeps every key of the store in one slot.
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?.with_prefix("{billing}:");
    /// assert_eq!(store.prefix(), "{billing}:");
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.keys = Arc::new(Keys::new(&prefix.into()));
        if let Some(feed) = &self.feed {
            self.feed = Some(Feed::new(feed.client.clone()));
        }
        self
    }

    /// The key prefix in use.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// assert_eq!(store.prefix(), mcp_tasks::RedisStore::DEFAULT_PREFIX);
    /// # Ok(())
    /// # }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.keys.prefix
    }

    /// The name (`CLIENT SETNAME`) of this instance's change-feed connection:
    /// `mcp-tasks-feed-<node>`, where `<node>` tells the store instances apart, so
    /// `CLIENT LIST` shows which connection reads the stream for which node.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// assert!(store.feed_connection_name().starts_with("mcp-tasks-feed-"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn feed_connection_name(&self) -> String {
        format!("mcp-tasks-feed-{}", self.node)
    }

    fn writer_queue(&self, id: &TaskId) -> &tokio::sync::Mutex<()> {
        let bytes = id.as_bytes();
        let index = usize::from(bytes[0]) | (usize::from(bytes[1]) << 8);
        &self.writers[index % self.writers.len()]
    }

    fn payload(&self, id: &TaskId) -> String {
        announcement(&self.node, id)
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.keys.prefix)
            .field("node", &self.node.as_str())
            .field("change_feed", &self.feed.is_some())
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// The owner as stored in the bookkeeping hashes; unowned and owned never collide.
fn owner_tag(owner: Option<&Principal>) -> String {
    match owner {
        None => "-".to_owned(),
        Some(principal) => format!("={principal}"),
    }
}

fn retention_ms(retention: Duration) -> u64 {
    u64::try_from(retention.as_millis()).unwrap_or(u64::MAX)
}

fn optional<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(String::new, |v| v.to_string())
}

fn encode(record: &TaskRecord) -> Result<String, StoreError> {
    serde_json::to_string(record).map_err(StoreError::backend)
}

fn decode(json: &str) -> Result<TaskRecord, StoreError> {
    serde_json::from_str(json).map_err(|e| {
        StoreError::Backend(Box::new(Malformed {
            what: "a stored task record could not be read",
            source: Some(Box::new(e)),
        }))
    })
}

fn unexpected(what: &'static str) -> StoreError {
    StoreError::Backend(Box::new(Malformed { what, source: None }))
}

/// Redis answered something this store never writes.
#[derive(Debug)]
struct Malformed {
    what: &'static str,
    source: Option<BoxError>,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what)
    }
}

impl std::error::Error for Malformed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_tags_keep_unowned_apart_from_every_principal() {
        assert_ne!(owner_tag(None), owner_tag(Some(&Principal::from("-"))));
        assert_ne!(owner_tag(None), owner_tag(Some(&Principal::from(""))));
        assert_eq!(
            owner_tag(Some(&Principal::from("alice"))),
            owner_tag(Some(&Principal::from("alice")))
        );
    }
}
