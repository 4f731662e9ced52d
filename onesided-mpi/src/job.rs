//! How the program's processes join one onesided job: onesided's `mpi` bootstrap over the
//! host MPI, whose functions ([`HostMpi`]) are the host's own, resolved at run time
//! (`host`), with handles as words (an MPICH-ABI `int` zero-extended) and every constant the
//! process's ABI's (`abi`).

use std::os::raw::c_int;
use std::sync::Arc;

use onesided::bootstrap::host_mpi::{blocks_fit, HostComm, HostMpi, HostRequest};
use onesided::bootstrap::mpi::MpiBootstrap;
use onesided::{Error, Result, ThreadLevel};

use crate::abi::{self, MPI_Comm};
use crate::host::host;

/// The host MPI of the process, through its functions resolved at run time.
#[derive(Debug)]
pub(crate) struct ProcessMpi;

fn comm(c: HostComm) -> MPI_Comm {
    c.0
}

fn widen(c: MPI_Comm) -> HostComm {
    HostComm(c)
}

fn checked(call: &str, rc: c_int) -> Result<()> {
    if rc == abi::MPI_SUCCESS {
        Ok(())
    } else {
        Err(Error::Bootstrap(format!("{call} failed ({rc})")))
    }
}

fn int(n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| Error::Bootstrap(format!("{n} bytes exceed MPI's int count")))
}

// SAFETY: every buffer goes to MPI with its own length (variable blocks checked with
// blocks_fit); the nonblocking allgather's buffers are the caller's contract.
unsafe impl HostMpi for ProcessMpi {
    fn active(&self) -> bool {
        let mut flag = 0;
        // SAFETY: MPI_Initialized may be called at any time; it writes one int.
        unsafe { (host().initialized)(&mut flag) };
        flag != 0 && !self.finalized()
    }

    fn finalized(&self) -> bool {
        let mut flag = 0;
        // SAFETY: MPI_Finalized may be called at any time; it writes one int.
        unsafe { (host().finalized)(&mut flag) };
        flag != 0
    }

    fn thread_level(&self) -> ThreadLevel {
        match crate::state::thread_level() {
            0 => ThreadLevel::Single,
            1 => ThreadLevel::Funneled,
            2 => ThreadLevel::Serialized,
            _ => ThreadLevel::Multiple,
        }
    }

    fn world(&self) -> HostComm {
        widen(abi::abi().comm_world)
    }

    fn rank(&self, c: HostComm) -> Result<usize> {
        let mut r = 0;
        // SAFETY: a communicator handle; writes one int.
        checked("MPI_Comm_rank", unsafe {
            (host().comm_rank)(comm(c), &mut r)
        })?;
        Ok(r as usize)
    }

    fn size(&self, c: HostComm) -> Result<usize> {
        let mut n = 0;
        // SAFETY: as in rank.
        checked("MPI_Comm_size", unsafe {
            (host().comm_size)(comm(c), &mut n)
        })?;
        Ok(n as usize)
    }

    fn dup(&self, c: HostComm) -> Result<HostComm> {
        let mut out = abi::abi().comm_null;
        // SAFETY: a communicator handle; writes one handle.
        checked("MPI_Comm_dup", unsafe {
            (host().comm_dup)(comm(c), &mut out)
        })?;
        Ok(widen(out))
    }

    fn free(&self, c: HostComm) {
        let mut h = comm(c);
        // SAFETY: a communicator the bootstrap owns, freed once.
        unsafe { (host().comm_free)(&mut h) };
    }

    fn split(&self, c: HostComm, color: Option<i32>, key: i32) -> Result<Option<HostComm>> {
        let mut out = abi::abi().comm_null;
        // SAFETY: a communicator handle; writes one handle.
        checked("MPI_Comm_split", unsafe {
            (host().comm_split)(
                comm(c),
                color.unwrap_or(abi::abi().undefined),
                key,
                &mut out,
            )
        })?;
        Ok((out != abi::abi().comm_null).then(|| widen(out)))
    }

    unsafe fn iallgather(
        &self,
        c: HostComm,
        send: *const u8,
        recv: *mut u8,
        each: usize,
    ) -> Result<HostRequest> {
        let n = int(each)?;
        let mut request = abi::abi().request_null;
        // SAFETY: the caller's contract: `send` holds `each` bytes, `recv` `each` per
        // process, both valid until the request completes.
        checked("MPI_Iallgather", unsafe {
            (host().iallgather)(
                send.cast(),
                n,
                abi::abi().uint8,
                recv.cast(),
                n,
                abi::abi().uint8,
                comm(c),
                &mut request,
            )
        })?;
        Ok(HostRequest(request))
    }

    fn ibarrier(&self, c: HostComm) -> Result<HostRequest> {
        let mut request = abi::abi().request_null;
        // SAFETY: a live communicator; writes one request handle.
        checked("MPI_Ibarrier", unsafe {
            (host().ibarrier)(comm(c), &mut request)
        })?;
        Ok(HostRequest(request))
    }

    fn test(&self, request: &mut HostRequest) -> Result<bool> {
        let mut r: abi::MPI_Request = request.0;
        let mut done = 0;
        // SAFETY: a live request made by iallgather or ibarrier; MPI frees it when it
        // completes.
        checked("MPI_Test", unsafe {
            (host().test)(
                &mut r,
                &mut done,
                abi::abi().status_ignore as *mut abi::MPI_Status,
            )
        })?;
        request.0 = r;
        Ok(done != 0)
    }

    fn progress(&self, c: HostComm) {
        let mut flag = 0;
        // SAFETY: a probe on a live communicator; writes one int and no status.
        unsafe {
            (host().iprobe)(
                abi::abi().any_source,
                abi::abi().any_tag,
                comm(c),
                &mut flag,
                abi::abi().status_ignore as *mut abi::MPI_Status,
            )
        };
    }

    fn allgather(&self, c: HostComm, send: &[u8], recv: &mut [u8]) -> Result<()> {
        let n = int(send.len())?;
        if recv.len() != send.len() * self.size(c)? {
            return Err(Error::Bootstrap(
                "allgather: receive buffer of the wrong size".into(),
            ));
        }
        // SAFETY: each buffer has the length given; blocking call.
        checked("MPI_Allgather", unsafe {
            (host().allgather)(
                send.as_ptr().cast(),
                n,
                abi::abi().uint8,
                recv.as_mut_ptr().cast(),
                n,
                abi::abi().uint8,
                comm(c),
            )
        })
    }

    fn allgatherv(
        &self,
        c: HostComm,
        send: &[u8],
        recv: &mut [u8],
        counts: &[i32],
        displs: &[i32],
    ) -> Result<()> {
        blocks_fit(counts, displs, recv.len(), self.size(c)?)?;
        // SAFETY: every block lies inside `recv` (checked); blocking call.
        checked("MPI_Allgatherv", unsafe {
            (host().allgatherv)(
                send.as_ptr().cast(),
                int(send.len())?,
                abi::abi().uint8,
                recv.as_mut_ptr().cast(),
                counts.as_ptr(),
                displs.as_ptr(),
                abi::abi().uint8,
                comm(c),
            )
        })
    }

    fn alltoallv(
        &self,
        c: HostComm,
        send: &[u8],
        send_counts: &[i32],
        send_displs: &[i32],
        recv: &mut [u8],
        recv_counts: &[i32],
        recv_displs: &[i32],
    ) -> Result<()> {
        let n = self.size(c)?;
        blocks_fit(send_counts, send_displs, send.len(), n)?;
        blocks_fit(recv_counts, recv_displs, recv.len(), n)?;
        // SAFETY: every block lies inside its buffer (checked); blocking call.
        checked("MPI_Alltoallv", unsafe {
            (host().alltoallv)(
                send.as_ptr().cast(),
                send_counts.as_ptr(),
                send_displs.as_ptr(),
                abi::abi().uint8,
                recv.as_mut_ptr().cast(),
                recv_counts.as_ptr(),
                recv_displs.as_ptr(),
                abi::abi().uint8,
                comm(c),
            )
        })
    }

    fn bcast(&self, c: HostComm, root: usize, buf: &mut [u8]) -> Result<()> {
        // SAFETY: `buf` holds the count given; blocking call.
        checked("MPI_Bcast", unsafe {
            (host().bcast)(
                buf.as_mut_ptr().cast(),
                int(buf.len())?,
                abi::abi().uint8,
                int(root)?,
                comm(c),
            )
        })
    }

    fn abort(&self, code: i32) {
        // SAFETY: MPI is initialized (a bootstrap exists over it).
        unsafe { (host().abort)(abi::abi().comm_world, code) };
    }
}

/// The host MPI as onesided's bootstrap reaches it.
pub(crate) fn host_mpi() -> Arc<dyn HostMpi> {
    static HOST: std::sync::OnceLock<Arc<dyn HostMpi>> = std::sync::OnceLock::new();
    Arc::clone(HOST.get_or_init(|| Arc::new(ProcessMpi)))
}

/// Collective over host communicator `comm`: a bootstrap over a duplicate of it.
pub(crate) fn bootstrap(comm: MPI_Comm) -> Result<MpiBootstrap> {
    MpiBootstrap::over(host_mpi(), widen(comm))
}
