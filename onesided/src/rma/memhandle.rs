//! Memory handles (seed 000 §4, Listing 5): exposing one region of a dynamic window to peers
//! as a byte string, and windows of one target built from it.
//!
//! The owner registers memory with [`Window::memhandle_create`] on a dynamic window (the
//! *parent*); the region is attached to the parent, so everything a dynamic window does
//! for it — mapping `alloc_mem` memory, cross-memory attach for other memory, the one-load
//! check that the table did not change — applies. The returned [`MemHandle`] is at most
//! [`MAX_MEMORY_HANDLE_SIZE`] bytes and may reach a peer by any means (a message, a file, a
//! put). A peer turns it into a [`MemWindow`] with [`Window::window_from_memhandle`] on the
//! same parent: local, one target, displacements relative to the region (no address
//! exchange, no region search on the way), passive-target synchronization through the
//! parent's locks, and only put, get, accumulate and flush — as the paper restricts them.
//! [`Window::memhandle_release`] ends the exposure and gives the memory back.
//!
//! **After release.** An operation through a window of a released handle is
//! [`Error::MemhandleReleased`], not a write into freed memory: every operation compares the
//! owner's region-table number with the one its window last validated (one load), and
//! looks the region up again when it changed — and checks that the region there is still
//! the one the handle registered: a handle carries the owner's number of its attach, which
//! a release retires for good, so a handle never revives when the allocator hands the same
//! bytes to a later attach. An operation that races the release (no synchronization in
//! between) is erroneous, as an access racing `detach` is.
//!
//! Across nodes the owner's table number is a round trip away, which doubled the latency
//! of a put and flush. There the owner tells instead: a process that makes a window from a
//! handle of an owner on another node first sets its bit in the owner's readers' word
//! (`CtrlWord::HandleReaders`, bit `rank % 64`), and every detach of such an owner adds one
//! to the release count of each process whose bit is set (`CtrlWord::HandleReleases`, in
//! the reader's own block) before it returns. An operation compares its own process's
//! count with the one its window last validated at — a load of its own memory — and only
//! when it moved reads the owner's table number (and, if that moved, the table). What is
//! detected is the same as on one node: an operation issued after the release, ordered by
//! any synchronization, sees the count moved, because the release waited for it. The
//! owner's read of the bits and a reader's setting of its bit are ordered against the
//! table change and the reader's table read respectively, so a reader the owner did not
//! tell read the table after the release and never had the region. A dynamic window's
//! accesses to an owner on another node keep its table by the same words
//! (`WinCore::resolve_dynamic_net`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::layout::{check_match, pieces, Layout};
use crate::ops::{AccElement, ElemType, Op};
use crate::transport::{Located, Route};
use crate::win::core::WinCore;
use crate::win::RawWindow;

/// The most bytes a [`MemHandle`] takes (MPI_MAX_MEMORY_HANDLE_SIZE).
pub const MAX_MEMORY_HANDLE_SIZE: usize = 64;

/// Identifies memory-handle bytes of onesided ("OSMH", version 2: with the registration).
const MAGIC: u64 = 0x4f53_4d48_0000_0002;

/// A registered region of a dynamic window, as bytes that can be sent to any process of
/// the window (seed 000 §4). Opaque: it names the owner and where the region is.
///
/// ```
/// # onesided::testing::run(2, |_| {
/// use onesided::{MemHandle, Window};
/// let world = onesided::init()?.world().clone();
/// let win = Window::<u64>::create_dynamic(&world)?;
/// let mine = win.memhandle_create(onesided::alloc_mem::<u64>(1024)?)?;
/// // Any means of transport: here an allgather of the bytes.
/// let all = world.allgather(mine.as_bytes())?;
/// let left = MemHandle::from_bytes(&all[..mine.as_bytes().len()])?;
/// # drop(left);
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemHandle {
    words: [u64; 7],
}

impl MemHandle {
    /// Bytes of a handle (at most [`MAX_MEMORY_HANDLE_SIZE`]).
    pub const SIZE: usize = 56;

    fn new(
        owner: usize,
        base: usize,
        bytes: usize,
        window: u64,
        elem: usize,
        registration: u64,
    ) -> MemHandle {
        MemHandle {
            words: [
                MAGIC,
                owner as u64,
                base as u64,
                bytes as u64,
                window,
                elem as u64,
                registration,
            ],
        }
    }

    /// The handle as bytes to send.
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.words)
    }

    /// A handle from bytes made by [`MemHandle::as_bytes`]. Errors: not a onesided handle
    /// of this version.
    pub fn from_bytes(bytes: &[u8]) -> Result<MemHandle> {
        if bytes.len() != Self::SIZE {
            return Err(Error::InvalidArgument(format!(
                "a memory handle has {} bytes, not {}",
                Self::SIZE,
                bytes.len()
            )));
        }
        let mut words = [0u64; 7];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words).copy_from_slice(bytes);
        if words[0] != MAGIC {
            return Err(Error::InvalidArgument(
                "not a memory handle of this onesided version".into(),
            ));
        }
        Ok(MemHandle { words })
    }

    /// Rank (in the parent window) of the process whose memory the handle exposes.
    pub fn owner(&self) -> usize {
        self.words[1] as usize
    }

    pub(crate) fn base(&self) -> usize {
        self.words[2] as usize
    }

    /// Size of the region in bytes.
    pub fn size_bytes(&self) -> usize {
        self.words[3] as usize
    }

    fn window(&self) -> u64 {
        self.words[4]
    }

    pub(crate) fn elem(&self) -> usize {
        self.words[5] as usize
    }

    /// The owner's number of the attach that registered the region: a release retires it
    /// for good, while the same bytes may be attached again under a new number.
    fn registration(&self) -> u64 {
        self.words[6]
    }
}

impl RawWindow {
    /// Registers `bytes` at `base`, memory the window keeps as `kept` until the release,
    /// and returns a handle for elements of `elem` bytes (a typed handle's
    /// [`Window::memhandle_create`]).
    pub(crate) fn memhandle_create_kept(
        &self,
        base: *mut u8,
        bytes: usize,
        elem: usize,
        kept: crate::win::raw::Kept,
    ) -> Result<MemHandle> {
        self.require_dynamic("memhandle_create")?;
        let registration = self.attach_kept(base, bytes, kept)?;
        Ok(MemHandle::new(
            self.core.rank,
            base as usize,
            bytes,
            self.core.window_id(),
            elem,
            registration,
        ))
    }

    /// Ends the exposure of `handle` and gives back the memory the window kept for it.
    pub(crate) fn memhandle_release_kept(
        &self,
        handle: &MemHandle,
    ) -> Result<crate::win::raw::Kept> {
        self.require_dynamic("memhandle_release")?;
        self.core.check_release(handle)?;
        self.detach_kept(handle.base())
    }
}

impl crate::win::core::WinCore {
    /// The checks of a release of `handle` by this process: its own, of this window, not
    /// released yet.
    fn check_release(&self, handle: &MemHandle) -> Result<()> {
        if handle.window() != self.window_id() {
            return Err(Error::InvalidArgument(
                "memhandle_release: the memory handle belongs to another window".into(),
            ));
        }
        if handle.owner() != self.rank {
            return Err(Error::InvalidArgument(format!(
                "memhandle_release: the handle belongs to rank {}, not to this process ({})",
                handle.owner(),
                self.rank
            )));
        }
        // The registration, not the address: the allocator may have handed the same bytes to
        // a later plain attach, which this handle must not detach.
        let live = self.registration_at(self.rank, handle.base(), handle.size_bytes())
            == Some(handle.registration());
        if !live {
            return Err(Error::MemhandleReleased { target: self.rank });
        }
        Ok(())
    }

    /// An identity of this window that every process sees alike: the random tag of the
    /// node segment they all map.
    pub(crate) fn window_id(&self) -> u64 {
        if let Some(id) = self.net_window_id {
            return id;
        }
        self._segment.tag()
    }

    /// The sequence number of `target`'s region table (read through the network when the
    /// target is on another node).
    pub(crate) fn region_seq(&self, target: usize) -> Result<u64> {
        if let Some(net) = self.net_toward(target) {
            return self.read_remote_word(net, target, crate::win::resolve::DYN_SEQ);
        }
        // Acquire: as in resolve_dynamic.
        Ok(self.ctrl.rank(target).dyn_seq.load(Ordering::Acquire))
    }

    /// Where the region of `bytes` bytes at `base` in `target`, registered by the attach
    /// numbered `registration`, is; [`Error::MemhandleReleased`] once that attach was
    /// undone (even if the same bytes were attached again since).
    fn locate_registered(
        &self,
        target: usize,
        base: usize,
        bytes: usize,
        registration: u64,
    ) -> Result<Located> {
        let at = match self.resolve_dynamic("memhandle", target, base, bytes) {
            Ok(at) => at,
            Err(Error::NotAttached { .. }) => return Err(Error::MemhandleReleased { target }),
            Err(e) => return Err(e),
        };
        // Read after the lookup: a release between the two shows here, a later one moves
        // the table number that every operation compares.
        if self.registration_at(target, base, bytes) != Some(registration) {
            return Err(Error::MemhandleReleased { target });
        }
        Ok(at)
    }
}

/// The region a memory handle names, as a window of it reaches it.
#[derive(Debug)]
struct HandleRegion {
    target: usize,
    base: usize,
    bytes: usize,
    /// Bytes per displacement.
    unit: usize,
    /// The handle's registration number (see [`MemHandle`]).
    registration: u64,
    /// Where the region starts (fixed: a registration elsewhere is another region).
    located: Located,
    /// The owner's region-table number the location was validated at.
    seq: AtomicU64,
    /// Set when the owner is on another node: this process's count of releases it was
    /// told of (see the module docs) when the location was last validated, which stands in
    /// for the owner's table number.
    told: Option<AtomicU64>,
}

impl crate::win::core::WinCore {
    /// The region of `handle` (after the checks of the handle's window and owner), reached
    /// with displacements of `unit` bytes and at most `bytes` bytes.
    fn handle_region(&self, handle: &MemHandle, unit: usize, bytes: usize) -> Result<HandleRegion> {
        let target = handle.owner();
        self.check_rank(target)?;
        if let Some(net) = self.net_toward(target) {
            return self.handle_region_net(net, handle, unit, bytes);
        }
        let seq = self.region_seq(target)?;
        let at = self.locate_registered(
            target,
            handle.base(),
            handle.size_bytes(),
            handle.registration(),
        )?;
        Ok(HandleRegion::new(handle, unit, bytes, at, seq))
    }
}

impl crate::win::core::WinCore {
    /// [`WinCore::handle_region`] for an owner on another node: one read of its region
    /// table (a seqlock read, each step a round trip) finds the region, checks it is still
    /// the attach the handle registered, and gives its key and the table number it was
    /// read at — where the path for this node's owners reads the number, looks the region up
    /// and reads the table again for the registration (two table reads and more across
    /// nodes: a window from a handle took ~100 µs to make).
    fn handle_region_net(
        &self,
        net: &dyn crate::win::net_control::NetControl,
        handle: &MemHandle,
        unit: usize,
        bytes: usize,
    ) -> Result<HandleRegion> {
        let target = handle.owner();
        // Read before the table: a release after this read is told (below) and moves it.
        let releases = self.handle_releases_told()?;
        self.become_handle_reader(target)?;
        let (seq, regions) = self.read_table_net(net, target)?;
        let region = regions
            .iter()
            .find(|r| r.base == handle.base() && r.len == handle.size_bytes())
            .filter(|r| r.registration == handle.registration() && r.net_key != 0)
            .ok_or(Error::MemhandleReleased { target })?;
        let located = crate::win::regions::CachedRegion {
            base: region.base,
            len: region.len,
            route: Route::network(crate::transport::network::Remote {
                peer: net.peer(target),
                addr: region.net_base,
                key: region.net_key,
            })
            .ok_or_else(crate::transport::network::absent)?,
            shared: false,
        }
        .locate(handle.base());
        let mut region = HandleRegion::new(handle, unit, bytes, located, seq);
        region.told = Some(AtomicU64::new(releases));
        Ok(region)
    }

    /// How many releases of owners on other nodes this process was told of (its own
    /// word: a load of its memory where the provider's atomics are the CPU's).
    #[inline]
    pub(crate) fn handle_releases_told(&self) -> Result<u64> {
        use crate::plane::{Awaited, ControlPlane, CtrlWord};
        let plane = self.plane();
        // Acquire: pairs with the owner's Release addition, after its table changed.
        Awaited::from(plane.load(
            CtrlWord::HandleReleases { at: self.rank },
            Ordering::Acquire,
        ))
        .wait(&plane)
    }

    /// Sets this process's bit in `target`'s readers' word (once per owner), waiting until
    /// it is set there — before this process reads the owner's table.
    pub(crate) fn become_handle_reader(&self, target: usize) -> Result<()> {
        use crate::plane::{Awaited, ControlPlane, CtrlWord};
        let mut owners = self
            .dynamic
            .handle_owners_read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if owners.contains(&target) {
            return Ok(());
        }
        let plane = self.plane();
        let word = CtrlWord::HandleReaders { at: target };
        let bit = 1u64 << (self.rank % 64);
        let mut seen = 0;
        while seen & bit == 0 {
            // SeqCst: set before this process's later read of the owner's table, against
            // the owner's fence between its table change and its read of this word.
            let before =
                Awaited::from(plane.compare_swap(word, seen, seen | bit, Ordering::SeqCst))
                    .wait(&plane)?;
            if before == seen {
                break;
            }
            seen = before;
        }
        owners.insert(target);
        Ok(())
    }
}

impl HandleRegion {
    /// The region of `handle`, found at `located` while the owner's table had number
    /// `seq`, reached with displacements of `unit` bytes and at most `bytes` bytes.
    fn new(handle: &MemHandle, unit: usize, bytes: usize, located: Located, seq: u64) -> Self {
        HandleRegion {
            target: handle.owner(),
            base: handle.base(),
            bytes: bytes.min(handle.size_bytes()),
            unit,
            registration: handle.registration(),
            located,
            seq: AtomicU64::new(seq),
            told: None,
        }
    }

    /// True while nothing says the handle may have been released since the location was
    /// validated: the owner's table number is unchanged (owner on this node), or no
    /// release was told to this process (owner on another node).
    #[inline]
    fn unchanged(&self, core: &WinCore) -> Result<bool> {
        if let Some(told) = &self.told {
            // Relaxed: a hint; the Acquire load of the count decides.
            return Ok(core.handle_releases_told()? == told.load(Ordering::Relaxed));
        }
        // Relaxed: a hint; the Acquire load of the table number decides.
        Ok(core.region_seq(self.target)? == self.seq.load(Ordering::Relaxed))
    }

    /// Where `len` bytes at displacement `disp` are: checks the parent's epoch, the bounds
    /// and that the handle was not released (one load while the owner's table is
    /// unchanged).
    #[inline]
    fn at(&self, core: &WinCore, op: &'static str, disp: usize, len: usize) -> Result<Located> {
        core.epoch.check_access(self.target, op)?;
        core.pass_gate(self.target)?;
        let off = crate::win::resolve::checked_offset(
            op,
            self.target,
            disp,
            self.unit.max(1),
            len,
            self.bytes,
        )?;
        if !self.unchanged(core)? {
            self.revalidate(core)?;
        }
        Ok(self.located.offset(off))
    }

    /// Where `len` bytes at displacement `disp` are when the common case applies — mapped
    /// region, access epoch already checked (which also means no synchronization is pending
    /// that the operation must wait behind), in bounds, handle unchanged — without
    /// constructing any error. `None`: take [`at`](Self::at).
    #[inline(always)]
    fn direct(&self, core: &WinCore, disp: usize, len: usize) -> Option<*mut u8> {
        if !core.epoch.access_cached(self.target) {
            return None;
        }
        let Route::Direct(base) = self.located.route else {
            return None;
        };
        let off = disp.checked_mul(self.unit)?;
        if off > self.bytes || len > self.bytes - off {
            return None;
        }
        // Relaxed: see `at`.
        (core.region_seq(self.target).ok()? == self.seq.load(Ordering::Relaxed))
            .then(|| base.wrapping_add(off))
    }

    /// The owner's table changed: the region must still be registered where it was.
    #[cold]
    fn revalidate(&self, core: &WinCore) -> Result<()> {
        // Read first: a release after this read moves it again.
        let told = match &self.told {
            Some(_) => Some(core.handle_releases_told()?),
            None => None,
        };
        let seq = core.region_seq(self.target)?;
        // Relaxed: see `unchanged`.
        if seq != self.seq.load(Ordering::Relaxed) {
            let now =
                core.locate_registered(self.target, self.base, self.bytes, self.registration)?;
            if !same_route(now.route, self.located.route) {
                // Registered again elsewhere (another mapping): not the region of this handle.
                return Err(Error::MemhandleReleased {
                    target: self.target,
                });
            }
            // Relaxed: see `unchanged`.
            self.seq.store(seq, Ordering::Relaxed);
        }
        if let (Some(told), Some(now)) = (&self.told, told) {
            // Relaxed: see `unchanged`.
            told.store(now, Ordering::Relaxed);
        }
        Ok(())
    }

    fn put(
        &self,
        core: &WinCore,
        flags: crate::win::core::Flags,
        bytes: &[u8],
        disp: usize,
    ) -> Result<()> {
        if let Some(dst) = self.direct(core, disp, bytes.len()) {
            // SAFETY: dst..dst+len lies inside the registered region (bounds checked in
            // `direct`), which the owner keeps mapped while the handle is unreleased (the
            // table number did not move); `bytes` is a distinct Rust slice.
            unsafe { crate::transport::shm::copy_bytes(bytes.as_ptr(), dst, bytes.len()) };
            core.epoch.note_rma();
            return Ok(());
        }
        let at = self.at(core, "put", disp, bytes.len())?;
        // Issued like any put (posted, completed by the flush): a write waited for on its
        // own cost a 32 KiB put with flush across nodes 67 µs against 18 on `allocate`.
        core.put_routed(at.route, bytes, self.target, flags)
    }

    fn get(&self, core: &WinCore, bytes: &mut [u8], disp: usize) -> Result<()> {
        if let Some(src) = self.direct(core, disp, bytes.len()) {
            // SAFETY: as in `put`, reading; `bytes` is a distinct Rust slice.
            unsafe { crate::transport::shm::copy_bytes(src, bytes.as_mut_ptr(), bytes.len()) };
            core.epoch.note_rma();
            return Ok(());
        }
        let at = self.at(core, "get", disp, bytes.len())?;
        at.route.read(bytes)?;
        core.epoch.note_rma();
        Ok(())
    }

    /// The pieces of `origin` that `origin_layout` selects go, in order, to those
    /// `target_layout` selects at `disp` (derived datatypes).
    fn put_layout(
        &self,
        core: &WinCore,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        disp: usize,
        target_layout: &Layout<u8>,
    ) -> Result<()> {
        let list = crate::rma::copy_list("put", origin_layout, origin.len(), target_layout)?;
        let at = self.at(core, "put", disp, target_layout.end())?;
        at.route.post_write_pieces(origin, &list)?;
        core.note_issued(at.route);
        core.epoch.note_rma();
        Ok(())
    }

    /// The pieces `target_layout` selects at `disp` land, in order, in those of `origin`
    /// that `origin_layout` selects.
    fn get_layout(
        &self,
        core: &WinCore,
        origin: &mut [u8],
        origin_layout: &Layout<u8>,
        disp: usize,
        target_layout: &Layout<u8>,
    ) -> Result<()> {
        let list = crate::rma::copy_list("get", origin_layout, origin.len(), target_layout)?;
        let at = self.at(core, "get", disp, target_layout.end())?;
        at.route.read_pieces(origin, &list)?;
        core.epoch.note_rma();
        Ok(())
    }

    /// Combines the elements of `origin` that `origin_layout` selects into those
    /// `target_layout` selects at `disp`, in order.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_layout<E: AccElement>(
        &self,
        core: &WinCore,
        flags: crate::win::core::Flags,
        origin: &[E],
        origin_layout: &Layout<E>,
        disp: usize,
        target_layout: &Layout<E>,
        op: Op,
    ) -> Result<()> {
        crate::rma::accumulate::check_op("accumulate", op, E::TYPE, false)?;
        let size = std::mem::size_of::<E>();
        crate::rma::check_within("accumulate", origin_layout, origin.len())?;
        if !(origin_layout.splits_into(size) && target_layout.splits_into(size)) {
            return Err(Error::InvalidArgument(
                "accumulate: the datatypes split an element".into(),
            ));
        }
        check_match("accumulate", origin_layout.bytes(), target_layout.bytes())?;
        let at = self.at(core, "accumulate", disp, target_layout.end())?;
        for ([o, t], len) in pieces([origin_layout.blocks(), target_layout.blocks()]) {
            let run = &origin[o / size..(o + len) / size];
            core.acc_run(self.target, at.offset(t), run, op, None, flags)?;
        }
        core.epoch.note_rma();
        Ok(())
    }

    fn accumulate<E: AccElement>(
        &self,
        core: &WinCore,
        flags: crate::win::core::Flags,
        src: &[E],
        disp: usize,
        op: Op,
    ) -> Result<()> {
        crate::rma::accumulate::check_op("accumulate", op, E::TYPE, false)?;
        let at = self.at(core, "accumulate", disp, std::mem::size_of_val(src))?;
        core.acc_run(self.target, at, src, op, None, flags)?;
        core.epoch.note_rma();
        Ok(())
    }
}

/// A window of one target made from a [`MemHandle`]
/// ([`RawWindow::window_from_memhandle`], `MPIX_Win_from_memhandle`): put, get, accumulate
/// and flush to the handle's region, in bytes and run-time element types, inside a
/// passive-target epoch of the parent window that includes the owner. It owns a handle of
/// its parent window (with the parent handle's info keys as they were when it was made);
/// [`MemWindow`](crate::MemWindow) is its typed form. Freed by dropping it (local).
#[derive(Debug)]
pub struct RawMemWindow {
    parent: RawWindow,
    region: HandleRegion,
}

impl RawWindow {
    /// Registers `bytes` at `base` with this dynamic window and returns a handle to it
    /// (`MPIX_Memhandle_create`), memory the caller keeps. Local; see
    /// [`Window::memhandle_create`](crate::Window::memhandle_create).
    ///
    /// # Safety
    /// As for [`RawWindow::attach`], until the handle is released.
    pub unsafe fn memhandle_create(&self, base: *mut u8, bytes: usize) -> Result<MemHandle> {
        self.require_dynamic("memhandle_create")?;
        // SAFETY: the caller's promise, forwarded.
        unsafe { self.attach(base, bytes)? };
        let registration = self
            .core
            .registration_at(self.core.rank, base as usize, bytes)
            .ok_or(Error::MemhandleReleased {
                target: self.core.rank,
            })?;
        Ok(MemHandle::new(
            self.core.rank,
            base as usize,
            bytes,
            self.core.window_id(),
            1,
            registration,
        ))
    }

    /// Ends the exposure of `handle`'s memory (`MPIX_Memhandle_release`); see
    /// [`Window::memhandle_release`](crate::Window::memhandle_release). The memory stays the caller's.
    pub fn memhandle_release(&self, handle: &MemHandle) -> Result<()> {
        self.require_dynamic("memhandle_release")?;
        self.core.check_release(handle)?;
        self.detach(handle.base() as *mut u8)
    }

    /// A window of one target built from `handle` (`MPIX_Win_from_memhandle`): at most
    /// `bytes` bytes of the handle's region, reached with displacements of `disp_unit`
    /// bytes. Local; it holds a handle of this (parent) window, whose passive-target
    /// epochs its operations run in.
    pub fn window_from_memhandle(
        &self,
        handle: &MemHandle,
        bytes: usize,
        disp_unit: usize,
    ) -> Result<RawMemWindow> {
        self.require_dynamic("window_from_memhandle")?;
        if handle.window() != self.core.window_id() {
            return Err(Error::InvalidArgument(
                "window_from_memhandle: the memory handle belongs to another window".into(),
            ));
        }
        if disp_unit == 0 {
            return Err(Error::InvalidDisplacement(
                "disp_unit must be positive".into(),
            ));
        }
        let region = self.core.handle_region(handle, disp_unit, bytes)?;
        Ok(RawMemWindow {
            // A handle with this one's flags, which keeps the window alive.
            parent: self.duplicate_with(self.flags.get()),
            region,
        })
    }
}

impl RawMemWindow {
    /// The one target: the handle's owner, as a rank of the parent window.
    pub fn target(&self) -> usize {
        self.region.target
    }

    /// Bytes this window reaches.
    pub fn size_bytes(&self) -> usize {
        self.region.bytes
    }

    /// Bytes per displacement.
    pub fn disp_unit(&self) -> usize {
        self.region.unit
    }

    /// Writes `src` at displacement `disp` (MPI_Put).
    pub fn put(&self, src: &[u8], disp: usize) -> Result<()> {
        self.region
            .put(&self.parent.core, self.parent.flags.get(), src, disp)
    }

    /// Reads `dst.len()` bytes at displacement `disp` (MPI_Get).
    pub fn get(&self, dst: &mut [u8], disp: usize) -> Result<()> {
        self.region.get(&self.parent.core, dst, disp)
    }

    /// [`RawMemWindow::put`] with byte layouts for origin and target (derived datatypes).
    pub fn put_layout(
        &self,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        disp: usize,
        target_layout: &Layout<u8>,
    ) -> Result<()> {
        self.region.put_layout(
            &self.parent.core,
            origin,
            origin_layout,
            disp,
            target_layout,
        )
    }

    /// [`RawMemWindow::get`] with byte layouts for origin and target (derived datatypes).
    pub fn get_layout(
        &self,
        origin: &mut [u8],
        origin_layout: &Layout<u8>,
        disp: usize,
        target_layout: &Layout<u8>,
    ) -> Result<()> {
        self.region.get_layout(
            &self.parent.core,
            origin,
            origin_layout,
            disp,
            target_layout,
        )
    }

    /// [`RawMemWindow::accumulate`] with byte layouts (which select whole elements of
    /// `ty`).
    pub fn accumulate_layout(
        &self,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        ty: ElemType,
        disp: usize,
        target_layout: &Layout<u8>,
        op: Op,
    ) -> Result<()> {
        let flags = self.parent.flags.get();
        crate::with_elem_type!(ty, E => {
            if origin.len() % std::mem::size_of::<E>() != 0 {
                return Err(Error::InvalidArgument(format!(
                    "accumulate: {} bytes are not whole {} elements",
                    origin.len(),
                    ty.name()
                )));
            }
            let elems: Vec<E> = bytemuck::pod_collect_to_vec(origin);
            self.region.accumulate_layout(
                &self.parent.core,
                flags,
                &elems,
                &origin_layout.retyped::<E>(),
                disp,
                &target_layout.retyped::<E>(),
                op,
            )
        })
    }

    /// Combines `src`, elements of `ty`, into the region at `disp` (MPI_Accumulate).
    pub fn accumulate(&self, src: &[u8], ty: ElemType, disp: usize, op: Op) -> Result<()> {
        crate::with_elem_type!(ty, E => {
            let n = std::mem::size_of::<E>();
            if src.len() % n != 0 {
                return Err(Error::InvalidArgument(format!(
                    "accumulate: {} bytes are not whole {} elements",
                    src.len(),
                    ty.name()
                )));
            }
            let elems: Vec<E> = bytemuck::pod_collect_to_vec(src);
            self.accumulate_elems(&elems, disp, op)
        })
    }

    /// The element-typed form of [`RawMemWindow::accumulate`] ([`MemWindow::accumulate`]).
    pub(crate) fn accumulate_elems<E: AccElement>(
        &self,
        src: &[E],
        disp: usize,
        op: Op,
    ) -> Result<()> {
        let flags = self.parent.flags.get();
        self.region
            .accumulate(&self.parent.core, flags, src, disp, op)
    }

    /// Completes this process's operations to the target (MPI_Win_flush through the
    /// parent).
    pub fn flush(&self) -> Result<()> {
        self.parent.flush(self.region.target)
    }

    /// Completes them at the origin (MPI_Win_flush_local).
    pub fn flush_local(&self) -> Result<()> {
        self.parent.flush_local(self.region.target)
    }
}

fn same_route(a: Route, b: Route) -> bool {
    match (a, b) {
        (Route::Direct(x), Route::Direct(y)) => x == y,
        (Route::Cma { pid: p, addr: x }, Route::Cma { pid: q, addr: y }) => p == q && x == y,
        // The same registration (key) at the same place: the same region.
        (Route::Net(x), Route::Net(y)) => (x.peer, x.addr, x.key) == (y.peer, y.addr, y.key),
        _ => false,
    }
}
