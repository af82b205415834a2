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
//! | `P expiry` | sorted set | ids of records with a TTL, scored by expiry time. |
//! | `P retired` | sorted set | ids of terminal records without a TTL, scored by when they finished. |
//! | `P owner-expiry:<tag>`, `P owner-retired:<tag>` | sorted sets | the same two indexes for one owner, so an owner at its cap prunes its own expired and retired records. |
//! | `P changes` | stream | an entry `c` = `<node>:<id>` after every write, trimmed to about 100 000 entries (`MAXLEN ~`). |
//! | `P leases` | set | worker leases: `<incarnation hex>:<node id>` of each. |
//! | `P lease:<lease>` | hash | one lease's renewal count, lease length (ms) and claim. |
//! | `P holds:<lease>` | set | the task ids one lease holds. |
//!
//! Native expiry deletes a record's key but not its index entries, so the row and
//! per-owner counts keep counting a record until `cleanup` (or a `create` that finds
//! the store full, which first prunes records whose TTL ran out and records retired
//! past [`CreateLimits::retention`]) removes its index entries. The counts and the data only ever change inside the scripts below, so
//! they always agree.

mod leases;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Client, IntoConnectionInfo, Script};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use self::leases::RedisLeases;
use super::LeaseStore;
use super::connect::ConnectError;
use super::rules::{CompareAndSwap, Written, compare_and_swap, node_id};
use super::{
    BoxFuture, Budgeted, ChangeFeed, ChangeSender, Clock, CreateLimits, FEED_CAPACITY, TaskStore,
    Updated,
};
use crate::backoff::Backoff;
use crate::error::{BoxError, Limit, StoreError};
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};

/// Expired records a full `create` prunes before it gives up.
const PRUNE_BATCH: u32 = 128;
/// Records one cleanup script removes per index before handing back control.
const CLEANUP_BATCH: u32 = 512;
/// Local queues for writers on one task (striped by id): writers on one node wait
/// their turn instead of racing each other's compare-and-swap.
const WRITE_STRIPES: usize = 128;
/// The change feed's reconnection backoff.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How long one blocking read of the change stream waits for new entries; an
/// answer later than [`READ_TIMEOUT`] means the connection is dead.
const READ_BLOCK: Duration = Duration::from_secs(5);
const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Entries one read of the change stream takes.
const READ_COUNT: usize = 512;
/// About how many entries the change stream keeps (the scripts' `MAXLEN ~`).
const FEED_MAXLEN: u64 = 100_000;
/// The latest expiry Redis is given (9999-12-31); later ones are left to `cleanup`.
const NATIVE_EXPIRY_MAX: u64 = 253_402_300_799_999;

/// The time a script decides at: its argument, or the server's `TIME` when the
/// argument is empty (the store's clock).
const CLOCK_FN: &str = r#"
local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function cutoff(now, retention)
  if retention == '' then
    return nil
  end
  return math.max(now - tonumber(retention), 0)
end
"#;

/// Removes one record and its bookkeeping (its owner's index entries included);
/// shared by the scripts that delete.
const DROP_FN: &str = r#"
local function drop(id, task_prefix, owners, counts, owner_expiry, owner_retired)
  redis.call('DEL', task_prefix .. id)
  local tag = redis.call('HGET', owners, id)
  if tag then
    redis.call('HDEL', owners, id)
    if redis.call('HINCRBY', counts, tag, -1) <= 0 then
      redis.call('HDEL', counts, tag)
    end
    redis.call('ZREM', owner_expiry .. tag, id)
    redis.call('ZREM', owner_retired .. tag, id)
  end
end
"#;

/// KEYS: task, owners, counts, expiry, retired, the owner's expiry, the owner's
/// retired.
/// ARGV: id, owner tag, revision, record, TTL, native TTL, retired ('1' or ''),
/// max rows, max per owner, now ('' for the server's clock), task key prefix, prune
/// batch, channel, payload, retention, owner expiry key prefix, owner retired key
/// prefix.
/// Empty strings stand for "none". Expiry and retirement are scored by `now` plus
/// the TTL; the key's native expiry is the TTL from now, so no node's clock sets it.
///
/// A full store prunes the oldest expired (and retired) records of any owner; an
/// owner at its cap prunes its own, from its own indexes, so the per-owner cap is
/// exact whatever the other owners hold.
const CREATE: &str = r#"
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('EXISTS', KEYS[1]) == 1 then
  return 'duplicate'
end
local now = clock(ARGV[10])
local retired_before = cutoff(now, ARGV[15])
local function full()
  if ARGV[8] ~= '' and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[8]) then
    return 'limit_rows'
  end
  if ARGV[9] ~= '' then
    local held = redis.call('HGET', KEYS[3], ARGV[2]) or '0'
    if tonumber(held) >= tonumber(ARGV[9]) then
      return 'limit_owner'
    end
  end
  return nil
end
-- Removes the records of `set` scored at most `bound`, up to one batch, and their
-- entries in the global index `global` (`drop` removes the owner's entries).
local function prune(set, global, bound)
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', bound, 'LIMIT', 0, ARGV[12])
  for _, id in ipairs(ids) do
    redis.call('ZREM', set, id)
    redis.call('ZREM', global, id)
    drop(id, ARGV[11], KEYS[2], KEYS[3], ARGV[16], ARGV[17])
  end
end
local limit = full()
if limit == 'limit_rows' then
  prune(KEYS[4], KEYS[4], now)
  if retired_before then
    prune(KEYS[5], KEYS[5], retired_before)
  end
  limit = full()
end
if limit == 'limit_owner' then
  prune(KEYS[6], KEYS[4], now)
  if retired_before then
    prune(KEYS[7], KEYS[5], retired_before)
  end
  limit = full()
end
if limit then
  return limit
end
redis.call('HSET', KEYS[1], 'rev', ARGV[3], 'rec', ARGV[4], 'own', ARGV[2])
if ARGV[5] ~= '' then
  local expires = now + tonumber(ARGV[5])
  redis.call('ZADD', KEYS[4], expires, ARGV[1])
  redis.call('ZADD', KEYS[6], expires, ARGV[1])
  if ARGV[6] ~= '' then
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
  end
elseif ARGV[7] ~= '' then
  redis.call('ZADD', KEYS[5], now, ARGV[1])
  redis.call('ZADD', KEYS[7], now, ARGV[1])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
redis.call('XADD', ARGV[13], 'MAXLEN', '~', '100000', '*', 'c', ARGV[14])
return 'ok'
"#;

/// KEYS: task, retired, owners.
/// ARGV: expected revision, new revision, record, retired ('1' or ''), id, channel,
/// payload, owner retired key prefix, now ('' for the server's clock).
/// Answers {CAS_WRITTEN, ''}, {CAS_GONE, ''} or {CAS_CONFLICT, current record}.
const CAS: &str = r#"
local current = redis.call('HMGET', KEYS[1], 'rev', 'rec')
if not current[1] or not current[2] then
  return {0, ''}
end
if current[1] ~= ARGV[1] then
  return {2, current[2]}
end
redis.call('HSET', KEYS[1], 'rev', ARGV[2], 'rec', ARGV[3])
if ARGV[4] ~= '' then
  local now = clock(ARGV[9])
  redis.call('ZADD', KEYS[2], now, ARGV[5])
  local tag = redis.call('HGET', KEYS[3], ARGV[5])
  if tag then
    redis.call('ZADD', ARGV[8] .. tag, now, ARGV[5])
  end
end
redis.call('XADD', ARGV[6], 'MAXLEN', '~', '100000', '*', 'c', ARGV[7])
return {1, ''}
"#;

/// KEYS: expiry, retired, owners, counts.
/// ARGV: now ('' for the server's clock), retention, task key prefix, batch, owner
/// expiry key prefix, owner retired key prefix.
/// Answers {removed, more}.
const CLEANUP: &str = r#"
local removed = 0
local more = 0
local function sweep(set, bound)
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', bound, 'LIMIT', 0, ARGV[4])
  if #ids >= tonumber(ARGV[4]) then
    more = 1
  end
  for _, id in ipairs(ids) do
    if redis.call('ZREM', set, id) == 1 then
      drop(id, ARGV[3], KEYS[3], KEYS[4], ARGV[5], ARGV[6])
      removed = removed + 1
    end
  end
end
local now = clock(ARGV[1])
sweep(KEYS[1], now)
sweep(KEYS[2], cutoff(now, ARGV[2]))
return {removed, more}
"#;

/// Owner-scoped reads. KEYS: owners, then one task key per id.
/// ARGV: owner tag, then the ids.
/// Answers, per id, the record if it exists and the owner tag matches, nil
/// otherwise: a foreign record never leaves the server, so it costs what an unknown
/// id costs. Records written before the `own` field existed are checked against the
/// owners hash.
const GET_VISIBLE: &str = r#"
local found = {}
for i = 2, #KEYS do
  local own = redis.call('HGET', KEYS[i], 'own')
  if not own and redis.call('EXISTS', KEYS[i]) == 1 then
    own = redis.call('HGET', KEYS[1], ARGV[i])
  end
  if own == ARGV[1] then
    found[i - 1] = redis.call('HGET', KEYS[i], 'rec')
  else
    found[i - 1] = false
  end
end
return found
"#;

/// Whether the record at `key` (of the task `id`) exists, is visible in `scope`
/// ('' for any owner, else the owner tag) and, with a `now`, has not expired by
/// its expiry score; shared by the scripts that read many ids. Records written
/// before the `own` field existed are checked against the owners hash.
const VISIBLE_FN: &str = r#"
local function visible(key, id, scope, now, owners, expiry)
  if redis.call('EXISTS', key) ~= 1 then
    return false
  end
  if scope ~= '' then
    local own = redis.call('HGET', key, 'own')
    if not own then
      own = redis.call('HGET', owners, id)
    end
    if own ~= scope then
      return false
    end
  end
  if now then
    local expires = redis.call('ZSCORE', expiry, id)
    if expires and tonumber(expires) <= now then
      return false
    end
  end
  return true
end
local function optional_now(arg)
  if arg == '' then
    return nil
  end
  return tonumber(arg)
end
"#;

/// Which ids exist, without their records. KEYS: owners, expiry, then one task
/// key per id.
/// ARGV: the scope ('' for any owner, else the owner tag), now ('' when the
/// server's native expiry decides), then the ids.
/// Answers, per id, 1 if the record exists, is visible in the scope and (with a
/// `now`) has not expired by its expiry score, 0 otherwise.
const EXISTING: &str = r#"
local found = {}
local now = optional_now(ARGV[2])
for i = 3, #KEYS do
  found[i - 2] = visible(KEYS[i], ARGV[i], ARGV[1], now, KEYS[1], KEYS[2]) and 1 or 0
end
return found
"#;

/// The records of many ids within a byte budget. KEYS: owners, expiry, then one
/// task key per id.
/// ARGV: the scope and now (as for the existing-ids script), the budget in bytes,
/// then the ids.
/// The sizes of the visible records (`HSTRLEN`, nothing fetched) are summed first;
/// past the budget the answer is 'over' and no record leaves the server. Otherwise,
/// per id, the record if visible, nil if not.
const GET_WITHIN: &str = r#"
local now = optional_now(ARGV[2])
local budget = tonumber(ARGV[3])
local total = 0
local hits = {}
for i = 3, #KEYS do
  if visible(KEYS[i], ARGV[i + 1], ARGV[1], now, KEYS[1], KEYS[2]) then
    total = total + redis.call('HSTRLEN', KEYS[i], 'rec')
    if total > budget then
      return 'over'
    end
    hits[#hits + 1] = i
  end
end
local found = {}
for i = 3, #KEYS do
  found[i - 2] = false
end
for _, i in ipairs(hits) do
  found[i - 2] = redis.call('HGET', KEYS[i], 'rec')
end
return found
"#;

const CAS_GONE: i64 = 0;
const CAS_WRITTEN: i64 = 1;

struct Scripts {
    create: Script,
    cas: Script,
    cleanup: Script,
    get_visible: Script,
    existing: Script,
    get_within: Script,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    create: Script::new(&[CLOCK_FN, DROP_FN, CREATE].concat()),
    cas: Script::new(&[CLOCK_FN, CAS].concat()),
    cleanup: Script::new(&[CLOCK_FN, DROP_FN, CLEANUP].concat()),
    get_visible: Script::new(GET_VISIBLE),
    existing: Script::new(&[VISIBLE_FN, EXISTING].concat()),
    get_within: Script::new(&[VISIBLE_FN, GET_WITHIN].concat()),
});

/// A store in Redis, shared by every node that uses the same server and key prefix.
///
/// - **Atomicity.** `update` reads the record, runs [`TaskRecord::apply`] here, and
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
///   the terminal records retired past [`CreateLimits::retention`]: the oldest of
///   any owner when the row cap is hit, the owner's own (from per-owner indexes)
///   when its cap is, so the per-owner cap is exact.
/// - **Ownership.** Every record keeps its owner tag in a field of its own; an
///   owner-scoped `get`, `get_many`, `update` or `visible` compares it in a server-side script
///   and gets nothing back for a foreign record, so a foreign id costs what an
///   unknown one costs (one round trip, nothing decoded).
/// - **Other nodes.** Every write appends `<node>:<task id>` to the stream
///   `<prefix>changes` in the same script (`XADD … MAXLEN ~ 100000`).
///   [`TaskStore::subscribe`] starts (once, on the current tokio runtime) a listener
///   on its own connection (named [`feed_connection_name`](Self::feed_connection_name)
///   with `CLIENT SETNAME`) that reads the stream from the last entry it saw and
///   forwards the ids written by other `RedisStore` instances. When its connection
///   drops it reconnects with backoff and goes on from that entry, so a change made
///   while it was away is delivered all the same; if the stream was trimmed past
///   it meanwhile, it reports [`FeedEvent::Missed`](super::FeedEvent::Missed) and
///   the layer re-reads every task it waits on. Clones of one `RedisStore` are one
///   node.
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
    node: Arc<str>,
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
    expiry: String,
    retired: String,
    /// Prefixes of the per-owner indexes, completed by the owner tag.
    owner_expiry: String,
    owner_retired: String,
    channel: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_owned(),
            task: format!("{prefix}task:"),
            owners: format!("{prefix}owners"),
            counts: format!("{prefix}counts"),
            expiry: format!("{prefix}expiry"),
            retired: format!("{prefix}retired"),
            owner_expiry: format!("{prefix}owner-expiry:"),
            owner_retired: format!("{prefix}owner-retired:"),
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
}

impl Feed {
    fn new(client: Client) -> Arc<Self> {
        Arc::new(Feed {
            client,
            sender: ChangeSender::new(FEED_CAPACITY),
            listener: Mutex::new(None),
        })
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
    /// reconnecting connection for the records and, once [`TaskStore::subscribe`] is
    /// called, a second one for the change feed. Keys go under
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
    /// hear theirs: [`TaskStore::subscribe`] answers `None`.
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
            node: node_id().into(),
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
    /// (its blocking stream reads need a connection of their own). The connection opens on the first
    /// [`TaskStore::subscribe`], which the layer calls when it is built.
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

    fn payload(&self, id: &str) -> String {
        format!("{}:{id}", self.node)
    }

    /// The stored records of `ids` that `owner` owns, in order (`None` for missing
    /// and foreign ones alike), in one round trip: the owner is compared on the
    /// server, so a foreign record is neither sent nor decoded.
    async fn owned(
        &self,
        ids: &[TaskId],
        owner: Option<&Principal>,
    ) -> Result<Vec<Option<String>>, StoreError> {
        let mut invocation = SCRIPTS.get_visible.key(&self.keys.owners);
        for id in ids {
            invocation.key(self.keys.task(&id.to_string()));
        }
        invocation.arg(owner_tag(owner));
        for id in ids {
            invocation.arg(id.to_string());
        }
        let mut conn = self.conn.clone();
        let stored: Vec<Option<String>> = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(StoreError::backend)?;
        if stored.len() != ids.len() {
            return Err(unexpected(
                "the read script answered the wrong number of replies",
            ));
        }
        Ok(stored)
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.keys.prefix)
            .field("node", &self.node)
            .field("change_feed", &self.feed.is_some())
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl TaskStore for RedisStore {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let id = record.id.to_string();
            let json = encode(&record)?;
            let ttl = record.ttl_ms;
            // Redis refuses expiries past year 9999; later ones are left to `cleanup`.
            let native_ttl = ttl.filter(|&ttl| {
                record
                    .created_at
                    .as_millis()
                    .checked_add(ttl)
                    .is_some_and(|at| at <= NATIVE_EXPIRY_MAX)
            });
            let retired = record.retired_at().map(|_| "1");
            let keys = &self.keys;
            let tag = owner_tag(record.owner.as_ref());
            let mut conn = self.conn.clone();
            let reply: String = SCRIPTS
                .create
                .key(keys.task(&id))
                .key(&keys.owners)
                .key(&keys.counts)
                .key(&keys.expiry)
                .key(&keys.retired)
                .key(format!("{}{tag}", keys.owner_expiry))
                .key(format!("{}{tag}", keys.owner_retired))
                .arg(&id)
                .arg(&tag)
                .arg(record.revision)
                .arg(json)
                .arg(optional(ttl))
                .arg(optional(native_ttl))
                .arg(optional(retired))
                .arg(optional(limits.max_rows))
                .arg(optional(limits.max_per_owner))
                .arg(self.clock_arg(record.created_at))
                .arg(&keys.task)
                .arg(PRUNE_BATCH)
                .arg(&keys.channel)
                .arg(self.payload(&id))
                .arg(optional(limits.retention.map(retention_ms)))
                .arg(&keys.owner_expiry)
                .arg(&keys.owner_retired)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            match reply.as_str() {
                "ok" => Ok(()),
                "duplicate" => Err(StoreError::Duplicate),
                "limit_rows" => Err(StoreError::LimitReached(Limit::Rows)),
                "limit_owner" => Err(StoreError::LimitReached(Limit::PerOwner)),
                _ => Err(unexpected("an unknown answer from the create script")),
            }
        })
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let stored = CompareAndSwap::read(self, id, scope, now).await?;
            Ok(stored.filter(|r| self.sees(r, scope, now)))
        })
    }

    /// One round trip for all the ids: a script that answers which exist (and are
    /// the owner's, for [`Scope::Owner`]); no record leaves the server.
    fn visible<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>> {
        Box::pin(async move {
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            let unique: Vec<TaskId> = ids.iter().filter(|id| seen.insert(**id)).copied().collect();
            if unique.is_empty() {
                return Ok(Vec::new());
            }
            let mut invocation = SCRIPTS.existing.key(&self.keys.owners);
            invocation.key(&self.keys.expiry);
            for id in &unique {
                invocation.key(self.keys.task(&id.to_string()));
            }
            invocation.arg(match scope {
                Scope::Any => String::new(),
                Scope::Owner(owner) => owner_tag(owner),
            });
            invocation.arg(self.clock_arg(now));
            for id in &unique {
                invocation.arg(id.to_string());
            }
            let mut conn = self.conn.clone();
            let exists: Vec<i64> = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            if exists.len() != unique.len() {
                return Err(unexpected(
                    "the script answered the wrong number of replies",
                ));
            }
            Ok(unique
                .into_iter()
                .zip(exists)
                .filter_map(|(id, found)| (found == 1).then_some(id))
                .collect())
        })
    }

    /// One round trip for all the ids: a pipeline of `HGET`s for [`Scope::Any`], the
    /// owner-checking script for [`Scope::Owner`] (foreign records stay on the
    /// server).
    fn get_many<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            let unique: Vec<TaskId> = ids.iter().filter(|id| seen.insert(**id)).copied().collect();
            if unique.is_empty() {
                return Ok(Vec::new());
            }
            let stored = match scope {
                Scope::Any => {
                    let mut pipe = redis::pipe();
                    for id in &unique {
                        pipe.cmd("HGET")
                            .arg(self.keys.task(&id.to_string()))
                            .arg("rec");
                    }
                    let mut conn = self.conn.clone();
                    pipe.query_async(&mut conn)
                        .await
                        .map_err(StoreError::backend)?
                }
                Scope::Owner(owner) => self.owned(&unique, owner).await?,
            };
            let stored: Vec<Option<String>> = stored;
            if stored.len() != unique.len() {
                return Err(unexpected(
                    "a pipeline answered the wrong number of replies",
                ));
            }
            let mut found = Vec::new();
            for (id, json) in unique.into_iter().zip(stored) {
                let Some(json) = json else { continue };
                let record = decode(&json)?;
                if record.id == id && self.sees(&record, scope, now) {
                    found.push(record);
                }
            }
            Ok(found)
        })
    }

    /// One round trip for all the ids: a script that sums the visible records'
    /// sizes (`HSTRLEN`) before it fetches any, and fetches none past the budget.
    fn get_many_within<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
        budget: usize,
    ) -> BoxFuture<'a, Result<Budgeted, StoreError>> {
        Box::pin(async move {
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            let unique: Vec<TaskId> = ids.iter().filter(|id| seen.insert(**id)).copied().collect();
            if unique.is_empty() {
                return Ok(Budgeted::Within(Vec::new()));
            }
            let mut invocation = SCRIPTS.get_within.key(&self.keys.owners);
            invocation.key(&self.keys.expiry);
            for id in &unique {
                invocation.key(self.keys.task(&id.to_string()));
            }
            invocation.arg(match scope {
                Scope::Any => String::new(),
                Scope::Owner(owner) => owner_tag(owner),
            });
            invocation.arg(self.clock_arg(now));
            // Lua counts in doubles: exact up to 2^53.
            invocation.arg(budget.min(1 << 53));
            for id in &unique {
                invocation.arg(id.to_string());
            }
            let mut conn = self.conn.clone();
            let answer: redis::Value = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            let stored: Vec<Option<String>> = match answer {
                redis::Value::Array(_) => {
                    redis::from_redis_value(answer).map_err(StoreError::backend)?
                }
                _ => return Ok(Budgeted::OverBudget),
            };
            if stored.len() != unique.len() {
                return Err(unexpected(
                    "the read script answered the wrong number of replies",
                ));
            }
            let mut found = Vec::new();
            for (id, json) in unique.into_iter().zip(stored) {
                let Some(json) = json else { continue };
                let record = decode(&json)?;
                if record.id == id && self.sees(&record, scope, now) {
                    found.push(record);
                }
            }
            Ok(Budgeted::Within(found))
        })
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        Box::pin(async move {
            // Writers on this node take turns, so they never race each other.
            let _turn = self.writer_queue(id).lock().await;
            compare_and_swap(self, self.clock, id, scope, transition, now).await
        })
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(async move {
            let keys = &self.keys;
            let mut conn = self.conn.clone();
            let mut total = 0usize;
            loop {
                let (removed, more): (u64, i64) = SCRIPTS
                    .cleanup
                    .key(&keys.expiry)
                    .key(&keys.retired)
                    .key(&keys.owners)
                    .key(&keys.counts)
                    .arg(self.clock_arg(now))
                    .arg(retention_ms(retention))
                    .arg(&keys.task)
                    .arg(CLEANUP_BATCH)
                    .arg(&keys.owner_expiry)
                    .arg(&keys.owner_retired)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(StoreError::backend)?;
                total = total.saturating_add(usize::try_from(removed).unwrap_or(usize::MAX));
                if more == 0 {
                    return Ok(total);
                }
            }
        })
    }

    /// Leases under the same prefix (`P leases`, `P lease:<lease>`,
    /// `P holds:<lease>`), on a connection of their own when the store has a
    /// client ([`with_change_feed`](Self::with_change_feed)), else on the store's.
    fn leases(&self) -> Option<Arc<dyn LeaseStore>> {
        Some(Arc::new(RedisLeases::new(
            self.conn.clone(),
            self.feed.as_ref().map(|feed| feed.client.clone()),
            &self.keys.prefix,
        )))
    }

    fn subscribe(&self) -> Option<ChangeFeed> {
        self.announce();
        let feed = self.feed.as_ref()?;
        let name = self.feed_connection_name();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "mcp-tasks: RedisStore::subscribe needs a tokio runtime; changes made on other nodes are not relayed"
            );
            return None;
        };
        let receiver = feed.sender.subscribe();
        let mut listener = feed
            .listener
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if listener.as_ref().is_none_or(|l| l.task.is_finished()) {
            let (stop, stopped) = oneshot::channel();
            let task = runtime.spawn(listen(
                ChangeStream {
                    client: feed.client.clone(),
                    key: self.keys.channel.clone(),
                    node: self.node.clone(),
                    name,
                    sender: feed.sender.clone(),
                    last: None,
                },
                stopped,
            ));
            *listener = Some(Listener { _stop: stop, task });
        }
        Some(receiver)
    }
}

impl CompareAndSwap for RedisStore {
    fn read<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        _now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let stored: Option<String> = match scope {
                Scope::Any => {
                    let mut conn = self.conn.clone();
                    redis::cmd("HGET")
                        .arg(self.keys.task(&id.to_string()))
                        .arg("rec")
                        .query_async(&mut conn)
                        .await
                        .map_err(StoreError::backend)?
                }
                Scope::Owner(owner) => self
                    .owned(std::slice::from_ref(id), owner)
                    .await?
                    .pop()
                    .flatten(),
            };
            stored.as_deref().map(decode).transpose()
        })
    }

    fn write_if<'a>(
        &'a self,
        expected: u64,
        record: &'a TaskRecord,
    ) -> BoxFuture<'a, Result<Written, StoreError>> {
        Box::pin(async move {
            let id_text = record.id.to_string();
            let mut conn = self.conn.clone();
            // Only a change that ends a task without a TTL can retire it.
            let retired = record.retired_at().map(|_| "1");
            let (state, current): (i64, String) = SCRIPTS
                .cas
                .key(self.keys.task(&id_text))
                .key(&self.keys.retired)
                .key(&self.keys.owners)
                .arg(expected)
                .arg(record.revision)
                .arg(encode(record)?)
                .arg(optional(retired))
                .arg(&id_text)
                .arg(&self.keys.channel)
                .arg(self.payload(&id_text))
                .arg(&self.keys.owner_retired)
                .arg(self.clock_arg(record.updated_at))
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            Ok(match state {
                CAS_WRITTEN => Written::Done,
                CAS_GONE => Written::Gone,
                _ => Written::Lost(Some(Box::new(decode(&current)?))),
            })
        })
    }
}

/// The listener's side of the change stream: where it reads, what it skips, and
/// the last entry it saw.
struct ChangeStream {
    client: Client,
    key: String,
    node: Arc<str>,
    /// The connection's `CLIENT SETNAME`.
    name: String,
    sender: ChangeSender,
    /// The id of the last entry read; `None` until the first connection.
    last: Option<String>,
}

/// Relays other nodes' announcements into the stream's sender until `stop` fires
/// (or its sender, held by the store, is dropped), reconnecting with backoff and
/// going on from the last entry read.
async fn listen(mut stream: ChangeStream, mut stop: oneshot::Receiver<()>) {
    let mut backoff = Backoff::new(RECONNECT_MIN, RECONNECT_MAX);
    loop {
        let mut connected = false;
        tokio::select! {
            _ = &mut stop => return,
            result = stream.relay(&mut connected) => match result {
                Ok(()) => tracing::debug!("mcp-tasks: the Redis change feed closed; reconnecting"),
                Err(error) => tracing::warn!(%error, "mcp-tasks: the Redis change feed failed; reconnecting"),
            },
        }
        if connected {
            backoff.reset();
        }
        tokio::select! {
            _ = &mut stop => return,
            () = backoff.wait() => {}
        }
    }
}

impl ChangeStream {
    /// One connection: finds where to start, then forwards entries until the
    /// connection fails.
    async fn relay(&mut self, connected: &mut bool) -> redis::RedisResult<()> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(READ_TIMEOUT))
            .set_response_timeout(Some(READ_TIMEOUT));
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(&self.name)
            .query_async::<()>(&mut conn)
            .await?;
        match &self.last {
            // First connection: start after the newest entry.
            None => {
                let newest: redis::Value = redis::cmd("XREVRANGE")
                    .arg(&self.key)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut conn)
                    .await?;
                let newest = entries(newest).pop().map(|(id, _)| id);
                self.last = Some(newest.unwrap_or_else(|| "0-0".to_owned()));
            }
            Some(last) => {
                let oldest: redis::Value = redis::cmd("XRANGE")
                    .arg(&self.key)
                    .arg("-")
                    .arg("+")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(&mut conn)
                    .await?;
                let length: u64 = redis::cmd("XLEN")
                    .arg(&self.key)
                    .query_async(&mut conn)
                    .await?;
                let oldest = entries(oldest).pop().map(|(id, _)| id);
                if trimmed_past(last, oldest.as_deref(), length) {
                    tracing::warn!(
                        "mcp-tasks: the Redis change stream was trimmed past this listener; reporting missed changes"
                    );
                    self.sender.missed();
                }
            }
        }
        *connected = true;
        loop {
            let last = self.last.clone().unwrap_or_else(|| "0-0".to_owned());
            let read: redis::Value = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(READ_COUNT)
                .arg("BLOCK")
                .arg(READ_BLOCK.as_millis() as u64)
                .arg("STREAMS")
                .arg(&self.key)
                .arg(&last)
                .query_async(&mut conn)
                .await?;
            for (id, payload) in read_entries(read) {
                if let Some(task) = payload.and_then(|p| parse_payload(&p, &self.node)) {
                    // No receiver right now is fine: nobody is waiting on this node.
                    self.sender.send(task);
                }
                self.last = Some(id);
            }
        }
    }
}

/// Whether entries after `last` may have been trimmed away: the oldest entry left
/// is newer than `last` (so `last` itself was trimmed) and trimming has happened.
fn trimmed_past(last: &str, oldest: Option<&str>, length: u64) -> bool {
    let Some(last) = stream_id(last) else {
        return true;
    };
    match oldest.and_then(stream_id) {
        // Nothing left: trimming never empties a stream, so nothing was written.
        None => false,
        Some(oldest) => oldest > last && (last != (0, 0) || length >= FEED_MAXLEN),
    }
}

/// A stream entry id, `<ms>-<seq>`, in its order.
fn stream_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// The entries of an `XREAD` reply on one stream (RESP2 arrays or a RESP3 map);
/// none for a blocking read that timed out.
fn read_entries(reply: redis::Value) -> Vec<(String, Option<Vec<u8>>)> {
    use redis::Value;
    let streams = match reply {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.into_iter().map(|(_, v)| v).collect(),
        _ => Vec::new(),
    };
    streams.into_iter().flat_map(entries).collect()
}

/// The entries of an `XRANGE`-shaped reply: each id, and its `c` field.
fn entries(reply: redis::Value) -> Vec<(String, Option<Vec<u8>>)> {
    use redis::Value;
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| {
            let Value::Array(mut entry) = item else {
                return None;
            };
            if entry.len() != 2 {
                return None;
            }
            let fields = entry.pop()?;
            let id = text(entry.pop()?)?;
            let fields: Vec<Value> = match fields {
                Value::Array(fields) => fields,
                Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => Vec::new(),
            };
            let mut payload = None;
            let mut fields = fields.into_iter();
            while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
                if text(name).as_deref() == Some("c") {
                    payload = bytes(value);
                }
            }
            Some((id, payload))
        })
        .collect()
}

fn bytes(value: redis::Value) -> Option<Vec<u8>> {
    match value {
        redis::Value::BulkString(bytes) => Some(bytes),
        redis::Value::SimpleString(text) => Some(text.into_bytes()),
        _ => None,
    }
}

fn text(value: redis::Value) -> Option<String> {
    String::from_utf8(bytes(value)?).ok()
}

/// The task id of an announcement from another node; `None` for this node's own
/// writes and for anything malformed.
fn parse_payload(payload: &[u8], node: &str) -> Option<TaskId> {
    let text = std::str::from_utf8(payload).ok()?;
    let (from, id) = text.split_once(':')?;
    if from == node {
        return None;
    }
    id.parse().ok()
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
    fn announcements_from_this_node_and_garbage_are_skipped() {
        let id = TaskId::random();
        let from_other = format!("bbbb:{id}");
        assert_eq!(parse_payload(from_other.as_bytes(), "aaaa"), Some(id));
        let own = format!("aaaa:{id}");
        assert_eq!(parse_payload(own.as_bytes(), "aaaa"), None);
        for bad in [&b"no separator"[..], b"bbbb:not-an-id", b"\xff\xfe:x"] {
            assert_eq!(parse_payload(bad, "aaaa"), None);
        }
    }

    #[test]
    fn owner_tags_keep_unowned_apart_from_every_principal() {
        assert_ne!(owner_tag(None), owner_tag(Some(&Principal::from("-"))));
        assert_ne!(owner_tag(None), owner_tag(Some(&Principal::from(""))));
        assert_eq!(
            owner_tag(Some(&Principal::from("alice"))),
            owner_tag(Some(&Principal::from("alice")))
        );
    }

    #[test]
    fn owner_scoped_reads_compare_the_owner_on_the_server() {
        // The record is fetched only after the owner tag matched.
        let compare = GET_VISIBLE.find("own == ARGV[1]").unwrap();
        let fetch = GET_VISIBLE.find("'rec'").unwrap();
        assert!(compare < fetch);
        // Every create stores the tag the script compares.
        assert!(CREATE.contains("'own', ARGV[2]"));
        // A full create prunes retired records past the retention as well.
        assert!(CREATE.contains("prune(KEYS[5], KEYS[5], retired_before)"));
        assert!(CREATE.contains("prune(KEYS[7], KEYS[5], retired_before)"));
    }

    #[test]
    fn every_write_appends_to_the_trimmed_change_stream() {
        let append = format!("'XADD', ARGV[13], 'MAXLEN', '~', '{FEED_MAXLEN}', '*', 'c'");
        assert!(CREATE.contains(&append), "{CREATE}");
        let append = format!("'XADD', ARGV[6], 'MAXLEN', '~', '{FEED_MAXLEN}', '*', 'c'");
        assert!(CAS.contains(&append), "{CAS}");
        assert!(!CREATE.contains("PUBLISH") && !CAS.contains("PUBLISH"));
    }

    #[test]
    fn stream_entries_are_read_from_resp2_and_resp3_replies() {
        use redis::Value;
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entry = |id: &str, payload: &str| {
            Value::Array(vec![bulk(id), Value::Array(vec![bulk("c"), bulk(payload)])])
        };
        let entries = Value::Array(vec![entry("1-0", "n:a"), entry("2-5", "n:b")]);
        let resp2 = Value::Array(vec![Value::Array(vec![bulk("P changes"), entries.clone()])]);
        let resp3 = Value::Map(vec![(bulk("P changes"), entries)]);
        for reply in [resp2, resp3] {
            let read = read_entries(reply);
            assert_eq!(
                read,
                vec![
                    ("1-0".to_owned(), Some(b"n:a".to_vec())),
                    ("2-5".to_owned(), Some(b"n:b".to_vec()))
                ]
            );
        }
        assert!(
            read_entries(Value::Nil).is_empty(),
            "a blocking read that timed out"
        );
    }

    #[test]
    fn a_listener_knows_when_the_stream_was_trimmed_past_it() {
        assert_eq!(stream_id("1700000000000-3"), Some((1_700_000_000_000, 3)));
        assert_eq!(stream_id("x-1"), None);
        // Its last entry is still there: nothing lost.
        assert!(!trimmed_past("5-0", Some("3-0"), 10));
        assert!(!trimmed_past("5-0", Some("5-0"), 10));
        // Its last entry was trimmed: entries after it may be gone too.
        assert!(trimmed_past("5-0", Some("6-0"), FEED_MAXLEN));
        // It started on an empty stream: lost only if trimming happened at all.
        assert!(!trimmed_past("0-0", Some("6-0"), 10));
        assert!(trimmed_past("0-0", Some("6-0"), FEED_MAXLEN));
        assert!(!trimmed_past("5-0", None, 0));
    }

    #[test]
    fn node_ids_differ() {
        assert_ne!(node_id(), node_id());
        assert!(!node_id().contains(':'));
    }
}
