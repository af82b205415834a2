//! The HTTP server around the gateway's service: `/mcp`, the probes `/healthz`
//! and `/readyz`, Prometheus `/metrics`; and the shutdown signal that starts a
//! drain.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt as _;

use crate::metrics::Metrics;
use crate::{GatewayService, ServiceBody};

/// A body the server sends.
type Body = ServiceBody;

/// Whether the process is still ready for new calls: true until a drain begins.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    draining: AtomicBool,
}

impl Readiness {
    /// From now on `/readyz` answers 503.
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    fn is_ready(&self) -> bool {
        !self.draining.load(Ordering::Acquire)
    }
}

/// A short plain-text answer.
fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The answer to a request outside `/mcp`.
fn probe(path: &str, method: &Method, readiness: &Readiness, metrics: &Metrics) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if readiness.is_ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n"),
        "/metrics" => match metrics.render() {
            Some(rendered) => {
                let mut response = text(StatusCode::OK, rendered);
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                response
            }
            None => text(StatusCode::NOT_FOUND, "this build has no metrics\n"),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// Serves `service` at `/mcp` and the probes beside it on `listener` until
/// `shutdown` resolves (it runs the drain: the server keeps answering meanwhile),
/// one task per connection, with `TCP_NODELAY` on every accepted socket (SSE
/// replies go out in small writes).
pub(crate) async fn serve(
    listener: TcpListener,
    service: GatewayService,
    readiness: Arc<Readiness>,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) {
    let app = tower::service_fn(move |request: Request<Incoming>| {
        let service = service.clone();
        let readiness = readiness.clone();
        let metrics = metrics.clone();
        async move {
            if request.uri().path() != "/mcp" {
                return Ok::<_, Infallible>(probe(
                    request.uri().path(),
                    request.method(),
                    &readiness,
                    &metrics,
                ));
            }
            service.oneshot(request).await
        }
    });
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
            let _ = connection.await;
        });
    }
}

/// A future that resolves on SIGTERM (what a deploy, `docker stop` or Kubernetes
/// sends) or Ctrl-C; on a platform without SIGTERM, on Ctrl-C alone. The SIGTERM
/// handler is installed by this call, not when the future is first polled: call it
/// before printing the listening address, so that a SIGTERM right after that line
/// drains the gateway instead of killing it.
pub(crate) fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        #[cfg(unix)]
        if let Some(mut term) = term {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
