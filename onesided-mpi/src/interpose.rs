//! The host MPI's blocking calls, kept from blocking onesided: once this process serves
//! windows across nodes (its network endpoint is open), a peer's put, get or atomic on this
//! process's memory is applied only while someone reads that endpoint — and a C program's
//! target typically waits inside the host MPI (OSU's in `MPI_Barrier`, a halo code's in
//! `MPI_Recv` or `MPI_Waitall`), whose progress loop knows nothing of it. Left to the
//! endpoint's progress thread, a put waited for that thread to be scheduled: 1900 µs per
//! 8-byte put with its `block` mode where the ranks take every core.
//!
//! So each blocking call of the table below, in a process with an open endpoint, starts the
//! host's nonblocking form and polls it with the host's `MPI_Test`, pausing between polls
//! with [`onesided::ForeignWait`] (which reads the endpoint, runs deferred epochs and serves
//! request rings) — the loop an MPI library's own progress engine runs. Before the endpoint
//! opens (every job of one node) each call goes straight to the host's function: one load
//! more than the native call. The host's own completion calls (`MPI_Wait` & co., exported
//! with the RMA chapter's requests) take the same loop then (`requests`).
//!
//! One table, as for the RMA chapter (`exports`): each line names the blocking call, its
//! `PMPI_` twin, its C arguments (MPICH's `mpi_proto.h`; a trailing `; status` argument is
//! the `MPI_Status *` the completion fills) and the host's nonblocking form, which takes
//! the same arguments (without the status) and an `MPI_Request *`. `MPI_Sendrecv`,
//! `MPI_Probe` and `MPI_Mprobe` have no such form and are written out below the table.

#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use std::os::raw::{c_int, c_void};

use crate::abi::{self, MPI_Aint, MPI_Comm, MPI_Count, MPI_Datatype, MPI_Op, MPI_Request};
use crate::host::HostFn;

/// True when a blocking call of the host must keep onesided progressing: this process
/// serves windows across nodes.
#[inline]
pub(crate) fn keeps_onesided_progressing() -> bool {
    onesided::network_open()
}

/// One turn of onesided's progress when this process serves windows across nodes: what a
/// test form (`MPI_Iprobe`, `MPI_Test` …) does before it asks the host, since a program may
/// poll it in a loop of its own and make no other progress.
#[inline]
pub(crate) fn serve_once() {
    if keeps_onesided_progressing() {
        onesided::progress_once();
    }
}

/// Calls `poll` (a host test form that sets its flag when done) until the flag is set or
/// the host reports an error, onesided progressing between calls: its return code.
fn poll_host(mut poll: impl FnMut(&mut c_int) -> c_int) -> c_int {
    let mut wait = onesided::ForeignWait::new();
    loop {
        let mut flag: c_int = 0;
        let rc = poll(&mut flag);
        if rc != abi::MPI_SUCCESS || flag != 0 {
            return rc;
        }
        wait.pause();
    }
}

/// Polls the host's request until it completes, filling `status` (the program's, or the
/// ABI's `MPI_STATUS_IGNORE`); onesided progresses between polls.
///
/// # Safety
/// `request` is a live request of the host; `status` is the caller's `MPI_Status *`.
unsafe fn complete(request: &mut MPI_Request, status: *mut c_void) -> c_int {
    // SAFETY: the request the host just started; the caller's status.
    poll_host(|flag| unsafe { (crate::host::host().test)(request, flag, status.cast()) })
}

/// The ABI's `MPI_STATUS_IGNORE`, for completions whose call has no status argument.
fn status_ignore() -> *mut c_void {
    abi::abi().status_ignore as *mut c_void
}

macro_rules! interposed {
    ($( $mpi:ident / $pmpi:ident ( $($arg:ident : $ty:ty),* $(,)? $(; $status:ident)? ) => $start:literal ; )*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $mpi($($arg: $ty,)* $($status: *mut c_void)?) -> c_int {
                if !keeps_onesided_progressing() {
                    static HOST: HostFn = HostFn::new(concat!("P", stringify!($mpi), "\0"));
                    // SAFETY: the host's PMPI_ twin has this prototype (mpi_proto.h).
                    let f: unsafe extern "C" fn($($ty,)* $(interposed!(@status $status))?) -> c_int =
                        unsafe { std::mem::transmute(HOST.get()) };
                    // SAFETY: the caller's arguments, passed on unchanged.
                    return unsafe { f($($arg,)* $($status)?) };
                }
                static START: HostFn = HostFn::new($start);
                // SAFETY: the nonblocking form takes the same arguments and a request.
                let start: unsafe extern "C" fn($($ty,)* *mut MPI_Request) -> c_int =
                    unsafe { std::mem::transmute(START.get()) };
                let mut request: MPI_Request = 0;
                // SAFETY: the caller's arguments, passed on unchanged; our request.
                let rc = unsafe { start($($arg,)* &mut request) };
                if rc != abi::MPI_SUCCESS {
                    return rc;
                }
                #[allow(unused_variables)]
                let status = status_ignore();
                $( let status = $status; )?
                // SAFETY: the request just started; the caller's status (or IGNORE).
                unsafe { complete(&mut request, status) }
            }

            #[no_mangle]
            pub unsafe extern "C" fn $pmpi($($arg: $ty,)* $($status: *mut c_void)?) -> c_int {
                // SAFETY: as above.
                unsafe { $mpi($($arg,)* $($status)?) }
            }
        )*

        /// Every name this table exports, `MPI_` and `PMPI_` forms.
        #[allow(dead_code)]
        pub(crate) const INTERPOSED: &[&str] = &[$(stringify!($mpi), stringify!($pmpi)),*];
    };
    (@status $status:ident) => { *mut c_void };
}

interposed! {
    MPI_Barrier / PMPI_Barrier(comm: MPI_Comm) => "PMPI_Ibarrier\0";
    MPI_Bcast / PMPI_Bcast(
        buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm,
    ) => "PMPI_Ibcast\0";
    MPI_Reduce / PMPI_Reduce(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype,
        op: MPI_Op, root: c_int, comm: MPI_Comm,
    ) => "PMPI_Ireduce\0";
    MPI_Allreduce / PMPI_Allreduce(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype,
        op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Iallreduce\0";
    MPI_Gather / PMPI_Gather(
        sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm,
    ) => "PMPI_Igather\0";
    MPI_Gatherv / PMPI_Gatherv(
        sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, root: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Igatherv\0";
    MPI_Scatter / PMPI_Scatter(
        sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: c_int, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm,
    ) => "PMPI_Iscatter\0";
    MPI_Allgather / PMPI_Allgather(
        sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Iallgather\0";
    MPI_Allgatherv / PMPI_Allgatherv(
        sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcounts: *const c_int, displs: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Iallgatherv\0";
    MPI_Alltoall / PMPI_Alltoall(
        sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, recvbuf: *mut c_void,
        recvcount: c_int, recvtype: MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Ialltoall\0";
    MPI_Alltoallv / PMPI_Alltoallv(
        sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int,
        sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int,
        rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Ialltoallv\0";
    MPI_Reduce_scatter_block / PMPI_Reduce_scatter_block(
        sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: MPI_Datatype,
        op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Ireduce_scatter_block\0";
    MPI_Scan / PMPI_Scan(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype,
        op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Iscan\0";
    MPI_Exscan / PMPI_Exscan(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype,
        op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Iexscan\0";
    MPI_Send / PMPI_Send(
        buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Isend\0";
    MPI_Ssend / PMPI_Ssend(
        buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Issend\0";
    MPI_Recv / PMPI_Recv(
        buf: *mut c_void, count: c_int, datatype: MPI_Datatype, source: c_int, tag: c_int,
        comm: MPI_Comm; status
    ) => "PMPI_Irecv\0";
    MPI_Bsend / PMPI_Bsend(
        buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Ibsend\0";
    MPI_Rsend / PMPI_Rsend(
        buf: *const c_void, count: c_int, datatype: MPI_Datatype, dest: c_int, tag: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Irsend\0";
    MPI_Mrecv / PMPI_Mrecv(
        buf: *mut c_void, count: c_int, datatype: MPI_Datatype, message: *mut c_void; status
    ) => "PMPI_Imrecv\0";
    MPI_Scatterv / PMPI_Scatterv(
        sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int,
        sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype,
        root: c_int, comm: MPI_Comm,
    ) => "PMPI_Iscatterv\0";
    MPI_Reduce_scatter / PMPI_Reduce_scatter(
        sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int,
        datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Ireduce_scatter\0";
    // A communicator's duplication is collective: mpi4py duplicates a communicator on its
    // first pickled collective.
    MPI_Comm_dup / PMPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm) => "PMPI_Comm_idup\0";
    MPI_Alltoallw / PMPI_Alltoallw(
        sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int,
        sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int,
        rdispls: *const c_int, recvtypes: *const MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Ialltoallw\0";

    // The large-count forms of MPI-4 (`MPI_Count` counts, `MPI_Aint` displacements), which
    // MPI-4 programs and bindings (mpi4py) call instead: an MPI without them has programs
    // that never call them.
    MPI_Send_c / PMPI_Send_c(
        buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Isend_c\0";
    MPI_Ssend_c / PMPI_Ssend_c(
        buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Issend_c\0";
    MPI_Bsend_c / PMPI_Bsend_c(
        buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Ibsend_c\0";
    MPI_Rsend_c / PMPI_Rsend_c(
        buf: *const c_void, count: MPI_Count, datatype: MPI_Datatype, dest: c_int, tag: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Irsend_c\0";
    MPI_Recv_c / PMPI_Recv_c(
        buf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, source: c_int, tag: c_int,
        comm: MPI_Comm; status
    ) => "PMPI_Irecv_c\0";
    MPI_Mrecv_c / PMPI_Mrecv_c(
        buf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, message: *mut c_void; status
    ) => "PMPI_Imrecv_c\0";
    MPI_Bcast_c / PMPI_Bcast_c(
        buffer: *mut c_void, count: MPI_Count, datatype: MPI_Datatype, root: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Ibcast_c\0";
    MPI_Reduce_c / PMPI_Reduce_c(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype,
        op: MPI_Op, root: c_int, comm: MPI_Comm,
    ) => "PMPI_Ireduce_c\0";
    MPI_Allreduce_c / PMPI_Allreduce_c(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype,
        op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Iallreduce_c\0";
    MPI_Gather_c / PMPI_Gather_c(
        sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Igather_c\0";
    MPI_Gatherv_c / PMPI_Gatherv_c(
        sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint,
        recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm,
    ) => "PMPI_Igatherv_c\0";
    MPI_Scatter_c / PMPI_Scatter_c(
        sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, root: c_int,
        comm: MPI_Comm,
    ) => "PMPI_Iscatter_c\0";
    MPI_Scatterv_c / PMPI_Scatterv_c(
        sendbuf: *const c_void, sendcounts: *const MPI_Count, displs: *const MPI_Aint,
        sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: MPI_Count,
        recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm,
    ) => "PMPI_Iscatterv_c\0";
    MPI_Allgather_c / PMPI_Allgather_c(
        sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Iallgather_c\0";
    MPI_Allgatherv_c / PMPI_Allgatherv_c(
        sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcounts: *const MPI_Count, displs: *const MPI_Aint,
        recvtype: MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Iallgatherv_c\0";
    MPI_Alltoall_c / PMPI_Alltoall_c(
        sendbuf: *const c_void, sendcount: MPI_Count, sendtype: MPI_Datatype,
        recvbuf: *mut c_void, recvcount: MPI_Count, recvtype: MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Ialltoall_c\0";
    MPI_Alltoallv_c / PMPI_Alltoallv_c(
        sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint,
        sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count,
        rdispls: *const MPI_Aint, recvtype: MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Ialltoallv_c\0";
    MPI_Alltoallw_c / PMPI_Alltoallw_c(
        sendbuf: *const c_void, sendcounts: *const MPI_Count, sdispls: *const MPI_Aint,
        sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const MPI_Count,
        rdispls: *const MPI_Aint, recvtypes: *const MPI_Datatype, comm: MPI_Comm,
    ) => "PMPI_Ialltoallw_c\0";
    MPI_Reduce_scatter_block_c / PMPI_Reduce_scatter_block_c(
        sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: MPI_Count,
        datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Ireduce_scatter_block_c\0";
    MPI_Reduce_scatter_c / PMPI_Reduce_scatter_c(
        sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const MPI_Count,
        datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Ireduce_scatter_c\0";
    MPI_Scan_c / PMPI_Scan_c(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype,
        op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Iscan_c\0";
    MPI_Exscan_c / PMPI_Exscan_c(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: MPI_Count, datatype: MPI_Datatype,
        op: MPI_Op, comm: MPI_Comm,
    ) => "PMPI_Iexscan_c\0";
}

/// `MPI_Sendrecv`: the send and the receive started, then both polled.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut c_void,
) -> c_int {
    type Isend = unsafe extern "C" fn(
        *const c_void,
        c_int,
        MPI_Datatype,
        c_int,
        c_int,
        MPI_Comm,
        *mut MPI_Request,
    ) -> c_int;
    type Irecv = unsafe extern "C" fn(
        *mut c_void,
        c_int,
        MPI_Datatype,
        c_int,
        c_int,
        MPI_Comm,
        *mut MPI_Request,
    ) -> c_int;
    if !keeps_onesided_progressing() {
        static HOST: HostFn = HostFn::new("PMPI_Sendrecv\0");
        // SAFETY: MPI_Sendrecv's prototype (mpi_proto.h).
        let f: unsafe extern "C" fn(
            *const c_void,
            c_int,
            MPI_Datatype,
            c_int,
            c_int,
            *mut c_void,
            c_int,
            MPI_Datatype,
            c_int,
            c_int,
            MPI_Comm,
            *mut c_void,
        ) -> c_int = unsafe { std::mem::transmute(HOST.get()) };
        // SAFETY: the caller's arguments, passed on unchanged.
        return unsafe {
            f(
                sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                recvtag, comm, status,
            )
        };
    }
    static ISEND: HostFn = HostFn::new("PMPI_Isend\0");
    static IRECV: HostFn = HostFn::new("PMPI_Irecv\0");
    // SAFETY: the prototypes of MPI_Isend and MPI_Irecv (mpi_proto.h).
    let isend = unsafe { std::mem::transmute::<*mut c_void, Isend>(ISEND.get()) };
    // SAFETY: as above.
    let irecv = unsafe { std::mem::transmute::<*mut c_void, Irecv>(IRECV.get()) };
    let (mut recv, mut send): (MPI_Request, MPI_Request) = (0, 0);
    // The send is started first: a send the host refuses (a rank outside the
    // communicator) then leaves nothing posted, as the host's own sendrecv, which checks
    // its arguments first, would. (A receive posted first would have to be cancelled, and
    // the peer's next message could match it before the cancel.) Both are nonblocking:
    // either order matches as a blocking sendrecv does.
    // SAFETY: the caller's arguments; our request.
    let rc = unsafe { isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &mut send) };
    if rc != abi::MPI_SUCCESS {
        return rc;
    }
    // SAFETY: as above.
    let rc = unsafe {
        irecv(
            recvbuf, recvcount, recvtype, source, recvtag, comm, &mut recv,
        )
    };
    if rc != abi::MPI_SUCCESS {
        // The receive was refused: the message of this failed call should not arrive.
        // Cancelled, then freed rather than waited for: a send the host cannot cancel
        // (matched, or a rendezvous it does not take back) would wait for a receive the
        // peer may never post.
        // SAFETY: the send started above and is not completed.
        unsafe {
            let _ = (crate::host::host().cancel)(&mut send);
            let _ = (crate::host::host().request_free)(&mut send);
        }
        return rc;
    }
    // SAFETY: the send started above.
    let rc = unsafe { complete(&mut send, status_ignore()) };
    if rc != abi::MPI_SUCCESS {
        // The send failed: the receive must not stay posted (it would take the peer's
        // next message). A cancelled receive completes, cancelled or matched.
        // SAFETY: the receive started above and is not completed.
        unsafe {
            let _ = (crate::host::host().cancel)(&mut recv);
            let _ = complete(&mut recv, status_ignore());
        }
        return rc;
    }
    // SAFETY: the receive started above; the caller's status goes to it.
    unsafe { complete(&mut recv, status) }
}

/// `MPI_Probe`: the host's `MPI_Iprobe` until a message matches.
#[no_mangle]
pub unsafe extern "C" fn MPI_Probe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut c_void,
) -> c_int {
    if !keeps_onesided_progressing() {
        static HOST: HostFn = HostFn::new("PMPI_Probe\0");
        // SAFETY: MPI_Probe's prototype (mpi_proto.h).
        let f: unsafe extern "C" fn(c_int, c_int, MPI_Comm, *mut c_void) -> c_int =
            unsafe { std::mem::transmute(HOST.get()) };
        // SAFETY: the caller's arguments, passed on unchanged.
        return unsafe { f(source, tag, comm, status) };
    }
    // SAFETY: the caller's arguments.
    poll_host(|flag| unsafe {
        (crate::host::host().iprobe)(source, tag, comm, flag, status.cast())
    })
}

/// `MPI_Mprobe`: the host's `MPI_Improbe` until a message matches (mpi4py receives every
/// pickled object this way, its reductions and gathers included).
#[no_mangle]
pub unsafe extern "C" fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    message: *mut c_void,
    status: *mut c_void,
) -> c_int {
    if !keeps_onesided_progressing() {
        static HOST: HostFn = HostFn::new("PMPI_Mprobe\0");
        // SAFETY: MPI_Mprobe's prototype (mpi_proto.h).
        let f: unsafe extern "C" fn(c_int, c_int, MPI_Comm, *mut c_void, *mut c_void) -> c_int =
            unsafe { std::mem::transmute(HOST.get()) };
        // SAFETY: the caller's arguments, passed on unchanged.
        return unsafe { f(source, tag, comm, message, status) };
    }
    static IMPROBE: HostFn = HostFn::new("PMPI_Improbe\0");
    // SAFETY: MPI_Improbe's prototype (mpi_proto.h).
    let improbe: unsafe extern "C" fn(
        c_int,
        c_int,
        MPI_Comm,
        *mut c_int,
        *mut c_void,
        *mut c_void,
    ) -> c_int = unsafe { std::mem::transmute(IMPROBE.get()) };
    // SAFETY: the caller's arguments; the host sets the message once its flag is set.
    poll_host(|flag| unsafe { improbe(source, tag, comm, flag, message, status) })
}

/// `MPI_Iprobe`: a test form a program may poll in a loop of its own (a target waiting for
/// a message while its peers' operations on its windows wait for it): one turn of
/// onesided's progress, then the host's.
#[no_mangle]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    status: *mut c_void,
) -> c_int {
    serve_once();
    static HOST: HostFn = HostFn::new("PMPI_Iprobe\0");
    // SAFETY: MPI_Iprobe's prototype (mpi_proto.h).
    let f: unsafe extern "C" fn(c_int, c_int, MPI_Comm, *mut c_int, *mut c_void) -> c_int =
        unsafe { std::mem::transmute(HOST.get()) };
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { f(source, tag, comm, flag, status) }
}

/// `MPI_Improbe`: as [`MPI_Iprobe`].
#[no_mangle]
pub unsafe extern "C" fn MPI_Improbe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    message: *mut c_void,
    status: *mut c_void,
) -> c_int {
    serve_once();
    static HOST: HostFn = HostFn::new("PMPI_Improbe\0");
    // SAFETY: MPI_Improbe's prototype (mpi_proto.h; the message handle written through a
    // pointer of the ABI's width).
    let f: unsafe extern "C" fn(
        c_int,
        c_int,
        MPI_Comm,
        *mut c_int,
        *mut c_void,
        *mut c_void,
    ) -> c_int = unsafe { std::mem::transmute(HOST.get()) };
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { f(source, tag, comm, flag, message, status) }
}

/// The `PMPI_` twin of a call written out by hand above: the same arguments, passed on.
macro_rules! pmpi_twin {
    ($( $pmpi:ident => $mpi:ident ( $($arg:ident : $ty:ty),* $(,)? ); )*) => {
        $(
            #[doc = concat!("`", stringify!($pmpi), "`, as `", stringify!($mpi), "`.")]
            #[no_mangle]
            pub unsafe extern "C" fn $pmpi($($arg: $ty),*) -> c_int {
                // SAFETY: as the MPI_ form.
                unsafe { $mpi($($arg),*) }
            }
        )*
    };
}

pmpi_twin! {
    PMPI_Sendrecv => MPI_Sendrecv(
        sendbuf: *const c_void, sendcount: c_int, sendtype: MPI_Datatype, dest: c_int,
        sendtag: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: MPI_Datatype,
        source: c_int, recvtag: c_int, comm: MPI_Comm, status: *mut c_void,
    );
    PMPI_Probe => MPI_Probe(source: c_int, tag: c_int, comm: MPI_Comm, status: *mut c_void);
    PMPI_Mprobe => MPI_Mprobe(
        source: c_int, tag: c_int, comm: MPI_Comm, message: *mut c_void, status: *mut c_void,
    );
    PMPI_Iprobe => MPI_Iprobe(
        source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int, status: *mut c_void,
    );
    PMPI_Improbe => MPI_Improbe(
        source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int, message: *mut c_void,
        status: *mut c_void,
    );
}

/// The names written out by hand above, both forms.
#[allow(dead_code)]
pub(crate) const INTERPOSED_BY_HAND: &[&str] = &[
    "MPI_Sendrecv",
    "PMPI_Sendrecv",
    "MPI_Probe",
    "PMPI_Probe",
    "MPI_Mprobe",
    "PMPI_Mprobe",
    "MPI_Iprobe",
    "PMPI_Iprobe",
    "MPI_Improbe",
    "PMPI_Improbe",
];
