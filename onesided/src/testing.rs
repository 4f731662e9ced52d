//! Multi-rank tests inside `cargo test`, without forking inside the test harness.
//!
//! A test calls [`run`] (or [`job`]) with a body. In the test process, the helper launches
//! the *test binary itself* `n` times, asking libtest to run only the current test
//! (`--exact <name>`); in those child processes the same call sees the `ONESIDED_*`
//! environment and runs the body as one rank. The parent waits, applies a timeout, collects
//! the output, and removes every shared-memory segment of the job.
//!
//! ```
//! // In tests/*.rs, marked #[test]:
//! fn two_ranks_agree() {
//!     onesided::testing::run(2, |u| {
//!         let sum = u.world().allgather(&[1u32])?.iter().sum::<u32>();
//!         assert_eq!(sum, 2);
//!         Ok(())
//!     });
//! }
//! # two_ranks_agree();
//! ```
//!
//! Called from a program's main thread instead — a documentation example, a small program —
//! the helper launches the program itself with its own arguments; every example in these
//! documents runs this way, on 2 ranks:
//!
//! ```
//! onesided::testing::run(2, |u| {
//!     let world = u.world();
//!     let sum = world.allgather(&[world.rank() as u32])?.iter().sum::<u32>();
//!     assert_eq!(sum, 1);
//!     Ok(())
//! });
//! ```

use std::cell::Cell;
use std::ffi::OsString;
use std::io::Write;
use std::time::Duration;

use crate::bootstrap::local::ENV_BOOT;
use crate::error::Result;
use crate::launch::{launch, JobFailure, JobReport, LaunchSpec, Output, RankOutput, RankStatus};

/// The environment variable that runs every multi-rank test over that many virtual nodes
/// (`ONESIDED_TEST_NODES=2 cargo test`).
pub const ENV_TEST_NODES: &str = "ONESIDED_TEST_NODES";
use crate::universe::Universe;

/// The environment variable that runs every multi-rank test under a cluster's launcher
/// instead of `osrun`'s engine: the words of a command line put before `-n N PROGRAM
/// ARGS`, with the launcher's per-rank labels on — `srun -N 2 -O -K --mpi=pmi2 --label`
/// (lines `R: …`) or `mpiexec.hydra -prepend-rank` (lines `[R] …`). The ranks join through
/// the `pmi` bootstrap; the launcher places them on its hosts ([`Job::nodes`] is not
/// applied), and the job's segments are its nodes' reapers' to remove.
pub const ENV_TEST_LAUNCHER: &str = "ONESIDED_TEST_LAUNCHER";

/// Environment variable naming which job of a test a child belongs to.
const ENV_JOB_INDEX: &str = "ONESIDED_TEST_JOB_INDEX";
/// Set for the ranks a launcher of [`ENV_TEST_LAUNCHER`] started (they see no `osrun`
/// boot variable).
const ENV_LAUNCHED_RANK: &str = "ONESIDED_TEST_LAUNCHED_RANK";
/// Default time limit of a test job.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

thread_local! {
    /// Number of jobs this test thread has started (parent) or reached (child).
    static JOBS_SEEN: Cell<usize> = const { Cell::new(0) };
}

/// Builder for a multi-rank test job.
#[derive(Debug, Clone)]
pub struct Job {
    ranks: usize,
    timeout: Duration,
    env: Vec<(OsString, OsString)>,
    /// Virtual nodes (`None`: [`ENV_TEST_NODES`], else one).
    nodes: Option<usize>,
}

/// A job of `ranks` ranks with the default timeout.
pub fn job(ranks: usize) -> Job {
    Job {
        ranks,
        timeout: DEFAULT_TIMEOUT,
        env: Vec::new(),
        nodes: None,
    }
}

/// Runs `body` on `ranks` ranks and panics (failing the test) unless every rank succeeds.
pub fn run<F>(ranks: usize, body: F)
where
    F: FnOnce(&Universe) -> Result<()>,
{
    job(ranks).run(body).assert_success();
}

impl Job {
    /// Fails the job when it runs longer than `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Splits the ranks over `k` virtual nodes (consecutive blocks), whatever
    /// [`ENV_TEST_NODES`] says.
    pub fn nodes(mut self, k: usize) -> Self {
        self.nodes = Some(k);
        self
    }

    /// Sets an environment variable for every rank.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs the job. In the test process this returns the report of the job; in a rank it
    /// runs `body` and exits the process (status 0 on `Ok`, a panic otherwise).
    pub fn run<F>(self, body: F) -> JobReport
    where
        F: FnOnce(&Universe) -> Result<()>,
    {
        self.run_until(1, |_| true, body)
    }

    /// Runs the job up to `attempts` times, until `accept` takes its report: for a test
    /// whose case rests on a race it cannot force (a peer's end against its service of a
    /// transfer). Every attempt is the same job of the test (its ranks run `body`); the last
    /// report is returned, accepted or not. In a rank it runs `body` as [`Job::run`] does.
    ///
    /// ```no_run
    /// // In a #[test]: rerun while rank 0 says the race went the other way.
    /// let report = onesided::testing::job(2).run_until(
    ///     3,
    ///     |r| !r.stdout_of(0).contains("raced"),
    ///     |u| Ok(()),
    /// );
    /// report.assert_success();
    /// ```
    pub fn run_until<F, A>(self, attempts: usize, accept: A, body: F) -> JobReport
    where
        F: FnOnce(&Universe) -> Result<()>,
        A: Fn(&JobReport) -> bool,
    {
        let index = JOBS_SEEN.with(|c| {
            let i = c.get();
            c.set(i + 1);
            i
        });
        if std::env::var_os(ENV_BOOT).is_some() || std::env::var_os(ENV_LAUNCHED_RANK).is_some() {
            let mine = std::env::var(ENV_JOB_INDEX)
                .ok()
                .and_then(|v| v.parse::<usize>().ok());
            if mine == Some(index) {
                run_rank(body);
            }
            // Another job of this test: its ranks are launched separately.
            return JobReport {
                job_id: String::new(),
                statuses: Vec::new(),
                failure: None,
                output: Vec::new(),
                swept_segments: 0,
                elapsed: Duration::ZERO,
            };
        }
        let thread = std::thread::current();
        let exe = std::env::current_exe().expect("path of the test binary");
        let mut spec = LaunchSpec::new(self.ranks, exe);
        let name = match thread.name() {
            // A program's main thread (a documentation example, an example binary): its ranks
            // run the program again, with its arguments.
            Some("main") => {
                spec.args = std::env::args_os().skip(1).collect();
                "main".to_owned()
            }
            Some(test) => {
                spec.args = [
                    "--exact",
                    test,
                    "--nocapture",
                    "--test-threads=1",
                    "--include-ignored",
                ]
                .iter()
                .map(OsString::from)
                .collect();
                test.to_owned()
            }
            None => panic!(
                "onesided::testing must be called from a #[test] function or a program's main thread"
            ),
        };
        if let Some(words) = std::env::var(ENV_TEST_LAUNCHER)
            .ok()
            .map(|l| l.split_whitespace().map(OsString::from).collect::<Vec<_>>())
            .filter(|w| !w.is_empty())
        {
            let mut attempt = 1;
            loop {
                let report = self.run_under(&words, &spec, index);
                if attempt >= attempts || accept(&report) {
                    return report;
                }
                attempt += 1;
            }
        }
        spec.timeout = Some(self.timeout);
        // ONESIDED_TEST_NODES=K: the same tests over K virtual nodes (clamped to the ranks).
        spec.nodes = self
            .nodes
            .or_else(|| std::env::var(ENV_TEST_NODES).ok()?.parse().ok())
            .map_or(1, |k: usize| k.clamp(1, self.ranks));
        spec.output = Output::Capture;
        spec.name = format!("test {name}");
        spec.env = self.env;
        spec.env
            .push((ENV_JOB_INDEX.into(), index.to_string().into()));
        let mut attempt = 1;
        loop {
            let report =
                launch(&spec).unwrap_or_else(|e| panic!("cannot launch the ranks of {name}: {e}"));
            if attempt >= attempts || accept(&report) {
                return report;
            }
            attempt += 1;
        }
    }
}

impl Job {
    /// Runs the ranks of `spec` under the external launcher `words`
    /// ([`ENV_TEST_LAUNCHER`]): its exit status says whether the job succeeded, its
    /// labelled output lines which rank wrote what.
    fn run_under(&self, words: &[OsString], spec: &LaunchSpec, index: usize) -> JobReport {
        use std::process::{Command, Stdio};
        let started = std::time::Instant::now();
        let mut cmd = Command::new(&words[0]);
        cmd.args(&words[1..])
            .arg("-n")
            .arg(self.ranks.to_string())
            .arg(&spec.program)
            .args(&spec.args)
            .env(ENV_LAUNCHED_RANK, "1")
            .env(ENV_JOB_INDEX, index.to_string())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {ENV_TEST_LAUNCHER} {:?}: {e}", words[0]));
        // Both pipes drained by threads, so that a chatty job never blocks on them.
        let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut out = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut out);
                }
                out
            })
        };
        let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<_>));
        let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<_>));
        let mut timed_out = false;
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait for the launcher") {
                break st;
            }
            if started.elapsed() > self.timeout {
                timed_out = true;
                // SIGTERM first: srun and hydra forward it and end their job's processes
                // before they exit; a SIGKILLed srun leaves its step to the daemons.
                if let Some(pid) = i32::try_from(child.id())
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                }
                let grace = std::time::Instant::now();
                while grace.elapsed() < Duration::from_secs(5)
                    && matches!(child.try_wait(), Ok(None))
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                // (A child that exited meanwhile: kill does nothing, wait returns its status.)
                let _ = child.kill();
                break child.wait().expect("wait for the launcher");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut output: Vec<RankOutput> = (0..self.ranks).map(|_| RankOutput::default()).collect();
        for (bytes, to_stderr) in [(stdout, false), (stderr, true)] {
            let bytes = bytes.join().unwrap_or_default();
            for line in bytes.split_inclusive(|&b| b == b'\n') {
                let (rank, text) = labelled(line);
                let r = rank.filter(|&r| r < self.ranks).unwrap_or(0);
                let out = &mut output[r];
                if to_stderr {
                    out.stderr.extend_from_slice(text);
                } else {
                    out.stdout.extend_from_slice(text);
                }
            }
        }
        let st = RankStatus::from_exit(status);
        let failure = if timed_out {
            Some(JobFailure::Timeout(self.timeout))
        } else if st.success() {
            None
        } else {
            // The launcher does not say which rank failed: the first that panicked.
            let rank = (0..self.ranks)
                .find(|&r| String::from_utf8_lossy(&output[r].stderr).contains("panicked"))
                .unwrap_or(0);
            Some(JobFailure::Rank {
                rank,
                pid: child.id(),
                status: st,
            })
        };
        JobReport {
            job_id: format!("under {}", words[0].to_string_lossy()),
            statuses: vec![
                if failure.is_some() {
                    st
                } else {
                    RankStatus::Exited(0)
                };
                self.ranks
            ],
            failure,
            output,
            swept_segments: 0,
            elapsed: started.elapsed(),
        }
    }
}

/// The rank a launcher's label names at the start of `line` (`R: ` from `srun --label`,
/// `[R] ` from hydra's `-prepend-rank`) and the rest of the line; `None` and the whole
/// line when it has no label.
fn labelled(line: &[u8]) -> (Option<usize>, &[u8]) {
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let trimmed = {
        let lead = line.iter().take_while(|&&b| b == b' ').count();
        &line[lead..]
    };
    let rank = |d: &[u8]| std::str::from_utf8(d).ok()?.parse().ok();
    if let Some(rest) = trimmed.strip_prefix(b"[") {
        let n = digits(rest);
        if n > 0 && rest.get(n) == Some(&b']') {
            let text = rest[n + 1..].strip_prefix(b" ").unwrap_or(&rest[n + 1..]);
            return (rank(&rest[..n]), text);
        }
    }
    let n = digits(trimmed);
    if n > 0 && trimmed.get(n) == Some(&b':') {
        let text = trimmed[n + 1..]
            .strip_prefix(b" ")
            .unwrap_or(&trimmed[n + 1..]);
        return (rank(&trimmed[..n]), text);
    }
    (None, line)
}

fn run_rank<F>(body: F) -> !
where
    F: FnOnce(&Universe) -> Result<()>,
{
    let universe = crate::init().unwrap_or_else(|e| panic!("onesided::init failed: {e}"));
    let rank = universe.world().rank();
    if let Err(e) = body(&universe) {
        panic!("rank {rank}: {e}");
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(0)
}

impl JobReport {
    /// Panics with the failure and every rank's output unless the job succeeded.
    pub fn assert_success(&self) {
        if self.success() {
            return;
        }
        panic!(
            "job {} failed: {}\n{}",
            self.job_id,
            self.failure_message()
                .unwrap_or_else(|| "a rank failed".into()),
            self.outputs_for_humans()
        );
    }

    /// Every rank's captured output, labelled, with libtest's own chatter removed.
    pub fn outputs_for_humans(&self) -> String {
        let mut s = String::new();
        for (rank, out) in self.output.iter().enumerate() {
            for (label, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
                let text = String::from_utf8_lossy(bytes);
                let lines: Vec<&str> = text
                    .lines()
                    .filter(|l| {
                        !(l.is_empty()
                            || l.starts_with("running ")
                            || l.starts_with("test result:")
                            || l.starts_with("test ") && l.ends_with(" ... ok"))
                    })
                    .collect();
                if !lines.is_empty() {
                    s.push_str(&format!("--- rank {rank} {label} ---\n"));
                    for l in lines {
                        s.push_str(l);
                        s.push('\n');
                    }
                }
            }
        }
        s
    }

    /// Captured stdout of `rank` as text.
    pub fn stdout_of(&self, rank: usize) -> String {
        self.output
            .get(rank)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Captured stderr of `rank` as text (the library's reports go there).
    pub fn stderr_of(&self, rank: usize) -> String {
        self.output
            .get(rank)
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default()
    }
}

/// Batches of operations this process has carried out for origins as a target, on windows
/// over ordinary memory (requests the origins handed over rather than doing them with
/// cross-memory attach). Tests use it to prove that the path they test ran.
pub fn requests_served() -> u64 {
    crate::transport::ring::served_batches()
}

/// Accumulates this process applied with plain loads and stores (long runs under an
/// exclusive lock, one thread issuing the window's atomics): tests use it to prove that
/// the plain path ran, or that it did not.
pub fn plain_accumulate_runs() -> u64 {
    crate::plain_acc::runs()
}

/// Network operations this process posted (feature `net`) that its endpoint has not seen
/// complete yet: 0 right after a flush that covers them, or when no endpoint is open.
/// Tests use it to prove that a completion point completed what was in flight (the data
/// alone may have arrived by then anyway).
#[cfg(feature = "net")]
pub fn network_operations_in_flight() -> u64 {
    crate::transport::network::in_flight()
}

/// The bytes of the shared-memory segment that holds `win`'s control words on this node
/// (for `allocate` windows also the memory of this node's ranks); `None` when they live in
/// a block of the process-shared heap. Tests check that a node's segment of a window across
/// nodes holds its own ranks' memory only.
pub fn window_segment_bytes(win: &crate::RawWindow) -> Option<usize> {
    match &win.core._segment {
        crate::win::control::ControlMemory::Segment(s) => Some(s.len()),
        crate::win::control::ControlMemory::Block(_) => None,
    }
}

/// A unit test's guard against hanging: aborts the test process when it is still alive
/// `secs` seconds after it was made (a hang then fails the test run instead of stalling
/// it); dropping it disarms it. (The network tests use it: a lost answer hangs.)
#[cfg(all(test, feature = "net"))]
pub(crate) struct Watchdog(std::sync::Arc<std::sync::atomic::AtomicBool>);

#[cfg(all(test, feature = "net"))]
impl Watchdog {
    pub(crate) fn new(what: &'static str, secs: u64) -> Watchdog {
        use std::sync::atomic::Ordering;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            for _ in 0..secs * 10 {
                std::thread::sleep(Duration::from_millis(100));
                // Relaxed: a request to stand down.
                if seen.load(Ordering::Relaxed) {
                    return;
                }
            }
            eprintln!("{what}: no end after {secs} s");
            std::process::abort();
        });
        Watchdog(done)
    }
}

#[cfg(all(test, feature = "net"))]
impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::labelled;

    #[test]
    fn launcher_labels_name_the_rank() {
        assert_eq!(labelled(b"3: hello\n"), (Some(3), &b"hello\n"[..]));
        assert_eq!(labelled(b"  12: x"), (Some(12), &b"x"[..]));
        assert_eq!(
            labelled(b"[1] test a ... ok\n"),
            (Some(1), &b"test a ... ok\n"[..])
        );
        assert_eq!(
            labelled(b"no label: here\n"),
            (None, &b"no label: here\n"[..])
        );
        assert_eq!(labelled(b"[x] y\n"), (None, &b"[x] y\n"[..]));
        assert_eq!(labelled(b"\n"), (None, &b"\n"[..]));
    }
}
