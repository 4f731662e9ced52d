//! The host MPI as the `mpi` bootstrap sees it: the dozen calls it makes (communicator
//! queries, duplication and splits, a few byte collectives, a nonblocking allgather and
//! barrier and their test, abort and finalize), behind one object-safe trait.
//!
//! Two implementations exist: the `mpi` crate's bindings (feature `mpi`, for Rust programs
//! that link a host MPI), and the MPI C ABI library `onesided-mpi`, which links no MPI and
//! resolves the host's functions at run time, one set per ABI (handles are `int`s under the
//! MPICH ABI and pointers under the MPI-5 standard ABI and Open MPI). Handles therefore
//! cross this seam widened to a machine word.

use std::fmt::Debug;

use crate::bootstrap::ThreadLevel;
use crate::error::Result;

/// A communicator of the host MPI, its handle widened to a machine word (an `int` handle
/// zero-extended, or a pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostComm(pub usize);

/// A pending request of the host MPI, widened like [`HostComm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostRequest(pub usize);

/// What the `mpi` bootstrap needs of a host MPI. Every collective moves bytes (`MPI_BYTE`);
/// every method is called with the calls on one communicator serialized by the caller.
/// Failures are [`Error::Bootstrap`](crate::Error::Bootstrap) with the MPI call's name.
///
/// # Safety
/// Implementations pass the buffers they are given to MPI with the lengths they are given;
/// the nonblocking allgather's buffers must stay valid until its request completes, which
/// is the caller's part of [`HostMpi::iallgather`]'s contract.
pub unsafe trait HostMpi: Send + Sync + Debug + 'static {
    /// Whether MPI is initialized and not yet finalized.
    fn active(&self) -> bool;
    /// Whether MPI has been finalized (calls on it would be erroneous).
    fn finalized(&self) -> bool;
    /// The thread level MPI was initialized with.
    fn thread_level(&self) -> ThreadLevel;
    /// `MPI_COMM_WORLD`.
    fn world(&self) -> HostComm;
    /// This process's rank in `comm`.
    fn rank(&self, comm: HostComm) -> Result<usize>;
    /// The size of `comm`.
    fn size(&self, comm: HostComm) -> Result<usize>;
    /// `MPI_Comm_dup`.
    fn dup(&self, comm: HostComm) -> Result<HostComm>;
    /// `MPI_Comm_free` (failures ignored: a bootstrap frees when it is dropped).
    fn free(&self, comm: HostComm);
    /// `MPI_Comm_split`; `None` for `MPI_UNDEFINED` as the color, and as the answer.
    fn split(&self, comm: HostComm, color: Option<i32>, key: i32) -> Result<Option<HostComm>>;
    /// `MPI_Iallgather` of `each` bytes per process from `send` into `recv`.
    ///
    /// # Safety
    /// `send` holds `each` bytes and `recv` `each × size` bytes, and both stay valid (and
    /// `recv` untouched) until [`HostMpi::test`] reports the request complete.
    unsafe fn iallgather(
        &self,
        comm: HostComm,
        send: *const u8,
        recv: *mut u8,
        each: usize,
    ) -> Result<HostRequest>;
    /// `MPI_Ibarrier` on `comm`.
    fn ibarrier(&self, comm: HostComm) -> Result<HostRequest>;
    /// `MPI_Test`: true once `request` completed (it is then freed).
    fn test(&self, request: &mut HostRequest) -> Result<bool>;
    /// Drives the host's progress without matching anything (`MPI_Iprobe` on `comm`, on
    /// which no message is ever sent).
    fn progress(&self, comm: HostComm);
    /// `MPI_Allgather` of `send.len()` bytes per process.
    fn allgather(&self, comm: HostComm, send: &[u8], recv: &mut [u8]) -> Result<()>;
    /// `MPI_Allgatherv` of bytes.
    fn allgatherv(
        &self,
        comm: HostComm,
        send: &[u8],
        recv: &mut [u8],
        counts: &[i32],
        displs: &[i32],
    ) -> Result<()>;
    /// `MPI_Alltoallv` of bytes.
    #[allow(clippy::too_many_arguments)]
    fn alltoallv(
        &self,
        comm: HostComm,
        send: &[u8],
        send_counts: &[i32],
        send_displs: &[i32],
        recv: &mut [u8],
        recv_counts: &[i32],
        recv_displs: &[i32],
    ) -> Result<()>;
    /// `MPI_Bcast` of `buf` from `root` (at most `i32::MAX` bytes).
    fn bcast(&self, comm: HostComm, root: usize, buf: &mut [u8]) -> Result<()>;
    /// `MPI_Abort(MPI_COMM_WORLD, code)`.
    fn abort(&self, code: i32);
}

/// Checks that `n` blocks of `counts` at `displs` lie inside a buffer of `len` bytes: what a
/// [`HostMpi`] implementation verifies before handing variable-count buffers to MPI.
pub fn blocks_fit(counts: &[i32], displs: &[i32], len: usize, n: usize) -> Result<()> {
    let inside = counts.len() == n
        && displs.len() == n
        && counts.iter().zip(displs).all(|(&c, &d)| {
            c >= 0
                && d >= 0
                && (d as usize)
                    .checked_add(c as usize)
                    .is_some_and(|e| e <= len)
        });
    if inside {
        Ok(())
    } else {
        Err(crate::Error::Bootstrap(format!(
            "a collective's blocks leave their {len}-byte buffer ({n} processes)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_fit_only_inside() {
        assert!(blocks_fit(&[3, 0, 2], &[0, 3, 3], 5, 3).is_ok());
        assert!(blocks_fit(&[3, 0, 2], &[0, 3, 4], 5, 3).is_err());
        assert!(blocks_fit(&[3, 2], &[0, 3], 5, 3).is_err());
        assert!(blocks_fit(&[-1], &[0], 5, 1).is_err());
    }
}
