//! # mcp-tasks
//!
//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`, protocol revision
//! 2026-07-28) for any MCP server built on tower, as one layer.
//!
//! A `tools/call` that would take too long answers at once with a task handle; the
//! client polls `tasks/get`, answers mid-flight questions with `tasks/update`, and
//! may `tasks/cancel`. [`TasksLayer`] wraps an existing MCP Streamable HTTP service
//! (rmcp, axum, hyper, …) and:
//!
//! - answers `tasks/get`, `tasks/update` and `tasks/cancel` itself, scoped to the
//!   task's owner, with the specification's error codes and HTTP statuses;
//! - turns a tool's task outcome into a stored task and a `CreateTaskResult`;
//! - validates the standard headers and the per-request client capabilities;
//! - advertises the extension in `server/discover`;
//! - passes every other request through untouched, deciding from headers alone.
//!
//! ## Making a tool call a task
//!
//! The layer puts a [`TaskContext`] into each `tools/call` request's extensions. A
//! handler calls [`TaskContext::create`] with a [`TaskSpec`]; its `start` function
//! receives the new [`TaskId`] once the task is stored, and spawns the work, which
//! then drives the task through the worker handle [`Tasks`]:
//!
//! ```
//! use mcp_tasks::{TaskContext, TaskRefused, TaskSpec, Tasks};
//! use serde_json::{Value, json};
//!
//! fn handler(parts: &http::request::Parts, tasks: Tasks) -> Value {
//!     let spec = TaskSpec::new().status_message("Queued").start(move |id| {
//!         tokio::spawn(async move {
//!             let _ = tasks.progress(&id, "Working").await;
//!             let _ = tasks.complete(&id, json!({"content": [{"type": "text", "text": "done"}]})).await;
//!         });
//!     });
//!     let made = TaskContext::from_parts(parts).map_or(Err(TaskRefused::NotToolCall), |ctx| ctx.create(spec));
//!     match made {
//!         // The layer answers with the task; what the handler returns is dropped.
//!         Ok(()) => json!({"content": []}),
//!         // No layer, or no task allowed for this request: do the work now.
//!         Err(_refused) => json!({"content": [{"type": "text", "text": "done now"}]}),
//!     }
//! }
//! # let _ = handler;
//! ```
//!
//! A raw tower or hyper service can instead insert a [`TaskSpec`] into its
//! response's extensions. Per tool, [`TaskMode`] on the layer decides whether a call
//! may (`Optional`, the default), must (`Required`) or must not (`Never`) become a
//! task.
//!
//! ## Ownership
//!
//! A task belongs to the [`Principal`] of the request that made it, read from the
//! request's extensions (an authentication layer in front inserts it) or from
//! [`TasksLayerBuilder::with_principal`]. Another principal's task answers exactly
//! like a missing one. A task made without a principal is visible only to
//! unauthenticated callers; its unguessable id is then its only protection.
//!
//! ## Stores
//!
//! [`MemoryStore`] is the default. [`TaskStore`] is object safe; any implementation
//! can be checked against the public contract suite (feature `test-util`).

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod auto;
mod body;
mod context;
mod decide;
mod error;
mod future;
mod input;
mod janitor;
mod jsonrpc;
mod layer;
mod listen;
mod notify;
mod service;
mod shared;
mod sse;
mod store;
mod task;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_suite;
mod worker;

pub use body::{RequestBody, ResponseBody};
pub use context::{AUTO_EXPIRY_MARGIN, TaskContext, TaskMode, TaskRefused, TaskSpec};
pub use error::{BoxError, ConfigError, EXTENSION_ID, RpcError, StoreError, TaskError};
pub use future::ResponseFuture;
pub use input::{InputRequest, InputRequests};
pub use janitor::{DEFAULT_JANITOR_INTERVAL, DEFAULT_RETENTION, Janitor};
pub use jsonrpc::{
    META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, META_SERVER_INFO, META_SUBSCRIPTION_ID,
    PROTOCOL_VERSION, SUPPORTED_VERSIONS,
};
pub use layer::{
    DEFAULT_KEEP_ALIVE, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_ROWS,
    DEFAULT_TTL, MAX_KEEP_ALIVE, MAX_LISTEN_TASK_IDS, MAX_TTL, TasksLayer, TasksLayerBuilder,
};
pub use notify::ListenNotifier;
pub use notify::TaskNotifier;
pub use service::TasksService;
pub use store::{BoxFuture, ChangeFeed, CreateLimits, MemoryStore, TaskStore, Updated};
pub use task::{
    Applied, ErrorObject, InvalidTaskId, Principal, Scope, TASK_ID_BYTES, TASK_ID_LEN, TaskId,
    TaskRecord, TaskStatus, Timestamp, Transition, TransitionError,
};
pub use worker::Tasks;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use sqlx;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::PostgresStore;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::RedisStore;
