//! Notified RMA: operations that count their arrival at the target, and a request that
//! completes when a count is reached (seed 000 §5.1; the notified-RMA proposal for MPI 5).
//!
//! **Counters.** [`Window::set_num_notify`] (collective) gives every process `n`
//! notification counters (the count may differ between processes; 0 removes them). Each is a
//! 64-bit word in shared memory at its owner, starting at 0.
//!
//! **Operations.** [`Window::put_notify`], [`Window::accumulate_notify`] and
//! [`Window::get_notify`] do what `put`, `accumulate` and `get` do, then add 1 to counter
//! `idx` of the target. They are RMA calls like the others (same epochs, same errors) plus
//! [`Error::InvalidNotification`] for an index the target does not have.
//!
//! **What a count means.** When the target sees counter `idx` reach `k` (by
//! [`Window::notify_value`], [`Window::reset_notify_value`] or a completed
//! [`Window::wait_notify`] request), the data of the `k` notified operations counted so far
//! is in its window memory and visible to its own loads: a put's bytes, an accumulate's
//! update, and for `get_notify`, the origin has read the bytes (the target may overwrite
//! them). Nothing is promised about the origin's other, un-notified operations — that
//! needs a flush. Each operation counts exactly once; operations from several origins (and
//! threads) on one counter add up.
//!
//! **Origin completion.** A notified operation is complete at the origin like its plain
//! twin: `put_notify`'s buffer may be reused when the call returns. Behind a deferred
//! epoch (seed 004) it is queued like a put and counts when it lands; `get_notify`, like
//! `get`, waits for the epoch first.
//!
//! **At the target.** [`Window::wait_notify`] returns a [`Request`] (the one completion
//! type) that completes once counter `idx` is at least `value`: it composes with
//! `wait_all`/`test_any`, other windows' requests and `.await`, which MPI 5's blocking
//! query does not. Reading or resetting a counter is allowed at any time, in or out of
//! epochs; a reset concurrent with arriving notifications loses none (it is one atomic
//! swap: each arrival is in the value returned or in the counter after it).
//!
//! ```
//! # onesided::testing::run(2, |_| {
//! use onesided::{Assert, Window};
//! let world = onesided::init()?.world().clone();
//! let win = Window::<f64>::allocate(&world, 1024)?;
//! win.set_num_notify(1)?;
//! win.lock_all(Assert::NONE)?;
//! if world.rank() == 0 {
//!     win.put_notify(&[1.0; 256], 1, 0, 0)?; // no flush: the count says it arrived
//! } else if world.rank() == 1 {
//!     win.wait_notify(0, 1)?.wait()?;
//!     let mut got = [0.0; 256];
//!     win.local_read(0, &mut got)?;
//!     assert_eq!(got, [1.0; 256]);
//! }
//! win.unlock_all()?;
//! # onesided::init()?.world().barrier()?;
//! # Ok(())
//! # });
//! ```
//!
//! **Changing the count.** `set_num_notify` is collective and synchronizing, and gives
//! fresh counters at 0; notified operations issued before it should be complete (a flush
//! or the end of their epoch): one still queued behind a deferred epoch counts on the new
//! counters (or fails if its index is gone). The counters of earlier calls stay mapped until
//! the window is freed (8 bytes each), so a call racing it from another thread reads stale
//! counters, never freed memory.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::bootstrap::Call;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::{AccElement, ElemType, Op};
use crate::plane::{Awaited, ControlPlane, CtrlWord};
use crate::progress::{Completes, Step, SyncOp};
use crate::request::Request;
use crate::shm::segment::Segment;
use crate::win::core::WinCore;
use crate::win::RawWindow;

use crate::win::notify_counters as counters;
use counters::NotifyTable;

/// The most notification counters a process may have (a bound, not a reservation: a
/// mistaken count should fail, not map gigabytes).
pub const MAX_NOTIFY: usize = 1 << 24;

impl WinCore {
    /// The table in force when it has counter `idx` of `target` (the word is then
    /// `CtrlWord::Notify { at: target, idx }`), or the error of a notified call `op`.
    fn notify_table(&self, op: &'static str, target: usize, idx: usize) -> Result<&NotifyTable> {
        self.check_rank(target)?;
        let table = self.notify.table();
        table
            .filter(|t| t.counter(target, idx).is_some())
            .ok_or_else(|| Error::InvalidNotification {
                op,
                target,
                idx,
                count: table.map_or(0, |t| t.counts[target]),
            })
    }

    /// The network side of a window's new counters (a window across nodes; `None`
    /// otherwise): this rank registers its node's `segment` of `total` bytes, and every
    /// rank learns every rank's (collective).
    fn net_counters(
        &self,
        segment: Option<&Segment>,
        total: usize,
        node: usize,
        nodes: Vec<usize>,
    ) -> Result<Option<counters::NetCounters>> {
        let (Some(net), Some(seg)) = (self.net.as_deref(), segment) else {
            return Ok(None);
        };
        let ep = crate::transport::network::endpoint()?;
        // SAFETY: the segment stays mapped as long as the table, which drops the
        // registration first; peers change its words only with atomics.
        let reg = unsafe { ep.register(seg.as_ptr(), total) };
        let mine: Vec<u64> = match &reg {
            Ok(r) => vec![1, r.key, r.remote_base],
            Err(_) => vec![0, 0, 0],
        };
        let all = self.comm.allgather_for(Call::SetNumNotify, &mine)?;
        let reg = reg?;
        if all.chunks_exact(3).any(|r| r[0] == 0) {
            return Err(Error::PeerFailed {
                call: "set_num_notify",
            });
        }
        let areas = all
            .chunks_exact(3)
            .enumerate()
            .map(|(r, w)| crate::transport::network::Remote {
                peer: net.peer(r),
                addr: w[2],
                key: w[1],
            })
            .collect();
        Ok(Some(counters::NetCounters {
            nic: ep,
            areas,
            nodes,
            node,
            _registration: reg,
        }))
    }

    /// Counts one arrival at counter `idx` of `target`, after the operation it reports.
    fn notify_arrival(&self, op: &'static str, target: usize, idx: usize) -> Result<()> {
        // Operations in flight on the network land before the arrival that reports them
        // (an arrival on this node is a CPU atomic, which nothing orders after them) —
        // unless the arrival goes to another node behind atomics only, which the provider
        // delivers in order: then what this process issued to that target lands first all
        // the same (an RMA write of the window in flight, or an operation to a rank of this
        // node through the network, is still completed first).
        let behind_atomics = self.net_toward(target).is_some()
            && !self.net_writes.near.pending()
            && self.atomics_keep_order()?;
        if !behind_atomics {
            self.complete_net()?;
        }
        // Release: the operation's stores (or reads, for get_notify) happen-before whatever
        // the target does after its Acquire load sees this increment. Data moved by
        // cross-memory attach is in the target's memory when the system call returns,
        // which precedes this store in our program order.
        self.notify_table(op, target, idx)?.post_add(
            CtrlWord::Notify { at: target, idx },
            1,
            Ordering::Release,
        );
        Ok(())
    }

    /// Queues the count of a deferred notified operation behind it (same target, same
    /// epoch: the engine runs them in order).
    fn defer_arrival(&self, op: &'static str, target: usize, idx: usize) -> Result<()> {
        let order = self.epoch.access_order(target);
        self.engine
            .start_ordered(
                self,
                DeferredArrival {
                    op,
                    target,
                    idx,
                    issuer: crate::progress::thread_tag(),
                },
                order,
            )
            .map(drop)
    }
}

/// The count of a notified put or accumulate that was queued behind a pending epoch.
struct DeferredArrival {
    op: &'static str,
    target: usize,
    idx: usize,
    /// The thread that issued it (its flush of thread scope completes it).
    issuer: crate::progress::ThreadTag,
}

impl SyncOp<WinCore> for DeferredArrival {
    fn name(&self) -> &'static str {
        "a deferred notification"
    }

    /// The notified operation ran before it (same epoch, in order) — maybe only handed to
    /// the target's request ring: it is in the target's memory before the count says so.
    fn completes(&self) -> Completes {
        Completes::Target(self.target)
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        core.posting_for(self.issuer, || {
            core.notify_arrival(self.op, self.target, self.idx)
        })?;
        Ok(Step::Done)
    }
}

impl RawWindow {
    /// Gives every process `n` notification counters, all 0, replacing earlier ones
    /// (MPI_Win_set_num_notify). Collective and synchronizing; `n` may differ between
    /// processes. Errors at every process together when one passes more than
    /// [`MAX_NOTIFY`] or cannot map the counters. See the module docs on operations still
    /// pending.
    pub fn set_num_notify(&self, n: usize) -> Result<()> {
        const FAILED: u64 = u64::MAX;
        let local = if n > MAX_NOTIFY {
            Err(Error::InvalidArgument(format!(
                "set_num_notify: {n} counters (at most {MAX_NOTIFY})"
            )))
        } else {
            Ok(())
        };
        let word = if local.is_ok() { n as u64 } else { FAILED };
        let counts = self.core.agree_words(Call::SetNumNotify, word)?;
        local?;
        if counts.contains(&FAILED) {
            return Err(Error::PeerFailed {
                call: "set_num_notify",
            });
        }
        // Each rank's block on its own cache lines (arrivals at different ranks do not
        // contend).
        let words: Vec<usize> = counts
            .iter()
            .map(|&c| (c as usize).div_ceil(8) * 8)
            .collect();
        let total: usize = words.iter().sum::<usize>() * 8;
        let comm = &self.core.comm;
        let me = self.core.rank;
        // One segment per node (one on a single node), created by the node's lowest rank.
        let nodes: Vec<usize> = (0..comm.size())
            .map(|r| comm.node_of(r))
            .collect::<Result<_>>()?;
        let leader = nodes
            .iter()
            .position(|&x| x == nodes[me])
            .expect("a rank is on its own node");
        let mut msg: Vec<u8> = Vec::new();
        let mut mine = None;
        if me == leader && total > 0 {
            let seg = Segment::create(comm.job_id(), "notify", total);
            if let Ok(s) = &seg {
                msg.extend_from_slice(s.name().as_bytes());
            }
            mine = Some(seg);
        }
        if total > 0 {
            let names = comm.allgatherv_for(Call::SetNumNotify, &msg)?;
            msg = names[leader].clone();
        }
        let segment = match mine {
            Some(seg) => seg.map(Some),
            None if total == 0 => Ok(None),
            None if msg.is_empty() => Err(Error::PeerFailed {
                call: "set_num_notify",
            }),
            None => std::str::from_utf8(&msg)
                .map_err(|_| Error::Bootstrap("segment name is not UTF-8".into()))
                .and_then(Segment::open)
                .and_then(|s| {
                    if s.len() < total {
                        Err(Error::Bootstrap(format!(
                            "set_num_notify: counter segment is {} bytes, expected {total}",
                            s.len()
                        )))
                    } else {
                        Ok(Some(s))
                    }
                }),
        };
        let ok = self
            .core
            .agree_words(Call::SetNumNotify, u64::from(segment.is_ok()))?;
        let segment = segment?;
        if ok.contains(&0) {
            return Err(Error::PeerFailed {
                call: "set_num_notify",
            });
        }
        // Everyone has it mapped: the name is no longer needed.
        if let Some(s) = &segment {
            s.unlink();
        }
        let net = self
            .core
            .net_counters(segment.as_ref(), total, nodes[me], nodes)?;
        let base = segment
            .as_ref()
            .map_or(std::ptr::null(), |s| s.as_ptr().cast_const());
        let mut at = 0usize;
        let blocks = words
            .iter()
            .map(|&w| {
                let p = if w == 0 {
                    std::ptr::null()
                } else {
                    // The segment is page aligned and `at` a multiple of 64 bytes inside it.
                    base.wrapping_add(at).cast::<AtomicU64>()
                };
                at += w * 8;
                p
            })
            .collect();
        self.core.notify.install(NotifyTable {
            blocks,
            counts: counts.iter().map(|&c| c as usize).collect(),
            _segment: segment,
            net: net.and_then(crate::transport::network::Only::new),
        });
        Ok(())
    }

    /// This process's number of notification counters (0 before `set_num_notify`).
    pub fn num_notify(&self) -> usize {
        self.core
            .notify
            .table()
            .map_or(0, |t| t.counts[self.core.rank])
    }

    /// The value of this process's counter `idx` (MPI_Win_get_notify_value). When it is `k`,
    /// the data of the `k` notified operations it counts is visible here.
    pub fn notify_value(&self, idx: usize) -> Result<u64> {
        let me = self.core.rank;
        let table = self.core.notify_table("notify_value", me, idx)?;
        // Acquire: pairs with the arrivals' Release (module docs).
        let read = table.load(CtrlWord::Notify { at: me, idx }, Ordering::Acquire);
        Awaited::from(read).wait(table)
    }

    /// Sets this process's counter `idx` to 0 and returns its value before
    /// (MPI_Win_reset_notify_value). An arrival at the same time is counted either in the
    /// returned value or in the counter afterwards, never lost.
    pub fn reset_notify_value(&self, idx: usize) -> Result<u64> {
        let me = self.core.rank;
        let table = self.core.notify_table("reset_notify_value", me, idx)?;
        // AcqRel: acquires the counted arrivals' data (as notify_value); one atomic swap, so
        // no arrival falls between the read and the reset.
        let swap = table.swap(CtrlWord::Notify { at: me, idx }, 0, Ordering::AcqRel);
        Awaited::from(swap).wait(table)
    }

    /// A request that completes when this process's counter `idx` is at least `value`:
    /// then the data of the counted operations is visible here. The counter is not changed
    /// (reset it with [`Window::reset_notify_value`](crate::RawWindow::reset_notify_value) to reuse it). Waiting drives the
    /// process's progress, like every request.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<u64>::allocate(&world, 8)?;
    /// let (me, n) = (world.rank(), world.size());
    /// win.set_num_notify(2)?;
    /// win.lock_all(Assert::NONE)?;
    /// // Index 0 counts the halo from the left, 1 the halo from the right.
    /// win.put_notify(&[me as u64], (me + 1) % n, 0, 0)?;
    /// win.put_notify(&[me as u64], (me + n - 1) % n, 1, 1)?;
    /// let mut halos = [win.wait_notify(0, 1)?, win.wait_notify(1, 1)?];
    /// let first = onesided::wait_any(&mut halos)?; // work on whichever came first
    /// # let _ = first;
    /// win.unlock_all()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn wait_notify(&self, idx: usize, value: u64) -> Result<Request<'_>> {
        let me = self.core.rank;
        let table = self.core.notify_table("wait_notify", me, idx)?;
        Ok(Request::notified(
            &self.core,
            table,
            CtrlWord::Notify { at: me, idx },
            value,
        ))
    }
}

impl RawWindow {
    /// Put of bytes counted by notification counter `idx` of `target`
    /// ([`Window::put_notify`](crate::Window::put_notify), MPI_Put_notify).
    pub fn put_notify(&self, bytes: &[u8], target: usize, disp: usize, idx: usize) -> Result<()> {
        const OP: &str = "put_notify";
        let table = self.core.notify_table(OP, target, idx)?;
        if let Some((dst, _)) = self.core.direct_fast(target, disp, bytes.len()) {
            // SAFETY: dst..dst+len lies inside the target's mapped window memory (bounds
            // checked by direct_fast), which outlives self; src is a distinct Rust slice.
            unsafe { crate::transport::shm::copy_bytes(bytes.as_ptr(), dst, bytes.len()) };
            self.core.epoch.note_rma();
            // Release: as in WinCore::notify_arrival.
            table.post_add(CtrlWord::Notify { at: target, idx }, 1, Ordering::Release);
            return Ok(());
        }
        if self.core.may_defer(target, bytes.len()) {
            self.core.defer_put(bytes, target, disp, self.flags.get())?;
            return self.core.defer_arrival(OP, target, idx);
        }
        let at = self.core.resolve(OP, target, disp, bytes.len())?;
        // Never staged: this put must be in place before its count. The thread's staged
        // puts were issued first and go first (with mpi_win_order, every thread's).
        self.core.ring_gate_for(target, self.flags.get())?;
        if self.put_notify_as_atomics(at.route, bytes, target, idx)? {
            return Ok(());
        }
        self.core.drain_before_op(self.flags.get())?;
        at.route.write(bytes)?;
        self.core.epoch.note_rma();
        self.core.notify_arrival(OP, target, idx)
    }

    /// A notified put to another node issued as the provider's atomic writes followed by
    /// the count, an atomic too, where the provider delivers one endpoint's atomics to a
    /// peer in order (`net::post_write_atomic`): the count lands after the data without
    /// waiting for it, and the call returns at once (both complete at the next completion
    /// point). False when the put cannot go so (nothing done).
    fn put_notify_as_atomics(
        &self,
        route: crate::transport::Route,
        bytes: &[u8],
        target: usize,
        idx: usize,
    ) -> Result<bool> {
        const OP: &str = "put_notify";
        if !self.core.put_as_atomics(route, bytes, self.flags.get())? {
            return Ok(false);
        }
        // Posted behind the data on the same endpoint (the counter's holder is the data's).
        self.core.notify_arrival(OP, target, idx)?;
        Ok(true)
    }

    /// [`RawWindow::put_layout`], then counter `idx` of `target` counts it (MPI_Put_notify
    /// with derived datatypes): when the target sees the count, every byte is in its
    /// memory. Errors: those of `put_layout`, and [`Error::InvalidNotification`].
    pub fn put_layout_notify(
        &self,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        target: usize,
        disp: usize,
        target_layout: &Layout<u8>,
        idx: usize,
    ) -> Result<()> {
        const OP: &str = "put_notify";
        self.core.notify_table(OP, target, idx)?;
        // Never staged nor deferred: the pieces are written (or posted to the network,
        // which the arrival completes first) when it returns.
        self.put_layout(origin, origin_layout, target, disp, target_layout)?;
        self.core.notify_arrival(OP, target, idx)
    }

    /// [`RawWindow::get_layout`], then counter `idx` of `target` counts it (MPI_Get_notify
    /// with derived datatypes). Errors as for [`RawWindow::put_layout_notify`].
    pub fn get_layout_notify(
        &self,
        origin: &mut [u8],
        origin_layout: &Layout<u8>,
        target: usize,
        disp: usize,
        target_layout: &Layout<u8>,
        idx: usize,
    ) -> Result<()> {
        const OP: &str = "get_notify";
        self.core.notify_table(OP, target, idx)?;
        self.get_layout(origin, origin_layout, target, disp, target_layout)?;
        self.core.notify_arrival(OP, target, idx)
    }

    /// [`RawWindow::accumulate_layout`], then counter `idx` of `target` counts it
    /// (MPI_Accumulate_notify with derived datatypes): when the target sees the count, every
    /// update is done. Errors as for [`RawWindow::put_layout_notify`].
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate_layout_notify(
        &self,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        ty: ElemType,
        target: usize,
        disp: usize,
        target_layout: &Layout<u8>,
        op: Op,
        idx: usize,
    ) -> Result<()> {
        const OP: &str = "accumulate_notify";
        self.core.notify_table(OP, target, idx)?;
        self.accumulate_layout(origin, origin_layout, ty, target, disp, target_layout, op)?;
        // An update handed to the target's ring must be done before it is counted.
        self.core.ring_gate_for(target, self.flags.get())?;
        self.core.notify_arrival(OP, target, idx)
    }

    /// Get of bytes counted by notification counter `idx` of `target`
    /// ([`Window::get_notify`](crate::Window::get_notify), MPI_Get_notify).
    pub fn get_notify(&self, dst: &mut [u8], target: usize, disp: usize, idx: usize) -> Result<()> {
        const OP: &str = "get_notify";
        self.core.notify_table(OP, target, idx)?;
        // Waits for a deferred epoch, like get; the bytes are here when it returns.
        self.get(dst, target, disp)?;
        self.core.notify_arrival(OP, target, idx)
    }
}

impl RawWindow {
    /// The element-typed form of [`Window::accumulate_notify`].
    pub(crate) fn accumulate_notify_elems<T: AccElement>(
        &self,
        origin: &[T],
        target: usize,
        disp: usize,
        op: Op,
        idx: usize,
    ) -> Result<()> {
        const OP: &str = "accumulate_notify";
        self.core.notify_table(OP, target, idx)?;
        crate::rma::accumulate::check_op(OP, op, T::TYPE, false)?;
        if self.core.may_defer(target, std::mem::size_of_val(origin)) {
            self.core
                .defer_accumulate(origin, target, disp, op, self.flags.get(), false)?;
            return self.core.defer_arrival(OP, target, idx);
        }
        // Not `accumulate`: it may defer on its own (the budget can free meanwhile), and
        // the count must follow the update. Accumulates are never staged: done on return.
        let bytes = std::mem::size_of_val(origin);
        let loc = self.core.resolve(OP, target, disp, bytes)?;
        self.core
            .acc_run(target, loc, origin, op, None, self.flags.get())?;
        // An update handed to the target's ring must be done before it is counted.
        self.core.ring_gate_for(target, self.flags.get())?;
        self.core.epoch.note_rma();
        self.core.notify_arrival(OP, target, idx)
    }
}

#[cfg(test)]
mod tests {
    //! The notification protocol — arrivals are posted increments, a wait reads the counter
    //! until it reaches the count, a reset swaps it to 0 — against a control plane that
    //! answers late and applies operations in a shuffled order.

    use super::*;
    use crate::plane::count_reached;
    use crate::plane::fake::LatePlane;

    const ORIGINS: u64 = 3;
    const EACH: u64 = 40;

    fn rng(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// A waiter for `need` arrivals completes only once that many were applied, and every
    /// waiter completes; arrivals at two counters of one target do not mix.
    #[test]
    fn waits_see_every_arrival_over_a_late_reordering_plane() {
        for seed in 1..200u64 {
            let plane = LatePlane::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let word = |idx| CtrlWord::Notify { at: 0, idx };
            let mut sent = [0u64; ORIGINS as usize];
            // Waiters of counter 0 (origins 0 and 2 notify it) for 1, 2, ... arrivals.
            let total0 = 2 * EACH;
            let mut need = 1u64;
            let mut reading = None;
            let mut state = seed;
            let mut steps = 0u64;
            while need <= total0 {
                steps += 1;
                assert!(steps < 1_000_000, "seed {seed}: the waits do not end");
                let who = rng(&mut state) % (ORIGINS + 1);
                if who < ORIGINS && sent[who as usize] < EACH {
                    sent[who as usize] += 1;
                    let idx = usize::from(who == 1);
                    plane.post_add(word(idx), 1, Ordering::Release);
                } else if count_reached(&plane, word(0), need, &mut reading).unwrap() == Some(true)
                {
                    assert!(
                        plane.peek(word(0)) >= need,
                        "seed {seed}: a wait for {need} ended at {}",
                        plane.peek(word(0))
                    );
                    need += 1;
                }
            }
            plane.settle();
            assert_eq!(plane.peek(word(0)), total0, "seed {seed}");
            assert_eq!(plane.peek(word(1)), sent[1], "seed {seed}");
        }
    }

    /// Resets racing arrivals lose none: the values the resets returned plus what is left
    /// count every arrival once.
    #[test]
    fn resets_lose_no_arrival_over_a_late_reordering_plane() {
        for seed in 1..200u64 {
            let plane = LatePlane::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
            let word = CtrlWord::Notify { at: 0, idx: 3 };
            let mut state = seed;
            let (mut sent, mut taken) = (0u64, 0u64);
            while sent < ORIGINS * EACH {
                if rng(&mut state) % 4 == 0 {
                    taken += Awaited::from(plane.swap(word, 0, Ordering::AcqRel))
                        .wait(&plane)
                        .unwrap();
                } else {
                    sent += 1;
                    plane.post_add(word, 1, Ordering::Release);
                }
            }
            plane.settle();
            assert_eq!(taken + plane.peek(word), sent, "seed {seed}");
        }
    }
}
