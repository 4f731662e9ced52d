//! accumulate, get_accumulate, fetch_and_op, compare_and_swap (MPI-4.1 §12.3.4–12.3.5).
//!
//! **Protocol per location.** An element of type `E` is updated with one CPU atomic
//! (`ops`) when its memory is mapped by every process that can reach it (windows
//! from `allocate`/`allocate_shared`, `create` over `alloc_mem`, dynamic regions from
//! `alloc_mem`), it is aligned, and the window's `mpi_accumulate_granularity` is at most
//! `size_of::<E>()` (0, the default, included). Otherwise — memory reached by cross-memory
//! attach, misaligned elements, or a coarser requested granularity — the update holds one of
//! 64 lock stripes in the target's control block, chosen by the location's granule
//! (`granularity` bytes, or 64 bytes by default), while it reads, combines and writes back
//! the elements of that granule. The choice depends only on the location and the element
//! type, so every process — the owner included — uses the same protocol for the same
//! element: concurrent single- and multi-element operations of one type on one location
//! are element-wise atomic, whichever synchronization mode each process uses.
//!
//! A multi-element operation on such memory takes every stripe of a chunk (up to
//! `ops::ACC_CHUNK` bytes) at once, in ascending stripe order
//! (`ops::stripes_for`), and moves the chunk with one read and one write: on memory
//! reached by cross-memory attach that is two system calls per chunk instead of two per
//! 64-byte granule. Holders of several stripes
//! take them in one global order and holders of one never wait while holding it, so
//! stripes never deadlock.
//!
//! **Whole operations.** MPI promises atomicity per basic element only, but the MPI-3
//! linked-list example — and MPICH's tests of it — replace a 16-byte `{rank, displacement}`
//! pointer with an `MPI_BYTE` accumulate while others read it with `get_accumulate(no_op)`,
//! and follow what they read: a torn pointer names memory its rank never attached. MPICH and
//! Open MPI make each operation atomic as a whole, so such programs run there. Here a
//! contiguous run of several elements and at most [`WHOLE_OP_MAX`] bytes, where CPU or
//! network atomics update its elements, also holds the lock stripes of its
//! [`WHOLE_OP_MAX`]-byte granules while it runs: such runs are atomic as a whole against each
//! other (a single element needs nothing; the stripe-locked protocol already moves a chunk
//! under all its stripes). Longer runs stay element-wise: atomic as a whole, they would hold
//! every other accumulate to the target back. The 8-byte single-element path is unchanged.
//!
//! **Across nodes.** Elements CPU atomics can update go through the network's atomics
//! (`net::atomics`) wherever they lie. The others (complex numbers, `long double`, the
//! MINLOC/MAXLOC pairs) keep the stripe protocol, with every stripe of the window taken
//! through its control plane ([`CtrlWord::Stripe`]: a network compare-and-swap, answered at
//! once for this node's words where the network's atomics mix with the CPU's) and the
//! elements read and written through their route, complete at the target before the stripe
//! is released. To a rank of another node that the wire reaches, a chunk is instead one
//! message that the target applies under the stripes it takes itself, never waiting for one
//! ([`WinCore::acc_striped`]); short runs atomic as a whole go the same way. No request ring
//! serves accumulates there: its server would take the stripes with CPU atomics, which
//! network atomics that do not mix with them would not see.
//!
//! **Hints.** `mpi_accumulate_granularity` selects the protocol as above (coarser granules
//! trade per-element atomics for one lock per granule). Operations complete before the call
//! returns, in issue order, so every `accumulate_ordering` is honoured at no cost, and
//! `accumulate_ops=same_op` leaves nothing faster to choose: on coherent shared memory each
//! operation already takes the cheapest atomic that is correct with concurrent `no_op`.

use std::sync::atomic::Ordering;

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::layout::{check_match, pieces, Layout};
use crate::ops::{acc_chunk, lock_stripes, stripes_for, AccElement, ElemType, Op, WHOLE_OP_MAX};
use crate::plane::{Awaited, ControlPlane, CtrlWord};
use crate::rma::check_within;
use crate::rma::direct::Noting;
use crate::transport::ring::Request;
use crate::transport::{Located, Route};
use crate::win::control::ACC_STRIPES;
use crate::win::core::{Flags, WinCore};
use crate::win::RawWindow;

/// Bytes per lock stripe when the window sets no granularity.
pub(crate) const DEFAULT_GRANULE: usize = 64;

pub(crate) fn check_op(call: &'static str, op: Op, ty: ElemType, fetching: bool) -> Result<()> {
    if op.valid_for(ty) && (fetching || op != Op::NoOp) {
        Ok(())
    } else {
        Err(Error::InvalidOp {
            call,
            op: op.name(),
            ty: ty.name(),
        })
    }
}

/// Error unless every block of `layout` is whole elements of `T` (element-wise atomicity).
fn check_whole_elements<T: AccElement>(call: &'static str, layout: &Layout<T>) -> Result<()> {
    if layout.splits_into(std::mem::size_of::<T>()) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{call}: layout blocks must be whole {}-element runs",
            T::TYPE.name()
        )))
    }
}

/// Error unless `layout` is whole elements and stays inside a buffer of `buffer` elements.
fn check_layout<T: AccElement>(
    call: &'static str,
    layout: &Layout<T>,
    buffer: usize,
) -> Result<()> {
    check_whole_elements(call, layout)?;
    check_within(call, layout, buffer)
}

/// An accumulate queued behind pending synchronizations ([Zounmevo14] §VII), with its own
/// copy of the origin data; it is applied when the engine reaches it, in issue order with
/// the other deferred operations (so `accumulate_ordering` holds).
struct DeferredAccumulate<E> {
    target: usize,
    disp: usize,
    data: Vec<E>,
    op: Op,
    /// The flags of the handle it was issued through.
    flags: Flags,
    /// Remote-completing (`rraccumulate`): its request completes only when the update is
    /// in the target's memory, not when it was handed to the target's request ring.
    remote: bool,
    /// The thread that issued it (its flush of thread scope completes it).
    issuer: crate::progress::ThreadTag,
    /// It travels in its epoch's message (`progress::shipping`): nothing to issue here.
    shipped: bool,
}

impl<E: AccElement + Send> crate::progress::SyncOp<WinCore> for DeferredAccumulate<E> {
    /// An update of a lock epoch toward another node can travel in the epoch's message
    /// when the wire carries it as one request: not remote-completing (its own request
    /// waits for it), not asked to be the provider's own (`intrinsic`), an operation that
    /// changes the target, on elements the CPU updates atomically.
    fn ship_role(&self, _core: &WinCore) -> crate::progress::shipping::ShipRole {
        use crate::progress::shipping::ShipRole;
        if self.remote
            || self.shipped
            || self.op == Op::NoOp
            || !E::CPU_ATOMIC
            || self.flags.intrinsic()
        {
            return ShipRole::Other;
        }
        ShipRole::Update
    }

    /// Its request for the epoch's message: the target's memory as the network reaches it
    /// (a rank on another node), encoded for the wire.
    fn ship_request(&self, core: &WinCore) -> Option<Vec<u8>> {
        let bytes: &[u8] = bytemuck::cast_slice(&self.data);
        let loc = core
            .locate("accumulate", self.target, self.disp, bytes.len())
            .ok()?;
        let Route::Net(to) = loc.route else {
            return None;
        };
        let (addr, key) = (to.addr, to.key);
        let mut encoded = Vec::with_capacity(bytes.len() + 32);
        crate::transport::network::encode_accumulate(
            &mut encoded,
            self.op,
            E::TYPE,
            self.data.len(),
            (addr, key),
            bytes,
        )
        .ok()?;
        Some(encoded)
    }

    fn ship(&mut self, _core: &WinCore, _payload: Option<Vec<u8>>) -> bool {
        self.shipped = true;
        true
    }

    fn poll(&mut self, core: &WinCore) -> Result<crate::progress::Step> {
        let bytes = std::mem::size_of_val(&self.data[..]);
        // Relaxed: see rma::DeferredPut.
        core.deferred_bytes.fetch_sub(bytes, Ordering::Relaxed);
        if self.shipped {
            // Complete with its epoch's unlock, which sends it.
            return Ok(crate::progress::Step::Done);
        }
        let loc = core.locate("accumulate", self.target, self.disp, bytes)?;
        core.posting_for(self.issuer, || {
            core.acc_run(self.target, loc, &self.data, self.op, None, self.flags)
        })?;
        if self.remote {
            core.ring_gate(self.target)?;
            core.complete_net()?;
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        Ok(crate::progress::Step::Done)
    }
}

impl WinCore {
    /// An accumulate behind a pending synchronization: checked now, its data copied (the
    /// call is locally complete), applied when the engine reaches it. Returns its ticket
    /// (`None`: it ran at once).
    pub(crate) fn defer_accumulate<E: AccElement + Send>(
        &self,
        origin: &[E],
        target: usize,
        disp: usize,
        op: Op,
        flags: Flags,
        remote: bool,
    ) -> Result<Option<crate::progress::Ticket>> {
        let bytes = std::mem::size_of_val(origin);
        self.resolve_ungated("accumulate", target, disp, bytes)?;
        // Staged puts were issued earlier: they must not land after this update.
        self.drain_staged()?;
        // Relaxed: see rma::DeferredPut.
        self.deferred_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.epoch.note_rma();
        let op = DeferredAccumulate {
            target,
            disp,
            data: origin.to_vec(),
            op,
            flags,
            remote,
            issuer: crate::progress::thread_tag(),
            shipped: false,
        };
        let order = self.epoch.access_order(target);
        self.engine.start_ordered(self, op, order)
    }

    /// Granule in bytes for `size`-byte elements; 0 means "element-wise CPU atomics".
    #[inline(always)]
    pub(crate) fn granule(&self, size: usize) -> usize {
        // The hint only coarsens synchronization: a cap keeps the rounding below from
        // overflowing for absurd values and fits the 32 bits a ring request carries it in.
        // Relaxed: set by set_info, a collective this window's caller made before.
        let g = self
            .acc_granularity
            .load(std::sync::atomic::Ordering::Relaxed)
            .min(crate::transport::ring::MAX_GRANULE);
        if g <= size {
            0
        } else {
            g.next_multiple_of(size)
        }
    }

    /// The lock-stripe granule of an accumulate of `E` that is not element-wise CPU
    /// atomics (a request through the target's ring, or the origin's own read and write
    /// under the stripes): the window's hint, else [`DEFAULT_GRANULE`], whole elements.
    pub(crate) fn acc_granule<E: AccElement>(&self) -> usize {
        let size = std::mem::size_of::<E>();
        match self.granule(size) {
            0 => DEFAULT_GRANULE.next_multiple_of(size),
            g => g,
        }
    }

    /// True when an accumulate or atomic of `E` at `loc` goes through the network's
    /// atomics ([`WinCore::net_atomic_at`]), not CPU atomics or a fallback.
    #[inline]
    fn through_net_atomics<E: AccElement>(&self, target: usize, loc: &Located) -> bool {
        if E::CPU_ATOMIC && !self.elementwise::<E>(loc) {
            return self.net_atomic_at(target, loc).is_some();
        }
        false
    }

    /// Where the network's atomics update `loc`, on a window across nodes: another node's
    /// memory, and this node's too when CPU atomics cannot do the update (misaligned
    /// elements) — never lock stripes, which only this node sees.
    fn net_atomic_at(
        &self,
        target: usize,
        loc: &Located,
    ) -> Option<crate::transport::network::Remote> {
        match loc.route {
            Route::Net(to) => Some(*to),
            // `key`: the byte offset in the target's window memory (allocate and create
            // windows; a rank of this node, reached directly or by cross-memory attach).
            Route::Direct(_) | Route::Cma { .. } => match self.net_data.get(target) {
                Some(base) => Some(crate::transport::network::Remote {
                    addr: base.addr + loc.key as u64,
                    ..base
                }),
                // Dynamic windows: `key` is the address at the target.
                None if self.flavor == crate::win::Flavor::Dynamic => {
                    self.dynamic_net_remote(target, loc.key)
                }
                None => None,
            },
        }
    }

    /// The element at `loc` is updated with a CPU atomic (see the module docs).
    #[inline(always)]
    fn elementwise<E: AccElement>(&self, loc: &Located) -> bool {
        E::CPU_ATOMIC
            && loc.shared
            && self.granule(std::mem::size_of::<E>()) == 0
            && matches!(loc.route, Route::Direct(p) if p as usize % std::mem::align_of::<E>() == 0)
    }

    /// The fast path of every accumulate: an aligned location in memory every process
    /// maps, with element-wise atomics, already checked in this epoch.
    #[inline(always)]
    pub(crate) fn atomic_fast<E: AccElement>(
        &self,
        target: usize,
        disp: usize,
        count: usize,
    ) -> Option<*mut E> {
        if !E::CPU_ATOMIC {
            return None;
        }
        let size = std::mem::size_of::<E>();
        let (p, shared) = self.direct_fast(target, disp, count * size)?;
        if !(shared && self.granule(size) == 0 && p as usize % std::mem::align_of::<E>() == 0) {
            return None;
        }
        self.plain_gate.before_atomic();
        Some(p.cast::<E>())
    }

    /// Applies `op` with `origin` to the elements at `base` (of `target`'s window memory,
    /// aligned, reached by element-wise atomics) with plain loads and stores, when the run
    /// is long, this process holds an exclusive lock on `target` and no other thread of it
    /// issues atomics on the window ([`crate::plain_acc`]): true when done, false (nothing
    /// done) otherwise. The previous values go to `out` if given.
    #[inline]
    pub(crate) fn plain_accumulate<E: AccElement>(
        &self,
        target: usize,
        base: *mut E,
        origin: &[E],
        out: Option<&mut [E]>,
        op: Op,
    ) -> bool {
        std::mem::size_of_val(origin) >= crate::plain_acc::PLAIN_MIN_BYTES
            && self.epoch.exclusive_to(target)
            && self.plain_gate.run_plain(|| {
                // SAFETY: the caller's run of window memory; under an exclusive lock on its
                // process, and with the gate keeping this process's other threads out,
                // nothing else accesses it meanwhile (module docs of plain_acc).
                unsafe { crate::plain_acc::plain_run(base, origin, out, op) }
            })
    }

    /// The error of an operation that a window asserting `mpi_assert_accumulate_intrinsic`
    /// may not issue: `loc` is not updated with element-wise CPU atomics.
    #[cold]
    fn not_intrinsic<E: AccElement>(&self, target: usize, loc: &Located) -> Error {
        let network = self.net.is_some();
        let reason = if network {
            "the network provider has no native atomic for this operation and type"
        } else if !loc.shared {
            "its memory is reached by a system call (cross-memory attach)"
        } else if self.granule(std::mem::size_of::<E>()) != 0 {
            "mpi_accumulate_granularity is coarser than the element"
        } else {
            "the element is not aligned"
        };
        Error::NotIntrinsic {
            call: "accumulate",
            target,
            reason,
        }
    }

    /// Whether every target's window memory is updated by CPU atomics for `size`-byte
    /// elements (see [`Window::op_intrinsic`]).
    fn intrinsic_everywhere(&self, size: usize) -> bool {
        use crate::win::core::Targets;
        // Across nodes every update CPU atomics cannot do goes through the network's
        // atomics (`op_intrinsic` asks the provider about each operation).
        if self.net.is_some() {
            return self.granule(size) == 0 && !matches!(self.targets, Targets::Dynamic);
        }
        self.granule(size) == 0
            && match &self.targets {
                // allocate / allocate_shared: one mapped segment.
                Targets::Symmetric { .. } => true,
                Targets::Table(t) => t.iter().all(|r| r.shared || r.bytes == 0),
                // Spans nodes (answered above with the network plane).
                Targets::Spread(_) => false,
                // Regions come and go, each with its own kind of memory.
                Targets::Dynamic => false,
            }
    }

    /// Takes lock stripes `stripes` of `target` (see [`lock_stripes`]): with CPU atomics
    /// on this node's blocks, or through the window's control plane on a window across
    /// nodes ([`PlaneStripes`]).
    fn lock_target_stripes<'a, S: Iterator<Item = usize> + Clone + 'a>(
        &'a self,
        target: usize,
        stripes: S,
    ) -> Result<impl Sized + 'a> {
        if self.net.is_some() {
            return self
                .lock_plane_stripes(target, stripes)
                .map(TargetStripes::Plane);
        }
        lock_stripes(
            stripes.map(move |stripe| self.ctrl.stripe(target, stripe % ACC_STRIPES)),
            &|| self.comm.aborted(),
            target,
        )
        .map(TargetStripes::Mapped)
    }

    /// The stripes that make a run of `count` elements of `size` bytes at `loc` atomic as a
    /// whole: taken for runs of several elements and at most [`WHOLE_OP_MAX`] bytes where
    /// CPU or network atomics update the elements (the stripe-locked path takes a chunk's
    /// stripes itself), keyed by the run's [`WHOLE_OP_MAX`]-byte granules.
    #[inline]
    fn lock_whole_op(
        &self,
        target: usize,
        loc: &Located,
        count: usize,
        size: usize,
    ) -> Result<Option<impl Sized + '_>> {
        let Some((first, last)) = whole_op_granules(loc, count, size) else {
            return Ok(None);
        };
        self.lock_target_stripes(target, stripes_for(first, last, ACC_STRIPES))
            .map(Some)
    }

    /// The window's network plane where an update under `target`'s lock stripes at `loc`
    /// goes as one message ([`WinCore::acc_striped`]): `target` on another node, reached
    /// by the wire.
    fn striped_toward(
        &self,
        target: usize,
        loc: &Located,
    ) -> Option<(
        &dyn crate::win::net_control::NetControl,
        crate::transport::network::Remote,
    )> {
        let Route::Net(remote) = loc.route else {
            return None;
        };
        self.net_toward(target)
            .filter(|net| net.ships_epochs(target))
            .map(|net| (net, *remote))
    }

    /// [`WinCore::lock_target_stripes`] through the control plane: each stripe taken with
    /// a compare-and-swap from free (0) to held (1), in the order of `stripes` (the one
    /// order every holder of several stripes takes them in, as [`lock_stripes`]).
    #[cold]
    fn lock_plane_stripes(
        &self,
        target: usize,
        stripes: impl Iterator<Item = usize>,
    ) -> Result<PlaneStripes<'_>> {
        let plane = self.plane();
        let mut held = PlaneStripes {
            core: self,
            target,
            held: Vec::new(),
        };
        for index in stripes.map(|stripe| stripe % ACC_STRIPES) {
            let word = CtrlWord::Stripe { at: target, index };
            let mut backoff = if held.held.is_empty() {
                Backoff::new()
            } else {
                Backoff::holding_a_lock()
            };
            let mut hang = crate::diag::HangClock::new();
            // Acquire: the previous holder's element updates are visible to this one.
            while Awaited::from(plane.compare_swap(word, 0, 1, Ordering::Acquire)).wait(&plane)?
                != 0
            {
                if self.comm.aborted() {
                    return Err(Error::JobAborted);
                }
                hang.tick(|| crate::ops::stripe_wait(target, held.held.len()));
                backoff.snooze();
            }
            held.held.push(index);
        }
        Ok(held)
    }

    /// Applies `op` with `origin` to consecutive elements at `loc` (of `target`), storing
    /// the previous values in `result` if given.
    pub(crate) fn acc_run<E: AccElement>(
        &self,
        target: usize,
        loc: Located,
        origin: &[E],
        op: Op,
        mut result: Option<&mut [E]>,
        flags: Flags,
    ) -> Result<()> {
        let size = std::mem::size_of::<E>();
        self.settle_writes_before_atomic(|| self.through_net_atomics::<E>(target, &loc))?;
        // Staged puts go first: they reach memory in issue order.
        self.drain_before_atomic(flags, || self.through_net_atomics::<E>(target, &loc))?;
        if self.elementwise::<E>(&loc) {
            let Route::Direct(base) = loc.route else {
                unreachable!("element-wise atomics only on mapped memory")
            };
            // Short runs of several elements are atomic as a whole (module docs).
            let _whole = self.lock_whole_op(target, &loc, origin.len(), size)?;
            self.plain_gate.before_atomic();
            if self.plain_accumulate(target, base.cast::<E>(), origin, result.as_deref_mut(), op) {
                return Ok(());
            }
            // SAFETY: a bounds-checked, aligned run of mapped window memory that every
            // process accesses atomically (module docs); `result` has origin's length.
            unsafe { crate::ops::apply_run(base.cast::<E>(), origin, result, op) };
            return Ok(());
        }
        let bytes = std::mem::size_of_val(origin);
        // Through the network: intrinsic where the provider has the operation natively
        // (no lock, no emulation), not through the element-wise fallback.
        // Elements no CPU atomic updates (complex, long double, the MINLOC pairs) take the
        // stripe-locked path below on every window, through the control plane across nodes.
        if let Some(at) = E::CPU_ATOMIC
            .then(|| self.net_atomic_at(target, &loc))
            .flatten()
        {
            let kind = match result {
                Some(_) => crate::transport::network::AtomicKind::Fetch,
                None => crate::transport::network::AtomicKind::Write,
            };
            if flags.intrinsic() && !crate::net::atomics::native(kind, Some(op), E::TYPE)? {
                return Err(self.not_intrinsic::<E>(target, &loc));
            }
            if let Some(granules) = whole_op_granules(&loc, origin.len(), size) {
                if let Some((net, remote)) = self.striped_toward(target, &loc) {
                    let stripes = Some(granules);
                    return self
                        .acc_striped(net, target, &loc, remote, origin, op, result, stripes);
                }
                let _whole = self.lock_whole_op(target, &loc, origin.len(), size)?;
                // Complete at the target before the stripes are released.
                return crate::net::atomics::accumulate(op, origin, result, at);
            }
            return match result {
                Some(_) => crate::net::atomics::accumulate(op, origin, result, at),
                None => {
                    self.posting(flags, || {
                        crate::net::atomics::issue_accumulate(op, origin, at)
                    })?;
                    // Maybe left in flight: the next flush completes it, and an unlock of a
                    // rank of this node waits for it (`WinCore::complete_net_for`).
                    if !matches!(loc.route, Route::Net(_)) {
                        self.net_writes.near.issue();
                        // A later get or put of this node touches memory directly: send
                        // it down the path that lets this accumulate land first
                        // (`WinCore::settle_near_before`).
                        self.epoch.forget_access_cache();
                    }
                    self.epoch.forget_flush_cache();
                    Ok(())
                }
            };
        }
        if flags.intrinsic() {
            return Err(self.not_intrinsic::<E>(target, &loc));
        }
        // Not on a window across nodes: a ring's server takes the stripes with CPU atomics,
        // the origins there through the control plane (`lock_target_stripes`).
        if let (Route::Cma { addr, .. }, None) = (loc.route, &self.net) {
            if let Some(rings) = self.ring_toward(target, bytes, flags) {
                let req = Request::accumulate(
                    E::TYPE,
                    op,
                    (addr, loc.key),
                    bytes,
                    self.acc_granule::<E>(),
                    result.is_some(),
                );
                let operand = bytemuck::cast_slice(origin);
                return match result {
                    Some(out) => {
                        let out: &mut [u8] = bytemuck::cast_slice_mut(out);
                        self.ring_call(rings, target, &req, operand, out, flags)
                    }
                    None => self.ring_post(rings, target, &req, operand, flags),
                };
            }
        }
        if let Some((net, remote)) = self.striped_toward(target, &loc) {
            return self.acc_striped(net, target, &loc, remote, origin, op, result, None);
        }
        self.ring_gate_for(target, flags)?;
        let granule = self.acc_granule::<E>();
        let mut current: Vec<E> = Vec::new();
        let mut i = 0;
        while i < origin.len() {
            // Elements i..j in one read and one write, under the stripes of every granule
            // their first bytes fall in (keyed as single-element operations key them).
            let (j, first, last) = acc_chunk(loc.key, i, origin.len(), size, granule);
            let here = loc.route.offset(i * size);
            current.clear();
            current.resize(j - i, E::zeroed());
            let _stripes =
                self.lock_target_stripes(target, stripes_for(first, last, ACC_STRIPES))?;
            here.read(bytemuck::cast_slice_mut(&mut current))?;
            if let Some(out) = result.as_deref_mut() {
                out[i..j].copy_from_slice(&current);
            }
            if op != Op::NoOp {
                for (c, &v) in current.iter_mut().zip(&origin[i..j]) {
                    *c = E::combine(op, *c, v);
                }
                here.write(bytemuck::cast_slice(&current))?;
            }
            i = j;
        }
        Ok(())
    }

    /// [`WinCore::acc_run`]'s stripe-locked update of a rank on another node that the wire
    /// reaches, one message per chunk (`NetPlane::striped`): the target takes the chunk's
    /// stripes, applies the update, releases them and answers — one round trip, where
    /// taking the stripes through the control plane, reading, writing and releasing take
    /// three. A stripe held by another update (the target never waits for one) sends the
    /// chunk again after a backoff; the stripes, their order and the chunks are the ones
    /// every other process takes for these elements. With `whole` (the granules of a short
    /// run that is atomic as a whole: [`whole_op_granules`]) the run is one chunk under
    /// those granules' stripes, its elements updated with the target's CPU atomics.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn acc_striped<E: AccElement>(
        &self,
        net: &dyn crate::win::net_control::NetControl,
        target: usize,
        loc: &Located,
        remote: crate::transport::network::Remote,
        origin: &[E],
        op: Op,
        mut result: Option<&mut [E]>,
        whole: Option<(usize, usize)>,
    ) -> Result<()> {
        if op == Op::NoOp && result.is_none() {
            return Ok(());
        }
        // The network's writes to the target may be in flight on another path than the
        // wire's: they land first, as they would before the stripe-locked read.
        self.settle_writes_before_atomic(|| true)?;
        let size = std::mem::size_of::<E>();
        let granule = self.acc_granule::<E>();
        let mut payload = Vec::new();
        let mut i = 0;
        while i < origin.len() {
            let (j, first, last) = match whole {
                Some((first, last)) => (origin.len(), first, last),
                None => acc_chunk(loc.key, i, origin.len(), size, granule),
            };
            payload.clear();
            crate::transport::network::encode_striped(
                &mut payload,
                result.is_some(),
                op,
                E::TYPE,
                j - i,
                (remote.addr + (i * size) as u64, remote.key),
                bytemuck::cast_slice(&origin[i..j]),
            )?;
            let out: &mut [u8] = match result.as_deref_mut() {
                Some(r) => bytemuck::cast_slice_mut(&mut r[i..j]),
                None => &mut [],
            };
            let mut backoff = Backoff::new();
            let mut hang = crate::diag::HangClock::new();
            while !net.striped(
                target,
                &mut stripes_for(first, last, ACC_STRIPES),
                &payload,
                out,
            )? {
                if self.comm.aborted() {
                    return Err(Error::JobAborted);
                }
                hang.tick(|| crate::ops::stripe_wait(target, 0));
                backoff.snooze();
            }
            i = j;
        }
        Ok(())
    }

    /// Compare-and-swap of the element at `loc`.
    pub(crate) fn cas_at<E: AccElement>(
        &self,
        target: usize,
        loc: Located,
        compare: E,
        value: E,
        flags: Flags,
    ) -> Result<E> {
        // Staged puts go first (a put, then a compare-and-swap that signals it).
        self.settle_writes_before_atomic(|| self.through_net_atomics::<E>(target, &loc))?;
        self.drain_before_atomic(flags, || self.through_net_atomics::<E>(target, &loc))?;
        if self.elementwise::<E>(&loc) {
            let Route::Direct(p) = loc.route else {
                unreachable!("element-wise atomics only on mapped memory")
            };
            self.plain_gate.before_atomic();
            // SAFETY: as in acc_run.
            return Ok(unsafe { E::compare_swap(p.cast::<E>(), compare, value) });
        }
        let size = std::mem::size_of::<E>();
        if let Some(at) = self.net_atomic_at(target, &loc) {
            let kind = crate::transport::network::AtomicKind::Compare;
            if flags.intrinsic() && !crate::net::atomics::native(kind, None, E::TYPE)? {
                return Err(self.not_intrinsic::<E>(target, &loc));
            }
            return crate::net::atomics::compare_swap(compare, value, at);
        }
        if flags.intrinsic() {
            return Err(self.not_intrinsic::<E>(target, &loc));
        }
        // As in acc_run: no ring on a window across nodes.
        if let (Route::Cma { addr, .. }, None) = (loc.route, &self.net) {
            if let Some(rings) = self.ring_toward(target, 2 * size, flags) {
                let req = Request::compare_swap(
                    E::TYPE,
                    (addr, loc.key),
                    2 * size,
                    self.acc_granule::<E>(),
                );
                let mut old = [E::zeroed()];
                self.ring_call(
                    rings,
                    target,
                    &req,
                    bytemuck::cast_slice(&[compare, value]),
                    bytemuck::cast_slice_mut(&mut old),
                    flags,
                )?;
                return Ok(old[0]);
            }
        }
        self.ring_gate_for(target, flags)?;
        let granule = match self.granule(size) {
            0 => DEFAULT_GRANULE.next_multiple_of(size),
            g => g,
        };
        let _stripe = self.lock_target_stripes(target, std::iter::once(loc.key / granule))?;
        let mut current = [E::zeroed()];
        loc.route.read(bytemuck::cast_slice_mut(&mut current))?;
        if bytemuck::bytes_of(&current[0]) == bytemuck::bytes_of(&compare) {
            loc.route.write(bytemuck::bytes_of(&value))?;
        }
        Ok(current[0])
    }
}

/// The [`WHOLE_OP_MAX`]-byte granules (first and last) of a run of `count` elements of
/// `size` bytes at `loc` that is atomic as a whole (module docs): several elements, at most
/// [`WHOLE_OP_MAX`] bytes.
#[inline]
fn whole_op_granules(loc: &Located, count: usize, size: usize) -> Option<(usize, usize)> {
    let bytes = count * size;
    (count >= 2 && bytes <= WHOLE_OP_MAX)
        .then(|| (loc.key / WHOLE_OP_MAX, (loc.key + bytes - 1) / WHOLE_OP_MAX))
}

/// Held accumulate lock stripes of a target, taken as [`WinCore::lock_target_stripes`]
/// says; released on drop.
// Its values are only held and dropped (which releases the stripes), never read.
#[allow(dead_code)]
enum TargetStripes<'a, I: Iterator<Item = &'a std::sync::atomic::AtomicU64> + Clone> {
    /// This node's words, with CPU atomics.
    Mapped(crate::ops::StripesHeld<'a, I>),
    /// Through the window's control plane.
    Plane(PlaneStripes<'a>),
}

/// Lock stripes of `target` taken through the window's control plane, on a window across
/// nodes: the target's words may be another node's, and where the network's atomics do not
/// mix with the CPU's this node's words change only through the plane too — so every
/// process takes every stripe of such a window this way. Released on drop.
struct PlaneStripes<'a> {
    core: &'a WinCore,
    target: usize,
    /// The stripes taken, in the order they were.
    held: Vec<usize>,
}

impl Drop for PlaneStripes<'_> {
    fn drop(&mut self) {
        let plane = self.core.plane();
        for &index in &self.held {
            // Release: the element updates made under the stripe — complete at the target
            // before the guard drops (`Route::write` waits for that) — are visible to its
            // next holder.
            plane.post_store(
                CtrlWord::Stripe {
                    at: self.target,
                    index,
                },
                0,
                Ordering::Release,
            );
        }
    }
}

impl RawWindow {
    /// Whether `ops` on up to `max_count` elements of `ty` are done by the origin's CPU
    /// atomics alone (MPI_Win_op_intrinsic; see [`Window::op_intrinsic`](crate::Window::op_intrinsic)).
    pub fn op_intrinsic(&self, ops: &str, ty: ElemType, max_count: usize) -> Result<bool> {
        let _ = max_count;
        for name in ops.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "cas" {
                continue;
            }
            let op = Op::ALL
                .into_iter()
                .find(|o| o.name() == name)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("op_intrinsic: unknown operation {name:?}"))
                })?;
            check_op("op_intrinsic", op, ty, true)?;
        }
        if self.core.net.is_some() {
            use crate::transport::network::AtomicKind;
            for name in ops.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let native = match Op::ALL.into_iter().find(|o| o.name() == name) {
                    Some(op) => {
                        crate::net::atomics::native(AtomicKind::Write, Some(op), ty)?
                            && crate::net::atomics::native(AtomicKind::Fetch, Some(op), ty)?
                    }
                    None => crate::net::atomics::native(AtomicKind::Compare, None, ty)?,
                };
                if !native {
                    return Ok(false);
                }
            }
        }
        Ok(self.core.intrinsic_everywhere(ty.size()))
    }

    /// The element-typed form of [`RawWindow::accumulate`] ([`Window::accumulate`](crate::Window::accumulate)): for a
    /// caller that knows the element type at compile time but holds an untyped window (a
    /// binding's dispatch on a run-time type: no byte slices, no run-time type switch).
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Op, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u64>::allocate(&world, 1)?;
    /// let raw: &onesided::RawWindow = &win;
    /// raw.lock_all(Assert::NONE)?;
    /// raw.accumulate_elems::<u64>(&[3], 0, 0, Op::Sum)?;
    /// raw.unlock_all()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    #[inline(always)]
    pub fn accumulate_elems<T: AccElement>(
        &self,
        origin: &[T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<()> {
        if self.accumulate_direct(origin, target, disp, op, Noting::Store) {
            return Ok(());
        }
        self.accumulate_slow(origin, target, disp, op)
    }

    #[inline(never)]
    fn accumulate_slow<T: AccElement>(
        &self,
        origin: &[T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<()> {
        check_op("accumulate", op, T::TYPE, false)?;
        if self.core.may_defer(target, std::mem::size_of_val(origin)) {
            return self
                .core
                .defer_accumulate(origin, target, disp, op, self.flags.get(), false)
                .map(drop);
        }
        let (size, flags) = (std::mem::size_of::<T>(), self.flags.get());
        let len = std::mem::size_of_val(origin);
        match self.core.resolve("accumulate", target, disp, len) {
            Ok(loc) => self.core.acc_run(target, loc, origin, op, None, flags)?,
            Err(e) => self.core.across_regions(
                "accumulate",
                e,
                target,
                (disp, len, size),
                |piece, loc| {
                    let elems = piece.start / size..piece.end / size;
                    self.core
                        .acc_run(target, loc, &origin[elems], op, None, flags)
                },
            )?,
        }
        self.core.epoch.note_rma();
        Ok(())
    }

    /// The element-typed form of [`Window::get_accumulate`].
    pub(crate) fn get_accumulate_elems<T: AccElement>(
        &self,
        origin: &[T],
        result: &mut [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<()> {
        check_op("get_accumulate", op, T::TYPE, true)?;
        if origin.len() != result.len() {
            return Err(Error::InvalidArgument(format!(
                "get_accumulate: {} origin elements but {} result elements",
                origin.len(),
                result.len()
            )));
        }
        let (size, flags) = (std::mem::size_of::<T>(), self.flags.get());
        let len = std::mem::size_of_val(origin);
        match self.core.resolve("get_accumulate", target, disp, len) {
            Ok(loc) => self
                .core
                .acc_run(target, loc, origin, op, Some(result), flags)?,
            Err(e) => self.core.across_regions(
                "get_accumulate",
                e,
                target,
                (disp, len, size),
                |piece, loc| {
                    let elems = piece.start / size..piece.end / size;
                    let out = Some(&mut result[elems.clone()]);
                    self.core
                        .acc_run(target, loc, &origin[elems], op, out, flags)
                },
            )?,
        }
        self.core.epoch.note_rma();
        Ok(())
    }

    /// The element-typed form of [`RawWindow::fetch_and_op`] ([`Window::fetch_and_op`](crate::Window::fetch_and_op); see
    /// [`RawWindow::accumulate_elems`]).
    #[inline(always)]
    pub fn fetch_and_op_elems<T: AccElement>(
        &self,
        value: T,
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<T> {
        if let Some(old) = self.fetch_and_op_direct(value, target, disp, op, Noting::Store) {
            return Ok(old);
        }
        self.fetch_and_op_slow(value, target, disp, op)
    }

    #[inline(never)]
    fn fetch_and_op_slow<T: AccElement>(
        &self,
        value: T,
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<T> {
        check_op("fetch_and_op", op, T::TYPE, true)?;
        let mut old = [T::zeroed()];
        let loc = self
            .core
            .resolve("fetch_and_op", target, disp, std::mem::size_of::<T>())?;
        self.core
            .acc_run(target, loc, &[value], op, Some(&mut old), self.flags.get())?;
        self.core.epoch.note_rma();
        Ok(old[0])
    }

    /// The element-typed form of [`RawWindow::compare_and_swap`]
    /// ([`Window::compare_and_swap`](crate::Window::compare_and_swap); see [`RawWindow::accumulate_elems`]).
    #[inline(always)]
    pub fn compare_and_swap_elems<T: AccElement>(
        &self,
        value: T,
        compare: T,
        target: usize,
        disp: usize,
    ) -> Result<T> {
        if let Some(old) = self.compare_and_swap_direct(value, compare, target, disp, Noting::Store)
        {
            return Ok(old);
        }
        self.compare_and_swap_slow(value, compare, target, disp)
    }

    #[inline(never)]
    fn compare_and_swap_slow<T: AccElement>(
        &self,
        value: T,
        compare: T,
        target: usize,
        disp: usize,
    ) -> Result<T> {
        if !T::TYPE.is_integer() {
            return Err(Error::InvalidOp {
                call: "compare_and_swap",
                op: "cas",
                ty: T::TYPE.name(),
            });
        }
        let loc = self
            .core
            .resolve("compare_and_swap", target, disp, std::mem::size_of::<T>())?;
        let old = self
            .core
            .cas_at(target, loc, compare, value, self.flags.get())?;
        self.core.epoch.note_rma();
        Ok(old)
    }

    /// The element-typed form of [`Window::accumulate_layout`].
    pub(crate) fn accumulate_layout_elems<T: AccElement>(
        &self,
        origin: &[T],
        origin_layout: &Layout<T>,
        target: usize,
        disp: usize,
        target_layout: &Layout<T>,
        op: Op,
    ) -> Result<()> {
        check_op("accumulate", op, T::TYPE, false)?;
        check_layout("accumulate", origin_layout, origin.len())?;
        check_whole_elements("accumulate", target_layout)?;
        check_match("accumulate", origin_layout.bytes(), target_layout.bytes())?;
        let base = self
            .core
            .resolve_layout("accumulate", target, disp, target_layout)?;
        let size = std::mem::size_of::<T>();
        for ([o, t], len) in pieces([origin_layout.blocks(), target_layout.blocks()]) {
            let run = &origin[o / size..(o + len) / size];
            self.core
                .acc_run(target, base.offset(t), run, op, None, self.flags.get())?;
        }
        self.core.epoch.note_rma();
        Ok(())
    }

    /// The element-typed form of [`Window::get_accumulate_layout`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_accumulate_layout_elems<T: AccElement>(
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
        check_op("get_accumulate", op, T::TYPE, true)?;
        check_layout("get_accumulate", origin_layout, origin.len())?;
        check_layout("get_accumulate", result_layout, result.len())?;
        check_whole_elements("get_accumulate", target_layout)?;
        check_match(
            "get_accumulate",
            origin_layout.bytes(),
            target_layout.bytes(),
        )?;
        check_match(
            "get_accumulate",
            result_layout.bytes(),
            target_layout.bytes(),
        )?;
        let base = self
            .core
            .resolve_layout("get_accumulate", target, disp, target_layout)?;
        let size = std::mem::size_of::<T>();
        for ([o, r, t], len) in pieces([
            origin_layout.blocks(),
            result_layout.blocks(),
            target_layout.blocks(),
        ]) {
            let run = &origin[o / size..(o + len) / size];
            let out = &mut result[r / size..(r + len) / size];
            self.core
                .acc_run(target, base.offset(t), run, op, Some(out), self.flags.get())?;
        }
        self.core.epoch.note_rma();
        Ok(())
    }
}
