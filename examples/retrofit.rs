//! Retrofit: an existing rmcp server gets tasks from layer configuration alone.
//!
//! ```sh
//! cargo run --example retrofit                          # http://127.0.0.1:3002/mcp
//! MCP_ADDR=127.0.0.1:4002 cargo run --example retrofit  # another address
//! RUST_LOG=debug cargo run --example retrofit           # default filter: info,mcp_tasks=debug
//! MCP_STORE=redis://127.0.0.1:6379 cargo run --example retrofit --features redis   # a shared store
//! MCP_TASK_TOOLS=1 cargo run --example retrofit         # task tools for clients without the extension
//! ```
//!
//! The handlers in `retrofit_app/mod.rs` are plain rmcp and contain no mcp-tasks
//! code. Every tool is configured `TaskMode::Auto { after: 250 ms }`: a client that
//! declared the tasks extension gets the answer itself when it comes within 250 ms,
//! and a task handle otherwise; `tasks/cancel` drops the running call. A client
//! that did not declare the extension simply waits for the answer.
//!
//! Tools:
//! - `sleep {ms}`: answers `slept {ms}ms` after `ms` milliseconds;
//! - `boom {ms}`: fails with a JSON-RPC internal error (-32603) after `ms`;
//! - `slow_ask {ms}`: waits `ms`, then asks for confirmation (MRTR, a form with a
//!   boolean `confirm`); the retry answers `confirmed: true` or `confirmed: false`.
//!   As a task, the question appears as the task's `inputRequests`;
//! - `steps {steps, ms}`: works `steps` steps of `ms` milliseconds and reports
//!   progress with a message after each; as a task, the newest message is the
//!   task's `statusMessage`;
//! - `stats`: `{"finished": n, "dropped": m}`, how many `sleep` calls ran to the end
//!   and how many were dropped before it (cancelled tasks show up here).
//!
//! A demo auth layer makes `Authorization: Bearer <name>` the principal, so tasks
//! are private to whoever made them. The server is served with a small hyper loop
//! (`examples/common`); `examples/quickstart.rs` shows the same stack on axum.
//!
//! `examples/README.md` has a curl session to paste: a quick call answered directly,
//! a slow one that becomes a task, cancelling it, and a question asked mid-flight.

mod common;
mod retrofit_app;

use tower::ServiceBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("info,mcp_tasks=debug");

    let builder = common::with_lease_from_env(retrofit_app::layer_builder_on(
        common::store_from_env().await?,
    ));
    let tasks_layer = common::with_task_tools_from_env(builder).build()?;
    let mcp = retrofit_app::mcp_service(retrofit_app::Retrofit::default(), true);
    let drain = tasks_layer.clone();
    let app = ServiceBuilder::new()
        .map_request(common::bearer_principal)
        .layer(tasks_layer)
        .service(mcp);

    let addr = common::listen_addr("127.0.0.1:3002");
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let signal = common::shutdown_signal();
    println!("{} listening on http://{addr}/mcp", retrofit_app::NAME);
    common::serve(listener, app, async move {
        signal.await;
        // `Auto` runners get 5 s to finish; the rest fail and listen streams end.
        drain.drain(std::time::Duration::from_secs(5)).await;
    })
    .await;
    Ok(())
}
