//! Bytes per tenant: what the tasks of one principal store is bounded
//! (`with_max_bytes_per_owner`), a status message is cut to its bound
//! (`with_max_status_message_bytes`), and an error's `data` and input requests are
//! held to `with_max_result_bytes` as a result is.

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use mcp_tasks::error::{Limit, StoreError, TaskError};
use mcp_tasks::input::{InputRequest, InputRequests};
use mcp_tasks::store::TaskStore;
use mcp_tasks::wire::RpcError;
use mcp_tasks::{MemoryStore, TaskId, TaskRecord, TaskSpec, TaskStatus, TasksLayer};
use support::fixtures::{Inner, Server, Tool, spec, text_result};
use support::wait::within;

/// The greedy principal's bound in these tests.
const BOUND: usize = 2 * 1024 * 1024;
/// The result each of its calls makes.
const RESULT: usize = 128 * 1024;
/// Its calls in flight at once.
const AT_ONCE: usize = 4;

/// How a call of the `big` tool ended.
#[derive(Debug)]
enum Ended {
    /// Refused before any task was made.
    Refused(Value),
    /// Its task ended as the worker left it.
    Task(Box<TaskRecord>),
}

/// A layer over `store` holding each principal to [`BOUND`] bytes, serving `big`:
/// a task whose worker completes it with a text result of `size` bytes, and tells
/// the test the record it left.
async fn greedy_server(
    store: Arc<dyn TaskStore>,
) -> (Server, mpsc::UnboundedReceiver<Result<TaskRecord, String>>) {
    let layer = TasksLayer::builder(store)
        .without_janitor()
        .with_max_bytes_per_owner(BOUND)
        .build()
        .unwrap();
    let tasks = layer.tasks();
    let (done, ended) = mpsc::unbounded_channel();
    let inner = Inner::new().tool(
        "big",
        Tool::Context(spec(move |args| {
            let size = args["size"].as_u64().unwrap_or(0) as usize;
            let (tasks, done) = (tasks.clone(), done.clone());
            TaskSpec::new().with_start(move |id| {
                tokio::spawn(async move {
                    let result = text_result(&"x".repeat(size));
                    let outcome = match tasks.complete(&id, result).await {
                        Ok(()) => tasks.status(&id).await.map_err(|e| e.to_string()),
                        Err(e) => match tasks.status(&id).await {
                            // The worker is told, and the task ended all the same.
                            Ok(task) if task.status.is_terminal() => Ok(task),
                            _ => Err(e.to_string()),
                        },
                    };
                    let _ = done.send(outcome);
                });
            })
        })),
    );
    (Server::start(layer, inner).await, ended)
}

/// Calls `big` for `principal` with results of `size` bytes, `calls` times,
/// [`AT_ONCE`] at a time; how each ended.
async fn call_big(
    server: &Server,
    ended: &mut mpsc::UnboundedReceiver<Result<TaskRecord, String>>,
    principal: &str,
    size: usize,
    calls: usize,
) -> Vec<Ended> {
    let client = server.client();
    let mut out = Vec::new();
    let mut left = calls;
    while left > 0 {
        let batch = left.min(AT_ONCE);
        left -= batch;
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..batch {
            let (client, principal) = (client.clone(), principal.to_owned());
            calls.spawn(async move {
                client
                    .call_tool("big", json!({"size": size}), true, Some(&principal))
                    .await
            });
        }
        for reply in calls.join_all().await {
            if reply.json.get("error").is_some() {
                reply.assert_error(-32603, 200);
                out.push(Ended::Refused(reply.json["error"].clone()));
                continue;
            }
            assert_eq!(reply.ok()["resultType"], "task", "{}", reply.text());
            let task = within("the worker's end", ended.recv())
                .await
                .expect("a worker")
                .expect("the worker's task ends");
            out.push(Ended::Task(Box::new(task)));
        }
    }
    out
}

/// One principal asks for ten times its byte bound in results, four calls at a
/// time; another principal's tasks are untouched and it is still served. The
/// greedy one's stored bytes never pass the bound, each call past it is refused
/// or its task fails with `{"limit": "bytes_per_owner"}`, and what it had stored
/// within the bound stays.
async fn greedy_principal_is_held_to_its_bound(store: Arc<dyn TaskStore>) {
    let (server, mut ended) = greedy_server(store.clone()).await;
    let client = server.client();
    let bob = mcp_tasks::Principal::from("bob");
    let alice = mcp_tasks::Principal::from("alice");

    let before = call_big(&server, &mut ended, "bob", RESULT, 1).await;
    let Some(Ended::Task(bobs)) = before.into_iter().next() else {
        panic!("bob's first call makes a task");
    };
    assert_eq!(bobs.status, TaskStatus::Completed);

    let calls = 10 * BOUND / RESULT;
    let greedy = call_big(&server, &mut ended, "alice", RESULT, calls).await;
    let mut completed = 0;
    let mut held_back = 0;
    for end in &greedy {
        match end {
            Ended::Task(task) if task.status == TaskStatus::Completed => completed += 1,
            Ended::Task(task) => {
                assert_eq!(task.status, TaskStatus::Failed, "{task:?}");
                let error = task.error.as_ref().unwrap();
                assert_eq!(error.message, "Task limit reached");
                assert_eq!(error.data, Some(json!({"limit": "bytes_per_owner"})));
                held_back += 1;
            }
            Ended::Refused(error) => {
                assert_eq!(error["message"], "Task limit reached");
                assert_eq!(error["data"], json!({"limit": "bytes_per_owner"}));
                held_back += 1;
            }
        }
    }
    let stored = store.owner_bytes(Some(&alice)).await.unwrap();
    eprintln!(
        "asked for {} bytes in {calls} calls: {completed} completed, {held_back} held back, \
         {stored} bytes stored (bound {BOUND})",
        calls * RESULT
    );
    assert!(stored <= BOUND as u64, "alice stores {stored} bytes");
    assert!(
        completed * RESULT <= BOUND && completed * RESULT >= BOUND - 2 * RESULT,
        "alice's results fill her bound, no more: {completed} of {RESULT} bytes"
    );
    assert_eq!(completed + held_back, calls);
    // The results stored within the bound are all there.
    for end in &greedy {
        if let Ended::Task(task) = end
            && task.status == TaskStatus::Completed
        {
            let reply = client.get(&task.id.to_string(), Some("alice")).await;
            let text = &reply.ok()["result"]["content"][0]["text"];
            assert_eq!(text.as_str().map(str::len), Some(RESULT));
        }
    }

    // Bob's task is as it was, and bob is served in full.
    let reply = client.get(&bobs.id.to_string(), Some("bob")).await;
    assert_eq!(reply.ok()["status"], "completed");
    assert_eq!(
        reply.ok()["result"]["content"][0]["text"]
            .as_str()
            .map(str::len),
        Some(RESULT)
    );
    let after = call_big(&server, &mut ended, "bob", RESULT, 2).await;
    for end in after {
        let Ended::Task(task) = end else {
            panic!("bob is refused: {end:?}");
        };
        assert_eq!(task.status, TaskStatus::Completed, "{task:?}");
    }
    let bobs_bytes = store.owner_bytes(Some(&bob)).await.unwrap();
    assert!(bobs_bytes >= 3 * RESULT as u64, "{bobs_bytes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_principal_on_the_memory_store_is_held_to_its_bound() {
    greedy_principal_is_held_to_its_bound(Arc::new(MemoryStore::new())).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_principal_on_postgres_is_held_to_its_bound() {
    let Some(store) = support::stores::postgres::scratch().await else {
        return;
    };
    greedy_principal_is_held_to_its_bound(Arc::new(store)).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_principal_on_redis_is_held_to_its_bound() {
    let Some(store) = support::stores::redis::scratch().await else {
        return;
    };
    greedy_principal_is_held_to_its_bound(Arc::new(store)).await;
}

/// A task whose owner is at its bound: a client's answers are refused with the
/// cap's error (HTTP 200) and the task keeps waiting; a worker's status message is
/// not written; cancelling still works.
#[tokio::test]
async fn at_the_bound_answers_are_refused_and_progress_is_left_out() {
    let store = Arc::new(MemoryStore::new());
    let (server, mut ended) = greedy_server(store.clone()).await;
    let client = server.client();
    let alice = mcp_tasks::Principal::from("alice");
    // A task asking a question while there is room.
    let id = TaskId::random();
    let record = TaskRecord::new(id, Some(alice.clone()), mcp_tasks::store::Timestamp::now());
    store
        .create(record, mcp_tasks::store::CreateLimits::default())
        .await
        .unwrap();
    let question = InputRequest::confirm("Go on?", "ok");
    server
        .tasks
        .require_input(&id, InputRequests::new().with("go", question))
        .await
        .unwrap();
    // Results fill alice's bound to within less than a status message.
    call_big(&server, &mut ended, "alice", RESULT, BOUND / RESULT - 1).await;
    loop {
        let room = BOUND as u64 - store.owner_bytes(Some(&alice)).await.unwrap();
        if room < 3_000 {
            break;
        }
        let size = room.saturating_sub(2_500).max(1) as usize;
        let ended = call_big(&server, &mut ended, "alice", size, 1).await;
        assert!(matches!(&ended[..], [Ended::Task(task)] if task.status == TaskStatus::Completed));
    }

    let answer =
        json!({"go": {"action": "accept", "content": {"ok": true, "note": "n".repeat(10_000)}}});
    let reply = client.update(&id.to_string(), answer, Some("alice")).await;
    reply.assert_error(-32603, 200);
    assert_eq!(reply.json["error"]["message"], "Task limit reached");
    assert_eq!(
        reply.json["error"]["data"],
        json!({"limit": "bytes_per_owner"})
    );
    let task = client.get(&id.to_string(), Some("alice")).await;
    assert_eq!(task.ok()["status"], "input_required");

    let progress = server.tasks.progress(&id, "m".repeat(4_000)).await;
    assert!(
        matches!(
            progress,
            Err(TaskError::Store(StoreError::LimitReached(
                Limit::BytesPerOwner
            )))
        ),
        "{progress:?}"
    );
    let cancel = client.cancel(&id.to_string(), Some("alice")).await;
    assert!(cancel.json.get("error").is_none(), "{}", cancel.text());
    let task = client.get(&id.to_string(), Some("alice")).await;
    assert_eq!(task.ok()["status"], "cancelled");
    // Bob is served.
    let bobs = call_big(&server, &mut ended, "bob", RESULT, 1).await;
    assert!(matches!(&bobs[..], [Ended::Task(task)] if task.status == TaskStatus::Completed));
}

/// A status message longer than its bound is cut on a character boundary and
/// ends with "…", from a worker's progress and from a task's spec alike.
#[tokio::test]
async fn a_long_status_message_is_cut_to_its_bound() {
    let layer = TasksLayer::builder(MemoryStore::new())
        .without_janitor()
        .with_max_status_message_bytes(100)
        .build()
        .unwrap();
    let tasks = layer.tasks();
    let inner = Inner::new().tool(
        "job",
        Tool::Context(spec(|_| {
            TaskSpec::new().with_status_message("é".repeat(80))
        })),
    );
    let server = Server::start(layer, inner).await;
    let client = server.client();
    let id = client.create_task_id("job", json!({}), Some("alice")).await;
    let task = client.get(&id, Some("alice")).await;
    let message = task.ok()["statusMessage"].as_str().unwrap().to_owned();
    assert!(message.len() <= 100, "{} bytes", message.len());
    assert_eq!(message, format!("{}…", "é".repeat(48)));

    let task_id: TaskId = id.parse().unwrap();
    tasks
        .progress(&task_id, &"a".repeat(1_000_000))
        .await
        .unwrap();
    let task = client.get(&id, Some("alice")).await;
    let message = task.ok()["statusMessage"].as_str().unwrap();
    assert_eq!(message, format!("{}…", "a".repeat(97)));
}

/// An error whose `data` passes `max_result_bytes`, and input requests that pass
/// it, fail the task as a result that large does; the worker is told.
#[tokio::test]
async fn an_error_or_input_requests_past_the_result_bound_fail_the_task() {
    let layer = TasksLayer::builder(MemoryStore::new())
        .without_janitor()
        .with_max_result_bytes(64 * 1024)
        .build()
        .unwrap();
    let tasks = layer.tasks();
    let inner = Inner::new().tool("job", Tool::Context(spec(|_| TaskSpec::new())));
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let id = client.create_task_id("job", json!({}), Some("alice")).await;
    let task_id: TaskId = id.parse().unwrap();
    let error =
        RpcError::internal("backend crashed").with_data(json!({"dump": "d".repeat(1 << 20)}));
    let failed = tasks.fail(&task_id, error).await;
    assert!(matches!(failed, Err(TaskError::Refused(_))), "{failed:?}");
    let task = client.get(&id, Some("alice")).await;
    assert_eq!(task.ok()["status"], "failed");
    assert_eq!(
        task.ok()["error"],
        json!({"code": -32603, "message": "Result too large"})
    );

    let id = client.create_task_id("job", json!({}), Some("alice")).await;
    let task_id: TaskId = id.parse().unwrap();
    let question = InputRequest::confirm("q".repeat(1 << 20), "ok");
    let asked = tasks
        .require_input(&task_id, InputRequests::new().with("go", question))
        .await;
    assert!(matches!(asked, Err(TaskError::Refused(_))), "{asked:?}");
    let task = client.get(&id, Some("alice")).await;
    assert_eq!(task.ok()["status"], "failed");
    assert_eq!(task.ok()["error"]["message"], "Input requests too large");
    assert!(task.text().len() < 64 * 1024);
}
