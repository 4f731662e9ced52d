//! The outbox: what this process issued that has not taken effect at its targets yet, per
//! route, and the one place that completes it.
//!
//! Every operation leaves through one of these routes (picked in `rma`, `rma::served` and
//! `rma::accumulate`), and each route keeps its own issued/completed counts:
//!
//! | route | issued | completed |
//! |---|---|---|
//! | load/store or CPU atomics on mapped memory | complete when the call returns | — |
//! | cross-memory attach (`process_vm_*`) | complete when the call returns | — |
//! | staged small puts (`transport::combine`) | a piece in the calling thread's lane | the lane written (`nonempty` counts lanes not yet written) |
//! | request ring (`transport::ring`) | the ring's `tail`, per target | the ring's `served`, per target (the target or a take-back executes in order) |
//! | network (`transport::network`, windows across nodes) | a put or non-fetching accumulate posted (the network's `posted` count; short data copied, long data waited for) | the network's completion counts (libfabric: `FI_DELIVERY_COMPLETE` counters; the socket network: answered messages per connection): [`WinCore::complete_net`] |
//! | deferred behind a pending epoch (`progress`) | an op in the window's engine queue | the op done — it then took one of the routes above |
//!
//! **Completion points.** A call that closes or flushes epochs does not drain anything
//! itself: its op declares what it completes (`progress::Completes`: one target, or all)
//! and the engine calls [`WinCore::complete_issued`] (one load when nothing is staged and
//! the window has no rings) right before the op's first poll. The ops before it in the queue
//! have run by then — a deferred accumulate handed to a ring only when its epoch activated
//! is in the ring's `tail` — so the closing call never completes before what it closes.
//! Flushes that complete inline (nothing queued) complete here too
//! ([`WinCore::drain_for_flush`]), with the thread scope of `mpi_win_scope=thread`.
//!
//! **Ordering gates.** Before an operation that does not go through a target's ring
//! touches its memory, the ring's requests run ([`WinCore::ring_gate`]); before an
//! operation overtakes staged puts, they are written ([`WinCore::drain_before_op`]) — the
//! calling thread's, or with `mpi_win_order` and process scope every thread's.
//!
//! Gets across nodes wait for the reads in flight (the read counter), long puts for their
//! own delivery (a tracked queue entry), fetching atomics for everything the endpoint has
//! in flight (its flush). Every network post forgets the
//! window's flush cache, so that the inlined flush takes the path that completes it.
//! Ordering on the network: the provider delivers one endpoint's operations to a peer in
//! order where it says so (`FI_ORDER_RAW | FI_ORDER_WAW`: tcp;ofi_rxm, shm); where it does
//! not, accumulates wait for their own completion and `mpi_win_order` completes what is in
//! flight before each operation.

use crate::error::Result;
use crate::progress::Completes;
use crate::transport::ring::Rings;
use crate::win::core::{Flags, HandleFlags, WinCore};

impl WinCore {
    /// Completes at their targets the operations issued so far that `scope` covers: the
    /// one routine behind every completion point ([`crate::progress::Host::complete_issued`],
    /// called by the engine right before a closing op's first poll).
    #[inline]
    pub(crate) fn complete_issued(&self, scope: Completes) -> Result<()> {
        if self.nothing_in_flight() {
            return Ok(());
        }
        self.complete_issued_slow(scope)
    }

    /// Nothing staged and no rings on a window of one node (mapped memory everywhere):
    /// every route completed its operations before they returned — one load on the unlock
    /// fast path.
    #[inline(always)]
    pub(crate) fn nothing_in_flight(&self) -> bool {
        self.rings.is_none() && !self.staged.any_staged() && self.plane().is_mapped()
    }

    /// Completes at their targets the network operations this process issued (a window
    /// across nodes; nothing otherwise). The endpoint's flush covers every window's
    /// operations: it completes more than asked, never less.
    #[inline]
    pub(crate) fn complete_net(&self) -> Result<()> {
        if let Some(plane) = &self.net {
            let issued = self.net_writes.issued();
            plane.quiet()?;
            self.net_writes.covered(issued);
        }
        Ok(())
    }

    /// After a write was issued on `route`: one left in flight on the network makes the
    /// next flush take the path that completes it (the inlined flush only fences), and
    /// counts as a write a release must not overtake ([`WinCore::net_writes_pending`]).
    #[inline]
    pub(crate) fn note_issued(&self, route: crate::transport::Route) {
        if let crate::transport::Route::Net(_) = route {
            self.net_writes.far.issue();
            self.epoch.forget_flush_cache();
        }
    }

    /// True when a network write of this window may still be in flight: one issued after
    /// the start of the last completion of the endpoint. (The provider may deliver an
    /// atomic before an RMA write issued earlier; it keeps atomics in order among
    /// themselves — `Nic::orders_atomics`.)
    pub(crate) fn net_writes_pending(&self) -> bool {
        self.net_writes.far.pending()
    }

    /// [`WinCore::complete_net`] for what `target` needs: a target on another node, every
    /// network operation; one on this node, only when a network operation to this node's
    /// ranks may be in flight — an unlock of a rank of this node does not wait for the
    /// network's round trips to other nodes.
    #[inline]
    fn complete_net_for(&self, target: usize) -> Result<()> {
        if self.net.is_some()
            && self.net_toward(target).is_none()
            && !self.net_writes.near.pending()
        {
            // Nothing to wait for, but a program may poll with this flush (a flag read
            // with fetch_and_op and flushed, in a loop): its peers' operations on it
            // must still complete when no progress thread reads the endpoint.
            crate::attention::serve_if_unserved();
            return Ok(());
        }
        self.complete_net()
    }

    /// Runs `post`, which posts network operations through a handle with `flags`: with
    /// `mpi_win_scope=thread` each gets its own completion, so that the thread's flush
    /// waits for its own only (`ofi::track_own`).
    #[inline]
    pub(crate) fn posting<R>(&self, flags: Flags, post: impl FnOnce() -> R) -> R {
        if flags.thread_scope() && self.net.is_some() {
            return crate::transport::network::track_own(post);
        }
        post()
    }

    /// Runs `post`, which posts network operations that thread `issuer` deferred (the
    /// engine runs them, maybe on another thread): they count as `issuer`'s for its flushes
    /// of thread scope (`ofi::post_for`).
    #[inline]
    pub(crate) fn posting_for<R>(&self, issuer: u64, post: impl FnOnce() -> R) -> R {
        if self.net.is_some() {
            return crate::transport::network::post_for(issuer, post);
        }
        post()
    }

    /// Before an operation that `mpi_win_order` orders after those in flight: where the
    /// provider does not deliver in order, everything issued through the network is
    /// completed first.
    #[inline]
    fn order_net(&self, flags: Flags) -> Result<()> {
        if flags.order() && self.net.is_some() && !crate::transport::network::ordered()? {
            return self.complete_net();
        }
        Ok(())
    }

    /// [`WinCore::complete_issued`] when something may be outstanding.
    #[inline(never)]
    fn complete_issued_slow(&self, scope: Completes) -> Result<()> {
        match scope {
            Completes::Nothing => Ok(()),
            // Staged puts are kept per thread, not per target: all of them go.
            Completes::Target(t) => {
                self.staged.drain_all()?;
                self.ring_gate(t)?;
                self.complete_net_for(t)
            }
            Completes::All => {
                self.drain_staged()?;
                self.complete_net()
            }
        }
    }

    /// Completes everything issued to every target: every thread's staged puts written,
    /// every ring request executed (`Completes::All`; also what a deferred operation that
    /// must follow staged puts waits for).
    #[inline]
    pub(crate) fn drain_staged(&self) -> Result<()> {
        self.staged.drain_all()?;
        self.complete_rings()
    }

    /// Writes the staged puts a flush through a handle with `flags` must complete: the
    /// calling thread's with `mpi_win_scope=thread`, else every thread's; completes the
    /// network operations that `target` needs (a flush of a rank of this node does not wait
    /// for round trips to other nodes), every one for a flush of all (`None`).
    #[inline]
    pub(crate) fn drain_for_flush(&self, flags: Flags, target: Option<usize>) -> Result<()> {
        if flags.thread_scope() {
            // Other threads' pieces stay staged; the caller did not set the flush cache
            // (check_flush_uncached), so the next flush — maybe of process scope, through a
            // duplicate — still takes the path that drains them.
            self.staged.drain_own()?;
            // Requests in rings run in order: up to our own last one (other threads' from
            // before it included, none from after it).
            self.complete_own_rings()?;
            // Through the network: this thread's operations, each with its own completion
            // (`posting`), not every thread's.
            if self.net.is_some() {
                let near_only = target.is_some_and(|t| self.net_toward(t).is_none());
                if !near_only || self.net_writes.near.pending() {
                    crate::transport::network::complete_own()?;
                }
                self.epoch.forget_flush_cache();
                return Ok(());
            }
        } else {
            self.staged.drain_all()?;
            self.complete_rings()?;
        }
        match target {
            Some(t) => {
                self.complete_net_for(t)?;
                // Operations to other nodes may still be in flight (puts and accumulates):
                // the flush cache, set by this flush's check, must not let the next flush
                // skip them.
                if self.net.is_some() {
                    self.epoch.forget_flush_cache();
                }
                Ok(())
            }
            None => self.complete_net(),
        }
    }

    /// Writes the staged puts that must land before an operation (get, accumulate,
    /// fetch_and_op, compare_and_swap, a put not staged) reaches its target: always the
    /// calling thread's own (its operations reach memory in its issue order); with
    /// `mpi_win_order` and process scope also every other thread's, so an operation that
    /// happens after another thread's put (the application ordered the two threads) lands
    /// after it (seed 000 §2.2).
    #[inline]
    pub(crate) fn drain_before_op(&self, flags: Flags) -> Result<()> {
        self.drain_staged_before(flags)?;
        self.order_net(flags)
    }

    /// [`WinCore::drain_before_op`] before an operation that goes through the network as a
    /// provider atomic when `through_network()` says so (a put issued as atomic writes, an
    /// accumulate or atomic; asked only of ordered handles): where the provider delivers
    /// one endpoint's atomics to a peer in order (`FI_ORDER_ATOMIC_RAW/WAW`) and no RMA
    /// write of this window is in flight, the atomics before it are not completed first —
    /// they land before it all the same. Everything else as `drain_before_op`.
    #[inline]
    pub(crate) fn drain_before_atomic(
        &self,
        flags: Flags,
        through_network: impl FnOnce() -> bool,
    ) -> Result<()> {
        if flags.order() && through_network() && self.atomics_keep_order()? {
            return self.drain_staged_before(flags);
        }
        self.drain_before_op(flags)
    }

    /// Before an atomic that goes `through_network`: this window's network writes still in
    /// flight complete first where the network may deliver the atomic before them (the
    /// wire's atomics travel beside the provider's writes; `tcp;ofi_rxm` does not order an
    /// atomic after a write). So an accumulate lands after the puts its origin issued
    /// before it, as on one node: MPI leaves a put and an accumulate to one location in one
    /// epoch undefined, but a deferred epoch promises issue order.
    #[inline]
    pub(crate) fn settle_writes_before_atomic(
        &self,
        through_network: impl FnOnce() -> bool,
    ) -> Result<()> {
        if self.net_writes_pending() && !crate::transport::network::ordered()? && through_network()
        {
            return self.complete_net();
        }
        Ok(())
    }

    /// Before a read or write of memory on this node (`route` not the network's): the
    /// accumulates to this node's ranks that a window across nodes sent through the
    /// network complete first (issuing one forgets the access cache, so the next operation
    /// takes the slow path that calls this). A get or put touches memory directly and
    /// would overtake them, where on one node it would not: ARMCI's location consistency
    /// (one origin's put, accumulate, then get of one location, each with `flush_local`)
    /// relies on it.
    #[inline]
    pub(crate) fn settle_near_before(&self, route: crate::transport::Route) -> Result<()> {
        if self.net.is_some()
            && !matches!(route, crate::transport::Route::Net(_))
            && self.net_writes.near.pending()
        {
            return self.complete_net();
        }
        Ok(())
    }

    /// True when the operations in flight on the network that an atomic must not overtake
    /// are all atomics of a provider that keeps them in order: no RMA write of this window
    /// since the last completion (`net_writes.far`; reads are waited for).
    pub(crate) fn atomics_keep_order(&self) -> Result<bool> {
        Ok(self.net.is_some()
            && crate::transport::network::orders_atomics()?
            && !self.net_writes.far.pending())
    }

    /// The staged puts an operation through a handle with `flags` waits for (see
    /// [`WinCore::drain_before_op`]).
    #[inline]
    fn drain_staged_before(&self, flags: Flags) -> Result<()> {
        if flags.order() && !flags.thread_scope() {
            self.staged.drain_all()
        } else {
            self.staged.drain_own()
        }
    }

    /// The full ring gate: before an operation toward `target` that does not go through its
    /// ring touches its memory, every request to it already in the ring is executed (for
    /// operations the engine runs, maybe on another thread than the one that issued them).
    #[inline]
    pub(crate) fn ring_gate(&self, target: usize) -> Result<()> {
        match &self.rings {
            Some(rings) if rings.outstanding(target) => self
                .with_fallback(target, |fb| rings.complete_all_to(target, fb))
                .unwrap_or(Ok(())),
            _ => Ok(()),
        }
    }

    /// The ring gate of an operation the calling thread issues through a handle with
    /// `flags`: its own earlier requests to `target` are executed first (its operations
    /// reach memory in its issue order); with `mpi_win_order` and process scope every
    /// thread's (see [`WinCore::drain_before_op`]). Other threads' requests may still be
    /// in the ring otherwise: operations of concurrent threads are unordered.
    #[inline]
    pub(crate) fn ring_gate_for(&self, target: usize, flags: Flags) -> Result<()> {
        match &self.rings {
            Some(rings) if rings.outstanding(target) => {
                if flags.order() && !flags.thread_scope() {
                    return self.ring_gate(target);
                }
                self.with_fallback(target, |fb| rings.complete_own(target, fb))
                    .unwrap_or(Ok(()))
            }
            _ => Ok(()),
        }
    }

    /// Every request this process posted to any target is executed when this returns
    /// (every completion point: flush, unlock, fence, complete).
    #[inline]
    pub(crate) fn complete_rings(&self) -> Result<()> {
        match &self.rings {
            Some(rings) => self.complete_rings_slow(rings),
            None => Ok(()),
        }
    }

    #[inline(never)]
    fn complete_rings_slow(&self, rings: &Rings) -> Result<()> {
        // The fallbacks borrow closures per target: complete each target in its own scope.
        let mut result = Ok(());
        rings.complete_everything(|target| {
            if let Some(Err(e)) = self.with_fallback(target, |fb| rings.complete_all_to(target, fb))
            {
                result = Err(e);
            }
        });
        result
    }

    /// The calling thread's requests in rings are executed when this returns, and other
    /// threads' later ones need not be (a flush with `mpi_win_scope=thread`).
    pub(crate) fn complete_own_rings(&self) -> Result<()> {
        let Some(rings) = &self.rings else {
            return Ok(());
        };
        let mut result = Ok(());
        for target in rings.own_targets() {
            if let Some(Err(e)) = self.with_fallback(target, |fb| rings.complete_own(target, fb)) {
                result = Err(e);
            }
        }
        result
    }
}

/// A second place for a delivery ([`WinCore::deliver_flagged`]): `disp` of the target in
/// the window of `core`, taken when the target's word `word_disp` (of the delivering
/// window) holds at least `at_least` as the block arrives; `words` are stored then.
#[derive(Clone, Copy)]
pub(crate) struct WinGate<'a> {
    pub word_disp: usize,
    pub at_least: u64,
    pub core: &'a WinCore,
    pub disp: usize,
    pub words: &'a [u64],
}

impl WinCore {
    /// [`WinCore::put_bytes`] of bytes that `owner` owns and keeps unchanged while it lives
    /// ([`Window::put_shared`]): to another node they go out from where they are, neither
    /// copied nor waited for, `owner` held until the write completes as `end` says; every
    /// other route puts them as `put_bytes` does.
    pub(crate) fn put_shared_bytes(
        &self,
        src: &[u8],
        owner: std::sync::Arc<dyn Send + Sync>,
        target: usize,
        disp: usize,
        flags: &HandleFlags,
        end: crate::transport::write_end::WriteEnd,
    ) -> Result<()> {
        if !self.may_defer(target, src.len()) {
            let route = self.resolve("put", target, disp, src.len())?.route;
            if let crate::transport::Route::Net(to) = route {
                let flags = flags.get();
                self.ring_gate_for(target, flags)?;
                if flags.order() {
                    self.drain_before_op(flags)?;
                }
                let to = *to;
                // SAFETY: `owner` keeps `src` alive and unchanged (the caller's contract,
                // which `Window::put_shared` keeps through an `Arc<[T]>` of plain data).
                self.posting(flags, || unsafe {
                    crate::transport::network::post_write_shared(src, to, owner, end)
                })?;
                self.note_issued(route);
                self.epoch.note_rma();
                return Ok(());
            }
        }
        self.put_bytes(src, target, disp, flags)
    }

    /// Writes `src` at `disp` of `target` and then stores `words` from `flag_disp` on
    /// (Release) in one message that nobody answers, where `target` lives on another node
    /// that the wire reaches: true when sent, false (nothing sent) elsewhere — the caller
    /// then puts them its own way. With `gate`, the target writes `src` to the gate's
    /// place and stores the gate's words instead when its gate word holds enough as the
    /// block arrives (`wire::Gate`). The caller's protocol hands the block's bytes at the
    /// target (both places) to this message alone and learns of its delivery from the
    /// target (which acquires the first word); no flush counts it. Whether it is sent
    /// depends on the target and the block's length only. For the library's own signal
    /// windows.
    pub(crate) fn deliver_flagged(
        &self,
        src: &[u8],
        target: usize,
        disp: usize,
        words: &[u64],
        flag_disp: usize,
        gate: Option<WinGate<'_>>,
    ) -> Result<bool> {
        // Never deferred: whether a delivery goes this way must not change from one call to
        // the next (a flag sent another way could overtake it and be overwritten by it).
        use crate::transport::network::{DeliverGate, Remote};
        use crate::transport::Route;
        let remote = |core: &WinCore, disp: usize, len: usize| -> Result<Option<Remote>> {
            Ok(match core.resolve("put", target, disp, len)?.route {
                Route::Net(to) => Some(*to),
                _ => None,
            })
        };
        if let (Some(to), Some(flag)) = (
            remote(self, disp, src.len())?,
            remote(self, flag_disp, 8 * words.len())?,
        ) {
            let gate = match gate {
                Some(g) => match (
                    remote(self, g.word_disp, 8)?,
                    remote(g.core, g.disp, src.len())?,
                ) {
                    (Some(word), Some(at)) => Some(DeliverGate {
                        word,
                        at_least: g.at_least,
                        to: at,
                        words: g.words,
                    }),
                    _ => None,
                },
                None => None,
            };
            if crate::transport::network::deliver(src, to, words, flag, gate)? {
                self.epoch.note_rma();
                return Ok(true);
            }
        }
        Ok(false)
    }
}
