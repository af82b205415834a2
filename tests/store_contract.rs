//! The public store contract suite, run on the built-in store directly and behind
//! `Arc<dyn TaskStore>`.

mod memory_store {
    mcp_tasks::task_store_tests!(async { mcp_tasks::MemoryStore::new() });
}

mod memory_store_on_its_clock {
    use mcp_tasks::store::Clock;

    mcp_tasks::task_store_clock_tests!(async {
        mcp_tasks::MemoryStore::new().with_clock(Clock::Store)
    });
}

mod shared_dyn_store {
    use std::sync::Arc;

    use mcp_tasks::MemoryStore;
    use mcp_tasks::store::TaskStore;

    async fn shared() -> Arc<dyn TaskStore> {
        Arc::new(MemoryStore::new())
    }

    mcp_tasks::task_store_tests!(shared());
}

/// `list` at scale: 100 000 tasks of 1 000 owners, one owner's listed page by page.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_pages_one_owner_among_many() {
    mcp_tasks::test_suite::list_pages_one_owner_among_many(
        mcp_tasks::MemoryStore::new(),
        100_000,
        1_000,
    )
    .await;
}

/// A store that keeps the defaults of `TaskStore::visible`, `get_many` and
/// `get_many_within` (one `get` per id), as a third-party store written before they
/// existed does.
mod default_visible {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use mcp_tasks::error::StoreError;
    use mcp_tasks::store::{
        BoxFuture, Budgeted, CreateLimits, Scope, TaskStore, Timestamp, Transition, Updated,
        encoded_len,
    };
    use mcp_tasks::{MemoryStore, TaskId, TaskRecord};
    use serde_json::json;

    /// Counts the bytes of the records its `get` hands out.
    #[derive(Debug, Default)]
    struct Plain(MemoryStore, AtomicUsize);

    impl TaskStore for Plain {
        fn create<'a>(
            &'a self,
            record: TaskRecord,
            limits: CreateLimits,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            self.0.create(record, limits)
        }

        fn get<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            now: Timestamp,
        ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
            Box::pin(async move {
                let found = self.0.get(id, scope, now).await?;
                let bytes = found.as_ref().map_or(0, encoded_len);
                self.1.fetch_add(bytes, Ordering::SeqCst);
                Ok(found)
            })
        }

        fn update<'a>(
            &'a self,
            id: &'a TaskId,
            scope: Scope<'a>,
            transition: &'a Transition,
            now: Timestamp,
        ) -> BoxFuture<'a, Result<Option<Updated>, StoreError>> {
            self.0.update(id, scope, transition, now)
        }

        fn cleanup<'a>(
            &'a self,
            now: Timestamp,
            retention: Duration,
        ) -> BoxFuture<'a, Result<usize, StoreError>> {
            self.0.cleanup(now, retention)
        }
    }

    #[tokio::test]
    async fn visible_lists_only_visible_ids() {
        mcp_tasks::test_suite::visible_lists_only_visible_ids(Plain::default()).await;
    }

    #[tokio::test]
    async fn get_many_reads_only_visible_records() {
        mcp_tasks::test_suite::get_many_reads_only_visible_records(Plain::default()).await;
    }

    #[tokio::test]
    async fn get_many_within_stops_at_the_budget() {
        mcp_tasks::test_suite::get_many_within_stops_at_the_budget(Plain::default()).await;
    }

    /// The default stops reading at the first record past the budget: a read of
    /// ten times the budget fetches at most the budget and one record.
    #[tokio::test]
    async fn the_default_budgeted_read_fetches_at_most_the_budget_and_one_record() {
        let store = Plain::default();
        let now = Timestamp::now();
        let result = json!({"content": [{"type": "text", "text": "x".repeat(64 * 1024)}]});
        let mut ids = Vec::new();
        let mut largest = 0;
        for _ in 0..32 {
            let mut record = TaskRecord::new(TaskId::random(), None, now);
            record.result = Some(result.clone());
            largest = largest.max(encoded_len(&record));
            ids.push(record.id);
            store.create(record, CreateLimits::default()).await.unwrap();
        }
        let budget = largest * 3;
        let read = store
            .get_many_within(&ids, Scope::Owner(None), now, budget)
            .await;
        assert_eq!(read.unwrap(), Budgeted::OverBudget);
        let fetched = store.1.load(Ordering::SeqCst);
        assert!(
            fetched <= budget + largest,
            "fetched {fetched} bytes for a budget of {budget}"
        );
    }
}

/// The clock rule fails a store that decides by each caller's clock: a node ahead
/// would sweep away live tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "node_clocks_minutes_apart_agree_on_expiry")]
async fn a_store_on_its_callers_clocks_fails_the_clock_rule() {
    mcp_tasks::test_suite::node_clocks_minutes_apart_agree_on_expiry(mcp_tasks::MemoryStore::new())
        .await;
}
