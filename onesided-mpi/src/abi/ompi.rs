//! Open MPI's ABI (4.1 and 5.0 share it for everything here): handles are pointers to Open
//! MPI's objects, and the predefined ones are the addresses of its global objects
//! (`MPI_COMM_WORLD` is `&ompi_mpi_comm_world`, `MPI_INT` `&ompi_mpi_int`), so this table is
//! built at `MPI_Init` from the library's symbols; integer constants are Open MPI's `mpi.h`
//! values; `MPI_Status` is `MPI_SOURCE`, `MPI_TAG`, `MPI_ERROR`, then private fields.
//!
//! Our window handles are those of the standard ABI (odd values far above any object the
//! host allocates). Open MPI has no generalized-request classes: `MPI_Rput` & co. complete
//! before they return (`requests`).

use std::ffi::CStr;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use onesided::{ElemType, ErrorClass, Op};

use super::handle_map::HandleMap;
use super::{Abi, Builtin, Combiner, ErrCodes, Handle, StatusLayout};

/// The address of Open MPI's global object `name` (a predefined handle): the definition
/// the process binds to — an executable that names `MPI_COMM_WORLD` holds a copy of the
/// object (a copy relocation), and the library itself then uses that copy — else, for a
/// library out of the global scope (a Python extension's), the library's own.
fn object(name: &CStr) -> Result<Handle, String> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
    let global = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    let p = if global.is_null() {
        crate::host::lookup(name)
    } else {
        global
    };
    if p.is_null() {
        Err(name.to_string_lossy().into_owned())
    } else {
        Ok(p as Handle)
    }
}

/// Predefined datatypes by symbol: (size, element type).
const TYPES: &[(&CStr, usize, Option<ElemType>)] = {
    use ElemType::*;
    &[
        (c"ompi_mpi_char", 1, Some(I8)),
        (c"ompi_mpi_signed_char", 1, Some(I8)),
        (c"ompi_mpi_unsigned_char", 1, Some(U8)),
        // BYTE: as MPICH, a (signed) char to every predefined op but MINLOC/MAXLOC.
        (c"ompi_mpi_byte", 1, Some(I8)),
        (c"ompi_mpi_packed", 1, None),
        (c"ompi_mpi_short", 2, Some(I16)),
        (c"ompi_mpi_unsigned_short", 2, Some(U16)),
        (c"ompi_mpi_int", 4, Some(I32)),
        (c"ompi_mpi_unsigned", 4, Some(U32)),
        (c"ompi_mpi_long", 8, Some(I64)),
        (c"ompi_mpi_unsigned_long", 8, Some(U64)),
        (c"ompi_mpi_long_long_int", 8, Some(I64)),
        (c"ompi_mpi_unsigned_long_long", 8, Some(U64)),
        (c"ompi_mpi_float", 4, Some(F32)),
        (c"ompi_mpi_double", 8, Some(F64)),
        (c"ompi_mpi_long_double", 16, Some(LongDouble)),
        (c"ompi_mpi_wchar", 4, None),
        (c"ompi_mpi_int8_t", 1, Some(I8)),
        (c"ompi_mpi_uint8_t", 1, Some(U8)),
        (c"ompi_mpi_int16_t", 2, Some(I16)),
        (c"ompi_mpi_uint16_t", 2, Some(U16)),
        (c"ompi_mpi_int32_t", 4, Some(I32)),
        (c"ompi_mpi_uint32_t", 4, Some(U32)),
        (c"ompi_mpi_int64_t", 8, Some(I64)),
        (c"ompi_mpi_uint64_t", 8, Some(U64)),
        (c"ompi_mpi_aint", 8, Some(I64)),
        (c"ompi_mpi_offset", 8, Some(I64)),
        (c"ompi_mpi_count", 8, Some(I64)),
        (c"ompi_mpi_c_bool", 1, Some(U8)),
        (c"ompi_mpi_cxx_bool", 1, Some(U8)),
        (c"ompi_mpi_c_float_complex", 8, Some(C32)),
        (c"ompi_mpi_c_double_complex", 16, Some(C64)),
        (
            c"ompi_mpi_c_long_double_complex",
            32,
            Some(LongDoubleComplex),
        ),
        (c"ompi_mpi_cxx_cplex", 8, Some(C32)),
        (c"ompi_mpi_cxx_dblcplex", 16, Some(C64)),
        (c"ompi_mpi_cxx_ldblcplex", 32, Some(LongDoubleComplex)),
        (c"ompi_mpi_float_int", 8, Some(FloatInt)),
        (c"ompi_mpi_2int", 8, Some(TwoInt)),
        (c"ompi_mpi_character", 1, None),
        (c"ompi_mpi_logical", 4, Some(I32)),
        (c"ompi_mpi_integer", 4, Some(I32)),
        (c"ompi_mpi_integer1", 1, Some(I8)),
        (c"ompi_mpi_integer2", 2, Some(I16)),
        (c"ompi_mpi_integer4", 4, Some(I32)),
        (c"ompi_mpi_integer8", 8, Some(I64)),
        (c"ompi_mpi_real", 4, Some(F32)),
        (c"ompi_mpi_real4", 4, Some(F32)),
        (c"ompi_mpi_real8", 8, Some(F64)),
        (c"ompi_mpi_dblprec", 8, Some(F64)),
        (c"ompi_mpi_cplex", 8, Some(C32)),
        (c"ompi_mpi_complex8", 8, Some(C32)),
        (c"ompi_mpi_dblcplex", 16, Some(C64)),
        (c"ompi_mpi_complex16", 16, Some(C64)),
        (c"ompi_mpi_2real", 8, Some(TwoFloat)),
        (c"ompi_mpi_2dblprec", 16, Some(TwoDouble)),
        (c"ompi_mpi_2integer", 8, Some(TwoInt)),
    ]
};

/// Predefined pair types with padding: (element type, size, extent).
const PAIRS: &[(&CStr, ElemType, usize, usize)] = &[
    (c"ompi_mpi_double_int", ElemType::DoubleInt, 12, 16),
    (c"ompi_mpi_long_int", ElemType::LongInt, 12, 16),
    (c"ompi_mpi_short_int", ElemType::ShortInt, 6, 8),
    (c"ompi_mpi_longdbl_int", ElemType::LongDoubleInt, 20, 32),
];

const OPS: &[(&CStr, Op)] = &[
    (c"ompi_mpi_op_sum", Op::Sum),
    (c"ompi_mpi_op_min", Op::Min),
    (c"ompi_mpi_op_max", Op::Max),
    (c"ompi_mpi_op_prod", Op::Prod),
    (c"ompi_mpi_op_band", Op::Band),
    (c"ompi_mpi_op_bor", Op::Bor),
    (c"ompi_mpi_op_bxor", Op::Bxor),
    (c"ompi_mpi_op_land", Op::Land),
    (c"ompi_mpi_op_lor", Op::Lor),
    (c"ompi_mpi_op_lxor", Op::Lxor),
    (c"ompi_mpi_op_minloc", Op::MinLoc),
    (c"ompi_mpi_op_maxloc", Op::MaxLoc),
    (c"ompi_mpi_op_replace", Op::Replace),
    (c"ompi_mpi_op_no_op", Op::NoOp),
];

/// The predefined objects' addresses, resolved once.
struct Objects {
    types: HandleMap<Builtin>,
    pairs: HandleMap<(ElemType, usize, usize)>,
    ops: HandleMap<Op>,
}

/// No object resolved yet: what [`OBJECTS`] points to before `MPI_Init` chose this ABI
/// (nothing asks then; a lookup finds nothing).
static UNRESOLVED: Objects = Objects {
    types: HandleMap::EMPTY,
    pairs: HandleMap::EMPTY,
    ops: HandleMap::EMPTY,
};

/// The objects once resolved ([`UNRESOLVED`] before): the hot path reads a map's slot one
/// load after this pointer's, with no null test.
static OBJECTS: AtomicPtr<Objects> = AtomicPtr::new(&UNRESOLVED as *const Objects as *mut Objects);

/// The resolved objects (none before `MPI_Init` chose this ABI).
#[inline(always)]
fn objects() -> &'static Objects {
    // Acquire: pairs with the Release store of `build`, so the maps' contents are seen.
    let p = OBJECTS.load(Ordering::Acquire);
    // SAFETY: `UNRESOLVED` or the leaked `Objects` of `build`, never freed or written
    // again.
    unsafe { &*p }
}

#[inline(always)]
pub(crate) fn builtin(ty: Handle) -> Option<Builtin> {
    objects().types.get(ty)
}

fn padded_pair(ty: Handle) -> Option<(ElemType, usize, usize)> {
    objects().pairs.get(ty)
}

#[inline(always)]
pub(crate) fn op(op: Handle) -> Option<Op> {
    objects().ops.get(op)
}

/// Open MPI's codes of the classes (4.1 and 5.0; `MPI_ERR_PROC_ABORTED` is 5.0's).
fn error_code(class: ErrorClass) -> c_int {
    match class {
        ErrorClass::Rank => 6,
        ErrorClass::Arg => 13,
        ErrorClass::Count => 2,
        ErrorClass::Disp => 26,
        ErrorClass::Size => 49,
        ErrorClass::Type => 3,
        ErrorClass::Op => 10,
        ErrorClass::Win => 53,
        ErrorClass::Assert => 22,
        ErrorClass::InfoValue => 33,
        ErrorClass::NoMem => 39,
        ErrorClass::RmaSync => 47,
        ErrorClass::RmaRange => 68,
        ErrorClass::RmaAttach => 69,
        ErrorClass::RmaShared => 71,
        ErrorClass::RmaFlavor => 70,
        ErrorClass::UnsupportedOperation => 52,
        ErrorClass::ProcAborted => 74,
        _ => 16,
    }
}

const COMBINERS: &[(c_int, Combiner)] = &[
    (0, Combiner::Named),
    (1, Combiner::Dup),
    (2, Combiner::Contiguous),
    (3, Combiner::Vector),
    (5, Combiner::Hvector),
    (6, Combiner::Indexed),
    (8, Combiner::Hindexed),
    (9, Combiner::IndexedBlock),
    (11, Combiner::Struct),
    (12, Combiner::Subarray),
    (13, Combiner::Darray),
    (17, Combiner::Resized),
    (18, Combiner::HindexedBlock),
];

/// Open MPI's ABI, its predefined handles resolved in the process (the name of the first
/// symbol missing otherwise).
pub fn abi() -> Result<&'static Abi, String> {
    static ABI: OnceLock<Result<&'static Abi, String>> = OnceLock::new();
    ABI.get_or_init(build).clone()
}

fn build() -> Result<&'static Abi, String> {
    let mut types = Vec::new();
    for &(name, size, elem) in TYPES {
        types.push((object(name)?, Builtin { size, elem }));
    }
    let mut pairs = Vec::new();
    for &(name, e, size, extent) in PAIRS {
        pairs.push((object(name)?, (e, size, extent)));
    }
    let mut ops = Vec::new();
    for &(name, o) in OPS {
        ops.push((object(name)?, o));
    }
    let objects = Box::leak(Box::new(Objects {
        types: HandleMap::new(&types),
        pairs: HandleMap::new(&pairs),
        ops: HandleMap::new(&ops),
    }));
    // Release: publishes the maps to `objects` (once: `abi` builds at most once).
    OBJECTS.store(objects, Ordering::Release);
    let mut abi = constants();
    abi.comm_world = object(c"ompi_mpi_comm_world")?;
    abi.comm_null = object(c"ompi_mpi_comm_null")?;
    abi.info_null = object(c"ompi_mpi_info_null")?;
    abi.win_null = object(c"ompi_mpi_win_null")?;
    abi.group_null = object(c"ompi_mpi_group_null")?;
    abi.request_null = object(c"ompi_request_null")?;
    abi.errhandler_null = object(c"ompi_mpi_errhandler_null")?;
    abi.errors_are_fatal = object(c"ompi_mpi_errors_are_fatal")?;
    abi.errors_return = object(c"ompi_mpi_errors_return")?;
    abi.errors_abort = object(c"ompi_mpi_errors_abort").ok();
    abi.byte = object(c"ompi_mpi_byte")?;
    abi.uint8 = object(c"ompi_mpi_uint8_t")?;
    Ok(Box::leak(Box::new(abi)))
}

/// Open MPI's table with every predefined handle 0 (they are addresses in a process).
pub(super) fn constants() -> Abi {
    Abi {
        name: "Open MPI",
        kind: super::AbiKind::OpenMpi,
        handle_bytes: 8,
        max_info_key: 35,
        handle_mask: Handle::MAX,
        windows: super::standard::WINDOWS,
        comm_world: 0,
        comm_null: 0,
        info_null: 0,
        win_null: 0,
        group_null: 0,
        request_null: 0,
        errhandler_null: 0,
        errors_are_fatal: 0,
        errors_return: 0,
        errors_abort: None,
        byte: 0,
        uint8: 0,
        status_ignore: 0,
        // MPI_SOURCE, MPI_TAG, MPI_ERROR, _cancelled, _ucount.
        status: StatusLayout { source: 0, tag: 4 },
        proc_null: -2,
        any_source: -1,
        any_tag: -1,
        undefined: -32766,
        comm_type_shared: 0,
        keyval_invalid: -1,
        lock_exclusive: 1,
        lock_shared: 2,
        // NOCHECK, NOSTORE, NOPUT, NOPRECEDE, NOSUCCEED.
        modes: [1, 8, 4, 2, 16],
        flavors: [1, 2, 3, 4],
        win_unified: 0,
        win_attrs: [7, 8, 9, 10, 11],
        threads: [0, 1, 2, 3],
        combiners: COMBINERS,
        order_fortran: 1,
        distribute_block: 0,
        distribute_cyclic: 1,
        distribute_dflt_darg: -1,
        err: ErrCodes {
            arg: 13,
            count: 2,
            other: 16,
            win: 53,
            type_: 3,
            comm: 5,
            group: 9,
            locktype: 37,
            assert: 22,
            disp: 26,
            keyval: 36,
            size: 49,
            rma_flavor: 70,
        },
        error_code,
        builtin,
        padded_pair,
        op,
    }
}
