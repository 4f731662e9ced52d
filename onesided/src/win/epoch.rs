//! Which epochs are open at this process, and the rules for opening and closing them.
//!
//! MPI-4.1 §12.5: access epochs of one window at one process are disjoint (fence, PSCW
//! access, or passive target — several `lock`s or one `lock_all`); an exposure epoch
//! (`post`..`wait`) may overlap an access epoch. A fence opens an epoch only if RMA calls
//! follow it, so after a fence with no RMA since, `lock`/`start`/`post` are allowed.
//! Every violation that is cheap to detect becomes an [`Error`] here, before any remote
//! word is touched.
//!
//! The record is part of the window's state ([`crate::win::core::WinCore`] holds it), so
//! it lives in `win`, below the `sync` calls that open and close the epochs.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::group::Group;
use crate::progress::Order;
use crate::spin::{SpinGuard, SpinLock};

/// Kind of a passive-target lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockType {
    /// Many processes may hold it at once (MPI_LOCK_SHARED).
    Shared,
    /// Excludes every other lock on the target (MPI_LOCK_EXCLUSIVE).
    Exclusive,
}

/// The access epoch currently open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Access {
    /// None.
    #[default]
    None,
    /// Opened by a fence (without NOSUCCEED): every rank is accessible.
    Fence,
    /// Opened by `start`: the ranks of the start group.
    Pscw,
    /// Passive target: the locked ranks.
    Locks,
    /// Passive target: every rank (`lock_all`).
    LockAll,
}

/// A lock this process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldLock {
    pub target: usize,
    pub kind: LockType,
    /// Taken with MPI_MODE_NOCHECK: no lock word was touched.
    pub nocheck: bool,
    /// An exclusive lock taken without the exclusive class, before the window's first
    /// lock_all (`sync::lock`'s module docs): it is not counted in the class.
    pub unclassed: bool,
    /// The lock's epoch number (for the reorder rules).
    pub epoch: u64,
}

impl HeldLock {
    /// True for an exclusive lock that is a member of the exclusive class (counted in
    /// `exclusive_held`): not NOCHECK, not unclassed.
    pub(crate) fn counts_in_class(&self) -> bool {
        self.kind == LockType::Exclusive && !self.nocheck && !self.unclassed
    }
}

/// What a fence must do, derived from its assertions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FencePlan {
    /// Complete this process's outgoing operations first.
    pub flush: bool,
    /// Synchronize with every other process.
    pub barrier: bool,
}

/// What an unlock must release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Release {
    pub lock: HeldLock,
    /// This was the last exclusive lock: also release the global word.
    pub global: bool,
}

/// The epoch record held ([`EpochState::transition`]): a lock or unlock recorded, and a
/// lock taken back again when its uncontended attempt failed.
pub(crate) struct Transition<'a> {
    epoch: &'a EpochState,
    st: SpinGuard<'a, Transitions>,
}

impl Transition<'_> {
    /// `lock(kind, target)` without NOCHECK, as [`EpochState::lock`]: true when the global
    /// word must be taken (first exclusive lock of this process of the class). `unclassed`:
    /// an exclusive lock taken without the class (see [`HeldLock::unclassed`]).
    #[inline(always)]
    pub(crate) fn lock(&mut self, target: usize, kind: LockType, unclassed: bool) -> Result<bool> {
        self.epoch
            .record_lock(&mut self.st, target, kind, false, unclassed)
            .map(|(global, _)| global)
    }

    /// Forgets the lock of `target` that [`Transition::lock`] just recorded (its attempt
    /// failed; the caller starts the lock again the general way): the unlock's transition,
    /// which also takes back its count in the exclusive class. An unused fence it closed
    /// stays closed: it would give way again.
    #[cold]
    pub(crate) fn undo_lock(&mut self, target: usize) {
        let undone = self.unlock(target);
        debug_assert!(undone.is_ok(), "the lock was just recorded");
    }

    /// `unlock(target)`, as [`EpochState::unlock`].
    #[inline(always)]
    pub(crate) fn unlock(&mut self, target: usize) -> Result<Release> {
        self.epoch.record_unlock(&mut self.st, target)
    }

    /// `lock_all` without NOCHECK, as [`EpochState::lock_all`].
    #[inline(always)]
    pub(crate) fn lock_all(&mut self) -> Result<()> {
        self.epoch.record_lock_all(&mut self.st, false)
    }

    /// Forgets the lock_all epoch that [`Transition::lock_all`] just recorded (as
    /// [`Transition::undo_lock`]).
    #[cold]
    pub(crate) fn undo_lock_all(&mut self) {
        let undone = self.unlock_all();
        debug_assert!(undone.is_ok(), "the lock_all was just recorded");
    }

    /// `unlock_all`, as [`EpochState::unlock_all`]: whether the epoch was NOCHECK.
    #[inline(always)]
    pub(crate) fn unlock_all(&mut self) -> Result<bool> {
        self.epoch.record_unlock_all(&mut self.st)
    }
}

/// Fast-path cache value: every target passes.
const ANY: usize = usize::MAX;
/// Fast-path cache value: no target passes without the full check.
const NONE: usize = usize::MAX - 1;

/// Epoch state of one window at this process.
///
/// The fast-path caches are atomics read with `Relaxed` loads (a plain `mov`, as the
/// `Cell`s they replace): a window is used by one thread at a time today, and every
/// transition goes through the lock of [`Transitions`], so the caches only need to be free
/// of data races, not ordered. The progress engine never touches this state (its ops
/// see only control words), so a progress thread sharing the window's core cannot race it.
#[derive(Debug)]
pub(crate) struct EpochState {
    /// Target that passed the last full access check, [`ANY`] or [`NONE`]: lets the common
    /// case (one target, many operations) skip the lock-list / group search. Reset by every
    /// transition.
    fast_access: AtomicUsize,
    /// The same for flush (passive-target epochs only); also reset when a put is staged, so
    /// that the inlined flush, which only fences, is taken only with nothing staged.
    fast_flush: AtomicUsize,
    /// Target that passed the last full flush check, whatever is staged: the epoch check
    /// of a thread-scope flush (which drains its own staged puts itself).
    fast_passive: AtomicUsize,
    /// The last answer of [`EpochState::exclusive_to`]: its target shifted left by one,
    /// with the low bit set when this process holds an exclusive lock on it (or [`NONE`],
    /// which names no target). Reset by every transition.
    fast_exclusive: AtomicUsize,
    /// Whether RMA was issued since the last fence (only meaningful with `Access::Fence`),
    /// and whether this process's plain stores since then are all behind a memory fence:
    /// `NO_RMA`, `RMA_STORES` or `RMA_FENCED` (see [`EpochState::note_rma`]).
    ops_since_fence: AtomicU8,
    transitions: SpinLock<Transitions>,
}

/// Everything an epoch transition reads and writes.
#[derive(Debug)]
struct Transitions {
    access: Access,
    locks: Vec<HeldLock>,
    lock_all_nocheck: bool,
    /// Exclusive locks held that registered at the global word.
    exclusive_held: usize,
    access_group: Group,
    /// Completions the current exposure epoch waits for (cumulative count), if one is open.
    exposure: Option<u64>,
    /// Sum of the sizes of all post groups so far.
    posted_total: u64,
    /// Epoch numbers handed out (each start, post and lock opens one).
    epochs: u64,
    /// Number of the open PSCW access epoch.
    access_epoch: u64,
    /// Number of the open exposure epoch.
    exposure_epoch: u64,
}

/// `ops_since_fence`: no RMA since the last fence.
const NO_RMA: u8 = 0;
/// RMA since the last fence, maybe with plain stores no memory fence orders yet.
const RMA_STORES: u8 = 1;
/// RMA since the last fence, every store of it ordered by a memory fence (or a locked
/// instruction).
const RMA_FENCED: u8 = 2;

impl Default for EpochState {
    fn default() -> Self {
        EpochState {
            fast_access: AtomicUsize::new(NONE),
            fast_flush: AtomicUsize::new(NONE),
            fast_passive: AtomicUsize::new(NONE),
            fast_exclusive: AtomicUsize::new(NONE),
            ops_since_fence: AtomicU8::new(NO_RMA),
            transitions: SpinLock::new(Transitions {
                access: Access::None,
                locks: Vec::new(),
                lock_all_nocheck: false,
                exclusive_held: 0,
                access_group: Group::empty(),
                exposure: None,
                posted_total: 0,
                epochs: 0,
                access_epoch: 0,
                exposure_epoch: 0,
            }),
        }
    }
}

#[cold]
fn conflict(call: &'static str, reason: &'static str) -> Error {
    Error::EpochConflict { call, reason }
}

impl EpochState {
    fn state(&self) -> SpinGuard<'_, Transitions> {
        self.transitions.lock()
    }

    /// Holds the record for a transition and the uncontended op that goes with it: the
    /// one-node lock and unlock of `sync::lock`, which take no call lock (see there).
    #[inline(always)]
    pub(crate) fn transition(&self) -> Transition<'_> {
        Transition {
            epoch: self,
            st: self.state(),
        }
    }

    /// The open access epoch.
    #[cfg(test)]
    pub(crate) fn access(&self) -> Access {
        self.state().access
    }

    /// True when `target` is known to be in the open access epoch without searching
    /// (the common case); false means "do the full check", not "no access".
    #[inline(always)]
    pub(crate) fn access_cached(&self, target: usize) -> bool {
        // Relaxed: a cache of this window's own transitions (see the type's docs).
        let fast = self.fast_access.load(Ordering::Relaxed);
        fast == target || fast == ANY
    }

    /// The same for flush.
    #[inline(always)]
    pub(crate) fn flush_cached(&self, target: usize) -> bool {
        // Relaxed: as in access_cached.
        let fast = self.fast_flush.load(Ordering::Relaxed);
        fast == target || fast == ANY
    }

    /// Error unless an access epoch that includes `target` is open.
    #[inline]
    pub(crate) fn check_access(&self, target: usize, op: &'static str) -> Result<()> {
        if self.access_cached(target) {
            return Ok(());
        }
        self.check_access_slow(target, op)
    }

    #[inline(never)]
    fn check_access_slow(&self, target: usize, op: &'static str) -> Result<()> {
        let st = self.state();
        let ok = match st.access {
            Access::Fence | Access::LockAll => true,
            Access::Locks => st.locks.iter().any(|l| l.target == target),
            Access::Pscw => st.access_group.contains(target),
            Access::None => false,
        };
        if ok {
            // Relaxed: under the transition lock, so no transition resets it in between.
            self.fast_access.store(target, Ordering::Relaxed);
            Ok(())
        } else {
            Err(Error::NoAccessEpoch { op, target })
        }
    }

    /// Opens `access`, resetting the fast-path caches.
    fn set_access(&self, st: &mut Transitions, access: Access) {
        st.access = access;
        // Relaxed: see the type's docs.
        self.fast_access.store(
            match access {
                Access::Fence | Access::LockAll => ANY,
                _ => NONE,
            },
            Ordering::Relaxed,
        );
        let passive = match access {
            Access::LockAll => ANY,
            _ => NONE,
        };
        // (Only lock_all's ANY asks whether the flush may be cached at all.)
        let flush = match access {
            Access::LockAll => self.flush_cache(passive),
            _ => NONE,
        };
        self.fast_flush.store(flush, Ordering::Relaxed);
        self.fast_passive.store(passive, Ordering::Relaxed);
        self.fast_exclusive.store(NONE, Ordering::Relaxed);
    }

    /// True when this process holds an exclusive lock on `target` (taken, maybe still
    /// pending: the callers act only where the epoch's operations may touch memory).
    #[inline]
    pub(crate) fn exclusive_to(&self, target: usize) -> bool {
        // Relaxed: as in access_cached. (NONE shifted right names no rank.)
        let cached = self.fast_exclusive.load(Ordering::Relaxed);
        if cached >> 1 == target {
            return cached & 1 == 1;
        }
        // Relaxed: as in access_cached. Outside passive-target epochs (fence, PSCW — each
        // operation of osbench's PSCW cells is an epoch of its own, and the lock below cost
        // them 20–50 ns) the flush cache names no target; within one it may not either
        // (after another target's unlock), and the answer is then a conservative no.
        if self.fast_passive.load(Ordering::Relaxed) != target {
            return false;
        }
        let st = self.state();
        let held = st.access == Access::Locks
            && st
                .locks
                .iter()
                .any(|l| l.target == target && l.kind == LockType::Exclusive);
        // Relaxed: under the transition lock, as in check_access_slow. Both answers are
        // kept: a shared lock's long accumulates ask on every call.
        self.fast_exclusive
            .store(target << 1 | usize::from(held), Ordering::Relaxed);
        held
    }

    /// Records that an RMA operation was issued, one that may have left plain stores not
    /// yet behind a memory fence (every operation but the atomics of
    /// [`EpochState::note_atomic`]).
    #[inline]
    pub(crate) fn note_rma(&self) {
        // Relaxed: read by this window's next fence or flush, through the same thread or a
        // lock.
        self.ops_since_fence.store(RMA_STORES, Ordering::Relaxed);
    }

    /// Records an RMA operation that was one locked read-modify-write (a CPU atomic, itself
    /// a full memory barrier on x86): nothing of it waits for a flush's fence.
    #[inline]
    pub(crate) fn note_atomic(&self) {
        // Relaxed: as in note_rma. An earlier operation's unfenced stores stay recorded, and
        // a word that says RMA_FENCED already is not stored again (the store would be one
        // more for the next locked instruction to wait for).
        if self.ops_since_fence.load(Ordering::Relaxed) == NO_RMA {
            self.ops_since_fence.store(RMA_FENCED, Ordering::Relaxed);
        }
    }

    /// Whether an operation since the last fence may have left plain stores that no memory
    /// fence has ordered yet.
    #[inline(always)]
    pub(crate) fn stores_unfenced(&self) -> bool {
        // Relaxed: see note_rma.
        self.ops_since_fence.load(Ordering::Relaxed) == RMA_STORES
    }

    /// Records that a memory fence now orders every store so far.
    #[inline(always)]
    pub(crate) fn note_fenced(&self) {
        // Relaxed: see note_rma.
        self.ops_since_fence.store(RMA_FENCED, Ordering::Relaxed);
    }

    fn ops_since_fence(&self) -> bool {
        self.ops_since_fence.load(Ordering::Relaxed) != NO_RMA
    }

    /// A fence that opened nothing (no RMA since) may give way to another epoch kind.
    fn leave_unused_fence(&self, st: &mut Transitions, call: &'static str) -> Result<()> {
        match st.access {
            Access::None => Ok(()),
            Access::Fence if !self.ops_since_fence() => {
                self.set_access(st, Access::None);
                Ok(())
            }
            Access::Fence => Err(conflict(
                call,
                "a fence epoch is open (RMA was issued since the last fence)",
            )),
            Access::Pscw => Err(conflict(call, "a PSCW access epoch (start) is open")),
            Access::Locks => Err(conflict(call, "a passive-target epoch (lock) is open")),
            Access::LockAll => Err(conflict(call, "a lock_all epoch is open")),
        }
    }

    /// `fence(assert)`: checks and transitions; returns what the fence must do.
    pub(crate) fn fence(&self, noprecede: bool, nosucceed: bool) -> Result<FencePlan> {
        let mut st = self.state();
        match st.access {
            Access::Locks => {
                return Err(conflict("fence", "a passive-target epoch (lock) is open"))
            }
            Access::LockAll => return Err(conflict("fence", "a lock_all epoch is open")),
            Access::Pscw => return Err(conflict("fence", "a PSCW access epoch (start) is open")),
            Access::None | Access::Fence => {}
        }
        if st.exposure.is_some() {
            return Err(conflict("fence", "a PSCW exposure epoch (post) is open"));
        }
        if noprecede && st.access == Access::Fence && self.ops_since_fence() {
            return Err(Error::AssertViolated {
                call: "fence",
                assert: "NOPRECEDE",
                reason: "RMA operations were issued since the previous fence",
            });
        }
        self.set_access(
            &mut st,
            if nosucceed {
                Access::None
            } else {
                Access::Fence
            },
        );
        self.ops_since_fence.store(NO_RMA, Ordering::Relaxed);
        Ok(FencePlan {
            flush: !noprecede,
            barrier: !(noprecede && nosucceed),
        })
    }

    /// `lock(kind, target)`: records the lock; returns true when the global word must be
    /// taken (first exclusive lock of this process).
    #[cfg(test)]
    pub(crate) fn lock(&self, target: usize, kind: LockType, nocheck: bool) -> Result<bool> {
        self.lock_epoch(target, kind, nocheck)
            .map(|(global, _)| global)
    }

    /// [`EpochState::lock`], also returning the lock epoch's [`Order`]. Inline: one caller
    /// on the lock path, where the call alone cost ~40 instructions once codegen stopped
    /// inlining it by itself.
    #[inline]
    pub(crate) fn lock_epoch(
        &self,
        target: usize,
        kind: LockType,
        nocheck: bool,
    ) -> Result<(bool, Order)> {
        self.record_lock(&mut self.state(), target, kind, nocheck, false)
    }

    /// The transition of [`EpochState::lock_epoch`], under the held record.
    #[inline(always)]
    fn record_lock(
        &self,
        st: &mut Transitions,
        target: usize,
        kind: LockType,
        nocheck: bool,
        unclassed: bool,
    ) -> Result<(bool, Order)> {
        match st.access {
            Access::LockAll => return Err(conflict("lock", "a lock_all epoch is open")),
            Access::Locks => {}
            _ => self.leave_unused_fence(st, "lock")?,
        }
        if st.locks.iter().any(|l| l.target == target) {
            return Err(Error::AlreadyLocked { target });
        }
        st.epochs += 1;
        let epoch = st.epochs;
        let held = HeldLock {
            target,
            kind,
            nocheck,
            unclassed,
            epoch,
        };
        st.locks.push(held);
        // `set_access(Locks)`, with the caches it resets set at once to the target just
        // locked: it passes the full checks, so the first operation of the epoch takes the
        // fast path. (A lock that stays pending clears the access cache again —
        // `forget_access_cache` — so RMA waits for it.)
        st.access = Access::Locks;
        // Relaxed: see the type's docs.
        self.fast_access.store(target, Ordering::Relaxed);
        self.fast_flush
            .store(self.flush_cache(target), Ordering::Relaxed);
        self.fast_passive.store(target, Ordering::Relaxed);
        self.fast_exclusive.store(
            match kind {
                LockType::Exclusive => target << 1 | 1,
                LockType::Shared => NONE,
            },
            Ordering::Relaxed,
        );
        let global = held.counts_in_class() && {
            st.exclusive_held += 1;
            st.exclusive_held == 1
        };
        Ok((global, Order::lock(epoch, target)))
    }

    /// `unlock(target)`: forgets the lock; returns what to release.
    pub(crate) fn unlock(&self, target: usize) -> Result<Release> {
        self.record_unlock(&mut self.state(), target)
    }

    /// The transition of [`EpochState::unlock`], under the held record.
    #[inline(always)]
    fn record_unlock(&self, st: &mut Transitions, target: usize) -> Result<Release> {
        let found = match st.access {
            Access::Locks => st.locks.iter().position(|l| l.target == target),
            _ => None,
        };
        // A match, not `ok_or`: the error would be built (and dropped) on every unlock.
        let Some(pos) = found else {
            return Err(Error::NotLocked {
                call: "unlock",
                target,
            });
        };
        // `swap_remove` by hand: the library's stayed a call (with its bounds check) on
        // every unlock.
        let Some(last) = st.locks.pop() else {
            unreachable!("`pos` indexes the list");
        };
        let lock = match st.locks.get_mut(pos) {
            Some(slot) => std::mem::replace(slot, last),
            None => last,
        };
        // Resets the fast-path caches too: they may name the target just unlocked.
        let next = if st.locks.is_empty() {
            Access::None
        } else {
            Access::Locks
        };
        self.set_access(st, next);
        let global = lock.counts_in_class() && {
            st.exclusive_held -= 1;
            st.exclusive_held == 0
        };
        Ok(Release { lock, global })
    }

    /// `lock_all`.
    pub(crate) fn lock_all(&self, nocheck: bool) -> Result<()> {
        self.record_lock_all(&mut self.state(), nocheck)
    }

    /// The transition of [`EpochState::lock_all`], under the held record.
    #[inline(always)]
    fn record_lock_all(&self, st: &mut Transitions, nocheck: bool) -> Result<()> {
        match st.access {
            Access::LockAll => {
                return Err(conflict("lock_all", "a lock_all epoch is already open"))
            }
            Access::Locks => return Err(conflict("lock_all", "this process holds locks")),
            _ => self.leave_unused_fence(st, "lock_all")?,
        }
        self.set_access(st, Access::LockAll);
        st.lock_all_nocheck = nocheck;
        Ok(())
    }

    /// `unlock_all`: returns whether the lock_all was taken with NOCHECK.
    pub(crate) fn unlock_all(&self) -> Result<bool> {
        self.record_unlock_all(&mut self.state())
    }

    /// The transition of [`EpochState::unlock_all`], under the held record.
    #[inline(always)]
    fn record_unlock_all(&self, st: &mut Transitions) -> Result<bool> {
        if st.access != Access::LockAll {
            return Err(conflict("unlock_all", "no lock_all epoch is open"));
        }
        self.set_access(st, Access::None);
        Ok(st.lock_all_nocheck)
    }

    /// Error unless `target` is in the open passive-target epoch (`flush(target)`).
    #[inline]
    pub(crate) fn check_flush(&self, call: &'static str, target: usize) -> Result<()> {
        if self.flush_cached(target) {
            return Ok(());
        }
        self.check_flush_slow(call, target, true)
    }

    /// [`Self::check_flush`] that does not set the flush cache: for callers that do not
    /// drain every thread's staged puts afterwards (a thread-scope flush, `flush_local`),
    /// since the cache lets the next flush skip draining.
    pub(crate) fn check_flush_uncached(&self, call: &'static str, target: usize) -> Result<()> {
        // Relaxed: as in access_cached.
        let fast = self.fast_passive.load(Ordering::Relaxed);
        if fast == target || fast == ANY {
            return Ok(());
        }
        self.check_flush_slow(call, target, false)
    }

    /// What the flush cache may hold after a check that passed for `target`: nothing when
    /// no progress thread serves the process's peers (`ONESIDED_PROGRESS=none` with the
    /// network open) — every flush then takes its slow path, which on a window across
    /// nodes reads the endpoint once (`WinCore::complete_net_for`), where a cached flush
    /// would only fence and a program polling with flushes would starve its peers.
    #[inline]
    fn flush_cache(&self, target: usize) -> usize {
        match crate::attention::unserved() {
            true => NONE,
            false => target,
        }
    }

    /// Makes the next flush take its slow path (which drains staged puts).
    pub(crate) fn forget_flush_cache(&self) {
        // Only when set: threads staging at once would otherwise all write one cache line.
        // SeqCst (load and store): one total order with the staging count
        // (WinCore::stage_put).
        if self.fast_flush.load(Ordering::SeqCst) != NONE {
            self.fast_flush.store(NONE, Ordering::SeqCst);
        }
    }

    /// Makes the next RMA call take its slow path: the epoch just opened is deferred
    /// (its synchronization is still pending), and the slow path waits for it.
    pub(crate) fn forget_access_cache(&self) {
        // Relaxed: see the type's docs.
        self.fast_access.store(NONE, Ordering::Relaxed);
    }

    #[inline(never)]
    fn check_flush_slow(&self, call: &'static str, target: usize, remember: bool) -> Result<()> {
        let st = self.state();
        // Relaxed stores: under the transition lock, as in check_access_slow.
        match st.access {
            // SeqCst: ordered with the staging count read after it (WinCore::stage_put).
            Access::LockAll => {
                self.fast_passive.store(ANY, Ordering::Relaxed);
                if remember {
                    self.fast_flush
                        .store(self.flush_cache(ANY), Ordering::SeqCst);
                }
                Ok(())
            }
            Access::Locks if st.locks.iter().any(|l| l.target == target) => {
                self.fast_passive.store(target, Ordering::Relaxed);
                if remember {
                    self.fast_flush
                        .store(self.flush_cache(target), Ordering::SeqCst);
                }
                Ok(())
            }
            Access::Locks => Err(Error::NotLocked { call, target }),
            _ => Err(conflict(
                call,
                "no passive-target epoch (lock/lock_all) is open",
            )),
        }
    }

    /// True when a passive-target epoch that includes `target` is open.
    pub(crate) fn in_passive_epoch(&self, target: usize) -> bool {
        // Not remembered: the caller drains no staged puts of other threads.
        self.flush_cached(target) || self.check_flush_slow("", target, false).is_ok()
    }

    /// Error unless a passive-target epoch is open (`flush_all`).
    #[inline]
    pub(crate) fn check_flush_all(&self, call: &'static str) -> Result<()> {
        match self.state().access {
            Access::Locks | Access::LockAll => Ok(()),
            _ => Err(conflict(
                call,
                "no passive-target epoch (lock/lock_all) is open",
            )),
        }
    }

    /// `post(group)`: opens the exposure epoch; returns the cumulative completion count
    /// the matching `wait` needs.
    pub(crate) fn post(&self, group_len: usize) -> Result<u64> {
        let mut st = self.state();
        if st.exposure.is_some() {
            return Err(conflict("post", "an exposure epoch is already open"));
        }
        if st.access == Access::Fence {
            self.leave_unused_fence(&mut st, "post")?;
        }
        let total = st.posted_total + group_len as u64;
        st.posted_total = total;
        st.exposure = Some(total);
        st.epochs += 1;
        st.exposure_epoch = st.epochs;
        Ok(total)
    }

    /// The completion count the open exposure epoch waits for.
    pub(crate) fn exposure_target(&self, call: &'static str) -> Result<u64> {
        self.state()
            .exposure
            .ok_or_else(|| conflict(call, "no exposure epoch (post) is open"))
    }

    /// The epoch an op toward `target` belongs to: the open PSCW access epoch, or the lock
    /// on `target`; fence and lock_all epochs (and no epoch) are [`Order::BARRIER`].
    pub(crate) fn access_order(&self, target: usize) -> Order {
        let st = self.state();
        match st.access {
            Access::Pscw => Order::access(st.access_epoch),
            Access::Locks => st
                .locks
                .iter()
                .find(|l| l.target == target)
                .map_or(Order::BARRIER, |l| Order::lock(l.epoch, target)),
            _ => Order::BARRIER,
        }
    }

    /// The epoch of the open PSCW access epoch (for `complete`, before it closes it).
    pub(crate) fn pscw_access_order(&self) -> Order {
        let st = self.state();
        match st.access {
            Access::Pscw => Order::access(st.access_epoch),
            _ => Order::BARRIER,
        }
    }

    /// The open exposure epoch (for post and wait).
    pub(crate) fn exposure_order(&self) -> Order {
        let st = self.state();
        match st.exposure {
            Some(_) => Order::exposure(st.exposure_epoch),
            None => Order::BARRIER,
        }
    }

    /// Closes the exposure epoch (after `wait` completed or `test` returned true).
    pub(crate) fn end_exposure(&self) {
        self.state().exposure = None;
    }

    /// `start(group)`: opens the PSCW access epoch.
    pub(crate) fn start(&self, group: &Group) -> Result<()> {
        let mut st = self.state();
        self.leave_unused_fence(&mut st, "start")?;
        st.access_group = group.clone();
        st.epochs += 1;
        st.access_epoch = st.epochs;
        self.set_access(&mut st, Access::Pscw);
        Ok(())
    }

    /// `complete`: closes the PSCW access epoch; returns its group.
    pub(crate) fn complete(&self) -> Result<Group> {
        let mut st = self.state();
        if st.access != Access::Pscw {
            return Err(conflict("complete", "no PSCW access epoch (start) is open"));
        }
        self.set_access(&mut st, Access::None);
        Ok(std::mem::take(&mut st.access_group))
    }

    /// Error unless the window may be freed (no epoch open, nothing pending).
    pub(crate) fn check_free(&self) -> Result<()> {
        let st = self.state();
        if st.exposure.is_some() {
            return Err(conflict("free", "an exposure epoch (post) is open"));
        }
        match st.access {
            Access::None => Ok(()),
            Access::Fence if !self.ops_since_fence() => Ok(()),
            Access::Fence => Err(conflict(
                "free",
                "RMA was issued since the last fence; close the epoch with a fence first",
            )),
            Access::Pscw => Err(conflict("free", "a PSCW access epoch (start) is open")),
            Access::Locks => Err(conflict("free", "a passive-target epoch (lock) is open")),
            Access::LockAll => Err(conflict("free", "a lock_all epoch is open")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock recorded under a held [`Transition`] and undone leaves the record as it was:
    /// no access, unlock refused, and the next exclusive lock is again the first (it takes
    /// the global word), also beside a lock kept on another target.
    #[test]
    fn an_undone_lock_leaves_the_record_as_it_was() {
        let e = EpochState::default();
        {
            let mut t = e.transition();
            assert!(t.lock(3, LockType::Exclusive, false).unwrap());
            assert!(e.access_cached(3));
            t.undo_lock(3);
        }
        assert_eq!(e.access(), Access::None);
        assert!(e.check_access(3, "put").is_err());
        assert!(!e.exclusive_to(3));
        assert!(matches!(e.unlock(3), Err(Error::NotLocked { .. })));
        assert!(e.lock(1, LockType::Exclusive, false).unwrap());
        {
            let mut t = e.transition();
            assert!(!t.lock(3, LockType::Exclusive, false).unwrap());
            t.undo_lock(3);
        }
        assert_eq!(e.access(), Access::Locks);
        assert!(e.check_access(3, "put").is_err());
        assert!(e.check_access(1, "put").is_ok());
        let r = e.transition().unlock(1).unwrap();
        assert!(r.global, "the kept lock was the only exclusive one");
        assert_eq!(e.access(), Access::None);
        // lock_all likewise, after an unused fence (which stays closed).
        e.fence(false, false).unwrap();
        {
            let mut t = e.transition();
            t.lock_all().unwrap();
            assert!(e.access_cached(5));
            t.undo_lock_all();
        }
        assert_eq!(e.access(), Access::None);
        assert!(e.check_access(5, "put").is_err());
        assert!(e.unlock_all().is_err());
        e.transition().lock_all().unwrap();
        assert!(matches!(e.transition().unlock_all(), Ok(false)));
    }

    /// An unclassed exclusive lock is not a member of the exclusive class: the next
    /// exclusive lock of the class is still the first (it joins), and the unlocks release
    /// the class once, at the classed lock's unlock; undone, it leaves no count behind.
    #[test]
    fn unclassed_exclusive_locks_stay_out_of_the_class() {
        let e = EpochState::default();
        assert!(!e.transition().lock(7, LockType::Exclusive, true).unwrap());
        assert!(e.exclusive_to(7));
        {
            let mut t = e.transition();
            assert!(!t.lock(9, LockType::Exclusive, true).unwrap());
            t.undo_lock(9);
        }
        assert!(e.lock(8, LockType::Exclusive, false).unwrap());
        let r = e.unlock(7).unwrap();
        assert!(r.lock.unclassed && !r.global);
        let r = e.unlock(8).unwrap();
        assert!(!r.lock.unclassed && r.global);
        assert!(e.lock(8, LockType::Exclusive, false).unwrap());
    }

    #[test]
    fn fence_plans_follow_asserts() {
        let e = EpochState::default();
        assert_eq!(
            e.fence(false, false).unwrap(),
            FencePlan {
                flush: true,
                barrier: true
            }
        );
        assert_eq!(e.access(), Access::Fence);
        assert_eq!(
            e.fence(true, false).unwrap(),
            FencePlan {
                flush: false,
                barrier: true
            }
        );
        assert_eq!(
            e.fence(true, true).unwrap(),
            FencePlan {
                flush: false,
                barrier: false
            }
        );
        assert_eq!(e.access(), Access::None);
        assert!(e.check_access(0, "put").is_err());
    }

    #[test]
    fn noprecede_with_pending_rma_is_an_error() {
        let e = EpochState::default();
        e.fence(false, false).unwrap();
        e.check_access(3, "put").unwrap();
        e.note_rma();
        assert!(matches!(
            e.fence(true, false),
            Err(Error::AssertViolated {
                assert: "NOPRECEDE",
                ..
            })
        ));
    }

    #[test]
    fn stores_stay_unfenced_until_a_fence_and_atomics_leave_none() {
        let e = EpochState::default();
        assert!(!e.stores_unfenced());
        // A CPU atomic alone leaves nothing for a flush's fence, yet counts as RMA.
        e.note_atomic();
        assert!(!e.stores_unfenced() && e.ops_since_fence());
        // A put's plain stores wait for one; a later atomic does not hide them.
        e.note_rma();
        e.note_atomic();
        assert!(e.stores_unfenced());
        e.note_fenced();
        assert!(!e.stores_unfenced() && e.ops_since_fence());
        e.note_rma();
        // A window fence starts over: no RMA since it.
        e.fence(false, false).unwrap();
        assert!(!e.stores_unfenced() && !e.ops_since_fence());
    }

    #[test]
    fn exclusive_to_names_only_targets_locked_exclusively_while_locked() {
        let e = EpochState::default();
        assert!(!e.exclusive_to(1), "no epoch");
        e.lock(1, LockType::Exclusive, false).unwrap();
        assert!(e.exclusive_to(1), "cached by the lock");
        e.lock(2, LockType::Shared, false).unwrap();
        assert!(!e.exclusive_to(2), "a shared lock");
        assert!(!e.exclusive_to(2), "a shared lock, cached");
        // The caches name target 2 now: a conservative no until target 1 is checked again.
        assert!(!e.exclusive_to(1));
        e.check_flush("flush", 1).unwrap();
        assert!(e.exclusive_to(1), "after a flush check of it");
        assert!(e.exclusive_to(1), "cached");
        assert!(!e.exclusive_to(3), "not locked");
        e.unlock(1).unwrap();
        assert!(!e.exclusive_to(1), "the cache forgot the unlocked target");
        e.unlock(2).unwrap();
        e.lock_all(false).unwrap();
        assert!(!e.exclusive_to(1), "lock_all is shared");
        e.unlock_all().unwrap();
        e.fence(false, false).unwrap();
        assert!(!e.exclusive_to(1), "a fence epoch");
    }

    #[test]
    fn locks_and_fences_do_not_mix() {
        let e = EpochState::default();
        assert!(e.lock(1, LockType::Exclusive, false).unwrap());
        assert!(
            !e.lock(2, LockType::Exclusive, false).unwrap(),
            "global taken once"
        );
        assert!(matches!(
            e.lock(1, LockType::Shared, false),
            Err(Error::AlreadyLocked { target: 1 })
        ));
        assert!(matches!(
            e.fence(false, false),
            Err(Error::EpochConflict { call: "fence", .. })
        ));
        assert!(e.lock_all(false).is_err());
        e.check_access(2, "put").unwrap();
        assert!(e.check_access(3, "put").is_err());
        e.check_flush("flush", 1).unwrap();
        assert!(matches!(
            e.check_flush("flush", 3),
            Err(Error::NotLocked { .. })
        ));
        e.check_access(1, "put").unwrap();
        e.check_flush("flush", 1).unwrap();
        assert!(!e.unlock(1).unwrap().global);
        assert!(
            e.check_access(1, "put").is_err(),
            "fast path forgot the unlocked target"
        );
        assert!(e.check_flush("flush", 1).is_err());
        assert!(
            e.unlock(2).unwrap().global,
            "last exclusive releases the global word"
        );
        assert!(matches!(
            e.unlock(2),
            Err(Error::NotLocked {
                call: "unlock",
                target: 2
            })
        ));
        assert_eq!(e.access(), Access::None);
        assert!(e.check_flush_all("flush_all").is_err());
    }

    #[test]
    fn unused_fence_gives_way_used_fence_does_not() {
        let e = EpochState::default();
        e.fence(false, false).unwrap();
        e.lock(0, LockType::Shared, false).unwrap();
        e.unlock(0).unwrap();
        e.fence(false, false).unwrap();
        e.note_rma();
        assert!(e.lock(0, LockType::Shared, false).is_err());
        assert!(e.start(&Group::single(0)).is_err());
        assert!(e.check_free().is_err());
        e.fence(false, true).unwrap();
        e.check_free().unwrap();
    }

    #[test]
    fn pscw_transitions() {
        let e = EpochState::default();
        assert!(e.complete().is_err());
        assert!(e.exposure_target("wait").is_err());
        assert_eq!(e.post(2).unwrap(), 2);
        assert!(e.post(1).is_err());
        assert!(e.fence(false, false).is_err());
        e.start(&Group::new([1, 2]).unwrap()).unwrap();
        assert!(e.start(&Group::single(1)).is_err());
        e.check_access(2, "get").unwrap();
        assert!(e.check_access(0, "get").is_err());
        assert_eq!(e.complete().unwrap().ranks(), &[1, 2]);
        e.end_exposure();
        assert_eq!(e.post(3).unwrap(), 5, "completion targets are cumulative");
    }
}
