//! [`TasksService`]: the routing of the layer.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::{BodyExt as _, Limited};
use serde_json::{Map, Value};
use tower_service::Service;
use tracing::Instrument as _;

use crate::body::{ReadOutcome, RequestBody, ResponseBody, read_up_to};
use crate::context::{TaskContext, TaskMode, TaskRefused, TaskSpec};
use crate::decide::{DecidingBody, Decision};
use crate::error::{BoxError, EXTENSION_ID, RpcError};
use crate::future::{ResponseFuture, refuse_stray_task};
use crate::jsonrpc::{Envelope, HeaderRoute, is_owned_method, result_response, route_by_headers};
use crate::shared::Shared;
use crate::sse;
use crate::task::{Scope, TaskId, Timestamp, Transition, TransitionError};
use crate::worker::Tasks;

/// The service produced by [`TasksLayer`](crate::TasksLayer) around an MCP service.
///
/// The inner service receives [`RequestBody<B>`](crate::RequestBody): the client's
/// own stream on the fast path, or the bytes the layer had to read. Errors are the
/// inner service's own; the layer's failures are JSON-RPC error responses.
#[derive(Debug)]
pub struct TasksService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: Clone> Clone for TasksService<S> {
    fn clone(&self) -> Self {
        TasksService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S> TasksService<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        TasksService { inner, shared }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The worker API over this service's store.
    pub fn handle(&self) -> Tasks {
        Tasks::new(self.shared.clone())
    }
}

impl<S, B, ResBody> Service<Request<B>> for TasksService<S>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if self.shared.config.enabled {
            match route_by_headers(req.method(), req.headers()) {
                HeaderRoute::Passthrough => {}
                HeaderRoute::Legacy => {
                    req.extensions_mut()
                        .insert(TaskContext::refused(TaskRefused::LegacyEra));
                }
                HeaderRoute::Inspect => {
                    // The clone may not be ready; keep it and use the polled one.
                    let clone = self.inner.clone();
                    let ready = std::mem::replace(&mut self.inner, clone);
                    let shared = self.shared.clone();
                    return ResponseFuture::owned(Box::pin(inspect(shared, ready, req)));
                }
            }
        } else {
            // Switched off: the request passes as it is, and a handler that looks
            // for a task context learns why it may not make a task.
            req.extensions_mut()
                .insert(TaskContext::refused(TaskRefused::Disabled));
        }
        ResponseFuture::passthrough(self.inner.call(req.map(RequestBody::stream)))
    }
}

/// What the layer's own routes resolve to.
pub(crate) type Reply<B, E> = Result<Response<ResponseBody<B>>, E>;

/// A JSON-RPC error response written by the layer.
pub(crate) fn reply<B>(error: RpcError, id: Option<&Value>) -> Response<ResponseBody<B>> {
    error.to_response(id).map(ResponseBody::full)
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn too_large<B>() -> Response<ResponseBody<B>> {
    RpcError::new(
        RpcError::INVALID_REQUEST,
        "Request body too large",
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .to_response(None)
    .map(ResponseBody::full)
}

async fn inspect<S, B, ResBody>(
    shared: Arc<Shared>,
    inner: S,
    req: Request<B>,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let (mut parts, body) = req.into_parts();
    let cap = shared.config.max_request_bytes;
    if content_length(&parts.headers).is_some_and(|n| n > cap as u64) {
        return Ok(too_large());
    }
    let bytes = match Limited::new(body, cap).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Ok(too_large()),
        Err(e) => {
            tracing::debug!(error = %e, "could not read a request body");
            return Ok(reply(
                RpcError::invalid_request("Could not read the request body"),
                None,
            ));
        }
    };
    let envelope = match Envelope::parse(&bytes) {
        Ok(Some(envelope)) => envelope,
        Ok(None) => return forward(inner, parts, bytes, None).await,
        Err(e) => return Ok(reply(e, None)),
    };
    if envelope.is_legacy(&parts.headers) {
        parts
            .extensions
            .insert(TaskContext::refused(TaskRefused::LegacyEra));
        return forward(inner, parts, bytes, envelope.id.as_ref()).await;
    }
    if !is_owned_method(&envelope.method) {
        return forward(inner, parts, bytes, envelope.id.as_ref()).await;
    }
    let span = tracing::debug_span!("mcp_tasks", method = %envelope.method);
    async move {
        let started = Instant::now();
        let response = route(shared, inner, parts, bytes, envelope).await;
        if let Ok(r) = &response {
            tracing::debug!(
                status = r.status().as_u16(),
                elapsed_us = started.elapsed().as_micros() as u64,
                "answered"
            );
        }
        response
    }
    .instrument(span)
    .await
}

async fn route<S, B, ResBody>(
    shared: Arc<Shared>,
    inner: S,
    parts: http::request::Parts,
    bytes: Bytes,
    envelope: Envelope,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let id = envelope.id.as_ref();
    let declared = match envelope.validate(&parts.headers) {
        Ok(declared) => declared.0,
        Err(e) => return Ok(reply(e, id)),
    };
    match envelope.method.as_str() {
        "tasks/list" | "tasks/result" => Ok(reply(RpcError::method_not_found(), id)),
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            if !declared {
                return Ok(reply(RpcError::tasks_extension_required(), id));
            }
            let owner = shared.principal(&parts);
            let response = match task_method(&shared, &envelope, Scope::Owner(owner.as_ref())).await
            {
                Ok(result) => result_response(id, result),
                Err(e) => e.to_response(id),
            };
            Ok(response.map(ResponseBody::full))
        }
        "tools/call" => {
            let tool = envelope.param("name").and_then(Value::as_str).unwrap_or("");
            let arguments = envelope.param("arguments").unwrap_or(&Value::Null);
            let mode = shared.mode_for_call(tool, arguments);
            if let TaskMode::Auto { after } = mode
                && declared
            {
                let id = id.cloned();
                return crate::auto::call(shared, inner, parts, bytes, id, after).await;
            }
            if mode == TaskMode::Required && !declared {
                return Ok(reply(RpcError::tasks_extension_required(), id));
            }
            let context = match (mode, declared) {
                (TaskMode::Never, _) => TaskContext::refused(TaskRefused::ToolNeverTask),
                (_, false) => TaskContext::refused(TaskRefused::NotDeclared),
                _ => TaskContext::open(),
            };
            tools_call(&shared, inner, parts, bytes, id, context).await
        }
        "server/discover" => discover(&shared, inner, parts, bytes, id).await,
        "subscriptions/listen" => {
            crate::listen::listen(&shared, inner, parts, bytes, &envelope, declared).await
        }
        _ => forward(inner, parts, bytes, id).await,
    }
}

/// Hands a request the layer has read to the inner service, unchanged.
pub(crate) async fn forward<S, B, ResBody>(
    mut inner: S,
    parts: http::request::Parts,
    bytes: Bytes,
    id: Option<&Value>,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
{
    let response = inner
        .call(Request::from_parts(parts, RequestBody::buffered(bytes)))
        .await?;
    Ok(refuse_stray_task(response, id))
}

/// `tasks/get`, `tasks/update` and `tasks/cancel`, owner-scoped. A foreign task
/// answers exactly like a missing one, and no answer echoes the id.
async fn task_method(
    shared: &Shared,
    envelope: &Envelope,
    scope: Scope<'_>,
) -> Result<Map<String, Value>, RpcError> {
    let not_found = || RpcError::invalid_params("Failed to retrieve task: Task not found");
    let store_failed = |e: crate::StoreError| {
        tracing::error!(error = %e, "task store failed");
        RpcError::internal("Internal error")
    };
    let Some(text) = envelope.param("taskId").and_then(Value::as_str) else {
        return Err(RpcError::invalid_params("Missing taskId"));
    };
    let id: Option<TaskId> = text.parse().ok();
    let mut result = match envelope.method.as_str() {
        "tasks/get" => {
            let Some(id) = id else {
                return Err(not_found());
            };
            let task = shared
                .store
                .get(&id, scope, Timestamp::now())
                .await
                .map_err(store_failed)?
                .ok_or_else(not_found)?;
            let mut result = Map::with_capacity(12);
            result.insert("resultType".into(), Value::String("complete".into()));
            result.extend(task.into_detailed_json());
            result
        }
        method => {
            let transition = if method == "tasks/update" {
                let Some(responses) = envelope.param("inputResponses") else {
                    return Err(RpcError::invalid_params("Missing inputResponses"));
                };
                let Some(responses) = responses.as_object() else {
                    return Err(RpcError::invalid_params("inputResponses must be an object"));
                };
                Transition::Answer {
                    responses: responses.clone(),
                }
            } else {
                Transition::Cancel
            };
            let Some(id) = id else {
                return Err(not_found());
            };
            let updated = shared
                .update(&id, scope, &transition)
                .await
                .map_err(store_failed)?
                .ok_or_else(not_found)?;
            if let Err(TransitionError::Invalid(reason)) = updated.outcome {
                return Err(RpcError::invalid_params(reason));
            }
            let mut ack = Map::with_capacity(2);
            ack.insert("resultType".into(), Value::String("complete".into()));
            ack
        }
    };
    shared.result_meta(&mut result);
    Ok(result)
}

/// Forwards a `tools/call`; if the handler asked for a task, stores it and answers
/// with a `CreateTaskResult` in place of the inner response.
async fn tools_call<S, B, ResBody>(
    shared: &Arc<Shared>,
    mut inner: S,
    mut parts: http::request::Parts,
    bytes: Bytes,
    id: Option<&Value>,
    context: TaskContext,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let owner = shared.principal(&parts);
    parts.extensions.insert(context.clone());
    let response = inner
        .call(Request::from_parts(parts, RequestBody::buffered(bytes)))
        .await?;
    let (mut head, body) = response.into_parts();
    let spec_on_response = head.extensions.remove::<TaskSpec>();
    if !context.is_open() {
        if spec_on_response.is_some() {
            tracing::warn!("a tool answered with a task where none may be made; answering -32603");
            return Ok(reply(RpcError::internal("Internal error"), id));
        }
        return Ok(Response::from_parts(head, ResponseBody::inner(body)));
    }
    if sse::is_event_stream(&head.headers) {
        // The head came before the handler finished: stream its events through and
        // hold back only the response until the handler's choice is known.
        head.headers.remove(header::CONTENT_LENGTH);
        let decision = Decision {
            shared: shared.clone(),
            context,
            spec: spec_on_response,
            owner,
            id: id.cloned(),
        };
        let body = DecidingBody::new(Box::pin(body.map_err(Into::into)), decision);
        return Ok(Response::from_parts(
            head,
            ResponseBody::boxed(Box::pin(body)),
        ));
    }
    // A JSON answer is the handler's last word: read it before deciding.
    let read = match read_up_to(body, shared.config.max_response_bytes).await {
        Ok(read) => read,
        Err(e) => {
            let e: BoxError = e.into();
            tracing::error!(error = %e, "the inner service's response failed mid-stream");
            return Ok(reply(RpcError::internal("Internal error"), id));
        }
    };
    let Some(spec) = spec_on_response.or_else(|| context.take()) else {
        return Ok(Response::from_parts(head, read.into_body()));
    };
    drop(read);
    match shared.create_task(owner, spec).await {
        Ok(task) => {
            let result = shared.create_task_result(&task);
            Ok(result_response(id, result).map(ResponseBody::full))
        }
        Err(e) => Ok(reply(e, id)),
    }
}

/// Forwards `server/discover` and adds the extension under `capabilities.extensions`,
/// keeping every other field as the inner service wrote it.
async fn discover<S, B, ResBody>(
    shared: &Shared,
    mut inner: S,
    parts: http::request::Parts,
    bytes: Bytes,
    id: Option<&Value>,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let response = inner
        .call(Request::from_parts(parts, RequestBody::buffered(bytes)))
        .await?;
    let (mut head, body) = response.into_parts();
    if !head.status.is_success() {
        return Ok(Response::from_parts(head, ResponseBody::inner(body)));
    }
    let event_stream = sse::is_event_stream(&head.headers);
    let body = match read_up_to(body, shared.config.max_response_bytes).await {
        Ok(ReadOutcome::Complete(bytes)) => {
            match sse::rewrite_response(&bytes, event_stream, advertise) {
                Some(rewritten) => {
                    head.headers.remove(header::CONTENT_LENGTH);
                    ResponseBody::full(rewritten)
                }
                None => ResponseBody::full(bytes),
            }
        }
        Ok(overflow @ ReadOutcome::Overflow(..)) => overflow.into_body(),
        Err(e) => {
            let e: BoxError = e.into();
            tracing::error!(error = %e, "the inner service's discover response failed mid-stream");
            return Ok(reply(RpcError::internal("Internal error"), id));
        }
    };
    Ok(Response::from_parts(head, body))
}

fn advertise(message: &mut Value) {
    let Some(capabilities) = message
        .get_mut("result")
        .and_then(|r| r.get_mut("capabilities"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    capabilities.remove("tasks");
    let extensions = capabilities
        .entry("extensions")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(extensions) = extensions.as_object_mut() {
        extensions.insert(EXTENSION_ID.into(), Value::Object(Map::new()));
    }
}
