//! A `tools/call` answered over SSE while it may still become a task: the inner
//! events reach the client as they are written, and only the response waits for
//! the handler's choice.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::body::RequestBody;
use mcp_tasks::{MemoryStore, TaskContext, TaskSpec, TasksLayer};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::{Layer as _, ServiceExt as _};

/// An SSE body the test writes event by event.
struct Written(mpsc::UnboundedReceiver<Bytes>);

impl Body for Written {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

fn event(message: Value) -> Bytes {
    Bytes::from(format!("data: {message}\n\n"))
}

type Slot = Arc<Mutex<Option<mpsc::UnboundedReceiver<Bytes>>>>;

/// A layered inner service whose `tools/call` answers with the SSE body the test
/// writes; the tool `task` asks for a task at once.
fn service(
    body: Slot,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<impl Body<Data = Bytes, Error = mcp_tasks::error::BoxError>>,
    Error = Infallible,
> {
    let inner = tower::service_fn(move |req: Request<RequestBody<Full<Bytes>>>| {
        let body = body.clone();
        async move {
            let wants_task = req.headers()["mcp-name"] == "task";
            if wants_task {
                let ctx = TaskContext::from_extensions(req.extensions()).expect("a context");
                ctx.create(TaskSpec::new()).expect("a task may be made");
            }
            let rx = body.lock().unwrap().take().expect("one call per test");
            let mut response = Response::new(Written(rx));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/event-stream"),
            );
            Ok::<_, Infallible>(response)
        }
    });
    let layer = TasksLayer::builder(MemoryStore::new())
        .without_janitor()
        .build()
        .unwrap();
    layer.layer(inner)
}

fn call(tool: &str) -> Request<Full<Bytes>> {
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": tool, "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}}});
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

async fn next_chunk<B: Body<Data = Bytes> + Unpin>(body: &mut B) -> Option<Bytes>
where
    B::Error: std::fmt::Debug,
{
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("the client hears from the stream in time")?;
    Some(frame.unwrap().into_data().unwrap())
}

const PROGRESS: &str = "notifications/progress";

#[tokio::test]
async fn progress_reaches_the_client_before_a_synchronous_answer() {
    let (tx, rx) = mpsc::unbounded_channel();
    let service = service(Arc::new(Mutex::new(Some(rx))));
    let response = service.oneshot(call("sync")).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();

    let progress = event(json!({"jsonrpc": "2.0", "method": PROGRESS, "params": {"progress": 1}}));
    tx.send(progress.clone()).unwrap();
    // The tool has not answered yet, and the client already has its progress.
    assert_eq!(next_chunk(&mut body).await.unwrap(), progress);

    let answer = event(
        json!({"jsonrpc": "2.0", "id": 5, "result": {"content": [], "resultType": "complete"}}),
    );
    // An answer split across writes is still held until whole, then sent unchanged.
    let (head, tail) = answer.split_at(10);
    tx.send(Bytes::copy_from_slice(head)).unwrap();
    tx.send(Bytes::copy_from_slice(tail)).unwrap();
    drop(tx);
    let mut rest = Vec::new();
    while let Some(chunk) = next_chunk(&mut body).await {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, answer.to_vec());
}

#[tokio::test]
async fn a_task_replaces_only_the_response_event() {
    let (tx, rx) = mpsc::unbounded_channel();
    let service = service(Arc::new(Mutex::new(Some(rx))));
    let response = service.oneshot(call("task")).await.unwrap();
    let mut body = response.into_body();

    let progress = event(json!({"jsonrpc": "2.0", "method": PROGRESS, "params": {"progress": 1}}));
    tx.send(progress.clone()).unwrap();
    assert_eq!(next_chunk(&mut body).await.unwrap(), progress);

    tx.send(event(
        json!({"jsonrpc": "2.0", "id": 5, "result": {"content": []}}),
    ))
    .unwrap();
    let handle = next_chunk(&mut body).await.unwrap();
    let text = std::str::from_utf8(&handle).unwrap();
    let message: Value = serde_json::from_str(
        text.strip_prefix("data: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .expect("one data line"),
    )
    .unwrap();
    assert_eq!(message["id"], 5);
    assert_eq!(message["result"]["resultType"], "task");
    assert_eq!(message["result"]["status"], "working");
    // Whatever the inner service still writes belonged to the replaced answer.
    let _ = tx.send(event(
        json!({"jsonrpc": "2.0", "method": PROGRESS, "params": {"progress": 2}}),
    ));
    assert!(
        next_chunk(&mut body).await.is_none(),
        "the stream ends with the handle"
    );
}
