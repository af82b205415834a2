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
use crate::task::Scope;
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
    let (mut parts, body) = req.into_parts();
    let cap = engine.config.max_request_bytes;
    if content_length(&parts.headers).is_some_and(|n| n > cap as u64) {
        return Ok(too_large());
    }
    let bytes = match read_whole(body, cap).await {
        Ok(bytes) => bytes,
        Err(ReadError::TooLarge) => return Ok(too_large()),
        Err(ReadError::Failed(e)) => {
            tracing::debug!(error = %e, "could not read a request body");
            return Ok(reply(
                RpcError::invalid_request("Could not read the request body"),
                None,
            ));
        }
    };
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
            return routes::fallback::call(engine, inner, parts, bytes.clone(), &envelope).await;
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
    // Never an id or a principal here: the method, how it ended, and where the
    // time went.
    let span = tracing::debug_span!(
        "mcp_tasks",
        method = %envelope.method,
        outcome = tracing::field::Empty,
        error_code = tracing::field::Empty,
        store_us = tracing::field::Empty,
        elapsed_us = tracing::field::Empty,
    );
    observe::route(span, route(engine, inner, parts, &bytes, envelope)).await
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
        return Ok(answer_tasks(&engine, parts, &envelope).await);
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
        return routes::fallback::call(engine, inner, parts, bytes.clone(), &envelope).await;
    }
    match &*envelope.method {
        "tools/call" => {
            let tool = envelope.param_str("name");
            let tool = tool.as_deref().unwrap_or("");
            let arguments = envelope.param("arguments").unwrap_or(&Value::Null);
            let mode = engine.config.mode_for_call(tool, arguments);
            let draining = engine.node.is_draining();
            if draining && declared && mode.requires_extension() {
                return Ok(routes::shutting_down(id));
            }
            if let Some(after) = mode.auto_after()
                && declared
            {
                if !draining {
                    let id = id.cloned();
                    return routes::auto::call(engine, inner, parts, bytes.clone(), id, after)
                        .await;
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
            routes::listen::call(&engine, inner, parts, bytes.clone(), &envelope, declared).await
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
    let id = envelope.valid_raw_id();
    let error = |e: RpcError| {
        observe::outcome(Outcome::Error(e.code()));
        e.to_response_raw(id).map(ResponseBody::full)
    };
    if let Err(e) = check_media_types(&parts.headers) {
        return error(e);
    }
    if let Err(e) = envelope.check_strict() {
        return error(e);
    }
    if envelope.is_notification() {
        // A notification gets 202 and no body; nothing is looked up or changed.
        observe::outcome(Outcome::Result);
        let mut accepted = Response::new(ResponseBody::full(Bytes::new()));
        *accepted.status_mut() = StatusCode::ACCEPTED;
        return accepted;
    }
    let declared = match envelope.validate(&parts.headers) {
        Ok(declared) => declared.0,
        Err(e) => return error(e),
    };
    if matches!(&*envelope.method, "tasks/list" | "tasks/result") {
        return error(RpcError::method_not_found());
    }
    if !declared {
        return error(RpcError::tasks_extension_required());
    }
    let owner = engine.principal(&parts);
    if let Err(e) = engine.admit_owner(owner.as_ref()) {
        return error(e);
    }
    match routes::tasks::answer(engine, envelope, Scope::Owner(owner.as_ref())).await {
        Ok(answer) => {
            observe::outcome(Outcome::Result);
            // The request's header map, which has room already, carries the reply.
            answer
                .to_response(engine, id, parts.headers)
                .map(ResponseBody::full)
        }
        Err(e) => error(e),
    }
}
