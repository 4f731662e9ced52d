//! Write combining for small puts reached by cross-memory attach.
//!
//! One `process_vm_writev` costs ~0.4 µs here whatever it moves, while one call carrying
//! 1000 eight-byte pieces costs ~0.12 µs per piece. Small puts to memory that is not in
//! shared memory are therefore copied into a staging buffer (which makes them locally
//! complete, as MPI requires when `put` returns) and leave in vectored calls at the next
//! point that must complete them remotely — flush, unlock, fence, complete — or when the
//! buffer fills. Pieces to one process go out in issue order, so a later put to the same
//! bytes still wins.
//!
//! **Lanes.** Every thread that stages on a window gets its own staging buffer (a *lane*),
//! so threads never contend to stage. A process-scope completion ([`StagedPuts::drain_all`]:
//! unlock, fence, a flush with `mpi_win_scope=process`) writes every lane; a thread-scope
//! flush ([`StagedPuts::drain_own`], seed 000 §2.1) writes only the calling thread's, and
//! so never waits for another thread's puts. A lane stays marked non-empty until its
//! pieces are *written*, not merely taken: a completion that finds nothing to do knows that
//! whatever was staged before has landed, also when another thread's drain carried it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Result;
use crate::transport::cma;

/// Largest put that is staged; larger ones cost far more than a system call anyway.
pub(crate) const STAGE_MAX_PUT: usize = 256;
/// Pieces per drain: IOV_MAX, the most one vectored call takes.
const STAGE_MAX_PIECES: usize = 1024;
/// Staged bytes that trigger a drain.
const STAGE_MAX_BYTES: usize = 64 << 10;
/// Windows whose lane a thread remembers without looking it up.
const LANE_CACHE: usize = 8;

/// Source of the identities of staging sets and threads (never reused in a process).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn fresh_id() -> u64 {
    // Relaxed: only uniqueness matters.
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

thread_local! {
    /// This thread's identity among the lanes of every window.
    static THREAD_ID: u64 = fresh_id();
    /// The lanes this thread used last: (staging set id, lane).
    static MY_LANES: RefCell<Vec<(u64, Arc<Lane>)>> = const { RefCell::new(Vec::new()) };
}

/// Puts waiting to be written (one window), one lane per thread that staged.
#[derive(Debug)]
pub(crate) struct StagedPuts {
    id: u64,
    /// Lanes holding staged pieces not yet written (checked by every completion point
    /// without taking a lock).
    nonempty: AtomicUsize,
    /// Every lane of the window: (thread id, lane).
    lanes: Mutex<Vec<(u64, Arc<Lane>)>>,
    /// A process-scope drain is under way (one at a time: see `drain_all`).
    draining: AtomicBool,
}

impl Default for StagedPuts {
    fn default() -> Self {
        StagedPuts {
            id: fresh_id(),
            nonempty: AtomicUsize::new(0),
            lanes: Mutex::new(Vec::new()),
            draining: AtomicBool::new(false),
        }
    }
}

/// One thread's staged puts.
#[derive(Debug, Default)]
struct Lane {
    /// True from the first staged piece until the pieces are written (set and cleared
    /// under `inner`).
    pending: AtomicBool,
    inner: Mutex<Staged>,
}

#[derive(Debug, Default)]
struct Staged {
    data: Vec<u8>,
    /// (target pid, remote address, offset in `data`, length), in issue order.
    puts: Vec<(i32, usize, usize, usize)>,
}

impl StagedPuts {
    /// The calling thread's lane (created on first use).
    fn my_lane(&self) -> Arc<Lane> {
        let cached = MY_LANES.with(|c| {
            c.borrow()
                .iter()
                .find(|(id, _)| *id == self.id)
                .map(|(_, lane)| Arc::clone(lane))
        });
        if let Some(lane) = cached {
            return lane;
        }
        let me = THREAD_ID.with(|t| *t);
        let lane = {
            let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
            match lanes.iter().find(|(t, _)| *t == me) {
                Some((_, lane)) => Arc::clone(lane),
                None => {
                    let lane = Arc::new(Lane::default());
                    lanes.push((me, Arc::clone(&lane)));
                    lane
                }
            }
        };
        // Forgetting a cached lane is harmless: the window's list keeps it under this
        // thread's id, and the next lookup finds it there.
        MY_LANES.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= LANE_CACHE {
                c.remove(0);
            }
            c.push((self.id, Arc::clone(&lane)));
        });
        lane
    }

    /// Stages `src` for `addr` in process `pid` in the calling thread's lane; drains the
    /// lane when it is full.
    pub(crate) fn stage(&self, pid: i32, addr: usize, src: &[u8]) -> Result<()> {
        let lane = self.my_lane();
        let full = {
            let mut s = lane.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let offset = s.data.len();
            s.data.extend_from_slice(src);
            s.puts.push((pid, addr, offset, src.len()));
            if !lane.pending.load(Ordering::Relaxed) {
                // Relaxed: changed only under the lane's mutex, which we hold.
                lane.pending.store(true, Ordering::Relaxed);
                // SeqCst: with the caller's flush-cache reset after it, and a thread-scope
                // flush's cache set before its load of this count, one total order decides
                // that either the flush sees our piece or the reset follows its set (see
                // WinCore::stage_put).
                self.nonempty.fetch_add(1, Ordering::SeqCst);
            }
            s.puts.len() >= STAGE_MAX_PIECES || s.data.len() >= STAGE_MAX_BYTES
        };
        if full {
            self.drain_lane(&lane)
        } else {
            Ok(())
        }
    }

    /// [`StagedPuts::stage`] for a handle with `mpi_win_order` and process scope: whatever
    /// other threads staged goes out first. Their puts may happen-before this one (the
    /// application ordered the threads), and lanes are written independently — this lane
    /// may fill and go out at once, or be written ahead of theirs in a combined drain — so
    /// without this the later put could land first (seed 000 §2.2: the order follows the
    /// issuing calls, whatever thread made them).
    pub(crate) fn stage_ordered(&self, pid: i32, addr: usize, src: &[u8]) -> Result<()> {
        if self.others_staged() {
            self.drain_all()?;
        }
        self.stage(pid, addr, src)
    }

    /// True when a lane other than the calling thread's holds pieces not yet written (or
    /// may: a drain under way still counts its lanes).
    fn others_staged(&self) -> bool {
        // SeqCst: as in any_staged — a put of another thread that happens-before our call
        // counted its lane before it returned.
        let nonempty = self.nonempty.load(Ordering::SeqCst);
        if nonempty == 0 {
            return false;
        }
        // Relaxed: our own lane's flag, changed only by drains, which only make it false
        // (then the count above includes a lane that is not ours, or is stale-high: a
        // drain that costs nothing).
        let mine = MY_LANES.with(|c| {
            c.borrow()
                .iter()
                .find(|(id, _)| *id == self.id)
                .is_some_and(|(_, lane)| lane.pending.load(Ordering::Relaxed))
        });
        nonempty > usize::from(mine)
    }

    /// Writes every thread's staged puts (process scope). Every remote-completion point of
    /// the process calls it before it signals completion.
    #[inline]
    pub(crate) fn drain_all(&self) -> Result<()> {
        if !self.any_staged() {
            return Ok(());
        }
        self.drain_all_slow()
    }

    /// One process-scope drain at a time writes every pending lane (flat combining); a
    /// flush that finds one under way waits for it, polling, then looks again: what it took
    /// is written when it ends, and whatever is still pending then (staged after it looked)
    /// this flush writes itself. Without this, concurrent flushes of many threads queue on
    /// each other's lane mutexes, and every hand-over is a futex sleep and wake-up.
    #[inline(never)]
    fn drain_all_slow(&self) -> Result<()> {
        let mut backoff = crate::backoff::Backoff::new();
        loop {
            // Acquire: the previous combiner's writes (and its Release decrements) are
            // complete before we look at what is still staged.
            if self
                .draining
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                let result = self.drain_every_lane();
                // Release: pairs with the Acquire above and below.
                self.draining.store(false, Ordering::Release);
                return result;
            }
            // Acquire: pairs with the combiner's Release.
            while self.draining.load(Ordering::Acquire) {
                backoff.snooze();
            }
            if !self.any_staged() {
                return Ok(());
            }
        }
    }

    fn drain_every_lane(&self) -> Result<()> {
        let lanes: Vec<Arc<Lane>> = {
            let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
            // A lane only this list holds belongs to a thread that has exited (or forgot it
            // from its cache, and finds it here under this lock): once empty, it goes.
            // Relaxed: a lane nobody else holds cannot be staged into meanwhile.
            lanes.retain(|(_, lane)| {
                Arc::strong_count(lane) > 1 || lane.pending.load(Ordering::Relaxed)
            });
            // Relaxed: a lane's flag is set before the SeqCst increment our caller's
            // SeqCst load saw, so every lane staged into before that load shows it.
            lanes
                .iter()
                .filter(|(_, lane)| lane.pending.load(Ordering::Relaxed))
                .map(|(_, lane)| Arc::clone(lane))
                .collect()
        };
        match &lanes[..] {
            [] => Ok(()),
            [lane] => self.drain_lane(lane),
            _ => self.drain_lanes_together(&lanes),
        }
    }

    /// Writes the pieces of several lanes in one vectored call per target (process-scope
    /// combining: one flush carries every thread's puts, and the other threads' flushes
    /// then find their lanes empty). Lanes are locked in list order, as every caller that
    /// holds more than one does, so two of these never deadlock.
    fn drain_lanes_together(&self, lanes: &[Arc<Lane>]) -> Result<()> {
        let mut held = Vec::with_capacity(lanes.len());
        let mut all = Staged::default();
        for lane in lanes {
            let s = lane.inner.lock().unwrap_or_else(PoisonError::into_inner);
            // Relaxed: changed only under the lane's mutex, which we hold.
            if !lane.pending.load(Ordering::Relaxed) {
                continue; // drained by its thread meanwhile
            }
            let base = all.data.len();
            all.data.extend_from_slice(&s.data);
            all.puts.extend(
                s.puts
                    .iter()
                    .map(|&(pid, addr, offset, len)| (pid, addr, base + offset, len)),
            );
            held.push((lane, s));
        }
        let result = write_staged(&mut all);
        for (lane, mut s) in held {
            s.data.clear();
            s.puts.clear();
            // Cleared once written, still under the lane's mutex (see drain_lane).
            lane.pending.store(false, Ordering::Relaxed);
            // Release: see any_staged.
            self.nonempty.fetch_sub(1, Ordering::Release);
        }
        result
    }

    /// Writes the calling thread's staged puts only (thread scope).
    #[inline]
    pub(crate) fn drain_own(&self) -> Result<()> {
        if !self.any_staged() {
            return Ok(());
        }
        let lane = self.my_lane();
        self.drain_lane(&lane)
    }

    /// True while some lane holds pieces not yet written.
    #[inline]
    pub(crate) fn any_staged(&self) -> bool {
        // SeqCst (a plain load on x86): pairs with the Release decrement of a drain that
        // wrote the last pieces, so their data is complete before we report completion,
        // and takes part in the total order described in `stage`.
        self.nonempty.load(Ordering::SeqCst) != 0
    }

    /// Writes the pieces of `lane`; waits for a drain of it already under way.
    fn drain_lane(&self, lane: &Lane) -> Result<()> {
        let mut s = lane.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // Relaxed: changed only under the lane's mutex, which we hold.
        if !lane.pending.load(Ordering::Relaxed) {
            return Ok(());
        }
        let result = write_staged(&mut s);
        // Cleared once the pieces are written (still under the mutex): a completion point
        // that sees the lane empty knows its earlier puts have landed.
        lane.pending.store(false, Ordering::Relaxed);
        // Release: see drain_all.
        self.nonempty.fetch_sub(1, Ordering::Release);
        result
    }
}

/// Writes and clears `s`. After an error the remaining puts are dropped: the error reports
/// that the epoch's data did not arrive.
fn write_staged(s: &mut Staged) -> Result<()> {
    let Staged { data, puts } = s;
    if let [(pid, addr, offset, len)] = puts[..] {
        // One put (put + flush in a loop): the plain call, no iovec arrays.
        let result = cma::write(pid, addr, &data[offset..offset + len]);
        data.clear();
        puts.clear();
        return result;
    }
    let mut result = Ok(());
    let mut pieces: Vec<(usize, usize, usize)> = Vec::with_capacity(puts.len());
    let mut i = 0;
    while i < puts.len() {
        let pid = puts[i].0;
        pieces.clear();
        while i < puts.len() && puts[i].0 == pid {
            let (_, addr, offset, len) = puts[i];
            pieces.push((offset, addr, len));
            i += 1;
        }
        // Remote offsets are absolute addresses (base 0).
        if result.is_ok() {
            result = cma::write_pieces(pid, 0, data, &pieces);
        }
    }
    data.clear();
    puts.clear();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Staging toward this very process: cross-memory attach to oneself is allowed.
    fn own_pid() -> i32 {
        std::process::id() as i32
    }

    #[test]
    fn own_drain_leaves_other_threads_lanes_and_all_drain_takes_them() {
        let target = Box::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let addr = |i: usize| &target[i] as *const AtomicU64 as usize;
        let staged = Arc::new(StagedPuts::default());
        // A plain thread: joining it waits until its thread-locals (its lane cache) are gone.
        let far = addr(1);
        let other = Arc::clone(&staged);
        std::thread::spawn(move || other.stage(own_pid(), far, &7u64.to_ne_bytes()).unwrap())
            .join()
            .unwrap();
        staged
            .stage(own_pid(), addr(0), &5u64.to_ne_bytes())
            .unwrap();
        staged.drain_own().unwrap();
        assert_eq!(target[0].load(Ordering::Relaxed), 5, "own put written");
        assert_eq!(
            target[1].load(Ordering::Relaxed),
            0,
            "the other thread's put is not ours to write"
        );
        staged.drain_all().unwrap();
        assert_eq!(
            target[1].load(Ordering::Relaxed),
            7,
            "process scope writes every lane"
        );
        assert_eq!(staged.nonempty.load(Ordering::Relaxed), 0);
        // The next process-scope drain drops the empty lane of the exited thread.
        staged
            .stage(own_pid(), addr(0), &6u64.to_ne_bytes())
            .unwrap();
        staged.drain_all().unwrap();
        assert_eq!(target[0].load(Ordering::Relaxed), 6);
        assert_eq!(
            staged.lanes.lock().unwrap().len(),
            1,
            "the exited thread's lane is gone"
        );
    }

    #[test]
    fn a_process_drain_writes_every_threads_lane_in_one_go() {
        let target: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let staged = StagedPuts::default();
        let addr = |i: usize| &target[i] as *const AtomicU64 as usize;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let staged = &staged;
                s.spawn(move || staged.stage(own_pid(), addr(t as usize), &(t + 1).to_ne_bytes()));
            }
        });
        assert_eq!(staged.nonempty.load(Ordering::Relaxed), 4);
        staged.drain_all().unwrap();
        let got: Vec<u64> = target.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(got, [1, 2, 3, 4]);
        assert_eq!(staged.nonempty.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn concurrent_process_drains_each_leave_their_callers_puts_written() {
        // Four threads stage and drain with process scope at once: most drains find
        // another under way and wait for it. Each must still return only once the calling
        // thread's put has landed.
        let target: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let staged = StagedPuts::default();
        let addr = |i: usize| &target[i] as *const AtomicU64 as usize;
        std::thread::scope(|s| {
            for t in 0..4usize {
                let (staged, target) = (&staged, &target);
                s.spawn(move || {
                    for v in 1..=2000u64 {
                        staged.stage(own_pid(), addr(t), &v.to_ne_bytes()).unwrap();
                        staged.drain_all().unwrap();
                        assert_eq!(target[t].load(Ordering::Relaxed), v, "thread {t}");
                    }
                });
            }
        });
        assert_eq!(staged.nonempty.load(Ordering::Relaxed), 0);
        assert!(!staged.draining.load(Ordering::Relaxed));
    }

    #[test]
    fn later_put_to_the_same_bytes_wins_and_full_lanes_drain() {
        let target = Box::new(AtomicU64::new(0));
        let addr = &*target as *const AtomicU64 as usize;
        let staged = StagedPuts::default();
        for v in 1..=(STAGE_MAX_PIECES as u64 + 10) {
            staged.stage(own_pid(), addr, &v.to_ne_bytes()).unwrap();
        }
        assert_eq!(
            target.load(Ordering::Relaxed),
            STAGE_MAX_PIECES as u64,
            "a full lane drained on its own"
        );
        staged.drain_all().unwrap();
        assert_eq!(target.load(Ordering::Relaxed), STAGE_MAX_PIECES as u64 + 10);
    }

    #[test]
    fn a_thread_finds_its_lane_again_after_the_cache_forgot_it() {
        let staged: Vec<StagedPuts> = (0..LANE_CACHE + 2).map(|_| StagedPuts::default()).collect();
        let target = Box::new(AtomicU64::new(0));
        let addr = &*target as *const AtomicU64 as usize;
        for s in &staged {
            s.stage(own_pid(), addr, &1u64.to_ne_bytes()).unwrap();
        }
        // The first window's lane left this thread's cache; staging again must use the
        // same lane, so one own-drain writes both pieces.
        staged[0]
            .stage(own_pid(), addr, &2u64.to_ne_bytes())
            .unwrap();
        assert_eq!(staged[0].lanes.lock().unwrap().len(), 1);
        staged[0].drain_own().unwrap();
        assert_eq!(target.load(Ordering::Relaxed), 2);
        assert_eq!(staged[0].nonempty.load(Ordering::Relaxed), 0);
    }
}
