//! Windows whose ranks span nodes (the network layer): `allocate`, `create` and dynamic.
//!
//! Each node's lowest rank creates the node's window segment — the control blocks of the
//! node's own ranks (every rank's where a node's ranks are not consecutive:
//! `control::BlockSlots`) and, for `allocate`, their memory — and every rank of the node
//! maps it: peers on the node keep loads, stores and CPU atomics on it. Every rank
//! registers the segment with this process's network endpoint (`transport::net`) and
//! publishes its endpoint name, key and remote base; peers on other nodes then reach its
//! memory with network RMA and atomics (`Route::Net`), and every control word of the window
//! through the network control plane ([`NetPlane`]): a word at the offset its holder's
//! segment has it (the holder's slot there) — changed with CPU atomics where the holder is
//! on this node and the provider's atomics mix with the CPU's. Accumulate lock
//! stripes and parked lock memberships, which only one node sees, are not used: an
//! accumulate that CPU atomics cannot do (a misaligned element, a coarser
//! `mpi_accumulate_granularity`) goes through the network for every rank, this node's
//! included (`WinCore::net_data`), so that one element never sees two protocols.
//!
//! `create` windows register each rank's own memory besides; dynamic windows register
//! each attached region at attach, and a table on another node is read through the
//! network (`win::resolve`). Every rank agrees on one window id (rank 0's segment tag):
//! memory handles carry it, and the peer watch of the window's waits is keyed by it.
//!
//! Per window and process nothing grows with the job where the provider lets every rank
//! register its node's segment under one key, addressed by offset (`tcp`, `udp`): a rank is
//! reached through the route table every window over the same ranks shares
//! (`win::reach`, `win::interned`), and an `allocate` window of one size everywhere
//! computes each rank's memory from its slot. Elsewhere (`shm`: its keys and addresses
//! differ per process) each window keeps a key and an address per rank.
//!
//! Not yet: request rings to another node (the network serves that memory), shared
//! windows across nodes (an error: the ranks share no memory), and a control block
//! without a post counter per rank (laid out, not touched until PSCW uses it).

use std::sync::Arc;

use crate::bootstrap::{Call, Comm};
use crate::error::{Error, Result};
use crate::net::plane::{Near, NetPlane};
use crate::shm::segment::Segment;
use crate::transport::network::{self, Fabric, Registration, Remote};
use crate::transport::Route;
use crate::win::assemble::{padded, placed, Placement};
use crate::win::control::{BlockSlots, Control, ControlLayout, ControlMemory, WIN_MAGIC};
use crate::win::core::{LocalRegion, PeerMapping, TargetRegion, Targets, WinCore};
use crate::win::info::WinHints;
use crate::win::reach::{RankRoute, Remotes};
use crate::win::Flavor;

/// The key every rank requests for its registration of the window's node segment, derived
/// from the id they agree on (high bit set: apart from the keys `Nic::register` counts up).
fn uniform_key(id: u64) -> u64 {
    id | 1 << 63
}

/// What a rank publishes: its registration's key and remote base, then its endpoint name.
fn record(reg: &Registration, name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + name.len());
    v.extend_from_slice(&reg.key.to_le_bytes());
    v.extend_from_slice(&reg.remote_base.to_le_bytes());
    v.extend_from_slice(name);
    v
}

/// A window's node segment, mapped by every rank of the node and registered with this
/// process's endpoint, and what every rank published about its own.
struct NodeSegment {
    seg: Segment,
    /// The layout of every node's segment: the blocks of the largest node's ranks, then
    /// (`allocate`) this node's ranks' memory.
    layout: ControlLayout,
    /// Where each rank's control block lies in its node's segment.
    blocks: BlockSlots,
    reg: Registration,
    /// Every rank's segment as the network reaches it (its first byte).
    areas: Remotes,
    /// How every rank is reached (shared with other windows over the same ranks).
    routes: Arc<Vec<RankRoute>>,
    ep: Arc<dyn Fabric>,
    /// The window's id at every rank (see [`join_network`]).
    id: u64,
    /// The window's `mpi_accumulate_granularity`: the largest any rank asked for.
    gran: usize,
}

/// Every rank's node.
fn node_map(comm: &Comm) -> Result<Vec<usize>> {
    (0..comm.size()).map(|r| comm.node_of(r)).collect()
}

/// Creates (at the node's lowest rank) and maps the node segment of `layout` over the ranks
/// on the nodes `nodes` says (by rank), registers it and publishes key, base and endpoint
/// name (collective; every rank returns the same success or failure). `prior`: the
/// caller's local checks, which join the agreement; `params`: values every rank must pass
/// alike (they fix the layout); `gran`: this rank's `mpi_accumulate_granularity`, a hint
/// the ranks may pass differently — the largest is the window's ([`NodeSegment::gran`]).
fn node_segment(
    comm: &Comm,
    call: Call,
    nodes: Vec<usize>,
    layout: ControlLayout,
    gran: u64,
    params: &[u64],
    prior: Result<()>,
) -> Result<NodeSegment> {
    let me = comm.rank();
    let leader = nodes
        .iter()
        .position(|&x| x == nodes[me])
        .expect("a rank is on its own node");
    // Each node's segment holds its own ranks' control blocks only.
    let (blocks, slots) = BlockSlots::by_node(&nodes, me);
    let layout = layout.with_slots(slots, layout.total - layout.data_off);
    // 1. The node's leader creates the segment; every rank learns every leader's name.
    let (endpoint, mut endpoint_error) = match network::endpoint() {
        Ok(ep) => (Some(ep), None),
        Err(e) => (None, Some(e)),
    };
    let created = (me == leader && endpoint.is_some())
        .then(|| Segment::create(comm.job_id(), &me.to_string(), layout.total));
    // Every rank sends its granularity and parameters, then (a leader) the segment's tag
    // and name.
    let mut msg: Vec<u8> = std::iter::once(gran)
        .chain(params.iter().copied())
        .flat_map(|p| p.to_le_bytes())
        .collect();
    if let Some(Ok(seg)) = &created {
        msg.extend_from_slice(&seg.tag().to_le_bytes());
        msg.extend_from_slice(seg.name().as_bytes());
    }
    let msgs = comm.allgatherv_for(call, &msg)?;
    let split = 8 + params.len() * 8;
    let names: Vec<&[u8]> = msgs
        .iter()
        .map(|m| m.get(split + 8..).unwrap_or(&[]))
        .collect();
    let differ = msgs
        .iter()
        .any(|m| m.get(8..split) != msgs[0].get(8..split));
    let gran = msgs
        .iter()
        .filter_map(|m| m.get(..8))
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .max()
        .unwrap_or(gran);
    // The window's id at every rank: rank 0's segment tag (rank 0 leads node 0).
    let id = msgs[0]
        .get(split..split + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    // 2. Map the node's segment, register it, publish key, base and endpoint name.
    let local = (|| -> Result<(Segment, Registration, Vec<u8>)> {
        prior?;
        if differ {
            return Err(Error::InvalidArgument(format!(
                "{call}: the processes passed different parameters (info keys that fix \
                 the window's layout or protocol must agree): {params:?} here"
            )));
        }
        let Some(ep) = &endpoint else {
            return Err(endpoint_error.take().expect("no endpoint: its error"));
        };
        let seg = match created {
            Some(seg) => seg?,
            None => {
                let name = std::str::from_utf8(names[leader])
                    .map_err(|_| Error::Bootstrap("segment name is not UTF-8".into()))?;
                if name.is_empty() {
                    return Err(Error::PeerFailed { call: call.name() });
                }
                Segment::open(name)?
            }
        };
        if seg.len() < layout.total {
            return Err(Error::Bootstrap(format!(
                "{call}: window segment is {} bytes, expected {}",
                seg.len(),
                layout.total
            )));
        }
        // SAFETY: the mapping is page aligned, at least layout.total bytes, zero-filled by
        // the kernel and laid out identically by every rank of the node.
        let ctrl = unsafe { Control::new(seg.as_ptr(), layout) }.with_slots(blocks.clone());
        // Published by the agreement below.
        ctrl.write_own_identity(me, (me == leader).then_some(WIN_MAGIC));
        // SAFETY: the segment stays mapped while the window lives (it owns both; the
        // registration drops first); peers write it only through the window's operations.
        // Under the key every rank requests, where the provider lets us choose keys and
        // addresses by offset: then no rank needs another's key or base (`Remotes`).
        let reg = unsafe { ep.register_as(seg.as_ptr(), layout.total, Some(uniform_key(id))) }?;
        let name = ep.name()?;
        Ok((seg, reg, name))
    })();
    let mine = match &local {
        Ok((_, reg, name)) => record(reg, name),
        _ => Vec::new(),
    };
    let records = comm.allgatherv_for(call, &mine)?;
    let (seg, reg, _) = comm.agree_on(call, local)?;
    let ep = endpoint.expect("every rank has its endpoint (agreed)");
    // Every rank has mapped its node's segment: the names can go.
    seg.unlink();
    // 3. Every rank's area, for the control plane and for the data routes.
    let areas: Vec<Remote> = records
        .iter()
        .map(|r| {
            if r.len() <= 16 {
                return Err(Error::Bootstrap(format!("{call}: malformed window record")));
            }
            let word =
                |i: usize| u64::from_le_bytes(r[8 * i..8 * i + 8].try_into().expect("8 bytes"));
            Ok(Remote {
                peer: network::peer(&r[16..])?,
                addr: word(1),
                key: word(0),
            })
        })
        .collect::<Result<_>>()?;
    // The endpoint's own waits (a flush, a read, a fetching atomic) learn of the end of a
    // rank on another node from the job's roster, as the window's waits do.
    if let Some(watch) = comm.bootstrap().watch() {
        for (r, area) in areas.iter().enumerate() {
            if nodes[r] != nodes[me] {
                if let Some(ended) = watch.end_probe(r) {
                    ep.watch_peer(area.peer, r, ended);
                }
            }
        }
    }
    let routes = crate::win::interned::intern(
        areas
            .iter()
            .enumerate()
            .map(|(r, a)| RankRoute {
                peer: a.peer,
                slot: blocks.of(r) as u32,
                here: nodes[r] == nodes[me],
            })
            .collect(),
    );
    // Every rank sees the same records: all decide alike.
    let key = uniform_key(id);
    let areas = if areas.iter().all(|a| a.key == key && a.addr == 0) {
        Remotes::Uniform {
            routes: Arc::clone(&routes),
            key,
            base: 0,
            stride: 0,
        }
    } else {
        Remotes::Table(areas)
    };
    Ok(NodeSegment {
        seg,
        layout,
        blocks,
        reg,
        areas,
        routes,
        ep,
        id,
        gran: gran as usize,
    })
}

/// What every flavor of window across nodes does last: puts the core together over the node
/// segment (`targets` and `local` as `assemble` takes them), gives it its network plane and
/// registrations (the segment's, and `more` for memory of its own), and the id agreed at
/// every rank (memory handles carry it; the peer watch of its waits is keyed by it).
#[allow(clippy::too_many_arguments)]
fn assemble_across(
    comm: &Comm,
    flavor: Flavor,
    node: NodeSegment,
    targets: impl FnOnce(&crate::win::control::Control) -> Targets,
    local: impl FnOnce(&crate::win::control::Control) -> LocalRegion,
    hints: WinHints,
    peer_mappings: Vec<PeerMapping>,
    more: Option<Registration>,
) -> WinCore {
    let layout = node.layout;
    let near = node.ep.atomics_mix_with_cpu().then(|| {
        // SAFETY: the node segment, mapped here with `layout`, moves into the core below
        // with the plane and is unmapped only after it (WinCore drops `net` first).
        unsafe { Near::new(node.seg.as_ptr(), Arc::clone(&node.routes)) }
    });
    let plane = NetPlane::new(
        Arc::clone(&node.ep),
        layout,
        node.blocks.clone(),
        node.areas,
        near,
    );
    let mut core = crate::win::assemble::assemble(
        comm,
        flavor,
        ControlMemory::Segment(node.seg),
        layout,
        node.blocks,
        targets,
        local,
        hints,
        peer_mappings,
    );
    core.net = crate::transport::network::Only::new(Box::new(plane));
    core.net_registrations = std::iter::once(node.reg).chain(more).collect();
    core.net_window_id = Some(node.id);
    core.watch = comm
        .watch()
        .map(|w| w.for_channel(crate::bootstrap::roster::channel_id(node.id)));
    core
}

/// Where each rank's memory lies in its own node's segment, from `placement` (the whole
/// job's, as on one node): the ranks of a node one after the other, each at the padded
/// stride or size the job's placement gives it, so that a node's segment holds its own
/// ranks' memory only — a window of 1 GiB per rank over 64 nodes reserves 16 GiB on a node
/// of 16 ranks, not 1 TiB. Returns the placement (offsets within the rank's node's
/// segment) and the data bytes of `me`'s node.
fn per_node(
    placement: &Placement,
    nodes: &[usize],
    me: usize,
    bytes: usize,
    disp_unit: usize,
) -> (Placement, usize) {
    // The next free offset of each node.
    let mut next: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    let table = (0..nodes.len())
        .map(|r| {
            let (_, b, du) = placed(placement, r, bytes, disp_unit);
            // The rank's padded extent: the symmetric stride, or the distance to the next
            // rank's offset in the job's table (the last one's is its padded size).
            let extent = match placement {
                Ok(stride) => *stride,
                Err(table) => match table.get(r + 1) {
                    Some(&(next_off, _, _)) => next_off - table[r].0,
                    None => padded(b),
                },
            };
            let at = next.entry(nodes[r]).or_default();
            let entry = (*at, b, du);
            // Saturating: no more than the job's sum, which was checked.
            *at = at.saturating_add(extent);
            entry
        })
        .collect();
    (Err(table), next.get(&nodes[me]).copied().unwrap_or(0))
}

/// MPI_Win_allocate over ranks of several nodes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn allocate(
    comm: &Comm,
    call: Call,
    layout: ControlLayout,
    placement: Placement,
    bytes: usize,
    disp_unit: usize,
    mut hints: WinHints,
) -> Result<WinCore> {
    let (me, n) = (comm.rank(), comm.size());
    let gran = hints.accumulate_granularity as u64;
    let nodes = node_map(comm)?;
    let symmetric = placement.as_ref().ok().copied();
    let (placement, node_bytes) = per_node(&placement, &nodes, me, bytes, disp_unit);
    // The same control words at the same offsets on every node; only the data differs.
    let layout = ControlLayout::new(layout.n, layout.region_cap, node_bytes);
    let node = node_segment(comm, call, nodes, layout, gran, &[], Ok(()))?;
    hints.accumulate_granularity = node.gran;
    let layout = node.layout;
    let place = |r: usize| placed(&placement, r, bytes, disp_unit);
    // Every rank's memory on the network: after the control blocks, a node's ranks one
    // after the other (`per_node`), at the symmetric stride where the job's placement has
    // one and the node's ranks are consecutive (their block slots are their places).
    let stride = match symmetric {
        Some(stride) if node.blocks.consecutive() => Some(stride),
        _ => None,
    };
    let data_off = layout.data_off as u64;
    let net_data = node
        .areas
        .shifted(data_off, stride.map(|s| s as u64), |r| place(r).0 as u64);
    let routes = Arc::clone(&node.routes);
    let targets = |ctrl: &crate::win::control::Control| match (stride, &net_data) {
        (Some(stride), Remotes::Uniform { key, .. }) => Targets::Spread(
            crate::transport::network::Only::new(crate::win::core::Spread {
                routes,
                node_base: ctrl.data_base(),
                stride,
                bytes,
                disp_unit,
                net_base: data_off,
                key: *key,
            })
            .expect("a window across nodes is built only with a network"),
        ),
        _ => Targets::Table(
            (0..n)
                .map(|r| {
                    let (off, bytes, disp_unit) = place(r);
                    let here = routes[r].here;
                    let route = if here {
                        Route::Direct(ctrl.data_base().wrapping_add(off))
                    } else {
                        let a = net_data.get(r).expect("one remote per rank");
                        Route::network(a)
                            .expect("a window across nodes is built only with a network")
                    };
                    TargetRegion {
                        route,
                        bytes,
                        disp_unit,
                        shared: here,
                        lazy: None,
                    }
                })
                .collect(),
        ),
    };
    let local = |ctrl: &crate::win::control::Control| {
        let (off, bytes, disp_unit) = place(me);
        LocalRegion {
            base: ctrl.data_base().wrapping_add(off),
            bytes,
            disp_unit,
        }
    };
    let mut core = assemble_across(
        comm,
        Flavor::Allocate,
        node,
        targets,
        local,
        hints,
        Vec::new(),
        None,
    );
    core.net_data = net_data;
    Ok(core)
}

/// MPI_Win_create over ranks of several nodes: `local` is this rank's memory, `extents`
/// every rank's (bytes, disp_unit), and `same_node(rank, mappings)` how a rank of this
/// node is reached (as on one node: directly, through a mapping of its shared heap, or by
/// cross-memory attach). The node segment holds the control words only; every rank
/// registers its own memory with its endpoint, and ranks on other nodes reach it there.
pub(crate) fn create(
    comm: &Comm,
    call: Call,
    local: LocalRegion,
    extents: Vec<(usize, usize)>,
    mut hints: WinHints,
    same_node: &dyn Fn(usize, &mut Vec<PeerMapping>) -> Result<TargetRegion>,
) -> Result<WinCore> {
    let n = comm.size();
    // No request rings: the network control plane serves the windows across nodes, and
    // cross-memory attach reaches this node's peers directly.
    let layout = ControlLayout::new(n, 0, 0);
    let gran = hints.accumulate_granularity as u64;
    let node = node_segment(comm, call, node_map(comm)?, layout, gran, &[], Ok(()))?;
    hints.accumulate_granularity = node.gran;
    // Our memory, registered for the network (an empty window registers nothing).
    let mine = match local.bytes {
        0 => Ok(None),
        // SAFETY: the window's buffer outlives its core, which drops the registration
        // (Window::free and drop release the core before the buffer); peers write it only
        // through the window's operations.
        len => unsafe { node.ep.register(local.base, len) }.map(Some),
    };
    let record: Vec<u8> = match &mine {
        Ok(r) => {
            let (key, base) = r.as_ref().map_or((0, 0), |r| (r.key, r.remote_base));
            [key.to_le_bytes(), base.to_le_bytes()].concat()
        }
        Err(_) => Vec::new(),
    };
    let records = comm.allgatherv_for(call, &record)?;
    let data_reg = comm.agree_on(call, mine)?;
    let data: Vec<Remote> = records
        .iter()
        .enumerate()
        .map(|(rank, r)| {
            let area = node.areas.get(rank).expect("one area per rank");
            let word = |i: usize| {
                r.get(8 * i..8 * i + 8)
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            };
            match (word(0), word(1)) {
                (Some(key), Some(addr)) => Ok(Remote {
                    peer: area.peer,
                    addr,
                    key,
                }),
                _ => Err(Error::Bootstrap(format!("{call}: malformed window record"))),
            }
        })
        .collect::<Result<_>>()?;
    let mut peer_mappings = Vec::new();
    let table = (0..n)
        .map(|r| {
            if node.routes[r].here {
                return same_node(r, &mut peer_mappings);
            }
            let (bytes, disp_unit) = extents[r];
            Ok(TargetRegion {
                route: Route::network(data[r]).ok_or_else(crate::transport::network::absent)?,
                bytes,
                disp_unit,
                shared: false,
                lazy: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut core = assemble_across(
        comm,
        Flavor::Create,
        node,
        |_| Targets::Table(table),
        |_| local,
        hints,
        peer_mappings,
        data_reg,
    );
    core.net_data = Remotes::Table(data);
    Ok(core)
}

/// MPI_Win_create_dynamic over ranks of several nodes: the node segment holds the control
/// words and every rank's region table; attached regions are registered with the endpoint
/// at attach (`win::dynamic`), and a table on another node is read through the network
/// (`WinCore::resolve_dynamic`).
pub(crate) fn create_dynamic(
    comm: &Comm,
    call: Call,
    layout: ControlLayout,
    mut hints: WinHints,
    prior: Result<()>,
) -> Result<WinCore> {
    // The granularity picks the accumulate protocol: the window takes the largest asked.
    let gran = hints.accumulate_granularity as u64;
    let params = [layout.region_cap as u64];
    let node = node_segment(comm, call, node_map(comm)?, layout, gran, &params, prior)?;
    hints.accumulate_granularity = node.gran;
    let local = LocalRegion {
        base: std::ptr::null_mut(),
        bytes: 0,
        disp_unit: 1,
    };
    Ok(assemble_across(
        comm,
        Flavor::Dynamic,
        node,
        |_| Targets::Dynamic,
        |_| local,
        hints,
        Vec::new(),
        None,
    ))
}
