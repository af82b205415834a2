//! `RedisStore` against a live server: the public contract suite, and two store
//! instances sharing a prefix as two nodes.
//!
//! The server comes from `REDIS_URL` (e.g. `redis://127.0.0.1:6379`). Without it the
//! tests fail when `CI` is set and are skipped otherwise. Every store gets a random
//! key prefix, so the tests run in parallel on one server; their keys are deleted
//! when the store is dropped.

use std::sync::Arc;
use std::time::Duration;

use mcp_tasks::{
    BoxFuture, ChangeFeed, CreateLimits, InputRequest, InputRequests, MemoryStore, RedisStore,
    Scope, StoreError, TaskId, TaskRecord, TaskStatus, TaskStore, TasksLayer, Timestamp,
    Transition, Updated,
};
use serde_json::json;
use tokio::sync::{Barrier, broadcast};

const DEADLINE: Duration = Duration::from_secs(10);

/// The server to test against; `None` (after saying so) when the tests should be
/// skipped.
fn redis_url() -> Option<String> {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "REDIS_URL is not set: CI must start a Redis server and set REDIS_URL (e.g. redis://127.0.0.1:6379)"
        ),
        _ => {
            eprintln!(
                "REDIS_URL is not set: skipping the RedisStore tests (set it, e.g. to redis://127.0.0.1:6379, to run them)"
            );
            None
        }
    }
}

fn unique_prefix() -> String {
    let id = TaskId::random();
    let hex: String = id.as_bytes()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("mcp-tasks-test:{hex}:")
}

/// A `RedisStore` under a prefix of its own, whose keys are deleted on drop.
#[derive(Debug, Clone)]
struct TestStore {
    store: RedisStore,
    _keys: Arc<KeyJanitor>,
}

#[derive(Debug)]
struct KeyJanitor {
    url: String,
    prefix: String,
}

impl Drop for KeyJanitor {
    fn drop(&mut self) {
        // Best effort, synchronous (Drop cannot await): the prefix is random, so
        // leftovers never disturb another test.
        let Ok(client) = mcp_tasks::redis::Client::open(self.url.as_str()) else {
            return;
        };
        let Ok(mut conn) = client.get_connection() else {
            return;
        };
        let pattern = format!("{}*", self.prefix);
        let mut cursor: u64 = 0;
        loop {
            let Ok((next, keys)): Result<(u64, Vec<String>), _> = mcp_tasks::redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query(&mut conn)
            else {
                return;
            };
            if !keys.is_empty() {
                let _: Result<u64, _> = mcp_tasks::redis::cmd("DEL").arg(&keys).query(&mut conn);
            }
            if next == 0 {
                return;
            }
            cursor = next;
        }
    }
}

async fn node(url: &str, prefix: &str, keys: &Arc<KeyJanitor>) -> TestStore {
    let store = RedisStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to REDIS_URL: {e}"))
        .with_prefix(prefix);
    TestStore {
        store,
        _keys: keys.clone(),
    }
}

/// `n` nodes (separate connections and node ids) sharing one fresh prefix.
async fn nodes(n: usize) -> Option<Vec<TestStore>> {
    let url = redis_url()?;
    let prefix = unique_prefix();
    let keys = Arc::new(KeyJanitor {
        url: url.clone(),
        prefix: prefix.clone(),
    });
    let mut nodes = Vec::with_capacity(n);
    for _ in 0..n {
        nodes.push(node(&url, &prefix, &keys).await);
    }
    Some(nodes)
}

async fn two_nodes() -> Option<(TestStore, TestStore)> {
    let mut nodes = nodes(2).await?;
    let b = nodes.pop()?;
    let a = nodes.pop()?;
    Some((a, b))
}

impl TaskStore for TestStore {
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

/// A fresh, empty store for one rule of the suite. Without `REDIS_URL` (outside CI)
/// the rule runs on a `MemoryStore` instead, so the suite still compiles and runs.
async fn fresh_store() -> Arc<dyn TaskStore> {
    match redis_url() {
        Some(url) => {
            let prefix = unique_prefix();
            let keys = Arc::new(KeyJanitor {
                url: url.clone(),
                prefix: prefix.clone(),
            });
            Arc::new(node(&url, &prefix, &keys).await)
        }
        None => Arc::new(MemoryStore::new()),
    }
}

mod redis_store_contract {
    mcp_tasks::task_store_tests!(super::fresh_store());
}

fn progress(message: &str) -> Transition {
    Transition::Progress {
        message: message.to_owned(),
    }
}

/// Keeps writing through `writer` until `feed` announces `id`: the feed's listener
/// connects in the background, so the first writes may go unheard.
async fn until_heard(writer: &TestStore, id: &TaskId, feed: &mut broadcast::Receiver<TaskId>) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the other node never heard a write"
        );
        let updated = writer
            .update(id, Scope::Any, &progress("ping"), Timestamp::now())
            .await
            .unwrap()
            .expect("the probe task exists");
        assert!(updated.changed());
        match tokio::time::timeout(Duration::from_millis(100), feed.recv()).await {
            Ok(Ok(heard)) if heard == *id => return,
            Ok(Ok(_)) | Err(_) => {}
            Ok(Err(e)) => panic!("the change feed failed: {e}"),
        }
    }
}

async fn create(store: &TestStore, record: &TaskRecord) {
    store
        .create(record.clone(), CreateLimits::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_hears_the_other_and_not_itself() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let mut feed_a = a.subscribe().expect("a connected store has a change feed");
    let mut feed_b = b.subscribe().expect("a connected store has a change feed");
    let probe = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    create(&a, &probe).await;
    until_heard(&a, &probe.id, &mut feed_b).await;
    until_heard(&b, &probe.id, &mut feed_a).await;
    while feed_a.try_recv().is_ok() {}
    while feed_b.try_recv().is_ok() {}

    let mine = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    let theirs = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    create(&a, &mine).await;
    create(&b, &theirs).await;
    a.update(&mine.id, Scope::Any, &progress("a"), Timestamp::now())
        .await
        .unwrap()
        .unwrap();
    b.update(&theirs.id, Scope::Any, &progress("b"), Timestamp::now())
        .await
        .unwrap()
        .unwrap();

    // Redis delivers announcements in order: had A relayed its own writes, `mine`
    // would come before `theirs` on A's feed.
    for expected in [theirs.id, theirs.id] {
        let heard = tokio::time::timeout(DEADLINE, feed_a.recv())
            .await
            .expect("A hears B's writes")
            .unwrap();
        assert!(heard == expected, "A's feed carried one of A's own writes");
    }
    for expected in [mine.id, mine.id] {
        let heard = tokio::time::timeout(DEADLINE, feed_b.recv())
            .await
            .expect("B hears A's writes")
            .unwrap();
        assert!(heard == expected, "B's feed carried one of B's own writes");
    }
    assert!(
        feed_a.try_recv().is_err(),
        "A's feed must carry only B's two writes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_on_one_node_wakes_a_worker_waiting_on_the_other() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    let layer = TasksLayer::builder(a.clone())
        .without_janitor()
        .build()
        .unwrap();
    let tasks = layer.handle();

    // The layer's relay and this probe share A's feed: once the probe hears B, so
    // does the layer.
    let mut probe_feed = a.subscribe().unwrap();
    let probe = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    create(&b, &probe).await;
    until_heard(&b, &probe.id, &mut probe_feed).await;

    let id = TaskId::random();
    create(&a, &TaskRecord::new(id, None, Timestamp::now())).await;
    let ask = InputRequests::new().with("go", InputRequest::confirm("Go?", "ok"));
    tasks.require_input(&id, ask).await.unwrap();
    let waiter = tokio::spawn({
        let tasks = tasks.clone();
        async move { tasks.wait_for_input(&id).await }
    });

    let answer = Transition::Answer {
        responses: [("go".to_owned(), json!({"action": "accept"}))]
            .into_iter()
            .collect(),
    };
    let answered = b
        .update(&id, Scope::Any, &answer, Timestamp::now())
        .await
        .unwrap()
        .expect("node B sees the task node A created");
    assert!(answered.changed());
    assert_eq!(answered.record.status, TaskStatus::Working);

    let answers = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("the worker on node A wakes on node B's answer")
        .unwrap()
        .unwrap();
    assert_eq!(answers["go"]["action"], "accept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_terminal_write_wins_across_nodes() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    const WRITERS: usize = 32;
    for round in 0..4 {
        let record = TaskRecord::new(TaskId::random(), None, Timestamp::now());
        let id = record.id;
        create(&a, &record).await;
        let barrier = Arc::new(Barrier::new(WRITERS));
        let handles: Vec<_> = (0..WRITERS)
            .map(|i| {
                let store = if i % 2 == 0 { a.clone() } else { b.clone() };
                let barrier = barrier.clone();
                let transition = if i % 4 < 2 {
                    Transition::Complete {
                        result: json!({"content": [{"type": "text", "text": format!("writer {i}")}]}),
                        message: None,
                    }
                } else {
                    Transition::Cancel
                };
                tokio::spawn(async move {
                    barrier.wait().await;
                    for _ in 0..1_000 {
                        match store
                            .update(&id, Scope::Any, &transition, Timestamp::now())
                            .await
                        {
                            Err(StoreError::Contention) => tokio::task::yield_now().await,
                            other => return (i, other.unwrap().expect("the task exists")),
                        }
                    }
                    panic!("writer {i} kept losing the compare-and-swap");
                })
            })
            .collect();
        let mut winners = Vec::new();
        for handle in handles {
            let (i, updated) = handle.await.unwrap();
            if updated.changed() {
                winners.push((i, updated.record));
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one terminal write must win across two nodes"
        );
        let (winner, written) = &winners[0];
        let stored = a
            .get(&id, Scope::Any, Timestamp::now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            &stored, written,
            "round {round}: the stored record is the winner's"
        );
        let expected = if winner % 4 < 2 {
            TaskStatus::Completed
        } else {
            TaskStatus::Cancelled
        };
        assert_eq!(stored.status, expected);
        assert_eq!(
            stored.revision, 1,
            "round {round}: one change, one revision"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_across_nodes_are_never_lost() {
    let Some(nodes) = nodes(4).await else {
        return;
    };
    const WRITERS: usize = 64;
    let record = TaskRecord::new(TaskId::random(), None, Timestamp::now());
    let id = record.id;
    create(&nodes[0], &record).await;
    let barrier = Arc::new(Barrier::new(WRITERS));
    let handles: Vec<_> = (0..WRITERS)
        .map(|i| {
            let store = nodes[i % nodes.len()].clone();
            let barrier = barrier.clone();
            let ask = Transition::RequireInput {
                requests: [(
                    format!("key-{i}"),
                    InputRequest::confirm("Go?", "ok").as_json().clone(),
                )]
                .into_iter()
                .collect(),
                message: None,
            };
            tokio::spawn(async move {
                barrier.wait().await;
                for _ in 0..1_000 {
                    match store.update(&id, Scope::Any, &ask, Timestamp::now()).await {
                        Err(StoreError::Contention) => tokio::task::yield_now().await,
                        other => return other.unwrap().expect("the task exists"),
                    }
                }
                panic!("writer {i} kept losing the compare-and-swap");
            })
        })
        .collect();
    for handle in handles {
        let updated = handle.await.unwrap();
        assert!(updated.changed(), "every fresh key must be applied");
    }
    let stored = nodes[3]
        .get(&id, Scope::Any, Timestamp::now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.input_requests.len(), WRITERS, "an update was lost");
    assert_eq!(stored.revision, WRITERS as u64);
}

#[tokio::test]
async fn records_dropped_by_native_expiry_are_still_counted_and_freed() {
    let Some((a, b)) = two_nodes().await else {
        return;
    };
    // Created 10 s ago with a 1 ms TTL: Redis drops the key at once.
    let long_ago = Timestamp(Timestamp::now().0 - 10_000);
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
        Err(StoreError::LimitReached)
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
