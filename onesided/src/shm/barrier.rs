//! A dissemination barrier over counters in shared memory.
//!
//! In round `r` rank `i` signals rank `(i + 2^r) mod n` and waits for the signal of rank
//! `(i - 2^r) mod n`; after `ceil(log2 n)` rounds every rank has (transitively) heard from
//! every other. A signal is one word written by exactly one partner: the barrier's number
//! `g`, the caller's tag (what collective the barrier serves) and a mismatch flag. Each
//! (rank, round) has two words, used by the parity of `g`: a partner can be at most one
//! barrier ahead (it cannot finish barrier `g + 1` before we enter it), so it never
//! overwrites a signal not yet read, and nothing is ever reset.
//!
//! A rank whose partner's tag differs from its own, or whose partner flags a mismatch, flags
//! its own later signals; since every rank hears from every other along round-ordered paths,
//! every rank of a barrier in which two tags differ ends it flagged
//! ([`BarrierWait::mismatched`]), and every rank still completes it: a mismatch never
//! hangs. Carrying the tag in the signal costs nothing beyond the signal itself. The barrier
//! is a pollable state machine so that fence can be a request like every other
//! synchronization.
//!
//! The protocol names its words ([`CtrlWord::Signal`]) and reaches them through a
//! [`ControlPlane`]: a signal is a posted store, the wait a load whose answer may come
//! later. The window collectives run it on the window's plane; the bootstrap board, whose
//! ranks share one segment, on the barrier's own memory ([`Barrier`] is a plane of its
//! signal words).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::plane::{Answer, Awaited, ControlPlane, CtrlWord, MappedWords};

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
        let row_bytes = (rounds as usize * 16).div_ceil(CACHE_LINE).max(1) * CACHE_LINE;
        BarrierLayout {
            n,
            rounds,
            row_bytes,
        }
    }

    /// Where, from the base, the signal word of `rank` in `round` for barriers of `parity`
    /// lies.
    #[inline]
    pub(crate) fn signal_offset(&self, rank: usize, round: u32, parity: u8) -> usize {
        assert!(rank < self.n && round < self.rounds && parity < 2);
        rank * self.row_bytes + (round as usize * 2 + parity as usize) * 8
    }

    /// Rounds of a barrier (⌈log2 n⌉).
    #[cfg(test)]
    pub(crate) fn rounds(&self) -> u32 {
        self.rounds
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
    generation: AtomicU64,
}

// SAFETY: the base pointer refers to shared memory owned by a Segment that the owner of the
// Barrier keeps alive; counters are only accessed atomically.
unsafe impl Send for Barrier {}
// SAFETY: as for Send; the generation count is an atomic, and every shared word is
// accessed atomically.
unsafe impl Sync for Barrier {}

/// Progress of one barrier instance at one rank.
#[derive(Debug)]
pub(crate) struct BarrierWait {
    generation: u64,
    round: u32,
    signaled: bool,
    /// The caller's tag (31 bits).
    tag: u32,
    /// A partner's tag differed, or a partner was flagged.
    mismatched: bool,
    /// The read of this round's signal word, while the plane has not answered it.
    reading: Option<Awaited>,
    /// Signals are posted unawaited ([`ControlPlane::post_store_unawaited`]).
    unawaited: bool,
}

impl BarrierWait {
    /// True when some rank of the barrier entered it with another tag (meaningful once the
    /// barrier completed; every rank of the barrier then agrees).
    pub(crate) fn mismatched(&self) -> bool {
        self.mismatched
    }

    /// True when its signals are posted unawaited ([`Barrier::begin_unawaited`]).
    pub(crate) fn unawaited(&self) -> bool {
        self.unawaited
    }
}

/// Bit of a signal that flags a mismatch.
const MISMATCH: u64 = 1 << 31;
/// Bits of a signal that hold the tag.
const TAG_BITS: u64 = MISMATCH - 1;

/// The signal for barrier `generation` with `tag`.
fn signal(generation: u64, tag: u32, mismatched: bool) -> u64 {
    ((generation & 0xffff_ffff) << 32)
        | if mismatched { MISMATCH } else { 0 }
        | (u64::from(tag) & TAG_BITS)
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
            generation: AtomicU64::new(0),
        }
    }

    /// The signal word of `rank` in `round` for barriers of `parity`.
    #[inline]
    fn slot(&self, rank: usize, round: u32, parity: u8) -> &AtomicU64 {
        let offset = self.layout.signal_offset(rank, round, parity);
        // SAFETY: in bounds of the signal area by the layout (signal_offset checks rank and
        // round); 8-byte aligned; the area is shared memory that outlives `self`
        // (constructor contract). AtomicU64 has the same layout as u64 and may alias memory
        // written by other processes.
        unsafe { &*(self.base.add(offset).cast::<AtomicU64>()) }
    }

    /// Enters a new barrier for the collective `tag` (its low 31 bits count); poll the
    /// returned state until it completes.
    pub(crate) fn begin(&self, tag: u64) -> BarrierWait {
        // Relaxed: counts this rank's own barriers; the window collective that enters one
        // is started by one thread at a time (its caller's).
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        BarrierWait {
            generation,
            round: 0,
            signaled: false,
            tag: (tag & TAG_BITS) as u32,
            mismatched: false,
            reading: None,
            unawaited: false,
        }
    }

    /// [`Barrier::begin`] with signals that no later `order_posted` of the plane waits for
    /// ([`ControlPlane::post_store_unawaited`]): for a barrier after which nothing needs
    /// this rank's signals delivered — every partner's own signals, which the barrier
    /// waits for, tell that it got ours far enough.
    pub(crate) fn begin_unawaited(&self, tag: u64) -> BarrierWait {
        BarrierWait {
            unawaited: true,
            ..self.begin(tag)
        }
    }

    /// Advances `wait` on the barrier's own memory (see [`Barrier::poll_on`]), which
    /// answers at once and never fails.
    pub(crate) fn poll(&self, wait: &mut BarrierWait) -> bool {
        matches!(self.poll_on(self, wait), Ok(true))
    }

    /// Advances `wait` as far as possible without blocking, reaching the signal words
    /// through `plane`; true when the barrier completed (an error: the plane failed).
    pub(crate) fn poll_on<P: ControlPlane + ?Sized>(
        &self,
        plane: &P,
        wait: &mut BarrierWait,
    ) -> crate::error::Result<bool> {
        let n = self.layout.n;
        let parity = (wait.generation & 1) as u8;
        while wait.round < self.layout.rounds {
            if !wait.signaled {
                let partner = (self.me + (1usize << wait.round)) % n;
                // Release: everything this rank wrote before the barrier becomes visible to
                // the partner (and transitively to everyone) once it observes the signal.
                let word = CtrlWord::Signal {
                    at: partner,
                    round: wait.round,
                    parity,
                };
                let value = signal(wait.generation, wait.tag, wait.mismatched);
                if wait.unawaited {
                    plane.post_store_unawaited(word, value, Ordering::Release);
                } else {
                    plane.post_store(word, value, Ordering::Release);
                }
                wait.signaled = true;
            }
            // Acquire: pairs with the Release store of the one rank that signals us here.
            let mine = CtrlWord::Signal {
                at: self.me,
                round: wait.round,
                parity,
            };
            // A ready answer stays in registers; only a pending read is kept.
            let got = match wait.reading.take() {
                None => match plane.load(mine, Ordering::Acquire) {
                    Answer::Ready(v) => v,
                    Answer::Pending(op) => {
                        wait.reading = Some(Awaited::Pending(op));
                        return Ok(false);
                    }
                },
                Some(mut read) => match read.value(plane)? {
                    Some(v) => v,
                    None => {
                        wait.reading = Some(read);
                        return Ok(false);
                    }
                },
            };
            if got >> 32 != wait.generation & 0xffff_ffff {
                return Ok(false);
            }
            if got & MISMATCH != 0 || (got & TAG_BITS) as u32 != wait.tag {
                wait.mismatched = true;
            }
            wait.round += 1;
            wait.signaled = false;
        }
        Ok(true)
    }
}

/// The barrier's own memory as a plane of its signal words: the bootstrap board's ranks
/// share the segment, so a signal is a CPU store and a read a CPU load, answered at once.
impl MappedWords for Barrier {
    #[inline]
    fn mapped(&self, word: CtrlWord) -> &AtomicU64 {
        let CtrlWord::Signal { at, round, parity } = word else {
            unreachable!("a barrier holds signal words only, not {word:?}")
        };
        self.slot(at, round, parity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    fn wait(b: &Barrier, tag: u64) -> bool {
        let mut w = b.begin(tag);
        while !b.poll(&mut w) {
            std::thread::yield_now();
        }
        w.mismatched()
    }

    #[test]
    fn rounds_are_ceil_log2() {
        assert_eq!(BarrierLayout::new(1).rounds, 0);
        assert_eq!(BarrierLayout::new(2).rounds, 1);
        assert_eq!(BarrierLayout::new(3).rounds, 2);
        assert_eq!(BarrierLayout::new(8).rounds, 3);
        assert_eq!(BarrierLayout::new(9).rounds, 4);
        assert_eq!(BarrierLayout::new(9).bytes(), 9 * 64);
        assert_eq!(BarrierLayout::new(64).bytes(), 64 * 128);
    }

    /// One rank entering with another tag: every rank completes the barrier and every rank
    /// sees the mismatch, whichever rank differs and however many ranks there are; the next
    /// barriers with equal tags are clean again.
    #[test]
    fn a_different_tag_flags_every_rank() {
        for n in [2usize, 3, 5, 8] {
            for odd in 0..n {
                let layout = BarrierLayout::new(n);
                let mem: Arc<Vec<AtomicU64>> =
                    Arc::new((0..layout.bytes() / 8).map(|_| AtomicU64::new(0)).collect());
                let threads: Vec<_> = (0..n)
                    .map(|me| {
                        let mem = Arc::clone(&mem);
                        std::thread::spawn(move || {
                            // SAFETY: the Vec outlives the thread's barrier and is large enough.
                            let b = unsafe { Barrier::new(mem.as_ptr().cast(), layout, me) };
                            assert!(!wait(&b, 7));
                            let tag = if me == odd { 9 } else { 8 };
                            assert!(
                                wait(&b, tag),
                                "n {n}, odd rank {odd}: rank {me} saw no mismatch"
                            );
                            assert!(!wait(&b, 10));
                        })
                    })
                    .collect();
                for t in threads {
                    t.join().unwrap();
                }
            }
        }
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
                            assert!(!wait(&b, round as u64 % 3));
                            assert!(arrived.load(Ordering::SeqCst) >= (round + 1) * n);
                            assert!(!wait(&b, round as u64 % 3));
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        }
    }

    /// The protocol against a plane that answers late and applies operations in a shuffled
    /// order (ranks simulated in one thread, a random one moving at each step): nobody
    /// leaves barrier `g` before everyone entered it, a different tag flags every rank of
    /// that barrier and only that one, and every barrier completes.
    #[test]
    fn barrier_over_a_late_reordering_plane() {
        use crate::plane::fake::LatePlane;
        const BARRIERS: u64 = 12;
        for n in [2usize, 3, 5, 8] {
            for seed in 0..40u64 {
                let plane =
                    LatePlane::new((seed + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n as u64);
                let layout = BarrierLayout::new(n);
                // The handles' own memory is not used: every word goes through the plane.
                let mem: Vec<AtomicU64> =
                    (0..layout.bytes() / 8).map(|_| AtomicU64::new(0)).collect();
                let barriers: Vec<Barrier> = (0..n)
                    // SAFETY: `mem` outlives the handles and is large enough.
                    .map(|me| unsafe { Barrier::new(mem.as_ptr().cast(), layout, me) })
                    .collect();
                let odd = (seed as usize) % n;
                let tag = |g: u64, me: usize| if g == 5 && me == odd { 99 } else { g % 3 };
                let mut entered = vec![0u64; n];
                let mut waits: Vec<Option<BarrierWait>> = (0..n).map(|_| None).collect();
                let mut rng = seed | 1;
                let mut steps = 0u64;
                while entered.iter().any(|&e| e < BARRIERS) || waits.iter().any(Option::is_some) {
                    steps += 1;
                    assert!(
                        steps < 1_000_000,
                        "n {n} seed {seed}: barriers do not complete"
                    );
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let me = (rng % n as u64) as usize;
                    let Some(w) = &mut waits[me] else {
                        if entered[me] < BARRIERS {
                            entered[me] += 1;
                            waits[me] = Some(barriers[me].begin(tag(entered[me], me)));
                        }
                        continue;
                    };
                    if barriers[me].poll_on(&plane, w).unwrap() {
                        let g = entered[me];
                        assert!(
                            entered.iter().all(|&e| e >= g),
                            "n {n} seed {seed}: rank {me} left barrier {g} early"
                        );
                        assert_eq!(w.mismatched(), g == 5, "n {n} seed {seed}: barrier {g}");
                        waits[me] = None;
                    }
                }
            }
        }
    }
}
