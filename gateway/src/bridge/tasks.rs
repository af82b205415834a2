//! An older upstream's own tasks, shown to 2026-07-28 clients as tasks of that
//! revision.
//!
//! A 2026-07-28 `tools/call` of a principal that declared the tasks extension, for
//! a tool that the upstream lists with `execution.taskSupport` `"required"`, goes
//! upstream task-augmented (`params.task`) on the principal's session, and the
//! upstream's 2025-11-25 `CreateTaskResult` (`{task}`) becomes the flat 2026-07-28
//! one (`resultType: "task"`, `ttlMs`, `pollIntervalMs`) under the upstream's task
//! id, which `federate.rs` wraps in a handle. A tool listed `"optional"` is called
//! as before: the layer's `Auto` mode makes a task of it when it runs long, and
//! the tool runs on the upstream as one request, its questions relayed as MRTR
//! rounds. An anonymous caller's call is never an upstream task: its session ends
//! with its request, and the task with it.
//!
//! While the task runs, the bridge holds the upstream's `tasks/result` open on the
//! task's session: the questions the upstream sends on that stream
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`) are held as the
//! task's input requests, under keys never reused, and its final message is kept
//! as the task's outcome. Then, for that task id and only for the principal that
//! created it (any other id, or another caller, gets -32602 "Failed to retrieve
//! task: Task not found", as the layer answers a missing task):
//!
//! - `tasks/get` asks the upstream's `tasks/get` for the status: a running task
//!   with questions held is `input_required` with them as `inputRequests` (and
//!   `working` without); a terminal one carries the outcome of `tasks/result`
//!   inline: a result makes it `completed` (a tool error included, which the older
//!   revision counts as `failed`), a JSON-RPC error `failed` with that `error`;
//! - `tasks/update` answers each held question named in `inputResponses` upstream
//!   (the JSON-RPC response to the upstream's request, on the task's session),
//!   ignores the other keys, and acknowledges;
//! - `tasks/cancel` sends the upstream's `tasks/cancel` and acknowledges, also
//!   when the task had ended.
//!
//! The task is remembered by this gateway process (its session with it) until the
//! upstream's TTL ends, at most a day; the upstream's own store keeps the rest.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http::header::HeaderMap;
use http::{Response, StatusCode};
use http_body_util::BodyExt as _;
use mcp_tasks::Principal;
use mcp_tasks::wire::{EXTENSION_ID, META_CLIENT_CAPABILITIES, META_SERVER_INFO, RpcError};
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use super::relay::{error_reply, json_reply, session_error};
use super::session::{Capabilities, Lease, Owner, SessionError};
use super::upstream::{self, Exchanged, MAX_MESSAGE_BYTES, Upstream, params};
use super::wire::{self, Event, Events, Kind};
use super::{Legacy, Shared};
use crate::proxy::ProxyBody;

/// The most upstream tasks remembered at once; a call past it is not made a task.
const MAX_TASKS: usize = 10_000;

/// The longest an upstream task is remembered (an unlimited TTL included).
const LONGEST_KEPT: Duration = Duration::from_secs(24 * 60 * 60);

/// How long the tools an upstream session lists are taken as known.
const TOOLS_KNOWN_FOR: Duration = Duration::from_secs(60);

/// The most pages of `tools/list` read to learn the tools' task support.
const MAX_TOOL_PAGES: usize = 20;

/// The pause before `tasks/result` is asked again after its stream ended early.
const RESULT_RETRY: Duration = Duration::from_secs(1);

/// `_meta` key by which the older revision ties a message to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The upstream tasks the bridge made for 2026-07-28 clients, and what it knows
/// of the upstream's tools.
#[derive(Default)]
pub(crate) struct Tasks {
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    /// Each tool's `execution.taskSupport`, per principal and declared capabilities
    /// (the session that listed them), and when it was learnt.
    tools: Mutex<HashMap<SessionKey, Listed>>,
}

/// A session's principal and declared capabilities.
type SessionKey = (Principal, Capabilities);

/// When the tools were listed, and each one's `execution.taskSupport`.
type Listed = (Instant, HashMap<String, String>);

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("tasks", &lock(&self.entries).len())
            .finish_non_exhaustive()
    }
}

/// One upstream task: whose it is, the session it lives on, and what its
/// `tasks/result` stream brought.
struct Entry {
    owner: Principal,
    lease: Lease,
    until: Instant,
    state: Arc<Mutex<State>>,
    driver: JoinHandle<()>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A question of the upstream, held for the client.
struct Question {
    /// The upstream's id of its request.
    id: Value,
    /// The request as an input request (`{method, params}`).
    request: Value,
}

#[derive(Default)]
struct State {
    /// The questions not answered yet, by key.
    questions: BTreeMap<String, Question>,
    /// The number of questions held so far: keys are never reused.
    asked: u64,
    /// The upstream's answer to `tasks/result`: the result, or the error.
    outcome: Option<Value>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tasks {
    /// `id`'s task, if it is `owner`'s and still remembered.
    fn find(&self, id: &str, owner: &Owner) -> Option<Arc<Entry>> {
        let mut entries = lock(&self.entries);
        let entry = entries.get(id)?;
        if entry.until <= Instant::now() {
            entries.remove(id);
            return None;
        }
        (Some(&entry.owner) == owner.as_ref()).then(|| entry.clone())
    }

    /// Whether one more task fits, after forgetting the expired ones.
    fn has_room(&self) -> bool {
        let mut entries = lock(&self.entries);
        if entries.len() >= MAX_TASKS {
            let now = Instant::now();
            entries.retain(|_, entry| entry.until > now);
        }
        entries.len() < MAX_TASKS
    }
}

/// Serves a bridged 2026-07-28 request that concerns an upstream task: `tasks/get`,
/// `tasks/update` and `tasks/cancel` always, a `tools/call` when it is made one;
/// any other request is given back.
pub(crate) async fn route(
    shared: &Arc<Shared>,
    base: &HeaderMap,
    message: Map<String, Value>,
    legacy: &Legacy,
    owner: &Owner,
) -> Result<Response<ProxyBody>, Map<String, Value>> {
    let Some(id) = message.get("id").cloned() else {
        return Err(message);
    };
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let task_id = params(&message)
        .and_then(|p| p.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let reply = Reply {
        id,
        server_info: &legacy.server_info,
    };
    match method.as_str() {
        "tasks/get" | "tasks/update" | "tasks/cancel" => {
            let Some(task_id) = task_id else {
                return Ok(reply.error(&RpcError::invalid_params(
                    "Invalid params: taskId must be a string",
                )));
            };
            let Some(entry) = shared.tasks.find(&task_id, owner) else {
                return Ok(reply.error(&not_found()));
            };
            let upstream = &shared.upstream;
            let headers = entry.lease.session.headers(base);
            Ok(match method.as_str() {
                "tasks/get" => get(upstream, headers, &task_id, &entry, &reply).await,
                "tasks/update" => update(upstream, headers, &message, &entry, &reply).await,
                _ => cancel(upstream, headers, &task_id, &reply).await,
            })
        }
        "tools/call" if shared.upstream_tasks && declares_tasks(&message) => {
            let Some(principal) = owner else {
                return Err(message);
            };
            call(shared, base, message, principal, &reply).await
        }
        _ => Err(message),
    }
}

/// The client's id and the upstream's server info, for the answers.
struct Reply<'a> {
    id: Value,
    server_info: &'a Value,
}

impl Reply<'_> {
    /// A 2026-07-28 result: `result` with `_meta.serverInfo`.
    fn result(&self, mut result: Map<String, Value>) -> Response<ProxyBody> {
        if let Value::Object(meta) = result
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()))
        {
            meta.entry(META_SERVER_INFO)
                .or_insert_with(|| self.server_info.clone());
        }
        let message = json!({"jsonrpc": "2.0", "id": self.id, "result": result});
        json_reply(&message, StatusCode::OK)
    }

    fn acknowledged(&self) -> Response<ProxyBody> {
        let mut ack = Map::new();
        ack.insert("resultType".into(), "complete".into());
        self.result(ack)
    }

    fn error(&self, error: &RpcError) -> Response<ProxyBody> {
        error_reply(error, &self.id)
    }

    /// The upstream's JSON-RPC error, under the client's id.
    fn upstream_error(&self, error: &Value) -> Response<ProxyBody> {
        let message = json!({"jsonrpc": "2.0", "id": self.id, "error": error});
        json_reply(&message, StatusCode::OK)
    }
}

/// What a missing task answers: the layer's words.
fn not_found() -> RpcError {
    RpcError::invalid_params("Failed to retrieve task: Task not found")
}

/// Whether a request declares the tasks extension.
fn declares_tasks(message: &Map<String, Value>) -> bool {
    params(message)
        .and_then(|p| p.get("_meta"))
        .and_then(|meta| meta.get(META_CLIENT_CAPABILITIES))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(EXTENSION_ID))
        .is_some_and(Value::is_object)
}

/// A fresh request of the bridge's own.
fn request(upstream: &Upstream, method: &str, params: Value) -> (u64, Value) {
    let id = upstream.next_id();
    let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    (id, message)
}

/// Sends `message` on a session and reads its response: `Err` with the answer for
/// the client when the upstream gave none (the proxy's failure, a 401/403, a
/// server not serving, or an HTTP error without a JSON-RPC response), and
/// `Err(Status(404))` when the session is gone (HTTP 404, or a 400 that says so).
async fn ask(upstream: &Upstream, headers: HeaderMap, message: &Value) -> Result<Value, Answered> {
    match upstream.exchange(headers, message).await {
        Exchanged::Refused(response) => Err(Answered::Refused(response)),
        Exchanged::Answered {
            status, message, ..
        } if session_gone(status, message.as_ref()) => Err(Answered::Status(StatusCode::NOT_FOUND)),
        Exchanged::Answered {
            message: Some(answer),
            ..
        } if answer.get("result").is_some() || answer.get("error").is_some() => Ok(answer),
        Exchanged::Answered { status, .. } => Err(Answered::Status(status)),
    }
}

/// Whether an answer says that the session is gone.
fn session_gone(status: StatusCode, message: Option<&Value>) -> bool {
    let body = message.map(Value::to_string).unwrap_or_default();
    wire::is_session_gone(status.as_u16(), body.as_bytes())
}

/// [`ask`] on `lease`'s session, opened again once if the upstream forgot it.
async fn ask_renewing(
    shared: &Shared,
    lease: &mut Lease,
    base: &HeaderMap,
    message: &Value,
) -> Result<Value, Answered> {
    match ask(&shared.upstream, lease.session.headers(base), message).await {
        Err(Answered::Status(StatusCode::NOT_FOUND)) => {
            if let Err(e) = shared.sessions.renew(lease, base).await {
                return Err(Answered::Session(e));
            }
            ask(&shared.upstream, lease.session.headers(base), message).await
        }
        asked => asked,
    }
}

/// Why [`ask`] had no response.
enum Answered {
    Refused(Response<ProxyBody>),
    Status(StatusCode),
    /// No session could be opened again.
    Session(SessionError),
}

impl Answered {
    /// The client's answer: the response passed on, or (for a request about a
    /// task, `about_task`) a missing task when the upstream's session, and so its
    /// task, is gone.
    fn reply(self, reply: &Reply<'_>, about_task: bool) -> Response<ProxyBody> {
        match self {
            Answered::Refused(response) => response,
            Answered::Session(e) => session_error(e, &reply.id),
            Answered::Status(StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST) if about_task => {
                reply.error(&not_found())
            }
            Answered::Status(status) => {
                tracing::warn!(%status, "the upstream answered a task request without a response");
                let message = wire::error_message(
                    &reply.id,
                    RpcError::INTERNAL_ERROR,
                    "The upstream's answer held no response",
                );
                json_reply(&message, StatusCode::BAD_GATEWAY)
            }
        }
    }
}

/// A `tools/call` of a tool the upstream runs only as a task: sent task-augmented,
/// its task remembered; given back when the tool is not one, or no task fits.
async fn call(
    shared: &Arc<Shared>,
    base: &HeaderMap,
    message: Map<String, Value>,
    principal: &Principal,
    reply: &Reply<'_>,
) -> Result<Response<ProxyBody>, Map<String, Value>> {
    let Some(tool) = params(&message)
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return Err(message);
    };
    if params(&message).is_some_and(|p| p.contains_key("requestState")) {
        return Err(message);
    }
    let capabilities = Capabilities::of(&message);
    let owner = Some(principal.clone());
    let mut lease = match shared.sessions.acquire(&owner, &capabilities, base).await {
        Ok(lease) => lease,
        Err(e) => return Ok(session_error(e, &reply.id)),
    };
    let key = (principal.clone(), capabilities);
    let support = match task_support(shared, &mut lease, base, &key, &tool).await {
        Ok(support) => support,
        Err(answered) => return Ok(answered.reply(reply, false)),
    };
    if support.as_deref() != Some("required") || !shared.tasks.has_room() {
        return Err(message);
    }
    let id = shared.upstream.next_id();
    let mut legacy = wire::to_legacy_request(message, Some(id));
    if let Some(Value::Object(params)) = legacy.get_mut("params") {
        params.insert("task".into(), json!({}));
    }
    let legacy = Value::Object(legacy);
    let answer = match ask_renewing(shared, &mut lease, base, &legacy).await {
        Ok(answer) => answer,
        Err(answered) => return Ok(answered.reply(reply, false)),
    };
    if let Some(error) = answer.get("error") {
        return Ok(reply.upstream_error(error));
    }
    let result = &answer["result"];
    let Some(task) = result.get("task").filter(|t| t["taskId"].is_string()) else {
        // The upstream answered at once: its result as any bridged one.
        let Value::Object(answer) = answer else {
            unreachable!("a response with a result is an object")
        };
        let answer = wire::to_modern_response(answer, &reply.id, reply.server_info);
        return Ok(json_reply(&Value::Object(answer), StatusCode::OK));
    };
    let task_id = task["taskId"].as_str().unwrap_or_default().to_owned();
    let mut created = modern_task(task);
    if created["status"] == "input_required" {
        created.insert("status".into(), "working".into());
    }
    created.insert("resultType".into(), "task".into());
    remember(shared, base, task_id, task, principal.clone(), lease);
    tracing::debug!(%tool, "the upstream made a task of a call");
    Ok(reply.result(created))
}

/// `tool`'s `execution.taskSupport` as the session lists it (`None`: not listed or
/// without one), from what was learnt in the last minute or a fresh `tools/list`.
async fn task_support(
    shared: &Shared,
    lease: &mut Lease,
    base: &HeaderMap,
    key: &SessionKey,
    tool: &str,
) -> Result<Option<String>, Answered> {
    if let Some((at, tools)) = lock(&shared.tasks.tools).get(key)
        && at.elapsed() < TOOLS_KNOWN_FOR
    {
        return Ok(tools.get(tool).cloned());
    }
    let mut tools = HashMap::new();
    let mut cursor = None;
    for _ in 0..MAX_TOOL_PAGES {
        let params = match cursor.take() {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let (_, list) = request(&shared.upstream, "tools/list", params);
        let answer = ask_renewing(shared, lease, base, &list).await?;
        if answer.get("error").is_some() {
            // Nothing learnt: the call goes as any other, and the next one asks again.
            return Ok(None);
        }
        let result = &answer["result"];
        for listed in result["tools"].as_array().into_iter().flatten() {
            if let (Some(name), Some(support)) = (
                listed["name"].as_str(),
                listed["execution"]["taskSupport"].as_str(),
            ) {
                tools.insert(name.to_owned(), support.to_owned());
            }
        }
        match result["nextCursor"].as_str() {
            Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
            _ => break,
        }
    }
    let support = tools.get(tool).cloned();
    let mut known = lock(&shared.tasks.tools);
    known.retain(|_, (at, _)| at.elapsed() < TOOLS_KNOWN_FOR);
    known.insert(key.clone(), (Instant::now(), tools));
    Ok(support)
}

/// Remembers a task the upstream made, and starts following its `tasks/result`.
fn remember(
    shared: &Shared,
    base: &HeaderMap,
    task_id: String,
    task: &Value,
    owner: Principal,
    lease: Lease,
) {
    let kept = task["ttl"]
        .as_u64()
        .filter(|ttl| *ttl > 0)
        .map_or(LONGEST_KEPT, |ttl| {
            Duration::from_millis(ttl).min(LONGEST_KEPT)
        });
    let until = Instant::now() + kept;
    let state = Arc::new(Mutex::new(State::default()));
    let driver = tokio::spawn(follow(
        shared.upstream.clone(),
        lease.session.headers(base),
        task_id.clone(),
        state.clone(),
        until,
    ));
    let entry = Arc::new(Entry {
        owner,
        lease,
        until,
        state,
        driver,
    });
    let mut entries = lock(&shared.tasks.entries);
    let now = Instant::now();
    entries.retain(|_, entry| entry.until > now);
    entries.insert(task_id, entry);
}

/// Holds the upstream's `tasks/result` open for the task's questions and outcome,
/// asking again when its stream ends before the outcome, until the upstream no
/// longer knows the task, or `until` (the task forgotten aborts it too).
async fn follow(
    upstream: Arc<Upstream>,
    headers: HeaderMap,
    task_id: String,
    state: Arc<Mutex<State>>,
    until: Instant,
) {
    while Instant::now() < until {
        let (id, message) = request(&upstream, "tasks/result", json!({"taskId": task_id}));
        let response = upstream.post(headers.clone(), &message).await;
        let status = response.status();
        if status.is_success() {
            let outcome = read_outcome(&upstream, &headers, response, id, &state).await;
            if let Some(outcome) = outcome {
                lock(&state).outcome = Some(outcome);
                return;
            }
        } else if matches!(status, StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST) {
            tracing::debug!(%status, "the upstream refused tasks/result; no longer following the task");
            return;
        }
        tokio::time::sleep(RESULT_RETRY).await;
    }
}

/// Reads a `tasks/result` answer: the questions on its stream are held, and its
/// response (to request `id`) is the outcome.
async fn read_outcome(
    upstream: &Upstream,
    headers: &HeaderMap,
    response: Response<ProxyBody>,
    id: u64,
    state: &Mutex<State>,
) -> Option<Value> {
    let (head, mut body) = response.into_parts();
    if !upstream::is_event_stream(&head.headers) {
        let bytes = upstream::read_capped(body, MAX_MESSAGE_BYTES).await?;
        return serde_json::from_slice(&bytes).ok();
    }
    let mut events = Events::default();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.ok()?.into_data() else {
            continue;
        };
        events.push(&data);
        while let Some(event) = events.next_event() {
            let Event::Data(data) = event else { continue };
            let Ok(Value::Object(message)) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            match wire::kind(&message) {
                Kind::Response if message.get("id") == Some(&json!(id)) => {
                    return Some(Value::Object(message));
                }
                Kind::Request => question(upstream, headers, message, state).await,
                _ => {}
            }
        }
        if events.buffered() > MAX_MESSAGE_BYTES {
            return None;
        }
    }
    None
}

/// A request of the upstream on the task's stream: a question the client may be
/// asked is held; `ping` is answered; anything else gets a JSON-RPC error.
async fn question(
    upstream: &Upstream,
    headers: &HeaderMap,
    mut message: Map<String, Value>,
    state: &Mutex<State>,
) {
    let id = message.remove("id").unwrap_or(Value::Null);
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let reply = if method == "ping" {
        json!({"jsonrpc": "2.0", "id": id, "result": {}})
    } else if wire::RELAYED_QUESTIONS.iter().any(|(m, _)| *m == method) {
        let mut params = message.remove("params");
        if let Some(Value::Object(params)) = &mut params
            && let Some(Value::Object(meta)) = params.get_mut("_meta")
        {
            meta.remove(RELATED_TASK);
            if meta.is_empty() {
                params.remove("_meta");
            }
        }
        let request = wire::input_request(&method, params);
        let mut state = lock(state);
        state.asked += 1;
        let key = format!("q{}", state.asked);
        state.questions.insert(key, Question { id, request });
        tracing::debug!(%method, "the upstream asked a question for a task; holding it");
        return;
    } else {
        let refusal = format!("The gateway does not relay {method} requests to its clients");
        wire::error_message(&id, RpcError::METHOD_NOT_FOUND, &refusal)
    };
    let response = upstream.post(headers.clone(), &reply).await;
    if !response.status().is_success() {
        tracing::debug!(status = %response.status(), "the upstream refused a reply of the bridge");
    }
}

/// The fields of a 2026-07-28 task from a 2025-11-25 `Task`: `ttl` as `ttlMs`
/// (`null`, unlimited, when absent), `pollInterval` as `pollIntervalMs`.
fn modern_task(task: &Value) -> Map<String, Value> {
    let mut modern = Map::new();
    modern.insert("taskId".into(), task["taskId"].clone());
    modern.insert("status".into(), task["status"].clone());
    if let Some(message) = task.get("statusMessage").filter(|m| m.is_string()) {
        modern.insert("statusMessage".into(), message.clone());
    }
    let created = task["createdAt"].clone();
    let updated = match task.get("lastUpdatedAt").filter(|u| u.is_string()) {
        Some(updated) => updated.clone(),
        None => created.clone(),
    };
    modern.insert("createdAt".into(), created);
    modern.insert("lastUpdatedAt".into(), updated);
    let ttl = task["ttl"].as_u64().filter(|ttl| *ttl > 0);
    modern.insert("ttlMs".into(), ttl.map_or(Value::Null, Value::from));
    if let Some(interval) = task["pollInterval"].as_u64().filter(|i| *i > 0) {
        modern.insert("pollIntervalMs".into(), interval.into());
    }
    modern
}

/// `tasks/get`: the upstream's status, with the held questions or the outcome.
async fn get(
    upstream: &Upstream,
    headers: HeaderMap,
    task_id: &str,
    entry: &Entry,
    reply: &Reply<'_>,
) -> Response<ProxyBody> {
    let (_, message) = request(upstream, "tasks/get", json!({"taskId": task_id}));
    let answer = match ask(upstream, headers.clone(), &message).await {
        Ok(answer) => answer,
        Err(answered) => return answered.reply(reply, true),
    };
    if answer.get("error").is_some() {
        return reply.error(&not_found());
    }
    let mut task = modern_task(&answer["result"]);
    task.insert("resultType".into(), "complete".into());
    match task["status"].as_str().unwrap_or("") {
        "completed" | "failed" => {
            let held = lock(&entry.state).outcome.clone();
            let outcome = match held {
                Some(outcome) => outcome,
                None => {
                    let (_, result) = request(upstream, "tasks/result", json!({"taskId": task_id}));
                    match ask(upstream, headers, &result).await {
                        Ok(outcome) => {
                            lock(&entry.state).outcome = Some(outcome.clone());
                            outcome
                        }
                        Err(answered) => return answered.reply(reply, true),
                    }
                }
            };
            settle(&mut task, outcome);
        }
        "cancelled" => {}
        _ => {
            let state = lock(&entry.state);
            let status = if state.questions.is_empty() {
                "working"
            } else {
                let requests = state
                    .questions
                    .iter()
                    .map(|(key, q)| (key.clone(), q.request.clone()))
                    .collect();
                task.insert("inputRequests".into(), Value::Object(requests));
                "input_required"
            };
            task.insert("status".into(), status.into());
        }
    }
    reply.result(task)
}

/// A terminal task with its outcome inline: a result makes it `completed` (the
/// older revision's `failed` with a tool error included), an error `failed`.
fn settle(task: &mut Map<String, Value>, mut outcome: Value) {
    if let Some(Value::Object(mut result)) = outcome.get_mut("result").map(Value::take) {
        if let Some(Value::Object(meta)) = result.get_mut("_meta") {
            meta.remove(RELATED_TASK);
            if meta.is_empty() {
                result.remove("_meta");
            }
        }
        result
            .entry("resultType")
            .or_insert_with(|| "complete".into());
        task.insert("status".into(), "completed".into());
        task.insert("result".into(), Value::Object(result));
        return;
    }
    let error = match outcome.get_mut("error").map(Value::take) {
        Some(Value::Object(error)) if error.get("code").is_some_and(Value::is_i64) => error,
        _ => {
            let mut error = Map::new();
            error.insert("code".into(), RpcError::INTERNAL_ERROR.into());
            error.insert("message".into(), "The task failed upstream".into());
            error
        }
    };
    task.insert("status".into(), "failed".into());
    task.entry("statusMessage")
        .or_insert_with(|| "Tool execution failed".into());
    task.insert("error".into(), Value::Object(error));
}

/// `tasks/update`: each held question the client answered is answered upstream.
async fn update(
    upstream: &Upstream,
    headers: HeaderMap,
    message: &Map<String, Value>,
    entry: &Entry,
    reply: &Reply<'_>,
) -> Response<ProxyBody> {
    let Some(answers) = params(message)
        .and_then(|p| p.get("inputResponses"))
        .and_then(Value::as_object)
    else {
        return reply.error(&RpcError::invalid_params(
            "Invalid params: inputResponses must be an object",
        ));
    };
    let answered: Vec<(Value, Value)> = {
        let mut state = lock(&entry.state);
        answers
            .iter()
            .filter_map(|(key, answer)| {
                let question = state.questions.remove(key)?;
                Some((question.id, answer.clone()))
            })
            .collect()
    };
    for (id, answer) in answered {
        let response = json!({"jsonrpc": "2.0", "id": id, "result": answer});
        let sent = upstream.post(headers.clone(), &response).await;
        if !sent.status().is_success() {
            tracing::warn!(status = %sent.status(), "the upstream did not take an answer to its task's question");
        }
    }
    reply.acknowledged()
}

/// `tasks/cancel`: the upstream's own; a task that had ended is acknowledged too.
async fn cancel(
    upstream: &Upstream,
    headers: HeaderMap,
    task_id: &str,
    reply: &Reply<'_>,
) -> Response<ProxyBody> {
    let (_, message) = request(upstream, "tasks/cancel", json!({"taskId": task_id}));
    match ask(upstream, headers, &message).await {
        Ok(answer) => {
            if let Some(error) = answer.get("error") {
                tracing::debug!(code = %error["code"], "the upstream refused to cancel its task");
            }
            reply.acknowledged()
        }
        Err(answered) => answered.reply(reply, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_task_takes_the_modern_fields() {
        let task = json!({"taskId": "t1", "status": "working", "ttl": 300000,
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:01Z",
            "pollInterval": 1000, "statusMessage": "Gathering"});
        assert_eq!(
            Value::Object(modern_task(&task)),
            json!({"taskId": "t1", "status": "working", "statusMessage": "Gathering",
                "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:01Z",
                "ttlMs": 300000, "pollIntervalMs": 1000})
        );
        let unlimited = json!({"taskId": "t2", "status": "working", "ttl": null,
            "createdAt": "2026-01-01T00:00:00Z"});
        let modern = modern_task(&unlimited);
        assert!(modern["ttlMs"].is_null());
        assert_eq!(modern["lastUpdatedAt"], "2026-01-01T00:00:00Z");
        assert!(!modern.contains_key("pollIntervalMs"));
    }

    #[test]
    fn an_outcome_settles_the_task() {
        let mut task = modern_task(&json!({"taskId": "t", "status": "failed"}));
        let result = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": true,
            "_meta": {RELATED_TASK: {"taskId": "t"}}}});
        settle(&mut task, result);
        assert_eq!(task["status"], "completed");
        assert_eq!(
            task["result"],
            json!({"content": [], "isError": true, "resultType": "complete"})
        );
        let mut task = modern_task(&json!({"taskId": "t", "status": "failed"}));
        let error =
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom"}});
        settle(&mut task, error);
        assert_eq!(task["status"], "failed");
        assert_eq!(task["error"], json!({"code": -32603, "message": "boom"}));
        assert!(!task.contains_key("result") && task["statusMessage"].is_string());
    }
}
