//! The change feed: ids of tasks that other nodes changed, from a shared store to
//! each layer over it.
//!
//! A shared store keeps one [`ChangeSender`]; its listener (on `NOTIFY`, pub/sub, …)
//! sends the id of every task another node wrote, and each
//! [`TaskStore::subscribe`](super::TaskStore::subscribe) hands out a [`ChangeFeed`].

#[cfg(any(feature = "postgres", feature = "redis"))]
pub(super) mod relay;

use std::fmt;

use tokio::sync::broadcast;

use crate::task::TaskId;

/// Capacity a store gives its feed when it has no reason to choose another (4 096
/// ids; what [`ChangeSender::default`] uses).
///
/// ```
/// use mcp_tasks::store::{ChangeSender, FEED_CAPACITY};
///
/// assert_eq!(FEED_CAPACITY, 4_096);
/// let sender = ChangeSender::new(FEED_CAPACITY); // the same as ChangeSender::default()
/// # drop(sender);
/// ```
pub const FEED_CAPACITY: usize = 4_096;

/// What a [`ChangeFeed`] delivers.
///
/// ```
/// use mcp_tasks::store::{ChangeFeed, FeedEvent};
///
/// async fn relay(mut feed: ChangeFeed) {
///     while let Some(event) = feed.recv().await {
///         match event {
///             FeedEvent::Changed(id) => { /* re-read this task */ let _ = id; }
///             FeedEvent::Missed(n) => tracing::warn!(n, "changes missed: re-read every waiter"),
///             _ => {}
///         }
///     }
///     // `None`: the store closed the feed.
/// }
/// # let _ = relay;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FeedEvent {
    /// Another node changed this task: re-read it.
    Changed(TaskId),
    /// The receiver fell behind and this many ids were dropped (0: an unknown number,
    /// when the store could not catch up after a reconnect): whatever waits on a
    /// task must re-read it.
    Missed(u64),
}

/// What travels through the broadcast channel: a change, or word that the store
/// lost track of some.
#[derive(Debug, Clone, Copy)]
enum Signal {
    Changed(TaskId),
    Gap,
}

impl Signal {
    fn event(self) -> FeedEvent {
        match self {
            Signal::Changed(id) => FeedEvent::Changed(id),
            Signal::Gap => FeedEvent::Missed(0),
        }
    }
}

/// The sending side of a change feed, held by a shared store; every
/// [`ChangeFeed`] it hands out receives each id sent after it subscribed.
///
/// ```
/// use mcp_tasks::TaskId;
/// use mcp_tasks::store::{ChangeSender, FeedEvent};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let sender = ChangeSender::new(16);
/// let mut feed = sender.subscribe();
/// let id = TaskId::random();
/// sender.send(id);
/// assert_eq!(feed.recv().await, Some(FeedEvent::Changed(id)));
/// # }
/// ```
#[derive(Clone)]
pub struct ChangeSender {
    sender: broadcast::Sender<Signal>,
}

impl ChangeSender {
    /// A sender whose feeds each buffer up to `capacity` ids (at least one; a store
    /// with no reason to choose uses [`FEED_CAPACITY`], 4 096); a feed that falls
    /// further behind gets [`FeedEvent::Missed`].
    ///
    /// ```
    /// use mcp_tasks::store::ChangeSender;
    ///
    /// let sender = ChangeSender::new(1_024);
    /// assert_eq!(sender.feed_count(), 0);
    /// ```
    pub fn new(capacity: usize) -> Self {
        ChangeSender {
            sender: broadcast::channel(capacity.max(1)).0,
        }
    }

    /// Announces a change to every feed; nothing happens when there is none.
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    /// use mcp_tasks::store::{ChangeSender, FeedEvent};
    ///
    /// let sender = ChangeSender::default();
    /// sender.send(TaskId::random()); // no feed yet: dropped
    /// let mut feed = sender.subscribe();
    /// let id = TaskId::random();
    /// sender.send(id);
    /// assert_eq!(feed.try_recv(), Some(FeedEvent::Changed(id)));
    /// ```
    pub fn send(&self, id: TaskId) {
        let _ = self.sender.send(Signal::Changed(id));
    }

    /// Tells every feed that changes may have been lost (the store could not catch
    /// up after a reconnect): each receives [`FeedEvent::Missed`]`(0)`, and the
    /// layer has every waiter re-read its task.
    ///
    /// ```
    /// use mcp_tasks::store::{ChangeSender, FeedEvent};
    ///
    /// let sender = ChangeSender::default();
    /// let mut feed = sender.subscribe();
    /// sender.missed();
    /// assert_eq!(feed.try_recv(), Some(FeedEvent::Missed(0)));
    /// ```
    pub fn missed(&self) {
        let _ = self.sender.send(Signal::Gap);
    }

    /// A new feed, receiving every id sent from now on: what a store's
    /// [`TaskStore::subscribe`](super::TaskStore::subscribe) returns.
    ///
    /// ```
    /// use mcp_tasks::store::ChangeSender;
    ///
    /// let sender = ChangeSender::default();
    /// let mut feed = sender.subscribe();
    /// assert_eq!(feed.try_recv(), None); // nothing sent yet
    /// ```
    pub fn subscribe(&self) -> ChangeFeed {
        ChangeFeed {
            receiver: self.sender.subscribe(),
        }
    }

    /// How many feeds are open.
    ///
    /// ```
    /// use mcp_tasks::store::ChangeSender;
    ///
    /// let sender = ChangeSender::default();
    /// let feed = sender.subscribe();
    /// assert_eq!(sender.feed_count(), 1);
    /// drop(feed);
    /// assert_eq!(sender.feed_count(), 0);
    /// ```
    pub fn feed_count(&self) -> usize {
        self.sender.receiver_count()
    }
}

impl Default for ChangeSender {
    fn default() -> Self {
        Self::new(FEED_CAPACITY)
    }
}

impl fmt::Debug for ChangeSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChangeSender")
            .field("feeds", &self.feed_count())
            .finish()
    }
}

/// A feed of the tasks other nodes changed, from [`TaskStore::subscribe`](super::TaskStore::subscribe).
///
/// ```
/// use mcp_tasks::TaskId;
/// use mcp_tasks::store::{ChangeSender, FeedEvent};
///
/// let sender = ChangeSender::new(1);
/// let mut feed = sender.subscribe();
/// sender.send(TaskId::random());
/// sender.send(TaskId::random());
/// assert_eq!(feed.try_recv(), Some(FeedEvent::Missed(1)));
/// assert!(matches!(feed.try_recv(), Some(FeedEvent::Changed(_))));
/// assert_eq!(feed.try_recv(), None);
/// ```
pub struct ChangeFeed {
    receiver: broadcast::Receiver<Signal>,
}

impl ChangeFeed {
    /// The next event; `None` once the store closed the feed (dropped its sender).
    ///
    /// ```
    /// use mcp_tasks::store::ChangeSender;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let sender = ChangeSender::default();
    /// let mut feed = sender.subscribe();
    /// drop(sender);
    /// assert_eq!(feed.recv().await, None);
    /// # }
    /// ```
    pub async fn recv(&mut self) -> Option<FeedEvent> {
        match self.receiver.recv().await {
            Ok(signal) => Some(signal.event()),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(FeedEvent::Missed(n)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// Whether the store closed the feed (nothing more will arrive).
    ///
    /// ```
    /// use mcp_tasks::store::ChangeSender;
    ///
    /// let sender = ChangeSender::default();
    /// let feed = sender.subscribe();
    /// assert!(!feed.is_closed());
    /// drop(sender);
    /// assert!(feed.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.receiver.is_closed()
    }

    /// The next event if one is ready; `None` when none is (see
    /// [`is_closed`](Self::is_closed) to tell a closed feed).
    ///
    /// ```
    /// use mcp_tasks::TaskId;
    /// use mcp_tasks::store::{ChangeSender, FeedEvent};
    ///
    /// let sender = ChangeSender::default();
    /// let mut feed = sender.subscribe();
    /// assert_eq!(feed.try_recv(), None);
    /// let id = TaskId::random();
    /// sender.send(id);
    /// assert_eq!(feed.try_recv(), Some(FeedEvent::Changed(id)));
    /// ```
    pub fn try_recv(&mut self) -> Option<FeedEvent> {
        match self.receiver.try_recv() {
            Ok(signal) => Some(signal.event()),
            Err(broadcast::error::TryRecvError::Lagged(n)) => Some(FeedEvent::Missed(n)),
            Err(_) => None,
        }
    }
}

impl fmt::Debug for ChangeFeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChangeFeed")
            .field("pending", &self.receiver.len())
            .finish()
    }
}
