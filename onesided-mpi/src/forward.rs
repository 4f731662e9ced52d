//! Windows onesided does not serve go to the host MPI's own RMA, per window: a window whose
//! communicator spans several nodes when this build has no network transport (cargo
//! feature `ofi`) or `ONESIDED_ACROSS_NODES=host` asks for the host's; a job of one node
//! never forwards — and then every call on it. Such a window keeps the host's handle,
//! whose bit pattern ours never take (`abi`), so each call knows from its window argument
//! alone where it goes — the program sees exactly what the native MPI gives it, never an
//! error it would not get. The host's functions are looked up in the host library (`host`):
//! an `MPI_*` or `PMPI_*` call from here would land in our own export.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::abi::{self, MPI_Comm, MPI_Request, MPI_Win};
use crate::state::UNIVERSE;

/// Whether a window creation went to the host in this process.
static HOST_WINDOWS: AtomicBool = AtomicBool::new(false);

/// Whether a window handle that is not ours may be the host's. An MPICH-ABI host checks
/// every `int` handle it gets; a host of pointer handles dereferences it, so a stray handle
/// (or `MPI_WIN_NULL`) goes to the host only once it may have made windows of its own —
/// before that it is our `MPI_ERR_WIN`, never a crash.
fn hosts_windows() -> bool {
    // Relaxed: a flag set by this process's own (earlier) creation call.
    abi::abi().handle_bytes == 4 || HOST_WINDOWS.load(Ordering::Relaxed)
}

/// A call on window `win` goes to the host: the handle is not one of ours.
///
/// # Safety
/// None (a plain value); `unsafe` for the uniform signature of the rules.
pub(crate) unsafe fn win(win: MPI_Win) -> bool {
    !abi::is_ours(win) && hosts_windows()
}

/// `MPI_Win_get_name(win)` goes to the host as [`win`] says, except for `MPI_WIN_NULL`,
/// whose name MPI-4.1 defines and an MPI-4.0 host (MPICH 4.0.2) refuses.
///
/// # Safety
/// None (a plain value); `unsafe` for the uniform signature of the rules.
pub(crate) unsafe fn win_or_null(win: MPI_Win) -> bool {
    // SAFETY: a plain value.
    win != abi::abi().win_null && unsafe { self::win(win) }
}

/// `MPI_Win_free(win)` goes to the host: `*win` is not one of ours.
///
/// # Safety
/// `win` is null or the caller's handle (MPI's contract).
pub(crate) unsafe fn win_ptr(win: *mut MPI_Win) -> bool {
    // SAFETY: checked non-null; the caller's handle.
    !win.is_null() && !abi::is_ours(unsafe { abi::load_handle(win) }) && hosts_windows()
}

/// A completion call (`MPI_Wait` & co.) goes to the host: it polls our requests itself
/// (MPICH's generalized-request classes), or the process has none of ours — unless the
/// process serves windows across nodes, whose peers' operations the host's own wait would
/// not apply (`interpose`).
///
/// # Safety
/// None (the argument is not read); `unsafe` for the uniform signature of the rules.
pub(crate) unsafe fn polls_requests(_requests: *mut MPI_Request) -> bool {
    (crate::host::grequest_classes().is_some() || !crate::requests::any_live())
        && !crate::interpose::keeps_onesided_progressing()
}

/// A window created over `comm` goes to the host: its processes are on several nodes and
/// this library does not serve such windows ([`serves_across_nodes`]). Every member decides
/// alike (from the job's node map and the job's environment, no communication).
///
/// # Safety
/// None beyond MPI's contract for `comm`.
pub(crate) unsafe fn comm(comm: MPI_Comm) -> bool {
    let Some(u) = UNIVERSE.get() else {
        return false;
    };
    let world = u.world();
    if world.node_size() == world.size() || serves_across_nodes() {
        return false;
    }
    let to_host = spans_nodes(world, comm).unwrap_or(false);
    if to_host {
        // Relaxed: read by this process's later calls only.
        HOST_WINDOWS.store(true, Ordering::Relaxed);
    }
    to_host
}

/// The variable that leaves windows across nodes to the host MPI (`host`).
const ACROSS_NODES_ENV: &str = "ONESIDED_ACROSS_NODES";

/// True when windows whose processes span nodes are onesided's: in a build with its
/// network transport (feature `ofi`), unless `ONESIDED_ACROSS_NODES=host` leaves them to
/// the host MPI. A target that waits inside the host MPI still serves them: its blocking
/// calls keep onesided progressing once the network endpoint is open (`interpose`).
/// Before that, such a target was served by the endpoint's progress thread alone: an
/// 8-byte put waited milliseconds for it to be scheduled where the ranks take every core.
fn serves_across_nodes() -> bool {
    static SERVES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SERVES.get_or_init(|| {
        cfg!(feature = "ofi") && std::env::var(ACROSS_NODES_ENV).map_or(true, |v| v != "host")
    })
}

/// Whether the members of host communicator `comm` are on more than one node of `world`.
fn spans_nodes(world: &onesided::Comm, comm: MPI_Comm) -> Option<bool> {
    let (mut group, mut world_group) = (0, 0);
    let mut n: c_int = 0;
    // SAFETY: queries of the program's communicator and of the world (names we do not
    // export); every handle made here is freed below.
    unsafe {
        if (crate::host::host().comm_group)(comm, &mut group) != abi::MPI_SUCCESS {
            return None;
        }
        (crate::host::host().comm_group)(abi::abi().comm_world, &mut world_group);
        (crate::host::host().group_size)(group, &mut n);
    }
    let from: Vec<c_int> = (0..n).collect();
    let mut to = vec![0 as c_int; n as usize];
    // SAFETY: `from` and `to` hold n ranks; both groups are live.
    unsafe {
        (crate::host::host().group_translate_ranks)(
            group,
            n,
            from.as_ptr(),
            world_group,
            to.as_mut_ptr(),
        );
        (crate::host::host().group_free)(&mut group);
        (crate::host::host().group_free)(&mut world_group);
    }
    let mut nodes = to
        .iter()
        .map(|&r| world.node_of(usize::try_from(r).ok()?).ok());
    let first = nodes.next().flatten()?;
    Some(nodes.any(|n| n != Some(first)))
}
