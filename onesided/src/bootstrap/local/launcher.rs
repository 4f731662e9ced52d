//! The launcher's side of a boot segment: it creates the segment, raises the abort flag
//! when a rank failed, and marks ranks that exited.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::bootstrap::local::{
    word, BootLayout, ABORT_FAILED, ABORT_REPORTING, MAGIC, OFF_ABORT, OFF_ATTACHED, OFF_HEADER,
    VERSION,
};
use crate::bootstrap::roster::Roster;
use crate::error::{Error, Result};
use crate::shm::segment::Segment;

/// A boot segment created by a launcher; dropping it removes the name.
#[derive(Debug)]
pub struct BootSegment {
    pub(super) seg: Arc<Segment>,
    n: usize,
    /// Ranks that map it (all `n`, or a node's share when the hub carries the collectives).
    attaching: usize,
    roster: Roster,
}

impl BootSegment {
    /// Creates the boot segment of job `job` for `n` ranks.
    pub fn create(job: &str, n: usize) -> Result<BootSegment> {
        Self::create_as(job, n, "L", n)
    }

    /// Creates the boot segment of node `node` of job `job` of `n` ranks, which `attaching`
    /// of them (the node's) map: its roster holds every rank of the job (the launcher marks
    /// exits from every node), its collectives are unused (the hub carries them).
    pub fn for_node(job: &str, n: usize, node: usize, attaching: usize) -> Result<BootSegment> {
        Self::create_as(job, n, &format!("L{node}"), attaching)
    }

    fn create_as(job: &str, n: usize, owner: &str, attaching: usize) -> Result<BootSegment> {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "a job needs at least one rank".into(),
            ));
        }
        let layout = BootLayout::new(n)?;
        let seg = Arc::new(Segment::create(job, owner, layout.total)?);
        word(&seg, OFF_HEADER + 8).store(VERSION, Ordering::Relaxed);
        word(&seg, OFF_HEADER + 16).store(n as u64, Ordering::Relaxed);
        word(&seg, OFF_HEADER + 24).store(layout.slot_size as u64, Ordering::Relaxed);
        // Release: ranks that read the magic with Acquire see the fields above.
        word(&seg, OFF_HEADER).store(MAGIC, Ordering::Release);
        let roster = Roster::new(Arc::clone(&seg), layout.roster, n)?;
        Ok(BootSegment {
            seg,
            n,
            attaching,
            roster,
        })
    }

    /// Name to pass in [`ENV_BOOT`].
    pub fn name(&self) -> &str {
        self.seg.name()
    }

    /// Tells every rank to give up waiting (a peer failed).
    pub fn abort(&self) {
        // Relaxed: a flag polled in wait loops; nothing is published through it.
        word(&self.seg, OFF_ABORT).store(ABORT_FAILED, Ordering::Relaxed);
    }

    /// Tells every rank to give up waiting because the job ran out of time, and to say
    /// first what it waits for (the hang report).
    pub fn abort_reporting(&self) {
        // Relaxed: as in `abort`.
        word(&self.seg, OFF_ABORT).store(ABORT_REPORTING, Ordering::Relaxed);
    }

    /// Records that `rank` exited with status 0: peers waiting for it in a collective it
    /// never entered fail instead of waiting forever.
    pub fn mark_exited(&self, rank: usize) {
        if rank < self.n {
            self.roster.mark_exited(rank);
        }
    }

    /// The collective `rank` published that it is blocked in (0: none), as this node's
    /// roster holds it.
    pub fn waiting_of(&self, rank: usize) -> u64 {
        if rank < self.n {
            self.roster.waiting(rank)
        } else {
            0
        }
    }

    /// Copies into this node's roster what `rank` (a rank of another node) published about
    /// the collective it is blocked in: waits here then see it (a deadlock across nodes is
    /// detected as on one node).
    pub fn mirror_waiting(&self, rank: usize, word: u64) {
        if rank < self.n {
            self.roster.set_waiting(rank, word);
        }
    }

    /// True once every rank that maps the segment has mapped it.
    pub fn all_attached(&self) -> bool {
        word(&self.seg, OFF_ATTACHED).load(Ordering::Relaxed) >= self.attaching as u64
    }

    /// Removes the name from /dev/shm (ranks keep their mappings).
    pub fn unlink(&self) {
        self.seg.unlink();
    }
}
