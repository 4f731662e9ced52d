//! The MPI ABIs this library serves, chosen per process at `MPI_Init` from the MPI library
//! the program runs on (`host`): the MPICH ABI ([`mpich`]: `int` handles; MPICH 4.x/5.x,
//! Intel MPI, MVAPICH, Cray MPICH) and the MPI-5 standard ABI ([`standard`]: handles are
//! pointers, predefined ones small constants; `mpi_abi.h`, MPICH 5's `libmpi_abi.so`).
//!
//! One export table serves both: every handle crosses the exports as a machine word
//! ([`Handle`]). A caller of the MPICH ABI passes an `int` there — on x86-64 and AArch64 an
//! `int` argument travels in a register or an 8-byte stack slot whose upper half the callee
//! must ignore — so each export first masks its handle arguments ([`Arg`]); handles the
//! library writes into the program's memory or reads from it take the ABI's width
//! ([`store_handle`], [`load_handle`]). Every constant and encoding the library reads or
//! returns is a field of the process's [`Abi`] ([`abi`]); calls to the host's functions pass
//! words too, of which an `int`-handle host reads the low half.

#![allow(non_camel_case_types)]

use std::os::raw::{c_int, c_long, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use onesided::{ElemType, ErrorClass, Op};

pub mod mpich;
pub mod standard;

/// A handle of the program's MPI, widened to a word (an MPICH `int` zero-extended).
pub type Handle = usize;
/// `MPI_Win`.
pub type MPI_Win = Handle;
/// `MPI_Comm`.
pub type MPI_Comm = Handle;
/// `MPI_Info`.
pub type MPI_Info = Handle;
/// `MPI_Datatype`.
pub type MPI_Datatype = Handle;
/// `MPI_Op`.
pub type MPI_Op = Handle;
/// `MPI_Group`.
pub type MPI_Group = Handle;
/// `MPI_Errhandler`.
pub type MPI_Errhandler = Handle;
/// `MPI_Request`.
pub type MPI_Request = Handle;
/// `MPI_Aint`: 8 bytes in every ABI served (MPICH's `long`, the standard's `intptr_t`).
pub type MPI_Aint = c_long;
/// `MPI_Count`: 8 bytes in every ABI served.
pub type MPI_Count = c_long;

/// `MPI_SUCCESS` (0 in every ABI).
pub const MPI_SUCCESS: c_int = 0;

/// An `MPI_Status`, opaque: its layout differs between ABIs ([`StatusLayout`]).
#[repr(C)]
pub struct MPI_Status {
    _opaque: [u8; 0],
}

/// Where an ABI keeps the public fields of `MPI_Status` (byte offsets).
#[derive(Debug, Clone, Copy)]
pub struct StatusLayout {
    /// `MPI_SOURCE`.
    pub source: usize,
    /// `MPI_TAG`.
    pub tag: usize,
}

/// What a predefined datatype is to an RMA call: its size, and the element type
/// accumulates apply ops to (`None`: bytes that only put, get and replace may move).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    /// `MPI_Type_size`.
    pub size: usize,
    /// The element type of accumulate ops.
    pub elem: Option<ElemType>,
}

/// The type constructors `MPI_Type_get_envelope` reports, ABI-neutral.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combiner {
    /// A predefined type.
    Named,
    /// `MPI_Type_dup`.
    Dup,
    /// `MPI_Type_contiguous`.
    Contiguous,
    /// `MPI_Type_vector`.
    Vector,
    /// `MPI_Type_create_hvector`.
    Hvector,
    /// `MPI_Type_indexed`.
    Indexed,
    /// `MPI_Type_create_hindexed`.
    Hindexed,
    /// `MPI_Type_create_indexed_block`.
    IndexedBlock,
    /// `MPI_Type_create_hindexed_block`.
    HindexedBlock,
    /// `MPI_Type_create_struct`.
    Struct,
    /// `MPI_Type_create_subarray`.
    Subarray,
    /// `MPI_Type_create_darray`.
    Darray,
    /// `MPI_Type_create_resized`.
    Resized,
    /// Anything else (a combiner this library cannot flatten).
    Other,
}

/// Error codes (classes) the library returns by name.
#[derive(Debug, Clone, Copy)]
pub struct ErrCodes {
    pub arg: c_int,
    pub count: c_int,
    pub other: c_int,
    pub win: c_int,
    pub type_: c_int,
    pub comm: c_int,
    pub group: c_int,
    pub locktype: c_int,
    pub assert: c_int,
    pub disp: c_int,
    pub keyval: c_int,
    pub size: c_int,
    pub rma_flavor: c_int,
}

/// One MPI ABI: every constant and encoding the library reads or returns.
#[derive(Debug)]
pub struct Abi {
    /// A name for messages.
    pub name: &'static str,
    /// Bytes of a handle in the program's memory: 4 (`int`) or 8 (a pointer).
    pub handle_bytes: usize,
    pub comm_world: Handle,
    pub comm_null: Handle,
    pub info_null: Handle,
    pub win_null: Handle,
    pub group_null: Handle,
    pub request_null: Handle,
    pub errhandler_null: Handle,
    pub errors_are_fatal: Handle,
    pub errors_return: Handle,
    /// `MPI_ERRORS_ABORT` (MPI-4), where the ABI has it.
    pub errors_abort: Option<Handle>,
    pub byte: Handle,
    pub uint8: Handle,
    /// `MPI_STATUS_IGNORE` as an address.
    pub status_ignore: usize,
    pub status: StatusLayout,
    pub proc_null: c_int,
    pub any_source: c_int,
    pub any_tag: c_int,
    pub undefined: c_int,
    pub comm_type_shared: c_int,
    pub keyval_invalid: c_int,
    pub lock_exclusive: c_int,
    pub lock_shared: c_int,
    /// `MPI_MODE_NOCHECK`, `NOSTORE`, `NOPUT`, `NOPRECEDE`, `NOSUCCEED`.
    pub modes: [c_int; 5],
    /// `MPI_WIN_FLAVOR_CREATE`, `ALLOCATE`, `DYNAMIC`, `SHARED`.
    pub flavors: [c_int; 4],
    pub win_unified: c_int,
    /// The window attribute keyvals `MPI_WIN_BASE`, `SIZE`, `DISP_UNIT`, `CREATE_FLAVOR`,
    /// `MODEL`.
    pub win_attrs: [c_int; 5],
    /// `MPI_THREAD_SINGLE`, `FUNNELED`, `SERIALIZED`, `MULTIPLE`.
    pub threads: [c_int; 4],
    /// Each combiner's value.
    pub combiners: &'static [(c_int, Combiner)],
    pub order_fortran: c_int,
    pub distribute_block: isize,
    pub distribute_cyclic: isize,
    pub distribute_dflt_darg: isize,
    pub err: ErrCodes,
    /// The error code of a class.
    pub error_code: fn(ErrorClass) -> c_int,
    /// [`builtin`].
    pub builtin: fn(Handle) -> Option<Builtin>,
    /// [`padded_pair`].
    pub padded_pair: fn(Handle) -> Option<(ElemType, usize, usize)>,
    /// [`op`].
    pub op: fn(Handle) -> Option<Op>,
    /// Our handle for window table slot `index`.
    pub window_handle: fn(usize) -> Handle,
    /// The slot of one of our window handles.
    pub window_index: fn(Handle) -> Option<usize>,
}

static ABI: AtomicPtr<Abi> = AtomicPtr::new(&mpich::ABI as *const Abi as *mut Abi);

/// The ABI of this process's MPI (the MPICH ABI until `MPI_Init` says otherwise).
#[inline]
pub fn abi() -> &'static Abi {
    // Relaxed: set once in MPI_Init before any call that reads it (a program's calls
    // follow its MPI_Init), to a static.
    // SAFETY: the pointer is always one of the static ABIs.
    unsafe { &*ABI.load(Ordering::Relaxed) }
}

/// Makes `abi` the process's ABI (at `MPI_Init`, before the host's).
pub fn set(abi: &'static Abi) {
    // Relaxed: see `abi`.
    ABI.store(abi as *const Abi as *mut Abi, Ordering::Relaxed);
}

/// An export's argument as the library uses it: a handle masked to the ABI's width (the
/// upper half of an `int` argument's register is the caller's garbage), anything else
/// unchanged.
pub trait Arg: Sized {
    /// The argument, normalized.
    fn arg(self) -> Self {
        self
    }
}

impl Arg for Handle {
    #[inline]
    fn arg(self) -> Self {
        if abi().handle_bytes == 4 {
            self & 0xffff_ffff
        } else {
            self
        }
    }
}
impl Arg for c_int {}
impl Arg for c_long {}
impl Arg for f64 {}
impl<T> Arg for *mut T {}
impl<T> Arg for *const T {}
impl<F> Arg for Option<F> {}

/// Writes handle `h` where the program keeps one (`*win = …`).
///
/// # Safety
/// `p` points to a handle of the program's ABI (4 or 8 writable bytes).
#[inline]
pub unsafe fn store_handle(p: *mut Handle, h: Handle) {
    if abi().handle_bytes == 4 {
        // SAFETY: the caller's handle of an int ABI: 4 bytes.
        unsafe { p.cast::<u32>().write_unaligned(h as u32) }
    } else {
        // SAFETY: the caller's pointer-sized handle.
        unsafe { p.write_unaligned(h) }
    }
}

/// Reads the handle the program keeps at `p`.
///
/// # Safety
/// `p` points to a handle of the program's ABI.
#[inline]
pub unsafe fn load_handle(p: *const Handle) -> Handle {
    if abi().handle_bytes == 4 {
        // SAFETY: as in store_handle.
        unsafe { p.cast::<u32>().read_unaligned() as Handle }
    } else {
        // SAFETY: as in store_handle.
        unsafe { p.read_unaligned() }
    }
}

/// The `i`-th handle of an array of the program's (or the host's) handles.
///
/// # Safety
/// `p` holds more than `i` handles of the ABI.
pub unsafe fn handle_at(p: *const c_void, i: usize) -> Handle {
    let at = p.cast::<u8>().wrapping_add(i * abi().handle_bytes);
    // SAFETY: the caller's array.
    unsafe { load_handle(at.cast()) }
}

/// Sets `MPI_SOURCE` and `MPI_TAG` of a status.
///
/// # Safety
/// `status` is an `MPI_Status` of the ABI (not `MPI_STATUS_IGNORE`).
pub unsafe fn set_status_source_tag(status: *mut MPI_Status, source: c_int, tag: c_int) {
    let layout = abi().status;
    let base = status.cast::<u8>();
    // SAFETY: both fields lie inside the status (the layout's offsets).
    unsafe {
        base.add(layout.source)
            .cast::<c_int>()
            .write_unaligned(source);
        base.add(layout.tag).cast::<c_int>().write_unaligned(tag);
    }
}

/// The predefined datatype `ty`, if this library knows it (a derived one is `None`).
#[inline]
pub fn builtin(ty: MPI_Datatype) -> Option<Builtin> {
    (abi().builtin)(ty)
}

/// A predefined pair type whose C struct has padding (`MPI_DOUBLE_INT`, `MPI_LONG_INT`,
/// `MPI_SHORT_INT`, `MPI_LONG_DOUBLE_INT`): its element type, `MPI_Type_size` and extent.
/// Put and get move only the data bytes; accumulates combine whole structs.
pub fn padded_pair(ty: MPI_Datatype) -> Option<(ElemType, usize, usize)> {
    (abi().padded_pair)(ty)
}

/// `MPI_Type_size` of the padded pair type of element type `e` (see [`padded_pair`]).
pub fn pair_data_size(e: ElemType) -> Option<usize> {
    match e {
        ElemType::DoubleInt | ElemType::LongInt => Some(12),
        ElemType::ShortInt => Some(6),
        ElemType::LongDoubleInt => Some(20),
        _ => None,
    }
}

/// The predefined op `op`.
#[inline]
pub fn op(op: MPI_Op) -> Option<Op> {
    (abi().op)(op)
}

/// The MPI error code (a class is a valid code) of an error class.
pub fn error_code(class: ErrorClass) -> c_int {
    (abi().error_code)(class)
}

/// Our handle for window table slot `index`.
pub fn window_handle(index: usize) -> MPI_Win {
    (abi().window_handle)(index)
}

/// The table slot of one of our window handles; `None` for anything else.
#[inline]
pub fn window_index(win: MPI_Win) -> Option<usize> {
    (abi().window_index)(win)
}

/// Whether `win` has the bit pattern of our window handles (live or freed).
pub fn is_ours(win: MPI_Win) -> bool {
    window_index(win).is_some()
}

/// The combiner of value `c`.
pub fn combiner(c: c_int) -> Combiner {
    abi()
        .combiners
        .iter()
        .find(|&&(v, _)| v == c)
        .map_or(Combiner::Other, |&(_, k)| k)
}

/// The MPI assert bits as onesided's (an unknown bit: `None`).
pub fn mode(bits: c_int) -> Option<onesided::Assert> {
    use onesided::Assert;
    let a = abi();
    let all = a.modes.iter().fold(0, |m, &b| m | b);
    if bits & !all != 0 {
        return None;
    }
    let mut out = Assert::NONE;
    for (b, ours) in a.modes.iter().zip([
        Assert::NOCHECK,
        Assert::NOSTORE,
        Assert::NOPUT,
        Assert::NOPRECEDE,
        Assert::NOSUCCEED,
    ]) {
        if bits & b != 0 {
            out |= ours;
        }
    }
    Some(out)
}
