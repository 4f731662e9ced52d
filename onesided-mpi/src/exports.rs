//! The one table of exported functions: each line names an MPI function, its `PMPI_` twin,
//! its C arguments (MPICH's `mpi_proto.h`) and the call in `calls` that implements it. The
//! macro emits both symbols and [`EXPORTED`], the list the tests compare with `nm -D`.
//!
//! Every entry point catches panics (unwinding out of `extern "C"` would abort without a
//! word) and turns a failure into an error code through the error handler that applies.

#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]

use std::os::raw::{c_char, c_int, c_void};

use crate::abi::{
    self, MPI_Aint, MPI_Comm, MPI_Count, MPI_Datatype, MPI_Errhandler, MPI_Group, MPI_Info, MPI_Op,
    MPI_Request, MPI_Win,
};
use crate::calls::{self, CallResult, Failure};
use crate::extensions;
use crate::host::{CopyAttrFn, DeleteAttrFn, WinErrhandlerFn};
use crate::plans;
use crate::requests;

/// The rest of an export: the hot path (`fast`) compiled once per ABI, the process's copy
/// picked with one branch, falling back to the general path; or the general path alone.
macro_rules! hot_or_general {
    (; $($arg:ident : $ty:ty),*) => {
        // SAFETY: the C caller's arguments.
        unsafe { general($($arg),*) }
    };
    ($fast:ident; $($arg:ident : $ty:ty),*) => {{
        /// The hot path under ABI `L`, else the general path. Inlined: the export holds one
        /// copy per ABI behind a single branch on the process's ABI (a call to an
        /// out-of-line copy cost more than the branches it saved, measured with
        /// `scripts/cabi-instr.sh`). Calls that may overlap (`MPI_THREAD_MULTIPLE`) take
        /// the out-of-line copy that counts its window reference (a call): this copy reads
        /// the window table directly.
        #[allow(clippy::too_many_arguments)]
        #[inline(always)]
        unsafe fn hot<L: crate::abi::Lookups>($($arg: $ty),*) -> c_int {
            if crate::state::concurrent_calls() {
                // SAFETY: the C caller's arguments.
                return unsafe { hot_shared::<L>($($arg),*) };
            }
            // SAFETY: the C caller's arguments, as MPI specifies them.
            if let Some(code) = unsafe { crate::fast::$fast::<L, false>($($arg),*) } {
                return code;
            }
            // SAFETY: as above.
            unsafe { general($($arg),*) }
        }
        /// [`hot`] for calls that may overlap.
        #[allow(clippy::too_many_arguments)]
        #[inline(never)]
        unsafe fn hot_shared<L: crate::abi::Lookups>($($arg: $ty),*) -> c_int {
            // SAFETY: the C caller's arguments, as MPI specifies them.
            if let Some(code) = unsafe { crate::fast::$fast::<L, true>($($arg),*) } {
                return code;
            }
            // SAFETY: as above.
            unsafe { general($($arg),*) }
        }
        // SAFETY: the C caller's arguments.
        crate::abi::lookups_of!(L => unsafe { hot::<L>($($arg),*) })
    }};
}

macro_rules! exports {
    ($( $mpi:ident / $pmpi:ident ( $($arg:ident : $ty:ty),* $(,)? ) => $imp:path
        $(, forward $rule:ident($key:ident))? $(, fast $fast:ident)? ; )*) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $mpi($($arg: $ty),*) -> c_int {
                /// The host's twin of this function (`forward`).
                #[allow(dead_code, clippy::too_many_arguments)]
                unsafe fn host_call($($arg: $ty),*) -> c_int {
                    static HOST: crate::host::HostFn =
                        crate::host::HostFn::new(concat!("P", stringify!($mpi), "\0"));
                    // SAFETY: the host's PMPI_ twin of this function has its prototype
                    // (mpi_proto.h), which this signature copies.
                    let f: unsafe extern "C" fn($($ty),*) -> c_int =
                        unsafe { std::mem::transmute(HOST.get()) };
                    // SAFETY: the caller's arguments, passed on unchanged.
                    unsafe { f($($arg),*) }
                }
                /// The general path: every argument checked in MPI's order. Out of line,
                /// so that a hot path in front of it keeps a small frame.
                #[allow(clippy::too_many_arguments)]
                #[inline(never)]
                unsafe fn general($($arg: $ty),*) -> c_int {
                    // Handles as this library compares them (an int ABI's upper half cleared).
                    $( let $arg = crate::abi::Arg::arg($arg); )*
                    // SAFETY: the C caller's argument, as MPI specifies it.
                    let to_host = $( unsafe { crate::forward::$rule($key) } || )? false;
                    if to_host {
                        // SAFETY: as above.
                        return unsafe { host_call($($arg),*) };
                    }
                    // SAFETY: the C caller's arguments, as MPI specifies them.
                    enter(stringify!($mpi), || unsafe { $imp($($arg),*) })
                }
                // The hot path first (`fast`): it masks the handles it reads itself.
                hot_or_general!($($fast)? ; $($arg : $ty),*)
            }

            #[no_mangle]
            pub unsafe extern "C" fn $pmpi($($arg: $ty),*) -> c_int {
                // SAFETY: as above.
                unsafe { $mpi($($arg),*) }
            }
        )*

        /// Every exported name, `MPI_` and `PMPI_` forms.
        #[allow(dead_code)]
        pub(crate) const EXPORTED: &[&str] = &[$(stringify!($mpi), stringify!($pmpi)),*];
    };
}

exports! {
    MPI_Init / PMPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) => calls::init;
    MPI_Init_thread / PMPI_Init_thread(
        argc: *mut c_int, argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int,
    ) => calls::init_thread;
    MPI_Finalize / PMPI_Finalize() => calls::finalize;

    MPI_Comm_split_type / PMPI_Comm_split_type(
        comm: MPI_Comm, split_type: c_int, key: c_int, info: MPI_Info, newcomm: *mut MPI_Comm,
    ) => calls::comm_split_type;

    MPI_Alloc_mem / PMPI_Alloc_mem(size: MPI_Aint, info: MPI_Info, baseptr: *mut c_void)
        => calls::alloc_mem;
    MPI_Free_mem / PMPI_Free_mem(base: *mut c_void) => calls::free_mem;

    MPI_Win_allocate / PMPI_Win_allocate(
        size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void,
        win: *mut MPI_Win,
    ) => calls::win_allocate, forward comm(comm);
    MPI_Win_allocate_shared / PMPI_Win_allocate_shared(
        size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void,
        win: *mut MPI_Win,
    ) => calls::win_allocate_shared, forward comm(comm);
    MPI_Win_create / PMPI_Win_create(
        base: *mut c_void, size: MPI_Aint, disp_unit: c_int, info: MPI_Info, comm: MPI_Comm,
        win: *mut MPI_Win,
    ) => calls::win_create, forward comm(comm);
    MPI_Win_create_dynamic / PMPI_Win_create_dynamic(info: MPI_Info, comm: MPI_Comm, win: *mut MPI_Win)
        => calls::win_create_dynamic, forward comm(comm);
    MPI_Win_free / PMPI_Win_free(win: *mut MPI_Win) => calls::win_free, forward win_ptr(win);
    MPI_Win_attach / PMPI_Win_attach(win: MPI_Win, base: *mut c_void, size: MPI_Aint)
        => calls::win_attach, forward win(win);
    MPI_Win_detach / PMPI_Win_detach(win: MPI_Win, base: *const c_void) => calls::win_detach, forward win(win);
    MPI_Win_shared_query / PMPI_Win_shared_query(
        win: MPI_Win, rank: c_int, size: *mut MPI_Aint, disp_unit: *mut c_int, baseptr: *mut c_void,
    ) => calls::win_shared_query, forward win(win);

    MPI_Win_fence / PMPI_Win_fence(assert: c_int, win: MPI_Win) => calls::win_fence, forward win(win);
    MPI_Win_lock / PMPI_Win_lock(lock_type: c_int, rank: c_int, assert: c_int, win: MPI_Win)
        => calls::win_lock, forward win(win);
    MPI_Win_unlock / PMPI_Win_unlock(rank: c_int, win: MPI_Win) => calls::win_unlock, forward win(win);
    MPI_Win_lock_all / PMPI_Win_lock_all(assert: c_int, win: MPI_Win) => calls::win_lock_all, forward win(win);
    MPI_Win_unlock_all / PMPI_Win_unlock_all(win: MPI_Win) => calls::win_unlock_all, forward win(win);
    MPI_Win_flush / PMPI_Win_flush(rank: c_int, win: MPI_Win) => calls::win_flush, forward win(win), fast flush;
    MPI_Win_flush_all / PMPI_Win_flush_all(win: MPI_Win) => calls::win_flush_all, forward win(win);
    MPI_Win_flush_local / PMPI_Win_flush_local(rank: c_int, win: MPI_Win) => calls::win_flush_local, forward win(win), fast flush_local;
    MPI_Win_flush_local_all / PMPI_Win_flush_local_all(win: MPI_Win) => calls::win_flush_local_all, forward win(win);
    MPI_Win_sync / PMPI_Win_sync(win: MPI_Win) => calls::win_sync, forward win(win);
    MPI_Win_post / PMPI_Win_post(group: MPI_Group, assert: c_int, win: MPI_Win) => calls::win_post, forward win(win);
    MPI_Win_start / PMPI_Win_start(group: MPI_Group, assert: c_int, win: MPI_Win) => calls::win_start, forward win(win);
    MPI_Win_complete / PMPI_Win_complete(win: MPI_Win) => calls::win_complete, forward win(win);
    MPI_Win_wait / PMPI_Win_wait(win: MPI_Win) => calls::win_wait, forward win(win);
    MPI_Win_test / PMPI_Win_test(win: MPI_Win, flag: *mut c_int) => calls::win_test, forward win(win);

    MPI_Put / PMPI_Put(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, win: MPI_Win,
    ) => calls::put, forward win(win), fast put;
    MPI_Get / PMPI_Get(
        origin_addr: *mut c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, win: MPI_Win,
    ) => calls::get, forward win(win), fast get;
    MPI_Accumulate / PMPI_Accumulate(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win,
    ) => calls::accumulate, forward win(win), fast accumulate;
    MPI_Get_accumulate / PMPI_Get_accumulate(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        result_addr: *mut c_void, result_count: c_int, result_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win,
    ) => calls::get_accumulate, forward win(win);
    MPI_Fetch_and_op / PMPI_Fetch_and_op(
        origin_addr: *const c_void, result_addr: *mut c_void, datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, op: MPI_Op, win: MPI_Win,
    ) => calls::fetch_and_op, forward win(win), fast fetch_and_op;
    MPI_Compare_and_swap / PMPI_Compare_and_swap(
        origin_addr: *const c_void, compare_addr: *const c_void, result_addr: *mut c_void,
        datatype: MPI_Datatype, target_rank: c_int, target_disp: MPI_Aint, win: MPI_Win,
    ) => calls::compare_and_swap, forward win(win), fast compare_and_swap;

    MPI_Win_set_errhandler / PMPI_Win_set_errhandler(win: MPI_Win, errhandler: MPI_Errhandler)
        => calls::win_set_errhandler, forward win(win);
    MPI_Win_get_errhandler / PMPI_Win_get_errhandler(win: MPI_Win, errhandler: *mut MPI_Errhandler)
        => calls::win_get_errhandler, forward win(win);
    MPI_Win_allocate_c / PMPI_Win_allocate_c(
        size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void,
        win: *mut MPI_Win,
    ) => calls::win_allocate, forward comm(comm);
    MPI_Win_allocate_shared_c / PMPI_Win_allocate_shared_c(
        size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm, baseptr: *mut c_void,
        win: *mut MPI_Win,
    ) => calls::win_allocate_shared, forward comm(comm);
    MPI_Win_create_c / PMPI_Win_create_c(
        base: *mut c_void, size: MPI_Aint, disp_unit: MPI_Aint, info: MPI_Info, comm: MPI_Comm,
        win: *mut MPI_Win,
    ) => calls::win_create, forward comm(comm);
    MPI_Win_shared_query_c / PMPI_Win_shared_query_c(
        win: MPI_Win, rank: c_int, size: *mut MPI_Aint, disp_unit: *mut MPI_Aint,
        baseptr: *mut c_void,
    ) => calls::win_shared_query, forward win(win);
    MPI_Put_c / PMPI_Put_c(
        origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count,
        target_datatype: MPI_Datatype, win: MPI_Win,
    ) => calls::put, forward win(win);
    MPI_Get_c / PMPI_Get_c(
        origin_addr: *mut c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count,
        target_datatype: MPI_Datatype, win: MPI_Win,
    ) => calls::get, forward win(win);
    MPI_Accumulate_c / PMPI_Accumulate_c(
        origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win,
    ) => calls::accumulate, forward win(win);
    MPI_Get_accumulate_c / PMPI_Get_accumulate_c(
        origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype,
        result_addr: *mut c_void, result_count: MPI_Count, result_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win,
    ) => calls::get_accumulate, forward win(win);

    MPI_Win_set_attr / PMPI_Win_set_attr(win: MPI_Win, win_keyval: c_int, attribute_val: *mut c_void)
        => calls::win_set_attr, forward win(win);
    MPI_Win_delete_attr / PMPI_Win_delete_attr(win: MPI_Win, win_keyval: c_int)
        => calls::win_delete_attr, forward win(win);
    MPI_Win_create_keyval / PMPI_Win_create_keyval(
        win_copy_attr_fn: Option<CopyAttrFn>, win_delete_attr_fn: Option<DeleteAttrFn>,
        win_keyval: *mut c_int, extra_state: *mut c_void,
    ) => calls::win_create_keyval;
    MPI_Win_free_keyval / PMPI_Win_free_keyval(win_keyval: *mut c_int) => calls::win_free_keyval;
    MPI_Win_create_errhandler / PMPI_Win_create_errhandler(
        win_errhandler_fn: Option<WinErrhandlerFn>, errhandler: *mut MPI_Errhandler,
    ) => calls::win_create_errhandler;
    MPI_Win_call_errhandler / PMPI_Win_call_errhandler(win: MPI_Win, errorcode: c_int)
        => calls::win_call_errhandler, forward win(win);
    MPI_Errhandler_free / PMPI_Errhandler_free(errhandler: *mut MPI_Errhandler)
        => calls::errhandler_free;
    MPI_Win_get_attr / PMPI_Win_get_attr(
        win: MPI_Win, win_keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int,
    ) => calls::win_get_attr, forward win(win);
    MPI_Win_get_group / PMPI_Win_get_group(win: MPI_Win, group: *mut MPI_Group)
        => calls::win_get_group, forward win(win);
    MPI_Win_get_info / PMPI_Win_get_info(win: MPI_Win, info_used: *mut MPI_Info)
        => calls::win_get_info, forward win(win);
    MPI_Win_set_info / PMPI_Win_set_info(win: MPI_Win, info: MPI_Info) => calls::win_set_info, forward win(win);
    MPI_Rput / PMPI_Rput(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request,
    ) => calls::rput, forward win(win);
    MPI_Rget / PMPI_Rget(
        origin_addr: *mut c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request,
    ) => calls::rget, forward win(win);
    MPI_Raccumulate / PMPI_Raccumulate(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request,
    ) => calls::raccumulate, forward win(win);
    MPI_Rget_accumulate / PMPI_Rget_accumulate(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        result_addr: *mut c_void, result_count: c_int, result_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request,
    ) => calls::rget_accumulate, forward win(win);
    MPI_Rput_c / PMPI_Rput_c(
        origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count,
        target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request,
    ) => calls::rput, forward win(win);
    MPI_Rget_c / PMPI_Rget_c(
        origin_addr: *mut c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count,
        target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request,
    ) => calls::rget, forward win(win);
    MPI_Raccumulate_c / PMPI_Raccumulate_c(
        origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request,
    ) => calls::raccumulate, forward win(win);
    MPI_Rget_accumulate_c / PMPI_Rget_accumulate_c(
        origin_addr: *const c_void, origin_count: MPI_Count, origin_datatype: MPI_Datatype,
        result_addr: *mut c_void, result_count: MPI_Count, result_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: MPI_Count,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request,
    ) => calls::rget_accumulate, forward win(win);

    MPI_Request_get_status / PMPI_Request_get_status(
        request: MPI_Request, flag: *mut c_int, status: *mut c_void,
    ) => calls::request_get_status;
    // Completion of requests: the host's own, unless it cannot poll our requests (Open MPI
    // has no generalized-request classes), in which case ours are driven first.
    MPI_Wait / PMPI_Wait(request: *mut MPI_Request, status: *mut c_void)
        => requests::wait_one, forward polls_requests(request);
    MPI_Test / PMPI_Test(request: *mut MPI_Request, flag: *mut c_int, status: *mut c_void)
        => requests::test_one, forward polls_requests(request);
    MPI_Waitall / PMPI_Waitall(count: c_int, requests: *mut MPI_Request, statuses: *mut c_void)
        => requests::waitall, forward polls_requests(requests);
    MPI_Testall / PMPI_Testall(
        count: c_int, requests: *mut MPI_Request, flag: *mut c_int, statuses: *mut c_void,
    ) => requests::testall, forward polls_requests(requests);
    MPI_Waitany / PMPI_Waitany(
        count: c_int, requests: *mut MPI_Request, index: *mut c_int, status: *mut c_void,
    ) => requests::waitany, forward polls_requests(requests);
    MPI_Testany / PMPI_Testany(
        count: c_int, requests: *mut MPI_Request, index: *mut c_int, flag: *mut c_int,
        status: *mut c_void,
    ) => requests::testany, forward polls_requests(requests);
    MPI_Waitsome / PMPI_Waitsome(
        incount: c_int, requests: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int,
        statuses: *mut c_void,
    ) => requests::waitsome, forward polls_requests(requests);
    MPI_Testsome / PMPI_Testsome(
        incount: c_int, requests: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int,
        statuses: *mut c_void,
    ) => requests::testsome, forward polls_requests(requests);

    // Extensions of the seeds (mpi_onesided.h).
    MPIX_Win_ifence / PMPIX_Win_ifence(assert: c_int, win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_ifence;
    MPIX_Win_ilock / PMPIX_Win_ilock(
        lock_type: c_int, rank: c_int, assert: c_int, win: MPI_Win, request: *mut MPI_Request,
    ) => extensions::win_ilock;
    MPIX_Win_iunlock / PMPIX_Win_iunlock(rank: c_int, win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_iunlock;
    MPIX_Win_ilock_all / PMPIX_Win_ilock_all(assert: c_int, win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_ilock_all;
    MPIX_Win_iunlock_all / PMPIX_Win_iunlock_all(win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_iunlock_all;
    MPIX_Win_iflush / PMPIX_Win_iflush(rank: c_int, win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_iflush;
    MPIX_Win_iflush_all / PMPIX_Win_iflush_all(win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_iflush_all;
    MPIX_Win_iflush_local / PMPIX_Win_iflush_local(rank: c_int, win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_iflush_local;
    MPIX_Win_iflush_local_all / PMPIX_Win_iflush_local_all(win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_iflush_local_all;
    MPIX_Win_ipost / PMPIX_Win_ipost(
        group: MPI_Group, assert: c_int, win: MPI_Win, request: *mut MPI_Request,
    ) => extensions::win_ipost;
    MPIX_Win_istart / PMPIX_Win_istart(
        group: MPI_Group, assert: c_int, win: MPI_Win, request: *mut MPI_Request,
    ) => extensions::win_istart;
    MPIX_Win_icomplete / PMPIX_Win_icomplete(win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_icomplete;
    MPIX_Win_iwait / PMPIX_Win_iwait(win: MPI_Win, request: *mut MPI_Request)
        => extensions::win_iwait;
    MPIX_Win_dup_with_info / PMPIX_Win_dup_with_info(win: MPI_Win, info: MPI_Info, newwin: *mut MPI_Win)
        => extensions::win_dup_with_info;
    MPIX_Rrput / PMPIX_Rrput(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, win: MPI_Win, request: *mut MPI_Request,
    ) => extensions::rrput;
    MPIX_Rraccumulate / PMPIX_Rraccumulate(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, op: MPI_Op, win: MPI_Win, request: *mut MPI_Request,
    ) => extensions::rraccumulate;

    MPIX_Memhandle_create / PMPIX_Memhandle_create(
        base: *mut c_void, size: MPI_Aint, info: MPI_Info, parentwin: MPI_Win,
        memhandle: *mut c_void, memhandle_size: *mut c_int,
    ) => extensions::memhandle_create;
    MPIX_Win_from_memhandle / PMPIX_Win_from_memhandle(
        memhandle: *const c_void, size: MPI_Aint, disp_unit: c_int, info: MPI_Info,
        target: c_int, parentwin: MPI_Win, newwin: *mut MPI_Win,
    ) => extensions::win_from_memhandle;
    MPIX_Memhandle_release / PMPIX_Memhandle_release(memhandle: *mut c_void, parentwin: MPI_Win)
        => extensions::memhandle_release;
    MPIX_Alltoallv_init / PMPIX_Alltoallv_init(
        sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int,
        sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: *const c_int,
        rdispls: *const c_int, recvtype: MPI_Datatype, comm: MPI_Comm, info: MPI_Info,
        plan: *mut c_int,
    ) => plans::alltoallv_init;
    MPIX_Alltoallv_start / PMPIX_Alltoallv_start(plan: c_int, request: *mut MPI_Request)
        => plans::alltoallv_start;
    MPIX_Alltoallv_plan_free / PMPIX_Alltoallv_plan_free(plan: *mut c_int)
        => plans::alltoallv_plan_free;
    MPIX_Win_set_num_notify / PMPIX_Win_set_num_notify(win: MPI_Win, num: c_int)
        => extensions::win_set_num_notify;
    MPIX_Win_get_num_notify / PMPIX_Win_get_num_notify(win: MPI_Win, num: *mut c_int)
        => extensions::win_get_num_notify;
    MPIX_Put_notify / PMPIX_Put_notify(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, notification_idx: c_int, win: MPI_Win,
    ) => extensions::put_notify;
    MPIX_Get_notify / PMPIX_Get_notify(
        origin_addr: *mut c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, notification_idx: c_int, win: MPI_Win,
    ) => extensions::get_notify;
    MPIX_Accumulate_notify / PMPIX_Accumulate_notify(
        origin_addr: *const c_void, origin_count: c_int, origin_datatype: MPI_Datatype,
        target_rank: c_int, target_disp: MPI_Aint, target_count: c_int,
        target_datatype: MPI_Datatype, op: MPI_Op, notification_idx: c_int, win: MPI_Win,
    ) => extensions::accumulate_notify;
    MPIX_Win_get_notify_value / PMPIX_Win_get_notify_value(
        win: MPI_Win, notification_idx: c_int, value: *mut MPI_Count,
    ) => extensions::win_get_notify_value;
    MPIX_Win_reset_notify_value / PMPIX_Win_reset_notify_value(
        win: MPI_Win, notification_idx: c_int, value: *mut MPI_Count,
    ) => extensions::win_reset_notify_value;
    MPIX_Win_wait_notify / PMPIX_Win_wait_notify(
        win: MPI_Win, notification_idx: c_int, value: MPI_Count, request: *mut MPI_Request,
    ) => extensions::win_wait_notify;

    MPI_Win_set_name / PMPI_Win_set_name(win: MPI_Win, win_name: *const c_char)
        => calls::win_set_name, forward win(win);
    MPI_Win_get_name / PMPI_Win_get_name(win: MPI_Win, win_name: *mut c_char, resultlen: *mut c_int)
        => calls::win_get_name, forward win_or_null(win);
}

/// The Fortran integer of one of our windows under a pointer ABI (Open MPI's Fortran handles
/// are small table indices; the standard ABI's its own): far above any of them.
const FORTRAN_WINDOWS: c_int = 0x4000_0000;

/// `MPI_Win_c2f`: the Fortran handle of `win`. Under the MPICH ABI the `int` itself; under a
/// pointer ABI ours get [`FORTRAN_WINDOWS`] + their slot, the host's its own answer (a
/// Fortran binding makes every window it returns a Fortran handle through this function).
#[no_mangle]
pub unsafe extern "C" fn MPI_Win_c2f(win: MPI_Win) -> c_int {
    let win = abi::Arg::arg(win);
    if abi::abi().handle_bytes == 4 {
        return win as u32 as c_int;
    }
    match abi::window_index(win) {
        Some(i) => FORTRAN_WINDOWS + i as c_int,
        None => {
            static HOST: crate::host::HostFn = crate::host::HostFn::new("PMPI_Win_c2f\0");
            // SAFETY: the host's PMPI_Win_c2f, of this prototype.
            let f: unsafe extern "C" fn(MPI_Win) -> c_int =
                unsafe { std::mem::transmute(HOST.get()) };
            // SAFETY: the caller's handle, passed on.
            unsafe { f(win) }
        }
    }
}

/// `PMPI_Win_c2f`.
#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_c2f(win: MPI_Win) -> c_int {
    // SAFETY: as above.
    unsafe { MPI_Win_c2f(win) }
}

/// `MPI_Win_f2c`: the window of Fortran handle `f` (see [`MPI_Win_c2f`]).
#[no_mangle]
pub unsafe extern "C" fn MPI_Win_f2c(f: c_int) -> MPI_Win {
    if abi::abi().handle_bytes == 4 {
        return f as u32 as MPI_Win;
    }
    if f >= FORTRAN_WINDOWS {
        return abi::window_handle((f - FORTRAN_WINDOWS) as usize);
    }
    static HOST: crate::host::HostFn = crate::host::HostFn::new("PMPI_Win_f2c\0");
    // SAFETY: the host's PMPI_Win_f2c, of this prototype.
    let g: unsafe extern "C" fn(c_int) -> MPI_Win = unsafe { std::mem::transmute(HOST.get()) };
    // SAFETY: the caller's Fortran handle, passed on.
    unsafe { g(f) }
}

/// `PMPI_Win_f2c`.
#[no_mangle]
pub unsafe extern "C" fn PMPI_Win_f2c(f: c_int) -> MPI_Win {
    // SAFETY: as above.
    unsafe { MPI_Win_f2c(f) }
}

/// Open MPI's Fortran bindings of `MPI_Win_get_attr` and `MPI_Win_set_attr` (every name
/// Open MPI gives them: `mpi_win_get_attr_`, `MPI_WIN_GET_ATTR`, the `f08` entry point
/// `ompi_win_get_attr_f` …) read the window object's fields instead of calling the C
/// function: on one of our windows they would crash. This library defines those names; a
/// window that is not ours, or a process of another MPI (MPICH defines some of the same
/// names, with the same arguments), goes to the next definition of the name called.
macro_rules! fortran_attr_bindings {
    (get: $($get:ident)*; set: $($set:ident)*;) => {
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $get(
                win: *mut c_int,
                keyval: *mut c_int,
                value: *mut MPI_Aint,
                flag: *mut c_int,
                ierr: *mut c_int,
            ) {
                type F = unsafe extern "C" fn(*mut c_int, *mut c_int, *mut MPI_Aint, *mut c_int, *mut c_int);
                // SAFETY: the Fortran caller's arguments (MPI's contract).
                let ours = unsafe { fortran_window(win) };
                let Some(w) = ours else {
                    static NEXT: NextFn = NextFn::new(concat!(stringify!($get), "\0"));
                    // SAFETY: the next definition of this name has this prototype.
                    let f: F = unsafe { std::mem::transmute(NEXT.get()) };
                    // SAFETY: the caller's arguments, passed on.
                    return unsafe { f(win, keyval, value, flag, ierr) };
                };
                let mut found: c_int = 0;
                let rc = enter("MPI_Win_get_attr", || {
                    // SAFETY: the caller's key and slot (an MPI_Aint: Fortran's
                    // INTEGER(KIND=MPI_ADDRESS_KIND)).
                    unsafe {
                        calls::win_get_attr_as(w, *keyval, value.cast(), &mut found, ATTR_AINT)
                    }
                });
                // SAFETY: the caller's flag (a Fortran LOGICAL: 1 is .true.) and error.
                unsafe {
                    *flag = c_int::from(found != 0);
                    if !ierr.is_null() {
                        *ierr = rc;
                    }
                }
            }
        )*
        $(
            #[no_mangle]
            pub unsafe extern "C" fn $set(
                win: *mut c_int,
                keyval: *mut c_int,
                value: *mut MPI_Aint,
                ierr: *mut c_int,
            ) {
                type F = unsafe extern "C" fn(*mut c_int, *mut c_int, *mut MPI_Aint, *mut c_int);
                // SAFETY: the Fortran caller's arguments (MPI's contract).
                let ours = unsafe { fortran_window(win) };
                let Some(w) = ours else {
                    static NEXT: NextFn = NextFn::new(concat!(stringify!($set), "\0"));
                    // SAFETY: the next definition of this name has this prototype.
                    let f: F = unsafe { std::mem::transmute(NEXT.get()) };
                    // SAFETY: the caller's arguments, passed on.
                    return unsafe { f(win, keyval, value, ierr) };
                };
                let rc = enter("MPI_Win_set_attr", || {
                    // SAFETY: the caller's key and value (the value travels as a pointer).
                    unsafe { calls::win_set_attr(w, *keyval, *value as usize as *mut c_void) }
                });
                if !ierr.is_null() {
                    // SAFETY: the caller's error slot.
                    unsafe { *ierr = rc };
                }
            }
        )*
    };
}

fortran_attr_bindings! {
    get: ompi_win_get_attr_f MPI_WIN_GET_ATTR mpi_win_get_attr mpi_win_get_attr_
        mpi_win_get_attr__ MPI_Win_get_attr_f MPI_Win_get_attr_f08 PMPI_WIN_GET_ATTR
        pmpi_win_get_attr pmpi_win_get_attr_ pmpi_win_get_attr__ PMPI_Win_get_attr_f
        PMPI_Win_get_attr_f08;
    set: ompi_win_set_attr_f MPI_WIN_SET_ATTR mpi_win_set_attr mpi_win_set_attr_
        mpi_win_set_attr__ MPI_Win_set_attr_f MPI_Win_set_attr_f08 PMPI_WIN_SET_ATTR
        pmpi_win_set_attr pmpi_win_set_attr_ pmpi_win_set_attr__ PMPI_Win_set_attr_f
        PMPI_Win_set_attr_f08;
}

/// `MPIR_ATTR_AINT`: a Fortran attribute of kind `MPI_ADDRESS_KIND` (values, not pointers).
const ATTR_AINT: c_int = 1;

/// The window of a Fortran binding's handle, when it is one of ours in a process of Open
/// MPI (the only MPI whose bindings need this library's).
///
/// # Safety
/// `win` points to the caller's Fortran handle.
unsafe fn fortran_window(win: *const c_int) -> Option<MPI_Win> {
    if win.is_null() || abi::abi().name != "Open MPI" {
        return None;
    }
    // SAFETY: the caller's Fortran handle.
    let w = unsafe { MPI_Win_f2c(*win) };
    abi::is_ours(w).then_some(w)
}

/// The next definition of a name after this library (`dlsym(RTLD_NEXT)`), looked up once.
struct NextFn {
    name: &'static str,
    ptr: std::sync::atomic::AtomicPtr<c_void>,
}

impl NextFn {
    const fn new(name: &'static str) -> NextFn {
        NextFn {
            name,
            ptr: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    fn get(&self) -> *mut c_void {
        use std::sync::atomic::Ordering;
        // Relaxed: the address is the same whichever thread looks it up first.
        let p = self.ptr.load(Ordering::Relaxed);
        if !p.is_null() {
            return p;
        }
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no preconditions.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr().cast()) };
        if p.is_null() {
            eprintln!(
                "onesided-mpi: no other definition of {}",
                self.name.trim_end_matches('\0')
            );
            std::process::abort();
        }
        // Relaxed: see above.
        self.ptr.store(p, Ordering::Relaxed);
        p
    }
}

/// `MPII_Win_get_attr`: MPICH's Fortran bindings get window attributes through it (with
/// an integer kind: values, not pointers).
#[no_mangle]
pub unsafe extern "C" fn MPII_Win_get_attr(
    win: MPI_Win,
    win_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
    attr_type: c_int,
) -> c_int {
    let win = abi::Arg::arg(win);
    if !abi::is_ours(win) {
        static HOST: crate::host::HostFn = crate::host::HostFn::new("MPII_Win_get_attr\0");
        type F = unsafe extern "C" fn(MPI_Win, c_int, *mut c_void, *mut c_int, c_int) -> c_int;
        // SAFETY: MPICH's own MPII_Win_get_attr, of this prototype.
        let f: F = unsafe { std::mem::transmute(HOST.get()) };
        // SAFETY: the Fortran binding's arguments, passed on.
        return unsafe { f(win, win_keyval, attribute_val, flag, attr_type) };
    }
    enter("MPI_Win_get_attr", || {
        // SAFETY: the Fortran binding's arguments.
        unsafe { calls::win_get_attr_as(win, win_keyval, attribute_val, flag, attr_type) }
    })
}

/// `MPII_Win_set_attr`: MPICH's Fortran bindings set window attributes through it (the
/// value travels in the pointer).
#[no_mangle]
pub unsafe extern "C" fn MPII_Win_set_attr(
    win: MPI_Win,
    win_keyval: c_int,
    attribute_val: *mut c_void,
    attr_type: c_int,
) -> c_int {
    let win = abi::Arg::arg(win);
    if !abi::is_ours(win) {
        static HOST: crate::host::HostFn = crate::host::HostFn::new("MPII_Win_set_attr\0");
        type F = unsafe extern "C" fn(MPI_Win, c_int, *mut c_void, c_int) -> c_int;
        // SAFETY: MPICH's own MPII_Win_set_attr, of this prototype.
        let f: F = unsafe { std::mem::transmute(HOST.get()) };
        // SAFETY: the Fortran binding's arguments, passed on.
        return unsafe { f(win, win_keyval, attribute_val, attr_type) };
    }
    // SAFETY: the Fortran binding's arguments.
    enter("MPI_Win_set_attr", || unsafe {
        calls::win_set_attr(win, win_keyval, attribute_val)
    })
}

/// Runs one call: its result as an MPI error code, through the handler that applies.
fn enter(name: &'static str, call: impl FnOnce() -> CallResult) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
        Ok(Ok(())) => abi::MPI_SUCCESS,
        Ok(Err(failure)) => fail(name, failure),
        Err(_) => {
            eprintln!("onesided-mpi: {name}: internal error (a panic); aborting the job");
            abort(abi::abi().comm_world, abi::abi().err.other)
        }
    }
}

/// The error code of `failure`, after its error handler ran (a fatal one does not return).
pub(crate) fn fail(name: &'static str, failure: Failure) -> c_int {
    match failure {
        // Counted references from here: a user handler may free the window.
        Failure::Window(entry, err) => {
            let entry = entry.shared();
            let code = abi::error_code(err.mpi_class());
            user_or(&entry, code)
                .unwrap_or_else(|| handle(name, entry.errhandler(), entry.comm, code, &err))
        }
        Failure::WindowCode(entry, code, text) => {
            let entry = entry.shared();
            user_or(&entry, code)
                .unwrap_or_else(|| handle(name, entry.errhandler(), entry.comm, code, &text))
        }
        Failure::Raised(entry, code) => {
            let entry = entry.shared();
            if user_or(&entry, code).is_none() {
                handle(
                    name,
                    entry.errhandler(),
                    entry.comm,
                    code,
                    &format!("error code {code}"),
                );
            }
            abi::MPI_SUCCESS
        }
        Failure::Host(code) => code,
        Failure::Handler {
            errhandler,
            comm,
            err,
        } => handle(
            name,
            errhandler,
            comm,
            abi::error_code(err.mpi_class()),
            &err,
        ),
        Failure::Comm(comm, code, text) => {
            // An error without a valid communicator goes to MPI_COMM_WORLD's handler (as
            // MPICH does with MPI_COMM_NULL).
            let mut eh = 0;
            // SAFETY: a plain query of the program's communicator (not a name we export).
            let comm = if comm == abi::abi().comm_null
                || unsafe { (crate::host::host().comm_get_errhandler)(comm, &mut eh) }
                    != abi::MPI_SUCCESS
            {
                abi::abi().comm_world
            } else {
                comm
            };
            // SAFETY: plain queries of the program's communicator (not names we export).
            let fatal = unsafe { (crate::host::host().comm_get_errhandler)(comm, &mut eh) }
                != abi::MPI_SUCCESS
                || eh == abi::abi().errors_are_fatal;
            if fatal {
                eprintln!("onesided-mpi: {name}: {text}");
            }
            // SAFETY: as above; the host runs the communicator's handler (it aborts for
            // MPI_abi::abi().errors_are_fatal).
            unsafe { (crate::host::host().comm_call_errhandler)(comm, code) };
            code
        }
    }
}

/// Runs the window's user error handler for `code`, if it has one: the code the call
/// returns then.
fn user_or(entry: &crate::state::Entry, code: c_int) -> Option<c_int> {
    let f = crate::state::errhandler_fn(entry.errhandler())?;
    let (mut win, mut c) = (entry.handle(), code);
    // SAFETY: the program's handler, with the window and the code, as MPI specifies.
    unsafe { f(&mut win, &mut c) };
    Some(code)
}

/// Runs window error handler `errhandler` for error `code` (`what` says what failed).
fn handle(
    name: &'static str,
    errhandler: abi::MPI_Errhandler,
    comm: MPI_Comm,
    code: c_int,
    what: &dyn std::fmt::Display,
) -> c_int {
    if errhandler == abi::abi().errors_return {
        return code;
    }
    // MPI_ERRORS_ARE_FATAL, and (until user window handlers exist here) any other: the
    // program learns what failed before the job ends.
    eprintln!("onesided-mpi: {name}: {what}");
    abort(comm, code)
}

fn abort(comm: MPI_Comm, code: c_int) -> c_int {
    // SAFETY: MPI_Abort is not a name we export: the host's.
    unsafe { (crate::host::host().abort)(comm, code) };
    code
}
