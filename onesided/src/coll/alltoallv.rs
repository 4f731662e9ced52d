//! Persistent RMA Alltoallv ([Namugwanya26], seed 001): a plan built once over fixed counts,
//! displacements and buffers, then started and completed many times.
//!
//! Every rank puts its block for rank `p` (`sendcounts[p]` elements at `sdispls[p]` of the
//! send buffer) straight into `p`'s receive buffer at `p`'s `rdispls[me]`, through one
//! window over the receive buffer that lives as long as the plan. Variants:
//!
//! - [`AlltoallvVariant::Fence`] (Algorithm 1): `start` opens a fence epoch (a barrier: no
//!   rank writes into a receive buffer its owner may still read) and issues the puts; the
//!   request completes the closing fence.
//! - [`AlltoallvVariant::FenceHierarchical`] (Algorithm 2): the same, with the puts to other
//!   nodes issued first and those on the node after, so that network transfers overlap the
//!   on-node copies. The node split comes from the shared-memory domains
//!   ([`Comm::node_of`]), or is emulated ([`NodeSplit::RanksPerNode`]) to test it on one
//!   machine.
//! - [`AlltoallvVariant::Lock`] (Algorithm 3): every rank holds an exclusive lock on its own
//!   window between cycles; `start` releases it, opens `lock_all` and issues the puts; the
//!   request completes `unlock_all`, **a barrier** (the listing omits it, the text requires
//!   it: without it a slow origin whose shared lock on me is granted after I re-locked
//!   writes into a buffer I already read) and the re-taken self lock. Even the paper's
//!   order races: after that barrier a fast peer's *next* `lock_all` can reach me before my
//!   self lock does, and its next block lands before I read this one (our tests caught
//!   it). So `start` begins with a barrier too: no rank opens a new cycle before every rank
//!   holds its self lock again.
//! - [`AlltoallvVariant::Notify`] (ours: the done flags of the published locality-aware
//!   code, without its barrier): no fence and no barrier per cycle. The plan holds
//!   `lock_all` on its windows for its whole life, and every rank owns `3p + 1` signal
//!   words: `arrived[s]`, the last cycle whose block from `s` is in place (one word for even
//!   cycles, one for odd ones: a sender one cycle ahead does not overwrite the flag that is
//!   still to be read), `credit[t]`, the last cycle for which `t` has freed its receive
//!   buffer, and a gate word, the cycle this rank started last. `start` of cycle `k` first
//!   writes credit `k` at each of its senders (the last result was read: the caller is
//!   starting again), then puts each block as soon as its target's credit `k` is there and
//!   writes `arrived = k` behind it — on the node a release store after the copy. The
//!   request completes when every sender's `arrived` reads `k`. A cycle costs a one-way
//!   credit and the data with its signal right behind; the fence plans pay a barrier and a
//!   flush round trip twice.
//!   Blocks from another node are *staged*: they land in two slots per sender in the
//!   receiver's signal window, cycle `k` in slot `k % 2`, and the receiver's request copies
//!   each into the receive buffer when its flag arrives. A sender then needs the slot's
//!   cycle `k - 2` consumed, which its receiver tells with the flag of its own block of
//!   cycle `k - 1` (flag and credit are adjacent words: one write), and the sender waited
//!   for that block to finish cycle `k - 1`. So across nodes no cycle waits for a credit.
//!   Where our own connection reaches the receiver (`transport::wire`, the `tcp` provider)
//!   block, flag and credit are one message, unanswered, placed by the receiver's progress
//!   in that order — into the receive buffer itself, the flag marked, when the receiver's
//!   gate word says it has started that cycle by then (no copy at the receiver; the usual
//!   case: both sides start a cycle together), else into the slot. Elsewhere they are RMA
//!   writes: the block from the send buffer (no copy, no wait for delivery; each write holds
//!   a token of the plan until its completion entry is read, and the cycle's request
//!   completes only once none does — the caller owns the send buffer again when the
//!   request is done), the flag right behind it (`FI_ORDER_RMA_WAW`; where the provider
//!   does not promise it, after a flush of the target), neither acknowledged: the
//!   receiver proves the flag's delivery by waiting for it, and the plan is freed
//!   collectively, after every rank's last cycle. The staging slots take as much memory
//!   again as the blocks from other nodes. 32 KiB per pair, 2 ranks over 2 nodes: RMA
//!   writes acknowledged 36–42 µs a cycle, unacknowledged 24–27 µs, one message 10–13 µs.
//! - [`AlltoallvVariant::Auto`] (the paper's future work): the first cycles alternate between
//!   the notified plan and the two-sided exchange of the communicator (one warm-up and
//!   [`AUTO_PROBES`] timed cycles each); each kind's fastest cycle at the slowest rank
//!   decides, the same at every rank, and later cycles use the faster kind.
//!
//! Pitfalls of the published code this avoids: the window belongs to the plan (a cache keyed
//! by size alone would expose an old buffer of the same size); displacements travel as
//! 64-bit element counts of the one element type; init checks at every rank that each
//! receive count equals what its sender sends, and fails at every rank together.
//!
//! Between cycles the plan gives [`Alltoallv::send_mut`] and [`Alltoallv::recv`]; while a
//! cycle runs its request borrows the plan, so neither buffer can be touched. A request that
//! is dropped unfinished is completed by the plan's next call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytemuck::Pod;

use crate::bootstrap::{Call, Comm, ReduceOp};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::progress::{Step, SyncOp};
use crate::request::Request;
use crate::rma::WinGate;
use crate::sync::{Assert, LockType};
use crate::typed::Window;
use crate::win::core::WinCore;
use crate::win::WinBuffer;

/// Which algorithm a plan runs (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlltoallvVariant {
    /// Fence epochs (seed 001 Algorithm 1).
    Fence,
    /// Fence epochs, puts to other nodes first (Algorithm 2).
    FenceHierarchical,
    /// A self lock between cycles, `lock_all` for the puts, a barrier at the end (Algorithm 3).
    Lock,
    /// No fence or barrier: credits and arrival flags written one-sidedly (see the module
    /// docs).
    Notify,
    /// Measures the notified plan against the two-sided exchange and keeps the faster.
    Auto,
}

impl AlltoallvVariant {
    /// The variant's name in benchmark records (`persistent-<name>`).
    pub fn name(self) -> &'static str {
        match self {
            AlltoallvVariant::Fence => "fence",
            AlltoallvVariant::FenceHierarchical => "hierarchical",
            AlltoallvVariant::Lock => "lock",
            AlltoallvVariant::Notify => "notify",
            AlltoallvVariant::Auto => "auto",
        }
    }
}

/// How a hierarchical plan groups ranks into nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeSplit {
    /// The real nodes: ranks that share memory share a node ([`Comm::node_of`]).
    #[default]
    Hosts,
    /// Emulated nodes of `n` consecutive ranks (rank `r` is on node `r / n`), to exercise
    /// the hierarchy on one machine.
    RanksPerNode(usize),
}

/// What [`AlltoallvVariant::Auto`] settled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoChoice {
    /// Still measuring.
    Probing,
    /// The persistent (notified) plan won.
    Persistent,
    /// The communicator's two-sided alltoallv won.
    TwoSided,
}

/// Cycles of each kind an [`AlltoallvVariant::Auto`] plan times before it decides (after one
/// untimed warm-up cycle of each).
pub const AUTO_PROBES: usize = 3;

/// One put of a plan: `len` elements from `src` in the send buffer to `disp` at `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Put {
    target: usize,
    src: usize,
    len: usize,
    disp: usize,
}

/// The counts and displacements of one side of an alltoallv, in elements, per rank.
#[derive(Debug, Clone)]
struct Side {
    counts: Vec<usize>,
    displs: Vec<usize>,
}

/// The break-even model of seed 001 §4: a persistent plan pays `t_init` once and saves
/// `t_baseline - t_persist` per cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakEven {
    /// Plan initialisation plus free.
    pub t_init: Duration,
    /// One start + wait of the plan.
    pub t_persist: Duration,
    /// One call of the non-persistent exchange it replaces.
    pub t_baseline: Duration,
}

impl BreakEven {
    /// N = ⌈t_init / (t_baseline − t_persist)⌉: cycles after which the plan has paid for
    /// itself; `None` ("never") when it is not faster per cycle.
    ///
    /// ```
    /// use std::time::Duration;
    /// use onesided::BreakEven;
    /// let us = Duration::from_micros;
    /// let model = BreakEven { t_init: us(100), t_persist: us(30), t_baseline: us(50) };
    /// assert_eq!(model.iterations(), Some(5));
    /// let slower = BreakEven { t_persist: us(60), ..model };
    /// assert_eq!(slower.iterations(), None);
    /// ```
    pub fn iterations(&self) -> Option<u64> {
        let saved = self.t_baseline.checked_sub(self.t_persist)?;
        if saved.is_zero() {
            return None;
        }
        Some(
            (self.t_init.as_nanos().div_ceil(saved.as_nanos()))
                .max(1)
                .try_into()
                .unwrap_or(u64::MAX),
        )
    }
}

/// A persistent alltoallv plan (seed 001): init once, [`Alltoallv::start`] + wait many
/// times, [`Alltoallv::free`] collectively.
///
/// ```
/// # onesided::testing::run(2, |_| {
/// use onesided::{Alltoallv, AlltoallvVariant, NodeSplit};
/// let universe = onesided::init()?;
/// let world = universe.world();
/// let n = world.size();
/// // Two elements for every rank; receive memory from alloc_mem is written with stores.
/// let counts = vec![2; n];
/// let displs: Vec<usize> = (0..n).map(|p| 2 * p).collect();
/// let send = vec![world.rank() as u64; 2 * n];
/// let recv = onesided::alloc_mem::<u64>(2 * n)?;
/// let mut plan = Alltoallv::new(
///     world, AlltoallvVariant::Fence, NodeSplit::Hosts,
///     send, &counts, &displs, recv, &counts, &displs,
/// )?;
/// for step in 0..100u64 {
///     plan.send_mut()?.fill(step);
///     plan.start()?.wait()?;
///     assert!(plan.recv()?.iter().all(|&v| v == step));
/// }
/// let (_send, _recv) = plan.free()?;
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
#[derive(Debug)]
pub struct Alltoallv<T: Pod> {
    comm: Comm,
    variant: AlltoallvVariant,
    send: WinBuffer<T>,
    /// Held by every network write posted from the send buffer (a staged block) until it
    /// is complete, beside this one: the buffer may change only while this is the only one.
    send_writes: std::sync::Arc<()>,
    /// The window over the receive buffer (taken by `free`).
    win: Option<Window<T>>,
    /// Puts in issue order (zero-length blocks left out).
    puts: Vec<Put>,
    send_side: Side,
    recv_side: Side,
    /// A cycle was started and its request may not have been seen complete.
    in_flight: bool,
    /// Lock variant: this rank holds the exclusive lock on its own window.
    self_locked: bool,
    init_time: Duration,
    auto: Auto,
    /// Notify variant: the signal words and what they count.
    signals: Option<Signals>,
}

/// The signal words of an [`AlltoallvVariant::Notify`] plan: a window of `3p + 1` words at
/// every rank — rank `s`'s `arrived` of even cycles at `3s`, its `credit` at `3s + 1`, its
/// `arrived` of odd cycles at `3s + 2` (the flag of a cycle and the credit are adjacent:
/// one write carries both, and the flag of the next cycle does not overwrite it), the gate
/// word (the cycle this rank started last) — then the staging slots of the blocks from
/// other nodes (module docs).
#[derive(Debug)]
struct Signals {
    win: Window<u64>,
    /// The cycle started last (0 before the first).
    cycle: u64,
    /// Ranks other than this one that send it a block: whose credits it writes and whose
    /// arrivals its requests wait for.
    senders: Vec<usize>,
    /// Per rank: reached through the network (another node).
    across: Vec<bool>,
    /// The provider places RMA writes to one peer in issue order (always false without a
    /// network).
    ordered_net: bool,
    /// Per target: where this rank's staging slot 0 at that target starts (signal words),
    /// for targets on another node (module docs).
    stage_to: Vec<Option<usize>>,
    /// Per sender: where its staged block lands here and goes in the receive buffer.
    staged_from: std::sync::Arc<[Option<Staged>]>,
}

/// A sender's staged block at its receiver: two slots of `slot_words` signal words from
/// word `at` (slot `k % 2` for cycle `k`), `bytes` bytes each, copied to byte `recv_byte`
/// of the receive buffer.
#[derive(Debug, Clone, Copy)]
struct Staged {
    at: usize,
    slot_words: usize,
    bytes: usize,
    recv_byte: usize,
}

/// The mark of an `arrived` word whose block went straight into the receive buffer (its
/// receiver had started the cycle when it came), not into its staging slot.
const DIRECT: u64 = 1 << 63;

/// Where sender `s`'s `arrived` word of `cycle` lies among the signal words.
fn arrived_word(s: usize, cycle: u64) -> usize {
    3 * s + 2 * (cycle % 2) as usize
}

/// Where sender `s`'s `credit` word lies among the signal words.
fn credit_word(s: usize) -> usize {
    3 * s + 1
}

/// The flag of `cycle` (its value `arrived`) and the credit `credit` as one write: the
/// first word's index and the two words, in place order.
fn flag_and_credit(s: usize, cycle: u64, arrived: u64, credit: u64) -> (usize, [u64; 2]) {
    match cycle % 2 {
        0 => (arrived_word(s, cycle), [arrived, credit]),
        _ => (credit_word(s), [credit, arrived]),
    }
}

/// Signal words a staged block of `bytes` bytes takes per slot.
fn slot_words(bytes: usize) -> usize {
    bytes.div_ceil(8)
}

/// Signal word `i` of this rank, in the memory of `core`, the core of a signal window.
fn signal_word(core: &WinCore, i: usize) -> &AtomicU64 {
    debug_assert!(i < core.local.bytes / 8);
    // SAFETY: a signal window's memory is at least `3p + 1` u64 words at `base` (alloc_mem
    // memory, 8-byte aligned, zeroed before the window was created) and lives as long as its
    // core; peers change it only by atomics and by 8-byte writes of whole words.
    unsafe { AtomicU64::from_ptr(core.local.base.cast::<u64>().add(i)) }
}

impl Signals {
    fn credit(&self, from: usize) -> u64 {
        // Relaxed: a credit carries no data; it only says the target read its buffer,
        // which the puts that follow it cannot overtake (they are issued after this load).
        signal_word(&self.win.core, credit_word(from)).load(Ordering::Relaxed)
    }

    /// Writes `value` into signal word `i` of `target`: an RMA write across nodes (one
    /// writer per word; it keeps its place behind earlier writes where the provider orders
    /// them), a release store on this node.
    fn write(&self, target: usize, i: usize, value: u64) -> Result<()> {
        if self.across[target] {
            self.win.put(&[value], target, i)
        } else {
            self.win.accumulate(&[value], target, i, Op::Replace)
        }
    }

    /// The gate word: the cycle this rank started last, after the `3p` signal words.
    fn gate(&self) -> usize {
        3 * self.across.len()
    }

    /// The credit a block of `cycle` needs from `target`: the receive buffer freed for this
    /// cycle, or for a staged block the slot's previous cycle consumed.
    fn credit_needed(&self, target: usize, cycle: u64) -> u64 {
        match self.stage_to[target] {
            Some(_) => cycle.saturating_sub(2),
            None => cycle,
        }
    }
}

impl Signals {
    /// The signal window (collective) and what this rank's cycles need to know, for
    /// elements of `elem` bytes received at `rdispls`.
    fn new(
        comm: &Comm,
        elem: usize,
        sendcounts: &[usize],
        recvcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<Self> {
        let n = comm.size();
        let me = comm.rank();
        let here = comm.node_of(me)?;
        let across = (0..n)
            .map(|r| comm.node_of(r).map(|node| node != here))
            .collect::<Result<Vec<bool>>>()?;
        // The gate word after the 3n signal words, then staging slots for the blocks from
        // other nodes.
        let mut staged_from = vec![None; n];
        let mut words = 3 * n + 1;
        for s in (0..n).filter(|&s| across[s] && recvcounts[s] > 0) {
            let bytes = recvcounts[s] * elem;
            staged_from[s] = Some(Staged {
                at: words,
                slot_words: slot_words(bytes),
                bytes,
                recv_byte: rdispls[s] * elem,
            });
            words += 2 * slot_words(bytes);
        }
        let mut at: Vec<u64> = staged_from
            .iter()
            .map(|st| st.map_or(u64::MAX, |st| st.at as u64))
            .collect();
        at = comm.alltoall(&at)?;
        let stage_to = (0..n)
            .map(|t| (at[t] != u64::MAX && sendcounts[t] > 0).then_some(at[t] as usize))
            .collect();
        // alloc_mem memory starts zeroed, before the (synchronizing) window creation: no
        // peer's credit can land before the zeros.
        let win = Window::create(comm, crate::alloc_mem::<u64>(words)?)?;
        // The flags follow the blocks in the provider's order of RMA writes.
        win.raw.keep_rma_order();
        win.lock_all(Assert::NOCHECK)?;
        let ordered_net =
            across.iter().any(|&a| a) && crate::transport::network::orders_rma_writes()?;
        Ok(Signals {
            win,
            cycle: 0,
            senders: (0..n).filter(|&s| s != me && recvcounts[s] > 0).collect(),
            across,
            ordered_net,
            stage_to,
            staged_from: staged_from.into(),
        })
    }
}

/// The request of a notified cycle: done when every sender's block of `cycle` is in place.
struct Arrivals {
    senders: Vec<usize>,
    cycle: u64,
    /// Per sender: its staged block, copied into the receive buffer when it arrives.
    staged_from: std::sync::Arc<[Option<Staged>]>,
    /// The receive buffer's first byte (the plan's window memory).
    recv: usize,
    /// The plan's [`Alltoallv::send_writes`]: the request completes only once no staged
    /// block's write holds it (the caller may change the send buffer then).
    send_writes: std::sync::Weak<()>,
}

impl SyncOp<WinCore> for Arrivals {
    fn name(&self) -> &'static str {
        "alltoallv: the blocks of this cycle"
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        // Drop the senders whose block arrived; done when none is left.
        let (cycle, recv, staged) = (self.cycle, self.recv, &self.staged_from);
        self.senders.retain(|&s| {
            // Acquire: pairs with the sender's release store (on the node), or follows its
            // block in placement order (across nodes): the block is in place once this
            // reads the cycle.
            let arrived = signal_word(core, arrived_word(s, cycle)).load(Ordering::Acquire);
            if arrived & !DIRECT < cycle {
                return true;
            }
            if let (Some(st), false) = (staged[s], arrived & DIRECT != 0) {
                let slot = st.at + (cycle % 2) as usize * st.slot_words;
                // SAFETY: the slot is `slot_words` words of this rank's signal memory (laid
                // out at init: `at + 2 * slot_words` words fit), written by sender `s` only,
                // and for cycle `cycle + 2` only after this rank's credit of `cycle`, which
                // it writes after this copy (in its next cycle: with its flag to `s`, or at
                // its start when it sends `s` nothing); the destination is `bytes` bytes
                // of the receive buffer (checked at init), which no other process writes
                // while this cycle runs, and which no reference reaches while the plan is
                // borrowed by this cycle's request.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        core.local.base.cast::<u64>().add(slot).cast::<u8>(),
                        (recv as *mut u8).add(st.recv_byte),
                        st.bytes,
                    )
                };
            }
            false
        });
        if self.senders.is_empty() && self.send_writes.strong_count() > 1 {
            // Let go of the writes that completed (their queue entries were read).
            crate::transport::network::reap_own()?;
        }
        Ok(
            if self.senders.is_empty() && self.send_writes.strong_count() <= 1 {
                Step::Done
            } else {
                Step::Blocked
            },
        )
    }
}

impl<T: Pod> Drop for Alltoallv<T> {
    /// A plan dropped while network writes from its send buffer are in flight (its cycle's
    /// request was not completed, nor the plan freed) leaks the buffer: the provider may
    /// still read it.
    fn drop(&mut self) {
        if std::sync::Arc::strong_count(&self.send_writes) > 1 {
            std::mem::forget(std::mem::replace(
                &mut self.send,
                WinBuffer::Vec(Vec::new()),
            ));
        }
    }
}

/// The measurements of an [`AlltoallvVariant::Auto`] plan.
#[derive(Debug, Clone)]
struct Auto {
    choice: AutoChoice,
    cycles: usize,
    persistent: Duration,
    two_sided: Duration,
}

impl<T: Pod> Alltoallv<T> {
    /// Builds a plan (collective over `comm`), in `MPI_Alltoallv` argument order: the send
    /// buffer, its counts and displacements per rank (elements), the receive buffer, its
    /// counts and displacements per rank. The plan owns both buffers until
    /// [`Alltoallv::free`] hands them back. `split` matters to
    /// [`AlltoallvVariant::FenceHierarchical`] only.
    ///
    /// Errors, at every rank together: a count or displacement list whose length is not
    /// the number of ranks, a block outside its buffer, a receive count that differs from
    /// what its sender sends ([`Error::InvalidArgument`] where it was found,
    /// [`Error::PeerFailed`] elsewhere); the errors of window creation.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        comm: &Comm,
        variant: AlltoallvVariant,
        split: NodeSplit,
        send: impl Into<WinBuffer<T>>,
        sendcounts: &[usize],
        sdispls: &[usize],
        recv: impl Into<WinBuffer<T>>,
        recvcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<Self> {
        let started = Instant::now();
        let send = send.into();
        let recv = recv.into();
        let n = comm.size();
        let me = comm.rank();
        let put_displs = exchange_layout(
            comm,
            (send.len(), sendcounts, sdispls),
            (recv.len(), recvcounts, rdispls),
        )?;
        let node_of = match variant {
            AlltoallvVariant::FenceHierarchical => Some(node_ids(comm, split)?),
            _ => None,
        };
        let puts: Vec<Put> = issue_order(me, n, node_of.as_deref(), |p| Put {
            target: p,
            src: sdispls[p],
            len: sendcounts[p],
            disp: put_displs[p],
        })
        .into_iter()
        .filter(|put| put.len > 0)
        .collect();
        let win = Window::create(comm, recv)?;
        let signals = match variant {
            AlltoallvVariant::Notify | AlltoallvVariant::Auto => Some(Signals::new(
                comm,
                std::mem::size_of::<T>(),
                sendcounts,
                recvcounts,
                rdispls,
            )?),
            _ => None,
        };
        if signals.is_some() {
            // The blocks go before their flags in the provider's order of RMA writes.
            win.raw.keep_rma_order();
        }
        let mut plan = Alltoallv {
            comm: comm.clone(),
            variant,
            send,
            send_writes: std::sync::Arc::new(()),
            win: Some(win),
            puts,
            send_side: Side {
                counts: sendcounts.to_vec(),
                displs: sdispls.to_vec(),
            },
            recv_side: Side {
                counts: recvcounts.to_vec(),
                displs: rdispls.to_vec(),
            },
            in_flight: false,
            self_locked: false,
            init_time: Duration::ZERO,
            auto: Auto {
                choice: AutoChoice::Probing,
                cycles: 0,
                persistent: Duration::MAX,
                two_sided: Duration::MAX,
            },
            signals,
        };
        if plan.signals.is_some() {
            // One passive epoch for the plan's life: cycles synchronize by their signals.
            plan.window()?.lock_all(Assert::NOCHECK)?;
        }
        if variant == AlltoallvVariant::Lock {
            plan.window()?.lock(LockType::Exclusive, me, Assert::NONE)?;
            plan.self_locked = true;
        }
        plan.init_time = started.elapsed();
        Ok(plan)
    }

    /// The plan's variant.
    pub fn variant(&self) -> AlltoallvVariant {
        self.variant
    }

    /// How long building the plan took at this rank.
    pub fn init_time(&self) -> Duration {
        self.init_time
    }

    /// The targets of this rank's puts in the order `start` issues them (blocks of zero
    /// elements left out).
    pub fn put_order(&self) -> Vec<usize> {
        self.puts.iter().map(|p| p.target).collect()
    }

    /// What an [`AlltoallvVariant::Auto`] plan has chosen so far (`Persistent` for the
    /// other variants).
    pub fn auto_choice(&self) -> AutoChoice {
        match self.variant {
            AlltoallvVariant::Auto => self.auto.choice,
            _ => AutoChoice::Persistent,
        }
    }

    /// The send buffer, to fill between cycles.
    pub fn send_mut(&mut self) -> Result<&mut [T]> {
        self.settle()?;
        Ok(self.send.as_mut_slice())
    }

    /// The receive buffer as the last completed cycle left it.
    pub fn recv(&mut self) -> Result<&[T]> {
        self.settle()?;
        let win = self.window()?;
        // SAFETY: the window's memory is `len` elements at `base` (the receive buffer it
        // owns); no cycle is in flight (settled above) and no peer can write into it before
        // this rank starts the next one — a fence plan's opening fence is a barrier, a lock
        // plan holds its exclusive self lock, and a notified plan's senders wait for the
        // credit this rank writes when it starts. `&mut self` keeps `start` out while the
        // slice lives.
        Ok(unsafe { std::slice::from_raw_parts(win.base().cast_const(), win.len()) })
    }

    /// Starts one exchange (MPI_Start) and returns its request; the receive buffer holds
    /// the result once the request completed. Collective: every rank starts every cycle.
    ///
    /// On one node the puts are done when `start` returns (the fence variants' opening
    /// fence waits for every rank to start); the request completes the closing
    /// synchronization.
    pub fn start(&mut self) -> Result<Request<'_>> {
        self.settle()?;
        match self.variant {
            AlltoallvVariant::Fence | AlltoallvVariant::FenceHierarchical => self.start_fence(),
            AlltoallvVariant::Lock => self.start_lock(),
            AlltoallvVariant::Notify => self.start_notify(),
            AlltoallvVariant::Auto => self.start_auto(),
        }
    }

    /// [`Alltoallv::start`] with a request that owns what it needs (for bindings: a C
    /// program keeps the request apart from the plan). Free the plan only after the
    /// request completed ([`Alltoallv::free`] completes a cycle still in flight).
    pub fn start_owned(&mut self) -> Result<Request<'static>> {
        let core = match &self.signals {
            Some(signals) => signals.win.core.clone_handle(),
            None => self.window()?.core.clone_handle(),
        };
        let r = self.start()?;
        // SAFETY: every request `start` returns is one of the plan's window (its fences and
        // locks), of its signal window (a notified cycle's arrivals) or a finished one;
        // `core` is that window's core, which the request now keeps alive.
        Ok(unsafe { r.into_static(core) })
    }

    fn window(&self) -> Result<&Window<T>> {
        self.win
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("alltoallv: the plan was freed".into()))
    }

    /// Completes a cycle whose request was dropped unfinished.
    fn settle(&mut self) -> Result<()> {
        if self.in_flight {
            let core = match &self.signals {
                Some(signals) => &*signals.win.core,
                None => &*self.window()?.core,
            };
            core.engine.wait_until(
                core,
                || core.engine.idle(),
                None,
                || core.engine.describe_wait(core, None),
            )?;
            self.in_flight = false;
        }
        Ok(())
    }

    fn issue_puts(&self) -> Result<()> {
        let win = self.window()?;
        let send = self.send.as_slice();
        for put in &self.puts {
            win.put(&send[put.src..put.src + put.len], put.target, put.disp)?;
        }
        Ok(())
    }

    /// A fence cycle. The opening fence asserts NOSTORE: between cycles the receive buffer
    /// changes only by the peers' puts (the two-sided cycles of `Auto` go with the notified
    /// plan, not this one).
    fn start_fence(&mut self) -> Result<Request<'_>> {
        self.window()?.fence(Assert::NOPRECEDE | Assert::NOSTORE)?;
        self.issue_puts()?;
        self.in_flight = true;
        self.window()?.ifence(Assert::NOPUT | Assert::NOSUCCEED)
    }

    fn start_lock(&mut self) -> Result<Request<'_>> {
        let me = self.comm.rank();
        // Every rank holds its self lock again (its last wait completed) before anyone
        // releases its own: see the module docs.
        self.comm.barrier()?;
        let win = self.window()?;
        if self.self_locked {
            win.unlock(me)?;
            self.self_locked = false;
        }
        let win = self.window()?;
        win.lock_all(Assert::NONE)?;
        self.issue_puts()?;
        self.in_flight = true;
        let win = self.window()?;
        // Queued in order: the engine activates them one after the other.
        drop(win.iunlock_all()?);
        // Without NOPRECEDE a fence is a barrier: every origin's unlock_all is complete
        // before anyone goes on to read or re-lock.
        drop(win.ifence(Assert::NOSUCCEED | Assert::NOPUT | Assert::NOSTORE)?);
        self.self_locked = true;
        self.window()?.ilock(LockType::Exclusive, me, Assert::NONE)
    }

    fn start_notify(&mut self) -> Result<Request<'_>> {
        let me = self.comm.rank();
        let signals = self
            .signals
            .as_mut()
            .ok_or_else(|| Error::InvalidArgument("alltoallv: the plan was freed".into()))?;
        signals.cycle += 1;
        let cycle = signals.cycle;
        // Release: the caller is done with the receive buffer (it gave up `recv()` to
        // call this); blocks of this cycle from other nodes that arrive from now on go
        // straight into it (their deliveries' gate).
        signal_word(&signals.win.core, signals.gate()).store(cycle, Ordering::Release);
        let (win, signals) = match (&self.win, &self.signals) {
            (Some(win), Some(signals)) => (win, signals),
            _ => {
                return Err(Error::InvalidArgument(
                    "alltoallv: the plan was freed".into(),
                ))
            }
        };
        // This rank's receive buffer is free again: its senders may write cycle `cycle`;
        // those of other nodes, whose blocks are staged, the slot of cycle `cycle - 1`
        // (consumed by its request) — written with this rank's flag of this cycle where it
        // sends them a block too, which they wait for before their next cycle.
        for &s in &signals.senders {
            if signals.staged_from[s].is_none() {
                signals.write(s, credit_word(me), cycle)?;
            } else if cycle > 1 && signals.stage_to[s].is_none() {
                signals.write(s, credit_word(me), cycle - 1)?;
            }
        }
        let send = self.send.as_slice();
        let mut waiting: Vec<&Put> = self.puts.iter().collect();
        while !waiting.is_empty() {
            let before = waiting.len();
            let mut i = 0;
            while i < waiting.len() {
                let put = waiting[i];
                if put.target != me
                    && signals.credit(put.target) < signals.credit_needed(put.target, cycle)
                {
                    i += 1;
                    continue;
                }
                waiting.swap_remove(i);
                let block = &send[put.src..put.src + put.len];
                if put.target == me {
                    // Own block: a copy into own memory (a flush would also wait for the
                    // writes to other nodes issued before it).
                    // SAFETY: the block lies inside this rank's window memory (`len`
                    // elements at `base`, checked at init: `disp + len <= len`); only this
                    // rank writes it, and no reference into the receive buffer lives while
                    // a cycle runs (`&mut self`).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            block.as_ptr(),
                            win.base().add(put.disp),
                            put.len,
                        )
                    };
                    continue;
                }
                let t = put.target;
                match signals.stage_to[t] {
                    Some(at) => {
                        let words = slot_words(std::mem::size_of_val(block));
                        let slot = at + (cycle % 2) as usize * words;
                        let bytes: &[u8] = bytemuck::cast_slice(block);
                        // The flag and, if `t` sends here too, the credit of its slot of
                        // the last cycle: adjacent words, written together.
                        let credit = if signals.staged_from[t].is_some() {
                            cycle - 1
                        } else {
                            0
                        };
                        let (flag_at, flag) = flag_and_credit(me, cycle, cycle, credit);
                        // Where our own connection reaches `t`: block, flag and credit in
                        // one message, placed by `t`'s progress in that order, unanswered
                        // (`t` waits for the flag before its cycle completes) — into the
                        // receive buffer itself, the flag marked `DIRECT`, when `t` has
                        // started this cycle by the time it arrives (its gate word).
                        let (_, direct) = flag_and_credit(me, cycle, cycle | DIRECT, credit);
                        let gate = WinGate {
                            word_disp: signals.gate(),
                            at_least: cycle,
                            core: &win.core,
                            disp: put.disp,
                            words: &direct,
                        };
                        if signals.win.core.deliver_flagged(
                            bytes,
                            t,
                            slot,
                            &flag,
                            flag_at,
                            Some(gate),
                        )? {
                            continue;
                        }
                        // From the send buffer, no copy and no wait for its delivery: the
                        // write holds `send_writes` until it is complete (its own queue
                        // entry tells), and the cycle's request completes only then. Where
                        // the provider places writes in order, the flag right behind it
                        // proves its delivery: it completes once sent, and no
                        // acknowledgement of the block crosses the network.
                        {
                            let owner: std::sync::Arc<dyn Send + Sync> = self.send_writes.clone();
                            crate::transport::network::track_own(|| {
                                signals.win.core.put_shared_bytes(
                                    bytes,
                                    owner,
                                    t,
                                    slot,
                                    &signals.win.raw.flags,
                                    match signals.ordered_net {
                                        true => crate::transport::write_end::WriteEnd::Followed,
                                        false => crate::transport::write_end::WriteEnd::Delivered,
                                    },
                                )
                            })?;
                        }
                        if !signals.ordered_net {
                            signals.win.flush(t)?;
                        }
                        {
                            // Sent, not acknowledged: `t` tells its delivery — it waits
                            // for the flag before its cycle `cycle` completes, and frees
                            // the plan (collectively) only after its last cycle.
                            let words: std::sync::Arc<[u64; 2]> = std::sync::Arc::new(flag);
                            let bytes: &[u8] = bytemuck::cast_slice(&words[..]);
                            crate::transport::network::track_own(|| {
                                signals.win.core.put_shared_bytes(
                                    bytes,
                                    words.clone(),
                                    t,
                                    flag_at,
                                    &signals.win.raw.flags,
                                    crate::transport::write_end::WriteEnd::Answered,
                                )
                            })?;
                        }
                        continue;
                    }
                    None => {
                        win.put(block, put.target, put.disp)?;
                        // The flag follows the block: across nodes in the provider's order
                        // of RMA writes, else once a flush put the block in place (on this
                        // node a copy, a system call, or the target's ring served; the flag
                        // is a release store).
                        if !(signals.across[t] && signals.ordered_net) {
                            win.flush(t)?;
                        }
                    }
                }
                signals.write(t, arrived_word(me, cycle), cycle)?;
            }
            if waiting.len() == before {
                // No credit yet: wait for one (the peers' starts), watching for exits.
                let core = &*signals.win.core;
                let ready = || {
                    waiting.iter().any(|put| {
                        signals.credit(put.target) >= signals.credit_needed(put.target, cycle)
                    })
                };
                core.engine.wait_until(core, ready, None, || {
                    format!(
                        "alltoallv: waiting for the credits of cycle {cycle} from ranks {:?}",
                        waiting.iter().map(|p| p.target).collect::<Vec<_>>()
                    )
                })?;
            }
        }
        let arrivals = Arrivals {
            senders: signals.senders.clone(),
            cycle,
            staged_from: signals.staged_from.clone(),
            recv: win.base() as usize,
            send_writes: std::sync::Arc::downgrade(&self.send_writes),
        };
        let core = &*signals.win.core;
        let ticket = core.engine.start(core, arrivals)?;
        self.in_flight = true;
        Ok(Request::started(core, ticket))
    }

    fn start_auto(&mut self) -> Result<Request<'_>> {
        match self.auto.choice {
            AutoChoice::Persistent => return self.start_notify(),
            AutoChoice::TwoSided => {
                self.two_sided_cycle()?;
                return Ok(Request::done());
            }
            AutoChoice::Probing => {}
        }
        // Cycle 2k: persistent, 2k+1: two-sided; cycles 0 and 1 warm up.
        let cycle = self.auto.cycles;
        self.auto.cycles += 1;
        let began = Instant::now();
        // The fastest probe of each kind: one cycle slowed by the scheduler (2 cores, many
        // ranks) must not decide.
        if cycle % 2 == 0 {
            self.start_notify()?.wait()?;
            if cycle >= 2 {
                self.auto.persistent = self.auto.persistent.min(began.elapsed());
            }
        } else {
            self.two_sided_cycle()?;
            if cycle >= 2 {
                self.auto.two_sided = self.auto.two_sided.min(began.elapsed());
            }
        }
        if self.auto.cycles == 2 * (AUTO_PROBES + 1) {
            // The slowest rank's view decides, identically everywhere.
            let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            let mut times = [nanos(self.auto.persistent), nanos(self.auto.two_sided)];
            self.comm.allreduce(&mut times, ReduceOp::Max)?;
            self.auto.choice = if times[0] <= times[1] {
                AutoChoice::Persistent
            } else {
                AutoChoice::TwoSided
            };
        }
        Ok(Request::done())
    }

    /// The communicator's two-sided alltoallv into the receive buffer.
    fn two_sided_cycle(&mut self) -> Result<()> {
        let win = self.window()?;
        let (base, len) = (win.base(), win.len());
        // SAFETY: the window's memory is `len` elements at `base` (the receive buffer it
        // owns). No peer writes into it during a two-sided cycle: every persistent
        // (notified) cycle before it was waited for (every block arrived), and a peer writes
        // the next one only after this rank's credit, which it sends when it starts that
        // cycle. `&mut self` keeps `recv()` out meanwhile.
        let recv = unsafe { std::slice::from_raw_parts_mut(base, len) };
        // Counts were checked at init; the exchange fails on a peer that sends otherwise.
        self.comm.alltoallv_into(
            Call::Alltoallv,
            self.send.as_slice(),
            &self.send_side.counts,
            &self.send_side.displs,
            recv,
            &self.recv_side.counts,
            &self.recv_side.displs,
        )
    }

    /// Frees the plan (collective): completes a cycle still in flight, frees the window and
    /// returns the send and receive buffers.
    pub fn free(mut self) -> Result<(WinBuffer<T>, WinBuffer<T>)> {
        self.settle()?;
        let me = self.comm.rank();
        if let Some(signals) = self.signals.take() {
            self.window()?.unlock_all()?;
            signals.win.unlock_all()?;
            signals.win.free()?;
        }
        if self.self_locked {
            self.window()?.unlock(me)?;
            self.self_locked = false;
        }
        let win = self
            .win
            .take()
            .ok_or_else(|| Error::InvalidArgument("alltoallv: the plan was freed".into()))?;
        let mut buffers = win.free()?;
        let recv = buffers.pop().ok_or_else(|| {
            Error::InvalidArgument("alltoallv: the window returned no buffer".into())
        })?;
        let send = std::mem::replace(&mut self.send, WinBuffer::Vec(Vec::new()));
        Ok((send, recv))
    }
}

/// One exchange through a window created and freed for it (the non-persistent RMA
/// baseline: what every call of an RMA alltoallv without a plan pays). Collective; takes the
/// receive buffer and hands it back with the result. Arguments and errors as for
/// [`Alltoallv::new`].
#[allow(clippy::too_many_arguments)]
pub fn alltoallv_rma_oneshot<T: Pod>(
    comm: &Comm,
    send: &[T],
    sendcounts: &[usize],
    sdispls: &[usize],
    recv: impl Into<WinBuffer<T>>,
    recvcounts: &[usize],
    rdispls: &[usize],
) -> Result<WinBuffer<T>> {
    let recv = recv.into();
    let n = comm.size();
    let put_displs = exchange_layout(
        comm,
        (send.len(), sendcounts, sdispls),
        (recv.len(), recvcounts, rdispls),
    )?;
    let win = Window::create(comm, recv)?;
    win.fence(Assert::NOPRECEDE)?;
    for p in issue_order(comm.rank(), n, None, |p| p) {
        let len = sendcounts[p];
        if len > 0 {
            let at = sdispls[p];
            win.put(&send[at..at + len], p, put_displs[p])?;
        }
    }
    win.fence(Assert::NOSUCCEED)?;
    win.free()?
        .pop()
        .ok_or_else(|| Error::InvalidArgument("alltoallv: the window returned no buffer".into()))
}

/// The two-sided alltoallv of the communicator, with `MPI_Alltoallv`'s arguments (the
/// baseline a plan is measured against). Collective.
pub fn alltoallv_two_sided<T: Pod>(
    comm: &Comm,
    send: &[T],
    sendcounts: &[usize],
    sdispls: &[usize],
    recv: &mut [T],
    recvcounts: &[usize],
    rdispls: &[usize],
) -> Result<()> {
    let n = comm.size();
    let me = comm.rank();
    let local = check_side("send", n, sendcounts, sdispls, send.len())
        .and_then(|()| check_side("receive", n, recvcounts, rdispls, recv.len()));
    // To rank p: what I send it, and whether my own layout is sound. Each receiver checks
    // its counts against its senders; then all agree before any data moves.
    let ok = u64::from(local.is_ok());
    let pairs: Vec<u64> = (0..n)
        .flat_map(|p| [sendcounts.get(p).map_or(0, |&c| c as u64), ok])
        .collect();
    let got = comm.alltoall(&pairs)?;
    let local = local.and_then(|()| {
        match (0..n).find(|&p| got[2 * p + 1] == 1 && got[2 * p] != recvcounts[p] as u64) {
            Some(p) => Err(Error::InvalidArgument(format!(
                "alltoallv: rank {me} expects {} elements from rank {p}, which sends {}",
                recvcounts[p],
                got[2 * p]
            ))),
            None => Ok(()),
        }
    });
    comm.agree_on(Call::Alltoallv, local)?;
    comm.alltoallv_into(
        Call::Alltoallv,
        send,
        sendcounts,
        sdispls,
        recv,
        recvcounts,
        rdispls,
    )
}

/// Collective: checks both sides' counts and displacements (`(buffer length, counts,
/// displacements)`), learns what each sender sends this rank and where this rank's block
/// goes in each receiver's buffer (one exchange of 64-bit `[count, displacement]` pairs),
/// checks every receive count against its sender, and returns those displacements. Every
/// error is returned at every rank together.
fn exchange_layout(
    comm: &Comm,
    send: (usize, &[usize], &[usize]),
    recv: (usize, &[usize], &[usize]),
) -> Result<Vec<usize>> {
    let n = comm.size();
    let me = comm.rank();
    let local = check_side("send", n, send.1, send.2, send.0)
        .and_then(|()| check_side("receive", n, recv.1, recv.2, recv.0));
    comm.agree_on(Call::Alltoallv, local)?;
    // To rank p: what I send it, and where p's block goes in my receive buffer.
    let pairs: Vec<u64> = (0..n)
        .flat_map(|p| [send.1[p] as u64, recv.2[p] as u64])
        .collect();
    let got = comm.alltoall(&pairs)?;
    let local = match (0..n).find(|&p| got[2 * p] != recv.1[p] as u64) {
        Some(p) => Err(Error::InvalidArgument(format!(
            "alltoallv: rank {me} expects {} elements from rank {p}, which sends {}",
            recv.1[p],
            got[2 * p]
        ))),
        None => Ok(()),
    };
    comm.agree_on(Call::Alltoallv, local)?;
    Ok((0..n).map(|p| got[2 * p + 1] as usize).collect())
}

/// Error unless `counts` and `displs` have one entry per rank and every block lies in a
/// buffer of `len` elements.
fn check_side(what: &str, n: usize, counts: &[usize], displs: &[usize], len: usize) -> Result<()> {
    if counts.len() != n || displs.len() != n {
        return Err(Error::InvalidArgument(format!(
            "alltoallv: {} {what} counts and {} displacements for {n} ranks",
            counts.len(),
            displs.len()
        )));
    }
    for p in 0..n {
        let end = displs[p].checked_add(counts[p]);
        if end.is_none_or(|e| e > len) {
            return Err(Error::InvalidArgument(format!(
                "alltoallv: the {what} block for rank {p} ({} elements at {}) leaves the \
                 {len}-element buffer",
                counts[p], displs[p]
            )));
        }
    }
    Ok(())
}

/// The ranks in the order this rank serves them: starting after itself and wrapping
/// around (so that the ranks do not all hit the same target at once), off-node ranks first
/// when `node_of` is given; `make` builds each entry.
fn issue_order<P>(
    me: usize,
    n: usize,
    node_of: Option<&[u64]>,
    make: impl Fn(usize) -> P,
) -> Vec<P> {
    let rotated = (1..=n).map(|k| (me + k) % n);
    let ranks: Vec<usize> = match node_of {
        None => rotated.collect(),
        Some(nodes) => {
            let (local, remote): (Vec<usize>, Vec<usize>) =
                rotated.partition(|&p| nodes[p] == nodes[me]);
            remote.into_iter().chain(local).collect()
        }
    };
    ranks.into_iter().map(make).collect()
}

/// A node identifier for every rank (collective).
fn node_ids(comm: &Comm, split: NodeSplit) -> Result<Vec<u64>> {
    match split {
        NodeSplit::RanksPerNode(0) => Err(Error::InvalidArgument(
            "alltoallv: an emulated node needs at least one rank".into(),
        )),
        NodeSplit::RanksPerNode(k) => Ok((0..comm.size()).map(|r| (r / k) as u64).collect()),
        NodeSplit::Hosts => (0..comm.size())
            .map(|r| comm.node_of(r).map(|n| n as u64))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_order_rotates_and_puts_remote_ranks_first() {
        assert_eq!(issue_order(1, 4, None, |p| p), vec![2, 3, 0, 1]);
        // Nodes {0,1} and {2,3}: rank 1 serves 2 and 3 (other node) before 0 and itself.
        let nodes = [0, 0, 1, 1];
        assert_eq!(issue_order(1, 4, Some(&nodes), |p| p), vec![2, 3, 0, 1]);
        assert_eq!(issue_order(2, 4, Some(&nodes), |p| p), vec![0, 1, 3, 2]);
    }

    #[test]
    fn sides_are_checked_against_their_buffers() {
        assert!(check_side("send", 2, &[1, 1], &[0, 1], 2).is_ok());
        assert!(check_side("send", 2, &[1, 2], &[0, 1], 2).is_err());
        assert!(check_side("send", 3, &[1, 1], &[0, 1], 2).is_err());
        assert!(check_side("send", 1, &[1], &[usize::MAX], 2).is_err());
    }

    #[test]
    fn break_even_rounds_up_and_never_pays_when_slower() {
        let us = Duration::from_micros;
        let m = BreakEven {
            t_init: us(101),
            t_persist: us(30),
            t_baseline: us(50),
        };
        assert_eq!(m.iterations(), Some(6));
        let equal = BreakEven {
            t_persist: us(50),
            ..m
        };
        assert_eq!(equal.iterations(), None);
    }
}
