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
//!     let spec = TaskSpec::new().with_status_message("Queued").with_start(move |id| {
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

pub mod body;
mod config;
mod context;
pub mod defaults;
mod engine;
pub mod error;
pub mod future;
pub mod input;
mod layer;
pub mod notify;
mod routes;
mod service;
pub mod store;
mod task;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_suite;
pub mod wire;
mod worker;

pub use context::{TaskContext, TaskMode, TaskRefused, TaskSpec};
pub use error::{ConfigError, StoreError, TaskError};
pub use layer::{TasksLayer, TasksLayerBuilder};
pub use service::TasksService;
pub use store::{MemoryStore, TaskStore};
pub use task::{Principal, TaskId, TaskRecord, TaskStatus};
pub use wire::RpcError;
pub use worker::Tasks;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::RedisStore;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use sqlx;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis;
