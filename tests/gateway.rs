//! The gateway (`mcp-tasks-gateway`) in front of the `retrofit` example, each a separate
//! process: the retrofit behaviours hold through a reverse proxy, so tasks reach a
//! server whatever it is written in. The upstream's `stats` tool, called on the
//! upstream directly, shows how its calls ended. Then the gateway's proxy alone, in
//! process, between a test client and a test upstream: bodies stream both ways,
//! hop-by-hop headers stop at the proxy, and a client leaving ends the upstream
//! request.

#[path = "../gateway/src/proxy.rs"]
mod proxy;
mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};
use support::http::{Client, Frames, TestServer, connect, serve};
use support::procs::{self, Proc};
use support::wait::{self, recv, within};
use tokio::sync::mpsc;

/// Every call of these tests is made as alice.
const ALICE: Option<&str> = Some("alice");

/// The gateway's `Auto` budget here (`MCP_AUTO_AFTER_MS`): four times the default,
/// so that a loaded machine does not turn a quick answer into a task.
const BUDGET_MS: &str = "1000";

/// How long the calls that must become tasks take: past [`BUDGET_MS`].
const SLOW_MS: u64 = 1500;

/// The retrofit server as the upstream, and the gateway in front of it.
#[derive(Debug)]
struct Stack {
    upstream: Proc,
    gateway: Proc,
}

impl Stack {
    fn start() -> Stack {
        Self::start_with(&[])
    }

    /// The stack with more environment for the gateway.
    fn start_with(env: &[(&str, &str)]) -> Stack {
        let upstream = procs::spawn("retrofit", &[], &[("RUST_LOG", "warn")]);
        // The retrofit server has tasks of its own; these tests are of the
        // gateway's own tasks, so the gateway does not carry the upstream's
        // (tests/gateway_federation.rs does).
        let mut gateway_env = vec![
            ("MCP_UPSTREAM_TASKS", "off"),
            ("MCP_UPSTREAM", upstream.url.as_str()),
            ("MCP_AUTO_AFTER_MS", BUDGET_MS),
            ("RUST_LOG", "warn"),
        ];
        gateway_env.extend_from_slice(env);
        let gateway = procs::spawn_gateway(&[], &gateway_env);
        Stack { upstream, gateway }
    }

    /// A client of the gateway.
    fn client(&self) -> Client {
        Client::new(self.gateway.addr)
    }

    /// The upstream's own count of `sleep` calls: `{"finished": n, "dropped": m}`.
    async fn upstream_stats(&self) -> Value {
        let reply = Client::new(self.upstream.addr)
            .call_tool("stats", json!({}), false, ALICE)
            .await;
        serde_json::from_str(first_text(reply.ok())).expect("stats are JSON")
    }

    /// Polls the upstream's stats until they are `expected` (nothing announces them).
    async fn until_stats(&self, expected: Value) {
        let mut last = Value::Null;
        let reached = wait::poll(async || {
            last = self.upstream_stats().await;
            (last == expected).then_some(())
        })
        .await;
        assert!(
            reached.is_some(),
            "upstream stats {last}, expected {expected}"
        );
    }
}

/// The text of a tool result's first content block.
fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_within_the_budget_comes_back_as_a_plain_result() {
    let stack = Stack::start();
    // Past the default budget of 250 ms, within the configured one.
    let reply = stack
        .client()
        .call_tool("sleep", json!({"ms": 400}), true, ALICE)
        .await;
    let result = reply.ok();
    assert_eq!(result["resultType"], "complete", "{}", reply.text());
    assert_eq!(first_text(result), "slept 400ms");
    assert_eq!(reply.json["id"], 1);
    assert!(reply.content_type().starts_with("application/json"));
    assert_eq!(
        stack.upstream_stats().await,
        json!({"finished": 1, "dropped": 0})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_methods_pass_through_and_discovery_gains_the_extension() {
    let stack = Stack::start();
    let list = |client: Client| async move {
        client
            .request("tools/list")
            .params(json!({}))
            .principal_opt(ALICE)
            .send()
            .await
    };
    let proxied = list(stack.client()).await;
    let direct = list(Client::new(stack.upstream.addr)).await;
    assert_eq!(proxied.status, 200);
    assert_eq!(proxied.body, direct.body);
    let names: Vec<&str> = proxied.ok()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["sleep", "boom", "slow_ask", "steps", "stats"]);

    let discover = stack
        .client()
        .request("server/discover")
        .params(json!({}))
        .send()
        .await;
    let capabilities = &discover.ok()["capabilities"];
    assert!(
        capabilities["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{}",
        discover.text()
    );
    assert!(capabilities["tools"].is_object(), "{}", discover.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_budget_becomes_a_task_that_completes() {
    let stack = Stack::start();
    let client = stack.client();
    let reply = client
        .call_tool("sleep", json!({"ms": SLOW_MS}), true, ALICE)
        .await;
    let created = reply.ok();
    assert_eq!(created["resultType"], "task", "{}", reply.text());
    assert_eq!(created["status"], "working");
    let id = created["taskId"].as_str().unwrap();

    // The gateway owns the task: another principal sees nothing.
    let foreign = client.get(id, Some("bob")).await;
    assert_eq!(foreign.json["error"]["code"], -32602, "{}", foreign.text());

    let done = client.wait_for_status(id, ALICE, "completed").await;
    assert_eq!(first_text(&done["result"]), format!("slept {SLOW_MS}ms"));
    assert_eq!(
        stack.upstream_stats().await,
        json!({"finished": 1, "dropped": 0})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_json_rpc_error_fails_the_task() {
    let stack = Stack::start();
    let client = stack.client();
    let id = client
        .create_task_id("boom", json!({"ms": SLOW_MS}), ALICE)
        .await;
    let failed = client.wait_for_status(&id, ALICE, "failed").await;
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert_eq!(failed["error"]["message"], "boom");
    assert!(failed.get("result").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_drops_the_upstream_call() {
    let stack = Stack::start();
    let client = stack.client();
    let id = client
        .create_task_id("sleep", json!({"ms": 60_000}), ALICE)
        .await;
    assert_eq!(
        stack.upstream_stats().await,
        json!({"finished": 0, "dropped": 0})
    );

    let ack = client.cancel(&id, ALICE).await;
    assert_eq!(ack.ok()["resultType"], "complete", "{}", ack.text());
    assert_eq!(client.get(&id, ALICE).await.ok()["status"], "cancelled");

    // The proxied request's connection closed, and the upstream dropped its handler.
    stack
        .until_stats(json!({"finished": 0, "dropped": 1}))
        .await;
    assert_eq!(client.get(&id, ALICE).await.ok()["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_questions_are_relayed_as_task_input() {
    let stack = Stack::start();
    let client = stack.client();
    for confirm in [true, false] {
        let id = client
            .create_task_id("slow_ask", json!({"ms": SLOW_MS}), ALICE)
            .await;
        let asking = client.wait_for_status(&id, ALICE, "input_required").await;
        let requests = asking["inputRequests"].as_object().unwrap();
        assert_eq!(requests.keys().collect::<Vec<_>>(), ["r1.confirm"]);
        assert_eq!(requests["r1.confirm"]["method"], "elicitation/create");
        assert!(asking.get("requestState").is_none(), "{asking}");

        let answer = json!({"action": "accept", "content": {"confirm": confirm}});
        let ack = client
            .update(&id, json!({"r1.confirm": answer}), ALICE)
            .await;
        assert_eq!(ack.ok()["resultType"], "complete", "{}", ack.text());
        let done = client.wait_for_end(&id, ALICE).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(first_text(&done["result"]), format!("confirmed: {confirm}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_json_rpc_error() {
    let mut stack = Stack::start();
    // A gateway that has not learnt the upstream's era yet (it learns it at the
    // first request) says to retry: nothing was learnt.
    let unlearnt = procs::spawn_gateway(
        &[],
        &[("MCP_UPSTREAM", &stack.upstream.url), ("RUST_LOG", "warn")],
    );
    let client = stack.client();
    client
        .call_tool("sleep", json!({"ms": 5}), true, ALICE)
        .await
        .ok();
    stack.upstream.kill();
    let reply = Client::new(unlearnt.addr)
        .call_tool("sleep", json!({"ms": 5}), true, ALICE)
        .await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.json["error"]["code"], -32603, "{}", reply.text());
    assert_eq!(reply.headers["retry-after"], "1");
    assert_eq!(
        reply.json["error"]["data"],
        json!({"retryable": true, "reason": "upstream_unavailable"})
    );

    // One that has learnt it passes the proxy's own error on.
    let reply = client
        .call_tool("sleep", json!({"ms": 5}), true, ALICE)
        .await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(reply.json["error"]["code"], -32603, "{}", reply.text());

    // The gateway itself keeps answering what it owns.
    let unknown = mcp_tasks::TaskId::random().to_string();
    let get = client.get(&unknown, ALICE).await;
    assert_eq!(get.json["error"]["code"], -32602, "{}", get.text());
}

// ---------------------------------------------------------------------------
// The proxy alone

/// The gateway's proxy, without the layer, in front of `upstream`.
async fn proxy_to(upstream: &TestServer) -> TestServer {
    proxy_with(&upstream.url, proxy::ProxyConfig::default()).await
}

/// The gateway's proxy with `config` in front of `upstream` (a URL).
async fn proxy_with(upstream: &str, config: proxy::ProxyConfig) -> TestServer {
    serve(proxy::Proxy::with_config(upstream.parse().unwrap(), config)).await
}

/// A POST to the proxy at `addr` with `body`.
fn post<B>(addr: std::net::SocketAddr, body: B) -> Request<B> {
    Request::post("/mcp")
        .header(header::HOST, addr.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_streams_the_response_and_a_leaving_client_ends_the_upstream_request() {
    // The upstream answers with a body the test writes chunk by chunk.
    let (chunks, fed) = mpsc::unbounded_channel::<Bytes>();
    let (taken, _taken) = mpsc::unbounded_channel();
    let body = Arc::new(Mutex::new(Some(Frames::fed(fed, taken))));
    let upstream = serve(tower::service_fn(move |_: Request<Incoming>| {
        let body = body.lock().unwrap().take().expect("one request");
        async move { Ok::<_, Infallible>(Response::new(body)) }
    }))
    .await;
    let gateway = proxy_to(&upstream).await;

    let (mut sender, connection) = connect(gateway.addr).await;
    let request = post(gateway.addr, Full::new(Bytes::from_static(b"{}")));
    let response = within("the response head", sender.send_request(request))
        .await
        .unwrap();
    let mut body = response.into_body();
    for chunk in ["first", "second"] {
        chunks.send(Bytes::from(chunk)).unwrap();
        // Each chunk arrives while the upstream's body is still open.
        let frame = within("a chunk", body.frame()).await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), chunk);
    }

    // The client goes away mid-body: the upstream sees its request end.
    connection.abort();
    within("the upstream's body is dropped", chunks.closed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_streams_the_request() {
    // The upstream reports each chunk as it reads it, and echoes the whole body.
    let (seen, mut read) = mpsc::unbounded_channel::<Bytes>();
    let upstream = serve(tower::service_fn(move |request: Request<Incoming>| {
        let seen = seen.clone();
        async move {
            let mut body = request.into_body();
            let mut all = Vec::new();
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.expect("a request frame").into_data() {
                    all.extend_from_slice(&data);
                    let _ = seen.send(data);
                }
            }
            Ok::<_, Infallible>(Response::new(Full::from(all)))
        }
    }))
    .await;
    let gateway = proxy_to(&upstream).await;

    let (chunks, fed) = mpsc::unbounded_channel::<Bytes>();
    let (taken, _taken) = mpsc::unbounded_channel();
    let (mut sender, _connection) = connect(gateway.addr).await;
    let reply = tokio::spawn(sender.send_request(post(gateway.addr, Frames::fed(fed, taken))));
    for chunk in ["{\"a\":", "1}"] {
        chunks.send(Bytes::from(chunk)).unwrap();
        // The upstream reads each chunk before the client has written the next.
        assert_eq!(recv("the chunk upstream", &mut read).await, chunk);
    }
    drop(chunks);
    let response = within("the reply", reply).await.unwrap().unwrap();
    let echoed = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(echoed, "{\"a\":1}");
}

/// An upstream that reports each request's headers and answers with a few headers
/// of its own, hop-by-hop ones included.
async fn header_upstream() -> (TestServer, mpsc::UnboundedReceiver<HeaderMap>) {
    let (seen, requests) = mpsc::unbounded_channel::<HeaderMap>();
    let upstream = serve(tower::service_fn(move |request: Request<Incoming>| {
        let _ = seen.send(request.headers().clone());
        async move {
            let response = Response::builder()
                .header("x-answer", "42")
                .header("keep-alive", "timeout=5")
                .header(header::CONNECTION, "x-hop")
                .header("x-hop", "1")
                .header(header::SET_COOKIE, "session=upstream")
                .body(Full::from("ok"))
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    }))
    .await;
    (upstream, requests)
}

/// A request to the proxy carrying credentials, a custom header and hop-by-hop
/// headers.
fn request_with_credentials(addr: std::net::SocketAddr) -> Request<Full<Bytes>> {
    let mut request = post(addr, Full::new(Bytes::from_static(b"{}")));
    let headers = request.headers_mut();
    headers.insert(header::CONNECTION, "x-private".parse().unwrap());
    headers.insert("x-private", "secret".parse().unwrap());
    headers.insert(header::TE, "trailers".parse().unwrap());
    headers.insert(header::PROXY_AUTHORIZATION, "Basic YTpi".parse().unwrap());
    headers.insert(header::AUTHORIZATION, "Bearer alice".parse().unwrap());
    headers.insert(header::COOKIE, "theme=dark".parse().unwrap());
    headers.insert("x-tenant", "acme".parse().unwrap());
    headers.insert(header::ACCEPT_ENCODING, "gzip".parse().unwrap());
    headers.insert("mcp-method", "tools/list".parse().unwrap());
    headers.insert("mcp-protocol-version", "2026-07-28".parse().unwrap());
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_forwards_credentials_only_when_configured() {
    let (upstream, mut requests) = header_upstream().await;
    let config = proxy::ProxyConfig {
        forward: vec![
            header::AUTHORIZATION,
            header::COOKIE,
            "x-tenant".parse().unwrap(),
            // Named, but hop-by-hop: still dropped.
            header::PROXY_AUTHORIZATION,
        ],
        ..proxy::ProxyConfig::default()
    };
    let gateway = proxy_with(&upstream.url, config).await;
    let (mut sender, _connection) = connect(gateway.addr).await;
    let response = within(
        "the reply",
        sender.send_request(request_with_credentials(gateway.addr)),
    )
    .await
    .unwrap();
    let upstream_saw = recv("the upstream request", &mut requests).await;
    assert_eq!(upstream_saw["authorization"], "Bearer alice");
    assert_eq!(upstream_saw["cookie"], "theme=dark");
    assert_eq!(upstream_saw["x-tenant"], "acme");
    for dropped in ["x-private", "proxy-authorization", "accept-encoding"] {
        assert!(
            !upstream_saw.contains_key(dropped),
            "{dropped} reached the upstream"
        );
    }
    assert_eq!(response.headers()[header::SET_COOKIE], "session=upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_forwards_an_explicit_set_of_headers() {
    let (upstream, mut requests) = header_upstream().await;
    let gateway = proxy_to(&upstream).await;

    let (mut sender, _connection) = connect(gateway.addr).await;
    let response = within(
        "the reply",
        sender.send_request(request_with_credentials(gateway.addr)),
    )
    .await
    .unwrap();

    let upstream_saw = recv("the upstream request", &mut requests).await;
    assert_eq!(upstream_saw["mcp-method"], "tools/list");
    assert_eq!(upstream_saw["mcp-protocol-version"], "2026-07-28");
    assert_eq!(upstream_saw["content-type"], "application/json");
    assert_eq!(upstream_saw["content-length"], "2");
    assert_eq!(upstream_saw["host"], upstream.addr.to_string());
    for dropped in [
        "x-private",
        "te",
        "proxy-authorization",
        "authorization",
        "cookie",
        "x-tenant",
        "accept-encoding",
    ] {
        assert!(
            !upstream_saw.contains_key(dropped),
            "{dropped} reached the upstream"
        );
    }
    assert_eq!(response.headers()["x-answer"], "42");
    for hop in ["keep-alive", "x-hop", "set-cookie"] {
        assert!(
            !response.headers().contains_key(hop),
            "{hop} reached the client"
        );
    }
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "ok");
}

/// Reads a JSON-RPC error the proxy made itself: its status and message.
async fn proxy_error(response: Response<Incoming>) -> (u16, String) {
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let message: Value = serde_json::from_slice(&body).expect("a JSON body");
    assert_eq!(message["jsonrpc"], "2.0", "{message}");
    assert_eq!(message["error"]["code"], -32603, "{message}");
    (
        status,
        message["error"]["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_starts_its_response_times_out() {
    // Accepts the request and never answers: far past the proxy's limit.
    let upstream = serve(tower::service_fn(|_: Request<Incoming>| async {
        std::future::pending::<()>().await;
        Ok::<_, Infallible>(Response::new(Full::<Bytes>::default()))
    }))
    .await;
    let config = proxy::ProxyConfig {
        response_timeout: Some(std::time::Duration::from_millis(300)),
        ..proxy::ProxyConfig::default()
    };
    let gateway = proxy_with(&upstream.url, config).await;
    let (mut sender, _connection) = connect(gateway.addr).await;
    let request = post(gateway.addr, Full::new(Bytes::from_static(b"{}")));
    let response = within("the reply", sender.send_request(request))
        .await
        .unwrap();
    assert_eq!(
        proxy_error(response).await,
        (
            504,
            "Upstream did not start its response within 300 ms".to_owned()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_accepts_the_connection_times_out() {
    // A listener whose accept queue is full and never drained: the kernel drops
    // further connection attempts, so they hang until the proxy gives up.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    loop {
        let attempt = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        );
        match attempt.await {
            Ok(Ok(stream)) => held.push(stream),
            Ok(Err(e)) => panic!("connecting to the full listener failed: {e}"),
            Err(_) => break,
        }
        assert!(held.len() < 64, "the accept queue never filled");
    }
    let config = proxy::ProxyConfig {
        connect_timeout: Some(std::time::Duration::from_millis(300)),
        ..proxy::ProxyConfig::default()
    };
    let gateway = proxy_with(&format!("http://{addr}/mcp"), config).await;
    let (mut sender, _connection) = connect(gateway.addr).await;
    let request = post(gateway.addr, Full::new(Bytes::from_static(b"{}")));
    let response = within("the reply", sender.send_request(request))
        .await
        .unwrap();
    assert_eq!(
        proxy_error(response).await,
        (504, "Upstream connection timed out after 300 ms".to_owned())
    );
    drop((held, listener));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_progress_becomes_the_status_message() {
    let stack = Stack::start();
    let client = stack.client();
    let id = client
        .create_task_id("steps", json!({"steps": 4, "ms": 500}), ALICE)
        .await;
    let working = client
        .wait_for(&id, ALICE, |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("step "))
                || t["status"] == "completed"
        })
        .await;
    assert_eq!(working["status"], "working", "{working}");
    let done = client.wait_for_status(&id, ALICE, "completed").await;
    assert_eq!(first_text(&done["result"]), "4 steps done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_tools_let_a_client_without_the_extension_follow_a_long_call() {
    let stack = Stack::start_with(&[("MCP_TASK_TOOLS", "1")]);
    let client = stack.client();
    let reply = client
        .call_tool("sleep", json!({"ms": SLOW_MS}), false, ALICE)
        .await;
    let text = first_text(reply.ok()).to_owned();
    let id = text
        .split("as task ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .unwrap_or_else(|| panic!("no task in {text}"))
        .to_owned();
    let mut last = Value::Null;
    let done = wait::poll(async || {
        let status = client
            .call_tool("task_status", json!({"taskId": id}), false, ALICE)
            .await;
        last = status.ok().clone();
        last["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("has completed"))
            .then(|| last.clone())
    })
    .await
    .unwrap_or_else(|| panic!("never completed: {last}"));
    assert_eq!(done["content"][1]["text"], format!("slept {SLOW_MS}ms"));
}
