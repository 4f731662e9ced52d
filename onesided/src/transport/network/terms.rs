//! The words the network is spoken in: where an operation goes ([`Remote`]), what an
//! atomic is ([`NetOp`], [`NetType`], [`AtomicKind`], what the endpoint does natively:
//! [`AtomicTable`]), a delivery's second place ([`DeliverGate`]), when a message nobody
//! answers is acknowledged ([`Ack`]) and what a window counts of what it issued
//! ([`NetWrites`]). Every implementation of the network and every user of
//! it names these; they name nothing of either.

// What only an implementation of the network uses (none without the feature `net`).
#![cfg_attr(not(feature = "net"), allow(dead_code))]

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::ops::{ElemType, Op};

/// When the receiver of a message nobody answers acknowledges it to TCP.
///
/// The kernel acknowledges data late, hoping to carry the acknowledgement on data of its
/// own (delayed ACKs): a message nobody answers stays unacknowledged until its receiver
/// sends something, or until a second message arrives on top of it — and then the kernel
/// sends a bare acknowledgement first, in the path of that second message's answer. A
/// lock's release followed by the next lock request to the same process is that case: a
/// request/answer round trip took 7.0–7.5 µs alone and 8.9–10.3 µs behind an unanswered
/// message (a C probe over loopback TCP, both processes polling), one segment more per
/// pair. A receiver that acknowledges the unanswered message as soon as it read it
/// (`TCP_QUICKACK` 2: the pending acknowledgement now, delayed ones afterwards) took the
/// round trip back to 6.5–7.3 µs. Where messages nobody answers cross each way (a fence's
/// signals), each is acknowledged by the next one coming back, and prompt acknowledgements
/// would only add segments (a two-process exchange of signals: 7.6–8.6 → 10.7–12.1 µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ack {
    /// Carried by whatever the receiver sends next (the kernel's choice).
    WithReply,
    /// Right after the receiver read it, unless something else came behind it in the same
    /// read (the receiver's answer to that carries the acknowledgement).
    AtOnce,
}

/// The atomic operations of the network (libfabric's `fi_op`; every transport's atomics
/// name theirs so).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum NetOp {
    Min,
    Max,
    Sum,
    Prod,
    Lor,
    Land,
    Bor,
    Band,
    Lxor,
    Bxor,
    /// Read (fetching only).
    Read,
    /// Replace.
    Write,
    /// Replace if equal to the compare operand (compare-atomic only).
    CompareSwap,
}

impl NetOp {
    /// Every operation, in libfabric's order.
    pub(crate) const ALL: [NetOp; 13] = [
        NetOp::Min,
        NetOp::Max,
        NetOp::Sum,
        NetOp::Prod,
        NetOp::Lor,
        NetOp::Land,
        NetOp::Bor,
        NetOp::Band,
        NetOp::Lxor,
        NetOp::Bxor,
        NetOp::Read,
        NetOp::Write,
        NetOp::CompareSwap,
    ];

    /// The MPI operation that applies it (`Read` is `no_op`, `Write` `replace`;
    /// `CompareSwap` has none and maps to `replace`, the wire tells it by its kind).
    pub(crate) fn mpi(self) -> Op {
        match self {
            NetOp::Min => Op::Min,
            NetOp::Max => Op::Max,
            NetOp::Sum => Op::Sum,
            NetOp::Prod => Op::Prod,
            NetOp::Lor => Op::Lor,
            NetOp::Land => Op::Land,
            NetOp::Bor => Op::Bor,
            NetOp::Band => Op::Band,
            NetOp::Lxor => Op::Lxor,
            NetOp::Bxor => Op::Bxor,
            NetOp::Read => Op::NoOp,
            NetOp::Write | NetOp::CompareSwap => Op::Replace,
        }
    }
}

/// The element types of the network's atomics (libfabric's `fi_datatype`), those onesided
/// accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum NetType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl NetType {
    /// Every type.
    pub(crate) const ALL: [NetType; 10] = [
        NetType::I8,
        NetType::U8,
        NetType::I16,
        NetType::U16,
        NetType::I32,
        NetType::U32,
        NetType::I64,
        NetType::U64,
        NetType::F32,
        NetType::F64,
    ];

    /// The element type of accumulates it is.
    pub(crate) fn elem(self) -> ElemType {
        match self {
            NetType::I8 => ElemType::I8,
            NetType::U8 => ElemType::U8,
            NetType::I16 => ElemType::I16,
            NetType::U16 => ElemType::U16,
            NetType::I32 => ElemType::I32,
            NetType::U32 => ElemType::U32,
            NetType::I64 => ElemType::I64,
            NetType::U64 => ElemType::U64,
            NetType::F32 => ElemType::F32,
            NetType::F64 => ElemType::F64,
        }
    }

    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            NetType::I8 | NetType::U8 => 1,
            NetType::I16 | NetType::U16 => 2,
            NetType::I32 | NetType::U32 | NetType::F32 => 4,
            NetType::I64 | NetType::U64 | NetType::F64 => 8,
        }
    }
}

/// How an atomic returns: nothing, the previous value, or the previous value of a compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum AtomicKind {
    /// `fi_atomic`.
    Write,
    /// `fi_fetch_atomic`.
    Fetch,
    /// `fi_compare_atomic`.
    Compare,
}

/// What the provider does natively: for each (kind, op, type), the most elements one
/// atomic call may carry (absent: not at all), as `fi_query_atomic` answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct AtomicTable {
    counts: std::collections::HashMap<(AtomicKind, NetOp, NetType), usize>,
}

impl AtomicTable {
    /// The most elements of `ty` one `kind` atomic with `op` may carry; `None`: the
    /// provider does not have it (the caller falls back to element-wise atomics).
    pub(crate) fn count(&self, kind: AtomicKind, op: NetOp, ty: NetType) -> Option<usize> {
        self.counts.get(&(kind, op, ty)).copied()
    }

    /// Records that one `kind` atomic with `op` on `ty` may carry up to `count` elements.
    pub(crate) fn insert(&mut self, kind: AtomicKind, op: NetOp, ty: NetType, count: usize) {
        self.counts.insert((kind, op, ty), count);
    }

    /// A table with only `entries` (tests of the fallbacks).
    #[cfg(all(test, feature = "net"))]
    pub(crate) fn only(entries: &[(AtomicKind, NetOp, NetType, usize)]) -> AtomicTable {
        AtomicTable {
            counts: entries.iter().map(|&(k, o, t, c)| ((k, o, t), c)).collect(),
        }
    }
}

/// A delivery's second place ([`deliver`]; the wire's `Gate` says how it is chosen):
/// the receiver's word that must hold at least `at_least`, the place, and the flag words
/// stored then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeliverGate<'a> {
    pub word: Remote,
    pub at_least: u64,
    pub to: Remote,
    pub words: &'a [u64],
}

/// Where an operation goes: a peer's address in the endpoint's address vector, the remote
/// address of the first byte and the registration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Remote {
    pub peer: u64,
    pub addr: u64,
    pub key: u64,
}

/// What a window issued through the network that a completion must wait for before a
/// release or an unlock may rely on it, against what a completion of the endpoint is known
/// to cover: writes (RMA, not atomics) to any target — the provider may deliver an atomic
/// before an RMA write issued earlier — and any operation to a rank of this node (an
/// accumulate that CPU atomics cannot do goes through the network for this node's ranks
/// too; an unlock of such a target otherwise completes nothing on the network). Counts
/// only grow.
#[derive(Debug, Default)]
pub(crate) struct NetWrites {
    /// Writes to targets on other nodes.
    pub(crate) far: IssuedCount,
    /// Any operation to a rank of this node.
    pub(crate) near: IssuedCount,
}

impl NetWrites {
    /// Both counts issued so far (before a completion starts).
    pub(crate) fn issued(&self) -> (u64, u64) {
        (self.far.issued(), self.near.issued())
    }

    /// A completion that started when `issued` had been issued has ended.
    pub(crate) fn covered(&self, (far, near): (u64, u64)) {
        self.far.covered(far);
        self.near.covered(near);
    }
}

/// Operations issued, against those a completion is known to cover. Both only grow.
#[derive(Debug, Default)]
pub(crate) struct IssuedCount {
    issued: std::sync::atomic::AtomicU64,
    covered: std::sync::atomic::AtomicU64,
}

impl IssuedCount {
    /// One more issued.
    pub(crate) fn issue(&self) {
        // Release: a thread that reads the count after seeing this operation's effects (an
        // unlock ordered after it) counts it.
        self.issued
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// The count issued so far.
    fn issued(&self) -> u64 {
        // Acquire: pairs with `issue`.
        self.issued.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A completion that started when `issued` had been issued has ended.
    fn covered(&self, issued: u64) {
        // Release: pairs with `pending`'s Acquire.
        self.covered
            .fetch_max(issued, std::sync::atomic::Ordering::Release);
    }

    /// True when an operation may be in flight.
    pub(crate) fn pending(&self) -> bool {
        // Acquire both: an operation counted after a completion's snapshot stays pending.
        self.covered.load(std::sync::atomic::Ordering::Acquire)
            < self.issued.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Words of scratch space an implementation keeps in front of a [`TrackedContext`].
pub(crate) const PROVIDER_SPACE_WORDS: usize = 8;

/// The context of one posted operation: the implementation's scratch space first
/// (libfabric's `FI_CONTEXT2`), then what the completion reader marks. An operation posted with
/// [`Fabric::fetch_word`](super::Fabric::fetch_word) asks for a queue entry and is *tracked*: the reader sets `done`
/// (and `failed`) through the entry's context pointer, so its owner learns when that one
/// operation completed. Other operations ask for none (selective completion) and are
/// completed together by a flush; an error entry of any operation marks its context.
#[repr(C)]
#[derive(Default)]
pub(crate) struct TrackedContext {
    /// First: the entry's context pointer is the provider's context.
    provider: [usize; PROVIDER_SPACE_WORDS],
    done: std::sync::atomic::AtomicBool,
    failed: std::sync::atomic::AtomicBool,
}

impl TrackedContext {
    /// Ready for a new operation.
    pub(crate) fn reset(&self) {
        // Relaxed: the post that follows hands the context to the provider (a call into
        // libfabric), and the reader's Release store is what the owner acquires.
        self.done.store(false, Ordering::Relaxed);
        self.failed.store(false, Ordering::Relaxed);
    }

    /// Marks the operation done (`failed`: in error): what the completion reader does.
    pub(crate) fn mark(&self, failed: bool) {
        // Relaxed, then Release: the owner's Acquire of `done` sees `failed` too.
        self.failed.store(failed, Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }

    /// Whether the operation completed, and whether in error.
    pub(crate) fn completed(&self) -> Option<bool> {
        // Acquire: pairs with the queue reader's Release; the result buffer the provider
        // wrote before the entry is visible after it.
        self.done
            .load(Ordering::Acquire)
            .then(|| self.failed.load(Ordering::Relaxed))
    }
}

/// Tells whether a peer process has ended (its record in the job's roster, which the
/// launcher marks for every node).
pub(crate) type PeerEnded = Arc<dyn Fn() -> bool + Send + Sync>;

/// The environment variable that chooses the process's network: `ofi` (libfabric with
/// our messages over TCP; the default where the feature `ofi` is built) or `socket` (our
/// messages over TCP alone; the default of a build with `net` only). Every process of a
/// job must choose the same.
pub(crate) const NETWORK_ENV: &str = "ONESIDED_NETWORK";

/// Non-fetching atomics up to this many bytes go with a copy of their operand, and so do
/// writes (longer ones are posted from the caller's buffer).
pub(crate) const COPY_MAX: usize = 64 << 10;

/// Puts from this many bytes on go over our own connection to the target where it reaches
/// it ([`Network::post_long_put`](crate::transport::network::Network::post_long_put)):
/// from the caller's bytes, landed in place, answered.
pub(crate) const LONG_PUT_MIN: usize = 64 << 10;

/// Bytes the endpoint may hold in operations not yet seen complete (copied origin bytes
/// and each operation's bookkeeping); beyond it a post first completes everything in
/// flight, so a long epoch of small writes holds bounded memory.
pub(crate) const HELD_MAX: usize = 16 << 20;

/// A value that exists only in a build with a network (the feature `net`). Without one,
/// `Only<T>` has no value at all — uninhabited and of size zero — so the compiler drops
/// every path that would hold one: a `Route::Net`, a window's network plane. The network's
/// protocol code then compiles in every build and costs a node-local path nothing.
#[cfg(feature = "net")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Only<T>(T);

/// See the build with a network.
#[cfg(not(feature = "net"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Only<T> {
    /// Never built: no value of it exists.
    Never(std::convert::Infallible, std::marker::PhantomData<T>),
}

impl<T> Only<T> {
    /// `value`, where this build has a network; `None` otherwise.
    #[inline(always)]
    pub(crate) fn new(value: T) -> Option<Only<T>> {
        #[cfg(feature = "net")]
        return Some(Only(value));
        #[cfg(not(feature = "net"))]
        {
            drop(value);
            None
        }
    }

    /// The value with `f` applied.
    #[inline(always)]
    pub(crate) fn map<U>(&self, f: impl FnOnce(&T) -> U) -> Only<U> {
        #[cfg(feature = "net")]
        return Only(f(&self.0));
        #[cfg(not(feature = "net"))]
        {
            let _ = f;
            match *self {
                Only::Never(never, _) => match never {},
            }
        }
    }
}

impl<T> std::ops::DerefMut for Only<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        #[cfg(feature = "net")]
        return &mut self.0;
        #[cfg(not(feature = "net"))]
        match *self {
            Only::Never(never, _) => match never {},
        }
    }
}

impl<T> std::ops::Deref for Only<T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        #[cfg(feature = "net")]
        return &self.0;
        #[cfg(not(feature = "net"))]
        match *self {
            Only::Never(never, _) => match never {},
        }
    }
}
