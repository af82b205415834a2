//! The public store contract suite, run on the built-in store directly and behind
//! `Arc<dyn TaskStore>`.

mod memory_store {
    mcp_tasks::task_store_tests!(async { mcp_tasks::MemoryStore::new() });
}

mod shared_dyn_store {
    use std::sync::Arc;

    use mcp_tasks::{MemoryStore, TaskStore};

    async fn shared() -> Arc<dyn TaskStore> {
        Arc::new(MemoryStore::new())
    }

    mcp_tasks::task_store_tests!(shared());
}
