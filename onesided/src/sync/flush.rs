//! Flush (MPI-4.1 §12.5.4): completing operations inside a passive-target epoch.
//!
//! Data movement in onesided completes locally before `put`/`get` return (a load/store copy
//! or a finished `process_vm_*` call), so local completion (`flush_local*`) is only the
//! epoch check. Remote completion (`flush*`) must also order our stores before any later
//! load or store of ours (another origin may read the data after we signal it, Dekker
//! style), which is one full memory fence — foMPI's [Gerstenberger13] "mfence" — the whole critical path.
//! With requests queued in the progress engine, a flush waits behind them.

use std::sync::atomic::{fence, Ordering};

use bytemuck::Pod;

use crate::error::Result;
use crate::progress::{Step, SyncOp};
use crate::win::core::WinCore;
use crate::win::Window;

/// Remote completion behind queued requests.
struct FlushOp;

impl SyncOp<WinCore> for FlushOp {
    fn poll(&mut self, _core: &WinCore) -> Result<Step> {
        fence(Ordering::SeqCst);
        Ok(Step::Done)
    }
}

impl WinCore {
    /// Makes every operation issued so far complete at its target.
    #[inline]
    fn complete_at_targets(&self) -> Result<()> {
        self.drain_staged()?;
        if self.engine.idle() {
            fence(Ordering::SeqCst);
            Ok(())
        } else {
            self.engine.run(self, FlushOp)
        }
    }

    /// Flush: the common case (target already checked in this epoch, nothing queued) is
    /// one comparison and a fence, inlined; everything else out of line.
    #[inline(always)]
    pub(crate) fn flush(&self, target: usize) -> Result<()> {
        if target < self.size && self.epoch.flush_cached(target) && self.engine.idle() {
            fence(Ordering::SeqCst);
            return Ok(());
        }
        self.flush_slow(target)
    }

    #[inline(never)]
    fn flush_slow(&self, target: usize) -> Result<()> {
        self.check_rank(target)?;
        self.epoch.check_flush("flush", target)?;
        self.complete_at_targets()
    }

    #[inline]
    pub(crate) fn flush_all(&self) -> Result<()> {
        self.epoch.check_flush_all("flush_all")?;
        self.complete_at_targets()
    }

    #[inline]
    pub(crate) fn flush_local(&self, target: usize) -> Result<()> {
        self.check_rank(target)?;
        self.epoch.check_flush("flush_local", target)
    }

    #[inline]
    pub(crate) fn flush_local_all(&self) -> Result<()> {
        self.epoch.check_flush_all("flush_local_all")
    }
}

impl<T: Pod> Window<T> {
    /// Completes every operation this process issued to `target`, at the origin and at the
    /// target (MPI_Win_flush). Only inside a passive-target epoch that includes `target`.
    ///
    /// ```no_run
    /// # use onesided::{Assert, LockType, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<u64>::allocate(&world, 1)?;
    /// win.lock(LockType::Shared, 1, Assert::NONE)?;
    /// win.put(&[42], 1, 0)?;
    /// win.flush(1)?; // 42 is now in rank 1's memory
    /// win.unlock(1)?;
    /// # Ok::<(), onesided::Error>(())
    /// ```
    #[inline(always)]
    pub fn flush(&self, target: usize) -> Result<()> {
        self.core.flush(target)
    }

    /// Completes every operation this process issued in the window, at origins and targets
    /// (MPI_Win_flush_all).
    #[inline]
    pub fn flush_all(&self) -> Result<()> {
        self.core.flush_all()
    }

    /// Completes operations to `target` at the origin: buffers may be reused
    /// (MPI_Win_flush_local). In onesided this already holds when `put`/`get` return.
    #[inline]
    pub fn flush_local(&self, target: usize) -> Result<()> {
        self.core.flush_local(target)
    }

    /// [`Window::flush_local`] for every target (MPI_Win_flush_local_all).
    #[inline]
    pub fn flush_local_all(&self) -> Result<()> {
        self.core.flush_local_all()
    }

    /// Synchronizes the public and private window copies (MPI_Win_sync). In the unified
    /// memory model this is a full memory barrier; it is valid in any epoch.
    #[inline]
    pub fn sync(&self) -> Result<()> {
        fence(Ordering::SeqCst);
        Ok(())
    }
}
