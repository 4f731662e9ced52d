//! The MPI-5 standard ABI (`mpi_abi.h`, ABI version 1.0; MPICH 5's `libmpi_abi.so.1` and
//! `mpicc_abi`): handles are pointers, the predefined ones small constants below 0x1000;
//! integer constants are the header's enumerations; `MPI_Status` is three public `int`s
//! and five reserved ones.
//!
//! Our window handles are `0x7e00_0000_0000_000b | index << 4`: odd, so never the address of
//! an object the host allocated (every one is aligned), and far above the predefined
//! constants — a stray handle of either library can never pass for one of the other's.

use std::os::raw::c_int;

use onesided::{ElemType, ErrorClass, Op};

use super::{Abi, Builtin, Combiner, ErrCodes, Handle, StatusLayout, WindowEncoding};

/// Our window handles under a pointer ABI (Open MPI's too): `0x7e00_0000_0000_000b` with the
/// slot in the 36 bits above the low nibble.
pub(super) const WINDOWS: WindowEncoding = WindowEncoding {
    tag: 0x7e00_0000_0000_000b,
    slots: ((1 << INDEX_BITS) - 1) << 4,
    shift: 4,
};
/// Our windows' slot bits.
const INDEX_BITS: u32 = 36;

fn error_code(class: ErrorClass) -> c_int {
    match class {
        ErrorClass::Rank => 6,
        ErrorClass::Arg => 13,
        ErrorClass::Count => 2,
        ErrorClass::Disp => 26,
        ErrorClass::Size => 52,
        ErrorClass::Type => 3,
        ErrorClass::Op => 10,
        ErrorClass::Win => 56,
        ErrorClass::Assert => 22,
        ErrorClass::InfoValue => 33,
        ErrorClass::NoMem => 39,
        ErrorClass::RmaSync => 50,
        ErrorClass::RmaRange => 48,
        ErrorClass::RmaAttach => 46,
        ErrorClass::RmaShared => 49,
        ErrorClass::RmaFlavor => 57,
        ErrorClass::UnsupportedOperation => 55,
        ErrorClass::ProcAborted => 58,
        _ => 16,
    }
}

/// The predefined datatypes (`mpi_abi.h`'s values, 0x200–0x2ff).
#[inline]
pub(super) fn builtin(ty: Handle) -> Option<Builtin> {
    if (0x200..0x300).contains(&ty) {
        BUILTINS[ty - 0x200]
    } else {
        None
    }
}

static BUILTINS: [Option<Builtin>; 256] = builtin_table();

const fn builtin_table() -> [Option<Builtin>; 256] {
    use ElemType::*;
    const fn b(size: usize, elem: Option<ElemType>) -> Option<Builtin> {
        Some(Builtin { size, elem })
    }
    let mut t: [Option<Builtin>; 256] = [None; 256];
    t[0x01] = b(8, Some(I64)); // AINT
    t[0x02] = b(8, Some(I64)); // COUNT
    t[0x03] = b(8, Some(I64)); // OFFSET
    t[0x07] = b(1, None); // PACKED
    t[0x08] = b(2, Some(I16)); // SHORT
    t[0x09] = b(4, Some(I32)); // INT
    t[0x0a] = b(8, Some(I64)); // LONG
    t[0x0b] = b(8, Some(I64)); // LONG_LONG
    t[0x0c] = b(2, Some(U16)); // UNSIGNED_SHORT
    t[0x0d] = b(4, Some(U32)); // UNSIGNED
    t[0x0e] = b(8, Some(U64)); // UNSIGNED_LONG
    t[0x0f] = b(8, Some(U64)); // UNSIGNED_LONG_LONG
    t[0x10] = b(4, Some(F32)); // FLOAT
    t[0x12] = b(8, Some(C32)); // C_FLOAT_COMPLEX
    t[0x13] = b(8, Some(C32)); // CXX_FLOAT_COMPLEX
    t[0x14] = b(8, Some(F64)); // DOUBLE
    t[0x16] = b(16, Some(C64)); // C_DOUBLE_COMPLEX
    t[0x17] = b(16, Some(C64)); // CXX_DOUBLE_COMPLEX
                                // LOGICAL: gfortran's .true. is 1, .false. 0 — the logical ops of an int.
    t[0x18] = b(4, Some(I32));
    t[0x19] = b(4, Some(I32)); // INTEGER
    t[0x1a] = b(4, Some(F32)); // REAL
    t[0x1b] = b(8, Some(C32)); // COMPLEX
    t[0x1c] = b(8, Some(F64)); // DOUBLE_PRECISION
    t[0x1d] = b(16, Some(C64)); // DOUBLE_COMPLEX
    t[0x1e] = b(1, None); // CHARACTER
    t[0x20] = b(16, Some(LongDouble)); // LONG_DOUBLE (x87, 16 bytes on x86-64)
    t[0x24] = b(32, Some(LongDoubleComplex)); // C_LONG_DOUBLE_COMPLEX
    t[0x25] = b(32, Some(LongDoubleComplex)); // CXX_LONG_DOUBLE_COMPLEX
    t[0x28] = b(8, Some(FloatInt)); // FLOAT_INT: no padding
    t[0x2b] = b(8, Some(TwoInt)); // 2INT
    t[0x30] = b(8, Some(TwoFloat)); // 2REAL
    t[0x31] = b(16, Some(TwoDouble)); // 2DOUBLE_PRECISION
    t[0x32] = b(8, Some(TwoInt)); // 2INTEGER
    t[0x38] = b(1, Some(U8)); // C_BOOL
    t[0x39] = b(1, Some(U8)); // CXX_BOOL
    t[0x3c] = b(4, None); // WCHAR
    t[0x40] = b(1, Some(I8)); // INT8_T
    t[0x41] = b(1, Some(U8)); // UINT8_T
    t[0x43] = b(1, Some(I8)); // CHAR
    t[0x44] = b(1, Some(I8)); // SIGNED_CHAR
    t[0x45] = b(1, Some(U8)); // UNSIGNED_CHAR
                              // BYTE: as MPICH, a (signed) char to every predefined op but MINLOC/MAXLOC.
    t[0x47] = b(1, Some(I8));
    t[0x48] = b(2, Some(I16)); // INT16_T
    t[0x49] = b(2, Some(U16)); // UINT16_T
    t[0x50] = b(4, Some(I32)); // INT32_T
    t[0x51] = b(4, Some(U32)); // UINT32_T
    t[0x58] = b(8, Some(I64)); // INT64_T
    t[0x59] = b(8, Some(U64)); // UINT64_T
    t[0xc1] = b(1, Some(I8)); // INTEGER1
    t[0xc9] = b(2, Some(I16)); // INTEGER2
    t[0xd1] = b(4, Some(I32)); // INTEGER4
    t[0xd2] = b(4, Some(F32)); // REAL4
    t[0xd9] = b(8, Some(I64)); // INTEGER8
    t[0xda] = b(8, Some(F64)); // REAL8
    t[0xdb] = b(8, Some(C32)); // COMPLEX8
    t[0xe3] = b(16, Some(C64)); // COMPLEX16
    t
}

fn padded_pair(ty: Handle) -> Option<(ElemType, usize, usize)> {
    Some(match ty {
        0x229 => (ElemType::DoubleInt, 12, 16),
        0x22a => (ElemType::LongInt, 12, 16),
        0x22c => (ElemType::ShortInt, 6, 8),
        0x22d => (ElemType::LongDoubleInt, 20, 32),
        _ => return None,
    })
}

/// The predefined operations by handle − 0x20 (`MPI_SUM` 0x21 … `MPI_NO_OP` 0x3d):
/// a lookup on the hot path is one bounds check and one load.
const OPS: [Option<Op>; 32] = {
    let mut t = [None; 32];
    t[0x01] = Some(Op::Sum);
    t[0x02] = Some(Op::Min);
    t[0x03] = Some(Op::Max);
    t[0x04] = Some(Op::Prod);
    t[0x08] = Some(Op::Band);
    t[0x09] = Some(Op::Bor);
    t[0x0a] = Some(Op::Bxor);
    t[0x10] = Some(Op::Land);
    t[0x11] = Some(Op::Lor);
    t[0x12] = Some(Op::Lxor);
    t[0x18] = Some(Op::MinLoc);
    t[0x19] = Some(Op::MaxLoc);
    t[0x1c] = Some(Op::Replace);
    t[0x1d] = Some(Op::NoOp);
    t
};

#[inline(always)]
pub(super) fn op(op: Handle) -> Option<Op> {
    *OPS.get(op.wrapping_sub(0x20))?
}

const COMBINERS: &[(c_int, Combiner)] = &[
    (101, Combiner::Named),
    (102, Combiner::Dup),
    (103, Combiner::Contiguous),
    (104, Combiner::Vector),
    (105, Combiner::Hvector),
    (106, Combiner::Indexed),
    (107, Combiner::Hindexed),
    (108, Combiner::IndexedBlock),
    (109, Combiner::HindexedBlock),
    (110, Combiner::Struct),
    (111, Combiner::Subarray),
    (112, Combiner::Darray),
    (116, Combiner::Resized),
];

/// The MPI-5 standard ABI.
pub static ABI: Abi = Abi {
    name: "the MPI-5 standard ABI",
    kind: super::AbiKind::Standard,
    handle_bytes: 8,
    max_info_key: 255,
    handle_mask: Handle::MAX,
    windows: WINDOWS,
    comm_world: 0x101,
    comm_null: 0x100,
    info_null: 0x130,
    win_null: 0x110,
    group_null: 0x108,
    request_null: 0x180,
    errhandler_null: 0x140,
    errors_are_fatal: 0x141,
    errors_return: 0x143,
    errors_abort: Some(0x142),
    byte: 0x247,
    uint8: 0x241,
    status_ignore: 0,
    // MPI_SOURCE, MPI_TAG, MPI_ERROR, MPI_internal[5].
    status: StatusLayout { source: 0, tag: 4 },
    proc_null: -3,
    any_source: -1,
    any_tag: -2,
    undefined: -32766,
    comm_type_shared: 221,
    keyval_invalid: 0,
    lock_exclusive: 301,
    lock_shared: 302,
    // NOCHECK, NOSTORE, NOPUT, NOPRECEDE, NOSUCCEED.
    modes: [1024, 8192, 4096, 2048, 16384],
    flavors: [311, 312, 313, 314],
    win_unified: 321,
    win_attrs: [601, 603, 602, 604, 605],
    threads: [0, 1024, 2048, 4096],
    combiners: COMBINERS,
    order_fortran: 0xf,
    distribute_block: 17,
    distribute_cyclic: 18,
    distribute_dflt_darg: 19,
    err: ErrCodes {
        arg: 13,
        count: 2,
        other: 16,
        win: 56,
        type_: 3,
        comm: 5,
        group: 9,
        locktype: 37,
        assert: 22,
        disp: 26,
        keyval: 36,
        size: 52,
        rma_flavor: 57,
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
    fn our_window_handles_never_alias_predefined_or_allocated_handles() {
        let window_handle = |i: usize| WINDOWS.tag | (i << WINDOWS.shift & WINDOWS.slots);
        let window_index = |h: Handle| {
            (h & !WINDOWS.slots == WINDOWS.tag).then_some((h & WINDOWS.slots) >> WINDOWS.shift)
        };
        for i in [0usize, 1, 77, (1 << INDEX_BITS) - 1] {
            assert_eq!(window_index(window_handle(i)), Some(i));
            assert_eq!(window_handle(i) % 8, 3);
        }
        for theirs in [
            0usize,
            0x110,
            0x101,
            0x5555_0000_1000,
            0x7e00_0000_0000_0010,
        ] {
            assert_eq!(window_index(theirs), None);
        }
    }

    #[test]
    fn the_first_chunks_slots_are_read_from_the_handle_in_one_compare() {
        let window_handle = |i: usize| WINDOWS.tag | (i << WINDOWS.shift & WINDOWS.slots);
        for i in 0..=255usize {
            assert_eq!(WINDOWS.first_slot_of(window_handle(i)), Some(i as u8));
        }
        for h in [
            window_handle(256),
            window_handle(1 << 20),
            window_handle((1 << INDEX_BITS) - 1),
            0x7e00_0000_0000_0010,
            0,
        ] {
            assert_eq!(WINDOWS.first_slot_of(h), None, "{h:#x}");
        }
        let mpich = super::super::mpich::WINDOWS;
        let mpich_handle = |i: usize| mpich.tag | (i << mpich.shift & mpich.slots);
        assert_eq!(mpich.first_slot_of(mpich_handle(7)), Some(7));
        assert_eq!(mpich.first_slot_of(mpich_handle(256)), None);
    }

    #[test]
    fn every_predefined_operation_and_nothing_else() {
        let named = [
            (0x21, Op::Sum),
            (0x22, Op::Min),
            (0x23, Op::Max),
            (0x24, Op::Prod),
            (0x28, Op::Band),
            (0x29, Op::Bor),
            (0x2a, Op::Bxor),
            (0x30, Op::Land),
            (0x31, Op::Lor),
            (0x32, Op::Lxor),
            (0x38, Op::MinLoc),
            (0x39, Op::MaxLoc),
            (0x3c, Op::Replace),
            (0x3d, Op::NoOp),
        ];
        for h in 0..0x100 {
            let want = named.iter().find(|n| n.0 == h).map(|n| n.1);
            assert_eq!(op(h), want, "{h:#x}");
        }
        assert_eq!(op(Handle::MAX), None);
    }
}
