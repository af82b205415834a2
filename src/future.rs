//! The response future of [`TasksService`](crate::TasksService).
//!
//! ```
//! use std::convert::Infallible;
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use mcp_tasks::body::RequestBody;
//! use mcp_tasks::future::ResponseFuture;
//! use mcp_tasks::{MemoryStore, TasksLayer};
//! use tower::{Layer as _, Service as _, ServiceExt as _};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mcp = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
//!     Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
//! });
//! let mut service = TasksLayer::new(MemoryStore::new()).layer(mcp);
//! let request = Request::post("/mcp").header("mcp-method", "ping").body(Full::default())?;
//! let future: ResponseFuture<_, _, _> = service.ready().await?.call(request);
//! assert_eq!(future.await?.status(), 200);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;

use crate::body::ResponseBody;
use crate::routes::refuse_stray_task;
use crate::store::BoxFuture;

pin_project! {
    /// Either the inner service's own future (traffic the layer does not touch,
    /// unboxed) or the layer's boxed work for the routes it owns. It resolves to
    /// `Response<ResponseBody<B>>` with the inner service's error type `E`.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use bytes::Bytes;
    /// use http::{Request, Response};
    /// use http_body_util::Full;
    /// use mcp_tasks::body::RequestBody;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use tower::{Layer as _, Service as _, ServiceExt as _};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mcp = tower::service_fn(|_: Request<RequestBody<Full<Bytes>>>| async {
    ///     Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    /// });
    /// let mut service = TasksLayer::new(MemoryStore::new()).layer(mcp);
    /// // `tasks/list` was removed from the specification: the layer answers 404 itself.
    /// let request = Request::post("/mcp")
    ///     .header("content-type", "application/json")
    ///     .header("mcp-protocol-version", "2026-07-28")
    ///     .header("mcp-method", "tasks/list")
    ///     .body(Full::from(r#"{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{"_meta":{
    ///         "io.modelcontextprotocol/protocolVersion":"2026-07-28",
    ///         "io.modelcontextprotocol/clientCapabilities":{}}}}"#))?;
    /// let response = service.ready().await?.call(request).await?;
    /// assert_eq!(response.status(), 404);
    /// # Ok(())
    /// # }
    /// ```
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        Passthrough { #[pin] future: F },
        Owned { future: BoxFuture<'static, Result<Response<ResponseBody<B>>, E>> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn passthrough(future: F) -> Self {
        ResponseFuture {
            kind: Kind::Passthrough { future },
        }
    }

    pub(crate) fn owned(future: BoxFuture<'static, Result<Response<ResponseBody<B>>, E>>) -> Self {
        ResponseFuture {
            kind: Kind::Owned { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Passthrough { future } => {
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(refuse_stray_task(response, None)))
            }
            KindProj::Owned { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Passthrough { .. } => f.write_str("ResponseFuture::Passthrough"),
            Kind::Owned { .. } => f.write_str("ResponseFuture::Owned"),
        }
    }
}
