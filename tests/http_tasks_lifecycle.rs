//! A task's life over real HTTP: the `CreateTaskResult`, durability, results and
//! errors, refusals, SSE answers, the input round trip, and cancel racing complete.

mod support;

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use mcp_tasks::error::TaskError;
use mcp_tasks::error::TransitionError;
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::wire::META_SERVER_INFO;
use mcp_tasks::wire::RpcError;
use mcp_tasks::{TaskId, TaskRecord, TaskSpec, TaskStatus};
use serde_json::{Value, json};
use support::fixtures::{
    SERVER_NAME, SERVER_VERSION, Server, Tool, layer_builder, spec, standard_inner, sync_fallback,
    text_result,
};
use support::wait::recv;
use support::{is_rfc3339, is_task_id, sse};
use tokio::sync::{Barrier, mpsc};

const CREATE_KEYS: [&str; 9] = [
    "resultType",
    "taskId",
    "status",
    "statusMessage",
    "createdAt",
    "lastUpdatedAt",
    "ttlMs",
    "pollIntervalMs",
    "_meta",
];

fn server_info() -> Value {
    json!({META_SERVER_INFO: {"name": SERVER_NAME, "version": SERVER_VERSION}})
}

#[track_caller]
fn assert_create_task_result(result: &Value) {
    let object = result.as_object().expect("an object");
    for key in object.keys() {
        assert!(
            CREATE_KEYS.contains(&key.as_str()),
            "unexpected key {key:?} in {result}"
        );
    }
    assert_eq!(result["resultType"], "task");
    assert!(is_task_id(&result["taskId"]), "{result}");
    assert_eq!(result["status"], "working");
    assert!(is_rfc3339(&result["createdAt"]), "{result}");
    assert!(is_rfc3339(&result["lastUpdatedAt"]), "{result}");
    assert!(object.contains_key("ttlMs"), "ttlMs is always present");
    assert_eq!(result["_meta"], server_info());
}

#[tokio::test]
async fn the_create_task_result_has_the_task_fields_and_nothing_else() {
    let server = Server::standard().await;
    let client = server.client();
    let reply = client
        .request("tools/call")
        .id(json!("c-1"))
        .params(json!({"name": "work", "arguments": {
            "ttl_ms": 600_000, "poll_ms": 250, "message": "Queued"}}))
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.content_type().starts_with("application/json"));
    assert_eq!(reply.json["id"], "c-1");
    let result = reply.ok();
    assert_create_task_result(result);
    assert_eq!(result["ttlMs"], 600_000);
    assert_eq!(result["pollIntervalMs"], 250);
    assert_eq!(result["statusMessage"], "Queued");
    assert_eq!(result["createdAt"], result["lastUpdatedAt"]);
    for forbidden in [
        "result",
        "error",
        "inputRequests",
        "requestState",
        "task",
        "ttl",
        "pollInterval",
        "content",
    ] {
        assert!(result.get(forbidden).is_none(), "{forbidden} in {result}");
    }

    // Defaults: the layer's TTL, and no poll interval unless one is configured.
    let result = client.create_task("work", json!({}), None).await;
    assert_create_task_result(&result);
    assert_eq!(result["ttlMs"], 3_600_000);
    assert!(result.get("pollIntervalMs").is_none(), "{result}");
    assert!(result.get("statusMessage").is_none(), "{result}");

    let server = Server::with_layer(
        layer_builder()
            .with_default_poll_interval(Duration::from_millis(1500))
            .with_default_ttl(Duration::from_secs(90)),
    )
    .await;
    let result = server.client().create_task("work", json!({}), None).await;
    assert_create_task_result(&result);
    assert_eq!(result["pollIntervalMs"], 1500);
    assert_eq!(result["ttlMs"], 90_000);
}

#[tokio::test]
async fn without_server_info_the_create_task_result_has_no_meta() {
    let layer = mcp_tasks::TasksLayer::builder(mcp_tasks::MemoryStore::new())
        .with_anonymous_tasks()
        .without_janitor()
        .build()
        .unwrap();
    let inner = standard_inner(&layer.tasks());
    let server = Server::start(layer, inner).await;
    let result = server.client().create_task("work", json!({}), None).await;
    assert!(result.get("_meta").is_none(), "{result}");
    assert!(is_task_id(&result["taskId"]));
}

#[tokio::test]
async fn a_task_resolves_with_tasks_get_right_after_its_creation() {
    let server = Server::standard().await;
    let client = server.client();
    for _ in 0..20 {
        let created = client.create_task("work", json!({}), None).await;
        let id = created["taskId"].as_str().unwrap();
        let reply = client.get(id, None).await;
        let task = reply.ok();
        assert_eq!(
            task["resultType"], "complete",
            "tasks/get is not a task result"
        );
        assert_eq!(task["taskId"], id);
        assert_eq!(task["status"], "working");
        assert_eq!(task["createdAt"], created["createdAt"]);
        assert_eq!(task["ttlMs"], created["ttlMs"]);
        assert_eq!(task["_meta"], server_info());
        for absent in ["result", "error", "inputRequests"] {
            assert!(task.get(absent).is_none(), "{absent} in {task}");
        }
    }
}

#[tokio::test]
async fn a_completed_task_carries_the_tool_result() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client
        .create_task_id("work", json!({"then": "complete"}), None)
        .await;
    let task = client.wait_for_status(&id, None, "completed").await;
    assert_eq!(task["resultType"], "complete");
    assert_eq!(task["result"], text_result("done"));
    assert!(task.get("error").is_none());
    assert!(task.get("inputRequests").is_none());
    assert!(is_rfc3339(&task["lastUpdatedAt"]));

    // A tool error is still a completed task.
    let id = client
        .create_task_id("work", json!({"then": "complete_error"}), None)
        .await;
    let task = client.wait_for_status(&id, None, "completed").await;
    assert_eq!(task["result"]["isError"], true);
    assert!(task.get("error").is_none());
}

#[tokio::test]
async fn a_failed_task_carries_an_error_and_no_result() {
    let server = Server::standard().await;
    let client = server.client();
    let id = client
        .create_task_id("work", json!({"then": "fail"}), None)
        .await;
    let task = client.wait_for_status(&id, None, "failed").await;
    assert_eq!(
        task["error"],
        json!({"code": -32603, "message": "backend crashed"})
    );
    assert!(task.get("result").is_none(), "{task}");
    assert!(task["statusMessage"].is_string(), "{task}");
    assert_eq!(task["resultType"], "complete");
}

#[tokio::test]
async fn a_panicking_start_still_answers_and_fails_the_task() {
    let server = Server::standard().await;
    let client = server.client();
    let created = client.create_task("panics", json!({}), None).await;
    assert_create_task_result(&created);
    let id = created["taskId"].as_str().unwrap();
    let task = client.wait_for_status(id, None, "failed").await;
    assert_eq!(task["error"]["code"], RpcError::INTERNAL_ERROR);
    assert!(task.get("result").is_none());
    // The server is still serving.
    let reply = client
        .request("tools/call")
        .params(json!({"name": "greet", "arguments": {}}))
        .send()
        .await;
    assert_eq!(reply.ok(), &text_result("Hello, world!"));
}

#[tokio::test]
async fn an_invalid_spec_is_refused_and_stores_nothing() {
    // One row only: if a refused spec were stored, the next task would not fit.
    let server = Server::with_layer(layer_builder().with_max_rows(1)).await;
    let client = server.client();
    for (tool, args) in [("bad_ttl", json!({})), ("work", json!({"poll_ms": 0}))] {
        let reply = client
            .request("tools/call")
            .params(json!({"name": tool, "arguments": args}))
            .send()
            .await;
        reply.assert_error(RpcError::INTERNAL_ERROR, 200);
        assert_eq!(reply.json["error"]["message"], "Internal error");
    }
    let created = client.create_task("work", json!({}), None).await;
    assert_create_task_result(&created);
    let reply = client
        .request("tools/call")
        .params(json!({"name": "work", "arguments": {}}))
        .send()
        .await;
    reply.assert_error(RpcError::INTERNAL_ERROR, 200);
    assert_eq!(reply.json["error"]["message"], "Task limit reached");
}

#[tokio::test]
async fn the_row_cap_refuses_the_third_task() {
    let server = Server::with_layer(layer_builder().with_max_rows(2)).await;
    let client = server.client();
    let first = client.create_task_id("work", json!({}), None).await;
    let second = client.create_task_id("work", json!({}), Some("bob")).await;
    for principal in [None, Some("bob"), Some("carol")] {
        let mut call = client
            .request("tools/call")
            .params(json!({"name": "work", "arguments": {}}));
        if let Some(p) = principal {
            call = call.principal(p);
        }
        let reply = call.send().await;
        reply.assert_error(RpcError::INTERNAL_ERROR, 200);
        assert_eq!(reply.json["error"]["message"], "Task limit reached");
    }
    assert_eq!(server.inner.calls("work"), 5);
    assert_eq!(client.get(&first, None).await.ok()["status"], "working");
    assert_eq!(
        client.get(&second, Some("bob")).await.ok()["status"],
        "working"
    );
}

#[tokio::test]
async fn a_task_outcome_where_none_may_be_made_is_internal_error() {
    let server = Server::standard().await;
    let client = server.client();
    // Way 2 (a spec on the response) from a client that did not declare the extension.
    let reply = client
        .request("tools/call")
        .params(json!({"name": "respond_task", "arguments": {}}))
        .declare(false)
        .send()
        .await;
    reply.assert_error(RpcError::INTERNAL_ERROR, 200);
    assert!(reply.result().is_null());
    assert_eq!(server.inner.calls("respond_task"), 1);

    // The same tool with the extension declared makes a real task.
    let created = client
        .create_task("respond_task", json!({"message": "On its way"}), None)
        .await;
    assert_create_task_result(&created);
    assert_eq!(created["statusMessage"], "On its way");
    let id = created["taskId"].as_str().unwrap();
    assert_eq!(client.get(id, None).await.ok()["status"], "working");

    // Way 1 without the extension runs synchronously and says why.
    let reply = client
        .request("tools/call")
        .params(json!({"name": "work", "arguments": {}}))
        .declare(false)
        .send()
        .await;
    assert_eq!(reply.ok(), &sync_fallback("NotDeclared"));
}

#[tokio::test]
async fn a_synchronous_sse_answer_reaches_the_client_unchanged() {
    let server = Server::standard().await;
    let client = server.client();
    for declare in [true, false] {
        let reply = client
            .request("tools/call")
            .id(json!(9))
            .params(json!({"name": "sse", "arguments": {}}))
            .declare(declare)
            .send()
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(reply.content_type().starts_with("text/event-stream"));
        assert_eq!(reply.body, server.inner.last_sent(), "byte for byte");
        let messages = sse::messages(&reply.body);
        assert_eq!(messages.len(), 2, "{}", reply.text());
        assert_eq!(messages[0]["method"], "notifications/progress");
        assert_eq!(messages[1]["id"], 9);
        assert_eq!(messages[1]["result"], text_result("streamed"));
    }
}

#[tokio::test]
async fn an_sse_answer_with_a_task_becomes_a_create_task_result() {
    let server = Server::standard().await;
    let client = server.client();
    let reply = client
        .request("tools/call")
        .params(json!({"name": "sse_task", "arguments": {"then": "complete"}}))
        .send()
        .await;
    // The stream stays a stream: the inner events before the response pass through
    // unchanged, and the response event is replaced by the task handle.
    assert!(
        reply.content_type().starts_with("text/event-stream"),
        "{reply:?}"
    );
    let messages = sse::messages(&reply.body);
    assert_eq!(messages.len(), 2, "{}", reply.text());
    assert_eq!(messages[0]["method"], "notifications/progress");
    let sent = String::from_utf8_lossy(&server.inner.last_sent()).into_owned();
    let first_event = sent.split_inclusive("\n\n").next().unwrap().to_owned();
    assert!(reply.text().starts_with(&first_event), "{}", reply.text());
    assert_eq!(messages[1], reply.json);
    let created = reply.ok();
    assert_create_task_result(created);
    let id = created["taskId"].as_str().unwrap();
    let task = client.wait_for_status(id, None, "completed").await;
    assert_eq!(task["result"], text_result("done"));
}

// ---------------------------------------------------------------------------
// Input round trip

#[derive(Debug)]
enum WorkerEvent {
    Answers(Result<mcp_tasks::input::InputResponses, TaskError>),
    Reused(Result<(), TaskError>),
}

#[tokio::test]
async fn input_round_trip_with_partial_and_unknown_answers() {
    let layer = layer_builder().build().unwrap();
    let tasks = layer.tasks();
    let (events, mut worker_events) = mpsc::unbounded_channel();
    let ask = {
        let tasks = tasks.clone();
        spec(move |_| {
            let tasks = tasks.clone();
            let events = events.clone();
            TaskSpec::new().with_start(move |id| {
                tokio::spawn(async move {
                    let schema = json!({"type": "object",
                        "properties": {"name": {"type": "string"}}, "required": ["name"]});
                    tasks
                        .require_input(
                            &id,
                            InputRequests::new()
                                .with("name", InputRequest::form("Your name?", schema))
                                .with("confirm", InputRequest::confirm("Go on?", "ok"))
                                .with_status_message("Waiting for answers"),
                        )
                        .await
                        .unwrap();
                    let answers = tasks.wait_for_input(&id).await;
                    let name = answers
                        .as_ref()
                        .ok()
                        .and_then(|a| a["name"]["content"]["name"].as_str())
                        .unwrap_or("?")
                        .to_owned();
                    events.send(WorkerEvent::Answers(answers)).unwrap();
                    let reused = tasks
                        .require_input(
                            &id,
                            InputRequests::new()
                                .with("name", InputRequest::confirm("Again?", "ok"))
                                .with("fresh", InputRequest::roots()),
                        )
                        .await;
                    events.send(WorkerEvent::Reused(reused)).unwrap();
                    tasks
                        .complete(&id, text_result(&format!("Hello, {name}")))
                        .await
                        .unwrap();
                });
            })
        })
    };
    let inner = standard_inner(&tasks).tool("ask", Tool::Context(ask));
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let id = client.create_task_id("ask", json!({}), None).await;
    let task = client.wait_for_status(&id, None, "input_required").await;
    let requests = task["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 2, "{task}");
    assert_eq!(requests["name"]["method"], "elicitation/create");
    assert_eq!(requests["name"]["params"]["message"], "Your name?");
    assert_eq!(requests["confirm"]["params"]["mode"], "form");
    assert_eq!(task["statusMessage"], "Waiting for answers");

    // A batch with one malformed answer to an outstanding key is refused whole.
    let reply = client
        .update(
            &id,
            json!({"confirm": {"action": "accept", "content": {"ok": true}}, "name": "Ada"}),
            None,
        )
        .await;
    reply.assert_error(RpcError::INVALID_PARAMS, 200);
    let unchanged = client.get(&id, None).await;
    assert_eq!(unchanged.ok(), &task, "a refused batch changes nothing");

    // A partial answer is applied before the acknowledgment.
    let ack = client
        .update(
            &id,
            json!({"name": {"action": "accept", "content": {"name": "Ada"}}}),
            None,
        )
        .await;
    assert_eq!(ack.ok()["resultType"], "complete");
    assert!(ack.ok().get("status").is_none(), "{}", ack.text());
    let task = client.get(&id, None).await.ok().clone();
    assert_eq!(task["status"], "input_required");
    let keys: Vec<&String> = task["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["confirm"]);

    // Keys that are not outstanding are ignored, whatever their value.
    for ignored in [
        json!({"unknown-key": {"ignored": true}}),
        json!({"name": {"action": "decline"}}),
        json!({"other": "not even an object"}),
        json!({}),
    ] {
        let ack = client.update(&id, ignored.clone(), None).await;
        assert_eq!(ack.ok()["resultType"], "complete", "{ignored}");
        assert_eq!(client.get(&id, None).await.ok(), &task, "{ignored}");
    }

    // The last answer wakes the worker with every answer.
    let ack = client
        .update(
            &id,
            json!({"confirm": {"action": "accept", "content": {"ok": true}}}),
            None,
        )
        .await;
    assert_eq!(ack.ok()["resultType"], "complete");
    // Working again (or done already): the answered wait is no longer the status.
    let answered = client.get(&id, None).await.ok().clone();
    assert!(answered.get("statusMessage").is_none(), "{answered}");
    let event = recv("the worker's wake-up", &mut worker_events).await;
    let WorkerEvent::Answers(Ok(answers)) = event else {
        panic!("unexpected {event:?}");
    };
    assert_eq!(
        Value::Object(answers.into_json()),
        json!({
            "name": {"action": "accept", "content": {"name": "Ada"}},
            "confirm": {"action": "accept", "content": {"ok": true}},
        })
    );
    let event = recv("the worker's second request", &mut worker_events).await;
    match event {
        WorkerEvent::Reused(Err(TaskError::Refused(TransitionError::DuplicateKeys(keys)))) => {
            assert_eq!(keys, ["name"]);
        }
        other => panic!("a reused key must be refused, got {other:?}"),
    }
    let task = client.wait_for_status(&id, None, "completed").await;
    assert_eq!(task["result"], text_result("Hello, Ada"));
    assert!(task.get("inputRequests").is_none());
    // The refused request left nothing behind.
    let record = server.tasks.status(&id.parse().unwrap()).await.unwrap();
    assert!(record.input_requests.is_empty());
    assert!(!record.issued_keys.contains("fresh"));
}

// ---------------------------------------------------------------------------
// Cancel racing complete

type RaceOutcome = (TaskId, Result<(), TaskError>, TaskRecord);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_racing_complete_ends_in_exactly_one_consistent_state() {
    const ROUNDS: usize = 50;
    let layer = layer_builder().build().unwrap();
    let tasks = layer.tasks();
    let barrier = Arc::new(Barrier::new(2));
    let (outcomes, mut worker_outcomes) = mpsc::unbounded_channel::<RaceOutcome>();
    let race = {
        let tasks = tasks.clone();
        let barrier = barrier.clone();
        spec(move |args| {
            let tasks = tasks.clone();
            let barrier = barrier.clone();
            let outcomes = outcomes.clone();
            let delay = Duration::from_micros(args["delay_us"].as_u64().unwrap_or(0));
            TaskSpec::new().with_start(move |id| {
                tokio::spawn(async move {
                    barrier.wait().await;
                    // Jitter, not synchronisation: spreads the complete over the time
                    // the cancel takes to cross HTTP, so both orders happen.
                    let start = std::time::Instant::now();
                    while start.elapsed() < delay {
                        tokio::task::yield_now().await;
                    }
                    let completed = tasks.complete(&id, text_result("won")).await;
                    let record = tasks.status(&id).await.unwrap();
                    outcomes.send((id, completed, record)).unwrap();
                });
            })
        })
    };
    let inner = standard_inner(&tasks).tool("race", Tool::Context(race));
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let (mut completed, mut cancelled) = (0, 0);
    for round in 0..ROUNDS {
        let delay_us = (round % 10) * 300;
        let id = client
            .create_task_id("race", json!({"delay_us": delay_us}), None)
            .await;
        barrier.wait().await;
        let ack = client.cancel(&id, None).await;
        assert_eq!(ack.ok()["resultType"], "complete", "round {round}");
        let (worker_id, worker_result, worker_record) =
            recv("the worker's end", &mut worker_outcomes).await;
        assert_eq!(worker_id.to_string(), id);
        let task = client.get(&id, None).await.ok().clone();
        assert_eq!(
            task["status"],
            worker_record.status.as_str(),
            "round {round}: the client and the worker disagree"
        );
        match worker_result {
            Ok(()) => {
                completed += 1;
                assert_eq!(task["status"], "completed", "round {round}");
                assert_eq!(task["result"], text_result("won"));
                assert_eq!(worker_record.status, TaskStatus::Completed);
            }
            Err(TaskError::Refused(TransitionError::Terminal)) => {
                cancelled += 1;
                assert_eq!(task["status"], "cancelled", "round {round}");
                assert!(task.get("result").is_none());
                assert_eq!(worker_record.status, TaskStatus::Cancelled);
                assert!(server.tasks.is_cancelled(&worker_id).await);
            }
            Err(other) => panic!("round {round}: unexpected worker error {other:?}"),
        }
        // Terminal now: neither side can move it any more.
        assert_eq!(client.get(&id, None).await.ok(), &task);
    }
    assert_eq!(completed + cancelled, ROUNDS);
    eprintln!("cancel race: {completed} completed, {cancelled} cancelled");
}
