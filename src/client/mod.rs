//! Calling a task-capable tool from Rust, and following its task to the end
//! (feature `client`).
//!
//! [`Client`] sends `tools/call` with the tasks extension declared. A tool that
//! answers at once gives [`ToolCall::Complete`]; one that becomes a task gives
//! [`ToolCall::Task`], a [`TaskFollower`] that:
//!
//! - listens for the task's changes (`subscriptions/listen` with its id), and polls
//!   `tasks/get` at the server's `pollIntervalMs` (clamped to 50 ms..30 s) when the
//!   server refuses the listen or the stream ends; a server out of reach is polled
//!   again for up to 30 s
//!   ([`with_poll_retry_budget`](Client::with_poll_retry_budget));
//! - reports each new status or status message to a callback
//!   ([`TaskFollower::on_status`]);
//! - answers `input_required` through the client's [`InputHandler`] (form and URL
//!   elicitations, sampling, roots), each key once, with `tasks/update`;
//! - cancels the task (`tasks/cancel`) when it, or its `wait` future, is dropped
//!   before the end, unless [detached](TaskFollower::detach);
//! - ends with the tool's result, or a typed [`ClientError`]: `TaskFailed` with the
//!   task's JSON-RPC error, `TaskCancelled`, `Rpc`, `Transport`, …
//!
//! The client does not trust the server to be small: each cap below has a default
//! and a setter on [`Client`], and a server that goes past one gets
//! [`ClientError::LimitExceeded`] naming it ([`ClientLimit`]).
//!
//! | cap | default | setter |
//! |---|---|---|
//! | one reply (a JSON body, or an SSE reply up to its response) | 16 MiB | [`with_max_response_bytes`](Client::with_max_response_bytes) |
//! | one SSE event (replies and listen streams) | 16 MiB | [`with_max_event_bytes`](Client::with_max_event_bytes) |
//! | `input_required` rounds of one call before a task, and of one task | 16 | [`with_max_input_rounds`](Client::with_max_input_rounds) |
//! | questions of one round before a task, and of one task in all | 64 | [`with_max_input_keys`](Client::with_max_input_keys) |
//! | following one task ([`TaskFollower::wait`]) | 24 hours | [`with_max_follow_time`](Client::with_max_follow_time) |
//!
//! Past an input cap, or the follow time, the task is cancelled: nothing else would
//! answer it or wait for it.
//!
//! A [`TaskRef`] (serde) resumes following after a restart ([`Client::resume`]).
//!
//! [`Client::new`] speaks plain HTTP over hyper-util's HTTP/1.1 client (an `https://`
//! URL is refused when the client is made); [`Client::with_service`] takes any tower
//! HTTP service instead, so TLS goes through it with a TLS-capable service of the
//! application's choosing.
//!
//! ```no_run
//! use mcp_tasks::client::{Client, TaskRef, ToolCall};
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::new("http://127.0.0.1:3000/mcp")?;
//! if let ToolCall::Task(task) = client.call_tool("build", json!({"seconds": 30})).await? {
//!     // Keep the reference somewhere durable, and stop following for now.
//!     let saved = serde_json::to_string(&task.detach())?;
//!     // … later, maybe in another process:
//!     let task: TaskRef = serde_json::from_str(&saved)?;
//!     let result = client.resume(task).wait().await?;
//!     println!("{result}");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! It follows rmcp's own task support (`rmcp::task_manager`) as well: rmcp has no
//! listen for tasks, so the client polls.
//!
//! In the repository, `examples/client.rs` is a command-line client built on it:
//! status lines, questions on the terminal, the result as the last line, Ctrl-C
//! cancels. With the quickstart running:
//!
//! ```sh
//! MCP_TOKEN=alice cargo run --example client --features client -- deploy '{"target": "prod"}'
//! ```

mod call;
mod error;
mod follow;
mod input;
mod task;
mod transport;

pub use call::{Client, HttpClient, ToolCall};
pub use error::{ClientError, ClientLimit};
pub use follow::{CANCEL_WAIT, Canceller, TaskFollower};
pub use input::{Answer, InputHandler, NoInput, Question};
pub use task::{
    DEFAULT_POLL_INTERVAL, MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, TaskRef, TaskSnapshot,
};
pub use transport::{
    MAX_EVENT_BYTES, MAX_FOLLOW_TIME, MAX_INPUT_KEYS, MAX_INPUT_ROUNDS, MAX_RESPONSE_BYTES,
    POLL_RETRY_BUDGET,
};
