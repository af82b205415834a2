//! Upstream sessions, one per principal: opened with `initialize` and
//! `notifications/initialized` at the first request, carried as `Mcp-Session-Id`
//! and `MCP-Protocol-Version` on every later one, opened again when the upstream
//! forgot them, closed (`DELETE`) after an idle time. Their number is bounded:
//! a new principal takes the place of the one idle longest, and is refused when
//! every session has a request in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use http::header::{HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use mcp_tasks::Principal;
use mcp_tasks::wire::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use serde_json::{Value, json};

use super::upstream::{Exchanged, Upstream};
use super::wire;
use crate::proxy::ProxyBody;

/// Whose session: the request's principal, `None` for anonymous requests (which
/// share one).
pub(crate) type Owner = Option<Principal>;

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

/// Opens a session with the headers of the request that needs it (`base`, see
/// [`base_headers`](super::upstream::base_headers)).
pub(crate) async fn open(upstream: &Upstream, base: &HeaderMap) -> Result<Opened, SessionError> {
    let id = upstream.next_id();
    let request = wire::initialize_request(id, CLIENT_NAME, env!("CARGO_PKG_VERSION"));
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

/// Closes a session upstream (`DELETE`), in the background.
fn close(upstream: Arc<Upstream>, session: Arc<Session>) {
    if session.id.is_none() {
        return;
    }
    tokio::spawn(async move {
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

/// The session of one owner, or none yet (or while it is opened again).
#[derive(Debug)]
struct Slot {
    current: tokio::sync::Mutex<Option<Arc<Session>>>,
    usage: Mutex<Use>,
}

impl Slot {
    fn usage(&self) -> MutexGuard<'_, Use> {
        self.usage.lock().unwrap_or_else(|p| p.into_inner())
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
        let mut usage = self.slot.usage();
        usage.in_flight -= 1;
        usage.last_used = Instant::now();
    }
}

/// A use of a slot before it has a session: undone if opening the session fails.
struct Claim(Arc<Slot>);

impl Drop for Claim {
    fn drop(&mut self) {
        let mut usage = self.0.usage();
        usage.in_flight -= 1;
        usage.last_used = Instant::now();
    }
}

/// Every owner's session.
#[derive(Debug)]
pub(crate) struct Sessions {
    upstream: Arc<Upstream>,
    slots: Mutex<HashMap<Owner, Arc<Slot>>>,
    max: usize,
    idle: Duration,
}

impl Sessions {
    pub(crate) fn new(upstream: Arc<Upstream>, max: usize, idle: Duration) -> Sessions {
        Sessions {
            upstream,
            slots: Mutex::default(),
            max: max.max(1),
            idle,
        }
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<Owner, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `owner`'s slot, made (room permitting) if it has none, with one more use.
    fn claim(&self, owner: &Owner, session: Option<Arc<Session>>) -> Result<Claim, SessionError> {
        let mut slots = self.slots();
        let slot = match slots.get(owner) {
            Some(slot) => slot.clone(),
            None => {
                self.make_room(&mut slots)?;
                let slot = Arc::new(Slot {
                    current: tokio::sync::Mutex::new(session),
                    usage: Mutex::new(Use {
                        in_flight: 0,
                        last_used: Instant::now(),
                    }),
                });
                slots.insert(owner.clone(), slot.clone());
                slot
            }
        };
        // Counted under the map's lock: a slot in use is never evicted.
        slot.usage().in_flight += 1;
        Ok(Claim(slot))
    }

    /// Room for one more slot: expired slots go first, then the one idle longest.
    fn make_room(&self, slots: &mut HashMap<Owner, Arc<Slot>>) -> Result<(), SessionError> {
        if slots.len() < self.max {
            return Ok(());
        }
        self.expire(slots, self.idle);
        if slots.len() < self.max {
            return Ok(());
        }
        let idlest = slots
            .iter()
            .filter_map(|(owner, slot)| {
                let usage = slot.usage();
                (usage.in_flight == 0).then(|| (usage.last_used, owner.clone()))
            })
            .min_by_key(|(last_used, _)| *last_used);
        let Some((_, owner)) = idlest else {
            tracing::warn!(
                max = self.max,
                "every upstream session has a request in flight; refusing a new principal"
            );
            return Err(SessionError::Full);
        };
        if let Some(slot) = slots.remove(&owner) {
            self.close_slot(&slot);
        }
        Ok(())
    }

    /// Removes (and closes) the slots unused for `idle`.
    fn expire(&self, slots: &mut HashMap<Owner, Arc<Slot>>, idle: Duration) {
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
        self.slots().len()
    }

    /// Keeps a session opened elsewhere (while detecting the upstream's era) as
    /// `owner`'s, if it has none yet.
    pub(crate) fn adopt(&self, owner: &Owner, session: Session) {
        let session = Arc::new(session);
        let adopted = self.claim(owner, Some(session.clone())).is_ok_and(|claim| {
            claim.0.current.try_lock().is_ok_and(|mut current| {
                Arc::ptr_eq(current.get_or_insert_with(|| session.clone()), &session)
            })
        });
        if !adopted {
            close(self.upstream.clone(), session);
        }
    }

    /// `owner`'s session, opened with `base` if it has none.
    pub(crate) async fn acquire(
        &self,
        owner: &Owner,
        base: &HeaderMap,
    ) -> Result<Lease, SessionError> {
        let claim = self.claim(owner, None)?;
        let mut current = claim.0.current.lock().await;
        let session = match &*current {
            Some(session) => session.clone(),
            None => {
                let session = Arc::new(open(&self.upstream, base).await?.session);
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
            *current = Some(Arc::new(open(&self.upstream, base).await?.session));
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
