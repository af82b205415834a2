//! Worker leases beside a `RedisStore`'s keys, under its prefix `P`: `P nodes`, a
//! sorted set of node ids scored by their deadlines, and `P holds:<node>`, the set
//! of task ids each node holds. Deadlines are set and compared by Redis's clock
//! (`TIME`, read inside the scripts), never a node's.

use std::fmt;

use redis::Script;
use redis::aio::ConnectionManager;

use super::lease::{LapsedNode, LeaseStore, NodeId, Renewal};
use super::{BoxFuture, StoreError};
use crate::task::TaskId;

/// Redis's clock in milliseconds, read inside a script.
const NOW_FN: &str = r#"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"#;

/// Adds or removes members in batches (a Lua call takes a bounded number of
/// arguments).
const BATCH_FN: &str = r#"
local function batched(command, key, from, to)
  local i = from
  while i <= to do
    local last = math.min(i + 999, to)
    redis.call(command, key, unpack(ARGV, i, last))
    i = last + 1
  end
end
"#;

/// KEYS: nodes, the node's holds.
/// ARGV: node, bound (ms), replace (1 or 0), how many held ids follow, the held
/// ids, then the released ids.
/// Returns 1 when the node had a lease, 0 when it had none.
const RENEW: &str = r#"
local known = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], now_ms() + tonumber(ARGV[2]), ARGV[1])
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[2])
end
local held = tonumber(ARGV[4])
batched('SADD', KEYS[2], 5, 4 + held)
batched('SREM', KEYS[2], 5 + held, #ARGV)
if known then return 1 else return 0 end
"#;

/// KEYS: nodes. ARGV: the holds key prefix.
/// Returns, for each lapsed node, its id, how many ids follow, and its held ids.
const LAPSED: &str = r#"
local out = {}
for _, node in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms())) do
  local held = redis.call('SMEMBERS', ARGV[1] .. node)
  out[#out + 1] = node
  out[#out + 1] = tostring(#held)
  for _, id in ipairs(held) do
    out[#out + 1] = id
  end
end
return out
"#;

/// KEYS: nodes, the node's holds. ARGV: node.
const FORGET: &str = r#"
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if deadline and tonumber(deadline) <= now_ms() then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[2])
end
return 0
"#;

struct Scripts {
    renew: Script,
    lapsed: Script,
    forget: Script,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    renew: Script::new(&[NOW_FN, BATCH_FN, RENEW].concat()),
    lapsed: Script::new(&[NOW_FN, LAPSED].concat()),
    forget: Script::new(&[NOW_FN, FORGET].concat()),
});

/// The leases of one `RedisStore`, on its connection.
#[derive(Clone)]
pub(super) struct RedisLeases {
    pub(super) conn: ConnectionManager,
    /// `P nodes`.
    pub(super) nodes: String,
    /// `P holds:`, completed by a node id.
    pub(super) holds: String,
}

impl RedisLeases {
    pub(super) fn new(conn: ConnectionManager, prefix: &str) -> Self {
        RedisLeases {
            conn,
            nodes: format!("{prefix}nodes"),
            holds: format!("{prefix}holds:"),
        }
    }

    fn holds_of(&self, node: &NodeId) -> String {
        format!("{}{node}", self.holds)
    }
}

impl fmt::Debug for RedisLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLeases")
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

impl LeaseStore for RedisLeases {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut invocation = SCRIPTS.renew.prepare_invoke();
            invocation
                .key(&self.nodes)
                .key(self.holds_of(renewal.node))
                .arg(renewal.node.as_str())
                .arg(u64::try_from(renewal.bound.as_millis()).unwrap_or(u64::MAX))
                .arg(u8::from(renewal.replace))
                .arg(renewal.hold.len());
            for id in renewal.hold.iter().chain(renewal.release) {
                invocation.arg(&id.as_bytes()[..]);
            }
            let mut conn = self.conn.clone();
            let known: i64 = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            Ok(known == 1)
        })
    }

    fn lapsed(&self) -> BoxFuture<'_, Result<Vec<LapsedNode>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let flat: Vec<Vec<u8>> = SCRIPTS
                .lapsed
                .key(&self.nodes)
                .arg(&self.holds)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            let mut lapsed = Vec::new();
            let mut items = flat.into_iter();
            while let (Some(node), Some(count)) = (items.next(), items.next()) {
                let count: usize = std::str::from_utf8(&count)
                    .ok()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                let tasks: Vec<TaskId> = items
                    .by_ref()
                    .take(count)
                    .filter_map(|bytes| <[u8; TaskId::BYTES]>::try_from(bytes).ok())
                    .map(TaskId::from_bytes)
                    .collect();
                if let Some(node) = String::from_utf8(node).ok().and_then(NodeId::new) {
                    lapsed.push(LapsedNode { node, tasks });
                }
            }
            Ok(lapsed)
        })
    }

    fn forget<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let _: i64 = SCRIPTS
                .forget
                .key(&self.nodes)
                .key(self.holds_of(node))
                .arg(node.as_str())
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            Ok(())
        })
    }
}
