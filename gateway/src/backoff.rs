//! The pauses between the gateway's attempts to learn its upstream's era: the
//! crate's backoff (`src/backoff.rs`, which is internal to `mcp_tasks`) written
//! again in its smallest form. Doubling pauses, each drawn at random from the
//! upper half of its range, so that gateways that failed together do not come
//! back together on an upstream that is starting.

use std::time::Duration;

/// Pauses between attempts: the first at most `first`, each next one's ceiling
/// doubled up to `last`; every pause is random between half its ceiling and the
/// ceiling.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    first: Duration,
    last: Duration,
    ceiling: Duration,
}

impl Backoff {
    /// Pauses from `first` up to `last` (`last` is at least `first`).
    pub(crate) fn new(first: Duration, last: Duration) -> Backoff {
        Backoff {
            first,
            last: last.max(first),
            ceiling: first,
        }
    }

    /// The next pause; the ceiling of the one after it doubles.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling;
        self.ceiling = ceiling.saturating_mul(2).min(self.last);
        let half = ceiling / 2;
        half + half.mul_f64(unit_random())
    }

    /// Starts again from the first pause (after a success).
    pub(crate) fn reset(&mut self) {
        self.ceiling = self.first;
    }
}

/// A random number in `[0, 1]`, from the operating system's source (0 if it fails).
fn unit_random() -> f64 {
    use rand::TryRng as _;
    let draw = rand::rngs::SysRng.try_next_u64().unwrap_or(0);
    // The top 53 bits, which an f64 holds exactly.
    (draw >> 11) as f64 / (1u64 << 53) as f64
}
