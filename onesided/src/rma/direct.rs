//! The operations of a window that finish at once, or not at all: for a binding whose
//! error path is costly (the C ABI builds an MPI error code and calls a handler; a `Result`
//! of [`Error`](crate::Error) is 80 bytes to pass back), the common case of each call
//! without any `Result`. Each returns whether it did the call (or its value); when it did
//! not, it did nothing, and the caller makes the full call, which checks everything and
//! reports any error. The common case is the inlined fast path of the full call itself:
//! memory this process maps, a target already checked in the current epoch, nothing of
//! the window's queued; the two never disagree on what happens.

use crate::ops::AccElement;
use crate::win::RawWindow;
use crate::Op;

impl RawWindow {
    /// [`RawWindow::put`] when it completes here and now without a check to make: `true`
    /// when `src` was written, `false` (nothing done) when the full call is needed.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u8>::builder(&world).disp_unit(1).allocate(8)?;
    /// let raw: &onesided::RawWindow = &win;
    /// raw.lock_all(Assert::NONE)?;
    /// let target = (world.rank() + 1) % world.size();
    /// if !raw.put_if_direct(b"hi", target, 0) {
    ///     raw.put(b"hi", target, 0)?;
    /// }
    /// raw.flush(target)?;
    /// raw.unlock_all()?;
    /// # world.barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    #[inline(always)]
    pub fn put_if_direct(&self, src: &[u8], target: usize, disp: usize) -> bool {
        self.core.put_direct(src, target, disp)
    }

    /// [`RawWindow::get`] when it completes here and now (see [`RawWindow::put_if_direct`]).
    #[inline(always)]
    pub fn get_if_direct(&self, dst: &mut [u8], target: usize, disp: usize) -> bool {
        self.core.get_direct(dst, target, disp)
    }

    /// [`RawWindow::accumulate_elems`] when it completes here and now with CPU atomics
    /// (see [`RawWindow::put_if_direct`]).
    #[inline(always)]
    pub fn accumulate_if_direct<T: AccElement>(
        &self,
        origin: &[T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> bool {
        self.accumulate_direct(origin, target, disp, op, Noting::Atomic)
    }

    /// [`RawWindow::fetch_and_op_elems`] when it completes here and now: the previous
    /// value, or `None` (nothing done; see [`RawWindow::put_if_direct`]).
    #[inline(always)]
    pub fn fetch_and_op_if_direct<T: AccElement>(
        &self,
        value: T,
        target: usize,
        disp: usize,
        op: Op,
    ) -> Option<T> {
        self.fetch_and_op_direct(value, target, disp, op, Noting::Atomic)
    }

    /// [`RawWindow::compare_and_swap_elems`] when it completes here and now: the previous
    /// value, or `None` (nothing done; see [`RawWindow::put_if_direct`]).
    #[inline(always)]
    pub fn compare_and_swap_if_direct<T: AccElement>(
        &self,
        value: T,
        compare: T,
        target: usize,
        disp: usize,
    ) -> Option<T> {
        self.compare_and_swap_direct(value, compare, target, disp, Noting::Atomic)
    }

    #[inline(always)]
    pub(crate) fn accumulate_direct<T: AccElement>(
        &self,
        origin: &[T],
        target: usize,
        disp: usize,
        op: Op,
        noting: Noting,
    ) -> bool {
        if op == Op::NoOp || !op.valid_for(T::TYPE) {
            return false;
        }
        let Some(p) = self.core.atomic_fast::<T>(target, disp, origin.len()) else {
            return false;
        };
        // SAFETY: bounds and alignment checked by atomic_fast; mapped memory that every
        // process accesses atomically.
        match origin {
            [v] => unsafe { T::apply_op(p, op, *v) },
            // Atomic as a whole: under lock stripes, keyed where `acc_run` finds them.
            _ if std::mem::size_of_val(origin) <= crate::ops::WHOLE_OP_MAX => return false,
            _ if self.core.plain_accumulate(target, p, origin, None, op) => {
                // Plain stores, which a flush must fence.
                self.core.epoch.note_rma();
                return true;
            }
            _ => unsafe { crate::ops::apply_run(p, origin, None, op) },
        }
        if op == Op::Replace {
            // Plain (release) stores, not locked instructions.
            self.core.epoch.note_rma();
        } else {
            noting.note(self);
        }
        true
    }

    #[inline(always)]
    pub(crate) fn fetch_and_op_direct<T: AccElement>(
        &self,
        value: T,
        target: usize,
        disp: usize,
        op: Op,
        noting: Noting,
    ) -> Option<T> {
        if !op.valid_for(T::TYPE) {
            return None;
        }
        let p = self.core.atomic_fast::<T>(target, disp, 1)?;
        // SAFETY: as in accumulate_direct.
        let old = unsafe { T::fetch_op(p, op, value) };
        // A locked read-modify-write, or (no_op) a load.
        noting.note(self);
        Some(old)
    }

    #[inline(always)]
    pub(crate) fn compare_and_swap_direct<T: AccElement>(
        &self,
        value: T,
        compare: T,
        target: usize,
        disp: usize,
        noting: Noting,
    ) -> Option<T> {
        if !T::TYPE.is_integer() {
            return None;
        }
        let p = self.core.atomic_fast::<T>(target, disp, 1)?;
        // SAFETY: as in accumulate_direct.
        let old = unsafe { T::compare_swap(p, compare, value) };
        noting.note(self);
        Some(old)
    }

    /// [`RawWindow::flush`] when nothing is left to wait for: `true` when done (a fence),
    /// `false` (nothing done) when the full call is needed.
    #[inline(always)]
    pub fn flush_if_quiet(&self, target: usize) -> bool {
        self.core.flush_if_quiet(target)
    }

    /// [`RawWindow::flush_if_quiet`] for a caller whose calls on this window never overlap
    /// in time (a binding under `MPI_THREAD_SERIALIZED` or less): its memory fence is left
    /// out when every operation since the last one was a CPU atomic — a locked instruction,
    /// itself a full barrier — so that an atomic + flush costs one barrier, not two. With
    /// calls that overlap, a fence another thread's flush took would not order this
    /// thread's stores: use [`RawWindow::flush_if_quiet`] then.
    #[inline(always)]
    pub fn flush_if_quiet_serialized(&self, target: usize) -> bool {
        self.core.flush_if_quiet_serialized(target)
    }

    /// [`RawWindow::flush_local`] when the target was already checked in this epoch and
    /// nothing was staged or posted for a rank of this node since: nothing to do.
    #[inline(always)]
    pub fn flush_local_if_checked(&self, target: usize) -> bool {
        self.core.flush_local_if_cached(target)
    }
}

/// How a direct CPU atomic records itself in the epoch. Only a flush that may leave out its
/// fence ([`RawWindow::flush_if_quiet_serialized`], the C ABI's) reads the difference;
/// the Rust API's flush always fences, so its atomics pay for a plain store, not a
/// load-compare-store.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Noting {
    /// As an operation whose stores wait for a fence (one store).
    Store,
    /// As a locked instruction, itself a full barrier (see `EpochState::note_atomic`).
    Atomic,
}

impl Noting {
    #[inline(always)]
    fn note(self, w: &RawWindow) {
        match self {
            Noting::Store => w.core.epoch.note_rma(),
            Noting::Atomic => w.core.epoch.note_atomic(),
        }
    }
}
