//! The task store `--store` names, and this gateway's place among those sharing it.

use std::sync::Arc;

use mcp_tasks::error::BoxError;
use mcp_tasks::store::TaskStore;
use mcp_tasks::{MemoryStore, TasksLayerBuilder};

use crate::config::StoreConfig;

/// Opens the store: a [`MemoryStore`], or a migrated and listening PostgreSQL
/// store, or a Redis store with its change feed. Gateways on one database serve
/// the same tasks.
pub(crate) async fn open(config: &StoreConfig) -> Result<Arc<dyn TaskStore>, BoxError> {
    let url = config.url.as_str();
    if url == "memory" {
        return Ok(Arc::new(MemoryStore::new()));
    }
    #[cfg(feature = "postgres")]
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let mut store = mcp_tasks::PostgresStore::connect(url).await?;
        if let Some(table) = &config.table {
            store = store.with_table(table)?;
        }
        store.migrate().await?;
        store.listen().await?;
        return Ok(Arc::new(store));
    }
    #[cfg(feature = "redis")]
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        let mut store = mcp_tasks::RedisStore::connect(url).await?;
        if let Some(prefix) = &config.prefix {
            store = store.with_prefix(prefix.clone());
        }
        store.listen().await?;
        return Ok(Arc::new(store));
    }
    // The configuration only lets through the URLs this build can open.
    Err(format!("no store for {url:?} in this build").into())
}

/// `builder` with this node's id and worker lease, where they are set.
pub(crate) fn with_node(mut builder: TasksLayerBuilder, config: &StoreConfig) -> TasksLayerBuilder {
    if let Some(node) = &config.node {
        builder = builder.with_node_id(node.clone());
    }
    if let Some(lease) = config.lease {
        builder = builder.with_worker_lease(lease);
    }
    builder
}
