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

use mcp_tasks::error::Limit;
use mcp_tasks::error::StoreError;
use mcp_tasks::store::TaskStore;
use mcp_tasks::store::{CreateLimits, Scope, Timestamp};
use mcp_tasks::{MemoryStore, Principal, RedisStore, TaskId, TaskRecord};
use support::connect;
use support::logs::Logged;
use support::stores::redis::{
    connections_named, nodes, redis_url, scratch, scratch_on_store_clock, two_nodes, unique_prefix,
};
use support::wait::{self, within};

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

/// A fresh store deciding expiry by the server's `TIME`, as in production.
async fn fresh_store_on_store_clock() -> Arc<dyn TaskStore> {
    match scratch_on_store_clock().await {
        Some(store) => Arc::new(store),
        None => Arc::new(MemoryStore::new().with_clock(mcp_tasks::store::Clock::Store)),
    }
}

mod redis_store_clock {
    mcp_tasks::task_store_clock_tests!(super::fresh_store_on_store_clock());
}

mod redis_store_nodes {
    mcp_tasks::task_store_node_tests!(super::two_nodes());
}

/// `list` at scale: 10 000 tasks of 100 owners (created 64 at a time), one
/// owner's listed page by page.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_pages_one_owner_among_many() {
    let Some(store) = scratch().await else {
        return;
    };
    mcp_tasks::test_suite::list_pages_one_owner_among_many(store, 10_000, 100).await;
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
    // Stamped 10 s ago with a 1 ms TTL: Redis drops the key 1 ms after the create
    // (the native expiry is a duration, not the node's time).
    let long_ago = Timestamp::now().minus_ms(10_000);
    let mut gone = TaskRecord::new(TaskId::random(), None, long_ago);
    gone.ttl_ms = Some(1);
    let limits = CreateLimits::new(Some(1), None);
    a.create(gone.clone(), limits).await.unwrap();
    // Read at the record's own creation time, only the server's expiry hides it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while a
        .get(&gone.id, Scope::Any, long_ago)
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the key must expire natively on the server 1 ms after the create"
        );
        tokio::task::yield_now().await;
    }
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

/// A client of `url` and a connection manager on it, for stores built by hand.
async fn client_and_manager(
    url: &str,
) -> (
    mcp_tasks::redis::Client,
    mcp_tasks::redis::aio::ConnectionManager,
) {
    let client = mcp_tasks::redis::Client::open(url).unwrap();
    let conn = mcp_tasks::redis::aio::ConnectionManager::new(client.clone())
        .await
        .unwrap();
    (client, conn)
}

#[tokio::test]
async fn a_store_without_a_change_feed_client_does_not_subscribe() {
    let Some(url) = redis_url() else {
        return;
    };
    let (client, conn) = client_and_manager(&url).await;
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

/// `listen` opens the listener itself, before anything subscribes, and returns
/// once it reads the stream: the next change another node makes is heard. A second
/// `listen` reuses the running listener.
#[tokio::test]
async fn listen_returns_once_the_listener_reads_so_the_next_change_is_heard() {
    let Some(url) = redis_url() else {
        return;
    };
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let name = a.store().feed_connection_name();
    let (client, _) = client_and_manager(&url).await;
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    assert!(connections_named(&mut admin, &name).await.is_empty());
    within("a listens", a.store().listen()).await.unwrap();
    within("a listens again", a.store().listen()).await.unwrap();
    let open = connections_named(&mut admin, &name).await;
    assert_eq!(
        open.len(),
        1,
        "one listener connection after two listens: {open:?}"
    );
    let mut feed_a = a.subscribe().expect("a has a change feed");
    let task = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    b.create(task.clone(), CreateLimits::default())
        .await
        .unwrap();
    assert!(wait::changed(&mut feed_a, "b's create after a listened").await == task.id);
}

#[tokio::test]
async fn listen_without_a_client_to_listen_with_fails_and_says_how_to_give_one() {
    let Some(url) = redis_url() else {
        return;
    };
    let (_, conn) = client_and_manager(&url).await;
    let deaf = RedisStore::new(conn).with_prefix(unique_prefix());
    let refused = within("listen", deaf.listen()).await.unwrap_err();
    let text = connect::described(&refused);
    assert!(text.contains("with_change_feed"), "{text}");
}

#[tokio::test]
async fn listen_to_a_closed_port_fails_at_once_naming_the_server_but_not_the_password() {
    let Some(url) = redis_url() else {
        return;
    };
    let (_, conn) = client_and_manager(&url).await;
    connect::a_closed_port_fails_at_once(
        async |feed_url, _| {
            let feed = mcp_tasks::redis::Client::open(feed_url.as_str()).unwrap();
            RedisStore::new(conn.clone())
                .with_change_feed(feed)
                .listen()
                .await
        },
        |port| format!("redis://:hunter2-secret@127.0.0.1:{port}/0"),
        |port| format!("redis://:***@127.0.0.1:{port}/0"),
    )
    .await;
}

/// A listener whose server completes the handshake and never answers: `listen`
/// gives up at the connect timeout (5 s, on paused time) and says so.
#[tokio::test]
async fn listen_to_a_server_that_never_answers_fails_at_the_connect_timeout() {
    let Some(url) = redis_url() else {
        return;
    };
    let (_, conn) = client_and_manager(&url).await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let feed = mcp_tasks::redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let store = RedisStore::new(conn).with_change_feed(feed);
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    let timed_out = store.listen().await.unwrap_err();
    let took = started.elapsed();
    let limit = mcp_tasks::defaults::CONNECT_TIMEOUT;
    assert!(took >= limit && took < limit * 2, "took {took:?}");
    let text = connect::described(&timed_out);
    let expected = format!(
        "could not connect to redis://127.0.0.1:{port}/0 within the connect timeout of {} ms",
        limit.as_millis()
    );
    assert!(text.contains(&expected), "{text}");
}

/// A scratch store holding one task of alice's (with a TTL), whose hash was then
/// changed behind the store's back by `command <task key> args…`: the store, the
/// task's id and the time it was made. `None` without a server.
async fn alices_task_altered(
    command: &str,
    args: &[&str],
) -> Option<(support::stores::redis::Scratch, TaskId, Timestamp)> {
    let scratch = scratch().await?;
    let url = redis_url()?;
    let now = Timestamp::now();
    let mut record = TaskRecord::new(TaskId::random(), Some(Principal::from("alice")), now);
    record.ttl_ms = Some(3_600_000);
    let id = record.id;
    let store = scratch.store();
    store.create(record, CreateLimits::default()).await.unwrap();
    let (_, mut conn) = client_and_manager(&url).await;
    let key = format!("{}task:{id}", store.prefix());
    let _: () = mcp_tasks::redis::cmd(command)
        .arg(&key)
        .arg(args)
        .query_async(&mut conn)
        .await
        .unwrap();
    Some((scratch, id, now))
}

/// An owner-scoped read compares the owner on the server: a foreign record never
/// leaves it, so its (here unreadable) JSON is never decoded, and the read costs
/// what an unknown id costs. The owner's own read does decode it, and fails.
#[tokio::test]
async fn a_foreign_read_never_fetches_nor_decodes_the_record() {
    let Some((scratch, id, now)) = alices_task_altered("HSET", &["rec", "not a task"]).await else {
        return;
    };
    let alice = Principal::from("alice");
    support::stores::only_the_owner_decodes(scratch.store(), id, &alice, now).await;
}

/// Records written before the `own` field existed are still checked against the
/// owner on the server (through the owners hash).
#[tokio::test]
async fn records_without_an_owner_field_are_still_owner_checked() {
    let Some((scratch, id, now)) = alices_task_altered("HDEL", &["own"]).await else {
        return;
    };
    let store = scratch.store();
    let alice = Principal::from("alice");
    let mine = Scope::Owner(Some(&alice));
    assert!(store.get(&id, mine, now).await.unwrap().is_some());
    assert_eq!(store.visible(&[id], mine, now).await.unwrap(), vec![id]);
    assert!(
        store
            .get(&id, Scope::Owner(None), now)
            .await
            .unwrap()
            .is_none()
    );
    let bob = Principal::from("bob");
    assert!(
        store
            .get(&id, Scope::Owner(Some(&bob)), now)
            .await
            .unwrap()
            .is_none()
    );
}

/// The per-owner cap is exact: an owner at its cap prunes its own expired records,
/// however many older expired records other owners left behind.
#[tokio::test]
async fn an_owner_at_its_cap_prunes_its_own_expired_records_first() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let store = scratch.store();
    let t0 = Timestamp::now();
    let bob = Principal::from("bob");
    let alice = Principal::from("alice");
    let owned = |owner: &Principal, ttl| {
        let mut record = TaskRecord::new(TaskId::random(), Some(owner.clone()), t0);
        record.ttl_ms = Some(ttl);
        record
    };
    // More expired records of bob, all older than alice's, than one prune batch.
    for _ in 0..300 {
        store
            .create(owned(&bob, 1), CreateLimits::default())
            .await
            .unwrap();
    }
    let two = CreateLimits::new(None, Some(2));
    for _ in 0..2 {
        store.create(owned(&alice, 10), two).await.unwrap();
    }
    let mut next = TaskRecord::new(TaskId::random(), Some(alice.clone()), t0.plus_ms(9));
    assert!(matches!(
        store.create(next.clone(), two).await,
        Err(StoreError::LimitReached(Limit::PerOwner))
    ));
    next.created_at = t0.plus_ms(10);
    store.create(next, two).await.unwrap();
    // Retired records past the retention likewise, from the owner's own index.
    let carol = Principal::from("carol");
    let one = CreateLimits::new(None, Some(1)).with_retention(Duration::from_millis(5));
    let first = TaskRecord::new(TaskId::random(), Some(carol.clone()), t0);
    let id = first.id;
    store.create(first, one).await.unwrap();
    let cancel = mcp_tasks::store::Transition::Cancel;
    store.update(&id, Scope::Any, &cancel, t0).await.unwrap();
    let again = |at| TaskRecord::new(TaskId::random(), Some(carol.clone()), at);
    assert!(matches!(
        store.create(again(t0.plus_ms(4)), one).await,
        Err(StoreError::LimitReached(Limit::PerOwner))
    ));
    store.create(again(t0.plus_ms(5)), one).await.unwrap();
    assert!(
        store.get(&id, Scope::Any, t0).await.unwrap().is_none(),
        "the retired record was pruned"
    );
    // Only bob's expired records are left to sweep: the pruned ones left no entries.
    let swept = store
        .cleanup(t0.plus_ms(1_000_000), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(swept, 300);
}

#[tokio::test]
async fn a_closed_port_fails_at_once_naming_the_server_but_not_the_password() {
    connect::a_closed_port_fails_at_once(
        async |url, limit| RedisStore::connect_with_timeout(url.as_str(), limit).await,
        |port| format!("redis://:hunter2-secret@127.0.0.1:{port}/0"),
        |port| format!("redis://:***@127.0.0.1:{port}/0"),
    )
    .await;
}

#[tokio::test]
async fn a_server_that_never_answers_fails_at_the_connect_timeout() {
    connect::a_silent_server_fails_at_the_connect_timeout(
        async |url, limit| RedisStore::connect_with_timeout(url.as_str(), limit).await,
        |port| format!("redis://127.0.0.1:{port}"),
        |port| format!("redis://127.0.0.1:{port}/0"),
    )
    .await;
}

#[tokio::test]
async fn a_store_says_once_which_server_and_prefix_it_keeps_tasks_under() {
    let Some(url) = support::stores::redis::redis_url() else {
        return;
    };
    let (logged, _logs) = Logged::capture(tracing::Level::INFO);
    let prefix = unique_prefix();
    let store = RedisStore::connect(url.as_str())
        .await
        .unwrap()
        .with_prefix(&prefix);
    // Two layers on one store: said once.
    let _a = mcp_tasks::TasksLayer::builder(store.clone())
        .without_janitor()
        .build()
        .unwrap();
    let _b = mcp_tasks::TasksLayer::builder(store)
        .without_janitor()
        .build()
        .unwrap();
    let said = logged.lines_with("Redis store");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains(&format!("prefix={prefix}")), "{}", said[0]);
    assert!(said[0].contains("server=redis://"), "{}", said[0]);
}
