//! Collective window creation for the four flavors ([Gerstenberger13] §2.2, [MPI-4.1]).
//!
//! Every flavor maps one node segment created by rank 0 (`O_EXCL`, mode 0600, random name),
//! whose name rank 0 broadcasts together with the parameters that fix the layout; the other
//! ranks open it, every rank writes its identity words, all agree that everything worked,
//! and rank 0 removes the name — from then on nothing of the window is visible in /dev/shm.
//! A local error at any rank (bad argument or info, failed system call) makes every rank
//! return an error instead of leaving the others waiting.

use std::collections::HashMap;

use crate::bootstrap::{Call, Comm, ReduceOp};
use crate::error::{Error, Result};
use crate::memory;
use crate::shm::barrier::Barrier;
use crate::shm::segment::Segment;
use crate::transport::Route;
use crate::win::control::{Control, ControlLayout, WIN_MAGIC};
use crate::win::core::{LocalRegion, TargetRegion, Targets, WinCore};
use crate::win::info::{keys, WinHints, WinInfo};
use crate::win::Flavor;

const PAGE: usize = 4096;
const LINE: usize = 64;

/// Padding between ranks' memory in `allocate` windows: whole cache lines (pages for larger
/// windows) so that ranks never share a line (or, for big windows, a page).
fn padded(bytes: usize) -> usize {
    if bytes >= PAGE {
        bytes.next_multiple_of(PAGE)
    } else {
        bytes.next_multiple_of(LINE)
    }
}

fn check_disp_unit(disp_unit: usize) -> Result<()> {
    if disp_unit == 0 {
        Err(Error::InvalidArgument("disp_unit must be positive".into()))
    } else {
        Ok(())
    }
}

/// Maps the node segment of a window (see the module docs). `prior` carries the outcome of
/// the caller's local checks so that it joins the final agreement.
fn map_node_segment(
    comm: &Comm,
    call: Call,
    layout: &ControlLayout,
    params: &[u64],
    prior: Result<()>,
) -> Result<Segment> {
    let me = comm.rank();
    // Every process sees the same answer (a node holds fewer than all processes on every
    // node or on none), so all return here together.
    let boot = comm.bootstrap();
    if boot.node_size() != boot.size() {
        return Err(Error::Unsupported(format!(
            "{call}: the group spans several nodes ({} of {} processes on this one); \
             onesided windows need all processes on one node until the libfabric transport lands",
            boot.node_size(),
            boot.size()
        )));
    }
    let mut msg: Vec<u8> = Vec::new();
    let mut created = None;
    if me == 0 {
        let seg = prior
            .as_ref()
            .map_err(|_| Error::PeerFailed { call: call.name() })
            .and_then(|()| Segment::create(comm.job_id(), &me.to_string(), layout.total));
        if let Ok(s) = &seg {
            msg.extend(params.iter().flat_map(|p| p.to_le_bytes()));
            msg.extend_from_slice(s.name().as_bytes());
        }
        created = Some(seg);
    }
    comm.bcast_vec_for(call, 0, &mut msg)?;
    let seg = match created {
        Some(Ok(seg)) => Ok(seg),
        // Rank 0 failed before broadcasting a name: nobody goes further.
        Some(Err(e)) => return Err(prior.err().unwrap_or(e)),
        None if msg.is_empty() => {
            return Err(prior
                .err()
                .unwrap_or(Error::PeerFailed { call: call.name() }))
        }
        None => prior.and_then(|()| {
            let split = params.len() * 8;
            if msg.len() <= split {
                return Err(Error::Bootstrap(format!(
                    "{call}: malformed segment announcement"
                )));
            }
            let leader: Vec<u64> = msg[..split]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            if leader != params {
                return Err(Error::InvalidArgument(format!(
                    "{call}: parameters {params:?} differ from rank 0's {leader:?} \
                     (info keys that fix the layout must be equal everywhere)"
                )));
            }
            let name = std::str::from_utf8(&msg[split..])
                .map_err(|_| Error::Bootstrap("segment name is not UTF-8".into()))?;
            Segment::open(name)
        }),
    };
    let seg = seg.and_then(|seg| {
        if seg.len() < layout.total {
            return Err(Error::Bootstrap(format!(
                "{call}: window segment is {} bytes, expected {}",
                seg.len(),
                layout.total
            )));
        }
        // SAFETY: the mapping is page aligned, at least layout.total bytes, zero-filled by
        // the kernel and laid out identically by every rank (same inputs).
        let ctrl = unsafe { Control::new(seg.as_ptr(), *layout) };
        let ident = &ctrl.rank(me).ident;
        // Relaxed: published to the peers by the agreement below (a barrier).
        ident.pid.store(
            u64::from(std::process::id()),
            std::sync::atomic::Ordering::Relaxed,
        );
        ident.job_rank.store(
            crate::universe::identity().map_or(me, |i| i.rank) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        if me == 0 {
            ctrl.header()
                .magic
                .store(WIN_MAGIC, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(seg)
    });
    let seg = comm.agree_on(call, seg)?;
    // Every rank has mapped it: the name is no longer needed.
    seg.unlink();
    Ok(seg)
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    comm: &Comm,
    flavor: Flavor,
    segment: Segment,
    layout: ControlLayout,
    targets: impl FnOnce(&Control) -> Targets,
    local: impl FnOnce(&Control) -> LocalRegion,
    hints: WinHints,
    peer_segments: Vec<Segment>,
) -> WinCore {
    // SAFETY: `segment` was mapped and checked by map_node_segment with this layout; the
    // WinCore keeps it alive as long as `ctrl`.
    let ctrl = unsafe { Control::new(segment.as_ptr(), layout) };
    // SAFETY: the barrier area lies inside the segment, 64-byte aligned, zero-initialised,
    // and is laid out identically at every rank.
    let barrier = unsafe { Barrier::new(ctrl.barrier_base(), layout.barrier, comm.rank()) };
    let targets = targets(&ctrl);
    let local = local(&ctrl);
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
        engine: Default::default(),
        collectives: Default::default(),
        deferred_bytes: Default::default(),
        spare_copies: Default::default(),
        calls: Default::default(),
        watch: comm
            .watch()
            .map(|w| w.for_channel(crate::bootstrap::roster::channel_id(segment.tag()))),
        pscw_accesses: Default::default(),
        dynamic: Default::default(),
        staged: Default::default(),
        notify: Default::default(),
        _peer_segments: peer_segments,
        _segment: segment,
    }
}

/// MPI_Win_allocate / MPI_Win_allocate_shared.
pub(crate) fn allocate(
    comm: &Comm,
    bytes: usize,
    disp_unit: usize,
    info: &WinInfo,
    shared: bool,
) -> Result<WinCore> {
    let call = if shared {
        Call::AllocateShared
    } else {
        Call::Allocate
    };
    let n = comm.size();
    let me = comm.rank();
    let local = WinHints::parse(info).and_then(|h| check_disp_unit(disp_unit).map(|()| h));
    // One reduction agrees on errors and finds out whether sizes and units are symmetric.
    let (b, d) = (bytes as u64, disp_unit as u64);
    let mut v = [u64::from(local.is_err()), b, !b, d, !d];
    comm.allreduce_for(call, &mut v, ReduceOp::Max)?;
    let hints = match local {
        Err(e) => return Err(e),
        Ok(_) if v[0] != 0 => return Err(Error::PeerFailed { call: call.name() }),
        Ok(h) => h,
    };
    let same_size = v[1] == !v[2];
    let same_unit = v[3] == !v[4];
    // Every rank sees the same reduction, so every rank takes the same branch.
    if hints.same_size && !same_size {
        return Err(Error::InvalidInfo {
            key: keys::SAME_SIZE.into(),
            value: "true".into(),
            reason: "the processes passed different sizes".into(),
        });
    }
    if hints.same_disp_unit && !same_unit {
        return Err(Error::InvalidInfo {
            key: keys::SAME_DISP_UNIT.into(),
            value: "true".into(),
            reason: "the processes passed different displacement units".into(),
        });
    }
    let contiguous = shared && !hints.alloc_shared_noncontig;
    let pad = |b: usize| if contiguous { b } else { padded(b) };
    // Symmetric: O(1) metadata. Otherwise one allgather and a table.
    let placement: std::result::Result<usize, Vec<(usize, usize, usize)>> =
        if same_size && same_unit {
            Ok(pad(bytes))
        } else {
            let all = comm.allgather_for(call, &[b, d])?;
            let mut offset = 0usize;
            Err(all
                .chunks_exact(2)
                .map(|c| {
                    let (bytes, du) = (c[0] as usize, c[1] as usize);
                    let entry = (offset, bytes, du);
                    // Saturating: a sum beyond the address space is refused just below.
                    offset = offset.saturating_add(pad(bytes));
                    entry
                })
                .collect())
        };
    let data_bytes = match &placement {
        Ok(stride) => stride.checked_mul(n),
        Err(table) => table
            .last()
            .map_or(Some(0), |&(off, bytes, _)| off.checked_add(pad(bytes))),
    }
    .filter(|&b| b <= isize::MAX as usize)
    .ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{call}: the windows of the {n} processes together exceed the address space"
        ))
    })?;
    let layout = ControlLayout::new(n, 0, data_bytes);
    // MPI requires the same granularity everywhere; it picks the accumulate protocol.
    let gran = hints.accumulate_granularity as u64;
    let segment = map_node_segment(comm, call, &layout, &[gran], Ok(()))?;
    let flavor = if shared {
        Flavor::Shared
    } else {
        Flavor::Allocate
    };
    let placement2 = placement.clone();
    Ok(assemble(
        comm,
        flavor,
        segment,
        layout,
        |ctrl| match placement {
            Ok(stride) => Targets::Symmetric {
                base: ctrl.data_base(),
                stride,
                bytes,
                disp_unit,
            },
            Err(table) => Targets::Table(
                table
                    .into_iter()
                    .map(|(off, bytes, disp_unit)| TargetRegion {
                        route: Route::Direct(ctrl.data_base().wrapping_add(off)),
                        bytes,
                        disp_unit,
                        shared: true,
                    })
                    .collect(),
            ),
        },
        |ctrl| {
            let off = match &placement2 {
                Ok(stride) => me * stride,
                Err(table) => table[me].0,
            };
            LocalRegion {
                base: ctrl.data_base().wrapping_add(off),
                bytes,
                disp_unit,
            }
        },
        hints,
        Vec::new(),
    ))
}

/// What every rank publishes about its memory for MPI_Win_create.
struct CreateRecord {
    pid: i32,
    addr: usize,
    bytes: usize,
    disp_unit: usize,
    /// Shared-heap segment holding the memory, and the offset in it.
    shared: Option<(String, usize)>,
}

impl CreateRecord {
    fn encode(&self) -> Vec<u8> {
        let (name, offset) = match &self.shared {
            Some((n, o)) => (n.as_bytes(), *o as u64),
            None => (&[][..], 0),
        };
        let mut out = Vec::with_capacity(40 + name.len());
        for w in [
            self.pid as u64,
            self.addr as u64,
            self.bytes as u64,
            self.disp_unit as u64,
            offset,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(name);
        out
    }

    fn decode(b: &[u8]) -> Option<CreateRecord> {
        if b.len() < 40 {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let name = std::str::from_utf8(&b[40..]).ok()?;
        Some(CreateRecord {
            pid: w(0) as i32,
            addr: w(1) as usize,
            bytes: w(2) as usize,
            disp_unit: w(3) as usize,
            shared: (!name.is_empty()).then(|| (name.to_owned(), w(4) as usize)),
        })
    }
}

/// MPI_Win_create over `bytes` bytes at `base`.
pub(crate) fn create(
    comm: &Comm,
    base: *mut u8,
    bytes: usize,
    disp_unit: usize,
    info: &WinInfo,
) -> Result<WinCore> {
    let call = Call::Create;
    let me = comm.rank();
    let hints = WinHints::parse(info).and_then(|h| check_disp_unit(disp_unit).map(|()| h));
    let record = hints.as_ref().ok().map(|_| CreateRecord {
        pid: std::process::id() as i32,
        addr: base as usize,
        bytes,
        disp_unit,
        shared: (bytes > 0)
            .then(|| memory::lookup(base as usize, bytes))
            .flatten()
            .map(|l| (l.name, l.offset)),
    });
    // An empty record tells the others that this rank failed.
    let records = comm.allgatherv_for(
        call,
        &record
            .as_ref()
            .map(CreateRecord::encode)
            .unwrap_or_default(),
    )?;
    let hints = hints?;
    let records: Vec<CreateRecord> = records
        .iter()
        .map(|r| CreateRecord::decode(r).ok_or_else(|| Error::PeerFailed { call: call.name() }))
        .collect::<Result<_>>()?;
    // Map the peers' shared-heap segments; everything else is reached with CMA.
    let mut peer_segments: Vec<Segment> = Vec::new();
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    let mut table = Vec::with_capacity(records.len());
    let mut prior = Ok(());
    for (rank, r) in records.iter().enumerate() {
        let route = if rank == me {
            Route::Direct(base)
        } else if let Some((name, offset)) = &r.shared {
            let idx = match by_name.get(name.as_str()) {
                Some(&i) => Some(i),
                None => match Segment::open(name) {
                    Ok(s) => {
                        peer_segments.push(s);
                        by_name.insert(name, peer_segments.len() - 1);
                        Some(peer_segments.len() - 1)
                    }
                    Err(e) => {
                        prior = Err(e);
                        None
                    }
                },
            };
            match idx {
                Some(i) => Route::Direct(peer_segments[i].as_ptr().wrapping_add(*offset)),
                None => Route::Cma {
                    pid: r.pid,
                    addr: r.addr,
                },
            }
        } else {
            Route::Cma {
                pid: r.pid,
                addr: r.addr,
            }
        };
        table.push(TargetRegion {
            route,
            bytes: r.bytes,
            disp_unit: r.disp_unit,
            // Mapped by everyone exactly when it lives in the owner's shared heap (a peer
            // that could not map it failed the creation above).
            shared: r.shared.is_some(),
        });
    }
    let layout = ControlLayout::new(comm.size(), 0, 0);
    let gran = hints.accumulate_granularity as u64;
    let segment = map_node_segment(comm, call, &layout, &[gran], prior)?;
    Ok(assemble(
        comm,
        Flavor::Create,
        segment,
        layout,
        |_| Targets::Table(table),
        |_| LocalRegion {
            base,
            bytes,
            disp_unit,
        },
        hints,
        peer_segments,
    ))
}

/// MPI_Win_create_dynamic.
pub(crate) fn create_dynamic(comm: &Comm, info: &WinInfo) -> Result<WinCore> {
    let call = Call::CreateDynamic;
    let (hints, prior) = match WinHints::parse(info) {
        Ok(h) => (h, Ok(())),
        Err(e) => (WinHints::default(), Err(e)),
    };
    // The table capacity fixes the layout (and the granularity the accumulate protocol):
    // rank 0 broadcasts them and the others compare.
    let cap = hints.max_attached_regions;
    let layout = ControlLayout::new(comm.size(), cap, 0);
    // With `prior` an error, map_node_segment returns it: `hints` is only used when valid.
    let gran = hints.accumulate_granularity as u64;
    let segment = map_node_segment(comm, call, &layout, &[cap as u64, gran], prior)?;
    Ok(assemble(
        comm,
        Flavor::Dynamic,
        segment,
        layout,
        |_| Targets::Dynamic,
        |_| LocalRegion {
            base: std::ptr::null_mut(),
            bytes: 0,
            disp_unit: 1,
        },
        hints,
        Vec::new(),
    ))
}
