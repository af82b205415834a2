//! One bridged 2026-07-28 request: sent on its session in the older form, its
//! answer (JSON or a stream) read and translated back. A question the upstream
//! asks mid-request (`elicitation/create`, `sampling/createMessage` or
//! `roots/list` on the request's stream, of a client that declared the
//! capability) is put to the client as an MRTR `input_required` result while the
//! upstream request stays open; the client's retry carries the answer, which goes
//! upstream as the JSON-RPC response to the question, and the retry is answered
//! from the rest of the same stream. A client's notification goes on its
//! principal's session; its `notifications/cancelled` names its own request, and
//! is translated to the bridge's id of it upstream ([`cancel`](super::cancel)).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt as _, Full};
use mcp_tasks::error::BoxError;
use mcp_tasks::wire::RpcError;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use super::cancel::Registered;
use super::session::{Capabilities, Owner, SessionError};
use super::upstream::{self, InFlight, MAX_MESSAGE_BYTES, params};
use super::wire::{self, Event, Events, Kind, Wants};
use super::{CallLife, Delivery, Legacy, Shared};
use crate::proxy::{ProxyBody, ProxyFailure};

/// The methods whose 2026-07-28 form may answer with an MRTR `input_required`
/// result: the upstream's questions are relayed only during them.
const MRTR_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// What the bridge reads of an upstream error answer.
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// A request whose upstream asked a question, held open until the client answers
/// (or the call ends, or the question waits too long).
#[derive(Debug)]
pub(crate) struct Parked {
    up: Stream,
    owner: Owner,
    method: String,
    /// The upstream's id of its question.
    question: Value,
    /// The question's key among `inputRequests` (and the answer's among
    /// `inputResponses`): the capability it needs.
    key: &'static str,
    /// The question as the client sees it (`{method, params}`).
    request: Value,
    /// Dropped when the request is taken back, which stops its keeper.
    _keeper: oneshot::Sender<()>,
}

impl Parked {
    /// Whether a retry from `owner` for `method` may take it.
    pub(crate) fn belongs_to(&self, owner: &Owner, method: &str) -> bool {
        self.owner == *owner && self.method == method
    }
}

/// The upstream side of a request in flight: its open answer stream.
#[derive(Debug)]
struct Stream {
    body: ProxyBody,
    events: Events,
    inflight: InFlight,
}

/// The client side: who asked, and what it wants relayed.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) id: Value,
    pub(crate) owner: Owner,
    pub(crate) method: String,
    /// What its session declares upstream.
    pub(crate) capabilities: Capabilities,
    pub(crate) wants: Wants,
    pub(crate) life: Option<CallLife>,
}

/// A request being relayed from the upstream's stream to the client.
struct Relay {
    shared: Arc<Shared>,
    up: Option<Stream>,
    client: Client,
    server_info: Value,
    /// For the head of the answer, until it is written.
    delivery: Option<Delivery>,
    /// Whether that head reached the client.
    delivered: watch::Receiver<bool>,
    /// The request, noted for its principal's cancellations while it runs upstream.
    registered: Option<Registered>,
}

/// The next thing for the client.
enum Next {
    Notify(Value),
    KeepAlive,
    /// The final message (the answer, an error, or a question), and the HTTP
    /// status it takes when it is the only one.
    Answer(Value, StatusCode),
}

/// Bridges one 2026-07-28 request (`message`, with its headers in `base`) to the
/// upstream on `client`'s session.
pub(crate) async fn bridge(
    shared: &Arc<Shared>,
    base: HeaderMap,
    message: Map<String, Value>,
    legacy: &Legacy,
    owner: Owner,
    life: Option<CallLife>,
) -> Response<ProxyBody> {
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let error = RpcError::invalid_request("Invalid Request: not a JSON-RPC request");
        return error_reply(&error, &id);
    };
    let method = method.to_owned();
    let capabilities = Capabilities::of(&message);
    let Some(id) = message.get("id").cloned() else {
        return notify(shared, &owner, &capabilities, &base, message).await;
    };
    match method.as_str() {
        "server/discover" => {
            let result = json!({"jsonrpc": "2.0", "id": id, "result": legacy.discover});
            return json_reply(&result, StatusCode::OK);
        }
        // The layer then serves task notifications alone; list changes and
        // resource updates of the upstream are not relayed.
        "subscriptions/listen" => return error_reply(&RpcError::method_not_found(), &id),
        _ => {}
    }
    let client = Client {
        id,
        owner,
        method,
        capabilities,
        wants: Wants::of(&message),
        life,
    };
    let (delivery, delivered) = Delivery::new();
    let relay = Relay {
        shared: shared.clone(),
        up: None,
        client,
        server_info: legacy.server_info.clone(),
        delivery: Some(delivery),
        delivered,
        registered: None,
    };
    let state = params(&message)
        .and_then(|p| p.get("requestState"))
        .and_then(Value::as_str);
    if let Some(state) = state {
        let answers = params(&message)
            .and_then(|p| p.get("inputResponses"))
            .and_then(Value::as_object)
            .cloned();
        let state = state.to_owned();
        return resume(relay, &base, &state, answers).await;
    }
    send(relay, &base, message).await
}

/// Sends a fresh request upstream and answers from the upstream's answer. A
/// session the upstream forgot is opened again, and the request sent again, once.
async fn send(
    mut relay: Relay,
    base: &HeaderMap,
    message: Map<String, Value>,
) -> Response<ProxyBody> {
    let shared = relay.shared.clone();
    let id = shared.upstream.next_id();
    let request = Value::Object(wire::to_legacy_request(message, Some(id)));
    let client = &relay.client;
    let lease = match shared
        .sessions
        .acquire(&client.owner, &client.capabilities, base)
        .await
    {
        Ok(lease) => lease,
        Err(e) => return session_error(e, &relay.client.id),
    };
    let headers = lease.session.headers(base);
    let mut inflight = InFlight::new(shared.upstream.clone(), lease, id, headers);
    let mut renewed = false;
    loop {
        relay.register(&inflight);
        let response = shared
            .upstream
            .post(inflight.headers.clone(), &request)
            .await;
        if response.extensions().get::<ProxyFailure>().is_some() {
            // The upstream may have the request (a late answer): it is cancelled.
            return response;
        }
        let (head, body) = response.into_parts();
        if head.status.is_success() {
            if !upstream::is_event_stream(&head.headers) {
                return json_answer(relay, inflight, body).await;
            }
            relay.up = Some(Stream {
                body,
                events: Events::default(),
                inflight,
            });
            return respond(relay).await;
        }
        let bytes = upstream::read_capped(body, MAX_ERROR_BYTES)
            .await
            .unwrap_or_default();
        if !renewed && wire::is_session_gone(head.status.as_u16(), &bytes) {
            renewed = true;
            if let Err(e) = shared.sessions.renew(&mut inflight.lease, base).await {
                inflight.answered();
                return session_error(e, &relay.client.id);
            }
            inflight.headers = inflight.lease.session.headers(base);
            continue;
        }
        // Refused: nothing runs upstream to cancel.
        inflight.answered();
        return refused_reply(head.status, &bytes, &relay.client.id);
    }
}

/// A retry that carries the answer to a relayed question (among `answers`, the
/// retry's `inputResponses`): the answer goes upstream, and the retry is answered
/// from the rest of the held stream. Without the answer, the question is put again.
async fn resume(
    mut relay: Relay,
    base: &HeaderMap,
    state: &str,
    answers: Option<Map<String, Value>>,
) -> Response<ProxyBody> {
    let Some(parked) = relay.shared.unpark(state, &relay.client) else {
        let error = RpcError::invalid_params("Unknown or expired requestState");
        return error_reply(&error, &relay.client.id);
    };
    let Parked {
        up,
        question,
        key,
        request,
        ..
    } = parked;
    let Some(answer) = answers.and_then(|mut answers| answers.remove(key)) else {
        relay.up = Some(up);
        let (message, status) = relay.park(question, key, request);
        return relay.reply(&message, status);
    };
    let headers = up.inflight.lease.session.headers(base);
    let reply = json!({"jsonrpc": "2.0", "id": question, "result": answer});
    relay.register(&up.inflight);
    relay.up = Some(up);
    let response = relay.shared.upstream.post(headers, &reply).await;
    if !response.status().is_success() {
        tracing::warn!(status = %response.status(), "the upstream did not take an answer");
        return json_reply(
            &wire::error_message(
                &relay.client.id,
                RpcError::INTERNAL_ERROR,
                "The upstream did not take the answer",
            ),
            StatusCode::BAD_GATEWAY,
        );
    }
    respond(relay).await
}

/// A notification of the client. `notifications/cancelled` cancels the
/// principal's own request it names, under the bridge's id for it on its session
/// (an anonymous caller's, or one naming no request of the principal in flight,
/// is dropped); any other goes on the principal's session for what it declared
/// (an anonymous caller's is dropped: its sessions end with its requests).
async fn notify(
    shared: &Shared,
    owner: &Owner,
    capabilities: &Capabilities,
    base: &HeaderMap,
    message: Map<String, Value>,
) -> Response<ProxyBody> {
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let Some(principal) = owner else {
        tracing::debug!(%method, "dropping a notification of an anonymous caller");
        return accepted();
    };
    if method == "notifications/cancelled" {
        let named = params(&message)
            .and_then(|p| p.get("requestId"))
            .unwrap_or(&Value::Null);
        let running = shared.sessions.calls.running(principal, named);
        if running.is_empty() {
            tracing::debug!(request = %named, "a cancellation names no request in flight");
        }
        for (id, headers) in running {
            shared.upstream.cancel(headers, id).await;
        }
        return accepted();
    }
    let message = Value::Object(wire::to_legacy_request(message, None));
    let lease = match shared.sessions.acquire(owner, capabilities, base).await {
        Ok(lease) => lease,
        Err(e) => return session_error(e, &Value::Null),
    };
    let response = shared
        .upstream
        .post(lease.session.headers(base), &message)
        .await;
    if response.status().is_success() {
        return accepted();
    }
    response
}

/// HTTP 202 without a body: a notification taken.
fn accepted() -> Response<ProxyBody> {
    let mut accepted = Response::new(full(Bytes::new()));
    *accepted.status_mut() = StatusCode::ACCEPTED;
    accepted
}

/// Answers from an upstream JSON answer.
async fn json_answer(
    mut relay: Relay,
    mut inflight: InFlight,
    body: ProxyBody,
) -> Response<ProxyBody> {
    let read = upstream::read_capped(body, MAX_MESSAGE_BYTES).await;
    let message = read.and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    match message {
        Some(Value::Object(message)) if wire::kind(&message) == Kind::Response => {
            inflight.answered();
            let message = relay.modern_response(message);
            relay.reply(&message, StatusCode::OK)
        }
        _ => {
            tracing::warn!("the upstream's answer held no JSON-RPC response");
            bad_gateway(&relay.client.id, "The upstream's answer held no response")
        }
    }
}

/// Answers from the upstream's stream: with JSON when the answer is its first
/// message for the client, otherwise with a stream of the relayed messages.
async fn respond(mut relay: Relay) -> Response<ProxyBody> {
    let first = match relay.next().await {
        Next::Answer(message, status) => return relay.reply(&message, status),
        Next::Notify(message) => Bytes::from(wire::data_event(&message)),
        Next::KeepAlive => Bytes::from_static(b":\n\n"),
    };
    let delivery = relay.delivery.take();
    let (events, received) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut event = first;
        loop {
            tokio::select! {
                biased;
                // The client left: dropping the relay cancels the upstream request.
                () = events.closed() => return,
                sent = events.send(event) => if sent.is_err() { return },
            }
            let next = tokio::select! {
                biased;
                () = events.closed() => return,
                next = relay.next() => next,
            };
            event = match next {
                Next::Notify(message) => Bytes::from(wire::data_event(&message)),
                Next::KeepAlive => Bytes::from_static(b":\n\n"),
                Next::Answer(message, _) => {
                    let _ = events.send(Bytes::from(wire::data_event(&message))).await;
                    return;
                }
            };
        }
    });
    let mut response = Response::new(ChannelBody(received).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Some(delivery) = delivery {
        response.extensions_mut().insert(delivery);
    }
    response
}

impl Relay {
    /// The one message of a JSON answer, its head marked for delivery.
    fn reply(&mut self, message: &Value, status: StatusCode) -> Response<ProxyBody> {
        let mut response = json_reply(message, status);
        if let Some(delivery) = self.delivery.take() {
            response.extensions_mut().insert(delivery);
        }
        response
    }

    /// Notes the request (sent upstream as `inflight`) for its principal's
    /// cancellations, in place of what was noted before; an anonymous caller's
    /// requests are not noted.
    fn register(&mut self, inflight: &InFlight) {
        self.registered = None;
        if let Some(principal) = &self.client.owner {
            self.registered = Some(self.shared.sessions.calls.register(
                principal.clone(),
                &self.client.id,
                inflight.id,
                inflight.headers.clone(),
                self.delivered.clone(),
            ));
        }
    }

    /// The upstream's response as the client's: the 2026-07-28 fields, the cache
    /// hints a cacheable result needs, and no legacy task support on tools.
    fn modern_response(&self, message: Map<String, Value>) -> Value {
        let mut message = wire::to_modern_response(message, &self.client.id, &self.server_info);
        if let Some(Value::Object(result)) = message.get_mut("result") {
            wire::add_cache_hints(&self.client.method, result);
            if self.client.method == "tools/list" {
                wire::drop_legacy_task_support(result);
            }
        }
        Value::Object(message)
    }

    /// Reads the upstream's stream up to the next thing for the client.
    async fn next(&mut self) -> Next {
        loop {
            let Some(up) = self.up.as_mut() else {
                return self.fail("The request is no longer open upstream");
            };
            let event = match up.events.next_event() {
                Some(event) => event,
                None => {
                    if up.events.buffered() > MAX_MESSAGE_BYTES {
                        return self.fail("The upstream sent a message too large to relay");
                    }
                    match up.body.frame().await {
                        Some(Ok(frame)) => {
                            if let Ok(data) = frame.into_data() {
                                up.events.push(&data);
                            }
                            continue;
                        }
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "the upstream's stream failed");
                            return self.fail("The upstream's stream failed before its answer");
                        }
                        None => {
                            return self.fail("The upstream closed its stream before answering");
                        }
                    }
                }
            };
            let Event::Data(data) = event else {
                return Next::KeepAlive;
            };
            let Ok(Value::Object(message)) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            match wire::kind(&message) {
                Kind::Response if message.get("id") == Some(&json!(up.inflight.id)) => {
                    up.inflight.answered();
                    return Next::Answer(self.modern_response(message), StatusCode::OK);
                }
                Kind::Notification => {
                    let relayed =
                        wire::relayed_notification(Value::Object(message), &self.client.wants);
                    if let Some(message) = relayed {
                        return Next::Notify(message);
                    }
                }
                Kind::Request => {
                    if let Some(next) = self.server_request(message) {
                        return next;
                    }
                }
                Kind::Response | Kind::Other => {}
            }
        }
    }

    /// A request of the upstream to the client: an elicitation, sampling or roots
    /// request the client declared it can answer is put to it, during a request
    /// that may take an MRTR round; `ping` is answered; anything else gets a
    /// JSON-RPC error.
    fn server_request(&mut self, mut message: Map<String, Value>) -> Option<Next> {
        let id = message.remove("id").unwrap_or(Value::Null);
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let up = self.up.as_ref()?;
        if method == "ping" {
            up.inflight
                .post_aside(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            return None;
        }
        let relayed = wire::RELAYED_QUESTIONS
            .iter()
            .find(|(relayed, _)| *relayed == method);
        let refusal = match relayed {
            None => format!("The gateway does not relay {method} requests to its clients"),
            Some((_, capability)) if !self.client.wants.declared(capability) => {
                format!("The client did not declare the {capability} capability")
            }
            Some(_) if !MRTR_METHODS.contains(&self.client.method.as_str()) => {
                format!(
                    "The gateway relays no question during {}",
                    self.client.method
                )
            }
            Some((_, key)) => {
                let request = wire::input_request(&method, message.remove("params"));
                let (answer, status) = self.park(id, key, request);
                return Some(Next::Answer(answer, status));
            }
        };
        tracing::debug!(%method, "answering an upstream request the bridge does not relay with an error");
        up.inflight.post_aside(wire::error_message(
            &id,
            RpcError::METHOD_NOT_FOUND,
            &refusal,
        ));
        None
    }

    /// Holds the request open upstream and returns the `input_required` result
    /// that puts `request` (the question under the upstream's id `question`) to the
    /// client under `key`. The client's request is answered with it, so nothing
    /// of the client's names the upstream request until a retry takes it back.
    fn park(&mut self, question: Value, key: &'static str, request: Value) -> (Value, StatusCode) {
        self.registered = None;
        let Some(up) = self.up.take() else {
            let fail = self.fail("The request is no longer open upstream");
            let Next::Answer(message, status) = fail else {
                unreachable!("fail answers")
            };
            return (message, status);
        };
        let token = request_state();
        let (keeper, stopped) = oneshot::channel();
        let life = self.client.life.as_ref().map(CallLife::watch);
        let parked = Parked {
            up,
            owner: self.client.owner.clone(),
            method: self.client.method.clone(),
            question,
            key,
            request: request.clone(),
            _keeper: keeper,
        };
        self.shared.park(token.clone(), parked);
        let delivered = self.delivered.clone();
        keep(self.shared.clone(), token.clone(), life, delivered, stopped);
        tracing::debug!("the upstream asked a question; holding its request open for the answer");
        let message =
            wire::input_required(&self.client.id, key, request, &token, &self.server_info);
        (message, StatusCode::OK)
    }

    fn fail(&self, message: &str) -> Next {
        let error = wire::error_message(&self.client.id, RpcError::INTERNAL_ERROR, message);
        Next::Answer(error, StatusCode::BAD_GATEWAY)
    }
}

/// Ends a held question, which cancels its upstream request. A question that
/// reached the client waits for its retry up to the input timeout; one that the
/// layer's runner took for a task waits as long as the runner holds the call (a
/// cancelled task ends it at once).
fn keep(
    shared: Arc<Shared>,
    token: String,
    life: Option<watch::Receiver<()>>,
    mut delivered: watch::Receiver<bool>,
    stopped: oneshot::Receiver<()>,
) {
    let timeout = shared.input_timeout;
    tokio::spawn(async move {
        let ended = async move {
            let at_client = delivered.wait_for(|delivered| *delivered).await.is_ok();
            match (at_client, life) {
                // Nothing is ever sent: `changed` fails when the call is dropped.
                (false, Some(mut life)) => while life.changed().await.is_ok() {},
                _ => tokio::time::sleep(timeout).await,
            }
        };
        tokio::select! {
            _ = stopped => return,
            () = ended => {}
        }
        if let Some(parked) = shared.take_parked(&token) {
            tracing::debug!("a relayed question was not answered; cancelling its upstream request");
            drop(parked);
        }
    });
}

/// A fresh `requestState`: 128 random bits, unguessable.
fn request_state() -> String {
    use rand::TryRng as _;
    let mut bytes = [0u8; 16];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random source is unavailable");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("mcp-tasks-gateway.{hex}")
}

/// The body of a streamed answer, fed by the relay's task.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

fn full(bytes: Bytes) -> ProxyBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// One JSON-RPC message as a JSON answer; -32601 always takes HTTP 404 (the
/// 2026-07-28 revision requires it).
pub(crate) fn json_reply(message: &Value, status: StatusCode) -> Response<ProxyBody> {
    let status = match wire::error_code(message) {
        Some(RpcError::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        _ => status,
    };
    let mut response = Response::new(full(Bytes::from(message.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An error of the bridge itself, with its status.
pub(crate) fn error_reply(error: &RpcError, id: &Value) -> Response<ProxyBody> {
    let message = wire::error_message(id, error.code(), error.message());
    json_reply(&message, error.http_status())
}

fn bad_gateway(id: &Value, message: &str) -> Response<ProxyBody> {
    let message = wire::error_message(id, RpcError::INTERNAL_ERROR, message);
    json_reply(&message, StatusCode::BAD_GATEWAY)
}

/// The upstream refused the request with an HTTP error: its JSON-RPC error (under
/// the client's id) when it wrote one.
fn refused_reply(status: StatusCode, body: &[u8], id: &Value) -> Response<ProxyBody> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut message)) if message.contains_key("error") => {
            message.insert("id".into(), id.clone());
            json_reply(&Value::Object(message), status)
        }
        _ => bad_gateway(
            id,
            &format!("The upstream answered HTTP {}", status.as_u16()),
        ),
    }
}

pub(crate) fn session_error(error: SessionError, id: &Value) -> Response<ProxyBody> {
    match error {
        SessionError::Refused(response) => *response,
        SessionError::Full => {
            let message =
                wire::error_message(id, RpcError::INTERNAL_ERROR, "Too many upstream sessions");
            json_reply(&message, StatusCode::SERVICE_UNAVAILABLE)
        }
        SessionError::Handshake(why) => {
            tracing::warn!(%why, "the upstream refused a session");
            bad_gateway(id, "The upstream refused the session")
        }
    }
}

/// How long a question waits for a client that is not a task's runner.
pub(crate) fn default_input_timeout() -> Duration {
    Duration::from_secs(600)
}
