//! The typed window: [`Window<T>`] and the handles made from it ([`WindowDup`],
//! [`MemWindow`]), the API a Rust program uses.
//!
//! Everything here is a thin wrapper over the untyped layer ([`RawWindow`],
//! [`RawMemWindow`]) that the MPI C binding uses too: a typed call checks nothing and
//! decides nothing of its own — it turns its elements into bytes (or names their type to a
//! generic raw call, so that accumulates and atomics keep their per-type fast paths) and
//! hands over. The protocols live in the raw layer, one concept per module
//! (`rma::accumulate`, `rma::request`, `sync::*`, ...); synchronization, info and
//! attribute calls take no element type and are the raw window's, reached through
//! [`Deref`](std::ops::Deref). What a typed handle adds is ownership: memory given to
//! `create`, `attach` or `memhandle_create` is kept by the window and given back typed by
//! `free`, `detach` and `memhandle_release`, and duplicates and memory-handle windows
//! borrow the window they came from.

use std::marker::PhantomData;

use bytemuck::Pod;

use crate::bootstrap::Comm;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::{AccElement, Op};
use crate::request::Request;
use crate::rma::memhandle::{MemHandle, RawMemWindow};
use crate::win::dynamic::AttachedRegion;
use crate::win::info::WinInfo;
use crate::win::raw::Kept;
use crate::win::{RawWindow, SharedRegion, WinBuffer};

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
/// ```
/// # onesided::testing::run(2, |_| {
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
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
///
/// ```
/// # onesided::testing::run(2, |_| {
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
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
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
/// ```
/// # onesided::testing::run(2, |_| {
/// use onesided::{Window, WinInfo};
/// # let world = onesided::init()?.world().clone();
/// let win = Window::<u8>::builder(&world)
///     .info(&WinInfo::new().same_size(true).no_locks(true))
///     .disp_unit(1)
///     .allocate(4096)?;
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
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
        RawWindow::allocate(self.comm, bytes, self.unit(), &self.info).map(Window::over)
    }

    /// Like [`WindowBuilder::allocate`], but every rank may load and store every other
    /// rank's memory directly (MPI_Win_allocate_shared); see [`Window::shared_query`].
    /// Memory is contiguous across ranks unless info `alloc_shared_noncontig=true`.
    pub fn allocate_shared(self, len: usize) -> Result<Window<T>> {
        let bytes = elem_bytes::<T>(len)?;
        RawWindow::allocate_shared(self.comm, bytes, self.unit(), &self.info).map(Window::over)
    }

    /// Creates a window over memory the caller provides (MPI_Win_create). Collective.
    ///
    /// Memory from [`crate::alloc_mem`] is reached by peers with load/store; other memory
    /// (a `Vec`) with cross-memory attach. [`Window::free`] gives the memory back.
    pub fn create(self, buffer: impl Into<WinBuffer<T>>) -> Result<Window<T>> {
        let mut buffer = buffer.into();
        let (base, bytes) = buffer.raw_bytes();
        let kept = Kept::new(buffer);
        RawWindow::create_kept(self.comm, base, bytes, self.unit(), &self.info, kept)
            .map(Window::over)
    }

    /// Creates a window without memory; memory is attached later with [`Window::attach`]
    /// (MPI_Win_create_dynamic). Collective. Displacements are target addresses
    /// (disp_unit 1).
    pub fn create_dynamic(self) -> Result<Window<T>> {
        RawWindow::create_dynamic(self.comm, &self.info).map(Window::over)
    }
}

fn elem_bytes<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::InvalidArgument(format!("window of {len} elements is too large")))
}

impl<T: Pod> Window<T> {
    /// The typed handle over `raw`, which from now on may keep memory for it (so its
    /// duplicates borrow this handle: [`Window::dup_with_info`]).
    fn over(mut raw: RawWindow) -> Self {
        raw.typed = true;
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
        self.raw.base_bytes().cast()
    }

    /// Number of elements of this process's window memory.
    pub fn len(&self) -> usize {
        self.raw.size_bytes() / std::mem::size_of::<T>().max(1)
    }

    /// True when this process exposes no memory.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Copies local window memory at `disp` (in this process's disp_unit; an address for
    /// dynamic windows) into `dst`.
    ///
    /// Safe at any time: if RMA to the same bytes is in flight (which MPI calls erroneous
    /// without synchronization) the values read are unspecified, never undefined behaviour.
    pub fn local_read(&self, disp: usize, dst: &mut [T]) -> Result<()> {
        self.raw.local_read(disp, bytemuck::cast_slice_mut(dst))
    }

    /// Copies `src` into local window memory at `disp` (see [`Window::local_read`]).
    pub fn local_write(&self, disp: usize, src: &[T]) -> Result<()> {
        self.raw.local_write(disp, bytemuck::cast_slice(src))
    }

    /// This process's window memory as a slice.
    ///
    /// # Safety
    /// No RMA operation may write this memory while the slice lives (for example: only
    /// between two fences with no put to this process, or inside an exclusive lock of this
    /// process's own rank), and no `local_write` may happen meanwhile.
    pub unsafe fn local_slice(&self) -> &[T] {
        // SAFETY: the caller's promise (nobody writes meanwhile); a typed window's memory
        // is aligned for T.
        unsafe { self.raw.local_elems() }
    }

    /// This process's window memory as a mutable slice.
    ///
    /// # Safety
    /// No RMA operation may read or write this memory while the slice lives, and no other
    /// slice from [`Window::local_slice`] / `local_slice_mut` may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn local_slice_mut(&self) -> &mut [T] {
        // SAFETY: the caller's promise (exclusive access); aligned as in local_slice.
        unsafe { self.raw.local_elems() }
    }

    /// Direct access to `rank`'s window memory (MPI_Win_shared_query).
    ///
    /// Defined for `allocate_shared` and `allocate` windows (all on one node here) and for
    /// `create` windows whose target memory came from [`crate::alloc_mem`]; `None` when the
    /// memory is not directly accessible. Errors for an invalid rank.
    pub fn shared_query(&self, rank: usize) -> Result<Option<SharedRegion<T>>> {
        Ok(self.raw.shared_query(rank)?.map(SharedRegion::retyped))
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
        Ok(self.raw.free_kept()?.into_iter().map(Kept::take).collect())
    }
}

/// Communication: put and get.
impl<T: Pod> Window<T> {
    /// Writes `src` into `target`'s window at displacement `disp` (MPI_Put).
    ///
    /// `disp` is in units of the target's displacement unit (for dynamic windows: an address
    /// in the target). `src` may be reused when `put` returns; the data is visible at the
    /// target after the epoch's next completing synchronization.
    ///
    /// Errors: `target` out of range; no access epoch includes `target`; the range does not
    /// fit the target's window (or, for dynamic windows, is not attached).
    #[inline(always)]
    pub fn put(&self, src: &[T], target: usize, disp: usize) -> Result<()> {
        self.raw.put(bytemuck::cast_slice(src), target, disp)
    }

    /// [`Window::put`] from a buffer the window shares until the put completes: to a rank
    /// on another node the data goes out from `src` itself, neither copied nor waited for,
    /// and the window holds a clone of `src` until the epoch's next completing
    /// synchronization (MPI_Put's own contract — the origin buffer is the library's until
    /// then — kept by ownership: nobody can change `src` while a clone is held). A long put
    /// then costs what the network takes, pipelined with the next ones, where [`Window::put`]
    /// copies what it sends (up to 64 KiB) or waits for it. Other routes put as `put` does.
    /// Errors as for `put`.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use std::sync::Arc;
    /// # use onesided::{Assert, LockType, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u8>::allocate(&world, 1 << 20)?;
    /// let block: Arc<[u8]> = vec![7u8; 1 << 20].into();
    /// win.lock(LockType::Shared, 1, Assert::NONE)?;
    /// for _ in 0..64 {
    ///     win.put_shared(&block, 1, 0)?; // all 64 in flight
    /// }
    /// win.unlock(1)?; // complete at rank 1; the window's clones are gone
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn put_shared(&self, src: &std::sync::Arc<[T]>, target: usize, disp: usize) -> Result<()>
    where
        T: Send + Sync,
    {
        self.raw.put_shared_elems(src, target, disp)
    }

    /// Reads `dst.len()` elements from `target`'s window at displacement `disp` into `dst`
    /// (MPI_Get). The data is in `dst` when `get` returns. Errors as for [`Window::put`].
    #[inline(always)]
    pub fn get(&self, dst: &mut [T], target: usize, disp: usize) -> Result<()> {
        self.raw.get(bytemuck::cast_slice_mut(dst), target, disp)
    }

    /// [`Window::put`] with derived layouts (MPI_Put with derived datatypes): the bytes of
    /// `origin` selected by `origin_layout` go, in order, to the bytes selected by
    /// `target_layout` at `disp` of `target`, as the fewest contiguous copies (one vectored
    /// system call per 1024 pieces for cross-memory attach).
    ///
    /// Errors: the layouts select different amounts of data; `origin_layout` reaches past
    /// `origin`; and those of [`Window::put`] for the target extent.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Layout, Window};
    /// # let world = onesided::init()?.world().clone();
    /// // Send column 0 of a 4x4 row-major matrix into row 0 of rank 1's matrix.
    /// let m = Window::<f64>::allocate(&world, 16)?;
    /// let local = [1.0; 16];
    /// m.fence(Assert::NONE)?;
    /// m.put_layout(&local, &Layout::vector(4, 1, 4)?, 1, 0, &Layout::contiguous(4)?)?;
    /// m.fence(Assert::NONE)?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn put_layout(
        &self,
        origin: &[T],
        origin_layout: &Layout<T>,
        target: usize,
        disp: usize,
        target_layout: &Layout<T>,
    ) -> Result<()> {
        self.raw
            .put_layout_elems(origin, origin_layout, target, disp, target_layout)
    }

    /// [`Window::get`] with derived layouts: the bytes selected by `target_layout` at
    /// `disp` of `target` land, in order, in the bytes of `origin` selected by
    /// `origin_layout`. Errors as for [`Window::put_layout`].
    pub fn get_layout(
        &self,
        origin: &mut [T],
        origin_layout: &Layout<T>,
        target: usize,
        disp: usize,
        target_layout: &Layout<T>,
    ) -> Result<()> {
        self.raw
            .get_layout_elems(origin, origin_layout, target, disp, target_layout)
    }
}

/// Communication: accumulates and atomics.
impl<T: AccElement> Window<T> {
    /// Whether the operations listed in `ops` on up to `max_count` elements of `T` are done
    /// by the origin's CPU atomics alone, with no system call and no help from the target
    /// (MPI_Win_op_intrinsic, seed 000 §2.3). `ops` is the paper's comma-separated list of
    /// operation names: the second half of the predefined `MPI_Op` names (`sum`, `max`,
    /// `band`, ...), `replace`, `no_op`, and `cas` for compare-and-swap.
    ///
    /// True on windows whose memory every process maps (`allocate`, `allocate_shared`,
    /// `create` over [`crate::alloc_mem`] memory everywhere) unless
    /// `mpi_accumulate_granularity` asks for coarser granules than `T`; false where some
    /// target's memory is reached by cross-memory attach, and for dynamic windows (their
    /// regions can be of either kind; accumulates on them are checked per call when the
    /// window asserts `mpi_assert_accumulate_intrinsic`). `max_count` does not change the
    /// answer: onesided applies CPU atomics element by element at any count. Elements must
    /// be aligned, as they are with the default displacement unit.
    ///
    /// Errors: an unknown operation name, or one not defined for `T` (`band` on `f64`).
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Window, WinInfo};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u64>::allocate(&world, 8)?;
    /// if win.op_intrinsic("sum,cas", 1)? {
    ///     // Promise it, e.g. on a duplicate used by the latency-critical part.
    ///     let fast = win.dup_with_info(&WinInfo::new().accumulate_intrinsic(true))?;
    ///     # drop(fast);
    /// }
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn op_intrinsic(&self, ops: &str, max_count: usize) -> Result<bool> {
        self.raw.op_intrinsic(ops, T::TYPE, max_count)
    }

    /// Combines `origin` element-wise into `target`'s window at `disp` with `op`
    /// (MPI_Accumulate). Element-wise atomic with every other accumulate-type operation of
    /// type `T` on the same elements.
    ///
    /// Errors: `op` not defined for `T` (bitwise/logical ops on floats) or `NoOp`, and the
    /// errors of [`Window::put`].
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Op, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let hist = Window::<u64>::allocate(&world, 16)?;
    /// hist.lock_all(Assert::NONE)?;
    /// hist.accumulate(&[1, 0, 2], 0, 5, Op::Sum)?; // bins 5, 6, 7 of rank 0
    /// hist.unlock_all()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    #[inline(always)]
    pub fn accumulate(&self, origin: &[T], target: usize, disp: usize, op: Op) -> Result<()> {
        self.raw.accumulate_elems(origin, target, disp, op)
    }

    /// Like [`Window::accumulate`], and returns the previous target values in `result`
    /// (MPI_Get_accumulate). `op` may be [`Op::NoOp`] (atomic read). `origin` and `result`
    /// have the same length.
    pub fn get_accumulate(
        &self,
        origin: &[T],
        result: &mut [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<()> {
        self.raw
            .get_accumulate_elems(origin, result, target, disp, op)
    }

    /// Single-element [`Window::get_accumulate`] (MPI_Fetch_and_op): applies `op` with
    /// `value` to the element at `disp` of `target` and returns its previous value. On a
    /// symmetric window an 8-byte `Op::Sum` is one `lock xadd`.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Op, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let counter = Window::<u64>::allocate(&world, 1)?;
    /// counter.lock_all(Assert::NONE)?;
    /// let ticket = counter.fetch_and_op(1, 0, 0, Op::Sum)?; // unique across all ranks
    /// counter.unlock_all()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    #[inline(always)]
    pub fn fetch_and_op(&self, value: T, target: usize, disp: usize, op: Op) -> Result<T> {
        self.raw.fetch_and_op_elems(value, target, disp, op)
    }

    /// Atomically replaces the element at `disp` of `target` with `value` if it equals
    /// `compare` (bitwise), and returns its previous value (MPI_Compare_and_swap). Integer
    /// types only, as in MPI.
    #[inline(always)]
    pub fn compare_and_swap(&self, value: T, compare: T, target: usize, disp: usize) -> Result<T> {
        self.raw
            .compare_and_swap_elems(value, compare, target, disp)
    }

    /// [`Window::accumulate`] with derived layouts: the elements of `origin` selected by
    /// `origin_layout` are combined, in order, into the elements selected by
    /// `target_layout` at `disp` of `target`. Both layouts must select the same number of
    /// elements, in whole elements.
    pub fn accumulate_layout(
        &self,
        origin: &[T],
        origin_layout: &Layout<T>,
        target: usize,
        disp: usize,
        target_layout: &Layout<T>,
        op: Op,
    ) -> Result<()> {
        self.raw
            .accumulate_layout_elems(origin, origin_layout, target, disp, target_layout, op)
    }

    /// [`Window::get_accumulate`] with derived layouts for origin, result and target; all
    /// three select the same number of elements.
    #[allow(clippy::too_many_arguments)]
    pub fn get_accumulate_layout(
        &self,
        origin: &[T],
        origin_layout: &Layout<T>,
        result: &mut [T],
        result_layout: &Layout<T>,
        target: usize,
        disp: usize,
        target_layout: &Layout<T>,
        op: Op,
    ) -> Result<()> {
        self.raw.get_accumulate_layout_elems(
            origin,
            origin_layout,
            result,
            result_layout,
            target,
            disp,
            target_layout,
            op,
        )
    }
}

/// Request-based communication.
impl<T: Pod> Window<T> {
    /// Request-based [`Window::put`] (MPI_Rput): `origin` stays borrowed until the request
    /// completes. Only inside a passive-target epoch that includes `target`.
    pub fn rput<'a>(&'a self, origin: &'a [T], target: usize, disp: usize) -> Result<Request<'a>> {
        self.raw.rput_elems(origin, target, disp)
    }

    /// Request-based [`Window::get`] (MPI_Rget): `origin` is filled, and may be read, once
    /// the request completes.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<u64>::allocate(&world, 4)?;
    /// win.lock_all(Assert::NONE)?;
    /// let mut buf = [0u64; 4];
    /// let req = win.rget(&mut buf, 1, 0)?;
    /// req.wait()?;
    /// println!("{buf:?}");
    /// win.unlock_all()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn rget<'a>(
        &'a self,
        origin: &'a mut [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'a>> {
        self.raw.rget_elems(origin, target, disp)
    }

    /// Remote-completing put (`MPI_Rrput`, seed 000 §5.2): the request completes when
    /// `origin` is in `target`'s memory — visible to any process that synchronizes with
    /// this one afterwards — not just when `origin` may be reused. A signal that follows
    /// completion (an accumulate, a message) needs no flush in between. Only inside a
    /// passive-target epoch that includes `target`.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Op, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<u64>::allocate(&world, 8)?;
    /// win.lock_all(Assert::NONE)?;
    /// let data = [7u64; 4];
    /// let req = win.rrput(&data, 1, 0)?;
    /// // ... useful work ...
    /// req.wait()?; // the data is at rank 1
    /// win.accumulate(&[1], 1, 4, Op::Sum)?; // the flag: no flush needed
    /// win.unlock_all()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn rrput<'a>(&'a self, origin: &'a [T], target: usize, disp: usize) -> Result<Request<'a>> {
        self.raw.rrput_elems(origin, target, disp)
    }
}

/// Request-based accumulates.
impl<T: AccElement> Window<T> {
    /// Remote-completing accumulate (`MPI_Rraccumulate`, seed 000 §5.2): the request
    /// completes when the update is done in `target`'s memory. Errors as
    /// [`Window::accumulate`]; only inside a passive-target epoch.
    pub fn rraccumulate<'a>(
        &'a self,
        origin: &'a [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        self.raw.rraccumulate_elems(origin, target, disp, op)
    }

    /// Remote-completing get_accumulate (`MPI_Rrget_accumulate`, seed 000 §5.2): the
    /// request completes when the update is done at the target and `result` holds the
    /// previous values. Errors as [`Window::get_accumulate`].
    pub fn rrget_accumulate<'a>(
        &'a self,
        origin: &'a [T],
        result: &'a mut [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        self.raw
            .rrget_accumulate_elems(origin, result, target, disp, op)
    }

    /// Request-based [`Window::accumulate`] (MPI_Raccumulate).
    pub fn raccumulate<'a>(
        &'a self,
        origin: &'a [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        self.raw.raccumulate_elems(origin, target, disp, op)
    }

    /// Request-based [`Window::get_accumulate`] (MPI_Rget_accumulate): `result` may be read
    /// once the request completes.
    pub fn rget_accumulate<'a>(
        &'a self,
        origin: &'a [T],
        result: &'a mut [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        self.raw
            .rget_accumulate_elems(origin, result, target, disp, op)
    }
}

/// Notified communication (seed 000 §5.3).
impl<T: Pod> Window<T> {
    /// [`Window::put`], then counter `idx` of `target` counts it (MPI_Put_notify): when the
    /// target sees the count, the bytes are in its memory. Errors: those of `put`, and
    /// [`Error::InvalidNotification`] when the target has no counter `idx`.
    pub fn put_notify(&self, src: &[T], target: usize, disp: usize, idx: usize) -> Result<()> {
        self.raw
            .put_notify(bytemuck::cast_slice(src), target, disp, idx)
    }

    /// [`Window::get`], then counter `idx` of `target` counts it (MPI_Get_notify): when the
    /// target sees the count, the origin has read the bytes. Errors as for
    /// [`Window::put_notify`].
    pub fn get_notify(&self, dst: &mut [T], target: usize, disp: usize, idx: usize) -> Result<()> {
        self.raw
            .get_notify(bytemuck::cast_slice_mut(dst), target, disp, idx)
    }
}

/// Notified accumulates.
impl<T: AccElement> Window<T> {
    /// [`Window::accumulate`], then counter `idx` of `target` counts it
    /// (MPI_Accumulate_notify): when the target sees the count, the update is done. Errors:
    /// those of `accumulate`, and [`Error::InvalidNotification`].
    pub fn accumulate_notify(
        &self,
        origin: &[T],
        target: usize,
        disp: usize,
        op: Op,
        idx: usize,
    ) -> Result<()> {
        self.raw
            .accumulate_notify_elems(origin, target, disp, op, idx)
    }
}

/// Dynamic windows: memory the typed handle gives the window to keep.
impl<T: Pod> Window<T> {
    /// Attaches memory to a dynamic window (MPI_Win_attach); the window owns it until
    /// [`Window::detach`]. Not collective. Peers address it by the returned
    /// [`AttachedRegion::addr`] (plus a byte offset).
    ///
    /// Errors: not a dynamic window; zero bytes; overlaps an attached region; the region
    /// table (info `onesided_max_attached_regions`) is full.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u64>::create_dynamic(&world)?;
    /// let region = win.attach(onesided::alloc_mem::<u64>(16)?)?;
    /// let addrs = world.allgather(&[region.addr as u64])?; // tell the peers
    /// win.lock_all(Assert::NONE)?;
    /// win.put(&[1, 2], 1, addrs[1] as usize + 8)?; // elements 1 and 2 of rank 1's region
    /// win.unlock_all()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn attach(&self, buffer: impl Into<WinBuffer<T>>) -> Result<AttachedRegion> {
        let mut buffer = buffer.into();
        let (base, bytes) = buffer.raw_bytes();
        let len = buffer.len();
        self.raw.attach_kept(base, bytes, Kept::new(buffer))?;
        Ok(AttachedRegion {
            addr: base as usize,
            len,
        })
    }

    /// Detaches the region attached at `addr` and gives its memory back (MPI_Win_detach).
    /// Errors: not a dynamic window; nothing is attached at `addr`.
    pub fn detach(&self, addr: usize) -> Result<WinBuffer<T>> {
        self.raw.detach_kept(addr).map(Kept::take)
    }

    /// Regions this process has attached, by address.
    pub fn attached_regions(&self) -> Vec<AttachedRegion> {
        self.raw
            .attached_bytes()
            .into_iter()
            .map(|(addr, bytes)| AttachedRegion {
                addr,
                len: bytes / std::mem::size_of::<T>().max(1),
            })
            .collect()
    }

    /// Registers `memory` with this dynamic window and returns a handle to it
    /// (`MPIX_Memhandle_create`). Local. The window keeps the memory until
    /// [`Window::memhandle_release`]; the region also counts as attached (peers may reach
    /// it through this window at its address too).
    ///
    /// Errors: not a dynamic window; as [`Window::attach`].
    pub fn memhandle_create(&self, memory: impl Into<WinBuffer<T>>) -> Result<MemHandle> {
        let mut memory = memory.into();
        let (base, bytes) = memory.raw_bytes();
        let elem = std::mem::size_of::<T>();
        self.raw
            .memhandle_create_kept(base, bytes, elem, Kept::new(memory))
    }

    /// Ends the exposure of `handle`'s memory and gives it back
    /// (`MPIX_Memhandle_release`). Local; only the owner may release, once. Operations of
    /// peers must be complete (the application synchronizes, e.g. the peers signal that
    /// they are done); later operations through windows of the handle fail with
    /// [`Error::MemhandleReleased`].
    ///
    /// Errors: the handle is not this process's, not of this window, or released already.
    pub fn memhandle_release(&self, handle: &MemHandle) -> Result<WinBuffer<T>> {
        self.raw.memhandle_release_kept(handle).map(Kept::take)
    }

    /// A window of one target built from a handle sent by its owner
    /// (`MPIX_Win_from_memhandle`). Local; it borrows this (parent) window, whose
    /// passive-target epochs its operations run in, with this handle's info keys as they
    /// are now. Displacements are element indices in the handle's region.
    ///
    /// Errors: not a dynamic window; the handle is of another window or another element
    /// size; its owner released it already.
    pub fn window_from_memhandle(&self, handle: &MemHandle) -> Result<MemWindow<'_, T>> {
        let elem = std::mem::size_of::<T>();
        self.raw.require_dynamic("window_from_memhandle")?;
        if handle.elem() != elem {
            return Err(Error::InvalidArgument(format!(
                "window_from_memhandle: the handle is of {}-byte elements, the window of {elem}",
                handle.elem(),
            )));
        }
        let raw = self
            .raw
            .window_from_memhandle(handle, handle.size_bytes(), elem.max(1))?;
        Ok(MemWindow {
            raw,
            _parent: PhantomData,
        })
    }

    /// A second handle to this window with `info` applied on top of this handle's info
    /// (`MPIX_Win_dup_with_info`, seed 000 §3). Local.
    ///
    /// `mpi_win_scope`, `mpi_win_order` and `mpi_assert_accumulate_intrinsic` take the
    /// values in `info`; every other key keeps the window's value (they describe the shared
    /// epoch queue and memory; [`Window::set_info`](crate::RawWindow::set_info) changes them for all handles) — read
    /// what is in force with [`Window::get_info`](crate::RawWindow::get_info) on the duplicate. Errors: an invalid value
    /// of a known key.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
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
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn dup_with_info(&self, info: &WinInfo) -> Result<WindowDup<'_, T>> {
        let flags = self.raw.flags_with(info)?;
        Ok(WindowDup {
            handle: Window::over(self.raw.duplicate_with(flags)),
            _parent: PhantomData,
        })
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

/// A duplicate of a window with its own info (from [`Window::dup_with_info`]; see the
/// module `win::dup` for what duplicates share). It dereferences to a [`Window`]: every
/// call of the window is made through it, and it borrows the window it came from, so
/// every duplicate goes before the window's collective [`Window::free`].
#[derive(Debug)]
pub struct WindowDup<'w, T: Pod> {
    handle: Window<T>,
    _parent: PhantomData<&'w Window<T>>,
}

impl<T: Pod> std::ops::Deref for WindowDup<'_, T> {
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

/// A window of one target made from a [`MemHandle`] ([`Window::window_from_memhandle`]):
/// put, get, accumulate and flush to the handle's region, inside a passive-target epoch of
/// the parent window that includes the owner. Freed by dropping it (local).
///
/// ```
/// # onesided::testing::run(2, |_| {
/// # use onesided::{Assert, LockType, MemHandle, Op, Window};
/// # let world = onesided::init()?.world().clone();
/// let win = Window::<u64>::create_dynamic(&world)?;
/// let mine = win.memhandle_create(onesided::alloc_mem::<u64>(4)?)?;
/// // The right neighbour's handle, by any means of transport (here an allgather).
/// let (len, right) = (mine.as_bytes().len(), (world.rank() + 1) % world.size());
/// let handle = MemHandle::from_bytes(&world.allgather(mine.as_bytes())?[right * len..][..len])?;
/// let remote = win.window_from_memhandle(&handle)?;
/// win.lock(LockType::Shared, remote.target(), Assert::NONE)?;
/// remote.put(&[1, 2, 3], 0)?;
/// remote.accumulate(&[1], 3, Op::Sum)?;
/// remote.flush()?;
/// win.unlock(remote.target())?;
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
#[derive(Debug)]
pub struct MemWindow<'w, T: Pod> {
    raw: RawMemWindow,
    _parent: PhantomData<&'w Window<T>>,
}

impl<T: Pod> MemWindow<'_, T> {
    /// The one target: the handle's owner.
    pub fn target(&self) -> usize {
        self.raw.target()
    }

    /// Elements in the region.
    pub fn len(&self) -> usize {
        self.raw.size_bytes() / std::mem::size_of::<T>().max(1)
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.raw.size_bytes() == 0
    }

    /// Writes `src` at element `disp` of the region (MPI_Put).
    pub fn put(&self, src: &[T], disp: usize) -> Result<()> {
        self.raw.put(bytemuck::cast_slice(src), disp)
    }

    /// Reads `dst.len()` elements at `disp` (MPI_Get).
    pub fn get(&self, dst: &mut [T], disp: usize) -> Result<()> {
        self.raw.get(bytemuck::cast_slice_mut(dst), disp)
    }

    /// Completes this process's operations to the target, at origin and target
    /// (MPI_Win_flush through the parent).
    pub fn flush(&self) -> Result<()> {
        self.raw.flush()
    }

    /// Completes them at the origin (MPI_Win_flush_local).
    pub fn flush_local(&self) -> Result<()> {
        self.raw.flush_local()
    }
}

impl<T: AccElement> MemWindow<'_, T> {
    /// Combines `src` element-wise into the region at `disp` (MPI_Accumulate): atomic with
    /// the parent's accumulates on the same memory (same protocol per location).
    pub fn accumulate(&self, src: &[T], disp: usize, op: Op) -> Result<()> {
        self.raw.accumulate_elems(src, disp, op)
    }
}
