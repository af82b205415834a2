//! The layer in front of a real rmcp server (2026-07-28, stateless), over loopback
//! HTTP: with JSON replies and with SSE replies, next to the same rmcp server without
//! the layer.

mod support;

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::worker::Tasks;
use mcp_tasks::{MemoryStore, Principal, TaskContext, TaskSpec, TasksLayer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use support::http::{Client, Reply, TestServer, serve};
use support::requests::Call;
use support::rmcp_server::{object, text, tools_server};
use support::wait;
use tower::{ServiceBuilder, ServiceExt as _};

const EXT: &str = "io.modelcontextprotocol/tasks";

#[derive(Clone)]
struct Fixture {
    tasks: Option<Tasks>,
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        tools_server("rmcp-fixture")
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let any = object(json!({"type": "object"}));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Echoes its text", any.clone()),
            Tool::new("job", "A task when possible", any.clone()),
            Tool::new("ask", "A task that asks a question", any),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let ctx = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(TaskContext::from_parts);
        let tasks = self.tasks.clone();
        match request.name.as_ref() {
            "echo" => Ok(text(args.get("text").and_then(Value::as_str).unwrap_or("")).into()),
            "job" => {
                let spec = TaskSpec::new().with_start(move |id| {
                    let tasks = tasks.expect("the layer is present");
                    tokio::spawn(async move {
                        tasks.progress(&id, "half way").await.unwrap();
                        tasks.complete(&id, text("job done")).await.unwrap();
                    });
                });
                match ctx.map(|c| c.create(spec)) {
                    Some(Ok(())) => Ok(text("replaced by the task").into()),
                    _ => Ok(text("job done synchronously").into()),
                }
            }
            "ask" => {
                let spec = TaskSpec::new().with_start(move |id| {
                    let tasks = tasks.expect("the layer is present");
                    tokio::spawn(async move {
                        let ask = InputRequests::new()
                            .with("go", InputRequest::confirm("Go on?", "confirm"));
                        tasks.require_input(&id, ask).await.unwrap();
                        let answers = tasks.wait_for_input(&id).await.unwrap();
                        let yes = answers["go"]["content"]["confirm"] == json!(true);
                        tasks
                            .complete(&id, text(format!("answer: {yes}")))
                            .await
                            .unwrap();
                    });
                });
                match ctx.map(|c| c.create(spec)) {
                    Some(Ok(())) => Ok(text("replaced by the task").into()),
                    _ => Err(ErrorData::internal_error("tasks needed", None)),
                }
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

fn rmcp_service(
    fixture: Fixture,
    json_response: bool,
) -> StreamableHttpService<Fixture, LocalSessionManager> {
    StreamableHttpService::new(
        move || Ok(fixture.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(json_response)
            .with_sse_keep_alive(None)
            .with_sse_retry(None)
            .disable_allowed_hosts(),
    )
}

async fn bare(json_response: bool) -> TestServer {
    serve(rmcp_service(Fixture { tasks: None }, json_response)).await
}

async fn layered(json_response: bool) -> TestServer {
    let layer = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .with_server_info("rmcp-fixture", "1.0.0")
        .without_janitor()
        .build()
        .unwrap();
    let fixture = Fixture {
        tasks: Some(layer.tasks()),
    };
    let app = ServiceBuilder::new()
        .map_request(|mut req: Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(Principal::from("alice"));
            req
        })
        .layer(layer)
        .service(rmcp_service(fixture, json_response));
    serve(app).await
}

/// One exchange with `server`: `method` with `params` and JSON-RPC id 7, declaring
/// the extension when `declared`, with `name` (or no `Mcp-Name`).
async fn post(
    server: &TestServer,
    method: &str,
    name: Option<&str>,
    params: Value,
    declared: bool,
) -> Reply {
    let client = Client::new(server.addr);
    let call = client
        .request(method)
        .id(json!(7))
        .params(params)
        .declare(declared);
    let call = match name {
        Some(name) => call.header("mcp-name", name),
        None => call.without_header("mcp-name"),
    };
    call.send().await
}

async fn get_task(server: &TestServer, id: &str) -> Value {
    let reply = post(server, "tasks/get", Some(id), json!({"taskId": id}), true).await;
    assert_eq!(reply.status, 200);
    reply.message()["result"].clone()
}

async fn poll_until(server: &TestServer, id: &str, wanted: &str) -> Value {
    let mut task = Value::Null;
    let reached = wait::poll(async || {
        task = get_task(server, id).await;
        (task["status"] == wanted).then(|| task.clone())
    })
    .await;
    reached.unwrap_or_else(|| panic!("task never reached {wanted}: {task}"))
}

#[tokio::test]
async fn sync_traffic_is_byte_identical_with_and_without_the_layer() {
    for json_response in [true, false] {
        let (plain, wrapped) = (bare(json_response).await, layered(json_response).await);
        let cases = [
            ("tools/list", None, json!({}), false),
            (
                "tools/call",
                Some("echo"),
                json!({"name": "echo", "arguments": {"text": "hi"}}),
                true,
            ),
            ("tools/call", Some("job"), json!({"name": "job"}), false),
        ];
        for (method, name, params, declared) in cases {
            let a = post(&plain, method, name, params.clone(), declared).await;
            let b = post(&wrapped, method, name, params, declared).await;
            assert_eq!(a.status, b.status, "{method}");
            assert_eq!(a.content_type(), b.content_type(), "{method}");
            assert_eq!(a.body, b.body, "{method} json_response={json_response}");
        }
    }
}

#[tokio::test]
async fn a_tool_becomes_a_task_and_completes_over_json_and_sse() {
    for json_response in [true, false] {
        let server = layered(json_response).await;
        let reply = post(
            &server,
            "tools/call",
            Some("job"),
            json!({"name": "job"}),
            true,
        )
        .await;
        assert_eq!(reply.status, 200);
        // The task handle travels the way the server answers: a JSON body, or the
        // response event of its SSE stream.
        let expected = match json_response {
            true => "application/json",
            false => "text/event-stream",
        };
        assert_eq!(reply.content_type(), expected);
        let created = reply.message()["result"].clone();
        assert_eq!(created["resultType"], "task", "{created}");
        assert_eq!(created["status"], "working");
        assert!(created.get("content").is_none());
        assert_eq!(
            created["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "rmcp-fixture"
        );
        let id = created["taskId"].as_str().unwrap().to_owned();
        let done = poll_until(&server, &id, "completed").await;
        assert_eq!(done["resultType"], "complete");
        assert_eq!(done["result"]["content"][0]["text"], "job done");
        assert!(
            done.get("statusMessage").is_none(),
            "the progress text goes with the work: {done}"
        );
    }
}

#[tokio::test]
async fn a_question_round_trip_through_rmcp() {
    let server = layered(true).await;
    let reply = post(
        &server,
        "tools/call",
        Some("ask"),
        json!({"name": "ask"}),
        true,
    )
    .await;
    let id = reply.message()["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let waiting = poll_until(&server, &id, "input_required").await;
    assert_eq!(
        waiting["inputRequests"]["go"]["method"],
        "elicitation/create"
    );
    let update = post(
        &server,
        "tasks/update",
        Some(&id),
        json!({"taskId": id, "inputResponses": {"go": {"action": "accept", "content": {"confirm": true}}}}),
        true,
    )
    .await;
    assert_eq!(update.message()["result"]["resultType"], "complete");
    let done = poll_until(&server, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "answer: true");
}

#[tokio::test]
async fn discover_gains_the_extension_and_keeps_everything_else() {
    for json_response in [true, false] {
        let plain = bare(json_response).await;
        let wrapped = layered(json_response).await;
        let a = post(&plain, "server/discover", None, json!({}), true)
            .await
            .message()
            .clone();
        let b = post(&wrapped, "server/discover", None, json!({}), true)
            .await
            .message()
            .clone();
        assert_eq!(b["result"]["capabilities"]["extensions"][EXT], json!({}));
        assert!(b["result"]["capabilities"].get("tasks").is_none());
        let mut expected = a.clone();
        expected["result"]["capabilities"]
            .as_object_mut()
            .unwrap()
            .remove("tasks");
        expected["result"]["capabilities"]["extensions"][EXT] = json!({});
        assert_eq!(b, expected);
    }
}

#[tokio::test]
async fn without_the_extension_the_handler_runs_synchronously() {
    let server = layered(true).await;
    let reply = post(
        &server,
        "tools/call",
        Some("job"),
        json!({"name": "job"}),
        false,
    )
    .await;
    let result = &reply.message()["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["content"][0]["text"], "job done synchronously");
}

#[tokio::test]
async fn the_task_surface_is_served_by_the_layer_not_rmcp() {
    let server = layered(true).await;
    let unknown = "A".repeat(43);
    let reply = post(
        &server,
        "tasks/get",
        Some(&unknown),
        json!({"taskId": unknown}),
        true,
    )
    .await;
    assert_eq!(reply.message()["error"]["code"], -32602);
    let reply = post(
        &server,
        "tasks/get",
        Some(&unknown),
        json!({"taskId": unknown}),
        false,
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.message()["error"]["code"], -32021);
    let reply = post(&server, "tasks/list", None, json!({}), true).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.message()["error"]["code"], -32601);
}

#[tokio::test]
async fn the_layer_wraps_any_tower_service_clone() {
    // A service stack built once and cloned per connection keeps working: clones
    // share the store, so a task made through one clone is visible through another.
    let layer = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .without_janitor()
        .build()
        .unwrap();
    let fixture = Fixture {
        tasks: Some(layer.tasks()),
    };
    let service = ServiceBuilder::new()
        .layer(layer)
        .service(rmcp_service(fixture, true));
    let request = |method: &str, params: Value| {
        Call::new(method)
            .params(params)
            .header("host", "127.0.0.1")
            .build::<Full<Bytes>>()
    };
    let created = service
        .clone()
        .oneshot(request("tools/call", json!({"name": "job"})))
        .await
        .unwrap();
    let body = created.into_body().collect().await.unwrap().to_bytes();
    let created: Value = serde_json::from_slice(&body).unwrap();
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let got = service
        .clone()
        .oneshot(request("tasks/get", json!({"taskId": id})))
        .await
        .unwrap();
    let body = got.into_body().collect().await.unwrap().to_bytes();
    let got: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(got["result"]["taskId"], id);
}
