//! What can go wrong while calling a tool or following its task.

use std::fmt;

use http::StatusCode;

use crate::error::BoxError;
use crate::wire::RpcError;

/// An error of [`Client`](super::Client) or [`TaskFollower`](super::TaskFollower).
///
/// A task that ends `failed` is [`ClientError::TaskFailed`], with the task's own
/// JSON-RPC error; a server that refused a request is [`ClientError::Rpc`]; anything
/// below JSON-RPC (connection, HTTP status without a JSON-RPC body, timeout) has its
/// own variant.
///
/// ```no_run
/// use mcp_tasks::client::{Client, ClientError};
/// use mcp_tasks::wire::RpcError;
/// use serde_json::json;
///
/// # async fn run(client: Client) -> Result<(), ClientError> {
/// match client.call_tool_to_end("deploy", json!({"target": "prod"})).await {
///     Ok(result) => println!("{result}"),
///     // The tool ran and failed: its own error.
///     Err(ClientError::TaskFailed { error, .. }) => eprintln!("deploy failed: {}", error.message()),
///     Err(ClientError::TaskCancelled) => eprintln!("deploy cancelled"),
///     // The server refused the call itself.
///     Err(e) if e.rpc_error().map(RpcError::code) == Some(RpcError::INVALID_PARAMS) => {
///         eprintln!("bad arguments: {e}")
///     }
///     Err(other) => return Err(other),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The task ended `failed`: its `error`, and its `statusMessage` when it had one.
    TaskFailed {
        /// The error the task carried (`code`, `message`, `data`).
        error: RpcError,
        /// The task's `statusMessage`, when it had one.
        status_message: Option<String>,
    },
    /// The task ended `cancelled` (by this client or another).
    TaskCancelled,
    /// The server answered a request with a JSON-RPC error. [`RpcError::http_status`]
    /// holds the HTTP status it came with.
    Rpc(RpcError),
    /// The HTTP service failed: no connection, a reset, a broken body.
    Transport(BoxError),
    /// A reply that is not JSON-RPC: an HTTP error status without a JSON-RPC error
    /// (an authentication layer's 401, a proxy's 502; the reason then quotes the
    /// start of the body), or a body that is not a JSON-RPC response to the request.
    /// Displays as `HTTP 401 Unauthorized: <reason>`.
    Http {
        /// The HTTP status of the reply.
        status: StatusCode,
        /// What was wrong with it.
        reason: String,
    },
    /// No reply within the client's request timeout.
    Timeout,
    /// The input handler could not answer a question of the task (the task was
    /// cancelled, since nothing else would answer it).
    Input(BoxError),
    /// A setting of the client is invalid (a URL or a token that cannot be a header).
    Config(String),
    /// The server went past one of the client's caps (a reply or an event too
    /// large, too many questions, a task followed for too long). Past an input cap
    /// of a task that exists, or the follow time, the task was cancelled.
    LimitExceeded(ClientLimit),
}

/// Which cap of the client a server went past; each is set on
/// [`Client`](super::Client) and has a documented default.
///
/// ```
/// use mcp_tasks::client::{ClientError, ClientLimit};
///
/// let error = ClientError::LimitExceeded(ClientLimit::ResponseBytes);
/// if let ClientError::LimitExceeded(limit) = error {
///     // Named as its setter is: `Client::with_max_response_bytes`.
///     assert_eq!(limit.as_str(), "max_response_bytes");
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientLimit {
    /// One reply's bytes ([`Client::with_max_response_bytes`](super::Client::with_max_response_bytes)).
    ResponseBytes,
    /// One SSE event's bytes, on replies and listen streams
    /// ([`Client::with_max_event_bytes`](super::Client::with_max_event_bytes)).
    EventBytes,
    /// `input_required` rounds of one call, or of one task
    /// ([`Client::with_max_input_rounds`](super::Client::with_max_input_rounds)).
    InputRounds,
    /// Questions (input keys) of one round before a task, or of one task in all
    /// ([`Client::with_max_input_keys`](super::Client::with_max_input_keys)).
    InputKeys,
    /// How long one task is followed
    /// ([`Client::with_max_follow_time`](super::Client::with_max_follow_time)).
    FollowTime,
}

impl ClientLimit {
    /// The cap's name, as its setter spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientLimit::ResponseBytes => "max_response_bytes",
            ClientLimit::EventBytes => "max_event_bytes",
            ClientLimit::InputRounds => "max_input_rounds",
            ClientLimit::InputKeys => "max_input_keys",
            ClientLimit::FollowTime => "max_follow_time",
        }
    }
}

impl fmt::Display for ClientLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ClientError {
    /// The JSON-RPC error of a [`ClientError::Rpc`] or [`ClientError::TaskFailed`].
    pub fn rpc_error(&self) -> Option<&RpcError> {
        match self {
            ClientError::Rpc(error) | ClientError::TaskFailed { error, .. } => Some(error),
            _ => None,
        }
    }

    pub(crate) fn http(status: StatusCode, reason: impl Into<String>) -> Self {
        ClientError::Http {
            status,
            reason: reason.into(),
        }
    }

    pub(crate) fn transport(error: impl Into<BoxError>) -> Self {
        ClientError::Transport(error.into())
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::TaskFailed { error, .. } => {
                write!(f, "the task failed: {} ({})", error.message(), error.code())
            }
            ClientError::TaskCancelled => f.write_str("the task was cancelled"),
            ClientError::Rpc(error) => write!(
                f,
                "the server answered with an error: {} ({})",
                error.message(),
                error.code()
            ),
            ClientError::Transport(_) => f.write_str("the HTTP request failed"),
            ClientError::Http { status, reason } => write!(f, "HTTP {status}: {reason}"),
            ClientError::Timeout => f.write_str("no reply within the request timeout"),
            ClientError::Input(_) => f.write_str("a question of the task could not be answered"),
            ClientError::Config(reason) => write!(f, "invalid client setting: {reason}"),
            ClientError::LimitExceeded(limit) => {
                write!(f, "the server went past the client's {limit}")
            }
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Transport(error) | ClientError::Input(error) => Some(error.as_ref()),
            ClientError::Rpc(error) | ClientError::TaskFailed { error, .. } => Some(error),
            _ => None,
        }
    }
}
