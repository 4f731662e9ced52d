//! The `mpi` bootstrap: processes started by a host `mpiexec`/`srun` find each other through
//! the host MPI library, reached through the [`HostMpi`] trait: the `mpi` crate's bindings
//! (feature `mpi`, `MpiBootstrap::new`) or the functions the MPI C ABI library resolves in
//! the process at run time ([`MpiBootstrap::over`]).
//!
//! Only the out-of-band collectives go through MPI; window memory, synchronization words and
//! data still move through shared memory and cross-memory attach between the processes of a
//! node, exactly as under `osrun`.

use std::fmt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::backoff::Backoff;
use crate::bootstrap::board::{EntryBoard, ENTRY_WORDS};
use crate::bootstrap::host_mpi::{HostComm, HostMpi};
use crate::bootstrap::locality::Locality;
use crate::bootstrap::roster::{channel_id, PeerWatch, Roster};
use crate::bootstrap::{
    blocks_inside, one_entry_per_process, Bootstrap, Call, CallTag, ThreadLevel,
};
use crate::error::{Error, Result};
use crate::shm::heap::ControlHeap;
use crate::shm::segment::{random_job_id, random_u64, Segment, NAME_PREFIX};

/// The communicator and the number of collective calls made on it so far.
struct Channel {
    comm: HostComm,
    calls: u64,
}

/// A communicator of the host MPI with the functions that reach it.
#[derive(Clone, Copy)]
struct On<'a> {
    host: &'a dyn HostMpi,
    comm: HostComm,
}

impl On<'_> {
    fn rank(&self) -> Result<usize> {
        self.host.rank(self.comm)
    }

    fn size(&self) -> Result<usize> {
        self.host.size(self.comm)
    }

    /// Every process's `mine`, by rank.
    fn allgather<T: bytemuck::Pod>(&self, mine: &[T]) -> Result<Vec<T>> {
        let mut all = vec![T::zeroed(); mine.len() * self.size()?];
        self.host.allgather(
            self.comm,
            bytemuck::cast_slice(mine),
            bytemuck::cast_slice_mut(&mut all),
        )?;
        Ok(all)
    }

    /// `data` as the root has it, at every process.
    fn bcast<T: bytemuck::Pod>(&self, root: usize, data: &mut [T]) -> Result<()> {
        for chunk in bytemuck::cast_slice_mut::<T, u8>(data).chunks_mut(i32::MAX as usize) {
            self.host.bcast(self.comm, root, chunk)?;
        }
        Ok(())
    }
}

/// The host MPI of this process: set by the first bootstrap made over it (a process has one
/// MPI), for the exit handlers.
static HOST: OnceLock<Arc<dyn HostMpi>> = OnceLock::new();

/// A [`Bootstrap`] over a host-MPI communicator.
///
/// It owns a duplicate of the communicator it was made from, so its collectives never match
/// the application's own messages. With the feature `mpi` (the `mpi` crate's host):
#[cfg_attr(
    feature = "mpi",
    doc = r#"
```
# use mpi::traits::*;
let (mpi_universe, _) = mpi::initialize_with_threading(mpi::Threading::Serialized).unwrap();
let universe = onesided::init_mpi(&mpi_universe.world())?;
let win = onesided::Window::<f64>::allocate(universe.world(), 1024)?;
win.free()?;
# Ok::<(), onesided::Error>(())
```"#
)]
pub struct MpiBootstrap {
    /// The duplicated communicator. MPI handles are plain values that every thread may use
    /// as long as calls are serialized (MPI_THREAD_SERIALIZED), which the mutex ensures.
    /// Under MPI_THREAD_SINGLE/FUNNELED the application must create windows (and call every
    /// other collective of onesided) from the thread that initialized MPI.
    comm: Mutex<Channel>,
    host: Arc<dyn HostMpi>,
    rank: usize,
    size: usize,
    node_rank: usize,
    node_size: usize,
    /// Processes of the job on this machine (several virtual nodes may share it).
    machine_size: usize,
    /// The node of every rank (see [`Bootstrap::node_of`]).
    nodes: Vec<usize>,
    job: String,
    /// The members on this node in the node's roster (and this process's index there).
    watch: PeerWatch,
    /// Waits poll the host MPI without sleeping (see [`MpiBootstrap::attentive`]).
    attentive: bool,
    /// Control blocks of this communicator's windows.
    heap: Arc<ControlHeap>,
    /// Where collectives exchange their entries when every process shares this node
    /// (through the host MPI otherwise).
    board: Option<EntryBoard>,
}

// SAFETY: the communicator handle is only used under the mutex, so MPI sees serialized calls,
// which MPI allows from any thread at MPI_THREAD_SERIALIZED (what `init` requests) and from
// the initializing thread at lower levels (documented on the struct). Everything else in the
// struct is plain data.
unsafe impl Send for MpiBootstrap {}
// SAFETY: as for Send: shared access only reaches the handle through the mutex.
unsafe impl Sync for MpiBootstrap {}

impl fmt::Debug for MpiBootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiBootstrap")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("node_rank", &self.node_rank)
            .field("node_size", &self.node_size)
            .field("job", &self.job)
            .finish()
    }
}

/// Whether the process's host MPI was finalized (or never had a bootstrap made over it).
fn mpi_finalized() -> bool {
    HOST.get().is_none_or(|h| h.finalized())
}

/// Bytes of payload that travel with the tag.
const INLINE_BYTES: usize = (ENTRY_WORDS - 2) * 8;

/// What a collective's entry waits for every member to do (hang reports).
const ENTER: &str = "enter it";

/// The first `len` bytes of the payload one process's entry carried (from word 2 on).
fn inline_payload(entry: &[u64], len: usize) -> &[u8] {
    &bytemuck::cast_slice::<u64, u8>(&entry[2..])[..len]
}

fn count(len: usize, what: &str) -> Result<i32> {
    i32::try_from(len)
        .map_err(|_| Error::Bootstrap(format!("{what}: {len} bytes exceed MPI's int count")))
}

/// Displacements of consecutive blocks of `counts`.
fn displacements(counts: &[i32]) -> Result<Vec<i32>> {
    let mut at = 0i64;
    counts
        .iter()
        .map(|&c| {
            let d = count(at as usize, "bootstrap collective")?;
            at += i64::from(c);
            Ok(d)
        })
        .collect()
}

/// The job this process joined first (its id, its node's roster and its index there): a
/// bootstrap over another communicator of the same processes joins it too, as a split
/// does, instead of starting a job of its own (a roster segment, an exit handler and a
/// reaper process each — one per window an MPI program creates over a communicator of its
/// own).
static PROCESS_JOB: OnceLock<(String, Arc<Roster>, usize)> = OnceLock::new();

/// Bytes of a job id in the agreement of [`joined_job`] (ids are 32 hex digits).
const JOB_ID_BYTES: usize = 64;

/// Collective over `comm`: the job every member already belongs to, if they all belong to
/// the same one (every member decides alike from the same gathered ids).
fn joined_job(comm: On<'_>) -> Result<Option<(String, Arc<Roster>, usize)>> {
    let mine = PROCESS_JOB.get();
    let mut id = [0u8; JOB_ID_BYTES];
    if let Some((job, _, _)) = mine {
        let n = job.len().min(JOB_ID_BYTES);
        id[..n].copy_from_slice(&job.as_bytes()[..n]);
    }
    let all = comm.allgather(&id[..])?;
    let joined = id != [0u8; JOB_ID_BYTES] && all.chunks_exact(JOB_ID_BYTES).all(|c| c == id);
    Ok(if joined { mine.cloned() } else { None })
}

/// Splits a concatenation back into per-rank parts.
fn split_parts(buf: &[u8], counts: &[i32]) -> Vec<Vec<u8>> {
    let mut at = 0;
    counts
        .iter()
        .map(|&c| {
            let part = buf[at..at + c as usize].to_vec();
            at += c as usize;
            part
        })
        .collect()
}

impl MpiBootstrap {
    /// Collective over the host communicator `comm` of `host`: a bootstrap over a duplicate
    /// of it (what `MpiBootstrap::new` does with the `mpi` crate's host, feature `mpi`). The
    /// processes of each node are those whose `Locality` says they share memory (not the
    /// host's `MPI_COMM_TYPE_SHARED`: see `node_of_this_process`); rank 0 draws the job id
    /// that names the job's shared-memory segments.
    pub fn over(host: Arc<dyn HostMpi>, comm: HostComm) -> Result<MpiBootstrap> {
        if !host.active() {
            return Err(Error::Bootstrap(
                "the host MPI is not initialized (or already finalized)".into(),
            ));
        }
        let host = Arc::clone(HOST.get_or_init(|| host));
        let dup = host.dup(comm)?;
        Self::from_owned(host, dup, None)
    }

    /// The same bootstrap, whose waits keep calling into the host MPI (yielding the core
    /// between calls, never sleeping), as a process blocked inside an MPI collective would.
    /// For programs that also use the host MPI's own RMA: an implementation whose passive
    /// target needs the target's CPU (MPICH over UCX, for one) then progresses while this
    /// process waits in one of our collectives. The default backs off to sleeps instead,
    /// which costs the host MPI's RMA up to a sleep per round trip.
    pub fn attentive(mut self) -> MpiBootstrap {
        self.attentive = true;
        self
    }

    /// `parent`: the job's id, node roster and this process's index there, for a
    /// communicator split from another one (a new job otherwise).
    /// A bootstrap over `comm`, which it owns from now on (freed when it is dropped).
    fn from_owned(
        host: Arc<dyn HostMpi>,
        comm: HostComm,
        parent: Option<(String, Arc<Roster>, usize)>,
    ) -> Result<MpiBootstrap> {
        let on = On { host: &*host, comm };
        let (rank, size) = (on.rank()?, on.size()?);
        let parent = match parent {
            Some(p) => Some(p),
            None => joined_job(on)?,
        };
        let (node_comm, machine_size) = node_of_this_process(on)?;
        let node = On {
            host: &*host,
            comm: node_comm,
        };
        let (node_rank, node_size) = (node.rank()?, node.size()?);
        let job = match &parent {
            Some((j, _, _)) => j.clone(),
            None => {
                let mut id = if rank == 0 {
                    random_job_id().into_bytes()
                } else {
                    Vec::new()
                };
                let mut len = [id.len() as u64];
                on.bcast(0, &mut len)?;
                id.resize(len[0] as usize, 0);
                on.bcast(0, &mut id[..])?;
                String::from_utf8(id).map_err(|_| Error::Bootstrap("job id is not UTF-8".into()))?
            }
        };
        let (roster, my_index) = match parent {
            Some((_, roster, index)) => (roster, index),
            None => {
                // Segments of a job whose processes all ended must not outlive it.
                let pids = node.allgather(&[std::process::id()])?;
                if node_rank == 0 {
                    start_reaper(&job, &pids)?;
                }
                let roster = Arc::new(node_roster(node, &job)?);
                roster.set_rank(node_rank, rank);
                mark_exit_at_exit(Arc::clone(&roster), node_rank, rank)?;
                let _ = PROCESS_JOB.set((job.clone(), Arc::clone(&roster), node_rank));
                (roster, node_rank)
            }
        };
        // Which members share this node, and where they are in its roster.
        let indices = node.allgather(&[rank as u64, my_index as u64][..])?;
        let mut members = vec![None; size];
        for pair in indices.chunks_exact(2) {
            members[pair[0] as usize] = Some(pair[1] as usize);
        }
        // Every rank's node, named by its lowest rank, then numbered densely in that order.
        let lowest = indices
            .chunks_exact(2)
            .map(|p| p[0])
            .min()
            .unwrap_or(rank as u64);
        let leaders = on.allgather(&[lowest])?;
        let nodes = node_numbers(&leaders);
        let mut channel = [random_u64()];
        on.bcast(0, &mut channel)?;
        let watch = PeerWatch::new(roster, members, rank, channel_id(channel[0]));
        host.free(node_comm);
        let board = if node_size == size && size > 1 {
            entry_board(on, &job)?
        } else {
            None
        };
        Ok(MpiBootstrap {
            comm: Mutex::new(Channel { comm, calls: 0 }),
            host,
            rank,
            size,
            node_rank,
            node_size,
            machine_size,
            nodes,
            job,
            watch,
            attentive: false,
            heap: Arc::default(),
            board,
        })
    }

    fn channel(&self) -> MutexGuard<'_, Channel> {
        self.comm.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enters the collective `call`: every process contributes its tag to a nonblocking
    /// allgather, polled so that the wait watches the peers (an exited one, or one blocked
    /// in another collective of ours, is an error instead of a hang); a mismatch is an error
    /// at every process. Each process also contributes one `word` (a length the call needs
    /// to exchange anyway), returned by rank. The communicator is returned for the call's
    /// own transfer, which cannot block for long: every process has entered it.
    fn enter(&self, call: Call, word: u64) -> Result<(MutexGuard<'_, Channel>, Vec<u64>)> {
        self.enter_inline(call, word, &[])
            .map(|(ch, words, _)| (ch, words))
    }

    /// [`enter`](Self::enter), carrying up to [`INLINE_BYTES`] of `inline` payload with the
    /// tag (a small collective then needs no second MPI call); returns every process's
    /// payload slot too (`ENTRY_WORDS` per process, the payload from word 2 on).
    #[allow(clippy::type_complexity)]
    fn enter_inline(
        &self,
        call: Call,
        word: u64,
        inline: &[u8],
    ) -> Result<(MutexGuard<'_, Channel>, Vec<u64>, Box<[u64]>)> {
        let mut ch = self.channel();
        let tag = CallTag {
            call,
            seq: ch.calls,
        };
        ch.calls += 1;
        self.watch.note_entered(tag);
        // Heap buffers: if the wait fails they are leaked with the request (a collective
        // request cannot be cancelled, and MPI may still write them).
        let mut send = Box::new([0u64; ENTRY_WORDS]);
        send[0] = tag.pack();
        send[1] = word;
        let payload: &mut [u8] = bytemuck::cast_slice_mut(&mut send[2..]);
        let n = inline.len().min(INLINE_BYTES);
        payload[..n].copy_from_slice(&inline[..n]);
        if let Some(board) = &self.board {
            let recv = self.exchange_on_board(board, &ch, tag, &send)?;
            return Self::entered(ch, tag, recv);
        }
        let mut recv = vec![0u64; ENTRY_WORDS * self.size].into_boxed_slice();
        // SAFETY: both buffers hold what the sizes say (ENTRY_WORDS u64 sent, as many per
        // process received) and stay allocated until the request completes (or are leaked),
        // and calls on this communicator are serialized by the mutex we hold.
        let mut request = unsafe {
            self.host.iallgather(
                ch.comm,
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                ENTRY_WORDS * 8,
            )
        }?;
        if let Err(e) = self.wait_for(tag, ENTER, Backoff::new(), || self.host.test(&mut request)) {
            std::mem::forget(send);
            std::mem::forget(recv);
            return Err(e);
        }
        Self::entered(ch, tag, recv)
    }

    /// What a wait of the collective `tag` waits for, in a hang report's words.
    fn describe_entry(&self, tag: CallTag, waits_for: &str) -> String {
        format!(
            "{} (collective #{} of a communicator of the host MPI; this process is rank {} of \
             {}) waits for every member to {waits_for}",
            tag.call.mpi_name(),
            tag.seq,
            self.rank(),
            self.size()
        )
    }

    /// The end of [`enter_inline`](Self::enter_inline): every process's entry in `recv`.
    #[allow(clippy::type_complexity)]
    fn entered(
        ch: MutexGuard<'_, Channel>,
        tag: CallTag,
        recv: Box<[u64]>,
    ) -> Result<(MutexGuard<'_, Channel>, Vec<u64>, Box<[u64]>)> {
        for (r, entry) in recv.chunks_exact(ENTRY_WORDS).enumerate() {
            tag.check(r, entry[0])?;
        }
        let words = recv.chunks_exact(ENTRY_WORDS).map(|e| e[1]).collect();
        Ok((ch, words, recv))
    }

    /// The entry exchange of `enter_inline` through shared memory. Its wait watches the
    /// peers like the MPI one and keeps the host MPI progressing as the MPI one does: a peer
    /// may need this process's progress for the host's own RMA (MPICH's passive target,
    /// for one) before it can arrive.
    fn exchange_on_board(
        &self,
        board: &EntryBoard,
        ch: &Channel,
        tag: CallTag,
        send: &[u64; ENTRY_WORDS],
    ) -> Result<Box<[u64]>> {
        let mut wait = board.post(tag, send);
        self.wait_for(tag, ENTER, Backoff::new(), || {
            if board.poll(&mut wait) {
                return Ok(true);
            }
            // Calls on the communicator are serialized by the channel mutex the caller holds;
            // the probe matches nothing (no message is ever sent on it).
            self.host.progress(ch.comm);
            Ok(false)
        })?;
        Ok(board.read(tag.seq))
    }

    /// Called between the entry of a collective and a transfer of the host MPI, which
    /// blocks without serving anything: returns once every process has left the entry's
    /// wait. That wait drives the pending synchronizations of this process's windows, and
    /// a poll of one can block until a peer makes progress (a nonblocking fence flushing
    /// its puts to another node, without a progress thread); a peer already inside the
    /// host's transfer would make none, and the job would hang. This wait serves the
    /// network endpoint and request rings but drives nothing pending, so no process
    /// blocks in it, and every process reaches the transfer.
    fn leave_entries(&self, ch: &Channel, call: Call) -> Result<()> {
        // The tag `enter` gave the call.
        let tag = CallTag {
            call,
            seq: ch.calls.wrapping_sub(1),
        };
        let mut request = self.host.ibarrier(ch.comm)?;
        self.wait_for(tag, "leave its entry", Backoff::serving_only(), || {
            self.host.test(&mut request)
        })
    }

    /// Polls `done` until it holds, as the waits of the collective `tag` do: watching the
    /// peers (an exited one is an error, not a hang), reporting a long wait (for every
    /// member to do what `waits_for` says), and pausing with `backoff` between two polls.
    fn wait_for(
        &self,
        tag: CallTag,
        waits_for: &str,
        mut backoff: Backoff,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let mut vigil = self.watch.vigil(tag);
        let mut hang = crate::diag::HangClock::new();
        loop {
            hang.tick(|| self.describe_entry(tag, waits_for));
            if done()? {
                return Ok(());
            }
            vigil.check(|_| None)?;
            if self.attentive {
                backoff.attentive_pause();
            } else {
                backoff.host_snooze();
            }
        }
    }
}

/// Collective: a segment of `bytes` named for `job` and `tag`, created by rank 0 of `comm`
/// (whose processes share one node) and opened by the others from the name it broadcasts.
/// `PeerFailed` where rank 0 could not create it; each process's own result otherwise.
fn shared_segment(comm: On<'_>, job: &str, tag: &str, bytes: usize) -> Result<Segment> {
    let mut name = Vec::new();
    let created = (comm.rank()? == 0).then(|| Segment::create(job, tag, bytes));
    if let Some(Ok(seg)) = &created {
        name = seg.name().as_bytes().to_vec();
    }
    let mut len = [name.len() as u64];
    comm.bcast(0, &mut len)?;
    name.resize(len[0] as usize, 0);
    comm.bcast(0, &mut name[..])?;
    match created {
        Some(seg) => seg,
        None if name.is_empty() => Err(Error::PeerFailed { call: "init" }),
        None => std::str::from_utf8(&name)
            .map_err(|_| Error::Bootstrap(format!("segment name {tag} is not UTF-8")))
            .and_then(Segment::open),
    }
}

/// Collective: true at every process when `ok` is true at every process of `comm`.
fn all_true(comm: On<'_>, ok: bool) -> Result<bool> {
    Ok(comm.allgather(&[u8::from(ok)])?.iter().all(|&b| b == 1))
}

/// Collective over a communicator whose processes all share this node: its entry board,
/// made by rank 0 and mapped by everyone; `None` everywhere (collectives then exchange their
/// entries through the host MPI) when any process could not map it.
fn entry_board(comm: On<'_>, job: &str) -> Result<Option<EntryBoard>> {
    let n = comm.size()?;
    let me = comm.rank()?;
    let bytes = EntryBoard::bytes(n).ok_or_else(|| Error::Bootstrap("board too large".into()))?;
    let board = shared_segment(comm, job, "B", bytes).and_then(|seg| EntryBoard::new(seg, n, me));
    let all_ok = all_true(comm, board.is_ok())?;
    // Everyone mapped it (or gave up): the name is no longer needed.
    if let Ok(b) = &board {
        b.unlink();
    }
    Ok(board.ok().filter(|_| all_ok))
}

/// The roster of this node's processes of a new job: made by the node's first process,
/// opened by the others.
fn node_roster(node: On<'_>, job: &str) -> Result<Roster> {
    let n = node.size()?;
    let bytes = Roster::bytes(n).ok_or_else(|| Error::Bootstrap("node too large".into()))?;
    let seg = shared_segment(node, job, "R", bytes);
    let all_ok = all_true(node, seg.is_ok())?;
    let seg = seg?;
    if !all_ok {
        return Err(Error::PeerFailed { call: "init" });
    }
    // Everyone mapped it; the reaper removes the job's names anyway.
    seg.unlink();
    Roster::new(Arc::new(seg), 0, n)
}

/// The node roster, this process's index there and its job rank, for the exit handler.
static EXIT_MARK: OnceLock<(Arc<Roster>, usize, usize)> = OnceLock::new();

/// How long a cleanly exiting process looks for peers it would strand in a collective.
const STRANDED_PATIENCE: std::time::Duration = std::time::Duration::from_millis(100);

/// Marks this process in `roster` when it exits with status 0, so that peers waiting for it
/// in a collective it never entered fail instead of waiting forever. When a peer already
/// waits for it, the exiting process ends the job itself with `MPI_Abort`, naming itself:
/// finalizing first and leaving the peers to abort races `MPI_Finalize` against
/// `MPI_Abort`, which sometimes hangs Open MPI 4.1's mpirun (a 15-line C program shows it).
/// (A failing exit aborts the whole job: see `finalize_at_exit`.)
fn mark_exit_at_exit(roster: Arc<Roster>, index: usize, rank: usize) -> Result<()> {
    extern "C" fn mark(status: libc::c_int, _arg: *mut libc::c_void) {
        let (0, Some((roster, index, rank))) = (status, EXIT_MARK.get()) else {
            return;
        };
        roster.mark_exited(*index);
        if mpi_finalized() {
            return;
        }
        if let Some((peer, call)) = roster.stranded_peer(*index, STRANDED_PATIENCE) {
            crate::diag::say(format_args!(
                "onesided: rank {rank} exited while rank {peer} waits for it in `{call}`; \
                 aborting the job"
            ));
            // Launchers forward output asynchronously and stop forwarding when they kill
            // the job: give the message time to leave.
            std::thread::sleep(std::time::Duration::from_millis(100));
            // If MPI_Abort never returns nor ends the job, SIGALRM ends this process.
            // SAFETY: alarm(2) only arms a timer; SIGALRM has its default action.
            unsafe { libc::alarm(10) };
            if let Some(host) = HOST.get() {
                host.abort(1);
            }
        }
    }
    if EXIT_MARK.set((roster, index, rank)).is_ok() {
        // SAFETY: registers a plain extern "C" function without captured state. Handlers
        // run in reverse order of registration: this one before `finalize_at_exit`.
        if unsafe { on_exit(mark, std::ptr::null_mut()) } != 0 {
            return Err(Error::Bootstrap("on_exit failed".into()));
        }
    }
    Ok(())
}

impl Drop for MpiBootstrap {
    fn drop(&mut self) {
        // Freeing a communicator after MPI_Finalize is erroneous (and aborts in some MPIs):
        // a bootstrap that outlives MPI leaks its handle instead.
        if !self.host.finalized() {
            let ch = self.comm.get_mut().unwrap_or_else(|p| p.into_inner());
            self.host.free(ch.comm);
        }
    }
}

impl Bootstrap for MpiBootstrap {
    fn control_heap(&self) -> Option<&Arc<ControlHeap>> {
        Some(&self.heap)
    }

    fn thread_level(&self) -> ThreadLevel {
        self.host.thread_level()
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn node_rank(&self) -> usize {
        self.node_rank
    }

    fn processes_on_this_machine(&self) -> usize {
        self.machine_size
    }

    fn node_size(&self) -> usize {
        self.node_size
    }

    fn node_of(&self, rank: usize) -> usize {
        self.nodes[rank]
    }

    fn job_id(&self) -> &str {
        &self.job
    }

    fn barrier(&self, call: Call) -> Result<()> {
        // The tag exchange completes only once every process has entered: a barrier.
        self.enter(call, 0).map(drop)
    }

    fn allgatherv(&self, call: Call, send: &[u8]) -> Result<Vec<Vec<u8>>> {
        count(send.len(), "allgatherv")?;
        // The lengths travel with the tags, and so do contributions that fit: when every
        // process's does, the exchange is done (every process sees every length, so all
        // take the same branch).
        let (ch, lens, entries) = self.enter_inline(call, send.len() as u64, send)?;
        if lens.iter().all(|&l| l as usize <= INLINE_BYTES) {
            return Ok(entries
                .chunks_exact(ENTRY_WORDS)
                .zip(&lens)
                .map(|(e, &l)| inline_payload(e, l as usize).to_vec())
                .collect());
        }
        let counts = lens
            .iter()
            .map(|&l| count(l as usize, "allgatherv"))
            .collect::<Result<Vec<i32>>>()?;
        let displs = displacements(&counts)?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut buf = vec![0u8; total];
        self.leave_entries(&ch, call)?;
        self.host
            .allgatherv(ch.comm, send, &mut buf, &counts, &displs)?;
        Ok(split_parts(&buf, &counts))
    }

    fn alltoallv(&self, call: Call, send: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        if send.len() != self.size {
            return Err(Error::InvalidArgument(format!(
                "alltoallv: {} parts for {} processes",
                send.len(),
                self.size
            )));
        }
        let (ch, _) = self.enter(call, 0)?;
        self.leave_entries(&ch, call)?;
        let send_counts = send
            .iter()
            .map(|p| count(p.len(), "alltoallv"))
            .collect::<Result<Vec<i32>>>()?;
        // Each process's count for every other one, 4 bytes each way.
        let fours = vec![4i32; self.size];
        let at: Vec<i32> = (0..self.size as i32).map(|r| 4 * r).collect();
        let mut recv_counts = vec![0i32; self.size];
        self.host.alltoallv(
            ch.comm,
            bytemuck::cast_slice(&send_counts),
            &fours,
            &at,
            bytemuck::cast_slice_mut(&mut recv_counts),
            &fours,
            &at,
        )?;
        let send_displs = displacements(&send_counts)?;
        let recv_displs = displacements(&recv_counts)?;
        let flat: Vec<u8> = send.concat();
        let mut buf = vec![0u8; recv_counts.iter().map(|&c| c.max(0) as usize).sum()];
        self.host.alltoallv(
            ch.comm,
            &flat,
            &send_counts,
            &send_displs,
            &mut buf,
            &recv_counts,
            &recv_displs,
        )?;
        Ok(split_parts(&buf, &recv_counts))
    }

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
        one_entry_per_process(
            self.size,
            &[send_counts, send_displs, recv_counts, recv_displs],
        )?;
        let ints = |a: &[usize]| a.iter().map(|&v| i32::try_from(v).ok()).collect();
        #[allow(clippy::type_complexity)]
        let arrays: Option<Vec<Vec<i32>>> = [send_counts, send_displs, recv_counts, recv_displs]
            .iter()
            .map(|a| ints(a))
            .collect();
        let inside = blocks_inside(send_counts, send_displs, send.len())
            && blocks_inside(recv_counts, recv_displs, recv.len());
        // Every process learns whether all have blocks inside their buffers that MPI's ints
        // can describe, so that all fail together instead of some entering the exchange.
        let (ch, fits) = self.enter(call, u64::from(arrays.is_some() && inside))?;
        let (Some(a), true) = (arrays, fits.iter().all(|&f| f == 1)) else {
            return Err(Error::InvalidArgument(
                "alltoallv: a block leaves its buffer or exceeds MPI's int range".into(),
            ));
        };
        // A receive count that differs from its sender's is MPI's truncation error, never a
        // write outside the block. Every process has entered the call and left its entry,
        // so it cannot block for long; the mutex we hold serializes calls on the
        // communicator.
        self.leave_entries(&ch, call)?;
        self.host
            .alltoallv(ch.comm, send, &a[0], &a[1], recv, &a[2], &a[3])
    }

    fn bcast(&self, call: Call, root: usize, data: &mut Vec<u8>) -> Result<()> {
        if root >= self.size {
            return Err(Error::InvalidRank {
                rank: root,
                size: self.size,
            });
        }
        // The root's length travels with the tags, and so does its payload where it fits.
        let inline: &[u8] = if self.rank == root { &data[..] } else { &[] };
        let (ch, lens, entries) = self.enter_inline(call, data.len() as u64, inline)?;
        let len = lens[root] as usize;
        if len <= INLINE_BYTES {
            let entry = &entries[root * ENTRY_WORDS..(root + 1) * ENTRY_WORDS];
            *data = inline_payload(entry, len).to_vec();
            return Ok(());
        }
        data.resize(len, 0);
        self.leave_entries(&ch, call)?;
        // Large payloads go in int-sized pieces.
        On {
            host: &*self.host,
            comm: ch.comm,
        }
        .bcast(root, &mut data[..])
    }

    fn split(&self, color: Option<u32>, key: usize) -> Result<Option<Arc<dyn Bootstrap>>> {
        let color = match color {
            None => None,
            Some(c) => Some(i32::try_from(c).map_err(|_| {
                Error::InvalidArgument(format!("split: color {c} exceeds MPI's int range"))
            })?),
        };
        let key = i32::try_from(key).map_err(|_| {
            Error::InvalidArgument(format!("split: key {key} exceeds MPI's int range"))
        })?;
        let (ch, _) = self.enter(Call::Split, 0)?;
        self.leave_entries(&ch, Call::Split)?;
        let sub = self.host.split(ch.comm, color, key)?;
        drop(ch);
        let Some(c) = sub else { return Ok(None) };
        let (roster, index) = self.watch.roster();
        let mut sub = Self::from_owned(
            Arc::clone(&self.host),
            c,
            Some((self.job.clone(), roster, index)),
        )?;
        sub.attentive = self.attentive;
        Ok(Some(Arc::new(sub)))
    }

    fn watch(&self) -> Option<&PeerWatch> {
        Some(&self.watch)
    }
}

/// The processes of `comm` on this process's node: those that share its memory (by
/// [`Locality`], not by the host's `MPI_COMM_TYPE_SHARED`, which is a setting of the host's
/// transport: MPICH's `MPIR_CVAR_NOLOCAL=1` answers singletons), split further by virtual
/// node when `ONESIDED_NODES=K` asks for K of them (rank `r` of the host job's `n` on virtual
/// node `r * K / n`, as under `osrun --nodes`): a window then reaches the other virtual nodes
/// through the network, which lets one machine compare onesided's network path with the host
/// MPI's in one `mpiexec` job.
/// Also returns how many processes of `comm` share the machine's cores.
/// The caller frees the communicator returned.
fn node_of_this_process(comm: On<'_>) -> Result<(HostComm, usize)> {
    let host = comm.host;
    let virtual_node = match std::env::var(super::local::ENV_NODES) {
        Err(_) => 0,
        Ok(k) => {
            let k: usize = k.parse().map_err(|_| {
                Error::Bootstrap(format!("{}={k}: not a number", super::local::ENV_NODES))
            })?;
            let world = host.world();
            let (r, n) = (host.rank(world)?, host.size(world)?);
            super::local::virtual_nodes(n, k)[r] as u64
        }
    };
    let here = Locality::of_this_process();
    let mine = [here.machine, here.memory, virtual_node];
    let all = comm.allgather(&mine)?;
    let machine = all.chunks_exact(3).filter(|p| p[0] == here.machine).count();
    // The node's color: the lowest rank of `comm` with the same memory and virtual node.
    let color = all
        .chunks_exact(3)
        .position(|p| p[1..] == mine[1..])
        .ok_or_else(|| Error::Bootstrap("this process is missing from its allgather".into()))?;
    let node = host.split(comm.comm, Some(color as i32), comm.rank()? as i32)?;
    let node = node.ok_or_else(|| Error::Bootstrap("splitting the job by node failed".into()))?;
    Ok((node, machine))
}

/// Dense node numbers from each rank's node leader (its node's lowest rank): the node of
/// rank 0 is 0, the next new leader's node is 1, and so on.
fn node_numbers(leaders: &[u64]) -> Vec<usize> {
    let mut seen: Vec<u64> = Vec::new();
    leaders
        .iter()
        .map(|&l| match seen.iter().position(|&s| s == l) {
            Some(i) => i,
            None => {
                seen.push(l);
                seen.len() - 1
            }
        })
        .collect()
}

/// Makes sure the job's shared-memory segments disappear once every process of this node
/// (`pids`) has ended, however it ended. Under `osrun` the launcher sweeps them; under
/// `mpiexec` nobody would, so the node's first process starts a reaper: a detached `sh` in
/// its own process group (out of reach of the launcher's signals to the job) that polls
/// the node's processes and then removes the job's names.
pub(crate) fn start_reaper(job: &str, pids: &[u32]) -> Result<()> {
    // The job id is hex (random_job_id); anything else must not reach a shell.
    if !job.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::Bootstrap(format!("unexpected job id {job:?}")));
    }
    let alive: Vec<String> = pids
        .iter()
        .map(|p| format!("kill -0 {p} 2>/dev/null"))
        .collect();
    let script = format!(
        "while {}; do sleep 0.2; done; rm -f /dev/shm/{NAME_PREFIX}{}.*",
        alive.join(" || "),
        job
    );
    let mut reaper = Command::new("/bin/sh");
    reaper
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Not the program's preloads (an MPI C ABI, a tool): each `sleep` would load them.
        .env_remove("LD_PRELOAD")
        .process_group(0);
    // SAFETY: runs in the forked child before exec and only makes one system call
    // (async-signal-safe, no memory touched). It closes every inherited descriptor
    // beyond stdio: the launcher waits for its sockets and pipes (the PMI connection)
    // to close, which a reaper holding them would delay until after the job's end.
    unsafe {
        reaper.pre_exec(|| {
            libc::close_range(3, u32::MAX, 0);
            Ok(())
        });
    }
    // Without a shell the segments are still removed by every normal exit; only a crash
    // could leave names behind, so a failed spawn is not worth failing the job for.
    let _ = reaper.spawn();
    Ok(())
}

/// True when this process was started by an MPI launcher (Hydra, Open MPI's mpirun, PMIx or
/// Slurm) rather than by `osrun` or by hand.
pub fn launched_by_mpi() -> bool {
    ["PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

extern "C" {
    /// glibc's `on_exit`: like `atexit`, but the handler learns the exit status.
    pub(crate) fn on_exit(
        handler: extern "C" fn(libc::c_int, *mut libc::c_void),
        arg: *mut libc::c_void,
    ) -> libc::c_int;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displacements_and_parts() {
        let counts = [3, 0, 2];
        assert_eq!(displacements(&counts).unwrap(), vec![0, 3, 3]);
        assert_eq!(
            split_parts(b"abcde", &counts),
            vec![b"abc".to_vec(), vec![], b"de".to_vec()]
        );
    }
}
