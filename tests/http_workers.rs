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
    let accepted = client.update(&id, answers.clone(), None).await;
    assert_eq!(accepted.ok()["resultType"], "complete");
    assert!(
        accepted.ok()["_meta"].get(IGNORED).is_none(),
        "{}",
        accepted.ok()
    );

    assert_eq!(
        recv("the worker's answers", &mut answered).await,
        (true, true)
    );
    let done = client.wait_for_status(&id, None, "completed").await;
    assert!(
        done.get("statusMessage").is_none(),
        "a completed task keeps no progress text: {done}"
    );

    // A late answer gets the acknowledgment the specification fixes, and says in
    // `_meta` that the task had ended, so nothing was recorded.
    let late = client.update(&id, answers, None).await;
    assert_eq!(late.ok()["resultType"], "complete");
    assert_eq!(
        late.ok()["_meta"][IGNORED],
        json!({"reason": "task_ended", "status": "completed",
            "message": "The task had already ended (completed); these answers were not recorded."}),
        "{}",
        late.ok()
    );
}

/// The `_meta` key of a `tasks/update` acknowledgment that recorded nothing.
const IGNORED: &str = "mcp-tasks/ignored";

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

/// `workers` tasks stored in `store`, each with a worker waiting in the background
/// for its end: the layer's worker handle, the tasks' ids, and their ends as the
/// workers see them.
async fn waiting_workers<S: mcp_tasks::store::TaskStore>(
    store: std::sync::Arc<S>,
    workers: usize,
) -> (
    mcp_tasks::worker::Tasks,
    Vec<mcp_tasks::TaskId>,
    mpsc::UnboundedReceiver<TaskEnd>,
) {
    use mcp_tasks::store::{CreateLimits, Timestamp};
    use mcp_tasks::{TaskId, TaskRecord, TasksLayer};

    let tasks = TasksLayer::builder(store.clone())
        .with_anonymous_tasks()
        .without_janitor()
        .without_worker_leases()
        .build()
        .unwrap()
        .tasks();
    let mut ids = Vec::with_capacity(workers);
    for _ in 0..workers {
        let record = TaskRecord::new(TaskId::random(), None, Timestamp::now());
        ids.push(record.id);
        store.create(record, CreateLimits::default()).await.unwrap();
    }
    let (ended_tx, ended) = mpsc::unbounded_channel();
    for id in &ids {
        let (tasks, id, ended_tx) = (tasks.clone(), *id, ended_tx.clone());
        tokio::spawn(async move {
            let _ = ended_tx.send(tasks.ended(&id).await);
        });
    }
    (tasks, ids, ended)
}

/// Fails every read while `down` is set.
#[derive(Debug, Default)]
struct ReadsDown(std::sync::atomic::AtomicBool);

impl mcp_tasks::test_suite::StoreHooks for ReadsDown {
    fn before(
        &self,
        call: mcp_tasks::test_suite::StoreCall<'_>,
    ) -> Result<(), mcp_tasks::error::StoreError> {
        let down = self.0.load(std::sync::atomic::Ordering::Relaxed);
        match call {
            mcp_tasks::test_suite::StoreCall::Get { .. } if down => {
                Err(mcp_tasks::error::StoreError::backend("reads are down"))
            }
            _ => Ok(()),
        }
    }
}

/// Many workers wait through a read outage far longer than the summary interval
/// (95 s against 30 s, on paused time), each retrying its read with backoff: the
/// outage is told once, then in a summary at most every 30 s, and its end in one
/// line; not a warning per worker and retry. Every worker still sees its task end.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn waiting_workers_tell_a_read_outage_once_not_once_each() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use mcp_tasks::MemoryStore;
    use mcp_tasks::test_suite::Intercept;
    use support::logs::Logged;

    const WORKERS: usize = 50;
    const OUTAGE: Duration = Duration::from_secs(95);
    let hooks = Arc::new(ReadsDown::default());
    let store = Arc::new(Intercept::new(MemoryStore::new(), hooks.clone()));
    let (logged, _guard) = Logged::capture(tracing::Level::INFO);
    let (tasks, ids, mut ended) = waiting_workers(store, WORKERS).await;
    // Every worker parks after its first read.
    tokio::task::yield_now().await;

    hooks.0.store(true, Ordering::Relaxed);
    // Each change wakes its worker, whose read now fails, and fails again at every
    // retry through the outage.
    for id in &ids {
        tasks.progress(id, "step").await.unwrap();
    }
    tokio::time::sleep(OUTAGE).await;
    hooks.0.store(false, Ordering::Relaxed);
    for id in &ids {
        tasks.complete(id, text_result("done")).await.unwrap();
    }
    for _ in 0..WORKERS {
        assert_eq!(recv("a worker's end", &mut ended).await, TaskEnd::Completed);
    }
    let failing = logged.lines_with("could not read a task a worker waits on");
    let most = 1 + (OUTAGE.as_secs() / 30) as usize + 1;
    assert!(
        !failing.is_empty() && failing.len() <= most,
        "{} warnings for one outage (at most {most}):\n{}",
        failing.len(),
        failing.join("\n")
    );
    let again = logged.lines_with("could read a task a worker waits on again");
    assert_eq!(again.len(), 1, "{}", logged.text());
}

/// A memory store whose reads, while `shut` is set, wait for it to clear; it counts
/// the reads, those out at once and the most there were.
#[derive(Debug, Default)]
struct GatedReads {
    store: mcp_tasks::MemoryStore,
    shut: tokio::sync::watch::Sender<bool>,
    reads: std::sync::atomic::AtomicUsize,
    out: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl mcp_tasks::store::TaskStore for GatedReads {
    fn create<'a>(
        &'a self,
        record: mcp_tasks::TaskRecord,
        limits: mcp_tasks::store::CreateLimits,
    ) -> mcp_tasks::store::BoxFuture<'a, Result<(), mcp_tasks::error::StoreError>> {
        self.store.create(record, limits)
    }

    fn get<'a>(
        &'a self,
        id: &'a mcp_tasks::TaskId,
        scope: mcp_tasks::store::Scope<'a>,
        now: mcp_tasks::store::Timestamp,
    ) -> mcp_tasks::store::BoxFuture<
        'a,
        Result<Option<mcp_tasks::TaskRecord>, mcp_tasks::error::StoreError>,
    > {
        use std::sync::atomic::Ordering;
        Box::pin(async move {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let out = self.out.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(out, Ordering::SeqCst);
            let _ = self.shut.subscribe().wait_for(|shut| !*shut).await;
            self.out.fetch_sub(1, Ordering::SeqCst);
            self.store.get(id, scope, now).await
        })
    }

    fn update<'a>(
        &'a self,
        id: &'a mcp_tasks::TaskId,
        scope: mcp_tasks::store::Scope<'a>,
        transition: &'a mcp_tasks::store::Transition,
        now: mcp_tasks::store::Timestamp,
    ) -> mcp_tasks::store::BoxFuture<
        'a,
        Result<Option<mcp_tasks::store::Updated>, mcp_tasks::error::StoreError>,
    > {
        self.store.update(id, scope, transition, now)
    }

    fn cleanup<'a>(
        &'a self,
        now: mcp_tasks::store::Timestamp,
        retention: Duration,
    ) -> mcp_tasks::store::BoxFuture<'a, Result<usize, mcp_tasks::error::StoreError>> {
        self.store.cleanup(now, retention)
    }

    fn subscribe(&self) -> Option<mcp_tasks::store::ChangeFeed> {
        None
    }
}

/// 200 workers are woken at once (each task changes) while the store's reads hang:
/// their re-reads reach the store at most 64 at a time, and the rest queue; once
/// the store answers, every worker sees its task end.
#[tokio::test(flavor = "current_thread")]
async fn a_burst_of_woken_workers_reads_the_store_a_bounded_number_at_a_time() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    const WORKERS: usize = 200;
    const AT_ONCE: usize = 64;
    let store = Arc::new(GatedReads::default());
    let (tasks, ids, mut ended) = waiting_workers(store.clone(), WORKERS).await;
    support::wait::until("every worker parks after its first read", || {
        store.reads.load(Ordering::SeqCst) >= WORKERS && store.out.load(Ordering::SeqCst) == 0
    })
    .await;
    store.most.store(0, Ordering::SeqCst);

    store.shut.send_replace(true);
    for id in &ids {
        tasks.progress(id, "step").await.unwrap();
    }
    support::wait::until("the first reads are out", || {
        store.out.load(Ordering::SeqCst) >= AT_ONCE
    })
    .await;
    for _ in 0..WORKERS {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        store.most.load(Ordering::SeqCst),
        AT_ONCE,
        "the woken workers' reads out at once"
    );
    store.shut.send_replace(false);
    for id in &ids {
        tasks.complete(id, text_result("done")).await.unwrap();
    }
    for _ in 0..WORKERS {
        assert_eq!(recv("a worker's end", &mut ended).await, TaskEnd::Completed);
    }
}
