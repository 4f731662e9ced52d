//! The `pmi` bootstrap: a job started by a PMI launcher — MPICH's hydra (`mpiexec.hydra -n
//! N`) or Slurm (`srun --mpi=pmi2`) — joined without any MPI library, through the launcher's
//! PMI-1 wire protocol on the socket it passes in `PMI_FD`; or started by a PMIx server
//! (Slurm's `--mpi=pmix`, Open MPI's `mpirun`/`prterun`), joined through the PMIx client
//! library (`bootstrap::pmix`). Both are a [`Launcher`]; everything after is one code.
//!
//! The launcher gives the rank, the size, the node of every rank (`PMI_process_mapping`,
//! PMIx's node ids or host names; without a map, the host names the ranks publish) and a
//! key-value space with a barrier; it is far too slow for window creation's collectives. So
//! PMI only wires the job up, and the `local` bootstrap's machinery does the rest, as under
//! `osrun --nodes K`:
//!
//! 1. rank 0 draws the job id and starts the job's hub (`bootstrap::hub`, over TCP) in a
//!    thread of its own; both go into the key-value space; barrier;
//! 2. the lowest rank of each node creates the node's boot segment (roster and abort flag
//!    of the node's ranks) and publishes its name; barrier;
//! 3. every rank maps its node's segment and connects to the hub, which carries every
//!    collective from then on; barrier, and the segments' names leave `/dev/shm` (ranks keep
//!    their mappings).
//!
//! In a job over several nodes each rank also relays, through the hub, what the other
//! nodes' rosters need (as `osrun`'s node agents do): the collective it is blocked in, and
//! its clean exit; so a wait for a rank of another node that ended cleanly fails, and a
//! collective deadlock across nodes is detected, as under `osrun` (`start_relay`).
//!
//! A rank that exits non-zero asks the launcher to end the job (PMI's `abort`,
//! `PMIx_Abort`): Slurm then ends the step also without `srun -K`/`KillOnBadExit`. One
//! killed by a signal is the launcher's to notice (hydra's and Open MPI's always, Slurm's
//! with `-K`). A rank that ends
//! cleanly first waits up to 2 s for every other rank to end too (a rendezvous at the hub:
//! its network endpoint serves what peers still finish meanwhile, such as the last steps of
//! a window's `free`), then marks its exit in its node's roster and closes its hub
//! connections (a peer that still waits for it fails with `PeerExited`), then waits in a
//! PMI barrier until every rank has ended, and closes its PMI connection with `finalize`. Each node's first rank starts the `mpi` bootstrap's reaper, which removes the
//! job's names from the node's `/dev/shm` once its processes all ended.
//!
//! The wire protocol (MPICH's "simple PMI", documented in Flux RFC 13): lines of
//! `key=value` words, each request starting `cmd=NAME`, each answered by one line.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::bootstrap::hub::{self, Hub};
use crate::bootstrap::launcher::{renumber_nodes, Launcher};
use crate::bootstrap::local::{BootSegment, LocalBootstrap};
use crate::error::{Error, Result};
use crate::shm::segment::random_job_id;

/// Environment variable with the PMI socket's descriptor (hydra, Slurm's `pmi2` plugin).
pub const ENV_PMI_FD: &str = "PMI_FD";
/// Environment variable with this process's rank in the PMI job.
pub const ENV_PMI_RANK: &str = "PMI_RANK";
/// Environment variable with the PMI job's size.
pub const ENV_PMI_SIZE: &str = "PMI_SIZE";
/// Environment variable naming the host name (or address) other nodes reach rank 0's hub
/// at (default: the address the network endpoint binds to, `transport::address`).
pub const ENV_HUB_HOST: &str = "ONESIDED_HUB_HOST";

fn pmi_error(what: impl std::fmt::Display) -> Error {
    Error::Bootstrap(format!("PMI: {what}"))
}

/// One PMI-1 connection.
#[derive(Debug)]
pub(crate) struct Pmi {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    kvs: String,
    /// Longest value the server keeps.
    value_max: usize,
    /// This process's rank and the job's size (from the environment: PMI-1 says them there).
    rank: usize,
    size: usize,
}

/// The words of one answer line: `cmd=NAME key=value …`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    words: Vec<(String, String)>,
}

impl Answer {
    /// Parses one line; words without `=` are errors.
    pub(crate) fn parse(line: &str) -> Result<Answer> {
        let mut words = Vec::new();
        for w in line.split_whitespace() {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| pmi_error(format!("malformed answer {line:?}")))?;
            words.push((k.to_owned(), v.to_owned()));
        }
        Ok(Answer { words })
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.words
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn expect_cmd(&self, cmd: &str) -> Result<()> {
        match self.get("cmd") {
            Some(c) if c == cmd => Ok(()),
            other => Err(pmi_error(format!(
                "expected cmd={cmd}, the server answered cmd={}",
                other.unwrap_or("(none)")
            ))),
        }
    }

    fn expect_rc0(&self, what: &str) -> Result<()> {
        match self.get("rc") {
            None | Some("0") => Ok(()),
            Some(rc) => Err(pmi_error(format!(
                "{what} failed (rc={rc}{})",
                self.get("msg")
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ))),
        }
    }
}

impl Pmi {
    /// The connection the launcher passed in `PMI_FD`, initialized (PMI 1.1).
    ///
    /// # Safety
    /// `fd` is the launcher's PMI socket, which nothing else in the process uses.
    pub(crate) unsafe fn connect(fd: i32, rank: usize, size: usize) -> Result<Pmi> {
        // SAFETY: by the caller's contract the descriptor is ours alone.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let stream = UnixStream::from(owned);
        let mut pmi = Self::over(stream)?;
        (pmi.rank, pmi.size) = (rank, size);
        Ok(pmi)
    }

    /// Initializes PMI over `stream` (a socket to the launcher).
    pub(crate) fn over(stream: UnixStream) -> Result<Pmi> {
        let writer = stream.try_clone().map_err(pmi_error)?;
        let mut pmi = Pmi {
            reader: BufReader::new(stream),
            writer,
            kvs: String::new(),
            value_max: 256,
            rank: 0,
            size: 1,
        };
        let a = pmi.request("cmd=init pmi_version=1 pmi_subversion=1")?;
        a.expect_cmd("response_to_init")?;
        a.expect_rc0("init")?;
        let a = pmi.request("cmd=get_maxes")?;
        a.expect_cmd("maxes")?;
        if let Some(v) = a.get("vallen_max").and_then(|v| v.parse().ok()) {
            pmi.value_max = v;
        }
        let a = pmi.request("cmd=get_my_kvsname")?;
        a.expect_cmd("my_kvsname")?;
        pmi.kvs = a
            .get("kvsname")
            .ok_or_else(|| pmi_error("no kvsname in my_kvsname"))?
            .to_owned();
        Ok(pmi)
    }

    fn send(&mut self, line: &str) -> Result<()> {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| pmi_error(format!("cannot write to the launcher: {e}")))
    }

    fn request(&mut self, line: &str) -> Result<Answer> {
        self.send(line)?;
        let mut answer = String::new();
        let n = self
            .reader
            .read_line(&mut answer)
            .map_err(|e| pmi_error(format!("cannot read from the launcher: {e}")))?;
        if n == 0 {
            return Err(pmi_error("the launcher closed the connection"));
        }
        Answer::parse(answer.trim_end())
    }
}

impl Launcher for Pmi {
    fn name(&self) -> &'static str {
        "PMI"
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    /// `PMI_process_mapping` (hydra's and Slurm's block map).
    fn node_map(&mut self) -> Result<Option<Vec<usize>>> {
        let size = self.size;
        match self.get(0, "PMI_process_mapping")? {
            None => Ok(None),
            Some(m) => match process_mapping(&m, size) {
                Some(n) => Ok(Some(n)),
                None => Err(pmi_error(format!(
                    "PMI_process_mapping {m:?} is not a block mapping of {size} ranks"
                ))),
            },
        }
    }

    fn put(&mut self, key: &str, value: &str) -> Result<()> {
        if value.len() > self.value_max || value.contains(char::is_whitespace) {
            return Err(pmi_error(format!(
                "value {value:?} of {key} does not fit a PMI value"
            )));
        }
        let a = self.request(&format!(
            "cmd=put kvsname={} key={key} value={value}",
            self.kvs
        ))?;
        a.expect_cmd("put_result")?;
        a.expect_rc0("put")
    }

    /// PMI-1 has one space for the whole job: `owner` is not needed.
    fn get(&mut self, _owner: usize, key: &str) -> Result<Option<String>> {
        let a = self.request(&format!("cmd=get kvsname={} key={key}", self.kvs))?;
        a.expect_cmd("get_result")?;
        if a.get("rc") != Some("0") {
            return Ok(None);
        }
        Ok(a.get("value").map(str::to_owned))
    }

    fn barrier(&mut self) -> Result<()> {
        let a = self.request("cmd=barrier_in")?;
        a.expect_cmd("barrier_out")
    }

    fn finalize(&mut self) -> Result<()> {
        let a = self.request("cmd=finalize")?;
        a.expect_cmd("finalize_ack")
    }

    /// `cmd=abort` (PMI 1.1): no answer comes; the launcher ends the job.
    fn abort(&mut self, status: i32, _why: &str) {
        let _ = self.send(&format!("cmd=abort exitcode={status}"));
    }
}

/// The node of each of `size` ranks from PMI's `PMI_process_mapping` value, e.g.
/// `(vector,(0,2,4),(2,1,3))`: blocks of `(first node, nodes, ranks per node)`, ranks
/// handed out in order, a node's ranks consecutive. Nodes are renumbered in the order of
/// their lowest rank. `None` when the value is not of that form or does not cover `size`
/// ranks.
pub(crate) fn process_mapping(value: &str, size: usize) -> Option<Vec<usize>> {
    let inner = value.trim().strip_prefix("(vector,")?.strip_suffix(')')?;
    let mut nodes = Vec::with_capacity(size);
    for block in inner.split("),") {
        let block = block.trim().trim_start_matches('(').trim_end_matches(')');
        let nums: Vec<usize> = block
            .split(',')
            .map(|n| n.trim().parse().ok())
            .collect::<Option<_>>()?;
        let [first, count, per] = nums[..] else {
            return None;
        };
        for node in first..first.checked_add(count)? {
            for _ in 0..per {
                nodes.push(node);
            }
        }
    }
    // Cyclic mappings repeat the blocks until every rank has a node.
    if nodes.is_empty() {
        return None;
    }
    let block = nodes.clone();
    while nodes.len() < size {
        nodes.extend_from_slice(&block);
    }
    nodes.truncate(size);
    Some(renumber_nodes(&nodes))
}

/// This machine's host name, by which ranks find their nodes when the launcher has no map.
fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// A PMI launcher's rank and size, when the environment names one.
pub(crate) fn launched() -> Option<(usize, usize)> {
    let get = |k: &str| std::env::var(k).ok()?.parse().ok();
    std::env::var_os(ENV_PMI_FD)?;
    Some((get(ENV_PMI_RANK)?, get(ENV_PMI_SIZE)?))
}

/// What keeps the job's shared parts alive in this process: rank 0's hub, a node leader's
/// boot segment, the PMI connection (finalized at a clean exit).
struct Kept {
    rank: usize,
    _hub: Option<Hub>,
    /// The exit rendezvous's connection to the hub.
    exit: hub::Link,
    /// Close this rank's connections to the hub at a clean exit.
    leavers: Vec<hub::Leaver>,
    _boot: Option<BootSegment>,
    pmi: Mutex<Box<dyn Launcher>>,
    /// This node's roster and this process's entry: marked at a clean exit, so that this
    /// node's waits for it fail with `PeerExited` instead of waiting on.
    exit_mark: (Arc<crate::bootstrap::roster::Roster>, usize),
    /// The relay to the other nodes' rosters (a job over several nodes): told of this
    /// process's clean exit.
    relay: Option<Arc<hub::AgentLink>>,
}

static KEPT: OnceLock<Kept> = OnceLock::new();

/// The hub communicator of the exit rendezvous (no split's id: those are hashes of a
/// parent's, and the world's is 0).
const EXIT_COMM: u64 = 0x6578_6974; // "exit"

/// How long a rank that ends cleanly waits for the others to end too before it tells its
/// peers it is gone: long enough for the last steps of a collective they all finished
/// (a peer still reading what this rank published, an answer still on its way), short
/// enough that a peer waiting for an early leaver fails within seconds.
const EXIT_GRACE: Duration = Duration::from_secs(2);

extern "C" fn finalize_at_exit(status: libc::c_int, _: *mut libc::c_void) {
    let Some(k) = KEPT.get() else { return };
    if status != 0 {
        // A failing rank ends the job (under Slurm also without `srun -K`). Not waiting
        // for the lock: the exit must not hang on a thread that holds it.
        if let Ok(mut pmi) = k.pmi.try_lock() {
            pmi.abort(
                status,
                &format!("rank {} exited with status {status}", k.rank),
            );
        }
        return;
    }
    // First the others: once every rank has come to its end, nobody needs anything of
    // this one's any more. The network endpoint serves peers meanwhile (its thread runs).
    let deadline = Instant::now() + EXIT_GRACE;
    let mut idle = || -> Result<()> {
        if Instant::now() >= deadline {
            return Err(pmi_error("the others are not at their end yet"));
        }
        std::thread::sleep(Duration::from_millis(1));
        Ok(())
    };
    let _ = k.exit.exchange(0, 0, false, &[], &mut idle);
    // Then gone for the waits of this node (its roster) and for the job's collectives
    // (the hub): a peer that still waits for this rank fails with `PeerExited`, as under
    // osrun.
    k.exit_mark.0.mark_exited(k.exit_mark.1);
    if let Some(relay) = &k.relay {
        // The hub is rank 0's: gone only when the job is.
        let _ = relay.exited(k.rank);
    }
    for l in &k.leavers {
        l.leave();
    }
    let Ok(mut pmi) = k.pmi.lock() else { return };
    // The process stays until every rank reached its end (MPI_Finalize's barrier): rank
    // 0's hub serves the others until then. A rank that fails meanwhile ends the job.
    let _ = pmi.barrier();
    let _ = pmi.finalize();
}

/// Joins the PMI-1 job this process was started in (`PMI_FD`; see the module's
/// documentation).
pub(crate) fn join() -> Result<LocalBootstrap> {
    let (rank, size) = launched().ok_or_else(|| {
        pmi_error(format!(
            "{ENV_PMI_FD}, {ENV_PMI_RANK} and {ENV_PMI_SIZE} must all be set"
        ))
    })?;
    if rank >= size {
        return Err(pmi_error(format!("rank {rank} of a job of {size}")));
    }
    let fd: i32 = std::env::var(ENV_PMI_FD)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| pmi_error(format!("{ENV_PMI_FD} is not a descriptor")))?;
    // SAFETY: fstat of a descriptor number writes only `st`.
    let is_socket = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
    };
    if !is_socket {
        return Err(pmi_error(format!(
            "{ENV_PMI_FD}={fd} is not an open socket: this process was not started by the PMI \
             launcher its environment names (set ONESIDED_BOOTSTRAP=singleton to run it alone)"
        )));
    }
    // SAFETY: the launcher's socket (checked open); the environment names it for this
    // process, and no MPI library shares it (the `mpi` bootstrap is chosen before this one
    // when one is present).
    let pmi = unsafe { Pmi::connect(fd, rank, size)? };
    join_through(Box::new(pmi))
}

/// Joins the PMIx job this process was started in (`PMIX_RANK`, `PMIX_NAMESPACE`: Slurm's
/// `--mpi=pmix`, Open MPI's `mpirun` and `prterun`), through the system's PMIx client
/// library (`bootstrap::pmix`).
pub(crate) fn join_pmix() -> Result<LocalBootstrap> {
    join_through(Box::new(crate::bootstrap::pmix::Pmix::connect()?))
}

/// Joins the job through `pmi`, its launcher's interface (see the module's documentation).
fn join_through(mut pmi: Box<dyn Launcher>) -> Result<LocalBootstrap> {
    let (rank, size) = (pmi.rank(), pmi.size());
    let map = pmi.node_map()?;
    let mut hub = None;
    if rank == 0 {
        let job = random_job_id();
        let h = Hub::start_tcp("0.0.0.0:0")?;
        let port = h
            .addr()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| pmi_error(format!("hub address {}", h.addr())))?;
        // The address the network endpoint would bind to (ONESIDED_NET_ADDR,
        // ONESIDED_IFACE, else the first external IPv4 address): the one peers on other
        // hosts reach, without relying on host names resolving.
        let host = match std::env::var(ENV_HUB_HOST) {
            Ok(h) => h,
            Err(_) => crate::transport::address::endpoint_address()?,
        };
        pmi.put("onesided-job", &job)?;
        pmi.put("onesided-hub", &format!("tcp:{host}:{port}"))?;
        hub = Some(h);
    }
    if map.is_none() {
        pmi.put(&format!("onesided-host-{rank}"), &host_name())?;
    }
    pmi.barrier()?;
    let nodes_from = if map.is_some() {
        pmi.name()
    } else {
        "host names"
    };
    let nodes = match map {
        Some(n) => n,
        // No map from the launcher: ranks of one host name share a node.
        None => {
            let mut hosts = Vec::with_capacity(size);
            for r in 0..size {
                hosts.push(
                    pmi.get(r, &format!("onesided-host-{r}"))?
                        .ok_or_else(|| pmi_error(format!("rank {r} published no host name")))?,
                );
            }
            renumber_nodes(&hosts)
        }
    };
    crate::diag::event!(
        launcher = pmi.name(),
        rank,
        size,
        nodes_from,
        nodes = nodes.iter().max().map_or(0, |n| n + 1),
        "joined the launcher's job"
    );
    if nodes.len() != size {
        return Err(pmi_error(format!(
            "the node map ({nodes_from}) has {} ranks, the job {size}",
            nodes.len()
        )));
    }
    let on_this_machine = nodes.iter().filter(|&&n| n == nodes[rank]).count();
    // ONESIDED_NODES=K: the job over K virtual nodes, as `osrun --nodes K` splits it (the
    // network path between ranks of one host).
    let nodes = match std::env::var(crate::bootstrap::local::ENV_NODES) {
        Ok(k) => {
            let k: usize = k.parse().map_err(|_| {
                pmi_error(format!(
                    "{}={k:?} is not a number",
                    crate::bootstrap::local::ENV_NODES
                ))
            })?;
            if on_this_machine != size {
                return Err(pmi_error(format!(
                    "{} splits a job of one host; this one spans several",
                    crate::bootstrap::local::ENV_NODES
                )));
            }
            crate::bootstrap::local::virtual_nodes(size, k)
        }
        Err(_) => nodes,
    };
    let node = nodes[rank];
    let node_ranks: Vec<usize> = (0..size).filter(|&r| nodes[r] == node).collect();
    let leader = node_ranks[0] == rank;

    let job = pmi
        .get(0, "onesided-job")?
        .ok_or_else(|| pmi_error("rank 0 published no job id"))?;
    let hub_addr = pmi
        .get(0, "onesided-hub")?
        .ok_or_else(|| pmi_error("rank 0 published no hub"))?;
    let mut boot = None;
    if leader {
        let b = BootSegment::for_node(&job, size, node, node_ranks.len())?;
        pmi.put(&format!("onesided-boot-{node}"), b.name())?;
        boot = Some(b);
    }
    pmi.put(
        &format!("onesided-pid-{rank}"),
        &std::process::id().to_string(),
    )?;
    pmi.barrier()?;
    if leader {
        // The job's names leave this node's /dev/shm once its processes all ended, however
        // they ended (no launcher of ours sweeps them).
        let mut pids = Vec::with_capacity(node_ranks.len());
        for &r in &node_ranks {
            let pid = pmi
                .get(r, &format!("onesided-pid-{r}"))?
                .and_then(|p| p.parse::<u32>().ok())
                .ok_or_else(|| pmi_error(format!("rank {r} published no pid")))?;
            pids.push(pid);
        }
        crate::bootstrap::mpi::start_reaper(&job, &pids)?;
    }
    let name = pmi
        .get(node_ranks[0], &format!("onesided-boot-{node}"))?
        .ok_or_else(|| pmi_error(format!("node {node}'s first rank published no segment")))?;
    let mut local = LocalBootstrap::connect(&job, &name, rank, size)?;
    let nodes = Arc::new(nodes);
    local.join_hub(
        Arc::clone(&nodes),
        hub::Link::connect(&hub_addr, 0, rank, size)?,
        on_this_machine,
    );
    if let Some(b) = &boot {
        // Every rank of the node maps it before the barrier below returns anywhere; give
        // the slowest a while, then the name goes (mappings stay).
        let deadline = Instant::now() + Duration::from_secs(60);
        while !b.all_attached() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    pmi.barrier()?;
    if let Some(b) = &boot {
        b.unlink();
    }
    let (roster, index) = crate::bootstrap::Bootstrap::watch(&local)
        .expect("a local bootstrap watches its peers")
        .roster();
    let relay = if nodes.iter().any(|&n| n != node) {
        Some(start_relay(
            &hub_addr,
            &nodes,
            (rank, index),
            Arc::clone(&roster),
        )?)
    } else {
        None
    };
    let exit = hub::Link::connect(&hub_addr, EXIT_COMM, rank, size)?;
    let leavers = [local.hub_leaver()?, Some(exit.leaver()?)]
        .into_iter()
        .flatten()
        .collect();
    let first = KEPT
        .set(Kept {
            rank,
            relay,
            _hub: hub,
            _boot: boot,
            pmi: Mutex::new(pmi),
            exit_mark: (roster, index),
            exit,
            leavers,
        })
        .is_ok();
    if first {
        // SAFETY: registers a handler with no preconditions; its argument is unused.
        unsafe { crate::bootstrap::mpi::on_exit(finalize_at_exit, std::ptr::null_mut()) };
    }
    Ok(local)
}

/// How long the relay thread waits for news from the hub between two looks at this
/// process's roster word.
const RELAY_PATIENCE: Duration = Duration::from_millis(10);

/// Starts this process's relay between its node's roster and the other nodes' (a job over
/// several nodes). Under `osrun` each node's agent copies into the other nodes' rosters
/// what its ranks publish there (`launch::supervise`); a PMI job has no such agent, so each
/// process relays for itself, through the hub's agent channel: the collective it is
/// blocked in (its roster word) when it changes, and its clean exit at its end (see
/// `finalize_at_exit`); and it copies into its node's roster what the processes of other
/// nodes relay. Waits here then see a rank of another node that ended cleanly (they fail
/// with `PeerExited`, or `PeerGone` for the network's own waits) and a collective deadlock
/// across nodes (`CollectiveDeadlock`), as under `osrun`. Every process of a node writes
/// the same marks and words into its roster: idempotent. `index` is this process's record.
fn start_relay(
    hub_addr: &str,
    nodes: &Arc<Vec<usize>>,
    (rank, index): (usize, usize),
    roster: Arc<crate::bootstrap::roster::Roster>,
) -> Result<Arc<hub::AgentLink>> {
    let node = nodes[rank];
    let agent = Arc::new(hub::AgentLink::connect(hub_addr, node)?);
    agent.set_patience(RELAY_PATIENCE)?;
    let (link, nodes) = (Arc::clone(&agent), Arc::clone(nodes));
    let records = roster.len();
    let elsewhere = move |r: usize| r < records && nodes.get(r).is_some_and(|&n| n != node);
    std::thread::Builder::new()
        .name("onesided-pmi-relay".into())
        .spawn(move || {
            let mut published = 0;
            loop {
                // Blocks up to RELAY_PATIENCE; an error is the hub gone: the job ends.
                let Ok(news) = link.news() else { return };
                for n in news {
                    match n {
                        hub::AgentNews::Exited(r) if elsewhere(r) => roster.mark_exited(r),
                        hub::AgentNews::Waiting { rank: r, word } if elsewhere(r) => {
                            roster.set_waiting(r, word)
                        }
                        // Failures end a PMI job through its launcher.
                        _ => {}
                    }
                }
                // Records of other processes are by job rank; this one's is `index`.
                let word = roster.waiting(index);
                if word != published {
                    if link.waiting(rank, word).is_err() {
                        return;
                    }
                    published = word;
                }
            }
        })
        .map_err(|e| pmi_error(format!("relay thread: {e}")))?;
    Ok(agent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_give_each_rank_its_node() {
        assert_eq!(process_mapping("(vector,(0,1,4))", 4), Some(vec![0; 4]));
        assert_eq!(
            process_mapping("(vector,(0,2,2))", 4),
            Some(vec![0, 0, 1, 1])
        );
        assert_eq!(
            process_mapping("(vector,(0,2,2),(2,1,1))", 5),
            Some(vec![0, 0, 1, 1, 2])
        );
        // Cyclic: one rank per node, repeated.
        assert_eq!(
            process_mapping("(vector,(0,2,1))", 4),
            Some(vec![0, 1, 0, 1])
        );
        // Nodes renumbered by their lowest rank.
        assert_eq!(
            process_mapping("(vector,(3,1,1),(1,1,1))", 2),
            Some(vec![0, 1])
        );
        assert_eq!(process_mapping("(vector,(0,2))", 2), None);
        assert_eq!(process_mapping("nonsense", 2), None);
        assert_eq!(process_mapping("(vector,)", 2), None);
    }

    #[test]
    fn answers_parse_into_words() {
        let a = Answer::parse("cmd=get_result rc=0 value=tcp:node1:4000").unwrap();
        assert_eq!(a.get("cmd"), Some("get_result"));
        assert_eq!(a.get("value"), Some("tcp:node1:4000"));
        assert!(a.expect_rc0("get").is_ok());
        let a = Answer::parse("cmd=get_result rc=-1 msg=key_not_found").unwrap();
        assert!(a.expect_rc0("get").is_err());
        assert!(Answer::parse("cmd=x garbage").is_err());
    }

    /// A PMI server of two words: answers a scripted session over a socket pair.
    #[test]
    fn a_session_speaks_the_wire_protocol() {
        let (client, server) = UnixStream::pair().unwrap();
        let script = std::thread::spawn(move || {
            let mut r = BufReader::new(server.try_clone().unwrap());
            let mut w = server;
            let mut seen = Vec::new();
            let answers = [
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
                "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024",
                "cmd=my_kvsname kvsname=kvs_7_0",
                "cmd=put_result rc=0",
                "cmd=barrier_out",
                "cmd=get_result rc=0 value=hello",
                "cmd=get_result rc=-1 msg=key_not_found",
                "cmd=finalize_ack",
            ];
            for a in answers {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                seen.push(line.trim_end().to_owned());
                writeln!(w, "{a}").unwrap();
            }
            seen
        });
        let mut pmi = Pmi::over(client).unwrap();
        assert_eq!(pmi.value_max, 1024);
        pmi.put("k", "hello").unwrap();
        pmi.barrier().unwrap();
        assert_eq!(pmi.get(0, "k").unwrap().as_deref(), Some("hello"));
        assert_eq!(pmi.get(0, "missing").unwrap(), None);
        pmi.finalize().unwrap();
        assert!(pmi.put("k", "has space").is_err());
        let seen = script.join().unwrap();
        assert_eq!(seen[0], "cmd=init pmi_version=1 pmi_subversion=1");
        assert_eq!(seen[3], "cmd=put kvsname=kvs_7_0 key=k value=hello");
        assert_eq!(seen[4], "cmd=barrier_in");
        assert_eq!(seen[5], "cmd=get kvsname=kvs_7_0 key=k");
    }
}
