//! Windows (MPI-4.1 §12.2): the four flavors, attributes, info, local access and free.
//!
//! A [`Window<T>`] exposes memory of every process of a communicator for RMA. All flavors
//! share one node segment per window that holds the synchronization words of every rank
//! (see `control`); `allocate` and `allocate_shared` put the window memory in the same
//! segment, so a target's memory is `base + rank × stride` — O(1) metadata per process when
//! sizes are symmetric ([Gerstenberger13] §2.2).

#[cfg(feature = "ofi")]
pub(crate) mod across;
mod assemble;
mod attr;
mod buffer;
pub(crate) mod control;
pub(crate) mod control_plane;
pub(crate) mod core;
mod create;
mod dup;
pub(crate) mod dynamic;
pub mod info;
#[cfg(feature = "ofi")]
pub(crate) mod netplane;
pub(crate) mod notify_counters;
pub(crate) mod raw;
pub(crate) mod regions;
pub(crate) mod resolve;

pub use attr::{Flavor, MemoryModel, WindowLayout};
pub use buffer::WinBuffer;
pub use dup::WindowDup;
pub use raw::RawWindow;

use std::marker::PhantomData;

use bytemuck::Pod;

use crate::bootstrap::Comm;
use crate::error::{Error, Result};
use crate::transport::Route;
use crate::win::core::{Targets, WinCore};
use crate::win::resolve::checked_offset;
use info::WinInfo;

/// A window of elements of type `T` (MPI_Win).
///
/// Displacements in RMA calls are in units of the *target's* displacement unit, which is
/// `size_of::<T>()` unless set with [`WindowBuilder::disp_unit`] — so with the defaults a
/// displacement is an element index.
///
/// **Threads** (`MPI_THREAD_MULTIPLE`). A window is `Send + Sync`: threads may share it
/// (`&Window`, or an `Arc`) and call anything on it at once. Its epochs belong to the
/// process, as in MPI: a `lock` by one thread opens the epoch for all, and locking a target
/// this process already holds is [`Error::AlreadyLocked`] whichever thread holds it.
/// Synchronization calls start one at a time per window (briefly serialized, never while
/// they wait); RMA calls run concurrently. Ordering synchronizations *between* threads —
/// an `unlock` only after the other threads' operations of that epoch were issued, one
/// `fence` per process — is the application's part, as in MPI.
///
/// ```no_run
/// use onesided::{Assert, Op, Window};
/// let world = onesided::init()?.world().clone();
/// let counter = Window::<u64>::allocate(&world, 1)?;
/// counter.lock_all(Assert::NONE)?;
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| counter.fetch_and_op(1, 0, 0, Op::Sum).map(drop));
///     }
/// });
/// counter.unlock_all()?;
/// # Ok::<(), onesided::Error>(())
/// ```
///
/// ```no_run
/// use onesided::{Assert, Window};
/// let universe = onesided::init()?;
/// let world = universe.world();
/// let win = Window::<f64>::allocate(world, 100)?;
/// win.fence(Assert::NOPRECEDE)?;
/// let right = (world.rank() + 1) % world.size();
/// win.put(&[1.0, 2.0], right, 10)?;
/// win.fence(Assert::NOSUCCEED)?;
/// let mut got = [0.0; 2];
/// win.local_read(10, &mut got)?;
/// assert_eq!(got, [1.0, 2.0]);
/// win.free()?;
/// # Ok::<(), onesided::Error>(())
/// ```
#[derive(Debug)]
#[repr(transparent)]
pub struct Window<T: Pod> {
    /// The window itself; this handle adds the element type.
    pub(crate) raw: RawWindow,
    _elem: PhantomData<T>,
}

/// Options for creating a window: info keys and displacement unit.
///
/// ```no_run
/// use onesided::{Window, WinInfo};
/// # let world = onesided::init()?.world().clone();
/// let win = Window::<u8>::builder(&world)
///     .info(&WinInfo::new().same_size(true).no_locks(true))
///     .disp_unit(1)
///     .allocate(4096)?;
/// # Ok::<(), onesided::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct WindowBuilder<'c, T: Pod> {
    comm: &'c Comm,
    info: WinInfo,
    disp_unit: Option<usize>,
    _elem: PhantomData<T>,
}

fn default_disp_unit<T>() -> usize {
    std::mem::size_of::<T>().max(1)
}

impl<'c, T: Pod> WindowBuilder<'c, T> {
    /// Info keys for the window (see [`WinInfo`]).
    pub fn info(mut self, info: &WinInfo) -> Self {
        self.info = info.clone();
        self
    }

    /// Displacement unit of this process's memory, in bytes (default `size_of::<T>()`).
    pub fn disp_unit(mut self, bytes: usize) -> Self {
        self.disp_unit = Some(bytes);
        self
    }

    fn unit(&self) -> usize {
        self.disp_unit.unwrap_or_else(default_disp_unit::<T>)
    }

    /// Allocates `len` elements at this process and creates a window over them
    /// (MPI_Win_allocate). Collective.
    pub fn allocate(self, len: usize) -> Result<Window<T>> {
        let bytes = elem_bytes::<T>(len)?;
        let core = create::allocate(self.comm, bytes, self.unit(), &self.info, false)?;
        Ok(Window::from_core(core, None))
    }

    /// Like [`WindowBuilder::allocate`], but every rank may load and store every other
    /// rank's memory directly (MPI_Win_allocate_shared); see [`Window::shared_query`].
    /// Memory is contiguous across ranks unless info `alloc_shared_noncontig=true`.
    pub fn allocate_shared(self, len: usize) -> Result<Window<T>> {
        let bytes = elem_bytes::<T>(len)?;
        let core = create::allocate(self.comm, bytes, self.unit(), &self.info, true)?;
        Ok(Window::from_core(core, None))
    }

    /// Creates a window over memory the caller provides (MPI_Win_create). Collective.
    ///
    /// Memory from [`crate::alloc_mem`] is reached by peers with load/store; other memory
    /// (a `Vec`) with cross-memory attach. [`Window::free`] gives the memory back.
    pub fn create(self, buffer: impl Into<WinBuffer<T>>) -> Result<Window<T>> {
        let mut buffer = buffer.into();
        let (base, bytes) = buffer.raw_bytes();
        let core = create::create(self.comm, base, bytes, self.unit(), &self.info, false);
        match core {
            Ok(core) => Ok(Window::from_core(core, Some(raw::Kept::new(buffer)))),
            Err(e) => Err(e),
        }
    }

    /// Creates a window without memory; memory is attached later with [`Window::attach`]
    /// (MPI_Win_create_dynamic). Collective. Displacements are target addresses
    /// (disp_unit 1).
    pub fn create_dynamic(self) -> Result<Window<T>> {
        let core = create::create_dynamic(self.comm, &self.info)?;
        Ok(Window::from_core(core, None))
    }
}

fn elem_bytes<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::InvalidArgument(format!("window of {len} elements is too large")))
}

impl<T: Pod> Window<T> {
    fn from_core(core: WinCore, kept: Option<raw::Kept>) -> Self {
        let mut raw = RawWindow::from_core(core, kept);
        raw.typed = true;
        Window {
            raw,
            _elem: PhantomData,
        }
    }

    /// A typed handle over `raw`.
    pub(crate) fn from_raw(raw: RawWindow) -> Self {
        Window {
            raw,
            _elem: PhantomData,
        }
    }

    /// Options for creating a window over `comm`.
    pub fn builder(comm: &Comm) -> WindowBuilder<'_, T> {
        WindowBuilder {
            comm,
            info: WinInfo::new(),
            disp_unit: None,
            _elem: PhantomData,
        }
    }

    /// [`WindowBuilder::allocate`] with default info and displacement unit.
    pub fn allocate(comm: &Comm, len: usize) -> Result<Self> {
        Self::builder(comm).allocate(len)
    }

    /// [`WindowBuilder::allocate_shared`] with default info and displacement unit.
    pub fn allocate_shared(comm: &Comm, len: usize) -> Result<Self> {
        Self::builder(comm).allocate_shared(len)
    }

    /// [`WindowBuilder::create`] with default info and displacement unit.
    pub fn create(comm: &Comm, buffer: impl Into<WinBuffer<T>>) -> Result<Self> {
        Self::builder(comm).create(buffer)
    }

    /// [`WindowBuilder::create_dynamic`] with default info.
    pub fn create_dynamic(comm: &Comm) -> Result<Self> {
        Self::builder(comm).create_dynamic()
    }

    /// MPI_WIN_BASE: start of this process's window memory (null for dynamic windows).
    pub fn base(&self) -> *mut T {
        self.core.local.base.cast()
    }

    /// Number of elements of this process's window memory.
    pub fn len(&self) -> usize {
        self.core.local.bytes / std::mem::size_of::<T>().max(1)
    }

    /// True when this process exposes no memory.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Byte offset of `disp` (in this process's disp_unit) for `len` bytes of local memory.
    fn local_route(&self, op: &'static str, disp: usize, len: usize) -> Result<Route> {
        let l = &self.core.local;
        if self.core.flavor == Flavor::Dynamic {
            return Ok(self.core.resolve_own_dynamic(op, disp, len)?.route);
        }
        let off = checked_offset(op, self.core.rank, disp, l.disp_unit, len, l.bytes)?;
        Ok(Route::Direct(l.base.wrapping_add(off)))
    }

    /// Copies local window memory at `disp` (in this process's disp_unit; an address for
    /// dynamic windows) into `dst`.
    ///
    /// Safe at any time: if RMA to the same bytes is in flight (which MPI calls erroneous
    /// without synchronization) the values read are unspecified, never undefined behaviour.
    pub fn local_read(&self, disp: usize, dst: &mut [T]) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        self.local_route("local_read", disp, bytes.len())?
            .read(bytes)
    }

    /// Copies `src` into local window memory at `disp` (see [`Window::local_read`]).
    pub fn local_write(&self, disp: usize, src: &[T]) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(src);
        self.local_route("local_write", disp, bytes.len())?
            .write(bytes)
    }

    /// This process's window memory as a slice.
    ///
    /// # Safety
    /// No RMA operation may write this memory while the slice lives (for example: only
    /// between two fences with no put to this process, or inside an exclusive lock of this
    /// process's own rank), and no `local_write` may happen meanwhile.
    pub unsafe fn local_slice(&self) -> &[T] {
        let l = &self.core.local;
        if l.bytes == 0 {
            return &[];
        }
        // SAFETY: base/len describe this process's live window memory (Pod elements);
        // the caller guarantees nobody writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(l.base.cast(), self.len()) }
    }

    /// This process's window memory as a mutable slice.
    ///
    /// # Safety
    /// No RMA operation may read or write this memory while the slice lives, and no other
    /// slice from [`Window::local_slice`] / `local_slice_mut` may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn local_slice_mut(&self) -> &mut [T] {
        let l = &self.core.local;
        if l.bytes == 0 {
            return &mut [];
        }
        // SAFETY: as in local_slice; the caller guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(l.base.cast(), self.len()) }
    }

    /// Direct access to `rank`'s window memory (MPI_Win_shared_query).
    ///
    /// Defined for `allocate_shared` and `allocate` windows (all on one node here) and for
    /// `create` windows whose target memory came from [`crate::alloc_mem`]; `None` when the
    /// memory is not directly accessible. Errors for an invalid rank.
    pub fn shared_query(&self, rank: usize) -> Result<Option<SharedRegion<T>>> {
        Ok(self.raw.shared_query(rank)?.map(|r| SharedRegion {
            ptr: r.ptr.cast(),
            bytes: r.bytes,
            disp_unit: r.disp_unit,
            _elem: PhantomData,
        }))
    }

    /// Frees the window (MPI_Win_free). Collective. Returns the memory the user gave it
    /// (`create`: the buffer; `dynamic`: regions still attached).
    ///
    /// Every process must have closed its epochs; otherwise every process gets an error and
    /// the window is dropped without being freed: dropping a window without a successful
    /// free cannot synchronise with the other processes, so user memory they might still
    /// access is leaked instead of freed (and, across nodes, the window's registrations
    /// with the network).
    pub fn free(self) -> Result<Vec<WinBuffer<T>>> {
        Ok(self
            .raw
            .free_kept()?
            .into_iter()
            .map(raw::Kept::take)
            .collect())
    }
}

impl<T: Pod> std::ops::Deref for Window<T> {
    type Target = RawWindow;

    #[inline(always)]
    fn deref(&self) -> &RawWindow {
        &self.raw
    }
}

// Windows are shared by threads (see the type's docs).
const _: () = {
    const fn shared_by_threads<T: Send + Sync>() {}
    shared_by_threads::<Window<u64>>();
};

impl RawWindow {
    /// Direct access to `rank`'s window memory (MPI_Win_shared_query).
    ///
    /// Defined for `allocate_shared` and `allocate` windows (all on one node here) and for
    /// `create` windows whose target memory came from [`crate::alloc_mem`]; `None` when the
    /// memory is not directly accessible. Errors for an invalid rank.
    pub fn shared_query(&self, rank: usize) -> Result<Option<SharedRegion<u8>>> {
        self.core.check_rank(rank)?;
        let (route, bytes, disp_unit) = match &self.core.targets {
            Targets::Symmetric {
                base,
                stride,
                bytes,
                disp_unit,
            } => (
                Route::Direct(base.wrapping_add(rank * stride)),
                *bytes,
                *disp_unit,
            ),
            Targets::Table(t) => {
                let r = t[rank];
                let route = match r.lazy {
                    Some(i) => Route::Direct(self.core.peer_mappings[i as usize].map(r.bytes)?),
                    None => r.route,
                };
                (route, r.bytes, r.disp_unit)
            }
            Targets::Dynamic => return Ok(None),
        };
        match route {
            Route::Direct(ptr) => Ok(Some(SharedRegion {
                ptr: ptr.cast(),
                bytes,
                disp_unit,
                _elem: PhantomData,
            })),
            Route::Cma { .. } => Ok(None),
            #[cfg(feature = "ofi")]
            Route::Net { .. } => Ok(None),
        }
    }
}

/// A rank's window memory mapped in this process ([`Window::shared_query`]).
#[derive(Debug, Clone, Copy)]
pub struct SharedRegion<T> {
    ptr: *mut T,
    bytes: usize,
    disp_unit: usize,
    _elem: PhantomData<T>,
}

impl<T: Pod> SharedRegion<T> {
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
