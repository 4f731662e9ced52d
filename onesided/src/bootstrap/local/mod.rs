//! The `local` bootstrap: ranks started by `osrun` (or the test helper) on one node, or on
//! virtual nodes whose collectives go through the job's hub ([`super::hub`]).
//!
//! The launcher creates one boot segment per job and passes its name in the environment.
//! Layout (every part starts on a cache line):
//!
//! ```text
//! header   magic, version, n, slot_size           (written once by the launcher)
//! abort    set by the launcher when a rank failed  (ranks poll it while waiting)
//! attached ranks that mapped the segment           (launcher unlinks the name at n)
//! barrier  dissemination counters (shm::barrier)
//! roster   one record per rank (bootstrap::roster; the launcher marks exits)
//! slots    n × slot_size bytes, one exchange buffer per rank: a line of call tags, then
//!          the payload
//! ```
//!
//! A collective writes its [`CallTag`] and payload into the caller's slot, passes a barrier,
//! checks every peer's tag (a mismatch fails the call at every rank), reads peers' slots and
//! passes a second barrier before the slots are reused; payloads larger than a slot go in
//! rounds. Tags alternate between two words by sequence parity: a rank can be at most one
//! collective ahead of another, so a fast rank never overwrites a tag a slow one still
//! checks. Every word read by other processes is an atomic; payload bytes are ordered by the
//! barriers (release/acquire).
//!
//! The launcher side (`launcher`: creating the segment, abort, exit marks) and the rank side
//! (`rank`: connecting and the collectives) share the layout defined here.

mod launcher;
mod rank;

pub use launcher::BootSegment;
pub use rank::LocalBootstrap;

use std::sync::atomic::AtomicU64;

use crate::bootstrap::roster::Roster;
use crate::error::{Error, Result};
use crate::shm::barrier::BarrierLayout;
use crate::shm::segment::{random_job_id, Segment};

pub(super) const MAGIC: u64 = 0x6f6e_6573_6964_6564; // "onesided"
pub(super) const VERSION: u64 = 3;
pub(super) const LINE: usize = 64;
pub(super) const OFF_HEADER: usize = 0;
pub(super) const OFF_ABORT: usize = LINE;
/// The abort word's value when a rank failed.
pub(super) const ABORT_FAILED: u64 = 1;
/// The abort word's value when the job ran out of time: waits report what they wait for
/// before they give up (`crate::diag`).
pub(super) const ABORT_REPORTING: u64 = 2;
pub(super) const OFF_ATTACHED: usize = 2 * LINE;
pub(super) const OFF_BARRIER: usize = 3 * LINE;

/// Environment variable with the job id.
pub const ENV_JOB: &str = "ONESIDED_JOB";
/// Environment variable with this process's rank.
pub const ENV_RANK: &str = "ONESIDED_RANK";
/// Environment variable with the number of ranks.
pub const ENV_SIZE: &str = "ONESIDED_SIZE";
/// Environment variable with the boot segment name.
pub const ENV_BOOT: &str = "ONESIDED_BOOT";
/// Environment variable with the number of virtual nodes the ranks are split over
/// (`osrun --nodes K`; absent: one). Rank `r` of `n` is on node `r * K / n`: consecutive
/// blocks. Each virtual node has a boot segment of its own (its roster of the job's ranks
/// and the abort flag), the collectives cross nodes through the job's hub
/// ([`crate::bootstrap::hub`]), and windows never share memory across nodes: a window over
/// ranks of several virtual nodes reaches the others through the network, as across real
/// nodes.
pub const ENV_NODES: &str = "ONESIDED_NODES";

/// The node of each of `size` ranks split over `nodes` virtual nodes (see [`ENV_NODES`]).
pub(crate) fn virtual_nodes(size: usize, nodes: usize) -> Vec<usize> {
    let nodes = nodes.clamp(1, size.max(1));
    (0..size).map(|r| r * nodes / size).collect()
}

/// Bytes at the start of a slot that hold call tags (one line).
pub(super) const SLOT_TAGS: usize = LINE;

/// Bytes of one rank's exchange slot for a job of `n` ranks (tags and payload).
fn slot_size(n: usize) -> Option<usize> {
    Some((64 * 1024).max(n.checked_mul(4096)?))
}

/// Offsets of the parts of a boot segment for `n` ranks.
#[derive(Debug, Clone, Copy)]
pub(super) struct BootLayout {
    pub barrier: BarrierLayout,
    pub roster: usize,
    pub slots: usize,
    pub slot_size: usize,
    pub total: usize,
}

impl BootLayout {
    /// The layout for `n` ranks; an error when its size does not fit in the address space
    /// (`n` comes from the command line or from a segment another process wrote).
    pub(super) fn new(n: usize) -> Result<Self> {
        let too_many = || Error::Bootstrap(format!("a boot segment for {n} ranks is too large"));
        let barrier = BarrierLayout::new(n);
        let roster = OFF_BARRIER
            .checked_add(barrier.bytes())
            .ok_or_else(too_many)?;
        let slots = Roster::bytes(n)
            .and_then(|r| r.checked_add(roster))
            .and_then(|b| b.checked_next_multiple_of(4096))
            .ok_or_else(too_many)?;
        let slot_size = slot_size(n).ok_or_else(too_many)?;
        let total = n
            .checked_mul(slot_size)
            .and_then(|s| s.checked_add(slots))
            .ok_or_else(too_many)?;
        Ok(BootLayout {
            barrier,
            roster,
            slots,
            slot_size,
            total,
        })
    }
}

pub(super) fn word(seg: &Segment, offset: usize) -> &AtomicU64 {
    assert!(offset + 8 <= seg.len() && offset % 8 == 0);
    // SAFETY: in bounds and aligned (asserted); shared memory lives as long as `seg`;
    // AtomicU64 may alias memory other processes access atomically.
    unsafe { &*seg.as_ptr().add(offset).cast::<AtomicU64>() }
}

/// A fresh job id for a launcher.
pub fn new_job_id() -> String {
    random_job_id()
}
