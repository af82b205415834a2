//! [`Worker`]: claims due jobs, runs each under a lock it renews, and settles the
//! run (finished, parked, retried, given up, or handed back at shutdown); beside it,
//! the checks that wake parked jobs once their questions are answered.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::job::Kind;
use super::{
    CONCURRENCY, JobContext, JobError, JobQueue, LOCK_LEASE, POLL_INTERVAL, RETRY_FIRST,
    RETRY_LAST, SHUTDOWN_GRACE, job_failed,
};
use crate::backoff::Backoff;
use crate::error::{StoreError, TaskError};
use crate::outage::Outage;
use crate::store::{BoxFuture, NodeId};
use crate::task::{TaskId, TaskStatus, Transition};
use crate::worker::Tasks;

/// Parked jobs one worker checks for answers per poll interval.
const CHECK_BATCH: i64 = 100;

/// A claimed row: task id, tool, input, attempts, most attempts, resumed, last error.
type ClaimRow = (Vec<u8>, String, String, i32, i32, bool, Option<String>);

type Handler = Arc<dyn Fn(JobContext) -> BoxFuture<'static, Result<Value, JobError>> + Send + Sync>;

/// Runs the jobs of a [`JobQueue`]: in a process of its own, or beside a server.
/// Any number of workers, on any hosts, share one queue.
///
/// The handler gets a [`JobContext`] and returns the tool's result (a
/// `CallToolResult`), which completes the task, or a [`JobError`]. The worker:
///
/// - claims a due job with `FOR UPDATE SKIP LOCKED` (workers never wait for each
///   other), hears of new jobs through `LISTEN`, and looks for due jobs every
///   [poll interval](Self::with_poll_interval) besides;
/// - holds a lock on the running job, renewed every third of the
///   [lock lease](Self::with_lock_lease). A worker that stops renewing (killed,
///   paused, cut off from the database) loses the job when the lease runs out, and the
///   next claim runs it again on the same task, whose status message then says
///   "Resumed after an interruption (attempt N)": the task stays `working`. A run
///   whose lock was taken over stops at its next renewal;
/// - stops the run as soon as the task ends (a client's cancel, on any node), and
///   finishes the job;
/// - completes the task with the handler's result. Completion is idempotent: the
///   task's terminal state is final, so a run that finishes after another already
///   did (a worker resumed after a pause) changes nothing;
/// - parks a job whose handler asked a question ([`JobContext::ask`]) until the
///   answer is there (checked every poll interval, by whichever worker), then runs
///   it again;
/// - retries a run that failed with [`JobError::retry`] (or panicked) after a
///   backoff that doubles from 1 s to 5 minutes, and after the job's last attempt
///   fails the task with -32603 and `error.data` `{"reason": "job_failed",
///   "attempts": N}`, keeping the job as a dead letter.
///
/// ```no_run
/// use mcp_tasks::queue::{JobContext, JobError, JobQueue, Worker};
/// use mcp_tasks::{PostgresStore, TasksLayer};
/// use serde_json::{Value, json};
///
/// async fn handle(job: JobContext) -> Result<Value, JobError> {
///     job.progress("Working").await?;
///     Ok(json!({"content": [{"type": "text", "text": format!("{} done", job.tool())}]}))
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://app@db.internal/app").await?;
/// store.migrate().await?;
/// store.listen().await?; // cancels and answers from the servers reach this process
/// let queue = JobQueue::on(&store);
/// queue.migrate().await?;
/// // This process runs no in-process work: it needs no worker lease, and its death
/// // leaves none for the servers to claim.
/// let tasks = TasksLayer::builder(store).without_worker_leases().build()?.tasks();
/// Worker::new(queue, tasks, handle)
///     .run(async { let _ = tokio::signal::ctrl_c().await; })
///     .await;
/// # Ok(())
/// # }
/// ```
pub struct Worker {
    queue: JobQueue,
    tasks: Tasks,
    handler: Handler,
    name: Arc<str>,
    concurrency: usize,
    lock: Duration,
    poll: Duration,
    retry_first: Duration,
    retry_last: Duration,
    grace: Duration,
}

impl Worker {
    /// A worker for `queue`'s jobs, driving their tasks through `tasks` (from
    /// [`TasksLayer::tasks`](crate::TasksLayer::tasks) on the store the servers
    /// share) with `handler`.
    pub fn new<F, Fut>(queue: JobQueue, tasks: Tasks, handler: F) -> Self
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, JobError>> + Send + 'static,
    {
        Worker {
            queue,
            tasks,
            handler: Arc::new(move |job| Box::pin(handler(job))),
            name: NodeId::of_this_process().as_str().into(),
            concurrency: CONCURRENCY,
            lock: LOCK_LEASE,
            poll: POLL_INTERVAL,
            retry_first: RETRY_FIRST,
            retry_last: RETRY_LAST,
            grace: SHUTDOWN_GRACE,
        }
    }

    /// The name the worker locks jobs under (`locked_by`; default: host name,
    /// process id and six random hex digits).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into().into();
        self
    }

    /// How many jobs it runs at once (default [`CONCURRENCY`]; at least 1).
    pub fn with_concurrency(mut self, jobs: usize) -> Self {
        self.concurrency = jobs.max(1);
        self
    }

    /// How long its lock on a running job lasts without renewal (default
    /// [`LOCK_LEASE`], at least 30 ms): the longest a job waits after its worker
    /// stopped. Renewed every third of it.
    pub fn with_lock_lease(mut self, lease: Duration) -> Self {
        self.lock = lease.max(Duration::from_millis(30));
        self
    }

    /// How often it looks for due jobs it was not told about, and checks up to 100
    /// parked jobs for their answers (default [`POLL_INTERVAL`], at least 10 ms).
    pub fn with_poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll.max(Duration::from_millis(10));
        self
    }

    /// The pauses before a failed job runs again: `first`, doubled after each
    /// failure up to `last` (defaults [`RETRY_FIRST`] and [`RETRY_LAST`]), each
    /// drawn between half its ceiling and the ceiling.
    pub fn with_retry_backoff(mut self, first: Duration, last: Duration) -> Self {
        self.retry_first = first;
        self.retry_last = last.max(first);
        self
    }

    /// How long, once [`run`](Self::run)'s shutdown resolves, its running jobs may
    /// take to finish before they are stopped and handed back to the queue, due at
    /// once for another worker (default [`SHUTDOWN_GRACE`]).
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The name it locks jobs under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs jobs until `shutdown` resolves, then stops claiming, gives the running
    /// jobs the [grace](Self::with_shutdown_grace) to finish, and hands back the
    /// rest (their tasks stay `working`, and the next run says it resumed).
    /// Store and database failures are logged and retried, never returned.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let worker = Arc::new(self);
        let poke = Notify::new();
        let (stop, stopping) = watch::channel(false);
        let mut runs = JoinSet::new();
        tracing::info!(worker = %worker.name, table = worker.queue.table(), "job worker started");
        tokio::select! {
            _ = shutdown => {}
            _ = worker.claim_loop(&poke, &mut runs, &stopping) => {}
            _ = worker.listen(&poke) => {}
            _ = worker.check_loop(&poke) => {}
        }
        tracing::info!(
            worker = %worker.name,
            running = runs.len(),
            grace_ms = worker.grace.as_millis() as u64,
            "job worker stopping: no new job from now on"
        );
        let finished = async { while runs.join_next().await.is_some() {} };
        if tokio::time::timeout(worker.grace, finished).await.is_err() {
            stop.send_replace(true);
            while runs.join_next().await.is_some() {}
        }
        tracing::info!(worker = %worker.name, "job worker stopped");
    }

    /// Claims due jobs while it has room, each run on a task of its own.
    async fn claim_loop(
        self: &Arc<Self>,
        poke: &Notify,
        runs: &mut JoinSet<()>,
        stopping: &watch::Receiver<bool>,
    ) {
        let slots = Arc::new(Semaphore::new(self.concurrency));
        let mut failures = Outage::new("claim a job");
        let mut backoff = Backoff::new(
            Duration::from_millis(50),
            self.poll.max(Duration::from_millis(50)),
        );
        loop {
            while runs.try_join_next().is_some() {}
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            match self.claim().await {
                Ok(Some(job)) => {
                    failures.succeeded();
                    backoff.reset();
                    runs.spawn(self.clone().run_job(job, slot, stopping.clone()));
                }
                Ok(None) => {
                    failures.succeeded();
                    backoff.reset();
                    drop(slot);
                    tokio::select! {
                        _ = poke.notified() => {}
                        _ = tokio::time::sleep(self.poll) => {}
                    }
                }
                Err(e) => {
                    failures.failed(Some(&e));
                    drop(slot);
                    backoff.wait().await;
                }
            }
        }
    }

    /// Takes the job due first, if any.
    async fn claim(&self) -> Result<Option<Claimed>, StoreError> {
        let token = i64::from_le_bytes(
            TaskId::random().as_bytes()[..8]
                .try_into()
                .expect("8 bytes"),
        );
        let claimed_at = Instant::now();
        let row: Option<ClaimRow> = sqlx::query_as(self.queue.sql().claim.clone())
            .bind(&*self.name)
            .bind(token)
            .bind(millis(self.lock))
            .fetch_optional(self.queue.pool())
            .await
            .map_err(StoreError::backend)?;
        let Some((id, tool, input, attempts, max_attempts, resumed, last_error)) = row else {
            return Ok(None);
        };
        let id = <[u8; TaskId::BYTES]>::try_from(id.as_slice())
            .map(TaskId::from_bytes)
            .map_err(|_| StoreError::backend("a job's task id is not 32 bytes"))?;
        Ok(Some(Claimed {
            id,
            tool: tool.into(),
            input: Arc::new(serde_json::from_str(&input).unwrap_or(Value::Null)),
            attempts: u32::try_from(attempts).unwrap_or(0),
            max_attempts: u32::try_from(max_attempts).unwrap_or(1),
            resumed,
            last_error,
            token,
            claimed_at,
        }))
    }

    /// One run of `job`, settled.
    async fn run_job(
        self: Arc<Self>,
        job: Claimed,
        _slot: OwnedSemaphorePermit,
        stopping: watch::Receiver<bool>,
    ) {
        let id = job.id;
        // A task that ended or expired needs no run.
        match self.tasks.status(&id).await {
            Ok(task) if task.status.is_terminal() => {
                return self.settle(&job, Settle::Finish).await;
            }
            Ok(_) => {}
            Err(TaskError::NotFound) => return self.settle(&job, Settle::Finish).await,
            Err(_) => {
                let why = "could not read the task".to_owned();
                return self.settle(&job, Settle::Retry(why)).await;
            }
        }
        if job.attempts > job.max_attempts {
            // The last attempt was cut short: no run is left.
            let why = job
                .last_error
                .clone()
                .unwrap_or_else(|| "the worker running it stopped".into());
            return self.give_up(&job, job.attempts - 1, why).await;
        }
        tracing::info!(worker = %self.name, tool = %job.tool, attempt = job.attempts, resumed = job.resumed, "running a job");
        let note = if job.resumed {
            Some(format!(
                "Resumed after an interruption (attempt {})",
                job.attempts
            ))
        } else if job.attempts > 1 {
            Some(format!(
                "Retrying after an error (attempt {})",
                job.attempts
            ))
        } else {
            None
        };
        if let Some(note) = note {
            let _ = self.tasks.progress(&id, note).await;
        }
        let context = JobContext::new(
            id,
            job.tool.clone(),
            job.input.clone(),
            job.attempts,
            self.tasks.clone(),
        );
        let mut work = tokio::spawn((self.handler)(context));
        let outcome = tokio::select! {
            biased;
            _ = self.tasks.ended(&id) => Outcome::Ended,
            () = self.keep_lock(&job) => Outcome::LostLock,
            _ = stopped(stopping) => Outcome::Stopped,
            done = &mut work => match done {
                Ok(result) => Outcome::Done(result),
                Err(_) => Outcome::Panicked,
            },
        };
        work.abort();
        let settle = match outcome {
            Outcome::Ended => self.ended(&job),
            Outcome::LostLock => {
                tracing::warn!(worker = %self.name, tool = %job.tool, "a job's lock was lost (taken over, or not renewed in time); this run stops, another carries on");
                return;
            }
            Outcome::Stopped => Settle::HandBack,
            Outcome::Panicked => Settle::Retry("the job's handler panicked".into()),
            Outcome::Done(Ok(result)) => self.complete(&job, result).await,
            Outcome::Done(Err(error)) => match error.into_kind() {
                Kind::Parked => Settle::Park,
                Kind::Ended => self.ended(&job),
                Kind::Retry(why) => Settle::Retry(why),
                Kind::Fail(error) => {
                    let fail = Transition::Fail {
                        error,
                        message: None,
                    };
                    match self.tasks.apply(&id, fail).await {
                        Ok(_) | Err(TaskError::NotFound) => Settle::Finish,
                        Err(e) if e.is_terminal() => Settle::Finish,
                        Err(_) => Settle::Retry("could not store the task's failure".into()),
                    }
                }
            },
        };
        self.settle(&job, settle).await;
    }

    /// A run whose task ended (cancelled, or ended elsewhere) or expired.
    fn ended(&self, job: &Claimed) -> Settle {
        tracing::info!(worker = %self.name, tool = %job.tool, "a job's task ended (cancelled, ended elsewhere or expired); this run stops");
        Settle::Finish
    }

    /// Completes the task with a run's result; what is left to do with the job.
    async fn complete(&self, job: &Claimed, result: Value) -> Settle {
        match self.tasks.complete(&job.id, result).await {
            Ok(()) => {
                tracing::info!(worker = %self.name, tool = %job.tool, attempt = job.attempts, "a job completed its task");
                Settle::Finish
            }
            Err(TaskError::NotFound) => Settle::Finish,
            Err(e) if e.is_terminal() => {
                tracing::info!(worker = %self.name, tool = %job.tool, "a job's task had already ended; this run's result is dropped");
                Settle::Finish
            }
            // Too large, say: the task failed.
            Err(TaskError::Refused(_)) => Settle::Finish,
            Err(TaskError::Store(_)) => Settle::Retry("could not store the result".into()),
        }
    }

    /// Renews the lock on `job` every third of the lease; resolves once the lock is
    /// lost: taken over, or not renewed before it ran out.
    async fn keep_lock(&self, job: &Claimed) {
        let every = self.lock / 3;
        let mut held_until = job.claimed_at + self.lock;
        loop {
            tokio::time::sleep(every).await;
            let sent = Instant::now();
            let renew = sqlx::query(self.queue.sql().renew.clone())
                .bind(&job.id.as_bytes()[..])
                .bind(job.token)
                .bind(millis(self.lock))
                .execute(self.queue.pool());
            match tokio::time::timeout(every, renew).await {
                Ok(Ok(done)) if done.rows_affected() == 1 => held_until = sent + self.lock,
                Ok(Ok(_)) => return,
                Ok(Err(_)) | Err(_) if Instant::now() >= held_until => return,
                Ok(Err(_)) | Err(_) => {}
            }
        }
    }

    /// Settles a run in the queue. A failure to write it is logged: the lock runs
    /// out, and the job runs again.
    async fn settle(&self, job: &Claimed, settle: Settle) {
        let sql = self.queue.sql();
        let task = &job.id.as_bytes()[..];
        let written = match settle {
            Settle::Finish => sqlx::query(sql.finish.clone())
                .bind(task)
                .bind(job.token)
                .execute(self.queue.pool())
                .await
                .map(drop),
            Settle::Park => sqlx::query(sql.park.clone())
                .bind(task)
                .bind(job.token)
                .execute(self.queue.pool())
                .await
                .map(drop),
            Settle::HandBack => sqlx::query(sql.hand_back.clone())
                .bind(task)
                .bind(job.token)
                .execute(self.queue.pool())
                .await
                .map(drop),
            Settle::Retry(why) if job.attempts >= job.max_attempts => {
                return self.give_up(job, job.attempts, why).await;
            }
            Settle::Retry(why) => {
                let mut backoff = Backoff::new(self.retry_first, self.retry_last);
                let mut delay = backoff.next_delay();
                for _ in 1..job.attempts.min(32) {
                    delay = backoff.next_delay();
                }
                tracing::warn!(worker = %self.name, tool = %job.tool, attempt = job.attempts, retry_in_ms = delay.as_millis() as u64, error = %why, "a job failed; it runs again after a pause");
                sqlx::query(sql.retry.clone())
                    .bind(task)
                    .bind(job.token)
                    .bind(millis(delay))
                    .bind(why)
                    .execute(self.queue.pool())
                    .await
                    .map(drop)
            }
        };
        if let Err(e) = written {
            tracing::warn!(worker = %self.name, error = %crate::error::Chain(&StoreError::backend(e)), "could not settle a job's run; it runs again once its lock runs out");
        }
    }

    /// Fails the task of a job that used its attempts, and keeps the job as a dead
    /// letter. Should the task's store fail, the job runs this again later.
    async fn give_up(&self, job: &Claimed, attempts: u32, why: String) {
        let fail = Transition::Fail {
            error: job_failed(attempts, &why),
            message: Some(format!("Gave up after {attempts} attempt(s)")),
        };
        let failed = match self.tasks.apply(&job.id, fail).await {
            Ok(_) | Err(TaskError::NotFound) => true,
            Err(e) => e.is_terminal(),
        };
        let sql = self.queue.sql();
        let written = if failed {
            tracing::error!(worker = %self.name, tool = %job.tool, attempts, error = %why, "a job gave up; its task failed (reason job_failed)");
            sqlx::query(sql.bury.clone())
                .bind(&job.id.as_bytes()[..])
                .bind(job.token)
                .bind(&why)
                .execute(self.queue.pool())
                .await
        } else {
            sqlx::query(sql.retry.clone())
                .bind(&job.id.as_bytes()[..])
                .bind(job.token)
                .bind(millis(self.retry_first))
                .bind(&why)
                .execute(self.queue.pool())
                .await
        };
        if let Err(e) = written {
            tracing::warn!(worker = %self.name, error = %crate::error::Chain(&StoreError::backend(e)), "could not settle a job that gave up");
        }
    }

    /// Hears of new jobs (and woken ones) through `LISTEN`, and pokes the claims.
    /// Without it, claims still find due jobs every poll interval.
    async fn listen(&self, poke: &Notify) {
        loop {
            if let Ok(mut listener) = PgListener::connect_with(self.queue.pool()).await
                && listener.listen(self.queue.table()).await.is_ok()
            {
                // Whatever was queued before the listener heard of it.
                poke.notify_one();
                while listener.recv().await.is_ok() {
                    poke.notify_one();
                }
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Every poll interval, checks up to [`CHECK_BATCH`] parked jobs for their answers,
    /// and wakes those answered (or finishes those whose task ended).
    async fn check_loop(&self, poke: &Notify) {
        let mut failures = Outage::new("check parked jobs");
        loop {
            let due: Result<Vec<Vec<u8>>, _> =
                sqlx::query_scalar(self.queue.sql().due_checks.clone())
                    .bind(millis(self.poll))
                    .bind(CHECK_BATCH)
                    .fetch_all(self.queue.pool())
                    .await;
            match due {
                Ok(due) => {
                    failures.succeeded();
                    for id in due {
                        let Ok(id) = <[u8; TaskId::BYTES]>::try_from(id.as_slice()) else {
                            continue;
                        };
                        if self.check_parked(TaskId::from_bytes(id)).await {
                            poke.notify_one();
                        }
                    }
                }
                Err(e) => failures.failed(Some(&StoreError::backend(e))),
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Wakes the parked job of `id` if its questions are answered, forgets it if its
    /// task ended; whether it woke it.
    async fn check_parked(&self, id: TaskId) -> bool {
        let sql = self.queue.sql();
        let wake = match self.tasks.status(&id).await {
            Ok(record) if record.status == TaskStatus::InputRequired => return false,
            Ok(record) => !record.status.is_terminal(),
            Err(TaskError::NotFound) => false,
            Err(_) => return false,
        };
        let statement = if wake { &sql.wake } else { &sql.forget_parked };
        let done = sqlx::query(statement.clone())
            .bind(&id.as_bytes()[..])
            .execute(self.queue.pool())
            .await;
        wake && done.is_ok()
    }
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("name", &self.name)
            .field("queue", &self.queue)
            .field("concurrency", &self.concurrency)
            .field("lock", &self.lock)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

/// A job this worker claimed, with the token that fences every write of its run.
struct Claimed {
    id: TaskId,
    tool: Arc<str>,
    input: Arc<Value>,
    attempts: u32,
    max_attempts: u32,
    /// The last run was cut short: this one resumes.
    resumed: bool,
    last_error: Option<String>,
    token: i64,
    /// Sent the claim here: the lock holds until at most a lease after.
    claimed_at: Instant,
}

/// How a run ended.
enum Outcome {
    Done(Result<Value, JobError>),
    Panicked,
    /// The task ended (cancelled, say) or expired.
    Ended,
    LostLock,
    /// The worker stops, past its grace.
    Stopped,
}

/// What a run leaves of its job.
enum Settle {
    Finish,
    Park,
    Retry(String),
    HandBack,
}

/// Resolves once the worker's grace is over.
async fn stopped(mut stopping: watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
