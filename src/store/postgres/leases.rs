//! Worker leases next to a `PostgresStore`'s table `T`: `T_leases` keeps each
//! lease's renewal count, lease length and claim, `T_lease_holds` the tasks each
//! lease holds (a task under its last holder only: a renewal that takes a task
//! deletes the other leases' rows for it). No clock is read: other nodes watch
//! the counts.
//!
//! The leases run on a small pool of their own (two connections, opened on first
//! use with the store pool's settings), so renewals never wait behind request
//! traffic for a connection. A renewal is one transaction whose statements are
//! cancelled past a quarter of the lease (the time a renewal is given:
//! `statement_timeout`), so that a slow one never holds the lease row while the
//! next renewal waits behind it. It carries at most [`RENEW_BATCH`] ids in one
//! statement; a larger one (or one that replaces the holds) runs as several.
//! Every hold change is driven by the ids sent, each matched on the primary key
//! (never `NOT … ANY`, nor `= ANY` beside other conditions), so that no plan,
//! generic or not, costs more than the holds of the lease once per statement.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::{PgConnection, PgPool, SqlStr};

use super::statements::{all, one};
use tokio::sync::OnceCell;

use crate::store::lease::{LeaseId, LeaseState, LeaseStore, NodeId, RENEW_BATCH, Renewal, Renewed};
use crate::store::{BoxFuture, StoreError};
use crate::task::TaskId;

/// The connections of the lease pool: one for renewals, one for the sweeps.
const LEASE_CONNECTIONS: u32 = 2;

/// The statements of one table's leases, built once.
pub(super) struct LeaseStatements {
    renew: SqlStr,
    hold: SqlStr,
    unhold: SqlStr,
    clear: SqlStr,
    leases: SqlStr,
    claim: SqlStr,
    forget: SqlStr,
    release: SqlStr,
}

/// The tables `migrate` creates, after the tasks table.
pub(super) fn migration(table: &str) -> Vec<SqlStr> {
    all(include_str!("sql/lease_migrate.sql"), table)
}

impl LeaseStatements {
    pub(super) fn new(table: &str) -> Self {
        LeaseStatements {
            renew: one(include_str!("sql/lease_renew.sql"), table),
            hold: one(include_str!("sql/lease_hold.sql"), table),
            unhold: one(include_str!("sql/lease_unhold.sql"), table),
            clear: one(include_str!("sql/lease_clear.sql"), table),
            leases: one(include_str!("sql/lease_list.sql"), table),
            claim: one(include_str!("sql/lease_claim.sql"), table),
            forget: one(include_str!("sql/lease_forget.sql"), table),
            release: one(include_str!("sql/lease_release.sql"), table),
        }
    }
}

/// The leases of one `PostgresStore`: its statements, and a pool of their own
/// opened with the store pool's settings.
#[derive(Clone)]
pub(super) struct PgLeases {
    store_pool: PgPool,
    own: Arc<OnceCell<PgPool>>,
    sql: Arc<LeaseStatements>,
}

impl PgLeases {
    pub(super) fn new(store_pool: PgPool, sql: Arc<LeaseStatements>) -> Self {
        PgLeases {
            store_pool,
            own: Arc::default(),
            sql,
        }
    }

    /// The lease pool, opened (lazily, so without a connection yet) on first use.
    async fn pool(&self) -> &PgPool {
        self.own
            .get_or_init(|| async {
                let options = (*self.store_pool.connect_options()).clone();
                PgPoolOptions::new()
                    .max_connections(LEASE_CONNECTIONS)
                    .min_connections(0)
                    .acquire_timeout(crate::defaults::STORE_TIMEOUT)
                    .connect_lazy_with(options)
            })
            .await
    }

    /// One renewal statement on `conn`, with `hold` and `release` (at most
    /// [`RENEW_BATCH`] ids together).
    async fn renew_on(
        &self,
        conn: &mut PgConnection,
        renewal: &Renewal<'_>,
        hold: &[TaskId],
        release: &[TaskId],
    ) -> Result<Renewed, StoreError> {
        let bound_ms = i64::try_from(renewal.bound.as_millis()).unwrap_or(i64::MAX);
        type Row = (bool, bool, Option<Vec<Vec<u8>>>, i64, i64);
        let (renewed, known, claimed, _, _): Row = sqlx::query_as(self.sql.renew.clone())
            .bind(renewal.lease.node.as_str())
            .bind(column(renewal.lease.incarnation))
            .bind(bound_ms)
            .bind(renewal.first)
            .bind(keys(hold))
            .bind(keys(release))
            .fetch_one(conn)
            .await
            .map_err(StoreError::backend)?;
        Ok(match (renewed, known) {
            (true, true) => Renewed::Renewed,
            (true, false) => Renewed::New,
            (false, _) => Renewed::Lost {
                tasks: claimed.map(task_ids),
            },
        })
    }

    /// Runs `statement` (a batch of hold changes of `lease`) with each batch of
    /// `ids` on `conn`.
    async fn batches(
        &self,
        conn: &mut PgConnection,
        statement: &SqlStr,
        lease: &LeaseId,
        ids: &[TaskId],
    ) -> Result<(), StoreError> {
        for batch in ids.chunks(RENEW_BATCH) {
            sqlx::query(statement.clone())
                .bind(lease.node.as_str())
                .bind(column(lease.incarnation))
                .bind(keys(batch))
                .execute(&mut *conn)
                .await
                .map_err(StoreError::backend)?;
        }
        Ok(())
    }
}

/// The `statement_timeout` of a renewal's statements for a lease of length
/// `bound`: the time the layer gives the renewal.
fn statement_timeout(bound: Duration) -> String {
    format!("{}ms", (bound / 4).as_millis().max(1))
}

impl fmt::Debug for PgLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgLeases").finish_non_exhaustive()
    }
}

fn keys(ids: &[TaskId]) -> Vec<Vec<u8>> {
    ids.iter().map(|id| id.as_bytes().to_vec()).collect()
}

fn task_ids(rows: Vec<Vec<u8>>) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = rows
        .into_iter()
        .filter_map(|bytes| <[u8; TaskId::BYTES]>::try_from(bytes).ok())
        .map(TaskId::from_bytes)
        .collect();
    ids.sort_unstable();
    ids
}

/// An incarnation as the signed column keeps it (the layer's are below 2^63).
fn column(incarnation: u64) -> i64 {
    incarnation as i64
}

impl LeaseStore for PgLeases {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
        Box::pin(async move {
            // One transaction: its statements end within a quarter of the lease
            // (so an abandoned one never holds the lease row while the next
            // renewal waits), and the lease row, renewed first, stays locked until
            // the commit, so a claim waits for the whole change and finds it whole.
            let mut tx = self
                .pool()
                .await
                .begin()
                .await
                .map_err(StoreError::backend)?;
            sqlx::query("SELECT set_config('statement_timeout', $1, true)")
                .bind(statement_timeout(renewal.bound))
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
            let ids = renewal.hold.len() + renewal.release.len();
            let whole = !renewal.replace && ids <= RENEW_BATCH;
            let renewed = match whole {
                true => {
                    let (hold, release) = (renewal.hold, renewal.release);
                    self.renew_on(&mut tx, &renewal, hold, release).await?
                }
                false => self.renew_on(&mut tx, &renewal, &[], &[]).await?,
            };
            if let Renewed::Lost { .. } = renewed {
                return Ok(renewed);
            }
            if !whole {
                let lease = renewal.lease;
                if renewal.replace {
                    sqlx::query(self.sql.clear.clone())
                        .bind(lease.node.as_str())
                        .bind(column(lease.incarnation))
                        .execute(&mut *tx)
                        .await
                        .map_err(StoreError::backend)?;
                }
                self.batches(&mut tx, &self.sql.unhold, lease, renewal.release)
                    .await?;
                self.batches(&mut tx, &self.sql.hold, lease, renewal.hold)
                    .await?;
            }
            tx.commit().await.map_err(StoreError::backend)?;
            Ok(renewed)
        })
    }

    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
        Box::pin(async move {
            let rows: Vec<(String, i64, i64, i64, bool)> = sqlx::query_as(self.sql.leases.clone())
                .fetch_all(self.pool().await)
                .await
                .map_err(StoreError::backend)?;
            Ok(rows
                .into_iter()
                .filter_map(|(node, incarnation, renewals, bound_ms, claimed)| {
                    Some(LeaseState {
                        lease: LeaseId {
                            node: NodeId::new(node)?,
                            incarnation: incarnation as u64,
                        },
                        renewals: renewals as u64,
                        bound: std::time::Duration::from_millis(bound_ms.max(0) as u64),
                        claimed,
                    })
                })
                .collect())
        })
    }

    fn claim<'a>(
        &'a self,
        lease: &'a LeaseId,
        renewals: u64,
    ) -> BoxFuture<'a, Result<Option<Vec<TaskId>>, StoreError>> {
        Box::pin(async move {
            let (claimed, tasks): (bool, Vec<Vec<u8>>) = sqlx::query_as(self.sql.claim.clone())
                .bind(lease.node.as_str())
                .bind(column(lease.incarnation))
                .bind(renewals as i64)
                .fetch_one(self.pool().await)
                .await
                .map_err(StoreError::backend)?;
            Ok(claimed.then(|| task_ids(tasks)))
        })
    }

    fn forget<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        self.remove(&self.sql.forget, lease)
    }

    fn release<'a>(&'a self, lease: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        self.remove(&self.sql.release, lease)
    }
}

impl PgLeases {
    /// Runs `statement`, which removes `lease` (if claimed, or if not) and its holds.
    fn remove<'a>(
        &'a self,
        statement: &'a SqlStr,
        lease: &'a LeaseId,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(statement.clone())
                .bind(lease.node.as_str())
                .bind(column(lease.incarnation))
                .execute(self.pool().await)
                .await
                .map_err(StoreError::backend)?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{LeaseStatements, migration};

    /// The lease path judges liveness by watching counts, never by a clock: a step
    /// of the database server's clock, however large, must have nothing to act on.
    #[test]
    fn no_lease_statement_reads_a_clock() {
        let sql = LeaseStatements::new("mcp_tasks");
        let mut texts: Vec<String> = [
            &sql.renew,
            &sql.hold,
            &sql.unhold,
            &sql.clear,
            &sql.leases,
            &sql.claim,
            &sql.forget,
            &sql.release,
        ]
        .iter()
        .map(|statement| statement.as_str().to_ascii_lowercase())
        .collect();
        texts.extend(
            migration("mcp_tasks")
                .iter()
                .map(|ddl| ddl.as_str().to_ascii_lowercase()),
        );
        for text in &texts {
            for clock in [
                "clock_timestamp",
                "now()",
                "current_timestamp",
                "statement_timestamp",
                "interval",
            ] {
                assert!(
                    !text.contains(clock),
                    "a lease statement reads the clock ({clock}): {text}"
                );
            }
        }
    }
}
