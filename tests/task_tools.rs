//! Task tools for clients without the extension (`with_task_tools`): a long call
//! answers with a tool result naming its task, and `task_status`, `task_answer` and
//! `task_cancel` follow it — on 2026-07-28 without the extension and on earlier
//! revisions, sessions included. The texts are what a language model reads, so the
//! tests read them too.

#[path = "../examples/common/mod.rs"]
mod common;
#[path = "../examples/retrofit_app/mod.rs"]
mod retrofit_app;
mod support;

use std::sync::atomic::Ordering;

use mcp_tasks::TasksLayerBuilder;
use retrofit_app::{Retrofit, layer_builder, mcp_service};
use serde_json::{Value, json};
use support::fixtures::{Server, layer_builder as fixture_builder};
use support::http::{Client, Reply, serve_layered};
use support::wait;

const ALICE: Option<&str> = Some("alice");

/// The retrofit example's rmcp server behind a layer with task tools.
struct Retrofitted {
    client: Client,
    handler: Retrofit,
    _http: support::http::TestServer,
}

async fn retrofitted(builder: TasksLayerBuilder) -> Retrofitted {
    let handler = Retrofit::default();
    let layer = builder.without_janitor().build().unwrap();
    let http = serve_layered(&layer, mcp_service(handler.clone(), true)).await;
    Retrofitted {
        client: Client::new(http.addr),
        handler,
        _http: http,
    }
}

/// The texts of a tool result's content blocks, joined by newlines.
fn texts(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The task id a "goes on as a task" text names, after checking what it tells.
fn started_task(reply: &Reply) -> String {
    let result = reply.ok();
    assert_eq!(result["isError"], false, "{}", reply.text());
    let text = texts(result);
    assert!(
        text.contains("goes on in the background as task "),
        "{text}"
    );
    assert!(text.contains("task_status"), "{text}");
    assert!(text.contains("task_cancel"), "{text}");
    let id = text
        .split("as task ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .expect("a task id in the text")
        .to_owned();
    assert!(
        text.contains(&format!("{{\"taskId\": \"{id}\"}}")),
        "{text}"
    );
    id
}

/// Calls one of the task tools as `principal`, without the extension.
async fn task_tool(
    client: &Client,
    tool: &str,
    arguments: Value,
    principal: Option<&str>,
) -> Value {
    let reply = client.call_tool(tool, arguments, false, principal).await;
    assert!(reply.code().is_none(), "{}", reply.text());
    reply.ok().clone()
}

/// Polls `task_status` until its text contains `wanted`.
async fn status_until(client: &Client, id: &str, wanted: &str) -> Value {
    let mut last = Value::Null;
    let reached = wait::poll(async || {
        last = task_tool(client, "task_status", json!({"taskId": id}), ALICE).await;
        texts(&last).contains(wanted).then(|| last.clone())
    })
    .await;
    reached.unwrap_or_else(|| panic!("task_status never said {wanted:?}; last: {last}"))
}

fn tool_names(reply: &Reply) -> Vec<String> {
    reply.ok()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_gains_the_task_tools_only_for_clients_without_the_extension() {
    for json in [true, false] {
        let handler = Retrofit::default();
        let layer = layer_builder()
            .with_task_tools()
            .without_janitor()
            .build()
            .unwrap();
        let http = serve_layered(&layer, mcp_service(handler, json)).await;
        let client = Client::new(http.addr);
        let list = |declare: bool| {
            client
                .request("tools/list")
                .params(json!({}))
                .declare(declare)
                .send()
        };
        let without = list(false).await;
        assert_eq!(
            tool_names(&without),
            [
                "sleep",
                "boom",
                "slow_ask",
                "steps",
                "stats",
                "task_status",
                "task_answer",
                "task_cancel"
            ],
            "json: {json}"
        );
        let status = &without.ok()["tools"][5];
        assert!(status["description"].as_str().unwrap().contains("result"));
        assert_eq!(status["inputSchema"]["required"], json!(["taskId"]));

        let with = list(true).await;
        assert_eq!(
            tool_names(&with),
            ["sleep", "boom", "slow_ask", "steps", "stats"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_becomes_a_task_the_model_can_follow_to_its_result() {
    let server = retrofitted(layer_builder().with_task_tools()).await;
    let client = &server.client;

    // Within the budget: the plain answer, as before.
    let quick = client
        .call_tool("sleep", json!({"ms": 5}), false, ALICE)
        .await;
    assert_eq!(texts(quick.ok()), "slept 5ms");

    let reply = client
        .call_tool("steps", json!({"steps": 3, "ms": 400}), false, ALICE)
        .await;
    let id = started_task(&reply);
    let working = status_until(client, &id, "step ").await;
    let text = texts(&working);
    assert!(
        text.contains(&format!("Task {id} is still working.")),
        "{text}"
    );
    assert!(text.contains("Latest status: step "), "{text}");
    assert!(text.contains("Call task_status again in about"), "{text}");
    assert_eq!(working["isError"], false);

    let done = status_until(client, &id, "has completed").await;
    assert_eq!(
        texts(&done),
        format!("Task {id} has completed. The tool's result follows.\n3 steps done")
    );
    assert_eq!(done["isError"], false);

    // Someone else asking about it learns nothing.
    let foreign = task_tool(client, "task_status", json!({"taskId": id}), Some("bob")).await;
    assert_eq!(foreign["isError"], true);
    assert!(
        texts(&foreign).contains(&format!("There is no task {id}")),
        "{foreign}"
    );

    // The extension's clients see no change: a task handle, not a text.
    let handle = client.create_task("sleep", json!({"ms": 600}), ALICE).await;
    assert_eq!(handle["resultType"], "task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_through_task_answer() {
    let server = retrofitted(layer_builder().with_task_tools()).await;
    let client = &server.client;
    let reply = client
        .call_tool("slow_ask", json!({"ms": 400}), false, ALICE)
        .await;
    let id = started_task(&reply);
    let asking = status_until(client, &id, "waiting for answers").await;
    let text = texts(&asking);
    assert!(text.contains("- r1.confirm: Go ahead?"), "{text}");
    assert!(
        text.contains("\"confirm\":{\"type\":\"boolean\"}"),
        "{text}"
    );
    assert!(text.contains("Answer with task_answer"), "{text}");

    let unmatched = task_tool(
        client,
        "task_answer",
        json!({"taskId": id, "answers": {"nope": {"action": "decline"}}}),
        ALICE,
    )
    .await;
    assert!(
        texts(&unmatched).starts_with("None of these answers matched"),
        "{unmatched}"
    );

    let answered = task_tool(
        client,
        "task_answer",
        json!({"taskId": id, "answers": {"r1.confirm": {"action": "accept", "content": {"confirm": true}}}}),
        ALICE,
    )
    .await;
    assert!(
        texts(&answered).starts_with("Thank you, the answers are recorded."),
        "{answered}"
    );
    let done = status_until(client, &id, "has completed").await;
    assert!(texts(&done).ends_with("confirmed: true"), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_cancel_stops_the_work() {
    let server = retrofitted(layer_builder().with_task_tools()).await;
    let client = &server.client;
    let reply = client
        .call_tool("sleep", json!({"ms": 60_000}), false, ALICE)
        .await;
    let id = started_task(&reply);
    let cancelled = task_tool(client, "task_cancel", json!({"taskId": id}), ALICE).await;
    assert_eq!(
        texts(&cancelled),
        format!("Task {id} is cancelled: its work has stopped, and it has no result.")
    );
    let counters = server.handler.counters.clone();
    wait::until("the sleep is dropped", || {
        counters.dropped.load(Ordering::SeqCst) == 1
    })
    .await;
    let again = task_tool(client, "task_cancel", json!({"taskId": id}), ALICE).await;
    assert!(
        texts(&again).starts_with(&format!("Task {id} is cancelled")),
        "{again}"
    );
    let status = task_tool(client, "task_status", json!({"taskId": id}), ALICE).await;
    assert_eq!(
        texts(&status),
        format!("Task {id} was cancelled; it has no result.")
    );
    let missing = task_tool(client, "task_status", json!({}), ALICE).await;
    assert_eq!(missing["isError"], true);
    assert!(
        texts(&missing).contains("needs the argument taskId"),
        "{missing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earlier_revisions_get_the_task_tools_too() {
    let server = Server::with_layer(fixture_builder().with_task_tools()).await;
    let client = server.client();
    for (n, headers) in [
        vec![("mcp-protocol-version", "2025-11-25")],
        vec![
            ("mcp-protocol-version", "2025-06-18"),
            ("mcp-session-id", "s-1"),
        ],
        vec![("mcp-session-id", "s-2")],
    ]
    .into_iter()
    .enumerate()
    {
        let legacy = |method: &str, params: Value| {
            let mut call = client
                .request(method)
                .params(params)
                .without_meta()
                .without_header("mcp-method")
                .without_header("mcp-name")
                .without_header("mcp-protocol-version")
                .principal("alice");
            for (name, value) in &headers {
                call = call.header(name, value);
            }
            call.send()
        };
        let list = legacy("tools/list", json!({})).await;
        let names = tool_names(&list);
        assert_eq!(
            &names[names.len() - 3..],
            ["task_status", "task_answer", "task_cancel"],
            "{n}"
        );

        // An `Optional` tool whose handler makes a task, and a `Required` one.
        for tool in ["work", "task_only"] {
            let reply = legacy(
                "tools/call",
                json!({"name": tool, "arguments": {"then": "complete"}}),
            )
            .await;
            assert!(reply.ok().get("resultType").is_none(), "{}", reply.text());
            assert!(reply.ok().get("_meta").is_none(), "{}", reply.text());
            let id = started_task(&reply);
            let mut last = Value::Null;
            let done = wait::poll(async || {
                let status = legacy(
                    "tools/call",
                    json!({"name": "task_status", "arguments": {"taskId": id}}),
                )
                .await;
                last = status.ok().clone();
                texts(&last).contains("has completed").then(|| last.clone())
            })
            .await
            .unwrap_or_else(|| panic!("never completed: {last}"));
            assert!(texts(&done).ends_with("done"), "{done}");
        }
        // A tool that makes no task passes as before.
        let greet = legacy("tools/call", json!({"name": "greet", "arguments": {}})).await;
        assert_eq!(texts(greet.ok()), "Hello, world!");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_setting_nothing_changes() {
    let server = Server::standard().await;
    let client = server.client();
    let list = client
        .request("tools/list")
        .params(json!({}))
        .declare(false)
        .send()
        .await;
    assert!(!tool_names(&list).contains(&"task_status".to_owned()));
    let refused = client.call_tool("task_only", json!({}), false, ALICE).await;
    refused.assert_capability_error();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_required_tool_becomes_a_task_instead_of_a_refusal() {
    let builder = layer_builder().with_task_tools().with_tool_mode(
        "sleep",
        mcp_tasks::TaskMode::AutoRequired {
            after: std::time::Duration::from_millis(50),
        },
    );
    let server = retrofitted(builder).await;
    let client = &server.client;
    let reply = client
        .call_tool("sleep", json!({"ms": 300}), false, ALICE)
        .await;
    let id = started_task(&reply);
    let done = status_until(client, &id, "has completed").await;
    assert!(texts(&done).ends_with("slept 300ms"), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_tools_refuse_anonymous_callers_when_a_principal_is_required() {
    let server = retrofitted(layer_builder().with_task_tools().with_require_principal()).await;
    let client = &server.client;
    let id = mcp_tasks::TaskId::random().to_string();
    let refused = client
        .call_tool("task_status", json!({"taskId": id}), false, None)
        .await;
    assert_eq!(refused.json["error"]["code"], -32603, "{}", refused.text());
    assert_eq!(
        refused.json["error"]["data"]["reason"],
        "principal_required",
        "{}",
        refused.text()
    );
    let allowed = task_tool(client, "task_status", json!({"taskId": id}), ALICE).await;
    assert!(texts(&allowed).contains("There is no task"), "{allowed}");
}
