//! What a collective call is, and its number: the tag every collective agreement carries.

use crate::error::{Error, Result};

/// What a collective call is. Every collective agreement carries it (with a sequence number,
/// see [`CallTag`]), so that processes making different collective calls get
/// [`Error::CollectiveMismatch`] instead of pairing silently or waiting forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Call {
    /// [`Comm::barrier`](crate::Comm::barrier).
    Barrier,
    /// [`Comm::allgather`](crate::Comm::allgather), [`Comm::allgatherv`](crate::Comm::allgatherv), [`Comm::allreduce`](crate::Comm::allreduce).
    Allgather,
    /// [`Comm::alltoall`](crate::Comm::alltoall), [`Comm::alltoallv`](crate::Comm::alltoallv).
    Alltoall,
    /// [`Comm::bcast`](crate::Comm::bcast), [`Comm::bcast_vec`](crate::Comm::bcast_vec).
    Bcast,
    /// [`Comm::split`](crate::Comm::split).
    Split,
    /// [`Comm::agree`](crate::Comm::agree).
    Agree,
    /// Window creation by `allocate`.
    Allocate,
    /// Window creation by `allocate_shared`.
    AllocateShared,
    /// Window creation by `create`.
    Create,
    /// Window creation by `create_dynamic`.
    CreateDynamic,
    /// `Window::fence`.
    Fence,
    /// `Window::free`.
    Free,
    /// `Window::set_info`.
    SetInfo,
    /// `Window::set_num_notify`.
    SetNumNotify,
    /// Building or freeing an [`Alltoallv`](crate::Alltoallv) plan.
    Alltoallv,
    /// Growing the control heap of a communicator's windows (during `create` or
    /// `create_dynamic`): its own call, so that a process that grows while another does not
    /// (their layouts differ) gets a mismatch instead of pairing with the creation.
    ControlHeap,
}

impl Call {
    const ALL: [Call; 16] = [
        Call::Barrier,
        Call::Allgather,
        Call::Alltoall,
        Call::Bcast,
        Call::Split,
        Call::Agree,
        Call::Allocate,
        Call::AllocateShared,
        Call::Create,
        Call::CreateDynamic,
        Call::Fence,
        Call::Free,
        Call::SetInfo,
        Call::SetNumNotify,
        Call::Alltoallv,
        Call::ControlHeap,
    ];

    /// The call's name as users know it.
    pub fn name(self) -> &'static str {
        match self {
            Call::Barrier => "barrier",
            Call::Allgather => "allgather",
            Call::Alltoall => "alltoall",
            Call::Bcast => "bcast",
            Call::Split => "split",
            Call::Agree => "agree",
            Call::Allocate => "allocate",
            Call::AllocateShared => "allocate_shared",
            Call::Create => "create",
            Call::CreateDynamic => "create_dynamic",
            Call::Fence => "fence",
            Call::Free => "free",
            Call::SetInfo => "set_info",
            Call::SetNumNotify => "set_num_notify",
            Call::Alltoallv => "alltoallv",
            Call::ControlHeap => "control heap",
        }
    }

    /// The MPI function that makes this collective (for hang reports).
    pub(crate) fn mpi_name(self) -> &'static str {
        match self {
            Call::Barrier => "MPI_Barrier",
            Call::Allgather => "MPI_Allgather",
            Call::Alltoall => "MPI_Alltoall",
            Call::Bcast => "MPI_Bcast",
            Call::Split => "MPI_Comm_split",
            Call::Agree => "an agreement (MPI_Allreduce)",
            Call::Allocate => "MPI_Win_allocate",
            Call::AllocateShared => "MPI_Win_allocate_shared",
            Call::Create => "MPI_Win_create",
            Call::CreateDynamic => "MPI_Win_create_dynamic",
            Call::Fence => "MPI_Win_fence",
            Call::Free => "MPI_Win_free",
            Call::SetInfo => "MPI_Win_set_info",
            Call::SetNumNotify => "MPIX_Win_set_num_notify",
            Call::Alltoallv => "MPI_Alltoallv",
            Call::ControlHeap => "the window heap's set-up (MPI_Win_allocate)",
        }
    }

    /// A stable small number for the call (1..=255), the same in every process.
    pub(crate) fn code(self) -> u64 {
        Call::ALL
            .iter()
            .position(|&c| c == self)
            .map_or(0, |i| i as u64 + 1)
    }

    /// The call with `code`, if any.
    pub(crate) fn from_code(code: u64) -> Option<Call> {
        let i = usize::try_from(code).ok()?.checked_sub(1)?;
        Call::ALL.get(i).copied()
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A collective call and its sequence number on its communicator (or window), counted when
/// the call is made. Processes agree only when both match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTag {
    /// What the call is.
    pub call: Call,
    /// Number of collective calls made on the communicator (or window) before this one.
    pub seq: u64,
}

impl CallTag {
    /// One word: never 0 (0 means "no call"), distinct for distinct tags below 2^56 calls.
    pub fn pack(self) -> u64 {
        (self.seq << 8) | self.call.code()
    }

    /// The tag of a packed word, if it names a call.
    pub fn unpack(word: u64) -> Option<CallTag> {
        Some(CallTag {
            call: Call::from_code(word & 0xff)?,
            seq: word >> 8,
        })
    }

    /// The error for a peer `rank` whose packed tag is `theirs`, when it differs from ours.
    pub(crate) fn check(self, rank: usize, theirs: u64) -> Result<()> {
        if theirs == self.pack() {
            return Ok(());
        }
        let other = CallTag::unpack(theirs);
        Err(Error::CollectiveMismatch {
            call: self.call.name(),
            seq: self.seq,
            rank,
            other: other.map_or("an unknown call", |t| t.call.name()),
            other_seq: other.map_or(0, |t| t.seq),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_tags_pack_and_unpack() {
        for (i, &call) in Call::ALL.iter().enumerate() {
            assert_eq!(Call::from_code(call.code()), Some(call));
            let tag = CallTag {
                call,
                seq: i as u64 * 1000 + 3,
            };
            assert_ne!(tag.pack(), 0);
            assert_eq!(CallTag::unpack(tag.pack()), Some(tag));
            assert!(tag.check(1, tag.pack()).is_ok());
        }
        assert_eq!(Call::from_code(0), None);
        let fence = CallTag {
            call: Call::Fence,
            seq: 4,
        };
        let free = CallTag {
            call: Call::Free,
            seq: 4,
        };
        let err = fence.check(1, free.pack()).unwrap_err();
        assert!(err.to_string().contains("free"), "{err}");
    }
}
