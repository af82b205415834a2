//! The routes the layer owns, one file each, and what they share: the [`Call`]
//! each route is handed, handing a read request to the inner service, and
//! answering with a JSON-RPC error.
//!
//! Every route has one shape, `async fn call(call: Call<'_, S>) -> Reply<ResBody,
//! S::Error>`: the inner service's error is the only `Err`, and every answer of the
//! layer's own is an `Ok` response.
//!
//! | method | file |
//! |---|---|
//! | `tasks/get`, `tasks/update`, `tasks/cancel` | `tasks.rs` |
//! | `tools/call` (a handler's task) | `tools_call.rs` |
//! | `tools/call` (`TaskMode::Auto`) | `auto.rs` |
//! | `server/discover` | `discover.rs` |
//! | `subscriptions/listen` | `listen.rs` |
//! | `tools/list`, `tools/call` of clients without the extension (task tools) | `fallback.rs`, `task_tools.rs` |

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use serde_json::Value;
use tower_service::Service;

use std::sync::Arc;

use crate::body::{ReadOutcome, RequestBody, ResponseBody, read_up_to};
use crate::context::TaskSpec;
use crate::engine::{Engine, Hold, Interrupted, retryable};
use crate::error::BoxError;
use crate::observe::{self, Outcome};
use crate::task::{Principal, TaskId, TaskRecord};
use crate::wire::{Envelope, RpcError, sse};
use crate::worker;

pub(crate) mod auto;
pub(crate) mod decide;
pub(crate) mod discover;
pub(crate) mod fallback;
pub(crate) mod legacy;
pub(crate) mod listen;
pub(crate) mod progress;
pub(crate) mod task_tools;
pub(crate) mod tasks;
pub(crate) mod tools_call;

/// What the layer's own routes resolve to.
pub(crate) type Reply<B, E> = Result<Response<ResponseBody<B>>, E>;

/// A request the layer has read and parsed, as the service hands it to a route.
pub(crate) struct Call<'a, S> {
    /// The state behind the layer.
    pub(crate) engine: Arc<Engine>,
    /// The inner service, polled ready.
    pub(crate) inner: S,
    /// The request's head.
    pub(crate) parts: http::request::Parts,
    /// The request's body, as read.
    pub(crate) bytes: &'a Bytes,
    /// The body, parsed.
    pub(crate) envelope: Envelope<'a>,
    /// Whether `_meta` declares the extension, once the envelope passed
    /// [`Envelope::validate`]. `false` where a route is reached before that (the
    /// `tasks/*` route validates in its own order) and in the legacy era.
    pub(crate) declared: bool,
}

impl<S> Call<'_, S> {
    /// The request's JSON-RPC id as replies echo it ([`Envelope::reply_id`]).
    pub(crate) fn id(&self) -> Option<&str> {
        self.envelope.reply_id()
    }

    /// The caller, as the layer's principal function (or the request's
    /// extensions) names it. Asked anew at each call.
    pub(crate) fn principal(&self) -> Option<Principal> {
        self.engine.principal(&self.parts)
    }

    /// Hands the request to the inner service, unchanged.
    pub(crate) async fn forward<B, ResBody>(self) -> Reply<ResBody, S::Error>
    where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    {
        forward(
            self.inner,
            self.parts,
            self.bytes.clone(),
            self.envelope.reply_id(),
        )
        .await
    }

    /// Hands the request to the inner service and rewrites its answer with `edit`,
    /// JSON or SSE alike ([`sse::rewrite_response`]): what the layer does to the
    /// answers it adds to. A failed status, an answer past the response cap, or one
    /// `edit` leaves unchanged passes as the inner service wrote it. An answer not
    /// read to its end within the edited-answer timeout is dropped, and the client
    /// gets -32603 with HTTP 504.
    pub(crate) async fn forward_edited<B, ResBody>(
        self,
        edit: impl FnOnce(&mut Value) -> bool,
    ) -> Reply<ResBody, S::Error>
    where
        S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
        ResBody: Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        let Call {
            engine,
            mut inner,
            parts,
            bytes,
            envelope,
            ..
        } = self;
        let id = envelope.reply_id();
        let limit = engine.config().edited_answer_timeout;
        let answer = async {
            let response = inner
                .call(Request::from_parts(
                    parts,
                    RequestBody::buffered(bytes.clone()),
                ))
                .await?;
            let (head, body) = response.into_parts();
            if !head.status.is_success() {
                return Ok(Err(Response::from_parts(head, ResponseBody::inner(body))));
            }
            let read = read_up_to(body, engine.config().max_response_bytes).await;
            Ok(Ok((head, read)))
        };
        let (mut head, read) = match tokio::time::timeout(limit, answer).await {
            Ok(Ok(Ok(read))) => read,
            Ok(Ok(Err(passed))) => return Ok(passed),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                tracing::warn!(
                    timeout_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
                    "the inner service did not finish an answer the layer edits in time; answering -32603"
                );
                return Ok(reply(RpcError::answer_timed_out(), id));
            }
        };
        let read = match read {
            Ok(ReadOutcome::Complete(read)) => read,
            Ok(overflow) => return Ok(Response::from_parts(head, overflow.into_body())),
            Err(e) => {
                let e: BoxError = e.into();
                tracing::error!(error = %crate::error::Chain(&*e), "the inner service's response failed mid-stream");
                return Ok(reply(RpcError::internal_error(), id));
            }
        };
        let body = match sse::rewrite_response(&read, sse::is_event_stream(&head.headers), edit) {
            Some(edited) => {
                head.headers.remove(http::header::CONTENT_LENGTH);
                edited
            }
            None => read,
        };
        Ok(Response::from_parts(head, ResponseBody::full(body)))
    }
}

/// The span of an owned route. Never an id or a principal here: the method, how it
/// ended, and where the time went.
#[inline]
pub(crate) fn route_span(method: &str) -> tracing::Span {
    tracing::debug_span!(
        "mcp_tasks",
        method = %method,
        outcome = tracing::field::Empty,
        error_code = tracing::field::Empty,
        store_us = tracing::field::Empty,
        elapsed_us = tracing::field::Empty,
    )
}

/// A JSON-RPC error response written by the layer.
/// `id` is the request's id as the client wrote it ([`Envelope::reply_id`]).
pub(crate) fn reply<B>(error: RpcError, id: Option<&str>) -> Response<ResponseBody<B>> {
    observe::outcome(Outcome::Error(error.code()));
    let mut response = error.to_response_raw(id).map(ResponseBody::full);
    // A refusal the call may be sent again after (a drain, no worker lease): a
    // proxy or load balancer retries it, on another node.
    if response.status() == http::StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
    }
    response
}

/// HTTP 202 with no body: a notification the layer took (it changes nothing), or
/// a client's answer it stored.
pub(crate) fn accepted<B>() -> Response<ResponseBody<B>> {
    observe::outcome(Outcome::Result);
    let mut accepted = Response::new(ResponseBody::full(Bytes::new()));
    *accepted.status_mut() = http::StatusCode::ACCEPTED;
    accepted
}

/// The refusal of a call that would have become a task while the layer drains
/// (WIRE leaves the HTTP status of -32603 open): HTTP 503 with `Retry-After: 1`, so
/// that a proxy or load balancer retries it on another node, and `error.data`
/// `{"retryable": true, "reason": "shutting_down"}` for a client that reads only
/// the JSON-RPC body. The call never reached the inner service: a retry is safe.
pub(crate) fn shutting_down<B>(id: Option<&str>) -> Response<ResponseBody<B>> {
    observe::task_refused("shutting_down");
    let refused = RpcError::new(
        RpcError::INTERNAL_ERROR,
        "Server is shutting down",
        http::StatusCode::SERVICE_UNAVAILABLE,
    )
    .with_data(retryable(Interrupted::ShuttingDown.reason()));
    reply(refused, id)
}

/// Stores the task a spec asks for and starts its work. A request dropped before
/// the work started (the client went away mid-create) leaves no orphan: the task,
/// if it was stored, is failed by a compensating write.
pub(crate) async fn create_task(
    engine: &Arc<Engine>,
    owner: Option<Principal>,
    spec: TaskSpec,
) -> Result<TaskRecord, RpcError> {
    let start = spec.take_start();
    let hold = match start {
        Some(worker::Start::HandOver(_)) => Hold::Durable,
        _ => Hold::Leased,
    };
    engine.admit_owner(owner.as_ref())?;
    let id = TaskId::random();
    let mut pending = Unstarted {
        engine,
        id: Some(id),
    };
    let created = engine.create_task_as(id, owner, &spec.task, hold).await;
    // An error is settled already: refused, or made up for by the engine.
    pending.id = None;
    let (record, creating) = created?;
    pending.id = Some(id);
    worker::start(engine, id, start).await;
    pending.id = None;
    // Its work holds it from here on (a start function takes its own hold).
    drop(creating);
    Ok(record)
}

/// A create between its first step and the start of its work: dropped there, it
/// makes up for the task it may have stored. Costs nothing when not dropped, which
/// is why a create is not spawned to run to its end instead.
struct Unstarted<'a> {
    engine: &'a Engine,
    id: Option<TaskId>,
}

impl Drop for Unstarted<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.engine.compensate_create(id);
        }
    }
}

/// Hands a request the layer has read to the inner service, unchanged.
pub(crate) async fn forward<S, B, ResBody>(
    mut inner: S,
    parts: http::request::Parts,
    bytes: Bytes,
    id: Option<&str>,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
{
    let response = inner
        .call(Request::from_parts(parts, RequestBody::buffered(bytes)))
        .await?;
    Ok(refuse_stray_task(response, id))
}

/// A task outcome outside a `tools/call` the layer inspected (another method, the
/// legacy era, the extension switched off) is logged and answered -32603, echoing
/// the request id when the layer read it (`null` on the header-only fast path).
pub(crate) fn refuse_stray_task<B>(
    mut response: Response<B>,
    id: Option<&str>,
) -> Response<ResponseBody<B>> {
    if response.extensions_mut().remove::<TaskSpec>().is_none() {
        return response.map(ResponseBody::inner);
    }
    tracing::warn!("a task outcome arrived where no task may be made; answering -32603");
    reply(RpcError::internal_error(), id)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::create_task;
    use crate::context::TaskSpec;
    use crate::engine::CREATE_UNCONFIRMED;
    use crate::error::StoreError;
    use crate::layer::TasksLayer;
    use crate::store::TaskStore;
    use crate::store::{BoxFuture, CreateLimits, MemoryStore, Transition, Updated};
    use crate::task::{Scope, TaskId, TaskRecord, TaskStatus, Timestamp};

    /// Stores each create, then never answers it: a commit whose client went away
    /// before the reply.
    #[derive(Debug, Default)]
    struct StoresThenHangs {
        inner: MemoryStore,
        stored: Mutex<Option<TaskId>>,
    }

    impl TaskStore for StoresThenHangs {
        fn create<'a>(
            &'a self,
            record: TaskRecord,
            limits: CreateLimits,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(async move {
                let id = record.id;
                self.inner.create(record, limits).await?;
                *self.stored.lock().unwrap() = Some(id);
                std::future::pending().await
            })
        }

        fn get<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            now: Timestamp,
        ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
            self.inner.get(id, scope, now)
        }

        fn update<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            transition: &'a Transition,
            now: Timestamp,
        ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
            self.inner.update(id, scope, transition, now)
        }

        fn cleanup<'a>(
            &'a self,
            now: Timestamp,
            retention: std::time::Duration,
        ) -> BoxFuture<'a, Result<usize, StoreError>> {
            self.inner.cleanup(now, retention)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_dropped_after_its_commit_is_failed_not_left_working() {
        let store = Arc::new(StoresThenHangs::default());
        let layer = TasksLayer::builder(store.clone())
            .with_anonymous_tasks()
            .without_janitor()
            .build()
            .expect("a valid layer");
        let spec = TaskSpec::new().with_work(|handle| async move {
            handle.ended().await;
        });
        let create = create_task(&layer.engine, None, spec);
        let answered = tokio::time::timeout(std::time::Duration::from_secs(1), create).await;
        assert!(answered.is_err(), "the hanging create never answers");
        // The request is dropped: the task it stored must not stay `working`.
        let id = store.stored.lock().unwrap().expect("the create was stored");
        let ended = async {
            loop {
                let record = store
                    .inner
                    .get(&id, Scope::Any, Timestamp::now())
                    .await
                    .unwrap()
                    .expect("stored");
                if record.status != TaskStatus::Working {
                    return record;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        };
        let record = tokio::time::timeout(std::time::Duration::from_secs(60), ended)
            .await
            .expect("the abandoned task ends");
        assert_eq!(record.status, TaskStatus::Failed);
        assert_eq!(record.status_message.as_deref(), Some(CREATE_UNCONFIRMED));
    }
}
