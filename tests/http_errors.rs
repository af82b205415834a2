//! The error map of the tasks surface over real HTTP (WIRE §4.10): each refusal's
//! JSON-RPC code and HTTP status, given before any lookup where the specification
//! says so, and a store failure that tells the client nothing about the backend.

mod support;

use mcp_tasks::error::StoreError;
use mcp_tasks::test_suite::{Intercept, StoreCall, StoreHooks};
use mcp_tasks::wire::RpcError;
use mcp_tasks::{MemoryStore, TaskId};
use serde_json::{Value, json};
use support::fixtures::Server;
use support::http::Reply;
use support::logs::Logged;
use support::wait;

const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

fn task_params(method: &str, id: &str) -> Value {
    if method == "tasks/update" {
        json!({"taskId": id, "inputResponses": {"k": {"action": "accept"}}})
    } else {
        json!({"taskId": id})
    }
}

#[tokio::test]
async fn tasks_methods_without_the_extension_get_32021_before_any_lookup() {
    let server = Server::standard().await;
    let client = server.client();
    let existing = client.create_task_id("work", json!({}), None).await;
    let unknown = TaskId::random().to_string();
    for method in TASK_METHODS {
        for id in [unknown.as_str(), "not-a-task-id", existing.as_str()] {
            let reply = client
                .request(method)
                .params(task_params(method, id))
                .declare(false)
                .id(json!(41))
                .send()
                .await;
            reply.assert_capability_error();
            assert_eq!(reply.json["id"], 41, "errors echo the request id");
        }
    }
    // The refused cancel did nothing.
    let task = client.get(&existing, None).await;
    assert_eq!(task.ok()["status"], "working");
    assert!(!server.tasks.is_cancelled(&existing.parse().unwrap()).await);
}

#[tokio::test]
async fn tasks_get_of_an_unknown_or_malformed_id_is_invalid_params() {
    let server = Server::standard().await;
    let client = server.client();
    for id in [
        TaskId::random().to_string(),
        "abc".to_owned(),
        String::new(),
    ] {
        let reply = client.get(&id, None).await;
        reply.assert_error(RpcError::INVALID_PARAMS, 200);
    }
}

#[tokio::test]
async fn tasks_get_of_an_expired_task_is_invalid_params() {
    let server = Server::standard().await;
    let client = server.client();
    let created = client
        .create_task("work", json!({"ttl_ms": 1500}), None)
        .await;
    assert_eq!(created["ttlMs"], 1500);
    let id = created["taskId"].as_str().unwrap().to_owned();
    assert_eq!(client.get(&id, None).await.ok()["taskId"], id.as_str());
    let expired = wait::poll(async || {
        let reply = client.get(&id, None).await;
        reply.code().is_some().then_some(reply)
    })
    .await
    .expect("the task never expired");
    expired.assert_error(RpcError::INVALID_PARAMS, 200);
    // Expired is absent for every route, not only tasks/get.
    client
        .cancel(&id, None)
        .await
        .assert_error(RpcError::INVALID_PARAMS, 200);
}

#[tokio::test]
async fn update_and_cancel_of_an_unknown_id_are_invalid_params() {
    let server = Server::standard().await;
    let client = server.client();
    let unknown = TaskId::random().to_string();
    client
        .update(&unknown, json!({"k": {"action": "accept"}}), None)
        .await
        .assert_error(RpcError::INVALID_PARAMS, 200);
    client
        .cancel(&unknown, None)
        .await
        .assert_error(RpcError::INVALID_PARAMS, 200);
    client
        .cancel("garbage", None)
        .await
        .assert_error(RpcError::INVALID_PARAMS, 200);
}

#[tokio::test]
async fn update_without_input_responses_or_task_id_is_invalid_params() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client.create_task_id("work", json!({}), None).await;
    let cases = [
        json!({"taskId": id}),
        json!({"taskId": id, "inputResponses": "yes"}),
        json!({"taskId": id, "inputResponses": null}),
        json!({"inputResponses": {"k": {}}}),
    ];
    for params in cases {
        let reply = client
            .request("tasks/update")
            .params(params.clone())
            .send()
            .await;
        reply.assert_error(RpcError::INVALID_PARAMS, 200);
        assert!(!reply.text().contains(&id), "{params}: {}", reply.text());
    }
    for method in ["tasks/get", "tasks/cancel"] {
        let reply = client.request(method).params(json!({})).send().await;
        reply.assert_error(RpcError::INVALID_PARAMS, 200);
        let reply = client
            .request(method)
            .params(json!({"taskId": 12}))
            .send()
            .await;
        reply.assert_error(RpcError::INVALID_PARAMS, 200);
    }
    // None of that touched the task.
    assert_eq!(client.get(&id, None).await.ok()["status"], "working");
}

#[tokio::test]
async fn update_of_a_task_not_waiting_for_input_is_acknowledged_and_ignored() {
    let server = Server::standard().await;
    let client = server.client();
    let working = client.create_task_id("work", json!({}), None).await;
    let done = client
        .create_task_id("work", json!({"then": "complete"}), None)
        .await;
    client.wait_for_status(&done, None, "completed").await;
    for id in [&working, &done] {
        let before = client.get(id, None).await.ok().clone();
        let answer = json!({"k": {"action": "accept"}, "bad": "not an object"});
        assert_ack(&client.update(id, answer, None).await);
        assert_eq!(client.get(id, None).await.ok(), &before);
        let record = server.tasks.status(&id.parse().unwrap()).await.unwrap();
        assert!(record.input_responses.is_empty());
    }
}

fn assert_ack(reply: &Reply) {
    let result = reply.ok();
    let keys: Vec<&String> = result.as_object().unwrap().keys().collect();
    assert!(
        keys.iter().all(|k| *k == "resultType" || *k == "_meta"),
        "an acknowledgment carries nothing else: {result}"
    );
    assert_eq!(result["resultType"], "complete");
}

#[tokio::test]
async fn cancel_of_a_terminal_task_acks_and_keeps_its_status() {
    let server = Server::standard().await;
    let client = server.client();
    for (then, status) in [("complete", "completed"), ("fail", "failed")] {
        let id = client
            .create_task_id("work", json!({"then": then}), None)
            .await;
        let before = client.wait_for_status(&id, None, status).await;
        let reply = client.cancel(&id, None).await;
        assert_ack(&reply);
        let after = client.get(&id, None).await;
        assert_eq!(after.ok(), &before, "a terminal task never changes");
    }
    // Cancelling twice: the second one acknowledges the terminal `cancelled` task.
    let id = client.create_task_id("work", json!({}), None).await;
    assert_ack(&client.cancel(&id, None).await);
    let cancelled = client.get(&id, None).await.ok().clone();
    assert_eq!(cancelled["status"], "cancelled");
    assert_ack(&client.cancel(&id, None).await);
    assert_eq!(client.get(&id, None).await.ok(), &cancelled);
}

#[tokio::test]
async fn mcp_name_missing_or_different_is_header_mismatch() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client.create_task_id("work", json!({}), None).await;
    let other = TaskId::random().to_string();
    for method in TASK_METHODS {
        let missing = client
            .request(method)
            .params(task_params(method, &id))
            .without_header("mcp-name")
            .send()
            .await;
        missing.assert_error(RpcError::HEADER_MISMATCH, 400);
        let different = client
            .request(method)
            .params(task_params(method, &id))
            .header("mcp-name", &other)
            .send()
            .await;
        different.assert_error(RpcError::HEADER_MISMATCH, 400);
        // Header checks come before the capability gate.
        let undeclared = client
            .request(method)
            .params(task_params(method, &id))
            .declare(false)
            .header("mcp-name", &other)
            .send()
            .await;
        undeclared.assert_error(RpcError::HEADER_MISMATCH, 400);
    }
    assert_eq!(client.get(&id, None).await.ok()["status"], "working");
    let tool = client
        .request("tools/call")
        .params(json!({"name": "greet", "arguments": {}}))
        .header("mcp-name", "grEEt")
        .send()
        .await;
    tool.assert_error(RpcError::HEADER_MISMATCH, 400);
    assert_eq!(server.inner.calls("greet"), 0);
}

#[tokio::test]
async fn removed_methods_are_not_found_whatever_the_capabilities() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client.create_task_id("work", json!({}), None).await;
    let before = server.inner.request_count();
    for method in ["tasks/result", "tasks/list"] {
        for declare in [true, false] {
            for params in [json!({}), json!({"taskId": id}), json!({"cursor": "x"})] {
                let reply = client
                    .request(method)
                    .params(params)
                    .declare(declare)
                    .send()
                    .await;
                reply.assert_error(RpcError::METHOD_NOT_FOUND, 404);
            }
        }
    }
    assert_eq!(
        server.inner.request_count(),
        before,
        "answered by the layer"
    );
}

#[tokio::test]
async fn task_only_tool_without_the_extension_is_refused_before_the_inner_call() {
    let server = Server::standard().await;
    let client = server.client();
    let reply = client
        .request("tools/call")
        .params(json!({"name": "task_only", "arguments": {}}))
        .declare(false)
        .send()
        .await;
    reply.assert_capability_error();
    assert_eq!(server.inner.calls("task_only"), 0, "the tool must not run");
    let created = client.create_task("task_only", json!({}), None).await;
    assert_eq!(created["status"], "working");
    assert_eq!(server.inner.calls("task_only"), 1);
}

#[tokio::test]
async fn listen_with_task_ids_without_the_extension_is_refused() {
    let server = Server::standard().await;
    let client = server.client();
    let before = server.inner.request_count();
    let reply = client
        .request("subscriptions/listen")
        .params(json!({"notifications": {"toolsListChanged": true, "taskIds": ["abc"]}}))
        .declare(false)
        .send()
        .await;
    reply.assert_capability_error();
    assert_eq!(server.inner.request_count(), before);
}

/// Hooks making every store call fail, with a detail that must not reach clients.
#[derive(Debug)]
struct Broken;

const BACKEND_DETAIL: &str = "connection to db-7.internal refused";

impl StoreHooks for Broken {
    fn before(&self, _call: StoreCall<'_>) -> Result<(), StoreError> {
        Err(StoreError::Backend(BACKEND_DETAIL.into()))
    }
}

#[tokio::test]
async fn a_store_failure_is_internal_error_with_a_generic_message() {
    let (logged, _logs) = Logged::capture(tracing::Level::WARN);
    let broken = Intercept::new(MemoryStore::new(), Broken);
    let server = Server::with_layer(
        mcp_tasks::TasksLayer::builder(broken)
            .with_anonymous_tasks()
            .without_janitor(),
    )
    .await;
    let client = server.client();
    let id = TaskId::random().to_string();
    for method in TASK_METHODS {
        let reply = client
            .request(method)
            .params(task_params(method, &id))
            .send()
            .await;
        reply.assert_error(RpcError::INTERNAL_ERROR, 200);
        assert!(!reply.text().contains("db-7"), "{}", reply.text());
    }
    let reply = client
        .request("tools/call")
        .params(json!({"name": "work", "arguments": {}}))
        .send()
        .await;
    reply.assert_error(RpcError::INTERNAL_ERROR, 200);
    assert!(!reply.text().contains("db-7"), "{}", reply.text());
    // The operator's log has what the client was not told: every level of the cause.
    let logs = logged.text();
    let failures = logs
        .lines()
        .filter(|line| line.contains("task store failed"));
    assert_eq!(failures.clone().count(), TASK_METHODS.len() + 1, "{logs}");
    for line in failures {
        assert!(
            line.contains(&format!("the task store backend failed: {BACKEND_DETAIL}")),
            "{line}"
        );
    }
}

/// Counts the creates that reach the store.
#[derive(Debug, Default)]
struct Creates(std::sync::atomic::AtomicUsize);

impl StoreHooks for Creates {
    fn before(&self, call: StoreCall<'_>) -> Result<(), StoreError> {
        if let StoreCall::Create { .. } = call {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_node_without_a_worker_lease_refuses_tasks_as_retryable_elsewhere() {
    let (logged, _logs) = Logged::capture(tracing::Level::WARN);
    let creates = std::sync::Arc::new(Creates::default());
    let layer = mcp_tasks::TasksLayer::builder(Intercept::new(MemoryStore::new(), creates.clone()))
        .without_janitor()
        .with_tool_mode("task_only", mcp_tasks::TaskMode::Required)
        .with_lease_store(support::faults::NoLeases)
        .build()
        .unwrap();
    let server = Server::start(
        layer.clone(),
        support::fixtures::standard_inner(&layer.tasks()),
    )
    .await;
    let client = server.client();
    for tool in ["task_only", "work"] {
        let refused = client.call_tool(tool, json!({}), true, Some("alice")).await;
        refused.assert_error(-32603, 503);
        assert_eq!(refused.headers["retry-after"], "1");
        assert_eq!(
            refused.json["error"]["data"],
            json!({"reason": "no_worker_lease", "retryable": true})
        );
    }
    assert_eq!(
        creates.0.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no task was stored"
    );
    assert_eq!(logged.lines_with("so new tasks are refused").len(), 1);
}
