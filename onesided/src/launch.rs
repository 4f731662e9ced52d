//! Starting the ranks of a job on this node (shared by `osrun` and [`crate::testing`]).
//!
//! The launcher creates the job's boot segment, starts `n` processes with the `ONESIDED_*`
//! environment, and watches them. The first rank that fails (non-zero exit, panic, any
//! signal — SIGKILL included) or a timeout takes the job down: the launcher names the rank,
//! raises the abort flag that waiting ranks poll, sends SIGTERM, and SIGKILL after a grace
//! period. Whatever happened, every shared-memory segment of the job is removed afterwards.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bootstrap::hub::{self, AgentLink, AgentNews, Hub, RankFailure};
use crate::bootstrap::local::{self, BootSegment};
use crate::error::{Error, Result};
use crate::shm::liveness::{self, sweep_dead_jobs};
use crate::shm::segment::sweep_job;
use crate::transport::address;

/// Time between SIGTERM and SIGKILL when the job is torn down.
const TERM_GRACE: Duration = Duration::from_millis(1000);
/// Time a job that ran out of time gets to print its ranks' hang reports (`crate::diag`)
/// before SIGTERM: a waiting rank polls the abort word at least every 0.5 ms.
const REPORT_GRACE: Duration = Duration::from_millis(500);
/// How often the launcher looks at its children.
const POLL_INTERVAL: Duration = Duration::from_millis(2);
/// How long output pipes may stay open after every rank has exited (a rank's own children
/// can hold them); output after that is dropped.
const OUTPUT_DRAIN: Duration = Duration::from_millis(500);

/// Most ranks a job may have unless [`LaunchSpec::max_ranks`] (`osrun --max-ranks`) says
/// otherwise. The boot segment grows with the square of the rank count (an exchange slot
/// per rank that holds a page for every peer): 256 ranks need 256 MiB of /dev/shm.
pub const DEFAULT_MAX_RANKS: usize = 256;

/// What happens to the ranks' stdout and stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Ranks write straight to the launcher's stdout/stderr.
    Inherit,
    /// Every line is prefixed with `[rank] `.
    Prefixed,
    /// Output is collected into the [`JobReport`] (used by tests).
    Capture,
}

/// Everything needed to start a job.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// Number of ranks.
    pub ranks: usize,
    /// Program every rank runs.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// The job fails when it runs longer than this.
    pub timeout: Option<Duration>,
    /// Treatment of the ranks' output.
    pub output: Output,
    /// Extra environment for every rank.
    pub env: Vec<(OsString, OsString)>,
    /// Set asynchronously (e.g. by a signal handler) to tear the job down.
    pub interrupt: Option<Arc<AtomicBool>>,
    /// Name used in messages (`osrun`).
    pub name: String,
    /// Refuse jobs of more ranks than this ([`DEFAULT_MAX_RANKS`] by default).
    pub max_ranks: usize,
    /// Virtual nodes the ranks are split over (1: all on this machine's one node; see
    /// `ONESIDED_NODES`).
    pub nodes: usize,
    /// Start each node's ranks through a node agent (`osrun --node-wrapper`); otherwise this
    /// process starts every rank, the nodes sharing its mount and network namespaces.
    pub node_agents: Option<NodeAgents>,
}

impl LaunchSpec {
    /// A spec with defaults: inherited output, no timeout.
    pub fn new(ranks: usize, program: impl Into<PathBuf>) -> Self {
        LaunchSpec {
            ranks,
            program: program.into(),
            args: Vec::new(),
            timeout: None,
            output: Output::Inherit,
            env: Vec::new(),
            interrupt: None,
            name: "osrun".into(),
            max_ranks: DEFAULT_MAX_RANKS,
            nodes: 1,
            node_agents: None,
        }
    }
}

/// How one rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankStatus {
    /// Exited with this code.
    Exited(i32),
    /// Terminated by this signal.
    Signaled(i32),
}

impl RankStatus {
    pub(crate) fn from_exit(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(c), _) => RankStatus::Exited(c),
            (None, Some(s)) => RankStatus::Signaled(s),
            (None, None) => RankStatus::Exited(-1),
        }
    }

    /// True for a clean exit.
    pub fn success(self) -> bool {
        self == RankStatus::Exited(0)
    }

    fn describe(self) -> String {
        match self {
            RankStatus::Exited(101) => "exited with status 101 (a Rust panic)".into(),
            RankStatus::Exited(c) => format!("exited with status {c}"),
            RankStatus::Signaled(s) => format!("was killed by signal {s} ({})", signal_name(s)),
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str())
        .unwrap_or("unknown")
}

/// Why a job failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobFailure {
    /// This rank failed first.
    Rank {
        /// Its rank.
        rank: usize,
        /// Its process id.
        pid: u32,
        /// How it ended.
        status: RankStatus,
    },
    /// The job ran longer than the timeout.
    Timeout(Duration),
    /// The launcher was interrupted.
    Interrupted,
    /// The job was aborted from outside this node (a node agent heard it from the hub).
    Aborted,
    /// The agent of a node failed before any rank failure was reported (its wrapper could
    /// not set the node up, or it was killed).
    Node {
        /// The node.
        node: usize,
        /// How its agent ended.
        status: RankStatus,
    },
}

impl std::fmt::Display for JobFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobFailure::Rank { rank, pid, status } => {
                write!(f, "rank {rank} (pid {pid}) {}", status.describe())
            }
            JobFailure::Timeout(t) => write!(f, "timed out after {:.1} s", t.as_secs_f64()),
            JobFailure::Interrupted => f.write_str("interrupted"),
            JobFailure::Aborted => f.write_str("aborted (a rank failed on another node)"),
            JobFailure::Node { node, status } => {
                write!(f, "the agent of node {node} {}", status.describe())
            }
        }
    }
}

/// Output of one rank (only with [`Output::Capture`]).
#[derive(Debug, Clone, Default)]
pub struct RankOutput {
    /// Everything the rank wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything the rank wrote to stderr.
    pub stderr: Vec<u8>,
}

/// The outcome of a job. Must be looked at: a test that drops it unread passes whatever
/// its ranks did.
#[derive(Debug, Clone)]
#[must_use = "a job report unread hides failed ranks (call assert_success)"]
pub struct JobReport {
    /// The random job id.
    pub job_id: String,
    /// How each rank ended.
    pub statuses: Vec<RankStatus>,
    /// The first failure, if any.
    pub failure: Option<JobFailure>,
    /// Captured output by rank (empty unless [`Output::Capture`]).
    pub output: Vec<RankOutput>,
    /// Shared-memory segments the ranks left behind that the launcher removed.
    pub swept_segments: usize,
    /// Wall time of the job.
    pub elapsed: Duration,
}

impl JobReport {
    /// True when every rank exited with status 0.
    pub fn success(&self) -> bool {
        self.failure.is_none() && self.statuses.iter().all(|s| s.success())
    }

    /// Exit code for a launcher: 0, the failing rank's code, 128+signal, 124 (timeout) or
    /// 130 (interrupted).
    pub fn exit_code(&self) -> i32 {
        match &self.failure {
            None => 0,
            Some(JobFailure::Rank { status, .. }) => match *status {
                RankStatus::Exited(0) => 1,
                RankStatus::Exited(c) => c,
                RankStatus::Signaled(s) => 128 + s,
            },
            Some(JobFailure::Timeout(_)) => 124,
            Some(JobFailure::Interrupted) => 130,
            Some(JobFailure::Aborted) => 1,
            Some(JobFailure::Node { status, .. }) => match *status {
                RankStatus::Exited(0) => 1,
                RankStatus::Exited(c) => c,
                RankStatus::Signaled(s) => 128 + s,
            },
        }
    }

    /// Human-readable description of the failure.
    pub fn failure_message(&self) -> Option<String> {
        self.failure.as_ref().map(JobFailure::to_string)
    }
}

enum Pipe {
    Stdout,
    Stderr,
}

/// Copies a rank's pipe (prefixing lines, or capturing); the captured bytes arrive on
/// `done` tagged with (rank, is_stderr) when the pipe closes.
fn forward(
    rank: usize,
    mut src: impl Read + Send + 'static,
    pipe: Pipe,
    mode: Output,
    done: mpsc::Sender<(usize, bool, Vec<u8>)>,
) {
    let is_stderr = matches!(pipe, Pipe::Stderr);
    std::thread::spawn(move || {
        let mut captured = Vec::new();
        match mode {
            Output::Capture => {
                let _ = src.read_to_end(&mut captured);
            }
            Output::Prefixed => {
                let mut reader = BufReader::new(src);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if !line.ends_with(b"\n") {
                                line.push(b'\n');
                            }
                            let mut out: Box<dyn Write> = match pipe {
                                Pipe::Stdout => Box::new(std::io::stdout().lock()),
                                Pipe::Stderr => Box::new(std::io::stderr().lock()),
                            };
                            let _ = write!(out, "[{rank}] ");
                            let _ = out.write_all(&line);
                            let _ = out.flush();
                        }
                    }
                }
            }
            Output::Inherit => {}
        }
        let _ = done.send((rank, is_stderr, captured));
    });
}

/// Prints a line of the launcher's own on stderr, whatever became of stderr: `eprintln!`
/// panics when it cannot write (a closed pipe: `osrun … 2>&1 | head -1`), and a launcher
/// that dies halfway leaves its job's ranks killed and their segments in /dev/shm.
fn tell(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

struct Running {
    child: Child,
    status: Option<RankStatus>,
}

/// The job's end decided outside its ranks: the timeout passed, or the launcher was
/// interrupted (the interruption wins when both hold).
fn stopped_from_outside(spec: &LaunchSpec, start: Instant) -> Option<JobFailure> {
    if spec
        .interrupt
        .as_ref()
        .is_some_and(|f| f.load(Ordering::Relaxed))
    {
        return Some(JobFailure::Interrupted);
    }
    spec.timeout
        .filter(|&t| start.elapsed() > t)
        .map(JobFailure::Timeout)
}

/// Kills and reaps the processes started so far when the next cannot start: the error.
fn kill_started(started: &mut [Running], why: String) -> Error {
    signal_all(started, rustix::process::Signal::KILL);
    for r in started.iter_mut() {
        let _ = r.child.wait();
    }
    Error::Launch(why)
}

fn signal_all(ranks: &mut [Running], sig: rustix::process::Signal) {
    let mut all: Vec<&mut Running> = ranks.iter_mut().collect();
    signal_some(&mut all, sig);
}

fn signal_some(ranks: &mut [&mut Running], sig: rustix::process::Signal) {
    for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
        if let Some(pid) = rustix::process::Pid::from_raw(r.child.id() as i32) {
            // The child may have exited since we looked; ESRCH is fine.
            let _ = rustix::process::kill_process(pid, sig);
        }
    }
}

/// Makes the rank started by `cmd` die (SIGKILL) when the launcher dies, as `mpiexec`'s
/// ranks do: a `kill -9` of `osrun` must not leave ranks waiting forever for peers, and
/// only once they are gone can the next start sweep what the job left in /dev/shm.
fn die_with_launcher(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let launcher = rustix::process::getpid();
    // SAFETY: the closure runs between fork and exec and only makes system calls (prctl,
    // getppid) and builds an io::Error from an errno, which allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The launcher may have died before prctl: then nobody would send the signal.
            if rustix::process::getppid() != Some(launcher) {
                return Err(std::io::Error::from_raw_os_error(
                    rustix::io::Errno::SRCH.raw_os_error(),
                ));
            }
            Ok(())
        });
    }
}

/// The boot segments of a job (one, or one per virtual node) and the hub that carries the
/// collectives when there are several: ranks of different nodes meet only through it and
/// the network, as on separate hosts.
fn job_channels(
    spec: &LaunchSpec,
    job: &str,
    node_of: &[usize],
) -> Result<(Vec<BootSegment>, Option<Hub>)> {
    let nodes = node_of.last().map_or(1, |&last| last + 1);
    if nodes == 1 {
        return Ok((vec![BootSegment::create(job, spec.ranks)?], None));
    }
    let hub = Hub::start_unix(&std::env::temp_dir(), job)?;
    let boots = (0..nodes)
        .map(|k| {
            let here = node_of.iter().filter(|&&n| n == k).count();
            BootSegment::for_node(job, spec.ranks, k, here)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((boots, Some(hub)))
}

/// Starts the job described by `spec` and waits until it is over.
///
/// First removes what dead jobs left in /dev/shm (jobs whose launcher and ranks are all
/// gone, e.g. after `kill -9` of their launcher). Returns `Err` only when the job could not
/// be started; a failing job is reported in the [`JobReport`].
pub fn launch(spec: &LaunchSpec) -> Result<JobReport> {
    if spec.ranks == 0 {
        return Err(Error::Launch("need at least one rank".into()));
    }
    if spec.ranks > spec.max_ranks {
        return Err(Error::Launch(format!(
            "{} ranks is more than the maximum of {} (the boot segment grows with the square \
             of the rank count; raise the limit with --max-ranks)",
            spec.ranks, spec.max_ranks
        )));
    }
    if let Some(agents) = &spec.node_agents {
        return launch_with_agents(spec, agents);
    }
    sweep_dead_jobs();
    let start = Instant::now();
    let job = local::new_job_id();
    // Before any segment of the job exists: a sweeper must never find the job unheld.
    let live = liveness::create(&job)?;
    let node_of = local::virtual_nodes(spec.ranks, spec.nodes);
    let (boots, hub) = match job_channels(spec, &job, &node_of) {
        Ok(c) => c,
        Err(e) => {
            drop(live);
            sweep_job(&job);
            return Err(e);
        }
    };
    // With one segment per node, rank r maps its node's.
    let boot_of: Vec<usize> = (0..spec.ranks)
        .map(|r| if boots.len() > 1 { node_of[r] } else { 0 })
        .collect();
    let members: Vec<usize> = (0..spec.ranks).collect();
    let outcome = supervise(
        spec,
        &job,
        &Ranks {
            members: &members,
            boots: &boots,
            boot_of: &boot_of,
            hub: hub.as_ref().map(Hub::addr),
            agent: None,
        },
    );
    drop(boots);
    drop(hub);
    drop(live);
    let swept_segments = sweep_job(&job);
    let (statuses, failure, output) = outcome?;
    Ok(JobReport {
        job_id: job,
        statuses,
        failure,
        output,
        swept_segments,
        elapsed: start.elapsed(),
    })
}

/// How node agents start the ranks of each node (`osrun --node-wrapper`).
#[derive(Debug, Clone)]
pub struct NodeAgents {
    /// Run as `WRAPPER NODE AGENT ARGS...` for each node: it sets the node up (its own
    /// network and mount namespace, a remote shell to a host…) and executes the rest.
    pub wrapper: PathBuf,
    /// The agent program (`osrun` itself), which runs [`run_node`] for its node.
    pub agent: PathBuf,
}

/// The ranks one supervisor starts and watches, and where they meet.
struct Ranks<'a> {
    /// Job ranks started here.
    members: &'a [usize],
    /// Boot segments (one per node the supervisor serves).
    boots: &'a [BootSegment],
    /// Index in `boots` of each job rank's segment (members only).
    boot_of: &'a [usize],
    /// The hub's address, when the collectives go through one.
    hub: Option<&'a str>,
    /// The supervisor is a node agent: what it sees goes to the hub, what other nodes saw
    /// comes from it.
    agent: Option<&'a AgentLink>,
}

type Outcome = (Vec<RankStatus>, Option<JobFailure>, Vec<RankOutput>);

/// Copies the collective each rank started here is blocked in (what it published in its
/// node's roster) into the rosters of the other nodes — those this supervisor serves, and
/// through the hub the others — when it changed since the last copy (`published`, by
/// position in `ranks.members`): a process blocked in a collective that waits for a
/// process of another node, blocked in turn in a collective that waits for it, is then
/// seen by both, and both fail with `CollectiveDeadlock` as on one node.
fn mirror_waits(ranks: &Ranks<'_>, published: &mut [u64]) {
    if ranks.boots.len() < 2 && ranks.agent.is_none() {
        return;
    }
    for (i, &rank) in ranks.members.iter().enumerate() {
        let own = ranks.boot_of[rank];
        let word = ranks.boots[own].waiting_of(rank);
        if word == published[i] {
            continue;
        }
        published[i] = word;
        for (b, boot) in ranks.boots.iter().enumerate() {
            if b != own {
                boot.mirror_waiting(rank, word);
            }
        }
        if let Some(agent) = ranks.agent {
            // A hub that is gone ends the job through `news`.
            let _ = agent.waiting(rank, word);
        }
    }
}

/// Starts `ranks.members`, watches them until every one has ended, and collects their
/// output: the common part of a launcher and of a node agent.
fn supervise(spec: &LaunchSpec, job: &str, ranks: &Ranks<'_>) -> Result<Outcome> {
    let start = Instant::now();
    let mut running: Vec<(usize, Running)> = Vec::with_capacity(ranks.members.len());
    let (pipe_done, pipe_results) = mpsc::channel();
    let mut open_pipes = 0;
    let names_an_address = [address::ENV_NET_ADDR, address::ENV_IFACE]
        .iter()
        .any(|k| std::env::var_os(k).is_some() || spec.env.iter().any(|(e, _)| e == k));
    for &rank in ranks.members {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env(local::ENV_JOB, job)
            .env(local::ENV_RANK, rank.to_string())
            .env(local::ENV_SIZE, spec.ranks.to_string())
            .env(local::ENV_BOOT, ranks.boots[ranks.boot_of[rank]].name())
            .env(local::ENV_NODES, spec.nodes.to_string())
            .stdin(if rank == 0 && spec.output != Output::Capture {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        if let Some(hub) = ranks.hub {
            cmd.env(hub::ENV_HUB, hub);
        }
        if ranks.boots.len() > 1 && !names_an_address {
            // Virtual nodes started here share this namespace: they meet on the loopback.
            cmd.env(address::ENV_NET_ADDR, "127.0.0.1");
        }
        if spec.output != Output::Inherit {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        die_with_launcher(&mut cmd);
        match cmd.spawn() {
            Ok(mut child) => {
                if spec.output != Output::Inherit {
                    let out = child.stdout.take().expect("piped stdout");
                    let err = child.stderr.take().expect("piped stderr");
                    forward(rank, out, Pipe::Stdout, spec.output, pipe_done.clone());
                    forward(rank, err, Pipe::Stderr, spec.output, pipe_done.clone());
                    open_pipes += 2;
                }
                running.push((
                    rank,
                    Running {
                        child,
                        status: None,
                    },
                ));
            }
            Err(e) => {
                let mut started: Vec<Running> = running.into_iter().map(|(_, r)| r).collect();
                return Err(kill_started(
                    &mut started,
                    format!("cannot start rank {rank} ({}): {e}", spec.program.display()),
                ));
            }
        }
    }

    let mut failure: Option<JobFailure> = None;
    // The job ends for a timeout (here or, for an agent, at the head): waiting ranks are
    // asked for their hang reports before they are signalled.
    let mut report = false;
    let mut term_at: Option<Instant> = None;
    let mut kill_at: Option<Instant> = None;
    let mut boot_unlinked = vec![false; ranks.boots.len()];
    let mut announced = false;
    let mark_exited = |rank: usize| ranks.boots.iter().for_each(|b| b.mark_exited(rank));
    // The collective each rank started here last published it is blocked in, as copied
    // to the other nodes' rosters.
    let mut published = vec![0u64; ranks.members.len()];
    loop {
        let mut alive = 0;
        for (rank, r) in running.iter_mut() {
            let rank = *rank;
            if r.status.is_some() {
                continue;
            }
            let st = match r.child.try_wait() {
                Ok(Some(st)) => RankStatus::from_exit(st),
                Ok(None) => {
                    alive += 1;
                    continue;
                }
                // Cannot happen for our own child; count it as a failed rank.
                Err(_) => RankStatus::Exited(-1),
            };
            r.status = Some(st);
            if st.success() {
                // Peers that wait for this rank in a collective it never entered give up,
                // on every node.
                mark_exited(rank);
                if let Some(agent) = ranks.agent {
                    let _ = agent.exited(rank);
                }
            }
            if !st.success() && failure.is_none() {
                if let Some(agent) = ranks.agent {
                    let _ = agent.failed(RankFailure {
                        rank,
                        pid: r.child.id(),
                        signalled: matches!(st, RankStatus::Signaled(_)),
                        code: match st {
                            RankStatus::Exited(c) | RankStatus::Signaled(c) => c,
                        },
                    });
                }
                failure = Some(JobFailure::Rank {
                    rank,
                    pid: r.child.id(),
                    status: st,
                });
            }
        }
        if alive == 0 {
            break;
        }
        for (boot, unlinked) in ranks.boots.iter().zip(&mut boot_unlinked) {
            if !*unlinked && boot.all_attached() {
                boot.unlink();
                *unlinked = true;
            }
        }
        if let Some(agent) = ranks.agent {
            match agent.news() {
                Ok(news) => {
                    for n in news {
                        match n {
                            AgentNews::Exited(rank) => mark_exited(rank),
                            AgentNews::Waiting { rank, word } => {
                                // Our own ranks write their records themselves.
                                if !ranks.members.contains(&rank) {
                                    ranks
                                        .boots
                                        .iter()
                                        .for_each(|b| b.mirror_waiting(rank, word));
                                }
                            }
                            AgentNews::Abort { report: r } => {
                                failure.get_or_insert(JobFailure::Aborted);
                                report |= r;
                            }
                        }
                    }
                }
                // The head is gone: nobody can finish this job.
                Err(_) => {
                    failure.get_or_insert(JobFailure::Interrupted);
                }
            }
        }
        mirror_waits(ranks, &mut published);
        if failure.is_none() {
            failure = stopped_from_outside(spec, start);
        }
        match (&failure, kill_at) {
            (Some(f), None) => {
                // A node agent says nothing: the head names the failure, once.
                if ranks.agent.is_none() {
                    tell(format_args!("{}: {f}; terminating the job", spec.name));
                }
                announced = true;
                report |= matches!(f, JobFailure::Timeout(_));
                let grace = if report {
                    ranks.boots.iter().for_each(BootSegment::abort_reporting);
                    REPORT_GRACE
                } else {
                    ranks.boots.iter().for_each(BootSegment::abort);
                    Duration::ZERO
                };
                term_at = Some(Instant::now() + grace);
                kill_at = Some(Instant::now() + grace + TERM_GRACE);
            }
            (Some(_), Some(at)) if Instant::now() >= at => {
                let mut all: Vec<&mut Running> = running.iter_mut().map(|(_, r)| r).collect();
                signal_some(&mut all, rustix::process::Signal::KILL);
            }
            _ => {}
        }
        if term_at.is_some_and(|t| Instant::now() >= t) {
            term_at = None;
            let mut all: Vec<&mut Running> = running.iter_mut().map(|(_, r)| r).collect();
            signal_some(&mut all, rustix::process::Signal::TERM);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    // The last ranks may have failed in the very check that found nobody alive.
    if let (Some(f), false, None) = (&failure, announced, ranks.agent) {
        tell(format_args!("{}: {f}", spec.name));
    }

    let mut output = vec![RankOutput::default(); if open_pipes > 0 { spec.ranks } else { 0 }];
    let drain_until = Instant::now() + OUTPUT_DRAIN;
    while open_pipes > 0 {
        let left = drain_until.saturating_duration_since(Instant::now());
        match pipe_results.recv_timeout(left) {
            Ok((rank, is_stderr, bytes)) => {
                let o: &mut RankOutput = &mut output[rank];
                if is_stderr {
                    o.stderr = bytes;
                } else {
                    o.stdout = bytes;
                }
                open_pipes -= 1;
            }
            Err(_) => break,
        }
    }
    let mut statuses = vec![RankStatus::Exited(0); spec.ranks];
    for (rank, r) in &running {
        statuses[*rank] = r.status.unwrap_or(RankStatus::Exited(-1));
    }
    Ok((statuses, failure, output))
}

/// Runs the ranks of node `node` of job `job` (as `osrun`'s agent on that node): creates the
/// node's boot segment, starts the node's ranks with the hub `hub` for their collectives,
/// relays their clean exits and failures to the hub and the other nodes' to the node's
/// roster, aborts when the hub says so, and removes what the job left in this node's
/// /dev/shm. The report's statuses are meaningful for this node's ranks only.
pub fn run_node(spec: &LaunchSpec, job: &str, node: usize, hub: &str) -> Result<JobReport> {
    let node_of = local::virtual_nodes(spec.ranks, spec.nodes);
    if node >= spec.nodes || !node_of.contains(&node) {
        return Err(Error::Launch(format!(
            "node {node} holds no rank of a job of {} ranks over {} nodes",
            spec.ranks, spec.nodes
        )));
    }
    sweep_dead_jobs();
    let start = Instant::now();
    let agent = AgentLink::connect(hub, node)?;
    let live = liveness::create(job)?;
    let members: Vec<usize> = (0..spec.ranks).filter(|&r| node_of[r] == node).collect();
    let boot = match BootSegment::for_node(job, spec.ranks, node, members.len()) {
        Ok(b) => b,
        Err(e) => {
            drop(live);
            sweep_job(job);
            return Err(e);
        }
    };
    let boots = [boot];
    let outcome = supervise(
        spec,
        job,
        &Ranks {
            members: &members,
            boots: &boots,
            boot_of: &vec![0; spec.ranks],
            hub: Some(hub),
            agent: Some(&agent),
        },
    );
    drop(boots);
    drop(live);
    let swept_segments = sweep_job(job);
    let (statuses, failure, output) = outcome?;
    Ok(JobReport {
        job_id: job.to_owned(),
        statuses,
        failure,
        output,
        swept_segments,
        elapsed: start.elapsed(),
    })
}

/// The head of a job whose nodes' ranks node agents start: it runs the hub, starts one agent
/// per node through the wrapper, and watches them. A rank failure an agent reports (or an
/// agent that fails) aborts every node; agents that do not end within the grace period are
/// killed, and their ranks die with them.
fn launch_with_agents(spec: &LaunchSpec, agents: &NodeAgents) -> Result<JobReport> {
    if spec.output == Output::Capture {
        return Err(Error::Launch(
            "node agents cannot capture the ranks' output".into(),
        ));
    }
    let start = Instant::now();
    let job = local::new_job_id();
    let hub = Hub::start_unix(&std::env::temp_dir(), &job)?;
    let nodes = spec.nodes.clamp(1, spec.ranks);
    let mut running: Vec<Running> = Vec::with_capacity(nodes);
    for node in 0..nodes {
        let mut cmd = Command::new(&agents.wrapper);
        cmd.arg(node.to_string())
            .arg(&agents.agent)
            .args([
                "--agent-node",
                &node.to_string(),
                "--hub",
                hub.addr(),
                "--job",
                &job,
            ])
            .args(["-n", &spec.ranks.to_string(), "--nodes", &nodes.to_string()])
            .args(["--max-ranks", &spec.max_ranks.to_string()])
            .args(if spec.output == Output::Prefixed {
                &["--prefix"][..]
            } else {
                &[]
            })
            .arg("--")
            .arg(&spec.program)
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        die_with_launcher(&mut cmd);
        match cmd.spawn() {
            Ok(child) => running.push(Running {
                child,
                status: None,
            }),
            Err(e) => {
                return Err(kill_started(
                    &mut running,
                    format!(
                        "cannot start the agent of node {node} ({}): {e}",
                        agents.wrapper.display()
                    ),
                ));
            }
        }
    }
    let mut failure: Option<JobFailure> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let mut alive = 0;
        for (node, r) in running.iter_mut().enumerate() {
            if r.status.is_some() {
                continue;
            }
            match r.child.try_wait() {
                Ok(None) => alive += 1,
                Ok(Some(st)) => {
                    let st = RankStatus::from_exit(st);
                    r.status = Some(st);
                    if !st.success() && failure.is_none() {
                        // A rank's failure the agent reported names the rank; else the
                        // agent itself failed (its wrapper, or it was killed).
                        failure = Some(
                            hub.failure()
                                .map(JobFailure::from)
                                .unwrap_or(JobFailure::Node { node, status: st }),
                        );
                    }
                }
                Err(_) => r.status = Some(RankStatus::Exited(-1)),
            }
        }
        if alive == 0 {
            break;
        }
        if failure.is_none() {
            failure = hub.failure().map(JobFailure::from);
        }
        if failure.is_none() {
            failure = stopped_from_outside(spec, start);
        }
        match (&failure, kill_at) {
            (Some(f), None) => {
                tell(format_args!("{}: {f}; terminating the job", spec.name));
                let report = matches!(f, JobFailure::Timeout(_));
                hub.abort(report);
                // Agents end their ranks within their own grace periods.
                kill_at = Some(Instant::now() + REPORT_GRACE + 2 * TERM_GRACE);
            }
            (Some(_), Some(at)) if Instant::now() >= at => {
                signal_all(&mut running, rustix::process::Signal::KILL);
            }
            _ => {}
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    let exited = hub.exited_ranks();
    let mut statuses = vec![RankStatus::Exited(-1); spec.ranks];
    for r in exited.into_iter().filter(|&r| r < spec.ranks) {
        statuses[r] = RankStatus::Exited(0);
    }
    if let Some(JobFailure::Rank { rank, status, .. }) = &failure {
        statuses[*rank] = *status;
    }
    Ok(JobReport {
        job_id: job,
        statuses,
        failure,
        output: Vec::new(),
        swept_segments: 0,
        elapsed: start.elapsed(),
    })
}

impl From<RankFailure> for JobFailure {
    fn from(f: RankFailure) -> JobFailure {
        JobFailure::Rank {
            rank: f.rank,
            pid: f.pid,
            status: if f.signalled {
                RankStatus::Signaled(f.code)
            } else {
                RankStatus::Exited(f.code)
            },
        }
    }
}
