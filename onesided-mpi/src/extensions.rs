//! The seeds' extensions as C calls (`mpi_onesided.h`): seed 004's nonblocking
//! synchronization (`MPIX_Win_ifence` & co., each returning a genuine MPICH request), seed
//! 000's window duplication (`MPIX_Win_dup_with_info`) and remote-completing requests
//! (`MPIX_Rrput`, `MPIX_Rraccumulate`) and notified RMA (`MPIX_Put_notify` & co.: a
//! target's notification counters count the operations whose data is in place, the
//! direction of the MPI Forum's notified RMA that supersedes seed 000's §5.1 sketch). Scope
//! and order are info keys (`mpi_win_scope`, `mpi_win_order`), set at creation, with
//! `MPI_Win_set_info` or on a duplicate.

use std::os::raw::{c_int, c_void};

use onesided::{Error, RawWindow};

use crate::abi::{self, MPI_Aint, MPI_Datatype, MPI_Group, MPI_Info, MPI_Op, MPI_Request, MPI_Win};
use crate::calls::{self, CallResult, Failure};
use crate::state::{self, Entry};

/// Runs the nonblocking call `f` on `win` and hands its request to the host.
fn nonblocking(
    win: MPI_Win,
    request: *mut MPI_Request,
    f: impl FnOnce(&RawWindow) -> onesided::Result<onesided::Request<'_>>,
) -> CallResult {
    calls::with_request(win, request, |w| {
        let r = f(w)?;
        w.own_request(r)
    })
}

pub(crate) unsafe fn win_ifence(a: c_int, win: MPI_Win, request: *mut MPI_Request) -> CallResult {
    let a = calls::checked_assert(&calls::entry(win)?, a)?;
    nonblocking(win, request, |w| w.ifence(a))
}

pub(crate) unsafe fn win_ilock(
    kind: c_int,
    r: c_int,
    a: c_int,
    win: MPI_Win,
    request: *mut MPI_Request,
) -> CallResult {
    let kind = match calls::lock_type(kind) {
        Some(k) => k,
        None => {
            return Err(calls::window_code(
                win,
                abi::abi().err.locktype,
                format!("lock type {kind}"),
            ))
        }
    };
    let a = calls::checked_assert(&calls::entry(win)?, a)?;
    nonblocking(win, request, |w| w.ilock(kind, calls::rank(r)?, a))
}

pub(crate) unsafe fn win_iunlock(r: c_int, win: MPI_Win, request: *mut MPI_Request) -> CallResult {
    nonblocking(win, request, |w| w.iunlock(calls::rank(r)?))
}

pub(crate) unsafe fn win_ilock_all(
    a: c_int,
    win: MPI_Win,
    request: *mut MPI_Request,
) -> CallResult {
    let a = calls::checked_assert(&calls::entry(win)?, a)?;
    nonblocking(win, request, |w| w.ilock_all(a))
}

pub(crate) unsafe fn win_iunlock_all(win: MPI_Win, request: *mut MPI_Request) -> CallResult {
    nonblocking(win, request, RawWindow::iunlock_all)
}

pub(crate) unsafe fn win_iflush(r: c_int, win: MPI_Win, request: *mut MPI_Request) -> CallResult {
    nonblocking(win, request, |w| w.iflush(calls::rank(r)?))
}

pub(crate) unsafe fn win_iflush_all(win: MPI_Win, request: *mut MPI_Request) -> CallResult {
    nonblocking(win, request, RawWindow::iflush_all)
}

pub(crate) unsafe fn win_iflush_local(
    r: c_int,
    win: MPI_Win,
    request: *mut MPI_Request,
) -> CallResult {
    nonblocking(win, request, |w| w.iflush_local(calls::rank(r)?))
}

pub(crate) unsafe fn win_iflush_local_all(win: MPI_Win, request: *mut MPI_Request) -> CallResult {
    nonblocking(win, request, RawWindow::iflush_local_all)
}

pub(crate) unsafe fn win_ipost(
    group: MPI_Group,
    a: c_int,
    win: MPI_Win,
    request: *mut MPI_Request,
) -> CallResult {
    let (_, g, a) = calls::opening(win, group, a)?;
    nonblocking(win, request, |w| w.ipost(&g, a))
}

pub(crate) unsafe fn win_istart(
    group: MPI_Group,
    a: c_int,
    win: MPI_Win,
    request: *mut MPI_Request,
) -> CallResult {
    let (_, g, a) = calls::opening(win, group, a)?;
    nonblocking(win, request, |w| w.istart(&g, a))
}

pub(crate) unsafe fn win_icomplete(win: MPI_Win, request: *mut MPI_Request) -> CallResult {
    nonblocking(win, request, RawWindow::icomplete)
}

pub(crate) unsafe fn win_iwait(win: MPI_Win, request: *mut MPI_Request) -> CallResult {
    nonblocking(win, request, RawWindow::iwait)
}

/// A second handle to `win` with `info` on top of its info (seed 000 §3); freed on its own
/// with `MPI_Win_free` (local for a duplicate).
pub(crate) unsafe fn win_dup_with_info(
    win: MPI_Win,
    info: MPI_Info,
    newwin: *mut MPI_Win,
) -> CallResult {
    let e = calls::entry(win)?;
    if newwin.is_null() {
        return Err(Failure::Window(
            e,
            Error::InvalidArgument("newwin is NULL".into()),
        ));
    }
    let i = calls::info_of(info)
        .map_err(|rc| Failure::WindowCode(e.clone(), rc, "invalid info".into()))?;
    let dup = e
        .win
        .dup_with_info(&i)
        .map_err(|err| Failure::Window(e.clone(), err))?;
    // The duplicate's own copy of the group (each handle frees its own).
    let mut group = abi::abi().group_null;
    // SAFETY: the window's group; excluding nobody copies it.
    unsafe { (crate::host::host().group_excl)(e.group, 0, std::ptr::null(), &mut group) };
    let entry = Entry::new(dup, e.comm, group);
    // Relaxed: see Entry::errhandler.
    entry
        .errhandler
        .store(e.errhandler(), std::sync::atomic::Ordering::Relaxed);
    let handle = state::insert(entry);
    // SAFETY: checked non-null.
    unsafe { abi::store_handle(newwin, handle) };
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rrput(
    origin: *const c_void,
    o_count: c_int,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: c_int,
    t_type: MPI_Datatype,
    win: MPI_Win,
    request: *mut MPI_Request,
) -> CallResult {
    calls::with_request(win, request, |w| {
        let (o, t) = calls::pair("rrput", (o_count.into(), o_type), (t_count.into(), t_type))?;
        let (r, d) = (calls::rank(target)?, calls::disp(t_disp)?);
        if o.contiguous() && t.contiguous() {
            // SAFETY: the caller's origin buffer of `o.bytes` bytes.
            return w.rrput(unsafe { calls::bytes(origin, o.bytes) }, r, d);
        }
        // SAFETY: the caller's origin buffer (MPI's contract).
        let (view, o_layout) = unsafe { calls::origin_view(origin, &o)? };
        let (d, t_layout) = calls::target_at(w, r, d, &t)?;
        w.rrput_layout(view, &o_layout, r, d, &t_layout)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rraccumulate(
    origin: *const c_void,
    o_count: c_int,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: c_int,
    t_type: MPI_Datatype,
    op: MPI_Op,
    win: MPI_Win,
    request: *mut MPI_Request,
) -> CallResult {
    calls::with_request(win, request, |w| {
        let (o, t) = calls::acc_pair(
            "rraccumulate",
            (o_count.into(), o_type),
            (t_count.into(), t_type),
        )?;
        let op = calls::mpi_op(op)?;
        let ty = calls::acc_elem(&o, &t, op)?;
        let (r, d) = (calls::rank(target)?, calls::disp(t_disp)?);
        if o.contiguous() && t.contiguous() {
            // SAFETY: the caller's origin buffer of `o.bytes` bytes.
            return w.rraccumulate(unsafe { calls::bytes(origin, o.bytes) }, ty, r, d, op);
        }
        // SAFETY: the caller's origin buffer (MPI's contract).
        let (view, o_layout) = unsafe { calls::origin_view(origin, &o)? };
        let (d, t_layout) = calls::target_at(w, r, d, &t)?;
        w.rraccumulate_layout(view, &o_layout, ty, r, d, &t_layout, op)
    })
}

// ---- Notified RMA ---------------------------------------------------------------------

/// A notification index argument.
fn notification(idx: c_int) -> onesided::Result<usize> {
    usize::try_from(idx)
        .map_err(|_| Error::InvalidArgument(format!("negative notification index {idx}")))
}

pub(crate) unsafe fn win_set_num_notify(win: MPI_Win, num: c_int) -> CallResult {
    calls::on_window(win, |w| {
        let n = usize::try_from(num)
            .map_err(|_| Error::InvalidArgument(format!("negative count {num}")))?;
        w.set_num_notify(n)
    })
}

pub(crate) unsafe fn win_get_num_notify(win: MPI_Win, num: *mut c_int) -> CallResult {
    calls::on_window(win, |w| {
        if num.is_null() {
            return Err(Error::InvalidArgument("num is NULL".into()));
        }
        // SAFETY: checked non-null; the caller's int.
        unsafe { *num = c_int::try_from(w.num_notify()).unwrap_or(c_int::MAX) };
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn put_notify(
    origin: *const c_void,
    o_count: c_int,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: c_int,
    t_type: MPI_Datatype,
    idx: c_int,
    win: MPI_Win,
) -> CallResult {
    calls::on_window(win, |w| {
        let (o, t) = calls::pair(
            "put_notify",
            (o_count.into(), o_type),
            (t_count.into(), t_type),
        )?;
        let (r, d, i) = (
            calls::rank(target)?,
            calls::disp(t_disp)?,
            notification(idx)?,
        );
        if o.contiguous() && t.contiguous() {
            // SAFETY: the caller's origin buffer of `o.bytes` bytes.
            return w.put_notify(unsafe { calls::bytes(origin, o.bytes) }, r, d, i);
        }
        // SAFETY: the caller's origin buffer (MPI's contract).
        let (view, o_layout) = unsafe { calls::origin_view(origin, &o)? };
        let (d, t_layout) = calls::target_at(w, r, d, &t)?;
        w.put_layout_notify(view, &o_layout, r, d, &t_layout, i)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn get_notify(
    origin: *mut c_void,
    o_count: c_int,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: c_int,
    t_type: MPI_Datatype,
    idx: c_int,
    win: MPI_Win,
) -> CallResult {
    calls::on_window(win, |w| {
        let (o, t) = calls::pair(
            "get_notify",
            (o_count.into(), o_type),
            (t_count.into(), t_type),
        )?;
        let (r, d, i) = (
            calls::rank(target)?,
            calls::disp(t_disp)?,
            notification(idx)?,
        );
        if o.contiguous() && t.contiguous() {
            // SAFETY: the caller's origin buffer of `o.bytes` bytes.
            return w.get_notify(unsafe { calls::bytes_mut(origin, o.bytes) }, r, d, i);
        }
        // SAFETY: the caller's origin buffer (MPI's contract).
        let (view, o_layout) = unsafe { calls::origin_view(origin, &o)? };
        let (d, t_layout) = calls::target_at(w, r, d, &t)?;
        w.get_layout_notify(view, &o_layout, r, d, &t_layout, i)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn accumulate_notify(
    origin: *const c_void,
    o_count: c_int,
    o_type: MPI_Datatype,
    target: c_int,
    t_disp: MPI_Aint,
    t_count: c_int,
    t_type: MPI_Datatype,
    op: MPI_Op,
    idx: c_int,
    win: MPI_Win,
) -> CallResult {
    calls::on_window(win, |w| {
        let op = calls::mpi_op(op)?;
        let (o, t) = calls::acc_pair(
            "accumulate_notify",
            (o_count.into(), o_type),
            (t_count.into(), t_type),
        )?;
        let ty = calls::acc_elem(&o, &t, op)?;
        let (r, d, i) = (
            calls::rank(target)?,
            calls::disp(t_disp)?,
            notification(idx)?,
        );
        if o.contiguous() && t.contiguous() {
            // SAFETY: the caller's origin buffer of `o.bytes` bytes.
            let src = unsafe { calls::bytes(origin, o.bytes) };
            return w.accumulate_notify(src, ty, r, d, op, i);
        }
        // SAFETY: the caller's origin buffer (MPI's contract).
        let (view, o_layout) = unsafe { calls::origin_view(origin, &o)? };
        let (d, t_layout) = calls::target_at(w, r, d, &t)?;
        w.accumulate_layout_notify(view, &o_layout, ty, r, d, &t_layout, op, i)
    })
}

/// Writes `v` to the caller's `MPI_Count`.
fn count_out(out: *mut abi::MPI_Count, v: u64) -> onesided::Result<()> {
    if out.is_null() {
        return Err(Error::InvalidArgument("value is NULL".into()));
    }
    // SAFETY: checked non-null; the caller's MPI_Count.
    unsafe { *out = abi::MPI_Count::try_from(v).unwrap_or(abi::MPI_Count::MAX) };
    Ok(())
}

pub(crate) unsafe fn win_get_notify_value(
    win: MPI_Win,
    idx: c_int,
    value: *mut abi::MPI_Count,
) -> CallResult {
    calls::on_window(win, |w| {
        count_out(value, w.notify_value(notification(idx)?)?)
    })
}

pub(crate) unsafe fn win_reset_notify_value(
    win: MPI_Win,
    idx: c_int,
    value: *mut abi::MPI_Count,
) -> CallResult {
    calls::on_window(win, |w| {
        if value.is_null() {
            return Err(Error::InvalidArgument("value is NULL".into()));
        }
        count_out(value, w.reset_notify_value(notification(idx)?)?)
    })
}

pub(crate) unsafe fn win_wait_notify(
    win: MPI_Win,
    idx: c_int,
    value: abi::MPI_Count,
    request: *mut MPI_Request,
) -> CallResult {
    calls::with_request(win, request, |w| {
        let v = u64::try_from(value)
            .map_err(|_| Error::InvalidArgument(format!("negative count {value}")))?;
        w.wait_notify_owned(notification(idx)?, v)
    })
}

// ---- Memory handles (seed 000 §4, Listing 5) -------------------------------------------

/// The handle bytes at `memhandle` (a buffer of `MPIX_MAX_MEMHANDLE_SIZE` bytes).
///
/// # Safety
/// `memhandle` points at a handle this library wrote (MPI's contract for the argument).
unsafe fn handle_at(memhandle: *const c_void) -> onesided::Result<onesided::MemHandle> {
    if memhandle.is_null() {
        return Err(Error::InvalidArgument("memhandle is NULL".into()));
    }
    // SAFETY: the caller's handle buffer, at least SIZE bytes.
    let bytes = unsafe { calls::bytes(memhandle, onesided::MemHandle::SIZE) };
    onesided::MemHandle::from_bytes(bytes)
}

pub(crate) unsafe fn memhandle_create(
    base: *mut c_void,
    size: MPI_Aint,
    _info: MPI_Info,
    parent: MPI_Win,
    memhandle: *mut c_void,
    memhandle_size: *mut c_int,
) -> CallResult {
    calls::on_window(parent, |w| {
        if memhandle.is_null() || memhandle_size.is_null() {
            return Err(Error::InvalidArgument(
                "memhandle or memhandle_size is NULL".into(),
            ));
        }
        let bytes = usize::try_from(size)
            .map_err(|_| Error::InvalidArgument(format!("negative size {size}")))?;
        // SAFETY: MPI's contract for the region: valid until the handle is released.
        let h = unsafe { w.memhandle_create(base.cast(), bytes)? };
        let out = h.as_bytes();
        // SAFETY: the caller's buffer of MPIX_MAX_MEMHANDLE_SIZE bytes (>= out.len()) and
        // int, both checked non-null.
        unsafe {
            std::ptr::copy_nonoverlapping(out.as_ptr(), memhandle.cast::<u8>(), out.len());
            *memhandle_size = out.len() as c_int;
        }
        Ok(())
    })
}

pub(crate) unsafe fn memhandle_release(memhandle: *mut c_void, parent: MPI_Win) -> CallResult {
    calls::on_window(parent, |w| {
        // SAFETY: the caller's handle (MPI's contract).
        let h = unsafe { handle_at(memhandle)? };
        w.memhandle_release(&h)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn win_from_memhandle(
    memhandle: *const c_void,
    size: MPI_Aint,
    disp_unit: c_int,
    _info: MPI_Info,
    target: c_int,
    parent: MPI_Win,
    newwin: *mut MPI_Win,
) -> CallResult {
    let e = calls::entry(parent)?;
    calls::not_memhandle(&e)?;
    let made = (|| {
        if newwin.is_null() {
            return Err(Error::InvalidArgument("newwin is NULL".into()));
        }
        // SAFETY: the caller's handle (MPI's contract).
        let h = unsafe { handle_at(memhandle)? };
        if calls::rank(target)? != h.owner() {
            return Err(Error::InvalidArgument(format!(
                "the memory handle is rank {}'s, not rank {target}'s",
                h.owner()
            )));
        }
        let bytes = usize::try_from(size)
            .map_err(|_| Error::InvalidArgument(format!("negative size {size}")))?;
        let unit = usize::try_from(disp_unit)
            .map_err(|_| Error::InvalidArgument(format!("disp_unit {disp_unit}")))?;
        let mem = e.win.window_from_memhandle(&h, bytes, unit)?;
        let parent_handle = e.win.dup_with_info(&onesided::WinInfo::new())?;
        Ok((mem, parent_handle))
    })();
    let (mem, parent_handle) = made.map_err(|err| Failure::Window(e.clone(), err))?;
    // The new window's own copy of the group (each handle frees its own).
    let mut group = abi::abi().group_null;
    // SAFETY: the parent's group; excluding nobody copies it.
    unsafe { (crate::host::host().group_excl)(e.group, 0, std::ptr::null(), &mut group) };
    let entry = Entry::memhandle(parent_handle, mem, e.comm, group);
    // Relaxed: see Entry::errhandler.
    entry
        .errhandler
        .store(e.errhandler(), std::sync::atomic::Ordering::Relaxed);
    let handle = state::insert(entry);
    // SAFETY: checked non-null above.
    unsafe { abi::store_handle(newwin, handle) };
    Ok(())
}
