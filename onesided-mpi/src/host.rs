//! The host MPI's functions that this library shadows with exports of its own. A call to
//! such a name from inside the library would land in our own export, so they are reached
//! through `dlsym(RTLD_NEXT, "PMPI_…")`: the next definition in the search order after
//! this library, the host's.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

use crate::abi::{MPI_Aint, MPI_Info};

/// `int (*)(int *, char ***)`.
type InitFn = unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char) -> c_int;
/// `int (*)(int *, char ***, int, int *)`.
type InitThreadFn =
    unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int;
/// `int (*)(void)`.
type FinalizeFn = unsafe extern "C" fn() -> c_int;
/// `int (*)(MPI_Aint, MPI_Info, void *)`.
type AllocMemFn = unsafe extern "C" fn(MPI_Aint, MPI_Info, *mut c_void) -> c_int;
/// `int (*)(void *)`.
type FreeMemFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `MPI_Win_errhandler_function *`.
pub(crate) type WinErrhandlerFn = unsafe extern "C" fn(*mut c_int, *mut c_int, ...);
/// `int (*)(MPI_Win_errhandler_function *, MPI_Errhandler *)`.
type CreateErrhandlerFn = unsafe extern "C" fn(Option<WinErrhandlerFn>, *mut c_int) -> c_int;
/// `MPI_Win_copy_attr_function *`.
pub(crate) type CopyAttrFn =
    unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Win_delete_attr_function *`.
pub(crate) type DeleteAttrFn =
    unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;
/// `int (*)(copy_fn, delete_fn, int *keyval, void *extra_state)`.
type CreateKeyvalFn = unsafe extern "C" fn(
    Option<CopyAttrFn>,
    Option<DeleteAttrFn>,
    *mut c_int,
    *mut c_void,
) -> c_int;
/// `int (*)(int *keyval)`.
type FreeKeyvalFn = unsafe extern "C" fn(*mut c_int) -> c_int;

/// `int (*)(MPI_Request, int *, MPI_Status *)`.
type RequestGetStatusFn = unsafe extern "C" fn(c_int, *mut c_int, *mut c_void) -> c_int;

/// The host functions, resolved at first use.
pub(crate) struct Host {
    pub request_get_status: RequestGetStatusFn,
    pub create_errhandler: CreateErrhandlerFn,
    pub create_keyval: CreateKeyvalFn,
    pub free_keyval: FreeKeyvalFn,
    pub init: InitFn,
    pub init_thread: InitThreadFn,
    pub finalize: FinalizeFn,
    pub alloc_mem: AllocMemFn,
    pub free_mem: FreeMemFn,
}

static HOST: OnceLock<Host> = OnceLock::new();

/// The next definition of `name` after this library.
fn next(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no preconditions.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if f.is_null() {
        eprintln!(
            "onesided-mpi: the host MPI has no {} (is the program linked against MPICH?)",
            name.to_string_lossy()
        );
        std::process::abort();
    }
    f
}

/// The host's functions.
pub(crate) fn host() -> &'static Host {
    HOST.get_or_init(|| {
        // SAFETY: each symbol is the host's function of the MPICH prototype named by the
        // field it is stored in (mpi_proto.h).
        unsafe {
            Host {
                request_get_status: std::mem::transmute::<*mut c_void, RequestGetStatusFn>(next(
                    c"PMPI_Request_get_status",
                )),
                create_errhandler: std::mem::transmute::<*mut c_void, CreateErrhandlerFn>(next(
                    c"PMPI_Win_create_errhandler",
                )),
                create_keyval: std::mem::transmute::<*mut c_void, CreateKeyvalFn>(next(
                    c"PMPI_Win_create_keyval",
                )),
                free_keyval: std::mem::transmute::<*mut c_void, FreeKeyvalFn>(next(
                    c"PMPI_Win_free_keyval",
                )),
                init: std::mem::transmute::<*mut c_void, InitFn>(next(c"PMPI_Init")),
                init_thread: std::mem::transmute::<*mut c_void, InitThreadFn>(next(
                    c"PMPI_Init_thread",
                )),
                finalize: std::mem::transmute::<*mut c_void, FinalizeFn>(next(c"PMPI_Finalize")),
                alloc_mem: std::mem::transmute::<*mut c_void, AllocMemFn>(next(c"PMPI_Alloc_mem")),
                free_mem: std::mem::transmute::<*mut c_void, FreeMemFn>(next(c"PMPI_Free_mem")),
            }
        }
    })
}

/// Refuses a program linked against another MPI than MPICH's ABI (Open MPI defines
/// `ompi_mpi_comm_world`; its handles are pointers, and every call here would misread
/// them): a clear message and exit status 1, before anything else runs.
pub(crate) fn refuse_other_mpis() {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
    let open_mpi =
        !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ompi_mpi_comm_world".as_ptr()) }.is_null();
    if open_mpi {
        eprintln!(
            "onesided-mpi: this program is linked against Open MPI; libonesided_mpi.so implements \
             the MPICH ABI (MPICH, Intel MPI, MVAPICH, Cray MPICH). Run it without LD_PRELOAD, \
             or rebuild it with mpicc.mpich."
        );
        std::process::exit(1);
    }
}
