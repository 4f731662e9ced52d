//! The host MPI through the `mpi` crate's bindings (feature `mpi`): a Rust program linked
//! against MPICH or Open MPI. Also initializes MPI for a program that `init` connects
//! through it, and finalizes (or aborts) it at exit.

use std::os::raw::c_int;
use std::sync::{Arc, OnceLock};

use mpi::ffi;

use crate::bootstrap::host_mpi::{blocks_fit, HostComm, HostMpi, HostRequest};
use crate::bootstrap::mpi::{on_exit, MpiBootstrap};
use crate::bootstrap::ThreadLevel;
use crate::error::{Error, Result};

/// The `mpi` crate's MPI.
#[derive(Debug)]
struct RsMpi;

/// A handle of the linked MPI (an `int` or a pointer) widened to a word.
fn widen<T: Copy>(handle: T) -> usize {
    const { assert!(std::mem::size_of::<T>() <= std::mem::size_of::<usize>()) };
    let mut word = 0usize;
    // SAFETY: T fits in a word (checked above); the bytes of a Copy handle are copied into
    // the word's first bytes, where `narrow` reads them back.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&handle as *const T).cast::<u8>(),
            (&mut word as *mut usize).cast::<u8>(),
            std::mem::size_of::<T>(),
        )
    };
    word
}

/// The handle `widen` made.
fn narrow<T: Copy>(word: usize) -> T {
    const { assert!(std::mem::size_of::<T>() <= std::mem::size_of::<usize>()) };
    // SAFETY: T (an MPI handle: an int or a pointer, any bit pattern valid) fits in a word;
    // its bytes are the word's first ones, as `widen` stored them.
    unsafe { std::mem::transmute_copy(&word) }
}

/// The host communicator of an `mpi` crate communicator.
pub(crate) fn host_comm<C: mpi::topology::Communicator>(comm: &C) -> HostComm {
    HostComm(widen(comm.as_raw()))
}

fn comm(c: HostComm) -> ffi::MPI_Comm {
    narrow(c.0)
}

fn checked(call: &str, rc: c_int) -> Result<()> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(Error::Bootstrap(format!("{call} failed ({rc})")))
    }
}

fn int(n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| Error::Bootstrap(format!("{n} bytes exceed MPI's int count")))
}

impl MpiBootstrap {
    /// Collective over `comm`: a bootstrap over a duplicate of it (see
    /// [`MpiBootstrap::over`]).
    pub fn new<C: mpi::topology::Communicator>(comm: &C) -> Result<MpiBootstrap> {
        MpiBootstrap::over(host(), host_comm(comm))
    }
}

/// The `mpi` crate's host MPI.
pub(crate) fn host() -> Arc<dyn HostMpi> {
    static HOST: OnceLock<Arc<dyn HostMpi>> = OnceLock::new();
    Arc::clone(HOST.get_or_init(|| Arc::new(RsMpi)))
}

// SAFETY: every buffer goes to MPI with its own length (variable blocks checked with
// blocks_fit); the nonblocking allgather's buffers are the caller's contract.
unsafe impl HostMpi for RsMpi {
    fn active(&self) -> bool {
        mpi::environment::is_initialized() && !self.finalized()
    }

    fn finalized(&self) -> bool {
        let mut flag = 0;
        // SAFETY: MPI_Finalized may be called at any time; it writes one int.
        unsafe { ffi::MPI_Finalized(&mut flag) };
        flag != 0
    }

    fn thread_level(&self) -> ThreadLevel {
        match mpi::environment::threading_support() {
            mpi::Threading::Single => ThreadLevel::Single,
            mpi::Threading::Funneled => ThreadLevel::Funneled,
            mpi::Threading::Serialized => ThreadLevel::Serialized,
            mpi::Threading::Multiple => ThreadLevel::Multiple,
        }
    }

    fn world(&self) -> HostComm {
        // SAFETY: reads a link-time constant of the MPI library.
        HostComm(widen(unsafe { ffi::RSMPI_COMM_WORLD }))
    }

    fn rank(&self, c: HostComm) -> Result<usize> {
        let mut r = 0;
        // SAFETY: a live communicator; writes one int.
        checked("MPI_Comm_rank", unsafe {
            ffi::MPI_Comm_rank(comm(c), &mut r)
        })?;
        Ok(r as usize)
    }

    fn size(&self, c: HostComm) -> Result<usize> {
        let mut n = 0;
        // SAFETY: as in rank.
        checked("MPI_Comm_size", unsafe {
            ffi::MPI_Comm_size(comm(c), &mut n)
        })?;
        Ok(n as usize)
    }

    fn dup(&self, c: HostComm) -> Result<HostComm> {
        // SAFETY: reads a link-time constant.
        let mut out = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: a live communicator; writes one handle.
        checked("MPI_Comm_dup", unsafe {
            ffi::MPI_Comm_dup(comm(c), &mut out)
        })?;
        Ok(HostComm(widen(out)))
    }

    fn free(&self, c: HostComm) {
        let mut h = comm(c);
        // SAFETY: a communicator the bootstrap owns, freed once.
        unsafe { ffi::MPI_Comm_free(&mut h) };
    }

    fn split(&self, c: HostComm, color: Option<i32>, key: i32) -> Result<Option<HostComm>> {
        // SAFETY: reads link-time constants.
        let (undefined, null) = unsafe { (ffi::RSMPI_UNDEFINED, ffi::RSMPI_COMM_NULL) };
        let mut out = null;
        // SAFETY: a live communicator; writes one handle.
        checked("MPI_Comm_split", unsafe {
            ffi::MPI_Comm_split(comm(c), color.unwrap_or(undefined), key, &mut out)
        })?;
        Ok((widen(out) != widen(null)).then(|| HostComm(widen(out))))
    }

    unsafe fn iallgather(
        &self,
        c: HostComm,
        send: *const u8,
        recv: *mut u8,
        each: usize,
    ) -> Result<HostRequest> {
        let n = int(each)?;
        // SAFETY: reads link-time constants.
        let (mut request, byte) = unsafe { (ffi::RSMPI_REQUEST_NULL, ffi::RSMPI_UINT8_T) };
        // SAFETY: the caller's contract: `send` holds `each` bytes, `recv` `each` per
        // process, both valid until the request completes.
        checked("MPI_Iallgather", unsafe {
            ffi::MPI_Iallgather(
                send.cast(),
                n,
                byte,
                recv.cast(),
                n,
                byte,
                comm(c),
                &mut request,
            )
        })?;
        Ok(HostRequest(widen(request)))
    }

    fn ibarrier(&self, c: HostComm) -> Result<HostRequest> {
        // SAFETY: reads a link-time constant.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: a live communicator; writes one request handle.
        checked("MPI_Ibarrier", unsafe {
            ffi::MPI_Ibarrier(comm(c), &mut request)
        })?;
        Ok(HostRequest(widen(request)))
    }

    fn test(&self, request: &mut HostRequest) -> Result<bool> {
        let mut r: ffi::MPI_Request = narrow(request.0);
        let mut done = 0;
        // SAFETY: a live request made by iallgather or ibarrier; MPI frees it when it
        // completes.
        checked("MPI_Test", unsafe {
            ffi::MPI_Test(&mut r, &mut done, ffi::RSMPI_STATUS_IGNORE)
        })?;
        request.0 = widen(r);
        Ok(done != 0)
    }

    fn progress(&self, c: HostComm) {
        let mut flag = 0;
        // SAFETY: a probe on a live communicator; it writes one int and no status.
        unsafe {
            ffi::MPI_Iprobe(
                ffi::RSMPI_ANY_SOURCE,
                ffi::RSMPI_ANY_TAG,
                comm(c),
                &mut flag,
                ffi::RSMPI_STATUS_IGNORE,
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
            ffi::MPI_Allgather(
                send.as_ptr().cast(),
                n,
                ffi::RSMPI_UINT8_T,
                recv.as_mut_ptr().cast(),
                n,
                ffi::RSMPI_UINT8_T,
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
            ffi::MPI_Allgatherv(
                send.as_ptr().cast(),
                int(send.len())?,
                ffi::RSMPI_UINT8_T,
                recv.as_mut_ptr().cast(),
                counts.as_ptr(),
                displs.as_ptr(),
                ffi::RSMPI_UINT8_T,
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
            ffi::MPI_Alltoallv(
                send.as_ptr().cast(),
                send_counts.as_ptr(),
                send_displs.as_ptr(),
                ffi::RSMPI_UINT8_T,
                recv.as_mut_ptr().cast(),
                recv_counts.as_ptr(),
                recv_displs.as_ptr(),
                ffi::RSMPI_UINT8_T,
                comm(c),
            )
        })
    }

    fn bcast(&self, c: HostComm, root: usize, buf: &mut [u8]) -> Result<()> {
        // SAFETY: `buf` holds the count given; blocking call.
        checked("MPI_Bcast", unsafe {
            ffi::MPI_Bcast(
                buf.as_mut_ptr().cast(),
                int(buf.len())?,
                ffi::RSMPI_UINT8_T,
                int(root)?,
                comm(c),
            )
        })
    }

    fn abort(&self, code: i32) {
        // SAFETY: MPI is initialized; the world handle is a link-time constant.
        unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code) };
    }
}

/// At exit: a clean exit finalizes MPI; a failing one (a Rust panic in `main` exits with
/// 101, `process::exit(n)` with n) aborts the whole job with that status. Finalizing there
/// instead would wait for peers that may be waiting for this process, and the job would
/// hang; `MPI_Abort` makes `mpiexec` end every process of the job.
extern "C" fn finalize_at_exit(status: libc::c_int, _arg: *mut libc::c_void) {
    if RsMpi.finalized() {
        return;
    }
    if status != 0 {
        // If MPI_Abort itself never returns nor ends the job (seen once with Open MPI while
        // a peer sat in MPI_Finalize), SIGALRM ends this process abnormally, and every
        // launcher ends a job whose process died on a signal.
        // SAFETY: alarm(2) only arms a timer; SIGALRM has its default action (terminate).
        unsafe { libc::alarm(10) };
        RsMpi.abort(status);
    }
    // SAFETY: MPI is initialized (we did it) and not finalized; exit runs on one thread.
    unsafe { ffi::MPI_Finalize() };
}

/// Initializes the host MPI for a process that `init` connects through it, with
/// MPI_THREAD_SERIALIZED, and finalizes it when the process exits (or, when it exits with a
/// failing status, aborts the job: see `finalize_at_exit`). Returns the world.
pub(crate) fn world_initializing_mpi(required: ThreadLevel) -> Result<HostComm> {
    if !mpi::environment::is_initialized() {
        let level = match required {
            ThreadLevel::Single => mpi::Threading::Single,
            ThreadLevel::Funneled => mpi::Threading::Funneled,
            ThreadLevel::Serialized => mpi::Threading::Serialized,
            ThreadLevel::Multiple => mpi::Threading::Multiple,
        };
        let (universe, _provided) = mpi::initialize_with_threading(level)
            .ok_or_else(|| Error::Bootstrap("MPI_Init_thread failed".into()))?;
        // The universe would finalize MPI when dropped; this process keeps MPI up until exit.
        std::mem::forget(universe);
        // SAFETY: registers a plain extern "C" function without captured state.
        if unsafe { on_exit(finalize_at_exit, std::ptr::null_mut()) } != 0 {
            return Err(Error::Bootstrap("on_exit failed".into()));
        }
    }
    Ok(RsMpi.world())
}
