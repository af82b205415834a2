//! The `TaskStore` and compare-and-swap implementations of `PostgresStore`: reads,
//! batched reads, the conditional write, and the cleanup sweep.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Row, SqlStr};

use super::super::leases::PgLeases;
use super::super::statements::{Columns, FEED_RETENTION, millis};
use super::super::{Failure, PostgresStore};
use super::create::{PruneGroup, owner_scope};
use crate::error::StoreError;
use crate::store::retry::{retry_create, retry_once};
use crate::store::rules::{CompareAndSwap, Written, compare_and_swap};
use crate::store::{
    BoxFuture, Budgeted, ChangeFeed, CreateLimits, LeaseStore, ListFrom, ListPage, TaskStore,
    Updated,
};
use crate::task::{Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};

/// Records one cleanup transaction removes.
const CLEANUP_BATCH: i64 = 10_000;
/// Where the first page of `list` starts: after every row, whatever its
/// `created_at` (at most `i64::MAX`), since no 32-byte id sorts after 33 bytes of
/// `0xFF`.
const BEFORE_ALL: (i64, [u8; TaskId::BYTES + 1]) = (i64::MAX, [0xFF; TaskId::BYTES + 1]);

impl PostgresStore {
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
        retry_once(move || Box::pin(PostgresStore::read(self, id, scope, now)))
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
        Box::pin(async move {
            let record = &record;
            retry_create(
                record,
                move || Box::pin(self.insert(record, limits)),
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
            // The expiry was decided in the `SELECT`, by the store's clock.
            Ok(CompareAndSwap::read(self, id, scope, now)
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
        retry_once(move || {
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
        retry_once(move || {
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
        })
    }

    fn visible<'a>(
        &'a self,
        ids: &'a [TaskId],
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>> {
        retry_once(move || {
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

    /// One `SELECT`: a range of the index on `(owner, created_at DESC, id DESC)`
    /// just after `from`, the expiry checked in the database, one row more than the
    /// page to know whether a next one exists.
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
                let (created_at, id): (i64, &[u8]) = match &from {
                    Some(from) => (millis(from.created_at.as_millis()), from.id.as_bytes()),
                    None => (BEFORE_ALL.0, &BEFORE_ALL.1),
                };
                let sql = &self.inner.sql;
                let statement = match owner {
                    Some(_) => &sql.list_owned,
                    None => &sql.list_unowned,
                };
                let mut query = sqlx::query_scalar(statement.clone())
                    .bind(self.clock_arg(now))
                    .bind(created_at)
                    .bind(id)
                    .bind(i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX));
                if let Some(owner) = owner {
                    query = query.bind(owner.as_str().as_bytes());
                }
                let rows: Vec<String> = query
                    .fetch_all(&self.inner.pool)
                    .await
                    .map_err(StoreError::backend)?;
                let more = rows.len() > limit;
                let mut records = Vec::with_capacity(rows.len().min(limit));
                for text in rows.into_iter().take(limit) {
                    let record: TaskRecord =
                        serde_json::from_str(&text).map_err(StoreError::backend)?;
                    // The row's owner matched; a record saying otherwise is never shown.
                    if record.owner.as_ref() == owner {
                        records.push(record);
                    }
                }
                Ok(ListPage::of(records, more))
            })
        })
    }

    /// One `SELECT` of the owner's counter rows (one per shard at most): each
    /// create, write and removal changes the row it counts in by the record's
    /// size, `octet_length(record::text)`.
    fn owner_bytes<'a>(
        &'a self,
        owner: Option<&'a Principal>,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        retry_once(move || {
            Box::pin(async move {
                let scope = owner_scope(owner.map(|p| p.as_str().as_bytes()));
                let bytes: i64 = sqlx::query_scalar(self.inner.sql.owner_bytes.clone())
                    .bind(scope)
                    .fetch_one(&self.inner.pool)
                    .await
                    .map_err(StoreError::backend)?;
                Ok(u64::try_from(bytes).unwrap_or(0))
            })
        })
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        retry_once(move || {
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
