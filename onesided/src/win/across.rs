//! Windows whose ranks span nodes (feature `ofi`): `allocate` so far.
//!
//! Each node's lowest rank creates the node's window segment (the whole layout, as on one
//! node) and every rank of the node maps it: peers on the node keep loads, stores and CPU
//! atomics on it. Every rank registers the segment with this process's network endpoint
//! (`transport::net`) and publishes its endpoint name, key and remote base; peers on other
//! nodes then reach its memory with network RMA and atomics (`Route::Net`), and every
//! control word of the window — on this node too — through the network control plane
//! ([`NetPlane`]): words at the same offsets in the holder's segment. Accumulate lock
//! stripes and parked lock memberships, which only one node sees, are not used: an
//! accumulate that CPU atomics cannot do (a misaligned element, a coarser
//! `mpi_accumulate_granularity`) goes through the network for every rank, this node's
//! included (`WinCore::net_data`), so that one element never sees two protocols.
//!
//! Not yet: `create`, dynamic and shared windows across nodes, request rings and cross-
//! memory attach there, and per-process address and registration costs that do not grow
//! with the nodes (each node segment holds every rank's control block and memory slot).

use std::sync::Arc;

use crate::bootstrap::{Call, Comm};
use crate::error::{Error, Result};
use crate::shm::segment::Segment;
use crate::transport::net;
use crate::transport::ofi::{Registration, Remote};
use crate::transport::Route;
use crate::win::assemble::{placed, Placement};
use crate::win::control::{Control, ControlLayout, ControlMemory, WIN_MAGIC};
use crate::win::core::{LocalRegion, TargetRegion, Targets, WinCore};
use crate::win::info::WinHints;
use crate::win::netplane::NetPlane;
use crate::win::Flavor;

/// What a rank publishes: its registration's key and remote base, then its endpoint name.
fn record(reg: &Registration, name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + name.len());
    v.extend_from_slice(&reg.key.to_le_bytes());
    v.extend_from_slice(&reg.remote_base.to_le_bytes());
    v.extend_from_slice(name);
    v
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
    hints: WinHints,
) -> Result<WinCore> {
    let (me, n) = (comm.rank(), comm.size());
    let nodes: Vec<usize> = (0..n).map(|r| comm.node_of(r)).collect::<Result<_>>()?;
    let leader = nodes
        .iter()
        .position(|&x| x == nodes[me])
        .expect("a rank is on its own node");
    // 1. The node's leader creates the segment; every rank learns every leader's name.
    let (endpoint, mut endpoint_error) = match net::endpoint() {
        Ok(ep) => (Some(ep), None),
        Err(e) => (None, Some(e)),
    };
    let created = (me == leader && endpoint.is_some())
        .then(|| Segment::create(comm.job_id(), &me.to_string(), layout.total));
    let name: Vec<u8> = match &created {
        Some(Ok(seg)) => seg.name().as_bytes().to_vec(),
        _ => Vec::new(),
    };
    let names = comm.allgatherv_for(call, &name)?;
    // 2. Map the node's segment, register it, publish key, base and endpoint name.
    let local = (|| -> Result<(Segment, Registration, Vec<u8>)> {
        let Some(ep) = endpoint else {
            return Err(endpoint_error.take().expect("no endpoint: its error"));
        };
        let seg = match created {
            Some(seg) => seg?,
            None => {
                let name = std::str::from_utf8(&names[leader])
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
        let ctrl = unsafe { Control::new(seg.as_ptr(), layout) };
        let ident = &ctrl.rank(me).ident;
        // Relaxed: published by the agreement below.
        ident.pid.store(
            u64::from(std::process::id()),
            std::sync::atomic::Ordering::Relaxed,
        );
        if me == leader {
            ctrl.header()
                .magic
                .store(WIN_MAGIC, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: the segment stays mapped while the window lives (it owns both; the
        // registration drops first); peers write it only through the window's operations.
        let reg = unsafe { ep.nic.register(seg.as_ptr(), layout.total) }?;
        let name = ep.nic.name()?;
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
                peer: ep.peer(&r[16..])?,
                addr: word(1),
                key: word(0),
            })
        })
        .collect::<Result<_>>()?;
    let plane = NetPlane::new(Arc::clone(&ep.nic), layout, areas.clone());
    let place = |r: usize| placed(&placement, r, bytes, disp_unit);
    let segment = ControlMemory::Segment(seg);
    let mut core = crate::win::assemble::assemble(
        comm,
        Flavor::Allocate,
        segment,
        layout,
        |ctrl| {
            Targets::Table(
                (0..n)
                    .map(|r| {
                        let (off, bytes, disp_unit) = place(r);
                        let same_node = nodes[r] == nodes[me];
                        let route = if same_node {
                            Route::Direct(ctrl.data_base().wrapping_add(off))
                        } else {
                            let a = areas[r];
                            Route::Net {
                                peer: a.peer,
                                addr: a.addr + (layout.data_off + off) as u64,
                                key: a.key,
                            }
                        };
                        TargetRegion {
                            route,
                            bytes,
                            disp_unit,
                            shared: same_node,
                            lazy: None,
                        }
                    })
                    .collect(),
            )
        },
        |ctrl| {
            let (off, bytes, disp_unit) = place(me);
            LocalRegion {
                base: ctrl.data_base().wrapping_add(off),
                bytes,
                disp_unit,
            }
        },
        hints,
        Vec::new(),
    );
    core.net = Some(Box::new(plane));
    core.net_registration = Some(reg);
    core.net_data = (0..n)
        .map(|r| Remote {
            addr: areas[r].addr + (layout.data_off + place(r).0) as u64,
            ..areas[r]
        })
        .collect();
    Ok(core)
}
