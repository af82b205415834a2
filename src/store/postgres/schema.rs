//! `PostgresStore::migrate`: the tables, indexes and trigger of one store, and
//! the in-place upgrade of a table of an earlier layout.

use sqlx::SqlStr;

use super::PostgresStore;
use super::leases;
use super::statements::{COUNT_SHARDS, ROWS_SCOPE};
use crate::error::StoreError;

impl PostgresStore {
    /// Creates the table and its indexes unless they exist. Safe to run on every node
    /// at every start, concurrently too (an advisory lock orders the runs).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// store.migrate().await?; // once per start, before the layer serves
    /// store.migrate().await?; // and again: nothing to do
    /// # Ok(())
    /// # }
    /// ```
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        let mut tx = inner.pool.begin().await.map_err(StoreError::backend)?;
        // Upgrading a large table may take longer than a statement timeout allows.
        sqlx::query("SET LOCAL statement_timeout = 0")
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        // `CREATE … IF NOT EXISTS` on a schema that is there already makes a NOTICE
        // per statement, which the driver logs: a start that changes nothing says
        // nothing.
        sqlx::query("SET LOCAL client_min_messages = warning")
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        sqlx::query(inner.sql.lock.clone())
            .bind(inner.lock_key)
            .bind(i32::MIN)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        let statements = &inner.sql;
        let run = |statement: &SqlStr| sqlx::query(statement.clone());
        for statement in statements.create.iter().chain(&inner.log.migrate) {
            run(statement)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        // A table of an earlier layout is upgraded in place.
        let table = format!("\"{}\"", inner.table);
        let columns: Vec<(String, String)> = sqlx::query_as(statements.columns.clone())
            .bind(&table)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        let type_of = |name: &str| {
            columns
                .iter()
                .find(|(column, _)| column == name)
                .map(|(_, kind)| kind.as_str())
        };
        let mut upgrades = Vec::new();
        if type_of("owner") == Some("text") {
            upgrades.push(&statements.upgrade_owner);
        }
        if type_of("record") == Some("jsonb") {
            upgrades.push(&statements.upgrade_record);
        }
        if type_of("shard").is_none() {
            upgrades.extend(&statements.upgrade_shards);
        }
        let counts = format!("\"{}_counts\"", inner.table);
        let counted: bool = sqlx::query_scalar(statements.exists.clone())
            .bind(&counts)
            .fetch_one(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        if !counted {
            upgrades.push(&statements.create_counts);
            upgrades.extend(&statements.fill_counts);
        } else {
            // A counts table of an earlier layout counts no bytes yet.
            let bytes: Vec<(String, String)> = sqlx::query_as(statements.columns.clone())
                .bind(&counts)
                .fetch_all(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
            if !bytes.iter().any(|(column, _)| column == "bytes") {
                upgrades.extend(&statements.upgrade_bytes);
            }
        }
        if type_of("created_at").is_none() {
            upgrades.extend(&statements.upgrade_created);
        }
        // After the upgrades: a table of an earlier layout has its column by now.
        upgrades.push(&statements.list_index);
        for statement in upgrades {
            run(statement)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        for statement in leases::migration(&inner.table) {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        sqlx::query(statements.ensure_scope.clone())
            .bind(ROWS_SCOPE)
            .bind(COUNT_SHARDS)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        tx.commit().await.map_err(StoreError::backend)
    }
}
