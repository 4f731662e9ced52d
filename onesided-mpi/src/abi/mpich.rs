//! The MPICH ABI (MPICH 4.x and 5.x `mpi.h`; the ABI of Intel MPI, MVAPICH and Cray MPICH):
//! the constants of `mpi.h` this library reads or returns, error codes, and the encoding of
//! our own window handles.
//!
//! Handles are `int`. Bits 31–30 are the kind (1 builtin, 2 direct, 3 indirect) and bits
//! 29–26 the object (8: window); MPICH's windows are `0xa0000000 | index`. Ours are
//! builtin-kind window handles, `0x60000000 | index`, a pattern MPICH never issues: a stray
//! handle of either library can never pass for one of the other's.

use std::os::raw::c_int;

use onesided::{ElemType, ErrorClass, Op};

use super::{Abi, Builtin, Combiner, ErrCodes, Handle, StatusLayout, WindowEncoding};

/// `MPI_SUCCESS`.
pub const MPI_SUCCESS: c_int = 0;
/// `MPI_ERRORS_ARE_FATAL`.
pub const MPI_ERRORS_ARE_FATAL: Handle = 0x5400_0000;
/// `MPI_ERRORS_RETURN`.
pub const MPI_ERRORS_RETURN: Handle = 0x5400_0001;
/// `MPI_ERRORS_ABORT`.
pub const MPI_ERRORS_ABORT: Handle = 0x5400_0003;
/// `MPI_ERR_ARG`.
pub const MPI_ERR_ARG: c_int = 12;
/// `MPI_ERR_COUNT`.
pub const MPI_ERR_COUNT: c_int = 2;
/// `MPI_KEYVAL_INVALID`.
pub const MPI_KEYVAL_INVALID: c_int = 0x2400_0000;
/// `MPI_PROC_NULL`: a target rank that makes a communication call a no-op.
pub const MPI_PROC_NULL: c_int = -1;
/// `MPI_ERR_OTHER`.
pub const MPI_ERR_OTHER: c_int = 15;
/// `MPI_ERR_WIN`.
pub const MPI_ERR_WIN: c_int = 45;
/// `MPI_ERR_TYPE`.
pub const MPI_ERR_TYPE: c_int = 3;
/// `MPI_ERR_COMM`.
pub const MPI_ERR_COMM: c_int = 5;
/// `MPI_ERR_GROUP`.
pub const MPI_ERR_GROUP: c_int = 8;
/// `MPI_ERR_LOCKTYPE`.
pub const MPI_ERR_LOCKTYPE: c_int = 47;
/// `MPI_ERR_ASSERT`.
pub const MPI_ERR_ASSERT: c_int = 53;
/// `MPI_ERR_DISP`.
pub const MPI_ERR_DISP: c_int = 52;
/// `MPI_ERR_KEYVAL`.
pub const MPI_ERR_KEYVAL: c_int = 48;
/// `MPI_ERR_SIZE`.
pub const MPI_ERR_SIZE: c_int = 51;
/// `MPI_ERR_RMA_FLAVOR`.
pub const MPI_ERR_RMA_FLAVOR: c_int = 58;

/// `MPI_BYTE`.
pub const MPI_BYTE: Handle = 0x4c00_010d;
/// `MPI_UINT8_T`.
pub const MPI_UINT8_T: Handle = 0x4c00_013b;
/// `MPI_REQUEST_NULL`.
pub const MPI_REQUEST_NULL: Handle = 0x2c00_0000;
/// `MPI_ERRHANDLER_NULL`.
pub const MPI_ERRHANDLER_NULL: Handle = 0x1400_0000;
/// `MPI_STATUS_IGNORE` (`(MPI_Status *) 1`).
pub const MPI_STATUS_IGNORE: usize = 1;
/// `MPI_ANY_SOURCE`.
pub const MPI_ANY_SOURCE: c_int = -2;
/// `MPI_ANY_TAG`.
pub const MPI_ANY_TAG: c_int = -1;
/// `MPI_UNDEFINED`.
pub const MPI_UNDEFINED: c_int = -32766;
/// `MPI_COMM_TYPE_SHARED`.
pub const MPI_COMM_TYPE_SHARED: c_int = 1;
/// `MPI_COMM_WORLD`.
pub const MPI_COMM_WORLD: Handle = 0x4400_0000;
/// `MPI_COMM_NULL`.
pub const MPI_COMM_NULL: Handle = 0x0400_0000;
/// `MPI_INFO_NULL`.
pub const MPI_INFO_NULL: Handle = 0x1c00_0000;
/// `MPI_WIN_NULL`.
pub const MPI_WIN_NULL: Handle = 0x2000_0000;
/// `MPI_GROUP_NULL`.
pub const MPI_GROUP_NULL: Handle = 0x0800_0000;

/// `MPI_LOCK_EXCLUSIVE`.
pub const MPI_LOCK_EXCLUSIVE: c_int = 234;
/// `MPI_LOCK_SHARED`.
pub const MPI_LOCK_SHARED: c_int = 235;

/// `MPI_WIN_FLAVOR_CREATE` … `SHARED`.
pub const MPI_WIN_FLAVOR_CREATE: c_int = 1;
/// `MPI_WIN_FLAVOR_ALLOCATE`.
pub const MPI_WIN_FLAVOR_ALLOCATE: c_int = 2;
/// `MPI_WIN_FLAVOR_DYNAMIC`.
pub const MPI_WIN_FLAVOR_DYNAMIC: c_int = 3;
/// `MPI_WIN_FLAVOR_SHARED`.
pub const MPI_WIN_FLAVOR_SHARED: c_int = 4;
/// `MPI_WIN_UNIFIED`.
pub const MPI_WIN_UNIFIED: c_int = 2;

/// The window attribute keyvals (`MPI_WIN_BASE` …).
pub const MPI_WIN_BASE: c_int = 0x6600_0001;
/// `MPI_WIN_SIZE`.
pub const MPI_WIN_SIZE: c_int = 0x6600_0003;
/// `MPI_WIN_DISP_UNIT`.
pub const MPI_WIN_DISP_UNIT: c_int = 0x6600_0005;
/// `MPI_WIN_CREATE_FLAVOR`.
pub const MPI_WIN_CREATE_FLAVOR: c_int = 0x6600_0007;
/// `MPI_WIN_MODEL`.
pub const MPI_WIN_MODEL: c_int = 0x6600_0009;

/// The bits that mark one of our window handles.
const OUR_WINDOW: u32 = 0x6000_0000;
/// The index bits of a handle.
const INDEX_MASK: u32 = 0x03ff_ffff;

/// Our window handles: the marking bits, the index in the low bits.
pub(super) const WINDOWS: WindowEncoding = WindowEncoding {
    tag: OUR_WINDOW as Handle,
    slots: INDEX_MASK as Handle,
    shift: 0,
};

/// The MPI error code (a class is a valid code) of an error class.
fn error_code(class: ErrorClass) -> c_int {
    match class {
        ErrorClass::Rank => 6,
        ErrorClass::Arg => MPI_ERR_ARG,
        ErrorClass::Count => MPI_ERR_COUNT,
        ErrorClass::Disp => MPI_ERR_DISP,
        ErrorClass::Size => MPI_ERR_SIZE,
        ErrorClass::Type => MPI_ERR_TYPE,
        ErrorClass::Op => 9,
        ErrorClass::Win => MPI_ERR_WIN,
        ErrorClass::Assert => MPI_ERR_ASSERT,
        ErrorClass::InfoValue => 30,
        ErrorClass::NoMem => 34,
        ErrorClass::RmaSync => 50,
        ErrorClass::RmaRange => 55,
        ErrorClass::RmaAttach => 56,
        ErrorClass::RmaShared => 57,
        ErrorClass::RmaFlavor => 58,
        ErrorClass::UnsupportedOperation => 44,
        ErrorClass::ProcAborted => 76,
        _ => MPI_ERR_OTHER,
    }
}

/// The predefined datatype `ty`, if this library knows it (a derived one is `None`).
///
/// Every RMA call asks this of each of its datatypes: one table lookup by the handle's low
/// byte (unique among MPICH's builtin handles, checked when the table is built), the whole
/// handle compared, instead of the match of `builtin_by_value`.
#[inline]
pub fn builtin(ty: Handle) -> Option<Builtin> {
    let (handle, b) = BUILTINS[ty & 0xff];
    if handle as Handle == ty {
        b
    } else if ty == 0x8c00_0000 {
        builtin_by_value(ty)
    } else {
        None
    }
}

/// [`builtin`] of every `0x4c00_SSII` handle (size `SS`, index `II`), by index.
static BUILTINS: [(u32, Option<Builtin>); 256] = builtin_table();

const fn builtin_table() -> [(u32, Option<Builtin>); 256] {
    let mut table = [(0u32, None); 256];
    let mut size = 1u32;
    while size <= 0x20 {
        let mut index = 0u32;
        while index < 256 {
            let handle = 0x4c00_0000 | (size << 8) | index;
            if let Some(b) = builtin_by_value(handle as Handle) {
                // Two builtin handles sharing a low byte would need a bigger key.
                assert!(table[index as usize].1.is_none());
                table[index as usize] = (handle, Some(b));
            }
            index += 1;
        }
        size += 1;
    }
    table
}

/// [`builtin`] by matching every handle MPICH's `mpi.h` defines.
const fn builtin_by_value(ty: Handle) -> Option<Builtin> {
    use ElemType::*;
    let elem = match ty {
        0x4c00_0101 | 0x4c00_0118 | 0x4c00_0137 => Some(I8), // CHAR, SIGNED_CHAR, INT8_T
        0x4c00_0102 | 0x4c00_013b | 0x4c00_013f => Some(U8), // UNSIGNED_CHAR, UINT8_T, C_BOOL
        0x4c00_0133 => Some(U8),                             // CXX_BOOL
        // LOGICAL: gfortran's .true. is 1, .false. 0 — the logical ops of an int.
        0x4c00_041d => Some(I32),
        // BYTE: accumulates and compare-and-swap take it (MPI-4.1 §12.3.4 lists it for the
        // bitwise ops and CAS); MPICH applies every predefined op but MINLOC/MAXLOC to it
        // as a (signed) `char`, and so do we.
        0x4c00_010d => Some(I8),
        // PACKED, CHARACTER, WCHAR: moved as bytes; accumulates only replace them.
        0x4c00_010f | 0x4c00_011a | 0x4c00_040e => None,
        // COMPLEX, COMPLEX8, C_FLOAT_COMPLEX, CXX_FLOAT_COMPLEX
        0x4c00_081e | 0x4c00_0828 | 0x4c00_0840 | 0x4c00_0834 => Some(C32),
        // DOUBLE_COMPLEX, COMPLEX16, C_DOUBLE_COMPLEX, CXX_DOUBLE_COMPLEX
        0x4c00_1022 | 0x4c00_102a | 0x4c00_1041 | 0x4c00_1035 => Some(C64),
        0x4c00_100c => Some(LongDouble), // LONG_DOUBLE
        // C_LONG_DOUBLE_COMPLEX, CXX_LONG_DOUBLE_COMPLEX
        0x4c00_2042 | 0x4c00_2036 => Some(LongDoubleComplex),
        0x4c00_0816 | 0x4c00_0820 => Some(TwoInt), // 2INT, 2INTEGER
        0x4c00_0821 => Some(TwoFloat),             // 2REAL
        0x4c00_1023 => Some(TwoDouble),            // 2DOUBLE_PRECISION
        // FLOAT_INT: a direct object; 8 bytes, no padding.
        0x8c00_0000 => {
            return Some(Builtin {
                size: 8,
                elem: Some(FloatInt),
            })
        }
        0x4c00_012d => Some(I8),                // INTEGER1
        0x4c00_022f => Some(I16),               // INTEGER2
        0x4c00_041b | 0x4c00_0430 => Some(I32), // INTEGER, INTEGER4
        0x4c00_0831 => Some(I64),               // INTEGER8
        0x4c00_041c | 0x4c00_0427 => Some(F32), // REAL, REAL4
        0x4c00_081f | 0x4c00_0829 => Some(F64), // DOUBLE_PRECISION, REAL8
        0x4c00_0203 | 0x4c00_0238 => Some(I16), // SHORT, INT16_T
        0x4c00_0204 | 0x4c00_023c => Some(U16), // UNSIGNED_SHORT, UINT16_T
        0x4c00_0405 | 0x4c00_0439 => Some(I32), // INT, INT32_T
        0x4c00_0406 | 0x4c00_043d => Some(U32), // UNSIGNED, UINT32_T
        // LONG, LONG_LONG, INT64_T, AINT, OFFSET, COUNT
        0x4c00_0807 | 0x4c00_0809 | 0x4c00_083a | 0x4c00_0843 | 0x4c00_0844 | 0x4c00_0845 => {
            Some(I64)
        }
        0x4c00_0808 | 0x4c00_0819 | 0x4c00_083e => Some(U64), // UNSIGNED_LONG(_LONG), UINT64_T
        0x4c00_040a => Some(F32),                             // FLOAT
        0x4c00_080b => Some(F64),                             // DOUBLE
        _ => return None,
    };
    // Bits 8–15 of a builtin handle are its size in bytes.
    Some(Builtin {
        size: ((ty as u32 >> 8) & 0xff) as usize,
        elem,
    })
}

/// A predefined pair type whose C struct has padding (`MPI_DOUBLE_INT`, `MPI_LONG_INT`,
/// `MPI_SHORT_INT`, `MPI_LONG_DOUBLE_INT`): its element type, `MPI_Type_size` and extent.
/// Put and get move only the data bytes; accumulates combine whole structs.
pub fn padded_pair(ty: Handle) -> Option<(ElemType, usize, usize)> {
    Some(match ty {
        0x8c00_0001 => (ElemType::DoubleInt, 12, 16),
        0x8c00_0002 => (ElemType::LongInt, 12, 16),
        0x8c00_0003 => (ElemType::ShortInt, 6, 8),
        0x8c00_0004 => (ElemType::LongDoubleInt, 20, 32),
        _ => return None,
    })
}

/// The accumulate op of an `MPI_Op` (`None`: not one RMA allows, e.g. a user op).
#[inline]
pub fn op(op: Handle) -> Option<Op> {
    Some(match op {
        0x5800_0001 => Op::Max,
        0x5800_0002 => Op::Min,
        0x5800_0003 => Op::Sum,
        0x5800_0004 => Op::Prod,
        0x5800_0005 => Op::Land,
        0x5800_0006 => Op::Band,
        0x5800_0007 => Op::Lor,
        0x5800_0008 => Op::Bor,
        0x5800_0009 => Op::Lxor,
        0x5800_000a => Op::Bxor,
        0x5800_000b => Op::MinLoc,
        0x5800_000c => Op::MaxLoc,
        0x5800_000d => Op::Replace,
        0x5800_000e => Op::NoOp,
        _ => return None,
    })
}

/// MPICH's combiner values (`mpi.h`).
const COMBINERS: &[(c_int, Combiner)] = &[
    (1, Combiner::Named),
    (2, Combiner::Dup),
    (3, Combiner::Contiguous),
    (4, Combiner::Vector),
    (6, Combiner::Hvector),
    (7, Combiner::Indexed),
    (9, Combiner::Hindexed),
    (10, Combiner::IndexedBlock),
    (12, Combiner::Struct),
    (13, Combiner::Subarray),
    (14, Combiner::Darray),
    (18, Combiner::Resized),
    (19, Combiner::HindexedBlock),
];

/// The MPICH ABI.
pub static ABI: Abi = Abi {
    name: "MPICH",
    kind: super::AbiKind::Mpich,
    handle_bytes: 4,
    max_info_key: 255,
    handle_mask: 0xffff_ffff,
    windows: WINDOWS,
    comm_world: MPI_COMM_WORLD,
    comm_null: MPI_COMM_NULL,
    info_null: MPI_INFO_NULL,
    win_null: MPI_WIN_NULL,
    group_null: MPI_GROUP_NULL,
    request_null: MPI_REQUEST_NULL,
    errhandler_null: MPI_ERRHANDLER_NULL,
    errors_are_fatal: MPI_ERRORS_ARE_FATAL,
    errors_return: MPI_ERRORS_RETURN,
    errors_abort: Some(MPI_ERRORS_ABORT),
    byte: MPI_BYTE,
    uint8: MPI_UINT8_T,
    status_ignore: MPI_STATUS_IGNORE,
    // count_lo, count_hi_and_cancelled, MPI_SOURCE, MPI_TAG, MPI_ERROR.
    status: StatusLayout { source: 8, tag: 12 },
    proc_null: MPI_PROC_NULL,
    any_source: MPI_ANY_SOURCE,
    any_tag: MPI_ANY_TAG,
    undefined: MPI_UNDEFINED,
    comm_type_shared: MPI_COMM_TYPE_SHARED,
    keyval_invalid: MPI_KEYVAL_INVALID,
    lock_exclusive: MPI_LOCK_EXCLUSIVE,
    lock_shared: MPI_LOCK_SHARED,
    modes: [1024, 2048, 4096, 8192, 16384],
    flavors: [
        MPI_WIN_FLAVOR_CREATE,
        MPI_WIN_FLAVOR_ALLOCATE,
        MPI_WIN_FLAVOR_DYNAMIC,
        MPI_WIN_FLAVOR_SHARED,
    ],
    win_unified: MPI_WIN_UNIFIED,
    win_attrs: [
        MPI_WIN_BASE,
        MPI_WIN_SIZE,
        MPI_WIN_DISP_UNIT,
        MPI_WIN_CREATE_FLAVOR,
        MPI_WIN_MODEL,
    ],
    threads: [0, 1, 2, 3],
    combiners: COMBINERS,
    order_fortran: 57,
    distribute_block: 121,
    distribute_cyclic: 122,
    distribute_dflt_darg: -49767,
    err: ErrCodes {
        arg: MPI_ERR_ARG,
        count: MPI_ERR_COUNT,
        other: MPI_ERR_OTHER,
        win: MPI_ERR_WIN,
        type_: MPI_ERR_TYPE,
        comm: MPI_ERR_COMM,
        group: MPI_ERR_GROUP,
        locktype: MPI_ERR_LOCKTYPE,
        assert: MPI_ERR_ASSERT,
        disp: MPI_ERR_DISP,
        keyval: MPI_ERR_KEYVAL,
        size: MPI_ERR_SIZE,
        rma_flavor: MPI_ERR_RMA_FLAVOR,
    },
    error_code,
    builtin,
    padded_pair,
    op,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_window_handles_never_alias_mpichs() {
        let (handle, index) = (super::super::window_handle, super::super::window_index);
        for i in [0, 1, 77, INDEX_MASK as usize] {
            assert_eq!(index(handle(i)), Some(i));
        }
        // MPICH's window handles (direct 0xa0000000 | i, indirect 0xe0000000 | i) and
        // MPI_WIN_NULL are not ours.
        for theirs in [0xa000_0000u32, 0xa000_0005, 0xe000_0001, 0x2000_0000, 0] {
            assert_eq!(index(theirs as Handle), None);
        }
    }

    #[test]
    fn builtin_sizes_come_from_the_handle() {
        assert_eq!(builtin(0x4c00_080b).unwrap().size, 8); // DOUBLE
        assert_eq!(builtin(0x4c00_0405).unwrap().elem, Some(ElemType::I32)); // INT
        assert_eq!(builtin(0x4c00_010d).unwrap().elem, Some(ElemType::I8)); // BYTE
        assert_eq!(builtin(0x4c00_010f).unwrap().elem, None); // PACKED
        let float_int = builtin(0x8c00_0000u32 as Handle).unwrap();
        assert_eq!(
            (float_int.size, float_int.elem),
            (8, Some(ElemType::FloatInt))
        );
        assert_eq!(builtin(0x4c00_2042).unwrap().size, 32); // C_LONG_DOUBLE_COMPLEX
        assert!(builtin(0x8c00_0001u32 as Handle).is_none()); // DOUBLE_INT: padded
        assert_eq!(
            padded_pair(0x8c00_0001u32 as Handle),
            Some((ElemType::DoubleInt, 12, 16))
        );
        for (e, data) in [(ElemType::DoubleInt, 12), (ElemType::ShortInt, 6)] {
            assert_eq!(super::super::pair_data_size(e), Some(data));
            assert!(data < e.size());
        }
    }
}
