//! What the queue example's server and worker share: the store and the queue they
//! both open from the environment.

use mcp_tasks::PostgresStore;
use mcp_tasks::queue::JobQueue;

/// The store `MCP_STORE` names (a `postgres://` URL), on the table `MCP_STORE_TABLE`
/// (default `mcp_tasks`), migrated and listening for other processes' changes, and
/// the job queue beside it (`<table>_jobs`), migrated.
pub(crate) async fn store_and_queue()
-> Result<(PostgresStore, JobQueue), Box<dyn std::error::Error>> {
    let url = std::env::var("MCP_STORE").map_err(|_| {
        "MCP_STORE must name the PostgreSQL the servers and workers share, e.g. postgres://postgres@127.0.0.1:5432/test"
    })?;
    let mut store = PostgresStore::connect(&url).await?;
    if let Ok(table) = std::env::var("MCP_STORE_TABLE") {
        store = store.with_table(&table)?;
    }
    store.migrate().await?;
    store.listen().await?;
    let queue = JobQueue::on(&store);
    queue.migrate().await?;
    Ok((store, queue))
}

/// A duration in milliseconds from the environment variable `name`, or `default`.
pub(crate) fn millis_from_env(name: &str, default: u64) -> std::time::Duration {
    let ms = match std::env::var(name) {
        Ok(ms) => ms
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number of milliseconds")),
        Err(_) => default,
    };
    std::time::Duration::from_millis(ms)
}
