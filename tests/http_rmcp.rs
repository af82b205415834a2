//! The layer in front of a real rmcp server (2026-07-28, stateless), over loopback
//! HTTP: with JSON replies and with SSE replies, next to the same rmcp server without
//! the layer.

#[path = "support/server.rs"]
mod server;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::{MemoryStore, Principal, TaskContext, TaskSpec, Tasks, TasksLayer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use server::{TestServer, serve};
use tower::{ServiceBuilder, ServiceExt as _};

const EXT: &str = "io.modelcontextprotocol/tasks";

#[derive(Clone)]
struct Fixture {
    tasks: Option<Tasks>,
}

fn text(value: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value)])
}

fn object(value: Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("rmcp-fixture", "1.0.0"))
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
        .with_server_info("rmcp-fixture", "1.0.0")
        .without_janitor()
        .build()
        .unwrap();
    let fixture = Fixture {
        tasks: Some(layer.handle()),
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

struct Reply {
    status: u16,
    content_type: String,
    body: Bytes,
}

impl Reply {
    /// The JSON-RPC response, from a JSON body or from the SSE event carrying it.
    fn message(&self) -> Value {
        if !self.content_type.starts_with("text/event-stream") {
            return serde_json::from_slice(&self.body).expect("a JSON body");
        }
        let text = std::str::from_utf8(&self.body).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("id").is_some() && m.get("method").is_none())
            .expect("an SSE event carrying the response")
    }
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn post(url: &str, method: &str, name: Option<&str>, params: Value, declared: bool) -> Reply {
    let mut params = params;
    let capabilities = if declared {
        json!({"extensions": {EXT: {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let mut req = Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        req = req.header("mcp-name", name);
    }
    let req = req
        .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), client().request(req))
        .await
        .expect("the server answers in time")
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        content_type,
        body,
    }
}

async fn get_task(url: &str, id: &str) -> Value {
    let reply = post(url, "tasks/get", Some(id), json!({"taskId": id}), true).await;
    assert_eq!(reply.status, 200);
    reply.message()["result"].clone()
}

async fn poll_until(url: &str, id: &str, wanted: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let task = get_task(url, id).await;
        if task["status"] == wanted {
            return task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task never reached {wanted}: {task}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
            let a = post(&plain.url, method, name, params.clone(), declared).await;
            let b = post(&wrapped.url, method, name, params, declared).await;
            assert_eq!(a.status, b.status, "{method}");
            assert_eq!(a.content_type, b.content_type, "{method}");
            assert_eq!(a.body, b.body, "{method} json_response={json_response}");
        }
    }
}

#[tokio::test]
async fn a_tool_becomes_a_task_and_completes_over_json_and_sse() {
    for json_response in [true, false] {
        let server = layered(json_response).await;
        let reply = post(
            &server.url,
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
        assert_eq!(reply.content_type, expected);
        let created = reply.message()["result"].clone();
        assert_eq!(created["resultType"], "task", "{created}");
        assert_eq!(created["status"], "working");
        assert!(created.get("content").is_none());
        assert_eq!(
            created["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "rmcp-fixture"
        );
        let id = created["taskId"].as_str().unwrap().to_owned();
        let done = poll_until(&server.url, &id, "completed").await;
        assert_eq!(done["resultType"], "complete");
        assert_eq!(done["result"]["content"][0]["text"], "job done");
        assert_eq!(done["statusMessage"], "half way");
    }
}

#[tokio::test]
async fn a_question_round_trip_through_rmcp() {
    let server = layered(true).await;
    let reply = post(
        &server.url,
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
    let waiting = poll_until(&server.url, &id, "input_required").await;
    assert_eq!(
        waiting["inputRequests"]["go"]["method"],
        "elicitation/create"
    );
    let update = post(
        &server.url,
        "tasks/update",
        Some(&id),
        json!({"taskId": id, "inputResponses": {"go": {"action": "accept", "content": {"confirm": true}}}}),
        true,
    )
    .await;
    assert_eq!(update.message()["result"]["resultType"], "complete");
    let done = poll_until(&server.url, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "answer: true");
}

#[tokio::test]
async fn discover_gains_the_extension_and_keeps_everything_else() {
    for json_response in [true, false] {
        let plain = bare(json_response).await;
        let wrapped = layered(json_response).await;
        let a = post(&plain.url, "server/discover", None, json!({}), true)
            .await
            .message();
        let b = post(&wrapped.url, "server/discover", None, json!({}), true)
            .await
            .message();
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
        &server.url,
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
        &server.url,
        "tasks/get",
        Some(&unknown),
        json!({"taskId": unknown}),
        true,
    )
    .await;
    assert_eq!(reply.message()["error"]["code"], -32602);
    let reply = post(
        &server.url,
        "tasks/get",
        Some(&unknown),
        json!({"taskId": unknown}),
        false,
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.message()["error"]["code"], -32021);
    let reply = post(&server.url, "tasks/list", None, json!({}), true).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.message()["error"]["code"], -32601);
}

#[tokio::test]
async fn the_layer_wraps_any_tower_service_clone() {
    // A service stack built once and cloned per connection keeps working: clones
    // share the store, so a task made through one clone is visible through another.
    let layer = TasksLayer::builder(MemoryStore::new())
        .without_janitor()
        .build()
        .unwrap();
    let fixture = Fixture {
        tasks: Some(layer.handle()),
    };
    let service = ServiceBuilder::new()
        .layer(layer)
        .service(rmcp_service(fixture, true));
    let request = |method: &str, params: Value| {
        let mut params = params;
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}}});
        let name = params
            .get("name")
            .or(params.get("taskId"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        Request::post("http://127.0.0.1/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("host", "127.0.0.1")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .header("mcp-name", name)
            .body(Full::new(Bytes::from(
                serde_json::to_vec(
                    &json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}),
                )
                .unwrap(),
            )))
            .unwrap()
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
