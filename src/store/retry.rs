//! The shared stores' one rule for a call that failed because its connection was
//! gone: an idle connection that a NAT, a load balancer or a proxy closed, or a
//! server that restarted. Such a call is tried once more, on a fresh connection
//! (the Redis connection reconnects on the error, the PostgreSQL pool replaces
//! the connection), when repeating it is safe: a read, a compare-and-set or a
//! create (whose second try checks whether the first one landed), an idempotent
//! script. Any other failure, or a second one, is the caller's.

use std::io;

use super::BoxFuture;
use crate::error::StoreError;
use crate::task::TaskRecord;

/// Whether `error` says the store's connection was dropped (broken pipe, reset,
/// aborted, closed), as opposed to a refusal, a timeout or a failed statement.
pub(crate) fn dropped(error: &StoreError) -> bool {
    let StoreError::Backend(cause) = error else {
        return false;
    };
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&**cause);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<io::Error>() {
            return dropped_io(io.kind());
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = error.downcast_ref::<redis::RedisError>() {
            return redis.is_connection_dropped() && !redis.is_connection_refusal();
        }
        next = error.source();
    }
    false
}

fn dropped_io(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::NotConnected
            | io::ErrorKind::UnexpectedEof
    )
}

/// Runs `call`, and once more if its connection was [`dropped`]. Only for calls
/// that are safe to repeat.
pub(crate) fn retry_once<'a, T: Send + 'a>(
    call: impl Fn() -> BoxFuture<'a, Result<T, StoreError>> + Send + 'a,
) -> BoxFuture<'a, Result<T, StoreError>> {
    Box::pin(async move {
        match call().await {
            Err(e) if dropped(&e) => {
                tracing::debug!(
                    error = %crate::error::Chain(&e),
                    "mcp-tasks: a store connection was dropped; the call is tried again"
                );
                call().await
            }
            out => out,
        }
    })
}

/// A create, tried once more if its connection was [`dropped`]. The first try may
/// have been stored before the connection went: a second that finds the id taken
/// by exactly `record` (read back with `read`) counts it as stored. No other
/// create takes the id: ids are 256 random bits.
pub(crate) fn retry_create<'a>(
    record: &'a TaskRecord,
    create: impl Fn() -> BoxFuture<'a, Result<(), StoreError>> + Send + 'a,
    read: impl FnOnce() -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> + Send + 'a,
) -> BoxFuture<'a, Result<(), StoreError>> {
    Box::pin(async move {
        match create().await {
            Err(e) if dropped(&e) => tracing::debug!(
                error = %crate::error::Chain(&e),
                "mcp-tasks: a store connection was dropped; the create is tried again"
            ),
            out => return out,
        }
        match create().await {
            Err(StoreError::Duplicate) => match read().await? {
                Some(stored) if stored == *record => Ok(()),
                _ => Err(StoreError::Duplicate),
            },
            out => out,
        }
    })
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{dropped, retry_once};
    use crate::error::StoreError;

    fn io_error(kind: io::ErrorKind) -> StoreError {
        StoreError::backend(io::Error::from(kind))
    }

    #[test]
    fn only_a_dropped_connection_counts() {
        for kind in [
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::NotConnected,
            io::ErrorKind::UnexpectedEof,
        ] {
            assert!(dropped(&io_error(kind)), "{kind:?}");
        }
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::TimedOut,
            io::ErrorKind::Other,
        ] {
            assert!(!dropped(&io_error(kind)), "{kind:?}");
        }
        assert!(!dropped(&StoreError::Contention));
    }

    #[tokio::test]
    async fn a_dropped_call_is_tried_once_more_and_no_more() {
        let calls = AtomicUsize::new(0);
        let out: Result<(), StoreError> = retry_once(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(io_error(io::ErrorKind::BrokenPipe)) })
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        let calls = AtomicUsize::new(0);
        let out = retry_once(|| {
            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
            Box::pin(async move {
                match first {
                    true => Err(io_error(io::ErrorKind::ConnectionReset)),
                    false => Ok(7),
                }
            })
        })
        .await;
        assert_eq!(out.ok(), Some(7));

        let calls = AtomicUsize::new(0);
        let out: Result<(), StoreError> = retry_once(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(io_error(io::ErrorKind::TimedOut)) })
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "a timeout is not retried");
    }
}
