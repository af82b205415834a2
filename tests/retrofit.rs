//! `TaskMode::Auto` over loopback HTTP: the example's unmodified rmcp server made
//! task-capable by layer configuration alone, with real cancellation and the MRTR
//! relay; plus a raw inner service whose future is observed being dropped.

#[path = "../examples/common/mod.rs"]
mod common;
#[path = "../examples/retrofit_app/mod.rs"]
mod retrofit_app;
mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper::body::Incoming;
use mcp_tasks::body::RequestBody;
use mcp_tasks::{MemoryStore, TaskMode, TaskRefused, TasksLayer, TasksLayerBuilder};
use retrofit_app::{Counters, REQUEST_STATE, Retrofit, layer_builder, mcp_service};
use serde_json::{Value, json};
use support::fixtures::{Inbox, spy};
use support::http::{Client, Reply, TestServer, serve_layered};
use support::wait::{self, SendOnDrop, recv};
use tokio::sync::mpsc;

const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

/// Every call of these tests is made as alice.
const ALICE: Option<&str> = Some("alice");

/// The example's rmcp server behind the layer (and the demo auth step), with a spy
/// recording what rmcp receives.
#[derive(Debug)]
struct Server {
    /// Where it listens.
    addr: SocketAddr,
    /// How the `sleep` calls ended.
    counters: Arc<Counters>,
    /// What the rmcp server received.
    inbox: Inbox,
    /// The HTTP server; it stops with this.
    _http: TestServer,
}

impl Server {
    /// The example's rmcp server behind a layer built from `builder`; rmcp answers
    /// with JSON when `json`, with SSE otherwise.
    async fn start(builder: TasksLayerBuilder, json: bool) -> Server {
        let handler = Retrofit::default();
        let counters = handler.counters.clone();
        let (inner, inbox) = spy(mcp_service(handler, json));
        let layer = builder.without_janitor().build().unwrap();
        let http = serve_layered(&layer, inner).await;
        Server {
            addr: http.addr,
            counters,
            inbox,
            _http: http,
        }
    }

    /// The example's own configuration, JSON replies.
    async fn example() -> Server {
        Self::start(layer_builder(), true).await
    }

    /// A client for this server.
    fn client(&self) -> Client {
        Client::new(self.addr)
    }

    /// `sleep` calls that ran to the end.
    fn finished(&self) -> u64 {
        self.counters.finished.load(Ordering::SeqCst)
    }

    /// `sleep` calls dropped before the end.
    fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::SeqCst)
    }

    /// Waits until `condition` holds (the example's counters announce nothing).
    async fn until(&self, what: &str, condition: impl Fn(&Server) -> bool) {
        wait::until(what, || condition(self)).await;
    }
}

/// The text of a tool result's first content block.
fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or("")
}

/// Fails the test if a reply shows anything of the inner server's private state.
fn no_request_state(reply: &Reply) {
    let text = reply.text();
    assert!(!text.contains("requestState"), "{text}");
    assert!(!text.contains(REQUEST_STATE), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_call_is_answered_unchanged() {
    for json in [true, false] {
        let server = Server::start(layer_builder(), json).await;
        let reply = server
            .client()
            .call_tool("sleep", json!({"ms": 5}), true, ALICE)
            .await;
        let result = reply.ok();
        assert_eq!(result["resultType"], "complete", "{}", reply.text());
        assert_eq!(first_text(result), "slept 5ms");
        assert_eq!(reply.json["id"], 1);
        let expected_type = if json {
            "application/json"
        } else {
            "text/event-stream"
        };
        assert!(reply.content_type().starts_with(expected_type));

        // Byte for byte what the same server says without any task configuration.
        let plain = Server::start(
            TasksLayer::builder(MemoryStore::new()).with_anonymous_tasks(),
            json,
        )
        .await;
        let reference = plain
            .client()
            .call_tool("sleep", json!({"ms": 5}), true, ALICE)
            .await;
        assert_eq!(reply.body, reference.body, "json: {json}");

        let seen = server.inbox.calls("sleep");
        assert_eq!(seen.len(), 1);
        assert!(!seen[0].declares_tasks(), "{}", seen[0].message);
        assert_eq!(seen[0].verdict, Some(Err(TaskRefused::NotDeclared)));
        assert_eq!(server.finished(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_becomes_a_task_and_completes() {
    for json in [true, false] {
        let server = Server::start(layer_builder(), json).await;
        let client = server.client();
        let reply = client
            .call_tool("sleep", json!({"ms": 700}), true, ALICE)
            .await;
        let created = reply.ok();
        assert_eq!(created["resultType"], "task", "{}", reply.text());
        assert_eq!(created["status"], "working");
        assert!(created.get("result").is_none() && created.get("content").is_none());
        assert!(reply.content_type().starts_with("application/json"));
        let id = created["taskId"].as_str().unwrap();

        // Owned by the caller: another principal sees nothing.
        let foreign = client
            .task_method("tasks/get", json!({"taskId": id}), Some("bob"))
            .await;
        assert_eq!(foreign.json["error"]["code"], -32602, "{}", foreign.text());

        let done = client.wait_for_status(id, ALICE, "completed").await;
        assert_eq!(first_text(&done["result"]), "slept 700ms");
        assert_eq!(done["result"]["resultType"], "complete");
        assert!(done.get("error").is_none());
        assert_eq!(server.finished(), 1);
        assert_eq!(server.dropped(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_json_rpc_error_fails_the_task_with_that_error() {
    for json in [true, false] {
        let server = Server::start(layer_builder(), json).await;
        let client = server.client();
        let id = client
            .create_task_id("boom", json!({"ms": 600}), ALICE)
            .await;
        let failed = client.wait_for_status(&id, ALICE, "failed").await;
        assert_eq!(failed["error"]["code"], -32603, "{failed}");
        assert_eq!(failed["error"]["message"], "boom");
        assert!(failed.get("result").is_none());
        assert!(failed["statusMessage"].is_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_drops_the_inner_call() {
    let server = Server::example().await;
    let client = server.client();
    let id = client
        .create_task_id("sleep", json!({"ms": 60_000}), ALICE)
        .await;
    assert_eq!(server.inbox.calls("sleep").len(), 1);

    let ack = client.cancel(&id, ALICE).await;
    assert_eq!(ack.ok()["resultType"], "complete");
    assert!(ack.ok().get("status").is_none());
    let task = client.get(&id, ALICE).await;
    assert_eq!(task.ok()["status"], "cancelled", "{}", task.text());

    server
        .until("the sleep is dropped", |s| s.dropped() == 1)
        .await;
    assert_eq!(server.finished(), 0);
    let stats = client.call_tool("stats", json!({}), true, ALICE).await;
    let stats: Value = serde_json::from_str(first_text(stats.ok())).unwrap();
    assert_eq!(stats, json!({"finished": 0, "dropped": 1}));
    assert_eq!(client.get(&id, ALICE).await.ok()["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_auto_task_fails_before_its_ttl_and_drops_the_call() {
    let ttl = Duration::from_millis(2_000);
    let server = Server::start(layer_builder().with_default_ttl(ttl), true).await;
    let client = server.client();
    let started = Instant::now();
    let id = client
        .create_task_id("sleep", json!({"ms": 60_000}), ALICE)
        .await;

    let failed = client.wait_for_status(&id, ALICE, "failed").await;
    assert!(started.elapsed() < ttl, "failed only after the ttl");
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert_eq!(failed["statusMessage"], "Task expired");
    server
        .until("the sleep is dropped", |s| s.dropped() == 1)
        .await;
    assert_eq!(server.finished(), 0);

    // Then the task expires like any other.
    let expired = wait::poll(async || {
        let reply = client.get(&id, ALICE).await;
        if reply.json["error"]["code"] == -32602 {
            return Some(());
        }
        assert_eq!(reply.ok()["status"], "failed");
        None
    })
    .await;
    assert!(expired.is_some(), "never expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mrtr_questions_are_relayed_and_the_call_resent() {
    for (json, confirm) in [(true, true), (true, false), (false, true)] {
        let server = Server::start(layer_builder(), json).await;
        let client = server.client();
        let reply = client
            .call_tool("slow_ask", json!({"ms": 600}), true, ALICE)
            .await;
        no_request_state(&reply);
        assert_eq!(reply.ok()["resultType"], "task", "{}", reply.text());
        let id = reply.ok()["taskId"].as_str().unwrap().to_owned();

        let asking = client
            .wait_for_inspecting(
                &id,
                ALICE,
                |t| t["status"] == "input_required",
                no_request_state,
            )
            .await;
        let requests = asking["inputRequests"].as_object().unwrap();
        assert_eq!(requests.keys().collect::<Vec<_>>(), ["r1.confirm"]);
        let question = &requests["r1.confirm"];
        assert_eq!(question["method"], "elicitation/create");
        assert_eq!(
            question["params"]["requestedSchema"]["properties"]["confirm"]["type"],
            "boolean"
        );

        // The inner server's own key means nothing to the task.
        let ignored = client
            .update(&id, json!({"confirm": {"action": "accept"}}), ALICE)
            .await;
        assert_eq!(ignored.ok()["resultType"], "complete");
        assert_eq!(
            client.get(&id, ALICE).await.ok()["status"],
            "input_required"
        );

        let answer = json!({"action": "accept", "content": {"confirm": confirm}});
        let ack = client
            .update(&id, json!({"r1.confirm": answer}), ALICE)
            .await;
        assert_eq!(ack.ok()["resultType"], "complete");
        let done = client
            .wait_for_inspecting(
                &id,
                ALICE,
                |t| TERMINAL.contains(&t["status"].as_str().unwrap()),
                no_request_state,
            )
            .await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(first_text(&done["result"]), format!("confirmed: {confirm}"));

        let calls = server.inbox.calls("slow_ask");
        assert_eq!(calls.len(), 2);
        let (first, retry) = (&calls[0], &calls[1]);
        assert!(first.message["params"].get("inputResponses").is_none());
        assert_ne!(retry.message["id"], first.message["id"]);
        assert_eq!(
            retry.message["params"]["inputResponses"],
            json!({"confirm": answer})
        );
        assert_eq!(retry.message["params"]["requestState"], REQUEST_STATE);
        assert_eq!(
            retry.message["params"]["arguments"],
            first.message["params"]["arguments"]
        );
        for call in [first, retry] {
            assert!(!call.declares_tasks(), "{}", call.message);
            assert_eq!(call.verdict, Some(Err(TaskRefused::NotDeclared)));
            assert_eq!(call.principal.as_ref().map(|p| p.as_str()), Some("alice"));
            assert_eq!(call.header("mcp-method"), Some("tools/call"));
            assert_eq!(call.header("mcp-name"), Some("slow_ask"));
            assert_eq!(call.header("mcp-protocol-version"), Some("2026-07-28"));
            assert_eq!(call.header("authorization"), Some("Bearer alice"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_completion_leaves_one_consistent_end() {
    let server = Server::example().await;
    let client = server.client();
    let rounds = 8u64;
    let mut completed = 0;
    for round in 0..rounds {
        // The handle arrives after 250 ms and the sleep ends at 300 ms; the cancel
        // lands at a different point of that window each round.
        let id = client
            .create_task_id("sleep", json!({"ms": 300}), ALICE)
            .await;
        tokio::time::sleep(Duration::from_millis(8 * round)).await;
        let ack = client.cancel(&id, ALICE).await;
        assert_eq!(ack.ok()["resultType"], "complete");

        let end = client.wait_for_end(&id, ALICE).await;
        match end["status"].as_str().unwrap() {
            "completed" => {
                completed += 1;
                assert_eq!(first_text(&end["result"]), "slept 300ms");
            }
            "cancelled" => assert!(end.get("result").is_none(), "{end}"),
            _ => panic!("unexpected end: {end}"),
        }
        assert!(end.get("error").is_none(), "{end}");
        // Terminal is final: neither time nor another cancel changes it.
        let again = client.cancel(&id, ALICE).await;
        assert_eq!(again.ok()["resultType"], "complete");
        let later = client.get(&id, ALICE).await;
        assert_eq!(later.ok(), &end);
    }
    // Each sleep ended exactly once, and every completed task really finished.
    server
        .until("every sleep is accounted for", |s| {
            s.finished() + s.dropped() == rounds
        })
        .await;
    assert!(server.finished() >= completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_after_its_handle_still_gets_its_task_done() {
    let server = Server::example().await;
    let client = server.client();
    let response = client
        .request("tools/call")
        .params(json!({"name": "sleep", "arguments": {"ms": 700}}))
        .principal("alice")
        .open()
        .await;
    let created: Value = response.json().await;
    assert_eq!(created["result"]["resultType"], "task");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    // `open` owned the connection; with the response read, it is gone.

    let done = client.wait_for_status(&id, ALICE, "completed").await;
    assert_eq!(first_text(&done["result"]), "slept 700ms");
    assert_eq!((server.finished(), server.dropped()), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_before_any_answer_drops_the_call() {
    let server = Server::example().await;
    let addr = server.addr;
    let pending = tokio::spawn(async move {
        let client = Client::new(addr);
        client
            .request("tools/call")
            .params(json!({"name": "sleep", "arguments": {"ms": 60_000}}))
            .principal("alice")
            .send()
            .await
    });
    server
        .until("the inner server has the call", |s| {
            s.inbox.calls("sleep").len() == 1
        })
        .await;
    pending.abort();
    server
        .until("the sleep is dropped", |s| s.dropped() == 1)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_extension_waits_for_the_plain_answer() {
    let server = Server::example().await;
    let client = server.client();
    let started = Instant::now();
    let reply = client
        .call_tool("sleep", json!({"ms": 600}), false, ALICE)
        .await;
    assert!(started.elapsed() >= Duration::from_millis(600));
    let result = reply.ok();
    assert_eq!(result["resultType"], "complete", "{}", reply.text());
    assert_eq!(first_text(result), "slept 600ms");
    let seen = server.inbox.calls("sleep");
    assert_eq!(seen[0].verdict, Some(Err(TaskRefused::NotDeclared)));

    let boom = client
        .call_tool("boom", json!({"ms": 400}), false, ALICE)
        .await;
    assert_eq!(boom.json["error"]["code"], -32603, "{}", boom.text());
    assert_eq!(boom.json["error"]["message"], "boom");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_wins_over_per_tool_modes() {
    // Every tool is `Auto`, but the policy keeps 600 ms sleeps synchronous.
    let builder = layer_builder().with_task_policy(|tool, arguments| {
        (tool == "sleep" && arguments["ms"] == 600).then_some(TaskMode::Never)
    });
    let server = Server::start(builder, true).await;
    let client = server.client();
    let reply = client
        .call_tool("sleep", json!({"ms": 600}), true, ALICE)
        .await;
    assert_eq!(reply.ok()["resultType"], "complete", "{}", reply.text());
    client
        .create_task_id("sleep", json!({"ms": 601}), ALICE)
        .await;

    // No tool modes at all: the policy alone makes `sleep` automatic.
    let builder = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .with_task_policy(|tool, _| {
            (tool == "sleep").then_some(TaskMode::Auto {
                after: Duration::from_millis(50),
            })
        });
    let server = Server::start(builder, true).await;
    let client = server.client();
    let id = client
        .create_task_id("sleep", json!({"ms": 300}), ALICE)
        .await;
    let done = client.wait_for_status(&id, ALICE, "completed").await;
    assert_eq!(first_text(&done["result"]), "slept 300ms");
    let reply = client
        .call_tool("boom", json!({"ms": 300}), true, ALICE)
        .await;
    assert_eq!(
        reply.json["error"]["code"], -32603,
        "boom stays synchronous"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_task_answers_the_limit_and_drops_the_call() {
    let server = Server::start(layer_builder().with_max_rows(1), true).await;
    let client = server.client();
    client
        .create_task_id("sleep", json!({"ms": 60_000}), ALICE)
        .await;
    let refused = client
        .call_tool("sleep", json!({"ms": 60_000}), true, ALICE)
        .await;
    assert_eq!(refused.json["error"]["code"], -32603, "{}", refused.text());
    assert_eq!(refused.json["error"]["message"], "Task limit reached");
    server
        .until("the refused call is dropped", |s| s.dropped() == 1)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_expiry_drop_a_raw_inner_future() {
    let (events, mut seen) = mpsc::unbounded_channel();
    let inner = tower::service_fn(move |_req: Request<RequestBody<Incoming>>| {
        let events = events.clone();
        async move {
            let _signal = SendOnDrop::new(events.clone(), "dropped");
            let _ = events.send("started");
            std::future::pending::<()>().await;
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::new())))
        }
    });
    let layer = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .with_tool_mode(
            "hang",
            TaskMode::Auto {
                after: Duration::from_millis(50),
            },
        )
        .with_default_ttl(Duration::from_millis(1_200))
        .without_janitor()
        .build()
        .unwrap();
    let server = serve_layered(&layer, inner).await;
    let client = Client::new(server.addr);

    let id = client.create_task_id("hang", json!({}), ALICE).await;
    assert_eq!(
        recv("the inner call's next event", &mut seen).await,
        "started"
    );
    client.cancel(&id, ALICE).await;
    assert_eq!(
        recv("the inner call's next event", &mut seen).await,
        "dropped"
    );
    assert_eq!(client.get(&id, ALICE).await.ok()["status"], "cancelled");

    let id = client.create_task_id("hang", json!({}), ALICE).await;
    assert_eq!(
        recv("the inner call's next event", &mut seen).await,
        "started"
    );
    assert_eq!(
        recv("the inner call's next event", &mut seen).await,
        "dropped"
    );
    let failed = client.get(&id, ALICE).await;
    assert_eq!(failed.ok()["status"], "failed", "{}", failed.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_tool_that_requires_the_extension_refuses_other_clients() {
    let builder = layer_builder().with_tool_mode(
        "sleep",
        TaskMode::AutoRequired {
            after: Duration::from_millis(50),
        },
    );
    let server = Server::start(builder, true).await;
    let client = server.client();

    // Without the extension: -32021 with requiredCapabilities, and rmcp never sees it.
    let refused = client
        .call_tool("sleep", json!({"ms": 10}), false, ALICE)
        .await;
    refused.assert_capability_error();
    assert!(server.inbox.calls("sleep").is_empty());

    // With it: a fast call is answered as it is, a slow one becomes a task.
    let fast = client
        .call_tool("sleep", json!({"ms": 5}), true, ALICE)
        .await;
    assert_eq!(first_text(fast.ok()), "slept 5ms", "{}", fast.text());
    let id = client
        .create_task_id("sleep", json!({"ms": 300}), ALICE)
        .await;
    let done = client.wait_for_status(&id, ALICE, "completed").await;
    assert_eq!(first_text(&done["result"]), "slept 300ms");
    // Other `Auto` tools still answer clients without the extension.
    let boom = client
        .call_tool("boom", json!({"ms": 5}), false, ALICE)
        .await;
    assert_eq!(boom.json["error"]["message"], "boom", "{}", boom.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_becomes_the_status_message_and_stays_off_the_streams() {
    for json in [true, false] {
        let server = Server::start(layer_builder(), json).await;
        let client = server.client();

        // Within the budget: the answer as it is, with no progress the client never
        // asked for.
        let fast = client
            .call_tool("steps", json!({"steps": 3, "ms": 1}), true, ALICE)
            .await;
        assert_eq!(first_text(fast.ok()), "3 steps done", "{}", fast.text());
        assert!(
            !fast.text().contains("notifications/progress"),
            "{}",
            fast.text()
        );
        let seen = server.inbox.calls("steps");
        assert!(
            seen[0].message["params"]["_meta"]["progressToken"].is_string(),
            "the layer asks the inner server for progress: {}",
            seen[0].message
        );

        // A task: 200 progress reports, far more than the status message is written.
        let id = client
            .create_task_id("steps", json!({"steps": 200, "ms": 5}), ALICE)
            .await;
        let mut stream = client.listen(ALICE, json!("progress"), &[&id]).await;
        let ack = stream.next_message().await;
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        // `next_task` fails on any other message, a raw progress notification included.
        let seen = stream.tasks_until(|t| t["status"] == "completed").await;
        let messages: Vec<&str> = seen
            .iter()
            .filter(|t| t["status"] == "working")
            .filter_map(|t| t["statusMessage"].as_str())
            .filter(|m| m.starts_with("step "))
            .collect();
        assert!(
            !messages.is_empty(),
            "no progress reached the task: {seen:?}"
        );
        assert!(
            messages.len() < 50,
            "progress is not coalesced: {messages:?}"
        );
        let done = client.get(&id, ALICE).await;
        assert_eq!(first_text(&done.ok()["result"]), "200 steps done");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poller_sees_the_newest_progress() {
    let server = Server::example().await;
    let client = server.client();
    let id = client
        .create_task_id("steps", json!({"steps": 3, "ms": 400}), ALICE)
        .await;
    let working = client
        .wait_for(&id, ALICE, |t| {
            t["statusMessage"] == "step 2 of 3 done" || t["status"] == "completed"
        })
        .await;
    assert_eq!(working["status"], "working", "{working}");
    let done = client.wait_for_status(&id, ALICE, "completed").await;
    assert_eq!(first_text(&done["result"]), "3 steps done");
}
