//! Collective window creation for the four flavors ([Gerstenberger13] §2.2, [MPI-4.1]).
//!
//! Every flavor maps one node segment created by rank 0 (`O_EXCL`, mode 0600, random name),
//! whose name rank 0 broadcasts together with the parameters that fix the layout; the other
//! ranks open it, every rank writes its identity words, all agree that everything worked,
//! and rank 0 removes the name — from then on nothing of the window is visible in /dev/shm.
//! A local error at any rank (bad argument or info, failed system call) makes every rank
//! return an error instead of leaving the others waiting.

use crate::bootstrap::{Call, Comm, ReduceOp};
use crate::error::{Error, Result};
use crate::memory;
use crate::shm::heap::{CHUNK_BYTES, MAX_BLOCK};
use crate::shm::segment::{segment_name, Segment};
use crate::transport::Route;
use crate::win::assemble::{assemble, padded, placed, Placement};
use crate::win::control::{BlockSlots, Control, ControlLayout, ControlMemory, WIN_MAGIC};
use crate::win::core::{LocalRegion, PeerMapping, TargetRegion, Targets, WinCore};
use crate::win::info::{keys, ShareInPlace, WinHints, WinInfo};
use crate::win::Flavor;

const PAGE: usize = 4096;

/// Creation of windows whose ranks span nodes: the network layer's (`net::across`), which
/// lies above the window layer and registers these when the process joins its job
/// (`universe`; [`register_across_nodes`]). A group that spans nodes in a process that
/// never joined one through `init` gets an error, never a window half made.
#[derive(Clone, Copy)]
pub(crate) struct AcrossNodes {
    /// MPI_Win_allocate over ranks of several nodes.
    #[allow(clippy::type_complexity)]
    pub allocate:
        fn(&Comm, Call, ControlLayout, Placement, usize, usize, WinHints) -> Result<WinCore>,
    /// MPI_Win_create over ranks of several nodes: this rank's memory, every rank's
    /// (bytes, disp_unit), and how a rank of this node is reached.
    #[allow(clippy::type_complexity)]
    pub create: fn(
        &Comm,
        Call,
        LocalRegion,
        Vec<(usize, usize)>,
        WinHints,
        &dyn Fn(usize, &mut Vec<PeerMapping>) -> Result<TargetRegion>,
    ) -> Result<WinCore>,
    /// MPI_Win_create_dynamic over ranks of several nodes.
    pub create_dynamic: fn(&Comm, Call, ControlLayout, WinHints, Result<()>) -> Result<WinCore>,
}

static ACROSS_NODES: std::sync::OnceLock<AcrossNodes> = std::sync::OnceLock::new();

/// Makes `across` the creation of windows across nodes (the first registration holds).
pub(crate) fn register_across_nodes(across: AcrossNodes) {
    let _ = ACROSS_NODES.set(across);
}

/// The registered creation of windows across nodes.
fn across_nodes(call: Call) -> Result<AcrossNodes> {
    ACROSS_NODES.get().copied().ok_or_else(|| {
        Error::Unsupported(format!(
            "{call}: the group spans nodes, and windows across nodes are created by the \
             network layer, which `onesided::init` registers: call it first"
        ))
    })
}

fn check_disp_unit(disp_unit: usize) -> Result<()> {
    if disp_unit == 0 {
        Err(Error::InvalidDisplacement(
            "disp_unit must be positive".into(),
        ))
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
    gran: &mut u64,
    prior: Result<()>,
) -> Result<Segment> {
    let me = comm.rank();
    // Every process sees the same answer (a node holds fewer than all processes on every
    // node or on none), so all return here together.
    let boot = comm.bootstrap();
    if boot.node_size() != boot.size() {
        return Err(Error::Unsupported(format!(
            "{call}: the group spans several nodes ({} of {} processes on this one); \
             windows of this kind across nodes come later (`allocate`, `create` and \
             dynamic windows span nodes in a build with a network: feature `net` or `ofi`)",
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
        // Published to the peers by the agreement below (a barrier).
        ctrl.write_own_identity(me, (me == 0).then_some(WIN_MAGIC));
        Ok(seg)
    });
    // The agreement on the outcome also takes the largest granularity asked for.
    let mut v = [u64::from(seg.is_err()), *gran];
    comm.allreduce_for(call, &mut v, ReduceOp::Max)?;
    let seg = match seg {
        Err(e) => return Err(e),
        Ok(_) if v[0] != 0 => return Err(Error::PeerFailed { call: call.name() }),
        Ok(seg) => seg,
    };
    *gran = v[1];
    // Every rank has mapped it: the name is no longer needed.
    seg.unlink();
    Ok(seg)
}

/// The control words of a `create` or `dynamic` window: a block of the communicator's
/// control heap (`shm::heap`) where it keeps one, a segment of their own otherwise. The heap
/// path is one reduction: every process picks the same free block without talking, writes
/// its identity words into it, and the reduction compares the picks, `params` (which fix the
/// layout) and `prior` (the caller's local outcome), failing everywhere together.
fn control_memory(
    comm: &Comm,
    call: Call,
    layout: &ControlLayout,
    params: &[u64],
    gran: &mut u64,
    prior: Result<()>,
) -> Result<ControlMemory> {
    let boot = comm.bootstrap();
    let heap = match boot.control_heap() {
        Some(h) if layout.total <= MAX_BLOCK && boot.node_size() == boot.size() => {
            std::sync::Arc::clone(h)
        }
        _ => {
            return map_node_segment(comm, call, layout, params, gran, prior)
                .map(ControlMemory::Segment)
        }
    };
    let me = comm.rank();
    // Held across the collectives: window creation on one communicator is serialized anyway.
    let mut state = heap.lock();
    if state.pick(layout.total).is_none() {
        // Every process's state is the same, so all grow together.
        let chunk = grow_heap(comm, layout.total.max(CHUNK_BYTES))?;
        state.add_chunk(chunk);
    }
    let span = state
        .pick(layout.total)
        .expect("a chunk that holds the block");
    let base = state.span_ptr(span);
    // The words this process owns until the agreement below publishes the window: its
    // rank's control block, and for rank 0 the header and barrier (see `shm::heap`).
    let block = layout.blocks_off + me * layout.block_stride;
    // SAFETY: every range lies inside the span (the blocks, then the barrier, end before
    // `data_off <= layout.total <= span.len`), which lies inside a chunk the heap keeps
    // mapped; nobody else accesses them: the block's previous window was freed everywhere
    // before the agreement that recycled it, and peers touch this window's words only after
    // the agreement below.
    unsafe {
        // The region table (dynamic windows: 56 KiB a rank by default) is left as the last
        // window had it: readers read only the slots below the region count, which is
        // zeroed here, and the owner writes a slot before it counts it (win::dynamic).
        let slots = layout.region_slots();
        std::ptr::write_bytes(base.wrapping_add(block), 0, slots.start);
        std::ptr::write_bytes(
            base.wrapping_add(block + slots.end),
            0,
            layout.block_stride - slots.end,
        );
        if me == 0 {
            std::ptr::write_bytes(base, 0, layout.blocks_off);
            std::ptr::write_bytes(
                base.wrapping_add(layout.barrier_off),
                0,
                layout.barrier.bytes(),
            );
        }
    }
    // SAFETY: the span lies inside a chunk every process of `comm` mapped and keeps mapped
    // (the heap owns it), holds `layout.total` bytes, is page aligned, zero where this process
    // reads before the agreement (zeroed above), and laid out identically by every process.
    let ctrl = unsafe { Control::new(base, *layout) };
    // Published to the peers by the reduction below.
    let write_identity = |pid: u64, job_rank: u64, magic: u64| {
        ctrl.write_identity(me, pid, job_rank, (me == 0).then_some(magic));
    };
    write_identity(
        u64::from(std::process::id()),
        crate::bootstrap::identity::identity().map_or(me, |i| i.rank) as u64,
        WIN_MAGIC,
    );
    let pick = state.fingerprint(span);
    // Six words: under a host MPI an agreement of up to six travels with the collective's
    // tag in one MPI call, and a longer one costs a second (a microsecond per creation).
    // The last takes the largest granularity asked for.
    let agreed = params_fingerprint(params);
    let mut v = vec![
        u64::from(prior.is_err()),
        pick,
        !pick,
        agreed,
        !agreed,
        *gran,
    ];
    let reduced = comm.allreduce_for(call, &mut v, ReduceOp::Max);
    let reduced_ok = reduced.is_ok();
    if reduced_ok {
        // Every process has entered this creation, so it left every earlier free.
        state.take(span);
        state.recycle();
    }
    let same = |i: usize| v[i] == !v[i + 1];
    let outcome = match reduced {
        Err(e) => Err(e),
        Ok(()) => match prior {
            Err(e) => Err(e),
            Ok(()) if v[0] != 0 => Err(Error::PeerFailed { call: call.name() }),
            Ok(()) if !same(3) => Err(Error::InvalidArgument(format!(
                "{call}: the processes passed different parameters {params:?} (info keys \
                     that fix the layout must be equal everywhere)"
            ))),
            Ok(()) if !same(1) => Err(Error::Bootstrap(format!(
                "{call}: the processes' control heaps are out of step (windows of this \
                 communicator were created or freed in different orders)"
            ))),
            Ok(()) => Ok(()),
        },
    };
    if let Err(e) = outcome {
        if reduced_ok {
            // Taken everywhere (the reduction completed at every process): free it again.
            state.give_back(span);
        }
        write_identity(0, 0, 0);
        return Err(e);
    }
    *gran = v[5];
    Ok(ControlMemory::Block(state.block(&heap, span)))
}

/// One word standing for the layout parameters of a creation: equal words at every process
/// (checked with the maximum of the word and of its complement) mean equal parameters, up to
/// a 64-bit hash collision (FNV-1a over the words, which differ in few bits).
fn params_fingerprint(params: &[u64]) -> u64 {
    params.iter().fold(0xcbf2_9ce4_8422_2325, |h, &p| {
        p.to_le_bytes().iter().fold(h, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    })
}

/// Collective: a new chunk of at least `len` bytes for the control heap, created by rank 0
/// and mapped by every process (its name removed once all have).
fn grow_heap(comm: &Comm, len: usize) -> Result<Segment> {
    let call = Call::ControlHeap;
    let len = len.next_multiple_of(PAGE);
    let mut name = Vec::new();
    let mut created = None;
    if comm.rank() == 0 {
        let seg = Segment::create(comm.job_id(), "0", len);
        if let Ok(s) = &seg {
            name = s.name().as_bytes().to_vec();
        }
        created = Some(seg);
    }
    comm.bcast_vec_for(call, 0, &mut name)?;
    let seg = match created {
        Some(seg) => seg,
        None if name.is_empty() => Err(Error::PeerFailed { call: call.name() }),
        None => std::str::from_utf8(&name)
            .map_err(|_| Error::Bootstrap("heap segment name is not UTF-8".into()))
            .and_then(Segment::open),
    };
    let seg = seg.and_then(|s| {
        if s.len() < len {
            Err(Error::Bootstrap(format!(
                "{call}: heap segment is {} bytes, expected {len}",
                s.len()
            )))
        } else {
            Ok(s)
        }
    });
    let seg = comm.agree_on(call, seg)?;
    seg.unlink();
    Ok(seg)
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
    let mut hints = match local {
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
    let placement: Placement = if same_size && same_unit {
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
    // Ranks on several nodes: the network reaches the others (feature ofi), and no memory
    // is shared among all (MPI_ERR_RMA_SHARED for allocate_shared).
    let boot = comm.bootstrap();
    let spans_nodes = boot.node_size() != boot.size();
    if spans_nodes && shared {
        return Err(Error::NotShareable { call: call.name() });
    }
    if spans_nodes {
        return (across_nodes(call)?.allocate)(
            comm, call, layout, placement, bytes, disp_unit, hints,
        );
    }
    // The granularity picks the accumulate protocol: a hint the processes may pass
    // differently (a library sets it from each one's own size), so the window takes the
    // largest asked for, which serves every one.
    let mut gran = hints.accumulate_granularity as u64;
    let segment = ControlMemory::Segment(map_node_segment(
        comm,
        call,
        &layout,
        &[],
        &mut gran,
        Ok(()),
    )?);
    hints.accumulate_granularity = gran as usize;
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
        BlockSlots::default(),
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
                        lazy: None,
                    })
                    .collect(),
            ),
        },
        |ctrl| {
            let (off, _, _) = placed(&placement2, me, bytes, disp_unit);
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

/// What every rank publishes about its memory for MPI_Win_create: six words, so that the
/// exchange fits in the tag exchange of a host-MPI bootstrap (no second MPI call).
struct CreateRecord {
    pid: i32,
    addr: usize,
    bytes: usize,
    disp_unit: usize,
    /// The memory lives in the owner's shared heap: the segment's owner (job rank) and
    /// random tag, which name it, and the offset in it.
    shared: Option<SharedAt>,
}

#[derive(Clone, Copy)]
struct SharedAt {
    owner: u32,
    tag: u64,
    offset: usize,
}

/// Bit of the first record word that says the memory is in the shared heap.
const SHARED_BIT: u64 = 1 << 63;

impl CreateRecord {
    fn encode(&self) -> Vec<u8> {
        let (owner, tag, offset, flag) = match self.shared {
            Some(s) => (s.owner, s.tag, s.offset, SHARED_BIT),
            None => (0, 0, 0, 0),
        };
        let words = [
            u64::from(self.pid as u32) | (u64::from(owner) << 32) | flag,
            self.addr as u64,
            self.bytes as u64,
            self.disp_unit as u64,
            offset as u64,
            tag,
        ];
        bytemuck::cast_slice(&words).to_vec()
    }

    fn decode(b: &[u8]) -> Option<CreateRecord> {
        if b.len() != 48 {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let first = w(0);
        Some(CreateRecord {
            pid: first as u32 as i32,
            addr: w(1) as usize,
            bytes: w(2) as usize,
            disp_unit: w(3) as usize,
            shared: (first & SHARED_BIT != 0).then(|| SharedAt {
                owner: ((first & !SHARED_BIT) >> 32) as u32,
                tag: w(5),
                offset: w(4) as usize,
            }),
        })
    }
}

/// MPI_Win_create over `bytes` bytes at `base`. `partial_pages`: the caller allows
/// `onesided_share_in_place=true` (no other thread writes the pages around the memory while
/// the window is created and freed); otherwise `true` acts as `whole_pages`.
pub(crate) fn create(
    comm: &Comm,
    base: *mut u8,
    bytes: usize,
    disp_unit: usize,
    info: &WinInfo,
    partial_pages: bool,
) -> Result<WinCore> {
    let call = Call::Create;
    let me = comm.rank();
    let hints = WinHints::parse(info).and_then(|h| check_disp_unit(disp_unit).map(|()| h));
    let single_node = comm.bootstrap().node_size() == comm.bootstrap().size();
    let in_place = match &hints {
        Ok(h) if single_node && h.share_in_place != ShareInPlace::Off && bytes > 0 => {
            let partial = partial_pages && h.share_in_place == ShareInPlace::Pages;
            // SAFETY: the memory is the caller's window memory (valid, see `RawWindow::create`);
            // other threads stay off the pages around it only when the caller allowed
            // `partial`, and a range of whole pages is the window's own. A failure leaves
            // the memory where it was (reached by cross-memory attach).
            unsafe { crate::memory::share_in_place(base as usize, bytes, partial) }
                .ok()
                .flatten()
        }
        _ => None,
    };
    let record = hints.as_ref().ok().map(|_| CreateRecord {
        pid: std::process::id() as i32,
        addr: base as usize,
        bytes,
        disp_unit,
        shared: (bytes > 0)
            .then(|| memory::lookup(base as usize, bytes))
            .flatten()
            .zip(crate::bootstrap::identity::identity())
            .and_then(|(l, id)| {
                Some(SharedAt {
                    // Job ranks beyond 2^31 do not exist; such memory would go by CMA.
                    owner: u32::try_from(id.rank).ok().filter(|&r| r < 1 << 31)?,
                    tag: l.tag,
                    offset: l.offset,
                })
            }),
    });
    // An empty record tells the others that this rank failed.
    let records = comm.allgatherv_for(
        call,
        &record
            .as_ref()
            .map(CreateRecord::encode)
            .unwrap_or_default(),
    )?;
    let mut hints = hints?;
    let records: Vec<CreateRecord> = records
        .iter()
        .map(|r| CreateRecord::decode(r).ok_or_else(|| Error::PeerFailed { call: call.name() }))
        .collect::<Result<_>>()?;
    // Peers' shared-heap memory is mapped at the first access (`PeerMapping`); everything
    // else is reached with CMA.
    let mut peer_mappings: Vec<PeerMapping> = Vec::new();
    let target = |rank: usize, peer_mappings: &mut Vec<PeerMapping>| {
        create_target(me, base, rank, &records[rank], peer_mappings)
    };
    {
        let boot = comm.bootstrap();
        if boot.node_size() != boot.size() {
            let extents = records.iter().map(|r| (r.bytes, r.disp_unit)).collect();
            let local = LocalRegion {
                base,
                bytes,
                disp_unit,
            };
            return (across_nodes(call)?.create)(comm, call, local, extents, hints, &target);
        }
    }
    let table = (0..records.len())
        .map(|rank| target(rank, &mut peer_mappings))
        .collect::<Result<Vec<_>>>()?;
    let prior = Ok(());
    // Request rings when some rank's memory is reached by cross-memory attach (every rank
    // has the same table, so all agree on the layout).
    let rings = hints.target_service
        && comm.size() <= crate::transport::ring::MAX_RANKS
        && table.iter().any(|r| !r.shared && r.bytes > 0);
    let layout = ControlLayout::with_rings(comm.size(), 0, 0, rings);
    let mut gran = hints.accumulate_granularity as u64;
    let segment = control_memory(comm, call, &layout, &[u64::from(rings)], &mut gran, prior)?;
    hints.accumulate_granularity = gran as usize;
    let mut core = assemble(
        comm,
        Flavor::Create,
        segment,
        layout,
        BlockSlots::default(),
        |_| Targets::Table(table),
        |_| LocalRegion {
            base,
            bytes,
            disp_unit,
        },
        hints,
        peer_mappings,
    );
    core.in_place = in_place;
    Ok(core)
}

/// Where rank `rank`'s memory of a `create` window (its `record`) is reached from this
/// process, on this node: our own directly; a peer's in its shared heap by a mapping made at
/// the first access (added to `peer_mappings`); any other by cross-memory attach.
fn create_target(
    me: usize,
    base: *mut u8,
    rank: usize,
    r: &CreateRecord,
    peer_mappings: &mut Vec<PeerMapping>,
) -> Result<TargetRegion> {
    let cma = Route::Cma {
        pid: r.pid,
        addr: r.addr,
    };
    let (route, lazy) = match &r.shared {
        _ if rank == me => (Route::Direct(base), None),
        Some(at) if r.bytes > 0 => {
            // alloc_mem names its segments after the job, the owner's job rank and a tag.
            let job = crate::bootstrap::identity::identity().map_or("", |id| id.job.as_str());
            let name = segment_name(job, &at.owner.to_string(), at.tag);
            peer_mappings.push(PeerMapping::new(name, at.offset));
            let index = u32::try_from(peer_mappings.len() - 1).map_err(|_| {
                Error::InvalidArgument(format!("{}: too many processes", Call::Create))
            })?;
            (cma, Some(index))
        }
        _ => (cma, None),
    };
    Ok(TargetRegion {
        route,
        bytes: r.bytes,
        disp_unit: r.disp_unit,
        // Mapped by everyone exactly when it lives in the owner's shared heap.
        shared: r.shared.is_some(),
        lazy,
    })
}

/// MPI_Win_create_dynamic.
pub(crate) fn create_dynamic(comm: &Comm, info: &WinInfo) -> Result<WinCore> {
    let call = Call::CreateDynamic;
    let (mut hints, prior) = match WinHints::parse(info) {
        Ok(h) => (h, Ok(())),
        Err(e) => (WinHints::default(), Err(e)),
    };
    // The table capacity fixes the layout (and the granularity the accumulate protocol):
    // rank 0 broadcasts them and the others compare.
    let cap = hints.max_attached_regions;
    let layout = ControlLayout::new(comm.size(), cap, 0);
    {
        let boot = comm.bootstrap();
        if boot.node_size() != boot.size() {
            return (across_nodes(call)?.create_dynamic)(comm, call, layout, hints, prior);
        }
    }
    // With `prior` an error, map_node_segment returns it: `hints` is only used when valid.
    let mut gran = hints.accumulate_granularity as u64;
    let segment = control_memory(comm, call, &layout, &[cap as u64], &mut gran, prior)?;
    hints.accumulate_granularity = gran as usize;
    Ok(assemble(
        comm,
        Flavor::Dynamic,
        segment,
        layout,
        BlockSlots::default(),
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
