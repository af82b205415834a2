//! `create` on PostgreSQL: the counter shards of the caps, the fast path, the
//! exact path near a cap, and the pruning a full create does first.

use std::time::Duration;

use super::super::PostgresStore;
use super::super::statements::{COUNT_SHARDS, Columns, ROWS_SCOPE, millis};
use sqlx::Row;

use crate::error::{Limit, StoreError};
use crate::store::CreateLimits;
use crate::task::{TaskId, TaskRecord};

/// Shards a create tries before it decides on the exact counts.
const FAST_TRIES: u8 = 3;
/// Expired or retired records a create that finds a cap full removes first.
const PRUNE_BATCH: i64 = 256;

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
pub(super) enum PruneGroup<'a> {
    All,
    Owner(Option<&'a [u8]>),
}

impl PostgresStore {
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

    pub(super) async fn insert(
        &self,
        record: &TaskRecord,
        limits: CreateLimits,
    ) -> Result<(), StoreError> {
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
            .bind(columns.created_at)
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
    pub(super) async fn prune(
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
        let gone: Vec<(Vec<u8>, i16, i64, i64)> = query
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        if gone.is_empty() {
            return Ok(0);
        }
        let removed = gone
            .iter()
            .filter(|(scope, _, _, _)| scope.as_slice() == ROWS_SCOPE)
            .map(|&(_, _, n, _)| usize::try_from(n).unwrap_or(0))
            .sum();
        let mut scopes = Vec::with_capacity(gone.len());
        let mut shards = Vec::with_capacity(gone.len());
        let mut counts = Vec::with_capacity(gone.len());
        let mut bytes = Vec::with_capacity(gone.len());
        for (scope, shard, n, size) in gone {
            scopes.push(scope);
            shards.push(shard);
            counts.push(n);
            bytes.push(size);
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
            .bind(&bytes)
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
}

/// The counter scope of one owner's cap: `[1]` for the anonymous owner, `[2]` and
/// the principal's bytes otherwise (never the row cap's `[0]`).
pub(super) fn owner_scope(owner: Option<&[u8]>) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
