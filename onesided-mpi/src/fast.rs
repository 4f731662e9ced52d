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
//! byte selections, no run-time element dispatch inside onesided. Each function is generic
//! over the ABI's [`Lookups`] (handle mask, window encoding, predefined datatypes and
//! operations) and over whether the process's calls may overlap (`SHARED`): the export
//! compiles one copy per ABI and branches once on the process's; the copy for calls that
//! may overlap (`MPI_THREAD_MULTIPLE`, which takes a counted reference to the window, a
//! call) sits out of line, and the other reads the window table directly. An error of the
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

use crate::abi::{self, Handle, Lookups, MPI_Aint};
use crate::calls::Failure;
use crate::state::{self, EntryRef};

/// The window behind `win` (a raw export argument) when it is one of ours and not a
/// memory-handle window; the ABI's handle mask applied. `SHARED`: the process's calls may
/// overlap (`MPI_THREAD_MULTIPLE`, [`state::concurrent_calls`]), so the entry is a counted
/// reference; else a borrowed one, without a call.
#[inline(always)]
fn window<L: Lookups, const SHARED: bool>(win: Handle) -> Option<EntryRef> {
    let win = win & L::MASK;
    let e = match L::WINDOWS.first_slot_of(win) {
        // The first chunk's slots, the windows of nearly every program: one compare and
        // one load from the handle to the entry.
        Some(slot) if !SHARED => state::first_window(slot)?,
        _ => state::window_at_as(SHARED, L::window_index(win)?)?,
    };
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
fn bytes_of<L: Lookups>(count: c_int, ty: Handle) -> Option<(usize, abi::Builtin)> {
    if count <= 0 {
        return None;
    }
    let b = L::builtin(ty & L::MASK)?;
    Some((count as usize * b.size, b))
}

/// The same predefined datatype and count on both sides (the only transfer the hot path
/// takes): its bytes and type.
#[inline(always)]
fn same_sides<L: Lookups>(
    o_count: c_int,
    o_type: Handle,
    t_count: c_int,
    t_type: Handle,
) -> Option<(usize, abi::Builtin)> {
    if o_count != t_count || o_type & L::MASK != t_type & L::MASK {
        return None;
    }
    bytes_of::<L>(o_count, o_type)
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
pub(crate) unsafe fn put<L: Lookups, const SHARED: bool>(
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
    let (n, _) = same_sides::<L>(o_count, o_type, t_count, t_type)?;
    let e = window::<L, SHARED>(win)?;
    // SAFETY: the caller's origin buffer of `n` bytes (MPI's contract), non-empty.
    let src = unsafe { std::slice::from_raw_parts(origin.cast::<u8>(), n) };
    if e.win.put_if_direct(src, target, disp) {
        return Some(abi::MPI_SUCCESS);
    }
    Some(put_in_full(e, src, target, disp))
}

/// [`put`] past its common case (out of line: the hot frame stays small).
#[inline(never)]
fn put_in_full(e: EntryRef, src: &[u8], target: usize, disp: usize) -> c_int {
    let r = e.win.put(src, target, disp);
    code("MPI_Put", e, r)
}

/// `MPI_Get`.
///
/// # Safety
/// The C caller's arguments, as MPI specifies them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn get<L: Lookups, const SHARED: bool>(
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
    let (n, _) = same_sides::<L>(o_count, o_type, t_count, t_type)?;
    let e = window::<L, SHARED>(win)?;
    // SAFETY: the caller's origin buffer of `n` bytes (MPI's contract), non-empty.
    let dst = unsafe { std::slice::from_raw_parts_mut(origin.cast::<u8>(), n) };
    if e.win.get_if_direct(dst, target, disp) {
        return Some(abi::MPI_SUCCESS);
    }
    Some(get_in_full(e, dst, target, disp))
}

/// [`get`] past its common case.
#[inline(never)]
fn get_in_full(e: EntryRef, dst: &mut [u8], target: usize, disp: usize) -> c_int {
    let r = e.win.get(dst, target, disp);
    code("MPI_Get", e, r)
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
fn acc_op<L: Lookups>(b: abi::Builtin, op: Handle) -> Option<(ElemType, Op)> {
    let e = b.elem?;
    let op = L::op(op & L::MASK)?;
    (op != Op::NoOp).then_some((e, op))
}

/// `MPI_Accumulate`.
///
/// # Safety
/// The C caller's arguments, as MPI specifies them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn accumulate<L: Lookups, const SHARED: bool>(
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
    let (_, b) = same_sides::<L>(o_count, o_type, t_count, t_type)?;
    let (elem, op) = acc_op::<L>(b, op)?;
    let e = window::<L, SHARED>(win)?;
    with_scalar!(elem, T => {
        // An origin not aligned for `T` takes the general path, which copies it (checked
        // here: the typed call then answers for the export, with no fallback after it).
        if !origin.cast::<T>().is_aligned() {
            return None;
        }
        // SAFETY: the caller's elements (MPI's contract), aligned for `T`.
        Some(unsafe { accumulate_typed::<T>(e, origin, o_count as usize, target, disp, op) })
    })
}

/// [`accumulate`] once the element type is known (see [`fetch_and_op_typed`]).
///
/// # Safety
/// `origin` points to `count` elements of `T`, aligned for `T`.
#[inline(always)]
unsafe fn accumulate_typed<T: AccElement>(
    e: EntryRef,
    origin: *const c_void,
    count: usize,
    target: usize,
    disp: usize,
    op: Op,
) -> c_int {
    // SAFETY: the caller's `count` elements of `T` (MPI's contract), aligned (checked by
    // the caller): C's alignment of its type, which `accumulate_elems` reads as `T`.
    let origin = unsafe { std::slice::from_raw_parts(origin.cast::<T>(), count) };
    if e.win.accumulate_if_direct::<T>(origin, target, disp, op) {
        return abi::MPI_SUCCESS;
    }
    accumulate_in_full::<T>(e, origin, target, disp, op)
}

/// [`accumulate`] past its common case.
#[inline(never)]
fn accumulate_in_full<T: AccElement>(
    e: EntryRef,
    origin: &[T],
    target: usize,
    disp: usize,
    op: Op,
) -> c_int {
    let r = e.win.accumulate_elems::<T>(origin, target, disp, op);
    code("MPI_Accumulate", e, r)
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
pub(crate) unsafe fn fetch_and_op<L: Lookups, const SHARED: bool>(
    origin: *const c_void,
    result: *mut c_void,
    ty: Handle,
    target: c_int,
    t_disp: MPI_Aint,
    op: Handle,
    win: Handle,
) -> Option<c_int> {
    let (target, disp) = place(target, t_disp)?;
    let (_, b) = bytes_of::<L>(1, ty)?;
    let (elem, op) = acc_op::<L>(b, op)?;
    let e = window::<L, SHARED>(win)?;
    // SAFETY: the caller's elements (MPI's contract).
    with_scalar!(elem, T => Some(unsafe { fetch_and_op_typed::<T>(e, origin, result, target, disp, op) }))
}

/// [`fetch_and_op`] once the element type is known. Inlined into the export's arm of each
/// element type: an out-of-line copy per type saved the export some frame but cost a
/// second frame on every call (25 instructions of accumulate and fetch_and_op, counted
/// with `scripts/cabi-instr.sh`).
///
/// # Safety
/// `origin` and `result` point to one element of `T` each (any alignment).
#[inline(always)]
unsafe fn fetch_and_op_typed<T: AccElement>(
    e: EntryRef,
    origin: *const c_void,
    result: *mut c_void,
    target: usize,
    disp: usize,
    op: Op,
) -> c_int {
    // SAFETY: the caller's one element (MPI's contract).
    let value = unsafe { read::<T>(origin) };
    let Some(old) = e.win.fetch_and_op_if_direct::<T>(value, target, disp, op) else {
        // SAFETY: the caller's result element.
        return unsafe { fetch_and_op_in_full::<T>(e, value, result, target, disp, op) };
    };
    // SAFETY: the caller's result element (MPI's contract).
    unsafe { result.cast::<T>().write_unaligned(old) };
    abi::MPI_SUCCESS
}

/// [`fetch_and_op`] past its common case, to its end (a tail call: nothing of the hot
/// frame lives across it): the call's return code.
///
/// # Safety
/// `result` points to one writable element of `T` (any alignment).
#[inline(never)]
unsafe fn fetch_and_op_in_full<T: AccElement>(
    e: EntryRef,
    value: T,
    result: *mut c_void,
    target: usize,
    disp: usize,
    op: Op,
) -> c_int {
    match e.win.fetch_and_op_elems::<T>(value, target, disp, op) {
        Ok(old) => {
            // SAFETY: by the caller's contract.
            unsafe { result.cast::<T>().write_unaligned(old) };
            abi::MPI_SUCCESS
        }
        Err(err) => code("MPI_Fetch_and_op", e, Err(err)),
    }
}

/// `MPI_Compare_and_swap`.
///
/// # Safety
/// The C caller's arguments, as MPI specifies them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn compare_and_swap<L: Lookups, const SHARED: bool>(
    origin: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    ty: Handle,
    target: c_int,
    t_disp: MPI_Aint,
    win: Handle,
) -> Option<c_int> {
    let (target, disp) = place(target, t_disp)?;
    let (_, b) = bytes_of::<L>(1, ty)?;
    let elem = b.elem.filter(|e| e.is_integer())?;
    let e = window::<L, SHARED>(win)?;
    with_scalar!(elem, T => {
        // SAFETY: the caller's elements (MPI's contract).
        let (value, expected) = unsafe { (read::<T>(origin), read::<T>(compare)) };
        let old = match e
            .win
            .compare_and_swap_if_direct::<T>(value, expected, target, disp)
        {
            Some(old) => old,
            None => match compare_and_swap_in_full::<T>(e, value, expected, target, disp) {
                Ok(old) => old,
                Err(rc) => return Some(rc),
            },
        };
        // SAFETY: the caller's result element (MPI's contract).
        unsafe { result.cast::<T>().write_unaligned(old) };
        Some(abi::MPI_SUCCESS)
    })
}

/// [`compare_and_swap`] past its common case: the previous value, or the call's return
/// code.
#[inline(never)]
fn compare_and_swap_in_full<T: AccElement>(
    e: EntryRef,
    value: T,
    expected: T,
    target: usize,
    disp: usize,
) -> Result<T, c_int> {
    match e
        .win
        .compare_and_swap_elems::<T>(value, expected, target, disp)
    {
        Ok(old) => Ok(old),
        Err(err) => Err(code("MPI_Compare_and_swap", e, Err(err))),
    }
}

/// `MPI_Win_flush`.
///
/// # Safety
/// None (no pointer is read); `unsafe` for the uniform signature of the hot path.
#[inline(always)]
pub(crate) unsafe fn flush<L: Lookups, const SHARED: bool>(
    rank: c_int,
    win: Handle,
) -> Option<c_int> {
    let target = usize::try_from(rank).ok()?;
    let e = window::<L, SHARED>(win)?;
    // Serialized calls (below MPI_THREAD_MULTIPLE): the fence only behind plain stores.
    let done = if SHARED {
        e.win.flush_if_quiet(target)
    } else {
        e.win.flush_if_quiet_serialized(target)
    };
    if done {
        return Some(abi::MPI_SUCCESS);
    }
    Some(flush_in_full(e, target))
}

/// [`flush`] past its common case.
#[inline(never)]
fn flush_in_full(e: EntryRef, target: usize) -> c_int {
    let r = e.win.flush(target);
    code("MPI_Win_flush", e, r)
}

/// `MPI_Win_flush_local`.
///
/// # Safety
/// None (no pointer is read); `unsafe` for the uniform signature of the hot path.
#[inline(always)]
pub(crate) unsafe fn flush_local<L: Lookups, const SHARED: bool>(
    rank: c_int,
    win: Handle,
) -> Option<c_int> {
    let target = usize::try_from(rank).ok()?;
    let e = window::<L, SHARED>(win)?;
    if e.win.flush_local_if_checked(target) {
        return Some(abi::MPI_SUCCESS);
    }
    Some(flush_local_in_full(e, target))
}

/// [`flush_local`] past its common case.
#[inline(never)]
fn flush_local_in_full(e: EntryRef, target: usize) -> c_int {
    let r = e.win.flush_local(target);
    code("MPI_Win_flush_local", e, r)
}
