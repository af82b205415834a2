//! Warnings of store calls that keep failing: the first failure is told at once,
//! the rest in a summary at most every [`SUMMARY_EVERY`], and the end of the outage
//! in one line, so an outage costs a few log lines however often (and by however
//! many waiters) the calls are retried.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Chain, StoreError};

/// During an outage, the least time between two warnings of one kind.
pub(crate) const SUMMARY_EVERY: Duration = Duration::from_secs(30);

/// The warnings of one kind of store call that keeps failing (renewing the lease,
/// reading the leases, a waiting worker's read).
#[derive(Debug)]
pub(crate) struct Outage {
    /// What failed, as in "could not {doing}".
    doing: &'static str,
    /// Since when it fails, and how often it failed since.
    since: Option<(Instant, u64)>,
    /// When the last warning went out.
    told: Instant,
}

impl Outage {
    pub(crate) fn new(doing: &'static str) -> Self {
        Outage {
            doing,
            since: None,
            told: Instant::now(),
        }
    }

    /// One more failure, with its cause (`None`: the call timed out).
    pub(crate) fn failed(&mut self, cause: Option<&StoreError>) {
        let now = Instant::now();
        let cause = cause.map(|e| Chain(e).to_string());
        let cause = cause
            .as_deref()
            .unwrap_or("the store did not answer in time");
        match &mut self.since {
            None => {
                self.since = Some((now, 1));
                self.told = now;
                tracing::warn!(error = %cause, "mcp-tasks: could not {}; retrying", self.doing);
            }
            Some((since, failures)) => {
                *failures += 1;
                if now.saturating_duration_since(self.told) >= SUMMARY_EVERY {
                    self.told = now;
                    tracing::warn!(
                        error = %cause,
                        failures = *failures,
                        failing_for_s = now.saturating_duration_since(*since).as_secs(),
                        "mcp-tasks: still could not {}; retrying",
                        self.doing
                    );
                }
            }
        }
    }

    /// A success: ends the outage, if there was one, with one line.
    pub(crate) fn succeeded(&mut self) {
        if let Some((since, failures)) = self.since.take() {
            tracing::info!(
                failures,
                failed_for_ms = since.elapsed().as_millis() as u64,
                "mcp-tasks: could {} again",
                self.doing
            );
        }
    }
}

/// An [`Outage`] that many tasks report into at once (every waiting worker's
/// reads), told as one. A success costs one atomic load outside an outage.
#[derive(Debug)]
pub(crate) struct SharedOutage {
    outage: Mutex<Outage>,
    failing: AtomicBool,
}

impl SharedOutage {
    pub(crate) fn new(doing: &'static str) -> Self {
        SharedOutage {
            outage: Mutex::new(Outage::new(doing)),
            failing: AtomicBool::new(false),
        }
    }

    /// One more failure, from any of the tasks.
    pub(crate) fn failed(&self, cause: &StoreError) {
        let mut outage = self.lock();
        outage.failed(Some(cause));
        self.failing.store(true, Ordering::Relaxed);
    }

    /// A success, from any of the tasks: ends the outage, if there was one.
    pub(crate) fn succeeded(&self) {
        if self.failing.load(Ordering::Relaxed) {
            let mut outage = self.lock();
            outage.succeeded();
            self.failing.store(false, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outage> {
        // Every update leaves the value whole; a panic elsewhere cannot tear it.
        self.outage
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
