//! The builder's limits: how many tasks, for how long, and how large.

use std::time::Duration;

use super::TasksLayerBuilder;
#[cfg(doc)]
use crate::config::TaskMode;
#[cfg(doc)]
use crate::defaults;

/// # How many tasks, and for how long
///
/// Caps on the tasks the store holds, all together and per principal, and the
/// lifetime and polling interval a task gets when its tool sets none.
impl TasksLayerBuilder {
    /// The row cap (default [`defaults::MAX_ROWS`], 10 000); a create beyond it
    /// answers -32603 "Task limit reached" with `error.data` `{"limit": "rows"}`.
    /// Expired tasks never count. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_max_rows(50_000).build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_rows(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_rows"));
    /// ```
    pub fn with_max_rows(mut self, max_rows: usize) -> Self {
        self.config.max_rows = Some(max_rows);
        self
    }

    /// No row cap at all (the default is [`defaults::MAX_ROWS`], 10 000). Only for
    /// stores bounded some other way.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// // A per-principal cap bounds the store instead.
    /// let layer = TasksLayer::builder(MemoryStore::new())
    ///     .without_max_rows()
    ///     .with_max_tasks_per_owner(20)
    ///     .build();
    /// assert!(layer.is_ok());
    /// ```
    pub fn without_max_rows(mut self) -> Self {
        self.config.max_rows = None;
        self
    }

    /// A cap on the tasks one principal (or all anonymous callers together) may
    /// hold (default [`defaults::MAX_TASKS_PER_OWNER`], 1 000), so that one client's
    /// flood never locks out another. A create beyond it answers -32603 "Task limit
    /// reached" with `error.data` `{"limit": "per_owner"}` (the row cap's refusal
    /// says `"rows"`). Expired tasks never count. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let layer = TasksLayer::builder(MemoryStore::new()).with_max_tasks_per_owner(100).build();
    /// assert!(layer.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_tasks_per_owner(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_tasks_per_owner"));
    /// ```
    pub fn with_max_tasks_per_owner(mut self, max: usize) -> Self {
        self.config.max_per_owner = Some(max);
        self
    }

    /// No cap per principal (the default is [`defaults::MAX_TASKS_PER_OWNER`],
    /// 1 000): only the row cap applies, so one client can fill the store for all.
    /// Only for deployments where every caller is trusted.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    ///
    /// // A cap from configuration, or none.
    /// let per_owner: Option<usize> = None;
    /// let builder = TasksLayer::builder(MemoryStore::new());
    /// let builder = match per_owner {
    ///     Some(max) => builder.with_max_tasks_per_owner(max),
    ///     None => builder.without_max_tasks_per_owner(),
    /// };
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn without_max_tasks_per_owner(mut self) -> Self {
        self.config.max_per_owner = None;
        self
    }

    /// The lifetime of a task whose tool sets none (default [`defaults::TTL`], 1 hour),
    /// counted from its creation; a tool sets its own with
    /// [`TaskSpec::with_ttl`](crate::TaskSpec::with_ttl). Zero and anything over
    /// [`defaults::MAX_TTL`] (10 years) are refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let day = Duration::from_secs(24 * 3600);
    /// assert!(TasksLayer::builder(MemoryStore::new()).with_default_ttl(day).build().is_ok());
    /// let forever = TasksLayer::builder(MemoryStore::new()).with_default_ttl(Duration::MAX).build();
    /// let refused = forever.unwrap_err();
    /// assert_eq!(refused, ConfigError::TooLarge { setting: "default_ttl", max: mcp_tasks::defaults::MAX_TTL });
    /// assert_eq!(refused.to_string(), "mcp-tasks: default_ttl must be at most 87600 h");
    /// ```
    pub fn with_default_ttl(mut self, ttl: Duration) -> Self {
        self.config.default_ttl = Some(ttl);
        self
    }

    /// The polling interval suggested to clients (`pollIntervalMs`) when a tool sets
    /// none (default: none, and the field is left out). Zero is refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let two_s = TasksLayer::builder(MemoryStore::new())
    ///     .with_default_poll_interval(Duration::from_secs(2))
    ///     .build();
    /// assert!(two_s.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new())
    ///     .with_default_poll_interval(Duration::ZERO)
    ///     .build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroDuration("default_poll_interval"));
    /// ```
    pub fn with_default_poll_interval(mut self, interval: Duration) -> Self {
        self.config.default_poll_interval = Some(interval);
        self
    }
}

/// # How large
///
/// Caps on the bytes the layer reads, buffers and stores: request bodies, the inner
/// response it inspects, answers to input requests, and results.
impl TasksLayerBuilder {
    /// The largest request body the layer reads (default
    /// [`defaults::MAX_REQUEST_BYTES`], 4 MiB); larger ones get HTTP 413 with a
    /// JSON-RPC error. A request whose `Mcp-Method` names a method the layer does not
    /// own streams to the inner service unread, whatever its size. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let mib = TasksLayer::builder(MemoryStore::new()).with_max_request_bytes(1 << 20).build();
    /// assert!(mib.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_request_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_request_bytes"));
    /// ```
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Self {
        self.config.max_request_bytes = bytes;
        self
    }

    /// The largest inner response buffered while deciding whether a call became a
    /// task (default [`defaults::MAX_RESPONSE_BYTES`], 16 MiB). Beyond it the layer
    /// stops buffering and, unless the handler asked for a task, sends the answer on
    /// unchanged. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let big = TasksLayer::builder(MemoryStore::new()).with_max_response_bytes(64 << 20).build();
    /// assert!(big.is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_response_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_response_bytes"));
    /// ```
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.config.max_response_bytes = bytes;
        self
    }

    /// The largest serialized answer a `tasks/update` may give to one input request
    /// (default [`defaults::MAX_INPUT_RESPONSE_BYTES`], 256 KiB). A larger one is
    /// refused with -32602 naming the limit; the task is unchanged and still
    /// answerable. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let small = TasksLayer::builder(MemoryStore::new()).with_max_input_response_bytes(4096);
    /// assert!(small.build().is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_input_response_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_input_response_bytes"));
    /// ```
    pub fn with_max_input_response_bytes(mut self, bytes: usize) -> Self {
        self.config.max_input_response_bytes = bytes;
        self
    }

    /// The most bytes of answers (keys and serialized values) one task keeps
    /// (default [`defaults::MAX_TASK_INPUT_BYTES`], 1 MiB). A `tasks/update` that
    /// would pass it is refused with -32602 naming the limit; the task is unchanged.
    /// Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let big = TasksLayer::builder(MemoryStore::new()).with_max_task_input_bytes(8 << 20);
    /// assert!(big.build().is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_task_input_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_task_input_bytes"));
    /// ```
    pub fn with_max_task_input_bytes(mut self, bytes: usize) -> Self {
        self.config.max_task_input_bytes = bytes;
        self
    }

    /// The largest serialized result a task stores (default
    /// [`defaults::MAX_RESULT_BYTES`], 8 MiB, below rmcp's 16 MiB client limit). A
    /// completion with a larger result, from [`Tasks::complete`](crate::worker::Tasks::complete)
    /// or a [`TaskMode::Auto`] call, fails the task with -32603 "Result too large"
    /// instead; so does a failure whose error (its `data` included) is larger, and
    /// input requests of one call larger than it fail the task with -32603 "Input
    /// requests too large". Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let big = TasksLayer::builder(MemoryStore::new()).with_max_result_bytes(12 << 20);
    /// assert!(big.build().is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_result_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_result_bytes"));
    /// ```
    pub fn with_max_result_bytes(mut self, bytes: usize) -> Self {
        self.config.max_result_bytes = bytes;
        self
    }

    /// The most bytes the tasks of one principal (or of all anonymous callers
    /// together) may store (default [`defaults::MAX_BYTES_PER_OWNER`], 64 MiB):
    /// each task's record as stored (its result or error, input requests and
    /// answers, status message), counted by the store
    /// ([`TaskStore::owner_bytes`](crate::store::TaskStore::owner_bytes)) until the
    /// record is removed. A write that would pass it is not stored: a new task and
    /// a client's `tasks/update` answer -32603 "Task limit reached" with
    /// `error.data` `{"limit": "bytes_per_owner"}` (HTTP 200), a status message is
    /// left out (the worker's call returns
    /// [`StoreError::LimitReached`](crate::error::StoreError::LimitReached)), and a
    /// result, an error or input requests fail the task with that same error, so the
    /// task ends. Another principal is never refused for it. Zero is refused.
    ///
    /// The bound is read from the store before each write that grows a task, with
    /// what this node is writing for the principal meanwhile; writes of one
    /// principal on several nodes at once may pass it by what lands during one such
    /// read.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let big = TasksLayer::builder(MemoryStore::new()).with_max_bytes_per_owner(1 << 30);
    /// assert!(big.build().is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_bytes_per_owner(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_bytes_per_owner"));
    /// ```
    pub fn with_max_bytes_per_owner(mut self, bytes: usize) -> Self {
        self.config.max_bytes_per_owner = bytes;
        self
    }

    /// The longest status message a task keeps, in bytes of UTF-8 (default
    /// [`defaults::MAX_STATUS_MESSAGE_BYTES`], 4 KiB). A longer one, from a
    /// handler's progress, a worker or a [`TaskSpec`](crate::TaskSpec), is cut on a
    /// character boundary and ends with "…" (within the bound): a status message is
    /// text for people, and the protocol gives it no length, so the task goes on
    /// with the start of it. Zero is refused.
    ///
    /// ```
    /// use mcp_tasks::{MemoryStore, TasksLayer};
    /// use mcp_tasks::error::ConfigError;
    ///
    /// let short = TasksLayer::builder(MemoryStore::new()).with_max_status_message_bytes(256);
    /// assert!(short.build().is_ok());
    /// let zero = TasksLayer::builder(MemoryStore::new()).with_max_status_message_bytes(0).build();
    /// assert_eq!(zero.unwrap_err(), ConfigError::ZeroLimit("max_status_message_bytes"));
    /// ```
    pub fn with_max_status_message_bytes(mut self, bytes: usize) -> Self {
        self.config.max_status_message_bytes = bytes;
        self
    }
}
