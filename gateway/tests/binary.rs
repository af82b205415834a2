//! The `mcp-tasks-gateway` binary as an operator runs it, each gateway a separate
//! process in front of an upstream of this test (a 2026-07-28 server with one
//! tool, `sleep`, that knows nothing of tasks): its flags and their mistakes,
//! `/healthz`, `/readyz` and `/metrics`, the principal from a verified JWT and
//! from a trusted header, and the drain on SIGTERM.

use std::convert::Infallible;
use std::io::{BufRead as _, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use hmac::{Hmac, KeyInit as _, Mac as _};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use mcp_tasks::wire::{
    EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::net::{TcpListener, TcpStream};

const BIN: &str = env!("CARGO_BIN_EXE_mcp-tasks-gateway");

/// The gateways' HS256 key in these tests.
const SECRET: &str = "the test key, at least thirty-two bytes long";

/// How long a gateway may take to print its address, or to answer.
const PATIENCE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// The upstream

/// What the upstream saw.
#[derive(Debug, Default)]
struct Seen {
    /// `tools/call` requests received.
    calls: AtomicUsize,
    /// `sleep` calls that slept their whole time and answered.
    finished: AtomicUsize,
}

/// A 2026-07-28 server with one tool, `sleep {ms}`, on a loopback port.
#[derive(Debug)]
struct Upstream {
    url: String,
    seen: Arc<Seen>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Upstream {
    async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let shared = seen.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let seen = shared.clone();
                let service =
                    hyper::service::service_fn(move |request| answer(request, seen.clone()));
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Upstream {
            url: format!("http://{addr}/mcp"),
            seen,
            accept,
        }
    }
}

/// The upstream's answer to one request.
async fn answer(
    request: Request<Incoming>,
    seen: Arc<Seen>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let message: Value = body
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    if message.get("id").is_none() {
        let mut accepted = Response::new(Full::default());
        *accepted.status_mut() = StatusCode::ACCEPTED;
        return Ok(accepted);
    }
    let result = match message["method"].as_str().unwrap_or_default() {
        "server/discover" => json!({
            "supportedVersions": [PROTOCOL_VERSION],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "test-upstream", "version": "1.0.0"},
        }),
        "tools/list" => json!({"tools": [{"name": "sleep", "inputSchema": {"type": "object"}}]}),
        "tools/call" => {
            seen.calls.fetch_add(1, Ordering::SeqCst);
            let ms = message["params"]["arguments"]["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            seen.finished.fetch_add(1, Ordering::SeqCst);
            json!({"content": [{"type": "text", "text": format!("slept {ms} ms")}]})
        }
        _ => json!({}),
    };
    let mut result = result;
    result["resultType"] = json!("complete");
    let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
    let mut response = Response::new(Full::new(Bytes::from(reply.to_string())));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

// ---------------------------------------------------------------------------
// The gateway process

/// Every line a process printed, stdout and stderr.
#[derive(Debug, Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    grew: Condvar,
}

impl Lines {
    fn collect(self: &Arc<Self>, stream: impl Read + Send + 'static) {
        let lines = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                lines.lines.lock().unwrap().push(line);
                lines.grew.notify_all();
            }
        });
    }

    /// The first line `find` accepts, waiting up to `timeout` for it.
    fn wait_for<T>(&self, timeout: Duration, find: impl Fn(&str) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut lines = self.lines.lock().unwrap();
        loop {
            if let Some(found) = lines.iter().find_map(|line| find(line)) {
                return Some(found);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            lines = self.grew.wait_timeout(lines, left).unwrap().0;
        }
    }

    fn all(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

/// A running gateway, killed when dropped.
#[derive(Debug)]
struct Gateway {
    child: Child,
    addr: SocketAddr,
    lines: Arc<Lines>,
}

impl Gateway {
    /// Starts the binary with `args` on a port the OS picks, with nothing from this
    /// process's environment, and waits for its address.
    fn start(args: &[&str]) -> Gateway {
        let mut child = Command::new(BIN)
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the gateway starts");
        let lines = Arc::new(Lines::default());
        lines.collect(child.stdout.take().unwrap());
        lines.collect(child.stderr.take().unwrap());
        let addr = lines.wait_for(PATIENCE, |line| {
            let (_, rest) = line.split_once("listening on http://")?;
            rest.split('/').next()?.parse().ok()
        });
        let Some(addr) = addr else {
            let _ = child.kill();
            panic!("the gateway printed no address:\n{}", lines.all());
        };
        Gateway { child, addr, lines }
    }

    /// Sends SIGTERM (through `kill`: the crate has no unsafe code).
    fn terminate(&self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
    }

    /// Its exit status, waiting up to `timeout`.
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary to its end with `args` and nothing from this environment.
fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .expect("the gateway runs")
}

// ---------------------------------------------------------------------------
// HTTP and MCP

/// A whole reply: its status, headers, and JSON-RPC message (from JSON or from
/// the last event of a stream that answers a request).
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
    json: Value,
}

async fn exchange(addr: SocketAddr, request: Request<Full<Bytes>>) -> Reply {
    let exchange = async {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let response = sender.send_request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = serde_json::from_str(&text).unwrap_or_else(|_| {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .rfind(|message| message.get("id").is_some())
                .unwrap_or_default()
        });
        Reply {
            status: parts.status,
            headers: parts.headers,
            text,
            json,
        }
    };
    tokio::time::timeout(PATIENCE, exchange)
        .await
        .expect("the gateway answers")
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    let request = Request::get(path)
        .header("host", addr.to_string())
        .body(Full::default())
        .unwrap();
    exchange(addr, request).await
}

/// A 2026-07-28 request for `method` that declares the tasks extension, with
/// `headers` besides the standard ones.
async fn mcp(addr: SocketAddr, method: &str, params: Value, headers: &[(&str, &str)]) -> Reply {
    let mut params = params;
    params["_meta"] = json!({
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES: {"extensions": {EXTENSION_ID: {}}},
    });
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = Request::post("/mcp")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", PROTOCOL_VERSION)
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    for (header, value) in headers {
        request = request.header(*header, *value);
    }
    exchange(
        addr,
        request
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap(),
    )
    .await
}

/// `sleep` for `ms`, called as `headers` say; it becomes a task past the deadline.
async fn sleep_task(addr: SocketAddr, ms: u64, headers: &[(&str, &str)]) -> String {
    let reply = mcp(
        addr,
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": ms}}),
        headers,
    )
    .await;
    assert_eq!(reply.json["result"]["resultType"], "task", "{}", reply.text);
    reply.json["result"]["taskId"].as_str().unwrap().to_owned()
}

async fn task_get(addr: SocketAddr, id: &str, headers: &[(&str, &str)]) -> Reply {
    mcp(addr, "tasks/get", json!({"taskId": id}), headers).await
}

/// An HS256 JWT signed with `key`.
fn jwt(key: &str, claims: Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(json!({"alg": "HS256", "typ": "JWT"}).to_string());
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(format!("{header}.{claims}").as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{header}.{claims}.{signature}")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

// ---------------------------------------------------------------------------
// Flags

#[test]
fn help_lists_every_flag_with_its_variable() {
    let output = run(&["--help"]);
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8(output.stdout).unwrap();
    let flags = [
        ("--upstream", "MCP_UPSTREAM"),
        ("--principal", "MCP_PRINCIPAL"),
        ("--principal-header", "MCP_PRINCIPAL_HEADER"),
        ("--jwt-secret", "MCP_JWT_SECRET"),
        ("--jwt-secret-file", "MCP_JWT_SECRET_FILE"),
        ("--listen", "MCP_ADDR"),
        ("--store", "MCP_STORE"),
        ("--store-table", "MCP_STORE_TABLE"),
        ("--store-prefix", "MCP_STORE_PREFIX"),
        ("--node-id", "MCP_NODE_ID"),
        ("--worker-lease", "MCP_LEASE_MS"),
        ("--auto-after", "MCP_AUTO_AFTER_MS"),
        ("--task-required", "MCP_TASK_REQUIRED_TOOLS"),
        ("--task-tools", "MCP_TASK_TOOLS"),
        ("--forward-header", "MCP_FORWARD_HEADERS"),
        (
            "--upstream-connect-timeout",
            "MCP_UPSTREAM_CONNECT_TIMEOUT_MS",
        ),
        (
            "--upstream-response-timeout",
            "MCP_UPSTREAM_RESPONSE_TIMEOUT_MS",
        ),
        ("--upstream-max-sessions", "MCP_UPSTREAM_MAX_SESSIONS"),
        ("--upstream-session-idle", "MCP_UPSTREAM_SESSION_IDLE_MS"),
        ("--upstream-input-timeout", "MCP_UPSTREAM_INPUT_TIMEOUT_MS"),
        ("--drain-grace", "MCP_DRAIN_GRACE_MS"),
        ("--log-format", "MCP_LOG_FORMAT"),
        ("--log-filter", "RUST_LOG"),
    ];
    for (flag, env) in flags {
        assert!(
            help.contains(&format!("  {flag} ")),
            "{flag} missing:\n{help}"
        );
        assert!(
            help.contains(&format!("[env {env}]")),
            "{env} missing:\n{help}"
        );
    }
    assert!(help.contains("/healthz") && help.contains("/readyz") && help.contains("/metrics"));
    let version = run(&["--version"]);
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("mcp-tasks-gateway "));
}

#[test]
fn a_bad_flag_or_value_exits_2_naming_it() {
    let upstream = ["--upstream", "http://127.0.0.1:9/mcp"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--nope"], "--nope"),
        (vec!["--principal", "none"], "--upstream"),
        (upstream.to_vec(), "--principal"),
        (
            [&upstream[..], &["--principal", "everyone"]].concat(),
            "everyone",
        ),
        (
            [&upstream[..], &["--principal", "bearer-jwt"]].concat(),
            "--jwt-secret",
        ),
        (
            [&upstream[..], &["--principal", "header"]].concat(),
            "--principal-header",
        ),
        (
            [
                &upstream[..],
                &["--principal", "none", "--auto-after", "soon"],
            ]
            .concat(),
            "--auto-after",
        ),
        (
            [
                &upstream[..],
                &["--principal", "none", "--log-format", "xml"],
            ]
            .concat(),
            "--log-format",
        ),
        (
            vec![
                "--upstream",
                "https://example.com/mcp",
                "--principal",
                "none",
            ],
            "http://",
        ),
        (
            [&upstream[..], &["--principal", "none", "stray"]].concat(),
            "stray",
        ),
    ];
    for (args, named) in cases {
        let output = run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(named),
            "{args:?} should name {named}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

// ---------------------------------------------------------------------------
// Endpoints

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_and_the_metrics_answer() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&[
        "--upstream",
        &upstream.url,
        "--principal",
        "none",
        "--auto-after",
        "50",
    ]);
    let healthz = get(gateway.addr, "/healthz").await;
    assert_eq!(healthz.status, 200, "{}", healthz.text);
    let readyz = get(gateway.addr, "/readyz").await;
    assert_eq!(readyz.status, 200, "{}", readyz.text);
    assert_eq!(get(gateway.addr, "/elsewhere").await.status, 404);
    // One call that becomes a task, for the layer to count.
    sleep_task(gateway.addr, 300, &[]).await;
    let metrics = get(gateway.addr, "/metrics").await;
    if cfg!(feature = "metrics") {
        assert_eq!(metrics.status, 200);
        assert!(
            metrics.text.contains("mcp_tasks_created_total"),
            "{}",
            metrics.text
        );
    } else {
        assert_eq!(metrics.status, 404);
    }
}

// ---------------------------------------------------------------------------
// Principals

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_jwt_names_the_owner_and_a_bad_one_gets_401() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&[
        "--upstream",
        &upstream.url,
        "--principal",
        "bearer-jwt",
        "--jwt-secret",
        SECRET,
        "--auto-after",
        "50",
    ]);
    let bearer = |token: &str| format!("Bearer {token}");
    let alice = bearer(&jwt(SECRET, json!({"sub": "alice", "exp": now() + 3600})));
    let bob = bearer(&jwt(SECRET, json!({"sub": "bob", "exp": now() + 3600})));

    let id = sleep_task(gateway.addr, 5000, &[("authorization", &alice)]).await;
    let own = task_get(gateway.addr, &id, &[("authorization", &alice)]).await;
    assert_eq!(own.json["result"]["taskId"], id, "{}", own.text);
    // Another subject sees no such task: the same answer as for an id never made.
    let foreign = task_get(gateway.addr, &id, &[("authorization", &bob)]).await;
    let missing = task_get(gateway.addr, "no-such-task", &[("authorization", &bob)]).await;
    assert!(foreign.json.get("result").is_none(), "{}", foreign.text);
    assert_eq!(
        foreign.json["error"], missing.json["error"],
        "{}",
        foreign.text
    );

    let forged = bearer(&jwt(
        "another key, also thirty-two bytes long",
        json!({"sub": "alice", "exp": now() + 3600}),
    ));
    let expired = bearer(&jwt(SECRET, json!({"sub": "alice", "exp": now() - 3600})));
    let unsigned = format!(
        "Bearer {}.{}.",
        URL_SAFE_NO_PAD.encode(json!({"alg": "none"}).to_string()),
        URL_SAFE_NO_PAD.encode(json!({"sub": "alice"}).to_string()),
    );
    for (case, headers) in [
        ("forged", vec![("authorization", forged.as_str())]),
        ("expired", vec![("authorization", expired.as_str())]),
        ("unsigned", vec![("authorization", unsigned.as_str())]),
        ("no token", vec![]),
    ] {
        for reply in [
            mcp(
                gateway.addr,
                "tools/call",
                json!({"name": "sleep", "arguments": {"ms": 1}}),
                &headers,
            )
            .await,
            task_get(gateway.addr, &id, &headers).await,
        ] {
            assert_eq!(reply.status, 401, "{case}: {}", reply.text);
            assert_eq!(reply.json["jsonrpc"], "2.0", "{case}: {}", reply.text);
            assert_eq!(
                reply.json["error"]["code"], -32001,
                "{case}: {}",
                reply.text
            );
            let challenge = reply.headers["www-authenticate"].to_str().unwrap();
            assert!(challenge.starts_with("Bearer"), "{case}: {challenge}");
            assert_eq!(
                challenge.contains("invalid_token"),
                case != "no token",
                "{case}: {challenge}"
            );
        }
    }
    // None of the refused calls reached the upstream.
    assert_eq!(upstream.seen.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_header_names_the_owner() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&[
        "--upstream",
        &upstream.url,
        "--principal",
        "header",
        "--principal-header",
        "x-user",
        "--auto-after",
        "50",
    ]);
    let id = sleep_task(gateway.addr, 5000, &[("x-user", "alice")]).await;
    let own = task_get(gateway.addr, &id, &[("x-user", "alice")]).await;
    assert_eq!(own.json["result"]["taskId"], id, "{}", own.text);
    let missing = task_get(gateway.addr, "no-such-task", &[("x-user", "bob")]).await;
    for headers in [vec![("x-user", "bob")], vec![]] {
        let other = task_get(gateway.addr, &id, &headers).await;
        assert!(
            other.json.get("result").is_none(),
            "{headers:?}: {}",
            other.text
        );
        assert_eq!(other.json["error"], missing.json["error"], "{}", other.text);
    }
    // The header's name alone counts: a bearer token means nothing here.
    let token = jwt(SECRET, json!({"sub": "alice"}));
    let bearer = format!("Bearer {token}");
    let other = task_get(gateway.addr, &id, &[("authorization", &bearer)]).await;
    assert!(other.json.get("result").is_none(), "{}", other.text);
}

// ---------------------------------------------------------------------------
// The drain

/// Waits until `/readyz` answers `status`; how long that took.
async fn readyz_turns(addr: SocketAddr, status: u16) -> Duration {
    let started = Instant::now();
    loop {
        if get(addr, "/readyz").await.status == status {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "/readyz never answered {status}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_running_task_and_exits_0_within_the_grace() {
    let upstream = Upstream::start().await;
    let grace = Duration::from_secs(20);
    let mut gateway = Gateway::start(&[
        "--upstream",
        &upstream.url,
        "--principal",
        "none",
        "--auto-after",
        "50",
        "--drain-grace",
        "20s",
    ]);
    sleep_task(gateway.addr, 1500, &[]).await;
    gateway.terminate();
    let sent = Instant::now();
    // Not ready at once; still alive while the task runs.
    assert!(readyz_turns(gateway.addr, 503).await < Duration::from_secs(5));
    assert_eq!(get(gateway.addr, "/healthz").await.status, 200);
    let status = tokio::task::block_in_place(|| gateway.wait_exit(grace + PATIENCE));
    let status = status.unwrap_or_else(|| panic!("still running:\n{}", gateway.lines.all()));
    assert_eq!(status.code(), Some(0), "{}", gateway.lines.all());
    assert!(sent.elapsed() < grace, "{:?}", sent.elapsed());
    // The task finished upstream, and the drain failed nothing.
    assert_eq!(upstream.seen.finished.load(Ordering::SeqCst), 1);
    let drained = gateway.lines.wait_for(PATIENCE, |line| {
        line.contains("drained").then(|| line.to_owned())
    });
    let drained = drained.unwrap_or_else(|| panic!("{}", gateway.lines.all()));
    assert!(drained.contains("failed=0"), "{drained}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_longer_than_the_grace_is_failed_and_the_process_still_exits_0() {
    let upstream = Upstream::start().await;
    let mut gateway = Gateway::start(&[
        "--upstream",
        &upstream.url,
        "--principal",
        "none",
        "--auto-after",
        "50",
        "--drain-grace",
        "500ms",
        "--log-format",
        "json",
    ]);
    sleep_task(gateway.addr, 600_000, &[]).await;
    gateway.terminate();
    let sent = Instant::now();
    let status = tokio::task::block_in_place(|| gateway.wait_exit(PATIENCE));
    let status = status.unwrap_or_else(|| panic!("still running:\n{}", gateway.lines.all()));
    assert_eq!(status.code(), Some(0), "{}", gateway.lines.all());
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(upstream.seen.finished.load(Ordering::SeqCst), 0);
    // Structured logs: the drain's own line, as JSON, counts the failed task.
    let drained = gateway.lines.wait_for(PATIENCE, |line| {
        let line: Value = serde_json::from_str(line).ok()?;
        (line["message"] == "mcp-tasks-gateway drained; exiting").then_some(line)
    });
    let drained = drained.unwrap_or_else(|| panic!("{}", gateway.lines.all()));
    assert_eq!(drained["failed"], 1, "{drained}");
}
