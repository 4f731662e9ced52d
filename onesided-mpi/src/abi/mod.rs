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
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

use onesided::{ElemType, ErrorClass, Op};

pub mod handle_map;
pub mod mpich;
pub mod ompi;
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
    /// Which of the ABIs this is: the hot path's lookups inline the MPICH and Open MPI
    /// ones instead of calling through `builtin` and `op`.
    pub kind: AbiKind,
    /// Bytes of a handle in the program's memory: 4 (`int`) or 8 (a pointer).
    pub handle_bytes: usize,
    /// The longest info key (`MPI_MAX_INFO_KEY` - 1).
    pub max_info_key: usize,
    /// The bits of a handle argument the library reads (an `int`'s 32, or all).
    pub handle_mask: Handle,
    /// How our window handles are made (one slot number in a pattern the host never
    /// issues).
    pub windows: WindowEncoding,
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
}

/// The ABIs this library speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AbiKind {
    /// MPICH's (and its derivatives'): `int` handles.
    Mpich,
    /// The MPI-5 standard ABI.
    Standard,
    /// Open MPI's: pointers to its objects.
    OpenMpi,
}

impl Abi {
    /// [`builtin`] under this ABI, the MPICH and Open MPI lookups inlined.
    #[inline(always)]
    pub fn builtin_of(&self, ty: Handle) -> Option<Builtin> {
        match self.kind {
            AbiKind::Mpich => mpich::builtin(ty),
            AbiKind::OpenMpi => ompi::builtin(ty),
            AbiKind::Standard => (self.builtin)(ty),
        }
    }

    /// [`op`] under this ABI, the MPICH and Open MPI lookups inlined.
    #[inline(always)]
    pub fn op_of(&self, op: Handle) -> Option<Op> {
        match self.kind {
            AbiKind::Mpich => mpich::op(op),
            AbiKind::OpenMpi => ompi::op(op),
            AbiKind::Standard => (self.op)(op),
        }
    }

    /// [`window_index`] under this ABI.
    #[inline(always)]
    pub fn window_index_of(&self, win: MPI_Win) -> Option<usize> {
        self.windows.index_of(win)
    }
}

/// One ABI's lookups on the hot path (`fast`), fixed at compile time: each hot export is
/// compiled once per ABI and picks its copy with one branch per call ([`lookups_of`]),
/// rather than asking the process's [`Abi`] at every lookup — which also kept the
/// registers a call through the standard ABI's function pointers needs in every copy.
pub(crate) trait Lookups {
    /// The bits of a handle argument the library reads (an `int` ABI's upper half is the
    /// caller's garbage, [`Arg`]).
    const MASK: Handle;
    /// Our window handles under this ABI.
    const WINDOWS: WindowEncoding;
    /// [`Abi::builtin_of`] (`ty` masked).
    fn builtin(ty: Handle) -> Option<Builtin>;
    /// [`Abi::op_of`] (`op` masked).
    fn op(op: Handle) -> Option<Op>;
    /// [`Abi::window_index_of`] (`win` masked).
    #[inline(always)]
    fn window_index(win: Handle) -> Option<usize> {
        Self::WINDOWS.index_of(win)
    }
}

/// [`Lookups`] of the MPICH ABI.
pub(crate) struct MpichLookups;

impl Lookups for MpichLookups {
    const MASK: Handle = 0xffff_ffff;
    const WINDOWS: WindowEncoding = mpich::WINDOWS;
    #[inline(always)]
    fn builtin(ty: Handle) -> Option<Builtin> {
        mpich::builtin(ty)
    }
    #[inline(always)]
    fn op(op: Handle) -> Option<Op> {
        mpich::op(op)
    }
}

/// [`Lookups`] of Open MPI's ABI.
pub(crate) struct OmpiLookups;

impl Lookups for OmpiLookups {
    const MASK: Handle = Handle::MAX;
    const WINDOWS: WindowEncoding = standard::WINDOWS;
    #[inline(always)]
    fn builtin(ty: Handle) -> Option<Builtin> {
        ompi::builtin(ty)
    }
    #[inline(always)]
    fn op(op: Handle) -> Option<Op> {
        ompi::op(op)
    }
}

/// [`Lookups`] of the MPI-5 standard ABI.
pub(crate) struct StandardLookups;

impl Lookups for StandardLookups {
    const MASK: Handle = Handle::MAX;
    const WINDOWS: WindowEncoding = standard::WINDOWS;
    #[inline(always)]
    fn builtin(ty: Handle) -> Option<Builtin> {
        standard::builtin(ty)
    }
    #[inline(always)]
    fn op(op: Handle) -> Option<Op> {
        standard::op(op)
    }
}

/// Evaluates `$body` with `$l` the [`Lookups`] type of the process's ABI.
macro_rules! lookups_of {
    ($l:ident => $body:expr) => {
        match $crate::abi::kind_byte() {
            $crate::abi::KIND_MPICH => {
                type $l = $crate::abi::MpichLookups;
                $body
            }
            $crate::abi::KIND_OPEN_MPI => {
                type $l = $crate::abi::OmpiLookups;
                $body
            }
            _ => {
                type $l = $crate::abi::StandardLookups;
                $body
            }
        }
    };
}
pub(crate) use lookups_of;

/// Our window handles: `tag | slot << shift`, the slot's bits inside `slots`.
#[derive(Debug, Clone, Copy)]
pub struct WindowEncoding {
    /// The bits every one of our handles has (and no other bit outside `slots`).
    pub tag: Handle,
    /// Where the slot number sits.
    pub slots: Handle,
    /// The slot's shift.
    pub shift: u32,
}

impl WindowEncoding {
    /// The slot of `win` when it is one of our window handles.
    #[inline(always)]
    pub fn index_of(self, win: Handle) -> Option<usize> {
        (win & !self.slots == self.tag).then_some((win & self.slots) >> self.shift)
    }

    /// [`WindowEncoding::index_of`] for the slots of the window table's first chunk
    /// (`crate::state::first_window`): one masked compare, the slot a byte.
    #[inline(always)]
    pub fn first_slot_of(self, win: Handle) -> Option<u8> {
        let first = (u8::MAX as Handle) << self.shift;
        (win & !first == self.tag).then_some((win >> self.shift) as u8)
    }
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

/// [`Abi::kind`] of the process's ABI, kept apart from [`ABI`]: the hot exports branch on
/// it first thing, and one load of a byte is shorter than a pointer's load and then the
/// field's.
static KIND: AtomicU8 = AtomicU8::new(AbiKind::Mpich as u8);

/// The kind of the process's ABI ([`abi`]`().kind as u8`, in one load; [`lookups_of`]
/// matches the byte itself, which compiles to fewer branches than an enum made of it).
#[inline(always)]
pub(crate) fn kind_byte() -> u8 {
    // Relaxed: see `abi`.
    KIND.load(Ordering::Relaxed)
}

/// [`AbiKind::Mpich`] as [`kind_byte`] holds it.
pub(crate) const KIND_MPICH: u8 = AbiKind::Mpich as u8;
/// [`AbiKind::OpenMpi`] as [`kind_byte`] holds it.
pub(crate) const KIND_OPEN_MPI: u8 = AbiKind::OpenMpi as u8;

/// Makes `abi` the process's ABI (at `MPI_Init`, before the host's).
pub fn set(abi: &'static Abi) {
    // Relaxed: see `abi`.
    ABI.store(abi as *const Abi as *mut Abi, Ordering::Relaxed);
    KIND.store(abi.kind as u8, Ordering::Relaxed);
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
        self & abi().handle_mask
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
    abi().builtin_of(ty)
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
    abi().op_of(op)
}

/// The MPI error code (a class is a valid code) of an error class.
pub fn error_code(class: ErrorClass) -> c_int {
    (abi().error_code)(class)
}

/// Our handle for window table slot `index`.
pub fn window_handle(index: usize) -> MPI_Win {
    let w = abi().windows;
    debug_assert!(
        index << w.shift & !w.slots == 0,
        "window slot {index} out of range"
    );
    w.tag | (index << w.shift & w.slots)
}

/// The table slot of one of our window handles; `None` for anything else.
#[inline]
pub fn window_index(win: MPI_Win) -> Option<usize> {
    abi().window_index_of(win)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The hot path's compile-time lookups say what each ABI's table says: mask, window
    /// encoding, and every datatype and operation handle of the ABI's ranges (Open MPI's
    /// handles are addresses resolved at `MPI_Init`: its lookups answer nothing before).
    #[test]
    fn each_abis_lookups_agree_with_its_table() {
        fn check<L: Lookups>(abi: &Abi, handles: impl Iterator<Item = Handle>) {
            assert_eq!(L::MASK, abi.handle_mask, "{}", abi.name);
            let (w, t) = (L::WINDOWS, abi.windows);
            assert_eq!(
                (w.tag, w.slots, w.shift),
                (t.tag, t.slots, t.shift),
                "{}",
                abi.name
            );
            for h in handles {
                assert_eq!(
                    L::builtin(h),
                    (abi.builtin)(h),
                    "{} datatype {h:#x}",
                    abi.name
                );
                assert_eq!(L::op(h), (abi.op)(h), "{} op {h:#x}", abi.name);
                let ours = t.tag | (h << t.shift & t.slots);
                assert_eq!(L::window_index(ours), abi.window_index_of(ours));
            }
        }
        let mpich = (0x4c00_0000..0x4c00_4000).chain(0x5800_0000..0x5800_0010);
        check::<MpichLookups>(&mpich::ABI, mpich.chain([0x8c00_0000, 0, 7]));
        check::<StandardLookups>(&standard::ABI, 0..0x400);
        let ompi = ompi::constants();
        check::<OmpiLookups>(&ompi, [0, 8, 0x7f00_0000_0000].into_iter());
    }

    /// Every value of an [`Abi`] against that ABI's `mpi.h`: a C program compiled with the
    /// wrapper `$MPICC` (default `mpicc.mpich`) prints each constant, and `$ONESIDED_ABI`
    /// (`mpich`, the default, or `standard`) names the table to compare. Predefined datatypes
    /// and ops are checked through the table's functions (size and element type of every
    /// builtin the C side names). `scripts/cabi.sh` runs it for every MPI and ABI of its
    /// matrix; it needs one installed, hence `ignore`.
    #[test]
    #[ignore = "needs an MPI compiler wrapper (scripts/cabi.sh runs it for each MPI and ABI)"]
    fn constants_match_the_mpi_header() {
        let ompi = ompi::constants();
        let abi: &Abi = match std::env::var("ONESIDED_ABI").as_deref() {
            Ok("standard") => &standard::ABI,
            Ok("ompi") => &ompi,
            _ => &mpich::ABI,
        };
        // Open MPI's predefined handles are addresses in a process: its integer constants
        // are compared here, its handles by the C tests that run under it.
        let handles = abi.name != "Open MPI";
        let mut ours: Vec<(String, i64)> = vec![
            ("MPI_COMM_WORLD", abi.comm_world as i64),
            ("MPI_COMM_NULL", abi.comm_null as i64),
            ("MPI_INFO_NULL", abi.info_null as i64),
            ("MPI_WIN_NULL", abi.win_null as i64),
            ("MPI_GROUP_NULL", abi.group_null as i64),
            ("MPI_REQUEST_NULL", abi.request_null as i64),
            ("MPI_ERRHANDLER_NULL", abi.errhandler_null as i64),
            ("MPI_ERRORS_ARE_FATAL", abi.errors_are_fatal as i64),
            ("MPI_ERRORS_RETURN", abi.errors_return as i64),
            ("MPI_BYTE", abi.byte as i64),
            ("MPI_UINT8_T", abi.uint8 as i64),
            ("MPI_STATUS_IGNORE", abi.status_ignore as i64),
            ("MPI_PROC_NULL", abi.proc_null.into()),
            ("MPI_ANY_SOURCE", abi.any_source.into()),
            ("MPI_ANY_TAG", abi.any_tag.into()),
            ("MPI_UNDEFINED", abi.undefined.into()),
            ("MPI_COMM_TYPE_SHARED", abi.comm_type_shared.into()),
            ("MPI_KEYVAL_INVALID", abi.keyval_invalid.into()),
            ("MPI_LOCK_EXCLUSIVE", abi.lock_exclusive.into()),
            ("MPI_LOCK_SHARED", abi.lock_shared.into()),
            ("MPI_WIN_UNIFIED", abi.win_unified.into()),
            ("MPI_ORDER_FORTRAN", abi.order_fortran.into()),
            ("MPI_DISTRIBUTE_BLOCK", abi.distribute_block as i64),
            ("MPI_DISTRIBUTE_CYCLIC", abi.distribute_cyclic as i64),
            ("MPI_DISTRIBUTE_DFLT_DARG", abi.distribute_dflt_darg as i64),
            ("MPI_ERR_ARG", abi.err.arg.into()),
            ("MPI_ERR_COUNT", abi.err.count.into()),
            ("MPI_ERR_OTHER", abi.err.other.into()),
            ("MPI_ERR_WIN", abi.err.win.into()),
            ("MPI_ERR_TYPE", abi.err.type_.into()),
            ("MPI_ERR_COMM", abi.err.comm.into()),
            ("MPI_ERR_GROUP", abi.err.group.into()),
            ("MPI_ERR_LOCKTYPE", abi.err.locktype.into()),
            ("MPI_ERR_ASSERT", abi.err.assert.into()),
            ("MPI_ERR_DISP", abi.err.disp.into()),
            ("MPI_ERR_KEYVAL", abi.err.keyval.into()),
            ("MPI_ERR_SIZE", abi.err.size.into()),
            ("MPI_ERR_RMA_FLAVOR", abi.err.rma_flavor.into()),
            ("MPI_ERR_RANK", (abi.error_code)(ErrorClass::Rank).into()),
            ("MPI_ERR_OP", (abi.error_code)(ErrorClass::Op).into()),
            (
                "MPI_ERR_INFO_VALUE",
                (abi.error_code)(ErrorClass::InfoValue).into(),
            ),
            ("MPI_ERR_NO_MEM", (abi.error_code)(ErrorClass::NoMem).into()),
            (
                "MPI_ERR_RMA_SYNC",
                (abi.error_code)(ErrorClass::RmaSync).into(),
            ),
            (
                "MPI_ERR_RMA_RANGE",
                (abi.error_code)(ErrorClass::RmaRange).into(),
            ),
            (
                "MPI_ERR_RMA_ATTACH",
                (abi.error_code)(ErrorClass::RmaAttach).into(),
            ),
            (
                "MPI_ERR_RMA_SHARED",
                (abi.error_code)(ErrorClass::RmaShared).into(),
            ),
            (
                "MPI_ERR_UNSUPPORTED_OPERATION",
                (abi.error_code)(ErrorClass::UnsupportedOperation).into(),
            ),
            (
                "MPI_ERR_PROC_ABORTED",
                (abi.error_code)(ErrorClass::ProcAborted).into(),
            ),
            ("offsetof(MPI_Status, MPI_SOURCE)", abi.status.source as i64),
            ("offsetof(MPI_Status, MPI_TAG)", abi.status.tag as i64),
            ("sizeof(MPI_Aint)", std::mem::size_of::<MPI_Aint>() as i64),
            ("sizeof(MPI_Count)", std::mem::size_of::<MPI_Count>() as i64),
            ("sizeof(MPI_Win)", abi.handle_bytes as i64),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let named = |prefix: &str, names: &[&str], values: &[c_int]| {
            names
                .iter()
                .zip(values)
                .map(|(n, &v)| (format!("{prefix}{n}"), i64::from(v)))
                .collect::<Vec<_>>()
        };
        ours.extend(named(
            "MPI_MODE_",
            &["NOCHECK", "NOSTORE", "NOPUT", "NOPRECEDE", "NOSUCCEED"],
            &abi.modes,
        ));
        ours.extend(named(
            "MPI_WIN_FLAVOR_",
            &["CREATE", "ALLOCATE", "DYNAMIC", "SHARED"],
            &abi.flavors,
        ));
        ours.extend(named(
            "MPI_WIN_",
            &["BASE", "SIZE", "DISP_UNIT", "CREATE_FLAVOR", "MODEL"],
            &abi.win_attrs,
        ));
        ours.extend(named(
            "MPI_THREAD_",
            &["SINGLE", "FUNNELED", "SERIALIZED", "MULTIPLE"],
            &abi.threads,
        ));
        let combiners = [
            ("NAMED", Combiner::Named),
            ("DUP", Combiner::Dup),
            ("CONTIGUOUS", Combiner::Contiguous),
            ("VECTOR", Combiner::Vector),
            ("HVECTOR", Combiner::Hvector),
            ("INDEXED", Combiner::Indexed),
            ("HINDEXED", Combiner::Hindexed),
            ("INDEXED_BLOCK", Combiner::IndexedBlock),
            ("HINDEXED_BLOCK", Combiner::HindexedBlock),
            ("STRUCT", Combiner::Struct),
            ("SUBARRAY", Combiner::Subarray),
            ("DARRAY", Combiner::Darray),
            ("RESIZED", Combiner::Resized),
        ];
        for (name, kind) in combiners {
            let v = abi
                .combiners
                .iter()
                .find(|c| c.1 == kind)
                .expect("combiner")
                .0;
            ours.push((format!("MPI_COMBINER_{name}"), v.into()));
        }
        // Predefined datatypes: the C side prints the handle; ours must know its size.
        let types: &[(&str, usize)] = &[
            ("CHAR", 1),
            ("SIGNED_CHAR", 1),
            ("UNSIGNED_CHAR", 1),
            ("BYTE", 1),
            ("SHORT", 2),
            ("UNSIGNED_SHORT", 2),
            ("INT", 4),
            ("UNSIGNED", 4),
            ("LONG", 8),
            ("UNSIGNED_LONG", 8),
            ("LONG_LONG", 8),
            ("UNSIGNED_LONG_LONG", 8),
            ("FLOAT", 4),
            ("DOUBLE", 8),
            ("LONG_DOUBLE", 16),
            ("INT8_T", 1),
            ("INT16_T", 2),
            ("INT32_T", 4),
            ("INT64_T", 8),
            ("UINT8_T", 1),
            ("UINT16_T", 2),
            ("UINT32_T", 4),
            ("UINT64_T", 8),
            ("C_BOOL", 1),
            ("C_FLOAT_COMPLEX", 8),
            ("C_DOUBLE_COMPLEX", 16),
            ("C_LONG_DOUBLE_COMPLEX", 32),
            ("AINT", 8),
            ("COUNT", 8),
            ("OFFSET", 8),
            ("FLOAT_INT", 8),
            ("2INT", 8),
            ("INTEGER", 4),
            ("REAL", 4),
            ("DOUBLE_PRECISION", 8),
            ("LOGICAL", 4),
        ];
        let ops = [
            ("SUM", Op::Sum),
            ("MIN", Op::Min),
            ("MAX", Op::Max),
            ("PROD", Op::Prod),
            ("BAND", Op::Band),
            ("BOR", Op::Bor),
            ("BXOR", Op::Bxor),
            ("LAND", Op::Land),
            ("LOR", Op::Lor),
            ("LXOR", Op::Lxor),
            ("MINLOC", Op::MinLoc),
            ("MAXLOC", Op::MaxLoc),
            ("REPLACE", Op::Replace),
            ("NO_OP", Op::NoOp),
        ];
        let dir = std::env::temp_dir().join(format!("onesided-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = String::from(
            "#include <mpi.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n\
             int main(void) {\n",
        );
        let print = |c: &mut String, name: &str, expr: &str| {
            *c += &format!("  printf(\"%s %lld\\n\", \"{name}\", (long long)({expr}));\n");
        };
        for (name, value) in &ours {
            let expr = match name.as_str() {
                n if n.starts_with("offsetof") || n.starts_with("sizeof") => n.to_string(),
                n => format!("(intptr_t)({n})"),
            };
            // A class an older MPI lacks (Open MPI 4.1: MPI_ERR_PROC_ABORTED, a macro where
            // it exists) is not compared.
            c += &format!("#ifndef {name}\n#define {name} {value}\n#endif\n")
                .repeat(usize::from(name == "MPI_ERR_PROC_ABORTED"));
            print(&mut c, name, &expr);
        }
        for (name, _) in types {
            print(
                &mut c,
                &format!("type {name}"),
                &format!("(intptr_t)MPI_{name}"),
            );
        }
        for (name, _) in ops {
            print(
                &mut c,
                &format!("op {name}"),
                &format!("(intptr_t)MPI_{name}"),
            );
        }
        c += "  return 0;\n}\n";
        std::fs::write(dir.join("constants.c"), c).unwrap();
        let cc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc.mpich".into());
        let exe = dir.join("constants");
        let built = std::process::Command::new(&cc)
            .arg("-o")
            .arg(&exe)
            .arg(dir.join("constants.c"))
            .status()
            .unwrap_or_else(|e| panic!("{cc}: {e}"));
        assert!(built.success(), "{cc} failed");
        let out = std::process::Command::new(&exe).output().unwrap();
        std::fs::remove_dir_all(&dir).ok();
        let text = String::from_utf8(out.stdout).unwrap();
        let header: std::collections::HashMap<&str, i64> = text
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(k, v)| (k, v.parse().unwrap()))
            .collect();
        let mut wrong = Vec::new();
        // Handles of an int ABI are compared as their 32 bits.
        let same = |a: i64, b: i64| {
            if abi.handle_bytes == 4 {
                a as i32 == b as i32
            } else {
                a == b
            }
        };
        for (name, value) in &ours {
            let handle = name.starts_with("MPI_COMM_") && name != "MPI_COMM_TYPE_SHARED"
                || name.ends_with("_NULL")
                || name.starts_with("MPI_ERRORS_")
                || ["MPI_BYTE", "MPI_UINT8_T"].contains(&name.as_str());
            if handle && !handles {
                continue;
            }
            if !same(header[name.as_str()], *value) {
                wrong.push(format!(
                    "{name}: ours {value:#x}, mpi.h {:#x}",
                    header[name.as_str()]
                ));
            }
        }
        for (name, size) in types.iter().filter(|_| handles) {
            let h = header[format!("type {name}").as_str()] as u64 as usize & mask(abi);
            let found = (abi.builtin)(h).map(|b| b.size);
            if found != Some(*size) {
                wrong.push(format!(
                    "MPI_{name} ({h:#x}): size {found:?}, expected {size}"
                ));
            }
        }
        for (name, op) in ops.iter().filter(|_| handles) {
            let op = *op;
            let h = header[format!("op {name}").as_str()] as u64 as usize & mask(abi);
            if (abi.op)(h) != Some(op) {
                wrong.push(format!("MPI_{name} ({h:#x}): {:?}", (abi.op)(h)));
            }
        }
        assert!(wrong.is_empty(), "{cc} against {}: {wrong:#?}", abi.name);
    }

    fn mask(abi: &Abi) -> usize {
        if abi.handle_bytes == 4 {
            0xffff_ffff
        } else {
            usize::MAX
        }
    }
}
