//! Pieces of the rmcp servers the tests stand up: a text result, a JSON schema
//! object, and the server info of a tools-only server.

use std::sync::Arc;

use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig,
};
use serde_json::Value;

/// A successful tool result of one text block.
pub(crate) fn text(value: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value)])
}

/// A JSON object (a tool's input schema) from `value`; empty unless it is an object.
pub(crate) fn object(value: Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

/// The `get_info` of a server with tools only, named `name`.
pub(crate) fn tools_server(name: &str) -> ServerConfig {
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        .with_server_info(Implementation::new(name, "1.0.0"))
}
