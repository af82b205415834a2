//! A `tools/call` answered over SSE while it may still become a task: the inner
//! events reach the client as they are written, and only the response waits for
//! the handler's choice.

mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::body::RequestBody;
use mcp_tasks::{MemoryStore, TaskContext, TaskSpec, TasksLayer};
use serde_json::{Value, json};
use support::http::Frames;
use support::requests::Call;
use support::sse::{self, Event};
use support::wait::within;
use tokio::sync::mpsc;
use tower::{Layer as _, ServiceExt as _};

fn event(message: Value) -> Bytes {
    sse::event(&message)
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
            // The test writes the body event by event; nobody counts the chunks.
            let mut response = Response::new(Frames::fed(rx, mpsc::unbounded_channel().0));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/event-stream"),
            );
            Ok::<_, Infallible>(response)
        }
    });
    let layer = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .without_janitor()
        .build()
        .unwrap();
    layer.layer(inner)
}

fn call(tool: &str) -> Request<Full<Bytes>> {
    Call::new("tools/call")
        .id(json!(5))
        .params(json!({"name": tool, "arguments": {}}))
        .without_header("accept")
        .build()
}

async fn next_chunk<B: Body<Data = Bytes> + Unpin>(body: &mut B) -> Option<Bytes>
where
    B::Error: std::fmt::Debug,
{
    let frame = within("the client hears from the stream", body.frame()).await?;
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

/// The harness's own SSE parser (the one every test reads streams with) reads
/// events ended by LF, CRLF or a lone CR, however the bytes are cut.
#[test]
fn the_test_sse_parser_reads_every_line_ending() {
    let expected = |data: &str| Event {
        data: Some(data.to_owned()),
        data_lines: data.split('\n').count(),
        comments: vec!["note".to_owned()],
    };
    for (stream, data) in [
        (&b": note\ndata: a\n\n"[..], "a"),
        (b": note\r\ndata: a\r\n\r\n", "a"),
        (b": note\rdata: a\r\r", "a"),
        (b": note\r\ndata:a\rdata: b\n\r\n", "a\nb"),
    ] {
        for cut in 0..=stream.len() {
            let mut reader = sse::EventReader::new();
            reader.push(&stream[..cut]);
            let mut events: Vec<Event> = std::iter::from_fn(|| reader.next_event()).collect();
            reader.push(&stream[cut..]);
            events.extend(std::iter::from_fn(|| reader.next_event()));
            assert_eq!(events, [expected(data)], "{stream:?} cut at {cut}");
        }
        // A stream of two such events, read in one piece.
        let twice = [stream, stream].concat();
        assert_eq!(sse::events(&twice), [expected(data), expected(data)]);
    }
}
