//! [`TasksLayerBuilder::build`]: checks the settings, builds the engine and starts
//! the background loops.

use std::sync::Arc;

use serde_json::json;

use super::{TasksLayer, TasksLayerBuilder};
use crate::defaults;
use crate::engine::{Engine, relay_remote_changes};
use crate::error::ConfigError;
use crate::lease::Leasing;
#[cfg(doc)]
use crate::store::TaskStore;
use crate::store::{LeaseId, NodeId};

/// # Building
impl TasksLayerBuilder {
    /// Checks the settings and builds the layer. Starts the janitor on the current
    /// tokio runtime, if one is running and the janitor is on, and, for a store
    /// shared between nodes ([`TaskStore::subscribe`]), the relay of other nodes'
    /// changes. Without a runtime both are skipped with a `tracing` warning.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first setting out of range: a zero cap, size or
    /// duration, a default TTL over [`defaults::MAX_TTL`] (10 years), a keep-alive
    /// over [`defaults::MAX_KEEP_ALIVE`] (1 hour), an empty server name.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// # fn main() -> Result<(), ConfigError> {
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_max_rows(1_000).build()?;
    /// assert!(layer.is_enabled());
    /// let refused = TasksLayer::builder(MemoryStore::new()).with_max_rows(0).build();
    /// assert_eq!(refused.unwrap_err().to_string(), "mcp-tasks: max_rows must be at least 1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(mut self) -> Result<TasksLayer, ConfigError> {
        let c = &self.config;
        if c.max_rows == Some(0) {
            return Err(ConfigError::ZeroLimit("max_rows"));
        }
        if c.max_per_owner == Some(0) {
            return Err(ConfigError::ZeroLimit("max_tasks_per_owner"));
        }
        if c.max_listen_streams_per_owner == 0 {
            return Err(ConfigError::ZeroLimit("max_listen_streams_per_owner"));
        }
        if c.max_listen_streams == 0 {
            return Err(ConfigError::ZeroLimit("max_listen_streams"));
        }
        if c.max_listen_bytes_per_owner == 0 {
            return Err(ConfigError::ZeroLimit("max_listen_bytes_per_owner"));
        }
        if c.max_listen_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_listen_bytes"));
        }
        if c.store_timeout.is_zero() {
            return Err(ConfigError::ZeroDuration("store_timeout"));
        }
        if c.listen_ack_timeout.is_zero() {
            return Err(ConfigError::ZeroDuration("listen_ack_timeout"));
        }
        if c.edited_answer_timeout.is_zero() {
            return Err(ConfigError::ZeroDuration("edited_answer_timeout"));
        }
        if c.max_request_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_request_bytes"));
        }
        if c.max_response_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_response_bytes"));
        }
        if c.max_input_response_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_input_response_bytes"));
        }
        if c.max_task_input_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_task_input_bytes"));
        }
        if c.max_result_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_result_bytes"));
        }
        if c.max_bytes_per_owner == 0 {
            return Err(ConfigError::ZeroLimit("max_bytes_per_owner"));
        }
        if c.max_status_message_bytes == 0 {
            return Err(ConfigError::ZeroLimit("max_status_message_bytes"));
        }
        if c.default_ttl.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroDuration("default_ttl"));
        }
        if c.default_ttl.is_some_and(|d| d > defaults::MAX_TTL) {
            return Err(ConfigError::TooLarge {
                setting: "default_ttl",
                max: defaults::MAX_TTL,
            });
        }
        if c.default_poll_interval.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroDuration("default_poll_interval"));
        }
        if c.keep_alive.is_zero() {
            return Err(ConfigError::ZeroDuration("keep_alive"));
        }
        if c.keep_alive > defaults::MAX_KEEP_ALIVE {
            return Err(ConfigError::TooLarge {
                setting: "keep_alive",
                max: defaults::MAX_KEEP_ALIVE,
            });
        }
        if let Some((interval, _)) = c.janitor
            && interval.is_zero()
        {
            return Err(ConfigError::ZeroDuration("janitor interval"));
        }
        if self
            .lease_bound
            .is_some_and(|bound| bound < defaults::MIN_WORKER_LEASE)
        {
            return Err(ConfigError::TooSmall {
                setting: "worker lease",
                min: defaults::MIN_WORKER_LEASE,
            });
        }
        if self
            .lease_bound
            .is_some_and(|bound| bound > defaults::MAX_TTL)
        {
            return Err(ConfigError::TooLarge {
                setting: "worker lease",
                max: defaults::MAX_TTL,
            });
        }
        if let Some(prefix) = &self.config.inner_tasks
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(ConfigError::InvalidName(
                "the inner task prefix must hold a character outside A-Z a-z 0-9 - _",
            ));
        }
        if let Some((name, version)) = self.server_name.take() {
            if name.trim().is_empty() {
                return Err(ConfigError::EmptyServerName);
            }
            self.config.server_info = Some(json!({"name": name, "version": version}));
        }
        let janitor = self.config.janitor;
        let enabled = self.config.enabled;
        crate::observe::register(self.config.max_rows);
        let leasing = match self.lease_bound {
            Some(bound) => self
                .lease_store
                .take()
                .or_else(|| self.store.leases())
                .map(|store| Leasing {
                    store,
                    lease: LeaseId::new(
                        self.node_id.take().unwrap_or_else(NodeId::of_this_process),
                    ),
                    bound,
                }),
            None => None,
        };
        self.listen.set_byte_bounds(
            self.config.max_listen_bytes_per_owner,
            self.config.max_listen_bytes,
        );
        let engine = Engine::new(self.store, self.config, self.notifier, self.principal)
            .with_listen(self.listen)
            .relaying_all(self.custom_notifier)
            .shared();
        let layer = TasksLayer { engine };
        if enabled
            && let Some(feed) = layer.engine.store().subscribe()
            && !crate::spawn::spawn_if_runtime(relay_remote_changes(
                Arc::downgrade(&layer.engine),
                feed,
            ))
        {
            tracing::warn!(
                "mcp-tasks: no tokio runtime while building the layer; changes made on other nodes are not relayed"
            );
        }
        if let (Some(_), true) = (janitor, enabled) {
            let janitor = layer.janitor();
            match crate::spawn::spawn_loop(|stopped| janitor.run(stopped)) {
                Some(stop) => {
                    layer.engine.keep_janitor(stop);
                }
                None => tracing::warn!(
                    "mcp-tasks: no tokio runtime while building the layer; the janitor is not running (spawn TasksLayer::janitor yourself)"
                ),
            }
        }
        if let (Some(leasing), true) = (leasing, enabled) {
            let engine = Arc::downgrade(&layer.engine);
            let bound = leasing.bound;
            match crate::spawn::spawn_loop(|stopped| leasing.run(engine, stopped)) {
                Some(stop) => {
                    // From here on, every hold goes to the keeper: none taken before
                    // its first renewal is missed.
                    layer.engine.node().start_leasing(bound);
                    layer.engine.keep_lease(stop);
                }
                None => tracing::warn!(
                    "mcp-tasks: no tokio runtime while building the layer; no worker lease is kept, so tasks of a node that dies end only at their TTL"
                ),
            }
        }
        Ok(layer)
    }
}
