//! Requests that mix with the host's: `MPI_Rput` & co. hand out genuine MPICH requests —
//! generalized requests of one class (`MPIX_Grequest_class_create`) whose poll function
//! drives onesided's request and whose wait function blocks in onesided's progress — so
//! `MPI_Wait`, `MPI_Waitall`, `MPI_Testany`, `MPI_Request_free` and tools work on them
//! unchanged, mixed with `MPI_Isend`/`MPI_Irecv` in one array.
//!
//! A request freed while its operation is pending (`MPI_Request_free`; MPICH then runs the
//! free function at once) is kept and driven to completion by later polls and at
//! `MPI_Finalize`: the operation must still complete (a deferred `MPI_Rget` still fills its
//! buffer).

use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use onesided::Request;

use crate::abi::{self, MPI_Status};
use crate::host::host;

/// One of our requests, behind the host's generalized request.
struct Pending {
    req: Mutex<Option<Request<'static>>>,
    /// The host's handle (set right after it is allocated).
    handle: AtomicUsize,
    /// `MPI_Grequest_complete` was called.
    completed: AtomicBool,
}

/// Our live requests: host handle → their `Pending` (an address), for
/// `MPI_Request_get_status`, which MPICH answers without polling a generalized request.
static LIVE: Mutex<Vec<(abi::MPI_Request, usize)>> = Mutex::new(Vec::new());

/// Requests freed while pending, driven until they complete.
static ORPHANS: Mutex<Vec<Request<'static>>> = Mutex::new(Vec::new());

/// The class of our requests (made at the first request, after `MPI_Init`).
static CLASS: OnceLock<c_int> = OnceLock::new();

unsafe extern "C" fn query(_extra: *mut c_void, status: *mut MPI_Status) -> c_int {
    if status.is_null() {
        return abi::MPI_SUCCESS;
    }
    // SAFETY: the host's status out-argument; an RMA request moves no message.
    unsafe {
        (host().status_set_elements)(status, abi::abi().uint8, 0);
        (host().status_set_cancelled)(status, 0);
        abi::set_status_source_tag(status, abi::abi().undefined, abi::abi().undefined);
    }
    abi::MPI_SUCCESS
}

unsafe extern "C" fn free(extra: *mut c_void) -> c_int {
    // SAFETY: `extra` is the Box made in `start`; MPICH calls free once.
    let pending = unsafe { Box::from_raw(extra.cast::<Pending>()) };
    let handle = pending.handle.load(Ordering::Acquire);
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|&(h, _)| h != handle);
    let req = pending
        .req
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(r) = req {
        if !r.is_complete() {
            ORPHANS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(r);
        }
    }
    abi::MPI_SUCCESS
}

unsafe extern "C" fn cancel(_extra: *mut c_void, _complete: c_int) -> c_int {
    // RMA operations cannot be cancelled; the request completes normally.
    abi::MPI_SUCCESS
}

/// Tests the request behind `extra`; completes the host's request when it is done.
unsafe extern "C" fn poll(extra: *mut c_void, _status: *mut MPI_Status) -> c_int {
    drive_orphans();
    // SAFETY: `extra` is a live Pending (freed only by `free`, after completion or
    // MPI_Request_free, after which MPICH no longer polls it).
    let p = unsafe { &*extra.cast::<Pending>() };
    if p.completed.load(Ordering::Acquire) {
        return abi::MPI_SUCCESS;
    }
    let mut slot = p.req.lock().unwrap_or_else(PoisonError::into_inner);
    let done = match slot.as_mut() {
        None => Ok(true),
        Some(r) => r.test(),
    };
    match done {
        Ok(true) => {
            slot.take();
            drop(slot);
            complete(p);
            abi::MPI_SUCCESS
        }
        Ok(false) => abi::MPI_SUCCESS,
        Err(e) => {
            slot.take();
            drop(slot);
            complete(p);
            abi::error_code(e.mpi_class())
        }
    }
}

/// Waits until every request of `states` completed (or `timeout` seconds passed, when
/// positive).
unsafe extern "C" fn wait(
    count: c_int,
    states: *mut *mut c_void,
    timeout: f64,
    status: *mut MPI_Status,
) -> c_int {
    let start = std::time::Instant::now();
    let mut spins = 0u32;
    loop {
        let mut all = true;
        for i in 0..count.max(0) as usize {
            // SAFETY: MPICH passes `count` extra states of our class.
            let extra = unsafe { *states.add(i) };
            // SAFETY: as in poll.
            let rc = unsafe { poll(extra, status) };
            if rc != abi::MPI_SUCCESS {
                return rc;
            }
            // SAFETY: as in poll.
            all &= unsafe { &*extra.cast::<Pending>() }
                .completed
                .load(Ordering::Acquire);
        }
        if all || (timeout > 0.0 && start.elapsed().as_secs_f64() >= timeout) {
            return abi::MPI_SUCCESS;
        }
        pause(&mut spins);
    }
}

/// One pause of a wait for requests: spin briefly, then yield, then sleep in short steps —
/// a wait for a peer (a lock grant, a post) can last long, and the peer may need this core.
fn pause(spins: &mut u32) {
    *spins += 1;
    if *spins > 4096 {
        std::thread::sleep(std::time::Duration::from_micros(50));
    } else if *spins > 64 {
        std::thread::yield_now();
    }
}

fn complete(p: &Pending) {
    if !p.completed.swap(true, Ordering::AcqRel) {
        // SAFETY: the live generalized request this Pending belongs to.
        unsafe { (host().grequest_complete)(p.handle.load(Ordering::Acquire)) };
    }
}

/// Drives the requests freed while pending.
fn drive_orphans() {
    let mut o = match ORPHANS.try_lock() {
        Ok(o) => o,
        Err(_) => return,
    };
    if o.is_empty() {
        return;
    }
    o.retain_mut(|r| !matches!(r.test(), Ok(true) | Err(_)));
}

/// Completes every orphaned request (at finalize).
pub(crate) fn finish_orphans() {
    let orphans = std::mem::take(&mut *ORPHANS.lock().unwrap_or_else(PoisonError::into_inner));
    for r in orphans {
        if let Err(e) = r.wait() {
            eprintln!("onesided-mpi: a request freed before it completed failed: {e}");
        }
    }
}

fn class(classes: &crate::host::GrequestClasses) -> Result<c_int, c_int> {
    if let Some(&c) = CLASS.get() {
        return Ok(c);
    }
    let mut c: c_int = 0;
    // SAFETY: our five functions have the prototypes of mpi.h.
    let rc = unsafe {
        (classes.create)(
            Some(query),
            Some(free),
            Some(cancel),
            Some(poll),
            Some(wait),
            &mut c,
        )
    };
    if rc != abi::MPI_SUCCESS {
        return Err(rc);
    }
    Ok(*CLASS.get_or_init(|| c))
}

/// A host request for `req`: completed at once when `req` already is.
pub(crate) fn start(req: Request<'static>) -> Result<abi::MPI_Request, c_int> {
    let classes = crate::host::grequest_classes();
    let done = req.is_complete();
    let req = Some(req).filter(|_| !done);
    let pending = Box::into_raw(Box::new(Pending {
        req: Mutex::new(req),
        handle: AtomicUsize::new(0),
        completed: AtomicBool::new(false),
    }));
    let mut handle = abi::abi().request_null;
    // SAFETY: `pending` is ours until the host calls `free`.
    let rc = match classes {
        Some(classes) => match class(classes) {
            // SAFETY: as above.
            Ok(class) => unsafe { (classes.allocate)(class, pending.cast(), &mut handle) },
            Err(rc) => rc,
        },
        // SAFETY: our three functions have the prototypes of mpi.h; as above.
        None => unsafe {
            (host().grequest_start)(
                Some(query),
                Some(free),
                Some(cancel),
                pending.cast(),
                &mut handle,
            )
        },
    };
    if rc != abi::MPI_SUCCESS {
        // SAFETY: MPICH did not take it.
        drop(unsafe { Box::from_raw(pending) });
        return Err(rc);
    }
    // SAFETY: live until `free`.
    let p = unsafe { &*pending };
    p.handle.store(handle, Ordering::Release);
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((handle, pending as usize));
    if done {
        complete(p);
    }
    Ok(handle)
}

/// Whether any request of ours is alive (handed out and not yet freed by the host).
pub(crate) fn any_live() -> bool {
    !LIVE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_empty()
}

/// Drives each of our requests among the `n` handles at `requests` (null entries and the
/// host's own are skipped): one that finished is completed at the host.
///
/// # Safety
/// `requests` holds `n` handles of the ABI (or is null with `n` 0).
unsafe fn drive(requests: *const abi::Handle, n: c_int) {
    if requests.is_null() {
        return;
    }
    for i in 0..n.max(0) as usize {
        // SAFETY: the caller's array of n handles.
        let h = unsafe { abi::handle_at(requests.cast(), i) };
        poll_if_ours(h);
    }
}

/// What a completion call does where the host cannot poll our requests (Open MPI), or
/// must not block in its own wait (`interpose`): drive
/// ours, then ask the host's test form (`test`: true when the call is done), until done —
/// with `once`, a single round (the `MPI_Test*` forms). The host's error handler has run on
/// a failing code, which is returned as is.
fn complete_with(
    requests: *mut abi::Handle,
    n: c_int,
    once: bool,
    mut test: impl FnMut() -> (c_int, bool),
) -> crate::calls::CallResult {
    let mut spins = 0u32;
    // A process serving windows across nodes keeps onesided progressing meanwhile: the
    // request may wait for a peer whose operations on us only this wait can apply.
    let mut foreign =
        crate::interpose::keeps_onesided_progressing().then(onesided::ForeignWait::new);
    loop {
        // SAFETY: the program's request array of n handles (MPI's contract).
        unsafe { drive(requests, n) };
        if once {
            // A test form: the program's own loop polls it, and may be all the progress
            // this process makes (no progress thread) — one turn of ours per call.
            crate::interpose::serve_once();
        }
        let (rc, done) = test();
        if rc != abi::MPI_SUCCESS {
            return Err(crate::calls::Failure::Host(rc));
        }
        if done || once {
            return Ok(());
        }
        match foreign.as_mut() {
            Some(f) => f.pause(),
            None => pause(&mut spins),
        }
    }
}

pub(crate) unsafe fn wait_one(
    request: *mut abi::Handle,
    status: *mut c_void,
) -> crate::calls::CallResult {
    complete_with(request, 1, false, || {
        let mut flag = 0;
        // SAFETY: the program's arguments, passed on.
        let rc = unsafe { (host().test)(request, &mut flag, status.cast()) };
        (rc, flag != 0)
    })
}

pub(crate) unsafe fn test_one(
    request: *mut abi::Handle,
    flag: *mut c_int,
    status: *mut c_void,
) -> crate::calls::CallResult {
    // SAFETY: as in wait.
    complete_with(request, 1, true, || {
        (unsafe { (host().test)(request, flag, status.cast()) }, true)
    })
}

pub(crate) unsafe fn waitall(
    count: c_int,
    requests: *mut abi::Handle,
    statuses: *mut c_void,
) -> crate::calls::CallResult {
    complete_with(requests, count, false, || {
        let mut flag = 0;
        // SAFETY: as in wait.
        let rc = unsafe { (host().testall)(count, requests, &mut flag, statuses.cast()) };
        (rc, flag != 0)
    })
}

pub(crate) unsafe fn testall(
    count: c_int,
    requests: *mut abi::Handle,
    flag: *mut c_int,
    statuses: *mut c_void,
) -> crate::calls::CallResult {
    complete_with(requests, count, true, || {
        // SAFETY: as in wait.
        (
            unsafe { (host().testall)(count, requests, flag, statuses.cast()) },
            true,
        )
    })
}

pub(crate) unsafe fn waitany(
    count: c_int,
    requests: *mut abi::Handle,
    index: *mut c_int,
    status: *mut c_void,
) -> crate::calls::CallResult {
    complete_with(requests, count, false, || {
        let mut flag = 0;
        // SAFETY: as in wait.
        let rc = unsafe { (host().testany)(count, requests, index, &mut flag, status.cast()) };
        (rc, flag != 0)
    })
}

pub(crate) unsafe fn testany(
    count: c_int,
    requests: *mut abi::Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut c_void,
) -> crate::calls::CallResult {
    complete_with(requests, count, true, || {
        // SAFETY: as in wait.
        (
            unsafe { (host().testany)(count, requests, index, flag, status.cast()) },
            true,
        )
    })
}

pub(crate) unsafe fn waitsome(
    incount: c_int,
    requests: *mut abi::Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut c_void,
) -> crate::calls::CallResult {
    complete_with(requests, incount, false, || {
        // SAFETY: as in wait.
        let rc =
            unsafe { (host().testsome)(incount, requests, outcount, indices, statuses.cast()) };
        // SAFETY: the program's out-argument, written by the host.
        let n = unsafe { *outcount };
        // Done with some completed, or when every request is inactive (MPI_UNDEFINED).
        (rc, n != 0)
    })
}

pub(crate) unsafe fn testsome(
    incount: c_int,
    requests: *mut abi::Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut c_void,
) -> crate::calls::CallResult {
    complete_with(requests, incount, true, || {
        // SAFETY: as in wait.
        (
            unsafe { (host().testsome)(incount, requests, outcount, indices, statuses.cast()) },
            true,
        )
    })
}

/// Drives our request `request`, if it is one, so that a status query sees its progress
/// (the host's `MPI_Request_get_status` never polls generalized requests).
pub(crate) fn poll_if_ours(request: abi::MPI_Request) {
    let live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&(_, extra)) = live.iter().find(|&&(h, _)| h == request) {
        // SAFETY: a live Pending (removed from LIVE in `free` before it is dropped; the
        // lock is held meanwhile).
        unsafe { poll(extra as *mut c_void, std::ptr::null_mut()) };
    }
}
