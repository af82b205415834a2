//! The worker API over real HTTP: work started with `TaskSpec::with_work` learns of a
//! cancel without polling, gets typed answers, and never strands its task when it
//! stops without ending it.

mod support;

use std::time::Duration;

use mcp_tasks::TaskSpec;
use mcp_tasks::error::TaskError;
use mcp_tasks::input::{InputRequest, InputRequests, InputResponse};
use mcp_tasks::worker::{TaskEnd, TaskHandle};
use serde_json::{Value, json};
use support::fixtures::{Server, Tool, layer_builder, spec, standard_inner, text_result};
use support::wait::{SendOnDrop, recv};
use tokio::sync::mpsc;

/// A tool whose task runs `work` with its handle; each call's worker reports on `events`.
fn worker_tool<E, F, Fut>(events: mpsc::UnboundedSender<E>, work: F) -> Tool
where
    E: Send + 'static,
    F: Fn(TaskHandle, mpsc::UnboundedSender<E>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Tool::Context(spec(move |_args: &Value| {
        let events = events.clone();
        let work = work.clone();
        TaskSpec::new().with_work(move |task| work(task, events))
    }))
}

#[tokio::test]
async fn a_worker_awaiting_cancellation_stops_on_tasks_cancel_without_polling() {
    let layer = layer_builder().build().unwrap();
    let (events, mut ended) = mpsc::unbounded_channel();
    let tool = worker_tool(events, |task: TaskHandle, events| async move {
        // Work that would never end on its own, dropped the moment the task is cancelled.
        let (dropped, mut work_dropped) = mpsc::unbounded_channel();
        let endless = async move {
            let _guard = SendOnDrop::new(dropped, ());
            std::future::pending::<()>().await
        };
        let outcome = task.run_until_ended(endless).await;
        let work_was_dropped = work_dropped.try_recv().is_ok();
        let _ = events.send((outcome, work_was_dropped));
    });
    let inner = standard_inner(&layer.tasks()).tool("park", tool);
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let id = client.create_task_id("park", json!({}), None).await;
    assert_eq!(client.get(&id, None).await.ok()["status"], "working");
    client.cancel(&id, None).await.ok();

    let (outcome, work_was_dropped) = recv("the worker's end", &mut ended).await;
    assert_eq!(outcome, Err(TaskEnd::Cancelled));
    assert!(work_was_dropped, "the work future is dropped on the cancel");
    assert_eq!(client.get(&id, None).await.ok()["status"], "cancelled");
}

#[tokio::test]
async fn a_worker_learns_its_task_expired() {
    let layer = layer_builder().build().unwrap();
    let (events, mut ended) = mpsc::unbounded_channel();
    let tool = Tool::Context(spec(move |_| {
        let events = events.clone();
        TaskSpec::new()
            .with_ttl(Duration::from_millis(300))
            .with_work(move |task| async move {
                let _ = events.send(task.ended().await);
            })
    }));
    let inner = standard_inner(&layer.tasks()).tool("short", tool);
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let id = client.create_task_id("short", json!({}), None).await;
    assert_eq!(recv("the worker's end", &mut ended).await, TaskEnd::Gone);
    client.get(&id, None).await.assert_error(-32602, 200);
}

#[tokio::test]
async fn answers_come_typed_and_a_finished_task_drops_its_progress_text() {
    let layer = layer_builder().build().unwrap();
    let (events, mut answered) = mpsc::unbounded_channel();
    let tool = worker_tool(events, |task: TaskHandle, events| async move {
        let questions = InputRequests::new()
            .with("go", InputRequest::confirm("Deploy?", "ok"))
            .with("region", InputRequest::confirm("In the EU?", "eu"))
            .with_status_message("Waiting for your answers");
        let answers = task.ask(questions).await.unwrap();
        let go = answers.confirmed("go", "ok");
        let region_declined = answers.get("region") == Some(InputResponse::Decline);
        task.complete(text_result("deployed")).await.unwrap();
        let _ = events.send((go, region_declined));
    });
    let inner = standard_inner(&layer.tasks()).tool("deploy", tool);
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let id = client.create_task_id("deploy", json!({}), None).await;
    let waiting = client.wait_for_status(&id, None, "input_required").await;
    assert_eq!(waiting["statusMessage"], "Waiting for your answers");
    let answers = json!({
        "go": {"action": "accept", "content": {"ok": true}},
        "region": {"action": "decline"},
    });
    client.update(&id, answers, None).await.ok();

    assert_eq!(
        recv("the worker's answers", &mut answered).await,
        (true, true)
    );
    let done = client.wait_for_status(&id, None, "completed").await;
    assert!(
        done.get("statusMessage").is_none(),
        "a completed task keeps no progress text: {done}"
    );
}

#[tokio::test]
async fn work_that_returns_without_ending_its_task_fails_it_at_once() {
    let layer = layer_builder().build().unwrap();
    let inner = standard_inner(&layer.tasks()).tool(
        "forgets",
        Tool::Context(spec(|_| {
            TaskSpec::new().with_work(|task| async move {
                let _ = task.progress("Started").await;
            })
        })),
    );
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let id = client.create_task_id("forgets", json!({}), None).await;
    let failed = client.wait_for_status(&id, None, "failed").await;
    assert_eq!(failed["error"]["code"], -32603);
    assert_eq!(
        failed["error"]["message"],
        "Task worker stopped before finishing the task"
    );
}

#[tokio::test]
async fn work_that_panics_fails_its_task_at_once() {
    let layer = layer_builder().build().unwrap();
    let inner = standard_inner(&layer.tasks()).tool(
        "panics_later",
        Tool::Context(spec(|_| {
            TaskSpec::new().with_work(|task| async move {
                task.progress("About to fail").await.unwrap();
                panic!("the work failed on purpose");
            })
        })),
    );
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let id = client.create_task_id("panics_later", json!({}), None).await;
    let failed = client.wait_for_status(&id, None, "failed").await;
    assert_eq!(failed["error"]["code"], -32603);
}

#[tokio::test]
async fn a_cancelled_worker_is_refused_further_writes_and_is_not_failed() {
    let layer = layer_builder().build().unwrap();
    let (events, mut ended) = mpsc::unbounded_channel();
    let tool = worker_tool(events, |task: TaskHandle, events| async move {
        let end = task.ended().await;
        let late = task.complete(text_result("too late")).await;
        let _ = events.send((end, late));
    });
    let inner = standard_inner(&layer.tasks()).tool("park", tool);
    let server = Server::start(layer, inner).await;
    let client = server.client();

    let id = client.create_task_id("park", json!({}), None).await;
    client.cancel(&id, None).await.ok();
    let (end, late) = recv("the worker's end", &mut ended).await;
    assert_eq!(end, TaskEnd::Cancelled);
    assert!(matches!(late, Err(ref e) if e.is_terminal()), "{late:?}");
    assert!(!matches!(late, Err(TaskError::NotFound)));
    let task = client.get(&id, None).await.ok().clone();
    assert_eq!(
        task["status"], "cancelled",
        "cancelled stays cancelled: {task}"
    );
}
