//! Passive-target locks: the two-level protocol of [Gerstenberger13] §2.3, made starvation free.
//!
//! **Words.** A *global* word (in the window header, the "master" of [Gerstenberger13]) counts
//! `lock_all` holders and processes holding exclusive locks; the two classes exclude each
//! other. A *local* word per rank is a reader-writer lock: a reader count and a writer bit.
//!
//! ```text
//! local word   bits 0..31 readers · bit 32 writer · bits 48..63 queue head
//! global word  bits 0..23 exclusive holders · bits 24..47 lock_all holders · bits 48..63 head
//! ```
//!
//! **Fast path** (no contention), as in [Gerstenberger13]: shared lock = one fetch-add on the local
//! word; exclusive lock = one fetch-add on the global word (first exclusive lock of this
//! process only) + one compare-and-swap on the local word; lock_all = one fetch-add on the
//! global word; unlock = one atomic (+1 on the global word for the last exclusive lock).
//!
//! **Slow path.** foMPI's protocol lets a writer retry forever while readers keep arriving.
//! Here a request that fails its fast attempt retries it on its next [`PATIENCE`] polls
//! (looking at the word first, so that a retry bound to fail does not take the line from the
//! holder), then takes a ticket of a FIFO queue beside the
//! word (an MCS-like queue, as [Gerstenberger13] suggests, in two counters: `next`, `serving`).
//! The request at the head sets a *head* mark in the word; every later fast attempt sees the
//! mark and queues instead, so the head only waits for the holders already inside. The head
//! then acquires, clears its mark in the same atomic step, and serves the next ticket. Readers
//! behind a reader head enter back to back. Every waiter is bounded by the requests ahead of
//! it (and by at most [`PATIENCE`] retries before it queues): no writer (or lock_all)
//! starves under a stream of shared lockers, and vice versa.
//! Waiting is polling with exponential backoff (`backoff`).
//!
//! The retries matter under contention: a ticket costs four more atomics on the contended
//! line and hands the lock strictly in turn, while a lock held for ~100 ns is usually free
//! again a poll later, often still in the cache of the process that just released it
//! (hot-spot `transactions`: blocking up to 1.5× faster, see README).
//!
//! **Parked memberships.** In the protocol above every exclusive lock of a process that held
//! none writes the global word twice (join the exclusive class, leave it), and every process
//! doing exclusive epochs to anyone writes that one line: under a stream of exclusive
//! epochs it is the hottest line of the window although lock_all, the only thing it guards
//! against, never comes. So the last exclusive unlock of a process *parks* its membership
//! instead of leaving: it stays counted in the global word and the process sets its own
//! `parked_exclusive` word (its own cache line) to 1. Its next first exclusive lock takes the
//! membership back with one swap of that word and one plain load of the global word — no
//! write to a shared line. A lock_all that finds exclusive members takes parked ones back on
//! their owners' behalf (swap the owner's word 1 → 0, then leave the class for it); the
//! swap decides who owns a parked membership, so it is used exactly once. A process that
//! takes its membership back while a lock_all waits or holds (the global word shows a head
//! mark or lock_all holders) gives it up and queues as before, so lock_all is not starved:
//! per process, the global word counts the exclusive locks that joined the class plus the
//! parked membership.

use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::progress::{blocking_start, Completes, Order, Step, SyncOp, Ticket};
use crate::request::Request;
use crate::sync::epoch::Release;
use crate::sync::{Assert, LockType};
use crate::win::control::LockLine;
use crate::win::core::WinCore;
use crate::win::Window;

const READER: u64 = 1;
const READERS: u64 = 0xFFFF_FFFF;
const WRITER: u64 = 1 << 32;
const HEAD: u64 = 1 << 48;
const HEAD_MASK: u64 = 0xFFFF << 48;
const EXCLUSIVE_ONE: u64 = 1;
const EXCLUSIVE_MASK: u64 = 0xFF_FFFF;
const LOCK_ALL_ONE: u64 = 1 << 24;
const LOCK_ALL_MASK: u64 = 0xFF_FFFF << 24;

/// A lock word with its FIFO slow-path counters.
#[derive(Clone, Copy)]
pub(crate) struct LockWords<'a> {
    pub word: &'a AtomicU64,
    pub next: &'a AtomicU64,
    pub serving: &'a AtomicU64,
}

impl<'a> LockWords<'a> {
    /// The words of a lock in a window segment.
    fn of(line: &'a LockLine) -> Self {
        LockWords {
            word: &line.word,
            next: &line.next,
            serving: &line.serving,
        }
    }
}

/// How a request uses a lock word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Shared holder of a local word.
    Reader,
    /// Exclusive holder of a local word.
    Writer,
    /// One member of a class of the global word; classes exclude each other.
    Class { one: u64, other: u64 },
}

impl Mode {
    /// Exclusive lockers at the global word.
    pub(crate) const EXCLUSIVE: Mode = Mode::Class {
        one: EXCLUSIVE_ONE,
        other: LOCK_ALL_MASK,
    };
    /// lock_all holders at the global word.
    pub(crate) const LOCK_ALL: Mode = Mode::Class {
        one: LOCK_ALL_ONE,
        other: EXCLUSIVE_MASK,
    };

    fn local(kind: LockType) -> Mode {
        match kind {
            LockType::Shared => Mode::Reader,
            LockType::Exclusive => Mode::Writer,
        }
    }

    /// One attempt without queueing. Acquire: the lock's previous holders' writes (released
    /// by their unlock) are visible to us.
    fn try_fast(self, w: &AtomicU64) -> bool {
        match self {
            Mode::Writer => w
                .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok(),
            Mode::Reader | Mode::Class { .. } => {
                let (one, blockers) = match self {
                    Mode::Reader => (READER, WRITER | HEAD_MASK),
                    Mode::Class { one, other } => (one, other | HEAD_MASK),
                    Mode::Writer => unreachable!(),
                };
                if w.fetch_add(one, Ordering::Acquire) & blockers == 0 {
                    true
                } else {
                    // Back out: we neither hold the lock nor block anyone for long.
                    w.fetch_sub(one, Ordering::Relaxed);
                    false
                }
            }
        }
    }

    /// True when a fast attempt could succeed now: a plain look, so that a retry that would
    /// fail leaves the holder's line alone.
    fn looks_free(self, w: &AtomicU64) -> bool {
        let v = w.load(Ordering::Relaxed);
        match self {
            Mode::Writer => v == 0,
            Mode::Reader => v & (WRITER | HEAD_MASK) == 0,
            Mode::Class { other, .. } => v & (other | HEAD_MASK) == 0,
        }
    }

    /// Attempt by the head of the queue: acquire and clear the head mark in one atomic step.
    /// Only the head can acquire while the mark is set, so the check and the update cannot be
    /// separated by a conflicting acquisition.
    fn try_head(self, w: &AtomicU64) -> bool {
        let v = w.load(Ordering::Acquire);
        match self {
            Mode::Reader => {
                if v & WRITER != 0 {
                    return false;
                }
                w.fetch_add(READER.wrapping_sub(HEAD), Ordering::Acquire);
                true
            }
            Mode::Writer => {
                v & (WRITER | READERS) == 0
                    && w.compare_exchange(
                        v,
                        v - HEAD + WRITER,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            }
            Mode::Class { one, other } => {
                if v & other != 0 {
                    return false;
                }
                w.fetch_add(one.wrapping_sub(HEAD), Ordering::Acquire);
                true
            }
        }
    }

    /// Gives the lock back. Release: our writes under the lock are visible to the next
    /// holder. Also makes every RMA of the epoch complete before the lock can be re-taken.
    fn release(self, w: &AtomicU64) {
        let one = match self {
            Mode::Reader => READER,
            Mode::Writer => WRITER,
            Mode::Class { one, .. } => one,
        };
        w.fetch_sub(one, Ordering::Release);
    }
}

/// Polls after a failed fast attempt that retry it before the acquisition takes a ticket
/// (see the module docs). Same-run A/B, hot-spot `transactions`, 2 ranks: 4, 8, 16 and 32
/// all gain about equally over no retry; 8 bounds how often a waiter can be passed.
const PATIENCE: u32 = 8;

/// Progress of one acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not tried yet.
    Fast,
    /// The fast attempt failed; this many more polls retry it before queueing.
    Retry(u32),
    /// Waiting for our ticket to be served.
    Queued(u64),
    /// Head of the queue, waiting for the holders inside to leave.
    Head,
    /// Held.
    Acquired,
}

/// Advances an acquisition; true once the lock is held.
pub(crate) fn poll_acquire(words: LockWords<'_>, mode: Mode, phase: &mut Phase) -> bool {
    if *phase == Phase::Fast {
        let acquired = mode.try_fast(words.word);
        *phase = if acquired {
            Phase::Acquired
        } else {
            Phase::Retry(PATIENCE)
        };
        return acquired;
    }
    poll_contended(words, mode, phase)
}

/// [`poll_acquire`] after a failed fast attempt: out of line, so that an uncontended lock
/// costs what it did before the retries existed.
#[inline(never)]
fn poll_contended(words: LockWords<'_>, mode: Mode, phase: &mut Phase) -> bool {
    loop {
        match *phase {
            // The first attempt is poll_acquire's own.
            Phase::Fast => return poll_acquire(words, mode, phase),
            Phase::Retry(left) => {
                if mode.looks_free(words.word) && mode.try_fast(words.word) {
                    *phase = Phase::Acquired;
                } else if left > 1 {
                    *phase = Phase::Retry(left - 1);
                    return false;
                } else {
                    // Relaxed: the ticket only orders us among waiters; the hand-over of the
                    // head is ordered by `serving` (Release/Acquire).
                    *phase = Phase::Queued(words.next.fetch_add(1, Ordering::Relaxed));
                }
            }
            Phase::Queued(ticket) => {
                if words.serving.load(Ordering::Acquire) != ticket {
                    return false;
                }
                // Relaxed: all updates of the word are RMWs, totally ordered; every fast
                // attempt after this one sees the mark.
                words.word.fetch_add(HEAD, Ordering::Relaxed);
                *phase = Phase::Head;
            }
            Phase::Head => {
                if !mode.try_head(words.word) {
                    return false;
                }
                words.serving.fetch_add(1, Ordering::Release);
                *phase = Phase::Acquired;
            }
            Phase::Acquired => return true,
        }
    }
}

/// Releases a lock held in `mode`.
pub(crate) fn release(words: LockWords<'_>, mode: Mode) {
    mode.release(words.word);
}

/// lock(kind, target): the global word first (first exclusive lock only), then the local.
struct LockOp {
    target: usize,
    mode: Mode,
    global: Option<Phase>,
    local: Phase,
}

impl SyncOp<WinCore> for LockOp {
    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        if let Some(g) = &mut self.global {
            if *g == Phase::Fast && core.unpark_exclusive() {
                *g = Phase::Acquired;
            }
            if !poll_acquire(core.global_lock_words(), Mode::EXCLUSIVE, g) {
                return Ok(Step::Blocked);
            }
        }
        Ok(
            if poll_acquire(
                core.local_lock_words(self.target),
                self.mode,
                &mut self.local,
            ) {
                Step::Done
            } else {
                Step::Blocked
            },
        )
    }
}

struct LockAllOp {
    phase: Phase,
}

impl SyncOp<WinCore> for LockAllOp {
    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        if poll_acquire(core.global_lock_words(), Mode::LOCK_ALL, &mut self.phase) {
            return Ok(Step::Done);
        }
        // Exclusive members are in the way: some may only be parked.
        if core.take_parked_exclusive()
            && poll_acquire(core.global_lock_words(), Mode::LOCK_ALL, &mut self.phase)
        {
            return Ok(Step::Done);
        }
        Ok(Step::Blocked)
    }
}

/// unlock(target) / unlock_all: never waits, but goes through the engine so that it stays
/// ordered after requests started before it, and completes what they issued first.
enum UnlockOp {
    One(Release),
    /// unlock_all; `nocheck`: the epoch took no global lock (`lock_all(NOCHECK)`).
    All {
        nocheck: bool,
    },
}

impl SyncOp<WinCore> for UnlockOp {
    /// The epoch's operations are in the target's memory before its lock is released.
    fn completes(&self) -> Completes {
        match *self {
            UnlockOp::One(r) => Completes::Target(r.lock.target),
            UnlockOp::All { .. } => Completes::All,
        }
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        match *self {
            UnlockOp::One(r) => {
                if !r.lock.nocheck {
                    release(
                        core.local_lock_words(r.lock.target),
                        Mode::local(r.lock.kind),
                    );
                }
                if r.global {
                    core.park_exclusive();
                }
            }
            UnlockOp::All { nocheck: false } => release(core.global_lock_words(), Mode::LOCK_ALL),
            // Our stores are ordered before any later load or store of ours (as a flush).
            UnlockOp::All { nocheck: true } => std::sync::atomic::fence(Ordering::SeqCst),
        }
        Ok(Step::Done)
    }
}

impl WinCore {
    pub(crate) fn global_lock_words(&self) -> LockWords<'_> {
        LockWords::of(&self.ctrl.header().global_lock)
    }

    /// This process's parked exclusive-class membership (see the module docs).
    fn parked_exclusive(&self) -> &AtomicU64 {
        &self.ctrl.rank(self.rank).parked_exclusive
    }

    /// Takes this process's parked membership of the exclusive class back; true when it
    /// now holds the class without touching the global word. False when nothing was parked
    /// (a lock_all took it) or when a lock_all waits or holds: then the membership is given
    /// up and the caller queues as any exclusive locker does.
    #[inline(never)]
    fn unpark_exclusive(&self) -> bool {
        let parked = self.parked_exclusive();
        // Relaxed: a look at our own line first, then the swap that decides who owns the
        // membership. No data is ordered by it: exclusive epochs order each other through
        // the local words, and a lock_all epoch that ran since we parked must have taken
        // the membership back (then the swap finds 0 and we join through the global word).
        if parked.load(Ordering::Relaxed) == 0 || parked.swap(0, Ordering::Relaxed) == 0 {
            return false;
        }
        // Relaxed: a lock_all that joins after this load waits for our membership to leave,
        // as it would for any exclusive holder; this look only keeps us from starving one.
        let global = self.global_lock_words();
        if global.word.load(Ordering::Relaxed) & (LOCK_ALL_MASK | HEAD_MASK) == 0 {
            return true;
        }
        release(global, Mode::EXCLUSIVE);
        false
    }

    /// The last exclusive unlock of this process: keeps the exclusive-class membership,
    /// parked, unless a lock_all is waiting for the class to empty. A membership parked
    /// before (the unlock of an earlier epoch that ran after this epoch joined) leaves.
    #[inline(never)]
    fn park_exclusive(&self) {
        let global = self.global_lock_words();
        // Relaxed: a hint; a lock_all that comes later takes the parked membership back.
        if global.word.load(Ordering::Relaxed) & (LOCK_ALL_MASK | HEAD_MASK) != 0 {
            release(global, Mode::EXCLUSIVE);
            return;
        }
        // Release: the epoch's RMA is complete before a lock_all that takes the membership
        // (Acquire swap) goes on — the local word's release orders it for exclusive lockers.
        if self.parked_exclusive().swap(1, Ordering::Release) == 1 {
            release(global, Mode::EXCLUSIVE);
        }
    }

    /// A lock_all waiting for the exclusive class to empty takes every parked membership
    /// back on its owner's behalf; true when it took any.
    #[inline(never)]
    fn take_parked_exclusive(&self) -> bool {
        let mut took = false;
        for rank in 0..self.size {
            let parked = &self.ctrl.rank(rank).parked_exclusive;
            // Relaxed load: skip the swap (a write to the owner's line) when nothing is
            // parked. Acquire swap: pairs with the owner's Release park, so its epochs'
            // writes happen before our lock_all epoch.
            if parked.load(Ordering::Relaxed) == 1 && parked.swap(0, Ordering::Acquire) == 1 {
                release(self.global_lock_words(), Mode::EXCLUSIVE);
                took = true;
            }
        }
        took
    }

    pub(crate) fn local_lock_words(&self, rank: usize) -> LockWords<'_> {
        LockWords::of(&self.ctrl.rank(rank).lock)
    }

    fn check_locks_allowed(&self, call: &'static str) -> Result<()> {
        if self.no_locks.load(std::sync::atomic::Ordering::Relaxed) {
            Err(Error::LocksDisabled { call })
        } else {
            Ok(())
        }
    }

    pub(crate) fn lock(&self, kind: LockType, target: usize, assert: Assert) -> Result<()> {
        let ticket = blocking_start(|| self.start_lock(kind, target, assert))?;
        match ticket {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None).inspect_err(|_| {
                // The lock was not taken: forget it again (cannot fail, it was just
                // recorded).
                let _ = self.epoch.unlock(target);
            }),
        }
    }

    /// Opens the epoch to `target` and starts acquiring its lock (blocking or not). When
    /// the lock is still pending the epoch is deferred: RMA to it waits (resolve's gate).
    pub(crate) fn start_lock(
        &self,
        kind: LockType,
        target: usize,
        assert: Assert,
    ) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        assert.only("lock", Assert::NOCHECK)?;
        self.check_locks_allowed("lock")?;
        self.check_rank(target)?;
        let nocheck = assert.contains(Assert::NOCHECK);
        let (global, order) = self.epoch.lock_epoch(target, kind, nocheck)?;
        if nocheck {
            return Ok(None);
        }
        let op = LockOp {
            target,
            mode: Mode::local(kind),
            global: global.then_some(Phase::Fast),
            local: Phase::Fast,
        };
        self.start_opening(self.engine.start_ordered(self, op, order), || {
            let _ = self.epoch.unlock(target);
        })
    }

    /// The outcome of starting an opening op: on error the epoch is forgotten again
    /// (`undo`); when the op is pending the access cache is cleared so that RMA takes the
    /// path that waits for it.
    fn start_opening(
        &self,
        started: Result<Option<Ticket>>,
        undo: impl FnOnce(),
    ) -> Result<Option<Ticket>> {
        match started {
            Err(e) => {
                undo();
                Err(e)
            }
            Ok(Some(t)) => {
                self.epoch.forget_access_cache();
                Ok(Some(t))
            }
            Ok(None) => Ok(None),
        }
    }

    pub(crate) fn unlock(&self, target: usize) -> Result<()> {
        match blocking_start(|| self.start_unlock(target))? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None),
        }
    }

    /// Closes the epoch to `target` and starts releasing its lock (blocking or not).
    pub(crate) fn start_unlock(&self, target: usize) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        self.check_rank(target)?;
        let release = self.epoch.unlock(target)?;
        let order = Order::lock(release.lock.epoch, target);
        self.engine
            .start_ordered(self, UnlockOp::One(release), order)
    }

    pub(crate) fn lock_all(&self, assert: Assert) -> Result<()> {
        match blocking_start(|| self.start_lock_all(assert))? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None).inspect_err(|_| {
                let _ = self.epoch.unlock_all();
            }),
        }
    }

    /// Opens the lock_all epoch and starts acquiring the global lock (blocking or not).
    pub(crate) fn start_lock_all(&self, assert: Assert) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        assert.only("lock_all", Assert::NOCHECK)?;
        self.check_locks_allowed("lock_all")?;
        let nocheck = assert.contains(Assert::NOCHECK);
        self.epoch.lock_all(nocheck)?;
        if nocheck {
            return Ok(None);
        }
        self.start_opening(
            self.engine.start(self, LockAllOp { phase: Phase::Fast }),
            || {
                let _ = self.epoch.unlock_all();
            },
        )
    }

    pub(crate) fn unlock_all(&self) -> Result<()> {
        match blocking_start(|| self.start_unlock_all())? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None),
        }
    }

    /// Closes the lock_all epoch and starts releasing the global lock (blocking or not).
    pub(crate) fn start_unlock_all(&self) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        let nocheck = self.epoch.unlock_all()?;
        self.engine.start(self, UnlockOp::All { nocheck })
    }
}

impl<T: Pod> Window<T> {
    /// Starts a passive-target access epoch to `target` (MPI_Win_lock); blocks until the
    /// lock is held.
    ///
    /// Valid assertion: `NOCHECK` (no other process holds or will request a conflicting
    /// lock; nothing is acquired). Errors: the window has `no_locks=true`; `target` is
    /// already locked by this process; a lock_all, PSCW or used fence epoch is open.
    ///
    /// ```no_run
    /// # use onesided::{Assert, LockType, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let counter = Window::<u64>::allocate(&world, 1)?;
    /// counter.lock(LockType::Exclusive, 0, Assert::NONE)?;
    /// let mut v = [0u64];
    /// counter.get(&mut v, 0, 0)?;
    /// counter.put(&[v[0] + 1], 0, 0)?;
    /// counter.unlock(0)?;
    /// # Ok::<(), onesided::Error>(())
    /// ```
    pub fn lock(&self, kind: LockType, target: usize, assert: Assert) -> Result<()> {
        self.core.lock(kind, target, assert)
    }

    /// Ends the passive-target epoch to `target` (MPI_Win_unlock): all operations to it are
    /// complete at origin and target, then the lock is released.
    pub fn unlock(&self, target: usize) -> Result<()> {
        self.core.unlock(target)
    }

    /// Starts a shared passive-target epoch to every rank (MPI_Win_lock_all).
    /// Valid assertion: `NOCHECK`.
    pub fn lock_all(&self, assert: Assert) -> Result<()> {
        self.core.lock_all(assert)
    }

    /// Ends the epoch opened by [`Window::lock_all`] (MPI_Win_unlock_all).
    pub fn unlock_all(&self) -> Result<()> {
        self.core.unlock_all()
    }

    /// Nonblocking [`Window::lock`] (MPI_Win_ilock, \[Zounmevo14\]): never blocks. The epoch
    /// is open when the call returns and its request is complete at once; when the lock is
    /// not free the epoch is *deferred*: it activates in call order as the engine is driven
    /// (any later call on the window, or `test`/`wait` of any request of it). Until then
    /// an RMA call to the window waits for the activation instead of touching target memory
    /// early. Errors as `lock`.
    ///
    /// ```no_run
    /// # use onesided::{Assert, LockType, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<u64>::allocate(&world, 1)?;
    /// win.ilock(LockType::Exclusive, 1, Assert::NONE)?.wait()?; // returns at once
    /// win.put(&[1], 1, 0)?; // waits until the lock is held
    /// win.iunlock(1)?.wait()?;
    /// # Ok::<(), onesided::Error>(())
    /// ```
    pub fn ilock(&self, kind: LockType, target: usize, assert: Assert) -> Result<Request<'_>> {
        self.core.start_lock(kind, target, assert)?;
        Ok(Request::done())
    }

    /// Nonblocking [`Window::lock_all`] (MPI_Win_ilock_all): never blocks; the epoch may be
    /// deferred as with [`Window::ilock`].
    pub fn ilock_all(&self, assert: Assert) -> Result<Request<'_>> {
        self.core.start_lock_all(assert)?;
        Ok(Request::done())
    }

    /// Nonblocking [`Window::unlock`] (MPI_Win_iunlock, \[Zounmevo14\]): the epoch to
    /// `target` is closed when the call returns (a new `lock` of `target` may follow at
    /// once and activates after it); the request completes when its operations are
    /// complete at origin and target and the lock is released. Errors as `unlock`.
    pub fn iunlock(&self, target: usize) -> Result<Request<'_>> {
        let ticket = self.core.start_unlock(target)?;
        Ok(Request::started(&self.core, ticket))
    }

    /// Nonblocking [`Window::unlock_all`] (MPI_Win_iunlock_all).
    pub fn iunlock_all(&self) -> Result<Request<'_>> {
        let ticket = self.core.start_unlock_all()?;
        Ok(Request::started(&self.core, ticket))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Backoff;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[derive(Default)]
    struct Words {
        word: AtomicU64,
        next: AtomicU64,
        serving: AtomicU64,
    }

    impl Words {
        fn get(&self) -> LockWords<'_> {
            LockWords {
                word: &self.word,
                next: &self.next,
                serving: &self.serving,
            }
        }

        fn acquire(&self, mode: Mode) {
            let mut phase = Phase::Fast;
            let mut b = Backoff::new();
            while !poll_acquire(self.get(), mode, &mut phase) {
                b.snooze();
            }
        }
    }

    #[test]
    fn fast_paths_cost_one_atomic() {
        let w = Words::default();
        let mut p = Phase::Fast;
        assert!(poll_acquire(w.get(), Mode::Reader, &mut p));
        assert!(poll_acquire(w.get(), Mode::Reader, &mut Phase::Fast));
        assert_eq!(w.word.load(Ordering::Relaxed), 2);
        let mut wp = Phase::Fast;
        assert!(!poll_acquire(w.get(), Mode::Writer, &mut wp));
        assert_eq!(wp, Phase::Retry(PATIENCE), "a failed attempt retries first");
        assert!(
            poll_acquire(w.get(), Mode::Reader, &mut Phase::Fast),
            "a retrying writer does not hold readers back"
        );
        release(w.get(), Mode::Reader);
        for _ in 0..PATIENCE {
            assert!(!poll_acquire(w.get(), Mode::Writer, &mut wp));
        }
        assert_eq!(
            wp,
            Phase::Head,
            "after its retries it queues; first in the queue is head"
        );
        assert!(
            !poll_acquire(w.get(), Mode::Reader, &mut Phase::Fast),
            "head blocks new readers"
        );
        release(w.get(), Mode::Reader);
        release(w.get(), Mode::Reader);
        assert!(poll_acquire(w.get(), Mode::Writer, &mut wp));
        assert_eq!(w.word.load(Ordering::Relaxed), WRITER);
    }

    #[test]
    fn classes_exclude_each_other_but_not_themselves() {
        let w = Words::default();
        assert!(poll_acquire(w.get(), Mode::LOCK_ALL, &mut Phase::Fast));
        assert!(poll_acquire(w.get(), Mode::LOCK_ALL, &mut Phase::Fast));
        let mut x = Phase::Fast;
        assert!(!poll_acquire(w.get(), Mode::EXCLUSIVE, &mut x));
        release(w.get(), Mode::LOCK_ALL);
        assert!(!poll_acquire(w.get(), Mode::EXCLUSIVE, &mut x));
        release(w.get(), Mode::LOCK_ALL);
        assert!(poll_acquire(w.get(), Mode::EXCLUSIVE, &mut x));
        assert!(
            poll_acquire(w.get(), Mode::EXCLUSIVE, &mut Phase::Fast),
            "exclusive holders share the global word"
        );
    }

    /// Threads stand in for processes: the words are plain atomics either way.
    #[test]
    fn mutual_exclusion_under_contention() {
        let w = Arc::new(Words::default());
        let inside = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let (w, inside) = (Arc::clone(&w), Arc::clone(&inside));
                std::thread::spawn(move || {
                    for k in 0..2000 {
                        let mode = if (i + k) % 3 == 0 {
                            Mode::Writer
                        } else {
                            Mode::Reader
                        };
                        w.acquire(mode);
                        let v = inside.fetch_add(
                            if mode == Mode::Writer { 1 << 32 } else { 1 },
                            Ordering::SeqCst,
                        );
                        if mode == Mode::Writer {
                            assert_eq!(v, 0, "writer entered while someone was inside");
                        } else {
                            assert_eq!(v >> 32, 0, "reader entered while a writer was inside");
                        }
                        std::hint::spin_loop();
                        inside.fetch_sub(
                            if mode == Mode::Writer { 1 << 32 } else { 1 },
                            Ordering::SeqCst,
                        );
                        release(w.get(), mode);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(w.word.load(Ordering::Relaxed), 0);
    }

    /// Readers hold the lock continuously (overlapping) until the writer got in: with the
    /// head mark the writer gets in although the readers never stop.
    #[test]
    fn writer_progress_under_a_reader_stream() {
        for writer_mode in [Mode::Writer, Mode::EXCLUSIVE] {
            let reader_mode = if writer_mode == Mode::Writer {
                Mode::Reader
            } else {
                Mode::LOCK_ALL
            };
            let w = Arc::new(Words::default());
            let done = Arc::new(AtomicBool::new(false));
            let readers: Vec<_> = (0..4)
                .map(|_| {
                    let (w, done) = (Arc::clone(&w), Arc::clone(&done));
                    std::thread::spawn(move || {
                        while !done.load(Ordering::Relaxed) {
                            w.acquire(reader_mode);
                            std::thread::sleep(std::time::Duration::from_micros(50));
                            release(w.get(), reader_mode);
                        }
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(20));
            for _ in 0..20 {
                w.acquire(writer_mode);
                release(w.get(), writer_mode);
            }
            done.store(true, Ordering::Relaxed);
            for r in readers {
                r.join().unwrap();
            }
        }
    }
}
