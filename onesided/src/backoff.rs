//! Exponential backoff for every wait loop in onesided.
//!
//! Ranks are often oversubscribed (8 ranks on 2 cores in CI), so a waiter must give its core
//! away quickly: a few rounds of `pause`, then `sched_yield`, then short sleeps that grow to a
//! cap. A waiter that makes progress calls [`Backoff::reset`].
//!
//! When every rank of the node has a core of its own, nobody needs the waiter's core: it
//! yields (which returns at once) for much longer before it sleeps, because a sleep of tens
//! of microseconds would dominate synchronizations that take a fraction of one (a fence of
//! two ranks takes ~0.2 µs here; sleeping after 16 yields made it 1–3 µs on average).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Rounds spent spinning with `pause` (1, 2, 4, ... 32 iterations).
const SPIN_ROUNDS: u32 = 6;
/// Rounds spent in `sched_yield` after spinning when ranks share cores.
const YIELD_ROUNDS_SHARED: u32 = 16;
/// Rounds spent in `sched_yield` when every rank has a core (about a millisecond).
const YIELD_ROUNDS_DEDICATED: u32 = 2000;
/// The yield rounds in effect. Relaxed: a tuning knob set once at start-up; a stale value
/// only changes how long one wait yields before sleeping.
static YIELD_ROUNDS: AtomicU32 = AtomicU32::new(YIELD_ROUNDS_SHARED);

/// Tells every later wait whether the ranks of this node share cores.
pub(crate) fn set_oversubscribed(oversubscribed: bool) {
    let rounds = if oversubscribed {
        YIELD_ROUNDS_SHARED
    } else {
        YIELD_ROUNDS_DEDICATED
    };
    YIELD_ROUNDS.store(rounds, Ordering::Relaxed);
}
/// First sleep, doubled each round up to [`MAX_SLEEP`].
const FIRST_SLEEP: Duration = Duration::from_micros(20);
/// Longest sleep between two polls: bounds the latency a sleeping waiter adds.
const MAX_SLEEP: Duration = Duration::from_micros(500);

/// Exponential backoff state for one wait.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    round: u32,
}

impl Backoff {
    /// A fresh backoff that starts by spinning.
    pub(crate) fn new() -> Self {
        Backoff { round: 0 }
    }

    /// Start over after progress was made.
    pub(crate) fn reset(&mut self) {
        self.round = 0;
    }

    /// Wait a little; each call waits longer than the previous one, up to a cap.
    pub(crate) fn snooze(&mut self) {
        if self.round < SPIN_ROUNDS {
            for _ in 0..(1u32 << self.round) {
                std::hint::spin_loop();
            }
        } else if self.round < SPIN_ROUNDS + YIELD_ROUNDS.load(Ordering::Relaxed) {
            rustix::thread::sched_yield();
        } else {
            let yields = YIELD_ROUNDS.load(Ordering::Relaxed);
            let doublings = (self.round - SPIN_ROUNDS - yields).min(8);
            std::thread::sleep((FIRST_SLEEP * (1 << doublings)).min(MAX_SLEEP));
        }
        self.round = self.round.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn sleeps_are_capped() {
        let mut b = Backoff::new();
        for _ in 0..(SPIN_ROUNDS + YIELD_ROUNDS.load(Ordering::Relaxed) + 20) {
            b.snooze();
        }
        let t = Instant::now();
        b.snooze();
        // One snooze at the cap sleeps MAX_SLEEP; allow generous scheduling slack.
        assert!(t.elapsed() < Duration::from_millis(50));
        assert!(t.elapsed() >= MAX_SLEEP);
    }

    #[test]
    fn reset_returns_to_spinning() {
        let mut b = Backoff::new();
        for _ in 0..40 {
            b.snooze();
        }
        b.reset();
        assert_eq!(b.round, 0);
    }
}
