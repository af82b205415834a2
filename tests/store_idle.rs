//! A store connection closed while idle, as a NAT, a load balancer or a proxy
//! with an idle timeout closes it (#33): behind a TCP proxy the test owns that
//! closes every connection idle for 300 ms, the first call after each quiet spell
//! is answered, reads, creates and compare-and-set writes alike, on PostgreSQL and
//! Redis.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::TaskRecord;
use mcp_tasks::store::{CreateLimits, Scope, TaskStore, Timestamp, Transition};
use support::proxy::{Proxy, target, via};

/// How long a connection may stay idle before the proxy closes it.
const IDLE: Duration = Duration::from_millis(300);

/// One task stored, then after each idle close one call, which must succeed.
/// `connections` is how many connections the store keeps through the proxy.
async fn every_first_call_after_an_idle_close_succeeds(
    store: &dyn TaskStore,
    proxy: &Proxy,
    connections: u64,
    what: &str,
) {
    let now = Timestamp::now();
    let record = TaskRecord::new(mcp_tasks::TaskId::random(), None, now);
    let id = record.id;
    store
        .create(record, CreateLimits::default())
        .await
        .unwrap_or_else(|e| panic!("{what}: create: {e}"));
    proxy.close_idle_after(IDLE);
    let calls = [
        "create",
        "get",
        "update",
        "get_many",
        "visible",
        "list",
        "update again",
        "cleanup",
    ];
    for (round, call) in (1u64..).zip(calls) {
        // The quiet spell: every connection of the store has been closed.
        proxy.idle_closed(round * connections).await;
        let now = Timestamp::now();
        let answered = match call {
            "create" => {
                let another = TaskRecord::new(mcp_tasks::TaskId::random(), None, now);
                store.create(another, CreateLimits::default()).await
            }
            "get" => store.get(&id, Scope::Any, now).await.map(|found| {
                assert!(found.is_some(), "{what}: the task is read");
            }),
            "update" | "update again" => {
                let progress = Transition::Progress {
                    message: call.to_owned(),
                };
                store
                    .update(&id, Scope::Any, &progress, now)
                    .await
                    .map(|updated| {
                        let updated = updated.expect("the task is there");
                        assert!(updated.outcome.is_ok(), "{what}: {:?}", updated.outcome);
                        assert_eq!(updated.record.status_message.as_deref(), Some(call));
                    })
            }
            "get_many" => store
                .get_many(&[id], Scope::Any, now)
                .await
                .map(|found| assert_eq!(found.len(), 1)),
            "visible" => store
                .visible(&[id], Scope::Owner(None), now)
                .await
                .map(|found| assert_eq!(found, vec![id])),
            "list" => store
                .list(None, None, 10, now)
                .await
                .map(|page| assert_eq!(page.records.len(), 2)),
            _ => store
                .cleanup(now, Duration::from_secs(3600))
                .await
                .map(|removed| assert_eq!(removed, 0)),
        };
        if let Err(e) = answered {
            panic!("{what}: the first {call} after an idle close failed: {e:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_the_first_call_after_an_idle_close_succeeds() {
    let Some(url) = support::stores::redis::redis_url() else {
        return;
    };
    let proxy = Proxy::start(target(&url)).await;
    // One store connection through the proxy: no listener, no leases.
    let store = support::stores::redis::nodes_at(&url, &[via(&url, proxy.addr)])
        .await
        .pop()
        .unwrap();
    every_first_call_after_an_idle_close_succeeds(&store, &proxy, 1, "redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_first_call_after_an_idle_close_succeeds() {
    use mcp_tasks::PostgresStore;
    use mcp_tasks::sqlx::postgres::PgPoolOptions;
    use mcp_tasks::store::Clock;
    use mcp_tasks::test_suite::Intercept;
    use support::stores::postgres::{DropTable, database_url, scratch_table};

    let Some(url) = database_url() else {
        return;
    };
    let table = scratch_table();
    let proxy = Proxy::start(target(&url)).await;
    // One connection, handed out unchecked, as a pool of one's own may be set up.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .test_before_acquire(false)
        .connect(&via(&url, proxy.addr))
        .await
        .expect("connect through the proxy");
    let store = PostgresStore::new(pool)
        .with_table(&table)
        .expect("a valid table name")
        .with_clock(Clock::Caller);
    store.migrate().await.expect("migrate");
    let store = Intercept::new(store, Arc::new(DropTable::new(url.clone(), table)));
    every_first_call_after_an_idle_close_succeeds(&store, &proxy, 1, "postgres").await;
}
