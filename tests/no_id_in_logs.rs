//! Task ids are bearer capabilities: the layer must never write one to its logs.
//!
//! Everything the process logs at TRACE level, spans included, is captured while a
//! whole task life runs over HTTP (creation, polls, input, answers, completion,
//! failure, cancellation, a panicking start, refusals and errors). The layer's span
//! is `mcp_tasks` with the fields `method`, `outcome`, `error_code`, `store_us` and
//! `elapsed_us`. None of it may contain a task id.

mod support;

use std::io;
use std::sync::{Arc, Mutex};

use mcp_tasks::TaskSpec;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::wire::RpcError;
use serde_json::json;
use support::fixtures::{Server, Tool, layer_builder, spec, standard_inner, text_result};
use tracing_subscriber::fmt::format::FmtSpan;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn capture_everything() -> Captured {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(FmtSpan::FULL)
        .with_ansi(false)
        .with_target(true)
        .with_writer(move || writer.clone())
        .finish();
    // Global, so that spawned workers and connection tasks on any thread are seen.
    tracing::subscriber::set_global_default(subscriber).expect("one subscriber per binary");
    captured
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_task_id_ever_reaches_the_logs() {
    let captured = capture_everything();

    let layer = layer_builder().with_max_rows(6).build().unwrap();
    let tasks = layer.tasks();
    let ask = {
        let tasks = tasks.clone();
        spec(move |_| {
            let tasks = tasks.clone();
            TaskSpec::new().with_start(move |id| {
                tokio::spawn(async move {
                    tasks.progress(&id, "Preparing").await.unwrap();
                    tasks
                        .require_input(
                            &id,
                            InputRequests::new()
                                .with("a", InputRequest::confirm("A?", "ok"))
                                .with("b", InputRequest::url("Sign in", "https://example.com")),
                        )
                        .await
                        .unwrap();
                    tasks.wait_for_input(&id).await.unwrap();
                    // A refused reuse of a key goes through the error paths too.
                    let reused = tasks
                        .require_input(&id, InputRequests::new().with("a", InputRequest::roots()))
                        .await;
                    assert!(reused.is_err());
                    tasks.complete(&id, text_result("answered")).await.unwrap();
                    // And a write to a terminal task.
                    assert!(tasks.progress(&id, "late").await.is_err());
                });
            })
        })
    };
    let inner = standard_inner(&tasks).tool("ask", Tool::Context(ask));
    let server = Server::start(layer, inner).await;
    let client = server.client();
    let mut ids = Vec::new();

    // A held task: polls, foreign access, a refused cancel, errors naming it.
    let held = client
        .create_task_id("work", json!({}), Some("alice"))
        .await;
    ids.push(held.clone());
    client.get(&held, Some("alice")).await.ok();
    client
        .get(&held, Some("bob"))
        .await
        .assert_error(RpcError::INVALID_PARAMS, 200);
    client
        .cancel(&held, None)
        .await
        .assert_error(RpcError::INVALID_PARAMS, 200);
    client
        .request("tasks/get")
        .params(json!({"taskId": held}))
        .declare(false)
        .principal("alice")
        .send()
        .await
        .assert_capability_error();
    client
        .request("tasks/get")
        .params(json!({"taskId": held}))
        .header("mcp-name", "someone-else")
        .principal("alice")
        .send()
        .await
        .assert_error(RpcError::HEADER_MISMATCH, 400);
    client
        .request("tasks/cancel")
        .params(json!({"taskId": format!("{held}x")}))
        .principal("alice")
        .send()
        .await
        .assert_error(RpcError::INVALID_PARAMS, 200);
    client
        .request("tasks/update")
        .params(json!({"taskId": held}))
        .principal("alice")
        .send()
        .await
        .assert_error(RpcError::INVALID_PARAMS, 200);

    // Input: two keys, a partial answer, an ignored one, the last one, completion.
    let asked = client.create_task_id("ask", json!({}), None).await;
    ids.push(asked.clone());
    client.wait_for_status(&asked, None, "input_required").await;
    client
        .update(
            &asked,
            json!({"a": {"action": "accept", "content": {"ok": true}}}),
            None,
        )
        .await
        .ok();
    client
        .update(&asked, json!({"nope": {"ignored": true}}), None)
        .await
        .ok();
    client
        .update(&asked, json!({"b": {"action": "accept"}}), None)
        .await
        .ok();
    client.wait_for_status(&asked, None, "completed").await;
    client.cancel(&asked, None).await.ok();

    // Completion, failure, a panicking start, a cancellation.
    let done = client
        .create_task_id("work", json!({"then": "complete"}), None)
        .await;
    ids.push(done.clone());
    client.wait_for_status(&done, None, "completed").await;
    let failed = client
        .create_task_id("work", json!({"then": "fail"}), None)
        .await;
    ids.push(failed.clone());
    client.wait_for_status(&failed, None, "failed").await;
    let panicked = client.create_task_id("panics", json!({}), None).await;
    ids.push(panicked.clone());
    client.wait_for_status(&panicked, None, "failed").await;
    let cancelled = client.create_task_id("sse_task", json!({}), None).await;
    ids.push(cancelled.clone());
    client.cancel(&cancelled, None).await.ok();
    client.cancel(&cancelled, None).await.ok();

    // Refusals: a bad spec, a task outcome nobody may get, the row cap.
    for (tool, declare) in [("bad_ttl", true), ("respond_task", false), ("work", true)] {
        let reply = client
            .request("tools/call")
            .params(json!({"name": tool, "arguments": {}}))
            .declare(declare)
            .send()
            .await;
        reply.assert_error(RpcError::INTERNAL_ERROR, 200);
    }

    let logs = captured.text();
    assert!(!logs.is_empty(), "nothing was captured");
    for expected in [
        "mcp_tasks",
        "method=tasks/get",
        "method=tasks/update",
        "method=tools/call",
        "outcome=result",
        "outcome=task",
        "outcome=error",
        "error_code=-32602",
        "store_us=",
        "elapsed_us=",
        "task start function panicked",
        "task spec rejected",
        "Task limit reached",
    ] {
        assert!(
            logs.to_lowercase().contains(&expected.to_lowercase()),
            "the logs lack {expected:?}; the capture may be broken:\n{logs}"
        );
    }
    assert_eq!(ids.len(), 6);
    for id in &ids {
        for fragment in [&id[..], &id[..16], &id[id.len() - 16..]] {
            assert!(
                !logs.contains(fragment),
                "a task id (or part of one) was logged: {fragment}\n{logs}"
            );
        }
    }
}
