//! A lock for state that one thread at a time uses in practice — a window's epoch
//! transitions, on every lock/unlock/start/post call. Taking it is one compare-and-swap and
//! releasing it one store: no poisoning (a panic inside a transition releases the lock on
//! unwind; transitions check first and write last), no futex. A contended waiter backs off
//! like every wait in onesided (spin, yield, then short sleeps).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backoff::Backoff;

/// A value behind a spin lock.
#[derive(Default)]
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard exists at a time
// (the flag is taken with Acquire and released with Release), so sharing the lock shares
// exclusive access to `T` between threads one at a time — what `Mutex<T>: Sync` needs.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// A lock holding `value`.
    pub(crate) fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, waiting while another thread holds it.
    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        // Acquire: what the previous holder wrote is visible to us.
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        SpinGuard { lock: self }
    }

    /// True while some thread holds the lock. Acquire: when it reads the Release store of
    /// a guard's drop, what that holder did is visible to the caller.
    #[inline(always)]
    pub(crate) fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Acquire)
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut backoff = Backoff::new();
        loop {
            // Relaxed: only a hint before the Acquire exchange below.
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff.snooze();
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLock")
            .field("value", &*self.lock())
            .finish()
    }
}

/// Exclusive access to a [`SpinLock`]'s value; released when dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see the Sync impl) until it is dropped.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in deref; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        // Release: our writes to the value happen-before the next holder's Acquire.
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::SpinLock;

    #[test]
    fn threads_take_turns() {
        let lock = SpinLock::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 40_000);
    }
}
