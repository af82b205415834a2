// The module's page, the guide to work that outlives its node, lives in its own file.
#![doc = include_str!("docs.md")]

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::postgres::PgPool;

use crate::PostgresStore;
use crate::context::TaskSpec;
use crate::error::{ConfigError, StoreError};
use crate::task::{ErrorObject, TaskId};
use crate::wire::RpcError;

mod job;
mod statements;
mod worker;

pub use job::{Job, JobContext, JobError, JobState};
pub use worker::Worker;

use statements::Statements;

/// How many times a job runs before it gives up, unless
/// [`JobQueue::with_max_attempts`] says otherwise: a run that fails with
/// [`JobError::retry`] or is cut short by its worker's end counts; a question answered
/// starts the count again.
pub const MAX_ATTEMPTS: u32 = 5;

/// How long a worker's lock on a running job lasts without renewal (30 s; renewed
/// every third of it). A worker that stops (`kill -9`, a lost host) leaves its job
/// to another within this time.
pub const LOCK_LEASE: Duration = Duration::from_secs(30);

/// How often a worker looks for due jobs it was not told about, and checks parked
/// jobs for their answers (1 s).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How many jobs one worker runs at once (8).
pub const CONCURRENCY: usize = 8;

/// The first pause before a failed job runs again (1 s), doubled after each failure
/// up to [`RETRY_LAST`].
pub const RETRY_FIRST: Duration = Duration::from_secs(1);

/// The longest pause before a failed job runs again (5 minutes).
pub const RETRY_LAST: Duration = Duration::from_secs(300);

/// How long a stopping worker lets its running jobs finish before it hands them back
/// to the queue (10 s).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A durable queue of the jobs that do tasks' work: the table `<prefix>_jobs` in
/// PostgreSQL. Cheap to clone. The [module](self) is the guide.
///
/// A tool handler turns its call into a task whose work is a job with
/// [`task`](Self::task); a [`Worker`] in any process runs it.
///
/// ```no_run
/// use mcp_tasks::queue::JobQueue;
/// use mcp_tasks::PostgresStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://app@db.internal/app").await?;
/// store.migrate().await?;
/// let queue = JobQueue::on(&store); // the table mcp_tasks_jobs, the store's pool
/// queue.migrate().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct JobQueue {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    table: String,
    lock_key: i32,
    max_attempts: u32,
    sql: Statements,
}

impl JobQueue {
    /// A queue on `pool` in the table `<prefix>_jobs`; the prefix is a plain
    /// identifier (an ASCII letter or `_`, then letters, digits or `_`, at most 48
    /// characters).
    ///
    /// ```no_run
    /// use mcp_tasks::queue::JobQueue;
    /// use mcp_tasks::sqlx::postgres::PgPoolOptions;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = PgPoolOptions::new().connect("postgres://app@db.internal/app").await?;
    /// let queue = JobQueue::new(pool, "billing")?;
    /// assert_eq!(queue.table(), "billing_jobs");
    /// assert!(JobQueue::new(queue.pool().clone(), "public.billing").is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(pool: PgPool, prefix: &str) -> Result<Self, ConfigError> {
        crate::store::postgres::validate_table(prefix)?;
        let table = format!("{prefix}_jobs");
        Ok(JobQueue {
            inner: Arc::new(Inner {
                pool,
                lock_key: crate::store::postgres::fnv1a(table.as_bytes()),
                sql: Statements::new(&table),
                table,
                max_attempts: MAX_ATTEMPTS,
            }),
        })
    }

    /// The queue beside `store`: its pool, and the table `<store table>_jobs`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcp_tasks::PostgresStore::connect("postgres://app@db.internal/app").await?;
    /// let queue = mcp_tasks::queue::JobQueue::on(&store.with_table("billing")?);
    /// assert_eq!(queue.table(), "billing_jobs");
    /// # Ok(())
    /// # }
    /// ```
    pub fn on(store: &PostgresStore) -> Self {
        Self::new(store.pool().clone(), store.table())
            .expect("a store's table name is a valid prefix")
    }

    /// The same queue, giving jobs queued from now on `attempts` runs before they
    /// give up (default [`MAX_ATTEMPTS`]; at least 1).
    ///
    /// ```no_run
    /// # async fn run(queue: mcp_tasks::queue::JobQueue) {
    /// let patient = queue.with_max_attempts(10);
    /// # drop(patient);
    /// # }
    /// ```
    pub fn with_max_attempts(self, attempts: u32) -> Self {
        let inner = &self.inner;
        JobQueue {
            inner: Arc::new(Inner {
                pool: inner.pool.clone(),
                table: inner.table.clone(),
                lock_key: inner.lock_key,
                max_attempts: attempts.max(1),
                sql: Statements::new(&inner.table),
            }),
        }
    }

    /// The table the jobs live in, `<prefix>_jobs`; also the `NOTIFY` channel on
    /// which workers hear of new jobs.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// The pool the queue runs its statements on.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// Creates the table and its indexes unless they exist. Safe to run on every
    /// node and worker at every start, concurrently too (an advisory lock orders
    /// the runs).
    ///
    /// The table's columns: `task_id bytea` (primary key, the task id's 32 bytes),
    /// `tool text`, `input json`, `state text` (`ready`, `running`, `waiting`,
    /// `dead`), `attempts` and `max_attempts integer`, `run_after timestamptz` (when
    /// a ready job is due, or a waiting one's next check), `locked_by text` (the
    /// worker running it), `lock_token bigint`, `lock_until timestamptz`,
    /// `interrupted boolean`, `last_error text`, `created_at` and `updated_at
    /// timestamptz`. A finished job's row is deleted; a dead one's stays until an
    /// operator deletes it.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        let mut tx = inner.pool.begin().await.map_err(StoreError::backend)?;
        sqlx::query("SET LOCAL client_min_messages = warning")
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        sqlx::query(inner.sql.lock.clone())
            .bind(inner.lock_key)
            .bind(i32::MIN + 1)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::backend)?;
        for statement in &inner.sql.create {
            sqlx::query(statement.clone())
                .execute(&mut *tx)
                .await
                .map_err(StoreError::backend)?;
        }
        tx.commit().await.map_err(StoreError::backend)
    }

    /// A task whose work is a job: give it to [`TaskContext::create`](crate::TaskContext::create)
    /// in a tool handler. Once the layer has stored the task, the job (`tool`,
    /// `input`, the task's id) is queued, before the client gets its task; should
    /// that fail, the task fails with -32603 and `error.data`
    /// `{"reason": "queue_unavailable", "retryable": true}`. The spec starts with
    /// the status message "Queued"; its TTL, poll interval and message can be set
    /// on it as usual (not its start: the job is the work).
    ///
    /// The layer holds no worker lease on such a task: neither a drain nor the
    /// death of the node that took the call fails it. Its job runs on a
    /// [`Worker`], wherever one runs.
    ///
    /// ```no_run
    /// use mcp_tasks::TaskContext;
    /// use mcp_tasks::queue::JobQueue;
    /// use serde_json::Value;
    ///
    /// fn handler(queue: &JobQueue, parts: &http::request::Parts, arguments: Value) -> bool {
    ///     let ctx = TaskContext::from_parts(parts);
    ///     ctx.is_some_and(|ctx| ctx.create(queue.task("report", arguments)).is_ok())
    /// }
    /// # let _ = handler;
    /// ```
    pub fn task(&self, tool: impl Into<String>, input: Value) -> TaskSpec {
        let queue = self.clone();
        let tool = tool.into();
        TaskSpec::new()
            .with_status_message("Queued")
            .with_hand_over(move |id| {
                Box::pin(async move {
                    match queue.enqueue(&id, &tool, &input).await {
                        Ok(()) => Ok(()),
                        Err(e) => {
                            tracing::error!(error = %crate::error::Chain(&e), "could not queue a task's job; the task is marked failed");
                            Err(queue_unavailable())
                        }
                    }
                })
            })
    }

    /// Queues the job of a task made some other way (with
    /// [`TaskSpec::with_start`](crate::TaskSpec::with_start), say): `tool` and
    /// `input` are what its [`JobContext`] reads. Workers hear of it at once. One job
    /// per task: a second is refused with [`StoreError::Duplicate`].
    pub async fn enqueue(&self, id: &TaskId, tool: &str, input: &Value) -> Result<(), StoreError> {
        let attempts = i32::try_from(self.inner.max_attempts).unwrap_or(i32::MAX);
        let added: bool = sqlx::query_scalar(self.inner.sql.enqueue.clone())
            .bind(&id.as_bytes()[..])
            .bind(tool)
            .bind(serde_json::to_string(input).map_err(StoreError::backend)?)
            .bind(attempts)
            .fetch_one(&self.inner.pool)
            .await
            .map_err(StoreError::backend)?;
        if added {
            Ok(())
        } else {
            Err(StoreError::Duplicate)
        }
    }

    /// The job of task `id` as the queue holds it: `None` once it finished (or for
    /// a task without one).
    pub async fn job(&self, id: &TaskId) -> Result<Option<Job>, StoreError> {
        let row: Option<JobRow> = sqlx::query_as(self.inner.sql.select.clone())
            .bind(&id.as_bytes()[..])
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(StoreError::backend)?;
        let Some((state, attempts, max_attempts, locked_by, last_error)) = row else {
            return Ok(None);
        };
        let state = JobState::parse(&state)
            .ok_or_else(|| StoreError::backend(format!("unknown job state {state:?}")))?;
        Ok(Some(Job {
            state,
            attempts: u32::try_from(attempts).unwrap_or(0),
            max_attempts: u32::try_from(max_attempts).unwrap_or(0),
            locked_by,
            last_error,
        }))
    }

    fn sql(&self) -> &Statements {
        &self.inner.sql
    }
}

impl fmt::Debug for JobQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobQueue")
            .field("table", &self.inner.table)
            .field("max_attempts", &self.inner.max_attempts)
            .finish_non_exhaustive()
    }
}

/// A job's row as [`JobQueue::job`] reads it: state, attempts, most attempts,
/// locked by, last error.
type JobRow = (String, i32, i32, Option<String>, Option<String>);

/// The error of a task whose job could not be queued: the tool never ran, so the
/// client may call again.
fn queue_unavailable() -> ErrorObject {
    ErrorObject::new(RpcError::INTERNAL_ERROR, "Could not queue the task's work")
        .with_data(json!({"reason": "queue_unavailable", "retryable": true}))
}

/// The error of a task whose job gave up after `attempts` runs, the last ending
/// with `last_error`.
fn job_failed(attempts: u32, last_error: &str) -> ErrorObject {
    ErrorObject::new(
        RpcError::INTERNAL_ERROR,
        format!("The job failed after {attempts} attempt(s): {last_error}"),
    )
    .with_data(json!({"reason": "job_failed", "attempts": attempts}))
}
