//! Retrofit: an existing rmcp server gets tasks from layer configuration alone.
//!
//! ```text
//! cargo run --example retrofit            # listens on MCP_ADDR, default 127.0.0.1:3002
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
//! - `stats`: `{"finished": n, "dropped": m}`, how many `sleep` calls ran to the end
//!   and how many were dropped before it (cancelled tasks show up here).
//!
//! A demo auth layer makes `Authorization: Bearer <name>` the principal, so tasks
//! are private to whoever made them.

mod common;
mod retrofit_app;

use tower::ServiceBuilder;

fn curl_session(addr: std::net::SocketAddr) -> String {
    let url = format!("http://{addr}/mcp");
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;
    let headers = "-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' -H 'Authorization: Bearer alice'";
    format!(
        r#"Try it (copy and paste):

  # 1. A quick call answers directly
  curl -s {url} {headers} -H 'Mcp-Method: tools/call' -H 'Mcp-Name: sleep' \
    -d '{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":50}},{meta}}}}}'

  # 2. A slow one becomes a task (resultType "task"); poll it
  curl -s {url} {headers} -H 'Mcp-Method: tools/call' -H 'Mcp-Name: sleep' \
    -d '{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":20000}},{meta}}}}}'
  TASK=...
  curl -s {url} {headers} -H 'Mcp-Method: tasks/get' -H "Mcp-Name: $TASK" \
    -d '{{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{{"taskId":"'$TASK'",{meta}}}}}'

  # 3. Cancel it: the sleep really stops (see "dropped" in stats)
  curl -s {url} {headers} -H 'Mcp-Method: tasks/cancel' -H "Mcp-Name: $TASK" \
    -d '{{"jsonrpc":"2.0","id":4,"method":"tasks/cancel","params":{{"taskId":"'$TASK'",{meta}}}}}'
  curl -s {url} {headers} -H 'Mcp-Method: tools/call' -H 'Mcp-Name: stats' \
    -d '{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"stats","arguments":{{}},{meta}}}}}'

  # 4. slow_ask as a task: poll until input_required, then answer the key it shows
  curl -s {url} {headers} -H 'Mcp-Method: tools/call' -H 'Mcp-Name: slow_ask' \
    -d '{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"slow_ask","arguments":{{"ms":1000}},{meta}}}}}'
  curl -s {url} {headers} -H 'Mcp-Method: tasks/update' -H "Mcp-Name: $TASK" \
    -d '{{"jsonrpc":"2.0","id":7,"method":"tasks/update","params":{{"taskId":"'$TASK'","inputResponses":{{"r1.confirm":{{"action":"accept","content":{{"confirm":true}}}}}},{meta}}}}}'
"#
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_tracing("info,mcp_tasks=debug");

    let tasks_layer = retrofit_app::layer_builder().build()?;
    let mcp = retrofit_app::mcp_service(retrofit_app::Retrofit::default(), true);
    let app = ServiceBuilder::new()
        .map_request(common::bearer_principal)
        .layer(tasks_layer)
        .service(mcp);

    let addr = common::listen_addr("127.0.0.1:3002");
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    println!("{} listening on http://{addr}/mcp\n", retrofit_app::NAME);
    println!("{}", curl_session(addr));
    common::serve(listener, app, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}
