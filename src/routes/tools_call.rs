//! `tools/call` for a handler that may make a task: the inner service answers, and a
//! task outcome (through the request's `TaskContext` or on the response) becomes a
//! stored task and a `CreateTaskResult`. An SSE answer streams through while the
//! decision waits for its response event.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response, header};
use http_body::{Body, Frame};
use http_body_util::BodyExt as _;
use serde_json::Value;
use tower_service::Service;

use super::auto::Step;
use super::decide::{self, Era, Plan, Shape};
use super::task_tools;
use super::{Call, Reply, reply};
use crate::body::{BoxBody, ReadOutcome, RequestBody, ResponseBody, read_up_to};
use crate::context::{TaskContext, TaskSpec};
use crate::engine::Engine;
use crate::error::BoxError;
use crate::observe::{self, Outcome};
use crate::store::BoxFuture;
use crate::task::Principal;
use crate::task::{ErrorObject, Scope, Transition};
use crate::wire::RpcError;
use crate::wire::sse::{self, Splitter};

/// A `tools/call` of either era: [`decide::plan`](super::decide::plan) says
/// whether it is refused, answered by a task tool, run as an `Auto` task, or goes
/// to the handler with a [`TaskContext`] open or refused.
pub(crate) async fn call<S, B, ResBody>(call: Call<'_, S>, era: Era) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    match decide::plan(&call, era) {
        Plan::Refuse(e) => Ok(reply(e, call.id())),
        Plan::ShuttingDown => Ok(super::shutting_down(call.id())),
        Plan::TaskTool => Ok(task_tools::answer_tool(call).await),
        Plan::Auto {
            after,
            shape,
            inner_tasks,
        } => Box::pin(super::auto::run(call, after, shape, inner_tasks)).await,
        Plan::Handler { context, shape } => run(call, context, shape).await,
    }
}

/// Forwards a `tools/call` with `context` in its extensions; if the handler asked
/// for a task, stores it and answers with a `CreateTaskResult` in place of the
/// inner response.
pub(crate) async fn run<S, B, ResBody>(
    call: Call<'_, S>,
    context: TaskContext,
    shape: Shape,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let owner = call.principal();
    let Call {
        engine,
        mut inner,
        mut parts,
        bytes,
        envelope,
        ..
    } = call;
    let engine = &engine;
    let id = envelope.reply_id();
    parts.extensions.insert(context.clone());
    let response = inner
        .call(Request::from_parts(
            parts,
            RequestBody::buffered(bytes.clone()),
        ))
        .await?;
    let (mut head, body) = response.into_parts();
    let spec_on_response = head.extensions.remove::<TaskSpec>();
    if !context.is_open() {
        if spec_on_response.is_some() {
            tracing::warn!("a tool answered with a task where none may be made; answering -32603");
            return Ok(reply(RpcError::internal_error(), id));
        }
        return Ok(Response::from_parts(head, ResponseBody::inner(body)));
    }
    if sse::is_event_stream(&head.headers) {
        // The head came before the handler finished: stream its events through and
        // hold back only the response until the handler's choice is known.
        head.headers.remove(header::CONTENT_LENGTH);
        let decision = Decision {
            engine: engine.clone(),
            context,
            spec: spec_on_response,
            owner,
            id: id.map(Box::from),
            shape,
        };
        let body = DecidingBody::new(Box::pin(body.map_err(Into::into)), decision);
        return Ok(Response::from_parts(
            head,
            ResponseBody::boxed(Box::pin(body)),
        ));
    }
    // A JSON answer is the handler's last word: read it before deciding.
    let read = match read_up_to(body, engine.config().max_response_bytes).await {
        Ok(read) => read,
        Err(e) => {
            let e: BoxError = e.into();
            tracing::error!(error = %crate::error::Chain(&*e), "the inner service's response failed mid-stream");
            return Ok(reply(RpcError::internal_error(), id));
        }
    };
    let spec = match spec_on_response.or_else(|| context.take()) {
        Some(spec) => spec,
        None if shape.always_task() => match read {
            ReadOutcome::Complete(bytes) => {
                let answer = sse::find_response(&bytes, sse::is_event_stream(&head.headers));
                let settled = settle(engine, owner, answer, shape, id).await;
                return Ok(settled.map(ResponseBody::full));
            }
            overflow => return Ok(Response::from_parts(head, overflow.into_body())),
        },
        None => return Ok(Response::from_parts(head, read.into_body())),
    };
    drop(read);
    match super::create_task(engine, owner, spec).await {
        Ok(task) => {
            observe::outcome(Outcome::Task);
            Ok(shape.response(engine, &task, id).map(ResponseBody::full))
        }
        Err(e) => Ok(reply(e, id)),
    }
}

/// What it takes to turn the call into a task once its response arrives.
pub(crate) struct Decision {
    pub(crate) engine: Arc<Engine>,
    pub(crate) context: TaskContext,
    /// A spec the inner service put on its response head (way 2).
    pub(crate) spec: Option<TaskSpec>,
    pub(crate) owner: Option<Principal>,
    /// The request's id as the client wrote it.
    pub(crate) id: Option<Box<str>>,
    /// How the task is answered.
    pub(crate) shape: Shape,
}

impl Decision {
    /// The SSE event answering the call with a task, or `None` when the handler
    /// asked for none and its own response (`answer`) stands. A call that had to
    /// become a task stores that answer as an ended task instead.
    fn into_task_event(self, answer: Option<Value>) -> Option<BoxFuture<'static, Bytes>> {
        let Some(spec) = self.spec.or_else(|| self.context.take()) else {
            if !self.shape.always_task() {
                return None;
            }
            let Decision {
                engine,
                owner,
                id,
                shape,
                ..
            } = self;
            return Some(Box::pin(async move {
                let settled = settle(&engine, owner, answer, shape, id.as_deref()).await;
                sse::data_event(settled.body())
            }));
        };
        let Decision {
            engine,
            owner,
            id,
            shape,
            ..
        } = self;
        Some(Box::pin(async move {
            let message = match super::create_task(&engine, owner, spec).await {
                Ok(task) => shape.response(&engine, &task, id.as_deref()).into_body(),
                Err(e) => e.to_body_raw(id.as_deref()),
            };
            sse::data_event(&message)
        }))
    }
}

/// Streams the inner SSE body, holding back only the JSON-RPC response until the
/// layer knows whether the call became a task.
///
/// Whole events pass at once; only an unfinished event is held, and at most
/// `max_response_bytes` of it: past that the decision is given up and the bytes
/// pass through unchanged. Once decided, the rest of the stream passes through
/// without being split.
pub(crate) struct DecidingBody {
    inner: Option<BoxBody>,
    /// The most bytes of an unfinished event held while deciding.
    cap: usize,
    /// The inner stream, cut into whole events.
    events: Splitter,
    /// Bytes ready for the client, in order.
    ready: VecDeque<Bytes>,
    decision: Option<Decision>,
    /// The task being stored; its event replaces the inner response.
    creating: Option<BoxFuture<'static, Bytes>>,
}

impl DecidingBody {
    pub(crate) fn new(inner: BoxBody, decision: Decision) -> Self {
        DecidingBody {
            inner: Some(inner),
            cap: decision.engine.config().max_response_bytes,
            events: Splitter::new(),
            ready: VecDeque::new(),
            decision: Some(decision),
            creating: None,
        }
    }

    /// Moves whole events to `ready`, stopping at the response if the call turns
    /// out to be a task.
    fn take_whole_events(&mut self) {
        while let Some(event) = self.events.next_event() {
            let response = match self.decision.is_some() {
                true => event.json().filter(sse::is_response),
                false => None,
            };
            if response.is_some() {
                let task = self
                    .decision
                    .take()
                    .and_then(|decision| decision.into_task_event(response));
                if let Some(task) = task {
                    // The rest belonged to the answer the task replaces.
                    self.creating = Some(task);
                    self.inner = None;
                    self.events = Splitter::new();
                    return;
                }
                // Decided: the handler's own answer stands, and the rest passes.
                self.ready.push_back(event.raw);
                self.pass_rest();
                return;
            }
            self.ready.push_back(event.raw);
        }
        if self.decision.is_some() && self.events.buffered() > self.cap {
            self.give_up();
        }
    }

    /// An event grew past the cap before the response arrived: stop deciding and
    /// answer as the handler did.
    fn give_up(&mut self) {
        if let Some(decision) = self.decision.take() {
            // Closes the context either way: a later `create` is refused.
            let asked = decision.context.take().is_some() || decision.spec.is_some();
            tracing::warn!(
                max_response_bytes = self.cap,
                asked_for_task = asked,
                "an SSE event passed the response cap before the response; \
                 passing the handler's answer through unchanged"
            );
        }
        self.pass_rest();
    }

    /// Hands the bytes the splitter holds to the client as they are.
    fn pass_rest(&mut self) {
        let rest = self.events.take_rest();
        if !rest.is_empty() {
            self.ready.push_back(rest);
        }
    }
}

impl Body for DecidingBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if let Some(bytes) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            if let Some(creating) = &mut this.creating {
                let event = ready!(creating.as_mut().poll(cx));
                this.creating = None;
                this.ready.push_back(event);
                continue;
            }
            let Some(inner) = &mut this.inner else {
                return Poll::Ready(None);
            };
            match ready!(inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if this.decision.is_none() {
                            // Decided: nothing more to look for.
                            this.ready.push_back(data);
                            continue;
                        }
                        this.events.push(&data);
                        this.take_whole_events();
                    }
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    this.inner = None;
                    let rest = this.events.take_rest();
                    if !rest.is_empty() {
                        this.ready.push_back(rest);
                    }
                    if this
                        .decision
                        .take()
                        .is_some_and(|d| d.spec.is_some() || d.context.take().is_some())
                    {
                        tracing::warn!(
                            "a tool asked for a task but its stream ended without a response"
                        );
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_none() && self.creating.is_none() && self.ready.is_empty()
    }
}

impl std::fmt::Debug for DecidingBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecidingBody")
            .field("ready", &self.ready.len())
            .field("deciding", &self.decision.is_some())
            .finish_non_exhaustive()
    }
}

/// A call that had to become a task (see [`Shape::always_task`]) whose handler
/// answered at once: the answer is stored as a task that has already ended, a
/// result completing it and a JSON-RPC error failing it, and the call is answered
/// with that task.
async fn settle(
    engine: &Arc<Engine>,
    owner: Option<Principal>,
    answer: Option<Value>,
    shape: Shape,
    id: Option<&str>,
) -> Response<Bytes> {
    let end = match super::auto::step_of(answer) {
        Step::Complete(result) => Transition::Complete {
            result,
            message: None,
        },
        Step::Fail(error) => Transition::Fail {
            error,
            message: None,
        },
        Step::Ask { .. } | Step::InnerTask(_) => Transition::Fail {
            error: ErrorObject::new(RpcError::INTERNAL_ERROR, "Internal error"),
            message: None,
        },
    };
    let created = match super::create_task(engine, owner, TaskSpec::new()).await {
        Ok(task) => task,
        Err(e) => {
            observe::outcome(Outcome::Error(e.code()));
            return e.to_response_raw(id);
        }
    };
    let task = match engine.update(&created.id, Scope::Any, &end).await {
        Ok(Some(updated)) => updated.record,
        Ok(None) => created,
        Err(e) => {
            tracing::error!(error = %crate::error::Chain(&e), "task store failed");
            observe::outcome(Outcome::Error(RpcError::INTERNAL_ERROR));
            return RpcError::internal_error().to_response_raw(id);
        }
    };
    observe::outcome(Outcome::Task);
    shape.response(engine, &task, id)
}
