//! The untyped state of a window ([`WinCore`]) that every RMA-chapter module extends: where
//! each target's memory is, the control words, the epoch state and the progress engine.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::bootstrap::Comm;
use crate::error::{Error, Result};
use crate::progress::Engine;
use crate::shm::barrier::Barrier;
use crate::shm::segment::Segment;
use crate::transport::Route;
use crate::win::attr::Flavor;
use crate::win::control::Control;
use crate::win::epoch::EpochState;
use crate::win::info::WinHints;

/// [`Targets::Spread`]'s description of every rank's memory.
#[derive(Debug)]
pub(crate) struct Spread {
    /// How each rank is reached (shared with other windows over the same ranks).
    pub(crate) routes: std::sync::Arc<Vec<crate::win::reach::RankRoute>>,
    /// This node's data, mapped here.
    pub(crate) node_base: *mut u8,
    /// Bytes per rank's slot.
    pub(crate) stride: usize,
    /// Every rank's window size and displacement unit.
    pub(crate) bytes: usize,
    pub(crate) disp_unit: usize,
    /// Where the data starts in a node's segment, as the network addresses it, and the
    /// key every node's segment is registered under.
    pub(crate) net_base: u64,
    pub(crate) key: u64,
}

/// Where the window memory of each target is.
#[derive(Debug)]
pub(crate) enum Targets {
    /// Same size and disp_unit everywhere; rank r's memory at `base + r * stride`.
    Symmetric {
        base: *mut u8,
        stride: usize,
        bytes: usize,
        disp_unit: usize,
    },
    /// One entry per rank.
    Table(Vec<TargetRegion>),
    /// `allocate` across nodes, same size everywhere, every rank's node segment under one
    /// key: rank r's memory is `slot(r) * stride` into its node's data, mapped here
    /// (`node_base`) or reached at that offset from `net_base` under `key` — the per-rank
    /// table is the one every window over these ranks shares.
    Spread(crate::transport::network::Only<Spread>),
    /// Dynamic window: resolved through the region-descriptor cache.
    Dynamic,
}

impl Targets {
    /// Rank `rank`'s memory (a rank that exists; dynamic windows have none to give).
    #[inline]
    pub(crate) fn region(&self, rank: usize) -> Option<TargetRegion> {
        match self {
            Targets::Symmetric {
                base,
                stride,
                bytes,
                disp_unit,
            } => Some(TargetRegion {
                route: Route::Direct(base.wrapping_add(rank * stride)),
                bytes: *bytes,
                disp_unit: *disp_unit,
                shared: true,
                lazy: None,
            }),
            Targets::Table(t) => t.get(rank).copied(),
            Targets::Spread(ref spread) => {
                let Spread {
                    routes,
                    node_base,
                    stride,
                    bytes,
                    disp_unit,
                    net_base,
                    key,
                } = &**spread;
                let r = routes.get(rank)?;
                let at = r.slot as usize * stride;
                let route = if r.here {
                    Route::Direct(node_base.wrapping_add(at))
                } else {
                    Route::network(crate::transport::network::Remote {
                        peer: r.peer,
                        addr: net_base + at as u64,
                        key: *key,
                    })?
                };
                Some(TargetRegion {
                    route,
                    bytes: *bytes,
                    disp_unit: *disp_unit,
                    shared: r.here,
                    lazy: None,
                })
            }
            Targets::Dynamic => None,
        }
    }
}

// SAFETY: the pointers in `Targets` point into mappings the WinCore keeps alive (its node
// segment and the peers' segments it mapped); they are only dereferenced by RMA calls, which
// any thread may make under the epoch rules.
unsafe impl Send for Targets {}
// SAFETY: as for Send.
unsafe impl Sync for Targets {}

/// Window memory of one target.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TargetRegion {
    pub route: Route,
    pub bytes: usize,
    pub disp_unit: usize,
    /// Mapped by every process (shared memory): accumulates may use CPU atomics on it.
    pub shared: bool,
    /// The memory lives in the target's shared heap and is mapped here at the first access:
    /// index into `WinCore::peer_mappings` (`route` is unused then).
    pub lazy: Option<u32>,
}

/// A peer's shared-heap segment holding its window memory, mapped at the first access
/// rather than at creation (mapping costs an `shm_open`, an `fstat` and an `mmap`, more than
/// the rest of creating a `create` window). The peer's memory and its name live as long as
/// the window, so the mapping cannot fail for a live peer.
#[derive(Debug)]
pub(crate) struct PeerMapping {
    name: String,
    /// Where the window memory starts in the segment.
    offset: usize,
    /// The window memory in our mapping, null until mapped. Acquire/Release: a thread that
    /// sees the pointer also sees the mapping made before it was stored.
    direct: std::sync::atomic::AtomicPtr<u8>,
    segment: Mutex<Option<Segment>>,
}

impl PeerMapping {
    pub(crate) fn new(name: String, offset: usize) -> Self {
        PeerMapping {
            name,
            offset,
            direct: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
            segment: Mutex::new(None),
        }
    }

    /// The window memory, if already mapped.
    #[inline]
    pub(crate) fn mapped(&self) -> Option<*mut u8> {
        let p = self.direct.load(Ordering::Acquire);
        (!p.is_null()).then_some(p)
    }

    /// The window memory (`bytes` long), mapping the segment now if needed.
    pub(crate) fn map(&self, bytes: usize) -> Result<*mut u8> {
        if let Some(p) = self.mapped() {
            return Ok(p);
        }
        let mut slot = self.segment.lock().unwrap_or_else(|e| e.into_inner());
        let seg = match &mut *slot {
            Some(seg) => seg,
            empty => {
                let s = Segment::open(&self.name)?;
                if self
                    .offset
                    .checked_add(bytes)
                    .is_none_or(|end| end > s.len())
                {
                    return Err(crate::error::Error::Bootstrap(format!(
                        "window memory at {} (+{bytes} bytes) lies outside its {}-byte segment",
                        self.offset,
                        s.len()
                    )));
                }
                empty.insert(s)
            }
        };
        let p = seg.as_ptr().wrapping_add(self.offset);
        self.direct.store(p, Ordering::Release);
        Ok(p)
    }
}

/// This process's own window memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LocalRegion {
    pub base: *mut u8,
    pub bytes: usize,
    pub disp_unit: usize,
}

// SAFETY: `base` is this process's window memory, owned by the Window (its buffer or the
// node segment) for as long as the WinCore lives.
unsafe impl Send for LocalRegion {}
// SAFETY: as for Send.
unsafe impl Sync for LocalRegion {}

/// The info keys of one window *handle* (seed 000 §2–§3): duplicates of a window share its
/// core but may each set these differently, so every call that depends on them takes them
/// from the handle it was made through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Flags(u8);

impl Flags {
    const THREAD_SCOPE: u8 = 1;
    const ORDER: u8 = 2;
    const INTRINSIC: u8 = 4;
    const RMA_ORDER: u8 = 8;

    pub(crate) fn from_hints(h: &WinHints) -> Flags {
        let mut bits = 0;
        if h.scope == crate::win::info::WinScope::Thread {
            bits |= Self::THREAD_SCOPE;
        }
        if h.order {
            bits |= Self::ORDER;
        }
        if h.accumulate_intrinsic {
            bits |= Self::INTRINSIC;
        }
        Flags(bits)
    }

    /// `mpi_win_scope=thread`.
    pub(crate) fn thread_scope(self) -> bool {
        self.0 & Self::THREAD_SCOPE != 0
    }

    /// `mpi_win_order=true`.
    pub(crate) fn order(self) -> bool {
        self.0 & Self::ORDER != 0
    }

    /// `mpi_assert_accumulate_intrinsic=true`.
    pub(crate) fn intrinsic(self) -> bool {
        self.0 & Self::INTRINSIC != 0
    }

    /// Puts to other nodes keep the provider's order of RMA writes: never as atomics over
    /// the wire (`transport::network::put_over_wire`). The library's own signal windows set it,
    /// whose flags follow their data (written to another window) in that order; MPI
    /// orders no puts without `mpi_win_order`.
    pub(crate) fn keeps_rma_order(self) -> bool {
        self.0 & Self::RMA_ORDER != 0
    }

    /// These flags, and [`Flags::keeps_rma_order`] if `keep`.
    pub(crate) fn keeping_rma_order(self, keep: bool) -> Flags {
        if keep {
            Flags(self.0 | Self::RMA_ORDER)
        } else {
            self
        }
    }
}

/// A handle's [`Flags`], changed by `set_info` while other threads may use the handle.
#[derive(Debug, Default)]
pub(crate) struct HandleFlags(std::sync::atomic::AtomicU8);

impl HandleFlags {
    pub(crate) fn new(f: Flags) -> Self {
        HandleFlags(std::sync::atomic::AtomicU8::new(f.0))
    }

    #[inline]
    pub(crate) fn get(&self) -> Flags {
        // Relaxed: set by set_info, a collective the caller made before this call.
        Flags(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }

    pub(crate) fn set(&self, f: Flags) {
        // Relaxed: see get.
        self.0.store(f.0, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Everything of a window that does not depend on the element type.
pub(crate) struct WinCore {
    pub(crate) comm: Comm,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) flavor: Flavor,
    pub(crate) ctrl: Control,
    pub(crate) barrier: Barrier,
    pub(crate) targets: Targets,
    pub(crate) local: LocalRegion,
    pub(crate) hints: Mutex<WinHints>,
    /// `mpi_accumulate_granularity` in effect (read on the accumulate fast path).
    pub(crate) acc_granularity: AtomicUsize,
    /// `no_locks` in effect (read by every lock call without taking the hints' lock).
    pub(crate) no_locks: std::sync::atomic::AtomicBool,
    /// The reorder flags in effect ([`crate::Reorder::bits`]), read by the engine.
    pub(crate) reorder: std::sync::atomic::AtomicU8,
    pub(crate) epoch: EpochState,
    /// Which threads of this process issue atomics on the window: long accumulates under
    /// an exclusive lock go plain when only one does ([`crate::plain_acc`]).
    pub(crate) plain_gate: crate::plain_acc::PlainGate,
    pub(crate) engine: Engine<WinCore>,
    /// Collective calls made on this window (the next one's sequence number).
    pub(crate) collectives: AtomicU64,
    /// The members in the node's roster, on this window's channel (its waits watch them).
    pub(crate) watch: Option<crate::bootstrap::PeerWatch>,
    /// Access epochs opened toward each peer with `start` (PSCW matching counts).
    pub(crate) pscw_accesses: Mutex<HashMap<usize, u64>>,
    /// `test` on the network plane: the completion count known reached, and its read of
    /// this rank's completion counter while the plane has not answered it.
    pub(crate) pscw_test_read: Mutex<(u64, Option<crate::plane::Awaited>)>,
    pub(crate) dynamic: crate::win::regions::DynamicState,
    /// Small cross-memory-attach puts waiting for the next completion point.
    pub(crate) staged: crate::transport::combine::StagedPuts,
    /// Notification counters of every rank (`set_num_notify`, rma::notify).
    pub(crate) notify: crate::win::notify_counters::Notifications,
    /// Held by every synchronization call (lock, unlock, lock_all, unlock_all, post, start,
    /// complete, wait, fence) from its epoch transition until its op has started, not while
    /// it waits. Threads sharing the window (it is `Sync`) thereby start their
    /// synchronizations one at a time, in the order the engine then keeps: an `unlock` can
    /// never overtake the `lock` it closes, and a second exclusive lock queues behind a
    /// first one that is still registering at the global word. RMA calls never take it.
    pub(crate) calls: crate::spin::SpinLock<()>,
    /// Bytes of puts queued behind pending synchronizations (rma::DeferredPut).
    pub(crate) deferred_bytes: AtomicUsize,
    /// Buffers of deferred puts that have landed, reused by the next ones.
    pub(crate) spare_copies: Mutex<Vec<Vec<u8>>>,
    /// Peers' shared-heap memory of `create` windows, mapped at the first access.
    pub(crate) peer_mappings: Vec<PeerMapping>,
    /// Request rings toward targets whose memory is reached by cross-memory attach
    /// (`create` windows over ordinary memory), and this process's side as their server.
    pub(crate) rings: Option<crate::transport::ring::Rings>,
    /// The network control plane, when the window spans nodes (`WinCore::plane`).
    pub(crate) net:
        Option<crate::transport::network::Only<Box<dyn crate::win::net_control::NetControl>>>,
    /// This process's registrations with its network endpoint (windows across nodes): its
    /// node's window segment, and for `create` windows its own memory; dropped before the
    /// segment and before the window's buffer.
    pub(crate) net_registrations: Vec<crate::transport::network::Registration>,
    /// Every rank's window memory as the network reaches it (windows across nodes; empty
    /// otherwise): accumulates that CPU atomics cannot do go there for every rank, this
    /// node's included, so that one element never sees two protocols.
    pub(crate) net_data: crate::win::reach::Remotes,
    /// Windows across nodes: the id every rank agrees on (rank 0's node segment tag; each
    /// node's segment has its own), which memory handles carry.
    pub(crate) net_window_id: Option<u64>,
    /// Writes (not atomics) this window issued through the network, and how many of them
    /// a completion of the endpoint covered (`WinCore::net_writes_pending`).
    pub(crate) net_writes: crate::transport::network::NetWrites,
    /// Exclusive-class memberships that unlocks across nodes still hold while they wait
    /// for the answer to their release, each handed to a later lock of this process at most
    /// once (`sync::lock`, "Memberships in transit").
    pub(crate) memberships_in_transit: InTransit,
    /// The node segment or control block; the pointers above point into it.
    pub(crate) _segment: crate::win::control::ControlMemory,
    /// This process's window memory moved into shared memory for the window's life
    /// (`onesided_share_in_place`); made private again when dropped, after everything above.
    pub(crate) in_place: Option<crate::memory::SharedInPlace>,
}

const _: () = {
    const fn shared_by_threads<T: Send + Sync>() {}
    shared_by_threads::<WinCore>();
};

impl fmt::Debug for WinCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WinCore")
            .field("flavor", &self.flavor)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("local", &self.local)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// A window's core, shared with the process registry (which drives its queue from other
/// threads): one strong count of an `Arc<WinCore>`, kept as the pointer to the value
/// itself, so that every call reaches the core with one load and passes it on as is (an
/// `Arc` points at its counts, 16 bytes before the value — one more instruction on each
/// fast path that hands `&WinCore` to out-of-line code).
pub(crate) struct SharedCore(std::ptr::NonNull<WinCore>);

// SAFETY: a SharedCore owns one strong count of an Arc<WinCore>, and WinCore is Send + Sync
// (asserted above): moving or sharing the handle is moving or sharing that Arc.
unsafe impl Send for SharedCore {}
// SAFETY: as for Send.
unsafe impl Sync for SharedCore {}

impl SharedCore {
    /// Puts `core` in an `Arc` and registers its engine with the process registry.
    pub(crate) fn new(core: WinCore) -> SharedCore {
        let arc = std::sync::Arc::new(core);
        crate::progress::Engine::set_home(&arc, |c| &c.engine);
        let raw = std::sync::Arc::into_raw(arc).cast_mut();
        SharedCore(std::ptr::NonNull::new(raw).expect("Arc::into_raw is never null"))
    }

    /// A second strong count of the same core (a window duplicate's).
    pub(crate) fn clone_handle(&self) -> SharedCore {
        // SAFETY: the pointer came from Arc::into_raw and our strong count keeps it alive;
        // the new count is given back by the new handle's Drop.
        unsafe { std::sync::Arc::increment_strong_count(self.0.as_ptr()) };
        SharedCore(self.0)
    }

    /// Takes the window out of the registry (see `registry::unregister`).
    pub(crate) fn unregister(&self) {
        // SAFETY: the pointer came from Arc::into_raw and our strong count keeps it alive;
        // ManuallyDrop leaves that count untouched.
        let arc = std::mem::ManuallyDrop::new(unsafe { std::sync::Arc::from_raw(self.0.as_ptr()) });
        crate::pending::unregister(&*arc);
    }
}

impl std::ops::Deref for SharedCore {
    type Target = WinCore;

    #[inline(always)]
    fn deref(&self) -> &WinCore {
        // SAFETY: our strong count keeps the value alive as long as `self`.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for SharedCore {
    fn drop(&mut self) {
        // SAFETY: gives back the strong count taken by Arc::into_raw in `new`, once.
        drop(unsafe { std::sync::Arc::from_raw(self.0.as_ptr()) });
    }
}

impl fmt::Debug for SharedCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl crate::pending::Pending for WinCore {
    fn progress_for_other(&self) -> bool {
        self.engine.progress_for_other(self)
    }

    fn set_attention(&self) {
        self.engine.set_attention();
    }
}

impl WinCore {
    /// The window's hints (info in force).
    pub(crate) fn hints(&self) -> MutexGuard<'_, WinHints> {
        self.hints.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stages a small put reached by cross-memory attach (transport::combine), issued
    /// through a handle with `flags`: with `mpi_win_order` and process scope, behind every
    /// other thread's staged puts.
    pub(crate) fn stage_put(&self, pid: i32, addr: usize, src: &[u8], flags: Flags) -> Result<()> {
        let staged = if flags.order() && !flags.thread_scope() {
            // A later put of this target to mapped memory (another region of a dynamic
            // window) would take the inlined path, which writes at once: send it through
            // the path that drains staged pieces of ordered handles first.
            self.epoch.forget_access_cache();
            self.staged.stage_ordered(pid, addr, src)
        } else {
            self.staged.stage(pid, addr, src)
        };
        // The inlined flush skips straight to its fence; make it take the path that drains.
        // After staging: a flush of another thread that set the cache meanwhile either saw
        // our piece counted (and drained it, or reset the cache) or set it before this
        // reset (both SeqCst).
        self.epoch.forget_flush_cache();
        staged
    }

    #[inline]
    pub(crate) fn check_rank(&self, rank: usize) -> Result<()> {
        if rank < self.size {
            Ok(())
        } else {
            Err(self.invalid_rank(rank))
        }
    }

    #[cold]
    #[inline(never)]
    fn invalid_rank(&self, rank: usize) -> Error {
        Error::InvalidRank {
            rank,
            size: self.size,
        }
    }
}

/// Exclusive-class memberships held by unlocks across nodes that wait for their answers
/// (`sync::lock`, "Memberships in transit"); a lock takes one over at most once.
#[derive(Debug, Default)]
pub(crate) struct InTransit {
    /// Ids of the memberships not taken over yet, and the next id.
    open: std::sync::Mutex<(Vec<u64>, u64)>,
}

impl InTransit {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<u64>, u64)> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An unlock holds a membership until its answer: its id.
    pub(crate) fn hold(&self) -> u64 {
        let mut open = self.lock();
        open.1 += 1;
        let id = open.1;
        open.0.push(id);
        id
    }

    /// A lock takes over a membership in transit; false when none is.
    pub(crate) fn take(&self) -> bool {
        self.lock().0.pop().is_some()
    }

    /// The unlock holding `id` got its answer: true when the membership is still its own
    /// (to park or leave), false when a lock took it over.
    pub(crate) fn settle(&self, id: u64) -> bool {
        let mut open = self.lock();
        match open.0.iter().position(|&held| held == id) {
            Some(at) => {
                open.0.swap_remove(at);
                true
            }
            None => false,
        }
    }
}
