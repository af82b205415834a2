//! The gateway (`mcp-tasks-gateway`) at its two edges (issue #32), each side a separate process:
//!
//! - toward the client, a request whose `Mcp-Method` or `Mcp-Name` disagrees with
//!   its body is refused (-32020, HTTP 400) before anything routes it: a
//!   `tools/call` sent as `Mcp-Method: prompts/get` used to pass the layer unread
//!   and run upstream synchronously, past `TaskMode::AutoRequired`. A recorder
//!   between the gateway and its upstream (the official TypeScript
//!   server-everything, which routes on the body) shows that nothing reached the
//!   upstream;
//! - toward the upstream, its era is learnt again when learning it failed (an
//!   upstream answering 503 while it starts, as a recorder in front of
//!   server-everything plays it) and when the upstream was
//!   restarted on another revision: the `retrofit` example (2026-07-28) killed by
//!   PID and server-everything (2025-11-25) started on its port, and
//!   server-everything killed by PID and a server of this test that speaks
//!   2026-07-28 alone started on its port. (`retrofit` also serves the older
//!   form, without sessions: a bridge to it keeps working, so it cannot show a
//!   refusal.)
//!
//! Without `node_modules` (run `npm ci`) the tests that need server-everything are
//! skipped with a message, except under CI (`CI` set), where they fail.

#[path = "../gateway/src/edge.rs"]
#[allow(dead_code)]
mod edge;
#[path = "../gateway/src/proxy.rs"]
#[allow(dead_code)]
mod proxy;
mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use mcp_tasks::wire::{META_PROTOCOL_VERSION, PROTOCOL_VERSION, RpcError};
use serde_json::{Value, json};
use support::everything::{self, Everything, free_port};
use support::http::{Client, Reply, TestServer, serve};
use support::procs::{self, Proc};
use support::wait;
use tower::Service as _;

/// Every call of these tests is made as alice.
const ALICE: Option<&str> = Some("alice");

// ---------------------------------------------------------------------------
// Upstreams

/// The `retrofit` example (2026-07-28, and the older revisions too) on `addr`.
fn retrofit(addr: &str) -> Proc {
    procs::spawn("retrofit", &[], &[("MCP_ADDR", addr), ("RUST_LOG", "warn")])
}

/// The gateway in front of `upstream` (a URL), with more environment.
fn gateway(upstream: &str, env: &[(&str, &str)]) -> Proc {
    let mut all = vec![("MCP_UPSTREAM", upstream), ("RUST_LOG", "warn")];
    all.extend_from_slice(env);
    procs::spawn_gateway(&[], &all)
}

// ---------------------------------------------------------------------------
// Between the gateway and its upstream

/// One message the upstream was sent.
#[derive(Clone, Debug)]
struct Seen {
    /// `Mcp-Session-Id`.
    session: Option<String>,
    message: Value,
}

/// An in-process server in front of the upstream at `upstream` (a URL) that
/// notes every message it is sent. Its first `unavailable` requests get HTTP 503,
/// as from an upstream that is starting; the others go on through the gateway's
/// own proxy.
struct Recorder {
    server: TestServer,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    async fn start(upstream: &str, unavailable: usize) -> Recorder {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answered = Arc::new(AtomicUsize::new(0));
        let proxy =
            proxy::Proxy::with_config(upstream.parse().unwrap(), proxy::ProxyConfig::default());
        let log = seen.clone();
        let server = serve(tower::service_fn(move |request: Request<Incoming>| {
            let mut proxy = proxy.clone();
            let log = log.clone();
            let answered = answered.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let session = parts
                    .headers
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let message = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                log.lock().unwrap().push(Seen { session, message });
                if answered.fetch_add(1, Ordering::SeqCst) < unavailable {
                    let mut starting = Response::new(
                        Full::new(Bytes::from_static(b"starting"))
                            .map_err(|never| match never {})
                            .boxed_unsync(),
                    );
                    *starting.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    return Ok::<_, Infallible>(starting);
                }
                let response = proxy
                    .call(Request::from_parts(parts, Full::new(bytes)))
                    .await
                    .unwrap();
                Ok(response)
            }
        }))
        .await;
        Recorder { server, seen }
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
}

// ---------------------------------------------------------------------------
// Requests

/// `tools/list` as alice.
async fn list_tools(client: &Client) -> Reply {
    client
        .request("tools/list")
        .params(json!({}))
        .principal("alice")
        .send()
        .await
}

/// The tool names of a successful `tools/list` reply (none for any other reply).
fn tool_names(reply: &Reply) -> Vec<String> {
    reply.json["result"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts the gateway's answer to a request the upstream could not take now:
/// -32603, HTTP 503, `Retry-After: 1`, `data` retryable for `reason`.
#[track_caller]
fn assert_retryable(reply: &Reply, reason: &str) {
    reply.assert_error(RpcError::INTERNAL_ERROR, 503);
    assert_eq!(
        reply.headers.get("retry-after"),
        Some(&HeaderValue::from_static("1")),
        "{:?}",
        reply.headers
    );
    assert_eq!(
        reply.json["error"]["data"],
        json!({"retryable": true, "reason": reason}),
        "{}",
        reply.text()
    );
}

// ---------------------------------------------------------------------------
// The strict edge

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_call_under_another_methods_header_never_reaches_the_upstream() {
    let Some((node, server)) = everything::installed("a gateway_edge test") else {
        return;
    };
    // server-everything routes on the body alone (the bridge sends it no
    // `Mcp-Method`), as many upstreams do.
    let port = free_port();
    let _upstream = Everything::start_on(node.clone(), server.clone(), port);
    let recorder = Recorder::start(&format!("http://127.0.0.1:{port}/mcp"), 0).await;
    // `echo` may only run as a task; with a budget of 0 every call becomes one.
    let gateway = gateway(
        &recorder.server.url,
        &[
            ("MCP_TASK_REQUIRED_TOOLS", "echo"),
            ("MCP_AUTO_AFTER_MS", "0"),
        ],
    );
    let client = Client::new(gateway.addr);
    let echo = json!({"name": "echo", "arguments": {"message": "bypass"}});

    // The bypass: a client without the extension gets -32021 for `echo`, but named
    // as another method, the layer does not read the body.
    for header in ["prompts/get", "tools/list"] {
        let bypass = client
            .request("tools/call")
            .params(echo.clone())
            .declare(false)
            .principal("alice")
            .header("mcp-method", header)
            .id(json!(7))
            .send()
            .await;
        bypass.assert_error(RpcError::HEADER_MISMATCH, 400);
        assert_eq!(bypass.json["id"], 7, "{}", bypass.text());
    }
    // The right method with another tool's name (in base64), and a body naming
    // its method twice (read one way here, perhaps another way upstream), are
    // refused alike.
    let other_name = client
        .request("tools/call")
        .params(echo.clone())
        .principal("alice")
        .header("mcp-name", "=?base64?Ym9vbQ==?=")
        .send()
        .await;
    other_name.assert_error(RpcError::HEADER_MISMATCH, 400);
    let twice = client
        .request("tools/call")
        .principal("alice")
        .header("mcp-method", "prompts/get")
        .raw_body(
            r#"{"jsonrpc":"2.0","id":8,"method":"prompts/get","method":"tools/call",
            "params":{"name":"echo","arguments":{"message":"bypass"}}}"#,
        )
        .send()
        .await;
    twice.assert_error(RpcError::INVALID_REQUEST, 400);
    // A body past the edge's bound is not read on.
    let huge = client
        .request("tools/list")
        .raw_body(vec![b' '; edge::MAX_REQUEST_BYTES + 1])
        .send()
        .await;
    assert_eq!(
        huge.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        huge.text()
    );
    // None of them reached the upstream, not even to learn its era.
    let seen = recorder.seen();
    assert!(seen.is_empty(), "the upstream was sent {seen:?}");

    // The same call, named as it is: `AutoRequired` holds for a client without
    // the extension, and one with it gets a task (the name sent in base64 too).
    let plain = client
        .call_tool("echo", json!({"message": "bypass"}), false, ALICE)
        .await;
    plain.assert_capability_error();
    let reply = client
        .request("tools/call")
        .params(echo.clone())
        .principal("alice")
        .header("mcp-name", "  =?base64?ZWNobw==?=  ")
        .send()
        .await;
    let created = reply.ok();
    assert_eq!(created["resultType"], "task", "{}", reply.text());
    let id = created["taskId"].as_str().unwrap();
    let done = client.wait_for_status(id, ALICE, "completed").await;
    assert_eq!(
        done["result"]["content"][0]["text"], "Echo: bypass",
        "{done}"
    );
    let calls = recorder.seen_method("tools/call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].message["params"]["name"], "echo", "{calls:?}");
}

/// A request's headers as the test client sends them, with `Mcp-Method` and
/// `Mcp-Name` set.
fn standard_headers(method: &str, name: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("mcp-method", HeaderValue::from_str(method).unwrap());
    if let Some(name) = name {
        headers.insert("mcp-name", HeaderValue::from_str(name).unwrap());
    }
    headers
}

#[test]
fn the_edge_checks_each_standard_header_against_the_body() {
    let code = |method: &str, name: Option<&str>, body: &str| {
        edge::check(&standard_headers(method, name), body.as_bytes())
            .map_err(|(error, id)| (error.code(), error.http_status().as_u16(), id))
    };
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet"}}"#;
    assert_eq!(code("tools/call", Some("greet"), call), Ok(()));
    assert_eq!(code(" tools/call ", Some("  greet "), call), Ok(()));
    assert_eq!(
        code(
            "=?base64?dG9vbHMvY2FsbA==?=",
            Some("=?base64?Z3JlZXQ=?="),
            call
        ),
        Ok(())
    );
    let mismatch = Err((RpcError::HEADER_MISMATCH, 400, Some(json!(1))));
    assert_eq!(code("prompts/get", Some("greet"), call), mismatch);
    assert_eq!(code("TOOLS/CALL", Some("greet"), call), mismatch);
    assert_eq!(code("tools/call", Some("Greet"), call), mismatch);
    assert_eq!(code("tools/call", None, call), mismatch);
    assert_eq!(code("tools/call", Some("=?base64?***?="), call), mismatch);

    // `Mcp-Name` of the other methods that define it.
    let get = r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p"}}"#;
    assert_eq!(code("prompts/get", Some("p"), get), Ok(()));
    assert_eq!(code("prompts/get", Some("q"), get), mismatch);
    let read = r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}"#;
    assert_eq!(code("resources/read", Some("file:///a"), read), Ok(()));
    assert_eq!(code("resources/read", Some("file:///b"), read), mismatch);
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"taskId":"t1"}}}}"#);
        assert_eq!(code(method, Some("t1"), &body), Ok(()), "{method}");
        assert_eq!(code(method, Some("t2"), &body), mismatch, "{method}");
    }
    // Not defined for these: no `Mcp-Name` needed, whatever `params` holds.
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{"taskId":"t1"}}"#;
    assert_eq!(code("tasks/list", None, list), Ok(()));
    // A body without the value is left to the params checks, as the layer does.
    let nameless = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#;
    assert_eq!(code("tools/call", None, nameless), Ok(()));

    // A body that is not one request naming its method once.
    let no_method = r#"{"jsonrpc":"2.0","id":1,"params":{}}"#;
    assert_eq!(code("tools/call", None, no_method), mismatch);
    let twice = r#"{"jsonrpc":"2.0","method":"tools/list","method":"tools/call"}"#;
    assert_eq!(code("tools/list", None, twice).unwrap_err().0, -32600);
    let name_twice = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a","name":"b"}}"#;
    assert_eq!(
        code("tools/call", Some("a"), name_twice).unwrap_err().0,
        -32600
    );
    assert_eq!(code("tools/call", None, "[]").unwrap_err().0, -32600);
    assert_eq!(code("tools/call", None, "{").unwrap_err().0, -32700);
}

// ---------------------------------------------------------------------------
// Learning the upstream's era again

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_answers_503_while_it_starts_is_bridged_once_it_serves() {
    let Some((node, server)) = everything::installed("a gateway_edge test") else {
        return;
    };
    let port = free_port();
    let _upstream = Everything::start_on(node.clone(), server.clone(), port);
    // Its first three requests get 503.
    let recorder = Recorder::start(&format!("http://127.0.0.1:{port}/mcp"), 3).await;
    let gateway = gateway(&recorder.server.url, &[]);
    let client = Client::new(gateway.addr);

    let first = list_tools(&client).await;
    let discovers = recorder.seen_method("server/discover").len();
    // The next detection waits a pause: a request right after the first is
    // answered without reaching the upstream.
    let second = list_tools(&client).await;
    let sent = recorder.seen().len();

    // Later requests detect again, and once the upstream serves, it is bridged.
    let mut refused = vec![first, second];
    let listed = wait::poll(async || {
        let reply = list_tools(&client).await;
        if reply.status == StatusCode::OK {
            return Some(reply);
        }
        refused.push(reply);
        None
    })
    .await;
    let listed = listed.unwrap_or_else(|| {
        panic!(
            "never bridged in {} attempts; the last answer: {}",
            refused.len(),
            refused.last().map(Reply::text).unwrap_or_default()
        )
    });
    assert!(
        tool_names(&listed).iter().any(|n| n == "echo"),
        "{}",
        listed.text()
    );
    // Until then, each request was told to retry.
    for reply in &refused {
        assert_retryable(reply, "upstream_unavailable");
    }
    assert_eq!((discovers, sent), (1, 1), "{:?}", recorder.seen());
    // Every attempt while the upstream was unavailable was a `server/discover`
    // (no `initialize` sent to an upstream that is not serving); the bridge's
    // session came after.
    let seen = recorder.seen();
    let methods: Vec<&str> = seen
        .iter()
        .filter_map(|s| s.message["method"].as_str())
        .collect();
    assert_eq!(
        methods[..4],
        ["server/discover"; 4],
        "the upstream was sent {methods:?}"
    );
    assert_eq!(methods[4], "initialize", "{methods:?}");
    let call = recorder
        .seen_method("tools/list")
        .pop()
        .expect("the bridged tools/list");
    assert!(call.session.is_some(), "{call:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_restarted_on_an_older_revision_is_bridged() {
    let Some((node, server)) = everything::installed("a gateway_edge test") else {
        return;
    };
    let mut upstream = retrofit("127.0.0.1:0");
    let port = upstream.addr.port();
    let gateway = gateway(&upstream.url, &[]);
    let client = Client::new(gateway.addr);
    let before = list_tools(&client).await;
    assert!(
        tool_names(&before).iter().any(|n| n == "sleep"),
        "{}",
        before.text()
    );

    // The 2026-07-28 upstream goes; one on 2025-11-25 takes its port.
    upstream.kill();
    let _everything = Everything::start_on(node.clone(), server.clone(), port);

    let mut replies = Vec::new();
    let listed = wait::poll(async || {
        let reply = list_tools(&client).await;
        let bridged = tool_names(&reply).iter().any(|n| n == "echo");
        replies.push(reply);
        bridged.then_some(())
    })
    .await;
    assert!(
        listed.is_some(),
        "never bridged in {} attempts; the last answer: {}",
        replies.len(),
        replies.last().map(Reply::text).unwrap_or_default()
    );
    // The refusal that showed the change was answered as retryable: the upstream
    // ran nothing.
    let changed = replies
        .iter()
        .find(|r| r.status == StatusCode::SERVICE_UNAVAILABLE)
        .unwrap_or_else(|| panic!("no retryable answer in {} attempts", replies.len()));
    assert_retryable(changed, "upstream_changed");
}

/// A 2026-07-28 server that speaks no older revision, in this process on
/// `127.0.0.1:port`: `server/discover`, and `tools/list` with its one tool
/// `modern_only`, for requests whose `_meta` names 2026-07-28; -32022 (HTTP 400)
/// for any request without it, which the dual-era rule makes an older
/// revision's (it ignores `Mcp-Session-Id`, as a 2026-07-28 server does); -32601
/// (HTTP 404) for other methods. Stops accepting connections when dropped.
struct ModernOnly(tokio::task::JoinHandle<()>);

impl ModernOnly {
    async fn start(port: u16) -> ModernOnly {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("the upstream's port is free again");
        let service = tower::service_fn(|request: Request<Incoming>| async move {
            let header_version = request
                .headers()
                .get("mcp-protocol-version")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bytes = request
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let id = message["id"].clone();
            let version = &message["params"]["_meta"][META_PROTOCOL_VERSION];
            let (status, body) = if version != PROTOCOL_VERSION {
                let requested = header_version.unwrap_or_else(|| "2025-03-26".to_owned());
                let error = RpcError::unsupported_protocol_version(&[PROTOCOL_VERSION], &requested);
                (error.http_status(), error.to_body(Some(&id)))
            } else {
                let result = match message["method"].as_str() {
                    Some("server/discover") => json!({"resultType": "complete",
                        "supportedVersions": [PROTOCOL_VERSION], "capabilities": {"tools": {}},
                        "ttlMs": 0, "cacheScope": "public"}),
                    Some("tools/list") => json!({"resultType": "complete", "tools": [
                        {"name": "modern_only", "inputSchema": {"type": "object"}}]}),
                    _ => {
                        let error = RpcError::method_not_found();
                        let body = error.to_body(Some(&id));
                        return Ok::<_, Infallible>(json_response(error.http_status(), body));
                    }
                };
                let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
                (StatusCode::OK, Bytes::from(reply.to_string()))
            };
            Ok(json_response(status, body))
        });
        ModernOnly(tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let service = hyper_util::service::TowerToHyperService::new(service);
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        }))
    }
}

impl Drop for ModernOnly {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A JSON answer.
fn json_response(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_restarted_on_2026_07_28_is_passed_through() {
    let Some((node, server)) = everything::installed("a gateway_edge test") else {
        return;
    };
    let port = free_port();
    let mut everything = Everything::start_on(node.clone(), server.clone(), port);
    let recorder = Recorder::start(&format!("http://127.0.0.1:{port}/mcp"), 0).await;
    let gateway = gateway(&recorder.server.url, &[]);
    let client = Client::new(gateway.addr);
    let before = list_tools(&client).await;
    assert!(
        tool_names(&before).iter().any(|n| n == "echo"),
        "{}",
        before.text()
    );
    let bridged = recorder.seen_method("tools/list");
    assert!(bridged[0].session.is_some(), "{bridged:?}");

    // The 2025-11-25 upstream goes; one on 2026-07-28 alone takes its port.
    everything.kill();
    let _upstream = ModernOnly::start(port).await;

    let mut replies = Vec::new();
    let passed = wait::poll(async || {
        let reply = list_tools(&client).await;
        let listed = tool_names(&reply).iter().any(|n| n == "modern_only");
        replies.push(reply);
        listed.then_some(())
    })
    .await;
    assert!(
        passed.is_some(),
        "still bridged after {} attempts; the last answer: {}",
        replies.len(),
        replies.last().map(Reply::text).unwrap_or_default()
    );
    // The refusal that showed the change was answered as retryable: the upstream
    // ran nothing.
    let changed = replies
        .iter()
        .find(|r| r.status == StatusCode::SERVICE_UNAVAILABLE)
        .unwrap_or_else(|| panic!("no retryable answer in {} attempts", replies.len()));
    assert_retryable(changed, "upstream_changed");
    // The request went as the client sent it: no session, `_meta` kept.
    let sent = recorder.seen_method("tools/list").pop().unwrap();
    assert!(sent.session.is_none(), "{sent:?}");
    assert_eq!(
        sent.message["params"]["_meta"][META_PROTOCOL_VERSION], PROTOCOL_VERSION,
        "{sent:?}"
    );
}
