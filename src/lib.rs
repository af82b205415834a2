// The crate docs are the README, so that the two never drift apart. Its examples name
// `PostgresStore` and the contract suite, so they run as doctests with those features on
// (CI's `cargo test --all-features`); without them the README is left out of the
// doctests, never out of the docs.
#![cfg_attr(
    any(not(doctest), all(feature = "postgres", feature = "test-util")),
    doc = include_str!("../README.md")
)]
#![cfg_attr(
    all(doctest, not(all(feature = "postgres", feature = "test-util"))),
    doc = "The README's examples are doctests with `--features postgres,test-util`."
)]
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
mod observe;
mod routes;
mod service;
mod spawn;
pub mod store;
mod task;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_suite;
mod waits;
pub mod wire;
pub mod worker;

pub use config::TaskMode;
pub use context::{TaskContext, TaskRefused, TaskSpec};
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
