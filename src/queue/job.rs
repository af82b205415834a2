//! What a job's handler gets and gives back: [`JobContext`], the task it drives by
//! id, and [`JobError`], how a run that did not finish ends.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::TaskError;
use crate::input::{InputRequests, InputResponses};
use crate::task::{ErrorObject, TaskId};
use crate::worker::Tasks;

/// One run of a job: the task it works for, the call that made it, and the task's
/// worker API. The handler reports through it, and returns the tool's result.
///
/// A job may run more than once (at least once: a worker that stops mid-run leaves
/// it to another), so a handler either does work that may be repeated, or keeps its
/// own record of what it did. Each run starts from the beginning, with
/// [`attempt`](Self::attempt) counting the runs since the job last made progress (a
/// question answered).
///
/// ```
/// use mcp_tasks::queue::{JobContext, JobError};
/// use serde_json::{Value, json};
///
/// async fn report(job: JobContext) -> Result<Value, JobError> {
///     let days = job.input()["days"].as_u64().unwrap_or(7);
///     for day in 1..=days {
///         job.progress(format!("Day {day} of {days}")).await?;
///     }
///     Ok(json!({"content": [{"type": "text", "text": format!("{days} days reported")}]}))
/// }
/// # let _ = report;
/// ```
#[derive(Clone)]
pub struct JobContext {
    id: TaskId,
    tool: Arc<str>,
    input: Arc<Value>,
    attempt: u32,
    tasks: Tasks,
}

impl JobContext {
    pub(super) fn new(
        id: TaskId,
        tool: Arc<str>,
        input: Arc<Value>,
        attempt: u32,
        tasks: Tasks,
    ) -> Self {
        JobContext {
            id,
            tool,
            input,
            attempt,
            tasks,
        }
    }

    /// The task this job works for (the id is a secret: keep it out of logs).
    pub fn task_id(&self) -> &TaskId {
        &self.id
    }

    /// The tool whose call made the task.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The input the job was queued with (the call's arguments, as a rule).
    pub fn input(&self) -> &Value {
        &self.input
    }

    /// Which run this is since the job last made progress: 1 for the first, more
    /// after a worker stopped mid-run or the handler asked for a retry.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The worker API beneath, for anything else a handler does with its task.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// New status text for the task (`statusMessage`). A task that ended meanwhile
    /// (a client's cancel) ends the run: the `?` of the handler returns, and the job
    /// is finished.
    pub async fn progress(&self, message: impl Into<String>) -> Result<(), JobError> {
        Ok(self.tasks.progress(&self.id, message).await?)
    }

    /// Whether the client cancelled the task. The worker also stops a run as soon as
    /// the task is cancelled, so a handler rarely needs it.
    pub async fn is_cancelled(&self) -> bool {
        self.tasks.is_cancelled(&self.id).await
    }

    /// Asks the client and returns its answers, without holding a process while it
    /// waits. The first time, the questions are put to the client (the task becomes
    /// `input_required`) and this returns a [`JobError`] that
    /// [`is_parked`](JobError::is_parked): return it (`?`), and the job parks. Once
    /// every question is answered, through any node, the job runs again from the
    /// start, and the same call returns the answers. Keys are single-use, as for
    /// [`Tasks::require_input`]: use the same keys for the same questions, other
    /// keys for later ones.
    ///
    /// ```
    /// use mcp_tasks::input::{InputRequest, InputRequests};
    /// use mcp_tasks::queue::{JobContext, JobError};
    /// use serde_json::{Value, json};
    ///
    /// async fn deploy(job: JobContext) -> Result<Value, JobError> {
    ///     let target = job.input()["target"].as_str().unwrap_or("staging").to_owned();
    ///     let question = InputRequests::new()
    ///         .with("confirm", InputRequest::confirm(format!("Deploy to {target}?"), "ok"))
    ///         .with_status_message("Waiting for confirmation");
    ///     let answers = job.ask(question).await?; // parks the job until answered
    ///     let text = match answers.confirmed("confirm", "ok") {
    ///         true => format!("Deployed to {target}"),
    ///         false => "Called off".to_owned(),
    ///     };
    ///     Ok(json!({"content": [{"type": "text", "text": text}]}))
    /// }
    /// # let _ = deploy;
    /// ```
    pub async fn ask(&self, requests: InputRequests) -> Result<InputResponses, JobError> {
        let task = self.tasks.status(&self.id).await?;
        if task.status.is_terminal() {
            return Err(JobError::ended());
        }
        let new: Map<String, Value> = requests
            .requests
            .iter()
            .filter(|(key, _)| !task.issued_keys.contains(*key))
            .map(|(key, request)| (key.clone(), request.clone()))
            .collect();
        let waiting = requests
            .requests
            .keys()
            .any(|key| task.input_requests.contains_key(key));
        if new.is_empty() && !waiting {
            return Ok(InputResponses::from_json(task.input_responses));
        }
        if !new.is_empty() {
            let ask = InputRequests {
                requests: new,
                status_message: requests.status_message,
            };
            self.tasks.require_input(&self.id, ask).await?;
        }
        Err(JobError { kind: Kind::Parked })
    }
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("tool", &self.tool)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// How a run ended without a result: try again later, fail the task now, or one of
/// the two ends the worker handles itself (the job parked on a question; the task
/// ended, a client's cancel say).
///
/// The `?` of a [`JobContext`] call or a [`Tasks`] call gives the right one: a task
/// that ended or expired ends the run quietly, a store failure is retried, and a
/// change the task refused fails it.
///
/// ```
/// use mcp_tasks::queue::JobError;
/// use mcp_tasks::wire::RpcError;
///
/// let later = JobError::retry("the warehouse is not reachable");
/// assert!(later.is_retry() && !later.is_parked());
/// let now = JobError::fail(RpcError::invalid_params("no such report"));
/// assert!(!now.is_retry());
/// assert_eq!(later.to_string(), "the warehouse is not reachable");
/// ```
pub struct JobError {
    kind: Kind,
}

pub(super) enum Kind {
    /// Run the job again after a backoff, up to its most attempts.
    Retry(String),
    /// Fail the task with this error, without another attempt.
    Fail(ErrorObject),
    /// The job asked a question and waits for the answer.
    Parked,
    /// The task ended or expired: the job has nothing left to do.
    Ended,
}

impl JobError {
    /// A failure worth another attempt (a service down, a timeout): the job runs
    /// again after a backoff; once it has used its attempts, the task fails with
    /// -32603 and `error.data` `{"reason": "job_failed", "attempts": N}`, `message`
    /// in its error message.
    pub fn retry(message: impl Into<String>) -> Self {
        JobError {
            kind: Kind::Retry(message.into()),
        }
    }

    /// A failure no retry mends: the task fails at once with `error` (an
    /// [`ErrorObject`] or an [`RpcError`](crate::wire::RpcError)). A tool whose work
    /// merely went wrong returns `Ok` with an `isError: true` result instead.
    pub fn fail(error: impl Into<ErrorObject>) -> Self {
        JobError {
            kind: Kind::Fail(error.into()),
        }
    }

    /// The end of a run whose task ended (cancelled, say) or expired.
    pub(super) fn ended() -> Self {
        JobError { kind: Kind::Ended }
    }

    /// Whether the job parked on a question ([`JobContext::ask`]).
    pub fn is_parked(&self) -> bool {
        matches!(self.kind, Kind::Parked)
    }

    /// Whether the task ended or expired, so the job has nothing left to do.
    pub fn is_ended(&self) -> bool {
        matches!(self.kind, Kind::Ended)
    }

    /// Whether the job is to run again ([`retry`](Self::retry)).
    pub fn is_retry(&self) -> bool {
        matches!(self.kind, Kind::Retry(_))
    }

    pub(super) fn into_kind(self) -> Kind {
        self.kind
    }
}

impl From<TaskError> for JobError {
    /// A task that ended or expired ends the run; a store failure is retried; a
    /// change the state machine refused fails the task.
    fn from(error: TaskError) -> Self {
        match error {
            TaskError::NotFound => JobError::ended(),
            e if e.is_terminal() => JobError::ended(),
            TaskError::Refused(refused) => JobError::fail(crate::wire::RpcError::internal(
                format!("The job's change to its task was refused: {refused}"),
            )),
            TaskError::Store(_) => JobError::retry("the task store failed"),
        }
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Retry(message) => f.write_str(message),
            Kind::Fail(error) => f.write_str(&error.message),
            Kind::Parked => f.write_str("the job waits for the client's answer"),
            Kind::Ended => f.write_str("the task ended"),
        }
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Retry(_) => "Retry",
            Kind::Fail(_) => "Fail",
            Kind::Parked => "Parked",
            Kind::Ended => "Ended",
        };
        write!(f, "JobError::{kind}({self})")
    }
}

impl std::error::Error for JobError {}

/// Where a task's job stands in the queue ([`Job::state`](super::Job)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobState {
    /// Due to run (now, or after a retry's backoff).
    Ready,
    /// A worker runs it, under a lock it renews.
    Running,
    /// Parked on a question, checked for the answer every poll interval.
    Waiting,
    /// Gave up after its last attempt; its task failed. Kept for an operator.
    Dead,
}

impl JobState {
    pub(super) fn parse(state: &str) -> Option<Self> {
        Some(match state {
            "ready" => JobState::Ready,
            "running" => JobState::Running,
            "waiting" => JobState::Waiting,
            "dead" => JobState::Dead,
            _ => return None,
        })
    }
}

/// A task's job as the queue holds it ([`JobQueue::job`](super::JobQueue::job)):
/// for operators and tests. A finished job is removed; a dead one stays.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Job {
    /// Where it stands.
    pub state: JobState,
    /// Runs since it last made progress (started, failed or cut short).
    pub attempts: u32,
    /// The most runs before it gives up.
    pub max_attempts: u32,
    /// The worker running it, while one does.
    pub locked_by: Option<String>,
    /// Why the last run did not finish.
    pub last_error: Option<String>,
}
