//! The host MPI: the library that defines the program's MPI, found in the process at run
//! time, and every function of it this library calls. Nothing links against an MPI (the
//! library has no `DT_NEEDED` on one), so one build serves every MPI of the ABIs `abi`
//! knows: Debian's `libmpich.so.12`, PyPI's MPICH 5 `libmpi.so.12` and `libmpi_abi.so.1`,
//! Open MPI's `libmpi.so.40`, Intel MPI, Cray MPICH.
//!
//! **Finding it.** The host is the object that defines `PMPI_Init`, other than this one:
//! `dlsym(RTLD_NEXT, …)` finds it when the program is linked against it (it is in the global
//! scope, after the preload). A Python extension module (mpi4py) loads its MPI with
//! `RTLD_LOCAL`, out of `RTLD_NEXT`'s reach: then every loaded object is asked in turn
//! (`dl_iterate_phdr`, `dlopen(RTLD_NOLOAD)` of its own name). Every function is then looked
//! up in that object with `dlsym(handle, …)`, including the names this library exports
//! itself (`PMPI_Win_create` and the like): a call from here never lands in our own exports.
//! Calls go to `PMPI_` names, so a profiling tool sees the program's calls, not ours.
//!
//! **Which MPI.** [`choose_abi`] picks the process's ABI at `MPI_Init` from the library
//! found, and refuses a host of no ABI served, naming it ([`library_version`]).

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use crate::abi::{
    Handle, MPI_Aint, MPI_Comm, MPI_Datatype, MPI_Errhandler, MPI_Group, MPI_Info, MPI_Request,
    MPI_Status,
};

/// `MPI_Win_errhandler_function *`.
pub(crate) type WinErrhandlerFn = unsafe extern "C" fn(*mut Handle, *mut c_int, ...);
/// `MPI_Win_copy_attr_function *`.
pub(crate) type CopyAttrFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Win_delete_attr_function *`.
pub(crate) type DeleteAttrFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;
/// `MPI_Type_copy_attr_function *` (the same prototype as the window's).
pub(crate) type TypeCopyAttrFn = CopyAttrFn;
/// `MPI_Type_delete_attr_function *`.
pub(crate) type TypeDeleteAttrFn = DeleteAttrFn;
/// `MPI_Grequest_query_function *`.
pub(crate) type GrequestQueryFn = unsafe extern "C" fn(*mut c_void, *mut MPI_Status) -> c_int;
/// `MPI_Grequest_free_function *`.
pub(crate) type GrequestFreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `MPI_Grequest_cancel_function *`.
pub(crate) type GrequestCancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
/// `MPIX_Grequest_poll_function *`.
pub(crate) type GrequestPollFn = unsafe extern "C" fn(*mut c_void, *mut MPI_Status) -> c_int;
/// `MPIX_Grequest_wait_function *`.
pub(crate) type GrequestWaitFn =
    unsafe extern "C" fn(c_int, *mut *mut c_void, f64, *mut MPI_Status) -> c_int;

/// The host MPI library: a `dlopen` handle of the object that defines `PMPI_Init`, and its
/// path.
struct Library(*mut c_void, String);

// SAFETY: a dlopen handle is a plain token, valid from any thread.
unsafe impl Send for Library {}
// SAFETY: as for Send.
unsafe impl Sync for Library {}

static LIBRARY: OnceLock<Result<Library, String>> = OnceLock::new();

/// The object that defines the symbol at `address`, as a handle of its own.
fn defining_object(address: *mut c_void) -> Option<Library> {
    // SAFETY: dladdr only reads the loader's tables; `info` is written on success.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is the loaded object's NUL-terminated path; RTLD_NOLOAD only
    // returns a handle to an object already loaded (and counts a reference we keep).
    let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    // SAFETY: as above.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    (!h.is_null()).then_some(Library(h, path))
}

/// True when `address` is inside this library.
fn is_ours(address: *mut c_void) -> bool {
    // SAFETY: as in defining_object.
    let mut theirs: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut ours: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `is_ours` is a function of this library.
    unsafe {
        libc::dladdr(address, &mut theirs);
        libc::dladdr(is_ours as *mut c_void, &mut ours);
    }
    theirs.dli_fbase == ours.dli_fbase
}

/// Every loaded object's path (the program's own has none).
fn loaded_objects() -> Vec<CString> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        out: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid entry, and `out` is the Vec given below.
        let (info, out) = unsafe { (&*info, &mut *out.cast::<Vec<CString>>()) };
        if !info.dlpi_name.is_null() {
            // SAFETY: a NUL-terminated path owned by the loader.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) };
            if !name.is_empty() {
                out.push(name.to_owned());
            }
        }
        0
    }
    let mut out: Vec<CString> = Vec::new();
    // SAFETY: the callback only reads its entry and pushes to `out`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut out as *mut Vec<CString>).cast()) };
    out
}

/// Finds the host MPI library (see the module's text).
fn find_library() -> Result<Library, String> {
    let init = c"PMPI_Init";
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no preconditions.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, init.as_ptr()) };
    if !next.is_null() && !is_ours(next) {
        if let Some(lib) = defining_object(next) {
            return Ok(lib);
        }
    }
    for name in loaded_objects() {
        // SAFETY: a loaded object's path; RTLD_NOLOAD never loads anything.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if h.is_null() {
            continue;
        }
        // SAFETY: a live handle and a NUL-terminated name.
        let f = unsafe { libc::dlsym(h, init.as_ptr()) };
        // SAFETY: the handle was opened above (a reference count, not a load).
        unsafe { libc::dlclose(h) };
        if !f.is_null() && !is_ours(f) {
            if let Some(lib) = defining_object(f) {
                return Ok(lib);
            }
        }
    }
    Err(
        "no MPI library in the process defines PMPI_Init (is the program linked against \
         MPI?)"
            .into(),
    )
}

/// The host's `name`, or null when it has none.
pub(crate) fn lookup(name: &CStr) -> *mut c_void {
    match LIBRARY.get_or_init(find_library) {
        // SAFETY: a live handle and a NUL-terminated name.
        Ok(lib) => unsafe { libc::dlsym(lib.0, name.as_ptr()) },
        Err(_) => std::ptr::null_mut(),
    }
}

/// The host's `name`; the process ends with a message when the host has none (every name
/// looked up this way is part of every MPI library this one accepts at `MPI_Init`).
pub(crate) fn require(name: &CStr) -> *mut c_void {
    let mut f = lookup(name);
    if f.is_null() {
        // An MPI may define an extension only in its MPI_ form (MPICH 5's standard-ABI
        // library has MPIX_Grequest_class_create but no PMPIX_ twin).
        if let Some(unprofiled) = name.to_bytes().strip_prefix(b"P") {
            if let Ok(alt) = CString::new(unprofiled) {
                f = lookup(&alt);
            }
        }
    }
    if f.is_null() {
        let why = match LIBRARY.get_or_init(find_library) {
            Ok(_) => format!("the host MPI has no {}", name.to_string_lossy()),
            Err(e) => e.clone(),
        };
        eprintln!("onesided-mpi: {why}");
        std::process::abort();
    }
    f
}

/// One host function, looked up at its first use (for the exports' forwarding to the host,
/// one per exported name).
pub(crate) struct HostFn {
    /// NUL-terminated symbol name.
    name: &'static str,
    ptr: AtomicPtr<c_void>,
}

impl HostFn {
    pub(crate) const fn new(name: &'static str) -> HostFn {
        HostFn {
            name,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The function's address (the process ends when the host has none).
    pub(crate) fn get(&self) -> *mut c_void {
        // Relaxed: the address is the same whichever thread looks it up first.
        let p = self.ptr.load(Ordering::Relaxed);
        if !p.is_null() {
            return p;
        }
        let name = CStr::from_bytes_with_nul(self.name.as_bytes()).expect("NUL-terminated name");
        let p = require(name);
        // Relaxed: see above.
        self.ptr.store(p, Ordering::Relaxed);
        p
    }
}

/// Declares the host table: one typed function pointer per host function.
macro_rules! host_functions {
    ($( $field:ident = $name:literal : fn($($arg:ty),* $(,)?) -> c_int; )*) => {
        /// The host functions this library calls, resolved together at first use.
        #[allow(clippy::type_complexity)]
        pub(crate) struct Host {
            $( pub $field: unsafe extern "C" fn($($arg),*) -> c_int, )*
        }

        fn resolve() -> Host {
            Host {
                $( $field: {
                    let p = require($name);
                    // SAFETY: the host's function of this name has the MPICH prototype
                    // (mpi_proto.h) that the field's type copies.
                    unsafe {
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> c_int>(p)
                    }
                }, )*
            }
        }
    };
}

host_functions! {
    init = c"PMPI_Init": fn(*mut c_int, *mut *mut *mut c_char) -> c_int;
    init_thread = c"PMPI_Init_thread": fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int;
    finalize = c"PMPI_Finalize": fn() -> c_int;
    initialized = c"PMPI_Initialized": fn(*mut c_int) -> c_int;
    finalized = c"PMPI_Finalized": fn(*mut c_int) -> c_int;
    query_thread = c"PMPI_Query_thread": fn(*mut c_int) -> c_int;
    abort = c"PMPI_Abort": fn(MPI_Comm, c_int) -> c_int;
    alloc_mem = c"PMPI_Alloc_mem": fn(MPI_Aint, MPI_Info, *mut c_void) -> c_int;
    free_mem = c"PMPI_Free_mem": fn(*mut c_void) -> c_int;

    comm_rank = c"PMPI_Comm_rank": fn(MPI_Comm, *mut c_int) -> c_int;
    comm_size = c"PMPI_Comm_size": fn(MPI_Comm, *mut c_int) -> c_int;
    comm_dup = c"PMPI_Comm_dup": fn(MPI_Comm, *mut MPI_Comm) -> c_int;
    comm_free = c"PMPI_Comm_free": fn(*mut MPI_Comm) -> c_int;
    comm_split = c"PMPI_Comm_split": fn(MPI_Comm, c_int, c_int, *mut MPI_Comm) -> c_int;
    comm_split_type = c"PMPI_Comm_split_type": fn(MPI_Comm, c_int, c_int, MPI_Info, *mut MPI_Comm) -> c_int;
    comm_group = c"PMPI_Comm_group": fn(MPI_Comm, *mut MPI_Group) -> c_int;
    comm_get_errhandler = c"PMPI_Comm_get_errhandler": fn(MPI_Comm, *mut MPI_Errhandler) -> c_int;
    comm_call_errhandler = c"PMPI_Comm_call_errhandler": fn(MPI_Comm, c_int) -> c_int;

    group_size = c"PMPI_Group_size": fn(MPI_Group, *mut c_int) -> c_int;
    group_translate_ranks = c"PMPI_Group_translate_ranks": fn(MPI_Group, c_int, *const c_int, MPI_Group, *mut c_int) -> c_int;
    group_excl = c"PMPI_Group_excl": fn(MPI_Group, c_int, *const c_int, *mut MPI_Group) -> c_int;
    group_free = c"PMPI_Group_free": fn(*mut MPI_Group) -> c_int;

    info_create = c"PMPI_Info_create": fn(*mut MPI_Info) -> c_int;
    info_set = c"PMPI_Info_set": fn(MPI_Info, *const c_char, *const c_char) -> c_int;
    info_get_nkeys = c"PMPI_Info_get_nkeys": fn(MPI_Info, *mut c_int) -> c_int;
    info_get_nthkey = c"PMPI_Info_get_nthkey": fn(MPI_Info, c_int, *mut c_char) -> c_int;
    info_get_valuelen = c"PMPI_Info_get_valuelen": fn(MPI_Info, *const c_char, *mut c_int, *mut c_int) -> c_int;
    info_get = c"PMPI_Info_get": fn(MPI_Info, *const c_char, c_int, *mut c_char, *mut c_int) -> c_int;

    type_size = c"PMPI_Type_size": fn(MPI_Datatype, *mut c_int) -> c_int;
    type_get_extent = c"PMPI_Type_get_extent": fn(MPI_Datatype, *mut MPI_Aint, *mut MPI_Aint) -> c_int;
    type_get_envelope = c"PMPI_Type_get_envelope": fn(MPI_Datatype, *mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int;
    type_get_contents = c"PMPI_Type_get_contents": fn(MPI_Datatype, c_int, c_int, c_int, *mut c_int, *mut MPI_Aint, *mut MPI_Datatype) -> c_int;
    type_free = c"PMPI_Type_free": fn(*mut MPI_Datatype) -> c_int;
    type_create_keyval = c"PMPI_Type_create_keyval": fn(Option<TypeCopyAttrFn>, Option<TypeDeleteAttrFn>, *mut c_int, *mut c_void) -> c_int;
    type_get_attr = c"PMPI_Type_get_attr": fn(MPI_Datatype, c_int, *mut c_void, *mut c_int) -> c_int;
    type_set_attr = c"PMPI_Type_set_attr": fn(MPI_Datatype, c_int, *mut c_void) -> c_int;

    errhandler_free = c"PMPI_Errhandler_free": fn(*mut MPI_Errhandler) -> c_int;
    win_create_errhandler = c"PMPI_Win_create_errhandler": fn(Option<WinErrhandlerFn>, *mut MPI_Errhandler) -> c_int;
    win_create_keyval = c"PMPI_Win_create_keyval": fn(Option<CopyAttrFn>, Option<DeleteAttrFn>, *mut c_int, *mut c_void) -> c_int;
    win_free_keyval = c"PMPI_Win_free_keyval": fn(*mut c_int) -> c_int;

    request_get_status = c"PMPI_Request_get_status": fn(MPI_Request, *mut c_int, *mut MPI_Status) -> c_int;
    status_set_elements = c"PMPI_Status_set_elements": fn(*mut MPI_Status, MPI_Datatype, c_int) -> c_int;
    status_set_cancelled = c"PMPI_Status_set_cancelled": fn(*mut MPI_Status, c_int) -> c_int;
    grequest_complete = c"PMPI_Grequest_complete": fn(MPI_Request) -> c_int;
    grequest_start = c"PMPI_Grequest_start": fn(Option<GrequestQueryFn>, Option<GrequestFreeFn>, Option<GrequestCancelFn>, *mut c_void, *mut MPI_Request) -> c_int;

    iallgather = c"PMPI_Iallgather": fn(*const c_void, c_int, MPI_Datatype, *mut c_void, c_int, MPI_Datatype, MPI_Comm, *mut MPI_Request) -> c_int;
    ibarrier = c"PMPI_Ibarrier": fn(MPI_Comm, *mut MPI_Request) -> c_int;
    test = c"PMPI_Test": fn(*mut MPI_Request, *mut c_int, *mut MPI_Status) -> c_int;
    cancel = c"PMPI_Cancel": fn(*mut MPI_Request) -> c_int;
    request_free = c"PMPI_Request_free": fn(*mut MPI_Request) -> c_int;
    testall = c"PMPI_Testall": fn(c_int, *mut MPI_Request, *mut c_int, *mut MPI_Status) -> c_int;
    testany = c"PMPI_Testany": fn(c_int, *mut MPI_Request, *mut c_int, *mut c_int, *mut MPI_Status) -> c_int;
    testsome = c"PMPI_Testsome": fn(c_int, *mut MPI_Request, *mut c_int, *mut c_int, *mut MPI_Status) -> c_int;
    iprobe = c"PMPI_Iprobe": fn(c_int, c_int, MPI_Comm, *mut c_int, *mut MPI_Status) -> c_int;
    allgather = c"PMPI_Allgather": fn(*const c_void, c_int, MPI_Datatype, *mut c_void, c_int, MPI_Datatype, MPI_Comm) -> c_int;
    allgatherv = c"PMPI_Allgatherv": fn(*const c_void, c_int, MPI_Datatype, *mut c_void, *const c_int, *const c_int, MPI_Datatype, MPI_Comm) -> c_int;
    alltoallv = c"PMPI_Alltoallv": fn(*const c_void, *const c_int, *const c_int, MPI_Datatype, *mut c_void, *const c_int, *const c_int, MPI_Datatype, MPI_Comm) -> c_int;
    bcast = c"PMPI_Bcast": fn(*mut c_void, c_int, MPI_Datatype, c_int, MPI_Comm) -> c_int;
}

static HOST: OnceLock<Host> = OnceLock::new();

/// MPICH's generalized-request classes (`MPIX_Grequest_class_create` and
/// `_allocate`, whose requests the host polls): absent from other MPIs.
pub(crate) struct GrequestClasses {
    pub create: ClassCreateFn,
    pub allocate: ClassAllocateFn,
}

/// `MPIX_Grequest_class_create`.
type ClassCreateFn = unsafe extern "C" fn(
    Option<GrequestQueryFn>,
    Option<GrequestFreeFn>,
    Option<GrequestCancelFn>,
    Option<GrequestPollFn>,
    Option<GrequestWaitFn>,
    *mut c_int,
) -> c_int;
/// `MPIX_Grequest_class_allocate`.
type ClassAllocateFn = unsafe extern "C" fn(c_int, *mut c_void, *mut MPI_Request) -> c_int;

/// The host's generalized-request classes, if it has them.
pub(crate) fn grequest_classes() -> Option<&'static GrequestClasses> {
    static CLASSES: OnceLock<Option<GrequestClasses>> = OnceLock::new();
    CLASSES
        .get_or_init(|| {
            let find = |p: &CStr, m: &CStr| {
                let f = lookup(p);
                if f.is_null() {
                    lookup(m)
                } else {
                    f
                }
            };
            let create = find(
                c"PMPIX_Grequest_class_create",
                c"MPIX_Grequest_class_create",
            );
            let allocate = find(
                c"PMPIX_Grequest_class_allocate",
                c"MPIX_Grequest_class_allocate",
            );
            if create.is_null() || allocate.is_null() {
                return None;
            }
            // SAFETY: MPICH's functions of these names have these prototypes (mpi.h).
            unsafe {
                Some(GrequestClasses {
                    create: std::mem::transmute::<*mut c_void, ClassCreateFn>(create),
                    allocate: std::mem::transmute::<*mut c_void, ClassAllocateFn>(allocate),
                })
            }
        })
        .as_ref()
}

/// The host's functions (resolved at the first call: the program's `MPI_Init`, or an MPI
/// function it may call before it — `MPI_Initialized`, `MPI_Get_library_version`).
pub(crate) fn host() -> &'static Host {
    HOST.get_or_init(resolve)
}

/// The host MPI's name: the first line of `MPI_Get_library_version` (callable before
/// `MPI_Init`), or the library's file when even that is missing.
pub(crate) fn library_version() -> String {
    let f = lookup(c"PMPI_Get_library_version");
    if f.is_null() {
        return "an MPI without MPI_Get_library_version".into();
    }
    // SAFETY: the host's MPI_Get_library_version (a standard prototype in every ABI:
    // a buffer and an int pointer).
    let f: unsafe extern "C" fn(*mut c_char, *mut c_int) -> c_int =
        unsafe { std::mem::transmute(f) };
    // MPI_MAX_LIBRARY_VERSION_STRING is 8192 in MPICH and the standard ABI, 256 in Open MPI.
    let mut buf = vec![0 as c_char; 8192];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds the largest MPI_MAX_LIBRARY_VERSION_STRING of any ABI.
    unsafe { f(buf.as_mut_ptr(), &mut len) };
    *buf.last_mut().expect("non-empty") = 0;
    // SAFETY: NUL-terminated (the last byte at least).
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    let first = text.lines().next().unwrap_or("");
    first.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Picks the process's ABI from its MPI library — Open MPI's (it defines
/// `ompi_mpi_comm_world`), the MPI-5 standard ABI (a library named `libmpi_abi`) or the
/// MPICH ABI (it defines `MPIR_Dup_fn`) — and refuses any other with one line naming the
/// MPI and exit status 1, before anything else runs: its handles would be misread.
pub(crate) fn choose_abi() {
    let open_mpi = !lookup(c"ompi_mpi_comm_world").is_null();
    // The standard ABI's library has a name of its own (MPICH 5's libmpi_abi.so.1).
    let standard_abi = LIBRARY
        .get_or_init(find_library)
        .as_ref()
        .is_ok_and(|lib| lib.1.contains("libmpi_abi"));
    // Every MPICH-ABI library defines MPIR_Dup_fn: its mpi.h names it for MPI_DUP_FN.
    let mpich_abi = !lookup(c"MPIR_Dup_fn").is_null();
    let why = match LIBRARY.get_or_init(find_library) {
        Err(e) => Some(e.clone()),
        Ok(_) if open_mpi => match crate::abi::ompi::abi() {
            Ok(abi) => {
                crate::abi::set(abi);
                None
            }
            Err(e) => Some(format!("an Open MPI library without {e}")),
        },
        Ok(_) if standard_abi || mpich_abi => None,
        Ok(lib) => Some(format!(
            "{}, of an ABI this library does not know (neither MPICH's, nor the MPI-5 standard \
             ABI, nor Open MPI's)",
            lib.1
        )),
    };
    if standard_abi {
        crate::abi::set(&crate::abi::standard::ABI);
    }
    if let Some(why) = why {
        eprintln!(
            "onesided-mpi: this program runs on {} — {why}; libonesided_mpi.so serves the \
             MPICH ABI (MPICH, Intel MPI, MVAPICH, Cray MPICH), the MPI-5 standard ABI and Open \
             MPI. Run it without LD_PRELOAD, or rebuild it with an mpicc of one of those.",
            library_version()
        );
        std::process::exit(1);
    }
}
