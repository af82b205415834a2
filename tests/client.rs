//! `mcp_tasks::client` against servers over loopback HTTP: our layer in front of an
//! rmcp server (listen, the polling fallback, questions, failure, cancel on drop,
//! resume), and an rmcp server with rmcp's own task support and no layer.

mod support;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use mcp_tasks::client::{
    Answer, Client, ClientError, InputHandler, Question, TaskRef, TaskSnapshot, ToolCall,
};
use mcp_tasks::error::BoxError;
use mcp_tasks::input::{InputRequest as AskRequest, InputRequests as AskRequests};
use mcp_tasks::store::BoxFuture;
use mcp_tasks::worker::TaskEnd;
use mcp_tasks::{
    MemoryStore, TaskContext, TaskId, TaskSpec, TaskStatus, TasksLayer, wire::RpcError,
    worker::Tasks,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, GetTaskParams,
    GetTaskResult, Implementation, InputRequiredResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};
use support::http::{TestServer, authenticate, serve};
use support::procs::{self, Proc};
use support::rmcp_server::{object, text, tools_server};
use support::wait;
use tokio::sync::mpsc;
use tower::{Layer as _, ServiceExt as _};

// ---------------------------------------------------------------------------
// The layered server

/// The rmcp server behind the layer. `echo` answers at once; `job` becomes a task
/// (status `Queued`, `pollIntervalMs` from its `poll_ms` argument) whose id goes to
/// the test, which then drives it through `Tasks`.
#[derive(Clone)]
struct Fixture {
    started: mpsc::UnboundedSender<TaskId>,
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        tools_server("client-fixture")
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let any = object(json!({"type": "object"}));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "Echoes its text", any.clone()),
            Tool::new("job", "A task the test drives", any),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        match request.name.as_ref() {
            "echo" => Ok(text(args.get("text").and_then(Value::as_str).unwrap_or("")).into()),
            "job" => {
                let poll = args
                    .get("poll_ms")
                    .and_then(Value::as_u64)
                    .unwrap_or(30_000);
                let started = self.started.clone();
                let spec = TaskSpec::new()
                    .with_status_message("Queued")
                    .with_poll_interval(Duration::from_millis(poll))
                    .with_start(move |id| {
                        let _ = started.send(id);
                    });
                let ctx = context
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(TaskContext::from_parts)
                    .ok_or_else(|| ErrorData::internal_error("no layer", None))?;
                ctx.create(spec)
                    .map_err(|refused| ErrorData::internal_error(refused.to_string(), None))?;
                Ok(text("replaced by the task").into())
            }
            "confirm_first" => {
                // One input_required round (MRTR) before the result.
                let yes = request
                    .input_responses
                    .as_ref()
                    .and_then(|answers| answers.get("go"))
                    .map(|answer| answer["content"]["confirm"] == json!(true));
                match (request.request_state.as_deref(), yes) {
                    (Some("round-1"), Some(yes)) => Ok(text(format!("confirmed: {yes}")).into()),
                    _ => {
                        let ask: InputRequiredResult = serde_json::from_value(json!({
                            "resultType": "input_required",
                            "inputRequests": {"go": AskRequest::confirm("Go?", "confirm").as_json()},
                            "requestState": "round-1",
                        }))
                        .unwrap();
                        Ok(ask.into())
                    }
                }
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

fn stateless<H: ServerHandler + Clone + Send + Sync + 'static>(
    handler: H,
    json_response: bool,
) -> StreamableHttpService<H, NeverSessionManager> {
    StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_stateless_protocol_metadata_required(true)
            .with_json_response(json_response)
            .with_sse_keep_alive(None)
            .disable_allowed_hosts(),
    )
}

/// How the test server treats `subscriptions/listen`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ListenMode {
    /// The layer serves it.
    Serve,
    /// HTTP 404, -32601: a server without listen.
    Refuse,
    /// The stream ends after its first chunk (the acknowledgment).
    DropAfterAck,
}

/// One request as the server saw it: `Mcp-Method`, `Mcp-Name`, `Authorization`.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    name: Option<String>,
    authorization: Option<String>,
    protocol_version: Option<String>,
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Seen>>>);

impl Log {
    fn record<B>(&self, request: &Request<B>) {
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        self.0.lock().unwrap().push(Seen {
            method: header("mcp-method").unwrap_or_default(),
            name: header("mcp-name"),
            authorization: header("authorization"),
            protocol_version: header("mcp-protocol-version"),
        });
    }

    fn count(&self, method: &str) -> usize {
        self.seen(method).len()
    }

    fn seen(&self, method: &str) -> Vec<Seen> {
        let log = self.0.lock().unwrap();
        log.iter().filter(|s| s.method == method).cloned().collect()
    }
}

/// A task followed in the background: the follow's outcome to come, each state it
/// reports, and the task's id.
type Followed = (
    tokio::task::JoinHandle<Result<Value, ClientError>>,
    mpsc::UnboundedReceiver<Reported>,
    TaskId,
);

struct Layered {
    server: TestServer,
    tasks: Tasks,
    started: mpsc::UnboundedReceiver<TaskId>,
    log: Log,
}

impl Layered {
    fn client(&self) -> Client {
        Client::new(&self.server.url)
            .unwrap()
            .with_bearer_token("alice")
            .unwrap()
    }

    /// The id of the next task the `job` tool made.
    async fn next_task(&mut self) -> TaskId {
        wait::recv("a task to start", &mut self.started).await
    }

    /// Calls the `job` tool with `arguments` and follows the task it becomes in
    /// the background.
    async fn follow_job(&mut self, arguments: Value) -> Followed {
        self.follow_job_as(self.client(), arguments).await
    }

    /// As [`follow_job`](Self::follow_job), through `client`.
    async fn follow_job_as(&mut self, client: Client, arguments: Value) -> Followed {
        let call = client.call_tool("job", arguments).await.unwrap();
        let (callback, seen) = statuses();
        let follow = tokio::spawn(task_of(call).on_status(callback).wait());
        (follow, seen, self.next_task().await)
    }
}

type Body = UnsyncBoxBody<Bytes, BoxError>;

async fn layered(mode: ListenMode) -> Layered {
    layered_with(mode, true).await
}

/// The layered server; the rmcp server answers with JSON, or with SSE when
/// `json_response` is false.
async fn layered_with(mode: ListenMode, json_response: bool) -> Layered {
    let layer = TasksLayer::builder(MemoryStore::new())
        .with_anonymous_tasks()
        .with_server_info("client-fixture", "1.0.0")
        .without_janitor()
        .build()
        .unwrap();
    let (tx, started) = mpsc::unbounded_channel();
    let inner = layer.layer(stateless(Fixture { started: tx }, json_response));
    let log = Log::default();
    Layered {
        server: serve(front(inner, mode, log.clone())).await,
        tasks: layer.tasks(),
        started,
        log,
    }
}

/// `inner` behind the demo authentication, recording each request into `log` and
/// treating `subscriptions/listen` as `mode` says.
fn front<S, B>(
    inner: S,
    mode: ListenMode,
    log: Log,
) -> impl tower::Service<
    Request<Incoming>,
    Response = Response<Body>,
    Error = BoxError,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    tower::service_fn(move |request: Request<Incoming>| {
        let (inner, log) = (inner.clone(), log.clone());
        async move {
            let request = authenticate(request);
            log.record(&request);
            let listen = request
                .headers()
                .get("mcp-method")
                .is_some_and(|m| m == "subscriptions/listen");
            if listen && mode == ListenMode::Refuse {
                let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}"#;
                let response = Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .header("content-type", "application/json")
                    .body(full(body))
                    .unwrap();
                return Ok::<_, BoxError>(response);
            }
            let response = inner.oneshot(request).await.map_err(Into::into)?;
            let (parts, body) = response.into_parts();
            let mut body = Box::pin(body);
            if listen && mode == ListenMode::DropAfterAck {
                let first = body
                    .frame()
                    .await
                    .and_then(|f| f.ok())
                    .and_then(|f| f.into_data().ok());
                return Ok(Response::from_parts(parts, full(first.unwrap_or_default())));
            }
            Ok(Response::from_parts(
                parts,
                body.map_err(Into::into).boxed_unsync(),
            ))
        }
    })
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A status and its message, as the status callback saw them.
type Reported = (TaskStatus, Option<String>);

/// A status callback sending each state it sees to the test.
fn statuses() -> (
    impl FnMut(&TaskSnapshot) + Send + 'static,
    mpsc::UnboundedReceiver<Reported>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let callback = move |state: &TaskSnapshot| {
        let _ = tx.send((state.status, state.status_message.clone()));
    };
    (callback, rx)
}

fn task_of<S: std::fmt::Debug>(call: ToolCall<S>) -> mcp_tasks::client::TaskFollower<S> {
    match call {
        ToolCall::Task(task) => *task,
        other => panic!("expected a task, got {other:?}"),
    }
}

/// Answers yes to every yes/no question, and records each question it was asked.
#[derive(Clone, Default)]
struct Yes(Arc<Mutex<Vec<(String, Question)>>>);

impl InputHandler for Yes {
    fn capabilities(&self) -> Value {
        json!({"elicitation": {"form": {}}})
    }

    fn answer<'a>(
        &'a self,
        key: &'a str,
        question: &'a Question,
    ) -> BoxFuture<'a, Result<Answer, BoxError>> {
        self.0
            .lock()
            .unwrap()
            .push((key.to_owned(), question.clone()));
        let answer = match question.confirm_field() {
            Some(field) => Ok(Answer::confirm(field, true)),
            None => Err("not a yes/no question".into()),
        };
        Box::pin(std::future::ready(answer))
    }
}

// ---------------------------------------------------------------------------
// Against the layer

#[tokio::test]
async fn a_tool_that_answers_at_once_gives_its_result() {
    let server = layered(ListenMode::Serve).await;
    let call = server
        .client()
        .call_tool("echo", json!({"text": "hi"}))
        .await
        .unwrap();
    let ToolCall::Complete(result) = call else {
        panic!("expected the result at once");
    };
    assert_eq!(result["content"][0]["text"], "hi");
    assert_eq!(result["resultType"], "complete");
    let seen = &server.log.seen("tools/call")[0];
    assert_eq!(seen.name.as_deref(), Some("echo"));
    assert_eq!(seen.authorization.as_deref(), Some("Bearer alice"));
    assert_eq!(seen.protocol_version.as_deref(), Some("2026-07-28"));
}

#[tokio::test]
async fn a_task_is_followed_to_its_result_over_listen() {
    let mut server = layered(ListenMode::Serve).await;
    // A 30 s polling interval: only notifications can bring the changes in time.
    let (follow, mut seen, id) = server.follow_job(json!({"poll_ms": 30_000})).await;

    let first = wait::recv("the first state", &mut seen).await;
    assert_eq!(first, (TaskStatus::Working, Some("Queued".into())));
    wait::until("the listen stream is open", || {
        server.log.count("subscriptions/listen") == 1
    })
    .await;
    // The first state is reported once the stream is open and the state re-read.
    server.tasks.progress(&id, "Half way").await.unwrap();
    assert_eq!(
        wait::recv("progress", &mut seen).await,
        (TaskStatus::Working, Some("Half way".into()))
    );
    server.tasks.complete(&id, text("all done")).await.unwrap();
    let result = wait::within("the result", follow).await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "all done");
    assert_eq!(
        wait::recv("the end", &mut seen).await.0,
        TaskStatus::Completed
    );
    assert_eq!(server.log.count("subscriptions/listen"), 1);
    assert!(
        server.log.count("tasks/get") <= 1,
        "it polled instead of listening"
    );
    // tasks/* carry the task id in Mcp-Name.
    for get in server.log.seen("tasks/get") {
        assert_eq!(get.name.as_deref(), Some(id.to_string().as_str()));
    }
}

#[tokio::test]
async fn a_refused_listen_falls_back_to_polling_at_the_servers_interval() {
    let mut server = layered(ListenMode::Refuse).await;
    let (follow, mut seen, id) = server.follow_job(json!({"poll_ms": 60})).await;
    assert_eq!(
        wait::recv("the first state", &mut seen).await.0,
        TaskStatus::Working
    );
    server.tasks.progress(&id, "Half way").await.unwrap();
    assert_eq!(
        wait::recv("progress, polled", &mut seen).await,
        (TaskStatus::Working, Some("Half way".into()))
    );
    server.tasks.complete(&id, text("polled")).await.unwrap();
    let result = wait::within("the result", follow).await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "polled");
    assert_eq!(server.log.count("subscriptions/listen"), 1);
    assert!(server.log.count("tasks/get") >= 2);
}

#[tokio::test]
async fn a_listen_stream_that_drops_falls_back_to_polling() {
    let mut server = layered(ListenMode::DropAfterAck).await;
    let (follow, _, id) = server.follow_job(json!({"poll_ms": 60})).await;
    wait::until("the listen stream was opened", || {
        server.log.count("subscriptions/listen") == 1
    })
    .await;
    let gets = server.log.count("tasks/get");
    wait::until("it polls", || server.log.count("tasks/get") > gets + 1).await;
    server
        .tasks
        .complete(&id, text("after the drop"))
        .await
        .unwrap();
    let result = wait::within("the result", follow).await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "after the drop");
}

#[tokio::test]
async fn a_question_is_answered_once_by_the_handler() {
    let mut server = layered(ListenMode::Serve).await;
    let handler = Yes::default();
    let client = server.client().with_input_handler(handler.clone());
    let (follow, mut seen, id) = server
        .follow_job_as(client, json!({"poll_ms": 30_000}))
        .await;
    assert_eq!(
        wait::recv("the first state", &mut seen).await.0,
        TaskStatus::Working
    );

    let ask = AskRequests::new()
        .with("go", AskRequest::confirm("Go on?", "confirm"))
        .with_status_message("Waiting for an answer");
    server.tasks.require_input(&id, ask).await.unwrap();
    let answers = wait::within("the answer", server.tasks.wait_for_input(&id))
        .await
        .unwrap();
    assert!(answers.confirmed("go", "confirm"));
    server.tasks.complete(&id, text("went on")).await.unwrap();
    let result = wait::within("the result", follow).await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "went on");

    let asked = handler.0.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "each key is asked once: {asked:?}");
    assert_eq!(asked[0].0, "go");
    assert!(matches!(&asked[0].1, Question::Form { message, .. } if message == "Go on?"));
    assert_eq!(server.log.count("tasks/update"), 1);
    // The handler's capabilities were declared, beside the extension: the layer
    // relayed the request (it would have refused a client without the extension).
    let states: Vec<_> = std::iter::from_fn(|| seen.try_recv().ok()).collect();
    assert!(states.contains(&(
        TaskStatus::InputRequired,
        Some("Waiting for an answer".into())
    )));
}

#[tokio::test]
async fn input_required_rounds_before_a_task_are_answered_and_retried() {
    let server = layered(ListenMode::Serve).await;
    let handler = Yes::default();
    let client = server.client().with_input_handler(handler.clone());
    let result = client
        .call_tool_to_end("confirm_first", json!({}))
        .await
        .unwrap();
    assert_eq!(result["content"][0]["text"], "confirmed: true");
    assert_eq!(server.log.count("tools/call"), 2);
    assert_eq!(handler.0.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn replies_over_sse_are_read() {
    let mut server = layered_with(ListenMode::Serve, false).await;
    let call = server
        .client()
        .call_tool("echo", json!({"text": "streamed"}))
        .await
        .unwrap();
    let ToolCall::Complete(result) = call else {
        panic!("expected the result at once");
    };
    assert_eq!(result["content"][0]["text"], "streamed");
    let (follow, _, id) = server.follow_job(json!({})).await;
    server.tasks.complete(&id, text("over SSE")).await.unwrap();
    let result = wait::within("the result", follow).await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "over SSE");
}

#[tokio::test]
async fn a_question_the_handler_cannot_answer_cancels_the_task() {
    let mut server = layered(ListenMode::Serve).await;
    let client = server.client().with_input_handler(Yes::default());
    let (follow, _, id) = server.follow_job_as(client, json!({})).await;
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    let ask = AskRequests::new().with("name", AskRequest::form("Your name?", schema));
    server.tasks.require_input(&id, ask).await.unwrap();
    let error = wait::within("the follow ends", follow)
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(error, ClientError::Input(_)), "{error:?}");
    let end = wait::within("the cancel", server.tasks.ended(&id)).await;
    assert_eq!(end, TaskEnd::Cancelled);
}

#[tokio::test]
async fn a_failed_task_is_a_typed_error() {
    let mut server = layered(ListenMode::Serve).await;
    let (follow, _, id) = server.follow_job(json!({})).await;
    server
        .tasks
        .fail(&id, RpcError::internal("backend down"))
        .await
        .unwrap();
    let error = wait::within("the failure", follow)
        .await
        .unwrap()
        .unwrap_err();
    let ClientError::TaskFailed { error, .. } = error else {
        panic!("expected TaskFailed, got {error:?}");
    };
    assert_eq!((error.code(), error.message()), (-32603, "backend down"));
}

#[tokio::test]
async fn json_rpc_errors_are_typed() {
    let server = layered(ListenMode::Serve).await;
    let client = server.client();
    let error = client
        .get_task(&TaskId::random().to_string())
        .await
        .unwrap_err();
    assert_eq!(error.rpc_error().map(RpcError::code), Some(-32602));
    let error = client.call_tool("nope", json!({})).await.unwrap_err();
    assert!(matches!(error, ClientError::Rpc(_)), "{error:?}");
    // Nothing listening: a transport error.
    let closed = Client::new("http://127.0.0.1:9/mcp").unwrap();
    let error = closed.call_tool("echo", json!({})).await.unwrap_err();
    assert!(matches!(error, ClientError::Transport(_)), "{error:?}");
}

#[tokio::test]
async fn dropping_the_follow_cancels_the_task() {
    let mut server = layered(ListenMode::Serve).await;
    let (follow, mut seen, id) = server.follow_job(json!({})).await;
    wait::recv("the first state", &mut seen).await;
    follow.abort();
    let end = wait::within("the cancel", server.tasks.ended(&id)).await;
    assert_eq!(end, TaskEnd::Cancelled);
    assert_eq!(server.log.count("tasks/cancel"), 1);
}

#[tokio::test]
async fn a_detached_task_resumes_from_its_serialized_reference() {
    let mut server = layered(ListenMode::Serve).await;
    let call = server
        .client()
        .call_tool("job", json!({"poll_ms": 80}))
        .await
        .unwrap();
    let saved = serde_json::to_string(&task_of(call).detach()).unwrap();
    let id = server.next_task().await;
    assert!(!saved.contains("alice"), "no credential in the reference");
    assert_eq!(
        server.tasks.status(&id).await.unwrap().status,
        TaskStatus::Working
    );
    assert_eq!(server.log.count("tasks/cancel"), 0);

    // A new client, as after a restart, with the same token.
    let task: TaskRef = serde_json::from_str(&saved).unwrap();
    assert_eq!(task.task_id(), id.to_string());
    assert_eq!(task.poll_interval(), Duration::from_millis(80));
    let (callback, mut seen) = statuses();
    let follow = tokio::spawn(server.client().resume(task).on_status(callback).wait());
    assert_eq!(
        wait::recv("the resumed state", &mut seen).await.0,
        TaskStatus::Working
    );
    server.tasks.complete(&id, text("resumed")).await.unwrap();
    let result = wait::within("the result", follow).await.unwrap().unwrap();
    assert_eq!(result["content"][0]["text"], "resumed");

    // Another principal cannot follow it: the task looks missing.
    let other = Client::new(&server.server.url)
        .unwrap()
        .with_bearer_token("mallory")
        .unwrap();
    let error = other
        .resume(TaskRef::new(id.to_string()))
        .poll_only()
        .wait()
        .await;
    assert_eq!(
        error.unwrap_err().rpc_error().map(RpcError::code),
        Some(-32602)
    );
}

// ---------------------------------------------------------------------------
// Against rmcp's own task support (rmcp::task_manager), no layer

/// An rmcp server running tasks with rmcp's `TaskManager`: `sum` completes after a
/// moment, `ask` asks a yes/no question, `slow` runs until cancelled, `broken` fails.
#[derive(Clone)]
struct Native {
    tasks: TaskManager,
    started: mpsc::UnboundedSender<String>,
}

impl ServerHandler for Native {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("rmcp-native", "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let declared = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if !declared {
            return Err(ErrorData::invalid_params("tasks only", None));
        }
        let options = TaskOptions::new().with_poll_interval_ms(20);
        let task = match request.name.as_ref() {
            "sum" => self.tasks.spawn(options, |_ctx| {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(text("5"))
                })
            }),
            "ask" => self.tasks.spawn(options, |ctx| {
                Box::pin(async move {
                    let question = serde_json::from_value(json!({
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": "Proceed?", "requestedSchema": {
                            "type": "object",
                            "properties": {"proceed": {"type": "boolean"}},
                            "required": ["proceed"],
                        }},
                    }))
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                    let answer = ctx.request_input("proceed-1", question).await?;
                    Ok(text(format!("proceed: {}", answer["content"]["proceed"])))
                })
            }),
            "slow" => self.tasks.spawn(options, |ctx| {
                Box::pin(async move {
                    ctx.cancelled().await;
                    Err(TaskExit::Cancelled)
                })
            }),
            "broken" => self.tasks.spawn(options, |_ctx| {
                Box::pin(async move {
                    Err(TaskExit::Error(ErrorData::internal_error("it broke", None)))
                })
            }),
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        let _ = self.started.send(task.task_id.clone());
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }
}

async fn native() -> (
    TestServer,
    TaskManager,
    mpsc::UnboundedReceiver<String>,
    Log,
) {
    let tasks = TaskManager::new();
    let (tx, rx) = mpsc::unbounded_channel();
    let native = Native {
        tasks: tasks.clone(),
        started: tx,
    };
    let log = Log::default();
    let server = serve(front(
        stateless(native, true),
        ListenMode::Serve,
        log.clone(),
    ))
    .await;
    (server, tasks, rx, log)
}

#[tokio::test]
async fn rmcp_native_tasks_complete_answer_fail_and_cancel() {
    let (server, manager, mut started, log) = native().await;
    let client = Client::new(&server.url)
        .unwrap()
        .with_input_handler(Yes::default());

    // Completed. rmcp's listen knows no `taskIds` (its default handler refuses
    // listen with -32601), so the client polls.
    let result = wait::within("sum", client.call_tool_to_end("sum", json!({})))
        .await
        .unwrap();
    assert_eq!(result["content"][0]["text"], "5");
    assert_eq!(log.count("subscriptions/listen"), 1);
    assert!(log.count("tasks/get") >= 1);

    // A question, answered through tasks/update.
    let result = wait::within("ask", client.call_tool_to_end("ask", json!({})))
        .await
        .unwrap();
    assert_eq!(result["content"][0]["text"], "proceed: true");

    // Failed, with rmcp's error.
    let error = wait::within("broken", client.call_tool_to_end("broken", json!({})))
        .await
        .unwrap_err();
    let ClientError::TaskFailed { error, .. } = error else {
        panic!("expected TaskFailed, got {error:?}");
    };
    assert_eq!((error.code(), error.message()), (-32603, "it broke"));

    // Cancelled when the follow is dropped.
    let call = client.call_tool("slow", json!({})).await.unwrap();
    let follow = tokio::spawn(task_of(call).wait());
    let mut ids = Vec::new();
    while let Ok(id) = started.try_recv() {
        ids.push(id);
    }
    let slow = ids.pop().expect("the slow task's id");
    wait::until("the slow task runs", || {
        manager
            .get_task(&slow)
            .is_ok_and(|t| serde_json::to_value(&t).unwrap()["status"] == "working")
    })
    .await;
    follow.abort();
    wait::until("rmcp sees the task cancelled", || {
        manager
            .get_task(&slow)
            .is_ok_and(|t| serde_json::to_value(&t).unwrap()["status"] == "cancelled")
    })
    .await;
}

#[tokio::test]
async fn an_rmcp_native_task_resumes_and_cancels_explicitly() {
    let (server, _manager, _started, _log) = native().await;
    let client = Client::new(&server.url).unwrap();
    let call = client.call_tool("slow", json!({})).await.unwrap();
    let task: TaskRef =
        serde_json::from_str(&serde_json::to_string(&task_of(call).detach()).unwrap()).unwrap();
    let state = wait::within("cancel", client.resume(task).cancel())
        .await
        .unwrap();
    assert_eq!(state.status, TaskStatus::Cancelled);
}

// ---------------------------------------------------------------------------
// examples/client.rs against examples/quickstart.rs, both as child processes

/// The quickstart on 127.0.0.1, port 0 (in-memory store), as its own process;
/// killed when dropped.
fn quickstart() -> Proc {
    procs::spawn(
        "quickstart",
        &[],
        &[("RUST_LOG", "off"), ("MCP_STORE", "memory")],
    )
}

/// The example client calling `tool` with `args` on `server`, stdin and stdout piped.
fn example_client(server: &Proc, tool: &str, args: &str) -> tokio::process::Child {
    tokio::process::Command::new(procs::build("client", &[]))
        .args([tool, args])
        .env("MCP_URL", &server.url)
        .env("MCP_TOKEN", "alice")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the example client starts")
}

#[tokio::test]
async fn the_example_answers_a_question_and_prints_the_result_last() {
    use tokio::io::AsyncWriteExt as _;
    let server = quickstart();
    let mut client = example_client(&server, "deploy", r#"{"target": "prod"}"#);
    let mut stdin = client.stdin.take().unwrap();
    stdin.write_all(b"y\n").await.unwrap();
    drop(stdin);
    let output = wait::within("the example ends", client.wait_with_output())
        .await
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains("Deploy to prod? [y/n]"), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.contains(&"input_required: Waiting for confirmation"),
        "{stdout}"
    );
    let result: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(result["content"][0]["text"], "Deployed to prod");
    assert_eq!(lines[lines.len() - 2], "completed");
    drop(server);
}

#[cfg(unix)]
#[tokio::test]
async fn the_example_cancels_the_task_on_ctrl_c_and_exits_130() {
    use tokio::io::AsyncBufReadExt as _;
    let server = quickstart();
    let mut client = example_client(&server, "build", r#"{"seconds": 60}"#);
    let mut lines = tokio::io::BufReader::new(client.stdout.take().unwrap()).lines();
    let first = wait::within("the first status", lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, "working: Queued");
    let pid = client.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut rest = Vec::new();
    while let Some(line) = wait::within("the rest", lines.next_line()).await.unwrap() {
        rest.push(line);
    }
    let status = wait::within("the exit", client.wait()).await.unwrap();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    let last = rest.last().expect("the final status");
    assert!(last.starts_with("cancelled"), "{rest:?}");
    drop(server);
}
