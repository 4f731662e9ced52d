//! A rank's side of a boot segment: connecting to the job and the collectives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::backoff::Backoff;
use crate::bootstrap::call::{Call, CallTag};
use crate::bootstrap::hub::{self, Outcome};
use crate::bootstrap::local::launcher::BootSegment;
use crate::bootstrap::local::{
    word, BootLayout, ABORT_REPORTING, ENV_BOOT, ENV_JOB, ENV_RANK, ENV_SIZE, MAGIC, OFF_ABORT,
    OFF_ATTACHED, OFF_BARRIER, OFF_HEADER, SLOT_TAGS, VERSION,
};
use crate::bootstrap::roster::{channel_id, PeerWatch, Roster};
use crate::bootstrap::{alltoallv_into_by_copies, blocks_inside, one_entry_per_process, Bootstrap};
use crate::error::{Error, Result};
use crate::shm::barrier::Barrier;
use crate::shm::heap::ControlHeap;
use crate::shm::liveness;
use crate::shm::segment::{random_job_id, Segment};
use crate::transport::cma;

/// Collective state of one process on one boot segment.
#[derive(Debug)]
struct Collectives {
    /// The boot segment's barrier (none for a communicator whose collectives go through the
    /// hub: its members need not share the segment).
    barrier: Option<Barrier>,
    /// Collective calls made so far (the next call's sequence number).
    calls: u64,
}

/// Bootstrap of a rank launched on this node.
#[derive(Debug)]
pub struct LocalBootstrap {
    seg: Arc<Segment>,
    layout: BootLayout,
    rank: usize,
    size: usize,
    job: String,
    /// Collectives are serialised per process; the barrier's generation lives here.
    state: Mutex<Collectives>,
    /// Boot segments of the communicators this one was split from: their abort flags (the
    /// launcher raises the one of the job's first segment) end our waits too.
    ancestors: Vec<Arc<Segment>>,
    /// The members in the job's roster (the first boot segment's).
    watch: PeerWatch,
    /// Control blocks of this communicator's windows.
    heap: Arc<ControlHeap>,
    /// The (virtual) node of each rank ([`super::ENV_NODES`]).
    nodes: Arc<Vec<usize>>,
    /// The hub connection that carries the collectives when the job's nodes do not share the
    /// boot segment ([`hub::ENV_HUB`]); the segment then holds this node's roster and the
    /// abort flag only.
    hub: Option<hub::Link>,
    /// The communicator's id at the hub (0: the job's world).
    comm_id: u64,
    /// The job's processes on this machine (all of them, unless a PMI launcher placed
    /// the job on several hosts).
    on_this_machine: usize,
}

impl LocalBootstrap {
    /// Connects to the job described by the `ONESIDED_*` environment variables, if any.
    pub fn from_env() -> Result<Option<LocalBootstrap>> {
        let Ok(boot) = std::env::var(ENV_BOOT) else {
            return Ok(None);
        };
        let get = |k: &str| -> Result<String> {
            std::env::var(k)
                .map_err(|_| Error::Bootstrap(format!("{ENV_BOOT} is set but {k} is not")))
        };
        let job = get(ENV_JOB)?;
        let parse = |k: &str| -> Result<usize> {
            get(k)?
                .parse()
                .map_err(|_| Error::Bootstrap(format!("{k} is not a number")))
        };
        let rank = parse(ENV_RANK)?;
        let size = parse(ENV_SIZE)?;
        let nodes = match std::env::var(super::ENV_NODES) {
            Ok(_) => parse(super::ENV_NODES)?,
            Err(_) => 1,
        };
        let mut boot = Self::connect(&job, &boot, rank, size)?;
        boot.nodes = Arc::new(super::virtual_nodes(size, nodes));
        if let Ok(addr) = std::env::var(hub::ENV_HUB) {
            boot.hub = Some(hub::Link::connect(&addr, 0, rank, size)?);
        }
        Ok(Some(boot))
    }

    /// Places the ranks on `nodes` (the node of each rank) and sends the collectives
    /// through the job's hub over `link` (the `pmi` bootstrap: a node's segment holds its
    /// ranks' roster and abort flag only).
    pub(crate) fn join_hub(
        &mut self,
        nodes: Arc<Vec<usize>>,
        link: hub::Link,
        on_this_machine: usize,
    ) {
        self.nodes = nodes;
        self.hub = Some(link);
        self.on_this_machine = on_this_machine;
    }

    /// A handle that closes this communicator's hub connection at exit (see
    /// [`hub::Leaver`]); `None` without a hub.
    pub(crate) fn hub_leaver(&self) -> Result<Option<hub::Leaver>> {
        self.hub.as_ref().map(hub::Link::leaver).transpose()
    }

    /// Maps the boot segment `name` of job `job` as rank `rank` of `size`.
    pub fn connect(job: &str, name: &str, rank: usize, size: usize) -> Result<LocalBootstrap> {
        if rank >= size {
            return Err(Error::Bootstrap(format!(
                "rank {rank} out of range for size {size}"
            )));
        }
        let seg = Segment::open(name)?;
        // The fixed part first: a truncated or foreign segment is an error, not a panic.
        if seg.len() < OFF_BARRIER {
            return Err(Error::Bootstrap(format!(
                "{name} is too short ({} bytes) to be a onesided boot segment",
                seg.len()
            )));
        }
        // Acquire: pairs with the launcher's Release store of the magic.
        if word(&seg, OFF_HEADER).load(Ordering::Acquire) != MAGIC
            || word(&seg, OFF_HEADER + 8).load(Ordering::Relaxed) != VERSION
        {
            return Err(Error::Bootstrap(format!(
                "{name} is not a onesided boot segment"
            )));
        }
        let n = word(&seg, OFF_HEADER + 16).load(Ordering::Relaxed) as usize;
        if n != size {
            return Err(Error::Bootstrap(format!(
                "boot segment is for {n} ranks, environment says {size}"
            )));
        }
        let layout = BootLayout::new(n)?;
        if seg.len() < layout.total {
            return Err(Error::Bootstrap(format!(
                "boot segment {name} is too short: {} bytes, {n} ranks need {}",
                seg.len(),
                layout.total
            )));
        }
        liveness::join(job)?;
        // Relaxed: a counter the launcher polls only to decide when to unlink the name.
        word(&seg, OFF_ATTACHED).fetch_add(1, Ordering::Relaxed);
        Self::with_segment(seg, layout, job.to_owned(), rank, size)
    }

    /// A job of one process that needs no launcher.
    pub fn singleton() -> Result<LocalBootstrap> {
        let job = random_job_id();
        let layout = BootLayout::new(1)?;
        let seg = Segment::create(&job, "0", layout.total)?;
        seg.unlink();
        Self::with_segment(seg, layout, job, 0, 1)
    }

    fn with_segment(
        seg: Segment,
        layout: BootLayout,
        job: String,
        rank: usize,
        size: usize,
    ) -> Result<Self> {
        // SAFETY: the barrier area lies inside `seg` (layout computed from n), is 64-byte
        // aligned and zero-initialised by the launcher; `seg` lives as long as `self`.
        let barrier = unsafe { Barrier::new(seg.as_ptr().add(OFF_BARRIER), layout.barrier, rank) };
        let seg = Arc::new(seg);
        let roster = Roster::new(Arc::clone(&seg), layout.roster, size)?;
        // The world's channel: the same at every process of the job, whichever node's boot
        // segment it maps (waits on one node see the others' through the launcher's copies).
        let watch = PeerWatch::new(
            Arc::new(roster),
            (0..size).map(Some).collect(),
            rank,
            channel_id(job_seed(&job)),
        );
        Ok(LocalBootstrap {
            seg,
            layout,
            rank,
            size,
            job,
            state: Mutex::new(Collectives {
                barrier: Some(barrier),
                calls: 0,
            }),
            ancestors: Vec::new(),
            watch,
            heap: Arc::default(),
            nodes: Arc::new(vec![0; size]),
            hub: None,
            comm_id: 0,
            on_this_machine: size,
        })
    }

    /// Bytes of payload a slot holds per round.
    fn payload_size(&self) -> usize {
        self.layout.slot_size - SLOT_TAGS
    }

    fn slot(&self, rank: usize) -> *mut u8 {
        assert!(rank < self.size);
        // SAFETY: slots lie inside the segment (layout.total <= seg.len(), checked at connect).
        unsafe {
            self.seg
                .as_ptr()
                .add(self.layout.slots + rank * self.layout.slot_size)
        }
    }

    /// The tag word of `rank`'s slot for calls of sequence parity `parity`.
    fn tag_word(&self, rank: usize, parity: u64) -> &AtomicU64 {
        // SAFETY: the first line of the slot, 8-byte aligned (slots start on pages); see `slot`.
        unsafe {
            &*self
                .slot(rank)
                .add(8 * (parity as usize & 1))
                .cast::<AtomicU64>()
        }
    }

    /// Word `index` of `rank`'s payload (payload headers are atomics: others read them).
    fn slot_word(&self, rank: usize, index: usize) -> &AtomicU64 {
        assert!(index < self.payload_size() / 8);
        // SAFETY: inside the slot's payload, 8-byte aligned; see `slot`.
        unsafe {
            &*self
                .slot(rank)
                .add(SLOT_TAGS + index * 8)
                .cast::<AtomicU64>()
        }
    }

    fn write_slot(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.payload_size());
        // SAFETY: bounds asserted; only this rank writes its own slot between two barriers,
        // and peers read it only after the next barrier (release/acquire ordering).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.slot(self.rank).add(SLOT_TAGS + offset),
                data.len(),
            )
        }
    }

    fn read_slot(&self, rank: usize, offset: usize, out: &mut Vec<u8>, len: usize) {
        assert!(offset + len <= self.payload_size());
        let start = out.len();
        out.resize(start + len, 0);
        // SAFETY: bounds asserted; the owner wrote the slot before the barrier we passed and
        // does not write it again before the next barrier.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.slot(rank).add(SLOT_TAGS + offset),
                out[start..].as_mut_ptr(),
                len,
            )
        }
    }

    /// Enters the collective `call`: numbers it and publishes its tag. Peers read the tag
    /// after the first barrier ([`Self::first_sync`]).
    fn enter(&self, state: &mut Collectives, call: Call) -> CallTag {
        let tag = CallTag {
            call,
            seq: state.calls,
        };
        state.calls += 1;
        self.watch.note_entered(tag);
        // Relaxed: published by the first barrier's release increments.
        self.tag_word(self.rank, tag.seq)
            .store(tag.pack(), Ordering::Relaxed);
        tag
    }

    /// The first barrier of a collective, then the tag check: every rank sees every tag, so
    /// a mismatch fails the collective at every rank, before anyone reads a payload.
    fn first_sync(&self, state: &Collectives, tag: CallTag) -> Result<()> {
        self.sync_watching(state, tag, true)?;
        for r in 0..self.size {
            // Relaxed: ordered by the barrier's acquire.
            tag.check(r, self.tag_word(r, tag.seq).load(Ordering::Relaxed))?;
        }
        Ok(())
    }

    /// The barrier after round `round` has written its slots: the first one checks tags.
    fn round_sync(&self, state: &Collectives, tag: CallTag, round: usize) -> Result<()> {
        if round == 0 {
            self.first_sync(state, tag)
        } else {
            self.sync(state, tag)
        }
    }

    /// A later barrier of the same collective (every rank has arrived: tags matched).
    fn sync(&self, state: &Collectives, tag: CallTag) -> Result<()> {
        self.sync_watching(state, tag, false)
    }

    fn sync_watching(&self, state: &Collectives, tag: CallTag, first: bool) -> Result<()> {
        let b = state
            .barrier
            .as_ref()
            .expect("a communicator of the hub has no segment barrier");
        let mut wait = b.begin(tag.pack());
        let mut backoff = Backoff::new();
        let mut vigil = self.watch.vigil(tag);
        let mut hang = crate::diag::HangClock::new();
        let describe = || self.describe_collective(tag, first);
        while !b.poll(&mut wait) {
            if self.aborted() {
                if self.report_requested() {
                    hang.timed_out(describe);
                }
                return Err(Error::JobAborted);
            }
            hang.tick(describe);
            // A peer whose tag word holds any tag of this sequence number has arrived (a
            // different call is reported by the tag check once the barrier completes).
            vigil.check(|r| {
                Some(
                    !first
                        || CallTag::unpack(self.tag_word(r, tag.seq).load(Ordering::Relaxed))
                            .is_some_and(|t| t.seq == tag.seq),
                )
            })?;
            backoff.snooze();
        }
        Ok(())
    }

    /// What a wait in the collective `tag` waits for, in a hang report's words: the
    /// members that have not entered it (their tag words tell, in the first barrier of
    /// the collective; later ones wait for its slowest member).
    fn describe_collective(&self, tag: CallTag, first: bool) -> String {
        let mut text = format!(
            "{} (collective #{} of {}; this process is rank {} of {})",
            tag.call.mpi_name(),
            tag.seq,
            comm_name(self.comm_id),
            self.rank,
            self.size
        );
        if first {
            let behind: Vec<usize> = (0..self.size)
                .filter(|&r| {
                    // Relaxed: a look for a report.
                    CallTag::unpack(self.tag_word(r, tag.seq).load(Ordering::Relaxed))
                        .is_none_or(|t| t.seq != tag.seq)
                })
                .collect();
            text += &format!(" waits for ranks {behind:?}, which have not entered it");
        } else {
            text += " waits for its last members to finish it";
        }
        text
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Collectives> {
        // A poisoned lock only means another thread panicked inside a collective; the barrier
        // state itself is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A communicator as a hang report names it.
fn comm_name(id: u64) -> String {
    match id {
        0 => "the world communicator".into(),
        id => format!("communicator {id:#x}"),
    }
}

impl Bootstrap for LocalBootstrap {
    fn control_heap(&self) -> Option<&Arc<ControlHeap>> {
        Some(&self.heap)
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn node_rank(&self) -> usize {
        let mine = self.nodes[self.rank];
        self.nodes[..self.rank]
            .iter()
            .filter(|&&n| n == mine)
            .count()
    }

    fn node_size(&self) -> usize {
        let mine = self.nodes[self.rank];
        self.nodes.iter().filter(|&&n| n == mine).count()
    }

    /// `osrun` starts every rank on this machine, whatever the virtual nodes; a PMI
    /// launcher may spread them over hosts (`bootstrap::pmi`).
    fn processes_on_this_machine(&self) -> usize {
        self.on_this_machine
    }

    /// The processes `osrun` starts share its node, split over virtual nodes when asked
    /// ([`super::ENV_NODES`]).
    fn node_of(&self, rank: usize) -> usize {
        self.nodes[rank]
    }

    fn job_id(&self) -> &str {
        &self.job
    }

    fn barrier(&self, call: Call) -> Result<()> {
        if self.hub.is_some() {
            return self.through_hub(call, false, &[&[]]).map(drop);
        }
        let mut state = self.lock();
        let tag = self.enter(&mut state, call);
        self.first_sync(&state, tag)
    }

    fn allgatherv(&self, call: Call, send: &[u8]) -> Result<Vec<Vec<u8>>> {
        if self.hub.is_some() {
            return self.through_hub(call, false, &[send]);
        }
        let mut state = self.lock();
        let tag = self.enter(&mut state, call);
        let chunk = self.payload_size() - 8;
        let mut out: Vec<Vec<u8>> = vec![Vec::new(); self.size];
        let mut round = 0usize;
        loop {
            let lo = (round * chunk).min(send.len());
            let hi = ((round + 1) * chunk).min(send.len());
            // Relaxed: published by the barrier below.
            self.slot_word(self.rank, 0)
                .store(send.len() as u64, Ordering::Relaxed);
            self.write_slot(8, &send[lo..hi]);
            self.round_sync(&state, tag, round)?;
            let mut rounds = 1;
            for (r, part) in out.iter_mut().enumerate() {
                let len = self.slot_word(r, 0).load(Ordering::Relaxed) as usize;
                rounds = rounds.max(len.div_ceil(chunk));
                let lo = (round * chunk).min(len);
                let hi = ((round + 1) * chunk).min(len);
                if round == 0 {
                    part.reserve_exact(len);
                }
                self.read_slot(r, 8, part, hi - lo);
            }
            self.sync(&state, tag)?;
            round += 1;
            if round >= rounds {
                return Ok(out);
            }
        }
    }

    fn alltoallv(&self, call: Call, send: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let n = self.size;
        if send.len() != n {
            return Err(Error::InvalidArgument(format!(
                "alltoallv: {} buffers for {n} ranks",
                send.len()
            )));
        }
        if self.hub.is_some() {
            return self.through_hub(call, true, send);
        }
        let mut state = self.lock();
        let tag = self.enter(&mut state, call);
        let header = n * 8;
        // Bytes per (source, destination) pair per round, 8-aligned.
        let cap = ((self.payload_size() - header) / n) & !7;
        let mut out: Vec<Vec<u8>> = vec![Vec::new(); n];
        let mut round = 0usize;
        loop {
            for (j, data) in send.iter().enumerate() {
                self.slot_word(self.rank, j)
                    .store(data.len() as u64, Ordering::Relaxed);
                let lo = (round * cap).min(data.len());
                let hi = ((round + 1) * cap).min(data.len());
                self.write_slot(header + j * cap, &data[lo..hi]);
            }
            self.round_sync(&state, tag, round)?;
            // Every rank scans every header so that all agree on the number of rounds.
            let mut rounds = 1;
            for (i, part) in out.iter_mut().enumerate() {
                for j in 0..n {
                    let len = self.slot_word(i, j).load(Ordering::Relaxed) as usize;
                    rounds = rounds.max(len.div_ceil(cap));
                    if j == self.rank {
                        let lo = (round * cap).min(len);
                        let hi = ((round + 1) * cap).min(len);
                        self.read_slot(i, header + self.rank * cap, part, hi - lo);
                    }
                }
            }
            self.sync(&state, tag)?;
            round += 1;
            if round >= rounds {
                return Ok(out);
            }
        }
    }

    /// Every process publishes where its send blocks are (pid, base address, and per
    /// destination displacement and count) and pulls its own block from each peer with one
    /// `process_vm_readv`, straight into `recv`; a last barrier keeps the send buffers
    /// untouched until every process has read. One copy per block, where the slot exchange
    /// of `alltoallv` makes three.
    fn alltoallv_into(
        &self,
        call: Call,
        send: &[u8],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let n = self.size;
        let me = self.rank;
        one_entry_per_process(n, &[send_counts, send_displs, recv_counts, recv_displs])?;
        // Over the hub, peers may be on other hosts: no cross-memory attach.
        if 8 * (2 + 2 * n) > self.payload_size() || self.hub.is_some() {
            return alltoallv_into_by_copies(
                self,
                call,
                send,
                (send_counts, send_displs),
                recv,
                (recv_counts, recv_displs),
            );
        }
        let mut state = self.lock();
        let tag = self.enter(&mut state, call);
        // Relaxed: published by the barrier's release increments. A process whose send
        // blocks leave its buffer publishes none (counts u64::MAX): its peers fail.
        let valid = blocks_inside(send_counts, send_displs, send.len());
        self.slot_word(me, 0)
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        self.slot_word(me, 1)
            .store(send.as_ptr() as u64, Ordering::Relaxed);
        for j in 0..n {
            self.slot_word(me, 2 + 2 * j)
                .store(send_displs[j] as u64, Ordering::Relaxed);
            let count = if valid {
                send_counts[j] as u64
            } else {
                u64::MAX
            };
            self.slot_word(me, 3 + 2 * j)
                .store(count, Ordering::Relaxed);
        }
        self.round_sync(&state, tag, 0)?;
        let mut outcome = if blocks_inside(recv_counts, recv_displs, recv.len()) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(
                "alltoallv: a receive block leaves the buffer".into(),
            ))
        };
        for j in 0..n {
            if outcome.is_err() {
                break;
            }
            // Relaxed: ordered by the barrier's acquire.
            let word = |i: usize| self.slot_word(j, i).load(Ordering::Relaxed);
            let (displ, count) = (word(2 + 2 * me) as usize, word(3 + 2 * me));
            if count != recv_counts[j] as u64 {
                outcome = Err(Error::InvalidArgument(format!(
                    "alltoallv: rank {me} expects {} bytes from rank {j}, which sends {}",
                    recv_counts[j], count as i64
                )));
                break;
            }
            let dst = &mut recv[recv_displs[j]..recv_displs[j] + recv_counts[j]];
            outcome = if j == me {
                dst.copy_from_slice(&send[displ..displ + dst.len()]);
                Ok(())
            } else {
                cma::read(word(0) as i32, word(1) as usize + displ, dst)
            };
        }
        // The senders' buffers stay untouched until every process has read.
        self.sync(&state, tag)?;
        outcome
    }

    fn bcast(&self, call: Call, root: usize, data: &mut Vec<u8>) -> Result<()> {
        if root >= self.size {
            return Err(Error::InvalidRank {
                rank: root,
                size: self.size,
            });
        }
        if self.hub.is_some() {
            let mine: &[u8] = if self.rank == root { data } else { &[] };
            let mut all = self.through_hub(call, false, &[mine])?;
            if self.rank != root {
                *data = std::mem::take(&mut all[root]);
            }
            return Ok(());
        }
        let mut state = self.lock();
        let tag = self.enter(&mut state, call);
        let chunk = self.payload_size() - 8;
        let mut received = Vec::new();
        let mut round = 0usize;
        loop {
            if self.rank == root {
                let lo = (round * chunk).min(data.len());
                let hi = ((round + 1) * chunk).min(data.len());
                self.slot_word(root, 0)
                    .store(data.len() as u64, Ordering::Relaxed);
                self.write_slot(8, &data[lo..hi]);
            }
            self.round_sync(&state, tag, round)?;
            let len = self.slot_word(root, 0).load(Ordering::Relaxed) as usize;
            if self.rank != root {
                let lo = (round * chunk).min(len);
                let hi = ((round + 1) * chunk).min(len);
                self.read_slot(root, 8, &mut received, hi - lo);
            }
            self.sync(&state, tag)?;
            round += 1;
            if round >= len.div_ceil(chunk).max(1) {
                break;
            }
        }
        if self.rank != root {
            *data = received;
        }
        Ok(())
    }

    fn split(&self, color: Option<u32>, key: usize) -> Result<Option<Arc<dyn Bootstrap>>> {
        // Who goes where: every process learns every (color, key).
        let mine = [color.map_or(u64::MAX, u64::from), key as u64];
        let all = self.allgatherv(Call::Split, bytemuck::cast_slice(&mine))?;
        let mut colors = Vec::with_capacity(self.size);
        let mut keys = Vec::with_capacity(self.size);
        for part in &all {
            let w: Vec<u64> = bytemuck::pod_collect_to_vec(part);
            colors.push((w[0] != u64::MAX).then_some(w[0] as u32));
            keys.push(w[1] as usize);
        }
        let members = crate::bootstrap::split_members(&colors, &keys, self.rank);
        if let Some(link) = &self.hub {
            // Every member made the same calls here: the count names this split.
            let seq = self.lock().calls;
            return members
                .map(|m| {
                    let me = m.iter().position(|&r| r == self.rank).expect("member");
                    let comm = hub::child_comm(self.comm_id, seq, color.expect("member"));
                    let link = hub::Link::connect(link.addr(), comm, me, m.len())?;
                    Ok(Arc::new(LocalBootstrap {
                        seg: Arc::clone(&self.seg),
                        layout: self.layout,
                        rank: me,
                        size: m.len(),
                        job: self.job.clone(),
                        state: Mutex::new(Collectives {
                            barrier: None,
                            calls: 0,
                        }),
                        ancestors: self.ancestors.clone(),
                        watch: self.watch.subgroup(&m, me, channel_id(comm)),
                        heap: Arc::default(),
                        nodes: Arc::new(m.iter().map(|&r| self.nodes[r]).collect()),
                        hub: Some(link),
                        comm_id: comm,
                        on_this_machine: self.on_this_machine,
                    }) as Arc<dyn Bootstrap>)
                })
                .transpose();
        }
        // Each group's first member creates the group's boot segment and publishes its name.
        let leader_of = |m: &Vec<usize>| m[0] == self.rank;
        let created = match &members {
            Some(m) if leader_of(m) => Some(BootSegment::create(&self.job, m.len())),
            _ => None,
        };
        let name = match &created {
            Some(Ok(seg)) => seg.name().as_bytes().to_vec(),
            _ => Vec::new(),
        };
        let names = self.allgatherv(Call::Split, &name)?;
        let result = match &members {
            None => Ok(None),
            Some(m) => {
                let leader_name = std::str::from_utf8(&names[m[0]])
                    .map_err(|_| Error::Bootstrap("split: segment name is not UTF-8".into()));
                leader_name.and_then(|n| {
                    if n.is_empty() {
                        return Err(Error::PeerFailed { call: "split" });
                    }
                    let me = m.iter().position(|&r| r == self.rank).expect("member");
                    let mut sub = LocalBootstrap::connect(&self.job, n, me, m.len())?;
                    sub.ancestors = self.ancestors.clone();
                    sub.ancestors.push(Arc::clone(&self.seg));
                    sub.watch = self.watch.subgroup(m, me, channel_id(sub.seg.tag()));
                    sub.nodes = Arc::new(m.iter().map(|&r| self.nodes[r]).collect());
                    Ok(Some(Arc::new(sub) as Arc<dyn Bootstrap>))
                })
            }
        };
        // Every member has mapped its group's segment: the names can go.
        let ok = self.agree_local(result.is_ok())?;
        drop(created);
        match result {
            Err(e) => Err(e),
            Ok(_) if !ok => Err(Error::PeerFailed { call: "split" }),
            Ok(r) => Ok(r),
        }
    }

    fn aborted(&self) -> bool {
        // Relaxed: a flag; see BootSegment::abort.
        std::iter::once(&self.seg)
            .chain(&self.ancestors)
            .any(|s| word(s, OFF_ABORT).load(Ordering::Relaxed) != 0)
    }

    fn report_requested(&self) -> bool {
        // Relaxed: as in `aborted`.
        std::iter::once(&self.seg)
            .chain(&self.ancestors)
            .any(|s| word(s, OFF_ABORT).load(Ordering::Relaxed) == ABORT_REPORTING)
    }

    fn watch(&self) -> Option<&PeerWatch> {
        Some(&self.watch)
    }
}

impl LocalBootstrap {
    /// A collective through the hub: `personalised`, `blocks[j]` goes to member `j`;
    /// otherwise the one block goes to everyone. Returns the blocks addressed to this process
    /// by source. While it waits it watches the abort flag and the node's roster (a peer on
    /// this node blocked in another collective of ours is a deadlock, as over the segment).
    fn through_hub(
        &self,
        call: Call,
        personalised: bool,
        blocks: &[&[u8]],
    ) -> Result<Vec<Vec<u8>>> {
        let link = self.hub.as_ref().expect("a communicator of the hub");
        let mut state = self.lock();
        let tag = self.enter(&mut state, call);
        let mut vigil = self.watch.vigil(tag);
        // The wait of every collective: deferred epochs, requests handed to this process and
        // the network advance while it waits, and it backs off to sleeping.
        let mut progress = Backoff::new();
        let mut hang = crate::diag::HangClock::new();
        let describe = || {
            format!(
                "{} (collective #{} of {} across nodes; this process is rank {} of {}) waits \
                 for the other members, through the job's hub",
                call.mpi_name(),
                tag.seq,
                comm_name(self.comm_id),
                self.rank,
                self.size
            )
        };
        let mut idle = || {
            progress.snooze();
            if self.aborted() {
                if self.report_requested() {
                    hang.timed_out(describe);
                }
                return Err(Error::JobAborted);
            }
            hang.tick(describe);
            vigil.check(|_| None)
        };
        let outcome = link.exchange(tag.seq, tag.pack(), personalised, blocks, &mut idle);
        let check_tags = |tags: &[u64]| -> Result<()> {
            for (r, &t) in tags.iter().enumerate() {
                tag.check(r, t)?;
            }
            Ok(())
        };
        match outcome {
            Ok(Outcome::Done { tags, blocks }) => check_tags(&tags).map(|()| blocks),
            Ok(Outcome::Mismatch { tags }) => {
                check_tags(&tags)?;
                Err(Error::Bootstrap(format!(
                    "{}: the processes' requests differ in shape",
                    call.name()
                )))
            }
            Ok(Outcome::Left(rank)) => Err(Error::PeerExited {
                call: call.name(),
                rank,
            }),
            Err(_) if self.aborted() => Err(Error::JobAborted),
            Err(e) => Err(e),
        }
    }

    /// Collective vote over this bootstrap (no Comm at hand here).
    fn agree_local(&self, ok: bool) -> Result<bool> {
        let all = self.allgatherv(Call::Split, &[u8::from(ok)])?;
        Ok(all.iter().all(|v| v == &[1]))
    }
}

/// 64 bits from a job id (FNV-1a): the seed of the world's channel id.
fn job_seed(job: &str) -> u64 {
    job.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Threads stand in for ranks: the collectives only use shared memory and atomics.
    fn with_threads(n: usize, body: impl Fn(LocalBootstrap) + Send + Sync + 'static) {
        let job = random_job_id();
        let boot = BootSegment::create(&job, n).unwrap();
        let name = boot.name().to_owned();
        let body = Arc::new(body);
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (job, name, body) = (job.clone(), name.clone(), Arc::clone(&body));
                std::thread::spawn(move || {
                    body(LocalBootstrap::connect(&job, &name, r, n).unwrap())
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(boot.all_attached());
    }

    /// A boot segment cut short or with a corrupt rank count is an error at connect, never
    /// a panic (before: an index assertion fired on a 10-byte segment, and a huge count
    /// overflowed the layout arithmetic).
    #[test]
    fn damaged_boot_segments_are_errors() {
        let job = random_job_id();
        let boot = BootSegment::create(&job, 2).unwrap();
        let path = format!("{}{}", crate::shm::segment::SHM_DIR, boot.name());
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(10).unwrap();
        let short = LocalBootstrap::connect(&job, boot.name(), 0, 2);
        assert!(matches!(short, Err(Error::Bootstrap(ref m)) if m.contains("too short")));
        // A whole header whose rank count is absurd.
        let job = random_job_id();
        let boot = BootSegment::create(&job, 2).unwrap();
        word(&boot.seg, OFF_HEADER + 16).store(u64::MAX, Ordering::Relaxed);
        let huge = LocalBootstrap::connect(&job, boot.name(), 0, usize::MAX);
        assert!(matches!(huge, Err(Error::Bootstrap(_))), "{huge:?}");
        assert!(BootLayout::new(usize::MAX / 1024).is_err());
        assert!(BootSegment::create(&job, usize::MAX).is_err());
    }

    #[test]
    fn allgatherv_of_varying_and_large_sizes() {
        with_threads(3, |b| {
            let r = b.rank();
            // Rank 2 sends more than a slot, forcing several rounds.
            let len = if r == 2 { 200_000 } else { r * 10 };
            let mine: Vec<u8> = (0..len).map(|i| (i * 7 + r) as u8).collect();
            let all = b.allgatherv(Call::Allgather, &mine).unwrap();
            for (src, part) in all.iter().enumerate() {
                let len = if src == 2 { 200_000 } else { src * 10 };
                let want: Vec<u8> = (0..len).map(|i| (i * 7 + src) as u8).collect();
                assert_eq!(part, &want);
            }
        });
    }

    #[test]
    fn alltoallv_personalised_multi_round() {
        with_threads(4, |b| {
            let me = b.rank();
            let bufs: Vec<Vec<u8>> = (0..4)
                .map(|j| {
                    let len = if me == 1 && j == 3 { 50_000 } else { me + j };
                    (0..len).map(|i| (i + 31 * me + j) as u8).collect()
                })
                .collect();
            let refs: Vec<&[u8]> = bufs.iter().map(|v| v.as_slice()).collect();
            let got = b.alltoallv(Call::Alltoall, &refs).unwrap();
            for (i, part) in got.iter().enumerate() {
                let len = if i == 1 && me == 3 { 50_000 } else { i + me };
                let want: Vec<u8> = (0..len).map(|k| (k + 31 * i + me) as u8).collect();
                assert_eq!(part, &want, "from {i} to {me}");
            }
        });
    }

    #[test]
    fn bcast_from_each_root() {
        with_threads(3, |b| {
            for root in 0..3 {
                let mut data = if b.rank() == root {
                    vec![root as u8; 70_000 + root]
                } else {
                    vec![9; 3]
                };
                b.bcast(Call::Bcast, root, &mut data).unwrap();
                assert_eq!(data, vec![root as u8; 70_000 + root]);
            }
        });
    }

    /// Different calls meet in one agreement and fail at every rank, whatever their shape
    /// (a barrier against a multi-round allgather, a bcast against an agreement), and the
    /// communicator stays usable afterwards.
    #[test]
    fn mismatched_calls_fail_everywhere() {
        with_threads(3, |b| {
            let me = b.rank();
            let r = if me == 1 {
                b.allgatherv(Call::Free, &vec![7u8; 200_000]).map(|_| ())
            } else {
                b.barrier(Call::Barrier)
            };
            assert!(
                matches!(r, Err(Error::CollectiveMismatch { rank: 1, .. }) if me != 1)
                    || matches!(r, Err(Error::CollectiveMismatch { .. }) if me == 1),
                "rank {me}: {r:?}"
            );
            let mut v = vec![me as u8; 5];
            let r = if me == 0 {
                b.bcast(Call::Bcast, 0, &mut v)
            } else {
                b.allgatherv(Call::SetInfo, &v).map(|_| ())
            };
            assert!(matches!(r, Err(Error::CollectiveMismatch { .. })), "{r:?}");
            // Same calls agree again, and the payloads are right.
            let all = b.allgatherv(Call::Allgather, &[me as u8]).unwrap();
            assert_eq!(all, vec![vec![0], vec![1], vec![2]]);
        });
    }

    /// A rank that exited (the launcher marked it) without entering a collective fails the
    /// waiters with its rank, instead of leaving them waiting forever.
    #[test]
    fn a_peer_that_exited_fails_the_waiters() {
        let job = random_job_id();
        let boot = BootSegment::create(&job, 3).unwrap();
        let b0 = LocalBootstrap::connect(&job, boot.name(), 0, 3).unwrap();
        let b1 = LocalBootstrap::connect(&job, boot.name(), 1, 3).unwrap();
        let _b2 = LocalBootstrap::connect(&job, boot.name(), 2, 3).unwrap();
        boot.mark_exited(2);
        let t = std::thread::spawn(move || b1.barrier(Call::Barrier));
        let r0 = b0.barrier(Call::Barrier);
        assert!(
            matches!(
                r0,
                Err(Error::PeerExited {
                    rank: 2,
                    call: "barrier"
                })
            ),
            "{r0:?}"
        );
        let r1 = t.join().unwrap();
        assert!(
            matches!(r1, Err(Error::PeerExited { rank: 2, .. })),
            "{r1:?}"
        );
    }

    #[test]
    fn abort_flag_breaks_a_barrier() {
        let job = random_job_id();
        let boot = BootSegment::create(&job, 2).unwrap();
        let b = LocalBootstrap::connect(&job, boot.name(), 0, 2).unwrap();
        boot.abort();
        assert!(matches!(b.barrier(Call::Barrier), Err(Error::JobAborted)));
    }

    #[test]
    fn split_into_groups() {
        with_threads(5, |b| {
            let me = b.rank();
            // Odd and even ranks, the evens in reverse order; rank 4 opts out.
            let color = (me != 4).then_some((me % 2) as u32);
            let sub = b.split(color, 10 - me).unwrap();
            match (me, &sub) {
                (4, None) => {}
                (_, Some(s)) => {
                    // {0, 2} and {1, 3}: two members in each group.
                    assert_eq!(s.size(), 2);
                    let expect_rank = match me {
                        0 => 1,
                        2 => 0,
                        1 => 1,
                        3 => 0,
                        _ => unreachable!(),
                    };
                    assert_eq!(s.rank(), expect_rank);
                    let all = s.allgatherv(Call::Allgather, &[me as u8]).unwrap();
                    assert_eq!(all.len(), 2);
                    assert!(all.iter().all(|v| v[0] as usize % 2 == me % 2));
                    s.barrier(Call::Barrier).unwrap();
                }
                other => panic!("rank {me}: {other:?}"),
            }
        });
    }

    #[test]
    fn singleton_collectives() {
        let b = LocalBootstrap::singleton().unwrap();
        b.barrier(Call::Barrier).unwrap();
        assert_eq!(
            b.allgatherv(Call::Allgather, b"abc").unwrap(),
            vec![b"abc".to_vec()]
        );
        let mut v = b"xyz".to_vec();
        b.bcast(Call::Bcast, 0, &mut v).unwrap();
        assert_eq!(v, b"xyz");
        assert!(crate::shm::segment::job_segments(b.job_id()).is_empty());
    }
}
