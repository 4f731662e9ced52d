//! Putting a window's core together once its memory is mapped and agreed (every flavor,
//! one node or several): the barrier over its control blocks, its targets, its request
//! rings.

use crate::bootstrap::Comm;
use crate::shm::barrier::Barrier;
use crate::win::control::{BlockSlots, Control, ControlLayout, ControlMemory};
use crate::win::core::{LocalRegion, PeerMapping, Targets, WinCore};
use crate::win::info::WinHints;
use crate::win::Flavor;

#[allow(clippy::too_many_arguments)]
pub(crate) fn assemble(
    comm: &Comm,
    flavor: Flavor,
    segment: ControlMemory,
    layout: ControlLayout,
    blocks: BlockSlots,
    targets: impl FnOnce(&Control) -> Targets,
    local: impl FnOnce(&Control) -> LocalRegion,
    hints: WinHints,
    peer_mappings: Vec<PeerMapping>,
) -> WinCore {
    // SAFETY: `segment` was mapped and checked by map_node_segment or control_memory with
    // this layout; the WinCore keeps it alive as long as `ctrl`.
    let ctrl = unsafe { Control::new(segment.as_ptr(), layout) }.with_slots(blocks);
    // SAFETY: the barrier area lies inside the segment, 64-byte aligned, zero-initialised,
    // and is laid out identically at every rank.
    let barrier = unsafe { Barrier::new(ctrl.barrier_base(), layout.barrier, comm.rank()) };
    let targets = targets(&ctrl);
    let local = local(&ctrl);
    // This process serves requests when its memory is reached by cross-memory attach.
    let served = match &targets {
        Targets::Table(t) => t.get(comm.rank()).is_some_and(|r| !r.shared && r.bytes > 0),
        _ => false,
    };
    let rings = make_rings(comm, &ctrl, &local, served);
    WinCore {
        rank: comm.rank(),
        size: comm.size(),
        comm: comm.clone(),
        flavor,
        ctrl,
        barrier,
        targets,
        local,
        acc_granularity: hints.accumulate_granularity.into(),
        no_locks: hints.no_locks.into(),
        reorder: hints.reorder.bits().into(),
        hints: std::sync::Mutex::new(hints),
        epoch: Default::default(),
        plain_gate: Default::default(),
        engine: Default::default(),
        collectives: Default::default(),
        deferred_bytes: Default::default(),
        spare_copies: Default::default(),
        calls: Default::default(),
        watch: comm
            .watch()
            .map(|w| w.for_channel(crate::bootstrap::roster::channel_id(segment.tag()))),
        pscw_accesses: Default::default(),
        pscw_test_read: Default::default(),
        dynamic: Default::default(),
        staged: Default::default(),
        notify: Default::default(),
        peer_mappings,
        rings,
        _segment: segment,
        in_place: None,
        net: None,
        net_registrations: Vec::new(),
        net_data: crate::win::reach::Remotes::Table(Vec::new()),
        net_window_id: None,
        net_writes: Default::default(),
        memberships_in_transit: Default::default(),
    }
}

/// The request rings of a window whose layout has them (transport::ring).
fn make_rings(
    comm: &Comm,
    ctrl: &Control,
    local: &LocalRegion,
    served: bool,
) -> Option<crate::transport::ring::Rings> {
    let (base, stride) = ctrl.rings()?;
    let me = comm.rank();
    let serve = served.then(|| {
        let comm = comm.clone();
        crate::transport::ring::ServeSpec {
            memory: (local.base as usize, local.bytes),
            stripes: (ctrl.stripe(me, 0), crate::win::control::ACC_STRIPES),
            aborted: Box::new(move || comm.aborted()),
        }
    });
    // SAFETY: the ring areas lie in the control memory, zeroed by each owner before the
    // creation's agreement and kept mapped by the WinCore, whose `rings` field drops before
    // its `_segment`; the local memory and the stripes live as long as the window.
    Some(unsafe { crate::transport::ring::Rings::new(base, stride, comm.size(), me, serve) })
}

/// Padding between ranks' memory in `allocate` windows: whole cache lines (pages for larger
/// windows) so that ranks never share a line (or, for big windows, a page).
pub(crate) fn padded(bytes: usize) -> usize {
    const PAGE: usize = 4096;
    const LINE: usize = 64;
    if bytes >= PAGE {
        bytes.next_multiple_of(PAGE)
    } else {
        bytes.next_multiple_of(LINE)
    }
}

/// Where each rank's memory lies in an `allocate` window's data area: one stride for all
/// (symmetric), or (offset, bytes, disp_unit) per rank.
pub(crate) type Placement = std::result::Result<usize, Vec<(usize, usize, usize)>>;

/// Rank `r`'s (offset, bytes, disp_unit) under `placement`; `bytes` and `disp_unit` are
/// every rank's when the placement is symmetric.
pub(crate) fn placed(
    placement: &Placement,
    r: usize,
    bytes: usize,
    disp_unit: usize,
) -> (usize, usize, usize) {
    match placement {
        Ok(stride) => (r * stride, bytes, disp_unit),
        Err(table) => table[r],
    }
}
