//! `PostgresStore` against a real database: the public contract suite, and two store
//! instances on one table standing in for two nodes.
//!
//! `DATABASE_URL` names the database (read at run time). Without it the tests are
//! skipped with a message, except under CI (`CI` set), where they fail. Every test
//! works on a table of its own, dropped at the end, so the tests run in parallel.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks::sqlx::postgres::PgPoolOptions;
use mcp_tasks::sqlx::{self, AssertSqlSafe, Connection, Executor};
use mcp_tasks::{
    Applied, BoxFuture, ChangeFeed, CreateLimits, InputRequest, InputRequests, MemoryStore,
    PostgresStore, Scope, StoreError, TaskId, TaskRecord, TaskStatus, TaskStore, TasksLayer,
    Timestamp, Transition, Updated,
};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

/// How long any one expected event may take.
const PATIENCE: Duration = Duration::from_secs(10);

/// The database URL, or `None` (after saying so) when the tests should be skipped.
fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "DATABASE_URL is not set: CI must provide a PostgreSQL database for the PostgresStore \
             tests, e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/test"
        ),
        _ => {
            eprintln!(
                "DATABASE_URL is not set: skipping the PostgresStore tests \
                 (set it, e.g. to postgres://postgres@127.0.0.1:5432/test, to run them)"
            );
            None
        }
    }
}

/// A table name no other test uses.
fn scratch_table() -> String {
    let bytes = TaskId::random();
    let suffix: String = bytes.as_bytes()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("mcp_tasks_t_{suffix}")
}

/// A store instance ("node") on `table`, with a small pool of its own, migrated.
async fn node(url: &str, table: &str) -> PostgresStore {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(PATIENCE)
        .connect(url)
        .await
        .expect("connect to DATABASE_URL");
    let store = PostgresStore::new(pool)
        .with_table(table)
        .expect("a valid table name");
    store.migrate().await.expect("migrate");
    store
}

/// Drops its table when dropped, on a connection of its own (the test's runtime may
/// be shutting down).
#[derive(Debug)]
struct DropTable {
    url: String,
    table: String,
}

impl Drop for DropTable {
    fn drop(&mut self) {
        let url = self.url.clone();
        let statement = format!(
            "SET lock_timeout = '5s'; DROP TABLE IF EXISTS \"{}\"",
            self.table
        );
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the cleanup");
            runtime.block_on(async move {
                let mut connection = sqlx::PgConnection::connect(&url).await?;
                connection.execute(AssertSqlSafe(statement)).await?;
                connection.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop the scratch table {}", self.table);
        }
    }
}

/// A `PostgresStore` on a fresh table that goes away with it.
#[derive(Debug)]
struct Scratch {
    store: PostgresStore,
    _table: DropTable,
}

impl TaskStore for Scratch {
    fn create<'a>(
        &'a self,
        record: TaskRecord,
        limits: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.store.create(record, limits)
    }

    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        self.store.get(id, scope, now)
    }

    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        transition: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        self.store.update(id, scope, transition, now)
    }

    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        retention: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        self.store.cleanup(now, retention)
    }

    fn subscribe(&self) -> Option<ChangeFeed> {
        self.store.subscribe()
    }
}

/// A fresh store for one rule of the suite. Without a database (outside CI) there is
/// nothing to test: the rule then runs against `MemoryStore`, and says so.
async fn fresh_store() -> Arc<dyn TaskStore> {
    match database_url() {
        Some(url) => {
            let table = scratch_table();
            let store = node(&url, &table).await;
            Arc::new(Scratch {
                store,
                _table: DropTable { url, table },
            })
        }
        None => {
            eprintln!("this rule ran against MemoryStore, not PostgresStore");
            Arc::new(MemoryStore::new())
        }
    }
}

mod contract {
    mcp_tasks::task_store_tests!(super::fresh_store());
}

/// Two store instances on one table, both listening.
struct TwoNodes {
    a: PostgresStore,
    b: PostgresStore,
    _table: DropTable,
}

impl TwoNodes {
    async fn start() -> Option<Self> {
        let url = database_url()?;
        let table = scratch_table();
        // Both nodes migrate at once: the second run must be a harmless no-op.
        let (a, b) = tokio::join!(node(&url, &table), node(&url, &table));
        for store in [&a, &b] {
            tokio::time::timeout(PATIENCE, store.listen())
                .await
                .expect("the listener starts in time")
                .expect("the listener starts");
        }
        Some(TwoNodes {
            a,
            b,
            _table: DropTable { url, table },
        })
    }
}

async fn next(feed: &mut ChangeFeed, what: &str) -> TaskId {
    match tokio::time::timeout(PATIENCE, feed.recv()).await {
        Ok(Ok(id)) => id,
        Ok(Err(RecvError::Lagged(n))) => panic!("{what}: the feed skipped {n} ids"),
        Ok(Err(RecvError::Closed)) => panic!("{what}: the feed closed"),
        Err(_) => panic!("{what}: nothing announced within {PATIENCE:?}"),
    }
}

fn fresh(owner: Option<&str>) -> TaskRecord {
    let mut record = TaskRecord::new(
        TaskId::random(),
        owner.map(mcp_tasks::Principal::from),
        Timestamp::now(),
    );
    record.ttl_ms = Some(3_600_000);
    record
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_announced_to_the_other_node_only() {
    let Some(nodes) = TwoNodes::start().await else {
        return;
    };
    let (a, b) = (&nodes.a, &nodes.b);
    let mut feed_a = a.subscribe().expect("a has a change feed");
    let mut feed_b = b.subscribe().expect("b has a change feed");
    let now = Timestamp::now();

    let x = fresh(None);
    b.create(x.clone(), CreateLimits::default()).await.unwrap();
    assert!(next(&mut feed_a, "b's create").await == x.id);

    let progress = Transition::Progress {
        message: "half way".to_owned(),
    };
    let updated = b
        .update(&x.id, Scope::Any, &progress, now.plus_ms(1))
        .await
        .unwrap()
        .unwrap();
    assert!(updated.changed());
    assert!(next(&mut feed_a, "b's update").await == x.id);

    // An ignored answer writes nothing, so announces nothing.
    let stray = Transition::Answer {
        responses: [("nobody-asked".to_owned(), json!({"action": "accept"}))]
            .into_iter()
            .collect(),
    };
    let ignored = b
        .update(&x.id, Scope::Any, &stray, now.plus_ms(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ignored.outcome, Ok(Applied::Unchanged));

    let y = fresh(Some("alice"));
    a.create(y.clone(), CreateLimits::default()).await.unwrap();
    // b's feed starts with a's write: b's own writes of x never reached it.
    assert!(next(&mut feed_b, "a's create").await == y.id);

    let z = fresh(None);
    b.create(z.clone(), CreateLimits::default()).await.unwrap();
    // Notifications arrive in commit order: had a's feed carried the ignored answer
    // or a's own create of y, they would come before z.
    assert!(next(&mut feed_a, "b's second create").await == z.id);

    let w = fresh(None);
    a.create(w.clone(), CreateLimits::default()).await.unwrap();
    assert!(next(&mut feed_b, "a's second create").await == w.id);
    assert!(feed_a.is_empty(), "a announced its own write to itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_through_one_node_wakes_the_worker_on_the_other() {
    let Some(nodes) = TwoNodes::start().await else {
        return;
    };
    let seen: Arc<Mutex<Vec<TaskStatus>>> = Arc::default();
    let sink = seen.clone();
    let layer = TasksLayer::builder(nodes.a.clone())
        .without_janitor()
        .with_notifier(Some(Arc::new(move |task: &TaskRecord| {
            sink.lock().unwrap().push(task.status);
        })))
        .build()
        .unwrap();
    let tasks = layer.handle();

    let task = fresh(None);
    let id = task.id;
    nodes.a.create(task, CreateLimits::default()).await.unwrap();
    let ask = InputRequests::new().with("go", InputRequest::confirm("Go?", "ok"));
    tasks.require_input(&id, ask).await.unwrap();
    let waiter = tokio::spawn({
        let tasks = tasks.clone();
        async move { tasks.wait_for_input(&id).await }
    });
    tokio::task::yield_now().await;

    // The client's tasks/update lands on node b.
    let answer = Transition::Answer {
        responses: [("go".to_owned(), json!({"action": "accept"}))]
            .into_iter()
            .collect(),
    };
    let answered = nodes
        .b
        .update(&id, Scope::Owner(None), &answer, Timestamp::now())
        .await
        .unwrap()
        .expect("b finds the task");
    assert!(answered.changed());
    let answers = tokio::time::timeout(PATIENCE, waiter)
        .await
        .expect("the worker on a wakes on the answer given through b")
        .unwrap()
        .unwrap();
    assert_eq!(answers["go"]["action"], "accept");

    // A cancel through b reaches a's notifier too.
    let cancelled = nodes
        .b
        .update(
            &id,
            Scope::Owner(None),
            &Transition::Cancel,
            Timestamp::now(),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(cancelled.changed());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !seen.lock().unwrap().contains(&TaskStatus::Cancelled) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cancel through b never reached a's notifier"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(tasks.is_cancelled(&id).await);
    // a's own write (input_required) came once, locally; b's two through the feed.
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        &[
            TaskStatus::InputRequired,
            TaskStatus::Working,
            TaskStatus::Cancelled
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_on_two_nodes_race_and_one_terminal_write_wins() {
    let Some(nodes) = TwoNodes::start().await else {
        return;
    };
    let nodes = Arc::new(nodes);
    for round in 0..4 {
        let task = fresh(Some("alice"));
        let id = task.id;
        nodes.a.create(task, CreateLimits::default()).await.unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(48));
        let writers: Vec<_> = (0..48usize)
            .map(|i| {
                let nodes = nodes.clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    let store = if i % 2 == 0 { &nodes.a } else { &nodes.b };
                    let transition = match i % 3 {
                        0 => Transition::Cancel,
                        1 => Transition::Complete {
                            result: json!({"content": [], "writer": i}),
                            message: None,
                        },
                        _ => Transition::Progress {
                            message: format!("writer {i}"),
                        },
                    };
                    barrier.wait().await;
                    let now = Timestamp::now();
                    for _ in 0..1_000 {
                        match store.update(&id, Scope::Any, &transition, now).await {
                            Err(StoreError::Contention) => tokio::task::yield_now().await,
                            other => return (i, transition, other),
                        }
                    }
                    panic!("writer {i} never got past contention");
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut changes = 0;
        for writer in writers {
            let (i, transition, result) = writer.await.unwrap();
            let updated = result
                .unwrap_or_else(|e| panic!("round {round}: writer {i} failed: {e}"))
                .unwrap_or_else(|| panic!("round {round}: writer {i} did not find the task"));
            if updated.changed() {
                changes += 1;
                if !matches!(transition, Transition::Progress { .. }) {
                    winners.push((i, transition));
                }
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one terminal write must win across both nodes"
        );
        let (winner, winning) = &winners[0];
        let seen_by_a = nodes
            .a
            .get(&id, Scope::Any, Timestamp::now())
            .await
            .unwrap()
            .unwrap();
        let seen_by_b = nodes
            .b
            .get(&id, Scope::Owner(Some(&"alice".into())), Timestamp::now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            seen_by_a, seen_by_b,
            "round {round}: both nodes read one record"
        );
        match winning {
            Transition::Cancel => assert_eq!(seen_by_a.status, TaskStatus::Cancelled),
            _ => {
                assert_eq!(seen_by_a.status, TaskStatus::Completed);
                assert_eq!(seen_by_a.result.as_ref().unwrap()["writer"], *winner);
            }
        }
        assert_eq!(
            seen_by_a.revision, changes,
            "round {round}: the revision counts every applied change"
        );
    }
}

#[tokio::test]
async fn invalid_table_names_are_refused_before_any_query() {
    // A lazy pool never connects unless used: no database needed.
    let pool = PgPoolOptions::new()
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let store = PostgresStore::new(pool);
    assert_eq!(store.table(), PostgresStore::DEFAULT_TABLE);
    assert_eq!(store.channel(), "mcp_tasks_changes");
    for bad in [
        "",
        "x; DROP TABLE y",
        "public.tasks",
        "\"quoted\"",
        "9lives",
    ] {
        assert!(
            matches!(store.clone().with_table(bad), Err(StoreError::Backend(_))),
            "{bad:?} must be refused"
        );
    }
    let renamed = store.with_table("Tasks_2").unwrap();
    assert_eq!(renamed.table(), "Tasks_2");
    assert_eq!(renamed.channel(), "Tasks_2_changes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_comes_back_after_its_connection_is_killed() {
    let Some(nodes) = TwoNodes::start().await else {
        return;
    };
    let mut feed_a = nodes.a.subscribe().expect("a has a change feed");
    let channel = nodes.a.channel().to_owned();
    // Two listening sessions on the channel: a's and b's. Kill them both.
    let listening = |pool: mcp_tasks::sqlx::PgPool, channel: String| async move {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_activity WHERE state = 'idle' AND query LIKE 'LISTEN%' AND position($1 in query) > 0",
        )
        .bind(channel)
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let before = listening(nodes.b.pool().clone(), channel.clone()).await;
    assert_eq!(before.len(), 2, "a and b each listen on one session");
    for pid in &before {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(nodes.b.pool())
            .await
            .unwrap();
    }
    // Wait until both listeners listen again, on new sessions.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let now = listening(nodes.b.pool().clone(), channel.clone()).await;
        if now.len() == 2 && now.iter().all(|pid| !before.contains(pid)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listeners did not reconnect within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::timeout(PATIENCE, nodes.a.listen())
        .await
        .expect("a reports its listener ready")
        .unwrap();
    let task = fresh(None);
    nodes
        .b
        .create(task.clone(), CreateLimits::default())
        .await
        .unwrap();
    assert!(next(&mut feed_a, "b's create after the reconnect").await == task.id);
}
