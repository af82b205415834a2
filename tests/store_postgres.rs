//! `PostgresStore` against a real database: the public contract suite, its
//! multi-node rules on two store instances over one table, and what is particular
//! to PostgreSQL (table names, the listener's reconnect).
//!
//! `DATABASE_URL` names the database (read at run time). Without it the tests are
//! skipped with a message, except under CI (`CI` set), where they fail. Every test
//! works on a table of its own, dropped at the end, so the tests run in parallel.

#[path = "support/scratch_store.rs"]
mod scratch_store;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::sqlx::postgres::PgPoolOptions;
use mcp_tasks::sqlx::{self, AssertSqlSafe, Connection, Executor};
use mcp_tasks::store::{ChangeFeed, CreateLimits, FeedEvent, Timestamp};
use mcp_tasks::{ConfigError, MemoryStore, PostgresStore, TaskId, TaskRecord, TaskStore};

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

/// A `PostgresStore` on a fresh table that goes away with the last instance on it.
type Scratch = scratch_store::Scratch<PostgresStore, DropTable>;

/// A fresh store for one rule of the suite. Without a database (outside CI) there is
/// nothing to test: the rule then runs against `MemoryStore`, and says so.
async fn fresh_store() -> Arc<dyn TaskStore> {
    match database_url() {
        Some(url) => {
            let table = scratch_table();
            let store = node(&url, &table).await;
            Arc::new(Scratch::new(store, Arc::new(DropTable { url, table })))
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

/// Two store instances ("nodes") on one fresh table, both listening; `None` without
/// a database (outside CI).
async fn two_nodes() -> Option<(Scratch, Scratch)> {
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
    let table = Arc::new(DropTable { url, table });
    Some((Scratch::new(a, table.clone()), Scratch::new(b, table)))
}

mod nodes {
    mcp_tasks::task_store_node_tests!(super::two_nodes());
}

async fn next(feed: &mut ChangeFeed, what: &str) -> TaskId {
    match tokio::time::timeout(PATIENCE, feed.recv()).await {
        Ok(Some(FeedEvent::Changed(id))) => id,
        Ok(Some(FeedEvent::Missed(n))) => panic!("{what}: the feed skipped {n} ids"),
        Ok(Some(other)) => panic!("{what}: unexpected {other:?}"),
        Ok(None) => panic!("{what}: the feed closed"),
        Err(_) => panic!("{what}: nothing announced within {PATIENCE:?}"),
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
            matches!(
                store.clone().with_table(bad),
                Err(ConfigError::InvalidName(_))
            ),
            "{bad:?} must be refused"
        );
    }
    let renamed = store.with_table("Tasks_2").unwrap();
    assert_eq!(renamed.table(), "Tasks_2");
    assert_eq!(renamed.channel(), "Tasks_2_changes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_comes_back_after_its_connection_is_killed() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let mut feed_a = a.subscribe().expect("a has a change feed");
    let channel = a.store.channel().to_owned();
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
    let before = listening(b.store.pool().clone(), channel.clone()).await;
    assert_eq!(before.len(), 2, "a and b each listen on one session");
    for pid in &before {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(b.store.pool())
            .await
            .unwrap();
    }
    // Wait until both listeners listen again, on new sessions.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let now = listening(b.store.pool().clone(), channel.clone()).await;
        if now.len() == 2 && now.iter().all(|pid| !before.contains(pid)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listeners did not reconnect within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::timeout(PATIENCE, a.store.listen())
        .await
        .expect("a reports its listener ready")
        .unwrap();
    let task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    b.create(task.clone(), CreateLimits::default())
        .await
        .unwrap();
    assert!(next(&mut feed_a, "b's create after the reconnect").await == task.id);
}
