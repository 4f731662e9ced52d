//! Which epochs are open at this process, and the rules for opening and closing them.
//!
//! MPI-4.1 §12.5: access epochs of one window at one process are disjoint (fence, PSCW
//! access, or passive target — several `lock`s or one `lock_all`); an exposure epoch
//! (`post`..`wait`) may overlap an access epoch. A fence opens an epoch only if RMA calls
//! follow it, so after a fence with no RMA since, `lock`/`start`/`post` are allowed.
//! Every violation that is cheap to detect becomes an [`Error`] here, before any remote
//! word is touched.

use std::cell::{Cell, RefCell};

use crate::error::{Error, Result};
use crate::group::Group;
use crate::sync::LockType;

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

/// Fast-path cache value: every target passes.
const ANY: usize = usize::MAX;
/// Fast-path cache value: no target passes without the full check.
const NONE: usize = usize::MAX - 1;

/// Epoch state of one window at this process.
#[derive(Debug)]
pub(crate) struct EpochState {
    access: Cell<Access>,
    /// Target that passed the last full access check, [`ANY`] or [`NONE`]: lets the common
    /// case (one target, many operations) skip the lock-list / group search. Reset by every
    /// transition.
    fast_access: Cell<usize>,
    /// The same for flush (passive-target epochs only).
    fast_flush: Cell<usize>,
    /// RMA was issued since the last fence (only meaningful with `Access::Fence`).
    ops_since_fence: Cell<bool>,
    locks: RefCell<Vec<HeldLock>>,
    lock_all_nocheck: Cell<bool>,
    /// Exclusive locks held that registered at the global word.
    exclusive_held: Cell<usize>,
    access_group: RefCell<Group>,
    /// Completions the current exposure epoch waits for (cumulative count), if one is open.
    exposure: Cell<Option<u64>>,
    /// Sum of the sizes of all post groups so far.
    posted_total: Cell<u64>,
}

impl Default for EpochState {
    fn default() -> Self {
        EpochState {
            access: Cell::new(Access::None),
            fast_access: Cell::new(NONE),
            fast_flush: Cell::new(NONE),
            ops_since_fence: Cell::new(false),
            locks: RefCell::new(Vec::new()),
            lock_all_nocheck: Cell::new(false),
            exclusive_held: Cell::new(0),
            access_group: RefCell::new(Group::empty()),
            exposure: Cell::new(None),
            posted_total: Cell::new(0),
        }
    }
}

#[cold]
fn conflict(call: &'static str, reason: &'static str) -> Error {
    Error::EpochConflict { call, reason }
}

impl EpochState {
    /// The open access epoch.
    #[cfg(test)]
    pub(crate) fn access(&self) -> Access {
        self.access.get()
    }

    /// True when `target` is known to be in the open access epoch without searching
    /// (the common case); false means "do the full check", not "no access".
    #[inline(always)]
    pub(crate) fn access_cached(&self, target: usize) -> bool {
        let fast = self.fast_access.get();
        fast == target || fast == ANY
    }

    /// The same for flush.
    #[inline(always)]
    pub(crate) fn flush_cached(&self, target: usize) -> bool {
        let fast = self.fast_flush.get();
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
        let ok = match self.access.get() {
            Access::Fence | Access::LockAll => true,
            Access::Locks => self.locks.borrow().iter().any(|l| l.target == target),
            Access::Pscw => self.access_group.borrow().contains(target),
            Access::None => false,
        };
        if ok {
            self.fast_access.set(target);
            Ok(())
        } else {
            Err(Error::NoAccessEpoch { op, target })
        }
    }

    /// Opens `access`, resetting the fast-path caches.
    fn set_access(&self, access: Access) {
        self.access.set(access);
        self.fast_access.set(match access {
            Access::Fence | Access::LockAll => ANY,
            _ => NONE,
        });
        self.fast_flush.set(match access {
            Access::LockAll => ANY,
            _ => NONE,
        });
    }

    /// Records that an RMA operation was issued.
    #[inline]
    pub(crate) fn note_rma(&self) {
        self.ops_since_fence.set(true);
    }

    /// A fence that opened nothing (no RMA since) may give way to another epoch kind.
    fn leave_unused_fence(&self, call: &'static str) -> Result<()> {
        match self.access.get() {
            Access::None => Ok(()),
            Access::Fence if !self.ops_since_fence.get() => {
                self.set_access(Access::None);
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
        match self.access.get() {
            Access::Locks => {
                return Err(conflict("fence", "a passive-target epoch (lock) is open"))
            }
            Access::LockAll => return Err(conflict("fence", "a lock_all epoch is open")),
            Access::Pscw => return Err(conflict("fence", "a PSCW access epoch (start) is open")),
            Access::None | Access::Fence => {}
        }
        if self.exposure.get().is_some() {
            return Err(conflict("fence", "a PSCW exposure epoch (post) is open"));
        }
        if noprecede && self.access.get() == Access::Fence && self.ops_since_fence.get() {
            return Err(Error::AssertViolated {
                call: "fence",
                assert: "NOPRECEDE",
                reason: "RMA operations were issued since the previous fence",
            });
        }
        self.set_access(if nosucceed {
            Access::None
        } else {
            Access::Fence
        });
        self.ops_since_fence.set(false);
        Ok(FencePlan {
            flush: !noprecede,
            barrier: !(noprecede && nosucceed),
        })
    }

    /// `lock(kind, target)`: records the lock; returns true when the global word must be
    /// taken (first exclusive lock of this process).
    pub(crate) fn lock(&self, target: usize, kind: LockType, nocheck: bool) -> Result<bool> {
        match self.access.get() {
            Access::LockAll => return Err(conflict("lock", "a lock_all epoch is open")),
            Access::Locks => {}
            _ => self.leave_unused_fence("lock")?,
        }
        let mut locks = self.locks.borrow_mut();
        if locks.iter().any(|l| l.target == target) {
            return Err(Error::AlreadyLocked { target });
        }
        locks.push(HeldLock {
            target,
            kind,
            nocheck,
        });
        self.set_access(Access::Locks);
        let global = kind == LockType::Exclusive && !nocheck && {
            self.exclusive_held.set(self.exclusive_held.get() + 1);
            self.exclusive_held.get() == 1
        };
        Ok(global)
    }

    /// `unlock(target)`: forgets the lock; returns what to release.
    pub(crate) fn unlock(&self, target: usize) -> Result<Release> {
        let mut locks = self.locks.borrow_mut();
        let pos = match self.access.get() {
            Access::Locks => locks.iter().position(|l| l.target == target),
            _ => None,
        }
        .ok_or(Error::NotLocked {
            call: "unlock",
            target,
        })?;
        let lock = locks.swap_remove(pos);
        // Resets the fast-path caches too: they may name the target just unlocked.
        self.set_access(if locks.is_empty() {
            Access::None
        } else {
            Access::Locks
        });
        let global = lock.kind == LockType::Exclusive && !lock.nocheck && {
            self.exclusive_held.set(self.exclusive_held.get() - 1);
            self.exclusive_held.get() == 0
        };
        Ok(Release { lock, global })
    }

    /// `lock_all`.
    pub(crate) fn lock_all(&self, nocheck: bool) -> Result<()> {
        match self.access.get() {
            Access::LockAll => {
                return Err(conflict("lock_all", "a lock_all epoch is already open"))
            }
            Access::Locks => return Err(conflict("lock_all", "this process holds locks")),
            _ => self.leave_unused_fence("lock_all")?,
        }
        self.set_access(Access::LockAll);
        self.lock_all_nocheck.set(nocheck);
        Ok(())
    }

    /// `unlock_all`: returns whether the lock_all was taken with NOCHECK.
    pub(crate) fn unlock_all(&self) -> Result<bool> {
        if self.access.get() != Access::LockAll {
            return Err(conflict("unlock_all", "no lock_all epoch is open"));
        }
        self.set_access(Access::None);
        Ok(self.lock_all_nocheck.get())
    }

    /// Error unless `target` is in the open passive-target epoch (`flush(target)`).
    #[inline]
    pub(crate) fn check_flush(&self, call: &'static str, target: usize) -> Result<()> {
        if self.flush_cached(target) {
            return Ok(());
        }
        self.check_flush_slow(call, target)
    }

    /// Makes the next flush take its slow path (which drains staged puts).
    pub(crate) fn forget_flush_cache(&self) {
        self.fast_flush.set(NONE);
    }

    /// Makes the next RMA call take its slow path: the epoch just opened is deferred
    /// (its synchronization is still pending), and the slow path waits for it.
    pub(crate) fn forget_access_cache(&self) {
        self.fast_access.set(NONE);
    }

    #[inline(never)]
    fn check_flush_slow(&self, call: &'static str, target: usize) -> Result<()> {
        match self.access.get() {
            Access::LockAll => {
                self.fast_flush.set(ANY);
                Ok(())
            }
            Access::Locks if self.locks.borrow().iter().any(|l| l.target == target) => {
                self.fast_flush.set(target);
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
        self.flush_cached(target) || self.check_flush_slow("", target).is_ok()
    }

    /// Error unless a passive-target epoch is open (`flush_all`).
    #[inline]
    pub(crate) fn check_flush_all(&self, call: &'static str) -> Result<()> {
        match self.access.get() {
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
        if self.exposure.get().is_some() {
            return Err(conflict("post", "an exposure epoch is already open"));
        }
        if self.access.get() == Access::Fence {
            self.leave_unused_fence("post")?;
        }
        let total = self.posted_total.get() + group_len as u64;
        self.posted_total.set(total);
        self.exposure.set(Some(total));
        Ok(total)
    }

    /// The completion count the open exposure epoch waits for.
    pub(crate) fn exposure_target(&self, call: &'static str) -> Result<u64> {
        self.exposure
            .get()
            .ok_or(conflict(call, "no exposure epoch (post) is open"))
    }

    /// Closes the exposure epoch (after `wait` completed or `test` returned true).
    pub(crate) fn end_exposure(&self) {
        self.exposure.set(None);
    }

    /// `start(group)`: opens the PSCW access epoch.
    pub(crate) fn start(&self, group: &Group) -> Result<()> {
        self.leave_unused_fence("start")?;
        *self.access_group.borrow_mut() = group.clone();
        self.set_access(Access::Pscw);
        Ok(())
    }

    /// `complete`: closes the PSCW access epoch; returns its group.
    pub(crate) fn complete(&self) -> Result<Group> {
        if self.access.get() != Access::Pscw {
            return Err(conflict("complete", "no PSCW access epoch (start) is open"));
        }
        self.set_access(Access::None);
        Ok(std::mem::take(&mut *self.access_group.borrow_mut()))
    }

    /// Error unless the window may be freed (no epoch open, nothing pending).
    pub(crate) fn check_free(&self) -> Result<()> {
        if self.exposure.get().is_some() {
            return Err(conflict("free", "an exposure epoch (post) is open"));
        }
        match self.access.get() {
            Access::None => Ok(()),
            Access::Fence if !self.ops_since_fence.get() => Ok(()),
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
