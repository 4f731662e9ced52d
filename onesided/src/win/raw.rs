//! The untyped window (`MPI_Win` as a C program sees it): bytes, a displacement unit
//! chosen at run time, and handles that own what they need. [`Window<T>`](crate::Window) is a typed view
//! of one ([`Deref`](std::ops::Deref) to [`RawWindow`]): every call that does not depend on
//! the element type — synchronization, info, attributes, notification counters — is made on
//! the raw window, whichever handle it is called through.
//!
//! A raw window keeps the memory its user handed over (a `create` window's buffer, a
//! dynamic window's attached regions) as [`Kept`] values: given back by a successful
//! [`Window::free`](crate::Window::free) or `detach`, leaked when the window is dropped without being freed
//! (peers may still reach that memory).

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

use bytemuck::Pod;

use crate::bootstrap::{Call, Comm};
use crate::error::{Error, Result};
use crate::win::attr::{Flavor, MemoryModel, WindowLayout};
use crate::win::buffer::WinBuffer;
use crate::win::core::{Flags, HandleFlags, SharedCore, Targets, WinCore};
use crate::win::info::{self, WinHints, WinInfo};

/// Memory a window keeps for its user until it gives it back.
pub(crate) trait KeptMemory: Any {
    /// Gives up the memory without freeing what peers may still reach.
    fn leak(self: Box<Self>);
    /// The memory as it was handed over (for the typed handle to take back).
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: Pod> KeptMemory for WinBuffer<T> {
    fn leak(self: Box<Self>) {
        WinBuffer::leak(*self);
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl KeptMemory for crate::memory::SharedInPlace {
    fn leak(self: Box<Self>) {
        // Peers may still reach the pages: they stay shared (the job's end removes the name).
        std::mem::forget(self);
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// One piece of kept memory.
pub(crate) struct Kept(Box<dyn KeptMemory>);

// SAFETY: the window never reads or writes kept memory through this box (peers and the
// window reach it through the addresses registered at creation or attach); the box is only
// moved, leaked, or handed back to the typed handle that put it there, whose own `Send`
// and `Sync` follow its element type (`Window<T>` holds a `PhantomData<T>`). The raw
// window's public calls never hand a `Kept` out.
unsafe impl Send for Kept {}
// SAFETY: as for Send: no access through a shared reference.
unsafe impl Sync for Kept {}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kept")
    }
}

impl Kept {
    pub(crate) fn new<T: Pod>(buffer: WinBuffer<T>) -> Kept {
        Kept(Box::new(buffer))
    }

    /// The buffer of element type `T` this was made from.
    pub(crate) fn take<T: Pod>(self) -> WinBuffer<T> {
        *self
            .0
            .into_any()
            .downcast::<WinBuffer<T>>()
            .expect("kept memory is taken back by the typed handle that gave it")
    }

    fn leak(self) {
        self.0.leak();
    }
}

/// A dynamic window's attached regions (shared by its handles): address, bytes, and the
/// memory kept for the user (none where the caller keeps it, as a C program does).
pub(crate) type Attached = Arc<Mutex<Vec<(usize, usize, Option<Kept>)>>>;

/// An untyped window (MPI_Win): the layer the typed [`Window<T>`](crate::Window) and the MPI C binding sit
/// on. Displacement units are given at creation in bytes; operations take bytes and
/// run-time element types.
///
/// ```
/// # onesided::testing::run(2, |_| {
/// use onesided::{Assert, Window};
/// # let world = onesided::init()?.world().clone();
/// let win = Window::<u64>::allocate(&world, 8)?;
/// let raw: &onesided::RawWindow = &win; // every typed window is a raw one
/// assert_eq!(raw.disp_unit(), 8);
/// raw.fence(Assert::NONE)?;
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
#[derive(Debug)]
pub struct RawWindow {
    pub(crate) core: SharedCore,
    /// `create`: the user's memory, when the window keeps it.
    pub(crate) kept: Option<Kept>,
    /// `dynamic`: attached memory by base address (shared with the window's duplicates).
    pub(crate) attached: Attached,
    /// The info keys of this handle (scope, order, intrinsic assert): see `core::Flags`.
    pub(crate) flags: HandleFlags,
    /// A handle from `dup_with_info`: it shares the core and owns nothing.
    pub(crate) duplicate: bool,
    pub(crate) freed: bool,
    /// Made by a typed [`Window`](crate::Window), which may hand it memory to keep: its
    /// duplicates must borrow it ([`Window::dup_with_info`](crate::Window::dup_with_info)),
    /// so that none outlives that memory.
    pub(crate) typed: bool,
}

// Windows are shared by threads (see `Window`'s docs).
const _: () = {
    const fn shared_by_threads<T: Send + Sync>() {}
    shared_by_threads::<RawWindow>();
};

impl RawWindow {
    /// Keeps this handle's puts to other nodes in the provider's order of RMA writes
    /// ([`Flags::keeps_rma_order`]): for the library's own signal windows.
    pub(crate) fn keep_rma_order(&self) {
        self.flags.set(self.flags.get().keeping_rma_order(true));
    }

    pub(crate) fn from_core(core: WinCore, kept: Option<Kept>) -> Self {
        crate::diag::event!(
            target: "onesided::window",
            window = ?crate::diag::Hex(core.window_id()),
            flavor = core.flavor.as_str(),
            bytes = core.local.bytes,
            rank = core.rank,
            size = core.size,
            "window created"
        );
        let flags = Flags::from_hints(&core.hints());
        RawWindow {
            core: SharedCore::new(core),
            kept,
            attached: Attached::default(),
            flags: HandleFlags::new(flags),
            duplicate: false,
            freed: false,
            typed: false,
        }
    }

    /// Allocates `bytes` at this process and creates a window over them with displacement
    /// unit `disp_unit` (MPI_Win_allocate). Collective.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// use onesided::{RawWindow, WinInfo};
    /// # let world = onesided::init()?.world().clone();
    /// let win = RawWindow::allocate(&world, 4096, 1, &WinInfo::new())?;
    /// assert_eq!(win.size_bytes(), 4096);
    /// win.free()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn allocate(comm: &Comm, bytes: usize, disp_unit: usize, info: &WinInfo) -> Result<Self> {
        let core = crate::win::create::allocate(comm, bytes, disp_unit, info, false)?;
        Ok(Self::from_core(core, None))
    }

    /// Like [`RawWindow::allocate`], with every rank's memory directly accessible to every
    /// other (MPI_Win_allocate_shared; see [`RawWindow::shared_query`]).
    pub fn allocate_shared(
        comm: &Comm,
        bytes: usize,
        disp_unit: usize,
        info: &WinInfo,
    ) -> Result<Self> {
        let core = crate::win::create::allocate(comm, bytes, disp_unit, info, true)?;
        Ok(Self::from_core(core, None))
    }

    /// Creates a window over `bytes` at `base`, memory the caller keeps (MPI_Win_create).
    /// Collective.
    ///
    /// # Safety
    /// `base..base + bytes` stays valid for reads and writes — by this process's calls and
    /// by the peers' RMA — and is not freed until the window is freed; a window dropped
    /// without a successful free leaves the memory reachable by the peers for the life of
    /// the process. With `onesided_share_in_place=true` in `info`
    /// ([`crate::info_keys::SHARE_IN_PLACE`]), no other thread of this process writes the
    /// pages holding that memory while the window is created and while it is freed.
    pub unsafe fn create(
        comm: &Comm,
        base: *mut u8,
        bytes: usize,
        disp_unit: usize,
        info: &WinInfo,
    ) -> Result<Self> {
        if base.is_null() && bytes > 0 {
            return Err(Error::InvalidArgument(format!(
                "create: a null base for {bytes} bytes"
            )));
        }
        let core = crate::win::create::create(comm, base, bytes, disp_unit, info, true)?;
        Ok(Self::from_core(core, None))
    }

    /// [`RawWindow::create`] over memory the window keeps for a typed handle (`kept`, given
    /// back by [`RawWindow::free_kept`]); pages the window shares with other data stay
    /// where they are (`onesided_share_in_place=true` acts as `whole_pages`).
    pub(crate) fn create_kept(
        comm: &Comm,
        base: *mut u8,
        bytes: usize,
        disp_unit: usize,
        info: &WinInfo,
        kept: Kept,
    ) -> Result<Self> {
        let core = crate::win::create::create(comm, base, bytes, disp_unit, info, false)?;
        Ok(Self::from_core(core, Some(kept)))
    }

    /// Creates a window without memory (MPI_Win_create_dynamic). Collective. Memory is
    /// attached with [`RawWindow::attach`]; displacements are addresses.
    pub fn create_dynamic(comm: &Comm, info: &WinInfo) -> Result<Self> {
        let core = crate::win::create::create_dynamic(comm, info)?;
        Ok(Self::from_core(core, None))
    }

    /// Attaches `bytes` at `base`, memory the caller keeps, to this dynamic window
    /// (MPI_Win_attach). Local. With `onesided_share_in_place` set at creation, its pages
    /// move into shared memory until the detach, as a `create` window's do.
    ///
    /// # Safety
    /// As for [`RawWindow::create`], until the region is detached (and the pages around
    /// it are left alone during the attach and the detach, under
    /// `onesided_share_in_place=true`).
    pub unsafe fn attach(&self, base: *mut u8, bytes: usize) -> Result<()> {
        self.require_dynamic("attach")?;
        if base.is_null() {
            return Err(Error::InvalidArgument("attach: a null base".into()));
        }
        let share = self
            .core
            .hints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .share_in_place;
        let boot = self.core.comm.bootstrap();
        let in_place = match share {
            // Across nodes the network registers the region's pages as they are.
            _ if boot.node_size() != boot.size() => None,
            info::ShareInPlace::Off => None,
            // SAFETY: the caller's memory, valid (this function's contract), with other
            // threads off the pages around it under `true` (the contract of that key).
            _ => unsafe {
                crate::memory::share_in_place(
                    base as usize,
                    bytes,
                    share == info::ShareInPlace::Pages,
                )
            }
            .ok()
            .flatten(),
        };
        // A failed attach drops `in_place`: the pages are private again.
        self.core.dynamic_attach(base as usize, bytes)?;
        self.attached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((base as usize, bytes, in_place.map(|m| Kept(Box::new(m)))));
        Ok(())
    }

    /// Detaches the region attached at `base` (MPI_Win_detach). Local. Memory a typed
    /// handle gave the window is given back through that handle
    /// ([`Window::detach`](crate::Window::detach)); here it is released.
    pub fn detach(&self, base: *mut u8) -> Result<()> {
        self.require_dynamic("detach")?;
        self.core.dynamic_detach(base as usize)?;
        let mut attached = self.attached.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pos) = attached.iter().position(|(a, _, _)| *a == base as usize) {
            drop(attached.swap_remove(pos));
        }
        Ok(())
    }

    /// The displacement unit of `target`'s memory in bytes (1 on a dynamic window, whose
    /// displacements are addresses).
    pub fn target_disp_unit(&self, target: usize) -> Result<usize> {
        use crate::win::core::Targets;
        self.core.check_rank(target)?;
        Ok(match &self.core.targets {
            Targets::Symmetric { disp_unit, .. } => *disp_unit,
            Targets::Table(t) => t.get(target).map_or(1, |r| r.disp_unit),
            Targets::Spread(spread) => spread.disp_unit,
            Targets::Dynamic => 1,
        })
    }

    /// Error unless this is a dynamic window.
    pub(crate) fn require_dynamic(&self, call: &'static str) -> Result<()> {
        if self.core.flavor == Flavor::Dynamic {
            Ok(())
        } else {
            Err(Error::WrongFlavor {
                call,
                flavor: self.core.flavor.as_str(),
            })
        }
    }

    /// The communicator of the window.
    pub fn comm(&self) -> &Comm {
        &self.core.comm
    }

    /// Rank of this process in the window.
    pub fn rank(&self) -> usize {
        self.core.rank
    }

    /// Number of processes of the window.
    pub fn size(&self) -> usize {
        self.core.size
    }

    /// MPI_WIN_CREATE_FLAVOR.
    pub fn flavor(&self) -> Flavor {
        self.core.flavor
    }

    /// MPI_WIN_MODEL: always [`MemoryModel::Unified`].
    pub fn model(&self) -> MemoryModel {
        MemoryModel::Unified
    }

    /// MPI_WIN_BASE: start of this process's window memory (null for dynamic windows).
    pub fn base_bytes(&self) -> *mut u8 {
        self.core.local.base
    }

    /// MPI_WIN_SIZE: size of this process's window memory in bytes (0 for dynamic windows).
    pub fn size_bytes(&self) -> usize {
        self.core.local.bytes
    }

    /// True when this process exposes no memory.
    pub fn is_empty(&self) -> bool {
        self.core.local.bytes == 0
    }

    /// How the window records where each rank's memory is.
    pub fn layout(&self) -> WindowLayout {
        match self.core.targets {
            Targets::Symmetric { .. } => WindowLayout::Symmetric,
            Targets::Spread(_) => WindowLayout::Symmetric,
            Targets::Table(_) => WindowLayout::PerRank,
            Targets::Dynamic => WindowLayout::Dynamic,
        }
    }

    /// MPI_WIN_DISP_UNIT of this process.
    pub fn disp_unit(&self) -> usize {
        self.core.local.disp_unit
    }

    /// True for a handle made by `dup_with_info`.
    pub fn is_duplicate(&self) -> bool {
        self.duplicate
    }

    /// The hints in effect through this handle (typed form of [`RawWindow::get_info`]).
    pub fn hints(&self) -> WinHints {
        let mut h = self.core.hints().clone();
        let f = self.flags.get();
        h.scope = if f.thread_scope() {
            info::WinScope::Thread
        } else {
            info::WinScope::Process
        };
        h.order = f.order();
        h.accumulate_intrinsic = f.intrinsic();
        h
    }

    /// The info keys in effect (MPI_Win_get_info): every hint onesided supports, with its
    /// current value — for `mpi_win_scope`, `mpi_win_order` and
    /// `mpi_assert_accumulate_intrinsic`, the value of this handle (duplicates may differ).
    /// Ignored (unknown) keys are not returned, as MPI-4.1 specifies.
    pub fn get_info(&self) -> WinInfo {
        self.hints().to_info(self.core.flavor)
    }

    /// Changes hints (MPI_Win_set_info). Collective. Hints that only apply at creation
    /// (`same_size`, `same_disp_unit`, `mpi_assert_memory_alloc_kinds`,
    /// `alloc_shared_noncontig`, `onesided_max_attached_regions`) are ignored; an invalid
    /// value of any known key is an error at every process and changes nothing.
    ///
    /// `mpi_win_scope`, `mpi_win_order` and `mpi_assert_accumulate_intrinsic` change for
    /// this handle only (see [`Window::dup_with_info`](crate::Window::dup_with_info)).
    pub fn set_info(&self, info: &WinInfo) -> Result<()> {
        let mut next = self.hints();
        let local = next.update(info, false);
        // One agreement carries success (FAILED otherwise) and the granularity (capped far
        // below FAILED): a hint the processes may pass differently, of which the window
        // takes the largest, as at creation.
        const FAILED: u64 = u64::MAX;
        let mine = match &local {
            Ok(()) => next.accumulate_granularity as u64,
            Err(_) => FAILED,
        };
        let all = self.core.agree_words(Call::SetInfo, mine)?;
        local?;
        if all.contains(&FAILED) {
            return Err(Error::PeerFailed { call: "set_info" });
        }
        next.accumulate_granularity = all.iter().copied().max().unwrap_or(mine) as usize;
        // Relaxed: read by this window's own later calls.
        self.core.acc_granularity.store(
            next.accumulate_granularity,
            std::sync::atomic::Ordering::Relaxed,
        );
        self.core
            .no_locks
            .store(next.no_locks, std::sync::atomic::Ordering::Relaxed);
        // Relaxed: read by this window's engine; applies to epochs queued from now on (and
        // to the pending ones at their next poll).
        self.core
            .reorder
            .store(next.reorder.bits(), std::sync::atomic::Ordering::Relaxed);
        let keep = self.flags.get().keeps_rma_order();
        self.flags
            .set(Flags::from_hints(&next).keeping_rma_order(keep));
        *self.core.hints() = next;
        Ok(())
    }

    /// The collective part of freeing: every process has closed its epochs and agrees.
    /// Afterwards the kept memory may be handed back (or dropped) by the caller.
    fn free_collective(&mut self) -> Result<()> {
        let local = self.core.epoch.check_free();
        let all = self
            .core
            .agree_words(Call::Free, u64::from(local.is_ok()))?;
        local?;
        if all.contains(&0) {
            return Err(Error::PeerFailed { call: "free" });
        }
        // Everyone has closed its epochs and agreed: no access to our memory remains, and
        // none to the control words (a heap block may be handed out again once dropped).
        self.freed = true;
        self.core._segment.release_on_drop();
        crate::diag::event!(
            target: "onesided::window",
            window = ?crate::diag::Hex(self.core.window_id()),
            "window freed"
        );
        Ok(())
    }

    /// Frees the window (MPI_Win_free). Collective. Memory the window kept for its user
    /// (handed over through a typed [`Window`](crate::Window)) is released with it; a C program's memory
    /// stays the program's.
    ///
    /// Every process must have closed its epochs; otherwise every process gets an error and
    /// the window is dropped without being freed (see [`Window::free`](crate::Window::free)).
    pub fn free(mut self) -> Result<()> {
        if self.duplicate {
            // A duplicate is a handle: freeing it is local.
            return Ok(());
        }
        self.free_collective()?;
        drop(self.take_kept());
        Ok(())
    }

    /// Frees the window and returns the memory it kept, `create`'s buffer first.
    pub(crate) fn free_kept(mut self) -> Result<Vec<Kept>> {
        self.free_collective()?;
        Ok(self.take_kept())
    }

    fn take_kept(&mut self) -> Vec<Kept> {
        let mut out: Vec<Kept> = self.kept.take().into_iter().collect();
        out.extend(
            self.attached
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
                .filter_map(|(_, _, k)| k),
        );
        out
    }
}

impl Drop for RawWindow {
    /// Dropping a window without freeing it cannot synchronise with the other processes, so
    /// user memory they might still access is leaked instead of freed (and, across nodes,
    /// the window's registrations with the network).
    fn drop(&mut self) {
        if self.duplicate {
            // The window this duplicates owns all.
            return;
        }
        // After this no other thread polls the core, so it is dropped here, by its owner.
        self.core.unregister();
        if !self.freed {
            for kept in self.take_kept() {
                kept.leak();
            }
            // Across nodes peers reach this window's words and memory through its network
            // registrations, which die with the core: a peer still reading them (the tag
            // of a collective that failed against ours, say) would get a completion error,
            // and the tcp provider closes the connection on an unknown key. The core is
            // kept, mapped and registered, for the life of the process.
            if !self.core.plane().is_mapped() {
                std::mem::forget(self.core.clone_handle());
            }
        }
    }
}
