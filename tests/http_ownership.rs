//! Ownership over real HTTP: a task belongs to the principal that made it (here from
//! `Authorization: Bearer <name>`), and anyone else sees exactly what they would see
//! for an id that does not exist.

mod support;

use mcp_tasks::TaskId;
use mcp_tasks::wire::RpcError;
use serde_json::{Value, json};
use support::fixtures::{Server, Tool, layer_builder, spec, standard_inner};
use support::http::{Client, Reply};

const ANONYMOUS: Option<&str> = None;

/// Sends `method` for `id` as `principal` with a fixed JSON-RPC id, so that replies
/// for different task ids can be compared whole.
async fn task_call(client: &Client, method: &str, id: &str, principal: Option<&str>) -> Reply {
    let params = match method {
        "tasks/update" => json!({"taskId": id, "inputResponses": {"k": {"action": "accept"}}}),
        _ => json!({"taskId": id}),
    };
    let mut call = client.request(method).params(params).id(json!(100));
    if let Some(p) = principal {
        call = call.principal(p);
    }
    call.send().await
}

/// Asserts that `id` looks missing to `principal` on every route, exactly like an
/// unknown id, and that no reply echoes it.
async fn assert_invisible(client: &Client, id: &str, principal: Option<&str>) {
    let unknown = TaskId::random().to_string();
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let foreign = task_call(client, method, id, principal).await;
        foreign.assert_error(RpcError::INVALID_PARAMS, 200);
        assert!(
            !foreign.text().contains(id),
            "{method}: the reply echoes the id: {}",
            foreign.text()
        );
        let missing = task_call(client, method, &unknown, principal).await;
        assert_eq!(
            (foreign.status, &foreign.json),
            (missing.status, &missing.json),
            "{method}: a foreign task must look exactly like a missing one"
        );
        assert_eq!(foreign.body, missing.body);
    }
}

#[tokio::test]
async fn a_principals_task_looks_missing_to_everyone_else() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client
        .create_task_id("work", json!({}), Some("alice"))
        .await;
    assert_invisible(&client, &id, Some("bob")).await;
    assert_invisible(&client, &id, ANONYMOUS).await;
    // Principals are compared exactly.
    assert_invisible(&client, &id, Some("Alice")).await;
    assert_invisible(&client, &id, Some("alic")).await;

    let task = client.get(&id, Some("alice")).await;
    assert_eq!(task.ok()["status"], "working", "nothing above touched it");
    assert_eq!(task.ok()["taskId"], id.as_str());
}

#[tokio::test]
async fn an_anonymous_task_is_invisible_to_principals() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client.create_task_id("work", json!({}), ANONYMOUS).await;
    assert_invisible(&client, &id, Some("alice")).await;
    assert_invisible(&client, &id, Some("bob")).await;
    assert_eq!(client.get(&id, ANONYMOUS).await.ok()["status"], "working");
    assert_eq!(
        client.cancel(&id, ANONYMOUS).await.ok()["resultType"],
        "complete"
    );
    assert_eq!(client.get(&id, ANONYMOUS).await.ok()["status"], "cancelled");
}

#[tokio::test]
async fn a_cancel_by_another_principal_leaves_the_task_running() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client
        .create_task_id("work", json!({}), Some("alice"))
        .await;
    let task_id: TaskId = id.parse().unwrap();
    for intruder in [Some("bob"), ANONYMOUS] {
        let reply = client.cancel(&id, intruder).await;
        reply.assert_error(RpcError::INVALID_PARAMS, 200);
    }
    assert!(!server.tasks.is_cancelled(&task_id).await);
    let task = client.get(&id, Some("alice")).await;
    assert_eq!(task.ok()["status"], "working");

    // The owner can cancel it.
    let reply = client.cancel(&id, Some("alice")).await;
    assert_eq!(reply.ok()["resultType"], "complete");
    assert!(server.tasks.is_cancelled(&task_id).await);
    assert_eq!(
        client.get(&id, Some("alice")).await.ok()["status"],
        "cancelled"
    );
}

#[tokio::test]
async fn answers_from_another_principal_are_not_applied() {
    let layer = layer_builder().build().unwrap();
    let tasks = layer.tasks();
    let ask = {
        let tasks = tasks.clone();
        spec(move |_| {
            let tasks = tasks.clone();
            mcp_tasks::TaskSpec::new().with_start(move |id| {
                tokio::spawn(async move {
                    tasks
                        .require_input(
                            &id,
                            mcp_tasks::input::InputRequests::new()
                                .with("go", mcp_tasks::input::InputRequest::confirm("Go?", "ok")),
                        )
                        .await
                        .unwrap();
                });
            })
        })
    };
    let inner = standard_inner(&tasks).tool("ask", Tool::Context(ask));
    let server = Server::start(layer, inner).await;
    let client = server.client();
    let id = client.create_task_id("ask", json!({}), Some("alice")).await;
    let waiting = client
        .wait_for_status(&id, Some("alice"), "input_required")
        .await;
    let answer = json!({"go": {"action": "accept", "content": {"ok": true}}});
    let reply = client.update(&id, answer.clone(), Some("bob")).await;
    reply.assert_error(RpcError::INVALID_PARAMS, 200);
    assert!(!reply.text().contains(&id));
    assert_eq!(client.get(&id, Some("alice")).await.ok(), &waiting);

    let reply = client.update(&id, answer, Some("alice")).await;
    assert_eq!(reply.ok()["resultType"], "complete");
    let task = client.get(&id, Some("alice")).await;
    assert_eq!(task.ok()["status"], "working");
    let record = server.tasks.status(&id.parse().unwrap()).await.unwrap();
    assert_eq!(
        Value::Object(record.input_responses),
        json!({"go": {"action": "accept", "content": {"ok": true}}})
    );
}

#[tokio::test]
async fn the_inner_service_sees_the_same_principal_the_task_gets() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client
        .create_task_id("work", json!({}), Some("carol"))
        .await;
    assert_eq!(server.inner.last_received().principal_name(), Some("carol"));
    let record = server.tasks.status(&id.parse().unwrap()).await.unwrap();
    assert_eq!(record.owner.as_ref().map(|p| p.as_str()), Some("carol"));
    let id = client.create_task_id("work", json!({}), ANONYMOUS).await;
    let record = server.tasks.status(&id.parse().unwrap()).await.unwrap();
    assert_eq!(record.owner, None);
}
