//! The rules every store shares that are not I/O: the retention cutoff, the
//! compare-and-swap retry loop of the shared stores.
//! Visibility and retirement are methods of the record
//! ([`TaskRecord::is_visible`], [`TaskRecord::retired_at`]).

use std::time::Duration;

use crate::task::Timestamp;
#[cfg(any(feature = "postgres", feature = "redis"))]
use {
    super::{BoxFuture, Clock, Updated},
    crate::error::StoreError,
    crate::task::{Applied, Scope, TaskId, TaskRecord, Transition},
};

/// How many times a shared store retries a compare-and-swap it keeps losing before
/// it reports [`StoreError::Contention`].
#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) const MAX_CAS_ATTEMPTS: u32 = 32;

/// Terminal records without a TTL that retired before this time are evicted by a
/// sweep at `now` keeping them for `retention`.
///
/// ```
/// use std::time::Duration;
/// use mcp_tasks::store::{Timestamp, retention_cutoff};
///
/// let now = Timestamp::from_millis(10_000);
/// assert_eq!(retention_cutoff(now, Duration::from_secs(4)), Timestamp::from_millis(6_000));
/// assert_eq!(retention_cutoff(now, Duration::MAX), Timestamp::from_millis(0));
/// ```
pub fn retention_cutoff(now: Timestamp, retention: Duration) -> Timestamp {
    now.minus_ms(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX))
}

/// The outcome of one conditional write.
#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) enum Written {
    /// The record was written.
    Done,
    /// The record is gone (expired or removed meanwhile). Only Redis tells this apart
    /// from a lost race; PostgreSQL's refusal re-reads the row instead.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Gone,
    /// Another writer got there first; the current record when the backend
    /// returned it with its refusal.
    Lost(Option<Box<TaskRecord>>),
}

/// The two I/O steps of a compare-and-swap store. `write_if` must not write a record
/// that expired meanwhile (by the store's clock).
#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) trait CompareAndSwap: Sync {
    /// The record as stored, if it is visible in `scope` at `now`. A store checks the
    /// owner in the backend for [`Scope::Owner`], so a foreign record is never fetched
    /// nor decoded: it costs what an unknown id costs. It may return an expired or
    /// foreign record; the caller checks visibility again.
    fn read<'a>(
        &'a self,
        id: &'a TaskId,
        scope: Scope<'a>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;

    /// Writes `record` if the stored one still has revision `expected`.
    fn write_if<'a>(
        &'a self,
        expected: u64,
        record: &'a TaskRecord,
    ) -> BoxFuture<'a, Result<Written, StoreError>>;
}

/// `TaskStore::update` on a compare-and-swap backend: read, check visibility, apply
/// the pure state machine, write if the revision still matches; on a lost race back
/// off and retry, at most [`MAX_CAS_ATTEMPTS`] times.
#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) async fn compare_and_swap<B: CompareAndSwap + ?Sized>(
    backend: &B,
    clock: Clock,
    id: &TaskId,
    scope: Scope<'_>,
    transition: &Transition,
    now: Timestamp,
) -> Result<Option<Updated>, StoreError> {
    let mut current = backend.read(id, scope, now).await?;
    let mut backoff = CONTENTION;
    for attempt in 0..MAX_CAS_ATTEMPTS {
        let Some(mut record) = current.take() else {
            return Ok(None);
        };
        // On the store's clock the backend's read already left out expired
        // records; the caller's `now` must not decide again.
        let visible = match clock {
            Clock::Caller => record.is_visible(scope, now),
            Clock::Store => scope.permits(record.owner.as_ref()),
        };
        if !visible {
            return Ok(None);
        }
        let expected = record.revision;
        let outcome = record.apply(transition, now);
        if outcome != Ok(Applied::Changed) {
            // Nothing to write: the answer holds for the revision just read.
            return Ok(Some(Updated::new(record, outcome)));
        }
        match write_if(backend, expected, &record, scope, now).await? {
            Written::Done => return Ok(Some(Updated::new(record, outcome))),
            Written::Gone => return Ok(None),
            Written::Lost(fresh) => {
                if attempt < 2 {
                    tokio::task::yield_now().await;
                } else {
                    backoff.wait().await;
                }
                current = match fresh {
                    Some(fresh) => Some(*fresh),
                    None => backend.read(id, scope, now).await?,
                };
            }
        }
    }
    Err(StoreError::Contention)
}

/// `backend.write_if`, tried once more when its connection was dropped
/// ([`super::retry`]): the first try may have landed before the connection went, so
/// a second that loses to exactly the record it writes found its own write.
#[cfg(any(feature = "postgres", feature = "redis"))]
async fn write_if<B: CompareAndSwap + ?Sized>(
    backend: &B,
    expected: u64,
    record: &TaskRecord,
    scope: Scope<'_>,
    now: Timestamp,
) -> Result<Written, StoreError> {
    let error = match backend.write_if(expected, record).await {
        Err(error) if super::retry::dropped(&error) => error,
        written => return written,
    };
    tracing::debug!(
        error = %crate::error::Chain(&error),
        "mcp-tasks: a store connection was dropped; the write is tried again"
    );
    Ok(match backend.write_if(expected, record).await? {
        Written::Lost(fresh) => {
            let fresh = match fresh {
                Some(fresh) => Some(*fresh),
                None => backend.read(&record.id, scope, now).await?,
            };
            match fresh {
                Some(fresh) if fresh == *record => Written::Done,
                fresh => Written::Lost(fresh.map(Box::new)),
            }
        }
        written => written,
    })
}

/// The pauses of writers that keep losing a compare-and-swap on one task, after a
/// yield for the first two retries: from 1 ms, doubling up to 4 ms, with jitter.
#[cfg(any(feature = "postgres", feature = "redis"))]
const CONTENTION: crate::backoff::Backoff =
    crate::backoff::Backoff::new(Duration::from_millis(1), Duration::from_millis(4));
