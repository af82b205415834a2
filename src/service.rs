//! [`TasksService`]: classifies each request, validates it, and hands it to its
//! route (or straight to the inner service).

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use http_body::Body;
use tower_service::Service;

use crate::body::{ReadError, RequestBody, ResponseBody, read_whole};
use crate::context::{TaskContext, TaskRefused};
use crate::engine::Engine;
use crate::error::BoxError;
use crate::future::ResponseFuture;
use crate::observe::{self, Outcome};
use crate::routes::decide::Era;
use crate::routes::tasks::TasksNow;
use crate::routes::{self, Call, Reply, forward, reply};
use crate::wire::{
    Envelope, HeaderRoute, MCP_METHOD, RpcError, is_owned_method, names_owned_method,
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
/// let worker = service.tasks(); // the same tasks as the layer's own `tasks()`
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
    /// [`TasksLayer::tasks`](crate::TasksLayer::tasks) on the layer that made it.
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
    /// let tasks = service.tasks();
    /// # let _ = tasks;
    /// ```
    pub fn tasks(&self) -> Tasks {
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
        if self.engine.config().enabled {
            let mut route = route_by_headers(req.method(), req.headers());
            if self.engine.config().task_tools {
                route = routes::task_tools::reroute(route, req.headers());
            }
            match route {
                HeaderRoute::Passthrough => {}
                HeaderRoute::DuplicateMethod => {
                    let refused = RpcError::header_mismatch("Duplicate Mcp-Method header");
                    let response = reply(refused, None);
                    return ResponseFuture::owned(Box::pin(std::future::ready(Ok(response))));
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
    let cap = engine.config().max_request_bytes;
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
/// modern `tasks/*` request goes to its route's header-only path, answered at once
/// when the store answers without waiting. Anything else the body turns out to be
/// goes on to [`dispatch`].
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
    let parts = match routes::tasks::tasks_now(&engine, parts, &bytes) {
        TasksNow::Answered(response) => return Ok(response),
        TasksNow::Later(later) => return Ok(Box::pin(later.answer(&engine)).await),
        TasksNow::Dispatch(parts) => parts,
    };
    Box::pin(dispatch(engine, inner, parts, bytes)).await
}

/// A request the layer has read: parsed, and routed by what its body holds.
async fn dispatch<S, B, ResBody>(
    engine: Arc<Engine>,
    inner: S,
    parts: http::request::Parts,
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
    if !parts.headers.contains_key(MCP_METHOD) && routes::legacy::is_answer(&bytes) {
        let owner = engine.principal(&parts);
        if let Some(answered) = routes::legacy::answer(&engine, owner, &bytes).await {
            return Ok(answered);
        }
    }
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
    if envelope.mixes_eras(&parts.headers) {
        return Ok(reply(RpcError::mixed_eras(), envelope.reply_id()));
    }
    if envelope.is_legacy(&parts.headers) {
        let call = Call {
            engine,
            inner,
            parts,
            bytes: &bytes,
            envelope,
            declared: false,
        };
        return Box::pin(routes::legacy::call(call)).await;
    }
    let listing_tools = engine.config().task_tools && envelope.method == "tools/list";
    if !is_owned_method(&envelope.method) && !listing_tools {
        if owned_header {
            let mismatch = RpcError::header_mismatch("Mcp-Method header does not match the body");
            return Ok(reply(mismatch, envelope.reply_id()));
        }
        return forward(inner, parts, bytes.clone(), envelope.reply_id()).await;
    }
    let span = routes::route_span(&envelope.method);
    // The route's future is made inside `observe::route`: made here, as an argument,
    // its place would stay in this future beside the one awaited.
    observe::route(span, || route(engine, inner, parts, &bytes, envelope)).await
}

/// The route of a request whose body names a method the layer owns; the checks
/// every route but `tasks/*` shares come first.
async fn route<'a, S, B, ResBody>(
    engine: Arc<Engine>,
    inner: S,
    parts: http::request::Parts,
    bytes: &'a Bytes,
    envelope: Envelope<'a>,
) -> Reply<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let mut call = Call {
        engine,
        inner,
        parts,
        bytes,
        envelope,
        declared: false,
    };
    if routes::tasks::is_tasks_method(&call.envelope.method) {
        // Only without a `tasks/*` `Mcp-Method`, or with the span recording.
        return Box::pin(routes::tasks::call(call)).await;
    }
    if let Err(e) = call.envelope.check_strict() {
        observe::outcome(Outcome::Error(e.code()));
        return Ok(e
            .to_response_raw(call.envelope.valid_raw_id())
            .map(ResponseBody::full));
    }
    call.declared = match call.envelope.validate(&call.parts.headers) {
        Ok(declared) => declared.0,
        Err(e) => return Ok(reply(e, call.id())),
    };
    if routes::task_tools::handles(&call.engine, &call.envelope.method, call.declared) {
        return Box::pin(routes::fallback::call(call)).await;
    }
    match &*call.envelope.method {
        "tools/call" => {
            let era = Era::Modern {
                declared: call.declared,
            };
            routes::tools_call::call(call, era).await
        }
        "server/discover" => routes::discover::call(call).await,
        "subscriptions/listen" => Box::pin(routes::listen::call(call)).await,
        _ => call.forward().await,
    }
}
