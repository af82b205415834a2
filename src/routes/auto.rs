//! [`TaskMode::Auto`](crate::TaskMode::Auto): a `tools/call` run in the background
//! that becomes a task when it outlasts its budget, with no change to the inner
//! server.
//!
//! One runner, a spawned tokio task, owns the call from start to end. It makes the
//! inner call; if the answer is in before the client stops waiting, it hands the
//! answer over unchanged. Otherwise it stores a task, hands over the
//! `CreateTaskResult`, and drives the task from the inner responses: a result
//! completes it, a JSON-RPC error fails it, an MRTR `input_required` result is put
//! to the client as the task's input requests and the call re-sent once they are
//! answered. The client's request future only waits for the runner's first word,
//! so hyper dropping it on a disconnect never touches work that became a task.
//!
//! Stopping is dropping: `tasks/cancel` aborts the runner through
//! [`Engine::changed`](crate::engine::Engine), which drops the inner call's future,
//! and the TTL margin drops it from inside the runner.
//!
//! With [`with_inner_tasks`](crate::TasksLayerBuilder::with_inner_tasks) the call
//! keeps the tasks extension, so that an inner server with tasks of its own may
//! answer with one: within the budget it reaches the client like any answer;
//! after it, the layer's task fails, naming the inner task in `error.data`.

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use http_body::Body;
use serde_json::{Map, Value};
use tokio::sync::oneshot;
use tower_service::Service;

use super::decide::Shape;
use super::progress::{self, ProgressSink};
use super::{Call, Reply, reply};
use crate::backoff::Backoff;
use crate::body::{ReadOutcome, RequestBody, ResponseBody, read_up_to};
use crate::context::{TaskContext, TaskRefused, TaskSpec};
use crate::defaults::AUTO_EXPIRY_MARGIN;
use crate::engine::{Engine, NewTask};
use crate::error::BoxError;
use crate::error::TransitionError;
use crate::observe::{self, Outcome};
use crate::store::Updated;
use crate::task::{ErrorObject, Principal, Scope, TaskId, TaskRecord, Timestamp, Transition};
use crate::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES, RawObject, RpcError, sse};

/// Most MRTR rounds one auto task relays before it gives up with -32603.
const MAX_INPUT_ROUNDS: u32 = 64;
/// The first and the longest pause between a runner's attempts at a store call
/// that failed.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_LAST: Duration = Duration::from_secs(2);

/// Runs a `tools/call` of an [`Auto`](crate::TaskMode::Auto) tool for a client that
/// declared the extension (or one served by the task tools). `inner` must be ready
/// (polled). It becomes a task if it runs past `after`. With `inner_tasks` the
/// inner service may answer with a task of its own.
pub(crate) async fn run<S, B, ResBody>(
    call: Call<'_, S>,
    after: Duration,
    shape: Shape,
    inner_tasks: bool,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let id: Option<Box<str>> = call.envelope.reply_id().map(Box::from);
    let owner = call.principal();
    let Call {
        engine,
        inner,
        parts,
        bytes,
        ..
    } = call;
    // Refused before the call starts: whether it would become a task depends on
    // its timing, and an anonymous call is refused either way.
    if let Err(e) = engine.admit_owner(owner.as_ref()) {
        return Ok(reply(e, id.as_deref()));
    }
    let Some(call) = Resend::new(parts, bytes, inner_tasks) else {
        return Ok(reply(RpcError::parse_error(), id.as_deref()));
    };
    let (answer_tx, mut answer_rx) = oneshot::channel();
    let (go_tx, go_rx) = oneshot::channel();
    let (me_tx, me_rx) = oneshot::channel();
    let progress = Arc::new(ProgressSink::new(call.own_progress_token));
    let runner = Runner {
        engine,
        spare: inner.clone(),
        call,
        id: id.clone(),
        owner,
        expires_at: None,
        reports: progress.subscribe(),
        progress,
        shape,
        inner_tasks,
    };
    let handle = tokio::spawn(runner.run(inner, answer_tx, go_rx, me_rx));
    let _ = me_tx.send(handle.abort_handle());
    let answer = match tokio::time::timeout(after, &mut answer_rx).await {
        Ok(answer) => answer,
        Err(_) => {
            // Past the budget: ask the runner for a task. It may still answer with
            // the inner response if that won the race.
            let _ = go_tx.send(());
            answer_rx.await
        }
    };
    match answer {
        Ok((reply, outcome)) => {
            observe::outcome(outcome);
            reply
        }
        Err(_) => {
            tracing::error!("an auto task runner ended without an answer; answering -32603");
            Ok(reply(RpcError::internal_error(), id.as_deref()))
        }
    }
}

/// What it takes to send the original call again: the request head (its
/// extensions included, the `Principal` with them) and the JSON-RPC message with
/// the tasks extension removed from its client capabilities (kept when the inner
/// service's own tasks are carried). Every other value of the message is sent as
/// the client wrote it.
struct Resend {
    method: http::Method,
    uri: http::Uri,
    version: http::Version,
    headers: http::HeaderMap,
    extensions: http::Extensions,
    message: RawObject,
    /// The `progressToken` is the layer's, not the client's.
    own_progress_token: bool,
}

impl Resend {
    fn new(parts: http::request::Parts, bytes: &[u8], inner_tasks: bool) -> Option<Resend> {
        let mut message = RawObject::parse(bytes)?;
        if !inner_tasks {
            strip_extension(&mut message);
        }
        let own_progress_token = progress::ensure_token(&mut message);
        let mut extensions = parts.extensions;
        // The inner handler cannot make a layer task: the layer already does.
        extensions.insert(TaskContext::refused(TaskRefused::NotDeclared));
        Some(Resend {
            method: parts.method,
            uri: parts.uri,
            version: parts.version,
            headers: parts.headers,
            extensions,
            message,
            own_progress_token,
        })
    }

    fn request<B>(&self, message: &RawObject) -> Request<RequestBody<B>> {
        let body = Bytes::from(message.to_vec());
        let length = HeaderValue::from(body.len());
        let mut request = Request::new(RequestBody::buffered(body));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.version_mut() = self.version;
        *request.headers_mut() = self.headers.clone();
        request.headers_mut().insert(header::CONTENT_LENGTH, length);
        *request.extensions_mut() = self.extensions.clone();
        request
    }

    /// The original call as an MRTR retry: a new id, the answers under the inner
    /// server's own keys, and its `requestState` echoed.
    fn retry(&self, round: u32, responses: Map<String, Value>, state: Option<String>) -> RawObject {
        let mut message = self.message.clone();
        message.insert("id", format!("mcp-tasks-relay-{round}"));
        message.edit(&["params"], |params| {
            params.remove("inputResponses");
            params.remove("requestState");
            if !responses.is_empty() {
                params.insert("inputResponses", responses);
            }
            if let Some(state) = state {
                params.insert("requestState", state);
            }
            true
        });
        message
    }
}

/// Removes the tasks extension from `params._meta` client capabilities, so that
/// an inner server that also speaks tasks cannot nest one.
fn strip_extension(message: &mut RawObject) {
    let path = ["params", "_meta", META_CLIENT_CAPABILITIES, "extensions"];
    message.edit(&path, |extensions| extensions.remove(EXTENSION_ID));
}

/// One inner exchange, its body read up to the response cap.
enum Exchange<B, E> {
    Full(http::response::Parts, Bytes),
    /// An SSE answer read up to and including its response event; the stream goes
    /// on in the body.
    Answered(http::response::Parts, Bytes, std::pin::Pin<Box<B>>),
    Large(http::response::Parts, Bytes, std::pin::Pin<Box<B>>),
    /// The body failed mid-stream.
    Broken,
    /// The inner service's own error.
    Failed(E),
}

async fn exchange<S, B, ResBody>(
    mut inner: S,
    request: Request<RequestBody<B>>,
    cap: usize,
    progress: Arc<ProgressSink>,
) -> Exchange<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    if let Err(e) = poll_fn(|cx| inner.poll_ready(cx)).await {
        return Exchange::Failed(e);
    }
    let response = match inner.call(request).await {
        Ok(response) => response,
        Err(e) => return Exchange::Failed(e),
    };
    let (head, body) = response.into_parts();
    if sse::is_event_stream(&head.headers) {
        return match read_to_response(body, cap, &progress).await {
            Ok(SseRead::Answered(prefix, rest)) => Exchange::Answered(head, prefix, rest),
            Ok(SseRead::Ended(bytes)) => Exchange::Full(head, bytes),
            Ok(SseRead::Overflow(prefix, rest)) => Exchange::Large(head, prefix, rest),
            Err(e) => {
                let e: BoxError = e.into();
                tracing::error!(error = %crate::error::Chain(&*e), "the inner service's response failed mid-stream");
                Exchange::Broken
            }
        };
    }
    match read_up_to(body, cap).await {
        Ok(ReadOutcome::Complete(bytes)) => Exchange::Full(head, bytes),
        Ok(ReadOutcome::Overflow(prefix, rest)) => Exchange::Large(head, prefix, rest),
        Err(e) => {
            let e: BoxError = e.into();
            tracing::error!(error = %crate::error::Chain(&*e), "the inner service's response failed mid-stream");
            Exchange::Broken
        }
    }
}

/// How far an SSE answer was read.
enum SseRead<B> {
    /// Up to and including the response event; the rest is still in the body.
    Answered(Bytes, std::pin::Pin<Box<B>>),
    /// The stream ended (without a response, or with one in its last bytes).
    Ended(Bytes),
    /// More than the cap arrived before a response event.
    Overflow(Bytes, std::pin::Pin<Box<B>>),
}

/// Reads an SSE body event by event until its JSON-RPC response: the answer is
/// taken from the response event, not from the end of the stream (which a server
/// may keep open). Each byte is scanned once; at most `cap` bytes are held.
/// Progress reports go to `progress`, and are left out when the token is the layer's.
async fn read_to_response<B>(
    body: B,
    cap: usize,
    progress: &ProgressSink,
) -> Result<SseRead<B>, B::Error>
where
    B: Body<Data = Bytes>,
{
    use http_body_util::BodyExt as _;
    let mut body = Box::pin(body);
    let mut events = sse::Splitter::new();
    let mut read = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        events.push(&data);
        while let Some(event) = events.next_event() {
            let message = event.json();
            if message.as_ref().is_some_and(|m| !progress.observe(m)) {
                continue;
            }
            let is_response = message.is_some_and(|m| sse::is_response(&m));
            read.extend_from_slice(&event.raw);
            if is_response {
                read.extend_from_slice(&events.take_rest());
                return Ok(SseRead::Answered(read.freeze(), body));
            }
        }
        if read.len() + events.buffered() > cap {
            read.extend_from_slice(&events.take_rest());
            return Ok(SseRead::Overflow(read.freeze(), body));
        }
    }
    read.extend_from_slice(&events.take_rest());
    Ok(SseRead::Ended(read.freeze()))
}

/// The inner answer as the client receives it, unchanged.
fn pass_on<B, E>(exchange: Exchange<B, E>, id: Option<&str>) -> Reply<B, E>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    match exchange {
        Exchange::Full(mut head, bytes) => {
            if head.extensions.remove::<TaskSpec>().is_some() {
                tracing::warn!(
                    "a tool answered with a task where none may be made; answering -32603"
                );
                return Ok(reply(RpcError::internal_error(), id));
            }
            Ok(Response::from_parts(head, ResponseBody::full(bytes)))
        }
        Exchange::Answered(mut head, prefix, rest) => {
            if head.extensions.remove::<TaskSpec>().is_some() {
                tracing::warn!(
                    "a tool answered with a task where none may be made; answering -32603"
                );
                return Ok(reply(RpcError::internal_error(), id));
            }
            Ok(Response::from_parts(
                head,
                ResponseBody::prefixed(prefix, rest),
            ))
        }
        Exchange::Large(head, prefix, rest) => Ok(Response::from_parts(
            head,
            ResponseBody::prefixed(prefix, rest),
        )),
        Exchange::Broken => Ok(reply(RpcError::internal_error(), id)),
        Exchange::Failed(e) => Err(e),
    }
}

/// What an inner answer means for the task.
#[derive(Debug)]
pub(super) enum Step {
    Complete(Value),
    Fail(ErrorObject),
    Ask {
        requests: Map<String, Value>,
        state: Option<String>,
    },
    /// The inner server answered with a task of its own (its id, if it gave one).
    InnerTask(Option<String>),
}

fn internal(why: &'static str) -> Step {
    tracing::warn!("auto task failed: {why}");
    Step::Fail(ErrorObject::new(RpcError::INTERNAL_ERROR, "Internal error"))
}

fn classify<B, E>(exchange: Exchange<B, E>) -> Step {
    let (mut head, bytes) = match exchange {
        Exchange::Full(head, bytes) => (head, bytes),
        // What follows the response event is not part of the answer.
        Exchange::Answered(head, bytes, _rest) => (head, bytes),
        Exchange::Large(..) => {
            tracing::warn!("auto task failed: the inner response exceeds the response cap");
            return Step::Fail(ErrorObject::new(
                RpcError::INTERNAL_ERROR,
                "Result too large",
            ));
        }
        Exchange::Broken => return internal("the inner response failed mid-stream"),
        Exchange::Failed(_) => return internal("the inner service failed"),
    };
    if head.extensions.remove::<TaskSpec>().is_some() {
        return internal("the tool asked for a task of its own");
    }
    step_of(sse::find_response(
        &bytes,
        sse::is_event_stream(&head.headers),
    ))
}

/// What an inner JSON-RPC response (`None`: none was found) means for a task: the
/// one reading of an inner answer, for `Auto` runners and for a call that had to
/// become a task whose handler answered at once.
pub(super) fn step_of(message: Option<Value>) -> Step {
    let Some(mut message) = message else {
        return internal("the inner response holds no JSON-RPC response");
    };
    if let Some(error) = message.get_mut("error") {
        return match serde_json::from_value::<ErrorObject>(error.take()) {
            Ok(error) => Step::Fail(error),
            Err(_) => internal("the inner response holds a malformed error"),
        };
    }
    let Some(Value::Object(mut result)) = message.get_mut("result").map(Value::take) else {
        return internal("the inner response holds no result object");
    };
    match result.get("resultType").and_then(Value::as_str) {
        Some("input_required") => {
            let requests = match result.remove("inputRequests") {
                Some(Value::Object(requests)) => requests,
                _ => Map::new(),
            };
            let state = match result.remove("requestState") {
                Some(Value::String(state)) => Some(state),
                _ => None,
            };
            if requests.is_empty() && state.is_none() {
                return internal("an input_required result without inputRequests or requestState");
            }
            Step::Ask { requests, state }
        }
        Some("task") => Step::InnerTask(
            result
                .get("taskId")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ),
        _ => {
            result
                .entry("resultType")
                .or_insert_with(|| Value::String("complete".into()));
            Step::Complete(Value::Object(result))
        }
    }
}

/// When the runner of a task stops its inner call: a margin before the TTL, so
/// that the `failed` state is readable before the task expires.
fn stop_at(record: &TaskRecord) -> Option<tokio::time::Instant> {
    let ttl = record.ttl_ms?;
    let margin = (ttl / 4).min(AUTO_EXPIRY_MARGIN.as_millis() as u64);
    let stop = record.created_at.plus_ms(ttl - margin);
    let left = stop
        .as_millis()
        .saturating_sub(Timestamp::now().as_millis());
    Some(tokio::time::Instant::now() + Duration::from_millis(left))
}

/// Forgets the runner's abort handle however the runner ends.
struct Registered {
    engine: Arc<Engine>,
    task: TaskId,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.engine.node().forget_runner(&self.task);
    }
}

struct Runner<S> {
    engine: Arc<Engine>,
    /// An unpolled clone for the MRTR retries (made ready before each use).
    spare: S,
    call: Resend,
    /// The client's JSON-RPC id, as the client wrote it.
    id: Option<Box<str>>,
    owner: Option<Principal>,
    /// When the task expires: store calls that fail are retried until then.
    expires_at: Option<Timestamp>,
    /// Where the inner server's progress reports go, and the newest of them.
    progress: Arc<ProgressSink>,
    reports: tokio::sync::watch::Receiver<Option<String>>,
    /// How the task is answered.
    shape: Shape,
    /// Whether the inner service may answer with a task of its own.
    inner_tasks: bool,
}

impl<S> Runner<S> {
    async fn run<B, ResBody>(
        mut self,
        inner: S,
        answer: oneshot::Sender<(Reply<ResBody, S::Error>, Outcome)>,
        go: oneshot::Receiver<()>,
        me: oneshot::Receiver<tokio::task::AbortHandle>,
    ) where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone,
        ResBody: Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        let cap = self.engine.config().max_response_bytes;
        let request = self.call.request(&self.call.message);
        let first = exchange(inner, request, cap, self.progress.clone());
        tokio::pin!(first);
        // A client that asked for a task gets one, however soon the tool answers.
        let race = !self.shape.always_task();
        let done = match race {
            true => tokio::select! {
                biased;
                done = &mut first => Some(done),
                go = go => match go {
                    Ok(()) => None,
                    // The client left within the budget: the call ends with its request.
                    Err(_) => return,
                },
            },
            false => None,
        };
        if let Some(done) = done {
            tracing::debug!("auto call answered within its budget");
            let _ = answer.send((pass_on(done, self.id.as_deref()), Outcome::Forwarded));
            return;
        }
        let engine = self.engine.clone();
        let created = match engine.admit_owner(self.owner.as_ref()) {
            Ok(()) => {
                engine
                    .create_task(self.owner.clone(), &NewTask::default())
                    .await
            }
            Err(e) => Err(e),
        };
        let (record, creating) = match created {
            Ok(created) => created,
            Err(e) => {
                let outcome = Outcome::Error(e.code());
                let _ = answer.send((Ok(reply(e, self.id.as_deref())), outcome));
                return;
            }
        };
        let task = record.id;
        self.expires_at = record.expires_at();
        let _registered = Registered {
            engine: self.engine.clone(),
            task,
        };
        if let Ok(me) = me.await {
            self.engine.node().register_runner(task, me);
        }
        drop(creating);
        let handle = self
            .shape
            .response(&self.engine, &record, self.id.as_deref())
            .map(ResponseBody::full);
        if answer.send((Ok(handle), Outcome::Task)).is_err() {
            // The client left before it learned the id: no one can reach the task.
            let _ = self.write(&task, &Transition::Cancel).await;
            return;
        }
        tracing::debug!("auto call became a task");
        match stop_at(&record) {
            Some(at) => {
                if tokio::time::timeout_at(at, self.drive(task, first))
                    .await
                    .is_err()
                {
                    tracing::debug!("auto task stopped at its TTL margin");
                    self.finish(
                        &task,
                        Transition::Fail {
                            error: ErrorObject::new(
                                RpcError::INTERNAL_ERROR,
                                "Task expired before the tool finished",
                            ),
                            message: Some("Task expired".into()),
                        },
                    )
                    .await;
                }
            }
            None => self.drive(task, first).await,
        }
    }

    /// Turns inner answers into task states until one is final.
    async fn drive<B, ResBody>(
        &mut self,
        task: TaskId,
        first: impl Future<Output = Exchange<ResBody, S::Error>>,
    ) where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone,
        ResBody: Body<Data = Bytes>,
        ResBody::Error: Into<BoxError>,
    {
        let cap = self.engine.config().max_response_bytes;
        let mut outcome = progress::relaying(&self.engine, &task, &mut self.reports, first).await;
        let mut round = 0u32;
        loop {
            let (requests, state) = match classify(outcome) {
                Step::Complete(result) => {
                    let message = None;
                    return self
                        .finish(&task, Transition::Complete { result, message })
                        .await;
                }
                Step::Fail(error) => {
                    let message = None;
                    return self
                        .finish(&task, Transition::Fail { error, message })
                        .await;
                }
                Step::InnerTask(inner) => {
                    let fail = match self.inner_tasks {
                        true => inner_task_too_late(inner),
                        false => internal_fail("the inner server answered with a task of its own"),
                    };
                    return self.finish(&task, fail).await;
                }
                Step::Ask { requests, state } => (requests, state),
            };
            round += 1;
            if round > MAX_INPUT_ROUNDS {
                return self
                    .finish(
                        &task,
                        internal_fail("the tool asked for input too many times"),
                    )
                    .await;
            }
            let mut responses = Map::new();
            if !requests.is_empty() {
                // Inner keys are unique per round only; the task's must be unique for
                // its whole life.
                let keys: Vec<(String, String)> = requests
                    .keys()
                    .map(|key| (format!("r{round}.{key}"), key.clone()))
                    .collect();
                let requests = requests
                    .into_iter()
                    .map(|(key, request)| (format!("r{round}.{key}"), request))
                    .collect();
                let ask = Transition::RequireInput {
                    requests,
                    message: None,
                };
                match self.write(&task, &ask).await {
                    Some((updated, retried)) => match updated.outcome {
                        Ok(_) => {}
                        Err(TransitionError::Terminal) => return,
                        // An earlier attempt whose answer was lost stored them.
                        Err(TransitionError::DuplicateKeys(_)) if retried => {}
                        Err(_) => {
                            return self
                                .finish(&task, internal_fail("the tool asked for malformed input"))
                                .await;
                        }
                    },
                    None => return,
                }
                let Some(answers) = self.answers(task).await else {
                    return;
                };
                for (ours, theirs) in keys {
                    if let Some(answer) = answers.get(&ours) {
                        responses.insert(theirs, answer.clone());
                    }
                }
            }
            let retry = self.call.retry(round, responses, state);
            let request = self.call.request(&retry);
            let next = exchange(self.spare.clone(), request, cap, self.progress.clone());
            outcome = progress::relaying(&self.engine, &task, &mut self.reports, next).await;
        }
    }

    /// Waits until no input request is outstanding (store failures are retried
    /// meanwhile); the answers collected so far. `None` when the task ended or
    /// vanished meanwhile.
    async fn answers(&mut self, task: TaskId) -> Option<Map<String, Value>> {
        self.engine.wait_for_answers(&task).await.ok()
    }

    /// Applies `transition`, retrying a store failure with a bounded exponential
    /// backoff until the store answers or the task expires. `None` when the task is
    /// gone (or expired before the store came back); otherwise the update and
    /// whether an earlier attempt failed (and so may have been stored).
    async fn write(&mut self, task: &TaskId, transition: &Transition) -> Option<(Updated, bool)> {
        let mut backoff = Backoff::new(RETRY_FIRST, RETRY_LAST);
        let mut retried = false;
        loop {
            match self.engine.update(task, Scope::Any, transition).await {
                Ok(updated) => return updated.map(|u| (u, retried)),
                Err(e) => {
                    tracing::warn!(error = %crate::error::Chain(&e), "task store failed to write an auto task; retrying");
                    if !self.pause(backoff.next_delay()).await {
                        tracing::error!("an auto task expired before the store came back");
                        return None;
                    }
                    retried = true;
                }
            }
        }
    }

    /// Sleeps `wait`; `false` when the task expires first, so there is nothing left
    /// to retry for.
    async fn pause(&mut self, wait: Duration) -> bool {
        if let Some(at) = self.expires_at {
            let left = at.as_millis().saturating_sub(Timestamp::now().as_millis());
            if u128::from(left) <= wait.as_millis() {
                return false;
            }
        }
        tokio::time::sleep(wait).await;
        true
    }

    async fn finish(&mut self, task: &TaskId, transition: Transition) {
        if let Some((updated, _)) = self.write(task, &transition).await
            && let Err(e) = updated.outcome
            // The client's cancel won the race, or an earlier attempt whose answer
            // was lost stored the state: it stands.
            && e != TransitionError::Terminal
        {
            tracing::warn!(error = ?e, "an auto task's final state was refused");
            let fail = internal_fail("the tool's result could not be stored");
            let _ = self.write(task, &fail).await;
        }
    }
}

/// The end of a layer task whose inner call answered with a task of the inner
/// server's own, made after the layer's: the client follows that one instead.
fn inner_task_too_late(inner: Option<String>) -> Transition {
    tracing::debug!("an auto task failed: the inner server made a task of its own after it");
    let mut error = ErrorObject::new(
        RpcError::INTERNAL_ERROR,
        "The server made a task of its own after this call had become a task; follow that task",
    );
    error.data = inner.map(|id| serde_json::json!({ "taskId": id }));
    Transition::Fail {
        error,
        message: Some("The server made a task of its own".into()),
    }
}

fn internal_fail(why: &'static str) -> Transition {
    let Step::Fail(error) = internal(why) else {
        unreachable!("internal always fails")
    };
    Transition::Fail {
        error,
        message: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full(body: Value, sse: bool) -> Exchange<http_body_util::Empty<Bytes>, ()> {
        let mut response = Response::new(());
        let bytes = if sse {
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}});
            Bytes::from(format!("data: {note}\n\ndata: {body}\n\n"))
        } else {
            Bytes::from(body.to_string())
        };
        Exchange::Full(response.into_parts().0, bytes)
    }

    #[test]
    fn results_errors_and_questions_are_told_apart() {
        let done = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}});
        match classify(full(done, true)) {
            Step::Complete(result) => assert_eq!(result["resultType"], "complete"),
            other => panic!("{other:?}"),
        }
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x", "data": 7}});
        match classify(full(error, false)) {
            Step::Fail(error) => assert_eq!((error.code, error.data), (-32603, Some(json!(7)))),
            other => panic!("{other:?}"),
        }
        let ask = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required",
            "inputRequests": {"a": {"method": "roots/list"}}, "requestState": "s"}});
        match classify(full(ask, false)) {
            Step::Ask { requests, state } => {
                assert!(requests.contains_key("a"));
                assert_eq!(state.as_deref(), Some("s"));
            }
            other => panic!("{other:?}"),
        }
        let empty = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required"}});
        assert!(matches!(classify(full(empty, false)), Step::Fail(e) if e.code == -32603));
        let nested =
            json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "task", "taskId": "in.1"}});
        assert!(matches!(classify(full(nested, false)), Step::InnerTask(Some(id)) if id == "in.1"));
        assert!(matches!(
            classify::<(), ()>(Exchange::Failed(())),
            Step::Fail(_)
        ));
    }

    #[test]
    fn the_extension_is_stripped_and_retries_replace_the_mrtr_fields() {
        let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "t", "inputResponses": {"old": {}}, "requestState": "old",
            "_meta": {META_CLIENT_CAPABILITIES: {"extensions": {EXTENSION_ID: {}, "other": {}}}}}});
        let (mut parts, ()) = Request::new(()).into_parts();
        parts.extensions.insert(Principal::from("alice"));
        let call = Resend::new(parts, body.to_string().as_bytes(), false).unwrap();
        let message = as_value(&call.message);
        let extensions = &message["params"]["_meta"][META_CLIENT_CAPABILITIES]["extensions"];
        assert_eq!(extensions, &json!({"other": {}}));
        let mut answers = Map::new();
        answers.insert("confirm".into(), json!({"action": "accept"}));
        let retry = call.retry(2, answers, Some("state".into()));
        let request = call.request::<()>(&retry);
        let retry = as_value(&retry);
        assert_eq!(retry["id"], "mcp-tasks-relay-2");
        assert_eq!(retry["params"]["requestState"], "state");
        assert_eq!(
            retry["params"]["inputResponses"],
            json!({"confirm": {"action": "accept"}})
        );
        assert_eq!(
            request.extensions().get::<Principal>(),
            Some(&Principal::from("alice"))
        );
        let ctx = TaskContext::from_extensions(request.extensions()).unwrap();
        assert_eq!(ctx.check(), Err(TaskRefused::NotDeclared));
        let without = as_value(&call.retry(3, Map::new(), None));
        assert!(without["params"].get("inputResponses").is_none());
        assert!(without["params"].get("requestState").is_none());
        // Carrying the inner server's own tasks, the call keeps the extension.
        let (parts, ()) = Request::new(()).into_parts();
        let kept = Resend::new(parts, body.to_string().as_bytes(), true).unwrap();
        let kept = as_value(&kept.message);
        let extensions = &kept["params"]["_meta"][META_CLIENT_CAPABILITIES]["extensions"];
        assert_eq!(extensions, &json!({EXTENSION_ID: {}, "other": {}}));
    }

    fn as_value(message: &RawObject) -> Value {
        serde_json::from_slice(&message.to_vec()).unwrap()
    }

    #[test]
    fn retries_send_every_other_value_as_the_client_wrote_it() {
        let arguments = r#"{"big":123456789012345678901234567890,"fine":1.0000000000000000001,"zero":-0,"huge":1E400}"#;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"tools/call","params":{{"name":"t","arguments":{arguments},"_meta":{{"{META_CLIENT_CAPABILITIES}":{{"extensions":{{"{EXTENSION_ID}":{{}}}}}}}}}}}}"#
        );
        let (parts, ()) = Request::new(()).into_parts();
        let call = Resend::new(parts, body.as_bytes(), false).unwrap();
        let first = String::from_utf8(call.message.to_vec()).unwrap();
        assert!(
            first.contains(&format!(r#""arguments":{arguments}"#)),
            "{first}"
        );
        assert!(
            first.contains(r#""id":123456789012345678901234567890"#),
            "{first}"
        );
        assert!(!first.contains(EXTENSION_ID), "{first}");
        let retry = call.retry(1, Map::new(), Some("s".into()));
        let retry = String::from_utf8(retry.to_vec()).unwrap();
        assert!(
            retry.contains(&format!(r#""arguments":{arguments}"#)),
            "{retry}"
        );
    }

    #[test]
    fn the_stop_leaves_a_margin_before_the_ttl() {
        let mut record = TaskRecord::new(TaskId::random(), None, Timestamp::now());
        assert!(stop_at(&record).is_none());
        record.ttl_ms = Some(4_000);
        let left = stop_at(&record).unwrap() - tokio::time::Instant::now();
        assert!(left <= Duration::from_millis(3_000), "{left:?}");
        assert!(left > Duration::from_millis(2_500), "{left:?}");
    }
}
