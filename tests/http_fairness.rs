//! Fair by default: one principal looping a task tool hits its own cap
//! (`defaults::MAX_TASKS_PER_OWNER`) and never locks another principal out.

mod support;

use serde_json::json;

use mcp_tasks::defaults;
use support::fixtures::{Server, layer_builder};

/// Calls the holding `work` tool as `principal`.
async fn work(client: &support::http::Client, principal: &str) -> support::http::Reply {
    client
        .call_tool("work", json!({"then": "hold"}), true, Some(principal))
        .await
}

#[tokio::test]
async fn a_flooding_principal_hits_its_own_cap_and_another_still_creates() {
    // The standard layer: no per-owner setting at all, so the default applies.
    let server = Server::standard().await;
    let client = server.client();
    let mut created = 0usize;
    let refusal = loop {
        let reply = work(&client, "alice").await;
        if reply.json.get("error").is_some() {
            break reply;
        }
        assert_eq!(reply.ok()["resultType"], "task", "{}", reply.text());
        created += 1;
        assert!(
            created <= defaults::MAX_TASKS_PER_OWNER,
            "alice created more than the default per-owner cap"
        );
    };
    assert_eq!(created, defaults::MAX_TASKS_PER_OWNER);
    refusal.assert_error(-32603, 200);
    assert_eq!(refusal.json["error"]["message"], "Task limit reached");
    assert_eq!(refusal.json["error"]["data"], json!({"limit": "per_owner"}));

    // Alice stays refused; bob is not limited by her flood.
    let again = work(&client, "alice").await;
    assert_eq!(again.json["error"]["data"]["limit"], "per_owner");
    let bob = work(&client, "bob").await;
    assert_eq!(bob.ok()["resultType"], "task", "{}", bob.text());
    let id = bob.ok()["taskId"].as_str().unwrap().to_owned();
    let status = client.get(&id, Some("bob")).await;
    assert_eq!(status.ok()["status"], "working");
}

#[tokio::test]
async fn the_row_cap_names_itself_in_the_refusal() {
    let server = Server::with_layer(layer_builder().with_max_rows(2)).await;
    let client = server.client();
    for principal in ["alice", "bob"] {
        let reply = work(&client, principal).await;
        assert_eq!(reply.ok()["resultType"], "task");
    }
    let refusal = work(&client, "carol").await;
    refusal.assert_error(-32603, 200);
    assert_eq!(refusal.json["error"]["message"], "Task limit reached");
    assert_eq!(refusal.json["error"]["data"], json!({"limit": "rows"}));
}
