//! The body of a `tools/call` answered over SSE while the call may still become a
//! task: events stream through as they arrive, and only the final response waits for
//! the decision.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use serde_json::Value;

use crate::body::BoxBody;
use crate::context::{TaskContext, TaskSpec};
use crate::error::BoxError;
use crate::jsonrpc::result_response;
use crate::shared::Shared;
use crate::sse;
use crate::store::BoxFuture;
use crate::task::Principal;

/// What it takes to turn the call into a task once its response arrives.
pub(crate) struct Decision {
    pub(crate) shared: Arc<Shared>,
    pub(crate) context: TaskContext,
    /// A spec the inner service put on its response head (way 2).
    pub(crate) spec: Option<TaskSpec>,
    pub(crate) owner: Option<Principal>,
    pub(crate) id: Option<Value>,
}

impl Decision {
    /// The SSE event answering the call with a task, or `None` when the handler
    /// asked for none and its own response stands.
    fn into_task_event(self) -> Option<BoxFuture<'static, Bytes>> {
        let spec = self.spec.or_else(|| self.context.take())?;
        let Decision {
            shared, owner, id, ..
        } = self;
        Some(Box::pin(async move {
            let message = match shared.create_task(owner, spec).await {
                Ok(task) => {
                    result_response(id.as_ref(), shared.create_task_result(&task)).into_body()
                }
                Err(e) => e.to_body(id.as_ref()),
            };
            sse::data_event(&message)
        }))
    }
}

/// Streams the inner SSE body, holding back only the JSON-RPC response until the
/// layer knows whether the call became a task.
pub(crate) struct DecidingBody {
    inner: Option<BoxBody>,
    /// Bytes of an event not yet complete.
    partial: BytesMut,
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
            partial: BytesMut::new(),
            ready: VecDeque::new(),
            decision: Some(decision),
            creating: None,
        }
    }

    /// Moves whole events from `partial` to `ready`, stopping at the response if the
    /// call turns out to be a task.
    fn take_whole_events(&mut self) {
        let events = sse::events(&self.partial);
        let Some(end) = events.last().map(|e| e.range.end) else {
            return;
        };
        let chunk = self.partial.split_to(end).freeze();
        if self.decision.is_some() {
            for event in &events {
                let is_response = event
                    .data
                    .as_deref()
                    .and_then(|d| serde_json::from_str::<Value>(d).ok())
                    .is_some_and(|m| sse::is_response(&m));
                if !is_response {
                    continue;
                }
                let task = self.decision.take().and_then(Decision::into_task_event);
                if let Some(task) = task {
                    if event.range.start > 0 {
                        self.ready.push_back(chunk.slice(..event.range.start));
                    }
                    // The rest belonged to the answer the task replaces.
                    self.creating = Some(task);
                    self.inner = None;
                    self.partial.clear();
                    return;
                }
                break;
            }
        }
        self.ready.push_back(chunk);
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
                        this.partial.extend_from_slice(&data);
                        this.take_whole_events();
                    }
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    this.inner = None;
                    if !this.partial.is_empty() {
                        this.ready.push_back(this.partial.split().freeze());
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
