//! [`TasksService`]: classifies each request, validates it, and hands it to its
//! route (or straight to the inner service).

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body::Body;
use serde_json::Value;
use tower_service::Service;

use crate::body::{ReadError, RequestBody, ResponseBody, read_whole};
use crate::config::TaskMode;
use crate::context::{TaskContext, TaskRefused};
use crate::engine::Engine;
use crate::error::BoxError;
use crate::future::ResponseFuture;
use crate::observe::{self, Outcome};
use crate::routes::{self, Reply, forward, reply};
use crate::task::{Principal, Scope};
use crate::wire::{
    Envelope, HeaderRoute, RpcError, check_media_types, is_owned_method, names_owned_method,
    route_by_headers,
};
use crate::worker::Tasks;

/// The service produced by [`TasksLayer`](crate::TasksLayer) around an MCP service.
///
/// The inner service receives [`RequestBody<B>`](crate::body::RequestBody): the client's
/// own stream on the fast path, or the bytes the layer had to read. Errors are the
/// inner service's own; the layer's failures are JSON-RPC error responses.
///
/// Made by [`Layer::layer`](tower_layer::Layer::layer) on a
/// [`TasksLayer`](crate::TasksLayer), or by `ServiceBuilder::layer`. Cloning it
/// clones the inner service and bumps one reference count.
///
/// ```
/// use std::convert::Infallible;
/// use bytes::Bytes;
/// use http::{Request, Response};
/// use http_body_util::Full;
/// use mcp_tasks::body::RequestBody;
/// use mcp_tasks::{MemoryStore, TasksLayer};
/// use tower::Layer as _;
///
/// let mcp = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
///     Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
/// });
/// let mut service = TasksLayer::new(MemoryStore::new()).layer(mcp);
/// let worker = service.handle(); // the same store as the layer's own handle
/// let inner = service.get_mut(); // the service inside
/// # let _ = (inner, worker);
/// ```
#[derive(Debug)]
pub struct TasksService<S> {
    inner: S,
    engine: Arc<Engine>,
}

impl<S: Clone> Clone for TasksService<S> {
    fn clone(&self) -> Self {
        TasksService {
            inner: self.inner.clone(),
            engine: self.engine.clone(),
        }
    }
}

impl<S> TasksService<S> {
    pub(crate) fn new(inner: S, engine: Arc<Engine>) -> Self {
        TasksService { inner, engine }
    }

    /// The inner service.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use bytes::Bytes;
    /// use http::{Request, Response};
    /// use http_body_util::Full;
    /// use mcp_tasks::body::RequestBody;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use tower::Layer as _;
    ///
    /// let mcp = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
    ///     Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    /// });
    /// let mut service = TasksLayer::new(MemoryStore::new()).layer(mcp);
    /// let inner = service.get_ref();
    /// # let _ = inner;
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use bytes::Bytes;
    /// use http::{Request, Response};
    /// use http_body_util::Full;
    /// use mcp_tasks::body::RequestBody;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use tower::Layer as _;
    ///
    /// let mcp = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
    ///     Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    /// });
    /// let mut service = TasksLayer::new(MemoryStore::new()).layer(mcp);
    /// let inner = service.get_mut();
    /// # let _ = inner;
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use bytes::Bytes;
    /// use http::{Request, Response};
    /// use http_body_util::Full;
    /// use mcp_tasks::body::RequestBody;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use tower::Layer as _;
    ///
    /// let mcp = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
    ///     Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    /// });
    /// let mut service = TasksLayer::new(MemoryStore::new()).layer(mcp);
    /// let mcp = service.into_inner(); // the service without the layer
    /// # let _ = mcp;
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The worker API over this service's store: the same as
    /// [`TasksLayer::handle`](crate::TasksLayer::handle) on the layer that made it.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use bytes::Bytes;
    /// use http::{Request, Response};
    /// use http_body_util::Full;
    /// use mcp_tasks::body::RequestBody;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use tower::Layer as _;
    ///
    /// let mcp = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
    ///     Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    /// });
    /// let mut service = TasksLayer::new(MemoryStore::new()).layer(mcp);
    /// let tasks = service.handle();
    /// # let _ = tasks;
    /// ```
    pub fn handle(&self) -> Tasks {
        Tasks::new(self.engine.clone())
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
        if self.engine.config.enabled {
            let mut route = route_by_headers(req.method(), req.headers());
            if self.engine.config.task_tools {
                route = routes::task_tools::reroute(route, req.headers());
            }
            match route {
                HeaderRoute::Passthrough => {}
                HeaderRoute::Legacy => {
                    req.extensions_mut()
                        .insert(TaskContext::refused(TaskRefused::LegacyEra));
                }
                HeaderRoute::Inspect => {
                    // The clone may not be ready; keep it and use the polled one.
                    let clone = self.inner.clone();
                    let ready = std::mem::replace(&mut self.inner, clone);
                    let engine = self.engine.clone();
                    return ResponseFuture::owned(Box::pin(inspect(engine, ready, req)));
                }
                HeaderRoute::Tasks => {
                    let clone = self.inner.clone();
                    let ready = std::mem::replace(&mut self.inner, clone);
                    let engine = self.engine.clone();
                    return ResponseFuture::owned(Box::pin(inspect_tasks(engine, ready, req)));
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

/// The request's body, read whole within the layer's cap; or the reply refusing it.
async fn read_request<B, ResBody>(
    engine: &Engine,
    headers: &HeaderMap,
    body: B,
) -> Result<Bytes, Response<ResponseBody<ResBody>>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let cap = engine.config.max_request_bytes;
    if content_length(headers).is_some_and(|n| n > cap as u64) {
        return Err(too_large());
    }
    match read_whole(body, cap).await {
        Ok(bytes) => Ok(bytes),
        Err(ReadError::TooLarge) => Err(too_large()),
        Err(ReadError::Failed(e)) => {
            tracing::debug!(error = %e, "could not read a request body");
            Err(reply(
                RpcError::invalid_request("Could not read the request body"),
                None,
            ))
        }
    }
}

/// A request whose body decides its route: read, then [`dispatch`]ed.
async fn inspect<S, B, ResBody>(
    engine: Arc<Engine>,
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
    let (parts, body) = req.into_parts();
    let bytes = match read_request(&engine, &parts.headers, body).await {
        Ok(bytes) => bytes,
        Err(refused) => return Ok(refused),
    };
    dispatch(engine, inner, parts, bytes).await
}

/// A request whose `Mcp-Method` names a `tasks/*` method. Its own future, a small
/// fraction of [`inspect`]'s (which holds every route): the body is read, and a
/// modern `tasks/*` request is answered here, at once when the store answers
/// without waiting. Anything else the body turns out to be goes on to [`dispatch`].
async fn inspect_tasks<S, B, ResBody>(
    engine: Arc<Engine>,
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
    let (parts, body) = req.into_parts();
    let bytes = match read_request(&engine, &parts.headers, body).await {
        Ok(bytes) => bytes,
        Err(refused) => return Ok(refused),
    };
    let parts = match tasks_now(&engine, parts, &bytes) {
        TasksNow::Answered(response) => return Ok(response),
        TasksNow::Later(later) => return Ok(Box::pin(later.answer(&engine)).await),
        TasksNow::Dispatch(parts) => parts,
    };
    Box::pin(dispatch(engine, inner, parts, bytes)).await
}

/// How far [`tasks_now`] got with a `tasks/*` request.
enum TasksNow<'a, B> {
    /// Answered (a result, or a refusal).
    Answered(Response<ResponseBody<B>>),
    /// Checked, waiting for the store.
    Later(TasksLater<'a>),
    /// Not a modern `tasks/*` request (or one whose span records): [`dispatch`]'s.
    Dispatch(http::request::Parts),
}

/// A checked `tasks/*` request whose answer needs the store's future.
struct TasksLater<'a> {
    envelope: Envelope<'a>,
    owner: Option<Principal>,
    headers: HeaderMap,
}

impl TasksLater<'_> {
    async fn answer<B>(self, engine: &Engine) -> Response<ResponseBody<B>> {
        let scope = Scope::Owner(self.owner.as_ref());
        let answer = routes::tasks::answer(engine, &self.envelope, scope).await;
        respond(engine, &self.envelope, self.headers, answer)
    }
}

/// A `tasks/*` request under a `tasks/*` `Mcp-Method`, as far as it goes without
/// awaiting: parsed, checked, and answered when the store answers at once. Exactly
/// what [`dispatch`] would do with it.
fn tasks_now<'a, B>(
    engine: &Engine,
    parts: http::request::Parts,
    bytes: &'a Bytes,
) -> TasksNow<'a, B> {
    let envelope = match Envelope::parse(bytes) {
        Ok(Some(envelope)) => envelope,
        // The header names a method the layer owns: it answers for the body.
        Ok(None) => {
            return TasksNow::Answered(reply(
                RpcError::invalid_request("Invalid Request: the body is not one JSON-RPC request"),
                None,
            ));
        }
        Err(e) => return TasksNow::Answered(reply(e, None)),
    };
    if envelope.is_legacy(&parts.headers)
        || !is_tasks_method(&envelope.method)
        || !route_span(&envelope.method).is_disabled()
    {
        return TasksNow::Dispatch(parts);
    }
    let owner = match check_tasks(engine, &parts, &envelope) {
        Ok(owner) => owner,
        Err(response) => return TasksNow::Answered(response),
    };
    let scope = Scope::Owner(owner.as_ref());
    match routes::tasks::answer_now(engine, &envelope, scope) {
        Some(answer) => TasksNow::Answered(respond(engine, &envelope, parts.headers, answer)),
        None => TasksNow::Later(TasksLater {
            envelope,
            owner,
            headers: parts.headers,
        }),
    }
}

/// The span of an owned route. Never an id or a principal here: the method, how it
/// ended, and where the time went.
fn route_span(method: &str) -> tracing::Span {
    tracing::debug_span!(
        "mcp_tasks",
        method = %method,
        outcome = tracing::field::Empty,
        error_code = tracing::field::Empty,
        store_us = tracing::field::Empty,
        elapsed_us = tracing::field::Empty,
    )
}

/// A request the layer has read: parsed, and routed by what its body holds.
async fn dispatch<S, B, ResBody>(
    engine: Arc<Engine>,
    inner: S,
    mut parts: http::request::Parts,
    bytes: Bytes,
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
    // Under an owned `Mcp-Method` the layer answers for the body: the inner
    // service never judges (and never words the refusal of) what claims a method
    // the layer owns.
    let owned_header = names_owned_method(&parts.headers);
    let envelope = match Envelope::parse(&bytes) {
        Ok(Some(envelope)) => envelope,
        Ok(None) if owned_header => {
            return Ok(reply(
                RpcError::invalid_request("Invalid Request: the body is not one JSON-RPC request"),
                None,
            ));
        }
        Ok(None) => return forward(inner, parts, bytes, None).await,
        Err(e) => return Ok(reply(e, None)),
    };
    if envelope.is_legacy(&parts.headers) {
        if routes::task_tools::handles(&engine, &envelope.method, false) {
            let fallback = routes::fallback::call(engine, inner, parts, bytes.clone(), &envelope);
            return Box::pin(fallback).await;
        }
        parts
            .extensions
            .insert(TaskContext::refused(TaskRefused::LegacyEra));
        return forward(inner, parts, bytes.clone(), envelope.id.as_ref()).await;
    }
    let listing_tools = engine.config.task_tools && envelope.method == "tools/list";
    if !is_owned_method(&envelope.method) && !listing_tools {
        if owned_header {
            let mismatch = RpcError::header_mismatch("Mcp-Method header does not match the body");
            return Ok(reply(mismatch, envelope.id.as_ref()));
        }
        return forward(inner, parts, bytes.clone(), envelope.id.as_ref()).await;
    }
    let span = route_span(&envelope.method);
    // The route's future is made inside `observe::route`: made here, as an argument,
    // its place would stay in this future beside the one awaited.
    observe::route(span, || route(engine, inner, parts, &bytes, envelope)).await
}

async fn route<S, B, ResBody>(
    engine: Arc<Engine>,
    inner: S,
    parts: http::request::Parts,
    bytes: &Bytes,
    envelope: Envelope<'_>,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    if is_tasks_method(&envelope.method) {
        // Only without a `tasks/*` `Mcp-Method`, or with the span recording.
        return Ok(Box::pin(answer_tasks(&engine, parts, &envelope)).await);
    }
    if let Err(e) = envelope.check_strict() {
        observe::outcome(Outcome::Error(e.code()));
        return Ok(e
            .to_response_raw(envelope.valid_raw_id())
            .map(ResponseBody::full));
    }
    let id = envelope.id.as_ref();
    let declared = match envelope.validate(&parts.headers) {
        Ok(declared) => declared.0,
        Err(e) => return Ok(reply(e, id)),
    };
    if routes::task_tools::handles(&engine, &envelope.method, declared) {
        let fallback = routes::fallback::call(engine, inner, parts, bytes.clone(), &envelope);
        return Box::pin(fallback).await;
    }
    match &*envelope.method {
        "tools/call" => {
            let tool = envelope.param_str("name");
            let tool = tool.as_deref().unwrap_or("");
            // The arguments are decoded only for a policy that reads them.
            let mode = match engine.config.task_policy {
                Some(_) => {
                    let arguments = envelope.param("arguments").unwrap_or(&Value::Null);
                    engine.config.mode_for_call(tool, arguments)
                }
                None => engine.config.mode_for(tool),
            };
            let draining = engine.node.is_draining();
            if draining && declared && mode.requires_extension() {
                return Ok(routes::shutting_down(id));
            }
            if let Some(after) = mode.auto_after()
                && declared
            {
                if !draining {
                    let id = id.cloned();
                    let auto = routes::auto::call(engine, inner, parts, bytes.clone(), id, after);
                    return Box::pin(auto).await;
                }
                observe::task_refused("shutting_down");
            }
            if mode.requires_extension() && !declared {
                observe::task_refused("extension_required");
                return Ok(reply(RpcError::tasks_extension_required(), id));
            }
            if mode == TaskMode::Required
                && let Err(e) = engine.refuse_anonymous(engine.principal(&parts).as_ref())
            {
                return Ok(reply(e, id));
            }
            let context = match (mode, declared) {
                (TaskMode::Never, _) => TaskContext::refused(TaskRefused::ToolNeverTask),
                (_, false) => TaskContext::refused(TaskRefused::NotDeclared),
                _ if draining => TaskContext::refused(TaskRefused::ShuttingDown),
                _ => TaskContext::open(),
            };
            routes::tools_call::call(&engine, inner, parts, bytes.clone(), id, context).await
        }
        "server/discover" => routes::discover::call(&engine, inner, parts, bytes.clone(), id).await,
        "subscriptions/listen" => {
            let listen =
                routes::listen::call(&engine, inner, parts, bytes.clone(), &envelope, declared);
            Box::pin(listen).await
        }
        _ => forward(inner, parts, bytes.clone(), id).await,
    }
}

/// The `tasks/*` methods the layer answers itself, never reaching the inner service.
fn is_tasks_method(method: &str) -> bool {
    matches!(
        method,
        "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/list" | "tasks/result"
    )
}

/// `tasks/get`, `tasks/update`, `tasks/cancel` (and the removed `tasks/list`,
/// `tasks/result`): the media types, the envelope, the notification form, then the
/// specification's validation order. Replies echo the id exactly as written.
async fn answer_tasks<B>(
    engine: &Engine,
    parts: http::request::Parts,
    envelope: &Envelope<'_>,
) -> Response<ResponseBody<B>> {
    let owner = match check_tasks(engine, &parts, envelope) {
        Ok(owner) => owner,
        Err(response) => return response,
    };
    let answer = routes::tasks::answer(engine, envelope, Scope::Owner(owner.as_ref())).await;
    respond(engine, envelope, parts.headers, answer)
}

/// The checks of a `tasks/*` request before the store is asked, in the
/// specification's order; the caller's principal when they pass, the reply (an
/// error, or 202 to a notification) when they do not.
#[allow(clippy::result_large_err)] // made once per request and answered at once
fn check_tasks<B>(
    engine: &Engine,
    parts: &http::request::Parts,
    envelope: &Envelope<'_>,
) -> Result<Option<Principal>, Response<ResponseBody<B>>> {
    let id = envelope.valid_raw_id();
    let error = |e: RpcError| {
        observe::outcome(Outcome::Error(e.code()));
        e.to_response_raw(id).map(ResponseBody::full)
    };
    check_media_types(&parts.headers).map_err(error)?;
    envelope.check_strict().map_err(error)?;
    if envelope.is_notification() {
        // A notification gets 202 and no body; nothing is looked up or changed.
        observe::outcome(Outcome::Result);
        let mut accepted = Response::new(ResponseBody::full(Bytes::new()));
        *accepted.status_mut() = StatusCode::ACCEPTED;
        return Err(accepted);
    }
    let declared = envelope.validate(&parts.headers).map_err(error)?.0;
    if matches!(&*envelope.method, "tasks/list" | "tasks/result") {
        return Err(error(RpcError::method_not_found()));
    }
    if !declared {
        return Err(error(RpcError::tasks_extension_required()));
    }
    let owner = engine.principal(parts);
    engine.admit_owner(owner.as_ref()).map_err(error)?;
    Ok(owner)
}

/// The reply to a checked `tasks/*` request, in `headers` (the request's map,
/// which has room already).
fn respond<B>(
    engine: &Engine,
    envelope: &Envelope<'_>,
    headers: HeaderMap,
    answer: Result<routes::tasks::Answer, RpcError>,
) -> Response<ResponseBody<B>> {
    let id = envelope.valid_raw_id();
    match answer {
        Ok(answer) => {
            observe::outcome(Outcome::Result);
            answer
                .to_response(engine, id, headers)
                .map(ResponseBody::full)
        }
        Err(e) => {
            observe::outcome(Outcome::Error(e.code()));
            e.to_response_raw(id).map(ResponseBody::full)
        }
    }
}
