//! `RedisStore` against a live server: the public contract suite, its multi-node
//! rules on store instances sharing a prefix as nodes, and what is particular to
//! Redis (native expiry, a store without a change feed).
//!
//! The server comes from `REDIS_URL` (e.g. `redis://127.0.0.1:6379`). Without it the
//! tests fail when `CI` is set and are skipped otherwise. Every store gets a random
//! key prefix, so the tests run in parallel on one server; their keys are deleted
//! when the store is dropped.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::store::{CreateLimits, Limit, Scope, Timestamp};
use mcp_tasks::{MemoryStore, RedisStore, StoreError, TaskId, TaskRecord, TaskStore};
use support::stores::redis::{nodes, redis_url, scratch, two_nodes, unique_prefix};

/// A fresh, empty store for one rule of the suite. Without `REDIS_URL` (outside CI)
/// the rule runs on a `MemoryStore` instead, so the suite still compiles and runs.
async fn fresh_store() -> Arc<dyn TaskStore> {
    match scratch().await {
        Some(store) => Arc::new(store),
        None => Arc::new(MemoryStore::new()),
    }
}

mod redis_store_contract {
    mcp_tasks::task_store_tests!(super::fresh_store());
}

mod redis_store_nodes {
    mcp_tasks::task_store_node_tests!(super::two_nodes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_through_four_nodes_are_never_lost() {
    let Some(nodes) = nodes(4).await else {
        return;
    };
    mcp_tasks::test_suite::nodes_concurrent_updates_never_lost(nodes).await;
}

#[tokio::test]
async fn records_dropped_by_native_expiry_are_still_counted_and_freed() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    // Created 10 s ago with a 1 ms TTL: Redis drops the key at once.
    let long_ago = Timestamp::now().minus_ms(10_000);
    let mut gone = TaskRecord::new(TaskId::random(), None, long_ago);
    gone.ttl_ms = Some(1);
    let limits = CreateLimits::new(Some(1), None);
    a.create(gone.clone(), limits).await.unwrap();
    assert!(
        a.get(&gone.id, Scope::Any, long_ago)
            .await
            .unwrap()
            .is_none(),
        "the key expired natively on the server"
    );
    // A create at the old time still finds the row taken...
    let mut twin_time = TaskRecord::new(TaskId::random(), None, long_ago);
    twin_time.ttl_ms = Some(60_000);
    assert!(matches!(
        b.create(twin_time, limits).await,
        Err(StoreError::LimitReached(Limit::Rows))
    ));
    // ...and cleanup counts the record Redis already dropped, freeing its row.
    assert_eq!(
        b.cleanup(Timestamp::now(), Duration::ZERO).await.unwrap(),
        1
    );
    assert_eq!(
        a.cleanup(Timestamp::now(), Duration::ZERO).await.unwrap(),
        0
    );
    let fresh = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    a.create(fresh, limits).await.unwrap();
}

#[tokio::test]
async fn a_full_store_prunes_expired_records_on_create() {
    let Some((a, _b)) = two_nodes().await else {
        return;
    };
    let now = Timestamp::now();
    let mut short = TaskRecord::new(TaskId::random(), None, now);
    short.ttl_ms = Some(1_000);
    let limits = CreateLimits::new(Some(1), Some(1));
    a.create(short.clone(), limits).await.unwrap();
    let later = TaskRecord::new(TaskId::random(), None, now.plus_ms(1_000));
    a.create(later.clone(), limits).await.unwrap();
    assert!(
        a.get(&later.id, Scope::Any, now.plus_ms(1_000))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        a.get(&short.id, Scope::Any, now).await.unwrap().is_none(),
        "the expired record made room and is gone"
    );
    assert_eq!(
        a.cleanup(now.plus_ms(2_000), Duration::ZERO).await.unwrap(),
        0,
        "nothing is left for cleanup"
    );
}

#[tokio::test]
async fn a_store_without_a_change_feed_client_does_not_subscribe() {
    let Some(url) = redis_url() else {
        return;
    };
    let client = mcp_tasks::redis::Client::open(url.as_str()).unwrap();
    let conn = mcp_tasks::redis::aio::ConnectionManager::new(client.clone())
        .await
        .unwrap();
    let plain = RedisStore::new(conn.clone()).with_prefix(unique_prefix());
    assert!(plain.subscribe().is_none());
    assert_eq!(RedisStore::DEFAULT_PREFIX, "mcp-tasks:");
    let listening = RedisStore::new(conn)
        .with_change_feed(client)
        .with_prefix("p:");
    assert_eq!(listening.prefix(), "p:");
    assert!(listening.subscribe().is_some());
    assert!(!format!("{listening:?}").is_empty());
}
