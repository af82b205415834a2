//! The era bridge: an upstream that speaks only an older revision (2025-11-25,
//! 2025-06-18 or 2025-03-26, with `initialize` and `Mcp-Session-Id` sessions)
//! serves 2026-07-28 clients, so that `TasksLayer` can make tasks of its tools.
//!
//! The upstream's era is learnt at the first 2026-07-28 request: `server/discover`
//! answered means 2026-07-28, and every request then passes to the proxy as it is.
//! Otherwise the bridge sends `initialize`; a result on a bridged revision means
//! the older era, and from then on each 2026-07-28 request is translated (see
//! [`Shared::era`] for what is remembered, and when it is learnt again):
//!
//! - `server/discover` is answered from the `initialize` result (capabilities
//!   without list changes and subscriptions, instructions, server info);
//!   `subscriptions/listen` gets -32601 (the layer then serves task notifications
//!   alone);
//! - any other request goes on a session of its principal for the capabilities it
//!   declared (an anonymous request on one of its own, [`session`]) without the
//!   per-request envelope of `_meta`, under an id of the bridge's own; its result
//!   comes back under the client's id with `resultType` and `serverInfo`, from a
//!   JSON answer or from the upstream's stream (progress under the client's token,
//!   log messages at the level it asked for, nothing else);
//! - the upstream's `elicitation/create`, `sampling/createMessage` or `roots/list`
//!   during `tools/call`, `prompts/get` or `resources/read` becomes an MRTR
//!   `input_required` result, and the answer in the client's retry goes upstream
//!   on the same session while the request is still open ([`relay`]). `ping` is
//!   answered; any other server-to-client request gets a JSON-RPC error;
//! - a `tools/call` of a tool the upstream runs only as a task goes upstream as
//!   one, and `tasks/get`, `tasks/update` and `tasks/cancel` of that task are
//!   served from the upstream's own ([`tasks`]);
//! - a client that leaves (or a task cancelled) sends `notifications/cancelled`
//!   upstream for the request; a client's own `notifications/cancelled` reaches
//!   only its principal's request, under the bridge's id ([`cancel`]).
//!
//! Requests of the older era itself (a session id, an older `MCP-Protocol-Version`,
//! or no `_meta` and no version header), and every `GET` or `DELETE`, pass to the
//! proxy untouched whatever the upstream speaks.
//!
//! The era is not learnt for good: a detection that fails (the upstream unreachable
//! or not serving yet) is not remembered, and an upstream restarted on another
//! revision is noticed at its first refusal (HTTP 400 or 404 to a passed request,
//! or to a bridged one), checked with `server/discover`, and learnt again.

mod cancel;
mod relay;
mod session;
mod tasks;
mod upstream;
pub(crate) mod wire;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Method, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
use mcp_tasks::error::BoxError;
use mcp_tasks::wire::RpcError;
use mcp_tasks::wire::{
    LEGACY_VERSIONS, MCP_PROTOCOL_VERSION, MCP_SESSION_ID, META_PROTOCOL_VERSION,
};
use mcp_tasks::{Principal, TaskContext, TaskRefused};
use serde_json::Value;
use tokio::sync::watch;
use tower::Service;

use crate::backoff::Backoff;
use crate::proxy::{Proxy, ProxyBody, ProxyFailure};
use relay::{Client, Parked};
use session::{Owner, Sessions};
use upstream::{Exchanged, Unavailable, Upstream};

/// The largest 2026-07-28 request body the bridge reads to translate it.
const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The first pause after a failed detection of the upstream's era, before the
/// next request may try again (each next pause doubles, see [`Backoff`]).
const DETECT_FIRST_PAUSE: Duration = Duration::from_millis(250);

/// The longest pause between two detections: the `Retry-After: 1` that a
/// refused client is told stays true.
const DETECT_LAST_PAUSE: Duration = Duration::from_secs(1);

/// The bridge's settings.
#[derive(Clone, Debug)]
pub(crate) struct BridgeConfig {
    /// The most upstream sessions open at once (one per principal and declared
    /// capabilities, one per anonymous request).
    pub(crate) max_sessions: usize,
    /// How long an unused session stays open.
    pub(crate) session_idle: Duration,
    /// How long a question put to a client as a bare MRTR round (not a task's)
    /// waits for the client's retry.
    pub(crate) input_timeout: Duration,
    /// Whether a tool the upstream runs only as a task is called as one, and its
    /// task carried ([`tasks`]): set when the upstream's tasks are federated.
    pub(crate) upstream_tasks: bool,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            max_sessions: 1000,
            session_idle: Duration::from_secs(600),
            input_timeout: relay::default_input_timeout(),
            upstream_tasks: true,
        }
    }
}

/// Lives as long as a client's request and every copy of its extensions: the
/// layer's runner of an `Auto` task keeps one for the whole call, so a question
/// relayed to that runner is held exactly as long as the task runs.
#[derive(Clone, Debug)]
pub(crate) struct CallLife(Arc<watch::Sender<()>>);

impl CallLife {
    /// Fails its `changed` once the last copy is dropped.
    fn watch(&self) -> watch::Receiver<()> {
        self.0.subscribe()
    }
}

/// Marks each client request with its [`CallLife`]: put it in front of the layer.
pub(crate) fn mark_call<B>(mut request: Request<B>) -> Request<B> {
    let (life, _) = watch::channel(());
    request.extensions_mut().insert(CallLife(Arc::new(life)));
    request
}

/// On the head of a bridged answer: set when the head reaches the client,
/// dropped unset when the layer's runner took the answer for a task. So a
/// relayed question is known to wait either for the client's retry or for the
/// runner's.
#[derive(Clone, Debug)]
pub(crate) struct Delivery(Arc<watch::Sender<bool>>);

impl Delivery {
    fn new() -> (Delivery, watch::Receiver<bool>) {
        let (delivered, receiver) = watch::channel(false);
        (Delivery(Arc::new(delivered)), receiver)
    }
}

/// Notes that an answer reached the client: put it in front of the layer (after
/// [`mark_call`]).
pub(crate) fn note_delivery<B>(mut response: Response<B>) -> Response<B> {
    if let Some(delivery) = response.extensions_mut().remove::<Delivery>() {
        delivery.0.send_replace(true);
    }
    response
}

/// The upstream's era, as last learnt.
#[derive(Debug)]
enum Era {
    /// 2026-07-28: requests pass through.
    Modern,
    /// An older revision: 2026-07-28 requests are bridged.
    Legacy(Legacy),
}

/// What the bridge knows of an older upstream from its `initialize` result.
#[derive(Debug)]
pub(crate) struct Legacy {
    /// The `server/discover` result derived from it.
    discover: Value,
    server_info: Value,
}

/// When the next detection of the era may run, after failed ones.
#[derive(Debug)]
struct Retry {
    backoff: Backoff,
    /// No detection before then; `None` after a success.
    not_before: Option<Instant>,
}

impl Retry {
    fn new() -> Retry {
        Retry {
            backoff: Backoff::new(DETECT_FIRST_PAUSE, DETECT_LAST_PAUSE),
            not_before: None,
        }
    }

    /// Whether a detection may run now.
    fn due(&self) -> bool {
        self.not_before.is_none_or(|at| Instant::now() >= at)
    }

    /// A detection failed: the next waits the next pause.
    fn failed(&mut self) {
        self.not_before = Some(Instant::now() + self.backoff.next_delay());
    }

    /// A detection succeeded (or the upstream was seen to change): the next one
    /// may run at once.
    fn cleared(&mut self) {
        self.backoff.reset();
        self.not_before = None;
    }
}

/// How a detection of the era failed.
enum Undetected {
    /// The upstream could not be reached or was not serving: the client gets
    /// [`upstream::unavailable`], and the next detection waits a pause.
    NotServing,
    /// The upstream refused the credentials (401/403): the client sees that as it
    /// is, and the next request (perhaps another principal's) tries at once.
    Refused(Response<ProxyBody>),
}

/// What a `server/discover` of the upstream showed.
#[derive(Debug)]
enum Probed {
    /// It answered as a 2026-07-28 server.
    Modern,
    /// It answered, not as a 2026-07-28 server.
    Older,
    /// It could not be reached, was not serving, or refused the credentials.
    Unknown,
}

/// The state every request shares.
#[derive(Debug)]
pub(crate) struct Shared {
    proxy: Proxy,
    upstream: Arc<Upstream>,
    sessions: Sessions,
    /// The era last learnt; `None` until it is learnt, and again once the
    /// upstream is seen to have changed.
    era: Mutex<Option<Arc<Era>>>,
    /// Held while the era is being learnt or checked again: one attempt at a
    /// time, paced after failures.
    detecting: tokio::sync::Mutex<Retry>,
    /// Requests held open for an answer, by `requestState`.
    parked: Mutex<HashMap<String, Parked>>,
    input_timeout: Duration,
    /// The upstream's own tasks, carried for 2026-07-28 clients.
    tasks: tasks::Tasks,
    upstream_tasks: bool,
}

impl Shared {
    fn parked(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parked>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn park(&self, token: String, parked: Parked) {
        self.parked().insert(token, parked);
    }

    fn take_parked(&self, token: &str) -> Option<Parked> {
        self.parked().remove(token)
    }

    /// The request held under `token`, if it belongs to `client`'s owner and
    /// method; one that does not stays where it is.
    fn unpark(&self, token: &str, client: &Client) -> Option<Parked> {
        let mut parked = self.parked();
        let held = parked.get(token)?;
        if !held.belongs_to(&client.owner, &client.method) {
            return None;
        }
        parked.remove(token)
    }

    /// The era learnt last, if any.
    fn known_era(&self) -> Option<Arc<Era>> {
        self.era.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Forgets `era` (unless it was replaced already), so that the next request
    /// learns the era again.
    fn forget(&self, era: &Arc<Era>) {
        let mut known = self.era.lock().unwrap_or_else(|p| p.into_inner());
        if known.as_ref().is_some_and(|known| Arc::ptr_eq(known, era)) {
            *known = None;
        }
    }

    /// The upstream's era, learnt now if it is not known. What is learnt is
    /// remembered until a refusal shows the upstream changed ([`Self::recheck`]).
    /// A detection that fails is not remembered: the client gets `Err`, an answer
    /// to pass on, and a later request tries again. When the upstream could not be
    /// reached or was not serving (HTTP 429, 502, 503, 504, as while it starts),
    /// that answer is [`upstream::unavailable`] (-32603, HTTP 503,
    /// `Retry-After: 1`), and the next detection waits a pause of [`Backoff`]
    /// (doubling from [`DETECT_FIRST_PAUSE`] to [`DETECT_LAST_PAUSE`]); a request
    /// before then gets the same answer without reaching the upstream. A 401/403
    /// reaches the client as it is.
    async fn era(&self, owner: &Owner, base: &HeaderMap) -> Result<Arc<Era>, Response<ProxyBody>> {
        if let Some(era) = self.known_era() {
            return Ok(era);
        }
        let mut retry = self.detecting.lock().await;
        if let Some(era) = self.known_era() {
            return Ok(era);
        }
        if !retry.due() {
            return Err(upstream::unavailable(Unavailable::NotServing));
        }
        match self.detect(owner, base).await {
            Ok(era) => {
                retry.cleared();
                let era = Arc::new(era);
                *self.era.lock().unwrap_or_else(|p| p.into_inner()) = Some(era.clone());
                Ok(era)
            }
            Err(Undetected::NotServing) => {
                retry.failed();
                tracing::warn!("the upstream is unavailable; its era is learnt at a later request");
                Err(upstream::unavailable(Unavailable::NotServing))
            }
            Err(Undetected::Refused(response)) => Err(response),
        }
    }

    /// Learns the upstream's era: `server/discover`, then `initialize` when that
    /// was not answered as a 2026-07-28 server would.
    async fn detect(&self, owner: &Owner, base: &HeaderMap) -> Result<Era, Undetected> {
        let not_served = |response: Response<ProxyBody>| {
            if response.extensions().get::<ProxyFailure>().is_none()
                && matches!(
                    response.status(),
                    http::StatusCode::UNAUTHORIZED | http::StatusCode::FORBIDDEN
                )
            {
                Undetected::Refused(response)
            } else {
                Undetected::NotServing
            }
        };
        match self.exchange_discover(base).await {
            Exchanged::Refused(response) => return Err(not_served(response)),
            Exchanged::Answered {
                message: Some(message),
                ..
            } if wire::is_modern_discover(&message) => {
                tracing::info!("the upstream speaks 2026-07-28: passing requests through");
                return Ok(Era::Modern);
            }
            Exchanged::Answered { .. } => {}
        }
        match session::open(&self.upstream, base).await {
            Ok(opened) => {
                tracing::info!(
                    version = %opened.initialize["protocolVersion"],
                    "the upstream speaks an older revision: bridging it for 2026-07-28 clients"
                );
                let legacy = Legacy {
                    discover: wire::discover_result(&opened.initialize),
                    server_info: wire::server_info(&opened.initialize),
                };
                self.sessions.adopt(owner, opened.session);
                Ok(Era::Legacy(legacy))
            }
            Err(session::SessionError::Refused(response)) => Err(not_served(*response)),
            Err(e) => {
                tracing::warn!(
                    error = ?e,
                    "the upstream answered neither server/discover nor initialize; passing requests through"
                );
                Ok(Era::Modern)
            }
        }
    }

    /// Sends the upstream a 2026-07-28 `server/discover` with `base`.
    async fn exchange_discover(&self, base: &HeaderMap) -> Exchanged {
        let discover = wire::discover_request(self.upstream.next_id());
        let mut headers = base.clone();
        headers.insert(
            MCP_PROTOCOL_VERSION,
            http::HeaderValue::from_static(mcp_tasks::wire::PROTOCOL_VERSION),
        );
        headers.insert(
            mcp_tasks::wire::MCP_METHOD,
            http::HeaderValue::from_static("server/discover"),
        );
        self.upstream.exchange(headers, &discover).await
    }

    /// Asks the upstream `server/discover`, to tell whether it speaks 2026-07-28.
    async fn probe(&self, base: &HeaderMap) -> Probed {
        match self.exchange_discover(base).await {
            Exchanged::Refused(_) => Probed::Unknown,
            Exchanged::Answered {
                message: Some(message),
                ..
            } if wire::is_modern_discover(&message) => Probed::Modern,
            Exchanged::Answered { .. } => Probed::Older,
        }
    }

    /// After the upstream refused a request in `era` (HTTP 400 or 404): whether
    /// it was restarted on another revision. `server/discover` tells: answered by
    /// an upstream taken for an older one, or refused (-32601, -32022, a session
    /// required, …) by one taken for 2026-07-28, the era is forgotten and the next
    /// request learns it again. `response`, the refused request's answer, then
    /// becomes [`upstream::unavailable`] (`upstream_changed`): the upstream did
    /// not run the request, which may be sent again. An answer that succeeded
    /// (the bridge opened a new session and the request went through) stays.
    /// One check at a time: a refusal during another check or a detection is
    /// left to it.
    async fn recheck(
        &self,
        era: &Arc<Era>,
        base: &HeaderMap,
        response: Response<ProxyBody>,
    ) -> Response<ProxyBody> {
        let Ok(mut retry) = self.detecting.try_lock() else {
            return response;
        };
        let current = self
            .known_era()
            .is_some_and(|known| Arc::ptr_eq(&known, era));
        if !current {
            return response;
        }
        let changed = matches!(
            (&**era, self.probe(base).await),
            (Era::Modern, Probed::Older) | (Era::Legacy(_), Probed::Modern)
        );
        if !changed {
            return response;
        }
        tracing::info!(
            "the upstream refused a request of the era it was taken for: learning its era again"
        );
        self.forget(era);
        retry.cleared();
        if response.status().is_success() {
            return response;
        }
        upstream::unavailable(Unavailable::Changed)
    }

    async fn pass<B>(&self, request: Request<B>) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        match self.proxy.clone().call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    async fn handle<B>(self: Arc<Self>, mut request: Request<B>) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let life = request.extensions_mut().remove::<CallLife>();
        if request.method() != Method::POST || is_legacy(&request) {
            return self.pass(request).await;
        }
        let owner = request.extensions().get::<Principal>().cloned();
        let base = upstream::base_headers(request.headers());
        let era = match self.era(&owner, &base).await {
            Ok(era) => era,
            Err(response) => return response,
        };
        let legacy = match &*era {
            Era::Legacy(legacy) => legacy,
            Era::Modern => {
                let response = self.pass(request).await;
                if is_refusal(&response) {
                    return self.recheck(&era, &base, response).await;
                }
                return response;
            }
        };
        let (parts, body) = request.into_parts();
        let bytes = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => {
                let error = if e.downcast_ref::<LengthLimitError>().is_some() {
                    RpcError::new(
                        RpcError::INVALID_REQUEST,
                        "Request body too large",
                        http::StatusCode::PAYLOAD_TOO_LARGE,
                    )
                } else {
                    RpcError::invalid_request("Could not read the request body")
                };
                return relay::error_reply(&error, &Value::Null);
            }
        };
        let message = match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(message)) if is_modern(&message, &parts.headers) => message,
            // Not a 2026-07-28 request: the upstream judges it.
            _ => {
                return self
                    .pass(Request::from_parts(parts, Full::new(bytes)))
                    .await;
            }
        };
        let refusals = self.upstream.refusals();
        let response = match tasks::route(&self, &base, message, legacy, &owner).await {
            Ok(response) => response,
            Err(message) => relay::bridge(&self, base.clone(), message, legacy, owner, life).await,
        };
        if self.upstream.refusals() != refusals {
            return self.recheck(&era, &base, response).await;
        }
        response
    }
}

/// Whether the upstream refused a 2026-07-28 request passed to it with HTTP 400 or
/// 404 (not the proxy's own failure): what an upstream restarted on an older
/// revision answers, though a 2026-07-28 one may too (-32601 travels with 404).
fn is_refusal(response: &Response<ProxyBody>) -> bool {
    response.extensions().get::<ProxyFailure>().is_none()
        && matches!(
            response.status(),
            http::StatusCode::BAD_REQUEST | http::StatusCode::NOT_FOUND
        )
}

/// Whether a request belongs to the older era by its head: the layer said so, or
/// it carries a session or an older `MCP-Protocol-Version`.
fn is_legacy<B>(request: &Request<B>) -> bool {
    let marked = TaskContext::from_extensions(request.extensions())
        .is_some_and(|context| context.check() == Err(TaskRefused::LegacyEra));
    let headers = request.headers();
    marked
        || headers.contains_key(MCP_SESSION_ID)
        || headers
            .get(MCP_PROTOCOL_VERSION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| LEGACY_VERSIONS.contains(&v.trim()))
}

/// Whether a request is of 2026-07-28: `_meta` names the version, or the header
/// does (an older one was ruled out before).
fn is_modern(message: &serde_json::Map<String, Value>, headers: &HeaderMap) -> bool {
    let meta_version = upstream::params(message)
        .and_then(|p| p.get("_meta"))
        .is_some_and(|meta| meta.get(META_PROTOCOL_VERSION).is_some());
    meta_version || headers.contains_key(MCP_PROTOCOL_VERSION)
}

/// The gateway's inner service: the proxy, with 2026-07-28 requests bridged to an
/// upstream on an older revision.
#[derive(Clone, Debug)]
pub(crate) struct Bridge {
    shared: Arc<Shared>,
}

impl Bridge {
    /// A bridge in front of `proxy`. Starts the task that closes idle sessions, so
    /// it needs a tokio runtime.
    pub(crate) fn new(proxy: Proxy, config: BridgeConfig) -> Bridge {
        let upstream = Arc::new(Upstream::new(proxy.clone()));
        let shared = Arc::new(Shared {
            proxy,
            sessions: Sessions::new(upstream.clone(), config.max_sessions, config.session_idle),
            upstream,
            era: Mutex::new(None),
            detecting: tokio::sync::Mutex::new(Retry::new()),
            parked: Mutex::default(),
            input_timeout: config.input_timeout,
            tasks: tasks::Tasks::default(),
            upstream_tasks: config.upstream_tasks,
        });
        let weak = Arc::downgrade(&shared);
        let period =
            (config.session_idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                shared.sessions.sweep();
                tracing::trace!(
                    sessions = shared.sessions.len(),
                    "swept idle upstream sessions"
                );
            }
        });
        Bridge { shared }
    }
}

impl<B> Service<Request<B>> for Bridge
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move { Ok(shared.handle(request).await) })
    }
}
