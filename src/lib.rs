// The crate docs are the README, so that the two never drift apart.
//
// The README links to module pages by reference (`[`store`]`), with definitions at its
// end that point to docs.rs, for crates.io and GitHub. In these docs the definitions
// below come first, and the first definition of a label wins: the same links resolve
// within this build of the docs, and a broken one fails `cargo doc -D warnings`.
#![doc = "[`body`]: crate::body"]
#![doc = "[`defaults`]: crate::defaults"]
#![doc = "[`error`]: crate::error"]
#![doc = "[`future`]: crate::future"]
#![doc = "[`input`]: crate::input"]
#![doc = "[`notify`]: crate::notify"]
#![doc = "[`observe`]: crate::observe"]
#![doc = "[`store`]: crate::store"]
#![doc = "[`TaskMode`]: crate::TaskMode"]
#![doc = "[`wire`]: crate::wire"]
#![doc = "[`worker`]: crate::worker"]
#![cfg_attr(feature = "client", doc = "[`client`]: crate::client")]
#![cfg_attr(feature = "queue", doc = "[`queue`]: crate::queue")]
#![cfg_attr(feature = "test-util", doc = "[`test_suite`]: crate::test_suite")]
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod backoff;
pub mod body;
#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
pub mod client;
mod config;
mod context;
pub mod defaults;
mod engine;
pub mod error;
pub mod future;
pub mod input;
mod layer;
mod lease;
pub mod notify;
pub mod observe;
mod outage;
#[cfg(feature = "queue")]
#[cfg_attr(docsrs, doc(cfg(feature = "queue")))]
pub mod queue;
mod routes;
mod service;
mod spawn;
pub mod store;
mod task;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_suite;
pub mod wire;
pub mod worker;

// Each public item has one path: the layer and the vocabulary of a task here, the
// rest in the module of its topic (errors in `error`, the store trait in `store`,
// the worker handles in `worker`, JSON-RPC errors in `wire`).
pub use config::TaskMode;
pub use context::{TaskContext, TaskRefused, TaskSpec};
pub use layer::{TasksLayer, TasksLayerBuilder};
pub use service::TasksService;
pub use store::memory::MemoryStore;
pub use task::{Principal, TaskId, TaskRecord, TaskStatus};

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::postgres::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::redis::RedisStore;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use sqlx;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis;
