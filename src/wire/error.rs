//! [`RpcError`]: a JSON-RPC error and the HTTP status it travels with.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::EXTENSION_ID;
use super::reply::{json_response, message_body};

/// A JSON-RPC error the layer answers with, and the HTTP status it travels with.
///
/// Constructors exist for each code the tasks surface uses; [`RpcError::to_response`]
/// builds the HTTP response with the status the specification requires.
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

    /// An error with an explicit code, message and HTTP status.
    pub fn new(code: i64, message: impl Into<Cow<'static, str>>, status: StatusCode) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
            status,
        }
    }

    /// -32700 with HTTP 400.
    pub fn parse_error() -> Self {
        Self::new(Self::PARSE_ERROR, "Parse error", StatusCode::BAD_REQUEST)
    }

    /// -32600 with HTTP 400.
    pub fn invalid_request(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::INVALID_REQUEST, message, StatusCode::BAD_REQUEST)
    }

    /// -32601 with HTTP 404.
    pub fn method_not_found() -> Self {
        Self::new(
            Self::METHOD_NOT_FOUND,
            "Method not found",
            StatusCode::NOT_FOUND,
        )
    }

    /// -32602 with HTTP 200.
    pub fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::INVALID_PARAMS, message, StatusCode::OK)
    }

    /// -32602 with HTTP 400: a required `_meta` field is missing.
    pub fn missing_meta(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::INVALID_PARAMS, message, StatusCode::BAD_REQUEST)
    }

    /// -32603 "Internal error" with HTTP 200: what a client sees when the server
    /// failed (details go to `tracing`, never to the client).
    pub fn internal_error() -> Self {
        Self::internal("Internal error")
    }

    /// -32603 with HTTP 200. Keep details out of `message`: clients see it.
    pub fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::INTERNAL_ERROR, message, StatusCode::OK)
    }

    /// -32020 with HTTP 400.
    pub fn header_mismatch(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(Self::HEADER_MISMATCH, message, StatusCode::BAD_REQUEST)
    }

    /// -32021 with HTTP 400, naming the tasks extension as the missing capability.
    pub fn tasks_extension_required() -> Self {
        Self::new(
            Self::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            StatusCode::BAD_REQUEST,
        )
        .with_data(json!({"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}}))
    }

    /// -32022 with HTTP 400, listing what is supported and echoing what was asked.
    pub fn unsupported_protocol_version(supported: &[&str], requested: &str) -> Self {
        Self::new(
            Self::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            StatusCode::BAD_REQUEST,
        )
        .with_data(json!({"supported": supported, "requested": requested}))
    }

    /// Adds structured detail (`error.data`).
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The JSON-RPC code.
    pub fn code(&self) -> i64 {
        self.code
    }

    /// The message clients see.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The structured detail, if any.
    pub fn data(&self) -> Option<&Value> {
        self.data.as_ref()
    }

    /// The HTTP status this error travels with.
    pub fn http_status(&self) -> StatusCode {
        self.status
    }

    /// The JSON-RPC error response body for the request `id` (`null` when unknown).
    pub fn to_body(&self, id: Option<&Value>) -> Bytes {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        message_body(id, "error", error)
    }

    /// The full HTTP response: JSON body, `Content-Type: application/json`, the
    /// spec's status.
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
