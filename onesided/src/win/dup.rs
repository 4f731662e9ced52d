//! Window duplication (seed 000 §3, `MPIX_Win_dup_with_info`): a second handle to the same
//! window with its own info.
//!
//! A duplicate shares everything of the window — memory, attached regions, lock and epoch
//! state, the progress engine — and differs only in the keys that describe how *this handle*
//! is used: `mpi_win_scope`, `mpi_win_order` and `mpi_assert_accumulate_intrinsic`. So one
//! thread may flush with thread scope while another orders its operations, over the same
//! memory, without orchestrating `set_info` calls.
//!
//! **Synchronization is shared.** Duplicates are handles, not windows: a lock taken through
//! one is held by all (locking the same target through a duplicate is
//! [`crate::Error::AlreadyLocked`]), an epoch opened through one may be closed through
//! another, and a fence or PSCW epoch is one epoch whichever handle calls. Every call uses
//! the flags of the handle it is made through: a flush through a thread-scope duplicate
//! completes the calling thread's operations, an accumulate through a duplicate asserting
//! intrinsic atomics is checked against that promise. Operations deferred behind a pending
//! epoch keep the flags of the handle that issued them. The reorder keys
//! (`MPI_WIN_*_REORDER`) and every other hint belong to the shared epoch queue and are the
//! window's: a duplicate inherits them, and only the collective [`Window::set_info`] changes
//! them.
//!
//! **Atomicity.** Accumulates through any handles are element-wise atomic with each other:
//! the protocol for a location depends only on the location and the element type (see
//! `rma::accumulate`), never on the handle, so the intrinsic assert of one duplicate does
//! not change how another one's accumulates are done.
//!
//! **Freeing.** Duplication and freeing a duplicate are local. A [`WindowDup`] borrows the
//! window it came from, so the compiler makes every duplicate go (dropped, or
//! [`WindowDup::free`]) before the window's collective [`Window::free`].

use std::ops::Deref;

use bytemuck::Pod;

use crate::error::Result;
use crate::win::info::WinInfo;
use crate::win::Window;

/// A duplicate of a window with its own info (from [`Window::dup_with_info`]). It
/// dereferences to a [`Window`]: every call of the window is made through it.
#[derive(Debug)]
pub struct WindowDup<'w, T: Pod> {
    handle: Window<T>,
    _parent: std::marker::PhantomData<&'w Window<T>>,
}

impl<T: Pod> Deref for WindowDup<'_, T> {
    type Target = Window<T>;

    fn deref(&self) -> &Window<T> {
        &self.handle
    }
}

impl<T: Pod> WindowDup<'_, T> {
    /// Frees the duplicate (local; the same as dropping it). The window and its other
    /// handles are unaffected.
    pub fn free(self) -> Result<()> {
        drop(self);
        Ok(())
    }
}

impl<T: Pod> Window<T> {
    /// A second handle to this window with `info` applied on top of this handle's info
    /// (`MPIX_Win_dup_with_info`, seed 000 §3). Local.
    ///
    /// `mpi_win_scope`, `mpi_win_order` and `mpi_assert_accumulate_intrinsic` take the
    /// values in `info`; every other key keeps the window's value (they describe the shared
    /// epoch queue and memory; [`Window::set_info`] changes them for all handles) — read
    /// what is in force with [`Window::get_info`] on the duplicate. Errors: an invalid value
    /// of a known key.
    ///
    /// ```no_run
    /// use onesided::{Assert, Op, Window, WinInfo, WinScope};
    /// let world = onesided::init()?.world().clone();
    /// let win = Window::<u64>::allocate(&world, 64)?;
    /// let ordered = win.dup_with_info(&WinInfo::new().order(true))?;
    /// let per_thread = win.dup_with_info(&WinInfo::new().scope(WinScope::Thread))?;
    /// win.lock_all(Assert::NONE)?; // one epoch for all three handles
    /// ordered.put(&[42], 1, 0)?;
    /// ordered.accumulate(&[1], 1, 1, Op::Sum)?; // lands after the put: no flush between
    /// per_thread.flush(1)?; // this thread's operations only
    /// win.unlock_all()?;
    /// drop((ordered, per_thread));
    /// win.free()?;
    /// # Ok::<(), onesided::Error>(())
    /// ```
    pub fn dup_with_info(&self, info: &WinInfo) -> Result<WindowDup<'_, T>> {
        let flags = self.flags_with(info)?;
        Ok(WindowDup {
            handle: Window::from_raw(self.raw.duplicate_with(flags)),
            _parent: std::marker::PhantomData,
        })
    }
}
