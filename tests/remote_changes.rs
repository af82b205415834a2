//! Changes made by another node reach this node's notifier and waiting workers
//! through the store's change feed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks::{
    BoxFuture, ChangeFeed, CreateLimits, InputRequest, InputRequests, MemoryStore, Scope,
    StoreError, TaskId, TaskRecord, TaskStatus, TaskStore, TasksLayer, Timestamp, Transition,
    Updated,
};
use serde_json::json;
use tokio::sync::broadcast;

/// A memory store standing in for a shared database: `other_node` writes behind the
/// layer's back and announces the change, as another node would.
#[derive(Debug, Clone)]
struct SharedStore {
    inner: Arc<MemoryStore>,
    feed: broadcast::Sender<TaskId>,
}

impl SharedStore {
    fn new() -> Self {
        SharedStore {
            inner: Arc::new(MemoryStore::new()),
            feed: broadcast::channel(16).0,
        }
    }

    async fn other_node(&self, id: &TaskId, transition: Transition) {
        let updated = self
            .inner
            .update(id, Scope::Any, &transition, Timestamp::now())
            .await
            .unwrap()
            .unwrap();
        assert!(updated.changed());
        self.feed.send(*id).unwrap();
    }
}

impl TaskStore for SharedStore {
    fn create<'a>(
        &'a self,
        r: TaskRecord,
        l: CreateLimits,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.create(r, l)
    }
    fn get<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        self.inner.get(id, scope, now)
    }
    fn update<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        t: &'a Transition,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
        self.inner.update(id, scope, t, now)
    }
    fn cleanup<'a>(
        &'a self,
        now: Timestamp,
        r: Duration,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        self.inner.cleanup(now, r)
    }
    fn subscribe(&self) -> Option<ChangeFeed> {
        Some(self.feed.subscribe())
    }
}

#[tokio::test]
async fn a_change_on_another_node_reaches_the_notifier_and_wakes_the_worker() {
    let store = SharedStore::new();
    let seen: Arc<Mutex<Vec<TaskStatus>>> = Arc::default();
    let sink = seen.clone();
    let layer = TasksLayer::builder(store.clone())
        .without_janitor()
        .with_notifier(Some(Arc::new(move |task: &TaskRecord| {
            sink.lock().unwrap().push(task.status);
        })))
        .build()
        .unwrap();
    let tasks = layer.handle();

    let id = TaskId::random();
    let record = TaskRecord::new(id, None, Timestamp::now());
    store
        .inner
        .create(record, CreateLimits::default())
        .await
        .unwrap();
    let ask = InputRequests::new().with("go", InputRequest::confirm("Go?", "ok"));
    tasks.require_input(&id, ask).await.unwrap();

    let waiter = tokio::spawn({
        let tasks = tasks.clone();
        async move { tasks.wait_for_input(&id).await }
    });
    // Let the worker start waiting, then answer on "another node".
    tokio::task::yield_now().await;
    store
        .other_node(
            &id,
            Transition::Answer {
                responses: [("go".to_string(), json!({"action": "accept"}))]
                    .into_iter()
                    .collect(),
            },
        )
        .await;
    let answers = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the worker wakes on the remote answer")
        .unwrap()
        .unwrap();
    assert_eq!(answers["go"]["action"], "accept");

    store.other_node(&id, Transition::Cancel).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !seen.lock().unwrap().contains(&TaskStatus::Cancelled) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "remote cancel never reached the notifier"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        &[
            TaskStatus::InputRequired,
            TaskStatus::Working,
            TaskStatus::Cancelled
        ]
    );
}
