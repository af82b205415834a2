//! The `TaskStore` and compare-and-swap implementations of `RedisStore`: each
//! call one script (or pipeline) round trip.

use std::sync::Arc;
use std::time::Duration;

use super::leases::RedisLeases;
use super::scripts::{CAS_GONE, CAS_WRITTEN, SCRIPTS};
use super::{RedisStore, decode, encode, optional, owner_tag, retention_ms, unexpected};
use crate::error::{Limit, StoreError};
use crate::store::retry::{retry_create, retry_once};
use crate::store::rules::{CompareAndSwap, Written, compare_and_swap};
use crate::store::{
    BoxFuture, Budgeted, ChangeFeed, CreateLimits, LeaseStore, ListFrom, ListPage, TaskStore,
    Updated,
};
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};

/// Expired records a full `create` prunes before it gives up.
const PRUNE_BATCH: u32 = 128;
/// Records one cleanup script removes per index before handing back control.
const CLEANUP_BATCH: u32 = 512;
/// The latest expiry Redis is given (9999-12-31); later ones are left to `cleanup`.
const NATIVE_EXPIRY_MAX: u64 = 253_402_300_799_999;

impl RedisStore {
    /// An invocation of one of the scripts that read `ids` in `scope` (`existing`,
    /// `get_within`): keys the owners' hash, the expiry index, then each task's;
    /// arguments the scope's owner tag (empty for any owner) and the clock. The
    /// caller adds what else the script takes, then the ids.
    fn scoped<'s>(
        &self,
        script: &'s redis::Script,
        ids: &[TaskId],
        scope: Scope<'_>,
        now: Timestamp,
    ) -> redis::ScriptInvocation<'s> {
        let mut invocation = script.key(&self.keys.owners);
        invocation.key(&self.keys.expiry);
        for id in ids {
            invocation.key(self.keys.task(&id.to_string()));
        }
        invocation.arg(match scope {
            Scope::Any => String::new(),
            Scope::Owner(owner) => owner_tag(owner),
        });
        invocation.arg(self.clock_arg(now));
        invocation
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

    /// The records of a batched read of `ids` (each once, as [`unique`] gives
    /// them) from the replies `stored`, one per id, in order: decoded, and kept
    /// when they are the record asked for and visible in `scope` at `now`.
    fn found(
        &self,
        ids: Vec<TaskId>,
        stored: Vec<Option<String>>,
        scope: Scope<'_>,
        now: Timestamp,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        if stored.len() != ids.len() {
            return Err(unexpected(
                "a batched read answered the wrong number of replies",
            ));
        }
        let mut found = Vec::new();
        for (id, json) in ids.into_iter().zip(stored) {
            let Some(json) = json else { continue };
            let record = decode(&json)?;
            if record.id == id && self.sees(&record, scope, now) {
                found.push(record);
            }
        }
        Ok(found)
    }
}

/// `ids` in their order, each once.
fn unique(ids: &[TaskId]) -> Vec<TaskId> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.iter().filter(|id| seen.insert(**id)).copied().collect()
}

impl TaskStore for RedisStore {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let record = &record;
            retry_create(
                record,
                move || {
                    Box::pin(async move {
                        let id = record.id.to_string();
                        let json = encode(record)?;
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
                            .key(format!("{}{tag}", keys.owner_list))
                            .key(&keys.sizes)
                            .key(&keys.bytes)
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
                            .arg(self.payload(&record.id))
                            .arg(optional(limits.retention.map(retention_ms)))
                            .arg(&keys.owner_expiry)
                            .arg(&keys.owner_retired)
                            .arg(&keys.owner_list)
                            .arg(record.created_at.as_millis())
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
                },
                move || CompareAndSwap::read(self, &record.id, Scope::Any, record.created_at),
            )
            .await
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
        retry_once(move || {
            Box::pin(async move {
                let unique = unique(ids);
                if unique.is_empty() {
                    return Ok(Vec::new());
                }
                let mut invocation = self.scoped(&SCRIPTS.existing, &unique, scope, now);
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
        retry_once(move || {
            Box::pin(async move {
                let unique = unique(ids);
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
                self.found(unique, stored, scope, now)
            })
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
        retry_once(move || {
            Box::pin(async move {
                let unique = unique(ids);
                if unique.is_empty() {
                    return Ok(Budgeted::Within(Vec::new()));
                }
                let mut invocation = self.scoped(&SCRIPTS.get_within, &unique, scope, now);
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
                self.found(unique, stored, scope, now).map(Budgeted::Within)
            })
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
        retry_once(move || {
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
                        .key(&keys.sizes)
                        .key(&keys.bytes)
                        .arg(self.clock_arg(now))
                        .arg(retention_ms(retention))
                        .arg(&keys.task)
                        .arg(CLEANUP_BATCH)
                        .arg(&keys.owner_expiry)
                        .arg(&keys.owner_retired)
                        .arg(&keys.owner_list)
                        .invoke_async(&mut conn)
                        .await
                        .map_err(StoreError::backend)?;
                    total = total.saturating_add(usize::try_from(removed).unwrap_or(usize::MAX));
                    if more == 0 {
                        return Ok(total);
                    }
                }
            })
        })
    }

    /// One `HGET` of the owner's field in `P bytes`, which the create, write and
    /// removal scripts change by each record's size.
    fn owner_bytes<'a>(
        &'a self,
        owner: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        retry_once(move || {
            Box::pin(async move {
                let mut conn = self.conn.clone();
                let bytes: Option<u64> = redis::cmd("HGET")
                    .arg(&self.keys.bytes)
                    .arg(owner_tag(owner))
                    .query_async(&mut conn)
                    .await
                    .map_err(StoreError::backend)?;
                Ok(bytes.unwrap_or(0))
            })
        })
    }

    /// One script: the owner's list (a sorted set scored by `created_at`) read by
    /// rank from just after `from`, each record checked and fetched on the server,
    /// those gone or expired skipped, until the page is full and one more visible
    /// record is seen.
    fn list<'a>(
        &'a self,
        owner: Option<&'a Principal>,
        from: Option<ListFrom>,
        limit: usize,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<ListPage, StoreError>> {
        retry_once(move || {
            Box::pin(async move {
                if limit == 0 {
                    return Ok(ListPage::default());
                }
                let keys = &self.keys;
                let tag = owner_tag(owner);
                let mut conn = self.conn.clone();
                let (more, stored): (i64, Vec<String>) = SCRIPTS
                    .list
                    .key(format!("{}{tag}", keys.owner_list))
                    .key(&keys.owners)
                    .key(&keys.expiry)
                    .arg(&tag)
                    .arg(self.clock_arg(now))
                    .arg(&keys.task)
                    // Lua counts in doubles: exact up to 2^53.
                    .arg(limit.min(1 << 53))
                    .arg(optional(from.map(|from| from.created_at.as_millis())))
                    .arg(optional(from.map(|from| from.id)))
                    .invoke_async(&mut conn)
                    .await
                    .map_err(StoreError::backend)?;
                let scope = Scope::Owner(owner);
                let mut records = Vec::with_capacity(stored.len());
                for json in stored {
                    let record = decode(&json)?;
                    if self.sees(&record, scope, now) {
                        records.push(record);
                    }
                }
                Ok(ListPage::of(records, more == 1))
            })
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
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "mcp-tasks: RedisStore::subscribe needs a tokio runtime; changes made on other nodes are not relayed"
            );
            return None;
        };
        let receiver = feed.sender.subscribe();
        self.start_listener(feed, &runtime, None);
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
        retry_once(move || {
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
                .key(&self.keys.sizes)
                .key(&self.keys.bytes)
                .arg(expected)
                .arg(record.revision)
                .arg(encode(record)?)
                .arg(optional(retired))
                .arg(&id_text)
                .arg(&self.keys.channel)
                .arg(self.payload(&record.id))
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
