// The module's page, the whole wire of the extension, lives in its own file.
#![doc = include_str!("docs.md")]

use http::HeaderName;

mod envelope;
mod error;
mod headers;
mod raw;
mod reply;
mod rfc3339;
pub(crate) mod sse;
pub(crate) mod v2025;

pub(crate) use envelope::Envelope;
pub use error::RpcError;
pub(crate) use headers::{
    HeaderRoute, check_media_types, is_owned_method, names_owned_method, route_by_headers,
};
pub(crate) use raw::RawObject;
pub(crate) use reply::{
    Member, ReplyId, ServerInfoMeta, json_response, message_body_raw, result_response,
    result_response_with, write_value,
};
#[cfg(test)]
pub(crate) use rfc3339::LAST_RFC3339_MS;
pub(crate) use rfc3339::{RFC3339_LEN, write_rfc3339};

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
