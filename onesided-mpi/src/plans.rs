//! Seed 001's persistent alltoallv plans as C calls (`mpi_onesided.h`):
//! `MPIX_Alltoallv_init` builds a plan over the program's buffers (collective),
//! `MPIX_Alltoallv_start` starts one exchange and hands back a genuine MPI request (complete
//! it with `MPI_Wait` & co.), `MPIX_Alltoallv_plan_free` frees the plan (collective). As in
//! MPI Advance (the seed's library), the plan is a handle of its own rather than a
//! persistent MPI request: MPICH's `MPI_Start` takes only its own requests.

use std::os::raw::{c_int, c_void};
use std::sync::{Mutex, PoisonError};

use onesided::{Alltoallv, AlltoallvVariant, Error, NodeSplit, WinBuffer};

use crate::abi::{self, MPI_Comm, MPI_Datatype, MPI_Info};
use crate::calls::{self, CallResult, Failure};

/// `MPIX_ALLTOALLV_PLAN_NULL`.
pub(crate) const PLAN_NULL: c_int = 0;

/// A plan and the communicator its errors go to.
struct Plan {
    plan: Alltoallv<u8>,
    comm: MPI_Comm,
}

/// The plans, by handle − 1; freed slots are reused.
static PLANS: Mutex<Vec<Option<Plan>>> = Mutex::new(Vec::new());

/// The element size of a contiguous predefined datatype (its size is its extent).
fn element_bytes(ty: MPI_Datatype) -> onesided::Result<usize> {
    match abi::builtin(ty) {
        Some(b) if b.size > 0 => Ok(b.size),
        _ => Err(Error::Unsupported(format!(
            "MPIX_Alltoallv_init: datatype {ty:#x} (predefined datatypes without padding only)"
        ))),
    }
}

/// `n` counts or displacements of the caller, in bytes of `unit`-byte elements.
///
/// # Safety
/// `p` points at `n` ints (MPI's contract).
unsafe fn in_bytes(p: *const c_int, n: usize, unit: usize) -> onesided::Result<Vec<usize>> {
    if p.is_null() {
        return Err(Error::InvalidArgument(
            "a count or displacement array is NULL".into(),
        ));
    }
    // SAFETY: the caller's array of n ints.
    let v = unsafe { std::slice::from_raw_parts(p, n) };
    v.iter()
        .map(|&c| {
            usize::try_from(c)
                .ok()
                .and_then(|c| c.checked_mul(unit))
                .ok_or_else(|| Error::InvalidArgument(format!("count or displacement {c}")))
        })
        .collect()
}

/// The plan's variant from info key `onesided_alltoallv` (`fence`, the default;
/// `hierarchical`, `lock`, `notify`, `auto`).
fn variant(info: MPI_Info) -> Result<AlltoallvVariant, c_int> {
    let i = calls::info_of(info)?;
    Ok(match i.get("onesided_alltoallv").unwrap_or("fence") {
        "hierarchical" => AlltoallvVariant::FenceHierarchical,
        "lock" => AlltoallvVariant::Lock,
        "notify" => AlltoallvVariant::Notify,
        "auto" => AlltoallvVariant::Auto,
        _ => AlltoallvVariant::Fence,
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn alltoallv_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    info: MPI_Info,
    plan: *mut c_int,
) -> CallResult {
    let (c, group) = calls::comm_of(comm)?;
    // The plan needs no group of its own.
    let mut g = group;
    // SAFETY: the group comm_of made for us.
    unsafe { (crate::host::host().group_free)(&mut g) };
    let fail = |err: Error| Failure::Comm(comm, abi::error_code(err.mpi_class()), err.to_string());
    if plan.is_null() {
        return Err(fail(Error::InvalidArgument("plan is NULL".into())));
    }
    let v = variant(info).map_err(|rc| Failure::Comm(comm, rc, "invalid info".into()))?;
    let n = c.size();
    let built = (|| {
        let (su, ru) = (element_bytes(sendtype)?, element_bytes(recvtype)?);
        // SAFETY: MPI's contract for the arrays: one entry per rank.
        let (sc, sd, rc, rd) = unsafe {
            (
                in_bytes(sendcounts, n, su)?,
                in_bytes(sdispls, n, su)?,
                in_bytes(recvcounts, n, ru)?,
                in_bytes(rdispls, n, ru)?,
            )
        };
        let extent = |c: &[usize], d: &[usize]| c.iter().zip(d).map(|(c, d)| c + d).max();
        let send_len = extent(&sc, &sd).unwrap_or(0).max(1);
        let recv_len = extent(&rc, &rd).unwrap_or(0).max(1);
        if sendbuf.is_null() || recvbuf.is_null() {
            return Err(Error::InvalidArgument("a buffer is NULL".into()));
        }
        // SAFETY: MPI's contract for persistent collectives: both buffers stay valid, and
        // are left alone by the program while a cycle runs, until the plan is freed.
        let (send, recv) = unsafe {
            (
                WinBuffer::from_raw_parts(sendbuf.cast_mut().cast::<u8>(), send_len),
                WinBuffer::from_raw_parts(recvbuf.cast::<u8>(), recv_len),
            )
        };
        Alltoallv::new(&c, v, NodeSplit::Hosts, send, &sc, &sd, recv, &rc, &rd)
    })();
    let p = built.map_err(fail)?;
    let mut t = PLANS.lock().unwrap_or_else(PoisonError::into_inner);
    let entry = Some(Plan { plan: p, comm });
    let index = match t.iter().position(Option::is_none) {
        Some(i) => {
            t[i] = entry;
            i
        }
        None => {
            t.push(entry);
            t.len() - 1
        }
    };
    // SAFETY: checked non-null.
    unsafe { *plan = index as c_int + 1 };
    Ok(())
}

/// The slot of plan handle `plan`.
fn slot(plan: c_int) -> Result<usize, Failure> {
    usize::try_from(plan)
        .ok()
        .and_then(|p| p.checked_sub(1))
        .ok_or_else(|| {
            Failure::Comm(
                abi::abi().comm_world,
                abi::abi().err.arg,
                format!("invalid alltoallv plan {plan}"),
            )
        })
}

pub(crate) unsafe fn alltoallv_start(plan: c_int, request: *mut abi::MPI_Request) -> CallResult {
    let i = slot(plan)?;
    let mut t = PLANS.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(Some(p)) = t.get_mut(i) else {
        return Err(slot(-1).unwrap_err());
    };
    let comm = p.comm;
    let fail = |err: Error| Failure::Comm(comm, abi::error_code(err.mpi_class()), err.to_string());
    if request.is_null() {
        return Err(fail(Error::InvalidArgument("request is NULL".into())));
    }
    let r = p.plan.start_owned().map_err(fail)?;
    drop(t);
    let h = crate::requests::start(r)
        .map_err(|rc| Failure::Comm(comm, rc, "generalized request".into()))?;
    // SAFETY: checked non-null.
    unsafe { abi::store_handle(request, h) };
    Ok(())
}

pub(crate) unsafe fn alltoallv_plan_free(plan: *mut c_int) -> CallResult {
    if plan.is_null() {
        return Err(Failure::Comm(
            abi::abi().comm_world,
            abi::abi().err.arg,
            "plan is NULL".into(),
        ));
    }
    // SAFETY: checked non-null.
    let i = slot(unsafe { *plan })?;
    let taken = PLANS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_mut(i)
        .and_then(Option::take);
    let Some(p) = taken else {
        return Err(slot(-1).unwrap_err());
    };
    let comm = p.comm;
    p.plan
        .free()
        .map_err(|err| Failure::Comm(comm, abi::error_code(err.mpi_class()), err.to_string()))?;
    // SAFETY: checked non-null.
    unsafe { *plan = PLAN_NULL };
    Ok(())
}
