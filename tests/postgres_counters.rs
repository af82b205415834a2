//! `PostgresStore`'s counter rows (`<table>_counts`) on a live database: the
//! janitor removes the rows of a principal whose last task it removed, keeps those
//! of a principal with tasks, and no count is lost to a create racing the sweep.
//!
//! `DATABASE_URL` names the database; without it the tests are skipped (outside CI).

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::sqlx;
use mcp_tasks::store::TaskStore;
use mcp_tasks::store::{CreateLimits, Janitor, Timestamp};
use mcp_tasks::{PostgresStore, Principal, TaskId, TaskRecord};
use support::stores::postgres::scratch;

/// The counter scope of a principal's cap, as the store writes it.
fn scope(owner: &str) -> Vec<u8> {
    let mut scope = vec![2];
    scope.extend_from_slice(owner.as_bytes());
    scope
}

/// How many counter rows `owner` has, and what they add up to.
async fn counters(store: &PostgresStore, owner: &str) -> (i64, i64) {
    let sql = format!(
        "SELECT count(*), COALESCE(sum(n), 0)::bigint FROM \"{}_counts\" WHERE scope = $1",
        store.table()
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(scope(owner))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// How many tasks of `owner` the table holds.
async fn rows_of(store: &PostgresStore, owner: &str) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM \"{}\" WHERE owner = $1",
        store.table()
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(owner.as_bytes())
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// The row cap's counters: how many rows, and their sum.
async fn table_counters(store: &PostgresStore) -> (i64, i64) {
    let sql = format!(
        "SELECT count(*), COALESCE(sum(n), 0)::bigint FROM \"{}_counts\" WHERE scope = '\\x00'::bytea",
        store.table()
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

async fn total_rows(store: &PostgresStore) -> i64 {
    let sql = format!("SELECT count(*) FROM \"{}\"", store.table());
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// A task of `owner`: with `expired`, made a minute ago with a TTL of 1 ms (the
/// store takes the caller's clock), so that the next sweep removes it; without,
/// live and with no TTL.
fn task(owner: &str, expired: bool) -> TaskRecord {
    let owner = Some(Principal::from(owner));
    if !expired {
        return TaskRecord::new(TaskId::random(), owner, Timestamp::now());
    }
    let a_minute_ago = Timestamp::from_millis(Timestamp::now().as_millis() - 60_000);
    let mut record = TaskRecord::new(TaskId::random(), owner, a_minute_ago);
    record.ttl_ms = Some(1);
    record
}

fn limits() -> CreateLimits {
    CreateLimits::new(Some(100_000), Some(1_000)).with_retention(Duration::from_secs(3600))
}

#[tokio::test]
async fn the_janitor_removes_the_counter_rows_of_a_principal_without_tasks() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let scratch = Arc::new(scratch);
    let store = scratch.store();
    for _ in 0..3 {
        store.create(task("gone", true), limits()).await.unwrap();
    }
    store.create(task("kept", true), limits()).await.unwrap();
    store.create(task("kept", false), limits()).await.unwrap();
    assert_eq!(counters(store, "gone").await.1, 3);
    assert_eq!(counters(store, "kept").await.1, 2);

    let janitor = Janitor::new(
        scratch.clone(),
        Duration::from_secs(60),
        Duration::from_secs(3600),
    );
    assert_eq!(janitor.sweep().await.unwrap(), 4);

    assert_eq!(
        counters(store, "gone").await,
        (0, 0),
        "no counter row is left for a principal without tasks"
    );
    let (rows, sum) = counters(store, "kept").await;
    assert!(rows >= 1, "a principal with tasks keeps its counter");
    assert_eq!(sum, 1);
    assert_eq!(rows_of(store, "kept").await, 1);
    assert_eq!(
        table_counters(store).await,
        (32, 1),
        "the table's own counters stay"
    );
    // The principal comes back: counted again from one.
    store.create(task("gone", false), limits()).await.unwrap();
    assert_eq!(counters(store, "gone").await.1, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_racing_the_sweep_of_their_principals_last_tasks_are_all_counted() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let scratch = Arc::new(scratch);
    let store = scratch.clone();
    let janitor = Janitor::new(
        store.clone(),
        Duration::from_secs(60),
        Duration::from_secs(3600),
    );
    let mut owners = Vec::new();
    for round in 0..40 {
        let owner = format!("p{round}");
        // Only expiring tasks: the sweep takes this principal's counters to zero
        // while the creates below run.
        for _ in 0..4 {
            store.create(task(&owner, true), limits()).await.unwrap();
        }
        let mut racing = tokio::task::JoinSet::new();
        for i in 0..6 {
            let (store, owner) = (store.clone(), owner.clone());
            // Half of them under a cap tight enough to take the exact path, which
            // locks every counter row of the owner, and with no row cap: the
            // counters are still taken in the order every writer takes them.
            let limits = match i % 2 {
                0 => limits(),
                _ => CreateLimits::new(None, Some(8)),
            }
            .with_retention(Duration::from_secs(3600));
            racing.spawn(async move { store.create(task(&owner, false), limits).await });
        }
        // The tight creates may prune some of the expired tasks first.
        assert!(janitor.sweep().await.expect("the sweep") <= 4);
        while let Some(created) = racing.join_next().await {
            if let Err(e) = created.unwrap() {
                panic!("every create succeeds: {e:?}");
            }
        }
        owners.push(owner);
    }
    let store = scratch.store();
    for owner in &owners {
        assert_eq!(rows_of(store, owner).await, 6, "{owner}");
        assert_eq!(
            counters(store, owner).await.1,
            6,
            "{owner}: every create is counted"
        );
    }
    assert_eq!(table_counters(store).await.1, total_rows(store).await);
}
