//! What each exported call does: check and translate its C arguments, then call the
//! untyped window ([`onesided::RawWindow`]). No protocol logic lives here.
//!
//! Every call returns `Ok(())` or a [`Failure`], which `exports` turns into an error code
//! through the right error handler: the window's for calls on a window, the
//! communicator's for window creation, `MPI_COMM_WORLD`'s where there is no valid window.

use std::borrow::Cow;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::Arc;

use onesided::{Assert, Comm, Error, Layout, LockType, RawWindow, WinInfo};

use crate::abi::{self, MPI_Aint, MPI_Comm, MPI_Datatype, MPI_Group, MPI_Info, MPI_Op, MPI_Win};
use crate::datatypes::{self, Selection};
use crate::host::host;
use crate::state::{self, Entry, EntryRef, UNIVERSE};

/// A failed call: where its error goes, and what it was.
pub(crate) enum Failure {
    /// A code the host's function returned after its own error handler ran: returned as is.
    Host(c_int),
    /// An error of a call on a valid window: the window's handler.
    Window(EntryRef, Error),
    /// The same with an error class of the C binding's own (an argument onesided's typed
    /// API cannot even express: a lock type, assert bits).
    WindowCode(EntryRef, c_int, String),
    /// An error of a call without a valid window (creation, an invalid handle): the
    /// communicator's handler.
    Comm(MPI_Comm, c_int, String),
    /// `MPI_Win_call_errhandler`: run the window's handler for `code`; the call itself
    /// succeeds when the handler returns.
    Raised(EntryRef, c_int),
    /// An error for window error handler `errhandler` of a window that is gone (a failed
    /// free), over `comm`.
    Handler {
        errhandler: abi::MPI_Errhandler,
        comm: MPI_Comm,
        err: Error,
    },
}

pub(crate) type CallResult = Result<(), Failure>;

/// The failure with MPI error `code` on window `win`.
pub(crate) fn window_code(win: MPI_Win, code: c_int, text: String) -> Failure {
    match entry(win) {
        Ok(e) => Failure::WindowCode(e, code, text),
        Err(f) => f,
    }
}

/// The window behind `win`, or the `MPI_ERR_WIN` failure.
pub(crate) fn entry(win: MPI_Win) -> Result<EntryRef, Failure> {
    state::window(win).ok_or_else(|| {
        Failure::Comm(
            abi::abi().comm_world,
            abi::abi().err.win,
            format!("invalid window handle {win:#x}"),
        )
    })
}

/// Runs `f` on the window behind `win`, its error to the window's handler. Windows made
/// from memory handles take only put, get, accumulate and flushes ([`on_target`]).
pub(crate) fn on_window(
    win: MPI_Win,
    f: impl FnOnce(&RawWindow) -> onesided::Result<()>,
) -> CallResult {
    let e = entry(win)?;
    not_memhandle(&e)?;
    match f(&e.win) {
        Ok(()) => Ok(()),
        Err(err) => Err(Failure::Window(e, err)),
    }
}

/// `MPI_ERR_RMA_FLAVOR` for a window made from a memory handle: it takes put, get,
/// accumulate and flushes only (seed 000 §4; its epochs are the parent's).
pub(crate) fn not_memhandle(e: &EntryRef) -> Result<(), Failure> {
    match e.mem {
        None => Ok(()),
        Some(_) => Err(Failure::WindowCode(
            e.clone(),
            abi::abi().err.rma_flavor,
            "a window made from a memory handle takes put, get, accumulate and flushes only \
             (synchronize on its parent window)"
                .into(),
        )),
    }
}

/// Runs `raw` on the window behind `win`, or `mem` when it was made from a memory handle.
fn on_target(
    win: MPI_Win,
    raw: impl FnOnce(&RawWindow) -> onesided::Result<()>,
    mem: impl FnOnce(&onesided::RawMemWindow) -> onesided::Result<()>,
) -> CallResult {
    let e = entry(win)?;
    let r = match &e.mem {
        None => raw(&e.win),
        Some(m) => mem(m),
    };
    r.map_err(|err| Failure::Window(e, err))
}

/// The MPI assert bits as onesided's; an unknown bit is `MPI_ERR_ASSERT`.
pub(crate) fn mode(bits: c_int) -> onesided::Result<Assert> {
    abi::mode(bits).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "assert {bits:#x} has bits no MPI_MODE_* constant has"
        ))
    })
}

/// A rank argument.
pub(crate) fn rank(r: c_int) -> onesided::Result<usize> {
    usize::try_from(r).map_err(|_| Error::InvalidRank {
        rank: r as usize,
        size: 0,
    })
}

/// A displacement argument (never negative: `MPI_ERR_DISP`).
pub(crate) fn disp(d: MPI_Aint) -> onesided::Result<usize> {
    usize::try_from(d)
        .map_err(|_| Error::InvalidDisplacement(format!("negative target displacement {d}")))
}

/// A count argument (never negative: `MPI_ERR_COUNT`).
fn count(c: i64) -> onesided::Result<usize> {
    usize::try_from(c).map_err(|_| Error::InvalidCount(format!("negative count {c}")))
}

/// What a communication call does once the checks MPI makes of every call have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Screen {
    /// Move data: the call's own checks and work follow.
    Move,
    /// `MPI_PROC_NULL` as target: "the call has no effect" (MPI-4.1 §12.3), in any epoch or
    /// none (as MPICH), whatever the datatypes.
    NullTarget,
    /// No byte to move (a count of 0 or a datatype of size 0 on some side): only the rank
    /// and the access epoch are checked ([`nothing_to`]), whatever the datatypes and the
    /// buffers (NULL, unaligned, of types that would not match).
    Empty,
}

/// The checks of every communication call, in MPICH's order: counts (`MPI_ERR_COUNT`) and
/// the target displacement (`MPI_ERR_DISP`) — also for `MPI_PROC_NULL` — then the target,
/// then whether any byte moves. `sides` are the (count, datatype) arguments that select
/// data: origin, result, target.
#[inline]
fn screen(
    target: c_int,
    t_disp: MPI_Aint,
    sides: &[(i64, MPI_Datatype)],
) -> onesided::Result<Screen> {
    // What nearly every call is: a real target, and positive counts of predefined types.
    if t_disp >= 0
        && target != abi::abi().proc_null
        && sides
            .iter()
            .all(|&(c, ty)| c > 0 && abi::builtin(ty).is_some())
    {
        return Ok(Screen::Move);
    }
    screen_closely(target, t_disp, sides)
}

/// [`screen`] of the other calls, in MPICH's order of checks.
#[cold]
fn screen_closely(
    target: c_int,
    t_disp: MPI_Aint,
    sides: &[(i64, MPI_Datatype)],
) -> onesided::Result<Screen> {
    for &(c, _) in sides {
        count(c)?;
    }
    disp(t_disp)?;
    if target == abi::abi().proc_null {
        return Ok(Screen::NullTarget);
    }
    for &(c, ty) in sides {
        // A predefined type is never empty: only a derived one asks the host its size.
        if c == 0 || (abi::builtin(ty).is_none() && datatypes::type_size(ty)? == 0) {
            return Ok(Screen::Empty);
        }
    }
    Ok(Screen::Move)
}

/// A call that moves no byte to `target`: it checks what a zero-byte put checks — the
/// rank, and an access epoch to it — and does nothing else.
fn nothing_to(w: &RawWindow, target: c_int, t_disp: MPI_Aint) -> onesided::Result<()> {
    w.put(&[], rank(target)?, disp(t_disp)?)
}

/// [`nothing_to`] for a request-based call: the zero-byte `rput`'s request (which also
/// needs a passive-target epoch, as every request-based call does).
fn nothing_requested(
    w: &RawWindow,
    target: c_int,
    t_disp: MPI_Aint,
) -> onesided::Result<onesided::Request<'static>> {
    w.rput(&[], rank(target)?, disp(t_disp)?)
}

/// `count` elements of predefined datatype `ty` as bytes, and the element type for
/// accumulates (`MPI_Fetch_and_op`, `MPI_Compare_and_swap`: a derived type is
/// `MPI_ERR_TYPE`). Pairs with padding count as whole structs.
fn typed(count: i64, ty: MPI_Datatype) -> onesided::Result<(usize, abi::Builtin)> {
    let count = self::count(count)?;
    let b = abi::builtin(ty)
        .or_else(|| {
            abi::padded_pair(ty).map(|(e, _, extent)| abi::Builtin {
                size: extent,
                elem: Some(e),
            })
        })
        .ok_or_else(|| {
            Error::InvalidDatatype(format!(
                "datatype {ty:#x}: this call takes a predefined datatype"
            ))
        })?;
    let bytes = count
        .checked_mul(b.size)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| Error::InvalidArgument(format!("{count} elements overflow")))?;
    Ok((bytes, b))
}

/// The element type an accumulate of `b` applies ops to.
fn elem(b: abi::Builtin, op: onesided::Op) -> onesided::Result<onesided::ElemType> {
    elem_of(b.elem, op)
}

/// The element type an accumulate of basic type `e` applies `op` to.
fn elem_of(
    e: Option<onesided::ElemType>,
    op: onesided::Op,
) -> onesided::Result<onesided::ElemType> {
    match e {
        Some(e) => Ok(e),
        // MPI_PACKED and characters: only replace and no_op (bytes moved unchanged,
        // element-wise atomic).
        None if matches!(op, onesided::Op::Replace | onesided::Op::NoOp) => {
            Ok(onesided::ElemType::U8)
        }
        None => Err(Error::InvalidOp {
            call: "accumulate",
            op: op.name(),
            ty: "MPI_PACKED or a character type",
        }),
    }
}

/// The element type of a compare-and-swap of predefined type `ty`: an integer, logical or
/// byte type (MPI-4.1 §12.3.4); any other is `MPI_ERR_TYPE`, as MPICH says.
fn cas_elem(ty: MPI_Datatype, b: abi::Builtin) -> onesided::Result<onesided::ElemType> {
    use onesided::ElemType::*;
    match b.elem {
        Some(e @ (I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64)) => Ok(e),
        _ => Err(Error::InvalidDatatype(format!(
            "datatype {ty:#x}: compare_and_swap takes an integer, logical or byte datatype"
        ))),
    }
}

/// The bytes of a transfer between two predefined types, and their types; `None` when
/// either is derived. The common case of every call, without building selections.
#[inline]
fn plain_pair(
    op: &'static str,
    origin: (i64, MPI_Datatype),
    target: (i64, MPI_Datatype),
) -> Option<onesided::Result<(usize, abi::Builtin, abi::Builtin)>> {
    let (ob, tb) = (abi::builtin(origin.1)?, abi::builtin(target.1)?);
    let bytes = |count: i64, b: abi::Builtin| {
        usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(b.size))
            .filter(|&n| n <= isize::MAX as usize)
    };
    Some(match (bytes(origin.0, ob), bytes(target.0, tb)) {
        (Some(o), Some(t)) if o == t => Ok((o, ob, tb)),
        (Some(o), Some(t)) => Err(Error::LayoutMismatch {
            op,
            origin: o,
            target: t,
        }),
        _ => Err(Error::InvalidCount(format!(
            "count {} or {} is negative or overflows",
            origin.0, target.0
        ))),
    })
}

/// What nearly every put and get is: a real target at a displacement ≥ 0, positive counts of
/// predefined types on both sides that select the same bytes — their number (`None`: the
/// call takes the general path, which checks everything in MPI's order).
#[inline]
fn plain_move(
    origin: (i64, MPI_Datatype),
    target: (i64, MPI_Datatype),
    rank: c_int,
    t_disp: MPI_Aint,
) -> Option<usize> {
    if t_disp < 0 || rank < 0 || origin.0 <= 0 || target.0 <= 0 {
        return None;
    }
    let o = abi::builtin(origin.1)?;
    let t = if target.1 == origin.1 {
        o
    } else {
        abi::builtin(target.1)?
    };
    let n = (origin.0 as usize).checked_mul(o.size)?;
    (Some(n) == (target.0 as usize).checked_mul(t.size) && n <= isize::MAX as usize).then_some(n)
}

/// Origin and target of one transfer: they must select the same number of bytes.
pub(crate) fn pair(
    op: &'static str,
    origin: (i64, MPI_Datatype),
    target: (i64, MPI_Datatype),
) -> onesided::Result<(Selection, Selection)> {
    let o = datatypes::selection(origin.0, origin.1)?;
    let t = datatypes::selection(target.0, target.1)?;
    if o.bytes != t.bytes {
        return Err(Error::LayoutMismatch {
            op,
            origin: o.bytes,
            target: t.bytes,
        });
    }
    Ok((o, t))
}

/// [`pair`] for accumulates: value-index pairs as whole structs
/// ([`Selection::whole_pairs`]).
pub(crate) fn acc_pair(
    op: &'static str,
    origin: (i64, MPI_Datatype),
    target: (i64, MPI_Datatype),
) -> onesided::Result<(Selection, Selection)> {
    let (mut o, mut t) = pair(op, origin, target)?;
    if let (Some(Some(a)), Some(Some(b))) = (o.elem, t.elem) {
        if a == b {
            o.whole_pairs(a)?;
            t.whole_pairs(b)?;
        }
    }
    Ok((o, t))
}

/// The memory selection `o` reads or writes at `addr`, from its lowest byte, with its
/// layout from there.
///
/// # Safety
/// `addr` is the C caller's buffer for `o` (MPI's contract).
pub(crate) unsafe fn origin_view<'a, 's>(
    addr: *const c_void,
    o: &'s Selection,
) -> onesided::Result<(&'a mut [u8], Cow<'s, Layout<u8>>)> {
    // A selection that starts a little above the address (by at most its own span) is
    // viewed from the address, as a target's is: one layout then serves both sides of a
    // call with one datatype. Not from MPI_BOTTOM (NULL), whose offsets are addresses.
    let low = match o.low() {
        low if low > 0 && !addr.is_null() && low <= o.high() - low => 0,
        low => low,
    };
    let len = (o.high() - low) as usize;
    // SAFETY: the caller's buffer covers every block of its selection (and the view, the
    // gaps between them from the address or its lowest block, as MPI's buffer does).
    let view = unsafe { bytes_mut(addr.cast_mut().wrapping_byte_offset(low), len) };
    Ok((view, o.layout(low)?))
}

/// With `MPI_NO_OP` the origin arguments are ignored: zeros shaped like target `t`.
fn no_op_origin(t: &Selection) -> onesided::Result<Selection> {
    let o = datatypes::selection(t.bytes as i64, abi::abi().byte)?;
    Ok(Selection { elem: t.elem, ..o })
}

/// The displacement and layout of target selection `t` at displacement `d` of rank `r`. A
/// datatype that reaches below its displacement (a negative lower bound or stride) starts
/// its layout that many whole displacement units earlier: MPI allows it while every byte
/// it selects is in the window.
pub(crate) fn target_at<'s>(
    w: &RawWindow,
    r: usize,
    d: usize,
    t: &'s Selection,
) -> onesided::Result<(usize, Cow<'s, Layout<u8>>)> {
    shifted(w.target_disp_unit(r)?, r, d, t)
}

/// [`target_at`] on a window made from a memory handle.
fn mem_target_at<'s>(
    m: &onesided::RawMemWindow,
    d: usize,
    t: &'s Selection,
) -> onesided::Result<(usize, Cow<'s, Layout<u8>>)> {
    shifted(m.disp_unit(), m.target(), d, t)
}

/// [`target_at`] for displacement unit `unit` of rank `r`.
fn shifted(
    unit: usize,
    r: usize,
    d: usize,
    t: &Selection,
) -> onesided::Result<(usize, Cow<'_, Layout<u8>>)> {
    let low = t.low();
    if low >= 0 {
        return Ok((d, t.layout(0)?));
    }
    let unit = unit.max(1);
    let units = low.unsigned_abs().div_ceil(unit);
    let start = d.checked_sub(units).ok_or(Error::OutOfBounds {
        op: "a target datatype below the window",
        target: r,
        disp: d,
        disp_unit: unit,
        len: t.bytes,
        size: 0,
    })?;
    Ok((start, t.layout(-((units * unit) as isize))?))
}

/// The element type an accumulate combines: the one basic type of origin and target.
pub(crate) fn acc_elem(
    o: &Selection,
    t: &Selection,
    op: onesided::Op,
) -> onesided::Result<onesided::ElemType> {
    match (o.elem, t.elem) {
        (Some(a), Some(b)) if a == b => elem_of(a, op),
        _ => Err(mixed_types()),
    }
}

/// An accumulate over two different basic types.
fn mixed_types() -> Error {
    Error::InvalidDatatype(
        "an accumulate's origin and target must be of one predefined type (MPI-4.1 §12.3.4)".into(),
    )
}

pub(crate) fn mpi_op(op: MPI_Op) -> onesided::Result<onesided::Op> {
    abi::op(op).ok_or(Error::InvalidOp {
        call: "accumulate",
        op: "a user-defined op (RMA takes predefined ops only, MPI-4.1 §12.3.4)",
        ty: "any",
    })
}

/// `len` bytes at `ptr` (any pointer when `len` is 0).
///
/// # Safety
/// The C caller's buffer: valid for `len` bytes.
pub(crate) unsafe fn bytes<'a>(ptr: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's buffer of `len` bytes (MPI's contract).
    unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
}

/// `len` writable bytes at `ptr`.
///
/// # Safety
/// The C caller's buffer: valid for writes of `len` bytes.
pub(crate) unsafe fn bytes_mut<'a>(ptr: *mut c_void, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: as in `bytes`.
    unsafe { std::slice::from_raw_parts_mut(ptr.cast(), len) }
}

// ---- Init and finalize ----------------------------------------------------------------

/// Joins the job once the host MPI is up.
fn join() -> CallResult {
    if UNIVERSE.get().is_some() {
        return Ok(());
    }
    let threads = abi::abi().threads;
    let mut level: c_int = threads[3];
    // SAFETY: a plain query (not a name we export); on failure assume MPI_THREAD_MULTIPLE.
    if unsafe { (crate::host::host().query_thread)(&mut level) } != abi::MPI_SUCCESS {
        level = threads[3];
    }
    // 0 single, 1 funneled, 2 serialized, 3 multiple, whatever the ABI's values.
    let level = threads.iter().position(|&t| t == level).unwrap_or(3) as c_int;
    state::set_thread_level(level);
    let u = crate::job::bootstrap(abi::abi().comm_world)
        .and_then(|b| onesided::init_with(Arc::new(b)))
        .map_err(|e| {
            Failure::Comm(
                abi::abi().comm_world,
                abi::error_code(e.mpi_class()),
                format!("joining the job: {e}"),
            )
        })?;
    let _ = UNIVERSE.set(u);
    Ok(())
}

pub(crate) unsafe fn init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> CallResult {
    crate::host::choose_abi();
    // SAFETY: the program's arguments, passed on as given.
    let rc = unsafe { (host().init)(argc, argv) };
    if rc != abi::MPI_SUCCESS {
        return Err(Failure::Comm(abi::abi().comm_world, rc, "MPI_Init".into()));
    }
    join()
}

pub(crate) unsafe fn init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> CallResult {
    crate::host::choose_abi();
    // SAFETY: as in init.
    let rc = unsafe { (host().init_thread)(argc, argv, required, provided) };
    if rc != abi::MPI_SUCCESS {
        return Err(Failure::Comm(
            abi::abi().comm_world,
            rc,
            "MPI_Init_thread".into(),
        ));
    }
    join()
}

/// Frees what the program left (windows in creation order, collectively: every process
/// finalizes with the same windows alive; one that cannot be freed is dropped), stops the
/// progress thread, then lets the host finalize.
pub(crate) unsafe fn finalize() -> CallResult {
    // Requests the program freed while pending complete first: they belong to windows.
    crate::requests::finish_orphans();
    for e in state::drain() {
        match Arc::try_unwrap(e) {
            Ok(entry) => {
                delete_all_attrs(&entry);
                if let Err(err) = entry.win.free() {
                    eprintln!("onesided-mpi: MPI_Finalize: a window left by the program: {err}");
                }
            }
            Err(shared) => drop(shared),
        }
    }
    onesided::stop_progress_thread();
    // SAFETY: the host's MPI_Finalize, called once by the program.
    let rc = unsafe { (host().finalize)() };
    if rc == abi::MPI_SUCCESS {
        Ok(())
    } else {
        Err(Failure::Comm(
            abi::abi().comm_world,
            rc,
            "MPI_Finalize".into(),
        ))
    }
}

// ---- Window creation and free -----------------------------------------------------------

/// onesided's communicator over host communicator `comm`, and its group.
pub(crate) fn comm_of(comm: MPI_Comm) -> Result<(Comm, MPI_Group), Failure> {
    let fail = |code: c_int, text: String| Failure::Comm(comm, code, text);
    let u = UNIVERSE
        .get()
        .ok_or_else(|| fail(abi::abi().err.other, "MPI is not initialized".into()))?;
    if comm == abi::abi().comm_null {
        return Err(fail(abi::abi().err.comm, "MPI_COMM_NULL".into()));
    }
    let mut group = abi::abi().group_null;
    // SAFETY: a communicator handle of the program; MPI checks it.
    let rc = unsafe { (crate::host::host().comm_group)(comm, &mut group) };
    let group = group;
    if rc != abi::MPI_SUCCESS {
        return Err(fail(rc, "invalid communicator".into()));
    }
    if comm == abi::abi().comm_world {
        return Ok((u.world().clone(), group));
    }
    // The bootstrap duplicates the program's communicator (never frees it).
    let boot = crate::job::bootstrap(comm)
        .map_err(|e| fail(abi::error_code(e.mpi_class()), e.to_string()))?;
    Ok((Comm::new(Arc::new(boot)), group))
}

/// The info keys of `info` (none for `MPI_INFO_NULL`).
pub(crate) fn info_of(info: MPI_Info) -> Result<WinInfo, c_int> {
    let mut out = WinInfo::new();
    if info == abi::abi().info_null {
        return Ok(out);
    }
    let mut n: c_int = 0;
    // SAFETY: an info handle of the program; MPI checks it.
    let rc = unsafe { (crate::host::host().info_get_nkeys)(info, &mut n) };
    if rc != abi::MPI_SUCCESS {
        return Err(rc);
    }
    for i in 0..n {
        let mut key = [0 as c_char; 256];
        // SAFETY: MPI_MAX_INFO_KEY (255) + 1 bytes.
        let rc = unsafe { (crate::host::host().info_get_nthkey)(info, i, key.as_mut_ptr()) };
        if rc != abi::MPI_SUCCESS {
            return Err(rc);
        }
        let (mut len, mut flag) = (0 as c_int, 0 as c_int);
        // SAFETY: a key MPI just returned, NUL-terminated.
        unsafe { (crate::host::host().info_get_valuelen)(info, key.as_ptr(), &mut len, &mut flag) };
        let mut value = vec![0 as c_char; len.max(0) as usize + 1];
        // SAFETY: `value` holds len + 1 bytes.
        unsafe {
            (crate::host::host().info_get)(info, key.as_ptr(), len, value.as_mut_ptr(), &mut flag)
        };
        // SAFETY: both NUL-terminated by MPI.
        let (k, v) = unsafe {
            (
                std::ffi::CStr::from_ptr(key.as_ptr()),
                std::ffi::CStr::from_ptr(value.as_ptr()),
            )
        };
        out.set(k.to_string_lossy(), v.to_string_lossy());
    }
    Ok(out)
}

/// Creates a window with `make` over `comm` and returns its handle in `win`.
unsafe fn create_with(
    comm: MPI_Comm,
    info: MPI_Info,
    win: *mut MPI_Win,
    make: impl FnOnce(&Comm, &WinInfo) -> onesided::Result<RawWindow>,
) -> Result<MPI_Win, Failure> {
    if win.is_null() {
        return Err(Failure::Comm(
            comm,
            abi::abi().err.arg,
            "win is NULL".into(),
        ));
    }
    let info = info_of(info).map_err(|rc| Failure::Comm(comm, rc, "invalid info".into()))?;
    let (c, group) = comm_of(comm)?;
    let w = make(&c, &info)
        .map_err(|e| Failure::Comm(comm, abi::error_code(e.mpi_class()), e.to_string()))?;
    let handle = state::insert(Entry::new(w, comm, group));
    // SAFETY: checked non-null; the caller's MPI_Win.
    unsafe { abi::store_handle(win, handle) };
    Ok(handle)
}

fn size_unit(size: MPI_Aint, unit: impl Into<i64>) -> onesided::Result<(usize, usize)> {
    let unit: i64 = unit.into();
    let s = usize::try_from(size)
        .map_err(|_| Error::InvalidSize(format!("negative window size {size}")))?;
    let u = usize::try_from(unit)
        .ok()
        .filter(|&u| u > 0)
        .ok_or_else(|| Error::InvalidDisplacement(format!("disp_unit {unit} is not positive")))?;
    Ok((s, u))
}

pub(crate) unsafe fn win_allocate<U: Into<i64> + Copy>(
    size: MPI_Aint,
    unit: U,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
) -> CallResult {
    // SAFETY: the caller's out-arguments (checked inside).
    unsafe { allocate_any(size, unit.into(), info, comm, baseptr, win, false) }
}

pub(crate) unsafe fn win_allocate_shared<U: Into<i64> + Copy>(
    size: MPI_Aint,
    unit: U,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
) -> CallResult {
    // SAFETY: as in win_allocate.
    unsafe { allocate_any(size, unit.into(), info, comm, baseptr, win, true) }
}

#[allow(clippy::too_many_arguments)]
unsafe fn allocate_any(
    size: MPI_Aint,
    unit: i64,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
    shared: bool,
) -> CallResult {
    if baseptr.is_null() {
        return Err(Failure::Comm(
            comm,
            abi::abi().err.arg,
            "baseptr is NULL".into(),
        ));
    }
    // SAFETY: win is checked inside create_with.
    let handle = unsafe {
        create_with(comm, info, win, |c, i| {
            let (s, u) = size_unit(size, unit)?;
            if shared {
                RawWindow::allocate_shared(c, s, u, i)
            } else {
                RawWindow::allocate(c, s, u, i)
            }
        })?
    };
    let e = entry(handle)?;
    // SAFETY: baseptr is the caller's `void **` (checked non-null).
    unsafe { *baseptr.cast::<*mut c_void>() = e.win.base_bytes().cast() };
    Ok(())
}

pub(crate) unsafe fn win_create<U: Into<i64> + Copy>(
    base: *mut c_void,
    size: MPI_Aint,
    unit: U,
    info: MPI_Info,
    comm: MPI_Comm,
    win: *mut MPI_Win,
) -> CallResult {
    // SAFETY: MPI's contract for MPI_Win_create: the memory stays valid until the window
    // is freed.
    unsafe {
        create_with(comm, info, win, |c, i| {
            let (s, u) = size_unit(size, unit)?;
            let mut i = i.clone();
            if i.get(onesided::info_keys::SHARE_IN_PLACE).is_none() {
                i.set(onesided::info_keys::SHARE_IN_PLACE, share_in_place());
            }
            RawWindow::create(c, base.cast(), s, u, &i)
        })
    }
    .map(drop)
}

/// `onesided_share_in_place` for windows whose info does not say: `ONESIDED_SHARE_IN_PLACE`
/// if set; else `true` under `MPI_THREAD_SINGLE` (no other thread exists to write the
/// pages around the memory while they move), `whole_pages` otherwise (only the window's
/// own pages move).
fn share_in_place() -> String {
    std::env::var("ONESIDED_SHARE_IN_PLACE").unwrap_or_else(|_| {
        if state::thread_level() == 0 {
            "true".into()
        } else {
            "whole_pages".into()
        }
    })
}

pub(crate) unsafe fn win_create_dynamic(
    info: MPI_Info,
    comm: MPI_Comm,
    win: *mut MPI_Win,
) -> CallResult {
    // SAFETY: win is checked inside.
    unsafe {
        create_with(comm, info, win, |c, i| {
            let mut i = i.clone();
            if i.get(onesided::info_keys::SHARE_IN_PLACE).is_none() {
                i.set(onesided::info_keys::SHARE_IN_PLACE, share_in_place());
            }
            RawWindow::create_dynamic(c, &i)
        })
    }
    .map(drop)
}

/// What the caller's in-out argument `arg` (named `what`) holds; a NULL one is
/// `MPI_ERR_ARG` at `MPI_COMM_WORLD`'s handler.
///
/// # Safety
/// `arg` is NULL or the caller's valid pointer.
unsafe fn in_out<T: Copy>(arg: *mut T, what: &str) -> Result<T, Failure> {
    // SAFETY: checked non-null; valid by the caller's contract.
    in_out_ptr(arg, what).map(|p| unsafe { *p })
}

/// An in-out argument's pointer, checked non-null.
fn in_out_ptr<T>(arg: *mut T, what: &str) -> Result<*mut T, Failure> {
    if arg.is_null() {
        return Err(Failure::Comm(
            abi::abi().comm_world,
            abi::abi().err.arg,
            format!("{what} is NULL"),
        ));
    }
    Ok(arg)
}

pub(crate) unsafe fn win_free(win: *mut MPI_Win) -> CallResult {
    // SAFETY: the caller's argument (checked non-null first): a handle of its ABI.
    let handle = unsafe { abi::load_handle(in_out_ptr(win, "win")?) };
    entry(handle)?;
    // Epochs must be closed everywhere: checked by the collective free. Taken out of the
    // table first, so that no other thread starts a call on it.
    let Some(e) = state::remove(handle) else {
        return Err(entry(handle).err().unwrap_or_else(|| {
            Failure::Comm(
                abi::abi().comm_world,
                abi::abi().err.win,
                "window freed twice".into(),
            )
        }));
    };
    let entry = match Arc::try_unwrap(e) {
        Ok(entry) => entry,
        Err(shared) => {
            return Err(Failure::Window(
                EntryRef::Shared(shared),
                Error::InvalidArgument("MPI_Win_free while another thread uses the window".into()),
            ))
        }
    };
    let group = entry.group;
    let comm = entry.comm;
    let errhandler = entry.errhandler();
    delete_all_attrs(&entry);
    match entry.win.free() {
        Ok(()) => {
            let mut host_group = group;
            // SAFETY: the group this library made at creation.
            unsafe { (crate::host::host().group_free)(&mut host_group) };
            release_errhandler(errhandler, state::errhandler_moved(Some(errhandler), None));
            // SAFETY: checked non-null.
            unsafe { abi::store_handle(win, abi::abi().win_null) };
            Ok(())
        }
        Err(err) => {
            // A failed free leaves the window unusable; its error goes to the handler it had.
            Err(Failure::Handler {
                errhandler,
                comm,
                err,
            })
        }
    }
}

pub(crate) unsafe fn win_attach(win: MPI_Win, base: *mut c_void, size: MPI_Aint) -> CallResult {
    on_window(win, |w| {
        let s = usize::try_from(size)
            .map_err(|_| Error::InvalidArgument(format!("negative size {size}")))?;
        // SAFETY: MPI's contract for MPI_Win_attach.
        unsafe { w.attach(base.cast(), s) }
    })
}

pub(crate) unsafe fn win_detach(win: MPI_Win, base: *const c_void) -> CallResult {
    on_window(win, |w| w.detach(base.cast_mut().cast()))
}

pub(crate) unsafe fn win_shared_query<U: TryFrom<usize>>(
    win: MPI_Win,
    r: c_int,
    size: *mut MPI_Aint,
    unit: *mut U,
    baseptr: *mut c_void,
) -> CallResult {
    on_window(win, |w| {
        if size.is_null() || unit.is_null() || baseptr.is_null() {
            return Err(Error::InvalidArgument("a NULL out-argument".into()));
        }
        let found = if r == abi::abi().proc_null {
            lowest_nonempty_segment(w)?
        } else {
            w.shared_query(rank(r)?)?
        };
        let (b, s, u) = match found {
            // An empty segment of a window whose segments need not be contiguous has no
            // address: NULL, as MPICH answers (its test win_shared_noncontig_put asserts
            // it). In a contiguous window it is where the segment would begin, which
            // programs use to find the start of the whole window.
            Some(region)
                if region.size_bytes() == 0
                    && w.get_info().get("alloc_shared_noncontig") == Some("true") =>
            {
                (std::ptr::null_mut(), 0, region.disp_unit())
            }
            Some(region) => (
                region.as_ptr().cast::<c_void>(),
                region.size_bytes(),
                region.disp_unit(),
            ),
            None => (std::ptr::null_mut(), 0, 1),
        };
        let u = U::try_from(u).map_err(|_| {
            Error::InvalidArgument(format!(
                "disp_unit {u} does not fit an int: use MPI_Win_shared_query_c"
            ))
        })?;
        // SAFETY: the caller's out-arguments, checked non-null.
        unsafe {
            *size = s as MPI_Aint;
            *unit = u;
            *baseptr.cast::<*mut c_void>() = b;
        }
        Ok(())
    })
}

/// `MPI_Win_shared_query` with `MPI_PROC_NULL`: the segment of the lowest rank whose
/// segment is not empty (MPI-4.1 §12.2.3), or none when every one is.
fn lowest_nonempty_segment(w: &RawWindow) -> onesided::Result<Option<onesided::SharedRegion<u8>>> {
    for r in 0..w.size() {
        if let Some(region) = w.shared_query(r)? {
            if region.size_bytes() > 0 {
                return Ok(Some(region));
            }
        }
    }
    Ok(None)
}

// ---- Synchronization --------------------------------------------------------------------

pub(crate) unsafe fn win_fence(a: c_int, win: MPI_Win) -> CallResult {
    let e = entry(win)?;
    not_memhandle(&e)?;
    let a = checked_assert(&e, a)?;
    e.win.fence(a).map_err(|err| Failure::Window(e, err))
}

pub(crate) unsafe fn win_lock(kind: c_int, r: c_int, a: c_int, win: MPI_Win) -> CallResult {
    let e = entry(win)?;
    not_memhandle(&e)?;
    let kind = match lock_type(kind) {
        Some(k) => k,
        None => {
            return Err(Failure::WindowCode(
                e,
                abi::abi().err.locktype,
                format!("lock type {kind} is neither MPI_LOCK_SHARED nor MPI_LOCK_EXCLUSIVE"),
            ))
        }
    };
    let a = checked_assert(&e, a)?;
    if r == abi::abi().proc_null {
        // No target, no lock (as MPICH: the later calls on MPI_PROC_NULL have no effect).
        return Ok(());
    }
    let r = rank(r).and_then(|r| e.win.lock(kind, r, a));
    r.map_err(|err| Failure::Window(e, err))
}

/// `bits` as an assert, or the MPI_ERR_ASSERT failure of window `e`.
pub(crate) fn checked_assert(e: &EntryRef, bits: c_int) -> Result<Assert, Failure> {
    mode(bits).map_err(|err| Failure::WindowCode(e.clone(), abi::abi().err.assert, err.to_string()))
}

pub(crate) unsafe fn win_unlock(r: c_int, win: MPI_Win) -> CallResult {
    on_window(win, |w| {
        if r == abi::abi().proc_null {
            Ok(())
        } else {
            w.unlock(rank(r)?)
        }
    })
}

/// The lock type of an `MPI_LOCK_*` value.
pub(crate) fn lock_type(kind: c_int) -> Option<LockType> {
    let a = abi::abi();
    if kind == a.lock_exclusive {
        Some(LockType::Exclusive)
    } else if kind == a.lock_shared {
        Some(LockType::Shared)
    } else {
        None
    }
}

pub(crate) unsafe fn win_lock_all(a: c_int, win: MPI_Win) -> CallResult {
    let e = entry(win)?;
    not_memhandle(&e)?;
    let a = checked_assert(&e, a)?;
    e.win.lock_all(a).map_err(|err| Failure::Window(e, err))
}

pub(crate) unsafe fn win_unlock_all(win: MPI_Win) -> CallResult {
    on_window(win, RawWindow::unlock_all)
}

pub(crate) unsafe fn win_flush(r: c_int, win: MPI_Win) -> CallResult {
    if r == abi::abi().proc_null {
        // Nothing was issued to no target: nothing to complete (as MPICH).
        return entry(win).map(drop);
    }
    on_target(win, |w| w.flush(rank(r)?), |m| same_target(m, r)?.flush())
}

/// A memory-handle window's one target, checked against rank argument `r`.
fn same_target(m: &onesided::RawMemWindow, r: c_int) -> onesided::Result<&onesided::RawMemWindow> {
    if rank(r)? == m.target() {
        Ok(m)
    } else {
        Err(Error::InvalidRank {
            rank: r as usize,
            size: m.target() + 1,
        })
    }
}

pub(crate) unsafe fn win_flush_all(win: MPI_Win) -> CallResult {
    on_target(win, RawWindow::flush_all, onesided::RawMemWindow::flush)
}

pub(crate) unsafe fn win_flush_local(r: c_int, win: MPI_Win) -> CallResult {
    if r == abi::abi().proc_null {
        return entry(win).map(drop);
    }
    on_target(
        win,
        |w| w.flush_local(rank(r)?),
        |m| same_target(m, r)?.flush_local(),
    )
}

pub(crate) unsafe fn win_flush_local_all(win: MPI_Win) -> CallResult {
    on_target(
        win,
        RawWindow::flush_local_all,
        onesided::RawMemWindow::flush_local,
    )
}

pub(crate) unsafe fn win_sync(win: MPI_Win) -> CallResult {
    on_window(win, RawWindow::sync)
}

/// The ranks of host group `group` in the window's communicator.
pub(crate) fn group_of(e: &Entry, group: MPI_Group) -> onesided::Result<onesided::Group> {
    let mut n: c_int = 0;
    // SAFETY: a group handle of the program; MPI checks it.
    let rc = unsafe { (crate::host::host().group_size)(group, &mut n) };
    if rc != abi::MPI_SUCCESS {
        return Err(Error::InvalidArgument(format!("invalid group {group:#x}")));
    }
    let from: Vec<c_int> = (0..n).collect();
    let mut to = vec![0 as c_int; n as usize];
    // SAFETY: `from` and `to` hold n ranks; both groups are live.
    let rc = unsafe {
        (crate::host::host().group_translate_ranks)(
            group,
            n,
            from.as_ptr(),
            e.group,
            to.as_mut_ptr(),
        )
    };
    if rc != abi::MPI_SUCCESS || to.iter().any(|&r| r < 0) {
        return Err(Error::InvalidArgument(
            "a member of the group is not in the window".into(),
        ));
    }
    onesided::Group::new(to.into_iter().map(|r| r as usize))
}

/// The window, group and assert of a PSCW opening call (`post`, `start` and their
/// nonblocking forms), each error to the handler it belongs to.
pub(crate) fn opening(
    win: MPI_Win,
    group: MPI_Group,
    a: c_int,
) -> Result<(EntryRef, onesided::Group, Assert), Failure> {
    let e = entry(win)?;
    not_memhandle(&e)?;
    let a = checked_assert(&e, a)?;
    match group_of(&e, group) {
        Ok(g) => Ok((e, g, a)),
        Err(err) => Err(Failure::Window(e, err)),
    }
}

pub(crate) unsafe fn win_post(group: MPI_Group, a: c_int, win: MPI_Win) -> CallResult {
    let (e, g, a) = opening(win, group, a)?;
    e.win.post(&g, a).map_err(|err| Failure::Window(e, err))
}

pub(crate) unsafe fn win_start(group: MPI_Group, a: c_int, win: MPI_Win) -> CallResult {
    let (e, g, a) = opening(win, group, a)?;
    e.win.start(&g, a).map_err(|err| Failure::Window(e, err))
}

pub(crate) unsafe fn win_complete(win: MPI_Win) -> CallResult {
    on_window(win, RawWindow::complete)
}

pub(crate) unsafe fn win_wait(win: MPI_Win) -> CallResult {
    on_window(win, RawWindow::wait)
}

pub(crate) unsafe fn win_test(win: MPI_Win, flag: *mut c_int) -> CallResult {
    on_window(win, |w| {
        if flag.is_null() {
            return Err(Error::InvalidArgument("flag is NULL".into()));
        }
        let done = w.test()?;
        // SAFETY: checked non-null.
        unsafe { *flag = c_int::from(done) };
        Ok(())
    })
}

// ---- Communication ----------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn put<C: Into<i64>>(
    origin: *const c_void,
    o_count: C,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: C,
    t_type: MPI_Datatype,
    win: MPI_Win,
) -> CallResult {
    let (o_count, t_count): (i64, i64) = (o_count.into(), t_count.into());
    if let Some(n) = plain_move((o_count, o_type), (t_count, t_type), target, t_disp) {
        let e = entry(win)?;
        if e.mem.is_none() {
            // SAFETY: the caller's origin buffer of `n` bytes.
            let r = e.win.put(
                unsafe { bytes(origin, n) },
                target as usize,
                t_disp as usize,
            );
            return r.map_err(|err| Failure::Window(e, err));
        }
    }
    let sides = [(o_count, o_type), (t_count, t_type)];
    on_target(
        win,
        |w| {
            match screen(target, t_disp, &sides)? {
                Screen::Move => {}
                Screen::NullTarget => return Ok(()),
                Screen::Empty => return nothing_to(w, target, t_disp),
            }
            let (origin_arg, target_arg) = ((o_count, o_type), (t_count, t_type));
            if let Some(plain) = plain_pair("put", origin_arg, target_arg) {
                let (n, _, _) = plain?;
                // SAFETY: the caller's origin buffer of `n` bytes.
                return w.put(unsafe { bytes(origin, n) }, rank(target)?, disp(t_disp)?);
            }
            let (o, t) = pair("put", origin_arg, target_arg)?;
            let (r, d) = (rank(target)?, disp(t_disp)?);
            if o.contiguous() && t.contiguous() {
                // SAFETY: the caller's origin buffer of `o.bytes` bytes.
                return w.put(unsafe { bytes(origin, o.bytes) }, r, d);
            }
            // SAFETY: the caller's origin buffer (MPI's contract).
            let (view, o_layout) = unsafe { origin_view(origin, &o)? };
            let (d, t_layout) = target_at(w, r, d, &t)?;
            w.put_layout(view, &o_layout, r, d, &t_layout)
        },
        |m| {
            match screen(target, t_disp, &sides)? {
                Screen::Move => {}
                Screen::NullTarget => return Ok(()),
                Screen::Empty => return same_target(m, target)?.put(&[], disp(t_disp)?),
            }
            let (o, t) = pair("put", (o_count, o_type), (t_count, t_type))?;
            if o.contiguous() && t.contiguous() {
                // SAFETY: the caller's origin buffer of `o.bytes` bytes.
                return m.put(unsafe { bytes(origin, o.bytes) }, disp(t_disp)?);
            }
            // SAFETY: the caller's origin buffer (MPI's contract).
            let (view, o_layout) = unsafe { origin_view(origin, &o)? };
            let (d, t_layout) = mem_target_at(m, disp(t_disp)?, &t)?;
            m.put_layout(view, &o_layout, d, &t_layout)
        },
    )
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn get<C: Into<i64>>(
    origin: *mut c_void,
    o_count: C,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: C,
    t_type: MPI_Datatype,
    win: MPI_Win,
) -> CallResult {
    let (o_count, t_count): (i64, i64) = (o_count.into(), t_count.into());
    if let Some(n) = plain_move((o_count, o_type), (t_count, t_type), target, t_disp) {
        let e = entry(win)?;
        if e.mem.is_none() {
            // SAFETY: the caller's origin buffer of `n` bytes.
            let r = e.win.get(
                unsafe { bytes_mut(origin, n) },
                target as usize,
                t_disp as usize,
            );
            return r.map_err(|err| Failure::Window(e, err));
        }
    }
    let sides = [(o_count, o_type), (t_count, t_type)];
    on_target(
        win,
        |w| {
            match screen(target, t_disp, &sides)? {
                Screen::Move => {}
                Screen::NullTarget => return Ok(()),
                Screen::Empty => return nothing_to(w, target, t_disp),
            }
            let (origin_arg, target_arg) = ((o_count, o_type), (t_count, t_type));
            if let Some(plain) = plain_pair("get", origin_arg, target_arg) {
                let (n, _, _) = plain?;
                // SAFETY: the caller's origin buffer of `n` bytes.
                return w.get(
                    unsafe { bytes_mut(origin, n) },
                    rank(target)?,
                    disp(t_disp)?,
                );
            }
            let (o, t) = pair("get", origin_arg, target_arg)?;
            let (r, d) = (rank(target)?, disp(t_disp)?);
            if o.contiguous() && t.contiguous() {
                // SAFETY: the caller's origin buffer of `o.bytes` bytes.
                return w.get(unsafe { bytes_mut(origin, o.bytes) }, r, d);
            }
            // SAFETY: the caller's origin buffer (MPI's contract).
            let (view, o_layout) = unsafe { origin_view(origin, &o)? };
            let (d, t_layout) = target_at(w, r, d, &t)?;
            w.get_layout(view, &o_layout, r, d, &t_layout)
        },
        |m| {
            match screen(target, t_disp, &sides)? {
                Screen::Move => {}
                Screen::NullTarget => return Ok(()),
                Screen::Empty => return same_target(m, target)?.put(&[], disp(t_disp)?),
            }
            let (o, t) = pair("get", (o_count, o_type), (t_count, t_type))?;
            if o.contiguous() && t.contiguous() {
                // SAFETY: the caller's origin buffer of `o.bytes` bytes.
                return m.get(unsafe { bytes_mut(origin, o.bytes) }, disp(t_disp)?);
            }
            // SAFETY: the caller's origin buffer (MPI's contract).
            let (view, o_layout) = unsafe { origin_view(origin, &o)? };
            let (d, t_layout) = mem_target_at(m, disp(t_disp)?, &t)?;
            m.get_layout(view, &o_layout, d, &t_layout)
        },
    )
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn accumulate<C: Into<i64>>(
    origin: *const c_void,
    o_count: C,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: C,
    t_type: MPI_Datatype,
    op: MPI_Op,
    win: MPI_Win,
) -> CallResult {
    let (o_count, t_count): (i64, i64) = (o_count.into(), t_count.into());
    let op_arg = op;
    let sides = [(o_count, o_type), (t_count, t_type)];
    on_target(
        win,
        |w| {
            let op = mpi_op(op)?;
            match screen(target, t_disp, &sides)? {
                Screen::Move => {}
                Screen::NullTarget => return Ok(()),
                Screen::Empty => return nothing_to(w, target, t_disp),
            }
            let (origin_arg, target_arg) = ((o_count, o_type), (t_count, t_type));
            if let Some(plain) = plain_pair("accumulate", origin_arg, target_arg) {
                let (n, ob, tb) = plain?;
                let ty = match (ob.elem, tb.elem) {
                    (a, b) if a == b => elem_of(a, op)?,
                    _ => return Err(mixed_types()),
                };
                // SAFETY: the caller's origin buffer of `n` bytes.
                let src = unsafe { bytes(origin, n) };
                return w.accumulate(src, ty, rank(target)?, disp(t_disp)?, op);
            }
            let (o, t) = acc_pair("accumulate", origin_arg, target_arg)?;
            let ty = acc_elem(&o, &t, op)?;
            let (r, d) = (rank(target)?, disp(t_disp)?);
            if o.contiguous() && t.contiguous() {
                // SAFETY: the caller's origin buffer of `o.bytes` bytes.
                return w.accumulate(unsafe { bytes(origin, o.bytes) }, ty, r, d, op);
            }
            // SAFETY: the caller's origin buffer (MPI's contract).
            let (view, o_layout) = unsafe { origin_view(origin, &o)? };
            let (d, t_layout) = target_at(w, r, d, &t)?;
            w.accumulate_layout(view, &o_layout, ty, r, d, &t_layout, op)
        },
        |m| {
            let op = mpi_op(op_arg)?;
            match screen(target, t_disp, &sides)? {
                Screen::Move => {}
                Screen::NullTarget => return Ok(()),
                Screen::Empty => return same_target(m, target)?.put(&[], disp(t_disp)?),
            }
            let (o, t) = acc_pair("accumulate", (o_count, o_type), (t_count, t_type))?;
            let ty = acc_elem(&o, &t, op)?;
            if o.contiguous() && t.contiguous() {
                // SAFETY: the caller's origin buffer of `o.bytes` bytes.
                return m.accumulate(unsafe { bytes(origin, o.bytes) }, ty, disp(t_disp)?, op);
            }
            // SAFETY: the caller's origin buffer (MPI's contract).
            let (view, o_layout) = unsafe { origin_view(origin, &o)? };
            let (d, t_layout) = mem_target_at(m, disp(t_disp)?, &t)?;
            m.accumulate_layout(view, &o_layout, ty, d, &t_layout, op)
        },
    )
}

/// [`screen`] for a get-accumulate: its sides that select data are result, target and
/// origin; with `MPI_NO_OP` the origin arguments are ignored (MPI-4.1 §12.3.4), so they are
/// neither checked nor counted.
#[allow(clippy::too_many_arguments)]
fn screen_get_acc(
    op: onesided::Op,
    target: c_int,
    t_disp: MPI_Aint,
    origin: (i64, MPI_Datatype),
    result: (i64, MPI_Datatype),
    target_side: (i64, MPI_Datatype),
) -> onesided::Result<Screen> {
    let sides = [result, target_side, origin];
    let n = if op == onesided::Op::NoOp { 2 } else { 3 };
    screen(target, t_disp, &sides[..n])
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn get_accumulate<C: Into<i64>>(
    origin: *const c_void,
    o_count: C,
    o_type: MPI_Datatype,
    result: *mut c_void,
    r_count: C,
    r_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: C,
    t_type: MPI_Datatype,
    op: MPI_Op,
    win: MPI_Win,
) -> CallResult {
    on_window(win, |w| {
        let op = mpi_op(op)?;
        let t_count: i64 = t_count.into();
        let (o_count, r_count): (i64, i64) = (o_count.into(), r_count.into());
        let (origin_arg, result_arg) = ((o_count, o_type), (r_count, r_type));
        match screen_get_acc(
            op,
            target,
            t_disp,
            origin_arg,
            result_arg,
            (t_count, t_type),
        )? {
            Screen::Move => {}
            Screen::NullTarget => return Ok(()),
            Screen::Empty => return nothing_to(w, target, t_disp),
        }
        let (res, t) = acc_pair("get_accumulate", (r_count, r_type), (t_count, t_type))?;
        // With MPI_NO_OP the origin arguments are ignored: zeros shaped like the target.
        let zeros;
        let (o, o_addr) = if op == onesided::Op::NoOp {
            zeros = vec![0u8; t.bytes];
            (no_op_origin(&t)?, zeros.as_ptr().cast::<c_void>())
        } else {
            let o = acc_pair("get_accumulate", (o_count, o_type), (t_count, t_type))?.0;
            (o, origin)
        };
        let ty = acc_elem(&o, &t, op)?;
        let (r, d) = (rank(target)?, disp(t_disp)?);
        if o.contiguous() && t.contiguous() && res.contiguous() {
            // SAFETY: the caller's origin and result buffers of `t.bytes` bytes each.
            let (src, out) = unsafe { (bytes(o_addr, t.bytes), bytes_mut(result, t.bytes)) };
            return w.get_accumulate(src, out, ty, r, d, op);
        }
        // SAFETY: the caller's buffers (MPI's contract).
        let ((src, o_layout), (out, r_layout)) =
            unsafe { (origin_view(o_addr, &o)?, origin_view(result, &res)?) };
        let (d, t_layout) = target_at(w, r, d, &t)?;
        w.get_accumulate_layout(src, &o_layout, out, &r_layout, ty, r, d, &t_layout, op)
    })
}

pub(crate) unsafe fn fetch_and_op(
    origin: *const c_void,
    result: *mut c_void,
    ty: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    op: MPI_Op,
    win: MPI_Win,
) -> CallResult {
    on_window(win, |w| {
        let (len, b) = typed(1, ty)?;
        let op = mpi_op(op)?;
        if screen(target, t_disp, &[])? == Screen::NullTarget {
            return Ok(());
        }
        let zeros = [0u8; 32];
        let src = if op == onesided::Op::NoOp {
            &zeros[..len]
        } else {
            // SAFETY: the caller's one element.
            unsafe { bytes(origin, len) }
        };
        // SAFETY: the caller's one element.
        let out = unsafe { bytes_mut(result, len) };
        w.fetch_and_op(src, out, elem(b, op)?, rank(target)?, disp(t_disp)?, op)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn compare_and_swap(
    origin: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    ty: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    win: MPI_Win,
) -> CallResult {
    on_window(win, |w| {
        let (len, b) = typed(1, ty)?;
        let e = cas_elem(ty, b)?;
        if screen(target, t_disp, &[])? == Screen::NullTarget {
            return Ok(());
        }
        // SAFETY: the caller's elements.
        let (v, c, out) = unsafe {
            (
                bytes(origin, len),
                bytes(compare, len),
                bytes_mut(result, len),
            )
        };
        w.compare_and_swap(v, c, out, e, rank(target)?, disp(t_disp)?)
    })
}

// ---- Request-based communication ------------------------------------------------------

/// Runs `f` on window `win` and hands its request to the host as `*request`.
pub(crate) fn with_request(
    win: MPI_Win,
    request: *mut abi::MPI_Request,
    f: impl FnOnce(&RawWindow) -> onesided::Result<onesided::Request<'static>>,
) -> CallResult {
    let e = entry(win)?;
    not_memhandle(&e)?;
    if request.is_null() {
        return Err(Failure::Window(
            e,
            Error::InvalidArgument("request is NULL".into()),
        ));
    }
    let r = match f(&e.win) {
        Ok(r) => r,
        Err(err) => return Err(Failure::Window(e, err)),
    };
    match crate::requests::start(r) {
        Ok(h) => {
            // SAFETY: checked non-null.
            unsafe { abi::store_handle(request, h) };
            Ok(())
        }
        Err(rc) => Err(Failure::WindowCode(e, rc, "generalized request".into())),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rput<C: Into<i64>>(
    origin: *const c_void,
    o_count: C,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: C,
    t_type: MPI_Datatype,
    win: MPI_Win,
    request: *mut abi::MPI_Request,
) -> CallResult {
    let sides = [(o_count.into(), o_type), (t_count.into(), t_type)];
    with_request(win, request, |w| {
        match screen(target, t_disp, &sides)? {
            Screen::Move => {}
            Screen::NullTarget => return Ok(onesided::Request::completed()),
            Screen::Empty => return nothing_requested(w, target, t_disp),
        }
        let (o, t) = pair("rput", sides[0], sides[1])?;
        let (r, d) = (rank(target)?, disp(t_disp)?);
        if o.contiguous() && t.contiguous() {
            // SAFETY: the caller's origin buffer of `o.bytes` bytes (taken at once).
            return w.rput(unsafe { bytes(origin, o.bytes) }, r, d);
        }
        // Derived datatypes: done before the call returns; the request is complete.
        // SAFETY: the caller's origin buffer (MPI's contract).
        let (view, o_layout) = unsafe { origin_view(origin, &o)? };
        w.require_passive("rput", r)?;
        let (d, t_layout) = target_at(w, r, d, &t)?;
        w.put_layout(view, &o_layout, r, d, &t_layout)?;
        Ok(onesided::Request::completed())
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rget<C: Into<i64>>(
    origin: *mut c_void,
    o_count: C,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: C,
    t_type: MPI_Datatype,
    win: MPI_Win,
    request: *mut abi::MPI_Request,
) -> CallResult {
    let sides = [(o_count.into(), o_type), (t_count.into(), t_type)];
    with_request(win, request, |w| {
        match screen(target, t_disp, &sides)? {
            Screen::Move => {}
            Screen::NullTarget => return Ok(onesided::Request::completed()),
            Screen::Empty => return nothing_requested(w, target, t_disp),
        }
        let (o, t) = pair("rget", sides[0], sides[1])?;
        let (r, d) = (rank(target)?, disp(t_disp)?);
        if o.contiguous() && t.contiguous() {
            // SAFETY: MPI's contract: the origin buffer stays valid and untouched until
            // the request completes.
            return unsafe { w.rget(origin.cast(), o.bytes, r, d) };
        }
        // SAFETY: the caller's origin buffer (MPI's contract).
        let (view, o_layout) = unsafe { origin_view(origin, &o)? };
        w.require_passive("rget", r)?;
        let (d, t_layout) = target_at(w, r, d, &t)?;
        w.get_layout(view, &o_layout, r, d, &t_layout)?;
        Ok(onesided::Request::completed())
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn raccumulate<C: Into<i64>>(
    origin: *const c_void,
    o_count: C,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: C,
    t_type: MPI_Datatype,
    op: MPI_Op,
    win: MPI_Win,
    request: *mut abi::MPI_Request,
) -> CallResult {
    let sides = [(o_count.into(), o_type), (t_count.into(), t_type)];
    with_request(win, request, |w| {
        let op = mpi_op(op)?;
        match screen(target, t_disp, &sides)? {
            Screen::Move => {}
            Screen::NullTarget => return Ok(onesided::Request::completed()),
            Screen::Empty => return nothing_requested(w, target, t_disp),
        }
        let (o, t) = acc_pair("raccumulate", sides[0], sides[1])?;
        let ty = acc_elem(&o, &t, op)?;
        let (r, d) = (rank(target)?, disp(t_disp)?);
        if o.contiguous() && t.contiguous() {
            // SAFETY: the caller's origin buffer of `o.bytes` bytes.
            return w.raccumulate(unsafe { bytes(origin, o.bytes) }, ty, r, d, op);
        }
        // SAFETY: the caller's origin buffer (MPI's contract).
        let (view, o_layout) = unsafe { origin_view(origin, &o)? };
        w.require_passive("raccumulate", r)?;
        let (d, t_layout) = target_at(w, r, d, &t)?;
        w.accumulate_layout(view, &o_layout, ty, r, d, &t_layout, op)?;
        Ok(onesided::Request::completed())
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rget_accumulate<C: Into<i64>>(
    origin: *const c_void,
    o_count: C,
    o_type: MPI_Datatype,
    result: *mut c_void,
    r_count: C,
    r_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: C,
    t_type: MPI_Datatype,
    op: MPI_Op,
    win: MPI_Win,
    request: *mut abi::MPI_Request,
) -> CallResult {
    with_request(win, request, |w| {
        let op = mpi_op(op)?;
        let t_count: i64 = t_count.into();
        let (o_count, r_count): (i64, i64) = (o_count.into(), r_count.into());
        let (origin_arg, result_arg) = ((o_count, o_type), (r_count, r_type));
        match screen_get_acc(
            op,
            target,
            t_disp,
            origin_arg,
            result_arg,
            (t_count, t_type),
        )? {
            Screen::Move => {}
            Screen::NullTarget => return Ok(onesided::Request::completed()),
            Screen::Empty => return nothing_requested(w, target, t_disp),
        }
        let (res, t) = acc_pair("rget_accumulate", (r_count, r_type), (t_count, t_type))?;
        let zeros;
        let (o, o_addr) = if op == onesided::Op::NoOp {
            zeros = vec![0u8; t.bytes];
            (no_op_origin(&t)?, zeros.as_ptr().cast::<c_void>())
        } else {
            let o = acc_pair("rget_accumulate", (o_count, o_type), (t_count, t_type))?.0;
            (o, origin)
        };
        let ty = acc_elem(&o, &t, op)?;
        let (r, d) = (rank(target)?, disp(t_disp)?);
        if o.contiguous() && t.contiguous() && res.contiguous() {
            // SAFETY: the origin buffer of `t.bytes` bytes; MPI's contract for the result
            // buffer, as in rget.
            return unsafe {
                w.rget_accumulate(bytes(o_addr, t.bytes), result.cast(), ty, r, d, op)
            };
        }
        // SAFETY: the caller's buffers (MPI's contract).
        let ((src, o_layout), (out, r_layout)) =
            unsafe { (origin_view(o_addr, &o)?, origin_view(result, &res)?) };
        w.require_passive("rget_accumulate", r)?;
        let (d, t_layout) = target_at(w, r, d, &t)?;
        w.get_accumulate_layout(src, &o_layout, out, &r_layout, ty, r, d, &t_layout, op)?;
        Ok(onesided::Request::completed())
    })
}

/// `MPI_Request_get_status`: drives our request first (MPICH's never polls a generalized
/// request), and onesided's progress once in a process that serves windows across nodes
/// (a program may poll this call in a loop of its own), then asks the host.
pub(crate) unsafe fn request_get_status(
    request: abi::MPI_Request,
    flag: *mut c_int,
    status: *mut c_void,
) -> CallResult {
    crate::requests::poll_if_ours(request);
    crate::interpose::serve_once();
    // SAFETY: the program's arguments, passed on.
    let rc = unsafe { (host().request_get_status)(request, flag, status.cast()) };
    if rc == abi::MPI_SUCCESS {
        Ok(())
    } else {
        Err(Failure::Comm(
            abi::abi().comm_world,
            rc,
            "MPI_Request_get_status".into(),
        ))
    }
}

// ---- Error handlers ---------------------------------------------------------------------

pub(crate) unsafe fn win_set_errhandler(win: MPI_Win, eh: abi::MPI_Errhandler) -> CallResult {
    let e = entry(win)?;
    // Relaxed: see Entry::errhandler.
    let old = e.errhandler.swap(eh, std::sync::atomic::Ordering::Relaxed);
    release_errhandler(old, state::errhandler_moved(Some(old), Some(eh)));
    Ok(())
}

/// Frees `eh` at the host `count` times: the program's frees of a handler that windows held
/// until now ([`state::errhandler_moved`]).
fn release_errhandler(eh: abi::MPI_Errhandler, count: usize) {
    for _ in 0..count {
        let mut copy = eh;
        // SAFETY: a handle the program freed while a window held it: the host still counts
        // that reference, which this gives back. An error has no caller to go to.
        let _ = unsafe { (host().errhandler_free)(&mut copy) };
    }
}

/// `MPI_Errhandler_free`: the references this library hands out or holds for windows are
/// freed here (see [`state::errhandler_freed_here`]); every other one at the host.
/// Before `MPI_Init` (the sessions model) no window exists and the ABI is not known yet:
/// the host's alone.
pub(crate) unsafe fn errhandler_free(eh: *mut abi::MPI_Errhandler) -> CallResult {
    let ours = UNIVERSE.get().is_some() && !eh.is_null() && {
        // SAFETY: the caller's argument, checked non-null: a handle of its ABI.
        let handle = unsafe { abi::load_handle(eh) };
        handle != abi::abi().errhandler_null && state::errhandler_freed_here(handle)
    };
    if ours {
        // SAFETY: checked non-null.
        unsafe { abi::store_handle(eh, abi::abi().errhandler_null) };
        return Ok(());
    }
    // SAFETY: the program's argument, passed on (MPI_ERRHANDLER_NULL on return).
    match unsafe { (host().errhandler_free)(eh) } {
        abi::MPI_SUCCESS => Ok(()),
        rc => Err(Failure::Comm(
            abi::abi().comm_world,
            rc,
            "MPI_Errhandler_free".into(),
        )),
    }
}

pub(crate) unsafe fn win_get_errhandler(win: MPI_Win, eh: *mut abi::MPI_Errhandler) -> CallResult {
    let e = entry(win)?;
    if eh.is_null() {
        return Err(Failure::Window(
            e,
            Error::InvalidArgument("errhandler is NULL".into()),
        ));
    }
    let current = e.errhandler();
    state::errhandler_answered(current);
    // SAFETY: checked non-null.
    unsafe { abi::store_handle(eh, current) };
    Ok(())
}

pub(crate) unsafe fn win_get_attr(
    win: MPI_Win,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> CallResult {
    // SAFETY: the caller's arguments.
    unsafe { win_get_attr_as(win, keyval, value, flag, ATTR_PTR) }
}

/// `MPIR_ATTR_PTR`: the attribute is a `void *` (C); bit 0 set (`MPIR_ATTR_AINT` 1,
/// `MPIR_ATTR_INT` 3) means an integer of Fortran's (`MPII_Win_get_attr`).
pub(crate) const ATTR_PTR: c_int = 0;
const ATTR_INT: c_int = 3;

/// `MPI_Win_get_attr` for C (`kind` = `ATTR_PTR`: predefined attributes other than the base
/// are pointers to their values) and for Fortran (an integer kind: the values themselves).
pub(crate) unsafe fn win_get_attr_as(
    win: MPI_Win,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
    kind: c_int,
) -> CallResult {
    let e = entry(win)?;
    if value.is_null() || flag.is_null() {
        return Err(Failure::Window(
            e,
            Error::InvalidArgument("a NULL out-argument".into()),
        ));
    }
    let mut integer = kind & 1 != 0;
    // MPICH's Fortran forms of the predefined keyvals are the C values + 1
    // (MPI_WIN_SIZE: 0x66000003 in C, 0x66000004 in Fortran); they return values.
    let a = abi::abi();
    let keyval = if std::ptr::eq(a, &abi::mpich::ABI)
        && (a.win_attrs[0] + 1..=a.win_attrs[4] + 1).contains(&keyval)
        && keyval % 2 == 0
    {
        integer = true;
        keyval - 1
    } else {
        keyval
    };
    let [base, size, disp_unit, flavor, model] = a.win_attrs;
    let found: Option<usize> = match keyval {
        k if k == base => Some(e.win.base_bytes() as usize),
        k if k == size && integer => Some(e.size_attr as usize),
        k if k == size => Some(&e.size_attr as *const abi::MPI_Aint as usize),
        k if k == disp_unit && integer => Some(e.disp_unit_attr as usize),
        k if k == disp_unit => Some(&e.disp_unit_attr as *const c_int as usize),
        k if k == flavor && integer => Some(e.flavor_attr as usize),
        k if k == flavor => Some(&e.flavor_attr as *const c_int as usize),
        k if k == model && integer => Some(e.model_attr as usize),
        k if k == model => Some(&e.model_attr as *const c_int as usize),
        k if state::keyval(k).is_some() => {
            let attrs = e
                .attrs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match attrs.iter().find(|(key, _)| *key == k) {
                Some(&(_, v)) => Some(v),
                None => {
                    // SAFETY: the caller's flag, checked non-null.
                    unsafe { *flag = 0 };
                    return Ok(());
                }
            }
        }
        _ => None,
    };
    match found {
        Some(v) => {
            // SAFETY: the caller's slot (a `void *`, an MPI_Aint or an int, as `kind`
            // says) and flag, checked non-null.
            unsafe {
                if kind == ATTR_INT {
                    *value.cast::<c_int>() = v as c_int;
                } else {
                    *value.cast::<usize>() = v;
                }
                *flag = 1;
            }
            Ok(())
        }
        None => Err(Failure::WindowCode(
            e,
            abi::abi().err.keyval,
            format!("keyval {keyval:#x} is not a window keyval"),
        )),
    }
}

/// Runs the delete callback of attribute `keyval` = `value` of window `e`.
fn delete_attr_value(e: &Entry, keyval: c_int, value: usize) -> c_int {
    match state::keyval(keyval) {
        Some(state::Keyval {
            delete: Some(f),
            extra,
            ..
        }) => {
            // SAFETY: the program's delete callback with the arguments MPI specifies.
            unsafe {
                f(
                    e.handle(),
                    keyval,
                    value as *mut c_void,
                    extra as *mut c_void,
                )
            }
        }
        _ => abi::MPI_SUCCESS,
    }
}

/// Deletes attribute `keyval` = `value` of window `e` (already out of its table): runs its
/// delete callback, then frees the host's keyval if the program freed it and this was its
/// last use.
fn delete_attr(e: &Entry, keyval: c_int, value: usize) -> c_int {
    let rc = delete_attr_value(e, keyval, value);
    if let Some(mut k) = state::keyval_released(keyval) {
        // SAFETY: the host's handle, which the program freed while attributes used it.
        unsafe { (host().win_free_keyval)(&mut k) };
    }
    rc
}

/// Deletes every attribute of `e` (before the window is freed).
fn delete_all_attrs(e: &Entry) -> c_int {
    let attrs = std::mem::take(
        &mut *e
            .attrs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let mut rc = abi::MPI_SUCCESS;
    for (k, v) in attrs {
        let r = delete_attr(e, k, v);
        if rc == abi::MPI_SUCCESS {
            rc = r;
        }
    }
    rc
}

pub(crate) unsafe fn win_set_attr(win: MPI_Win, keyval: c_int, value: *mut c_void) -> CallResult {
    let e = entry(win)?;
    if !state::keyval_usable(keyval) {
        return Err(Failure::WindowCode(
            e,
            abi::abi().err.keyval,
            format!("keyval {keyval:#x} is not a user window keyval (or was freed)"),
        ));
    }
    let old = {
        let mut attrs = e
            .attrs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match attrs.iter_mut().find(|(k, _)| *k == keyval) {
            Some(slot) => Some(std::mem::replace(&mut slot.1, value as usize)),
            None => {
                attrs.push((keyval, value as usize));
                state::keyval_used(keyval);
                None
            }
        }
    };
    if let Some(old) = old {
        let rc = delete_attr_value(&e, keyval, old);
        if rc != abi::MPI_SUCCESS {
            return Err(Failure::WindowCode(
                e,
                rc,
                "the attribute's delete callback failed".into(),
            ));
        }
    }
    Ok(())
}

pub(crate) unsafe fn win_delete_attr(win: MPI_Win, keyval: c_int) -> CallResult {
    let e = entry(win)?;
    let found = {
        let mut attrs = e
            .attrs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        attrs
            .iter()
            .position(|(k, _)| *k == keyval)
            .map(|i| attrs.swap_remove(i).1)
    };
    match found {
        Some(v) => {
            let rc = delete_attr(&e, keyval, v);
            if rc == abi::MPI_SUCCESS {
                Ok(())
            } else {
                Err(Failure::WindowCode(
                    e,
                    rc,
                    "the attribute's delete callback failed".into(),
                ))
            }
        }
        None => Err(Failure::WindowCode(
            e,
            abi::abi().err.keyval,
            format!("the window has no attribute for keyval {keyval:#x}"),
        )),
    }
}

pub(crate) unsafe fn win_create_keyval(
    copy: Option<crate::host::CopyAttrFn>,
    delete: Option<crate::host::DeleteAttrFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> CallResult {
    if keyval.is_null() {
        return Err(Failure::Comm(
            abi::abi().comm_world,
            abi::abi().err.arg,
            "keyval is NULL".into(),
        ));
    }
    // The host makes the handle (unique, valid for its own calls); the callbacks are ours
    // to run, on our windows.
    // SAFETY: the program's arguments, passed on.
    let rc = unsafe { (host().win_create_keyval)(copy, delete, keyval, extra) };
    if rc != abi::MPI_SUCCESS {
        return Err(Failure::Comm(
            abi::abi().comm_world,
            rc,
            "MPI_Win_create_keyval".into(),
        ));
    }
    // SAFETY: set by the host.
    let k = unsafe { *keyval };
    state::add_keyval(k, state::Keyval::new(delete, extra as usize));
    Ok(())
}

pub(crate) unsafe fn win_free_keyval(keyval: *mut c_int) -> CallResult {
    // SAFETY: the caller's argument.
    let k = unsafe { in_out(keyval, "keyval")? };
    if !state::keyval_freed(k) {
        // Attributes still use it: the host frees it with the last one (`delete_attr`), so
        // that it cannot hand the number out again meanwhile.
        // SAFETY: checked non-null.
        unsafe { *keyval = abi::abi().keyval_invalid };
        return Ok(());
    }
    // SAFETY: the program's argument, passed on (MPI_KEYVAL_INVALID on return).
    let rc = unsafe { (host().win_free_keyval)(keyval) };
    if rc == abi::MPI_SUCCESS {
        Ok(())
    } else {
        Err(Failure::Comm(
            abi::abi().comm_world,
            rc,
            "MPI_Win_free_keyval".into(),
        ))
    }
}

pub(crate) unsafe fn win_create_errhandler(
    f: Option<crate::host::WinErrhandlerFn>,
    eh: *mut abi::MPI_Errhandler,
) -> CallResult {
    // SAFETY: the program's arguments, passed on: the host makes a valid handle.
    let rc = unsafe { (host().win_create_errhandler)(f, eh) };
    if rc != abi::MPI_SUCCESS {
        return Err(Failure::Comm(
            abi::abi().comm_world,
            rc,
            "MPI_Win_create_errhandler".into(),
        ));
    }
    if let Some(f) = f {
        // SAFETY: set by the host.
        state::add_errhandler(unsafe { abi::load_handle(eh) }, f);
    }
    Ok(())
}

pub(crate) unsafe fn win_call_errhandler(win: MPI_Win, code: c_int) -> CallResult {
    let e = entry(win)?;
    Err(Failure::Raised(e, code))
}

pub(crate) unsafe fn win_get_group(win: MPI_Win, group: *mut MPI_Group) -> CallResult {
    let e = entry(win)?;
    if group.is_null() {
        return Err(Failure::Window(
            e,
            Error::InvalidArgument("group is NULL".into()),
        ));
    }
    let mut copy = abi::abi().group_null;
    // SAFETY: the window's own group; excluding nobody makes a new handle the caller frees.
    let rc = unsafe { (crate::host::host().group_excl)(e.group, 0, std::ptr::null(), &mut copy) };
    if rc != abi::MPI_SUCCESS {
        return Err(Failure::WindowCode(e, rc, "MPI_Group_excl".into()));
    }
    // SAFETY: checked non-null.
    unsafe { abi::store_handle(group, copy) };
    Ok(())
}

pub(crate) unsafe fn win_get_info(win: MPI_Win, info: *mut MPI_Info) -> CallResult {
    let e = entry(win)?;
    if info.is_null() {
        return Err(Failure::Window(
            e,
            Error::InvalidArgument("info is NULL".into()),
        ));
    }
    let mut out = abi::abi().info_null;
    // SAFETY: a new info object for the caller.
    let rc = unsafe { (crate::host::host().info_create)(&mut out) };
    if rc != abi::MPI_SUCCESS {
        return Err(Failure::WindowCode(e, rc, "MPI_Info_create".into()));
    }
    // A key longer than the MPI's info keys may be (Open MPI: 35 bytes) is left out.
    let longest = abi::abi().max_info_key;
    for (k, v) in e.win.get_info().iter().filter(|(k, _)| k.len() <= longest) {
        let (Ok(k), Ok(v)) = (std::ffi::CString::new(k), std::ffi::CString::new(v)) else {
            continue;
        };
        // SAFETY: NUL-terminated strings; the info object made above.
        unsafe { (crate::host::host().info_set)(out, k.as_ptr(), v.as_ptr()) };
    }
    // Tells a program (and our tests, under any ABI) that the window is onesided's.
    // SAFETY: as above.
    unsafe { (crate::host::host().info_set)(out, c"onesided".as_ptr(), c"true".as_ptr()) };
    // SAFETY: checked non-null.
    unsafe { abi::store_handle(info, out) };
    Ok(())
}

pub(crate) unsafe fn win_set_info(win: MPI_Win, info: MPI_Info) -> CallResult {
    let e = entry(win)?;
    let i = match info_of(info) {
        Ok(i) => i,
        Err(rc) => return Err(Failure::WindowCode(e, rc, "invalid info".into())),
    };
    e.win.set_info(&i).map_err(|err| Failure::Window(e, err))
}

/// `MPI_MAX_OBJECT_NAME`.
const MAX_OBJECT_NAME: usize = 128;

pub(crate) unsafe fn win_set_name(win: MPI_Win, name: *const c_char) -> CallResult {
    let e = entry(win)?;
    if name.is_null() {
        return Err(Failure::Window(
            e,
            Error::InvalidArgument("name is NULL".into()),
        ));
    }
    // SAFETY: the caller's NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
    // Longer names are cut to what MPI_Win_get_name can return (MPI_MAX_OBJECT_NAME - 1).
    let cut: String = text.chars().take(MAX_OBJECT_NAME - 1).collect();
    *e.name
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = cut;
    Ok(())
}

pub(crate) unsafe fn win_get_name(win: MPI_Win, name: *mut c_char, len: *mut c_int) -> CallResult {
    // MPI-4.1: the null handle has a name too, its own.
    let n = if win == abi::abi().win_null {
        if name.is_null() || len.is_null() {
            let world = abi::abi().comm_world;
            return Err(Failure::Comm(
                world,
                abi::abi().err.arg,
                "a NULL out-argument".into(),
            ));
        }
        "MPI_WIN_NULL".to_string()
    } else {
        let e = entry(win)?;
        if name.is_null() || len.is_null() {
            return Err(Failure::Window(
                e,
                Error::InvalidArgument("a NULL out-argument".into()),
            ));
        }
        let n = e
            .name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        n
    };
    let b = n.as_bytes();
    let k = b.len().min(MAX_OBJECT_NAME - 1);
    // SAFETY: the caller's buffer of MPI_MAX_OBJECT_NAME bytes (MPI's contract).
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr().cast::<c_char>(), name, k);
        *name.add(k) = 0;
        *len = k as c_int;
    }
    Ok(())
}

// ---- Communicators ----------------------------------------------------------------------

/// `MPI_Comm_split_type`: the host's, except `MPI_COMM_TYPE_SHARED` under virtual nodes
/// (`ONESIDED_NODES`), which splits by onesided's node — the processes a shared window may
/// span — where the host would see one machine and a program's `MPI_Win_allocate_shared`
/// over its answer would span virtual nodes (`MPI_ERR_RMA_SHARED`).
pub(crate) unsafe fn comm_split_type(
    comm: MPI_Comm,
    split_type: c_int,
    key: c_int,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
) -> CallResult {
    let virtual_node = (split_type == abi::abi().comm_type_shared
        && std::env::var_os(onesided::bootstrap::ENV_NODES).is_some())
    .then(|| UNIVERSE.get())
    .flatten()
    .and_then(|u| u.world().node_of(u.world().rank()).ok());
    // SAFETY: the caller's arguments, as MPI specifies them (the color a node number).
    let code = unsafe {
        match virtual_node {
            Some(node) => (host().comm_split)(comm, node as c_int, key, newcomm),
            None => (host().comm_split_type)(comm, split_type, key, info, newcomm),
        }
    };
    if code == 0 {
        Ok(())
    } else {
        Err(Failure::Host(code))
    }
}

// ---- Memory -----------------------------------------------------------------------------

pub(crate) unsafe fn alloc_mem(size: MPI_Aint, info: MPI_Info, baseptr: *mut c_void) -> CallResult {
    let fail = |code: c_int, text: String| Failure::Comm(abi::abi().comm_world, code, text);
    if baseptr.is_null() {
        return Err(fail(abi::abi().err.arg, "baseptr is NULL".into()));
    }
    let bytes =
        usize::try_from(size).map_err(|_| fail(abi::abi().err.arg, format!("size {size}")))?;
    if UNIVERSE.get().is_none() || bytes == 0 {
        // Before MPI_Init (or for nothing) the host's allocator serves.
        // SAFETY: the caller's arguments, passed on.
        let rc = unsafe { (host().alloc_mem)(size, info, baseptr) };
        return if rc == abi::MPI_SUCCESS {
            Ok(())
        } else {
            Err(fail(rc, "MPI_Alloc_mem".into()))
        };
    }
    let mem = onesided::alloc_mem::<u8>(bytes)
        .map_err(|e| fail(abi::error_code(e.mpi_class()), e.to_string()))?;
    let base = state::keep_allocation(mem);
    // SAFETY: the caller's `void **`, checked non-null.
    unsafe { *baseptr.cast::<*mut c_void>() = base.cast() };
    Ok(())
}

pub(crate) unsafe fn free_mem(base: *mut c_void) -> CallResult {
    if state::release_allocation(base as usize) {
        return Ok(());
    }
    // Not ours: the host's (allocated before MPI_Init, or of zero bytes).
    // SAFETY: the caller's pointer, passed on.
    let rc = unsafe { (host().free_mem)(base) };
    if rc == abi::MPI_SUCCESS {
        Ok(())
    } else {
        Err(Failure::Comm(
            abi::abi().comm_world,
            rc,
            "MPI_Free_mem".into(),
        ))
    }
}
