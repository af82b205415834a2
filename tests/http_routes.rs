//! The routes of the layer over real HTTP: the validation order, pass-through of
//! traffic the layer does not own, the request body cap, and `server/discover`.
//! (The error map of the tasks surface is in `http_errors.rs`.)

mod support;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{Request, StatusCode};
use mcp_tasks::TaskId;
use mcp_tasks::wire::RpcError;
use mcp_tasks::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
use serde_json::{Value, json};
use support::fixtures::{
    Inner, Server, Tool, inner_discover_result, layer_builder, standard_inner, sync_fallback,
    text_result, tools_list_bytes,
};
use support::http::Frames;
use support::requests::modern_meta;

// ---------------------------------------------------------------------------
// WIRE §1.6: validation order

#[tokio::test]
async fn a_missing_protocol_version_header_is_header_mismatch() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client.create_task_id("work", json!({}), None).await;
    let reply = client
        .request("tasks/get")
        .params(json!({"taskId": id}))
        .without_header("mcp-protocol-version")
        .send()
        .await;
    reply.assert_error(RpcError::HEADER_MISMATCH, 400);
    // Step 1 comes before step 2: `_meta` is incomplete too, yet -32020 wins.
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet"}))
        .meta(json!({META_PROTOCOL_VERSION: "2026-07-28"}))
        .without_header("mcp-protocol-version")
        .send()
        .await;
    reply.assert_error(RpcError::HEADER_MISMATCH, 400);
    assert_eq!(server.inner.calls("greet"), 0);
}

#[tokio::test]
async fn missing_meta_fields_are_invalid_params_with_400() {
    let server = Server::standard().await;
    let client = server.client();
    let metas = [
        None,
        Some(json!({})),
        Some(json!({META_CLIENT_CAPABILITIES: {}})),
        Some(json!({META_PROTOCOL_VERSION: "2026-07-28"})),
        Some(json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: "all"})),
    ];
    for method in ["tools/call", "tasks/get", "server/discover"] {
        for meta in &metas {
            let params = match method {
                "tools/call" => json!({"name": "greet"}),
                "tasks/get" => json!({"taskId": TaskId::random().to_string()}),
                _ => json!({}),
            };
            let call = client.request(method).params(params);
            let call = match meta {
                Some(meta) => call.meta(meta.clone()),
                None => call.without_meta(),
            };
            let reply = call.send().await;
            reply.assert_error(RpcError::INVALID_PARAMS, 400);
        }
    }
    // Step 2 before step 3: a header naming an unknown version, no `_meta`.
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet"}))
        .without_meta()
        .header("mcp-protocol-version", "v999.0.0")
        .send()
        .await;
    reply.assert_error(RpcError::INVALID_PARAMS, 400);
    assert_eq!(server.inner.request_count(), 0);
}

#[tokio::test]
async fn a_header_differing_from_meta_is_header_mismatch_before_the_version_check() {
    let server = Server::standard().await;
    let client = server.client();
    let mut meta = modern_meta(true);
    meta[META_PROTOCOL_VERSION] = json!("v999.0.0");
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet"}))
        .meta(meta)
        .send()
        .await;
    reply.assert_error(RpcError::HEADER_MISMATCH, 400);
    assert_eq!(server.inner.calls("greet"), 0);
}

#[tokio::test]
async fn an_unsupported_version_is_32022_with_supported_and_requested() {
    let server = Server::standard().await;
    let client = server.client();
    let discover = client.request("server/discover").send().await;
    let advertised = discover.ok()["supportedVersions"].clone();
    let mut meta = modern_meta(false);
    meta[META_PROTOCOL_VERSION] = json!("v999.0.0");
    for method in ["tools/call", "tasks/get", "server/discover"] {
        let params = match method {
            "tools/call" => json!({"name": "greet"}),
            "tasks/get" => json!({"taskId": "x"}),
            _ => json!({}),
        };
        let reply = client
            .request(method)
            .params(params)
            .meta(meta.clone())
            .header("mcp-protocol-version", "v999.0.0")
            // Step 4 before step 5: the name header is wrong as well.
            .header("mcp-name", "someone-else")
            .send()
            .await;
        reply.assert_error(RpcError::UNSUPPORTED_PROTOCOL_VERSION, 400);
        let data = &reply.json["error"]["data"];
        assert_eq!(data["requested"], "v999.0.0");
        let supported = data["supported"].as_array().unwrap();
        assert!(supported.contains(&json!("2026-07-28")));
        for v in supported {
            assert!(
                advertised.as_array().unwrap().contains(v),
                "{v} is not in discover's supportedVersions {advertised}"
            );
        }
    }
}

#[tokio::test]
async fn the_method_header_must_match_the_body() {
    let server = Server::standard().await;
    let client = server.client();
    for method_header in [
        Some("tasks/get"),
        Some("tasks/cancel"),
        Some("server/discover"),
        None,
    ] {
        let call = client
            .request("tools/call")
            .params(json!({"name": "greet", "arguments": {}}));
        let call = match method_header {
            Some(h) => call.header("mcp-method", h),
            None => call.without_header("mcp-method"),
        };
        let reply = call.send().await;
        reply.assert_error(RpcError::HEADER_MISMATCH, 400);
    }
    let reply = client
        .request("tasks/get")
        .params(json!({"taskId": TaskId::random().to_string()}))
        .header("mcp-method", "tasks/cancel")
        .send()
        .await;
    reply.assert_error(RpcError::HEADER_MISMATCH, 400);
    assert_eq!(server.inner.request_count(), 0);
}

/// A method header the layer does not own sends the request to the inner service
/// unread (the fast path): checking it is the inner server's job. Such a request
/// gets no task context, so it can never become a task.
#[tokio::test]
async fn a_foreign_method_header_bypasses_the_layer_without_making_tasks() {
    let server = Server::standard().await;
    let client = server.client();
    for method_header in ["tools/list", "TOOLS/CALL"] {
        let call = client
            .request("tools/call")
            .params(json!({"name": "work", "arguments": {}}))
            .header("mcp-method", method_header);
        let sent = call.body_bytes();
        let reply = call.send().await;
        assert_eq!(reply.ok(), &sync_fallback("absent"));
        assert_eq!(server.inner.last_received().body, sent);
    }
    let reply = client
        .request("tools/call")
        .params(json!({"name": "respond_task", "arguments": {}}))
        .header("mcp-method", "tools/list")
        .send()
        .await;
    reply.assert_error(RpcError::INTERNAL_ERROR, 200);
}

#[tokio::test]
async fn mcp_name_is_trimmed_and_base64_values_are_decoded() {
    let layer = layer_builder().build().unwrap();
    let inner = standard_inner(&layer.tasks()).tool("grüße", Tool::Sync);
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet", "arguments": {"name": "Ada"}}))
        .declare(false)
        .header("mcp-name", "  greet  ")
        .send()
        .await;
    assert_eq!(reply.ok(), &text_result("Hello, Ada!"));

    let encoded = format!("=?base64?{}?=", STANDARD.encode("grüße"));
    let reply = client
        .request("tools/call")
        .params(json!({"name": "grüße", "arguments": {"name": "Bo"}}))
        .header("mcp-name", &encoded)
        .send()
        .await;
    assert_eq!(reply.ok(), &text_result("Hello, Bo!"));

    let id = client.create_task_id("work", json!({}), None).await;
    let reply = client
        .request("tasks/get")
        .params(json!({"taskId": id}))
        .header("mcp-name", &format!("=?base64?{}?=", STANDARD.encode(&id)))
        .send()
        .await;
    assert_eq!(reply.ok()["taskId"], id.as_str());
    let reply = client
        .request("tasks/get")
        .params(json!({"taskId": id}))
        .header("mcp-name", &format!(" \t{id} "))
        .send()
        .await;
    assert_eq!(reply.ok()["taskId"], id.as_str());

    for bad in ["=?base64?not base64!?=", "=?base64?Z3JlZXQ?="] {
        let reply = client
            .request("tools/call")
            .params(json!({"name": "greet"}))
            .header("mcp-name", bad)
            .send()
            .await;
        reply.assert_error(RpcError::HEADER_MISMATCH, 400);
    }
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet"}))
        .header(
            "mcp-name",
            &format!("=?base64?{}?=", STANDARD.encode("greet")),
        )
        .send()
        .await;
    assert_eq!(reply.ok(), &text_result("Hello, world!"));
}

// ---------------------------------------------------------------------------
// Pass-through

#[tokio::test]
async fn a_modern_tools_list_passes_through_byte_for_byte() {
    let server = Server::standard().await;
    let client = server.client();
    let call = client.request("tools/list").id(json!("list-1"));
    let sent = call.body_bytes();
    let reply = call.send().await;
    let received = server.inner.last_received();
    assert_eq!(
        received.body, sent,
        "the request body reached the inner service unchanged"
    );
    assert_eq!(received.headers["mcp-method"], "tools/list");
    assert_eq!(received.headers["mcp-protocol-version"], "2026-07-28");
    assert_eq!(received.context, None, "no task context outside tools/call");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, tools_list_bytes(&json!("list-1")));
    assert_eq!(reply.body, server.inner.last_sent());
    assert_eq!(reply.headers["x-inner"], "tools-list");
}

#[tokio::test]
async fn earlier_revision_calls_without_a_task_pass_through_untouched() {
    let server = Server::standard().await;
    let client = server.client();
    let legacy_call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "work", "arguments": {"then": "complete"}}});
    let cases: [(Value, &[(&str, &str)]); 3] = [
        (
            legacy_call.clone(),
            &[
                ("mcp-session-id", "s-1"),
                ("mcp-protocol-version", "2025-11-25"),
            ],
        ),
        (
            legacy_call.clone(),
            &[("mcp-protocol-version", "2025-06-18")],
        ),
        (legacy_call, &[]),
    ];
    for (body, headers) in cases {
        // Pretty-printed, so that any re-serialisation would show.
        let bytes = Bytes::from(serde_json::to_vec_pretty(&body).unwrap());
        let mut request = Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let reply = client
            .send(request.body(Frames::full(bytes.clone())).unwrap())
            .await;
        let received = server.inner.last_received();
        assert_eq!(received.body, bytes, "{headers:?}");
        for (name, value) in headers {
            assert_eq!(received.headers[*name], *value);
        }
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, server.inner.last_sent(), "{headers:?}");
        assert_eq!(
            received.context.as_deref(),
            Some("TaskContext::Refused(LegacyEra)")
        );
        assert_eq!(reply.result(), &sync_fallback("LegacyEra"));
    }
}

#[tokio::test]
async fn earlier_revision_tasks_requests_and_mixed_eras_never_reach_the_inner_service() {
    let server = Server::standard().await;
    let client = server.client();
    let mut declared_call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "work", "arguments": {"then": "complete"}}});
    declared_call["params"]["_meta"] = modern_meta(true);
    let legacy_get = json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/get",
        "params": {"taskId": TaskId::random().to_string()}});
    // (body, session id, code, HTTP status)
    let cases = [
        (declared_call, "s-2", -32600, StatusCode::BAD_REQUEST),
        (legacy_get, "s-3", -32602, StatusCode::OK),
    ];
    for (body, session, code, status) in cases {
        let request = Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", session)
            .body(Frames::full(Bytes::from(body.to_string())))
            .unwrap();
        let reply = client.send(request).await;
        assert_eq!(reply.status, status, "{}", reply.text());
        assert_eq!(reply.code(), Some(code), "{}", reply.text());
        assert_eq!(server.inner.request_count(), 0, "{body}");
    }
}

#[tokio::test]
async fn the_legacy_task_param_is_ignored() {
    let server = Server::standard().await;
    let client = server.client();
    let reply = client
        .request("tools/call")
        .params(json!({"name": "work", "arguments": {}, "task": {"ttl": 60000}}))
        .declare(false)
        .send()
        .await;
    assert_eq!(reply.ok(), &sync_fallback("NotDeclared"));
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet", "arguments": {}, "task": {"ttl": 60000}}))
        .send()
        .await;
    assert_eq!(reply.ok(), &text_result("Hello, world!"));
}

#[tokio::test]
async fn a_never_tool_runs_synchronously_even_with_the_extension() {
    let server = Server::standard().await;
    let client = server.client();
    let reply = client
        .request("tools/call")
        .params(json!({"name": "never", "arguments": {}}))
        .send()
        .await;
    assert_eq!(reply.ok(), &sync_fallback("ToolNeverTask"));
}

// ---------------------------------------------------------------------------
// Request bodies

#[tokio::test]
async fn an_oversized_body_is_refused_and_never_hangs() {
    let server = Server::with_layer(layer_builder().with_max_request_bytes(1024)).await;
    let client = server.client();
    let big = "x".repeat(4096);
    let call = client
        .request("tools/call")
        .params(json!({"name": "greet", "arguments": {"name": big}}));
    let reply = call.send().await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        reply.text()
    );
    assert!(
        reply.code().is_some(),
        "a JSON-RPC error body: {}",
        reply.text()
    );

    // The same without a Content-Length: the layer stops reading at the cap.
    let call = client
        .request("tools/call")
        .params(json!({"name": "greet", "arguments": {"name": big}}));
    let headers = call.headers();
    let bytes = call.body_bytes();
    let chunks: Vec<Bytes> = bytes.chunks(512).map(Bytes::copy_from_slice).collect();
    let mut request = Request::post("/mcp").body(Frames::chunked(chunks)).unwrap();
    *request.headers_mut() = headers;
    let reply = client.send(request).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        reply.text()
    );
    assert!(reply.code().is_some());
    assert_eq!(server.inner.calls("greet"), 0);

    // Under the cap, it works.
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet", "arguments": {"name": "Ada"}}))
        .send()
        .await;
    assert_eq!(reply.ok(), &text_result("Hello, Ada!"));
}

#[tokio::test]
async fn malformed_json_is_a_parse_error_with_400() {
    let server = Server::standard().await;
    let client = server.client();
    for method_header in [Some("tools/call"), Some("tasks/get"), None] {
        let call = client
            .request("tools/call")
            .raw_body("{\"jsonrpc\": \"2.0\", nope");
        let call = match method_header {
            Some(h) => call.header("mcp-method", h),
            None => call.without_header("mcp-method"),
        };
        let reply = call.send().await;
        reply.assert_error(RpcError::PARSE_ERROR, 400);
        assert_eq!(reply.json["id"], Value::Null);
    }
    assert_eq!(server.inner.request_count(), 0);
}

// ---------------------------------------------------------------------------
// WIRE §2: server/discover

fn expected_discover(mut inner: Value) -> Value {
    let capabilities = inner["capabilities"].as_object_mut().unwrap();
    capabilities.remove("tasks");
    let extensions = capabilities
        .entry("extensions")
        .or_insert_with(|| json!({}));
    extensions[EXTENSION_ID] = json!({});
    inner
}

#[tokio::test]
async fn discover_adds_the_extension_and_keeps_every_other_field() {
    let server = Server::standard().await;
    let client = server.client();
    for declare in [true, false] {
        let reply = client
            .request("server/discover")
            .id(json!("d1"))
            .declare(declare)
            .send()
            .await;
        assert_eq!(reply.json["id"], "d1");
        let result = reply.ok();
        assert_eq!(result, &expected_discover(inner_discover_result()));
        assert!(result["capabilities"].get("tasks").is_none());
        assert_eq!(
            result["capabilities"]["extensions"]["com.example/other"],
            json!({"level": 3})
        );
    }
}

#[tokio::test]
async fn discover_without_an_extensions_map_gets_one() {
    let mut discover = inner_discover_result();
    discover["capabilities"] = json!({"tools": {}, "tasks": {"list": {}}});
    let layer = layer_builder().build().unwrap();
    let inner = standard_inner(&layer.tasks()).discover(discover.clone());
    let server = Server::start(layer, inner).await;
    let reply = server.client().request("server/discover").send().await;
    assert_eq!(
        reply.ok()["capabilities"],
        json!({"tools": {}, "extensions": {EXTENSION_ID: {}}})
    );
    assert_eq!(reply.ok(), &expected_discover(discover));
}

/// A discover answer with a failed HTTP status is not a result to add to: it
/// passes byte for byte, however it looks.
#[tokio::test]
async fn a_failed_discover_answer_passes_untouched() {
    let written = json!({"jsonrpc": "2.0", "id": 1, "result": {"capabilities": {}}}).to_string();
    let body = written.clone();
    let inner = tower::service_fn(
        move |_: Request<mcp_tasks::body::RequestBody<hyper::body::Incoming>>| {
            let mut response = http::Response::new(Frames::full(body.clone()));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            async move { Ok::<_, std::convert::Infallible>(response) }
        },
    );
    let layer = layer_builder().build().unwrap();
    let http = support::http::serve_layered(&layer, inner).await;
    let reply = support::http::Client::new(http.addr)
        .request("server/discover")
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.body, written);
}

#[tokio::test]
async fn a_disabled_layer_passes_everything_through() {
    let server = Server::with_layer(layer_builder().with_enabled(false)).await;
    let client = server.client();

    let reply = client.request("server/discover").send().await;
    assert_eq!(reply.body, server.inner.last_sent(), "discover untouched");
    assert_eq!(reply.ok(), &inner_discover_result());

    let id = TaskId::random().to_string();
    let reply = client.get(&id, None).await;
    assert_eq!(reply.ok()["echo"]["method"], "tasks/get");
    assert_eq!(reply.headers["x-inner"], "echo");
    let reply = client.request("tasks/list").send().await;
    assert_eq!(reply.ok()["echo"]["method"], "tasks/list");

    let reply = client
        .request("tools/call")
        .params(json!({"name": "respond_task", "arguments": {}}))
        .send()
        .await;
    reply.assert_error(RpcError::INTERNAL_ERROR, 200);
    assert_eq!(server.inner.calls("respond_task"), 1);

    let reply = client
        .request("tools/call")
        .params(json!({"name": "work", "arguments": {}}))
        .send()
        .await;
    assert_eq!(reply.ok(), &sync_fallback("Disabled"));
    assert_eq!(
        server.inner.last_received().context.as_deref(),
        Some("TaskContext::Refused(Disabled)")
    );

    let reply = client
        .request("tools/call")
        .params(json!({"name": "task_only", "arguments": {}}))
        .declare(false)
        .send()
        .await;
    assert_eq!(reply.ok(), &sync_fallback("Disabled"));
}

#[tokio::test]
async fn an_inner_error_on_tools_call_comes_back_unchanged() {
    let layer = layer_builder().build().unwrap();
    let inner = Inner::new();
    let server = Server::start(layer, inner).await;
    // An unknown tool: the inner service's own JSON-RPC error comes back as is.
    let reply = server
        .client()
        .request("tools/call")
        .params(json!({"name": "missing"}))
        .send()
        .await;
    assert_eq!(reply.body, server.inner.last_sent());
    assert_eq!(reply.code(), Some(-32602));
}

#[tokio::test]
async fn a_legacy_task_outcome_is_refused_with_the_request_id() {
    // Without a version header the layer reads the body to tell the era, so it knows
    // the id. (With a legacy header it decides from headers alone and answers `null`.)
    let server = Server::standard().await;
    let client = server.client();
    let body = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": {"name": "respond_task", "arguments": {}}});
    let request = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Frames::full(Bytes::from(
            serde_json::to_vec(&body).unwrap(),
        )))
        .unwrap();
    let reply = client.send(request).await;
    assert_eq!(reply.code(), Some(-32603));
    assert_eq!(reply.json["id"], 77);
}

#[tokio::test]
async fn a_duplicate_mcp_method_is_refused_the_same_way_whichever_comes_first() {
    let server = Server::standard().await;
    let client = server.client();
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}});
    for (first, second) in [("tasks/get", "tools/list"), ("tools/list", "tasks/get")] {
        let request = Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", first)
            .header("mcp-method", second)
            .body(Frames::full(Bytes::from(body.to_string())))
            .unwrap();
        let reply = client.send(request).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{first}, {second}: {}",
            reply.text()
        );
        assert_eq!(reply.code(), Some(-32020), "{}", reply.text());
    }
    assert_eq!(server.inner.request_count(), 0);
}
