//! Secure by default: without `with_anonymous_tasks()`, a request without a
//! `Principal` may neither create nor read tasks, and is told so with -32603
//! `principal_required`, naming the setter; calls that stay synchronous, and
//! requests with a principal, are not affected.

mod support;

use std::time::Duration;

use mcp_tasks::TaskMode;
use mcp_tasks::wire::RpcError;
use serde_json::{Value, json};
use support::fixtures::{ListenSupport, Server, strict_layer_builder, strict_listen_builder};
use support::http::Reply;

fn assert_principal_required(reply: &Reply, what: &str) {
    if reply.content_type() == "text/event-stream" {
        // An SSE tool's head went out first: the refusal is its response event.
        assert_eq!(reply.code(), Some(RpcError::INTERNAL_ERROR), "{what}");
    } else {
        reply.assert_error(RpcError::INTERNAL_ERROR, 200);
    }
    assert_eq!(
        reply.json["error"]["message"],
        "Tasks require an authenticated principal (anonymous tasks need with_anonymous_tasks())",
        "{what}"
    );
    assert_eq!(
        reply.json["error"]["data"],
        json!({"reason": "principal_required"}),
        "{what}"
    );
}

async fn strict_server() -> Server {
    let builder = strict_layer_builder().with_tool_mode(
        "greet_auto",
        TaskMode::Auto {
            after: Duration::from_millis(1),
        },
    );
    Server::with_layer(builder).await
}

#[tokio::test]
async fn an_anonymous_call_that_would_become_a_task_is_refused() {
    let server = strict_server().await;
    let client = server.client();
    // A handler asking for a task (Optional), a Required tool, an SSE handler.
    for tool in ["work", "task_only", "sse_task"] {
        let reply = client.call_tool(tool, json!({}), true, None).await;
        assert_principal_required(&reply, tool);
    }
    assert_eq!(
        server.inner.calls("task_only"),
        0,
        "a Required tool is refused before it runs"
    );
    // Auto: refused before the call starts, however fast the tool would answer.
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet_auto", "arguments": {}}))
        .send()
        .await;
    assert_principal_required(&reply, "auto");
    assert_eq!(server.inner.calls("greet_auto"), 0);
    // The same calls with a principal make tasks.
    for tool in ["work", "task_only"] {
        let task = client.create_task(tool, json!({}), Some("alice")).await;
        assert_eq!(task["resultType"], "task");
    }
}

#[tokio::test]
async fn anonymous_calls_that_stay_synchronous_still_work() {
    let server = strict_server().await;
    let client = server.client();
    let reply = client.call_tool("greet", json!({}), true, None).await;
    assert_eq!(reply.ok()["content"][0]["text"], "Hello, world!");
    // Not declaring the extension: the handler runs synchronously.
    let reply = client.call_tool("work", json!({}), false, None).await;
    assert_eq!(reply.ok()["resultType"], "complete", "{}", reply.text());
}

#[tokio::test]
async fn anonymous_task_requests_are_refused_before_any_lookup() {
    let server = strict_server().await;
    let client = server.client();
    let task = client
        .create_task_id("work", json!({}), Some("alice"))
        .await;
    for id in [task.as_str(), "made-up"] {
        for (method, params) in [
            ("tasks/get", json!({"taskId": id})),
            (
                "tasks/update",
                json!({"taskId": id, "inputResponses": {"k": {}}}),
            ),
            ("tasks/cancel", json!({"taskId": id})),
        ] {
            let reply = client.task_method(method, params, None).await;
            assert_principal_required(&reply, method);
        }
    }
    // The capability gate still comes first (the validation order).
    let reply = client
        .request("tasks/get")
        .params(json!({"taskId": task}))
        .declare(false)
        .send()
        .await;
    reply.assert_capability_error();
    // The owner still reads the task, untouched by the refused cancel.
    assert_eq!(
        client.get(&task, Some("alice")).await.ok()["status"],
        "working"
    );
}

#[tokio::test]
async fn an_anonymous_listen_for_task_ids_is_refused() {
    let store = std::sync::Arc::new(mcp_tasks::MemoryStore::new());
    let server = Server::listening_with(ListenSupport::Stream, strict_listen_builder(store)).await;
    let client = server.client();
    let task = client.create_task_id("job", json!({}), Some("alice")).await;
    let reply = client
        .request("subscriptions/listen")
        .params(json!({"notifications": {"taskIds": [task]}}))
        .send()
        .await;
    assert_principal_required(&reply, "listen");
    // Alice's own listen opens.
    let mut stream = client.listen(Some("alice"), json!("l"), &[&task]).await;
    let ack = stream.next_message().await;
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        Value::Array(vec![json!(task)])
    );
}
