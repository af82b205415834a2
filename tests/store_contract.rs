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

/// A store that keeps the defaults of `TaskStore::visible` and `get_many` (one
/// `get` per id), as a third-party store written before they existed does.
mod default_visible {
    use std::time::Duration;

    use mcp_tasks::error::StoreError;
    use mcp_tasks::store::TaskStore;
    use mcp_tasks::store::{BoxFuture, CreateLimits, Scope, Timestamp, Transition, Updated};
    use mcp_tasks::{MemoryStore, TaskId, TaskRecord};

    #[derive(Debug, Default)]
    struct Plain(MemoryStore);

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
            self.0.get(id, scope, now)
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
}

/// The clock rule fails a store that decides by each caller's clock: a node ahead
/// would sweep away live tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "node_clocks_minutes_apart_agree_on_expiry")]
async fn a_store_on_its_callers_clocks_fails_the_clock_rule() {
    mcp_tasks::test_suite::node_clocks_minutes_apart_agree_on_expiry(mcp_tasks::MemoryStore::new())
        .await;
}
