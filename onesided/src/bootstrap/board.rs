//! The entry board: where the processes of a host-MPI communicator that all share one node
//! exchange the entries of a collective (its tag, one word, a small inline payload) through
//! shared memory instead of an `MPI_Iallgather`.
//!
//! Every collective of the `mpi` bootstrap starts with that exchange, and most (window
//! creation's agreement, small allgathers, barriers) consist of nothing else. Through the
//! host MPI one exchange costs 2-2.5 µs at 2 processes (MPICH 4.0, 2-vCPU VM); through the
//! board it costs one dissemination barrier (`shm::barrier`), as under `osrun`.
//!
//! Each process owns two entry lines, one per parity of the collective's sequence number:
//! a process writes the line of call `s + 2` only after the barrier of call `s + 1`
//! completed, i.e. after every peer finished reading the entries of call `s`.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::bootstrap::CallTag;
use crate::error::{Error, Result};
use crate::shm::barrier::{Barrier, BarrierLayout, BarrierWait};
use crate::shm::segment::Segment;

/// Words of one entry (one cache line).
pub(crate) const ENTRY_WORDS: usize = 8;
const LINE: usize = ENTRY_WORDS * 8;

/// One process's view of a board shared by the `n` processes of a communicator.
pub(crate) struct EntryBoard {
    seg: Segment,
    barrier: Barrier,
    n: usize,
    me: usize,
    /// Offset of the entry lines (after the barrier's counters).
    entries: usize,
}

impl std::fmt::Debug for EntryBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryBoard")
            .field("segment", &self.seg.name())
            .field("n", &self.n)
            .field("me", &self.me)
            .finish()
    }
}

impl EntryBoard {
    /// Bytes of a board for `n` processes.
    pub(crate) fn bytes(n: usize) -> Option<usize> {
        BarrierLayout::new(n)
            .bytes()
            .checked_add(n.checked_mul(2 * LINE)?)
    }

    /// Process `me`'s view of the board in `seg`, which every one of the `n` processes maps
    /// and which was zero-filled at creation.
    pub(crate) fn new(seg: Segment, n: usize, me: usize) -> Result<EntryBoard> {
        let need = Self::bytes(n).ok_or_else(|| Error::Bootstrap("board too large".into()))?;
        if me >= n || seg.len() < need {
            return Err(Error::Bootstrap(format!(
                "entry board {} holds {} bytes, {n} processes need {need}",
                seg.name(),
                seg.len()
            )));
        }
        let layout = BarrierLayout::new(n);
        // SAFETY: the counters lie at the start of the segment (checked above to hold them),
        // which is page aligned, zero-filled at creation and shared by all `n` processes;
        // the board owns the mapping for as long as the barrier lives.
        let barrier = unsafe { Barrier::new(seg.as_ptr(), layout, me) };
        Ok(EntryBoard {
            seg,
            barrier,
            n,
            me,
            entries: layout.bytes(),
        })
    }

    /// The entry line of `rank` for calls of the parity of `seq`.
    fn line(&self, rank: usize, seq: u64) -> &[AtomicU64; ENTRY_WORDS] {
        assert!(rank < self.n);
        let at = self.entries + (rank * 2 + (seq & 1) as usize) * LINE;
        // SAFETY: inside the segment (`new` checked its length against `bytes(n)`), 64-byte
        // aligned (the counters take whole cache lines); AtomicU64 has u64's layout, and every
        // access to these words is atomic. The segment lives as long as `self`.
        unsafe { &*self.seg.as_ptr().add(at).cast::<[AtomicU64; ENTRY_WORDS]>() }
    }

    /// Publishes this process's entry for the collective `tag` and enters its barrier;
    /// poll the returned wait with [`EntryBoard::poll`].
    pub(crate) fn post(&self, tag: CallTag, entry: &[u64; ENTRY_WORDS]) -> BarrierWait {
        for (w, &v) in self.line(self.me, tag.seq).iter().zip(entry) {
            // Relaxed: published by the barrier's release signals.
            w.store(v, Ordering::Relaxed);
        }
        self.barrier.begin(tag.pack())
    }

    /// Removes the board's name (every process has mapped it).
    pub(crate) fn unlink(&self) {
        self.seg.unlink();
    }

    /// Advances the barrier; true once every process has posted.
    pub(crate) fn poll(&self, wait: &mut BarrierWait) -> bool {
        self.barrier.poll(wait)
    }

    /// Every process's entry for the collective with sequence number `seq`, by rank, once
    /// its barrier completed.
    pub(crate) fn read(&self, seq: u64) -> Box<[u64]> {
        (0..self.n)
            .flat_map(|r| {
                // Relaxed: ordered after the owner's stores by the barrier's acquire loads.
                self.line(r, seq).iter().map(|w| w.load(Ordering::Relaxed))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::Call;
    use crate::shm::segment::random_job_id;

    #[test]
    fn three_processes_exchange_entries_over_many_calls() {
        let n = 3;
        let job = random_job_id();
        let seg = Segment::create(&job, "B", EntryBoard::bytes(n).unwrap()).unwrap();
        let name = seg.name().to_owned();
        let boards: Vec<EntryBoard> = (0..n)
            .map(|me| EntryBoard::new(Segment::open(&name).unwrap(), n, me).unwrap())
            .collect();
        seg.unlink();
        std::thread::scope(|scope| {
            for (me, board) in boards.iter().enumerate() {
                scope.spawn(move || {
                    for seq in 0..200u64 {
                        let tag = CallTag {
                            call: Call::Allgather,
                            seq,
                        };
                        let mut entry = [0u64; ENTRY_WORDS];
                        entry[0] = tag.pack();
                        entry[1] = seq * 10 + me as u64;
                        let mut wait = board.post(tag, &entry);
                        while !board.poll(&mut wait) {
                            std::thread::yield_now();
                        }
                        assert!(!wait.mismatched());
                        let all = board.read(seq);
                        for r in 0..n {
                            assert_eq!(all[r * ENTRY_WORDS], tag.pack());
                            assert_eq!(all[r * ENTRY_WORDS + 1], seq * 10 + r as u64);
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn a_short_segment_is_an_error() {
        let job = random_job_id();
        let seg = Segment::create(&job, "B", 64).unwrap();
        seg.unlink();
        assert!(EntryBoard::new(seg, 64, 0).is_err());
    }
}
