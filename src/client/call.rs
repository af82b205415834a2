//! [`Client`]: calls a tool with the tasks extension declared, and hands back its
//! result or a [`TaskFollower`].

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body::Body;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Map, Value, json};
use tower_service::Service;

use crate::error::BoxError;

use super::error::{ClientError, ClientLimit};
use super::follow::{TaskFollower, answer_all, send_cancel};
use super::input::{InputHandler, NoInput};
use super::task::{TaskRef, TaskSnapshot};
use super::transport::Rpc;

/// The default HTTP service: hyper-util's pooled HTTP/1.1 client, plain `http://`
/// only ([`Client::new`] refuses an `https://` URL). For TLS, build a hyper-util
/// client over a TLS connector and pass it to [`Client::with_service`].
///
/// ```
/// use hyper_util::client::legacy::Client as Hyper;
/// use hyper_util::rt::TokioExecutor;
/// use mcp_tasks::client::{Client, HttpClient};
///
/// // What `Client::new` builds, spelled out.
/// let http: HttpClient = Hyper::builder(TokioExecutor::new()).build_http();
/// let client = Client::with_service(http, "http://127.0.0.1:3000/mcp")?;
/// # drop(client);
/// # Ok::<(), mcp_tasks::client::ClientError>(())
/// ```
pub type HttpClient = hyper_util::client::legacy::Client<HttpConnector, String>;

/// A client of one MCP endpoint (2026-07-28, Streamable HTTP) that calls tools with
/// the tasks extension declared and follows the tasks they become.
///
/// Generic over the HTTP service `S` (any tower `Service<http::Request<String>>`);
/// [`Client::new`] uses [`HttpClient`]. Every request carries the envelope's `_meta`
/// (protocol version, client capabilities with the extension, client info) and the
/// standard headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`). Cheap to
/// clone.
///
/// ```no_run
/// use mcp_tasks::client::{Client, ToolCall};
/// use serde_json::json;
///
/// # async fn run() -> Result<(), mcp_tasks::client::ClientError> {
/// let client = Client::new("http://127.0.0.1:3000/mcp")?.with_bearer_token("alice")?;
/// match client.call_tool("build", json!({"seconds": 2})).await? {
///     ToolCall::Complete(result) => println!("{result}"),
///     ToolCall::Task(task) => {
///         let task = task.on_status(|state| println!("{}", state.status));
///         println!("{}", task.wait().await?);
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client<S = HttpClient> {
    rpc: Rpc<S>,
    handler: Arc<dyn InputHandler>,
    info: (String, String),
    listen: bool,
}

impl<S> fmt::Debug for Client<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.rpc.endpoint)
            .field("bearer", &self.rpc.bearer.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.rpc.timeout)
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

/// What a `tools/call` gave: the result at once, or a task to follow (the wire
/// has no third outcome; `input_required` rounds are answered before this).
///
/// ```no_run
/// use mcp_tasks::client::{Client, ToolCall};
/// use serde_json::json;
///
/// # async fn run(client: Client) -> Result<(), mcp_tasks::client::ClientError> {
/// let result = match client.call_tool("export", json!({"table": "orders"})).await? {
///     // Answered within the server's budget: the tool's own result.
///     ToolCall::Complete(result) => result,
///     // A task: followed (listen, or polling) to its end.
///     ToolCall::Task(task) => task.wait().await?,
/// };
/// println!("{result}");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub enum ToolCall<S = HttpClient> {
    /// The tool's result (a `CallToolResult`).
    Complete(Value),
    /// The call became a task (boxed: a follower is large, a result small).
    Task(Box<TaskFollower<S>>),
}

impl Client<HttpClient> {
    /// A client of the MCP endpoint at `url` (`http://host:port/path`) over
    /// [`HttpClient`]. Needs a tokio runtime when used.
    ///
    /// [`HttpClient`] speaks plain HTTP only, so an `https://` URL is refused here,
    /// with [`ClientError::Config`], rather than at the first call; for TLS, see
    /// [`with_service`](Client::with_service).
    ///
    /// ```
    /// use mcp_tasks::client::{Client, ClientError};
    ///
    /// assert!(Client::new("http://127.0.0.1:3000/mcp").is_ok());
    /// let refused = Client::new("https://mcp.example.com/mcp").unwrap_err();
    /// assert!(matches!(refused, ClientError::Config(_)));
    /// assert!(refused.to_string().contains("with_service"));
    /// ```
    pub fn new(url: &str) -> Result<Self, ClientError> {
        if endpoint(url)?.scheme() != Some(&http::uri::Scheme::HTTP) {
            return Err(ClientError::Config(
                "Client::new speaks plain HTTP only: for an https:// URL, pass a TLS-capable \
                 HTTP service to Client::with_service"
                    .into(),
            ));
        }
        let service = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .build_http::<String>();
        Client::with_service(service, url)
    }
}

/// `url` as the endpoint of a client: an absolute `http://` or `https://` URL.
fn endpoint(url: &str) -> Result<Uri, ClientError> {
    let endpoint: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| ClientError::Config(e.to_string()))?;
    if endpoint.scheme().is_none() || endpoint.authority().is_none() {
        return Err(ClientError::Config(
            "the URL needs a scheme and a host".into(),
        ));
    }
    if !matches!(endpoint.scheme_str(), Some("http" | "https")) {
        return Err(ClientError::Config(
            "the URL's scheme must be http or https".into(),
        ));
    }
    Ok(endpoint)
}

impl<S> Client<S> {
    /// A client of the MCP endpoint at `url` (`http://` or `https://`) over
    /// `service`: any tower `Service<http::Request<String>>` answering
    /// `http::Response`s with a body. Whether it can reach `url` is the service's
    /// business; the client only checks that the URL is absolute.
    ///
    /// **TLS.** This crate has no TLS dependency: a TLS stack (rustls with its
    /// crypto provider, or OpenSSL) is a large build that a plain-HTTP client, or a
    /// server behind a TLS-terminating proxy, does not need. Bring the one your
    /// application already uses: hyper-util's client over a TLS connector (such as
    /// `hyper_rustls::HttpsConnector`, or `hyper_tls::HttpsConnector`) is such a
    /// service. Any connector works the same way:
    ///
    /// ```
    /// use hyper_util::client::legacy::Client as Hyper;
    /// use hyper_util::client::legacy::connect::{Connect, HttpConnector};
    /// use hyper_util::rt::TokioExecutor;
    /// use mcp_tasks::client::{Client, ClientError};
    ///
    /// /// A client over `connector`, for instance, with hyper-rustls:
    /// /// `HttpsConnectorBuilder::new().with_native_roots()?.https_only().enable_http1().build()`.
    /// fn client_over<C>(connector: C, url: &str) -> Result<Client<Hyper<C, String>>, ClientError>
    /// where
    ///     C: Connect + Clone + Send + Sync + 'static,
    /// {
    ///     let service = Hyper::builder(TokioExecutor::new()).build(connector);
    ///     Client::with_service(service, url)
    /// }
    ///
    /// # fn main() -> Result<(), ClientError> {
    /// // Shown with hyper-util's plain connector; a TLS one takes its place as is.
    /// let client = client_over(HttpConnector::new(), "https://mcp.example.com/mcp")?;
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_service(service: S, url: &str) -> Result<Self, ClientError> {
        let endpoint = endpoint(url)?;
        let mut client = Client {
            rpc: Rpc::new(service, endpoint),
            handler: Arc::new(NoInput),
            info: ("mcp-tasks".into(), env!("CARGO_PKG_VERSION").into()),
            listen: true,
        };
        client.refresh_meta();
        Ok(client)
    }

    /// Sends `Authorization: Bearer <token>` on every request.
    pub fn with_bearer_token(mut self, token: impl AsRef<str>) -> Result<Self, ClientError> {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", token.as_ref()))
            .map_err(|_| ClientError::Config("the token cannot be a header value".into()))?;
        value.set_sensitive(true);
        self.rpc.bearer = Some(value);
        Ok(self)
    }

    /// Answers the questions of tasks (and of `input_required` rounds before a
    /// task) with `handler`, and declares the capabilities it names.
    pub fn with_input_handler(mut self, handler: impl InputHandler) -> Self {
        self.handler = Arc::new(handler);
        self.refresh_meta();
        self
    }

    /// The `clientInfo` of every request (default: this crate's name and version).
    pub fn with_client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.info = (name.into(), version.into());
        self.refresh_meta();
        self
    }

    /// How long one request may take, reply included (default 30 s). A listen
    /// stream is bound by it only until its acknowledgment.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.rpc.timeout = timeout;
        self
    }

    /// The most bytes of one reply: a JSON body, or an SSE reply up to and including
    /// its response (default [`MAX_RESPONSE_BYTES`](super::MAX_RESPONSE_BYTES),
    /// 16 MiB). Past it: [`ClientError::LimitExceeded`] with
    /// [`ClientLimit::ResponseBytes`](super::ClientLimit::ResponseBytes).
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.rpc.limits.response_bytes = bytes;
        self
    }

    /// The most bytes of one SSE event, on replies and on listen streams (default
    /// [`MAX_EVENT_BYTES`](super::MAX_EVENT_BYTES), 16 MiB). Past it:
    /// [`ClientLimit::EventBytes`](super::ClientLimit::EventBytes).
    pub fn with_max_event_bytes(mut self, bytes: usize) -> Self {
        self.rpc.limits.event_bytes = bytes;
        self
    }

    /// The most `input_required` rounds the client answers: of one `tools/call`
    /// before its task or result, and of one task over its life (default
    /// [`MAX_INPUT_ROUNDS`](super::MAX_INPUT_ROUNDS), 16). Past it:
    /// [`ClientLimit::InputRounds`](super::ClientLimit::InputRounds), and the task is
    /// cancelled.
    ///
    /// ```
    /// use mcp_tasks::client::Client;
    ///
    /// # fn main() -> Result<(), mcp_tasks::client::ClientError> {
    /// let client = Client::new("http://127.0.0.1:3000/mcp")?
    ///     .with_max_input_rounds(4)
    ///     .with_max_input_keys(8);
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_max_input_rounds(mut self, rounds: usize) -> Self {
        self.rpc.limits.input_rounds = rounds;
        self
    }

    /// The most questions the client answers: in one round before a task exists,
    /// and for one task over its life (default
    /// [`MAX_INPUT_KEYS`](super::MAX_INPUT_KEYS), 64). Past it:
    /// [`ClientLimit::InputKeys`](super::ClientLimit::InputKeys), before the input
    /// handler is asked, and the task is cancelled.
    pub fn with_max_input_keys(mut self, keys: usize) -> Self {
        self.rpc.limits.input_keys = keys;
        self
    }

    /// How long [`TaskFollower::wait`] follows one task (default
    /// [`MAX_FOLLOW_TIME`](super::MAX_FOLLOW_TIME), 24 hours). Past it:
    /// [`ClientLimit::FollowTime`](super::ClientLimit::FollowTime), and the task is
    /// cancelled, as when the `wait` future is dropped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::client::Client;
    ///
    /// # fn main() -> Result<(), mcp_tasks::client::ClientError> {
    /// let client = Client::new("http://127.0.0.1:3000/mcp")?
    ///     .with_max_follow_time(Duration::from_secs(600));
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_max_follow_time(mut self, limit: Duration) -> Self {
        self.rpc.limits.follow_time = limit;
        self
    }

    /// How long a follower keeps polling a server it cannot reach (no connection,
    /// no answer within the request timeout, or a gateway's 502, 503 or 504),
    /// counted from the first failed `tasks/get` in a row; it polls again at the
    /// task's polling interval meanwhile (default
    /// [`POLL_RETRY_BUDGET`](super::POLL_RETRY_BUDGET), 30 s). Past it the follow
    /// ends with the last error and the task is left as it is. `Duration::ZERO`
    /// gives up at the first failure.
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcp_tasks::client::Client;
    ///
    /// # fn main() -> Result<(), mcp_tasks::client::ClientError> {
    /// // Rides out a two-minute restart of the server.
    /// let client = Client::new("http://127.0.0.1:3000/mcp")?
    ///     .with_poll_retry_budget(Duration::from_secs(120));
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_poll_retry_budget(mut self, budget: Duration) -> Self {
        self.rpc.limits.poll_retry_budget = budget;
        self
    }

    /// Follows tasks by polling `tasks/get` only, never opening
    /// `subscriptions/listen`.
    pub fn poll_only(mut self) -> Self {
        self.listen = false;
        self
    }

    fn refresh_meta(&mut self) {
        let capabilities = self.handler.capabilities();
        self.rpc
            .set_meta(&capabilities, (self.info.0.as_str(), self.info.1.as_str()));
    }
}

impl<S, B> Client<S>
where
    S: Service<Request<String>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// Calls the tool `name` with `arguments` (a JSON object). `input_required`
    /// rounds before a task exists are answered by the input handler and retried
    /// with their `requestState`.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<ToolCall<S>, ClientError> {
        let mut params = Map::new();
        params.insert("name".to_owned(), json!(name));
        params.insert("arguments".to_owned(), arguments);
        let mut answered = HashSet::new();
        let limits = self.rpc.limits;
        for round in 0..=limits.input_rounds {
            let result = self
                .rpc
                .call("tools/call", Some(name), params.clone())
                .await?;
            match result.get("resultType").and_then(Value::as_str) {
                None | Some("complete") => return Ok(ToolCall::Complete(result)),
                Some("task") => {
                    let first = TaskSnapshot::from_json(&result)?;
                    let mut task = TaskRef::new(first.task_id());
                    task.set_poll_interval_ms(first.poll_interval_ms);
                    return Ok(ToolCall::Task(Box::new(self.follower(task, Some(first)))));
                }
                Some("input_required") => {
                    let requests = result
                        .get("inputRequests")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    if round == limits.input_rounds {
                        return Err(ClientError::LimitExceeded(ClientLimit::InputRounds));
                    }
                    if requests.len() > limits.input_keys {
                        return Err(ClientError::LimitExceeded(ClientLimit::InputKeys));
                    }
                    // Keys are unique only per round.
                    answered.clear();
                    let responses = answer_all(&*self.handler, &requests, &mut answered)
                        .await
                        .map_err(ClientError::Input)?;
                    params.insert("inputResponses".to_owned(), Value::Object(responses));
                    match result.get("requestState") {
                        Some(state) => params.insert("requestState".to_owned(), state.clone()),
                        None => params.remove("requestState"),
                    };
                }
                Some(other) => {
                    return Err(ClientError::http(
                        StatusCode::OK,
                        format!("an unknown resultType {other:?}"),
                    ));
                }
            }
        }
        Err(ClientError::LimitExceeded(ClientLimit::InputRounds))
    }

    /// Calls the tool and, when it becomes a task, follows the task to its end: the
    /// tool's result either way.
    pub async fn call_tool_to_end(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<Value, ClientError> {
        match self.call_tool(name, arguments).await? {
            ToolCall::Complete(result) => Ok(result),
            ToolCall::Task(task) => task.wait().await,
        }
    }

    /// Follows a task again from its reference (after a restart, say).
    pub fn resume(&self, task: TaskRef) -> TaskFollower<S> {
        self.follower(task, None)
    }

    /// The task's current state (`tasks/get`).
    pub async fn get_task(&self, task_id: &str) -> Result<TaskSnapshot, ClientError> {
        let mut params = Map::new();
        params.insert("taskId".to_owned(), json!(task_id));
        let result = self.rpc.call("tasks/get", Some(task_id), params).await?;
        TaskSnapshot::from_json(&result)
    }

    /// Asks the server to cancel the task (`tasks/cancel`).
    pub async fn cancel_task(&self, task_id: &str) -> Result<(), ClientError> {
        send_cancel(&self.rpc, task_id).await
    }

    fn follower(&self, task: TaskRef, first: Option<TaskSnapshot>) -> TaskFollower<S> {
        TaskFollower::new(
            self.rpc.clone(),
            task,
            first,
            self.handler.clone(),
            self.listen,
        )
    }
}
