//! The 2025-11-25 era through the layer, in front of a real rmcp server served
//! statelessly: the tasks capability and `execution.taskSupport`, task-augmented
//! `tools/call`, `tasks/get`, `tasks/result` (with a question on its stream and
//! the answer POSTed on its own), `tasks/list`, `tasks/cancel`, the errors of that
//! revision, the requests that mix the eras, and one record seen from both eras.

mod support;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::Full;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::worker::Tasks;
use mcp_tasks::{MemoryStore, TaskContext, TaskMode, TaskSpec, TasksLayer, TasksLayerBuilder};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use support::http::{Client, EventStream, Reply, TestServer, authenticate, serve};
use support::rmcp_server::{object, text, tools_server};
use tower::ServiceBuilder;

const VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2026_07_28,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_03_26,
];
const RELATED: &str = "io.modelcontextprotocol/related-task";

#[derive(Clone)]
struct Fixture {
    tasks: Tasks,
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        tools_server("legacy-fixture")
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let any = object(json!({"type": "object"}));
        let tools = [
            "job",
            "slow",
            "ask",
            "echo",
            "quick",
            "broken",
            "quick_auto",
            "quick_auto_required",
        ];
        Ok(ListToolsResult::with_all_items(
            tools
                .into_iter()
                .map(|name| Tool::new(name, "a test tool", any.clone()))
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ctx = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(TaskContext::from_parts);
        let tasks = self.tasks.clone();
        let spec = match request.name.as_ref() {
            "echo" => return Ok(text("echoed").into()),
            "quick" | "quick_auto" | "quick_auto_required" => {
                return Ok(text("answered at once").into());
            }
            "job" => TaskSpec::new().with_start(move |id| {
                tokio::spawn(async move {
                    tasks.complete(&id, text("job done")).await.unwrap();
                });
            }),
            "broken" => TaskSpec::new().with_start(move |id| {
                tokio::spawn(async move {
                    let failed = CallToolResult::error(vec![ContentBlock::text("it broke")]);
                    tasks.complete(&id, failed).await.unwrap();
                });
            }),
            "slow" => TaskSpec::new().with_work(|task| async move {
                task.run_until_ended(std::future::pending::<()>())
                    .await
                    .ok();
            }),
            "ask" => TaskSpec::new().with_start(move |id| {
                tokio::spawn(async move {
                    let ask =
                        InputRequests::new().with("go", InputRequest::confirm("Go on?", "confirm"));
                    tasks.require_input(&id, ask).await.unwrap();
                    let answers = tasks.wait_for_input(&id).await.unwrap();
                    let yes = answers["go"]["content"]["confirm"] == json!(true);
                    tasks
                        .complete(&id, text(format!("answer: {yes}")))
                        .await
                        .unwrap();
                });
            }),
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        match ctx.map(|c| c.create(spec)) {
            Some(Ok(())) => Ok(text("replaced by the task").into()),
            _ => Ok(text("ran without a task").into()),
        }
    }
}

async fn server() -> TestServer {
    server_replying(true).await
}

/// The fixture with JSON replies, or (`json: false`) every reply an SSE stream.
async fn server_replying(json: bool) -> TestServer {
    layered(json).await.0
}

/// The fixture and its layer (to drain it).
async fn layered(json: bool) -> (TestServer, TasksLayer) {
    layered_with(json, |builder| builder).await
}

/// The fixture behind its layer with `settings` applied on top of the fixture's.
async fn layered_with(
    json: bool,
    settings: impl FnOnce(TasksLayerBuilder) -> TasksLayerBuilder,
) -> (TestServer, TasksLayer) {
    let builder = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .with_tool_mode("ask", TaskMode::Required)
        .with_tool_mode("echo", TaskMode::Never)
        .with_tool_mode(
            "quick_auto",
            TaskMode::Auto {
                after: Duration::from_secs(600),
            },
        )
        .with_tool_mode(
            "quick_auto_required",
            TaskMode::AutoRequired {
                after: Duration::from_secs(600),
            },
        )
        .without_janitor();
    let layer = settings(builder).build().unwrap();
    let fixture = Fixture {
        tasks: layer.tasks(),
    };
    let rmcp = StreamableHttpService::new(
        move || Ok(fixture.clone()),
        Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(json)
            .with_sse_keep_alive(None)
            .with_sse_retry(None)
            .disable_allowed_hosts(),
    );
    let app = ServiceBuilder::new()
        .map_request(authenticate)
        .layer(layer.clone())
        .service(rmcp);
    (serve(app).await, layer)
}

/// A 2025-11-25 request (no `_meta`, the version header after `initialize`) as
/// `who`.
fn request(method: &str, params: Value, who: Option<&str>) -> Request<Full<Bytes>> {
    message(
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
        who,
    )
}

fn message(message: Value, who: Option<&str>) -> Request<Full<Bytes>> {
    let mut request = Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(who) = who {
        request = request.header(header::AUTHORIZATION, format!("Bearer {who}"));
    }
    request
        .body(Full::new(Bytes::from(message.to_string())))
        .unwrap()
}

async fn send(server: &TestServer, method: &str, params: Value, who: Option<&str>) -> Reply {
    Client::new(server.addr)
        .send(request(method, params, who))
        .await
}

async fn create(server: &TestServer, tool: &str, who: &str) -> String {
    let params = json!({"name": tool, "arguments": {}, "task": {"ttl": 60_000}});
    let reply = send(server, "tools/call", params, Some(who)).await;
    let task = &reply.ok()["task"];
    assert!(support::is_task_id(&task["taskId"]), "{}", reply.text());
    task["taskId"].as_str().unwrap().to_owned()
}

/// `tasks/result` of `id`, read as a stream of events.
async fn result_stream(server: &TestServer, id: &str, who: &str) -> EventStream {
    Client::new(server.addr)
        .open(request("tasks/result", json!({"taskId": id}), Some(who)))
        .await
}

/// The answer of a `tasks/result`: JSON when the task had already ended, else the
/// next message of its stream.
async fn result_of(mut stream: EventStream) -> Value {
    match support::http::is_event_stream(&stream.headers) {
        true => stream.next_message().await,
        false => stream.json().await,
    }
}

#[tokio::test]
async fn initialize_advertises_tasks_to_clients_that_declared_them_and_only_to_them() {
    let server = server().await;
    let init = |capabilities: Value| {
        json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "t", "version": "1"}})
    };
    let declared = send(&server, "initialize", init(json!({"tasks": {}})), None).await;
    assert_eq!(
        declared.ok()["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
    );
    assert_eq!(declared.ok()["protocolVersion"], "2025-11-25");
    let plain = send(&server, "initialize", init(json!({})), None).await;
    assert!(plain.ok()["capabilities"].get("tasks").is_none());
}

#[tokio::test]
async fn tools_list_gives_each_tool_its_task_support() {
    let server = server().await;
    let reply = send(&server, "tools/list", json!({}), None).await;
    let support: Vec<(String, String)> = reply.ok()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_owned();
            (
                name,
                t["execution"]["taskSupport"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (tool, wanted) in [
        ("job", "optional"),
        ("ask", "required"),
        ("echo", "forbidden"),
    ] {
        assert!(
            support.contains(&(tool.to_owned(), wanted.to_owned())),
            "{tool}: {support:?}"
        );
    }
}

#[tokio::test]
async fn a_task_is_created_got_and_resulted_in_this_revisions_shapes() {
    let server = server().await;
    let params = json!({"name": "job", "arguments": {}, "task": {"ttl": 60_000}});
    let created = send(&server, "tools/call", params, Some("alice")).await;
    let task = &created.ok()["task"];
    for key in ["taskId", "status", "createdAt", "lastUpdatedAt", "ttl"] {
        assert!(task.get(key).is_some(), "{key} in {task}");
    }
    assert!(task.get("resultType").is_none() && created.ok().get("taskId").is_none());
    assert!(support::is_rfc3339(&task["createdAt"]));
    let id = task["taskId"].as_str().unwrap();
    let result = result_of(result_stream(&server, id, "alice").await).await;
    assert_eq!(result["id"], 7);
    assert_eq!(result["result"]["content"][0]["text"], "job done");
    assert_eq!(result["result"]["_meta"][RELATED]["taskId"], id);
    assert!(result["result"].get("resultType").is_none());
    let got = send(&server, "tasks/get", json!({"taskId": id}), Some("alice")).await;
    assert_eq!(got.ok()["status"], "completed");
    assert_eq!(got.ok()["taskId"], id);
    assert!(got.ok().get("ttl").is_some() && got.ok().get("result").is_none());
    // Once ended, the result is a plain JSON answer.
    let again = send(
        &server,
        "tasks/result",
        json!({"taskId": id}),
        Some("alice"),
    )
    .await;
    assert_eq!(again.ok()["content"][0]["text"], "job done");
}

#[tokio::test]
async fn a_tool_error_is_a_failed_task_in_this_revision() {
    let server = server().await;
    let id = create(&server, "broken", "alice").await;
    let result = result_of(result_stream(&server, &id, "alice").await).await;
    assert_eq!(result["result"]["isError"], true);
    let got = send(&server, "tasks/get", json!({"taskId": id}), Some("alice")).await;
    assert_eq!(got.ok()["status"], "failed");
}

#[tokio::test]
async fn a_tool_that_answers_at_once_still_answers_a_task_augmented_call_with_a_task() {
    let server = server().await;
    let id = create(&server, "quick", "alice").await;
    let got = send(&server, "tasks/get", json!({"taskId": id}), Some("alice")).await;
    assert_eq!(got.ok()["status"], "completed");
    let result = send(
        &server,
        "tasks/result",
        json!({"taskId": id}),
        Some("alice"),
    )
    .await;
    assert_eq!(result.ok()["content"][0]["text"], "answered at once");
}

#[tokio::test]
async fn an_answer_given_at_once_over_sse_is_stored_as_an_ended_task_too() {
    let server = server_replying(false).await;
    let params = json!({"name": "quick", "arguments": {}, "task": {}});
    let reply = send(&server, "tools/call", params, Some("alice")).await;
    let id = reply.ok()["task"]["taskId"].as_str().unwrap().to_owned();
    let result = result_of(result_stream(&server, &id, "alice").await).await;
    assert_eq!(result["result"]["content"][0]["text"], "answered at once");
    // A tool that makes a task over SSE answers with that task.
    let id = create(&server, "job", "alice").await;
    let result = result_of(result_stream(&server, &id, "alice").await).await;
    assert_eq!(result["result"]["content"][0]["text"], "job done");
}

#[tokio::test]
async fn auto_tools_answer_a_task_augmented_call_with_a_task_at_once() {
    let server = server().await;
    // A budget of ten minutes: the task comes at once, not when it runs out.
    for tool in ["quick_auto", "quick_auto_required"] {
        let id = create(&server, tool, "alice").await;
        let result = result_of(result_stream(&server, &id, "alice").await).await;
        assert_eq!(
            result["result"]["content"][0]["text"], "answered at once",
            "{tool}"
        );
        let got = send(&server, "tasks/get", json!({"taskId": id}), Some("alice")).await;
        assert_eq!(got.ok()["status"], "completed");
    }
    // Without `task`, an Auto tool answers directly; an AutoRequired one refuses.
    let direct = json!({"name": "quick_auto", "arguments": {}});
    let reply = send(&server, "tools/call", direct, Some("alice")).await;
    assert_eq!(reply.ok()["content"][0]["text"], "answered at once");
    let required = json!({"name": "quick_auto_required", "arguments": {}});
    send(&server, "tools/call", required, Some("alice"))
        .await
        .assert_error(-32601, 200);
}

#[tokio::test]
async fn a_draining_layer_refuses_task_augmented_calls_as_retryable() {
    let (server, layer) = layered(true).await;
    let running = create(&server, "slow", "alice").await;
    let drained = tokio::spawn({
        let layer = layer.clone();
        async move { layer.drain(Duration::from_secs(600)).await }
    });
    support::wait::poll(async || layer.is_draining().then_some(()))
        .await
        .expect("the layer drains");
    let params = json!({"name": "job", "arguments": {}, "task": {}});
    let refused = send(&server, "tools/call", params, Some("alice")).await;
    refused.assert_error(-32603, 503);
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(refused.message()["error"]["data"]["retryable"], true);
    // The running task is still read and cancelled on this era while the layer drains.
    let cancelled = send(
        &server,
        "tasks/cancel",
        json!({"taskId": running}),
        Some("alice"),
    )
    .await;
    assert_eq!(cancelled.ok()["status"], "cancelled");
    assert_eq!(drained.await.unwrap(), 0);
}

#[tokio::test]
async fn the_per_owner_cap_holds_for_task_augmented_calls_as_for_the_other_era() {
    let (server, _layer) = layered_with(true, |b| b.with_max_tasks_per_owner(2)).await;
    for _ in 0..2 {
        create(&server, "slow", "alice").await;
    }
    // One past the cap: refused, and nothing more is stored.
    let params = json!({"name": "slow", "arguments": {}, "task": {}});
    let refused = send(&server, "tools/call", params, Some("alice")).await;
    refused.assert_error(-32603, 200);
    assert_eq!(refused.message()["error"]["data"]["limit"], "per_owner");
    let listed = send(&server, "tasks/list", json!({}), Some("alice")).await;
    assert_eq!(listed.ok()["tasks"].as_array().unwrap().len(), 2);
    // Another principal still gets its task.
    create(&server, "slow", "bob").await;
}

#[tokio::test]
async fn task_support_errors_and_a_call_without_task_answered_directly() {
    let server = server().await;
    let required = json!({"name": "ask", "arguments": {}});
    send(&server, "tools/call", required, Some("alice"))
        .await
        .assert_error(-32601, 200);
    let forbidden = json!({"name": "echo", "arguments": {}, "task": {}});
    send(&server, "tools/call", forbidden, Some("alice"))
        .await
        .assert_error(-32601, 200);
    let direct = send(
        &server,
        "tools/call",
        json!({"name": "job", "arguments": {}}),
        None,
    )
    .await;
    assert_eq!(direct.ok()["content"][0]["text"], "ran without a task");
    for ttl in [json!(-1), json!(1.5), json!(1e20), json!("60000")] {
        let params = json!({"name": "job", "arguments": {}, "task": {"ttl": ttl}});
        let reply = send(&server, "tools/call", params, Some("alice")).await;
        reply.assert_error(-32602, 200);
    }
    let params = json!({"name": "job", "arguments": {}, "task": 5});
    send(&server, "tools/call", params, Some("alice"))
        .await
        .assert_error(-32602, 200);
}

#[tokio::test]
async fn unknown_and_foreign_ids_answer_alike_and_are_never_echoed() {
    let server = server().await;
    let id = create(&server, "slow", "alice").await;
    for method in ["tasks/get", "tasks/cancel", "tasks/result"] {
        let foreign = send(&server, method, json!({"taskId": id}), Some("bob")).await;
        let unknown = send(&server, method, json!({"taskId": "nope"}), Some("bob")).await;
        foreign.assert_error(-32602, 200);
        assert_eq!(
            foreign.message()["error"],
            unknown.message()["error"],
            "{method}"
        );
        assert!(!foreign.text().contains(&id));
    }
    let got = send(&server, "tasks/get", json!({"taskId": id}), Some("alice")).await;
    assert_eq!(got.ok()["status"], "working");
}

#[tokio::test]
async fn cancel_ends_a_running_task_and_a_second_cancel_is_invalid_params() {
    let server = server().await;
    let id = create(&server, "slow", "alice").await;
    let mut stream = result_stream(&server, &id, "alice").await;
    let cancelled = send(
        &server,
        "tasks/cancel",
        json!({"taskId": id}),
        Some("alice"),
    )
    .await;
    assert_eq!(cancelled.ok()["status"], "cancelled");
    assert_eq!(cancelled.ok()["taskId"], id);
    let again = send(
        &server,
        "tasks/cancel",
        json!({"taskId": id}),
        Some("alice"),
    )
    .await;
    again.assert_error(-32602, 200);
    assert!(!again.text().contains(&id));
    // The waiting `tasks/result` ends with the cancellation.
    let ended = stream.next_message().await;
    assert_eq!(ended["error"]["code"], -32603);
}

#[tokio::test]
async fn a_question_goes_out_on_the_result_stream_and_its_answer_comes_back_in_any_post() {
    let server = server().await;
    let params = json!({"name": "ask", "arguments": {}, "task": {}});
    let created = send(&server, "tools/call", params, Some("alice")).await;
    let id = created.ok()["task"]["taskId"].as_str().unwrap().to_owned();
    let mut stream = result_stream(&server, &id, "alice").await;
    assert!(support::http::is_event_stream(&stream.headers));
    let question = stream.next_message().await;
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(question["params"]["_meta"][RELATED]["taskId"], id.as_str());
    assert_eq!(question["params"]["message"], "Go on?");
    let asked = question["id"].as_str().unwrap().to_owned();
    let got = send(&server, "tasks/get", json!({"taskId": id}), Some("alice")).await;
    assert_eq!(got.ok()["status"], "input_required");

    let client = Client::new(server.addr);
    let answer = |who: Option<&str>, id: Value, body: Value| {
        let mut reply = json!({"jsonrpc": "2.0", "id": id});
        reply
            .as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        client.send(message(reply, who))
    };
    let yes = json!({"result": {"action": "accept", "content": {"confirm": true}}});
    // Another principal's answer, a forged id and a malformed answer change nothing.
    answer(Some("bob"), json!(asked), yes.clone())
        .await
        .assert_error(-32602, 400);
    let forged = format!("{}x", &asked[..asked.len() - 4]);
    answer(Some("alice"), json!(forged), yes.clone())
        .await
        .assert_error(-32602, 400);
    answer(Some("alice"), json!(asked), json!({"result": 5}))
        .await
        .assert_error(-32602, 400);
    let got = send(&server, "tasks/get", json!({"taskId": id}), Some("alice")).await;
    assert_eq!(got.ok()["status"], "input_required");

    let accepted = answer(Some("alice"), json!(asked), yes.clone()).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    let result = stream.next_message().await;
    assert_eq!(result["id"], 7);
    assert_eq!(result["result"]["content"][0]["text"], "answer: true");
    // A stale answer, to a task that has ended, is refused, and says why.
    let late = answer(Some("alice"), json!(asked), yes).await;
    late.assert_error(-32602, 400);
    assert_eq!(
        late.json["error"]["message"],
        "Invalid params: the task has ended",
        "{}",
        late.text()
    );
}

#[tokio::test]
async fn tasks_list_shows_the_callers_own_tasks_newest_first_in_bound_pages() {
    let server = server().await;
    let mut mine = Vec::new();
    for _ in 0..3 {
        mine.push(create(&server, "slow", "alice").await);
    }
    let theirs = create(&server, "slow", "bob").await;
    let listed = send(&server, "tasks/list", json!({}), Some("alice")).await;
    let ids: Vec<&str> = listed.ok()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{}", listed.text());
    assert!(!ids.contains(&theirs.as_str()));
    for id in &mine {
        assert!(ids.contains(&id.as_str()));
    }
    let created: Vec<&str> = listed.ok()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["createdAt"].as_str().unwrap())
        .collect();
    assert!(created.windows(2).all(|w| w[0] >= w[1]), "{created:?}");
    assert!(listed.ok().get("nextCursor").is_none());
    for cursor in [json!("forged"), json!(5)] {
        let reply = send(
            &server,
            "tasks/list",
            json!({"cursor": cursor}),
            Some("alice"),
        )
        .await;
        reply.assert_error(-32602, 200);
    }
}

#[tokio::test]
async fn a_cursor_answers_only_the_principal_it_was_given_to() {
    let server = server().await;
    for _ in 0..(101 + 1) {
        create(&server, "slow", "alice").await;
    }
    let first = send(&server, "tasks/list", json!({}), Some("alice")).await;
    assert_eq!(first.ok()["tasks"].as_array().unwrap().len(), 100);
    let cursor = first.ok()["nextCursor"].clone();
    assert!(cursor.is_string(), "{}", first.text());
    let rest = send(
        &server,
        "tasks/list",
        json!({"cursor": cursor}),
        Some("alice"),
    )
    .await;
    assert_eq!(rest.ok()["tasks"].as_array().unwrap().len(), 2);
    let foreign = send(
        &server,
        "tasks/list",
        json!({"cursor": cursor}),
        Some("bob"),
    )
    .await;
    foreign.assert_error(-32602, 200);
}

#[tokio::test]
async fn requests_that_mix_the_eras_are_refused_and_change_nothing() {
    let server = server().await;
    let id = create(&server, "slow", "alice").await;
    let modern_meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/cancel",
        "params": {"taskId": id, "_meta": modern_meta}});
    let mut mixed = message(body, Some("alice"));
    mixed
        .headers_mut()
        .insert("mcp-session-id", "s1".parse().unwrap());
    mixed
        .headers_mut()
        .insert("mcp-method", "tasks/cancel".parse().unwrap());
    mixed.headers_mut().insert("mcp-name", id.parse().unwrap());
    mixed
        .headers_mut()
        .insert("mcp-protocol-version", "2026-07-28".parse().unwrap());
    Client::new(server.addr)
        .send(mixed)
        .await
        .assert_error(-32600, 400);
    let got = send(&server, "tasks/get", json!({"taskId": id}), Some("alice")).await;
    assert_eq!(got.ok()["status"], "working");
}

#[tokio::test]
async fn traffic_that_is_not_about_tasks_passes_through() {
    let server = server().await;
    let ping = send(&server, "ping", json!({}), None).await;
    assert_eq!(ping.status, 200, "{}", ping.text());
    assert_eq!(ping.ok(), &json!({}));
    let direct = send(
        &server,
        "tools/call",
        json!({"name": "echo", "arguments": {}}),
        None,
    )
    .await;
    assert_eq!(direct.ok()["content"][0]["text"], "echoed");
}

#[tokio::test]
async fn one_record_is_seen_from_both_eras() {
    let server = server().await;
    let id = create(&server, "job", "alice").await;
    let ended = result_of(result_stream(&server, &id, "alice").await).await;
    assert_eq!(ended["result"]["content"][0]["text"], "job done");
    let modern = Client::new(server.addr).get(&id, Some("alice")).await;
    assert_eq!(modern.ok()["status"], "completed");
    assert_eq!(modern.ok()["result"]["content"][0]["text"], "job done");
    assert!(modern.ok().get("ttlMs").is_some());
}
