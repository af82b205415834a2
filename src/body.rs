//! Request and response bodies: the original stream where the layer does not touch
//! it, bytes where it had to read or write the message.
//!
//! The inner service receives [`RequestBody<B>`] for the client's body type `B`;
//! the client receives [`ResponseBody<B>`] for the inner service's body type `B`.
//! Both are plain [`http_body::Body`]s:
//!
//! ```
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::{BodyExt as _, Full};
//! use mcp_tasks::body::RequestBody;
//! use mcp_tasks::error::BoxError;
//! use mcp_tasks::{MemoryStore, TasksLayer};
//! use tower::{Layer as _, ServiceExt as _};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! // An inner service that answers with the body it received.
//! let echo = tower::service_fn(|request: Request<RequestBody<Full<Bytes>>>| async move {
//!     let body = request.into_body().collect().await?.to_bytes();
//!     Ok::<_, BoxError>(Response::new(Full::new(body)))
//! });
//! let service = TasksLayer::new(MemoryStore::new()).layer(echo);
//!
//! // A method the layer does not own: the body streams through unread.
//! let request = Request::post("/mcp")
//!     .header("mcp-method", "tools/list")
//!     .body(Full::from(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#))?;
//! let response = service.oneshot(request).await?;
//! let body = response.into_body().collect().await?.to_bytes();
//! assert_eq!(body, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::error::BoxError;

pin_project! {
    /// The body the inner service receives: the client's own stream on the fast
    /// path, or the bytes the layer already read. Its errors are the client body's
    /// own (`B::Error`).
    ///
    /// An inner service takes `Request<RequestBody<B>>`:
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::Request;
    /// use http_body_util::{BodyExt as _, Full};
    /// use mcp_tasks::body::RequestBody;
    ///
    /// async fn method_of(request: Request<RequestBody<Full<Bytes>>>) -> Option<String> {
    ///     let bytes = request.into_body().collect().await.ok()?.to_bytes();
    ///     let message: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    ///     Some(message["method"].as_str()?.to_owned())
    /// }
    /// # let _ = method_of;
    /// ```
    pub struct RequestBody<B> {
        #[pin]
        kind: RequestKind<B>,
    }
}

pin_project! {
    #[project = RequestKindProj]
    enum RequestKind<B> {
        Stream { #[pin] body: B },
        Buffered { bytes: Option<Bytes> },
    }
}

impl<B> RequestBody<B> {
    pub(crate) fn stream(body: B) -> Self {
        RequestBody {
            kind: RequestKind::Stream { body },
        }
    }

    pub(crate) fn buffered(bytes: Bytes) -> Self {
        RequestBody {
            kind: RequestKind::Buffered {
                bytes: (!bytes.is_empty()).then_some(bytes),
            },
        }
    }
}

impl<B> fmt::Debug for RequestBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            RequestKind::Stream { .. } => f.write_str("RequestBody::Stream"),
            RequestKind::Buffered { bytes } => f
                .debug_struct("RequestBody::Buffered")
                .field("len", &bytes.as_ref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for RequestBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            RequestKindProj::Stream { body } => body.poll_frame(cx),
            RequestKindProj::Buffered { bytes } => {
                Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            RequestKind::Stream { body } => body.is_end_stream(),
            RequestKind::Buffered { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            RequestKind::Stream { body } => body.size_hint(),
            RequestKind::Buffered { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

/// A boxed response body, for streams the layer produces itself.
pub(crate) type BoxBody = Pin<Box<dyn Body<Data = Bytes, Error = BoxError> + Send + 'static>>;

pin_project! {
    /// The body the client receives: the inner service's own stream, or what the
    /// layer wrote. Its errors are boxed ([`BoxError`]).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::{Request, Response};
    /// use http_body_util::{BodyExt as _, Full};
    /// use mcp_tasks::body::RequestBody;
    /// use mcp_tasks::error::BoxError;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use tower::{Layer as _, ServiceExt as _};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// // An inner service that answers with the body it received.
    /// let echo = tower::service_fn(|request: Request<RequestBody<Full<Bytes>>>| async move {
    ///     let body = request.into_body().collect().await?.to_bytes();
    ///     Ok::<_, BoxError>(Response::new(Full::new(body)))
    /// });
    /// let service = TasksLayer::new(MemoryStore::new()).layer(echo);
    ///
    /// // A method the layer does not own: the body streams through unread.
    /// let request = Request::post("/mcp")
    ///     .header("mcp-method", "tools/list")
    ///     .body(Full::from(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#))?;
    /// let response = service.oneshot(request).await?;
    /// let body: mcp_tasks::body::ResponseBody<Full<Bytes>> = response.into_body();
    /// assert_eq!(body.collect().await?.to_bytes().len(), 46);
    /// # Ok(())
    /// # }
    /// ```
    pub struct ResponseBody<B> {
        #[pin]
        kind: ResponseKind<B>,
    }
}

pin_project! {
    #[project = ResponseKindProj]
    enum ResponseKind<B> {
        Inner { #[pin] body: B },
        Full { bytes: Option<Bytes> },
        Prefixed { prefix: Option<Bytes>, rest: BoxBody },
        Boxed { body: BoxBody },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        ResponseBody {
            kind: ResponseKind::Inner { body },
        }
    }

    pub(crate) fn full(bytes: Bytes) -> Self {
        ResponseBody {
            kind: ResponseKind::Full {
                bytes: (!bytes.is_empty()).then_some(bytes),
            },
        }
    }

    /// Bytes already read from `rest`, followed by whatever `rest` still yields.
    pub(crate) fn prefixed<R>(prefix: Bytes, rest: Pin<Box<R>>) -> Self
    where
        R: Body<Data = Bytes> + Send + 'static,
        R::Error: Into<BoxError>,
    {
        use http_body_util::BodyExt as _;
        ResponseBody {
            kind: ResponseKind::Prefixed {
                prefix: (!prefix.is_empty()).then_some(prefix),
                rest: Box::pin(rest.map_err(Into::into)),
            },
        }
    }

    pub(crate) fn boxed(body: BoxBody) -> Self {
        ResponseBody {
            kind: ResponseKind::Boxed { body },
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            ResponseKind::Inner { .. } => "Inner",
            ResponseKind::Full { .. } => "Full",
            ResponseKind::Prefixed { .. } => "Prefixed",
            ResponseKind::Boxed { .. } => "Boxed",
        };
        write!(f, "ResponseBody::{kind}")
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().kind.project() {
            ResponseKindProj::Inner { body } => body.poll_frame(cx).map_err(Into::into),
            ResponseKindProj::Full { bytes } => {
                Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b))))
            }
            ResponseKindProj::Prefixed { prefix, rest } => match prefix.take() {
                Some(bytes) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
                None => rest.as_mut().poll_frame(cx),
            },
            ResponseKindProj::Boxed { body } => body.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            ResponseKind::Inner { body } => body.is_end_stream(),
            ResponseKind::Full { bytes } => bytes.is_none(),
            ResponseKind::Prefixed { prefix, rest } => prefix.is_none() && rest.is_end_stream(),
            ResponseKind::Boxed { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            ResponseKind::Inner { body } => body.size_hint(),
            ResponseKind::Full { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            ResponseKind::Prefixed { prefix, rest } => {
                let extra = prefix.as_ref().map_or(0, |b| b.len() as u64);
                let inner = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower() + extra);
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper + extra);
                }
                hint
            }
            ResponseKind::Boxed { body } => body.size_hint(),
        }
    }
}

/// How reading a body up to a cap ended.
pub(crate) enum ReadOutcome<B> {
    /// The whole body, within the cap.
    Complete(Bytes),
    /// The cap was hit: what was read, and the rest of the stream.
    Overflow(Bytes, Pin<Box<B>>),
}

impl<R> ReadOutcome<R>
where
    R: Body<Data = Bytes> + Send + 'static,
    R::Error: Into<BoxError>,
{
    /// The body to send on unchanged: the bytes read, then the rest of the stream.
    pub(crate) fn into_body<B>(self) -> ResponseBody<B> {
        match self {
            ReadOutcome::Complete(bytes) => ResponseBody::full(bytes),
            ReadOutcome::Overflow(prefix, rest) => ResponseBody::prefixed(prefix, rest),
        }
    }
}

/// Why a request body was not read whole.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// More than the cap arrived.
    TooLarge,
    /// The body itself failed.
    Failed(BoxError),
}

/// Reads a request body whole, failing once more than `cap` bytes arrived. A body
/// that comes in one frame is kept as it came: no copy and no allocation.
/// Trailers are dropped.
pub(crate) async fn read_whole<B>(body: B, cap: usize) -> Result<Bytes, ReadError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    use http_body_util::BodyExt as _;
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Failed(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        match first.take() {
            None if buf.is_empty() => first = Some(data),
            held => {
                if let Some(held) = held {
                    buf.extend_from_slice(&held);
                }
                buf.extend_from_slice(&data);
            }
        }
        if first.as_ref().map_or(buf.len(), Bytes::len) > cap {
            return Err(ReadError::TooLarge);
        }
    }
    Ok(first.unwrap_or_else(|| buf.freeze()))
}

/// Reads a body until it ends or more than `cap` bytes arrived. Trailers are dropped.
pub(crate) async fn read_up_to<B>(body: B, cap: usize) -> Result<ReadOutcome<B>, B::Error>
where
    B: Body<Data = Bytes>,
{
    use http_body_util::BodyExt as _;
    let mut body = Box::pin(body);
    let mut buf = bytes::BytesMut::new();
    let mut first: Option<Bytes> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if first.is_none() && buf.is_empty() {
            first = Some(data);
        } else {
            if let Some(f) = first.take() {
                buf.extend_from_slice(&f);
            }
            buf.extend_from_slice(&data);
        }
        let len = first.as_ref().map_or(buf.len(), Bytes::len);
        if len > cap {
            let read = first.take().unwrap_or_else(|| buf.split().freeze());
            return Ok(ReadOutcome::Overflow(read, body));
        }
    }
    Ok(ReadOutcome::Complete(first.unwrap_or_else(|| buf.freeze())))
}
