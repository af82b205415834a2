//! Calling a task-capable tool from Rust, and following its task to the end
//! (feature `client`).
//!
//! [`Client`] sends `tools/call` with the tasks extension declared. A tool that
//! answers at once gives [`ToolCall::Complete`]; one that becomes a task gives
//! [`ToolCall::Task`], a [`TaskFollower`] that:
//!
//! - listens for the task's changes (`subscriptions/listen` with its id), and polls
//!   `tasks/get` at the server's `pollIntervalMs` (clamped to 50 ms..30 s) when the
//!   server refuses the listen or the stream ends;
//! - reports each new status or status message to a callback
//!   ([`TaskFollower::on_status`]);
//! - answers `input_required` through the client's [`InputHandler`] (form and URL
//!   elicitations, sampling, roots), each key once, with `tasks/update`;
//! - cancels the task (`tasks/cancel`) when it, or its `wait` future, is dropped
//!   before the end, unless [detached](TaskFollower::detach);
//! - ends with the tool's result, or a typed [`ClientError`]: `TaskFailed` with the
//!   task's JSON-RPC error, `TaskCancelled`, `Rpc`, `Transport`, …
//!
//! A [`TaskRef`] (serde) resumes following after a restart ([`Client::resume`]).
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
//! `examples/client.rs` is a command-line client built on it.

mod call;
mod error;
mod follow;
mod input;
mod task;
mod transport;

pub use call::{Client, HttpClient, MAX_INPUT_ROUNDS, ToolCall};
pub use error::ClientError;
pub use follow::{CANCEL_WAIT, Canceller, TaskFollower};
pub use input::{Answer, InputHandler, NoInput, Question};
pub use task::{
    DEFAULT_POLL_INTERVAL, MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, TaskRef, TaskSnapshot,
};
