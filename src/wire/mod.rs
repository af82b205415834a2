//! The 2026-07-28 wire: protocol constants, header names, the request envelope,
//! JSON-RPC errors and replies, and Server-Sent Events.
//!
//! Client authors find here every name a request to a tasks-capable server carries:
//!
//! ```
//! use mcp_tasks::wire::{EXTENSION_ID, MCP_METHOD, MCP_NAME, META_CLIENT_CAPABILITIES,
//!     META_PROTOCOL_VERSION, MCP_PROTOCOL_VERSION, PROTOCOL_VERSION};
//! use serde_json::json;
//!
//! let task_id = mcp_tasks::TaskId::random().to_string(); // from the CreateTaskResult
//! let request = http::Request::post("/mcp")
//!     .header("content-type", "application/json")
//!     .header("accept", "application/json, text/event-stream")
//!     .header(MCP_PROTOCOL_VERSION, PROTOCOL_VERSION)
//!     .header(MCP_METHOD, "tasks/get")
//!     .header(MCP_NAME, &task_id) // the task id on tasks/*, the tool name on tools/call
//!     .body(json!({
//!         "jsonrpc": "2.0", "id": 1, "method": "tasks/get",
//!         "params": {"taskId": task_id, "_meta": {
//!             META_PROTOCOL_VERSION: PROTOCOL_VERSION,
//!             META_CLIENT_CAPABILITIES: {"extensions": {EXTENSION_ID: {}}},
//!         }},
//!     }).to_string())
//!     .unwrap();
//! assert_eq!(request.headers()[MCP_METHOD], "tasks/get");
//! ```
//!
//! [The wire in one page](crate#the-wire-in-one-page), in the crate docs, has every
//! request and reply of the extension and the error codes with their HTTP statuses;
//! [`RpcError`] builds those errors.

use http::HeaderName;

mod envelope;
mod error;
mod headers;
mod raw;
mod reply;
pub(crate) mod sse;

pub(crate) use envelope::Envelope;
pub use error::RpcError;
pub(crate) use headers::{
    HeaderRoute, check_media_types, is_owned_method, names_owned_method, route_by_headers,
};
pub(crate) use raw::RawObject;
pub(crate) use reply::{
    ReplyId, ServerInfoMeta, result_response, result_response_with, write_value,
};

/// The tasks extension's identifier, as declared by clients and advertised by servers.
pub const EXTENSION_ID: &str = "io.modelcontextprotocol/tasks";

/// The protocol revision this crate implements.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// Modern protocol versions the layer accepts.
pub const SUPPORTED_VERSIONS: &[&str] = &[PROTOCOL_VERSION];
/// Protocol versions of the legacy era, whose traffic passes through untouched.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// `_meta` key carrying the protocol version of a request.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key carrying the client capabilities of a request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key carrying `serverInfo` on results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key carrying the subscription id on listen-stream notifications.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// `MCP-Protocol-Version`: on every modern request, equal to `_meta`'s version.
pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Mcp-Method`: the JSON-RPC method of the body.
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name`: the tool name on `tools/call`, the task id on `tasks/*`.
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
/// `Mcp-Session-Id`: only legacy-era sessions carry it.
pub const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
