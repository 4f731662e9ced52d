//! Accumulates of many elements under an exclusive lock, applied with plain loads and
//! stores — one vectorized pass — instead of one locked instruction per element.
//!
//! MPI makes every accumulate atomic per element against every other accumulate and
//! atomic, of any process and any thread (MPI-4.1 §12.7.1). onesided keeps the small ones
//! lock-free (a fetch_and_op is one locked instruction, 20 ns here against MPICH 5.0.2's
//! 71), so a run of N elements costs N locked instructions: 4 KiB of u64 sums took 3.1 µs
//! on this machine, where MPICH 5.0.2 — a lock per accumulate, then vector adds — took
//! 0.28 µs. Under an exclusive lock on the target no other process may touch the target's
//! window memory (other lock holders wait for the lock; fence and PSCW epochs cannot
//! overlap a passive-target one; the target's own loads and stores would conflict), so
//! only other threads of this process could meet the run: the window's [`PlainGate`] keeps
//! them apart, and a run of [`PLAIN_MIN_BYTES`] or more goes plain.
//!
//! The gate costs the thread that issued the window's atomics so far one comparison per
//! atomic. The first atomic of any other thread turns plain runs off for the window's life
//! (and waits for one in progress); a deferred accumulate that the engine runs on another
//! thread counts as another thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::attention::live_thread_id;
use crate::ops::{AccElement, Op};

/// Plain runs made by this process (for tests: [`crate::testing::plain_accumulate_runs`]).
static RUNS: AtomicU64 = AtomicU64::new(0);

/// Plain runs this process made so far.
pub(crate) fn runs() -> u64 {
    // Relaxed: a count read by tests after the runs they count.
    RUNS.load(Ordering::Relaxed)
}

/// The shortest run that goes plain: below it the gate's handshake (a locked store and a
/// load) costs about what the locked instructions it saves do.
pub(crate) const PLAIN_MIN_BYTES: usize = 64;

/// Which threads of this process issue atomics on a window, and whether a plain run is in
/// progress (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct PlainGate {
    /// The thread that issued the window's atomics so far ([`live_thread_id`]; 0: none
    /// yet). An id a later thread reuses is still right: the two were never alive together,
    /// so never issued atomics at the same time.
    owner: AtomicU64,
    /// A thread other than the owner issued atomics: no more plain runs (never cleared).
    shared: AtomicBool,
    /// The owner is in a plain run.
    busy: AtomicBool,
}

/// Clears the gate's `busy` when the run ends, also if it unwound.
struct RunEnds<'a>(&'a AtomicBool);

impl Drop for RunEnds<'_> {
    fn drop(&mut self) {
        // Release: the run's plain stores before it, for a thread that waits for the run
        // (its SeqCst load of `busy` acquires them).
        self.0.store(false, Ordering::Release);
    }
}

impl PlainGate {
    /// Before any atomic on the window's memory: nothing to do for the owner.
    #[inline(always)]
    pub(crate) fn before_atomic(&self) {
        // Relaxed: the owner changes once, from none; a stale none only takes the cold
        // path, which decides with a compare-exchange.
        if self.owner.load(Ordering::Relaxed) != live_thread_id() {
            self.other_thread();
        }
    }

    /// Makes thread `me` the owner if the window has none yet: true when it is now.
    fn claim(&self, me: u64) -> bool {
        // Relaxed: the identity only; the handshake of `other_thread` orders the memory.
        self.owner
            .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// The first atomic of the window claims it for the calling thread; any other thread
    /// turns plain runs off and waits for one in progress.
    #[cold]
    #[inline(never)]
    fn other_thread(&self) {
        if self.claim(live_thread_id()) {
            return;
        }
        // SeqCst, with the owner's SeqCst store of `busy` and load of `shared` in
        // `run_plain`: of the two stores at least one is seen by the other thread's load
        // (Dekker's handshake), so either the owner sees `shared` and goes atomic, or this
        // thread sees the run and waits for it.
        if !self.shared.load(Ordering::SeqCst) {
            self.shared.store(true, Ordering::SeqCst);
        }
        let mut spins = 0u32;
        // SeqCst: see above; it also acquires the run's stores (RunEnds' Release).
        while self.busy.load(Ordering::SeqCst) {
            // A run is a bounded loop over memory: spin briefly, then let the owner run.
            spins += 1;
            if spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Runs `plain` — plain loads and stores of window memory — when no thread but the
    /// caller has issued atomics on the window: true when it ran, false (nothing done)
    /// otherwise. The caller holds an exclusive lock on the memory's process.
    #[inline]
    pub(crate) fn run_plain(&self, plain: impl FnOnce()) -> bool {
        let me = live_thread_id();
        // Relaxed: as in before_atomic.
        let owner = self.owner.load(Ordering::Relaxed);
        if owner != me && (owner != 0 || !self.claim(me)) {
            return false;
        }
        // Relaxed: a shortcut; the SeqCst load below decides.
        if self.shared.load(Ordering::Relaxed) {
            return false;
        }
        // SeqCst: the handshake of `other_thread`.
        self.busy.store(true, Ordering::SeqCst);
        let ends = RunEnds(&self.busy);
        if self.shared.load(Ordering::SeqCst) {
            return false;
        }
        plain();
        drop(ends);
        // Relaxed: see runs().
        RUNS.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// Applies `op` with `origin` to the elements at `base` with plain loads and stores,
/// storing their previous values in `out` if given.
///
/// # Safety
/// `base` points to `origin.len()` aligned elements that nothing else accesses during the
/// call (an exclusive lock on their process, and the window's [`PlainGate`]); `out`, if
/// given, has `origin.len()` elements.
pub(crate) unsafe fn plain_run<E: AccElement>(
    base: *mut E,
    origin: &[E],
    out: Option<&mut [E]>,
    op: Op,
) {
    // SAFETY: the caller's contract: valid, aligned, and ours alone for the call.
    let dst = unsafe { std::slice::from_raw_parts_mut(base, origin.len()) };
    if let Some(out) = out {
        out.copy_from_slice(dst);
    }
    // One loop per operation: each compiles to vector code with its operation inlined.
    macro_rules! each {
        ($op:expr) => {
            for (d, &v) in dst.iter_mut().zip(origin) {
                *d = E::combine($op, *d, v);
            }
        };
    }
    match op {
        Op::NoOp => {}
        Op::Replace => dst.copy_from_slice(origin),
        Op::Sum => each!(Op::Sum),
        Op::Prod => each!(Op::Prod),
        Op::Max => each!(Op::Max),
        Op::Min => each!(Op::Min),
        Op::Band => each!(Op::Band),
        Op::Bor => each!(Op::Bor),
        Op::Bxor => each!(Op::Bxor),
        other => each!(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_run_combines_like_the_atomics_and_returns_the_old_values() {
        let mut target: Vec<u64> = (0..32).collect();
        let origin: Vec<u64> = (0..32).map(|i| 100 + i).collect();
        let mut old = vec![0u64; 32];
        // SAFETY: a local vector of 32 elements, ours alone.
        unsafe { plain_run(target.as_mut_ptr(), &origin, Some(&mut old), Op::Sum) };
        assert_eq!(old, (0..32).collect::<Vec<u64>>());
        assert_eq!(target, (0..32).map(|i| 100 + 2 * i).collect::<Vec<u64>>());
        let mut reals = vec![1.5f64; 16];
        // SAFETY: as above.
        unsafe { plain_run(reals.as_mut_ptr(), &[2.0; 16], None, Op::Max) };
        assert_eq!(reals, vec![2.0; 16]);
        let mut bytes = vec![0b1010u8; 100];
        // SAFETY: as above.
        unsafe { plain_run(bytes.as_mut_ptr(), &[0b0110; 100], None, Op::Bxor) };
        assert_eq!(bytes, vec![0b1100; 100]);
    }

    #[test]
    fn only_the_first_thread_runs_plain_and_another_threads_atomic_ends_it() {
        let gate = PlainGate::default();
        gate.before_atomic();
        assert!(gate.run_plain(|| {}), "the owner runs plain");
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!gate.run_plain(|| {}), "not the owner");
                gate.before_atomic();
            });
        });
        assert!(!gate.run_plain(|| {}), "another thread issued atomics");
    }

    #[test]
    fn another_threads_atomic_waits_for_a_run_in_progress() {
        let gate = PlainGate::default();
        let in_run = AtomicBool::new(false);
        let after = AtomicBool::new(false);
        std::thread::scope(|s| {
            assert!(gate.run_plain(|| {
                in_run.store(true, Ordering::SeqCst);
                s.spawn(|| {
                    while !in_run.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    gate.before_atomic();
                    // The run had ended before the atomic could start.
                    assert!(after.load(Ordering::SeqCst));
                });
                std::thread::sleep(std::time::Duration::from_millis(50));
                after.store(true, Ordering::SeqCst);
            }));
        });
    }
}
