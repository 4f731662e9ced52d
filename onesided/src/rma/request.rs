//! Request-based RMA: `rput`, `rget`, `raccumulate`, `rget_accumulate` (MPI-4.1 §12.3.6).
//!
//! A [`Request`] (the one completion type, `crate::request`) holds the borrows of the buffers its operation uses — and of the window —
//! until it is waited for (or tested complete, or awaited): the origin buffer of `rput`
//! cannot be changed, and the buffer `rget` fills cannot be read, before completion. The
//! request completes *locally*, like MPI's; remote completion comes with `flush` or
//! `unlock`. MPI allows request-based operations only in passive-target epochs, and so
//! does onesided.
//!
//! Node-local transports move the data before the call returns, so the requests they hand
//! out are usually complete at once. Behind a deferred epoch ([Zounmevo14]: the lock of an
//! `ilock` still pending) every request form still returns at once: `rput` and
//! `raccumulate` copy their origin data (as `put` and `accumulate` do), and `rget` and
//! `rget_accumulate` queue a read whose request completes when the epoch has activated and
//! the read ran — its bytes reach the caller's buffer when `wait`/`test`/`.await` sees
//! that (see `crate::request`).
//!
//! **Remote-completing requests** (`rrput`, `rraccumulate`, `rrget_accumulate`; seed 000
//! §5.2): their request completes only when the data is *at the target*, so a signal may
//! follow without a flush — also on windows whose small puts are otherwise staged (an
//! `rrput` is never staged; the calling thread's staged puts go out before it). Behind a
//! deferred epoch the request completes when the queued operation has run.
//!
//! ```compile_fail
//! # use onesided::{Assert, Window};
//! # let world = onesided::init()?.world().clone();
//! # let win = Window::<u64>::allocate(&world, 4)?;
//! # win.lock_all(Assert::NONE)?;
//! let mut buf = [0u64; 4];
//! let req = win.rget(&mut buf, 1, 0)?;
//! println!("{}", buf[0]); // error: `buf` is still borrowed by the request
//! req.wait()?;
//! # Ok::<(), onesided::Error>(())
//! ```

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::{AccElement, Op};
use crate::progress::{Step, SyncOp, Ticket};
use crate::request::{Delivery, Request};
use crate::win::core::{Flags, WinCore};
use crate::win::RawWindow;

/// An `rget` behind a pending synchronization: reads when the engine reaches it.
struct DeferredGet {
    target: usize,
    disp: usize,
    len: usize,
    slot: Delivery,
}

impl SyncOp<WinCore> for DeferredGet {
    fn name(&self) -> &'static str {
        "a deferred get"
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        let at = core.locate("rget", self.target, self.disp, self.len)?;
        core.ring_gate(self.target)?;
        let mut bytes = vec![0u8; self.len];
        at.route.read(&mut bytes)?;
        *lock(&self.slot) = Some(bytes);
        Ok(Step::Done)
    }
}

/// An `rget_accumulate` behind a pending synchronization, with its own copy of the origin.
struct DeferredGetAccumulate<E> {
    target: usize,
    disp: usize,
    origin: Vec<E>,
    op: Op,
    slot: Delivery,
    /// The flags of the handle it was issued through.
    flags: Flags,
}

impl<E: AccElement + Send> SyncOp<WinCore> for DeferredGetAccumulate<E> {
    fn name(&self) -> &'static str {
        "a deferred get_accumulate"
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        let bytes = std::mem::size_of_val(&self.origin[..]);
        let loc = core.locate("rget_accumulate", self.target, self.disp, bytes)?;
        let mut result = vec![E::zeroed(); self.origin.len()];
        core.acc_run(
            self.target,
            loc,
            &self.origin,
            self.op,
            Some(&mut result),
            self.flags,
        )?;
        *lock(&self.slot) = Some(bytemuck::cast_slice(&result).to_vec());
        Ok(Step::Done)
    }
}

fn lock(slot: &Delivery) -> std::sync::MutexGuard<'_, Option<Vec<u8>>> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl WinCore {
    /// Queues the deferred read `op` (already checked) and hands out its request.
    fn queue_read<'a, O: SyncOp<WinCore>>(
        &'a self,
        target: usize,
        op: O,
        dst: &'a mut [u8],
        slot: Delivery,
    ) -> Result<Request<'a>> {
        // Staged puts were issued earlier: they land before this read.
        self.drain_staged()?;
        self.epoch.note_rma();
        let order = self.epoch.access_order(target);
        let ticket: Option<Ticket> = self.engine.start_ordered(self, op, order)?;
        Ok(match ticket {
            Some(t) => Request::deferred_read(self, t, dst, slot),
            None => {
                // Everything pending completed meanwhile and the read ran inline.
                if let Some(bytes) = lock(&slot).take() {
                    dst.copy_from_slice(&bytes);
                }
                Request::done()
            }
        })
    }
}

impl RawWindow {
    /// [`RawWindow::rrput`] with byte layouts (`MPIX_Rrput` with derived datatypes): the
    /// request completes once every byte is in `target`'s memory (here: on return).
    pub fn rrput_layout(
        &self,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        target: usize,
        disp: usize,
        target_layout: &Layout<u8>,
    ) -> Result<Request<'static>> {
        self.require_passive("rrput", target)?;
        self.put_layout(origin, origin_layout, target, disp, target_layout)?;
        // Pieces posted to the network land before the request completes; nothing of a
        // layout put goes through a request ring.
        self.core.complete_net()?;
        // As a flush: our stores are ordered before any later load or store of ours.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(Request::done())
    }

    /// [`RawWindow::rraccumulate`] with byte layouts (`MPIX_Rraccumulate` with derived
    /// datatypes): the request completes once every update is done at `target`.
    #[allow(clippy::too_many_arguments)]
    pub fn rraccumulate_layout(
        &self,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        ty: crate::ops::ElemType,
        target: usize,
        disp: usize,
        target_layout: &Layout<u8>,
        op: Op,
    ) -> Result<Request<'static>> {
        self.require_passive("rraccumulate", target)?;
        self.accumulate_layout(origin, origin_layout, ty, target, disp, target_layout, op)?;
        self.core.ring_gate_for(target, self.flags.get())?;
        self.core.complete_net()?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(Request::done())
    }

    /// Error unless a passive-target epoch of this process includes `target` — what the
    /// request-based calls (`MPI_Rput` & co.) require.
    pub fn require_passive(&self, op: &'static str, target: usize) -> Result<()> {
        self.core.check_rank(target)?;
        if self.core.epoch.in_passive_epoch(target) {
            Ok(())
        } else {
            Err(Error::RequestOutsidePassiveEpoch { op, target })
        }
    }
}

impl RawWindow {
    /// The element-typed form of [`Window::rput`].
    pub(crate) fn rput_elems<'a, T: Pod>(
        &'a self,
        origin: &'a [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'a>> {
        self.require_passive("rput", target)?;
        self.put(bytemuck::cast_slice(origin), target, disp)?;
        Ok(Request::done())
    }

    /// The element-typed form of [`Window::rget`].
    pub(crate) fn rget_elems<'a, T: Pod>(
        &'a self,
        origin: &'a mut [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'a>> {
        self.require_passive("rget", target)?;
        let len = std::mem::size_of_val(origin);
        if self.core.gated(target) {
            self.core.resolve_ungated("rget", target, disp, len)?;
            let slot = Delivery::default();
            let op = DeferredGet {
                target,
                disp,
                len,
                slot: slot.clone(),
            };
            let dst: &'a mut [u8] = bytemuck::cast_slice_mut(origin);
            return self.core.queue_read(target, op, dst, slot);
        }
        self.get(bytemuck::cast_slice_mut(origin), target, disp)?;
        Ok(Request::done())
    }
}

impl RawWindow {
    /// The element-typed form of [`Window::rrput`].
    pub(crate) fn rrput_elems<'a, T: Pod>(
        &'a self,
        origin: &'a [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'a>> {
        self.require_passive("rrput", target)?;
        let bytes: &[u8] = bytemuck::cast_slice(origin);
        if self.core.may_defer(target, bytes.len()) {
            let ticket = self.core.defer_put(bytes, target, disp, self.flags.get())?;
            return Ok(Request::started(&self.core, ticket));
        }
        let at = self.core.resolve("rrput", target, disp, bytes.len())?;
        // This thread's staged puts were issued first; with mpi_win_order and process
        // scope, every thread's.
        self.core.ring_gate_for(target, self.flags.get())?;
        self.core.drain_before_op(self.flags.get())?;
        at.route.write(bytes)?;
        self.core.epoch.note_rma();
        // As a flush: our stores are ordered before any later load or store of ours.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(Request::done())
    }
}

impl RawWindow {
    /// The element-typed form of [`Window::rraccumulate`].
    pub(crate) fn rraccumulate_elems<'a, T: AccElement>(
        &'a self,
        origin: &'a [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        self.require_passive("rraccumulate", target)?;
        crate::rma::accumulate::check_op("rraccumulate", op, T::TYPE, false)?;
        if self.core.may_defer(target, std::mem::size_of_val(origin)) {
            let ticket =
                self.core
                    .defer_accumulate(origin, target, disp, op, self.flags.get(), true)?;
            return Ok(Request::started(&self.core, ticket));
        }
        // Accumulates are never staged.
        self.accumulate_elems(origin, target, disp, op)?;
        // An update handed to the target's ring is done once the ring is empty; one
        // posted to the network, once the endpoint's counters say so.
        self.core.ring_gate_for(target, self.flags.get())?;
        self.core.complete_net()?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(Request::done())
    }

    /// The element-typed form of [`Window::rrget_accumulate`].
    pub(crate) fn rrget_accumulate_elems<'a, T: AccElement>(
        &'a self,
        origin: &'a [T],
        result: &'a mut [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        // A get_accumulate completes at the target before its result exists, so the
        // request-based form already completes remotely; the fence orders it like a flush.
        let req = self.rget_accumulate_elems(origin, result, target, disp, op)?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(req)
    }

    /// The element-typed form of [`Window::raccumulate`].
    pub(crate) fn raccumulate_elems<'a, T: AccElement>(
        &'a self,
        origin: &'a [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        self.require_passive("raccumulate", target)?;
        self.accumulate_elems(origin, target, disp, op)?;
        Ok(Request::done())
    }

    /// The element-typed form of [`Window::rget_accumulate`].
    pub(crate) fn rget_accumulate_elems<'a, T: AccElement>(
        &'a self,
        origin: &'a [T],
        result: &'a mut [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        self.require_passive("rget_accumulate", target)?;
        if self.core.gated(target) && origin.len() == result.len() {
            crate::rma::accumulate::check_op("rget_accumulate", op, T::TYPE, true)?;
            let len = std::mem::size_of_val(origin);
            self.core
                .resolve_ungated("rget_accumulate", target, disp, len)?;
            let slot = Delivery::default();
            let deferred = DeferredGetAccumulate {
                target,
                disp,
                origin: origin.to_vec(),
                op,
                slot: slot.clone(),
                flags: self.flags.get(),
            };
            let dst: &'a mut [u8] = bytemuck::cast_slice_mut(result);
            return self.core.queue_read(target, deferred, dst, slot);
        }
        // (Mismatched lengths are reported by get_accumulate.)
        self.get_accumulate_elems(origin, result, target, disp, op)?;
        Ok(Request::done())
    }
}
