//! The gateway (`mcp-tasks-gateway`) in front of a 2025-11-25 server with tasks of
//! its own: `@modelcontextprotocol/server-everything`, whose
//! `simulate-research-query` runs only as a task and, for an ambiguous topic, asks
//! a clarification with `elicitation/create` while its task is `input_required`.
//! A 2026-07-28 client reaches that task through the gateway as a task of its own
//! revision: created, polled to `input_required`, answered with `tasks/update`,
//! followed to `completed` with the report inline. Another principal gets a
//! missing task for it.
//!
//! Without `node_modules` (run `npm ci`) the tests are skipped with a message,
//! except under CI (`CI` set), where they fail.

mod support;

use mcp_tasks::TaskId;
use mcp_tasks::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES};
use serde_json::{Value, json};
use support::everything::{self, Everything};
use support::http::{Client, Reply};
use support::procs::{self, Proc};
use support::requests::modern_meta;

const ALICE: Option<&str> = Some("alice");
const BOB: Option<&str> = Some("bob");

/// The gateway in front of `upstream`.
fn gateway(upstream: &str) -> Proc {
    procs::spawn_gateway(
        &[],
        &[
            ("MCP_UPSTREAM", upstream),
            ("MCP_TASK_HANDLE_KEY", "research-test-key-0123456789abcdef"),
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

/// The error of a reply, which must travel as a missing task's: -32602, HTTP 200.
fn missing(reply: &Reply) -> Value {
    reply.assert_error(-32602, 200);
    reply.json["error"].clone()
}

#[tokio::test]
async fn an_older_upstreams_task_is_a_task_of_the_modern_revision() {
    let Some((node, server)) = everything::installed("gateway_research") else {
        return;
    };
    let upstream = Everything::start(node, server);
    let gateway = gateway(&upstream.url());
    let client = Client::new(gateway.addr);

    let reply = client
        .request("tools/call")
        .params(json!({"name": "simulate-research-query",
            "arguments": {"topic": "python", "ambiguous": true}}))
        .meta(eliciting_meta())
        .principal("alice")
        .send()
        .await;
    let created = reply.ok();
    assert_eq!(created["resultType"], "task", "{}", reply.text());
    assert_eq!(created["status"], "working", "{created}");
    assert_eq!(created["ttlMs"], 300_000, "{created}");
    assert_eq!(created["pollIntervalMs"], 1000, "{created}");
    for absent in ["task", "ttl", "pollInterval", "result", "inputRequests"] {
        assert!(created.get(absent).is_none(), "{absent} in {created}");
    }
    let handle = created["taskId"].as_str().unwrap().to_owned();
    assert!(handle.starts_with("up."), "a handle: {handle}");

    // Not bob's: every task method answers as for a task that does not exist.
    let unknown = missing(&client.get(&TaskId::random().to_string(), BOB).await);
    assert_eq!(missing(&client.get(&handle, BOB).await), unknown);
    let answers = json!({"q1": {"action": "decline"}});
    assert_eq!(
        missing(&client.update(&handle, answers, BOB).await),
        unknown
    );
    assert_eq!(missing(&client.cancel(&handle, BOB).await), unknown);

    let asking = client
        .wait_for_status(&handle, ALICE, "input_required")
        .await;
    let requests = asking["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{asking}");
    let (key, question) = requests.iter().next().unwrap();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let schema = &question["params"]["requestedSchema"];
    assert!(
        schema["properties"]["interpretation"].is_object(),
        "{question}"
    );
    // The upstream's own task id stays behind the gateway.
    assert!(question["params"].get("_meta").is_none(), "{question}");

    let answer = json!({key: {"action": "accept", "content": {"interpretation": "snake"}}});
    let ack = client.update(&handle, answer, ALICE).await;
    assert_eq!(ack.ok()["resultType"], "complete", "{}", ack.text());
    let after = client.get(&handle, ALICE).await;
    assert!(
        after.ok().get("inputRequests").is_none(),
        "the answered question is gone: {}",
        after.text()
    );

    let done = client.wait_for_end(&handle, ALICE).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["resultType"], "complete", "{done}");
    let report = done["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        report.contains("# Research Report: python (snake)"),
        "{done}"
    );
    assert!(
        done["result"]["_meta"]
            .get("io.modelcontextprotocol/related-task")
            .is_none()
    );
    // Read again, the same.
    let again = client.get(&handle, ALICE).await;
    assert_eq!(again.ok()["result"], done["result"]);
    // Cancelling an ended task is acknowledged, and changes nothing.
    let cancelled = client.cancel(&handle, ALICE).await;
    assert_eq!(cancelled.ok()["resultType"], "complete");
    assert_eq!(client.get(&handle, ALICE).await.ok()["status"], "completed");
}

#[tokio::test]
async fn a_cancelled_upstream_task_ends_cancelled() {
    let Some((node, server)) = everything::installed("gateway_research") else {
        return;
    };
    let upstream = Everything::start(node, server);
    let gateway = gateway(&upstream.url());
    let client = Client::new(gateway.addr);

    let reply = client
        .request("tools/call")
        .params(json!({"name": "simulate-research-query", "arguments": {"topic": "rust"}}))
        .meta(eliciting_meta())
        .principal("alice")
        .send()
        .await;
    assert_eq!(reply.ok()["resultType"], "task", "{}", reply.text());
    let handle = reply.ok()["taskId"].as_str().unwrap().to_owned();
    let ack = client.cancel(&handle, ALICE).await;
    assert_eq!(ack.ok()["resultType"], "complete", "{}", ack.text());
    let ended = client.wait_for_end(&handle, ALICE).await;
    assert_eq!(ended["status"], "cancelled", "{ended}");
}

#[tokio::test]
async fn an_upstream_restarted_forgets_its_tasks_and_makes_new_ones() {
    let Some((node, server)) = everything::installed("gateway_research") else {
        return;
    };
    let mut upstream = Everything::start(node, server);
    let gateway = gateway(&upstream.url());
    let client = Client::new(gateway.addr);
    let research = async |topic: &str| {
        let reply = client
            .request("tools/call")
            .params(json!({"name": "simulate-research-query", "arguments": {"topic": topic}}))
            .meta(eliciting_meta())
            .principal("alice")
            .send()
            .await;
        assert_eq!(reply.ok()["resultType"], "task", "{}", reply.text());
        reply.ok()["taskId"].as_str().unwrap().to_owned()
    };

    let before = research("before").await;
    upstream.restart();
    // The new upstream knows neither the session nor the task.
    let unknown = missing(&client.get(&TaskId::random().to_string(), ALICE).await);
    assert_eq!(missing(&client.get(&before, ALICE).await), unknown);
    // A session opened again, a task made again.
    let after = research("after").await;
    let done = client.wait_for_end(&after, ALICE).await;
    assert_eq!(done["status"], "completed", "{done}");
    let report = done["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(report.contains("# Research Report: after"), "{done}");
}
