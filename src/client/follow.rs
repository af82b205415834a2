//! Following one task to its end: over `subscriptions/listen` when the server agrees,
//! by polling `tasks/get` otherwise; questions answered, cancel on drop.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use serde_json::{Map, Value, json};
use tower_service::Service;

use crate::error::BoxError;
use crate::task::TaskStatus;

use super::error::{ClientError, ClientLimit};
use super::input::{InputHandler, Question};
use super::task::{MAX_POLL_INTERVAL, TaskRef, TaskSnapshot};
use super::transport::{Listen, Rpc};

/// How long [`TaskFollower::cancel`] waits for the task to reach a final status.
pub const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// How long a listen stream may stay silent before the task is read once with
/// `tasks/get` anyway.
const LISTEN_SILENCE: Duration = MAX_POLL_INTERVAL;

/// A callback seeing each new status or status message.
type StatusCallback = Box<dyn FnMut(&TaskSnapshot) + Send>;

/// Follows one task to its end: [`wait`](TaskFollower::wait) for its result.
///
/// It listens (`subscriptions/listen` with the task's id) and falls back to polling
/// `tasks/get` at the server's `pollIntervalMs` (clamped to 50 ms..30 s) when the
/// server refuses the listen or the stream ends; a stream silent for 30 s is
/// checked with one `tasks/get`. Questions (`input_required`) go to
/// the client's [`InputHandler`], each key once.
///
/// A server out of reach (no connection, no answer within the request timeout, or
/// a gateway's 502, 503 or 504) is polled again at the interval for up to the
/// client's poll retry budget (30 s by default,
/// [`Client::with_poll_retry_budget`](super::Client::with_poll_retry_budget)), so a
/// restart does not end the follow; after it, the follow ends with that error, the
/// task left as it is.
///
/// **Dropping it, or the future of `wait`, before the task ended cancels the task**
/// (`tasks/cancel`, sent from a spawned tokio task). [`detach`](TaskFollower::detach)
/// gives the task up without cancelling it, and hands back a [`TaskRef`] to
/// [`resume`](super::Client::resume) with later.
///
/// ```no_run
/// use std::time::Duration;
/// use mcp_tasks::client::{Client, ToolCall};
/// use serde_json::json;
///
/// # async fn run(client: Client) -> Result<(), Box<dyn std::error::Error>> {
/// if let ToolCall::Task(task) = client.call_tool("report", json!({})).await? {
///     let task = task.on_status(|state| eprintln!("report: {}", state.status));
///     // Waiting is bounded here: at the timeout the `wait` future is dropped, and
///     // with it the task is cancelled.
///     match tokio::time::timeout(Duration::from_secs(60), task.wait()).await {
///         Ok(result) => println!("{}", result?),
///         Err(_) => eprintln!("no report within a minute; the task was cancelled"),
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub struct TaskFollower<S> {
    rpc: Rpc<S>,
    task: TaskRef,
    first: Option<TaskSnapshot>,
    handler: Arc<dyn InputHandler>,
    on_status: Option<StatusCallback>,
    listen: bool,
    guard: CancelGuard,
}

impl<S> fmt::Debug for TaskFollower<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskFollower")
            .field("task", &self.task)
            .field("listen", &self.listen)
            .field("armed", &self.guard.0.is_some())
            .finish_non_exhaustive()
    }
}

/// Sends `tasks/cancel` when dropped armed.
struct CancelGuard(Option<Box<dyn FnOnce() + Send>>);

impl CancelGuard {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(cancel) = self.0.take() {
            cancel();
        }
    }
}

/// Cancels one task (`tasks/cancel`); cheap to clone, usable while a
/// [`TaskFollower`] waits on the same task.
///
/// ```no_run
/// use mcp_tasks::client::{Client, ClientError, ToolCall};
/// use serde_json::json;
///
/// # async fn run(client: Client) -> Result<(), ClientError> {
/// if let ToolCall::Task(task) = client.call_tool("build", json!({})).await? {
///     let canceller = task.canceller();
///     // Another part of the program stops the build (a user's "stop" button, say)
///     // while this one waits for it.
///     tokio::spawn(async move { canceller.cancel().await });
///     match task.wait().await {
///         Err(ClientError::TaskCancelled) => eprintln!("build stopped"),
///         other => println!("{}", other?),
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Canceller<S> {
    rpc: Rpc<S>,
    task_id: String,
}

impl<S> fmt::Debug for Canceller<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Canceller")
            .field("task_id", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl<S, B> Canceller<S>
where
    S: Service<Request<String>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// Asks the server to cancel the task. The acknowledgment does not mean the task
    /// is `cancelled` yet: cancellation is cooperative.
    pub async fn cancel(&self) -> Result<(), ClientError> {
        send_cancel(&self.rpc, &self.task_id).await
    }
}

pub(crate) async fn send_cancel<S, B>(rpc: &Rpc<S>, task_id: &str) -> Result<(), ClientError>
where
    S: Service<Request<String>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    rpc.call("tasks/cancel", Some(task_id), task_params(task_id))
        .await
        .map(drop)
}

fn task_params(task_id: &str) -> Map<String, Value> {
    let mut params = Map::new();
    params.insert("taskId".to_owned(), json!(task_id));
    params
}

/// Whether a failed `tasks/get` says the server is out of reach for now, rather
/// than that it refused: no connection, no answer in time, or a gateway's 502,
/// 503 or 504 without a JSON-RPC body (a server restarting behind a proxy).
fn is_unreachable(error: &ClientError) -> bool {
    match error {
        ClientError::Transport(_) | ClientError::Timeout => true,
        ClientError::Http { status, .. } => matches!(
            *status,
            StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
        ),
        _ => false,
    }
}

/// Asks `handler` every question of `requests` whose key is not in `answered`,
/// adding each key to it; the answers by key.
pub(crate) async fn answer_all(
    handler: &dyn InputHandler,
    requests: &Map<String, Value>,
    answered: &mut HashSet<String>,
) -> Result<Map<String, Value>, BoxError> {
    let mut responses = Map::new();
    for (key, request) in requests {
        if answered.contains(key) {
            continue;
        }
        let answer = handler.answer(key, &Question::from_json(request)).await?;
        responses.insert(key.clone(), answer.to_json());
        answered.insert(key.clone());
    }
    Ok(responses)
}

impl<S, B> TaskFollower<S>
where
    S: Service<Request<String>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    pub(crate) fn new(
        rpc: Rpc<S>,
        task: TaskRef,
        first: Option<TaskSnapshot>,
        handler: Arc<dyn InputHandler>,
        listen: bool,
    ) -> Self {
        let guard = {
            let rpc = rpc.clone();
            let task_id = task.task_id().to_owned();
            CancelGuard(Some(Box::new(move || {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        if let Err(error) = send_cancel(&rpc, &task_id).await {
                            tracing::debug!(%error, "tasks/cancel of a dropped follow failed");
                        }
                    });
                }
            })))
        };
        TaskFollower {
            rpc,
            task,
            first,
            handler,
            on_status: None,
            listen,
            guard,
        }
    }

    /// The reference to serialize, to resume following after a restart.
    pub fn task_ref(&self) -> &TaskRef {
        &self.task
    }

    /// Calls `callback` with the task's state each time its status or status
    /// message changes, the first state included.
    pub fn on_status(mut self, callback: impl FnMut(&TaskSnapshot) + Send + 'static) -> Self {
        self.on_status = Some(Box::new(callback));
        self
    }

    /// Polls `tasks/get` only, without trying `subscriptions/listen` first.
    pub fn poll_only(mut self) -> Self {
        self.listen = false;
        self
    }

    /// A handle that cancels this task, for use while [`wait`](Self::wait) runs
    /// (e.g. from a Ctrl-C handler that must know the cancel went out).
    pub fn canceller(&self) -> Canceller<S> {
        Canceller {
            rpc: self.rpc.clone(),
            task_id: self.task.task_id().to_owned(),
        }
    }

    /// Stops following without cancelling: the task runs on, and the returned
    /// reference resumes it.
    pub fn detach(mut self) -> TaskRef {
        self.guard.disarm();
        self.task.clone()
    }

    /// Cancels the task, then polls it until it reaches a final status (at most
    /// [`CANCEL_WAIT`]); the last state seen. A task whose work won the race ends
    /// `completed` or `failed` instead.
    pub async fn cancel(mut self) -> Result<TaskSnapshot, ClientError> {
        self.guard.disarm();
        let id = self.task.task_id().to_owned();
        send_cancel(&self.rpc, &id).await?;
        let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
        let mut last = None;
        loop {
            let state = self.get().await?;
            self.report(&state, &mut last);
            if state.status.is_terminal() || tokio::time::Instant::now() >= deadline {
                return Ok(state);
            }
            tokio::time::sleep(self.task.poll_interval()).await;
        }
    }

    /// Follows the task to its end: the tool's result when it completes,
    /// [`ClientError::TaskFailed`] or [`ClientError::TaskCancelled`] otherwise.
    ///
    /// Returning, with a result or an error, leaves the task as it is; dropping the
    /// future before it returns cancels the task, and so does going past one of the
    /// client's input caps or its follow time
    /// ([`with_max_follow_time`](super::Client::with_max_follow_time)), which end
    /// with [`ClientError::LimitExceeded`].
    pub async fn wait(mut self) -> Result<Value, ClientError> {
        let limit = self.rpc.limits.follow_time;
        let Ok(outcome) = tokio::time::timeout(limit, self.run()).await else {
            // The guard, still armed, cancels the task as `self` drops.
            return Err(ClientError::LimitExceeded(ClientLimit::FollowTime));
        };
        self.guard.disarm();
        outcome
    }

    async fn run(&mut self) -> Result<Value, ClientError> {
        let id = self.task.task_id().to_owned();
        let mut state = match self.first.take() {
            Some(state) => state,
            None => self.get_retrying().await?,
        };
        let mut listen = None;
        if self.listen && !state.status.is_terminal() {
            // A refused or broken listen is no error: polling takes over.
            listen = self.rpc.listen(&id).await.ok().flatten();
            if listen.is_some() {
                // What changed before the stream opened is not on it.
                state = self.get_retrying().await?;
            }
        }
        let mut answered = HashSet::new();
        let mut rounds = 0;
        let mut last = None;
        loop {
            self.task.set_poll_interval_ms(state.poll_interval_ms);
            self.report(&state, &mut last);
            match state.status {
                TaskStatus::Completed => {
                    return match state.result {
                        Some(result) => Ok(result),
                        None => self.get().await?.result.ok_or_else(|| {
                            ClientError::http(StatusCode::OK, "a completed task without a result")
                        }),
                    };
                }
                TaskStatus::Failed => {
                    return Err(ClientError::TaskFailed {
                        error: state
                            .error
                            .unwrap_or_else(|| crate::wire::RpcError::internal("the task failed")),
                        status_message: state.status_message,
                    });
                }
                TaskStatus::Cancelled => return Err(ClientError::TaskCancelled),
                TaskStatus::InputRequired => {
                    if let Some(limit) = self.input_limit(&state, &answered, &mut rounds) {
                        let _ = send_cancel(&self.rpc, &id).await;
                        return Err(ClientError::LimitExceeded(limit));
                    }
                    let responses = match answer_all(
                        &*self.handler,
                        &state.input_requests,
                        &mut answered,
                    )
                    .await
                    {
                        Ok(responses) => responses,
                        Err(error) => {
                            let _ = send_cancel(&self.rpc, &id).await;
                            return Err(ClientError::Input(error));
                        }
                    };
                    if !responses.is_empty() {
                        let mut params = task_params(&id);
                        params.insert("inputResponses".to_owned(), Value::Object(responses));
                        self.rpc.call("tasks/update", Some(&id), params).await?;
                        if listen.is_none() {
                            state = self.get_retrying().await?;
                            continue;
                        }
                    }
                }
                TaskStatus::Working => {}
            }
            state = self.next_state(&mut listen).await?;
        }
    }

    /// The next state: the next notification while the stream lasts, else a poll
    /// after the interval (at once when the stream just ended).
    async fn next_state(
        &mut self,
        listen: &mut Option<Listen<B>>,
    ) -> Result<TaskSnapshot, ClientError> {
        if let Some(stream) = listen {
            loop {
                let next = stream.next_task(self.task.task_id());
                match tokio::time::timeout(LISTEN_SILENCE, next).await {
                    Ok(Ok(Some(params))) => {
                        // A notification that cannot be read is skipped.
                        if let Ok(state) = TaskSnapshot::from_json(&params) {
                            return Ok(state);
                        }
                    }
                    Ok(Err(e @ ClientError::LimitExceeded(_))) => return Err(e),
                    // The stream ended or broke: polling takes over.
                    Ok(Ok(None) | Err(_)) => break,
                    // A lost notification costs at most this wait; the stream stays.
                    Err(_) => return self.get_retrying().await,
                }
            }
            *listen = None;
            return self.get_retrying().await;
        }
        tokio::time::sleep(self.task.poll_interval()).await;
        self.get_retrying().await
    }

    async fn get(&mut self) -> Result<TaskSnapshot, ClientError> {
        let id = self.task.task_id();
        let result = self
            .rpc
            .call("tasks/get", Some(id), task_params(id))
            .await?;
        TaskSnapshot::from_json(&result)
    }

    /// `tasks/get`, tried again after each polling interval while the server
    /// cannot be reached, until the client's poll retry budget is spent (counted
    /// from the first failure in a row); then the last error.
    async fn get_retrying(&mut self) -> Result<TaskSnapshot, ClientError> {
        let budget = self.rpc.limits.poll_retry_budget;
        let mut failing_since = None;
        loop {
            match self.get().await {
                Err(e) if is_unreachable(&e) => {
                    let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                    let pause = self.task.poll_interval();
                    if since.elapsed() + pause > budget {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                }
                other => return other,
            }
        }
    }

    /// The input cap that answering `state`'s new questions would pass, if any;
    /// otherwise counts the round (one with new questions).
    fn input_limit(
        &self,
        state: &TaskSnapshot,
        answered: &HashSet<String>,
        rounds: &mut usize,
    ) -> Option<ClientLimit> {
        let limits = self.rpc.limits;
        let new = state
            .input_requests
            .keys()
            .filter(|key| !answered.contains(*key))
            .count();
        if new == 0 {
            return None;
        }
        if *rounds >= limits.input_rounds {
            return Some(ClientLimit::InputRounds);
        }
        if answered.len() + new > limits.input_keys {
            return Some(ClientLimit::InputKeys);
        }
        *rounds += 1;
        None
    }

    /// Calls the status callback when status or message differ from `last`.
    fn report(&mut self, state: &TaskSnapshot, last: &mut Option<(TaskStatus, Option<String>)>) {
        let now = (state.status, state.status_message.clone());
        if last.as_ref() == Some(&now) {
            return;
        }
        *last = Some(now);
        if let Some(callback) = self.on_status.as_mut() {
            callback(state);
        }
    }
}
