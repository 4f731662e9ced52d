//! Communication calls (MPI-4.1 §12.3): put and get, contiguous or with derived layouts.
//!
//! A call resolves (target, displacement) to a transport route — checking the rank, the
//! epoch and the bounds of the target's window — and moves the bytes. Displacements are
//! scaled by the *target's* displacement unit.
//!
//! **Completion and borrows.** `put` and `get` are locally complete when they return: the
//! origin buffer may be reused (put) or read (get) at once, so they borrow it only for the
//! call. Remote completion of a put — the data being visible to other processes — comes with
//! the epoch's synchronization (`flush`, `unlock`, `complete`, `fence`). Request-based calls
//! (`rput`, `rget`, `raccumulate`, `rget_accumulate`, in `request`) return a [`Request`]
//! that keeps the buffers borrowed until it is waited for. Derived layouts (`*_layout`)
//! are checked block by block against the origin buffer and the target window. A
//! zero-count operation is a no-op on every flavor after its rank and epoch checks.

pub(crate) mod accumulate;
mod direct;
pub(crate) mod memhandle;
pub(crate) mod notify;
mod outbox;
mod request;
mod served;
mod untyped;

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::layout::{check_match, pieces, Layout};
use crate::progress::{Step, SyncOp};
use crate::transport::{self, combine, ring, Route};
use crate::win::core::{Flags, HandleFlags, WinCore};
use crate::win::RawWindow;

pub(crate) use outbox::WinGate;

/// Bytes of put and accumulate data a window holds for deferred epochs; beyond it an
/// operation waits for the pending synchronizations instead (its data then goes straight to
/// the target). 8 MiB: several 1 MiB epochs can queue behind a late peer (seed 004's
/// scenarios), and the copies exist only while epochs are pending.
pub(crate) const DEFERRED_BUDGET: usize = 8 << 20;

/// A put queued behind pending synchronizations, with its own copy of the data.
struct DeferredPut {
    target: usize,
    disp: usize,
    data: Vec<u8>,
    /// The thread that issued it (its flush of thread scope completes it).
    issuer: crate::progress::ThreadTag,
    /// The issuing handle's flags (the order its puts keep).
    flags: Flags,
}

impl SyncOp<WinCore> for DeferredPut {
    fn name(&self) -> &'static str {
        "a deferred put"
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        // Relaxed: a budget, not a synchronization; only this window's calls and engine
        // touch it.
        core.deferred_bytes
            .fetch_sub(self.data.len(), Ordering::Relaxed);
        // Located again now: a dynamic window's regions may have changed since the call
        // (the call already reported any error it could see then).
        let at = core.locate("put", self.target, self.disp, self.data.len())?;
        core.ring_gate(self.target)?;
        core.post_deferred_put(at.route, &self.data, self.issuer, self.flags)?;
        core.recycle_copy(std::mem::take(&mut self.data));
        Ok(Step::Done)
    }
}

impl WinCore {
    /// Put: inlined fast path, everything else out of line.
    #[inline(always)]
    pub(crate) fn put_bytes(
        &self,
        src: &[u8],
        target: usize,
        disp: usize,
        flags: &HandleFlags,
    ) -> Result<()> {
        if self.put_direct(src, target, disp) {
            return Ok(());
        }
        self.put_bytes_slow(src, target, disp, flags.get())
    }

    /// The fast path of [`WinCore::put_bytes`]: done when the target's memory is mapped
    /// here and checked in this epoch; `false`, nothing done, otherwise.
    #[inline(always)]
    pub(crate) fn put_direct(&self, src: &[u8], target: usize, disp: usize) -> bool {
        let Some((dst, _)) = self.direct_fast(target, disp, src.len()) else {
            return false;
        };
        // SAFETY: dst..dst+len lies inside the window segment (bounds checked above), which
        // outlives self; src is a distinct Rust slice.
        unsafe { transport::shm::copy_bytes(src.as_ptr(), dst, src.len()) };
        self.epoch.note_rma();
        true
    }

    #[inline(never)]
    fn put_bytes_slow(&self, src: &[u8], target: usize, disp: usize, flags: Flags) -> Result<()> {
        if self.may_defer(target, src.len()) {
            return self.defer_put(src, target, disp, flags).map(drop);
        }
        match self.resolve("put", target, disp, src.len()) {
            Ok(at) => {
                self.settle_near_before(at.route)?;
                self.put_routed(at.route, src, target, flags)
            }
            Err(e) => self.across_regions("put", e, target, (disp, src.len(), 1), |piece, at| {
                // As above: a piece in this node's memory lands after the accumulates
                // in flight to it.
                self.settle_near_before(at.route)?;
                self.put_routed(at.route, &src[piece], target, flags)
            }),
        }
    }

    /// Writes `src` where `route` (resolved and checked for `target`) leads, issued as
    /// every put is: through the request ring or the staging buffer where they apply, else
    /// posted (complete by the window's next completion point). Inlined: out of line, the
    /// call cost a message-rate job on a `create` window 10-15% (same-run A/B).
    #[inline]
    pub(crate) fn put_routed(
        &self,
        route: Route,
        src: &[u8],
        target: usize,
        flags: Flags,
    ) -> Result<()> {
        if let Route::Cma { addr, .. } = route {
            if let Some(rings) = self.ring_toward(target, src.len(), flags) {
                let req = ring::Request::put(addr, src.len());
                return self.ring_post(rings, target, &req, src, flags);
            }
        }
        match route {
            Route::Cma { pid, addr } if src.len() <= combine::STAGE_MAX_PUT => {
                self.ring_gate_for(target, flags)?;
                self.stage_put(pid, addr, src, flags)?
            }
            route => {
                self.ring_gate_for(target, flags)?;
                if let Route::Net(to) = route {
                    let to = *to;
                    if !flags.keeps_rma_order() {
                        if crate::transport::network::put_over_wire(src.len(), to)?
                            && self.put_as_atomics(route, src, flags)?
                        {
                            return Ok(());
                        }
                        if src.len() >= crate::transport::network::LONG_PUT_MIN
                            && !flags.order()
                            && self.put_long(route, src, to, flags)?
                        {
                            return Ok(());
                        }
                    }
                }
                // A put that is not staged would overtake the staged ones; only
                // `mpi_win_order` promises it will not (two puts to the same bytes in one
                // epoch are otherwise conflicting, and which lands last unspecified).
                if flags.order() {
                    if self.put_as_atomics(route, src, flags)? {
                        return Ok(());
                    }
                    self.drain_before_op(flags)?;
                }
                self.posting(flags, || route.post_write(src))?;
                self.note_issued(route);
            }
        }
        self.epoch.note_rma();
        Ok(())
    }

    /// A long put to another node as messages of our own where our connection reaches
    /// the target ([`network::post_long_put`]): from `src`, landed in place, complete when
    /// answered — counted as the window's network writes, as an RMA write is. False when
    /// it cannot go so (nothing done).
    ///
    /// [`network::post_long_put`]: crate::transport::network::post_long_put
    #[inline(never)]
    fn put_long(
        &self,
        route: Route,
        src: &[u8],
        to: crate::transport::network::Remote,
        flags: Flags,
    ) -> Result<bool> {
        if !self.posting(flags, || crate::transport::network::post_long_put(src, to))? {
            return Ok(false);
        }
        self.note_issued(route);
        self.epoch.note_rma();
        Ok(true)
    }

    /// A put to another node issued as atomic writes where they keep order with the
    /// endpoint's other atomics ([`network::post_write_atomic`]): an ordered put
    /// (`mpi_win_order`) and an accumulate after it (a flag) are in flight together, where
    /// an RMA write would have to complete first; and a short put to a target the wire
    /// reaches completes in the wire's round trip ([`network::put_over_wire`]). False when the
    /// put cannot go so (nothing done).
    ///
    /// [`network::put_over_wire`]: crate::transport::network::put_over_wire
    /// [`network::post_write_atomic`]: crate::transport::network::post_write_atomic
    #[inline(never)]
    pub(crate) fn put_as_atomics(&self, route: Route, src: &[u8], flags: Flags) -> Result<bool> {
        use crate::transport::network;
        let Route::Net(to) = route else {
            return Ok(false);
        };
        let to = *to;
        if !network::atomic_put_fits(src.len(), to)? {
            return Ok(false);
        }
        self.drain_before_atomic(flags, || true)?;
        self.posting(flags, || network::post_write_atomic(src, to))?;
        // Left in flight: the next flush completes it.
        self.epoch.forget_flush_cache();
        self.epoch.note_rma();
        Ok(true)
    }

    /// Posts a deferred put's `data` to where `route` leads as the put would have gone when
    /// issued (`put_routed`): across nodes over our wire where it carries puts — as atomic
    /// writes or a long put —, else through the route; counted as `issuer`'s. Through the
    /// provider, a deferred 8-byte put behind a lock took a round trip more than the same
    /// put issued directly (its own connection, read by the poller's look). Puts that keep
    /// the provider's order of RMA writes, or `mpi_win_order`'s, stay RMA writes.
    fn post_deferred_put(
        &self,
        route: Route,
        data: &[u8],
        issuer: u64,
        flags: Flags,
    ) -> Result<()> {
        use crate::transport::network;
        if let (Route::Net(to), false, false) = (route, flags.keeps_rma_order(), flags.order()) {
            let to = *to;
            if network::put_over_wire(data.len(), to)? && network::atomic_put_fits(data.len(), to)?
            {
                self.posting_for(issuer, || network::post_write_atomic(data, to))?;
                // Left in flight: the next flush completes it.
                self.epoch.forget_flush_cache();
                return Ok(());
            }
            if data.len() >= network::LONG_PUT_MIN
                && self.posting_for(issuer, || network::post_long_put(data, to))?
            {
                self.note_issued(route);
                return Ok(());
            }
        }
        self.posting_for(issuer, || route.post_write(data))?;
        self.note_issued(route);
        Ok(())
    }

    /// A put behind a pending synchronization ([Zounmevo14] §VII): checked now (errors are
    /// the caller's), its data copied (the call is locally complete), and written when the
    /// engine reaches it — after the synchronizations before it, before those after it.
    /// Returns its ticket (`None`: it ran at once), complete once the data is at the target.
    pub(crate) fn defer_put(
        &self,
        src: &[u8],
        target: usize,
        disp: usize,
        flags: Flags,
    ) -> Result<Option<crate::progress::Ticket>> {
        self.resolve_ungated("put", target, disp, src.len())?;
        // Staged puts were issued earlier: they must not land after this one.
        self.drain_staged()?;
        // Relaxed: see DeferredPut::poll.
        self.deferred_bytes.fetch_add(src.len(), Ordering::Relaxed);
        self.epoch.note_rma();
        let op = DeferredPut {
            target,
            disp,
            data: self.copy_of(src),
            issuer: crate::progress::thread_tag(),
            flags,
        };
        let order = self.epoch.access_order(target);
        self.engine.start_ordered(self, op, order)
    }

    /// A copy of `src` for a deferred put, in a buffer of an earlier one if one is spare
    /// (a fresh megabyte costs its page faults, as much as the copy itself).
    fn copy_of(&self, src: &[u8]) -> Vec<u8> {
        let spare = self
            .spare_copies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let mut data = spare.unwrap_or_default();
        data.clear();
        data.extend_from_slice(src);
        data
    }

    /// Keeps the buffer of a deferred put that has landed for the next one (a few, up to
    /// the deferred budget in all).
    fn recycle_copy(&self, data: Vec<u8>) {
        let mut spare = self
            .spare_copies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let held: usize = spare.iter().map(Vec::capacity).sum();
        if spare.len() < 8 && held + data.capacity() <= DEFERRED_BUDGET {
            spare.push(data);
        }
    }

    /// True when an operation of `bytes` toward `target` behind pending synchronizations is
    /// deferred (its data copied) rather than waiting for them: a pending synchronization
    /// holds it back (see [`WinCore::gated`]), and the window's budget of deferred bytes has
    /// room.
    pub(crate) fn may_defer(&self, target: usize, bytes: usize) -> bool {
        // Relaxed: see DeferredPut::poll.
        self.deferred_bytes
            .load(Ordering::Relaxed)
            .saturating_add(bytes)
            <= DEFERRED_BUDGET
            && self.gated(target)
    }

    /// Get: inlined fast path, everything else out of line.
    #[inline(always)]
    pub(crate) fn get_bytes(
        &self,
        dst: &mut [u8],
        target: usize,
        disp: usize,
        flags: &HandleFlags,
    ) -> Result<()> {
        if self.get_direct(dst, target, disp) {
            return Ok(());
        }
        self.get_bytes_slow(dst, target, disp, flags.get())
    }

    /// The fast path of [`WinCore::get_bytes`] (see [`WinCore::put_direct`]).
    #[inline(always)]
    pub(crate) fn get_direct(&self, dst: &mut [u8], target: usize, disp: usize) -> bool {
        let Some((src, _)) = self.direct_fast(target, disp, dst.len()) else {
            return false;
        };
        // SAFETY: as in put_direct, the other way.
        unsafe { transport::shm::copy_bytes(src, dst.as_mut_ptr(), dst.len()) };
        self.epoch.note_rma();
        true
    }

    #[inline(never)]
    fn get_bytes_slow(
        &self,
        dst: &mut [u8],
        target: usize,
        disp: usize,
        flags: Flags,
    ) -> Result<()> {
        match self.resolve("get", target, disp, dst.len()) {
            Ok(at) => self.get_routed(at.route, dst, target, flags),
            Err(e) => self.across_regions("get", e, target, (disp, dst.len(), 1), |piece, at| {
                self.get_routed(at.route, &mut dst[piece], target, flags)
            }),
        }
    }

    /// Reads into `dst` from where `route` (resolved and checked for `target`) leads.
    fn get_routed(&self, route: Route, dst: &mut [u8], target: usize, flags: Flags) -> Result<()> {
        if let Route::Cma { addr, .. } = route {
            if let Some(rings) = self.ring_toward(target, dst.len(), flags) {
                let req = ring::Request::get(addr, dst.len());
                return self.ring_call(rings, target, &req, &[], dst, flags);
            }
        }
        self.ring_gate_for(target, flags)?;
        // Staged puts go first: they reach memory in issue order.
        self.drain_before_op(flags)?;
        self.settle_near_before(route)?;
        route.read(dst)?;
        self.epoch.note_rma();
        Ok(())
    }
}

impl RawWindow {
    /// The element-typed form of [`Window::put_shared`].
    pub(crate) fn put_shared_elems<T: Pod + Send + Sync>(
        &self,
        src: &std::sync::Arc<[T]>,
        target: usize,
        disp: usize,
    ) -> Result<()> {
        let owner: std::sync::Arc<dyn Send + Sync> =
            std::sync::Arc::new(std::sync::Arc::clone(src));
        self.core.put_shared_bytes(
            bytemuck::cast_slice(&src[..]),
            owner,
            target,
            disp,
            &self.flags,
            crate::transport::write_end::WriteEnd::Delivered,
        )
    }
}

/// The copies of a transfer with derived layouts: (origin byte offset, target byte offset,
/// length) for the bytes `origin_layout` selects in a buffer of `origin_len` elements going,
/// in order, to those `target_layout` selects. Errors unless the origin layout stays inside
/// its buffer and both select as many bytes.
pub(crate) fn copy_list<T: Pod>(
    op: &'static str,
    origin_layout: &Layout<T>,
    origin_len: usize,
    target_layout: &Layout<T>,
) -> Result<Vec<(usize, usize, usize)>> {
    check_within(op, origin_layout, origin_len)?;
    check_match(op, origin_layout.bytes(), target_layout.bytes())?;
    Ok(pieces([origin_layout.blocks(), target_layout.blocks()])
        .map(|([o, t], len)| (o, t, len))
        .collect())
}

/// Error unless every block of `layout` stays inside a buffer of `len` elements.
pub(crate) fn check_within<T: Pod>(op: &'static str, layout: &Layout<T>, len: usize) -> Result<()> {
    let bytes = std::mem::size_of::<T>().saturating_mul(len);
    if layout.fits_in(bytes) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{op}: the layout reaches byte {} of a {bytes}-byte buffer",
            layout.end()
        )))
    }
}

impl RawWindow {
    /// The element-typed form of [`Window::put_layout`].
    pub(crate) fn put_layout_elems<T: Pod>(
        &self,
        origin: &[T],
        origin_layout: &Layout<T>,
        target: usize,
        disp: usize,
        target_layout: &Layout<T>,
    ) -> Result<()> {
        let list = copy_list("put", origin_layout, origin.len(), target_layout)?;
        let base = self
            .core
            .resolve_layout("put", target, disp, target_layout)?;
        self.core.ring_gate_for(target, self.flags.get())?;
        self.core.drain_before_op(self.flags.get())?;
        self.core.settle_near_before(base.route)?;
        self.core.posting(self.flags.get(), || {
            base.route
                .post_write_pieces(bytemuck::cast_slice(origin), &list)
        })?;
        self.core.note_issued(base.route);
        self.core.epoch.note_rma();
        Ok(())
    }

    /// The element-typed form of [`Window::get_layout`].
    pub(crate) fn get_layout_elems<T: Pod>(
        &self,
        origin: &mut [T],
        origin_layout: &Layout<T>,
        target: usize,
        disp: usize,
        target_layout: &Layout<T>,
    ) -> Result<()> {
        let list = copy_list("get", origin_layout, origin.len(), target_layout)?;
        let base = self
            .core
            .resolve_layout("get", target, disp, target_layout)?;
        self.core.ring_gate_for(target, self.flags.get())?;
        self.core.drain_before_op(self.flags.get())?;
        self.core.settle_near_before(base.route)?;
        base.route
            .read_pieces(bytemuck::cast_slice_mut(origin), &list)?;
        self.core.epoch.note_rma();
        Ok(())
    }
}
