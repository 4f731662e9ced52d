//! A dissemination barrier over counters in shared memory.
//!
//! In round `r` rank `i` signals rank `(i + 2^r) mod n` and waits for the signal of rank
//! `(i - 2^r) mod n`; after `ceil(log2 n)` rounds every rank has (transitively) heard from
//! every other. Signals are monotonic counters, one per (rank, round): barrier number `g`
//! waits until its counter reaches `g`, so no counter is ever reset and a rank that races one
//! barrier ahead cannot confuse a slower one. The barrier is a pollable state machine so that
//! fence can be a request like every other synchronization.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

const CACHE_LINE: usize = 64;

/// Where the counters of a barrier for `n` ranks live, relative to its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BarrierLayout {
    n: usize,
    rounds: u32,
    row_bytes: usize,
}

impl BarrierLayout {
    /// Layout for `n` ranks.
    pub(crate) fn new(n: usize) -> Self {
        let rounds = if n <= 1 {
            0
        } else {
            usize::BITS - (n - 1).leading_zeros()
        };
        let row_bytes = (rounds as usize * 8).div_ceil(CACHE_LINE).max(1) * CACHE_LINE;
        BarrierLayout {
            n,
            rounds,
            row_bytes,
        }
    }

    /// Bytes needed for all counters (a multiple of the cache line).
    pub(crate) fn bytes(&self) -> usize {
        // Saturating: an absurd `n` (read from a damaged boot segment) must make the
        // caller's checked layout arithmetic fail, not wrap.
        self.n.saturating_mul(self.row_bytes)
    }
}

/// One rank's handle on a barrier in shared memory.
#[derive(Debug)]
pub(crate) struct Barrier {
    base: *const u8,
    layout: BarrierLayout,
    me: usize,
    /// Number of barriers this rank has entered.
    generation: Cell<u64>,
}

// SAFETY: the base pointer refers to shared memory owned by a Segment that the owner of the
// Barrier keeps alive; counters are only accessed atomically.
unsafe impl Send for Barrier {}

/// Progress of one barrier instance at one rank.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BarrierWait {
    generation: u64,
    round: u32,
    signaled: bool,
}

impl Barrier {
    /// A handle for rank `me`.
    ///
    /// # Safety
    /// `base` must point to `layout.bytes()` bytes of zero-initialised (or previously used by a
    /// barrier with the same layout) memory, aligned to 8 bytes, shared by all `n` ranks and
    /// valid for the lifetime of the returned value.
    pub(crate) unsafe fn new(base: *const u8, layout: BarrierLayout, me: usize) -> Self {
        assert!(me < layout.n);
        debug_assert_eq!(base as usize % 8, 0);
        Barrier {
            base,
            layout,
            me,
            generation: Cell::new(0),
        }
    }

    fn counter(&self, rank: usize, round: u32) -> &AtomicU64 {
        assert!(rank < self.layout.n && round < self.layout.rounds);
        // SAFETY: in bounds of the counter area by the layout; 8-byte aligned; the area is
        // shared memory that outlives `self` (constructor contract). AtomicU64 has the same
        // layout as u64 and may alias memory written by other processes.
        unsafe {
            &*(self
                .base
                .add(rank * self.layout.row_bytes + round as usize * 8)
                .cast::<AtomicU64>())
        }
    }

    /// Enters a new barrier; poll the returned state until it completes.
    pub(crate) fn begin(&self) -> BarrierWait {
        let generation = self.generation.get() + 1;
        self.generation.set(generation);
        BarrierWait {
            generation,
            round: 0,
            signaled: false,
        }
    }

    /// Advances `wait` as far as possible without blocking; true when the barrier completed.
    pub(crate) fn poll(&self, wait: &mut BarrierWait) -> bool {
        let n = self.layout.n;
        while wait.round < self.layout.rounds {
            if !wait.signaled {
                let partner = (self.me + (1usize << wait.round)) % n;
                // Release: everything this rank wrote before the barrier becomes visible to
                // the partner (and transitively to everyone) once it observes the signal.
                self.counter(partner, wait.round)
                    .fetch_add(1, Ordering::Release);
                wait.signaled = true;
            }
            // Acquire: pairs with the Release increment of the rank that signalled us. All
            // updates of a counter are RMWs, so any value read heads a release sequence.
            if self.counter(self.me, wait.round).load(Ordering::Acquire) >= wait.generation {
                wait.round += 1;
                wait.signaled = false;
            } else {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    fn wait(b: &Barrier) {
        let mut w = b.begin();
        while !b.poll(&mut w) {
            std::thread::yield_now();
        }
    }

    #[test]
    fn rounds_are_ceil_log2() {
        assert_eq!(BarrierLayout::new(1).rounds, 0);
        assert_eq!(BarrierLayout::new(2).rounds, 1);
        assert_eq!(BarrierLayout::new(3).rounds, 2);
        assert_eq!(BarrierLayout::new(8).rounds, 3);
        assert_eq!(BarrierLayout::new(9).rounds, 4);
        assert_eq!(BarrierLayout::new(9).bytes(), 9 * 64);
    }

    /// Threads stand in for processes: counters are the same atomics either way.
    #[test]
    fn no_thread_leaves_before_all_arrive() {
        for n in [1usize, 2, 3, 5, 8] {
            let layout = BarrierLayout::new(n);
            let mem: Arc<Vec<AtomicU64>> =
                Arc::new((0..layout.bytes() / 8).map(|_| AtomicU64::new(0)).collect());
            let arrived = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..n)
                .map(|me| {
                    let mem = Arc::clone(&mem);
                    let arrived = Arc::clone(&arrived);
                    std::thread::spawn(move || {
                        // SAFETY: the Vec outlives the thread's barrier and is large enough.
                        let b = unsafe { Barrier::new(mem.as_ptr().cast(), layout, me) };
                        for round in 0..50 {
                            arrived.fetch_add(1, Ordering::SeqCst);
                            wait(&b);
                            assert!(arrived.load(Ordering::SeqCst) >= (round + 1) * n);
                            wait(&b);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        }
    }
}
