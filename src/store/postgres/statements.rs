//! The SQL of one table, built once per store: the task statements, the change
//! log's, and the columns a record is written as. A leaf: it uses nothing else of
//! the store.

use std::time::Duration;

use std::sync::Arc;

use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

use crate::error::StoreError;
use crate::task::TaskRecord;

/// Counter rows per cap: creates on different shards never wait for each other.
pub(super) const COUNT_SHARDS: i16 = 32;
/// The counter scope of the row cap; owners' scopes start with 1 (unowned) or 2.
pub(super) const ROWS_SCOPE: &[u8] = &[0];
/// How long the change log keeps an entry; a listener away longer than this
/// reports [`FeedEvent::Missed`](super::FeedEvent::Missed).
pub(super) const FEED_RETENTION: Duration = Duration::from_secs(600);

/// The SQL of the change log, built once.
pub(super) struct LogStatements {
    pub(super) head: SqlStr,
    pub(super) since: SqlStr,
    pub(super) oldest: SqlStr,
    pub(super) prune: SqlStr,
    pub(super) migrate: Vec<SqlStr>,
}

/// The SQL for one table, built once.
pub(super) struct Statements {
    pub(super) insert: SqlStr,
    pub(super) lock: SqlStr,
    pub(super) ensure_scope: SqlStr,
    pub(super) lock_scope: SqlStr,
    pub(super) lock_counts: SqlStr,
    pub(super) uncount: SqlStr,
    pub(super) drop_empty: SqlStr,
    pub(super) prune_all: SqlStr,
    pub(super) prune_owner: SqlStr,
    pub(super) prune_unowned: SqlStr,
    pub(super) visible: SqlStr,
    pub(super) select_many: SqlStr,
    pub(super) select_within: SqlStr,
    pub(super) select: SqlStr,
    pub(super) select_owned: SqlStr,
    /// A page of `list`, of one owner's tasks or of the anonymous ones.
    pub(super) list_owned: SqlStr,
    pub(super) list_unowned: SqlStr,
    pub(super) write: SqlStr,
    pub(super) columns: SqlStr,
    pub(super) exists: SqlStr,
    pub(super) create: Vec<SqlStr>,
    pub(super) upgrade_owner: SqlStr,
    pub(super) upgrade_record: SqlStr,
    pub(super) upgrade_shards: Vec<SqlStr>,
    pub(super) create_counts: SqlStr,
    pub(super) fill_counts: Vec<SqlStr>,
    pub(super) upgrade_created: Vec<SqlStr>,
    pub(super) list_index: SqlStr,
    pub(super) owner_bytes: SqlStr,
    pub(super) upgrade_bytes: Vec<SqlStr>,
}

impl Statements {
    pub(super) fn new(table: &str) -> Self {
        let prune = |filter: &str, order: &str, skip: &str| {
            sql(
                include_str!("sql/prune.sql")
                    .replace("{filter}", filter)
                    .replace("{order}", order)
                    .replace("{skip}", skip),
                table,
            )
        };
        let list = |owner: &str| {
            sql(
                include_str!("sql/list.sql").replace("{owner}", owner),
                table,
            )
        };
        Statements {
            insert: one(include_str!("sql/insert.sql"), table),
            lock: one(include_str!("sql/lock.sql"), table),
            ensure_scope: one(include_str!("sql/ensure_scope.sql"), table),
            lock_scope: one(include_str!("sql/lock_scope.sql"), table),
            lock_counts: one(include_str!("sql/lock_counts.sql"), table),
            uncount: one(include_str!("sql/uncount.sql"), table),
            drop_empty: one(include_str!("sql/drop_empty.sql"), table),
            prune_all: prune("true", "", "SKIP LOCKED"),
            prune_owner: prune("owner = $4", "ORDER BY id", ""),
            prune_unowned: prune("owner IS NULL", "ORDER BY id", ""),
            visible: one(include_str!("sql/visible.sql"), table),
            select_many: one(include_str!("sql/select_many.sql"), table),
            select_within: one(include_str!("sql/select_within.sql"), table),
            select: one(include_str!("sql/select.sql"), table),
            select_owned: one(include_str!("sql/select_owned.sql"), table),
            list_owned: list("owner = $5"),
            list_unowned: list("owner IS NULL"),
            write: one(include_str!("sql/write.sql"), table),
            columns: one(include_str!("sql/columns.sql"), table),
            exists: one(include_str!("sql/exists.sql"), table),
            create: all(include_str!("sql/create.sql"), table),
            upgrade_owner: one(include_str!("sql/upgrade_owner.sql"), table),
            upgrade_record: one(include_str!("sql/upgrade_record.sql"), table),
            upgrade_shards: all(
                &include_str!("sql/upgrade_shards.sql")
                    .replace("{shards}", &COUNT_SHARDS.to_string()),
                table,
            ),
            create_counts: one(include_str!("sql/create_counts.sql"), table),
            fill_counts: all(include_str!("sql/fill_counts.sql"), table),
            upgrade_created: all(include_str!("sql/upgrade_created.sql"), table),
            list_index: one(include_str!("sql/list_index.sql"), table),
            owner_bytes: one(include_str!("sql/owner_bytes.sql"), table),
            upgrade_bytes: all(include_str!("sql/upgrade_bytes.sql"), table),
        }
    }
}

impl LogStatements {
    pub(super) fn new(table: &str) -> Self {
        LogStatements {
            head: one(include_str!("sql/feed_head.sql"), table),
            since: one(include_str!("sql/feed_since.sql"), table),
            oldest: one(include_str!("sql/feed_oldest.sql"), table),
            prune: one(include_str!("sql/feed_prune.sql"), table),
            migrate: all(include_str!("sql/feed_migrate.sql"), table),
        }
    }
}

/// An audited statement, shared so that cloning it per query costs a reference
/// count: `text` with every `{table}` replaced by `table`, which passed
/// `validate_table` (or is the default), a plain identifier the files always
/// quote, so it cannot change the statement's meaning.
pub(super) fn sql(text: String, table: &str) -> SqlStr {
    AssertSqlSafe(Arc::<str>::from(text.replace("{table}", table).trim())).into_sql_str()
}

/// The one statement of a file of `sql/`.
pub(super) fn one(text: &str, table: &str) -> SqlStr {
    sql(text.to_owned(), table)
}

/// The statements of a file of `sql/`, in order: each starts after a blank line.
pub(super) fn all(text: &str, table: &str) -> Vec<SqlStr> {
    text.split("\n\n")
        .filter(|statement| !statement.trim().is_empty())
        .map(|statement| one(statement, table))
        .collect()
}

/// The indexed copies of a record's fields, and the record itself as JSON text.
pub(super) struct Columns {
    /// The owner's UTF-8 bytes: `bytea` keeps any principal, U+0000 included.
    pub(super) owner: Option<Vec<u8>>,
    pub(super) revision: i64,
    pub(super) status: &'static str,
    /// The TTL: the row's `expires_at` is the store's `now` at creation plus this.
    pub(super) ttl: Option<i64>,
    /// Whether the record is retired (terminal without a TTL): `retired_at` is
    /// the store's `now` when it became so.
    pub(super) retired: bool,
    /// `json`, not `jsonb`: kept as written, so `\u0000` and every number survive.
    pub(super) record: String,
    /// The record's `created_at`, for the index `list` reads.
    pub(super) created_at: i64,
}

impl Columns {
    pub(super) fn of(record: &TaskRecord) -> Result<Self, StoreError> {
        Ok(Columns {
            owner: record
                .owner
                .as_ref()
                .map(|p| p.as_str().as_bytes().to_vec()),
            revision: i64::try_from(record.revision).map_err(StoreError::backend)?,
            status: record.status.as_str(),
            ttl: record.ttl_ms.map(millis),
            retired: record.retired_at().is_some(),
            record: serde_json::to_string(record).map_err(StoreError::backend)?,
            created_at: millis(record.created_at.as_millis()),
        })
    }
}

pub(super) fn millis(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{Principal, TaskId, Timestamp, Transition};

    #[test]
    fn columns_mirror_the_record() {
        let mut record = TaskRecord::new(
            TaskId::random(),
            Some(Principal::from("a\u{0}b")),
            Timestamp::from_millis(1_000),
        );
        record.ttl_ms = Some(500);
        let columns = Columns::of(&record).unwrap();
        assert_eq!(columns.ttl, Some(500));
        assert!(!columns.retired);
        assert_eq!(columns.status, "working");
        assert_eq!(columns.owner.as_deref(), Some(&b"a\0b"[..]));

        record.ttl_ms = None;
        record
            .apply(&Transition::Cancel, Timestamp::from_millis(2_000))
            .unwrap();
        let columns = Columns::of(&record).unwrap();
        assert_eq!(columns.ttl, None);
        assert!(columns.retired);
        assert_eq!(columns.revision, 1);
        let back: TaskRecord = serde_json::from_str(&columns.record).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn reads_and_writes_decide_expiry_in_sql_on_one_clock() {
        let sql = Statements::new("mcp_tasks");
        let owned = sql.select_owned.as_str();
        assert!(owned.contains("owner IS NOT DISTINCT FROM $2"), "{owned}");
        let reads_and_writes = [
            &sql.select,
            &sql.select_owned,
            &sql.list_owned,
            &sql.list_unowned,
            &sql.visible,
            &sql.select_many,
            &sql.select_within,
            &sql.write,
        ];
        for statement in reads_and_writes.iter().chain([&&sql.insert]) {
            let text = statement.as_str();
            assert!(text.contains("clock_timestamp()"), "{text}");
        }
        for statement in reads_and_writes {
            let text = statement.as_str();
            assert!(
                text.contains("expires_at > (SELECT now FROM clock)"),
                "{text}"
            );
        }
        assert!(sql.prune_all.as_str().contains("retired_at <="));
        // A page is an index range of one owner's rows, in the index's order.
        for list in [&sql.list_owned, &sql.list_unowned] {
            let text = list.as_str();
            assert!(text.contains("(created_at, id) < ($2::bigint, $3::bytea)"));
            assert!(text.contains("ORDER BY owner, created_at DESC, id DESC LIMIT $4"));
            let code: String = text.lines().filter(|l| !l.starts_with("--")).collect();
            assert!(!code.contains("DISTINCT"), "{code}");
        }
        assert!(sql.list_owned.as_str().contains("WHERE owner = $5"));
        assert!(sql.list_unowned.as_str().contains("WHERE owner IS NULL"));
        assert!(
            sql.list_index
                .as_str()
                .contains("(owner, created_at DESC, id DESC)")
        );
        // No statement hands PostgreSQL a `jsonb` it would refuse `\u0000` in.
        assert!(!sql.insert.as_str().contains("jsonb") && !sql.write.as_str().contains("jsonb"));
    }

    #[test]
    fn the_change_log_is_named_after_the_table_and_fed_by_a_trigger() {
        let log = LogStatements::new("mcp_tasks");
        assert!(
            log.since
                .as_str()
                .contains("\"mcp_tasks_feed\" WHERE seq > $1 ORDER BY seq")
        );
        assert!(log.prune.as_str().contains("clock_timestamp()"));
        let migrate: Vec<&str> = log.migrate.iter().map(|s| s.as_str()).collect();
        assert!(
            migrate
                .iter()
                .any(|s| s.contains("AFTER INSERT OR UPDATE ON \"mcp_tasks\""))
        );
        // The longest table name still leaves every derived name within 63 bytes.
        let longest = "t".repeat(super::super::MAX_TABLE_LEN);
        for suffix in [
            "_list_idx",
            "_feed_trg",
            "_feed_fn",
            "_feed_at_idx",
            "_feed_seq_seq",
            "_feed_pkey",
        ] {
            assert!(longest.len() + suffix.len() <= 63, "{suffix}");
        }
    }
}
