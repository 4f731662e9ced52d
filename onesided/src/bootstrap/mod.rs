//! Process management and out-of-band collectives.
//!
//! A [`Bootstrap`] tells a process who it is (rank, size, node-local rank) and offers the few
//! collectives that window creation and collectives need. It is byte-oriented and object safe
//! so that the `local` implementation (ranks started by `osrun`) and the host-MPI
//! implementation (ranks started by `mpiexec`/`srun`, the host reached through the `mpi`
//! crate or through functions resolved at run time: `host_mpi`) are interchangeable;
//! [`Comm`] adds typed helpers on top (`comm`), and every collective carries its [`Call`]
//! (`call`).

pub(crate) mod board;
pub(crate) mod call;
pub(crate) mod comm;
pub mod host_mpi;
pub mod hub;
pub(crate) mod identity;
pub(crate) mod launcher;
pub(crate) mod local;
pub(crate) mod locality;
pub mod mpi;
pub(crate) mod pmi;
pub(crate) mod pmix;
pub(crate) mod roster;
#[cfg(feature = "mpi")]
pub(crate) mod rsmpi;

pub use call::{Call, CallTag};
pub use comm::{Comm, ReduceOp, ReduceType, Reducible};
pub use local::ENV_NODES;
pub use roster::PeerWatch;

use std::fmt::Debug;
use std::sync::Arc;

use crate::error::{Error, Result};

/// Ranks of the group a process lands in when every process `i` passed `(colors[i],
/// keys[i])` to a split: the members of `colors[me]`'s group ordered by (key, rank).
pub(crate) fn split_members(
    colors: &[Option<u32>],
    keys: &[usize],
    me: usize,
) -> Option<Vec<usize>> {
    let color = colors[me]?;
    let mut members: Vec<usize> = (0..colors.len())
        .filter(|&r| colors[r] == Some(color))
        .collect();
    members.sort_by_key(|&r| (keys[r], r));
    Some(members)
}

/// True when every block (`counts[p]` bytes at `displs[p]`) lies in a buffer of `len` bytes.
pub(crate) fn blocks_inside(counts: &[usize], displs: &[usize], len: usize) -> bool {
    counts
        .iter()
        .zip(displs)
        .all(|(&c, &d)| d.checked_add(c).is_some_and(|end| end <= len))
}

/// Error unless every count or displacement array of an alltoallv has `n` entries.
pub(crate) fn one_entry_per_process(n: usize, arrays: &[&[usize]]) -> Result<()> {
    if arrays.iter().any(|a| a.len() != n) {
        return Err(Error::InvalidArgument(format!(
            "alltoallv: counts and displacements must have one entry for each of {n} processes"
        )));
    }
    Ok(())
}

/// [`Bootstrap::alltoallv_into`] through [`Bootstrap::alltoallv`]: the blocks are gathered
/// into vectors, exchanged, and copied into place.
pub(crate) fn alltoallv_into_by_copies<B: Bootstrap + ?Sized>(
    boot: &B,
    call: Call,
    send: &[u8],
    (send_counts, send_displs): (&[usize], &[usize]),
    recv: &mut [u8],
    (recv_counts, recv_displs): (&[usize], &[usize]),
) -> Result<()> {
    one_entry_per_process(
        boot.size(),
        &[send_counts, send_displs, recv_counts, recv_displs],
    )?;
    let blocks: Vec<&[u8]> = send_counts
        .iter()
        .zip(send_displs)
        .map(|(&len, &at)| at.checked_add(len).and_then(|end| send.get(at..end)))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            Error::InvalidArgument("alltoallv: a send block leaves the buffer".into())
        })?;
    let got = boot.alltoallv(call, &blocks)?;
    if let Some(p) = (0..got.len()).find(|&p| got[p].len() != recv_counts[p]) {
        return Err(Error::InvalidArgument(format!(
            "alltoallv: {} bytes arrived from rank {p}, {} expected",
            got[p].len(),
            recv_counts[p]
        )));
    }
    for (block, &at) in got.iter().zip(recv_displs) {
        at.checked_add(block.len())
            .and_then(|end| recv.get_mut(at..end))
            .ok_or_else(|| {
                Error::InvalidArgument("alltoallv: a receive block leaves the buffer".into())
            })?
            .copy_from_slice(block);
    }
    Ok(())
}

/// Who this process is and how it talks to its peers out of band.
///
/// Implementations must be usable from any thread, but collectives are called by one thread
/// at a time per process (like MPI collectives on one communicator). Every collective takes
/// the [`Call`] it serves; the implementation numbers the calls it receives and must fail,
/// at every process, a collective in which the processes' calls or numbers differ.
pub trait Bootstrap: Send + Sync + Debug {
    /// Rank of this process, `0..size()`.
    fn rank(&self) -> usize;
    /// Number of processes.
    fn size(&self) -> usize;
    /// Rank of this process among the processes of its node.
    fn node_rank(&self) -> usize;
    /// Number of processes on this node.
    fn node_size(&self) -> usize;
    /// Number of this job's processes that share this machine's cores: the node's, unless
    /// the node is a virtual one of several on this machine (`osrun --nodes`,
    /// `ONESIDED_NODES`). Decides whether waits may keep a core busy.
    fn processes_on_this_machine(&self) -> usize {
        self.node_size()
    }
    /// The node of process `rank` (`rank < size()`): nodes are numbered from 0 in the order
    /// of their lowest rank, the same at every process. A node is a shared-memory domain:
    /// peers on the same node reach each other's memory directly, the others only through
    /// a network transport (Sandia OpenSHMEM's `shmem_internal_get_shr_rank`).
    fn node_of(&self, rank: usize) -> usize;
    /// Random id of the job; names every shared-memory segment of the job.
    fn job_id(&self) -> &str;
    /// Waits until every process has entered the barrier.
    fn barrier(&self, call: Call) -> Result<()>;
    /// Every process contributes `send` (any length); returns all contributions by rank.
    fn allgatherv(&self, call: Call, send: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// `send[j]` goes to rank `j`; returns what every rank sent to this one, by source rank.
    fn alltoallv(&self, call: Call, send: &[&[u8]]) -> Result<Vec<Vec<u8>>>;
    /// Personalised exchange in place, as `MPI_Alltoallv` on bytes: `send_counts[j]` bytes at
    /// `send_displs[j]` of `send` go to rank `j`, and `recv_counts[i]` bytes from rank `i` land
    /// at `recv_displs[i]` of `recv`. The caller has checked that every block lies in its
    /// buffer and that every receive count equals what its sender sends; a block outside its
    /// buffer or a count mismatch is still an error here, never a write outside a block. The
    /// default goes through [`alltoallv`](Bootstrap::alltoallv); a host library moves the
    /// blocks directly.
    #[allow(clippy::too_many_arguments)]
    fn alltoallv_into(
        &self,
        call: Call,
        send: &[u8],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        alltoallv_into_by_copies(
            self,
            call,
            send,
            (send_counts, send_displs),
            recv,
            (recv_counts, recv_displs),
        )
    }
    /// `data` of `root` replaces `data` everywhere (lengths may differ before the call).
    fn bcast(&self, call: Call, root: usize, data: &mut Vec<u8>) -> Result<()>;
    /// Collective: splits the processes by `color` into new groups ordered by (`key`, rank),
    /// like `MPI_Comm_split`. Processes passing `None` get `None`.
    fn split(&self, color: Option<u32>, key: usize) -> Result<Option<Arc<dyn Bootstrap>>>;
    /// True when the launcher has aborted the job (waits should give up).
    fn aborted(&self) -> bool {
        false
    }
    /// True when the job was aborted because it ran out of time and the launcher asks each
    /// waiting process what it waits for (`osrun --timeout`; see `ONESIDED_HANG_REPORT`).
    fn report_requested(&self) -> bool {
        false
    }
    /// How the members appear in the node's roster of processes, so that the waits of
    /// windows over this communicator notice peers that exited or wait elsewhere.
    fn watch(&self) -> Option<&PeerWatch> {
        None
    }
    /// The heap of window control blocks of this communicator, if it keeps one (windows
    /// get a segment each otherwise). Every process of the communicator must answer alike.
    fn control_heap(&self) -> Option<&Arc<crate::shm::heap::ControlHeap>> {
        None
    }
    /// The thread support of its collectives ([`ThreadLevel::Multiple`] unless a host
    /// library provides less).
    fn thread_level(&self) -> ThreadLevel {
        ThreadLevel::Multiple
    }
}

/// Levels of thread support (MPI_THREAD_SINGLE … MPI_THREAD_MULTIPLE), ordered: what a
/// program asks [`init_thread`](crate::init_thread) for, and what its [`Universe`](crate::Universe) provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThreadLevel {
    /// One thread.
    Single,
    /// Only the main thread calls the library.
    Funneled,
    /// Any thread, one at a time.
    Serialized,
    /// Any thread, concurrently.
    Multiple,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_groups_by_color_and_key() {
        let colors = [Some(1), None, Some(0), Some(1), Some(1)];
        let keys = [5, 0, 0, 5, 1];
        assert_eq!(split_members(&colors, &keys, 0), Some(vec![4, 0, 3]));
        assert_eq!(split_members(&colors, &keys, 2), Some(vec![2]));
        assert_eq!(split_members(&colors, &keys, 1), None);
    }
}
