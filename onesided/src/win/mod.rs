//! Windows (MPI-4.1 §12.2): the four flavors, attributes, info, local access and free.
//!
//! A [`Window<T>`] exposes memory of every process of a communicator for RMA. All flavors
//! share one node segment per window that holds the synchronization words of every rank
//! (see `control`); `allocate` and `allocate_shared` put the window memory in the same
//! segment, so a target's memory is `base + rank × stride` — O(1) metadata per process when
//! sizes are symmetric ([Gerstenberger13] §2.2).

pub(crate) mod assemble;
mod attr;
mod buffer;
pub(crate) mod control;
pub(crate) mod control_plane;
pub(crate) mod core;
pub(crate) mod create;
mod dup;
pub(crate) mod dynamic;
/// The window's epoch record (the rules of `sync` check against it).
pub(crate) mod epoch;
pub mod info;
pub(crate) mod interned;
pub(crate) mod net_control;
pub(crate) mod notify_counters;
pub(crate) mod raw;
pub(crate) mod reach;
pub(crate) mod regions;
pub(crate) mod resolve;

pub use attr::{Flavor, MemoryModel, WindowLayout};
pub use buffer::WinBuffer;
pub use raw::RawWindow;

use std::marker::PhantomData;

use bytemuck::Pod;

use crate::error::Result;
use crate::transport::Route;
use crate::win::attr::Flavor as WinFlavor;
use crate::win::resolve::checked_offset;

impl RawWindow {
    /// Where `len` bytes of this process's own window memory at `disp` (in its disp_unit;
    /// an address for dynamic windows) are.
    fn local_route(&self, op: &'static str, disp: usize, len: usize) -> Result<Route> {
        let l = &self.core.local;
        if self.core.flavor == WinFlavor::Dynamic {
            return Ok(self.core.resolve_own_dynamic(op, disp, len)?.route);
        }
        let off = checked_offset(op, self.core.rank, disp, l.disp_unit, len, l.bytes)?;
        Ok(Route::Direct(l.base.wrapping_add(off)))
    }

    /// Copies this process's window memory at `disp` (in its displacement unit; an address
    /// for dynamic windows) into `dst`.
    ///
    /// Safe at any time: if RMA to the same bytes is in flight (which MPI calls erroneous
    /// without synchronization) the values read are unspecified, never undefined behaviour.
    pub fn local_read(&self, disp: usize, dst: &mut [u8]) -> Result<()> {
        self.local_route("local_read", disp, dst.len())?.read(dst)
    }

    /// Copies `src` into this process's window memory at `disp` (see
    /// [`RawWindow::local_read`]).
    pub fn local_write(&self, disp: usize, src: &[u8]) -> Result<()> {
        self.local_route("local_write", disp, src.len())?.write(src)
    }

    /// This process's window memory as elements of `T` (whole elements only).
    ///
    /// # Safety
    /// As for [`Window::local_slice_mut`]: nobody else reads or writes the memory while the
    /// slice lives (for a shared slice: nobody writes it), and the memory is aligned for
    /// `T` (it is for memory a typed window allocated or was given).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn local_elems<T: Pod>(&self) -> &mut [T] {
        let l = &self.core.local;
        let len = l.bytes / std::mem::size_of::<T>().max(1);
        if len == 0 {
            return &mut [];
        }
        // SAFETY: base..base+bytes is this process's live window memory, aligned for `T`
        // and not accessed by anybody else while the slice lives (the caller's promise);
        // every bit pattern is a valid `T` (Pod).
        unsafe { std::slice::from_raw_parts_mut(l.base.cast(), len) }
    }

    /// Direct access to `rank`'s window memory (MPI_Win_shared_query).
    ///
    /// Defined for `allocate_shared` and `allocate` windows (all on one node here) and for
    /// `create` windows whose target memory came from [`crate::alloc_mem`]; `None` when the
    /// memory is not directly accessible. Errors for an invalid rank.
    pub fn shared_query(&self, rank: usize) -> Result<Option<SharedRegion<u8>>> {
        self.core.check_rank(rank)?;
        let Some(region) = self.core.targets.region(rank) else {
            return Ok(None);
        };
        let (route, bytes, disp_unit) = match region.lazy {
            Some(i) => (
                Route::Direct(self.core.peer_mappings[i as usize].map(region.bytes)?),
                region.bytes,
                region.disp_unit,
            ),
            None => (region.route, region.bytes, region.disp_unit),
        };
        match route {
            Route::Direct(ptr) => Ok(Some(SharedRegion {
                ptr: ptr.cast(),
                bytes,
                disp_unit,
                _elem: PhantomData,
            })),
            Route::Cma { .. } => Ok(None),
            Route::Net(_) => Ok(None),
        }
    }
}

/// A rank's window memory mapped in this process ([`Window::shared_query`](crate::Window::shared_query)).
#[derive(Debug, Clone, Copy)]
pub struct SharedRegion<T> {
    ptr: *mut T,
    bytes: usize,
    disp_unit: usize,
    _elem: PhantomData<T>,
}

impl<T: Pod> SharedRegion<T> {
    /// The same region seen as elements of `E`.
    pub(crate) fn retyped<E>(self) -> SharedRegion<E> {
        SharedRegion {
            ptr: self.ptr.cast(),
            bytes: self.bytes,
            disp_unit: self.disp_unit,
            _elem: PhantomData,
        }
    }

    /// First element.
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.bytes
    }

    /// Number of whole elements.
    pub fn len(&self) -> usize {
        self.bytes / std::mem::size_of::<T>().max(1)
    }

    /// True when the region is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The owner's displacement unit.
    pub fn disp_unit(&self) -> usize {
        self.disp_unit
    }

    /// The region as a slice.
    ///
    /// # Safety
    /// The window must outlive the slice, and nobody (any process) may write the memory
    /// while it lives.
    pub unsafe fn as_slice<'a>(&self) -> &'a [T] {
        if self.bytes == 0 {
            return &[];
        }
        // SAFETY: ptr/len describe a rank's window memory mapped in this process; the
        // caller guarantees it outlives the slice and is not written meanwhile.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len()) }
    }

    /// The region as a mutable slice.
    ///
    /// # Safety
    /// The window must outlive the slice, and nobody else (any process) may access the
    /// memory while it lives.
    pub unsafe fn as_mut_slice<'a>(&self) -> &'a mut [T] {
        if self.bytes == 0 {
            return &mut [];
        }
        // SAFETY: as in as_slice; the caller guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len()) }
    }
}
