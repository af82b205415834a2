//! JSON-RPC ids are echoed byte for byte in every reply the layer writes (#33): a
//! task handle, a task method's result, the layer's own errors, an `Auto` runner's
//! handle, the 2025-11-25 routes and a listen stream's subscription id. An id of a
//! type no request may carry is answered with `null`.

mod support;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use mcp_tasks::body::RequestBody;
use mcp_tasks::wire::RpcError;
use mcp_tasks::{MemoryStore, TaskMode, TasksLayer};
use serde_json::{Value, json};
use support::fixtures::{ListenSupport, Server, listen_builder};
use support::http::{Client, Reply, serve_layered};
use support::requests::modern_meta;

/// Ids a `Value` would not keep as written: past `u64`, past `i64`, a negative
/// zero, an escaped string, and a long one.
fn ids() -> Vec<String> {
    vec![
        "18446744073709551616".into(),
        "-9223372036854775809".into(),
        "-0".into(),
        r#""\u0041b\n""#.into(),
        format!("\"{}\"", "x".repeat(4096)),
    ]
}

/// The body of a 2026-07-28 request with the id written as `id`.
fn modern_body(method: &str, params: &Value, id: &str) -> String {
    let mut params = params.clone();
    params["_meta"] = modern_meta(true);
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
}

/// Sends `method` with `params` and the id written as `id`.
async fn send(client: &Client, method: &str, params: Value, id: &str) -> Reply {
    let body = modern_body(method, &params, id);
    client
        .request(method)
        .params(params)
        .raw_body(body)
        .send()
        .await
}

/// Whether the reply's body (JSON, or an SSE stream's events) answers with `id`
/// exactly as written.
fn echoes(reply: &Reply, id: &str) -> bool {
    let text = reply.text();
    text.contains(&format!(r#""id":{id},"#))
}

fn assert_echoes(reply: &Reply, id: &str, what: &str) {
    assert!(
        echoes(reply, id),
        "{what} must echo the id {} as written: {}",
        &id[..id.len().min(40)],
        &reply.text()[..reply.text().len().min(400)]
    );
}

#[tokio::test]
async fn task_handles_results_and_errors_echo_the_id_as_written() {
    let server = Server::standard().await;
    let client = server.client();
    for id in ids() {
        // A handler's task, as JSON and over SSE.
        let made = send(
            &client,
            "tools/call",
            json!({"name": "work", "arguments": {}}),
            &id,
        )
        .await;
        assert_eq!(made.json["result"]["resultType"], "task", "{}", made.text());
        assert_echoes(&made, &id, "a task handle");
        let task = made.json["result"]["taskId"].as_str().unwrap().to_owned();
        let sse = send(
            &client,
            "tools/call",
            json!({"name": "sse_task", "arguments": {}}),
            &id,
        )
        .await;
        assert_eq!(sse.json["result"]["resultType"], "task", "{}", sse.text());
        assert_echoes(&sse, &id, "a task handle over SSE");
        // The task methods.
        for (method, params) in [
            ("tasks/get", json!({"taskId": task})),
            (
                "tasks/update",
                json!({"taskId": task, "inputResponses": {"k": {}}}),
            ),
            ("tasks/cancel", json!({"taskId": task})),
            ("tasks/get", json!({"taskId": "unknown"})),
        ] {
            let reply = send(&client, method, params, &id).await;
            assert_echoes(&reply, &id, method);
        }
        // The layer's own errors: a Required tool without the extension, a call
        // without `_meta`.
        let body = modern_body("tools/call", &json!({"name": "task_only"}), &id)
            .replace(r#""io.modelcontextprotocol/tasks":{}"#, "");
        let refused = client
            .request("tools/call")
            .params(json!({"name": "task_only"}))
            .raw_body(body)
            .send()
            .await;
        assert_eq!(
            refused.code(),
            Some(RpcError::MISSING_REQUIRED_CLIENT_CAPABILITY),
            "{}",
            refused.text()
        );
        assert_echoes(&refused, &id, "a refused call");
        let no_meta = client
            .request("server/discover")
            .raw_body(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"server/discover","params":{{}}}}"#
            ))
            .send()
            .await;
        assert_eq!(
            no_meta.code(),
            Some(RpcError::INVALID_PARAMS),
            "{}",
            no_meta.text()
        );
        assert_echoes(&no_meta, &id, "a request without _meta");
    }
}

#[tokio::test]
async fn an_id_of_the_wrong_type_is_answered_with_null() {
    let server = Server::standard().await;
    let client = server.client();
    for id in ["false", "true", "{}", r#"{"a":1}"#, "[1]", "1.5", "1e3"] {
        for (method, params) in [
            ("tools/call", json!({"name": "work", "arguments": {}})),
            ("server/discover", json!({})),
            ("tasks/get", json!({"taskId": "unknown"})),
        ] {
            let reply = send(&client, method, params, id).await;
            reply.assert_error(RpcError::INVALID_REQUEST, 400);
            assert!(
                reply.text().contains(r#""id":null,"#),
                "{method} with id {id}: {}",
                reply.text()
            );
        }
    }
}

/// A tool that never answers: an `Auto` call to it becomes a task.
fn never_answers(
    _request: Request<RequestBody<hyper::body::Incoming>>,
) -> impl Future<Output = Result<Response<Full<Bytes>>, Infallible>> {
    std::future::pending()
}

#[tokio::test]
async fn an_auto_runner_answers_with_the_id_as_written() {
    let layer = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .without_janitor()
        .with_tool_mode(
            "slow",
            TaskMode::Auto {
                after: Duration::from_millis(10),
            },
        )
        .build()
        .unwrap();
    let http = serve_layered(&layer, tower::service_fn(never_answers)).await;
    let client = Client::new(http.addr);
    for id in ids() {
        let reply = send(
            &client,
            "tools/call",
            json!({"name": "slow", "arguments": {}}),
            &id,
        )
        .await;
        assert_eq!(
            reply.json["result"]["resultType"],
            "task",
            "{}",
            reply.text()
        );
        assert_echoes(&reply, &id, "an Auto task's handle");
    }
}

#[tokio::test]
async fn the_2025_11_25_routes_echo_the_id_as_written() {
    let server = Server::standard().await;
    let client = server.client();
    let legacy = |method: &str, params: Value, id: &str| {
        client
            .request(method)
            .without_meta()
            .without_header("mcp-method")
            .without_header("mcp-name")
            .header("mcp-protocol-version", "2025-11-25")
            .raw_body(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
            ))
    };
    for id in ids() {
        let made = legacy(
            "tools/call",
            json!({"name": "work", "arguments": {}, "task": {}}),
            &id,
        )
        .send()
        .await;
        let task = made.json["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a 2025-11-25 task: {}", made.text()))
            .to_owned();
        assert_echoes(&made, &id, "a 2025-11-25 task");
        for (method, params) in [
            ("tasks/get", json!({"taskId": task})),
            ("tasks/list", json!({})),
            ("tasks/get", json!({"taskId": "unknown"})),
            ("tasks/cancel", json!({"taskId": task})),
        ] {
            let reply = legacy(method, params, &id).send().await;
            assert_echoes(&reply, &id, method);
        }
    }
}

#[tokio::test]
async fn a_listen_stream_carries_the_id_as_written() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let server = Server::listening_with(ListenSupport::Stream, listen_builder(store)).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), Some("alice")).await;
    let id = "18446744073709551616";
    let params = json!({"notifications": {"taskIds": [task]}});
    let mut stream = client
        .request("subscriptions/listen")
        .params(params.clone())
        .principal("alice")
        .raw_body(modern_body("subscriptions/listen", &params, id))
        .open()
        .await;
    let stamped = format!(r#""io.modelcontextprotocol/subscriptionId":{id}"#);
    for what in ["the acknowledgment", "the task's snapshot"] {
        let event = stream.next_event().await.expect(what);
        let data = event.data.unwrap_or_default();
        assert!(data.contains(&stamped), "{what}: {data}");
    }
}
