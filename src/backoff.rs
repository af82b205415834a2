//! The one backoff of every retry loop in the layer: doubling pauses, each drawn
//! at random from the upper half of its range, so that nodes and tasks that failed
//! together do not retry together.

use std::time::Duration;

/// Pauses between retries: the first at most `first`, each next one's ceiling
/// doubled up to `last`; every pause is random between half its ceiling and the
/// ceiling. Kept in three words, for futures that park many of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    first_us: u32,
    last_us: u32,
    ceiling_us: u32,
}

impl Backoff {
    /// Pauses from `first` up to `last` (each at most about 71 minutes).
    pub(crate) const fn new(first: Duration, last: Duration) -> Self {
        let first_us = micros(first);
        let last_us = micros(last);
        let first_us = if first_us == 0 { 1 } else { first_us };
        let last_us = if last_us < first_us {
            first_us
        } else {
            last_us
        };
        Backoff {
            first_us,
            last_us,
            ceiling_us: first_us,
        }
    }

    /// The next pause, and the ceiling of the one after it doubled.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling_us;
        self.ceiling_us = ceiling.saturating_mul(2).min(self.last_us);
        let half = ceiling / 2;
        Duration::from_micros(u64::from(ceiling - half + jitter(half + 1)))
    }

    /// Sleeps the next pause.
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Starts again from the first pause (after a success).
    pub(crate) fn reset(&mut self) {
        self.ceiling_us = self.first_us;
    }
}

const fn micros(d: Duration) -> u32 {
    let us = d.as_micros();
    if us > u32::MAX as u128 {
        u32::MAX
    } else {
        us as u32
    }
}

/// A random number below `bound` (at least 1).
fn jitter(bound: u32) -> u32 {
    use rand::TryRng as _;
    let draw = rand::rngs::SysRng.try_next_u64().unwrap_or(0);
    u32::try_from(draw % u64::from(bound.max(1))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_last_each_in_the_upper_half_of_its_range() {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(400));
        let ceilings = [50, 100, 200, 400, 400, 400];
        for ceiling in ceilings {
            let pause = backoff.next_delay();
            let ceiling = Duration::from_millis(ceiling);
            assert!(
                pause >= ceiling / 2 && pause <= ceiling,
                "{pause:?} for {ceiling:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(50));
    }

    #[test]
    fn retries_that_start_together_spread_out() {
        let pauses: std::collections::HashSet<Duration> = (0..32)
            .map(|_| Backoff::new(Duration::from_secs(1), Duration::from_secs(1)).next_delay())
            .collect();
        assert!(pauses.len() > 16, "{} distinct pauses of 32", pauses.len());
    }

    #[test]
    fn out_of_range_settings_are_clamped() {
        let mut backoff = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert!(backoff.next_delay() <= Duration::from_micros(1));
        let mut backoff = Backoff::new(Duration::from_secs(1 << 40), Duration::from_secs(1));
        assert!(backoff.next_delay() <= Duration::from_micros(u64::from(u32::MAX)));
    }
}
