//! The gateway (`mcp-tasks-gateway`) in front of a 2026-07-28 server with tasks of
//! its own (issue #32): the conformance fixture with its `TasksLayer`, each a
//! separate process. The upstream's tasks keep their lifecycle through the gateway
//! under task handles (`tasks/get`, `update`, `cancel` and listen pass through);
//! the gateway's own `Auto` tasks, for a slow tool that is no task upstream, go on
//! beside them; a handle made under another key or for another upstream answers
//! as a missing task does; and two gateways with one key are replicas, each
//! reversing the other's handles.

mod support;

use mcp_tasks::TaskId;
use mcp_tasks::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES};
use serde_json::{Value, json};
use support::http::{Client, Reply};
use support::is_task_id;
use support::procs::{self, Proc};
use support::requests::modern_meta;

/// The key of the gateways that are replicas of one another.
const KEY: &str = "federation-test-key-0123456789abcdef";

/// The gateway's `Auto` budget here: the fixture's `slow_compute` of 0.9 s is past
/// it, and every other call answers well within it.
const BUDGET_MS: &str = "300";

/// The conformance fixture, with its own layer and tasks.
fn upstream() -> Proc {
    procs::spawn("conformance_server", &[], &[("RUST_LOG", "warn")])
}

/// A gateway in front of `upstream` (a URL) with task handles under `key`.
fn gateway(upstream: &str, key: &str) -> Proc {
    procs::spawn_gateway(
        &[],
        &[
            ("MCP_UPSTREAM", upstream),
            ("MCP_TASK_HANDLE_KEY", key),
            ("MCP_AUTO_AFTER_MS", BUDGET_MS),
            ("RUST_LOG", "warn"),
        ],
    )
}

/// `_meta` declaring the tasks extension and elicitation.
fn eliciting_meta() -> Value {
    let mut meta = modern_meta(true);
    meta[META_CLIENT_CAPABILITIES] = json!({"extensions": {EXTENSION_ID: {}}, "elicitation": {}});
    meta
}

/// Calls `tool` with the extension and elicitation declared; the task's id.
async fn task_of(client: &Client, tool: &str, arguments: Value) -> String {
    let reply = client
        .request("tools/call")
        .params(json!({"name": tool, "arguments": arguments}))
        .meta(eliciting_meta())
        .send()
        .await;
    let result = reply.ok();
    assert_eq!(result["resultType"], "task", "{}", reply.text());
    result["taskId"].as_str().unwrap().to_owned()
}

fn is_handle(id: &str) -> bool {
    id.starts_with("up.") && !is_task_id(&json!(id))
}

fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or("")
}

#[tokio::test]
async fn the_upstreams_tasks_keep_their_lifecycle_under_handles() {
    let upstream = upstream();
    let gateway = gateway(&upstream.url, KEY);
    let client = Client::new(gateway.addr);

    let slow = task_of(
        &client,
        "slow_compute",
        json!({"seconds": 1.2, "label": "up"}),
    )
    .await;
    assert!(is_handle(&slow), "{slow}");
    let got = client.get(&slow, None).await;
    assert_eq!(got.ok()["taskId"], slow.as_str(), "{}", got.text());
    let done = client.wait_for_end(&slow, None).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(first_text(&done["result"]), "up: done after 1.2 s");

    // A question of the upstream's task, answered through the gateway.
    let asking = task_of(&client, "confirm_delete", json!({"filename": "a.txt"})).await;
    assert!(is_handle(&asking), "{asking}");
    let waiting = client
        .wait_for_status(&asking, None, "input_required")
        .await;
    assert!(waiting["inputRequests"]["confirm"].is_object(), "{waiting}");
    let answer = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    client.update(&asking, answer, None).await.ok();
    let done = client.wait_for_end(&asking, None).await;
    assert_eq!(first_text(&done["result"]), "Deleted a.txt", "{done}");

    // A cancel reaches the upstream's task.
    let long = task_of(&client, "slow_compute", json!({"seconds": 60})).await;
    client.cancel(&long, None).await.ok();
    // The gateway keeps nothing of it: this is the upstream's own answer.
    let got = client.get(&long, None).await;
    assert_eq!(got.ok()["status"], "cancelled", "{}", got.text());
}

#[tokio::test]
async fn the_gateways_own_tasks_go_on_beside_the_upstreams() {
    let upstream = upstream();
    let gateway = gateway(&upstream.url, KEY);
    let client = Client::new(gateway.addr);

    // No task upstream (under a second it answers at once), past the budget here.
    let own = task_of(
        &client,
        "slow_compute",
        json!({"seconds": 0.9, "label": "gw"}),
    )
    .await;
    assert!(is_task_id(&json!(own)), "the gateway's own id: {own}");
    let theirs = task_of(
        &client,
        "slow_compute",
        json!({"seconds": 1.5, "label": "up"}),
    )
    .await;
    assert!(is_handle(&theirs), "{theirs}");

    let mut stream = client.listen(None, json!(3), &[&own, &theirs]).await;
    let ack = stream.next_message().await;
    let mut agreed: Vec<String> = ack["params"]["notifications"]["taskIds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    agreed.sort();
    let mut asked = vec![own.clone(), theirs.clone()];
    asked.sort();
    assert_eq!(agreed, asked, "{ack}");
    let ended = stream
        .tasks_until(|t| t["taskId"] == theirs.as_str() && t["status"] == "completed")
        .await;
    assert!(
        ended
            .iter()
            .all(|t| t["taskId"] == own.as_str() || t["taskId"] == theirs.as_str()),
        "{ended:?}"
    );
    let own_done = client.wait_for_end(&own, None).await;
    assert_eq!(first_text(&own_done["result"]), "gw: done after 0.9 s");
    let theirs_done = client.wait_for_end(&theirs, None).await;
    assert_eq!(first_text(&theirs_done["result"]), "up: done after 1.5 s");
}

/// The error of a reply, which must travel as a missing task's: -32602, HTTP 200.
fn missing(reply: &Reply) -> Value {
    reply.assert_error(-32602, 200);
    reply.json["error"].clone()
}

#[tokio::test]
async fn a_foreign_or_forged_handle_answers_like_a_missing_task() {
    let upstream = upstream();
    let home = gateway(&upstream.url, KEY);
    let handle = task_of(
        &Client::new(home.addr),
        "slow_compute",
        json!({"seconds": 5}),
    )
    .await;

    // Another key; and the same key for another upstream (the same server, named
    // by another URL).
    let other_key = gateway(&upstream.url, "another-key-of-the-federation-tests");
    let localhost = upstream.url.replace("127.0.0.1", "localhost");
    let other_backend = gateway(&localhost, KEY);
    let (tag_start, _) = handle.rsplit_once('.').unwrap();
    let forged = format!("{tag_start}.AAAAAAAAAAAAAAAAAAAAAA");
    for (gateway, handle) in [
        (&other_key, handle.as_str()),
        (&other_backend, handle.as_str()),
        (&home, forged.as_str()),
    ] {
        let client = Client::new(gateway.addr);
        let unknown = missing(&client.get(&TaskId::random().to_string(), None).await);
        assert_eq!(missing(&client.get(handle, None).await), unknown);
        let answers = json!({"q": {"action": "accept"}});
        assert_eq!(
            missing(&client.update(handle, answers, None).await),
            unknown
        );
        assert_eq!(missing(&client.cancel(handle, None).await), unknown);
    }
    // Another caller of the same gateway: the upstream sees every caller as one
    // (the credential is not forwarded), and the handle keeps the task its owner's.
    let home_client = Client::new(home.addr);
    for caller in ["bob", "mallory"] {
        let unknown = missing(
            &home_client
                .get(&TaskId::random().to_string(), Some(caller))
                .await,
        );
        assert_eq!(
            missing(&home_client.get(&handle, Some(caller)).await),
            unknown
        );
        assert_eq!(
            missing(&home_client.cancel(&handle, Some(caller)).await),
            unknown
        );
    }
    // None of them reached the task.
    let got = Client::new(home.addr).get(&handle, None).await;
    assert_eq!(got.ok()["status"], "working", "{}", got.text());
}

#[tokio::test]
async fn gateways_with_one_key_reverse_each_others_handles() {
    let upstream = upstream();
    let one = gateway(&upstream.url, KEY);
    let two = gateway(&upstream.url, KEY);
    let (first, second) = (Client::new(one.addr), Client::new(two.addr));

    let asking = task_of(&first, "confirm_delete", json!({"filename": "b.txt"})).await;
    let waiting = second
        .wait_for_status(&asking, None, "input_required")
        .await;
    assert_eq!(waiting["taskId"], asking.as_str());
    let mut stream = second.listen(None, json!(1), &[&asking]).await;
    let ack = stream.next_message().await;
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([asking]),
        "{ack}"
    );
    let answer = json!({"confirm": {"action": "accept", "content": {"confirm": false}}});
    second.update(&asking, answer, None).await.ok();
    let done = stream
        .tasks_until(|t| t["status"] == "completed")
        .await
        .pop()
        .unwrap();
    assert_eq!(done["taskId"], asking.as_str());
    assert_eq!(first_text(&done["result"]), "Kept b.txt");
    let seen_by_first = first.wait_for_end(&asking, None).await;
    assert_eq!(seen_by_first["status"], "completed");
}
