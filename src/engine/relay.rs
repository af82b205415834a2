//! The relay of other nodes' changes into this node's notifier, waiters and runners.

use super::{Engine, RECHECK_BATCH, RETRY};
use crate::outage::Outage;
use crate::store::{ChangeFeed, FeedEvent};
use crate::task::TaskId;

/// Re-reads the tasks other nodes changed that this node knows (a worker waits on
/// it or works on it, an `Auto` runner, a listen stream names it; every task for a
/// custom notifier) and tells this node's notifier, waiting workers and `Auto`
/// runners. The changes waiting in the feed are read together, in one store call.
/// A read that fails is retried with a bounded backoff, so a store outage delays a
/// change but never loses it. After missed changes every waiter re-reads its task
/// (at most 64 reads out at once), and the tasks of every runner and listen stream
/// of this node are re-read. Ends when the layer is gone or the feed closes.
pub(crate) async fn relay_remote_changes(engine: std::sync::Weak<Engine>, mut feed: ChangeFeed) {
    let mut pending: Vec<TaskId> = Vec::new();
    let mut backoff = RETRY;
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut reads = Outage::new("read tasks changed on another node");
    loop {
        let event = tokio::select! {
            event = feed.recv() => event,
            () = sleep_until_some(retry_at) => {
                retry_at = None;
                let Some(engine) = engine.upgrade() else { return };
                let ids = engine.of_interest(std::mem::take(&mut pending));
                let failed = engine.recheck(ids, &mut reads).await;
                if failed.is_empty() {
                    backoff.reset();
                } else {
                    pending.extend(failed);
                    retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
                }
                continue;
            }
        };
        let Some(engine) = engine.upgrade() else {
            return;
        };
        // This change and those already waiting behind it, read together.
        let mut ids = Vec::new();
        let mut next = event;
        loop {
            match next {
                Some(FeedEvent::Changed(id)) => ids.push(id),
                Some(FeedEvent::Missed(skipped)) => {
                    tracing::warn!(
                        skipped,
                        "mcp-tasks: changes from other nodes were missed; re-reading every task waited on here"
                    );
                    engine.wake_all();
                    ids.extend(engine.node.running());
                    ids.extend(engine.listen.task_ids());
                }
                None => return,
            }
            if ids.len() >= RECHECK_BATCH {
                break;
            }
            match feed.try_recv() {
                Some(event) => next = Some(event),
                None => break,
            }
        }
        let failed = engine.recheck(engine.of_interest(ids), &mut reads).await;
        if !failed.is_empty() {
            pending.extend(failed);
            retry_at.get_or_insert_with(|| tokio::time::Instant::now() + backoff.next_delay());
        }
    }
}

/// Sleeps until `at`; never returns without one.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
