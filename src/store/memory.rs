//! The in-memory store: one process, sharded locks, a time-ordered expiry index,
//! and each owner's tasks in list order.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::compact::Stored;
use super::owned::{Listed, OwnerTasks};
use super::{
    BoxFuture, Budgeted, Clock, CreateLimits, ListFrom, ListPage, TaskStore, Updated,
    retention_cutoff,
};
use crate::error::{Limit, StoreError};
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};

const SHARDS: usize = 64;
/// Expired records a `create` on a full store removes before it gives up: the work
/// a refused create may do is bounded, and a store without a janitor never stays
/// full of expired records.
const PRUNE_BATCH: usize = 256;
/// Most index entries a `list` reads under the owners' lock at a time, and most
/// removals taken off the index under it at a time: creates never wait long.
const INDEX_BATCH: usize = 256;

/// Shards of the per-owner byte counts: writers of different owners rarely meet.
const BYTE_SHARDS: usize = 16;

/// One shard of the per-owner byte counts.
type ByteCounts = HashMap<Option<Principal>, u64>;

/// A record taken out of its shard: its owner, its entry in the owner's list, and
/// the bytes it was counted at.
type Removed = (Option<Principal>, Listed, u64);

/// The default store: records in memory, for a single process.
///
/// Records are spread over 64 independently locked shards, so writers on different
/// tasks rarely meet. Each shard keeps its records ordered by expiry time, so a
/// cleanup costs O(expired), not O(rows). Each owner's tasks are also kept in list
/// order (newest first), so a [`list`](TaskStore::list) page costs O(page), not
/// O(rows). Locks are never held across an `.await`.
/// Tasks live as long as the process: `PostgresStore` and `RedisStore` (features
/// `postgres` and `redis`, in [`store`](crate::store)) keep them across restarts and
/// share them between nodes.
///
/// ```
/// use mcp_tasks::store::{CreateLimits, Scope, Timestamp};
/// use mcp_tasks::{MemoryStore, Principal, TaskId, TaskRecord, TasksLayer};
/// use mcp_tasks::store::TaskStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
/// let store = MemoryStore::new();
/// let alice = Principal::from("alice");
/// let id = TaskId::random();
/// let record = TaskRecord::new(id, Some(alice.clone()), Timestamp::now());
/// store.create(record, CreateLimits::default()).await?;
/// assert_eq!(store.len(), 1);
///
/// // Owner-scoped: another caller sees nothing.
/// assert!(store.get(&id, Scope::Owner(Some(&alice)), Timestamp::now()).await?.is_some());
/// assert!(store.get(&id, Scope::Owner(None), Timestamp::now()).await?.is_none());
///
/// let layer = TasksLayer::new(store); // the usual place for it
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    rows: AtomicUsize,
    /// Each owner's tasks in list order: their number is what the per-owner cap
    /// counts, and `list` reads its pages there. One map for all shards, so an
    /// owner with few tasks keeps one small entry, not one in each shard.
    per_owner: Mutex<HashMap<Option<Principal>, OwnerTasks>>,
    /// The bytes each owner's records take ([`Stored::encoded_len_bound`]), spread
    /// over [`BYTE_SHARDS`] maps by the owner: changed under the record's shard lock
    /// on a create or an update, and after it on a removal.
    bytes: Box<[Mutex<ByteCounts>]>,
    clock: Clock,
}

#[derive(Default)]
struct Shard {
    /// Compact and boxed, so a table slot is 40 bytes: less memory at the table's
    /// spare capacity, and probes and resizes touch less.
    tasks: HashMap<TaskId, Box<Stored>, IdHash>,
    /// Records with a TTL, by expiry time.
    expiry: BTreeSet<(Timestamp, TaskId)>,
    /// Terminal records without a TTL, by the time they became terminal.
    retired: BTreeSet<(Timestamp, TaskId)>,
    /// One copy of each owner's name, shared by the shard's records: a task costs
    /// no allocation for its owner, and the name a read compares stays in cache.
    /// Per shard, so that readers on two threads rarely count on one name.
    owners: HashSet<Principal>,
    /// How many names [`Shard::owners`] kept at its last sweep.
    owners_kept: usize,
}

impl MemoryStore {
    /// An empty store.
    ///
    /// ```
    /// use mcp_tasks::MemoryStore;
    ///
    /// assert!(MemoryStore::new().is_empty());
    /// ```
    pub fn new() -> Self {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            rows: AtomicUsize::new(0),
            per_owner: Mutex::new(HashMap::new()),
            bytes: (0..BYTE_SHARDS).map(|_| Mutex::default()).collect(),
            clock: Clock::Caller,
        }
    }

    /// The same (empty) store, deciding expiry and retention by `clock`. The default,
    /// [`Clock::Caller`], takes the `now` of each call; [`Clock::Store`] reads the
    /// process's clock at each decision and ignores the `now` passed in (a record
    /// then expires `ttl` after it was stored).
    ///
    /// ```
    /// use mcp_tasks::store::{Clock, CreateLimits, Scope, Timestamp};
    /// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new().with_clock(Clock::Store);
    /// // A record stamped by a clock a day behind still lives its full TTL.
    /// let mut record = TaskRecord::new(TaskId::random(), None, Timestamp::now().minus_ms(86_400_000));
    /// record.ttl_ms = Some(60_000);
    /// let id = record.id;
    /// store.create(record, CreateLimits::default()).await?;
    /// assert!(store.get(&id, Scope::Any, Timestamp::now().minus_ms(86_400_000)).await?.is_some());
    /// assert!(store.get(&id, Scope::Any, Timestamp::now().plus_ms(86_400_000)).await?.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The clock this store decides expiry and retention by.
    ///
    /// ```
    /// assert_eq!(mcp_tasks::MemoryStore::new().clock(), mcp_tasks::store::Clock::Caller);
    /// ```
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The time a decision is made at: `now` itself, or the process's clock.
    /// The record `get` answers with: read under its shard's lock, never waiting.
    fn read(&self, id: &TaskId, scope: Scope<'_>, now: Timestamp) -> Option<TaskRecord> {
        let now = self.decide_at(now);
        let shard = Self::lock(self.shard(id));
        shard
            .tasks
            .get(id)
            .filter(|r| r.is_visible(scope, now))
            .map(|r| r.to_record(*id))
    }

    fn decide_at(&self, now: Timestamp) -> Timestamp {
        match self.clock {
            Clock::Caller => now,
            Clock::Store => Timestamp::now(),
        }
    }

    /// How many records the store holds, expired ones not yet swept included. They
    /// never block a create: one that finds the store (or its owner) full first
    /// removes up to 256 expired records (and records retired past
    /// [`CreateLimits::retention`]), oldest first.
    ///
    /// ```
    /// use mcp_tasks::store::{CreateLimits, Timestamp};
    /// use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
    /// use mcp_tasks::store::TaskStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), mcp_tasks::error::StoreError> {
    /// let store = MemoryStore::new();
    /// let record = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    /// store.create(record, CreateLimits::default()).await?;
    /// assert_eq!(store.len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.rows.load(Ordering::Acquire)
    }

    /// Whether the store holds no record.
    ///
    /// ```
    /// use mcp_tasks::MemoryStore;
    ///
    /// assert!(MemoryStore::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, id: &TaskId) -> &Mutex<Shard> {
        &self.shards[Self::shard_index(id)]
    }

    fn lock<'a>(shard: &'a Mutex<Shard>) -> std::sync::MutexGuard<'a, Shard> {
        // A panic while holding a shard lock cannot leave a record half-written:
        // records are replaced whole. Keep serving.
        shard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<Option<Principal>, OwnerTasks>> {
        // Entries are added and removed whole; a panic elsewhere cannot tear one.
        self.per_owner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a row for a new record of `owner` and lists it as `entry`, unless a
    /// cap is full. Whether the entry is new (`false`: a record with the same id,
    /// owner and time holds it, and the create is a duplicate).
    fn reserve(
        &self,
        owner: &Option<Principal>,
        entry: Listed,
        limits: CreateLimits,
    ) -> Result<bool, Limit> {
        // Both caps are checked and taken under one lock, so a create refused by
        // one cap never holds a row another create could have had.
        let mut owners = self.owners();
        if limits
            .max_rows
            .is_some_and(|max| self.rows.load(Ordering::Acquire) >= max)
        {
            return Err(Limit::Rows);
        }
        let tasks = owners.entry(owner.clone()).or_default();
        if limits.max_per_owner.is_some_and(|max| tasks.len() >= max) {
            if tasks.is_empty() {
                owners.remove(owner);
            }
            return Err(Limit::PerOwner);
        }
        let listed = tasks.insert(entry);
        self.rows.fetch_add(1, Ordering::AcqRel);
        Ok(listed)
    }

    /// Gives back the row of a create that stored nothing, and its entry if
    /// [`reserve`](Self::reserve) added one.
    fn unreserve(&self, owner: &Option<Principal>, entry: Option<Listed>) {
        let mut owners = self.owners();
        self.rows.fetch_sub(1, Ordering::AcqRel);
        if let Some(entry) = entry {
            Self::unlist(&mut owners, owner, &entry);
        }
    }

    /// Takes records removed from their shards off the row count, their owners'
    /// lists and their owners' bytes, a batch at a time under the lock.
    fn release(&self, removed: Vec<Removed>) {
        for batch in removed.chunks(INDEX_BATCH) {
            let mut owners = self.owners();
            self.rows.fetch_sub(batch.len(), Ordering::AcqRel);
            for (owner, entry, _) in batch {
                Self::unlist(&mut owners, owner, entry);
            }
        }
        for (owner, _, bytes) in &removed {
            self.count_bytes(owner, 0, *bytes);
        }
    }

    /// The byte counts of the shard `owner` falls in.
    fn bytes_of(&self, owner: &Option<Principal>) -> std::sync::MutexGuard<'_, ByteCounts> {
        use std::hash::BuildHasher as _;
        let at = BYTES_HASH.hash_one(owner) as usize % BYTE_SHARDS;
        // Counts are changed whole; a panic elsewhere cannot tear one.
        self.bytes[at]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds `added` bytes to `owner`'s count and takes `removed` off it; an owner
    /// at zero keeps no entry.
    fn count_bytes(&self, owner: &Option<Principal>, added: u64, removed: u64) {
        if added == removed {
            return;
        }
        let mut counts = self.bytes_of(owner);
        let count = counts.entry(owner.clone()).or_insert(0);
        *count = count.saturating_add(added).saturating_sub(removed);
        if *count == 0 {
            counts.remove(owner);
        }
    }

    fn unlist(
        owners: &mut HashMap<Option<Principal>, OwnerTasks>,
        owner: &Option<Principal>,
        entry: &Listed,
    ) {
        if let Some(tasks) = owners.get_mut(owner) {
            tasks.remove(entry);
            if tasks.is_empty() {
                owners.remove(owner);
            }
        }
    }

    /// One page of [`TaskStore::list`]: the owner's entries are read a batch at a
    /// time under the owners' lock, then each record under its shard's; entries
    /// whose record expired (or went since) are passed over. One visible record
    /// past a full page says that a next page exists.
    fn page(
        &self,
        owner: Option<&Principal>,
        from: Option<ListFrom>,
        limit: usize,
        now: Timestamp,
    ) -> ListPage {
        let mut page = ListPage::default();
        if limit == 0 {
            return page;
        }
        let now = self.decide_at(now);
        let scope = Scope::Owner(owner);
        let key = owner.cloned();
        let mut after = from.map(Listed::from);
        let mut entries = Vec::new();
        loop {
            let want = (limit - page.records.len() + 1).min(INDEX_BATCH);
            entries.clear();
            if let Some(tasks) = self.owners().get(&key) {
                tasks.after(after.as_ref(), want, &mut entries);
            }
            for entry in &entries {
                let shard = Self::lock(self.shard(&entry.id));
                let Some(stored) = shard
                    .tasks
                    .get(&entry.id)
                    .filter(|r| r.is_visible(scope, now))
                else {
                    continue;
                };
                if page.records.len() == limit {
                    page.next = page.records.last().map(ListFrom::after);
                    return page;
                }
                page.records.push(stored.to_record(entry.id));
            }
            if entries.len() < want {
                return page;
            }
            after = entries.last().copied();
        }
    }
}

impl MemoryStore {
    /// Removes up to [`PRUNE_BATCH`] records expired at `now` or retired at or
    /// before `retired_before`, oldest first in each shard, starting with shard
    /// `start`. Returns how many were removed.
    fn prune(&self, now: Timestamp, retired_before: Option<Timestamp>, start: usize) -> usize {
        let mut removed = 0;
        for k in 0..SHARDS {
            if removed >= PRUNE_BATCH {
                break;
            }
            let gone = {
                let mut shard = Self::lock(&self.shards[(start + k) % SHARDS]);
                let mut gone = shard.pop_expired(now, PRUNE_BATCH - removed);
                if let Some(before) = retired_before {
                    let room = PRUNE_BATCH - removed - gone.len();
                    gone.extend(shard.pop_retired(before, room));
                }
                gone
            };
            removed += gone.len();
            self.release(gone);
        }
        removed
    }

    fn shard_index(id: &TaskId) -> usize {
        let bytes = id.as_bytes();
        (usize::from(bytes[0]) | (usize::from(bytes[1]) << 8)) % SHARDS
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("rows", &self.len())
            .finish_non_exhaustive()
    }
}

/// How a shard's table hashes ids: two folded multiplies of the id's words with
/// keys drawn once per shard. An id is 32 random bytes, so this spreads them as
/// well as SipHash does, at a tenth of the work of every read; the keys keep
/// chosen ids from being aimed at one bucket.
#[derive(Clone)]
struct IdHash([u64; 2]);

impl Default for IdHash {
    fn default() -> Self {
        use std::hash::BuildHasher as _;
        let keys = std::collections::hash_map::RandomState::new();
        IdHash([keys.hash_one(1u8), keys.hash_one(2u8)])
    }
}

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher {
            keys: self.0,
            hash: 0,
        }
    }
}

struct IdHasher {
    keys: [u64; 2],
    hash: u64,
}

/// How an owner picks its shard of the byte counts: fixed keys, since an owner
/// choosing its name gains nothing by sharing a shard with another.
static BYTES_HASH: std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher> =
    std::hash::BuildHasherDefault::new();

fn folded_multiply(x: u64, y: u64) -> u64 {
    let product = u128::from(x) * u128::from(y);
    (product as u64) ^ ((product >> 64) as u64)
}

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(16) {
            let mut words = [0u8; 16];
            words[..chunk.len()].copy_from_slice(chunk);
            let [a, b] = [&words[..8], &words[8..]]
                .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()));
            self.hash = folded_multiply(a ^ self.keys[0] ^ self.hash, b ^ self.keys[1]);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.hash = self.hash.rotate_left(5) ^ n as u64;
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

impl Shard {
    /// The shard's shared copy of `owner`'s name. Names no record holds any more
    /// are swept once the table has doubled since the last sweep, so it holds at
    /// most twice the owners with records here (plus a few).
    fn intern(&mut self, owner: Option<Principal>) -> Option<Principal> {
        let owner = owner?;
        if let Some(shared) = self.owners.get(&owner) {
            return Some(shared.clone());
        }
        if self.owners.len() >= 2 * self.owners_kept + 16 {
            self.owners.retain(|name| name.holders() > 1);
            self.owners_kept = self.owners.len();
        }
        self.owners.insert(owner.clone());
        Some(owner)
    }

    /// Removes the record of `id`, if stored: its owner, list entry and size.
    fn take(&mut self, id: TaskId) -> Option<Removed> {
        let stored = self.tasks.remove(&id)?;
        let entry = Listed {
            created_at: stored.created_at(),
            id,
        };
        let bytes = stored.encoded_len_bound() as u64;
        Some((stored.into_owner(), entry, bytes))
    }

    /// Removes up to `max` records expired at `now`, oldest first; returns what
    /// went.
    fn pop_expired(&mut self, now: Timestamp, max: usize) -> Vec<Removed> {
        let mut gone = Vec::new();
        while gone.len() < max
            && let Some(&(at, id)) = self.expiry.first()
        {
            if at > now {
                break;
            }
            self.expiry.pop_first();
            gone.extend(self.take(id));
        }
        gone
    }

    /// Removes up to `max` terminal records without a TTL retired at or before
    /// `before`, oldest first; returns what went.
    fn pop_retired(&mut self, before: Timestamp, max: usize) -> Vec<Removed> {
        let mut gone = Vec::new();
        while gone.len() < max
            && let Some(&(at, id)) = self.retired.first()
        {
            if at > before {
                break;
            }
            self.retired.pop_first();
            gone.extend(self.take(id));
        }
        gone
    }
}

impl TaskStore for MemoryStore {
    fn create<'a>(
        &'a self,
        mut record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let entry = Listed {
                created_at: record.created_at,
                id: record.id,
            };
            let listed = match self.reserve(&record.owner, entry, limits) {
                Ok(listed) => listed,
                Err(limit) => {
                    // Expired records, and retired ones past their retention, never
                    // block: free some, then try once more.
                    let now = self.decide_at(record.created_at);
                    let retired_before = limits.retention.map(|r| retention_cutoff(now, r));
                    if self.prune(now, retired_before, Self::shard_index(&record.id)) == 0 {
                        return Err(StoreError::LimitReached(limit));
                    }
                    self.reserve(&record.owner, entry, limits)
                        .map_err(StoreError::LimitReached)?
                }
            };
            let mut shard = Self::lock(self.shard(&record.id));
            if shard.tasks.contains_key(&record.id) {
                drop(shard);
                self.unreserve(&record.owner, listed.then_some(entry));
                return Err(StoreError::Duplicate);
            }
            record.owner = shard.intern(record.owner.take());
            let now = self.decide_at(record.created_at);
            let skew = match self.clock {
                Clock::Caller => 0,
                Clock::Store => {
                    let ahead =
                        i128::from(now.as_millis()) - i128::from(record.created_at.as_millis());
                    i32::try_from(ahead.clamp(i128::from(i32::MIN), i128::from(i32::MAX)))
                        .unwrap_or(0)
                }
            };
            let id = record.id;
            let retired_at = match self.clock {
                Clock::Caller => record.retired_at(),
                Clock::Store => record.retired_at().map(|_| now),
            };
            let stored = Stored::from(record).with_skew(skew);
            if let Some(at) = stored.expires_at() {
                shard.expiry.insert((at, id));
            } else if let Some(at) = retired_at {
                shard.retired.insert((at, id));
            }
            // Counted under the shard's lock, so no removal can take the record
            // off its owner's count first.
            self.count_bytes(
                &stored.owner().cloned(),
                stored.encoded_len_bound() as u64,
                0,
            );
            shard.tasks.insert(id, Box::new(stored));
            Ok(())
        })
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move { Ok(self.read(id, scope, now)) })
    }

    fn get_now(
        &self,
        id: &TaskId,
        scope: Scope<'_>,
        now: Timestamp,
    ) -> Option<Result<Option<TaskRecord>, StoreError>> {
        Some(Ok(self.read(id, scope, now)))
    }

    fn get_many<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let now = self.decide_at(now);
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            Ok(ids
                .iter()
                .filter(|id| seen.insert(**id))
                .filter_map(|id| {
                    let shard = Self::lock(self.shard(id));
                    shard
                        .tasks
                        .get(id)
                        .filter(|r| r.is_visible(scope, now))
                        .map(|r| r.to_record(*id))
                })
                .collect())
        })
    }

    /// Each record's size is an upper bound of its encoded size, counted from the
    /// stored fields (the large ones once per write) under its shard's lock. The
    /// sizes are summed first and a read over the budget copies nothing; a record
    /// that grew in between is counted again as it is copied, so a read never copies
    /// more than the budget.
    fn get_many_within<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
        budget: usize,
    ) -> BoxFuture<'a, Result<Budgeted, StoreError>> {
        Box::pin(async move {
            let now = self.decide_at(now);
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            let unique: Vec<&TaskId> = ids.iter().filter(|id| seen.insert(**id)).collect();
            let mut total = 0usize;
            for id in &unique {
                let shard = Self::lock(self.shard(id));
                if let Some(stored) = shard.tasks.get(id).filter(|r| r.is_visible(scope, now)) {
                    total = total.saturating_add(stored.encoded_len_bound());
                    if total > budget {
                        return Ok(Budgeted::OverBudget);
                    }
                }
            }
            let mut found = Vec::new();
            let mut taken = 0usize;
            for id in unique {
                let shard = Self::lock(self.shard(id));
                let Some(stored) = shard.tasks.get(id).filter(|r| r.is_visible(scope, now)) else {
                    continue;
                };
                taken = taken.saturating_add(stored.encoded_len_bound());
                if taken > budget {
                    return Ok(Budgeted::OverBudget);
                }
                found.push(stored.to_record(*id));
            }
            Ok(Budgeted::Within(found))
        })
    }

    fn visible<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>> {
        Box::pin(async move {
            let now = self.decide_at(now);
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            Ok(ids
                .iter()
                .filter(|id| {
                    let shard = Self::lock(self.shard(id));
                    shard
                        .tasks
                        .get(id)
                        .is_some_and(|r| r.is_visible(scope, now))
                        && seen.insert(**id)
                })
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
        Box::pin(async move {
            let decided = self.decide_at(now);
            let mut guard = Self::lock(self.shard(id));
            let shard = &mut *guard;
            let Some(record) = shard
                .tasks
                .get_mut(id)
                .filter(|r| r.is_visible(scope, decided))
            else {
                return Ok(None);
            };
            let mut snapshot = record.to_record(*id);
            let was_retired = snapshot.retired_at().is_some();
            let outcome = snapshot.apply(transition, now);
            if outcome == Ok(crate::store::Applied::Changed) {
                let skew = record.skew_ms();
                let before = record.encoded_len_bound() as u64;
                **record = Stored::from(snapshot.clone()).with_skew(skew);
                let after = record.encoded_len_bound() as u64;
                self.count_bytes(&snapshot.owner, after, before);
            }
            if !was_retired && snapshot.retired_at().is_some() {
                // Retention counts from now by the store's clock (on the caller's,
                // that is the record's `updated_at`).
                shard.retired.insert((decided, snapshot.id));
            }
            Ok(Some(Updated::new(snapshot, outcome)))
        })
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(async move {
            let now = self.decide_at(now);
            let retired_before = retention_cutoff(now, retention);
            let mut removed_total = 0;
            for shard in self.shards.iter() {
                let mut gone;
                {
                    let mut guard = Self::lock(shard);
                    let shard = &mut *guard;
                    gone = shard.pop_expired(now, usize::MAX);
                    gone.extend(shard.pop_retired(retired_before, usize::MAX));
                }
                removed_total += gone.len();
                self.release(gone);
            }
            Ok(removed_total)
        })
    }

    /// One counter read: each owner's bytes are counted as records are written
    /// and removed.
    fn owner_bytes<'a>(
        &'a self,
        owner: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let owner = owner.cloned();
        let bytes = self.bytes_of(&owner).get(&owner).copied().unwrap_or(0);
        Box::pin(async move { Ok(bytes) })
    }

    /// Reads the owner's entries in list order (kept for every owner, updated
    /// with each create and removal), then each record under its shard's lock:
    /// O(page), plus the expired records not swept yet that it passes over.
    fn list<'a>(
        &'a self,
        owner: Option<&'a Principal>,
        from: Option<ListFrom>,
        limit: usize,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<ListPage, StoreError>> {
        Box::pin(async move { Ok(self.page(owner, from, limit, now)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::TaskStatus;
    use serde_json::json;
    use std::sync::Arc;

    fn task(ttl: Option<u64>, at: u64) -> TaskRecord {
        let mut r = TaskRecord::new(TaskId::random(), None, Timestamp::from_millis(at));
        r.ttl_ms = ttl;
        r
    }

    #[tokio::test]
    async fn cleanup_removes_only_what_expired() {
        let store = MemoryStore::new();
        let short = task(Some(10), 0);
        let long = task(Some(10_000_000_000), 0);
        let forever = task(None, 0);
        for r in [&short, &long, &forever] {
            store
                .create(r.clone(), CreateLimits::default())
                .await
                .unwrap();
        }
        assert_eq!(
            store
                .cleanup(Timestamp::from_millis(5), Duration::ZERO)
                .await
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .cleanup(Timestamp::from_millis(10), Duration::ZERO)
                .await
                .unwrap(),
            1
        );
        assert_eq!(store.len(), 2);
        let done = Transition::Complete {
            result: json!({}),
            message: None,
        };
        let updated = store
            .update(&forever.id, Scope::Any, &done, Timestamp::from_millis(20))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(updated.record.status, TaskStatus::Completed);
        let hour = Duration::from_secs(3600);
        assert_eq!(
            store
                .cleanup(Timestamp::from_millis(30), hour)
                .await
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .cleanup(Timestamp::from_millis(20 + 3_600_000), hour)
                .await
                .unwrap(),
            1
        );
        assert!(
            store
                .get(&long.id, Scope::Any, Timestamp::from_millis(30))
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn per_owner_cap_counts_each_owner_separately() {
        let store = MemoryStore::new();
        let limits = CreateLimits::new(Some(10), Some(1));
        let mut a = task(None, 0);
        a.owner = Some(Principal::from("a"));
        let mut a2 = task(None, 0);
        a2.owner = Some(Principal::from("a"));
        let b = task(None, 0);
        store.create(a, limits).await.unwrap();
        assert!(matches!(
            store.create(a2, limits).await,
            Err(StoreError::LimitReached(Limit::PerOwner))
        ));
        store.create(b, limits).await.unwrap();
        assert_eq!(store.len(), 2);
    }

    #[tokio::test]
    async fn a_full_store_of_expired_rows_accepts_a_new_task_without_a_janitor() {
        let store = MemoryStore::new();
        let alice = Some(Principal::from("alice"));
        let owned = |ttl, at| {
            let mut r = task(ttl, at);
            r.owner = alice.clone();
            r
        };
        // The per-owner cap: alice's three tasks expire at 10.
        let per_owner = CreateLimits::new(None, Some(3));
        for _ in 0..3 {
            store.create(owned(Some(10), 0), per_owner).await.unwrap();
        }
        assert!(matches!(
            store.create(owned(None, 9), per_owner).await,
            Err(StoreError::LimitReached(Limit::PerOwner))
        ));
        store.create(owned(None, 10), per_owner).await.unwrap();
        assert_eq!(store.len(), 1, "the expired rows were removed");

        // The row cap: a store full of expired rows of many owners.
        let store = MemoryStore::new();
        let rows = CreateLimits::new(Some(PRUNE_BATCH * 2), None);
        for _ in 0..PRUNE_BATCH * 2 {
            store.create(task(Some(5), 0), rows).await.unwrap();
        }
        assert!(matches!(
            store.create(task(None, 4), rows).await,
            Err(StoreError::LimitReached(Limit::Rows))
        ));
        store.create(task(None, 5), rows).await.unwrap();
        assert_eq!(store.len(), PRUNE_BATCH + 1, "one bounded prune ran");
        let swept = store.cleanup(Timestamp::from_millis(5), Duration::ZERO);
        assert_eq!(swept.await.unwrap(), PRUNE_BATCH);
        // A live record is never removed to make room.
        let one = CreateLimits::new(Some(1), None);
        assert!(matches!(
            store.create(task(None, 5), one).await,
            Err(StoreError::LimitReached(Limit::Rows))
        ));
        assert_eq!(store.len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_create_refused_by_its_owner_cap_never_blocks_another_owner() {
        let limits = CreateLimits::new(Some(2), Some(1));
        for _ in 0..300 {
            let store = Arc::new(MemoryStore::new());
            let mut first = task(None, 0);
            first.owner = Some(Principal::from("alice"));
            store.create(first, limits).await.unwrap();
            let barrier = Arc::new(tokio::sync::Barrier::new(5));
            let racers: Vec<_> = (0..5)
                .map(|i| {
                    let (store, barrier) = (store.clone(), barrier.clone());
                    tokio::spawn(async move {
                        let mut record = task(None, 0);
                        record.owner = Some(Principal::from(if i == 4 { "bob" } else { "alice" }));
                        barrier.wait().await;
                        (i, store.create(record, limits).await.is_ok())
                    })
                })
                .collect();
            for racer in racers {
                let (i, created) = racer.await.unwrap();
                assert_eq!(created, i == 4, "racer {i}");
            }
            assert_eq!(store.len(), 2);
        }
    }

    /// Every way a record leaves the store takes it off its owner's list, and a
    /// refused duplicate leaves the original's entry: the lists hold exactly the
    /// stored records, and an owner without any keeps no entry.
    #[tokio::test]
    async fn owner_lists_follow_every_create_and_removal() {
        let store = MemoryStore::new();
        let alice = Some(Principal::from("alice"));
        let listed = |store: &MemoryStore| {
            let owners = store.owners();
            owners.get(&alice).map_or(0, OwnerTasks::len)
        };
        let mut records = Vec::new();
        for n in 0..20 {
            // Expires at n + 10.
            let mut record = task(Some(10), n);
            record.owner = alice.clone();
            records.push(record.clone());
            store.create(record, CreateLimits::default()).await.unwrap();
        }
        let again = store.create(records[19].clone(), CreateLimits::default());
        assert!(matches!(again.await, Err(StoreError::Duplicate)));
        assert_eq!(listed(&store), 20);
        let swept = store.cleanup(Timestamp::from_millis(15), Duration::ZERO);
        assert_eq!(swept.await.unwrap(), 6);
        assert_eq!(listed(&store), 14);
        // A create at alice's cap prunes her expired records first.
        let mut next = task(None, 25);
        next.owner = alice.clone();
        let cap = CreateLimits::new(None, Some(14));
        store.create(next, cap).await.unwrap();
        assert_eq!(listed(&store), 5, "records 16 to 19 and the new one");
        let page = store.page(alice.as_ref(), None, 10, Timestamp::from_millis(25));
        assert_eq!(page.records.len(), 5);
        assert_eq!(page.next, None);
        let swept = store.cleanup(Timestamp::from_millis(100), Duration::ZERO);
        assert_eq!(swept.await.unwrap(), 4);
        assert_eq!(listed(&store), 1);
        assert!(store.owners().get(&None).is_none());
    }

    /// A record of `owner` in shard 0, created at `at` with `ttl`.
    fn in_first_shard(owner: &str, n: u16, ttl: Option<u64>, at: u64) -> TaskRecord {
        let mut bytes = TaskId::random().as_bytes().to_owned();
        bytes[..2].copy_from_slice(&0u16.to_le_bytes());
        bytes[2..4].copy_from_slice(&n.to_le_bytes());
        let mut record = TaskRecord::new(
            TaskId::from_bytes(bytes),
            Some(Principal::new(owner)),
            Timestamp::from_millis(at),
        );
        record.ttl_ms = ttl;
        record
    }

    #[tokio::test]
    async fn records_of_one_owner_share_one_copy_of_the_name() {
        let store = MemoryStore::new();
        let mut ids = Vec::new();
        for n in 0..10 {
            let record = in_first_shard("alice", n, None, 0);
            ids.push(record.id);
            store.create(record, CreateLimits::default()).await.unwrap();
        }
        let read = store.get(&ids[0], Scope::Any, Timestamp::from_millis(0));
        let owner = read.await.unwrap().unwrap().owner.unwrap();
        // The shard's copy, the per-owner count's and the byte count's (all from
        // the first create), the ten records' and this one.
        assert_eq!(owner.holders(), 14);
    }

    #[tokio::test]
    async fn names_of_owners_gone_from_a_shard_are_swept() {
        let store = MemoryStore::new();
        for n in 0..1_000u16 {
            let record = in_first_shard(&format!("owner-{n}"), n, Some(1), u64::from(n));
            store.create(record, CreateLimits::default()).await.unwrap();
            // Each record expires before the next one is made.
            store
                .cleanup(Timestamp::from_millis(u64::from(n) + 1), Duration::ZERO)
                .await
                .unwrap();
        }
        assert!(store.is_empty());
        let shard = MemoryStore::lock(&store.shards[0]);
        assert!(
            shard.owners.len() <= 17,
            "{} names kept",
            shard.owners.len()
        );
    }
}
