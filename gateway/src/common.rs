//! The process around the gateway's service: the demo bearer-token principal, the
//! store `MCP_STORE` names, the worker lease, the shutdown signal (SIGTERM or
//! Ctrl-C), and a small hyper server that mounts the service at `/mcp`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use mcp_tasks::error::BoxError;
use mcp_tasks::store::TaskStore;
use mcp_tasks::{MemoryStore, Principal, TasksLayerBuilder};
use tokio::net::TcpListener;
use tower::{Service, ServiceExt as _};

/// Reads `Authorization: Bearer <name>` and makes `<name>` the request's
/// principal. No header (or another scheme) leaves the request anonymous.
///
/// A demo only: it trusts whatever name the client sends.
pub(crate) fn bearer_principal<B>(mut req: Request<B>) -> Request<B> {
    let name = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(Principal::from);
    if let Some(principal) = name {
        req.extensions_mut().insert(principal);
    }
    req
}

/// Logs to stderr, filtered by `RUST_LOG` or else `default_filter`.
pub(crate) fn init_tracing(default_filter: &str) {
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// The store `MCP_STORE` names: unset or `memory`, a [`MemoryStore`]; a
/// `postgres://` URL, a migrated and listening `PostgresStore` (feature `postgres`)
/// on the table `MCP_STORE_TABLE` if set; a `redis://` URL, a `RedisStore` with its
/// change feed (feature `redis`) under the key prefix `MCP_STORE_PREFIX` if set.
/// Two processes on one PostgreSQL or Redis serve the same tasks.
pub(crate) async fn store_from_env() -> Result<Arc<dyn TaskStore>, Box<dyn std::error::Error>> {
    let url = std::env::var("MCP_STORE").unwrap_or_default();
    if url.is_empty() || url == "memory" {
        return Ok(Arc::new(MemoryStore::new()));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let mut store = mcp_tasks::PostgresStore::connect(&url).await?;
            if let Ok(table) = std::env::var("MCP_STORE_TABLE") {
                store = store.with_table(&table)?;
            }
            store.migrate().await?;
            store.listen().await?;
            return Ok(Arc::new(store));
        }
        #[cfg(not(feature = "postgres"))]
        return Err(
            "MCP_STORE names PostgreSQL: build the gateway with --features postgres".into(),
        );
    }
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        #[cfg(feature = "redis")]
        {
            let mut store = mcp_tasks::RedisStore::connect(url.as_str()).await?;
            if let Ok(prefix) = std::env::var("MCP_STORE_PREFIX") {
                store = store.with_prefix(prefix);
            }
            store.listen().await?;
            return Ok(Arc::new(store));
        }
        #[cfg(not(feature = "redis"))]
        return Err("MCP_STORE names Redis: build the gateway with --features redis".into());
    }
    Err(
        format!("MCP_STORE must be memory, a postgres:// URL or a redis:// URL, not {url:?}")
            .into(),
    )
}

/// The worker lease `MCP_LEASE_MS` sets (milliseconds), or the builder's default:
/// on a shared store, how long after a node stops its unfinished tasks are failed
/// by another (at most 1.25 × the lease); and the node id `MCP_NODE_ID` names (a
/// host name, say), or a random one.
pub(crate) fn with_lease_from_env(mut builder: TasksLayerBuilder) -> TasksLayerBuilder {
    if let Ok(node) = std::env::var("MCP_NODE_ID") {
        let node = mcp_tasks::store::NodeId::new(node)
            .expect("MCP_NODE_ID must be 1 to 128 characters without NUL");
        builder = builder.with_node_id(node);
    }
    match std::env::var("MCP_LEASE_MS") {
        Ok(ms) => {
            let ms: u64 = ms
                .parse()
                .expect("MCP_LEASE_MS must be a number of milliseconds");
            builder.with_worker_lease(std::time::Duration::from_millis(ms))
        }
        Err(_) => builder,
    }
}

/// `MCP_TASK_TOOLS=1` turns on the task tools: clients without the tasks extension
/// get `task_status`, `task_answer` and `task_cancel` and can follow long calls too.
pub(crate) fn with_task_tools_from_env(builder: TasksLayerBuilder) -> TasksLayerBuilder {
    match std::env::var("MCP_TASK_TOOLS").is_ok_and(|v| v == "1") {
        true => builder.with_task_tools(),
        false => builder,
    }
}

/// A future that resolves on SIGTERM (what a deploy, `docker stop` or Kubernetes
/// sends) or Ctrl-C; on a platform without SIGTERM, on Ctrl-C alone. The SIGTERM
/// handler is installed by this call, not when the future is first polled: call it
/// before printing the listening address, so that a SIGTERM right after that line
/// drains the server instead of killing it.
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

/// The address to listen on: `MCP_ADDR`, or `default`.
pub(crate) fn listen_addr(default: &str) -> SocketAddr {
    std::env::var("MCP_ADDR")
        .unwrap_or_else(|_| default.to_owned())
        .parse()
        .expect("MCP_ADDR must be an address such as 127.0.0.1:3000")
}

type GatewayBody = UnsyncBoxBody<Bytes, BoxError>;

fn not_found() -> Response<GatewayBody> {
    let mut response = Response::new(
        Full::new(Bytes::from_static(b"not found"))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// Serves `service` at `/mcp` on `listener` until `shutdown` resolves, one task per
/// connection, with `TCP_NODELAY` on every accepted socket (SSE replies go out in
/// small writes).
pub(crate) async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    shutdown: impl Future<Output = ()>,
) where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let app = tower::service_fn(move |req: Request<Incoming>| {
        let service = service.clone();
        async move {
            if req.uri().path() != "/mcp" {
                return Ok::<_, Infallible>(not_found());
            }
            let response = service.oneshot(req).await?;
            Ok(response.map(|b| b.map_err(Into::into).boxed_unsync()))
        }
    });
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    eprintln!("accept failed: {e}");
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
