//! The layer's settings, validated when it is built.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::context::{TaskMode, TaskPolicy};
use crate::task::Principal;

pub(crate) type PrincipalFn =
    Arc<dyn Fn(&http::request::Parts) -> Option<Principal> + Send + Sync + 'static>;

/// Settings, validated when the layer is built.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) enabled: bool,
    pub(crate) max_rows: Option<usize>,
    pub(crate) max_per_owner: Option<usize>,
    pub(crate) default_ttl: Option<Duration>,
    pub(crate) default_poll_interval: Option<Duration>,
    pub(crate) max_request_bytes: usize,
    pub(crate) max_response_bytes: usize,
    pub(crate) max_input_response_bytes: usize,
    pub(crate) max_task_input_bytes: usize,
    pub(crate) max_result_bytes: usize,
    pub(crate) server_info: Option<Value>,
    pub(crate) tool_modes: HashMap<String, TaskMode>,
    pub(crate) default_mode: TaskMode,
    pub(crate) task_policy: Option<TaskPolicy>,
    pub(crate) janitor: Option<(Duration, Duration)>,
    pub(crate) max_listen_task_ids: usize,
    pub(crate) max_listen_streams_per_owner: usize,
    pub(crate) max_listen_streams: usize,
    pub(crate) listen_ack_timeout: Duration,
    pub(crate) keep_alive: Duration,
}

impl Config {
    /// The mode of a tool's calls when no policy decides.
    pub(crate) fn mode_for(&self, tool: &str) -> TaskMode {
        self.tool_modes
            .get(tool)
            .copied()
            .unwrap_or(self.default_mode)
    }

    /// The mode of one call: the policy's decision when it makes one, otherwise the
    /// tool's configured mode.
    pub(crate) fn mode_for_call(&self, tool: &str, arguments: &Value) -> TaskMode {
        self.task_policy
            .as_ref()
            .and_then(|policy| policy.decide(tool, arguments))
            .unwrap_or_else(|| self.mode_for(tool))
    }
}
