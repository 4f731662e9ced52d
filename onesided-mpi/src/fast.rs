//! The hot path of the calls a latency-bound program makes millions of times: `MPI_Put`,
//! `MPI_Get`, `MPI_Accumulate`, `MPI_Fetch_and_op`, `MPI_Compare_and_swap` and the flushes,
//! on one of our windows, with predefined element types, positive counts, a real target
//! and a displacement ≥ 0 — what nearly every such call is.
//!
//! Each function here takes the export's raw arguments and either finishes the call (its
//! return code) or returns `None` before it touched anything, and the export takes the
//! general path (`calls`), which checks every argument in MPI's order. A call finished
//! here goes straight to the typed operation of the window ([`RawWindow::put`],
//! [`RawWindow::fetch_and_op_elems`] …): one read of the ABI, one of the window table, no
//! byte selections, no run-time element dispatch inside onesided. An error of the
//! operation itself goes to the window's error handler as on the general path.
//!
//! Panics: the general path runs inside `catch_unwind` and ends the job through the host's
//! `MPI_Abort`; a panic here (none is expected: these are the operations' own checks)
//! unwinds into the `extern "C"` export, which aborts the process, and the launcher ends
//! the job.

use std::os::raw::{c_int, c_void};

#[cfg(doc)]
use onesided::RawWindow;
use onesided::{AccElement, ElemType, Op};

use crate::abi::{self, Handle, MPI_Aint};
use crate::calls::Failure;
use crate::state::{self, EntryRef};

/// The window behind `win` (a raw export argument) when it is one of ours and not a
/// memory-handle window; the ABI's handle mask applied.
#[inline(always)]
fn window(win: Handle) -> Option<EntryRef> {
    let e = state::window(win & abi::abi().handle_mask)?;
    e.mem.is_none().then_some(e)
}

/// The return code of `result` on window `e`: success, or the error through the window's
/// handler (as `calls` reports it).
#[inline(always)]
fn code(name: &'static str, e: EntryRef, result: onesided::Result<()>) -> c_int {
    match result {
        Ok(()) => abi::MPI_SUCCESS,
        Err(err) => crate::exports::fail(name, Failure::Window(e, err)),
    }
}

/// The bytes `count` elements of predefined datatype `ty` (a raw argument) take, when the
/// count is positive.
#[inline(always)]
fn bytes_of(count: c_int, ty: Handle) -> Option<(usize, abi::Builtin)> {
    if count <= 0 {
        return None;
    }
    let b = abi::builtin(ty & abi::abi().handle_mask)?;
    Some((count as usize * b.size, b))
}

/// The same predefined datatype and count on both sides (the only transfer the hot path
/// takes): its bytes and type.
#[inline(always)]
fn same_sides(
    o_count: c_int,
    o_type: Handle,
    t_count: c_int,
    t_type: Handle,
) -> Option<(usize, abi::Builtin)> {
    let mask = abi::abi().handle_mask;
    if o_count != t_count || o_type & mask != t_type & mask {
        return None;
    }
    bytes_of(o_count, o_type)
}

/// A real target rank and a displacement ≥ 0, as indices.
#[inline(always)]
fn place(target: c_int, t_disp: MPI_Aint) -> Option<(usize, usize)> {
    Some((usize::try_from(target).ok()?, usize::try_from(t_disp).ok()?))
}

/// `MPI_Put`.
///
/// # Safety
/// The C caller's arguments, as MPI specifies them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn put(
    origin: *const c_void,
    o_count: c_int,
    o_type: Handle,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: c_int,
    t_type: Handle,
    win: Handle,
) -> Option<c_int> {
    let (target, disp) = place(target, t_disp)?;
    let (n, _) = same_sides(o_count, o_type, t_count, t_type)?;
    let e = window(win)?;
    // SAFETY: the caller's origin buffer of `n` bytes (MPI's contract), non-empty.
    let src = unsafe { std::slice::from_raw_parts(origin.cast::<u8>(), n) };
    let r = e.win.put(src, target, disp);
    Some(code("MPI_Put", e, r))
}

/// `MPI_Get`.
///
/// # Safety
/// The C caller's arguments, as MPI specifies them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn get(
    origin: *mut c_void,
    o_count: c_int,
    o_type: Handle,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: c_int,
    t_type: Handle,
    win: Handle,
) -> Option<c_int> {
    let (target, disp) = place(target, t_disp)?;
    let (n, _) = same_sides(o_count, o_type, t_count, t_type)?;
    let e = window(win)?;
    // SAFETY: the caller's origin buffer of `n` bytes (MPI's contract), non-empty.
    let dst = unsafe { std::slice::from_raw_parts_mut(origin.cast::<u8>(), n) };
    let r = e.win.get(dst, target, disp);
    Some(code("MPI_Get", e, r))
}

/// Runs `$body` with `$t` the Rust type of the scalar element type `$e` (integers and
/// reals; every other type: `None`, the general path).
macro_rules! with_scalar {
    ($e:expr, $t:ident => $body:expr) => {
        match $e {
            ElemType::I8 => {
                type $t = i8;
                $body
            }
            ElemType::I16 => {
                type $t = i16;
                $body
            }
            ElemType::I32 => {
                type $t = i32;
                $body
            }
            ElemType::I64 => {
                type $t = i64;
                $body
            }
            ElemType::U8 => {
                type $t = u8;
                $body
            }
            ElemType::U16 => {
                type $t = u16;
                $body
            }
            ElemType::U32 => {
                type $t = u32;
                $body
            }
            ElemType::U64 => {
                type $t = u64;
                $body
            }
            ElemType::F32 => {
                type $t = f32;
                $body
            }
            ElemType::F64 => {
                type $t = f64;
                $body
            }
            _ => None,
        }
    };
}

/// The element type and operation of an accumulate the hot path takes: a predefined
/// operation but `MPI_NO_OP` (whose origin buffer may be NULL). One MPI does not define
/// on the type is the typed operation's error, as on the general path.
#[inline(always)]
fn acc_op(b: abi::Builtin, op: Handle) -> Option<(ElemType, Op)> {
    let e = b.elem?;
    let op = abi::op(op & abi::abi().handle_mask)?;
    (op != Op::NoOp).then_some((e, op))
}

/// `MPI_Accumulate`.
///
/// # Safety
/// The C caller's arguments, as MPI specifies them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn accumulate(
    origin: *const c_void,
    o_count: c_int,
    o_type: Handle,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: c_int,
    t_type: Handle,
    op: Handle,
    win: Handle,
) -> Option<c_int> {
    let (target, disp) = place(target, t_disp)?;
    let (_, b) = same_sides(o_count, o_type, t_count, t_type)?;
    let (elem, op) = acc_op(b, op)?;
    let e = window(win)?;
    with_scalar!(elem, T => {
        // SAFETY: the caller's `o_count` elements of `T` (MPI's contract); C's alignment
        // of its type, which `accumulate_elems` reads as `T`.
        let origin = unsafe { typed_slice::<T>(origin, o_count as usize)? };
        let r = e.win.accumulate_elems::<T>(origin, target, disp, op);
        Some(code("MPI_Accumulate", e, r))
    })
}

/// `count` elements of `T` at `p`, if `p` is aligned for `T` (a misaligned buffer takes the
/// general path, which copies).
///
/// # Safety
/// `p` points to `count` readable elements of `T`'s size.
#[inline(always)]
unsafe fn typed_slice<'a, T: AccElement>(p: *const c_void, count: usize) -> Option<&'a [T]> {
    let p = p.cast::<T>();
    if !p.is_aligned() {
        return None;
    }
    // SAFETY: aligned, and `count` elements by the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(p, count) })
}

/// One element of `T` read from `p` (any alignment).
///
/// # Safety
/// `p` points to one readable element of `T`'s size.
#[inline(always)]
unsafe fn read<T: AccElement>(p: *const c_void) -> T {
    // SAFETY: by the caller's contract; `T` is Pod.
    unsafe { p.cast::<T>().read_unaligned() }
}

/// `MPI_Fetch_and_op`.
///
/// # Safety
/// The C caller's arguments, as MPI specifies them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn fetch_and_op(
    origin: *const c_void,
    result: *mut c_void,
    ty: Handle,
    target: c_int,
    t_disp: MPI_Aint,
    op: Handle,
    win: Handle,
) -> Option<c_int> {
    let (target, disp) = place(target, t_disp)?;
    let (_, b) = bytes_of(1, ty)?;
    let (elem, op) = acc_op(b, op)?;
    let e = window(win)?;
    with_scalar!(elem, T => {
        // SAFETY: the caller's one element (MPI's contract).
        let value = unsafe { read::<T>(origin) };
        let r = e.win.fetch_and_op_elems::<T>(value, target, disp, op).map(|old| {
            // SAFETY: the caller's result element (MPI's contract).
            unsafe { result.cast::<T>().write_unaligned(old) }
        });
        Some(code("MPI_Fetch_and_op", e, r))
    })
}

/// `MPI_Compare_and_swap`.
///
/// # Safety
/// The C caller's arguments, as MPI specifies them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn compare_and_swap(
    origin: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    ty: Handle,
    target: c_int,
    t_disp: MPI_Aint,
    win: Handle,
) -> Option<c_int> {
    let (target, disp) = place(target, t_disp)?;
    let (_, b) = bytes_of(1, ty)?;
    let elem = b.elem.filter(|e| e.is_integer())?;
    let e = window(win)?;
    with_scalar!(elem, T => {
        // SAFETY: the caller's elements (MPI's contract).
        let (value, expected) = unsafe { (read::<T>(origin), read::<T>(compare)) };
        let r = e
            .win
            .compare_and_swap_elems::<T>(value, expected, target, disp)
            .map(|old| {
                // SAFETY: the caller's result element (MPI's contract).
                unsafe { result.cast::<T>().write_unaligned(old) }
            });
        Some(code("MPI_Compare_and_swap", e, r))
    })
}

/// `MPI_Win_flush`.
///
/// # Safety
/// None (no pointer is read); `unsafe` for the uniform signature of the hot path.
#[inline(always)]
pub(crate) unsafe fn flush(rank: c_int, win: Handle) -> Option<c_int> {
    let target = usize::try_from(rank).ok()?;
    let e = window(win)?;
    let r = e.win.flush(target);
    Some(code("MPI_Win_flush", e, r))
}

/// `MPI_Win_flush_local`.
///
/// # Safety
/// None (no pointer is read); `unsafe` for the uniform signature of the hot path.
#[inline(always)]
pub(crate) unsafe fn flush_local(rank: c_int, win: Handle) -> Option<c_int> {
    let target = usize::try_from(rank).ok()?;
    let e = window(win)?;
    let r = e.win.flush_local(target);
    Some(code("MPI_Win_flush_local", e, r))
}
