//! Waiting in tests, always bounded by [`DEADLINE`]. Wait on a signal (a channel,
//! a future) with [`within`] or [`recv`]; poll with [`until`] or [`poll`] only for
//! a state nothing announces (a task's status over HTTP, a counter of the example
//! server, an expiry that comes with time).

use std::time::Duration;

use mcp_tasks::TaskId;
use mcp_tasks::store::{ChangeFeed, FeedEvent};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The longest a test waits for any one thing it expects.
pub(crate) const DEADLINE: Duration = Duration::from_secs(10);

/// How long a poll waits before looking again.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Runs `future` within [`DEADLINE`], failing the test when it passes.
pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(DEADLINE, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {DEADLINE:?}: {what}"),
    }
}

/// The next value on `rx` within [`DEADLINE`]; fails the test when the channel
/// closes or nothing comes.
pub(crate) async fn recv<T>(what: &str, rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    within(what, rx.recv())
        .await
        .unwrap_or_else(|| panic!("the channel closed before {what}"))
}

/// The next task id `feed` reports changed, within the deadline; a skip, an
/// error or a closed feed fails the test, naming `what` was awaited.
pub(crate) async fn changed(feed: &mut ChangeFeed, what: &str) -> TaskId {
    match within(what, feed.recv()).await {
        Some(FeedEvent::Changed(id)) => id,
        Some(FeedEvent::Missed(n)) => panic!("{what}: the feed skipped {n} ids"),
        Some(other) => panic!("{what}: unexpected {other:?}"),
        None => panic!("{what}: the feed closed"),
    }
}

/// Checks `condition` every [`POLL_INTERVAL`] until it holds, failing the test after
/// [`DEADLINE`].
pub(crate) async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let found = poll(async || condition().then_some(())).await;
    assert!(
        found.is_some(),
        "timed out after {DEADLINE:?} waiting until {what}"
    );
}

/// Runs `attempt` every [`POLL_INTERVAL`] until it returns `Some`; `None` once
/// [`DEADLINE`] passed, for the caller to fail with what it saw last.
pub(crate) async fn poll<T>(mut attempt: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(found) = attempt().await {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Sends its value once, when dropped: a future holding it was dropped.
#[derive(Debug)]
pub(crate) struct SendOnDrop<T>(Option<(mpsc::UnboundedSender<T>, T)>);

impl<T> SendOnDrop<T> {
    /// Sends `value` on `to` when dropped.
    pub(crate) fn new(to: mpsc::UnboundedSender<T>, value: T) -> Self {
        SendOnDrop(Some((to, value)))
    }
}

impl<T> Drop for SendOnDrop<T> {
    fn drop(&mut self) {
        if let Some((to, value)) = self.0.take() {
            let _ = to.send(value);
        }
    }
}
