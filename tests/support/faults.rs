//! The nodes of the fault tests: a layer over one store instance, served over
//! HTTP, in front of an inner service with three tools that report what happens to
//! them:
//!
//! - `ask` becomes a task whose worker asks `go` (a confirmation), waits for the
//!   answer, then completes with it;
//! - `slow` (`TaskMode::Auto`) never answers; its call reports when it is dropped;
//! - `later` (`TaskMode::Auto`) answers `late` once the node's `release` is set.
//!
//! Any other request is answered 404 / -32601, so listen streams carry only the
//! layer's task notifications.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::body::RequestBody;
use mcp_tasks::error::StoreError;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::store::{BoxFuture, LeaseId, LeaseState, LeaseStore, Renewal, Renewed, TaskStore};
use mcp_tasks::{TaskContext, TaskMode, TaskSpec, TasksLayer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::http::{Client, TestServer, bearer, serve_layered};
use super::wait::SendOnDrop;

/// The principal of every request of the fault tests.
pub(crate) const ALICE: Option<&str> = Some("alice");

/// What a node's tools report.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// The worker of this task asked its question and waits for the answer.
    Waiting(String),
    /// The worker of this task got these answers.
    Answered(String, Value),
    /// A `slow` call was dropped.
    Dropped,
}

/// One node: a layer over one store instance, served over HTTP.
#[derive(Debug)]
pub(crate) struct Node {
    /// What its tools report.
    pub(crate) events: mpsc::UnboundedReceiver<Event>,
    /// Set to let every `later` call answer.
    pub(crate) release: watch::Sender<bool>,
    http: TestServer,
}

impl Node {
    /// A node over `store`, each store call bounded by `store_timeout`.
    pub(crate) async fn start(store: Arc<dyn TaskStore>, store_timeout: Duration) -> Node {
        let auto = TaskMode::Auto {
            after: Duration::from_millis(20),
        };
        let layer = TasksLayer::builder(store)
            .with_anonymous_tasks()
            .with_principal(|parts| bearer(&parts.headers))
            .without_janitor()
            .with_store_timeout(store_timeout)
            .with_tool_mode("slow", auto)
            .with_tool_mode("later", auto)
            .build()
            .expect("valid layer settings");
        let (events, received) = mpsc::unbounded_channel();
        let (release, released) = watch::channel(false);
        let inner = tower::service_fn(
            move |request: Request<RequestBody<hyper::body::Incoming>>| {
                let events = events.clone();
                let released = released.clone();
                async move { Ok::<_, Infallible>(answer(request, events, released).await) }
            },
        );
        let http = serve_layered(&layer, inner).await;
        Node {
            events: received,
            release,
            http,
        }
    }

    /// A client of this node.
    pub(crate) fn client(&self) -> Client {
        Client::new(self.http.addr)
    }
}

async fn answer(
    request: Request<RequestBody<hyper::body::Incoming>>,
    events: mpsc::UnboundedSender<Event>,
    mut released: watch::Receiver<bool>,
) -> Response<Full<Bytes>> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (method, tool) = (header("mcp-method"), header("mcp-name"));
    let context = TaskContext::from_extensions(request.extensions()).cloned();
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let id = body
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .map_or(Value::Null, |m| m["id"].clone());
    let done = json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}});
    match (method.as_str(), tool.as_str()) {
        ("tools/call", "ask") => {
            let spec = TaskSpec::new().with_work(move |task| async move {
                let id = task.id().to_string();
                let question = InputRequest::confirm("Go on?", "ok");
                if task
                    .require_input(InputRequests::new().with("go", question))
                    .await
                    .is_err()
                {
                    return;
                }
                let _ = events.send(Event::Waiting(id.clone()));
                let Ok(answers) = task.wait_for_input().await else {
                    return;
                };
                let answers = Value::Object(answers.into_json());
                let _ = events.send(Event::Answered(id, answers.clone()));
                let text = json!({"content": [{"type": "text", "text": answers.to_string()}]});
                let _ = task.complete(text).await;
            });
            if let Some(context) = context {
                let _ = context.create(spec);
            }
            json_response(StatusCode::OK, &done)
        }
        ("tools/call", "slow") => {
            let _dropped = SendOnDrop::new(events, Event::Dropped);
            std::future::pending::<()>().await;
            unreachable!("a pending future never ends")
        }
        ("tools/call", "later") => {
            let _ = released.wait_for(|go| *go).await;
            let late = json!({"jsonrpc": "2.0", "id": id,
                "result": {"content": [{"type": "text", "text": "late"}]}});
            json_response(StatusCode::OK, &late)
        }
        _ => {
            let missing = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}});
            json_response(StatusCode::NOT_FOUND, &missing)
        }
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Leases that are never stored, as when a node's lease pool cannot open a
/// connection while its task store works: every call fails.
#[derive(Debug)]
pub(crate) struct NoLeases;

fn no_connection<T: Send + 'static>() -> mcp_tasks::store::BoxFuture<'static, Result<T, StoreError>>
{
    Box::pin(std::future::ready(Err(StoreError::backend(
        "the lease pool cannot open a connection",
    ))))
}

impl LeaseStore for NoLeases {
    fn renew<'a>(&'a self, _: Renewal<'a>) -> BoxFuture<'a, Result<Renewed, StoreError>> {
        no_connection()
    }

    fn leases(&self) -> BoxFuture<'_, Result<Vec<LeaseState>, StoreError>> {
        no_connection()
    }

    fn claim<'a>(
        &'a self,
        _: &'a LeaseId,
        _: u64,
    ) -> BoxFuture<'a, Result<Option<Vec<mcp_tasks::TaskId>>, StoreError>> {
        no_connection()
    }

    fn forget<'a>(&'a self, _: &'a LeaseId) -> BoxFuture<'a, Result<(), StoreError>> {
        no_connection()
    }
}
