//! What a client's `notifications/cancelled` may cancel: the bridged requests in
//! flight of each principal, by the id its client gave them. The upstream knows
//! them by the bridge's own ids, on the principal's sessions; a client's
//! cancellation is translated to those, and only to its own principal's. An
//! anonymous caller's finds nothing: no request of its can be told from another
//! anonymous caller's (a closed stream still cancels its request).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use http::header::HeaderMap;
use mcp_tasks::Principal;
use serde_json::Value;
use tokio::sync::watch;

use super::wire;

/// A principal and the JSON-RPC id of its client's request (as canonical JSON, so
/// that `1` and `"1"` stay apart).
type Key = (Principal, String);

/// One bridged request in flight upstream.
#[derive(Debug)]
struct Running {
    /// Tells this entry from the others under the same key.
    token: u64,
    /// The bridge's id of the request upstream.
    upstream_id: u64,
    /// The headers it was sent with: its session's.
    headers: HeaderMap,
    /// Whether its answer's head reached the client; dropped unset when the
    /// layer's runner took the answer for a task.
    delivered: watch::Receiver<bool>,
}

impl Running {
    /// Whether the client's request was answered by the layer with a task instead:
    /// the request is then complete for the client, and its cancellation names
    /// nothing (the task is cancelled with `tasks/cancel`).
    fn became_task(&self) -> bool {
        self.delivered.has_changed().is_err() && !*self.delivered.borrow()
    }
}

/// The bridged requests in flight, by principal and client id.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    next: AtomicU64,
    running: Arc<Mutex<HashMap<Key, Vec<Running>>>>,
}

fn lock(running: &Mutex<HashMap<Key, Vec<Running>>>) -> MutexGuard<'_, HashMap<Key, Vec<Running>>> {
    running.lock().unwrap_or_else(|p| p.into_inner())
}

impl Calls {
    /// Notes that `principal`'s request `client_id` runs upstream as `upstream_id`
    /// with `headers`, until the returned registration is dropped.
    pub(crate) fn register(
        &self,
        principal: Principal,
        client_id: &Value,
        upstream_id: u64,
        headers: HeaderMap,
        delivered: watch::Receiver<bool>,
    ) -> Registered {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        let key = (principal, wire::canonical(client_id));
        lock(&self.running)
            .entry(key.clone())
            .or_default()
            .push(Running {
                token,
                upstream_id,
                headers,
                delivered,
            });
        Registered {
            running: self.running.clone(),
            key,
            token,
        }
    }

    /// The upstream ids, with the headers to cancel them with, of `principal`'s
    /// requests in flight under the client's id `client_id`.
    pub(crate) fn running(
        &self,
        principal: &Principal,
        client_id: &Value,
    ) -> Vec<(u64, HeaderMap)> {
        let key = (principal.clone(), wire::canonical(client_id));
        lock(&self.running)
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|running| !running.became_task())
            .map(|running| (running.upstream_id, running.headers.clone()))
            .collect()
    }
}

/// A request noted in [`Calls`]; dropping it forgets the request.
#[derive(Debug)]
pub(crate) struct Registered {
    running: Arc<Mutex<HashMap<Key, Vec<Running>>>>,
    key: Key,
    token: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut running = lock(&self.running);
        if let Some(entries) = running.get_mut(&self.key) {
            entries.retain(|entry| entry.token != self.token);
            if entries.is_empty() {
                running.remove(&self.key);
            }
        }
    }
}
