//! [`RpcError`]: a JSON-RPC error and the HTTP status it travels with.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::EXTENSION_ID;
use super::reply::{Member, json_response, message_body, message_body_raw};

/// A JSON-RPC error the layer answers with, and the HTTP status it travels with.
///
/// Constructors exist for each code the tasks surface uses; [`RpcError::to_response`]
/// builds the HTTP response with the status the specification requires.
///
/// | code | constant | constructor | HTTP |
/// |---|---|---|---|
/// | -32700 | [`PARSE_ERROR`](Self::PARSE_ERROR) | [`parse_error`](Self::parse_error) | 400 |
/// | -32600 | [`INVALID_REQUEST`](Self::INVALID_REQUEST) | [`invalid_request`](Self::invalid_request) | 400 (413 for an oversized body) |
/// | -32601 | [`METHOD_NOT_FOUND`](Self::METHOD_NOT_FOUND) | [`method_not_found`](Self::method_not_found) | 404 |
/// | -32602 | [`INVALID_PARAMS`](Self::INVALID_PARAMS) | [`invalid_params`](Self::invalid_params) / [`missing_meta`](Self::missing_meta) | 200 / 400 |
/// | -32603 | [`INTERNAL_ERROR`](Self::INTERNAL_ERROR) | [`internal`](Self::internal) / [`internal_error`](Self::internal_error) | 200 |
/// | -32020 | [`HEADER_MISMATCH`](Self::HEADER_MISMATCH) | [`header_mismatch`](Self::header_mismatch) | 400 |
/// | -32021 | [`MISSING_REQUIRED_CLIENT_CAPABILITY`](Self::MISSING_REQUIRED_CLIENT_CAPABILITY) | [`tasks_extension_required`](Self::tasks_extension_required) | 400 |
/// | -32022 | [`UNSUPPORTED_PROTOCOL_VERSION`](Self::UNSUPPORTED_PROTOCOL_VERSION) | [`unsupported_protocol_version`](Self::unsupported_protocol_version) | 400 |
///
/// ```
/// use mcp_tasks::wire::RpcError;
/// use serde_json::{Value, json};
///
/// let error = RpcError::invalid_params("Failed to retrieve task: Task not found");
/// let response = error.to_response(Some(&json!(9)));
/// assert_eq!(response.status(), 200);
/// let body: Value = serde_json::from_slice(response.body()).unwrap();
/// assert_eq!(body, json!({"jsonrpc": "2.0", "id": 9, "error": {
///     "code": -32602, "message": "Failed to retrieve task: Task not found"}}));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    code: i64,
    message: Cow<'static, str>,
    data: Option<Value>,
    status: StatusCode,
}

impl RpcError {
    /// The body was not valid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The body was JSON but not a JSON-RPC request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist (including methods the specification removed).
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params were missing or malformed, or the task does not exist.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The server failed.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// A standard header is missing, differs from the body or is malformed.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// The request did not declare a client capability it needs.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    /// The protocol version is not one this server implements.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

    /// An error with an explicit code, message and HTTP status. Stay out of
    /// -32020…-32099 except for the codes above: the specification reserves that
    /// range.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// use http::StatusCode;
    ///
    /// let busy = RpcError::new(-32000, "Server busy", StatusCode::SERVICE_UNAVAILABLE);
    /// assert_eq!((busy.code(), busy.http_status()), (-32000, StatusCode::SERVICE_UNAVAILABLE));
    /// ```
    pub fn new(code: i64, message: impl Into<Cow<'static, str>>, status: StatusCode) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
            status,
        }
    }

    /// -32700 "Parse error" with HTTP 400: the body was not JSON.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// let e = RpcError::parse_error();
    /// assert_eq!((e.code(), e.message(), e.http_status().as_u16()), (-32700, "Parse error", 400));
    /// ```
    pub fn parse_error() -> Self {
        Self::new(Self::PARSE_ERROR, "Parse error", StatusCode::BAD_REQUEST)
    }

    /// -32600 with HTTP 400: the body was JSON but not a JSON-RPC request.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// let e = RpcError::invalid_request("Could not read the request body");
    /// assert_eq!((e.code(), e.http_status().as_u16()), (RpcError::INVALID_REQUEST, 400));
    /// ```
    pub fn invalid_request(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::INVALID_REQUEST, message, StatusCode::BAD_REQUEST)
    }

    /// -32600 with HTTP 400: a request that mixes the eras, a 2026-07-28 marker
    /// (`Mcp-Method`, `_meta`'s protocol version) beside an `Mcp-Session-Id`.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// let e = RpcError::mixed_eras();
    /// assert_eq!((e.code(), e.http_status().as_u16()), (-32600, 400));
    /// ```
    pub fn mixed_eras() -> Self {
        Self::new(
            Self::INVALID_REQUEST,
            "Invalid Request: the request mixes protocol revisions (2026-07-28 headers or \
             _meta with an Mcp-Session-Id)",
            StatusCode::BAD_REQUEST,
        )
    }

    /// -32601 "Method not found" with HTTP 404: the layer's answer to `tasks/list` and
    /// `tasks/result`, which the specification removed.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// let e = RpcError::method_not_found();
    /// assert_eq!((e.code(), e.http_status().as_u16()), (-32601, 404));
    /// ```
    pub fn method_not_found() -> Self {
        Self::new(
            Self::METHOD_NOT_FOUND,
            "Method not found",
            StatusCode::NOT_FOUND,
        )
    }

    /// -32602 with HTTP 200: bad params, or an unknown, expired or foreign task.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// let e = RpcError::invalid_params("Missing taskId");
    /// assert_eq!((e.code(), e.message(), e.http_status().as_u16()), (-32602, "Missing taskId", 200));
    /// ```
    pub fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::INVALID_PARAMS, message, StatusCode::OK)
    }

    /// -32602 with HTTP 400: a required `_meta` field is missing.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// let e = RpcError::missing_meta("Missing params._meta");
    /// assert_eq!((e.code(), e.http_status().as_u16()), (-32602, 400));
    /// ```
    pub fn missing_meta(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::INVALID_PARAMS, message, StatusCode::BAD_REQUEST)
    }

    /// -32603 "Internal error" with HTTP 200: what a client sees when the server
    /// failed (details go to `tracing`, never to the client).
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// let e = RpcError::internal_error();
    /// assert_eq!((e.code(), e.message(), e.http_status().as_u16()), (-32603, "Internal error", 200));
    /// ```
    pub fn internal_error() -> Self {
        Self::internal("Internal error")
    }

    /// -32603 with HTTP 504: the inner service did not finish, in time, an answer
    /// the layer had to read whole.
    pub(crate) fn answer_timed_out() -> Self {
        Self::new(
            Self::INTERNAL_ERROR,
            "The server did not finish its answer in time",
            http::StatusCode::GATEWAY_TIMEOUT,
        )
    }

    /// -32603 with HTTP 200. Keep details out of `message`: clients see it.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// let e = RpcError::internal("Task limit reached");
    /// assert_eq!((e.code(), e.message()), (RpcError::INTERNAL_ERROR, "Task limit reached"));
    /// ```
    pub fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::INTERNAL_ERROR, message, StatusCode::OK)
    }

    /// -32020 with HTTP 400: a standard header (`MCP-Protocol-Version`, `Mcp-Method`,
    /// `Mcp-Name`) is missing, malformed or disagrees with the body.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// let e = RpcError::header_mismatch("Mcp-Name header does not match the body");
    /// assert_eq!((e.code(), e.http_status().as_u16()), (-32020, 400));
    /// ```
    pub fn header_mismatch(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::HEADER_MISMATCH, message, StatusCode::BAD_REQUEST)
    }

    /// -32021 with HTTP 400, naming the tasks extension as the missing capability
    /// (`data.requiredCapabilities.extensions["io.modelcontextprotocol/tasks"]`).
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// use mcp_tasks::wire::EXTENSION_ID;
    ///
    /// let e = RpcError::tasks_extension_required();
    /// assert_eq!((e.code(), e.http_status().as_u16()), (-32021, 400));
    /// assert!(e.data().unwrap()["requiredCapabilities"]["extensions"][EXTENSION_ID].is_object());
    /// ```
    pub fn tasks_extension_required() -> Self {
        Self::new(
            Self::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            StatusCode::BAD_REQUEST,
        )
        .with_data(json!({"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}}))
    }

    /// -32022 with HTTP 400, listing what is supported and echoing what was asked.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// use mcp_tasks::wire::SUPPORTED_VERSIONS;
    ///
    /// let e = RpcError::unsupported_protocol_version(SUPPORTED_VERSIONS, "2099-01-01");
    /// assert_eq!((e.code(), e.http_status().as_u16()), (-32022, 400));
    /// assert_eq!(e.data().unwrap()["supported"][0], "2026-07-28");
    /// assert_eq!(e.data().unwrap()["requested"], "2099-01-01");
    /// ```
    pub fn unsupported_protocol_version(supported: &[&str], requested: &str) -> Self {
        Self::new(
            Self::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            StatusCode::BAD_REQUEST,
        )
        .with_data(json!({"supported": supported, "requested": requested}))
    }

    /// Adds structured detail (`error.data`), replacing any there was.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// use serde_json::json;
    ///
    /// let e = RpcError::invalid_params("Unknown tool").with_data(json!({"tool": "bulid"}));
    /// assert_eq!(e.data(), Some(&json!({"tool": "bulid"})));
    /// ```
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The JSON-RPC code.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// assert_eq!(RpcError::method_not_found().code(), RpcError::METHOD_NOT_FOUND);
    /// ```
    pub fn code(&self) -> i64 {
        self.code
    }

    /// The message clients see.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// assert_eq!(RpcError::method_not_found().message(), "Method not found");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The structured detail, if any.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// assert_eq!(RpcError::parse_error().data(), None);
    /// ```
    pub fn data(&self) -> Option<&Value> {
        self.data.as_ref()
    }

    /// The HTTP status this error travels with.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// assert_eq!(RpcError::header_mismatch("x").http_status(), http::StatusCode::BAD_REQUEST);
    /// ```
    pub fn http_status(&self) -> StatusCode {
        self.status
    }

    /// The JSON-RPC error response body for the request `id` (`null` when unknown).
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// use serde_json::{Value, json};
    ///
    /// let body: Value = serde_json::from_slice(&RpcError::parse_error().to_body(None)).unwrap();
    /// assert_eq!(body, json!({"jsonrpc": "2.0", "id": null,
    ///     "error": {"code": -32700, "message": "Parse error"}}));
    /// ```
    pub fn to_body(&self, id: Option<&Value>) -> Bytes {
        message_body(id, Member::Error, &self.error_object())
    }

    /// [`to_body`](Self::to_body) echoing the request id exactly as the client wrote
    /// it.
    pub(crate) fn to_body_raw(&self, id: Option<&str>) -> Bytes {
        message_body_raw(id, Member::Error, &self.error_object())
    }

    /// [`to_response`](Self::to_response) echoing the request id exactly as the
    /// client wrote it.
    pub(crate) fn to_response_raw(&self, id: Option<&str>) -> Response<Bytes> {
        json_response(self.status, self.to_body_raw(id))
    }

    fn error_object(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }

    /// The full HTTP response: JSON body, `Content-Type: application/json`, the
    /// spec's status.
    ///
    /// ```
    /// use mcp_tasks::wire::RpcError;
    ///
    /// use serde_json::json;
    ///
    /// let response = RpcError::method_not_found().to_response(Some(&json!("req-1")));
    /// assert_eq!(response.status(), 404);
    /// assert_eq!(response.headers()["content-type"], "application/json");
    /// ```
    pub fn to_response(&self, id: Option<&Value>) -> Response<Bytes> {
        json_response(self.status, self.to_body(id))
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)
    }
}

impl std::error::Error for RpcError {}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    #[test]
    fn capability_error_names_the_extension_and_is_400() {
        let e = RpcError::tasks_extension_required();
        let response = e.to_response(Some(&json!(4)));
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["id"], 4);
        assert_eq!(body["error"]["code"], -32021);
        assert!(
            body["error"]["data"]["requiredCapabilities"]["extensions"][EXTENSION_ID].is_object()
        );
    }

    #[test]
    fn statuses_follow_the_spec() {
        assert_eq!(RpcError::method_not_found().http_status(), 404);
        assert_eq!(RpcError::header_mismatch("x").http_status(), 400);
        assert_eq!(RpcError::missing_meta("x").http_status(), 400);
        assert_eq!(RpcError::parse_error().http_status(), 400);
        let v = RpcError::unsupported_protocol_version(&["2026-07-28"], "v9");
        assert_eq!(v.http_status(), 400);
        assert_eq!(v.data().unwrap()["requested"], "v9");
    }

    #[test]
    fn error_without_id_echoes_null() {
        let body: Value = serde_json::from_slice(&RpcError::parse_error().to_body(None)).unwrap();
        assert!(body["id"].is_null());
        assert!(body["error"].get("data").is_none());
    }
}
