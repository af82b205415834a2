//! The gateway (`mcp-tasks-gateway`) in front of a server on an older revision: the official
//! TypeScript `@modelcontextprotocol/server-everything` (pinned in package.json,
//! speaking 2025-11-25 with sessions), run by Node on a loopback port. Between the
//! two sits a recorder in this process, which forwards every request through the
//! gateway's own proxy and notes what the upstream was sent and which of its
//! answers were cut short.
//!
//! Without `node_modules` (run `npm ci`) the tests are skipped with a message,
//! except under CI (`CI` set), where they fail.

#[path = "../gateway/src/proxy.rs"]
#[allow(dead_code)]
mod proxy;
mod support;
#[path = "../gateway/src/bridge/wire.rs"]
#[allow(dead_code)]
mod wire;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Request;
use http_body::{Body, Frame};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use mcp_tasks::error::BoxError;
use mcp_tasks::wire::{
    EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use serde_json::{Value, json};
use support::everything::{self, Everything};
use support::http::{Client, TestServer, serve};
use support::procs::{self, Proc};
use support::wait::{self, recv};
use tokio::sync::mpsc;
use tower::Service as _;

/// Every call of these tests is made as alice, unless it says otherwise.
const ALICE: Option<&str> = Some("alice");

/// One message the upstream was sent.
#[derive(Clone, Debug)]
struct Seen {
    http_method: String,
    /// `Mcp-Session-Id`.
    session: Option<String>,
    /// `MCP-Protocol-Version`.
    version: Option<String>,
    message: Value,
}

/// How the upstream's answer to a `tools/call` ended at the recorder.
#[derive(Debug, PartialEq)]
struct Ended {
    /// The bridge's id of the call.
    id: Value,
    /// Read to its end (`false`: dropped before).
    finished: bool,
}

/// Reports how the upstream's answer to a `tools/call` ended, when dropped: with
/// the call still waiting for its answer, or with the answer's body.
struct Report {
    id: Value,
    finished: bool,
    ended: mpsc::UnboundedSender<Ended>,
}

impl Drop for Report {
    fn drop(&mut self) {
        let _ = self.ended.send(Ended {
            id: self.id.take(),
            finished: self.finished,
        });
    }
}

/// The upstream's answer to a `tools/call`, with its report.
struct Watched {
    inner: proxy::ProxyBody,
    report: Report,
}

impl Body for Watched {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.report.finished = true;
        }
        polled
    }
}

/// The recorder between the gateway and server-everything.
struct Recorder {
    server: TestServer,
    seen: Arc<Mutex<Vec<Seen>>>,
    ended: mpsc::UnboundedReceiver<Ended>,
}

impl Recorder {
    async fn start(upstream: &str) -> Recorder {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let proxy =
            proxy::Proxy::with_config(upstream.parse().unwrap(), proxy::ProxyConfig::default());
        let log = seen.clone();
        let server = serve(tower::service_fn(move |request: Request<Incoming>| {
            let mut proxy = proxy.clone();
            let log = log.clone();
            let ended_tx = ended_tx.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let header = |name: &str| {
                    parts
                        .headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                };
                log.lock().unwrap().push(Seen {
                    http_method: parts.method.to_string(),
                    session: header("mcp-session-id"),
                    version: header("mcp-protocol-version"),
                    message: message.clone(),
                });
                // Made before the upstream answers: a gateway that leaves before
                // the answer's head drops it too.
                let report = (message["method"] == "tools/call").then(|| Report {
                    id: message["id"].clone(),
                    finished: false,
                    ended: ended_tx,
                });
                let response = proxy
                    .call(Request::from_parts(parts, Full::new(bytes)))
                    .await
                    .unwrap();
                let response = match report {
                    Some(report) => response.map(|inner| Watched { inner, report }.boxed_unsync()),
                    None => response,
                };
                Ok::<_, Infallible>(response)
            }
        }))
        .await;
        Recorder {
            server,
            seen,
            ended,
        }
    }

    /// Every message sent so far.
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The messages for `method` sent so far.
    fn seen_method(&self, method: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.message["method"] == method)
            .collect()
    }

    /// The `tools/call` of `tool` the upstream was sent (the last one).
    fn call_of(&self, tool: &str) -> Seen {
        self.seen_method("tools/call")
            .into_iter()
            .rfind(|s| s.message["params"]["name"] == tool)
            .unwrap_or_else(|| panic!("the upstream was sent no call of {tool}"))
    }

    /// Waits until the upstream was sent a message that `found` accepts.
    async fn until_seen(&self, what: &str, found: impl Fn(&Seen) -> bool) -> Seen {
        let mut hit = None;
        wait::until(what, || {
            hit = self.seen().into_iter().find(|s| found(s));
            hit.is_some()
        })
        .await;
        hit.expect("found")
    }
}

/// server-everything, the recorder in front of it, and the gateway in front of
/// that. The gateway's `Auto` budget is 0: every call becomes a task.
struct Stack {
    upstream: Everything,
    recorder: Recorder,
    gateway: Proc,
}

impl Stack {
    async fn start() -> Option<Stack> {
        Self::start_with(&[]).await
    }

    async fn start_with(env: &[(&str, &str)]) -> Option<Stack> {
        let (node, server) = everything::installed("the gateway bridge tests")?;
        let upstream = Everything::start(node, server);
        let recorder = Recorder::start(&upstream.url()).await;
        let mut gateway_env = vec![
            ("MCP_UPSTREAM", recorder.server.url.as_str()),
            ("MCP_AUTO_AFTER_MS", "0"),
            ("RUST_LOG", "warn"),
        ];
        gateway_env.extend_from_slice(env);
        let gateway = procs::spawn_gateway(&[], &gateway_env);
        Some(Stack {
            upstream,
            recorder,
            gateway,
        })
    }

    fn client(&self) -> Client {
        Client::new(self.gateway.addr)
    }
}

/// The `_meta` of a client that declared the tasks extension (when `tasks`) and
/// form elicitation.
fn eliciting_meta(tasks: bool) -> Value {
    let mut capabilities = json!({"elicitation": {}});
    if tasks {
        capabilities["extensions"] = json!({EXTENSION_ID: {}});
    }
    json!({META_PROTOCOL_VERSION: PROTOCOL_VERSION, META_CLIENT_CAPABILITIES: capabilities})
}

/// Every text content block of a tool result, joined.
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

/// Starts a task of `tool` that may ask questions; its id.
async fn create_eliciting_task(client: &Client, tool: &str, arguments: Value) -> String {
    let reply = client
        .request("tools/call")
        .params(json!({"name": tool, "arguments": arguments}))
        .meta(eliciting_meta(true))
        .principal("alice")
        .send()
        .await;
    let created = reply.ok();
    assert_eq!(created["resultType"], "task", "{}", reply.text());
    created["taskId"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_through_the_bridge_becomes_a_task_with_the_upstream_result() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();

    // Discovery is derived from the upstream's initialize, and gains the extension.
    let discover = client
        .request("server/discover")
        .principal("alice")
        .send()
        .await;
    let found = discover.ok();
    assert_eq!(
        found["supportedVersions"],
        json!([PROTOCOL_VERSION]),
        "{}",
        discover.text()
    );
    assert!(found["capabilities"]["extensions"][EXTENSION_ID].is_object());
    assert!(found["capabilities"]["tools"].is_object());
    assert!(found["capabilities"].get("tasks").is_none());
    let server_info = &found["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(
        server_info["name"],
        "mcp-servers/everything",
        "{}",
        discover.text()
    );

    let list = client.request("tools/list").principal("alice").send().await;
    let tools = list.ok()["tools"].as_array().unwrap().clone();
    assert!(tools.iter().any(|t| t["name"] == "echo"), "{}", list.text());
    assert!(
        tools
            .iter()
            .all(|t| t["execution"].get("taskSupport").is_none())
    );
    assert_eq!(list.ok()["resultType"], "complete");

    let id = client
        .create_task_id("echo", json!({"message": "through the bridge"}), ALICE)
        .await;
    let done = client.wait_for_status(&id, ALICE, "completed").await;
    assert_eq!(texts(&done["result"]), "Echo: through the bridge", "{done}");
    assert_eq!(done["result"]["resultType"], "complete");

    // The upstream got the older form, on the session the gateway opened.
    let initialize = stack.recorder.seen_method("initialize");
    assert_eq!(initialize.len(), 1, "{initialize:?}");
    assert_eq!(
        initialize[0].message["params"]["protocolVersion"],
        "2025-11-25"
    );
    let initialized = stack.recorder.seen_method("notifications/initialized");
    assert_eq!(initialized.len(), 1);
    let call = stack.recorder.call_of("echo");
    assert!(call.session.is_some());
    assert_eq!(call.session, initialized[0].session);
    assert_eq!(call.version.as_deref(), Some("2025-11-25"));
    let meta = &call.message["params"]["_meta"];
    assert!(
        meta.get(META_PROTOCOL_VERSION).is_none(),
        "{}",
        call.message
    );
    assert!(
        meta.get(META_CLIENT_CAPABILITIES).is_none(),
        "{}",
        call.message
    );
    assert!(
        call.message["id"].is_u64(),
        "the bridge's own id: {}",
        call.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_operation_reports_its_progress_as_the_status_message() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    let id = client
        .create_task_id(
            "trigger-long-running-operation",
            json!({"duration": 2, "steps": 4}),
            ALICE,
        )
        .await;
    let reporting = client
        .wait_for(&id, ALICE, |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.ends_with(" of 4"))
        })
        .await;
    assert_eq!(reporting["status"], "working", "{reporting}");
    let done = client.wait_for_status(&id, ALICE, "completed").await;
    assert_eq!(
        texts(&done["result"]),
        "Long running operation completed. Duration: 2 seconds, Steps: 4."
    );
    // The progress came under the layer's token, which the upstream was sent.
    let call = stack.recorder.call_of("trigger-long-running-operation");
    assert!(call.message["params"]["_meta"]["progressToken"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_question_is_answered_through_tasks_update() {
    let Some(mut stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    let id = create_eliciting_task(&client, "trigger-elicitation-request", json!({})).await;
    let asking = client.wait_for_status(&id, ALICE, "input_required").await;
    let requests = asking["inputRequests"].as_object().unwrap();
    assert_eq!(
        requests.keys().collect::<Vec<_>>(),
        ["r1.elicitation"],
        "{asking}"
    );
    let question = &requests["r1.elicitation"];
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(
        question["params"]["requestedSchema"]["required"],
        json!(["name"])
    );

    let answer = json!({"action": "accept", "content": {"name": "Ada", "check": true}});
    let ack = client
        .update(&id, json!({"r1.elicitation": answer}), ALICE)
        .await;
    assert_eq!(ack.ok()["resultType"], "complete", "{}", ack.text());
    let done = client.wait_for_status(&id, ALICE, "completed").await;
    let text = texts(&done["result"]);
    assert!(text.contains("- Name: Ada"), "{text}");
    assert!(text.contains("- Agreed to terms: true"), "{text}");

    // The answer went upstream as the JSON-RPC response to its question, on the
    // call's session, and the call's own stream then carried the result.
    let call = stack.recorder.call_of("trigger-elicitation-request");
    let reply = stack
        .recorder
        .until_seen("the answer upstream", |s| {
            s.message["result"]["action"] == "accept"
        })
        .await;
    assert_eq!(reply.session, call.session);
    assert_eq!(reply.message["result"]["content"]["name"], "Ada");
    let ended = recv("the answered call's end", &mut stack.recorder.ended).await;
    assert_eq!(
        ended,
        Ended {
            id: call.message["id"].clone(),
            finished: true
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_extension_answers_by_mrtr() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    let call = |params: Value| {
        client
            .request("tools/call")
            .params(params)
            .meta(eliciting_meta(false))
            .principal("alice")
            .send()
    };
    let asked = call(json!({"name": "trigger-elicitation-request", "arguments": {}})).await;
    let round = asked.ok();
    assert_eq!(round["resultType"], "input_required", "{}", asked.text());
    assert_eq!(
        round["inputRequests"]["elicitation"]["method"],
        "elicitation/create"
    );
    let state = round["requestState"].as_str().unwrap().to_owned();

    // A state the bridge never issued is refused.
    let forged = call(
        json!({"name": "trigger-elicitation-request", "arguments": {},
        "requestState": "mcp-tasks-gateway.0", "inputResponses": {}}),
    )
    .await;
    assert_eq!(forged.code(), Some(-32602), "{}", forged.text());

    let retry = call(
        json!({"name": "trigger-elicitation-request", "arguments": {},
        "requestState": state,
        "inputResponses": {"elicitation": {"action": "decline"}}}),
    )
    .await;
    let result = retry.ok();
    assert_eq!(result["resultType"], "complete", "{}", retry.text());
    assert!(texts(result).contains("declined"), "{}", retry.text());
    // One upstream call, answered once.
    assert_eq!(stack.recorder.seen_method("tools/call").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_closes_the_upstream_request() {
    let Some(mut stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    let id = client
        .create_task_id(
            "trigger-long-running-operation",
            json!({"duration": 60, "steps": 60}),
            ALICE,
        )
        .await;
    let call = stack
        .recorder
        .until_seen("the call upstream", |s| s.message["method"] == "tools/call")
        .await;
    let ack = client.cancel(&id, ALICE).await;
    assert_eq!(ack.ok()["resultType"], "complete", "{}", ack.text());
    assert_eq!(client.get(&id, ALICE).await.ok()["status"], "cancelled");

    // The stream of the call closed, and the upstream was told.
    let ended = recv("the call's end", &mut stack.recorder.ended).await;
    assert_eq!(
        ended,
        Ended {
            id: call.message["id"].clone(),
            finished: false
        }
    );
    let cancelled = stack
        .recorder
        .until_seen("notifications/cancelled", |s| {
            s.message["method"] == "notifications/cancelled"
        })
        .await;
    assert_eq!(cancelled.message["params"]["requestId"], call.message["id"]);
    assert_eq!(cancelled.session, call.session);

    // So does a task cancelled while its upstream call waits for an answer.
    let asking = create_eliciting_task(&client, "trigger-elicitation-request", json!({})).await;
    client
        .wait_for_status(&asking, ALICE, "input_required")
        .await;
    let question = stack.recorder.call_of("trigger-elicitation-request");
    client.cancel(&asking, ALICE).await.ok();
    let ended = recv("the questioning call's end", &mut stack.recorder.ended).await;
    assert_eq!(
        ended,
        Ended {
            id: question.message["id"].clone(),
            finished: false
        }
    );
    stack
        .recorder
        .until_seen("the questioning call cancelled", |s| {
            s.message["method"] == "notifications/cancelled"
                && s.message["params"]["requestId"] == question.message["id"]
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_upstream_forgot_is_opened_again() {
    let Some(mut stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    let first = client
        .create_task_id("echo", json!({"message": "one"}), ALICE)
        .await;
    client.wait_for_status(&first, ALICE, "completed").await;
    let before = stack.recorder.call_of("echo").session;

    // A new process on the same port knows none of the old sessions.
    stack.upstream.restart();
    let second = client
        .create_task_id("echo", json!({"message": "two"}), ALICE)
        .await;
    let done = client.wait_for_status(&second, ALICE, "completed").await;
    assert_eq!(texts(&done["result"]), "Echo: two");
    let initialize = stack.recorder.seen_method("initialize");
    assert_eq!(initialize.len(), 2, "{initialize:?}");
    let calls = stack.recorder.seen_method("tools/call");
    // The first attempt on the old session, then the same call on the new one.
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[1].session, before);
    assert_eq!(calls[1].message, calls[2].message);
    assert!(calls[2].session.is_some() && calls[2].session != before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_per_principal_bounded_and_closed_when_idle() {
    let Some(stack) = Stack::start_with(&[
        ("MCP_UPSTREAM_MAX_SESSIONS", "1"),
        ("MCP_UPSTREAM_SESSION_IDLE_MS", "1000"),
    ])
    .await
    else {
        return;
    };
    let client = stack.client();
    // Alice's long call holds the only session: bob finds no room.
    let long = client
        .create_task_id(
            "trigger-long-running-operation",
            json!({"duration": 3, "steps": 3}),
            ALICE,
        )
        .await;
    stack
        .recorder
        .until_seen("alice's call upstream", |s| {
            s.message["method"] == "tools/call"
        })
        .await;
    let refused = client
        .call_tool("echo", json!({"message": "bob"}), true, Some("bob"))
        .await;
    refused.assert_error(-32603, 503);
    assert_eq!(
        refused.json["error"]["message"],
        "Too many upstream sessions"
    );
    client.wait_for_status(&long, ALICE, "completed").await;

    // Once alice's session is idle, bob's takes its place: alice's is closed.
    let alice_session = stack
        .recorder
        .call_of("trigger-long-running-operation")
        .session;
    let bobs = client
        .create_task_id("echo", json!({"message": "bob"}), Some("bob"))
        .await;
    client
        .wait_for_status(&bobs, Some("bob"), "completed")
        .await;
    let bob_session = stack.recorder.call_of("echo").session;
    assert_ne!(bob_session, alice_session);
    let closed = stack
        .recorder
        .until_seen("alice's session closed", |s| s.http_method == "DELETE")
        .await;
    assert_eq!(closed.session, alice_session);

    // Bob's session goes when idle too.
    stack
        .recorder
        .until_seen("bob's session closed", |s| {
            s.http_method == "DELETE" && s.session == bob_session
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_older_revision_passes_through_untouched() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}});
    let request = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(Bytes::from(initialize.to_string())))
        .unwrap();
    let reply = client.send(request).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json["result"]["protocolVersion"],
        "2025-11-25",
        "{}",
        reply.text()
    );
    let session = reply.headers["mcp-session-id"].to_str().unwrap().to_owned();
    assert!(reply.json["result"].get("resultType").is_none());
    // The upstream saw the client's own request, its id included.
    let seen = stack.recorder.seen_method("initialize");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].message, initialize);
    assert_eq!(
        stack
            .recorder
            .seen_method("notifications/initialized")
            .len(),
        0
    );
    assert!(!session.is_empty());
}

/// The `_meta` of a 2026-07-28 request that declares `capabilities`.
fn declaring(capabilities: Value) -> Value {
    json!({META_PROTOCOL_VERSION: PROTOCOL_VERSION, META_CLIENT_CAPABILITIES: capabilities})
}

/// The names of the tools of a `tools/list` result.
fn tool_names(result: &Value) -> Vec<String> {
    result["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Sends the client's `notifications/cancelled` for `request_id`, as `principal`;
/// the gateway takes a notification with HTTP 202.
async fn send_cancelled(client: &Client, request_id: Value, principal: Option<&str>) {
    let message = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
        "requestId": request_id, "reason": "changed my mind", "_meta": declaring(json!({}))}});
    let reply = client
        .request("notifications/cancelled")
        .raw_body(message.to_string())
        .principal_opt(principal)
        .send()
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
}

/// A long upstream call without the extension (so not a task), made in the
/// background with the client's id `id`; resolves to its whole reply.
fn call_in_background(
    client: &Client,
    id: Value,
    seconds: u64,
    principal: Option<&str>,
) -> tokio::task::JoinHandle<support::http::Reply> {
    let client = client.clone();
    let principal = principal.map(str::to_owned);
    tokio::spawn(async move {
        client
            .request("tools/call")
            .id(id)
            .params(json!({"name": "trigger-long-running-operation",
                "arguments": {"duration": seconds, "steps": 1}}))
            .declare(false)
            .principal_opt(principal.as_deref())
            .send()
            .await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_capabilities_reach_the_upstream_initialize() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    let list = |capabilities: Value| {
        client
            .request("tools/list")
            .meta(declaring(capabilities))
            .principal("alice")
            .send()
    };

    // Sampling and elicitation declared (the extension stays with the gateway): the
    // upstream offers the tools that ask for them.
    let declared = json!({"sampling": {}, "elicitation": {"form": {}}});
    let mut with_extension = declared.clone();
    with_extension["extensions"] = json!({EXTENSION_ID: {}});
    let asking = list(with_extension).await;
    let tools = tool_names(asking.ok());
    assert!(
        tools.iter().any(|t| t == "trigger-sampling-request"),
        "{}",
        asking.text()
    );
    assert!(tools.iter().any(|t| t == "trigger-elicitation-request"));
    // A 2026-07-28 list result carries cache hints: stale at once, never shared.
    assert_eq!(asking.ok()["ttlMs"], 0, "{}", asking.text());
    assert_eq!(asking.ok()["cacheScope"], "private");

    // Nothing declared: another session, on which the upstream asks for nothing.
    let plain = list(json!({})).await;
    let tools = tool_names(plain.ok());
    assert!(tools.iter().any(|t| t == "echo"), "{}", plain.text());
    assert!(
        !tools
            .iter()
            .any(|t| t == "trigger-sampling-request" || t == "trigger-elicitation-request"),
        "{}",
        plain.text()
    );

    // The upstream's initialize declared what each client declared, and nothing of
    // the extension.
    let initialize = stack.recorder.seen_method("initialize");
    let capabilities: Vec<&Value> = initialize
        .iter()
        .map(|s| &s.message["params"]["capabilities"])
        .collect();
    assert!(capabilities.contains(&&declared), "{capabilities:?}");
    assert!(capabilities.contains(&&json!({})), "{capabilities:?}");
    let lists = stack.recorder.seen_method("tools/list");
    assert_eq!(lists.len(), 2);
    assert_ne!(lists[0].session, lists[1].session);

    // The same declaration (in another key order) finds the same session.
    let again = list(json!({"elicitation": {"form": {}}, "sampling": {}})).await;
    assert!(
        tool_names(again.ok())
            .iter()
            .any(|t| t == "trigger-sampling-request")
    );
    assert_eq!(
        stack.recorder.seen_method("initialize").len(),
        initialize.len()
    );
    let lists = stack.recorder.seen_method("tools/list");
    assert_eq!(lists[2].session, lists[0].session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_sampling_request_is_relayed_to_a_client_that_declared_it() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    let arguments = json!({"prompt": "The capital of France?", "maxTokens": 20});
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "Paris"},
        "model": "test-model", "stopReason": "endTurn"});

    // Without the extension: an MRTR round, answered by the retry.
    let call = |params: Value| {
        client
            .request("tools/call")
            .params(params)
            .meta(declaring(json!({"sampling": {}})))
            .principal("alice")
            .send()
    };
    let asked = call(json!({"name": "trigger-sampling-request", "arguments": arguments})).await;
    let round = asked.ok();
    assert_eq!(round["resultType"], "input_required", "{}", asked.text());
    let question = &round["inputRequests"]["sampling"];
    assert_eq!(question["method"], "sampling/createMessage", "{round}");
    assert_eq!(question["params"]["maxTokens"], 20);
    let state = round["requestState"].as_str().unwrap().to_owned();
    let retry = call(
        json!({"name": "trigger-sampling-request", "arguments": arguments,
        "requestState": state, "inputResponses": {"sampling": answer}}),
    )
    .await;
    let result = retry.ok();
    assert_eq!(result["resultType"], "complete", "{}", retry.text());
    assert!(texts(result).contains("test-model"), "{}", retry.text());
    // The answer went upstream as the JSON-RPC response to the sampling request.
    let reply = stack
        .recorder
        .until_seen("the sampling answer upstream", |s| {
            s.message["result"]["model"] == "test-model"
        })
        .await;
    assert_eq!(
        reply.session,
        stack.recorder.call_of("trigger-sampling-request").session
    );

    // With the extension: the task's input request, answered with tasks/update.
    let mut meta = declaring(json!({"sampling": {}, "extensions": {EXTENSION_ID: {}}}));
    meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "t", "version": "1"});
    let created = client
        .request("tools/call")
        .params(json!({"name": "trigger-sampling-request", "arguments": arguments}))
        .meta(meta)
        .principal("alice")
        .send()
        .await;
    assert_eq!(created.ok()["resultType"], "task", "{}", created.text());
    let id = created.ok()["taskId"].as_str().unwrap().to_owned();
    let asking = client.wait_for_status(&id, ALICE, "input_required").await;
    let requests = asking["inputRequests"].as_object().unwrap();
    assert_eq!(
        requests.keys().collect::<Vec<_>>(),
        ["r1.sampling"],
        "{asking}"
    );
    assert_eq!(requests["r1.sampling"]["method"], "sampling/createMessage");
    let ack = client
        .update(&id, json!({"r1.sampling": answer}), ALICE)
        .await;
    assert_eq!(ack.ok()["resultType"], "complete", "{}", ack.text());
    let done = client.wait_for_status(&id, ALICE, "completed").await;
    assert!(texts(&done["result"]).contains("test-model"), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_callers_never_share_a_session() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    // One anonymous caller's long call, and another's short one meanwhile.
    let long = call_in_background(&client, json!("long"), 2, None);
    let first = stack
        .recorder
        .until_seen("the long call upstream", |s| {
            s.message["params"]["name"] == "trigger-long-running-operation"
        })
        .await;
    assert!(first.session.is_some());
    let echo = client
        .call_tool("echo", json!({"message": "mine"}), false, None)
        .await;
    assert_eq!(texts(echo.ok()), "Echo: mine", "{}", echo.text());
    let second = stack.recorder.call_of("echo");
    assert!(second.session.is_some());
    assert_ne!(
        second.session, first.session,
        "two anonymous callers shared a session"
    );
    // Each session is closed once its request ended: the short one's at once, while
    // the long one still runs.
    stack
        .recorder
        .until_seen("the short call's session closed", |s| {
            s.http_method == "DELETE" && s.session == second.session
        })
        .await;
    let reply = wait::within("the long call", long).await.unwrap();
    assert!(
        texts(reply.ok()).starts_with("Long running operation completed"),
        "{}",
        reply.text()
    );
    stack
        .recorder
        .until_seen("the long call's session closed", |s| {
            s.http_method == "DELETE" && s.session == first.session
        })
        .await;
    // Each session was opened for its own request (and one more, closed at once,
    // when the gateway learnt the upstream's era).
    let initialize = stack.recorder.seen_method("initialize");
    assert_eq!(initialize.len(), 3, "{initialize:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_reaches_only_the_callers_own_request() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let client = stack.client();
    let cancelled = |upstream_id: &Value| {
        stack
            .recorder
            .seen_method("notifications/cancelled")
            .into_iter()
            .filter(|s| s.message["params"]["requestId"] == *upstream_id)
            .collect::<Vec<_>>()
    };

    // An anonymous call, and another anonymous caller that names it, by the
    // client's id and by the upstream's: neither reaches the upstream.
    let theirs = call_in_background(&client, json!(1), 2, None);
    let call = stack
        .recorder
        .until_seen("the anonymous call upstream", |s| {
            s.message["method"] == "tools/call"
        })
        .await;
    let upstream_id = call.message["id"].clone();
    send_cancelled(&client, json!(1), None).await;
    send_cancelled(&client, upstream_id.clone(), None).await;
    assert_eq!(
        stack.recorder.seen_method("notifications/cancelled").len(),
        0,
        "{:?}",
        stack.recorder.seen_method("notifications/cancelled")
    );
    let reply = wait::within("the anonymous call", theirs).await.unwrap();
    assert!(
        texts(reply.ok()).starts_with("Long running operation completed"),
        "{}",
        reply.text()
    );

    // Alice's call: bob naming it, by her id or by the upstream's, cancels nothing.
    let alices = call_in_background(&client, json!("alice-call"), 30, ALICE);
    let call = stack
        .recorder
        .until_seen("alice's call upstream", |s| {
            s.message["method"] == "tools/call" && s.message["id"] != upstream_id
        })
        .await;
    let alice_id = call.message["id"].clone();
    send_cancelled(&client, json!("alice-call"), Some("bob")).await;
    send_cancelled(&client, alice_id.clone(), Some("bob")).await;
    assert!(
        cancelled(&alice_id).is_empty(),
        "{:?}",
        cancelled(&alice_id)
    );

    // Alice's own cancellation goes upstream under the id the upstream knows, on
    // her call's session.
    send_cancelled(&client, json!("alice-call"), ALICE).await;
    let sent = stack
        .recorder
        .until_seen("alice's cancellation upstream", |s| {
            s.message["method"] == "notifications/cancelled"
        })
        .await;
    assert_eq!(sent.message["params"]["requestId"], alice_id, "{:?}", sent);
    assert_eq!(sent.session, call.session);
    alices.abort();
}
