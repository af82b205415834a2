//! The change feed of one Redis store: `listen` and the start of its listener,
//! and the change stream as the one feed relay (`store/feed/relay.rs`) reads it:
//! from the last entry it saw, after a reconnect too.

use std::fmt;
use std::time::Duration;

use redis::Client;
use redis::aio::MultiplexedConnection;
use tokio::sync::{oneshot, watch};

use super::scripts::FEED_MAXLEN;
use super::{Feed, Listener, RedisStore, shown_url};
use crate::error::StoreError;
use crate::store::connect::ConnectError;
use crate::store::feed::relay::{Batch, Change, ChangeLog, Live, Payload, Relay, until_ready};

/// How long one blocking read of the change stream waits for new entries; an
/// answer later than [`READ_TIMEOUT`] means the connection is dead.
const READ_BLOCK: Duration = Duration::from_secs(5);
const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Entries one read of the change stream takes.
const READ_COUNT: usize = 512;

impl RedisStore {
    /// Starts the listener for other nodes' changes, if it is not running, and waits
    /// until it reads the change stream.
    ///
    /// [`TaskStore::subscribe`](crate::store::TaskStore::subscribe) starts the
    /// listener too, but cannot wait for it: a change made in the instant before the
    /// listener first read the stream is not relayed. Call this once at startup,
    /// before building the layer, to close that gap; an unreachable server fails
    /// here, naming it (password hidden), within
    /// [`CONNECT_TIMEOUT`](crate::defaults::CONNECT_TIMEOUT), instead of in the
    /// background. If the listener was started already and is reconnecting, this
    /// waits until it is back. A store without a client to listen with
    /// ([`with_change_feed`](Self::with_change_feed)) fails at once.
    ///
    /// ```no_run
    /// use mcp_tasks::{RedisStore, TasksLayer};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// store.listen().await?; // other nodes' changes reach this node from now on
    /// let layer = TasksLayer::new(store);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn listen(&self) -> Result<(), StoreError> {
        let Some(feed) = &self.feed else {
            return Err(StoreError::backend(NoFeedClient));
        };
        let running = feed.lock_listener().as_ref().and_then(Listener::running);
        let ready = match running {
            Some(ready) => ready,
            None => {
                let runtime = tokio::runtime::Handle::try_current().map_err(StoreError::backend)?;
                let shown = shown_url(feed.client.get_connection_info());
                let limit = crate::defaults::CONNECT_TIMEOUT;
                let first =
                    match tokio::time::timeout(limit, self.change_stream(feed).connect()).await {
                        Ok(Ok(first)) => first,
                        Ok(Err(e)) => return Err(ConnectError::failed(shown, e)),
                        Err(_) => return Err(ConnectError::timed_out(shown, limit)),
                    };
                self.start_listener(feed, &runtime, Some(first))
            }
        };
        until_ready(ready).await
    }

    /// Starts the listener on `first` (or a connection of its own) unless one runs;
    /// either way, the running listener's readiness.
    pub(super) fn start_listener(
        &self,
        feed: &Feed,
        runtime: &tokio::runtime::Handle,
        first: Option<MultiplexedConnection>,
    ) -> watch::Receiver<bool> {
        self.announce();
        let mut listener = feed.lock_listener();
        // Another caller may have won the race; its listener serves both.
        if let Some(ready) = listener.as_ref().and_then(Listener::running) {
            return ready;
        }
        let (stop, stopped) = oneshot::channel();
        let (ready_tx, ready) = watch::channel(false);
        let relay = Relay::new(
            self.change_stream(feed),
            self.node.clone(),
            feed.sender.clone(),
            ready_tx,
        );
        let task = runtime.spawn(relay.run(first, stopped));
        *listener = Some(Listener {
            _stop: stop,
            task,
            ready: ready.clone(),
        });
        ready
    }

    fn change_stream(&self, feed: &Feed) -> ChangeStream {
        ChangeStream {
            client: feed.client.clone(),
            key: self.keys.channel.clone(),
            name: self.feed_connection_name(),
        }
    }
}

/// `listen` on a store that was given no client to listen with.
#[derive(Debug)]
struct NoFeedClient;

impl fmt::Display for NoFeedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "this RedisStore has no client to listen with: give it one with with_change_feed",
        )
    }
}

impl std::error::Error for NoFeedClient {}

/// The change stream of one store, as the relay reads it.
struct ChangeStream {
    client: Client,
    key: String,
    /// The connection's `CLIENT SETNAME`.
    name: String,
}

/// A stream entry id, `<ms>-<seq>`, in its order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct EntryId(u64, u64);

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

impl ChangeStream {
    /// One read of the stream after `after`: blocking for at most `block`, or not
    /// at all.
    async fn read(
        &self,
        conn: &mut MultiplexedConnection,
        after: EntryId,
        block: Option<Duration>,
    ) -> redis::RedisResult<Vec<Change<EntryId>>> {
        let mut read = redis::cmd("XREAD");
        read.arg("COUNT").arg(READ_COUNT);
        if let Some(block) = block {
            read.arg("BLOCK").arg(block.as_millis() as u64);
        }
        let reply: redis::Value = read
            .arg("STREAMS")
            .arg(&self.key)
            .arg(after.to_string())
            .query_async(conn)
            .await?;
        Ok(read_entries(reply)
            .into_iter()
            .filter_map(|(id, payload)| {
                Some(Change {
                    position: Some(stream_id(&id)?),
                    payload: payload.map_or(Payload::Unreadable, Payload::Announced),
                })
            })
            .collect())
    }
}

impl ChangeLog for ChangeStream {
    type Conn = MultiplexedConnection;
    type Position = EntryId;
    type Error = redis::RedisError;
    const STORE: &'static str = "redis";
    const RECHECK: Option<Duration> = None;

    async fn connect(&self) -> redis::RedisResult<MultiplexedConnection> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(READ_TIMEOUT))
            .set_response_timeout(Some(READ_TIMEOUT));
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(&self.name)
            .query_async::<()>(&mut conn)
            .await?;
        Ok(conn)
    }

    /// The newest entry (`0-0` on an empty stream).
    async fn head(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<EntryId> {
        let newest: redis::Value = redis::cmd("XREVRANGE")
            .arg(&self.key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(conn)
            .await?;
        Ok(entries(newest)
            .pop()
            .and_then(|(id, _)| stream_id(&id))
            .unwrap_or(EntryId(0, 0)))
    }

    async fn lost_since(
        &self,
        conn: &mut MultiplexedConnection,
        last: EntryId,
    ) -> redis::RedisResult<bool> {
        let oldest: redis::Value = redis::cmd("XRANGE")
            .arg(&self.key)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut *conn)
            .await?;
        let length: u64 = redis::cmd("XLEN")
            .arg(&self.key)
            .query_async(&mut *conn)
            .await?;
        let oldest = entries(oldest).pop().and_then(|(id, _)| stream_id(&id));
        Ok(trimmed_past(last, oldest, length))
    }

    async fn replay(
        &self,
        conn: &mut MultiplexedConnection,
        from: EntryId,
    ) -> redis::RedisResult<Batch<EntryId>> {
        let changes = self.read(conn, from, None).await?;
        let full = changes.len() >= READ_COUNT;
        Ok(Batch { changes, full })
    }

    async fn next(
        &self,
        conn: &mut MultiplexedConnection,
        after: EntryId,
    ) -> redis::RedisResult<Live<EntryId>> {
        self.read(conn, after, Some(READ_BLOCK))
            .await
            .map(Live::Changes)
    }
}

/// Whether entries after `last` may have been trimmed away: the oldest entry left
/// is newer than `last` (so `last` itself was trimmed) and trimming has happened.
fn trimmed_past(last: EntryId, oldest: Option<EntryId>, length: u64) -> bool {
    match oldest {
        // Nothing left: trimming never empties a stream, so nothing was written.
        None => false,
        Some(oldest) => oldest > last && (last != EntryId(0, 0) || length >= FEED_MAXLEN),
    }
}

/// A stream entry id, `<ms>-<seq>`, in its order.
fn stream_id(id: &str) -> Option<EntryId> {
    let (ms, seq) = id.split_once('-')?;
    Some(EntryId(ms.parse().ok()?, seq.parse().ok()?))
}

/// The entries of an `XREAD` reply on one stream (RESP2 arrays or a RESP3 map);
/// none for a blocking read that timed out.
fn read_entries(reply: redis::Value) -> Vec<(String, Option<Vec<u8>>)> {
    use redis::Value;
    let streams = match reply {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.into_iter().map(|(_, v)| v).collect(),
        _ => Vec::new(),
    };
    streams.into_iter().flat_map(entries).collect()
}

/// The entries of an `XRANGE`-shaped reply: each id, and its `c` field.
fn entries(reply: redis::Value) -> Vec<(String, Option<Vec<u8>>)> {
    use redis::Value;
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| {
            let Value::Array(mut entry) = item else {
                return None;
            };
            if entry.len() != 2 {
                return None;
            }
            let fields = entry.pop()?;
            let id = text(entry.pop()?)?;
            let fields: Vec<Value> = match fields {
                Value::Array(fields) => fields,
                Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => Vec::new(),
            };
            let mut payload = None;
            let mut fields = fields.into_iter();
            while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
                if text(name).as_deref() == Some("c") {
                    payload = bytes(value);
                }
            }
            Some((id, payload))
        })
        .collect()
}

fn bytes(value: redis::Value) -> Option<Vec<u8>> {
    match value {
        redis::Value::BulkString(bytes) => Some(bytes),
        redis::Value::SimpleString(text) => Some(text.into_bytes()),
        _ => None,
    }
}

fn text(value: redis::Value) -> Option<String> {
    String::from_utf8(bytes(value)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_entries_are_read_from_resp2_and_resp3_replies() {
        use redis::Value;
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entry = |id: &str, payload: &str| {
            Value::Array(vec![bulk(id), Value::Array(vec![bulk("c"), bulk(payload)])])
        };
        let entries = Value::Array(vec![entry("1-0", "n:a"), entry("2-5", "n:b")]);
        let resp2 = Value::Array(vec![Value::Array(vec![bulk("P changes"), entries.clone()])]);
        let resp3 = Value::Map(vec![(bulk("P changes"), entries)]);
        for reply in [resp2, resp3] {
            let read = read_entries(reply);
            assert_eq!(
                read,
                vec![
                    ("1-0".to_owned(), Some(b"n:a".to_vec())),
                    ("2-5".to_owned(), Some(b"n:b".to_vec()))
                ]
            );
        }
        assert!(
            read_entries(Value::Nil).is_empty(),
            "a blocking read that timed out"
        );
    }

    #[test]
    fn a_listener_knows_when_the_stream_was_trimmed_past_it() {
        assert_eq!(
            stream_id("1700000000000-3"),
            Some(EntryId(1_700_000_000_000, 3))
        );
        assert_eq!(stream_id("x-1"), None);
        assert_eq!(EntryId(5, 1).to_string(), "5-1");
        let at = |ms| Some(EntryId(ms, 0));
        // Its last entry is still there: nothing lost.
        assert!(!trimmed_past(EntryId(5, 0), at(3), 10));
        assert!(!trimmed_past(EntryId(5, 0), at(5), 10));
        // Its last entry was trimmed: entries after it may be gone too.
        assert!(trimmed_past(EntryId(5, 0), at(6), FEED_MAXLEN));
        // It started on an empty stream: lost only if trimming happened at all.
        assert!(!trimmed_past(EntryId(0, 0), at(6), 10));
        assert!(trimmed_past(EntryId(0, 0), at(6), FEED_MAXLEN));
        assert!(!trimmed_past(EntryId(5, 0), None, 0));
    }
}
