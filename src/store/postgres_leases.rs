//! Worker leases next to a `PostgresStore`'s table `T`: `T_nodes` keeps each node's
//! deadline, `T_holds` the tasks each node holds. Deadlines are set and compared by
//! the database's clock (`now()`), never a node's.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use sqlx::{AssertSqlSafe, PgPool, SqlSafeStr, SqlStr};

use super::lease::{LapsedNode, LeaseStore, NodeId, Renewal};
use super::{BoxFuture, StoreError};
use crate::task::TaskId;

/// An audited statement (every table name in one passed `validate_table`), shared
/// so that cloning it per query costs a reference count.
pub(super) fn sql(text: String) -> SqlStr {
    AssertSqlSafe(Arc::<str>::from(text)).into_sql_str()
}

/// The statements of one table's leases, built once.
pub(super) struct LeaseStatements {
    renew: SqlStr,
    lapsed: SqlStr,
    forget: SqlStr,
}

/// The tables `migrate` creates, after the tasks table.
pub(super) fn migration(table: &str) -> [String; 2] {
    [
        format!(
            "CREATE TABLE IF NOT EXISTS \"{table}_nodes\" (\
                 node text PRIMARY KEY, \
                 deadline timestamptz NOT NULL)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS \"{table}_holds\" (\
                 node text NOT NULL, \
                 task bytea NOT NULL, \
                 PRIMARY KEY (node, task))"
        ),
    ]
}

impl LeaseStatements {
    pub(super) fn new(table: &str) -> Self {
        let nodes = format!("\"{table}_nodes\"");
        let holds = format!("\"{table}_holds\"");
        LeaseStatements {
            // One statement, one round trip. No row is both deleted and inserted
            // (held and released ids are disjoint; on a replace, only rows outside
            // the new set are deleted), so the sub-statements never touch one row.
            renew: sql(format!(
                "WITH known AS (SELECT 1 FROM {nodes} WHERE node = $1), \
                 renewed AS (\
                     INSERT INTO {nodes} (node, deadline) \
                     VALUES ($1, now() + $2 * interval '1 millisecond') \
                     ON CONFLICT (node) DO UPDATE SET deadline = EXCLUDED.deadline \
                     RETURNING 1), \
                 released AS (\
                     DELETE FROM {holds} WHERE node = $1 \
                     AND (task = ANY($4) OR ($5 AND NOT task = ANY($3))) \
                     RETURNING 1), \
                 held AS (\
                     INSERT INTO {holds} (node, task) SELECT $1, unnest($3::bytea[]) \
                     ON CONFLICT DO NOTHING RETURNING 1) \
                 SELECT EXISTS (SELECT 1 FROM known), \
                     (SELECT count(*) FROM renewed), (SELECT count(*) FROM released), \
                     (SELECT count(*) FROM held)"
            )),
            lapsed: sql(format!(
                "SELECT n.node, h.task FROM {nodes} n LEFT JOIN {holds} h ON h.node = n.node \
                 WHERE n.deadline <= now() ORDER BY n.node"
            )),
            forget: sql(format!(
                "WITH gone AS (\
                     DELETE FROM {nodes} WHERE node = $1 AND deadline <= now() RETURNING node) \
                 DELETE FROM {holds} WHERE node IN (SELECT node FROM gone)"
            )),
        }
    }
}

/// The leases of one `PostgresStore`, sharing its pool.
#[derive(Clone)]
pub(super) struct PgLeases {
    pub(super) pool: PgPool,
    pub(super) sql: Arc<LeaseStatements>,
}

impl fmt::Debug for PgLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgLeases").finish_non_exhaustive()
    }
}

fn keys(ids: &[TaskId]) -> Vec<Vec<u8>> {
    ids.iter().map(|id| id.as_bytes().to_vec()).collect()
}

impl LeaseStore for PgLeases {
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let bound_ms = i64::try_from(renewal.bound.as_millis()).unwrap_or(i64::MAX);
            let (known, _, _, _): (bool, i64, i64, i64) = sqlx::query_as(self.sql.renew.clone())
                .bind(renewal.node.as_str())
                .bind(bound_ms as f64)
                .bind(keys(renewal.hold))
                .bind(keys(renewal.release))
                .bind(renewal.replace)
                .fetch_one(&self.pool)
                .await
                .map_err(StoreError::backend)?;
            Ok(known)
        })
    }

    fn lapsed(&self) -> BoxFuture<'_, Result<Vec<LapsedNode>, StoreError>> {
        Box::pin(async move {
            let rows: Vec<(String, Option<Vec<u8>>)> = sqlx::query_as(self.sql.lapsed.clone())
                .fetch_all(&self.pool)
                .await
                .map_err(StoreError::backend)?;
            let mut nodes: BTreeMap<String, Vec<TaskId>> = BTreeMap::new();
            for (node, task) in rows {
                let tasks = nodes.entry(node).or_default();
                if let Some(id) = task
                    .and_then(|bytes| <[u8; TaskId::BYTES]>::try_from(bytes).ok())
                    .map(TaskId::from_bytes)
                {
                    tasks.push(id);
                }
            }
            Ok(nodes
                .into_iter()
                .filter_map(|(node, tasks)| {
                    NodeId::new(node).map(|node| LapsedNode { node, tasks })
                })
                .collect())
        })
    }

    fn forget<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(self.sql.forget.clone())
                .bind(node.as_str())
                .execute(&self.pool)
                .await
                .map_err(StoreError::backend)?;
            Ok(())
        })
    }
}
