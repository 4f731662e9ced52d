//! Control blocks of windows, carved from node segments a communicator maps once.
//!
//! Creating a segment per window costs rank 0 an `shm_open`, an `fallocate`, an `mmap` and an
//! `unlink`, the others an `shm_open` and an `mmap`, and everybody a broadcast of the name —
//! most of what a `create` or `dynamic` window costs to make. A [`ControlHeap`] belongs to
//! one bootstrap (one communicator): its segments ("chunks") are mapped by every process of
//! it, and every process keeps the same free list, because windows are created and freed
//! collectively and in the same order everywhere. So every process picks the same block
//! without talking; the creation's one agreement compares the picks (and fails everywhere if
//! they differ).
//!
//! Reuse: a process can leave a window's collective free while a peer is still reading the
//! free's own barrier words in the block. So a freed block is only *retired*; it becomes free
//! again after the next creation's agreement, which every process enters only after leaving
//! every earlier free. When a block is picked, each process zeroes the words it owns (its
//! rank's control block; rank 0 also the header and barrier), before the agreement that
//! publishes the window: nobody else touches those words before it. A window dropped without
//! a collective free leaks its block instead.
//!
//! The collective steps (growing by a chunk, agreeing on a pick) live with window creation
//! (`win::create`); this module is the bookkeeping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::shm::segment::Segment;

/// Granularity of blocks: pages, like the per-window segments they replace.
pub(crate) const BLOCK_ALIGN: usize = 4096;
/// Smallest chunk the heap grows by.
pub(crate) const CHUNK_BYTES: usize = 256 << 10;
/// Largest block taken from the heap; larger control areas get a segment of their own.
pub(crate) const MAX_BLOCK: usize = 1 << 20;

/// The control-block heap of one communicator (see the module docs). Opaque: bootstraps
/// hold one for window creation.
#[derive(Debug, Default)]
pub struct ControlHeap {
    state: Mutex<HeapState>,
}

impl ControlHeap {
    /// A heap with no chunks yet.
    pub fn new() -> Self {
        ControlHeap::default()
    }

    /// The replicated state; held across the collective steps of one creation.
    pub(crate) fn lock(&self) -> MutexGuard<'_, HeapState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A free or used stretch of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Span {
    pub chunk: usize,
    pub off: usize,
    pub len: usize,
}

/// Chunks and free list, identical at every process of the communicator.
#[derive(Debug, Default)]
pub(crate) struct HeapState {
    chunks: Vec<Arc<Segment>>,
    /// Free spans ordered by (chunk, offset), adjacent ones merged.
    free: Vec<Span>,
    /// Blocks of freed windows, free again after the next creation's agreement.
    retired: Vec<Span>,
    /// Blocks handed out so far: names each window's liveness channel.
    serial: u64,
}

impl HeapState {
    /// The first free span that holds `len` bytes (rounded to [`BLOCK_ALIGN`]), not yet taken.
    pub(crate) fn pick(&self, len: usize) -> Option<Span> {
        let len = len.next_multiple_of(BLOCK_ALIGN);
        self.free
            .iter()
            .find(|s| s.len >= len)
            .map(|s| Span { len, ..*s })
    }

    /// Takes `span` (from [`pick`](Self::pick)) out of the free list.
    pub(crate) fn take(&mut self, span: Span) {
        let i = self
            .free
            .iter()
            .position(|s| s.chunk == span.chunk && s.off == span.off && s.len >= span.len)
            .expect("a span from pick");
        let rest = self.free[i].len - span.len;
        if rest == 0 {
            self.free.remove(i);
        } else {
            self.free[i].off += span.len;
            self.free[i].len = rest;
        }
        self.serial += 1;
    }

    /// Returns `span` to the free list, merged with its neighbours.
    pub(crate) fn give_back(&mut self, span: Span) {
        let i = self.free.partition_point(|s| *s < span);
        self.free.insert(i, span);
        if i + 1 < self.free.len() {
            let (a, b) = (self.free[i], self.free[i + 1]);
            if a.chunk == b.chunk && a.off + a.len == b.off {
                self.free[i].len += b.len;
                self.free.remove(i + 1);
            }
        }
        if i > 0 {
            let (a, b) = (self.free[i - 1], self.free[i]);
            if a.chunk == b.chunk && a.off + a.len == b.off {
                self.free[i - 1].len += b.len;
                self.free.remove(i);
            }
        }
    }

    /// Moves the blocks of windows freed before the creation whose agreement just completed
    /// to the free list (every process does so at the same point).
    pub(crate) fn recycle(&mut self) {
        for span in std::mem::take(&mut self.retired) {
            self.give_back(span);
        }
    }

    /// Adds a chunk every process has mapped; all of it is free.
    pub(crate) fn add_chunk(&mut self, seg: Segment) {
        let len = seg.len() / BLOCK_ALIGN * BLOCK_ALIGN;
        self.chunks.push(Arc::new(seg));
        self.give_back(Span {
            chunk: self.chunks.len() - 1,
            off: 0,
            len,
        });
    }

    /// What every process must have picked for the next block: compared in the creation's
    /// agreement.
    pub(crate) fn fingerprint(&self, span: Span) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for w in [
            self.serial,
            self.chunks.len() as u64,
            span.chunk as u64,
            span.off as u64,
            span.len as u64,
        ] {
            h = (h ^ w).wrapping_mul(0x100_0000_01b3);
        }
        h
    }

    /// The block `span` (taken) of `heap`, whose state this is.
    pub(crate) fn block(&self, heap: &Arc<ControlHeap>, span: Span) -> ControlBlock {
        let seg = Arc::clone(&self.chunks[span.chunk]);
        ControlBlock {
            heap: Arc::clone(heap),
            // Mixed so that a reused block gets a new channel (the same at every process).
            tag: seg.tag() ^ self.serial.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            seg,
            span,
            reusable: AtomicBool::new(false),
        }
    }

    /// Start of `span`'s memory (a candidate block, before it is taken).
    pub(crate) fn span_ptr(&self, span: Span) -> *mut u8 {
        self.chunks[span.chunk].as_ptr().wrapping_add(span.off)
    }
}

/// One window's control block in a [`ControlHeap`] chunk.
#[derive(Debug)]
pub(crate) struct ControlBlock {
    heap: Arc<ControlHeap>,
    seg: Arc<Segment>,
    span: Span,
    tag: u64,
    /// Set once every process freed the window collectively: the block may be reused.
    reusable: AtomicBool,
}

impl ControlBlock {
    /// Start of the block (page aligned).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.seg.as_ptr().wrapping_add(self.span.off)
    }

    /// Random bits shared by every process of the window.
    pub(crate) fn tag(&self) -> u64 {
        self.tag
    }

    /// Called after the collective free's agreement: dropping the block retires it (see the
    /// module docs).
    pub(crate) fn release_on_drop(&self) {
        // Relaxed: read by the same owner's drop, later in the same thread of control.
        self.reusable.store(true, Ordering::Relaxed);
    }
}

impl Drop for ControlBlock {
    fn drop(&mut self) {
        if !self.reusable.load(Ordering::Relaxed) {
            // Not freed collectively: a peer may still use it; never hand it out again.
            return;
        }
        self.heap.lock().retired.push(self.span);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with_free(spans: &[(usize, usize, usize)]) -> HeapState {
        HeapState {
            free: spans
                .iter()
                .map(|&(chunk, off, len)| Span { chunk, off, len })
                .collect(),
            ..HeapState::default()
        }
    }

    #[test]
    fn first_fit_and_merge() {
        let mut h = state_with_free(&[(0, 0, 16 * BLOCK_ALIGN)]);
        let a = h.pick(5000).unwrap();
        assert_eq!((a.chunk, a.off, a.len), (0, 0, 2 * BLOCK_ALIGN));
        h.take(a);
        let b = h.pick(BLOCK_ALIGN).unwrap();
        assert_eq!(b.off, 2 * BLOCK_ALIGN);
        h.take(b);
        assert_eq!(h.serial, 2);
        // Too large for what is left.
        assert!(h.pick(15 * BLOCK_ALIGN).is_none());
        // Retired blocks are not picked until recycled.
        h.retired.extend([a, b]);
        assert_eq!(h.pick(BLOCK_ALIGN).unwrap().off, 3 * BLOCK_ALIGN);
        h.recycle();
        assert_eq!(
            h.free,
            vec![Span {
                chunk: 0,
                off: 0,
                len: 16 * BLOCK_ALIGN
            }]
        );
    }

    #[test]
    fn spans_of_different_chunks_never_merge() {
        let mut h = state_with_free(&[]);
        h.give_back(Span {
            chunk: 1,
            off: 0,
            len: BLOCK_ALIGN,
        });
        h.give_back(Span {
            chunk: 0,
            off: BLOCK_ALIGN,
            len: BLOCK_ALIGN,
        });
        h.give_back(Span {
            chunk: 0,
            off: 0,
            len: BLOCK_ALIGN,
        });
        assert_eq!(
            h.free,
            vec![
                Span {
                    chunk: 0,
                    off: 0,
                    len: 2 * BLOCK_ALIGN
                },
                Span {
                    chunk: 1,
                    off: 0,
                    len: BLOCK_ALIGN
                }
            ]
        );
    }

    #[test]
    fn fingerprint_tells_picks_apart() {
        let h = state_with_free(&[(0, 0, 4 * BLOCK_ALIGN)]);
        let a = Span {
            chunk: 0,
            off: 0,
            len: BLOCK_ALIGN,
        };
        let b = Span {
            chunk: 0,
            off: BLOCK_ALIGN,
            len: BLOCK_ALIGN,
        };
        assert_ne!(h.fingerprint(a), h.fingerprint(b));
        assert_eq!(h.fingerprint(a), h.fingerprint(a));
    }
}
