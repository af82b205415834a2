//! Strict at the edge, over real HTTP: under a method the layer owns, a body that is
//! not one JSON-RPC request is the layer's own -32600 (never the inner server's
//! text); a missing standard header is reported as missing; and the bodies the
//! layer rewrites before forwarding (`Auto` calls, listen requests) keep every
//! value, numbers included, exactly as the client wrote it. An inner answer the
//! layer edits that never ends is cut at its timeout (-32603, HTTP 504).

mod support;

use std::time::Duration;

use mcp_tasks::TaskMode;
use mcp_tasks::wire::RpcError;
use serde_json::json;
use support::fixtures::{ListenSupport, Server, layer_builder, listen_builder};
use support::requests::modern_meta;

/// Every method whose `Mcp-Method` makes the layer read the body.
const OWNED: [&str; 8] = [
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/list",
    "tasks/result",
    "tools/call",
    "server/discover",
    "subscriptions/listen",
];

/// Bodies that are JSON but not one JSON-RPC request.
const NOT_ONE_REQUEST: [&str; 12] = [
    "[]",
    "{}",
    r#"{"jsonrpc":"2.0"}"#,
    r#"{"jsonrpc":"2.0","id":1}"#,
    r#"[{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"x"}}]"#,
    r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
    r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"x"}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":null}"#,
    "1",
    r#""tasks/get""#,
    "null",
];

#[tokio::test]
async fn a_body_that_is_not_one_request_under_an_owned_method_is_the_layers_invalid_request() {
    let server = Server::standard().await;
    let client = server.client();
    for method in OWNED {
        for body in NOT_ONE_REQUEST {
            let reply = client
                .request(method)
                .params(json!({"taskId": "x", "name": "greet"}))
                .raw_body(body)
                .send()
                .await;
            reply.assert_error(RpcError::INVALID_REQUEST, 400);
            assert_eq!(reply.content_type(), "application/json", "{method} {body}");
            assert!(
                reply.json["id"].is_null(),
                "{method} {body}: {}",
                reply.text()
            );
        }
    }
    assert_eq!(
        server.inner.request_count(),
        0,
        "none of them reached the inner service"
    );
}

#[tokio::test]
async fn a_body_that_is_not_one_request_without_an_owned_method_still_passes() {
    let server = Server::standard().await;
    let client = server.client();
    // No Mcp-Method, or one the layer does not own: the inner service judges.
    let reply = client
        .request("tools/list")
        .raw_body(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
        .send()
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = client
        .request("tasks/get")
        .without_header("mcp-method")
        .raw_body("[]")
        .send()
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(server.inner.request_count(), 2);
}

#[tokio::test]
async fn a_request_for_another_method_under_an_owned_method_header_is_a_header_mismatch() {
    let server = Server::standard().await;
    let client = server.client();
    for header in OWNED {
        let reply = client
            .request("tools/list")
            .id(json!(42))
            .header("mcp-method", header)
            .send()
            .await;
        reply.assert_error(RpcError::HEADER_MISMATCH, 400);
        assert_eq!(reply.json["id"], 42, "{header}");
        let message = reply.json["error"]["message"].as_str().unwrap();
        assert!(message.contains("Mcp-Method"), "{header}: {message}");
    }
    assert_eq!(server.inner.request_count(), 0);
}

#[tokio::test]
async fn an_owned_request_that_is_not_json_rpc_2_0_is_invalid_request() {
    let server = Server::standard().await;
    let client = server.client();
    let params = json!({"name": "greet", "arguments": {}, "_meta": modern_meta(true)});
    for (method, head) in [
        ("tools/call", r#""jsonrpc":"1.0","id":3"#),
        ("tools/call", r#""id":3"#),
        ("tools/call", r#""jsonrpc":"2.0","id":null"#),
        ("tools/call", r#""jsonrpc":"2.0","id":1.5"#),
        ("server/discover", r#""jsonrpc":"2.0","id":{}"#),
        ("subscriptions/listen", r#""jsonrpc":"2.0","id":[1]"#),
    ] {
        let body = format!(r#"{{{head},"method":"{method}","params":{params}}}"#);
        let reply = client
            .request(method)
            .params(json!({"name": "greet"}))
            .raw_body(body)
            .send()
            .await;
        reply.assert_error(RpcError::INVALID_REQUEST, 400);
    }
    assert_eq!(server.inner.request_count(), 0);
}

#[tokio::test]
async fn a_missing_mcp_name_is_reported_as_missing() {
    let server = Server::standard().await;
    let client = server.client();
    let task = client.create_task_id("work", json!({}), None).await;
    let cases = [
        ("tasks/get", json!({"taskId": task})),
        (
            "tasks/update",
            json!({"taskId": task, "inputResponses": {"k": {}}}),
        ),
        ("tasks/cancel", json!({"taskId": task})),
        ("tools/call", json!({"name": "greet", "arguments": {}})),
    ];
    for (method, params) in cases {
        let reply = client
            .request(method)
            .params(params.clone())
            .without_header("mcp-name")
            .send()
            .await;
        reply.assert_error(RpcError::HEADER_MISMATCH, 400);
        assert_eq!(
            reply.json["error"]["message"], "Missing Mcp-Name header",
            "{method}"
        );
        let reply = client
            .request(method)
            .params(params)
            .header("mcp-name", "something-else")
            .send()
            .await;
        reply.assert_error(RpcError::HEADER_MISMATCH, 400);
        assert_eq!(
            reply.json["error"]["message"], "Mcp-Name header does not match the body",
            "{method}"
        );
    }
    assert_eq!(
        client.get(&task, None).await.ok()["status"],
        "working",
        "the cancel without Mcp-Name changed nothing"
    );
}

#[tokio::test]
async fn a_missing_mcp_method_is_reported_as_missing() {
    let server = Server::standard().await;
    let client = server.client();
    for (method, params) in [
        ("tasks/get", json!({"taskId": "x"})),
        ("tools/call", json!({"name": "greet", "arguments": {}})),
    ] {
        let reply = client
            .request(method)
            .params(params)
            .without_header("mcp-method")
            .send()
            .await;
        reply.assert_error(RpcError::HEADER_MISMATCH, 400);
        assert_eq!(
            reply.json["error"]["message"], "Missing Mcp-Method header",
            "{method}"
        );
    }
}

/// Arguments whose numbers no `f64` keeps as written: a re-encoded body would
/// change them (the test's inner service must still read them, so none is out of
/// `f64` range; the unit tests of the raw edit cover those).
const EXACT_ARGUMENTS: &str = r#"{"big":123456789012345678901234567890,"fine":1.0000000000000000001,"zero":-0,"list":[-0.0,1E2, 7]}"#;

#[tokio::test]
async fn an_auto_call_reaches_the_inner_service_with_its_numbers_as_sent() {
    let builder = layer_builder().with_tool_mode(
        "greet",
        TaskMode::Auto {
            after: Duration::from_secs(30),
        },
    );
    let server = Server::with_layer(builder).await;
    let client = server.client();
    let params = format!(
        r#"{{"name":"greet","arguments":{EXACT_ARGUMENTS},"_meta":{}}}"#,
        modern_meta(true)
    );
    let body = format!(r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{params}}}"#);
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet"}))
        .raw_body(body)
        .send()
        .await;
    assert_eq!(reply.ok()["content"][0]["text"], "Hello, world!");
    let received = server.inner.last_received();
    let text = std::str::from_utf8(&received.body).unwrap();
    assert!(
        text.contains(&format!(r#""arguments":{EXACT_ARGUMENTS}"#)),
        "the arguments are forwarded byte for byte: {text}"
    );
    assert!(
        !received.declares_tasks(),
        "the tasks extension is still removed: {text}"
    );
}

#[tokio::test]
async fn a_listen_reaches_the_inner_service_with_its_numbers_as_sent() {
    let store = std::sync::Arc::new(mcp_tasks::MemoryStore::new());
    let server = Server::listening_with(ListenSupport::Stream, listen_builder(store)).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), Some("alice")).await;
    let params = format!(
        r#"{{"notifications":{{"taskIds":["{task}"],"toolsListChanged":true,"custom":{EXACT_ARGUMENTS}}},"extra":{EXACT_ARGUMENTS},"_meta":{}}}"#,
        modern_meta(true)
    );
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"l-1","method":"subscriptions/listen","params":{params}}}"#
    );
    let mut stream = client
        .request("subscriptions/listen")
        .principal("alice")
        .raw_body(body)
        .open()
        .await;
    let ack = stream.next_message().await;
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([task]));
    let listen = server.inner_listen(0).await;
    let received = server
        .inner
        .received()
        .into_iter()
        .find(|r| r.message["method"] == "subscriptions/listen")
        .unwrap();
    let text = std::str::from_utf8(&received.body).unwrap();
    assert!(
        text.contains(&format!(r#""custom":{EXACT_ARGUMENTS}"#)),
        "{text}"
    );
    assert!(
        text.contains(&format!(r#""extra":{EXACT_ARGUMENTS}"#)),
        "{text}"
    );
    assert!(!text.contains("taskIds"), "{text}");
    assert_eq!(
        listen.request["params"]["notifications"]["toolsListChanged"],
        true
    );
}

/// An inner server whose answers start an SSE stream and never finish it: one
/// event begun, then nothing, the stream held open.
fn never_finishes() -> impl tower::Service<
    http::Request<mcp_tasks::body::RequestBody<hyper::body::Incoming>>,
    Response = http::Response<support::http::Frames>,
    Error = std::convert::Infallible,
    Future = std::future::Ready<
        Result<http::Response<support::http::Frames>, std::convert::Infallible>,
    >,
> + Clone {
    let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    tower::service_fn(
        move |_request: http::Request<mcp_tasks::body::RequestBody<hyper::body::Incoming>>| {
            let (chunks, fed) = tokio::sync::mpsc::unbounded_channel();
            let (taken, _) = tokio::sync::mpsc::unbounded_channel();
            chunks
                .send(bytes::Bytes::from_static(b"data: {\"jsonrpc\":\"2.0\","))
                .unwrap();
            // Kept, so the stream stays open.
            open.lock().unwrap().push(chunks);
            let response = http::Response::builder()
                .header("content-type", "text/event-stream")
                .body(support::http::Frames::fed(fed, taken))
                .unwrap();
            std::future::ready(Ok(response))
        },
    )
}

#[tokio::test]
async fn an_answer_the_layer_edits_that_never_ends_is_cut_at_its_timeout() {
    let timeout = Duration::from_millis(300);
    let layer = layer_builder()
        .with_task_tools()
        .with_edited_answer_timeout(timeout)
        .build()
        .unwrap();
    let http = support::http::serve_layered(&layer, never_finishes()).await;
    let client = support::http::Client::new(http.addr);
    // `server/discover`, and `tools/list` of a client without the extension (the
    // task tools are added to it).
    for (method, declare) in [("server/discover", true), ("tools/list", false)] {
        let started = std::time::Instant::now();
        let sent = client
            .request(method)
            .params(json!({}))
            .declare(declare)
            .id(json!(18))
            .send();
        let reply = tokio::time::timeout(Duration::from_secs(10), sent)
            .await
            .unwrap_or_else(|_| panic!("{method}: the layer must not wait on the inner stream"));
        reply.assert_error(RpcError::INTERNAL_ERROR, 504);
        assert_eq!(reply.json["id"], 18, "{}", reply.text());
        assert_eq!(
            reply.json["error"]["message"],
            "The server did not finish its answer in time",
            "{}",
            reply.text()
        );
        assert!(
            started.elapsed() >= timeout,
            "{method}: {:?}",
            started.elapsed()
        );
    }
}
