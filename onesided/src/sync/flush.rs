//! Flush (MPI-4.1 §12.5.4): completing operations inside a passive-target epoch.
//!
//! Data movement in onesided completes locally before `put`/`get` return (a load/store copy,
//! a finished `process_vm_*` call, or a copy into a stage or a ring), so local completion
//! (`flush_local*`) needs only the epoch check; it also writes what the node still holds
//! for its targets (see [`WinCore::flush_local`]). Remote completion (`flush*`) must also
//! order our stores before any later load or store of ours (another origin may read the
//! data after we signal it, Dekker style), which is one full memory fence — foMPI's
//! [Gerstenberger13] "mfence" — the whole critical path. With requests queued in the
//! progress engine, a flush waits behind them.

use std::sync::atomic::{fence, Ordering};

use crate::error::Result;
use crate::progress::{blocking_start, Completes, Order, Step, SyncOp, Ticket};
use crate::request::Request;
use crate::win::core::{Flags, HandleFlags, WinCore};
use crate::win::RawWindow;

/// Remote completion behind queued requests.
struct FlushOp;

impl SyncOp<WinCore> for FlushOp {
    fn name(&self) -> &'static str {
        "MPI_Win_flush"
    }

    /// What was deferred behind the synchronizations it waited for went out after the
    /// flush's own call: it completes here.
    fn completes(&self) -> Completes {
        Completes::All
    }

    fn poll(&mut self, _core: &WinCore) -> Result<Step> {
        fence(Ordering::SeqCst);
        Ok(Step::Done)
    }
}

impl WinCore {
    /// Makes the operations of epoch `order` issued so far (every operation, for
    /// [`Order::BARRIER`]) complete at their targets.
    #[inline]
    fn complete_at_targets(&self, order: Order, flags: Flags, target: Option<usize>) -> Result<()> {
        match blocking_start(|| self.start_complete_at_targets(order, flags, target))? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None),
        }
    }

    /// Starts completing the operations of epoch `order` issued so far at their targets:
    /// done at once when no synchronization is pending, else a ticket behind the pending
    /// ones it may not pass. A flush of one target is an op of that target's lock epoch,
    /// so it does not wait for another target's pending lock.
    /// Staged puts: every thread's, or with `mpi_win_scope=thread` the calling thread's;
    /// network operations: what `target` needs (every one for a flush of all).
    fn start_complete_at_targets(
        &self,
        order: Order,
        flags: Flags,
        target: Option<usize>,
    ) -> Result<Option<Ticket>> {
        self.drain_for_flush(flags, target)?;
        // Nothing queued here, and no other window asked for attention: one load decides.
        if self.engine.quiet() {
            fence(Ordering::SeqCst);
            Ok(None)
        } else {
            // Progresses every window, then completes at once if this one is idle.
            self.engine.start_ordered(self, FlushOp, order)
        }
    }

    /// The epoch check of a flush; only a process-scope flush (which drains every thread's
    /// staged puts) may let the next flush take the inlined path.
    fn check_flush_for(&self, flags: Flags, call: &'static str, target: usize) -> Result<()> {
        if flags.thread_scope() {
            self.epoch.check_flush_uncached(call, target)
        } else {
            self.epoch.check_flush(call, target)
        }
    }

    /// `iflush(target)`: the checks of `flush`, then [`Self::start_complete_at_targets`].
    pub(crate) fn start_flush(&self, target: usize, flags: Flags) -> Result<Option<Ticket>> {
        self.check_rank(target)?;
        self.check_flush_for(flags, "iflush", target)?;
        self.start_complete_at_targets(self.epoch.access_order(target), flags, Some(target))
    }

    /// `iflush_all`.
    pub(crate) fn start_flush_all(&self, flags: Flags) -> Result<Option<Ticket>> {
        self.epoch.check_flush_all("iflush_all")?;
        self.start_complete_at_targets(Order::BARRIER, flags, None)
    }

    /// Flush: the common case (target already checked in this epoch, nothing queued in the
    /// process) is one comparison and a fence, inlined; everything else — including the
    /// progress of other windows' pending synchronizations — out of line.
    #[inline(always)]
    pub(crate) fn flush(&self, target: usize, flags: &HandleFlags) -> Result<()> {
        if self.flush_if_quiet(target) {
            return Ok(());
        }
        self.flush_slow(target, flags.get())
    }

    /// The inlined part of [`WinCore::flush`]: done (a fence) when `target` was checked in
    /// this epoch and nothing is queued.
    #[inline(always)]
    pub(crate) fn flush_if_quiet(&self, target: usize) -> bool {
        if target < self.size && self.epoch.flush_cached(target) && self.engine.quiet() {
            fence(Ordering::SeqCst);
            return true;
        }
        false
    }

    /// [`WinCore::flush_if_quiet`] for serialized callers (see
    /// [`RawWindow::flush_if_quiet_serialized`]): the fence only behind plain stores.
    #[inline(always)]
    pub(crate) fn flush_if_quiet_serialized(&self, target: usize) -> bool {
        if target < self.size && self.epoch.flush_cached(target) && self.engine.quiet() {
            if self.epoch.stores_unfenced() {
                fence(Ordering::SeqCst);
                self.epoch.note_fenced();
            }
            return true;
        }
        false
    }

    #[inline(never)]
    fn flush_slow(&self, target: usize, flags: Flags) -> Result<()> {
        self.check_rank(target)?;
        self.check_flush_for(flags, "flush", target)?;
        self.complete_at_targets(self.epoch.access_order(target), flags, Some(target))
    }

    #[inline]
    pub(crate) fn flush_all(&self, flags: Flags) -> Result<()> {
        self.epoch.check_flush_all("flush_all")?;
        self.complete_at_targets(Order::BARRIER, flags, None)
    }

    /// Local completion: data is locally complete when the operation returns, so MPI asks
    /// only the epoch check here. On top of it, what this node still holds back for its
    /// targets — puts staged for ordinary memory, requests in targets' rings — is
    /// completed at the targets: libraries built on MPI RMA release locks after
    /// `flush_local` (OSHMPI's `shmem_clear_lock`: put, `flush_local`, then an atomic on
    /// another window), where MPICH and Open MPI have already written such puts on one node.
    /// Nothing waits for the network. The common case — nothing staged or posted since the
    /// last flush of `target` — is the flush cache's one comparison, inlined.
    #[inline]
    pub(crate) fn flush_local(&self, target: usize) -> Result<()> {
        if self.flush_local_if_cached(target) {
            return Ok(());
        }
        self.flush_local_slow(target)
    }

    /// The common case of [`WinCore::flush_local`]: `target` was checked in this epoch and
    /// nothing was staged or posted since (both reset the flush cache), so there is
    /// nothing to do. Also the C ABI's inlined test (`RawWindow::flush_local_if_checked`).
    #[inline(always)]
    pub(crate) fn flush_local_if_cached(&self, target: usize) -> bool {
        target < self.size && self.epoch.flush_cached(target)
    }

    /// [`WinCore::flush_local`] past its common case. The check must not set the flush
    /// cache: the next `flush` of `target` would then skip the network's operations.
    #[inline(never)]
    fn flush_local_slow(&self, target: usize) -> Result<()> {
        self.check_rank(target)?;
        self.epoch.check_flush_uncached("flush_local", target)?;
        self.drain_staged()
    }

    /// [`WinCore::flush_local`] for every target.
    #[inline]
    pub(crate) fn flush_local_all(&self) -> Result<()> {
        self.epoch.check_flush_all("flush_local_all")?;
        self.drain_staged()
    }
}

impl RawWindow {
    /// Completes every operation this process issued to `target`, at the origin and at the
    /// target (MPI_Win_flush). Only inside a passive-target epoch that includes `target`.
    /// Through a handle with `mpi_win_scope=thread`, only the operations the calling thread
    /// issued (seed 000 §2.1).
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, LockType, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<u64>::allocate(&world, 1)?;
    /// win.lock(LockType::Shared, 1, Assert::NONE)?;
    /// win.put(&[42], 1, 0)?;
    /// win.flush(1)?; // 42 is now in rank 1's memory
    /// win.unlock(1)?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    #[inline(always)]
    pub fn flush(&self, target: usize) -> Result<()> {
        self.core.flush(target, &self.flags)
    }

    /// Completes every operation this process issued in the window, at origins and targets
    /// (MPI_Win_flush_all); with `mpi_win_scope=thread`, the calling thread's.
    #[inline]
    pub fn flush_all(&self) -> Result<()> {
        self.core.flush_all(self.flags.get())
    }

    /// Completes operations to `target` at the origin: buffers may be reused
    /// (MPI_Win_flush_local). In onesided this already holds when `put`/`get` return; the
    /// call also writes the puts to ranks of this node that are still staged or in a ring
    /// (not the network's: a `flush` completes those).
    #[inline]
    pub fn flush_local(&self, target: usize) -> Result<()> {
        self.core.flush_local(target)
    }

    /// [`Window::flush_local`](crate::RawWindow::flush_local) for every target (MPI_Win_flush_local_all).
    #[inline]
    pub fn flush_local_all(&self) -> Result<()> {
        self.core.flush_local_all()
    }

    /// Nonblocking [`Window::flush`](crate::RawWindow::flush) (MPI_Win_iflush, \[Zounmevo14\]): the request completes
    /// once every operation this process issued to `target` *before the call* is complete
    /// at origin and target; operations issued later are not covered. Errors as `flush`.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, LockType, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<u64>::allocate(&world, 1)?;
    /// win.lock(LockType::Shared, 1, Assert::NONE)?;
    /// win.put(&[42], 1, 0)?;
    /// let flushed = win.iflush(1)?;
    /// // ... work that does not depend on the put ...
    /// flushed.wait()?; // 42 is now in rank 1's memory
    /// win.unlock(1)?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn iflush(&self, target: usize) -> Result<Request<'_>> {
        let ticket = self.core.start_flush(target, self.flags.get())?;
        Ok(Request::started(&self.core, ticket))
    }

    /// Nonblocking [`Window::flush_all`](crate::RawWindow::flush_all) (MPI_Win_iflush_all), covering the operations
    /// issued before the call.
    pub fn iflush_all(&self) -> Result<Request<'_>> {
        let ticket = self.core.start_flush_all(self.flags.get())?;
        Ok(Request::started(&self.core, ticket))
    }

    /// Nonblocking [`Window::flush_local`](crate::RawWindow::flush_local) (MPI_Win_iflush_local). Operations are locally
    /// complete when they return here, so the request is complete at once.
    pub fn iflush_local(&self, target: usize) -> Result<Request<'_>> {
        self.core.flush_local(target)?;
        Ok(Request::done())
    }

    /// Nonblocking [`Window::flush_local_all`](crate::RawWindow::flush_local_all) (MPI_Win_iflush_local_all): complete at once.
    pub fn iflush_local_all(&self) -> Result<Request<'_>> {
        self.core.flush_local_all()?;
        Ok(Request::done())
    }

    /// Synchronizes the public and private window copies (MPI_Win_sync). In the unified
    /// memory model this is a full memory barrier; it is valid in any epoch. Programs poll
    /// local memory with it: without a progress thread (`ONESIDED_PROGRESS=none`) it also
    /// serves the process's peers once, so that the operation polled for can arrive.
    #[inline]
    pub fn sync(&self) -> Result<()> {
        fence(Ordering::SeqCst);
        crate::attention::serve_if_unserved();
        Ok(())
    }
}
