//! Worker leases beside a `RedisStore`'s keys, under its prefix `P`: `P leases`, the
//! set of lease members (`<incarnation hex>:<node>`), `P lease:<member>`, a hash of
//! each lease's renewal count, lease length and claim, and `P holds:<member>`, the
//! set of task ids it holds. A task has one holder, the lease that took it last: a
//! renewal that newly holds a task removes it from every other lease's holds. No
//! clock is read: other nodes watch the counts.
//!
//! When the store has a client (its change feed's), the leases run on a connection
//! of their own, opened on first use, so renewals never queue behind request
//! traffic on the store's connection.
//!
//! No script touches more than [`RENEW_BATCH`] holds: a larger renewal runs as
//! several scripts, the first renewing the lease, and the holds of a claimed lease
//! (which no renewal changes any more) are read with `SSCAN`, a page at a time.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};
use tokio::sync::OnceCell;

use crate::store::lease::{LeaseId, LeaseState, LeaseStore, NodeId, RENEW_BATCH, Renewal, Renewed};
use crate::store::{BoxFuture, StoreError};
use crate::task::TaskId;

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
-- The lease `me` (its holds: `mine`) holds ARGV[from..to] from now on. Those it
-- did not hold yet leave every other lease's holds (`index` lists the leases,
-- `holds` completes a member into its holds key), so that only the last holder's
-- claim lists a task.
local function take(index, mine, me, holds, from, to)
  local i = from
  while i <= to do
    local last = math.min(i + 999, to)
    local batch = {unpack(ARGV, i, last)}
    local present = redis.call('SMISMEMBER', mine, unpack(batch))
    local new = {}
    for j, is in ipairs(present) do
      if is == 0 then new[#new + 1] = batch[j] end
    end
    if #new > 0 then
      for _, other in ipairs(redis.call('SMEMBERS', index)) do
        if other ~= me then redis.call('SREM', holds .. other, unpack(new)) end
      end
      redis.call('SADD', mine, unpack(new))
    end
    i = last + 1
  end
end
"#;

/// KEYS: the lease index, the lease, its holds.
/// ARGV: member, bound (ms), first (1 or 0), replace (1 or 0), how many held ids
/// follow, the prefix of a lease's holds key, the held ids, then the released ids
/// (at most `RENEW_BATCH` in all).
/// Returns 'new' or 'renewed'; 'lost' when claimed (its holds are read apart,
/// page by page); 'gone' when there is no lease and this is not a first renewal.
const RENEW: &str = r#"
local claimed = redis.call('HGET', KEYS[2], 'claimed')
if claimed == '1' then return 'lost' end
if not claimed and ARGV[3] ~= '1' then return 'gone' end
redis.call('HINCRBY', KEYS[2], 'renewals', 1)
redis.call('HSET', KEYS[2], 'bound', ARGV[2], 'claimed', '0')
redis.call('SADD', KEYS[1], ARGV[1])
if ARGV[4] == '1' then
  redis.call('UNLINK', KEYS[3])
end
local held = tonumber(ARGV[5])
take(KEYS[1], KEYS[3], ARGV[1], ARGV[6], 7, 6 + held)
batched('SREM', KEYS[3], 7 + held, #ARGV)
if claimed then return 'renewed' else return 'new' end
"#;

/// The rest of a renewal too large for one call: a further batch of its changes.
/// KEYS: the lease, its holds, the lease index. ARGV: how many held ids follow, the
/// prefix of a lease's holds key, the lease's member, the held ids, then the
/// released ids. Returns 'ok', or 'lost' / 'gone' as [`RENEW`].
const CHANGE: &str = r#"
local claimed = redis.call('HGET', KEYS[1], 'claimed')
if claimed == '1' then return 'lost' end
if not claimed then return 'gone' end
local held = tonumber(ARGV[1])
take(KEYS[3], KEYS[2], ARGV[3], ARGV[2], 4, 3 + held)
batched('SREM', KEYS[2], 4 + held, #ARGV)
return 'ok'
"#;

/// KEYS: the lease index. ARGV: the lease key prefix.
/// Returns, for each lease, its member, renewals, bound and claim.
const LEASES: &str = r#"
local out = {}
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local lease = redis.call('HMGET', ARGV[1] .. member, 'renewals', 'bound', 'claimed')
  if lease[1] then
    out[#out + 1] = member
    out[#out + 1] = lease[1]
    out[#out + 1] = lease[2]
    out[#out + 1] = lease[3]
  end
end
return out
"#;

/// KEYS: the lease. ARGV: the renewal count seen. Returns 1 when claimed (its
/// holds, which no renewal changes any more, are read apart, page by page), 0
/// otherwise.
const CLAIM: &str = r#"
local lease = redis.call('HMGET', KEYS[1], 'renewals', 'claimed')
if not lease[1] then return 0 end
if lease[2] ~= '1' and lease[1] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'claimed', '1')
return 1
"#;

/// KEYS: the lease index, the lease, its holds. ARGV: member.
const FORGET: &str = r#"
if redis.call('HGET', KEYS[2], 'claimed') == '1' then
  redis.call('UNLINK', KEYS[2], KEYS[3])
  redis.call('SREM', KEYS[1], ARGV[1])
end
return 0
"#;

/// KEYS: the lease index, the lease, its holds. ARGV: member.
const RELEASE: &str = r#"
if redis.call('HGET', KEYS[2], 'claimed') == '0' then
  redis.call('UNLINK', KEYS[2], KEYS[3])
  redis.call('SREM', KEYS[1], ARGV[1])
end
return 0
"#;

struct Scripts {
    renew: Script,
    change: Script,
    leases: Script,
    claim: Script,
    forget: Script,
    release: Script,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    renew: Script::new(&[BATCH_FN, RENEW].concat()),
    change: Script::new(&[BATCH_FN, CHANGE].concat()),
    leases: Script::new(LEASES),
    claim: Script::new(CLAIM),
    forget: Script::new(FORGET),
    release: Script::new(RELEASE),
});

/// How long the lease connection waits before reconnecting, at most: a node back
/// from an outage renews within this of the store answering again.
const RECONNECT_MAX: Duration = Duration::from_millis(100);

/// The leases of one `RedisStore`.
#[derive(Clone)]
pub(super) struct RedisLeases {
    /// The store's connection, used when there is no client to open another.
    shared: ConnectionManager,
    client: Option<Client>,
    own: std::sync::Arc<OnceCell<ConnectionManager>>,
    /// `P leases`.
    index: String,
    /// `P lease:`, completed by a member.
    lease: String,
    /// `P holds:`, completed by a member.
    holds: String,
}

/// A lease's member in the index: its incarnation, then its node id.
fn member(lease: &LeaseId) -> String {
    format!("{:016x}:{}", lease.incarnation, lease.node)
}

fn parse_member(member: &str) -> Option<LeaseId> {
    let (incarnation, node) = member.split_once(':')?;
    Some(LeaseId {
        node: NodeId::new(node)?,
        incarnation: u64::from_str_radix(incarnation, 16).ok()?,
    })
}

/// Every task id in the set `key`, read [`RENEW_BATCH`] at a time (`SSCAN`), so
/// that no one command walks a large set: sorted, each once.
async fn members(conn: &mut ConnectionManager, key: &str) -> Result<Vec<TaskId>, StoreError> {
    let mut ids = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, page): (u64, Vec<Vec<u8>>) = redis::cmd("SSCAN")
            .arg(key)
            .arg(cursor)
            .arg("COUNT")
            .arg(RENEW_BATCH)
            .query_async(conn)
            .await
            .map_err(StoreError::backend)?;
        ids.extend(
            page.iter()
                .filter_map(|bytes| <[u8; TaskId::BYTES]>::try_from(bytes.as_slice()).ok())
                .map(TaskId::from_bytes),
        );
        if next == 0 {
            break;
        }
        cursor = next;
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The ids of a renewal, [`RENEW_BATCH`] at a time: releases first, then holds.
struct Batches<'a> {
    hold: &'a [TaskId],
    release: &'a [TaskId],
}

impl<'a> Batches<'a> {
    fn new(hold: &'a [TaskId], release: &'a [TaskId]) -> Self {
        Batches { hold, release }
    }

    fn is_done(&self) -> bool {
        self.hold.is_empty() && self.release.is_empty()
    }

    /// The next batch, as (held, released).
    fn next_batch(&mut self) -> (&'a [TaskId], &'a [TaskId]) {
        let released = self.release.len().min(RENEW_BATCH);
        let (release, rest) = self.release.split_at(released);
        self.release = rest;
        let held = self.hold.len().min(RENEW_BATCH - released);
        let (hold, rest) = self.hold.split_at(held);
        self.hold = rest;
        (hold, release)
    }
}

impl RedisLeases {
    pub(super) fn new(shared: ConnectionManager, client: Option<Client>, prefix: &str) -> Self {
        RedisLeases {
            shared,
            client,
            own: std::sync::Arc::default(),
            index: format!("{prefix}leases"),
            lease: format!("{prefix}lease:"),
            holds: format!("{prefix}holds:"),
        }
    }

    /// The lease connection: its own when the store has a client, else the store's.
    async fn conn(&self) -> ConnectionManager {
        let Some(client) = &self.client else {
            return self.shared.clone();
        };
        let own = self
            .own
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_min_delay(Duration::from_millis(10))
                    .set_max_delay(RECONNECT_MAX)
                    .set_number_of_retries(usize::MAX);
                ConnectionManager::new_lazy_with_config(client.clone(), config)
            })
            .await;
        match own {
            Ok(own) => own.clone(),
            Err(_) => self.shared.clone(),
        }
    }
}

impl fmt::Debug for RedisLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLeases")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl LeaseStore for RedisLeases {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
        Box::pin(async move {
            let member = member(renewal.lease);
            let holds = format!("{}{member}", self.holds);
            let lease = format!("{}{member}", self.lease);
            // The first batch goes with the renewal; any further one after it,
            // each a script of its own, so that none takes more than a batch.
            let mut batches = Batches::new(renewal.hold, renewal.release);
            let (hold, release) = batches.next_batch();
            let mut invocation = SCRIPTS.renew.prepare_invoke();
            invocation
                .key(&self.index)
                .key(&lease)
                .key(&holds)
                .arg(&member)
                .arg(u64::try_from(renewal.bound.as_millis()).unwrap_or(u64::MAX))
                .arg(u8::from(renewal.first))
                .arg(u8::from(renewal.replace))
                .arg(hold.len())
                .arg(&self.holds);
            for id in hold.iter().chain(release) {
                invocation.arg(&id.as_bytes()[..]);
            }
            let mut conn = self.conn().await;
            let reply: String = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            let mut renewed = match reply.as_str() {
                "new" => Renewed::New,
                "renewed" => Renewed::Renewed,
                "lost" => return self.lost(&mut conn, &holds).await,
                _ => return Ok(Renewed::Lost { tasks: None }),
            };
            while !batches.is_done() {
                let (hold, release) = batches.next_batch();
                let mut invocation = SCRIPTS.change.prepare_invoke();
                invocation
                    .key(&lease)
                    .key(&holds)
                    .key(&self.index)
                    .arg(hold.len())
                    .arg(&self.holds)
                    .arg(&member);
                for id in hold.iter().chain(release) {
                    invocation.arg(&id.as_bytes()[..]);
                }
                let reply: String = invocation
                    .invoke_async(&mut conn)
                    .await
                    .map_err(StoreError::backend)?;
                match reply.as_str() {
                    "ok" => {}
                    "lost" => return self.lost(&mut conn, &holds).await,
                    _ => {
                        renewed = Renewed::Lost { tasks: None };
                        break;
                    }
                }
            }
            Ok(renewed)
        })
    }

    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn().await;
            let flat: Vec<Option<String>> = SCRIPTS
                .leases
                .key(&self.index)
                .arg(&self.lease)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            let number = |field: &Option<String>| {
                field
                    .as_deref()
                    .and_then(|f| f.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let mut leases: Vec<LeaseState> = flat
                .chunks_exact(4)
                .filter_map(|row| {
                    Some(LeaseState {
                        lease: parse_member(row[0].as_deref()?)?,
                        renewals: number(&row[1]),
                        bound: Duration::from_millis(number(&row[2])),
                        claimed: row[3].as_deref() == Some("1"),
                    })
                })
                .collect();
            leases.sort_unstable_by(|a, b| a.lease.cmp(&b.lease));
            Ok(leases)
        })
    }

    fn claim<'a>(
        &'a self,
        lease: &'a LeaseId,
        renewals: u64,
    ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>> {
        Box::pin(async move {
            let member = member(lease);
            let mut conn = self.conn().await;
            let claimed: i64 = SCRIPTS
                .claim
                .key(format!("{}{member}", self.lease))
                .arg(renewals)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            if claimed != 1 {
                return Ok(None);
            }
            let holds = format!("{}{member}", self.holds);
            members(&mut conn, &holds).await.map(Some)
        })
    }

    fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        self.remove(&SCRIPTS.forget, lease)
    }

    fn release<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        self.remove(&SCRIPTS.release, lease)
    }
}

impl RedisLeases {
    /// What a renewal that found its lease claimed answers: the claimed holds.
    async fn lost(&self, conn: &mut ConnectionManager, holds: &str) -> Result<Renewed, StoreError> {
        let tasks = members(conn, holds).await?;
        Ok(Renewed::Lost { tasks: Some(tasks) })
    }

    /// Runs `script`, which removes `lease` (if claimed, or if not) and its holds.
    fn remove<'a>(
        &'a self,
        script: &'static Script,
        lease: &'a LeaseId,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let member = member(lease);
            let mut conn = self.conn().await;
            let _: i64 = script
                .key(&self.index)
                .key(format!("{}{member}", self.lease))
                .key(format!("{}{member}", self.holds))
                .arg(&member)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::backend)?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{BATCH_FN, CHANGE, CLAIM, FORGET, LEASES, RELEASE, RENEW};

    /// The lease scripts judge nothing by time: a step of the Redis server's clock,
    /// however large, must have nothing to act on (no `TIME`, no key expiry).
    #[test]
    fn no_lease_script_reads_a_clock_or_expires_a_key() {
        for script in [BATCH_FN, RENEW, CHANGE, LEASES, CLAIM, FORGET, RELEASE] {
            let upper = script.to_ascii_uppercase();
            for clock in ["'TIME'", "\"TIME\"", "EXPIRE", "PX", "EX'"] {
                assert!(
                    !upper.contains(clock),
                    "a lease script reads the clock ({clock}): {script}"
                );
            }
        }
    }
}
