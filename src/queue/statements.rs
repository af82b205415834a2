//! The SQL of one job table, built once per queue. A leaf: it uses nothing else of
//! the queue.

use std::sync::Arc;

use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

/// The statements of the table `<prefix>_jobs`.
pub(super) struct Statements {
    pub(super) lock: SqlStr,
    pub(super) create: Vec<SqlStr>,
    pub(super) enqueue: SqlStr,
    pub(super) claim: SqlStr,
    pub(super) renew: SqlStr,
    pub(super) finish: SqlStr,
    pub(super) park: SqlStr,
    pub(super) retry: SqlStr,
    pub(super) hand_back: SqlStr,
    pub(super) bury: SqlStr,
    pub(super) due_checks: SqlStr,
    pub(super) wake: SqlStr,
    pub(super) forget_parked: SqlStr,
    pub(super) select: SqlStr,
}

/// Every statement below, `{table}` standing for the quoted table and `{channel}`
/// for the `NOTIFY` channel (the table's name). Times are the database server's
/// `clock_timestamp()`, so workers whose clocks disagree agree on every lock.
const CREATE: &str = r#"
CREATE TABLE IF NOT EXISTS "{table}" (
    task_id bytea PRIMARY KEY,
    tool text NOT NULL,
    input json NOT NULL,
    state text NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    run_after timestamptz NOT NULL DEFAULT clock_timestamp(),
    locked_by text,
    lock_token bigint,
    lock_until timestamptz,
    interrupted boolean NOT NULL DEFAULT false,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp())

CREATE INDEX IF NOT EXISTS "{table}_due_idx" ON "{table}" (state, run_after)
    WHERE state IN ('ready', 'waiting')

CREATE INDEX IF NOT EXISTS "{table}_lock_idx" ON "{table}" (lock_until)
    WHERE state = 'running'
"#;

const ENQUEUE: &str = r#"
WITH added AS (
    INSERT INTO "{table}" (task_id, tool, input, state, max_attempts)
    VALUES ($1, $2, $3::text::json, 'ready', $4)
    ON CONFLICT (task_id) DO NOTHING
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM added),
    (SELECT pg_notify('{channel}', '') FROM added)
"#;

/// Takes the job due first: a ready one whose time has come, or a running one
/// whose worker stopped renewing its lock (killed, paused, cut off). A run that
/// took over from a stopped worker counts as an attempt, and says so (`resumed`).
const CLAIM: &str = r#"
WITH next AS (
    SELECT task_id, state AS was, interrupted FROM "{table}"
    WHERE (state = 'ready' AND run_after <= clock_timestamp())
       OR (state = 'running' AND lock_until <= clock_timestamp())
    ORDER BY run_after
    LIMIT 1
    FOR UPDATE SKIP LOCKED)
UPDATE "{table}" AS job SET
    state = 'running',
    attempts = job.attempts + 1,
    locked_by = $1,
    lock_token = $2,
    lock_until = clock_timestamp() + $3 * interval '1 millisecond',
    interrupted = false,
    last_error = CASE WHEN next.was = 'running'
        THEN 'the worker running it stopped' ELSE job.last_error END,
    updated_at = clock_timestamp()
FROM next
WHERE job.task_id = next.task_id
RETURNING job.task_id, job.tool, job.input::text, job.attempts, job.max_attempts,
    next.was = 'running' OR next.interrupted, job.last_error
"#;

const RENEW: &str = r#"
UPDATE "{table}" SET lock_until = clock_timestamp() + $3 * interval '1 millisecond'
WHERE task_id = $1 AND lock_token = $2 AND state = 'running'
"#;

const FINISH: &str = r#"
DELETE FROM "{table}" WHERE task_id = $1 AND lock_token = $2
"#;

/// A run that asked a question and parks: no attempt failed, and the job is
/// checked for an answer from now on.
const PARK: &str = r#"
UPDATE "{table}" SET state = 'waiting', attempts = 0, last_error = NULL,
    run_after = clock_timestamp(), locked_by = NULL, lock_token = NULL, lock_until = NULL,
    updated_at = clock_timestamp()
WHERE task_id = $1 AND lock_token = $2
"#;

const RETRY: &str = r#"
UPDATE "{table}" SET state = 'ready', last_error = $4,
    run_after = clock_timestamp() + $3 * interval '1 millisecond',
    locked_by = NULL, lock_token = NULL, lock_until = NULL, updated_at = clock_timestamp()
WHERE task_id = $1 AND lock_token = $2
"#;

/// A worker that stops hands its unfinished run back at once: due now, the
/// attempt not counted, the next run told it resumes.
const HAND_BACK: &str = r#"
WITH back AS (
    UPDATE "{table}" SET state = 'ready', attempts = greatest(attempts - 1, 0),
        interrupted = true, run_after = clock_timestamp(),
        locked_by = NULL, lock_token = NULL, lock_until = NULL, updated_at = clock_timestamp()
    WHERE task_id = $1 AND lock_token = $2
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM back), (SELECT pg_notify('{channel}', '') FROM back)
"#;

/// A job that gave up: kept, as a dead letter, for an operator to read.
const BURY: &str = r#"
UPDATE "{table}" SET state = 'dead', last_error = $3,
    locked_by = NULL, lock_token = NULL, lock_until = NULL, updated_at = clock_timestamp()
WHERE task_id = $1 AND lock_token = $2
"#;

/// The parked jobs due a check for an answer, each pushed back by the poll interval
/// so that the workers share the checks instead of repeating them.
const DUE_CHECKS: &str = r#"
UPDATE "{table}" SET run_after = clock_timestamp() + $1 * interval '1 millisecond'
WHERE task_id IN (
    SELECT task_id FROM "{table}"
    WHERE state = 'waiting' AND run_after <= clock_timestamp()
    ORDER BY run_after
    LIMIT $2
    FOR UPDATE SKIP LOCKED)
RETURNING task_id
"#;

const WAKE: &str = r#"
WITH woken AS (
    UPDATE "{table}" SET state = 'ready', run_after = clock_timestamp(),
        updated_at = clock_timestamp()
    WHERE task_id = $1 AND state = 'waiting'
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM woken), (SELECT pg_notify('{channel}', '') FROM woken)
"#;

const FORGET_PARKED: &str = r#"
DELETE FROM "{table}" WHERE task_id = $1 AND state = 'waiting'
"#;

const SELECT: &str = r#"
SELECT state, attempts, max_attempts, locked_by, last_error FROM "{table}" WHERE task_id = $1
"#;

impl Statements {
    /// The statements of `table`, a name that passed the store's table rules (a plain
    /// identifier, always quoted, so it cannot change a statement's meaning).
    pub(super) fn new(table: &str) -> Self {
        let one = |text: &str| sql(text, table);
        Statements {
            lock: one("SELECT pg_advisory_xact_lock($1, $2)"),
            create: CREATE
                .split("\n\n")
                .filter(|s| !s.trim().is_empty())
                .map(one)
                .collect(),
            enqueue: one(ENQUEUE),
            claim: one(CLAIM),
            renew: one(RENEW),
            finish: one(FINISH),
            park: one(PARK),
            retry: one(RETRY),
            hand_back: one(HAND_BACK),
            bury: one(BURY),
            due_checks: one(DUE_CHECKS),
            wake: one(WAKE),
            forget_parked: one(FORGET_PARKED),
            select: one(SELECT),
        }
    }
}

fn sql(text: &str, table: &str) -> SqlStr {
    let text = text.replace("{table}", table).replace("{channel}", table);
    AssertSqlSafe(Arc::<str>::from(text.trim())).into_sql_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_skip_locked_rows_and_decide_time_in_the_database() {
        let sql = Statements::new("mcp_tasks_jobs");
        let claim = sql.claim.as_str();
        assert!(claim.contains("FOR UPDATE SKIP LOCKED"), "{claim}");
        assert!(claim.contains("lock_until <= clock_timestamp()"), "{claim}");
        assert!(sql.due_checks.as_str().contains("SKIP LOCKED"));
        assert_eq!(sql.create.len(), 3);
        assert!(
            sql.enqueue
                .as_str()
                .contains("pg_notify('mcp_tasks_jobs', '')")
        );
        // Every write of a run is fenced by the claim's token.
        for fenced in [
            &sql.renew,
            &sql.finish,
            &sql.park,
            &sql.retry,
            &sql.bury,
            &sql.hand_back,
        ] {
            assert!(
                fenced.as_str().contains("lock_token = $2"),
                "{}",
                fenced.as_str()
            );
        }
    }
}
