//! Target `envelope_and_headers`: mutated real requests (headers and body) against
//! the whole layer, over the raw inner service of the fixtures and over rmcp.
//!
//! A seed is a request as text: `name: value` header lines, an empty line, the body.
//! `@@TASK@@` becomes a task of `alice` (who sends the seeds), `@@OTHER@@` one of
//! `bob`. A crash file has the same form, so it can join the corpus as it is.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::Full;
use mcp_tasks::{TaskMode, TaskSpec, TasksLayer};
use serde_json::Value;
use tower::Layer as _;

use super::common::{self, Read, Svc, boxed, check_reply, exchange, still_answers};
use super::engine::{self, Rng, any_value, mutate_bytes, mutate_json};
use super::rmcp_fixture;
use crate::support::fixtures::{Inner, ListenSupport, Tool, layer_builder, spec, spec_from_args};
use crate::support::http::bearer;

pub(crate) const TARGET: &str = "envelope_and_headers";

/// One layered service and the tasks the seeds name.
pub(crate) struct Stack {
    pub(crate) svc: Svc,
    /// The same inner service without the layer, to tell the inner service's own
    /// replies from the layer's (rmcp only).
    pub(crate) bare: Option<Svc>,
    pub(crate) task: String,
    pub(crate) other: String,
}

fn queued() -> crate::support::fixtures::SpecFn {
    spec(|_| TaskSpec::new().with_status_message("Queued"))
}

/// The layer over the fixtures' raw inner service.
pub(crate) async fn raw_stack() -> Stack {
    let layer = layer_builder()
        .with_principal(|parts| bearer(&parts.headers))
        .with_listen_ack_timeout(Duration::from_millis(200))
        .with_tool_mode(
            "auto",
            TaskMode::Auto {
                after: Duration::from_millis(20),
            },
        )
        .build()
        .unwrap();
    let inner = Inner::new()
        .listen(ListenSupport::Stream)
        .tool("greet", Tool::Sync)
        .tool("auto", Tool::Sync)
        .tool("work", Tool::Context(queued()))
        .tool("task_only", Tool::Context(queued()))
        .tool("never", Tool::Context(queued()))
        .tool("respond_task", Tool::OnResponse(spec(spec_from_args)))
        .tool("sse", Tool::Sse)
        .tool("sse_task", Tool::SseTask(queued()));
    let svc = boxed(layer.layer(inner.service::<Full<Bytes>>()));
    finish(svc, None, "work").await
}

/// The layer over an rmcp server (2026-07-28, stateless, JSON or SSE replies).
pub(crate) async fn rmcp_stack(json_response: bool) -> Stack {
    let layer = TasksLayer::builder(mcp_tasks::MemoryStore::new())
        .with_anonymous_tasks()
        .with_principal(|parts| bearer(&parts.headers))
        .with_server_info("rmcp-fixture", "1.0.0")
        .with_listen_ack_timeout(Duration::from_millis(200))
        .without_janitor()
        .build()
        .unwrap();
    // rmcp wants a Host header, which a client always sends.
    let host = |mut req: Request<Full<Bytes>>| {
        req.headers_mut()
            .entry(http::header::HOST)
            .or_insert(HeaderValue::from_static("127.0.0.1"));
        req
    };
    let svc = boxed(
        tower::ServiceBuilder::new()
            .map_request(host)
            .service(layer.layer(rmcp_fixture::service(json_response))),
    );
    let bare = boxed(
        tower::ServiceBuilder::new()
            .map_request(host)
            .service(rmcp_fixture::service(json_response)),
    );
    finish(svc, Some(bare), "job").await
}

async fn finish(svc: Svc, bare: Option<Svc>, tool: &str) -> Stack {
    let task = common::make_task(&svc, tool, "alice").await;
    let other = common::make_task(&svc, tool, "bob").await;
    Stack {
        svc,
        bare,
        task,
        other,
    }
}

/// A parsed seed: its headers and its body.
#[derive(Debug, Clone)]
pub(crate) struct Seed {
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    body: Vec<u8>,
}

fn replace_all(data: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        if data[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(data[i]);
            i += 1;
        }
    }
    out
}

/// Parses a seed file, filling in the task ids.
pub(crate) fn parse_seed(raw: &[u8], stack: &Stack) -> Seed {
    let raw = replace_all(raw, b"@@TASK@@", stack.task.as_bytes());
    let raw = replace_all(&raw, b"@@OTHER@@", stack.other.as_bytes());
    let split = raw
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or(raw.len());
    let head = &raw[..split];
    let body = raw.get(split + 2..).unwrap_or_default().to_vec();
    let headers = head
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let value = &line[colon + 1..];
            let value = value.strip_prefix(b" ").unwrap_or(value);
            Some((line[..colon].to_vec(), value.to_vec()))
        })
        .collect();
    Seed { headers, body }
}

impl Seed {
    /// The seed as a file's bytes.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in &self.headers {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.push(b'\n');
        }
        out.push(b'\n');
        out.extend_from_slice(&self.body);
        out
    }

    fn set(&mut self, name: &str, value: Vec<u8>) {
        self.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(name.as_bytes()));
        self.headers.push((name.as_bytes().to_vec(), value));
    }

    fn build(&self, method: Method) -> Request<Full<Bytes>> {
        let mut request = Request::builder()
            .method(method)
            .uri("/mcp")
            .body(Full::new(Bytes::from(self.body.clone())))
            .unwrap();
        for (name, value) in &self.headers {
            let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
            else {
                continue;
            };
            request.headers_mut().append(name, value);
        }
        request
    }
}

/// A header value as the wire carries text: plain when visible ASCII, else
/// `=?base64?…?=`.
fn header_text(s: &str) -> Vec<u8> {
    if !s.is_empty() && s.bytes().all(|b| (0x20..0x7f).contains(&b)) && s.trim() == s {
        s.as_bytes().to_vec()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(s)).into_bytes()
    }
}

const HEADERS: &[&str] = &[
    "mcp-method",
    "mcp-name",
    "mcp-protocol-version",
    "content-type",
    "accept",
    "authorization",
    "mcp-session-id",
    "content-length",
    "last-event-id",
];

fn header_value(rng: &mut Rng) -> Vec<u8> {
    match rng.below(14) {
        0 => Vec::new(),
        1 => b"application/json".to_vec(),
        2 => b"text/event-stream".to_vec(),
        3 => b"application/json; charset=utf-8, text/plain;q=0".to_vec(),
        4 => b"*/*".to_vec(),
        5 => b"2025-11-25".to_vec(),
        6 => b"2026-07-28".to_vec(),
        7 => format!("=?base64?{}?=", STANDARD.encode(engine::any_string(rng))).into_bytes(),
        8 => b"=?base64?!!not base64!!?=".to_vec(),
        9 => b"=?base64??=".to_vec(),
        10 => vec![b'x'; rng.len(20_000)],
        11 => (0..rng.below(40))
            .map(|_| 0x80 + rng.below(0x80) as u8)
            .collect(),
        12 => format!("  {}\t", engine::any_string(rng)).into_bytes(),
        _ => engine::any_string(rng).into_bytes(),
    }
}

/// Sets a field the layer reads to a value of any type.
fn targeted(rng: &mut Rng, value: &mut Value) {
    let Some(obj) = value.as_object_mut() else {
        return;
    };
    match rng.below(7) {
        0 => {
            obj.insert("id".into(), any_value(rng, 0));
        }
        1 => {
            obj.insert("jsonrpc".into(), any_value(rng, 0));
        }
        2 => {
            obj.insert("method".into(), any_value(rng, 0));
        }
        3 => {
            obj.insert("params".into(), any_value(rng, 0));
        }
        _ => {
            if let Some(params) = obj.get_mut("params").and_then(Value::as_object_mut) {
                let key = *rng.pick(&[
                    "taskId",
                    "name",
                    "arguments",
                    "_meta",
                    "inputResponses",
                    "notifications",
                ]);
                if key == "_meta"
                    && rng.one_in(2)
                    && let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut)
                {
                    let k = *rng.pick(&[
                        "io.modelcontextprotocol/protocolVersion",
                        "io.modelcontextprotocol/clientCapabilities",
                    ]);
                    meta.insert(k.into(), any_value(rng, 0));
                    return;
                }
                params.insert(key.into(), any_value(rng, 0));
            }
        }
    }
}

/// Mutates a seed into one case.
pub(crate) fn mutate(rng: &mut Rng, seed: &Seed, seeds: &[Seed]) -> (Seed, Method) {
    let mut case = seed.clone();
    // The body.
    match rng.below(10) {
        0..=5 => {
            if let Ok(mut value) = serde_json::from_slice::<Value>(&case.body) {
                for _ in 0..1 + rng.below(3) {
                    if rng.one_in(2) {
                        targeted(rng, &mut value);
                    } else {
                        mutate_json(rng, &mut value, 0);
                    }
                }
                if rng.one_in(12) {
                    let other = serde_json::from_slice::<Value>(&rng.pick(seeds).body)
                        .unwrap_or(Value::Null);
                    value = Value::Array(vec![value, other]);
                }
                case.body = engine::serialize(rng, &value);
                // Keep the headers in step with the body half the time, so that the
                // mutation reaches past the header checks.
                if rng.one_in(2) {
                    sync_headers(&mut case, &value);
                }
            }
            if rng.one_in(4) {
                let rounds = 1 + rng.below(4);
                mutate_bytes(rng, &mut case.body, rounds, DICT);
            }
        }
        6 | 7 => {
            let rounds = 1 + rng.below(8);
            mutate_bytes(rng, &mut case.body, rounds, DICT);
        }
        8 => {
            case.body = match rng.below(6) {
                0 => Vec::new(),
                1 => b"null".to_vec(),
                2 => b"[]".to_vec(),
                3 => b"name=value&x=1".to_vec(),
                4 => (0..rng.len(4096)).map(|_| rng.next_u64() as u8).collect(),
                _ => b"\xef\xbb\xbf{\"jsonrpc\":\"2.0\"}".to_vec(),
            }
        }
        _ => {}
    }
    // The headers.
    for _ in 0..rng.below(4) {
        let name = *rng.pick(HEADERS);
        match rng.below(5) {
            0 => case
                .headers
                .retain(|(n, _)| !n.eq_ignore_ascii_case(name.as_bytes())),
            1 => {
                let value = header_value(rng);
                case.headers.push((name.as_bytes().to_vec(), value));
            }
            2 => {
                // A duplicate of a header the request has.
                if !case.headers.is_empty() {
                    let (n, v) = rng.pick(&case.headers).clone();
                    case.headers.push((n, v));
                }
            }
            _ => {
                let value = header_value(rng);
                case.set(name, value);
            }
        }
    }
    let method = match rng.below(30) {
        0 => Method::GET,
        1 => Method::DELETE,
        _ => Method::POST,
    };
    (case, method)
}

fn sync_headers(case: &mut Seed, value: &Value) {
    let Some(method) = value["method"].as_str() else {
        return;
    };
    case.set("mcp-method", header_text(method));
    let name = match method {
        "tools/call" => value["params"]["name"].as_str(),
        "tasks/get" | "tasks/update" | "tasks/cancel" => value["params"]["taskId"].as_str(),
        _ => None,
    };
    if let Some(name) = name {
        case.set("mcp-name", header_text(name));
    }
}

const DICT: &[&[u8]] = &[
    b"\"jsonrpc\":\"2.0\",",
    b"\"id\":",
    b"\"method\":\"tasks/get\",",
    b"\"params\":{},",
    b"\"_meta\":null,",
    b"\"taskId\":",
    b"\\u0000",
    b"\\ud800",
    b"\\\"",
    b"[[[[[[[[[[",
    b"}}}}",
    b"1e400",
    b"-0.0",
    b"true",
    b"null",
];

/// One execution.
pub(crate) async fn case(
    rng: &mut Rng,
    stack: &Stack,
    seeds: &[Vec<u8>],
) -> (Vec<u8>, Result<(), String>) {
    let parsed: Vec<Seed> = seeds.iter().map(|s| parse_seed(s, stack)).collect();
    let seed = rng.pick(&parsed).clone();
    let (case, method) = mutate(rng, &seed, &parsed);
    let input = case.to_bytes();
    let outcome = async {
        let listens = input.windows(b"listen".len()).any(|w| w == b"listen");
        let read = if listens || method != Method::POST {
            Read::UntilQuiet {
                quiet: Duration::from_millis(300),
                max: Duration::from_secs(1),
            }
        } else {
            Read::Whole
        };
        let got = exchange(&stack.svc, case.build(method.clone()), read).await?;
        common::take_panics()?;
        if let Err(e) = check_reply(&got, true) {
            // Over rmcp, a reply that rmcp itself gives without the layer is not
            // the layer's.
            let theirs = match &stack.bare {
                Some(bare) => exchange(bare, case.build(method), read)
                    .await
                    .is_ok_and(|b| b.status == got.status && check_reply(&b, true).is_err()),
                None => false,
            };
            if !theirs {
                return Err(format!("status {}: {e}", got.status));
            }
        }
        still_answers(&stack.svc, &stack.task, "alice").await?;
        common::take_panics()
    }
    .await;
    (input, outcome)
}
