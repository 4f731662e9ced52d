//! What a forked child makes of the pages a window shares in place.
//!
//! Pages of the program's own memory that a `create` window (or an attach) moved into a
//! shared segment (`onesided_share_in_place`) are a shared mapping: a child made by
//! `fork()` would inherit it shared, so that its stores reached the parent — natively the
//! child has copy-on-write pages. A `pthread_atfork` child handler remaps every such range
//! as a *private* mapping of its segment: the child keeps the contents and its stores stay
//! its own, with no copy at fork time (a fork followed by `exec` costs one `mmap` per
//! range, whatever the windows' sizes). Unlike a native fork's snapshot, a page the child
//! has not written yet still shows the parent's later stores (a private file mapping reads
//! the object until the page is copied).
//!
//! The handler runs in the child with only the forking thread, possibly while another
//! thread of the parent held a lock: it takes none and allocates nothing. The ranges live
//! in a fixed table of atomics; while it is full (more than [`SLOTS`] ranges at once), no
//! more memory is shared in place (peers reach it by cross-memory attach instead).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Once;

use rustix::mm::{MapFlags, ProtFlags};

/// Ranges the table holds at once.
const SLOTS: usize = 512;

const FREE: u8 = 0;
/// Claimed by a thread that is filling it in (the child skips it).
const FILLING: u8 = 1;
const READY: u8 = 2;

struct Slot {
    state: AtomicU8,
    base: AtomicUsize,
    len: AtomicUsize,
    /// The segment's descriptor, or -1 (the child copies the range then).
    fd: AtomicI32,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    state: AtomicU8::new(FREE),
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    fd: AtomicI32::new(-1),
};

static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];

extern "C" {
    /// POSIX: handlers run around `fork()` (glibc runs the child's in the child).
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> c_int;
}

/// A range of pages shared in place, known to the child handler while this lives.
#[derive(Debug)]
pub(crate) struct ForkGuard {
    slot: usize,
    /// Kept open for the child's private mapping.
    fd: Option<OwnedFd>,
}

/// Registers `[base, base + len)`, pages shared in place over the segment `fd` (which the
/// guard keeps open; without one the child copies the range), for the child handler; it
/// is unregistered when the guard drops. `None` while the table is full: the range must
/// not be shared in place then.
pub(crate) fn register(base: usize, len: usize, fd: Option<OwnedFd>) -> Option<ForkGuard> {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: registers a handler of ours with the C library; it lives as long as the
        // process (a static function).
        unsafe { pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    let raw = fd.as_ref().map_or(-1, |f| f.as_raw_fd());
    for (i, slot) in TABLE.iter().enumerate() {
        // Acquire: the slot was released by the guard that freed it (its last stores
        // before the FREE store are not read; only ownership passes).
        if slot
            .state
            .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // Relaxed: published by the Release store of READY below.
            slot.base.store(base, Ordering::Relaxed);
            slot.len.store(len, Ordering::Relaxed);
            slot.fd.store(raw, Ordering::Relaxed);
            // Release: a child that sees READY sees the range.
            slot.state.store(READY, Ordering::Release);
            return Some(ForkGuard { slot: i, fd });
        }
    }
    None
}

impl ForkGuard {
    /// The same range, now shared over the segment `fd`: the child maps it privately
    /// through it instead of copying it.
    pub(crate) fn with_fd(mut self, fd: OwnedFd) -> ForkGuard {
        // Relaxed: the descriptor is a hint the child reads with the range; a fork before
        // this store copies the range instead (the same result).
        TABLE[self.slot].fd.store(fd.as_raw_fd(), Ordering::Relaxed);
        self.fd = Some(fd);
        self
    }

    /// Unregisters the range (as dropping the guard does) and hands back its descriptor.
    pub(crate) fn into_fd(mut self) -> Option<OwnedFd> {
        self.fd.take()
    }
}

impl Drop for ForkGuard {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the next claim.
        TABLE[self.slot].state.store(FREE, Ordering::Release);
    }
}

/// The child handler: every registered range becomes a private mapping of its segment (or,
/// without a descriptor, private pages with a copy of its contents).
unsafe extern "C" fn after_fork_in_child() {
    for slot in &TABLE {
        // Acquire: pairs with the Release store of READY.
        if slot.state.load(Ordering::Acquire) != READY {
            continue;
        }
        let (base, len, fd) = (
            slot.base.load(Ordering::Relaxed),
            slot.len.load(Ordering::Relaxed),
            slot.fd.load(Ordering::Relaxed),
        );
        // SAFETY: the child's own copy of a range this process shared in place, mapped
        // shared over the segment `fd` names (open: the guard keeps it); no other thread
        // exists in the child.
        unsafe { make_private(base, len, fd) };
    }
}

/// Replaces the shared pages `[base, base + len)` with private ones of the same contents:
/// a private mapping of the segment `fd` (no copy), or with `fd` < 0 a copy.
///
/// # Safety
/// `[base, base + len)` is a page-aligned range of this process mapped shared over the
/// segment `fd` names from its offset 0, and nothing else runs in the process.
unsafe fn make_private(base: usize, len: usize, fd: c_int) {
    if fd >= 0 {
        // SAFETY: the caller's contract: `fd` is open.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        // SAFETY: replaces the caller's shared mapping of the segment with a private one
        // of the same object at the same place: the same contents, copied on write.
        let mapped = unsafe {
            rustix::mm::mmap(
                base as *mut _,
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
                fd,
                0,
            )
        };
        if mapped.is_ok() {
            return;
        }
    }
    // SAFETY: the caller's contract (the same as unshare_pages').
    let _ = unsafe { crate::shm::segment::unshare_pages(base as *mut u8, len, None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_claimed_and_given_back() {
        let a = register(0x1000, 0x2000, None).unwrap();
        let b = register(0x8000, 0x1000, None).unwrap();
        let (i, j) = (a.slot, b.slot);
        assert_ne!(i, j);
        assert_eq!(TABLE[i].state.load(Ordering::Relaxed), READY);
        assert_eq!(TABLE[i].base.load(Ordering::Relaxed), 0x1000);
        assert_eq!(TABLE[j].len.load(Ordering::Relaxed), 0x1000);
        drop(a);
        assert_eq!(TABLE[i].state.load(Ordering::Relaxed), FREE);
        drop(b);
    }
}
