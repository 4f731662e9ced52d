//! Layout of a window's node segment: synchronization words of every rank, and (for
//! `allocate`/`allocate_shared`) the window memory of every rank.
//!
//! ```text
//! header        magic; the global lock word of [Gerstenberger13] and its FIFO tickets
//! block[0..n]   per rank: local lock word + tickets, PSCW completion counter,
//!               dynamic-region sequence number, pid, collective tags, PSCW post
//!               counters (one per peer),
//!               accumulate lock stripes, dynamic-region table
//! barrier       fence's dissemination counters
//! data          window memory (allocate / allocate_shared), page aligned
//! ```
//!
//! The first rank's block follows the header: creating a window, a process writes its own
//! block and the first rank also the header, so each touches one page of the segment
//! where both fit in one (with the barrier in between, whose signals grow with the ranks,
//! the first rank of a node touched two pages from 32 ranks on: 25% more memory per window
//! and process at 4 ranks a node than at 1).
//!
//! Every word another process reads or writes is an `AtomicU64`, and independently contended
//! words sit on separate cache lines.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::plane::{AgreementPart, CtrlWord, LockAt, LockPart, MappedWords};
use crate::shm::barrier::BarrierLayout;

/// Lock stripes per rank for accumulates that cannot use CPU atomics (see ops).
pub(crate) const ACC_STRIPES: usize = 64;

/// Marks an initialised window segment.
pub(crate) const WIN_MAGIC: u64 = 0x6f73_7769_6e64_6f77;

/// Window-wide words, at the start of the segment.
#[repr(C)]
pub(crate) struct WinHeader {
    /// [`WIN_MAGIC`] once the creator initialised the segment.
    pub magic: CachePadded<AtomicU64>,
    /// Global lock ([Gerstenberger13]): lock_all holders and exclusive lockers (sync::lock),
    /// with its FIFO slow path.
    pub global_lock: CachePadded<LockLine>,
    /// Whether a lock_all was ever asked for on this window (sync::lock, "Exclusive locks
    /// before the first lock_all"): 0 never, 1 asked (unclassed holders draining), 2 no
    /// unclassed holder is left or can come. Read by every exclusive lock: a line of its
    /// own that is written at most twice.
    pub lock_all_used: CachePadded<AtomicU64>,
}

/// Identity words of a rank.
#[repr(C)]
pub(crate) struct Ident {
    /// Process id (for cross-memory attach).
    pub pid: AtomicU64,
    /// Rank in the job (names the rank's shared-heap segments).
    pub job_rank: AtomicU64,
    /// Number of valid entries in the dynamic-region table.
    pub region_count: AtomicU64,
}

/// A rank's part of the window's collective agreements (sync::collective): its call tag
/// and payload word, in two copies alternating by sequence parity.
#[repr(C)]
pub(crate) struct CollectiveWords {
    /// Packed [`crate::bootstrap::CallTag`] of the rank's latest calls, by parity.
    pub tags: [AtomicU64; 2],
    /// Payload word of the same calls, by parity.
    pub words: [AtomicU64; 2],
}

/// A lock word and its FIFO slow-path counters, on one cache line: a queued acquisition
/// takes a ticket, sets the head mark, acquires and serves the next ticket, and on one
/// line that is one transfer of the line instead of up to three (hot-spot transactions at
/// 2 ranks, blocking: 4.7 → 5.6 M/s in a phase of the VM where a transfer costs ~170 ns).
#[repr(C)]
pub(crate) struct LockLine {
    /// The reader-writer lock word ([Gerstenberger13]).
    pub word: AtomicU64,
    /// Next ticket of the slow path.
    pub next: AtomicU64,
    /// Ticket now served by the slow path.
    pub serving: AtomicU64,
}

/// Fixed-size part of a rank's control block.
#[repr(C)]
pub(crate) struct RankControl {
    /// Local reader-writer lock ([Gerstenberger13]) with its FIFO slow path.
    pub lock: CachePadded<LockLine>,
    /// Number of `complete` calls that targeted this rank (cumulative).
    pub completions: CachePadded<AtomicU64>,
    /// 1 while this rank keeps an exclusive-class membership of the global lock word
    /// without holding an exclusive lock (*parked* by its last exclusive unlock, see
    /// sync::lock); written by the rank itself and, to take it back, by a lock_all waiter.
    pub parked_exclusive: CachePadded<AtomicU64>,
    /// Sequence number (seqlock) of the dynamic-region table; odd while it changes.
    pub dyn_seq: CachePadded<AtomicU64>,
    /// Memory handles across nodes (`rma::memhandle`, "After release").
    pub handles: CachePadded<HandleWords>,
    /// Process identity and region count.
    pub ident: CachePadded<Ident>,
    /// Collective agreements (fence, free, set_info).
    pub collective: CachePadded<CollectiveWords>,
}

/// The words by which an owner of memory handles tells processes on other nodes that it
/// detached a region, so that their windows of its handles need no round trip per
/// operation to find out (`rma::memhandle`, "After release").
#[repr(C)]
pub(crate) struct HandleWords {
    /// Bit `r % 64` set: rank `r` (on another node) made a window from one of this rank's
    /// handles. Set by the readers (network compare-and-swap), never cleared: a stale bit
    /// costs its rank one needless check.
    pub readers: AtomicU64,
    /// Detaches this rank was told of by owners (on other nodes) whose handles it read:
    /// added to by those owners before their detach returns.
    pub releases: AtomicU64,
}

/// One entry of a rank's dynamic-region table.
#[repr(C)]
pub(crate) struct RegionSlot {
    /// Address of the region in the owner's address space.
    pub base: AtomicU64,
    /// Length in bytes.
    pub len: AtomicU64,
    /// Tag of the shared-heap segment holding it, or 0 (reach it with CMA).
    pub seg_tag: AtomicU64,
    /// Offset of the region in that segment.
    pub seg_offset: AtomicU64,
    /// The attach that made it, numbered by the owner from 1 and never reused: memory
    /// handles name it, so a handle released once stays released even when the same
    /// bytes are attached again (rma::memhandle).
    pub registration: AtomicU64,
    /// Windows across nodes: the key of the region's registration with the owner's
    /// network endpoint (0: not registered).
    pub net_key: AtomicU64,
    /// Windows across nodes: the remote address of the region's first byte under that
    /// registration.
    pub net_base: AtomicU64,
}

const PAGE: usize = 4096;

/// Byte offsets of every part of a window segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ControlLayout {
    pub n: usize,
    pub barrier: BarrierLayout,
    pub barrier_off: usize,
    pub blocks_off: usize,
    pub block_stride: usize,
    pub posts_off: usize,
    pub stripes_off: usize,
    pub regions_off: usize,
    pub region_cap: usize,
    /// Offset of the rank's request-ring area in its block (transport::ring), if any.
    pub rings_off: Option<usize>,
    pub data_off: usize,
    pub total: usize,
    /// Control blocks laid out: every rank's (`n`) on one node; across nodes, as many as the
    /// largest node has ranks — each node's segment holds its own ranks' blocks only
    /// ([`BlockSlots`]).
    pub slots: usize,
}

/// Where each rank's control block lies in its node's segment. On one node block `r` is
/// rank `r`'s; across nodes, where every node's ranks are consecutive (as `osrun --nodes`
/// and block placement under `mpiexec` have them), each node's segment holds its own ranks'
/// blocks only, in rank order (without this each node reserved `n` blocks of `n` post
/// counters each: 550 MB per window at 8192 ranks). Other placements keep every rank's
/// block in every node's segment.
#[derive(Debug, Clone, Default)]
pub(crate) struct BlockSlots {
    /// Each rank's slot in its own node's segment (`None`: its rank).
    table: Option<std::sync::Arc<Vec<u32>>>,
    /// This node's ranks: `first..first + count` (`None`: all).
    here: Option<(usize, usize)>,
}

impl BlockSlots {
    /// Slots of ranks on the nodes `nodes` says (by rank), seen from rank `me`; and the
    /// number of slots every node's segment lays out (the largest node's ranks; `n` where
    /// a node's ranks are not consecutive).
    pub(crate) fn by_node(nodes: &[usize], me: usize) -> (BlockSlots, usize) {
        let n = nodes.len();
        // A node's ranks are consecutive when no node comes back after another one.
        let mut seen = std::collections::HashSet::new();
        let consecutive = nodes
            .iter()
            .enumerate()
            .all(|(r, node)| (r > 0 && nodes[r - 1] == *node) || seen.insert(*node));
        if !consecutive {
            return (BlockSlots::default(), n);
        }
        let first = nodes.iter().position(|x| *x == nodes[me]).unwrap_or(0);
        let count = nodes.iter().filter(|x| **x == nodes[me]).count();
        let mut start = 0;
        let mut largest = 0;
        let table: Vec<u32> = (0..n)
            .map(|r| {
                if r > 0 && nodes[r - 1] != nodes[r] {
                    start = r;
                }
                largest = largest.max(r - start + 1);
                (r - start) as u32
            })
            .collect();
        let slots = BlockSlots {
            // Shared by every window over the same ranks (`win::interned`).
            table: Some(crate::win::interned::intern(table)),
            here: Some((first, count)),
        };
        (slots, largest)
    }

    /// True when each node's segment holds its own ranks' blocks only, in rank order (a
    /// node's ranks are consecutive): a rank's slot is then its place among its node's
    /// ranks.
    pub(crate) fn consecutive(&self) -> bool {
        self.table.is_some()
    }

    /// The slot of `rank`'s block in its own node's segment.
    #[inline]
    pub(crate) fn of(&self, rank: usize) -> usize {
        match &self.table {
            None => rank,
            Some(t) => t[rank] as usize,
        }
    }
}

/// Where the barrier and the data start after blocks that end at `blocks_end`.
fn after_blocks(blocks_end: usize, barrier: &BarrierLayout) -> (usize, usize) {
    let line = std::mem::align_of::<CachePadded<AtomicU64>>();
    let barrier_off = blocks_end.next_multiple_of(line);
    (
        barrier_off,
        (barrier_off + barrier.bytes()).next_multiple_of(PAGE),
    )
}

impl ControlLayout {
    /// Layout for `n` ranks, `region_cap` dynamic regions per rank and `data_bytes` of
    /// window memory.
    pub(crate) fn new(n: usize, region_cap: usize, data_bytes: usize) -> Self {
        Self::with_rings(n, region_cap, data_bytes, false)
    }

    /// Like [`ControlLayout::new`], with a request-ring area in every block when `rings`.
    pub(crate) fn with_rings(n: usize, region_cap: usize, data_bytes: usize, rings: bool) -> Self {
        let line = std::mem::align_of::<CachePadded<AtomicU64>>();
        let barrier = BarrierLayout::new(n);
        let blocks_off = std::mem::size_of::<WinHeader>().next_multiple_of(line);
        let posts_off = std::mem::size_of::<RankControl>();
        let stripes_off = (posts_off + n * 8).next_multiple_of(64);
        let regions_off = stripes_off + ACC_STRIPES * 8;
        let regions_end =
            (regions_off + region_cap * std::mem::size_of::<RegionSlot>()).next_multiple_of(line);
        let rings_off = rings.then_some(regions_end);
        let block_stride = match rings_off {
            Some(off) => (off + crate::transport::ring::area_bytes(n)).next_multiple_of(line),
            None => regions_end,
        };
        let (barrier_off, data_off) = after_blocks(blocks_off + n * block_stride, &barrier);
        ControlLayout {
            slots: n,
            n,
            barrier,
            barrier_off,
            blocks_off,
            block_stride,
            posts_off,
            stripes_off,
            regions_off,
            region_cap,
            rings_off,
            data_off,
            // Saturating: a total beyond the address space fails at segment creation.
            total: data_off.saturating_add(data_bytes),
        }
    }

    /// This layout with `slots` control blocks (see [`BlockSlots`]) and `data_bytes` of
    /// window memory after them: the blocks' words keep their offsets, the barrier and the
    /// data follow the last slot (every node's segment takes the same slots, so a word is
    /// at the same offset on every node).
    pub(crate) fn with_slots(self, slots: usize, data_bytes: usize) -> Self {
        let (barrier_off, data_off) =
            after_blocks(self.blocks_off + slots * self.block_stride, &self.barrier);
        ControlLayout {
            slots,
            barrier_off,
            data_off,
            total: data_off.saturating_add(data_bytes),
            ..self
        }
    }

    /// Where rank `rank`'s control block starts in its node's segment.
    pub(crate) fn block_offset(&self, slots: &BlockSlots, rank: usize) -> usize {
        assert!(rank < self.n, "control block of rank {rank} of {}", self.n);
        let slot = slots.of(rank);
        assert!(slot < self.slots, "slot {slot} of {}", self.slots);
        self.blocks_off + slot * self.block_stride
    }

    /// Where control word `word` lies, from the start of its holder's segment (its blocks
    /// placed as `slots` says): the same place in every copy of the layout, so a network
    /// plane names a peer's word by the peer's registration and this offset (`None`: not a
    /// word of the control blocks — notification counters live in their own tables).
    pub(crate) fn offset_of(&self, word: CtrlWord, slots: &BlockSlots) -> Option<usize> {
        use std::mem::offset_of;
        let block = |rank: usize| self.block_offset(slots, rank);
        let part = |part: LockPart| match part {
            LockPart::Word => offset_of!(LockLine, word),
            LockPart::Next => offset_of!(LockLine, next),
            LockPart::Serving => offset_of!(LockLine, serving),
        };
        Some(match word {
            CtrlWord::Posts { at, from } => {
                assert!(from < self.n);
                block(at) + self.posts_off + from * 8
            }
            CtrlWord::Completions { at } => block(at) + offset_of!(RankControl, completions),
            CtrlWord::Parked { at } => block(at) + offset_of!(RankControl, parked_exclusive),
            CtrlWord::Stripe { at, index } => {
                assert!(index < ACC_STRIPES);
                block(at) + self.stripes_off + index * 8
            }
            CtrlWord::HandleReaders { at } => {
                block(at) + offset_of!(RankControl, handles) + offset_of!(HandleWords, readers)
            }
            CtrlWord::HandleReleases { at } => {
                block(at) + offset_of!(RankControl, handles) + offset_of!(HandleWords, releases)
            }
            CtrlWord::Signal { at, round, parity } => {
                self.barrier_off + self.barrier.signal_offset(at, round, parity)
            }
            CtrlWord::Lock {
                lock: LockAt::Global,
                part: p,
            } => offset_of!(WinHeader, global_lock) + part(p),
            CtrlWord::Lock {
                lock: LockAt::Local(rank),
                part: p,
            } => block(rank) + offset_of!(RankControl, lock) + part(p),
            CtrlWord::Agreement { at, parity, part } => {
                assert!(parity < 2);
                let words = match part {
                    AgreementPart::Tag => offset_of!(CollectiveWords, tags),
                    AgreementPart::Word => offset_of!(CollectiveWords, words),
                };
                block(at) + offset_of!(RankControl, collective) + words + parity as usize * 8
            }
            CtrlWord::Notify { .. } => return None,
        })
    }

    /// Offsets, within a rank's block, of its dynamic region table (empty for other
    /// flavors); the rest of the block follows it.
    pub(crate) fn region_slots(&self) -> std::ops::Range<usize> {
        let end = self.rings_off.unwrap_or(self.block_stride);
        self.regions_off..end
    }
}

/// Typed access to the control words of a mapped window segment.
#[derive(Debug)]
pub(crate) struct Control {
    base: *mut u8,
    layout: ControlLayout,
    /// The first rank whose block this segment holds (in slot 0), and how many follow:
    /// rank `r`'s block is slot `r - first` (all ranks' on one node).
    first: usize,
    count: usize,
    /// Where every rank's block lies in its own node's segment.
    blocks: BlockSlots,
}

// SAFETY: `base` points into a shared mapping kept alive by the window that owns the
// Control (see `new`); every word reached through it is an atomic, so any thread may use it.
unsafe impl Send for Control {}
// SAFETY: as for Send.
unsafe impl Sync for Control {}

impl Control {
    /// Writes rank `me`'s identity words — process id (for cross-memory attach) and job
    /// rank (names its shared-heap segments) — and, for the rank that set the segment up,
    /// the header's `magic`. Relaxed: the creation's agreement publishes them.
    pub(crate) fn write_identity(&self, me: usize, pid: u64, job_rank: u64, magic: Option<u64>) {
        let ident = &self.rank(me).ident;
        ident.pid.store(pid, Ordering::Relaxed);
        ident.job_rank.store(job_rank, Ordering::Relaxed);
        if let Some(magic) = magic {
            self.header().magic.store(magic, Ordering::Relaxed);
        }
    }

    /// [`Control::write_identity`] of this process.
    pub(crate) fn write_own_identity(&self, me: usize, magic: Option<u64>) {
        let job_rank = crate::bootstrap::identity::identity().map_or(me, |i| i.rank) as u64;
        self.write_identity(me, u64::from(std::process::id()), job_rank, magic);
    }

    /// Where the field at `field` bytes into rank `rank`'s control block lies in the
    /// segment of `rank`'s node (this one's or another's).
    pub(crate) fn remote_offset(&self, rank: usize, field: usize) -> usize {
        self.layout.block_offset(&self.blocks, rank) + field
    }

    /// This control with its blocks placed as `slots` says (windows across nodes).
    pub(crate) fn with_slots(self, slots: BlockSlots) -> Self {
        let (first, count) = slots.here.unwrap_or((0, self.layout.n));
        Control {
            first,
            count,
            blocks: slots,
            ..self
        }
    }

    /// # Safety
    /// `base` must be the page-aligned start of a mapping of at least `layout.total` bytes
    /// that stays mapped while the returned value (and references from it) live, and whose
    /// control part is zero-initialised or initialised by a peer with the same layout.
    pub(crate) unsafe fn new(base: *mut u8, layout: ControlLayout) -> Self {
        debug_assert_eq!(base as usize % PAGE, 0);
        Control {
            base,
            layout,
            first: 0,
            count: layout.n,
            blocks: BlockSlots::default(),
        }
    }

    /// The layout.
    pub(crate) fn layout(&self) -> &ControlLayout {
        &self.layout
    }

    /// Window-wide words.
    #[inline]
    pub(crate) fn header(&self) -> &WinHeader {
        // SAFETY: the header is at offset 0 of a live, suitably aligned mapping (new()).
        unsafe { &*self.base.cast::<WinHeader>() }
    }

    /// The slot of `rank`'s block in this segment; a rank of another node has none here
    /// (its words are reached through the network plane).
    #[inline]
    fn slot(&self, rank: usize) -> usize {
        let slot = rank.wrapping_sub(self.first);
        if slot >= self.count {
            self.not_here(rank);
        }
        slot
    }

    #[cold]
    #[inline(never)]
    fn not_here(&self, rank: usize) -> ! {
        match rank < self.layout.n {
            true => panic!("the control block of rank {rank} is on another node"),
            false => panic!("control block of rank {rank} of {}", self.layout.n),
        }
    }

    /// Fixed control words of `rank` (a rank of this node).
    #[inline]
    pub(crate) fn rank(&self, rank: usize) -> &RankControl {
        let slot = self.slot(rank);
        // SAFETY: block `slot` lies inside the mapping by construction of the layout, and
        // is aligned to the cache-line alignment of RankControl (blocks_off and
        // block_stride are multiples of it).
        unsafe {
            &*self
                .base
                .add(self.layout.blocks_off + slot * self.layout.block_stride)
                .cast::<RankControl>()
        }
    }

    /// Number of `post` calls by `from` that included `at` (cumulative), stored at `at`.
    #[inline]
    pub(crate) fn post_counter(&self, at: usize, from: usize) -> &AtomicU64 {
        assert!(from < self.layout.n);
        let at = self.slot(at);
        // SAFETY: inside block `at` (posts_off + n*8 <= regions_off), 8-byte aligned.
        unsafe {
            &*self
                .base
                .add(
                    self.layout.blocks_off
                        + at * self.layout.block_stride
                        + self.layout.posts_off
                        + from * 8,
                )
                .cast::<AtomicU64>()
        }
    }

    /// Accumulate lock stripe `stripe` of `rank` (0 = free, 1 = held).
    #[inline]
    pub(crate) fn stripe(&self, rank: usize, stripe: usize) -> &AtomicU64 {
        assert!(stripe < ACC_STRIPES);
        let rank = self.slot(rank);
        // SAFETY: inside block `rank` (stripes_off + ACC_STRIPES*8 <= regions_off), 8-aligned.
        unsafe {
            &*self
                .base
                .add(
                    self.layout.blocks_off
                        + rank * self.layout.block_stride
                        + self.layout.stripes_off
                        + stripe * 8,
                )
                .cast::<AtomicU64>()
        }
    }

    /// Entry `index` of `rank`'s dynamic-region table.
    #[inline]
    pub(crate) fn region(&self, rank: usize, index: usize) -> &RegionSlot {
        assert!(index < self.layout.region_cap);
        let rank = self.slot(rank);
        // SAFETY: inside block `rank` (regions_off + cap * size_of::<RegionSlot>() <=
        // block_stride), 8-aligned.
        unsafe {
            &*self
                .base
                .add(
                    self.layout.blocks_off
                        + rank * self.layout.block_stride
                        + self.layout.regions_off
                        + index * std::mem::size_of::<RegionSlot>(),
                )
                .cast::<RegionSlot>()
        }
    }

    /// Start of rank 0's request-ring area and the distance between two ranks' areas.
    pub(crate) fn rings(&self) -> Option<(*mut u8, usize)> {
        let off = self.layout.rings_off?;
        // SAFETY: block 0's ring area lies inside the mapping (with_rings sized the block).
        Some((
            unsafe { self.base.add(self.layout.blocks_off + off) },
            self.layout.block_stride,
        ))
    }

    /// Start of the fence barrier's counters.
    pub(crate) fn barrier_base(&self) -> *const u8 {
        // SAFETY: offset inside the mapping.
        unsafe { self.base.add(self.layout.barrier_off) }
    }

    /// Start of the window memory (allocate / allocate_shared).
    pub(crate) fn data_base(&self) -> *mut u8 {
        // SAFETY: data_off <= total, inside (or one past the end of) the mapping.
        unsafe { self.base.add(self.layout.data_off) }
    }
}

/// On one node every word is mapped: a CPU atomic answers at once.
impl MappedWords for Control {
    /// The atomic behind `word` in the mapped control blocks. Always inlined: at each use
    /// the word is known, and the match folds away (out of line it cost a lock + unlock
    /// pair 40 instructions).
    #[inline(always)]
    fn mapped(&self, word: CtrlWord) -> &AtomicU64 {
        match word {
            CtrlWord::Posts { at, from } => self.post_counter(at, from),
            CtrlWord::Completions { at } => &self.rank(at).completions,
            CtrlWord::Parked { at } => &self.rank(at).parked_exclusive,
            CtrlWord::Stripe { at, index } => self.stripe(at, index),
            CtrlWord::HandleReaders { at } => &self.rank(at).handles.readers,
            CtrlWord::HandleReleases { at } => &self.rank(at).handles.releases,
            CtrlWord::Notify { .. } => {
                unreachable!("notification counters are the window's notify tables' words")
            }
            CtrlWord::Agreement { at, parity, part } => {
                let words = &self.rank(at).collective;
                match part {
                    AgreementPart::Tag => &words.tags[parity as usize],
                    AgreementPart::Word => &words.words[parity as usize],
                }
            }
            CtrlWord::Signal { at, round, parity } => {
                let offset = self.layout.barrier.signal_offset(at, round, parity);
                // SAFETY: the barrier's signal area lies inside the mapping at barrier_off
                // (the layout reserves barrier.bytes() there), and signal_offset is in
                // bounds of it and 8-byte aligned. Shared words are only accessed
                // atomically.
                unsafe { &*self.barrier_base().add(offset).cast::<AtomicU64>() }
            }
            CtrlWord::Lock { lock, part } => {
                let line = match lock {
                    LockAt::Global => &self.header().global_lock,
                    LockAt::Local(rank) => &self.rank(rank).lock,
                };
                match part {
                    LockPart::Word => &line.word,
                    LockPart::Next => &line.next,
                    LockPart::Serving => &line.serving,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `offset_of` names the very word the mapped blocks' plane uses, for every kind of
    /// word: a network plane that adds it to a peer's registration reaches what the
    /// peer's own CPU atomics reach.
    #[test]
    fn offsets_name_the_mapped_words() {
        for n in [1usize, 2, 3, 8] {
            let layout = ControlLayout::with_rings(n, 4, 4096, true);
            let mut mem = vec![0u64; layout.total.div_ceil(8) + PAGE / 8];
            let base = mem.as_mut_ptr() as usize;
            let base = base.next_multiple_of(PAGE) as *mut u8;
            // SAFETY: `mem` covers the page-aligned base plus `total` bytes and outlives
            // `ctrl`.
            let ctrl = unsafe { Control::new(base, layout) };
            let mut words = vec![CtrlWord::Completions { at: n - 1 }];
            for at in 0..n {
                words.push(CtrlWord::Completions { at });
                words.push(CtrlWord::Parked { at });
                words.extend((0..ACC_STRIPES).map(|index| CtrlWord::Stripe { at, index }));
                words.push(CtrlWord::HandleReaders { at });
                words.push(CtrlWord::HandleReleases { at });
                for from in 0..n {
                    words.push(CtrlWord::Posts { at, from });
                }
                for part in [LockPart::Word, LockPart::Next, LockPart::Serving] {
                    words.push(CtrlWord::Lock {
                        lock: LockAt::Local(at),
                        part,
                    });
                    words.push(CtrlWord::Lock {
                        lock: LockAt::Global,
                        part,
                    });
                }
                for parity in 0..2 {
                    for part in [AgreementPart::Tag, AgreementPart::Word] {
                        words.push(CtrlWord::Agreement { at, parity, part });
                    }
                }
                for round in 0..layout.barrier.rounds() {
                    for parity in 0..2 {
                        words.push(CtrlWord::Signal { at, round, parity });
                    }
                }
            }
            for word in words {
                let mapped = ctrl.mapped(word) as *const AtomicU64 as usize;
                let offset = layout.offset_of(word, &BlockSlots::default()).unwrap();
                assert_eq!(mapped - base as usize, offset, "{word:?}");
                assert!(offset + 8 <= layout.data_off, "{word:?}");
            }
            let none = layout.offset_of(CtrlWord::Notify { at: 0, idx: 0 }, &BlockSlots::default());
            assert_eq!(none, None);
        }
    }

    /// Across nodes each node's segment holds the blocks of its own ranks, in rank order:
    /// a word of a rank of this node is where the mapped plane finds it, a word of a rank
    /// of another node lies at the offset its own node's segment has it (the slot it has
    /// there), and its block is not reachable here. Where a node's ranks are not
    /// consecutive, every segment keeps every rank's block.
    #[test]
    fn node_segments_hold_their_own_ranks_blocks() {
        for (nodes, slot, slots) in [
            ([0usize, 0, 0, 1, 1], [0usize, 1, 2, 0, 1], 3),
            ([0, 0, 1, 0, 1], [0, 1, 2, 3, 4], 5),
        ] {
            let (n, full) = (nodes.len(), ControlLayout::new(nodes.len(), 2, 4096));
            let split = slots < n;
            for me in [0, 4] {
                let (blocks, got) = BlockSlots::by_node(&nodes, me);
                assert_eq!(got, slots, "{nodes:?}");
                let layout = full.with_slots(slots, 4096);
                assert_eq!(layout.total, layout.data_off + 4096);
                let mut mem = vec![0u64; layout.total.div_ceil(8) + PAGE / 8];
                let base = (mem.as_mut_ptr() as usize).next_multiple_of(PAGE) as *mut u8;
                // SAFETY: `mem` covers the page-aligned base plus `total` bytes and
                // outlives `ctrl`.
                let ctrl = unsafe { Control::new(base, layout) }.with_slots(blocks.clone());
                for at in 0..n {
                    let words = [
                        CtrlWord::Completions { at },
                        CtrlWord::Posts { at, from: 4 },
                        CtrlWord::Lock {
                            lock: LockAt::Local(at),
                            part: LockPart::Serving,
                        },
                    ];
                    for word in words {
                        let offset = layout.offset_of(word, &blocks).unwrap();
                        let first = full.offset_of(word, &BlockSlots::default()).unwrap();
                        // The full layout puts rank `at` in block `at`; ours in its slot.
                        assert_eq!(
                            offset + at * layout.block_stride,
                            first + slot[at] * layout.block_stride,
                            "{word:?}"
                        );
                        assert!(offset + 8 <= layout.data_off);
                        let mapped = std::panic::catch_unwind(|| {
                            ctrl.mapped(word) as *const AtomicU64 as usize - base as usize
                        });
                        match nodes[at] == nodes[me] || !split {
                            true => assert_eq!(mapped.ok(), Some(offset), "{word:?}"),
                            false => assert!(mapped.is_err(), "{word:?} of another node"),
                        }
                    }
                }
            }
        }
        // What it saves: 8192 ranks on nodes of 16 (what is left is mostly the fence
        // barrier's signals, a few per rank).
        let nodes: Vec<usize> = (0..8192).map(|r| r / 16).collect();
        let full = ControlLayout::new(nodes.len(), 0, 0);
        let (_, slots) = BlockSlots::by_node(&nodes, 0);
        let node = full.with_slots(slots, 0);
        assert!(full.total > 500 << 20, "{} bytes", full.total);
        assert!(node.total < 4 << 20, "{} bytes", node.total);
    }

    #[test]
    fn parts_do_not_overlap() {
        for n in [1, 2, 7, 64] {
            for cap in [0, 1, 256] {
                let l = ControlLayout::new(n, cap, 1000);
                assert!(std::mem::size_of::<WinHeader>() <= l.blocks_off);
                assert!(l.blocks_off + n * l.block_stride <= l.barrier_off);
                assert!(l.barrier_off + l.barrier.bytes() <= l.data_off);
                assert!(l.posts_off + 8 * n <= l.stripes_off);
                assert!(l.stripes_off + 8 * ACC_STRIPES <= l.regions_off);
                assert!(l.regions_off + 32 * cap <= l.block_stride);
                let slots = l.region_slots();
                assert_eq!(slots.start, l.regions_off);
                assert!(slots.start + 32 * cap <= slots.end && slots.end <= l.block_stride);
                let r = ControlLayout::with_rings(n, cap, 1000, true);
                assert_eq!(r.region_slots().end, r.rings_off.unwrap());
                assert_eq!(l.data_off % PAGE, 0);
                // The first rank's identity lies on the header's page (see the module docs).
                assert!(l.blocks_off + std::mem::size_of::<RankControl>() <= PAGE);
                assert_eq!(l.total, l.data_off + 1000);
            }
        }
    }
}

/// The shared memory a window's control words live in: a segment of its own (`allocate`
/// and `shared` windows, whose data follows the control words) or a block of the
/// communicator's control heap (`create` and `dynamic` windows).
#[derive(Debug)]
pub(crate) enum ControlMemory {
    Segment(crate::shm::segment::Segment),
    Block(crate::shm::heap::ControlBlock),
}

impl ControlMemory {
    /// Start of the control words (page aligned, zero when the window was created).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        match self {
            ControlMemory::Segment(s) => s.as_ptr(),
            ControlMemory::Block(b) => b.as_ptr(),
        }
    }

    /// Random bits every process of the window sees alike.
    pub(crate) fn tag(&self) -> u64 {
        match self {
            ControlMemory::Segment(s) => s.tag(),
            ControlMemory::Block(b) => b.tag(),
        }
    }

    /// The window was freed collectively: a heap block may be handed out again once this
    /// memory is dropped (a segment is unmapped anyway).
    pub(crate) fn release_on_drop(&self) {
        if let ControlMemory::Block(b) = self {
            b.release_on_drop();
        }
    }
}
