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

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::win::core::{Flags, HandleFlags};
use crate::win::info::WinInfo;
use crate::win::RawWindow;

impl RawWindow {
    /// A second handle to the same window with `flags` (the duplicate owns nothing).
    pub(crate) fn duplicate_with(&self, flags: Flags) -> RawWindow {
        RawWindow {
            core: self.core.clone_handle(),
            kept: None,
            attached: Arc::clone(&self.attached),
            flags: HandleFlags::new(flags),
            duplicate: true,
            freed: true,
            typed: self.typed,
        }
    }

    /// A second handle to this window with `info` applied on top of this handle's info
    /// (`MPIX_Win_dup_with_info`, seed 000 §3). Local. The duplicate shares everything
    /// but the per-handle keys (`mpi_win_scope`, `mpi_win_order`,
    /// `mpi_assert_accumulate_intrinsic`), keeps the window alive, and is freed on its own
    /// ([`RawWindow::free`] of a duplicate is local).
    ///
    /// Errors: an invalid value of a known key; a window made through a typed
    /// [`Window`](crate::Window), whose duplicates borrow it
    /// ([`Window::dup_with_info`](crate::Window::dup_with_info)) since it may keep the
    /// caller's memory.
    pub fn dup_with_info(&self, info: &WinInfo) -> Result<RawWindow> {
        if self.typed {
            return Err(Error::InvalidArgument(
                "dup_with_info: a typed window's duplicates borrow it (Window::dup_with_info)"
                    .into(),
            ));
        }
        Ok(self.duplicate_with(self.flags_with(info)?))
    }

    /// This handle's flags with `info` applied on top.
    pub(crate) fn flags_with(&self, info: &WinInfo) -> Result<Flags> {
        let mut hints = self.hints();
        hints.update(info, false)?;
        Ok(Flags::from_hints(&hints))
    }
}
