//! Task tools for clients without the extension (`with_task_tools`): a long call
//! answers with a tool result naming its task, and `task_status`, `task_answer` and
//! `task_cancel` follow it — on 2026-07-28 without the extension and on earlier
//! revisions, sessions included. The texts are what a language model reads, so the
//! tests read them too; app code reads the task object beside them (the task tools'
//! `structuredContent`, checked against their `outputSchema`, and the hand-off's
//! `_meta`), so the tests read that in every state as well.

#[path = "../examples/common/mod.rs"]
mod common;
#[path = "../examples/retrofit_app/mod.rs"]
mod retrofit_app;
mod support;

use std::sync::atomic::Ordering;

use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::wire::RpcError;
use mcp_tasks::{TaskId, TasksLayerBuilder};
use retrofit_app::{Retrofit, authenticated_layer_builder_on, layer_builder, mcp_service};
use serde_json::{Value, json};
use support::fixtures::{Server, layer_builder as fixture_builder};
use support::http::{Client, Reply, serve_layered};
use support::wait;

const ALICE: Option<&str> = Some("alice");

/// The hand-off's `_meta` key for the task object.
const HAND_OFF: &str = "mcp-tasks/task";

/// The five task statuses, as the output schema's enum lists them.
const STATUSES: [&str; 5] = [
    "working",
    "input_required",
    "completed",
    "failed",
    "cancelled",
];

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

/// The task id a "goes on as a task" text names, after checking what it tells and
/// that the hand-off carries the same id in `_meta`, never as `structuredContent`
/// (that field is the called tool's, checked against its own `outputSchema`).
fn started_task(reply: &Reply) -> String {
    let result = reply.ok();
    assert_eq!(result["isError"], false, "{}", reply.text());
    assert!(result.get("structuredContent").is_none(), "{result}");
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
    let state = &result["_meta"][HAND_OFF];
    assert_eq!(state["taskId"], id, "{result}");
    assert!(
        STATUSES.contains(&state["status"].as_str().unwrap_or("")),
        "{result}"
    );
    assert!(state["pollIntervalMs"].is_u64(), "{result}");
    id
}

/// Checks `value` against `schema` for the keywords the task tools' output schema
/// uses (`type`, `enum`, `minimum`, `properties`, `required`,
/// `additionalProperties`), as a validating client would; `Err` names the first
/// place that fails.
fn conforms(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let fail = |what: &str| Err(format!("{at}: {what} (value {value})"));
    let typed = match schema["type"].as_str() {
        None => true,
        Some("object") => value.is_object(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some(other) => return fail(&format!("unknown type {other}")),
    };
    if !typed {
        return fail(&format!("not of type {}", schema["type"]));
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        return fail("not in the enum");
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), value.as_f64())
        && n < min
    {
        return fail("below the minimum");
    }
    let Some(object) = value.as_object() else {
        return Ok(());
    };
    for key in schema["required"].as_array().into_iter().flatten() {
        if !object.contains_key(key.as_str().unwrap_or("")) {
            return fail(&format!("missing {key}"));
        }
    }
    for (key, field) in object {
        let at = format!("{at}.{key}");
        match schema["properties"].get(key) {
            Some(property) => conforms(property, field, &at)?,
            None => match &schema["additionalProperties"] {
                Value::Bool(false) => return fail(&format!("unexpected {key}")),
                extra @ Value::Object(_) => conforms(extra, field, &at)?,
                _ => {}
            },
        }
    }
    Ok(())
}

/// The task tools' output schema, from a `tools/list` without the extension, after
/// checking that all three declare the same one.
async fn output_schema(client: &Client) -> Value {
    let list = client
        .request("tools/list")
        .params(json!({}))
        .declare(false)
        .send()
        .await;
    let tools = list.ok()["tools"].as_array().unwrap();
    let schemas: Vec<&Value> = ["task_status", "task_answer", "task_cancel"]
        .iter()
        .map(|name| {
            let tool = tools.iter().find(|t| t["name"] == *name).unwrap();
            &tool["outputSchema"]
        })
        .collect();
    assert!(schemas.iter().all(|s| s == &schemas[0]), "{schemas:?}");
    schemas[0].clone()
}

/// The task object of a task tool's answer, after checking it against `schema`.
fn structured<'a>(answer: &'a Value, schema: &Value) -> &'a Value {
    let state = &answer["structuredContent"];
    if let Err(e) = conforms(schema, state, "structuredContent") {
        panic!("{e}; answer: {answer}");
    }
    state
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
        for tool in &without.ok()["tools"].as_array().unwrap()[5..] {
            let schema = &tool["outputSchema"];
            assert_eq!(schema["type"], "object", "{tool}");
            assert_eq!(schema["required"], json!(["taskId", "status"]), "{tool}");
            assert_eq!(schema["properties"]["status"]["enum"], json!(STATUSES));
            for field in [
                "taskId",
                "pollIntervalMs",
                "statusMessage",
                "inputRequests",
                "result",
                "error",
            ] {
                assert!(schema["properties"][field].is_object(), "{field}: {tool}");
            }
        }
        // The inner server's own tools stay as they were.
        assert!(
            without.ok()["tools"].as_array().unwrap()[..5]
                .iter()
                .all(|t| t.get("outputSchema").is_none())
        );

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

    // An answer that comes after the end says so, not that no question matched.
    let late = task_tool(
        client,
        "task_answer",
        json!({"taskId": id, "answers": {"r1.confirm": {"action": "accept", "content": {"confirm": false}}}}),
        ALICE,
    )
    .await;
    let text = texts(&late);
    assert!(
        text.starts_with(
            "The task had already ended (completed); these answers were not recorded."
        ),
        "{late}"
    );
    assert!(!text.contains("None of these answers matched"), "{late}");
    assert_eq!(late["structuredContent"]["status"], "completed", "{late}");
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
            // No `resultType` and no `serverInfo`: `_meta` holds the task alone.
            assert!(reply.ok().get("resultType").is_none(), "{}", reply.text());
            let meta = reply.ok()["_meta"].as_object().unwrap();
            assert_eq!(meta.keys().collect::<Vec<_>>(), [HAND_OFF], "{n}");
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
            assert!(done.get("resultType").is_none(), "{done}");
            assert!(done.get("_meta").is_none(), "{done}");
            assert_eq!(done["structuredContent"]["taskId"], id, "{done}");
            assert_eq!(done["structuredContent"]["status"], "completed", "{done}");
            assert_eq!(
                done["structuredContent"]["result"]["content"][0]["text"], "done",
                "{done}"
            );
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
async fn the_task_tools_refuse_anonymous_callers_by_default() {
    let store = std::sync::Arc::new(mcp_tasks::MemoryStore::new());
    let server = retrofitted(authenticated_layer_builder_on(store).with_task_tools()).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_tools_answer_the_task_as_structured_content_in_every_state() {
    let server = Server::with_layer(fixture_builder().with_task_tools()).await;
    let client = server.client();
    let schema = output_schema(&client).await;
    let tool =
        async |name: &str, arguments: Value| task_tool(&client, name, arguments, ALICE).await;

    // The hand-off: the task object in `_meta`, beside the layer's `serverInfo`.
    let reply = client
        .call_tool(
            "work",
            json!({"poll_ms": 1000, "message": "Queued"}),
            false,
            ALICE,
        )
        .await;
    let id = started_task(&reply);
    let handed = reply.ok();
    assert_eq!(handed["resultType"], "complete");
    assert_eq!(
        handed["_meta"][HAND_OFF],
        json!({"taskId": id, "status": "working", "pollIntervalMs": 1000,
            "statusMessage": "Queued"})
    );
    assert!(handed["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());
    assert!(
        texts(handed).contains(" Check about every second. "),
        "{handed}"
    );
    let task: TaskId = id.parse().unwrap();

    // working
    let working = tool("task_status", json!({"taskId": id})).await;
    assert_eq!(working["isError"], false);
    assert_eq!(
        structured(&working, &schema),
        &json!({"taskId": id, "status": "working", "pollIntervalMs": 1000,
            "statusMessage": "Queued"})
    );
    assert!(
        texts(&working).contains("Call task_status again in about a second;"),
        "{working}"
    );

    // input_required: the outstanding questions, as stored
    let ask = InputRequests::new()
        .with(
            "confirm-1",
            InputRequest::confirm("Delete a.txt?", "confirm"),
        )
        .with_status_message("Waiting for confirmation");
    server.tasks.require_input(&task, ask).await.unwrap();
    let stored = server.tasks.status(&task).await.unwrap();
    let asking = tool("task_status", json!({"taskId": id})).await;
    assert_eq!(asking["isError"], false);
    let state = structured(&asking, &schema);
    assert_eq!(
        state,
        &json!({"taskId": id, "status": "input_required", "pollIntervalMs": 1000,
            "statusMessage": "Waiting for confirmation",
            "inputRequests": stored.input_requests})
    );
    assert_eq!(
        state["inputRequests"]["confirm-1"]["method"],
        "elicitation/create"
    );
    assert_eq!(
        state["inputRequests"]["confirm-1"]["params"]["message"],
        "Delete a.txt?"
    );

    // task_answer: the task as the answers left it
    let answered = tool(
        "task_answer",
        json!({"taskId": id, "answers": {"confirm-1": {"action": "accept",
            "content": {"confirm": true}}}}),
    )
    .await;
    assert_eq!(answered["isError"], false);
    assert_eq!(
        structured(&answered, &schema),
        &json!({"taskId": id, "status": "working", "pollIntervalMs": 1000})
    );

    // completed: the tool's whole result, its own structuredContent inside it
    let result = json!({"content": [{"type": "text", "text": "3 rows"}],
        "structuredContent": {"rows": 3}, "isError": false});
    server.tasks.complete(&task, result).await.unwrap();
    let stored = server.tasks.status(&task).await.unwrap().result.unwrap();
    assert_eq!(stored["structuredContent"], json!({"rows": 3}));
    let done = tool("task_status", json!({"taskId": id})).await;
    assert_eq!(done["isError"], false);
    assert_eq!(
        structured(&done, &schema),
        &json!({"taskId": id, "status": "completed", "pollIntervalMs": 1000,
            "result": stored})
    );
    assert!(texts(&done).ends_with("\n3 rows"), "{done}");
    // Cancelling it changes nothing, and says so with the same object.
    let late = tool("task_cancel", json!({"taskId": id})).await;
    assert!(texts(&late).contains("had already ended"), "{late}");
    assert_eq!(structured(&late, &schema), &done["structuredContent"]);

    // failed: the JSON-RPC error (an error answer, with the object all the same)
    let reply = client.call_tool("work", json!({}), false, ALICE).await;
    let id = started_task(&reply);
    assert_eq!(reply.ok()["_meta"][HAND_OFF]["pollIntervalMs"], 5000);
    assert!(
        texts(reply.ok()).contains(" Check about every 5 seconds. "),
        "{}",
        reply.text()
    );
    let working = tool("task_status", json!({"taskId": id})).await;
    assert!(
        texts(&working).contains("Call task_status again in about 5 seconds;"),
        "{working}"
    );
    let task: TaskId = id.parse().unwrap();
    server
        .tasks
        .fail(&task, RpcError::internal("backend crashed"))
        .await
        .unwrap();
    let failed = tool("task_status", json!({"taskId": id})).await;
    assert_eq!(failed["isError"], true);
    let state = structured(&failed, &schema);
    assert_eq!(state["status"], "failed");
    assert_eq!(
        state["error"],
        json!({"code": -32603, "message": "backend crashed"})
    );
    assert!(state.get("result").is_none() && state.get("inputRequests").is_none());
    assert!(
        texts(&failed).contains("backend crashed (error -32603)"),
        "{failed}"
    );

    // cancelled, by task_cancel and as task_status reads it after
    let reply = client.call_tool("work", json!({}), false, ALICE).await;
    let id = started_task(&reply);
    let cancelled = tool("task_cancel", json!({"taskId": id})).await;
    let expected = json!({"taskId": id, "status": "cancelled", "pollIntervalMs": 5000,
        "statusMessage": "Cancelled by the client"});
    assert_eq!(cancelled["isError"], false);
    assert_eq!(structured(&cancelled, &schema), &expected);
    let status = tool("task_status", json!({"taskId": id})).await;
    assert_eq!(structured(&status, &schema), &expected);

    // No task, no object: an error answer, which the schema rule exempts.
    for (name, arguments) in [
        (
            "task_status",
            json!({"taskId": TaskId::random().to_string()}),
        ),
        ("task_cancel", json!({})),
        ("task_answer", json!({"taskId": id})),
    ] {
        let refused = tool(name, arguments).await;
        assert_eq!(refused["isError"], true, "{refused}");
        assert!(refused.get("structuredContent").is_none(), "{refused}");
    }
}
