//! Upstream sessions: one per principal and declared capabilities, opened with
//! `initialize` (declaring the client's `elicitation`, `sampling` and `roots`
//! capabilities, see [`Capabilities`]) and `notifications/initialized` at the first
//! request, carried as `Mcp-Session-Id` and `MCP-Protocol-Version` on every later
//! one, opened again when the upstream forgot them, closed (`DELETE`) after an idle
//! time. An anonymous request gets a session of its own, closed when the request
//! ends (its question answered, if it asked one): nothing tells two anonymous
//! callers apart, so no session, and no cancellation, may pass between them.
//! Their number is bounded: a new principal (or anonymous request) takes the
//! place of the session idle longest, and is refused when every session has a
//! request in flight.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http::header::{HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use mcp_tasks::Principal;
use mcp_tasks::wire::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use serde_json::{Value, json};

use super::cancel::Calls;
use super::upstream::{Exchanged, Upstream};
use super::wire;
use crate::proxy::ProxyBody;

/// Who asks: the request's principal, `None` for an anonymous request (which gets
/// a session of its own).
pub(crate) type Owner = Option<Principal>;

/// The client capabilities a session declares upstream: those of the requests the
/// bridge relays (`elicitation`, `sampling`, `roots`), as the client declared them
/// in its request's `_meta`. The upstream decides from them what it offers (its
/// tools, say) and what it asks, so requests that declare different ones never
/// share a session.
#[derive(Clone, Debug)]
pub(crate) struct Capabilities {
    /// The declaration, as sent in `initialize`.
    json: Value,
    /// Its canonical text: what sessions are told apart by.
    key: Arc<str>,
}

impl Capabilities {
    /// The relayed capabilities a 2026-07-28 request declares.
    pub(crate) fn of(message: &serde_json::Map<String, Value>) -> Capabilities {
        Capabilities::from_json(wire::relayed_capabilities(message))
    }

    /// None at all: what the session opened to learn the upstream's era declares.
    pub(crate) fn none() -> Capabilities {
        Capabilities::from_json(json!({}))
    }

    fn from_json(json: Value) -> Capabilities {
        let key = wire::canonical(&json).into();
        Capabilities { json, key }
    }
}

impl PartialEq for Capabilities {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Capabilities {}

impl Hash for Capabilities {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

/// Whose session a shared one is: a principal's, for what it declared.
type Key = (Principal, Capabilities);

/// The gateway's name and version in the `initialize` it sends.
const CLIENT_NAME: &str = "mcp-tasks-gateway";

/// Why no session could be had.
#[derive(Debug)]
pub(crate) enum SessionError {
    /// The proxy's own error or the upstream's 401/403, to pass on as it is.
    Refused(Box<http::Response<ProxyBody>>),
    /// Every session has a request in flight and there is no room for another.
    Full,
    /// The upstream answered the handshake with something the bridge cannot use.
    Handshake(String),
}

/// One upstream session.
#[derive(Debug)]
pub(crate) struct Session {
    /// `Mcp-Session-Id`, when the upstream gave one (a server may keep none).
    id: Option<HeaderValue>,
    /// The revision settled in `initialize`, sent as `MCP-Protocol-Version`.
    version: HeaderValue,
    /// The headers of the request that opened it, for closing it.
    opened_with: HeaderMap,
}

impl Session {
    /// `base` with the session's headers.
    pub(crate) fn headers(&self, base: &HeaderMap) -> HeaderMap {
        let mut headers = base.clone();
        if let Some(id) = &self.id {
            headers.insert(MCP_SESSION_ID, id.clone());
        }
        headers.insert(MCP_PROTOCOL_VERSION, self.version.clone());
        headers
    }
}

/// A session opened, and the `initialize` result it was opened with.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) session: Session,
    pub(crate) initialize: Value,
}

/// Opens a session that declares no client capabilities, with the headers of the
/// request that needs it (`base`, see
/// [`base_headers`](super::upstream::base_headers)): the one that learns the
/// upstream's era, kept for its principal's requests that declare none.
pub(crate) async fn open(upstream: &Upstream, base: &HeaderMap) -> Result<Opened, SessionError> {
    open_declaring(upstream, base, &Capabilities::none()).await
}

/// Opens a session that declares `capabilities`, with the headers of the request
/// that needs it (`base`).
async fn open_declaring(
    upstream: &Upstream,
    base: &HeaderMap,
    capabilities: &Capabilities,
) -> Result<Opened, SessionError> {
    let id = upstream.next_id();
    let request = wire::initialize_request(
        id,
        CLIENT_NAME,
        env!("CARGO_PKG_VERSION"),
        &capabilities.json,
    );
    let (status, headers, message) = match upstream.exchange(base.clone(), &request).await {
        Exchanged::Refused(response) => return Err(SessionError::Refused(Box::new(response))),
        Exchanged::Answered {
            status,
            headers,
            message,
        } => (status, headers, message),
    };
    let Some(result) = message.and_then(|mut m| m.get_mut("result").map(Value::take)) else {
        return Err(SessionError::Handshake(format!(
            "initialize was answered with HTTP {status} and no result"
        )));
    };
    let Some(version) = wire::bridged_version(&result) else {
        return Err(SessionError::Handshake(format!(
            "the upstream settled on protocol {}, which is not bridged",
            result["protocolVersion"]
        )));
    };
    let session = Session {
        id: headers.get(MCP_SESSION_ID).cloned(),
        version: HeaderValue::from_static(version),
        opened_with: base.clone(),
    };
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = upstream.post(session.headers(base), &initialized).await;
    if !response.status().is_success() {
        return Err(SessionError::Handshake(format!(
            "notifications/initialized was answered with HTTP {}",
            response.status()
        )));
    }
    tracing::debug!(version, "opened an upstream session");
    Ok(Opened {
        session,
        initialize: result,
    })
}

/// Closes a session upstream (`DELETE`), in the background (not at all outside a
/// runtime: at exit).
fn close(upstream: Arc<Upstream>, session: Arc<Session>) {
    if session.id.is_none() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let headers = session.headers(&session.opened_with);
        let response = upstream
            .send(Method::DELETE, headers, bytes::Bytes::new())
            .await;
        let status = response.status();
        if !status.is_success() && status != StatusCode::METHOD_NOT_ALLOWED {
            tracing::debug!(%status, "the upstream refused to close a session");
        }
    });
}

/// How a session is used.
#[derive(Debug)]
struct Use {
    in_flight: usize,
    last_used: Instant,
}

/// One session, or none yet (or while it is opened again): a principal's for
/// what it declared, or one anonymous request's own.
#[derive(Debug)]
struct Slot {
    /// What the session declares upstream (it is opened again with the same).
    declared: Capabilities,
    current: tokio::sync::Mutex<Option<Arc<Session>>>,
    usage: Mutex<Use>,
    /// Set on an anonymous request's own session: it is closed, and its room given
    /// back, when its last use ends.
    own: Option<Own>,
}

/// What an anonymous request's own session needs to end with its last use.
#[derive(Debug)]
struct Own {
    upstream: Arc<Upstream>,
    /// The number of such sessions, counted against the bound.
    count: Arc<AtomicUsize>,
}

impl Slot {
    fn new(declared: Capabilities, session: Option<Arc<Session>>, own: Option<Own>) -> Slot {
        Slot {
            declared,
            current: tokio::sync::Mutex::new(session),
            usage: Mutex::new(Use {
                in_flight: 0,
                last_used: Instant::now(),
            }),
            own,
        }
    }

    fn usage(&self) -> MutexGuard<'_, Use> {
        self.usage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends one use; the last use of an anonymous request's session closes it.
    fn release(&self) {
        let mut usage = self.usage();
        usage.in_flight -= 1;
        usage.last_used = Instant::now();
        let last = usage.in_flight == 0;
        drop(usage);
        if let (true, Some(own)) = (last, &self.own) {
            // Unused, so nobody holds the lock (opening holds a use).
            if let Ok(mut current) = self.current.try_lock()
                && let Some(session) = current.take()
            {
                close(own.upstream.clone(), session);
            }
            own.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A session in use by one request (or one waiting question). Cloning it counts
/// another use.
#[derive(Debug)]
pub(crate) struct Lease {
    slot: Arc<Slot>,
    pub(crate) session: Arc<Session>,
}

impl Clone for Lease {
    fn clone(&self) -> Self {
        self.slot.usage().in_flight += 1;
        Lease {
            slot: self.slot.clone(),
            session: self.session.clone(),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.slot.release();
    }
}

/// A use of a slot before it has a session: undone if opening the session fails.
struct Claim(Arc<Slot>);

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Every upstream session, and the requests running on them.
#[derive(Debug)]
pub(crate) struct Sessions {
    upstream: Arc<Upstream>,
    /// The principals' sessions, by principal and declared capabilities.
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    /// The anonymous requests' own sessions open (or being opened) now.
    own: Arc<AtomicUsize>,
    /// The principals' requests in flight, for their clients' cancellations.
    pub(crate) calls: Calls,
    max: usize,
    idle: Duration,
}

impl Sessions {
    pub(crate) fn new(upstream: Arc<Upstream>, max: usize, idle: Duration) -> Sessions {
        Sessions {
            upstream,
            slots: Mutex::default(),
            own: Arc::default(),
            calls: Calls::default(),
            max: max.max(1),
            idle,
        }
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<Key, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `key`'s slot, made (room permitting) if it has none, with one more use.
    fn claim(&self, key: &Key, session: Option<Arc<Session>>) -> Result<Claim, SessionError> {
        let mut slots = self.slots();
        let slot = match slots.get(key) {
            Some(slot) => slot.clone(),
            None => {
                self.make_room(&mut slots)?;
                let slot = Arc::new(Slot::new(key.1.clone(), session, None));
                slots.insert(key.clone(), slot.clone());
                slot
            }
        };
        // Counted under the map's lock: a slot in use is never evicted.
        slot.usage().in_flight += 1;
        Ok(Claim(slot))
    }

    /// A slot of its own for an anonymous request (room permitting), with its use.
    fn claim_own(&self, declared: &Capabilities) -> Result<Claim, SessionError> {
        let mut slots = self.slots();
        self.make_room(&mut slots)?;
        // Counted under the map's lock, as the principals' slots are.
        self.own.fetch_add(1, Ordering::AcqRel);
        let own = Own {
            upstream: self.upstream.clone(),
            count: self.own.clone(),
        };
        let slot = Arc::new(Slot::new(declared.clone(), None, Some(own)));
        slot.usage().in_flight += 1;
        Ok(Claim(slot))
    }

    /// Whether one more session fits besides `slots` and the anonymous ones.
    fn fits(&self, slots: &HashMap<Key, Arc<Slot>>) -> bool {
        slots.len() + self.own.load(Ordering::Acquire) < self.max
    }

    /// Room for one more slot: expired slots go first, then the one idle longest
    /// (an anonymous request's session is never idle: it ends with its request).
    fn make_room(&self, slots: &mut HashMap<Key, Arc<Slot>>) -> Result<(), SessionError> {
        if self.fits(slots) {
            return Ok(());
        }
        self.expire(slots, self.idle);
        if self.fits(slots) {
            return Ok(());
        }
        let idlest = slots
            .iter()
            .filter_map(|(key, slot)| {
                let usage = slot.usage();
                (usage.in_flight == 0).then(|| (usage.last_used, key.clone()))
            })
            .min_by_key(|(last_used, _)| *last_used);
        let Some((_, key)) = idlest else {
            tracing::warn!(
                max = self.max,
                "every upstream session has a request in flight; refusing a new one"
            );
            return Err(SessionError::Full);
        };
        if let Some(slot) = slots.remove(&key) {
            self.close_slot(&slot);
        }
        Ok(())
    }

    /// Removes (and closes) the slots unused for `idle`.
    fn expire(&self, slots: &mut HashMap<Key, Arc<Slot>>, idle: Duration) {
        let mut expired = Vec::new();
        slots.retain(|_, slot| {
            let usage = slot.usage();
            let keep = usage.in_flight > 0 || usage.last_used.elapsed() < idle;
            if !keep {
                expired.push(slot.clone());
            }
            keep
        });
        for slot in expired {
            self.close_slot(&slot);
        }
    }

    fn close_slot(&self, slot: &Slot) {
        // Unused, so nobody is opening its session (that holds a use).
        if let Ok(mut current) = slot.current.try_lock()
            && let Some(session) = current.take()
        {
            close(self.upstream.clone(), session);
        }
    }

    /// Closes the sessions idle for the idle time.
    pub(crate) fn sweep(&self) {
        let mut slots = self.slots();
        self.expire(&mut slots, self.idle);
    }

    /// The number of sessions (open or being opened).
    pub(crate) fn len(&self) -> usize {
        self.slots().len() + self.own.load(Ordering::Acquire)
    }

    /// Keeps a session opened elsewhere (while detecting the upstream's era, with
    /// [`open`]: declaring nothing) as `owner`'s for requests that declare nothing,
    /// if it has none yet. An anonymous request's is closed: it gets its own.
    pub(crate) fn adopt(&self, owner: &Owner, session: Session) {
        let session = Arc::new(session);
        let adopted = owner.as_ref().is_some_and(|principal| {
            let key = (principal.clone(), Capabilities::none());
            self.claim(&key, Some(session.clone())).is_ok_and(|claim| {
                claim.0.current.try_lock().is_ok_and(|mut current| {
                    Arc::ptr_eq(current.get_or_insert_with(|| session.clone()), &session)
                })
            })
        });
        if !adopted {
            close(self.upstream.clone(), session);
        }
    }

    /// A session for a request of `owner` that declared `declared`, opened with
    /// `base` if there is none: the principal's for those capabilities, or for an
    /// anonymous request one of its own, closed when the last lease of it goes.
    pub(crate) async fn acquire(
        &self,
        owner: &Owner,
        declared: &Capabilities,
        base: &HeaderMap,
    ) -> Result<Lease, SessionError> {
        let claim = match owner {
            Some(principal) => self.claim(&(principal.clone(), declared.clone()), None)?,
            None => self.claim_own(declared)?,
        };
        let mut current = claim.0.current.lock().await;
        let session = match &*current {
            Some(session) => session.clone(),
            None => {
                let opened = open_declaring(&self.upstream, base, &claim.0.declared).await?;
                let session = Arc::new(opened.session);
                *current = Some(session.clone());
                session
            }
        };
        drop(current);
        Ok(lease(claim, session))
    }

    /// Opens `lease`'s session again after the upstream forgot it, unless another
    /// request did so meanwhile; `lease` then holds the new one.
    pub(crate) async fn renew(
        &self,
        lease: &mut Lease,
        base: &HeaderMap,
    ) -> Result<(), SessionError> {
        let mut current = lease.slot.current.lock().await;
        let stale = current
            .as_ref()
            .is_none_or(|session| Arc::ptr_eq(session, &lease.session));
        if stale {
            *current = None;
            tracing::info!("the upstream forgot a session; opening it again");
            let opened = open_declaring(&self.upstream, base, &lease.slot.declared).await?;
            *current = Some(Arc::new(opened.session));
        }
        lease.session = current.clone().expect("set above");
        Ok(())
    }
}

/// Turns a claim into a lease of `session`, keeping its use.
fn lease(claim: Claim, session: Arc<Session>) -> Lease {
    let slot = claim.0.clone();
    // The claim's use passes to the lease.
    slot.usage().in_flight += 1;
    drop(claim);
    Lease { slot, session }
}
