//! The job queue (feature `queue`) on PostgreSQL.
//!
//! Across real processes, the examples `queue_server` (two replicas) and
//! `queue_worker`: a 30 s job-backed task survives `kill -9` of the worker running
//! it and SIGTERM of the node that took the call (drained with a 1 s grace), and its
//! client, polling another node, sees it `working` until it completes; a task whose
//! job waits for input survives a rollout of every process and completes once
//! answered; a first run paused past its lock (SIGSTOP) while a second worker runs
//! the job again does not complete the task twice, whichever finishes first.
//!
//! In process, with a `Worker` on a scratch table: a job that keeps failing is
//! retried, then gives up and fails its task with `job_failed`; a cancelled task
//! stops its running job and finishes it.

#![cfg(unix)]

mod support;

use std::str::FromStr;
use std::time::Duration;

use mcp_tasks::queue::{JobQueue, JobState, Worker};
use mcp_tasks::sqlx::postgres::PgPoolOptions;
use mcp_tasks::store::{CreateLimits, TaskStore, Timestamp};
use mcp_tasks::{PostgresStore, TaskId, TaskRecord, TaskStatus, TasksLayer};
use serde_json::{Value, json};
use support::http::Client;
use support::procs::{self, Proc};
use support::stores::postgres::{DropTable, database_url, scratch_table};
use tokio::sync::mpsc;

const ALICE: Option<&str> = Some("alice");

/// How long a process may take to exit after SIGTERM.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// Servers and workers of the example on one scratch table, dropped at the end.
struct Cluster {
    url: String,
    table: String,
    _drop: DropTable,
}

impl Cluster {
    fn new() -> Option<Cluster> {
        let url = database_url()?;
        let table = scratch_table();
        Some(Cluster {
            _drop: DropTable::new(url.clone(), table.clone()),
            url,
            table,
        })
    }

    /// A `queue_server`: drains with a 1 s grace, and keeps a 1 s worker lease, so
    /// that a peer would fail within about a second anything the lease guarded.
    fn server(&self) -> Proc {
        procs::spawn(
            "queue_server",
            &[],
            &[
                ("MCP_STORE", &self.url),
                ("MCP_STORE_TABLE", &self.table),
                ("MCP_DRAIN_GRACE_MS", "1000"),
                ("MCP_LEASE_MS", "1000"),
                ("RUST_LOG", "warn,mcp_tasks=info"),
            ],
        )
    }

    /// A `queue_worker` named `name`, whose lock on a running job lasts `lock_ms`.
    fn worker(&self, name: &str, lock_ms: u64) -> Proc {
        procs::spawn_until(
            "queue_worker",
            &[],
            &[
                ("MCP_STORE", &self.url),
                ("MCP_STORE_TABLE", &self.table),
                ("MCP_WORKER_NAME", name),
                ("MCP_LOCK_LEASE_MS", &lock_ms.to_string()),
                ("MCP_POLL_MS", "200"),
                ("MCP_WORKER_GRACE_MS", "1000"),
                ("RUST_LOG", "warn,mcp_tasks=info"),
            ],
            "job worker",
        )
    }

    /// The queue the examples use, to read a task's job.
    async fn queue(&self) -> JobQueue {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await
            .expect("connect to DATABASE_URL");
        JobQueue::new(pool, &self.table).expect("a valid prefix")
    }
}

/// SIGTERM, and a clean exit: status 0 within [`EXIT_WITHIN`].
fn stop(proc: &mut Proc, what: &str) {
    proc.terminate();
    let status = proc
        .wait_exit(EXIT_WITHIN)
        .unwrap_or_else(|| panic!("{what} still runs {EXIT_WITHIN:?} after SIGTERM"));
    assert_eq!(
        status.code(),
        Some(0),
        "{what} ended {status}:\n{}",
        proc.output().join("\n")
    );
}

/// A drained server failed none of the queue's tasks.
fn drained_without_failing(server: &Proc) {
    assert!(
        server.wait_for_line("shut down;", Duration::from_secs(5)),
        "{}",
        server.output().join("\n")
    );
    let output = server.output().join("\n");
    assert!(
        output.contains("shut down; 0 unfinished task(s) failed"),
        "{output}"
    );
}

/// Polls `tasks/get` until the task's status message contains `needle`.
async fn wait_for_message(client: &Client, id: &str, needle: &str) -> Value {
    client
        .wait_for(id, ALICE, |task| {
            task["statusMessage"]
                .as_str()
                .is_some_and(|message| message.contains(needle))
        })
        .await
}

/// Waits until the job of `id` is finished: its row removed, soon after its task
/// ended.
async fn finished(queue: &JobQueue, id: &TaskId) {
    let gone =
        support::wait::poll(async || queue.job(id).await.unwrap().is_none().then_some(())).await;
    assert!(
        gone.is_some(),
        "the job is finished: {:?}",
        queue.job(id).await
    );
}

/// The text of a completed task's result.
fn result_text(task: &Value) -> &str {
    task["result"]["content"][0]["text"].as_str().unwrap_or("")
}

/// A client following a task by polling `tasks/get` every 100 ms: every status
/// and status message it saw, in order, until the task ended (or `limit` passed).
async fn follow(client: Client, id: String, limit: Duration) -> Vec<(String, String)> {
    let mut seen: Vec<(String, String)> = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let task = client.get(&id, ALICE).await.ok().clone();
        let now = (
            task["status"].as_str().unwrap_or("").to_owned(),
            task["statusMessage"].as_str().unwrap_or("").to_owned(),
        );
        if seen.last() != Some(&now) {
            seen.push(now.clone());
        }
        if matches!(now.0.as_str(), "completed" | "failed" | "cancelled") {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task did not end within {limit:?}; seen: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_s_job_survives_kill_9_of_its_worker_and_sigterm_of_the_node_that_took_the_call() {
    let Some(cluster) = Cluster::new() else {
        return;
    };
    let mut accepting = cluster.server();
    let other = cluster.server();
    let mut first = cluster.worker("worker-1", 3_000);
    let client = Client::new(accepting.addr);
    let id = client
        .create_task_id("report", json!({"seconds": 30}), ALICE)
        .await;
    // The client follows the task on the other node, from start to end.
    let follower = tokio::spawn(follow(
        Client::new(other.addr),
        id.clone(),
        Duration::from_secs(120),
    ));
    let observer = Client::new(other.addr);

    // A deploy replaces the node that took the call: it drains with a 1 s grace,
    // far shorter than the report, and fails nothing.
    wait_for_message(&observer, &id, "2 of 30 s done").await;
    stop(&mut accepting, "the node that took the call");
    drained_without_failing(&accepting);

    // The worker running the report dies mid-way; another carries on the same task.
    wait_for_message(&observer, &id, "4 of 30 s done").await;
    first.kill();
    let killed = std::time::Instant::now();
    let _second = cluster.worker("worker-2", 3_000);
    wait_for_message(&observer, &id, "Resumed after an interruption (attempt 2)").await;
    eprintln!(
        "kill -9 of the worker → resumed on another: {} ms (lock lease 3000 ms)",
        killed.elapsed().as_millis()
    );

    let seen = follower.await.expect("the follower");
    let (last, before) = seen.split_last().expect("something seen");
    assert_eq!(last.0, "completed", "{seen:?}");
    assert!(
        before.iter().all(|(status, _)| status == "working"),
        "the task was working throughout: {seen:?}"
    );
    assert!(
        before
            .iter()
            .any(|(_, message)| message == "Resumed after an interruption (attempt 2)"),
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|(_, m)| m == "1 of 30 s done").count(),
        2,
        "the second run started over: {seen:?}"
    );
    let task = observer.get(&id, ALICE).await.ok().clone();
    assert_eq!(
        result_text(&task),
        "Report of 30 s written by worker-2 (attempt 2)"
    );
    finished(&cluster.queue().await, &TaskId::from_str(&id).unwrap()).await;
    // The node the client followed had nothing to claim from the drained one.
    let output = other.output().join("\n");
    assert!(
        !output.contains("stopped renewing its worker lease"),
        "{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_for_input_survives_a_rollout_of_every_process_and_completes_once_answered() {
    let Some(cluster) = Cluster::new() else {
        return;
    };
    let queue = cluster.queue().await;
    let mut a = cluster.server();
    let mut b = cluster.server();
    let mut worker = cluster.worker("worker-1", 3_000);
    let id = Client::new(a.addr)
        .create_task_id("deploy", json!({"target": "prod"}), ALICE)
        .await;
    let task = Client::new(b.addr)
        .wait_for_status(&id, ALICE, "input_required")
        .await;
    assert_eq!(task["statusMessage"], "Waiting for confirmation");
    let task_id = TaskId::from_str(&id).unwrap();

    // Parked (right after it asked): no worker holds it.
    let parked = async || {
        let job = queue
            .job(&task_id)
            .await
            .unwrap()
            .expect("the job is queued");
        (job.state == JobState::Waiting && job.locked_by.is_none()).then_some(())
    };
    let waiting = support::wait::poll(parked).await;
    assert!(waiting.is_some(), "{:?}", queue.job(&task_id).await);

    // A rolling deploy of every process: the worker, then each server, replaced by
    // a new process in turn. Nothing is running, so each stops at once.
    stop(&mut worker, "the worker");
    let _worker = cluster.worker("worker-2", 3_000);
    stop(&mut a, "server a");
    drained_without_failing(&a);
    let c = cluster.server();
    stop(&mut b, "server b");
    drained_without_failing(&b);
    let d = cluster.server();
    assert!(parked().await.is_some(), "{:?}", queue.job(&task_id).await);

    let task = Client::new(c.addr).get(&id, ALICE).await.ok().clone();
    assert_eq!(task["status"], "input_required", "{task}");
    assert!(task["inputRequests"]["confirm"].is_object(), "{task}");

    // Answered on one new node, followed on the other.
    let answer = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    let answered = std::time::Instant::now();
    Client::new(d.addr).update(&id, answer, ALICE).await.ok();
    let task = Client::new(c.addr).wait_for_end(&id, ALICE).await;
    eprintln!(
        "answer → completed, after the rollout: {} ms (poll interval 200 ms)",
        answered.elapsed().as_millis()
    );
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(result_text(&task), "Deployed to prod");
    finished(&queue, &task_id).await;
}

/// A first run paused (SIGSTOP) in its last step, past its 2 s lock; a second
/// worker takes the job over and runs it again; the first is resumed (SIGCONT)
/// `late` (after the second completed the task) or mid-way through the second run.
/// Either way the task completes once: its result and `lastUpdatedAt` never change
/// after the first completion, and exactly one worker logs a completion.
async fn duplicate_run(late: bool) {
    let Some(cluster) = Cluster::new() else {
        return;
    };
    let server = cluster.server();
    let client = Client::new(server.addr);
    let first = cluster.worker("worker-a", 2_000);
    let id = client
        .create_task_id("report", json!({"seconds": 4}), ALICE)
        .await;
    // The first run is in its last step, a one-second wait, when it is paused.
    wait_for_message(&client, &id, "3 of 4 s done").await;
    first.signal("STOP");
    let second = cluster.worker("worker-b", 2_000);
    wait_for_message(&client, &id, "Resumed after an interruption (attempt 2)").await;
    let completed = if late {
        let task = client.wait_for_status(&id, ALICE, "completed").await;
        assert_eq!(
            result_text(&task),
            "Report of 4 s written by worker-b (attempt 2)"
        );
        first.signal("CONT");
        task
    } else {
        wait_for_message(&client, &id, "1 of 4 s done").await;
        first.signal("CONT");
        client.wait_for_status(&id, ALICE, "completed").await
    };
    // The second of the two runs to finish, or to see the task end, changes nothing.
    let both_done = [
        "a job completed its task",
        "a job's task had already ended",
        "a job's lock was lost",
        "a job's task ended",
    ];
    let settled = |worker: &Proc| {
        let output = worker.output().join("\n");
        both_done.iter().any(|line| output.contains(line))
    };
    support::wait::poll(async || (settled(&first) && settled(&second)).then_some(()))
        .await
        .unwrap_or_else(|| {
            panic!(
                "both runs should have settled:\n--- a\n{}\n--- b\n{}",
                first.output().join("\n"),
                second.output().join("\n")
            )
        });
    let first_did = both_done
        .iter()
        .find(|line| first.output().join("\n").contains(*line));
    eprintln!(
        "duplicate run, resumed {}: the first run: {first_did:?}",
        if late { "late" } else { "mid-way" }
    );
    // Whatever the first run did on waking has reached the store by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let task = client.get(&id, ALICE).await.ok().clone();
    assert_eq!(task["status"], "completed");
    assert_eq!(
        task["result"], completed["result"],
        "the result never changed"
    );
    assert_eq!(task["lastUpdatedAt"], completed["lastUpdatedAt"]);
    let completions: usize = [&first, &second]
        .iter()
        .map(|worker| {
            worker
                .output()
                .iter()
                .filter(|line| line.contains("a job completed its task"))
                .count()
        })
        .sum();
    assert_eq!(completions, 1, "exactly one run completed the task");
    finished(&cluster.queue().await, &TaskId::from_str(&id).unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_run_finishing_after_the_other_does_not_complete_the_task_twice() {
    duplicate_run(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_run_racing_the_other_does_not_complete_the_task_twice() {
    duplicate_run(false).await;
}

/// A store, a layer's worker API and a queue on one scratch table, in this process.
struct Local {
    store: PostgresStore,
    queue: JobQueue,
    tasks: mcp_tasks::worker::Tasks,
    _drop: DropTable,
}

impl Local {
    async fn new() -> Option<Local> {
        let url = database_url()?;
        let table = scratch_table();
        let drop = DropTable::new(url.clone(), table.clone());
        let store = PostgresStore::connect(&url)
            .await
            .unwrap()
            .with_table(&table)
            .unwrap();
        store.migrate().await.unwrap();
        store.listen().await.unwrap();
        let queue = JobQueue::on(&store).with_max_attempts(2);
        queue.migrate().await.unwrap();
        let tasks = TasksLayer::builder(store.clone())
            .without_worker_leases()
            .without_janitor()
            .build()
            .unwrap()
            .tasks();
        Some(Local {
            store,
            queue,
            tasks,
            _drop: drop,
        })
    }

    /// A working task with its job queued.
    async fn task(&self, tool: &str) -> TaskId {
        let id = TaskId::random();
        let record = TaskRecord::new(id, None, Timestamp::now());
        self.store
            .create(record, CreateLimits::default())
            .await
            .unwrap();
        self.queue.enqueue(&id, tool, &json!({})).await.unwrap();
        id
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_keeps_failing_is_retried_then_fails_its_task_as_a_dead_letter() {
    let Some(local) = Local::new().await else {
        return;
    };
    let (runs, mut ran) = mpsc::unbounded_channel();
    let worker = Worker::new(local.queue.clone(), local.tasks.clone(), move |job| {
        let runs = runs.clone();
        async move {
            let _ = runs.send(job.attempt());
            Err(mcp_tasks::queue::JobError::retry("the warehouse is down"))
        }
    })
    .with_poll_interval(Duration::from_millis(20))
    .with_retry_backoff(Duration::from_millis(50), Duration::from_millis(50));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let id = local.task("report").await;
    let failed = support::wait::poll(async || {
        let task = local.tasks.status(&id).await.ok()?;
        task.status.is_terminal().then_some(task)
    })
    .await
    .expect("the task ends");
    assert_eq!(failed.status, TaskStatus::Failed);
    let error = failed.error.unwrap();
    assert_eq!(error.code, -32603);
    assert_eq!(
        error.data,
        Some(json!({"reason": "job_failed", "attempts": 2}))
    );
    assert!(
        error.message.contains("the warehouse is down"),
        "{}",
        error.message
    );
    assert_eq!(ran.recv().await, Some(1));
    assert_eq!(ran.recv().await, Some(2));
    assert!(ran.try_recv().is_err(), "no run after the last attempt");
    // The task fails first, then the job is kept as a dead letter.
    let job = support::wait::poll(async || {
        let job = local.queue.job(&id).await.unwrap().expect("kept");
        (job.state == JobState::Dead).then_some(job)
    })
    .await
    .expect("the job is a dead letter");
    assert_eq!(job.attempts, 2);
    assert_eq!(job.last_error.as_deref(), Some("the warehouse is down"));
    let _ = stop.send(());
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_stops_its_running_job_and_finishes_it() {
    let Some(local) = Local::new().await else {
        return;
    };
    let (started, mut running_job) = mpsc::unbounded_channel();
    let (dropped, mut job_dropped) = mpsc::unbounded_channel();
    let worker = Worker::new(local.queue.clone(), local.tasks.clone(), move |_job| {
        let started = started.clone();
        let dropped = dropped.clone();
        async move {
            let _guard = support::wait::SendOnDrop::new(dropped, ());
            let _ = started.send(());
            std::future::pending::<Result<Value, mcp_tasks::queue::JobError>>().await
        }
    })
    .with_poll_interval(Duration::from_millis(20));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let id = local.task("report").await;
    support::wait::recv("the job to start", &mut running_job).await;
    local
        .tasks
        .apply(&id, mcp_tasks::store::Transition::Cancel)
        .await
        .unwrap();
    support::wait::recv("the run to be dropped", &mut job_dropped).await;
    finished(&local.queue, &id).await;
    assert_eq!(
        local.tasks.status(&id).await.unwrap().status,
        TaskStatus::Cancelled
    );
    let _ = stop.send(());
    running.await.unwrap();
}
