//! A program built with default features (no MPI library), started by MPICH's hydra
//! (`mpiexec.hydra -n N`), joins its job through the `pmi` bootstrap: one job of N ranks,
//! not N jobs of one.
//!
//! Each test re-executes this test binary under `mpiexec.hydra` with a marker variable
//! set; the ranks then run the test body. `ONESIDED_PMI_LAUNCHER` names another launcher
//! command (`scripts/slurm.sh test` runs them under `srun -O -K --mpi=pmi2`, on one host
//! and on two, with `ONESIDED_PMI_HOSTS=2`). Without the
//! launcher (hydra: Debian's `mpich` package) the launcher tests say so and pass; CI
//! installs both.
#![cfg(not(feature = "mpi"))]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use onesided::{Assert, Error, Window};

const CHILD: &str = "ONESIDED_PMI_TEST_CHILD";
const LAUNCHER: &str = "mpiexec.hydra";

/// The launcher command line: `ONESIDED_PMI_LAUNCHER`, else hydra's.
fn launcher() -> Vec<String> {
    std::env::var("ONESIDED_PMI_LAUNCHER")
        .unwrap_or_else(|_| LAUNCHER.into())
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Whether the launcher is installed.
fn have_hydra() -> bool {
    installed(&launcher()[0])
}

/// Whether `program` answers `--version`.
fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the launcher is missing (then said on stderr, and the test passes unrun).
fn launcher_missing() -> bool {
    if have_hydra() {
        return false;
    }
    eprintln!(
        "{} is not installed (hydra: apt-get install mpich): not run",
        launcher()[0]
    );
    true
}

/// The hosts the launcher spreads a job over: `ONESIDED_PMI_HOSTS` (`scripts/slurm.sh`:
/// 2), else 1.
fn pmi_hosts() -> usize {
    std::env::var("ONESIDED_PMI_HOSTS").map_or(1, |h| h.parse().expect("a count"))
}

/// Runs the test `test` of this binary as the `n` ranks of a hydra job: whether the job
/// succeeded, its stdout and stderr, and how long it took.
fn hydra(test: &str, n: usize) -> (bool, String, String, Duration) {
    hydra_with(test, n, &[])
}

/// [`hydra`] with `env` set for the job.
fn hydra_with(test: &str, n: usize, env: &[(&str, &str)]) -> (bool, String, String, Duration) {
    run_job(&launcher(), test, n, env)
}

/// Runs the test `test` of this binary as the `n` ranks of a job of the launcher command
/// `words`, with `env` set for the job.
fn run_job(
    words: &[impl AsRef<std::ffi::OsStr>],
    test: &str,
    n: usize,
    env: &[(&str, &str)],
) -> (bool, String, String, Duration) {
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..])
        .args(["-n", &n.to_string()])
        .arg(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(env.iter().copied());
    common::run_launcher(cmd, &format!("pmi-{test}"), Duration::from_secs(60))
}

/// Job `job`'s names leave /dev/shm: the processes remove their own at a clean end, and
/// each node's reaper what is left (libfabric shm provider regions, a crash's segments)
/// once the node's processes are gone; it polls every 0.2 s.
fn assert_swept(job: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !onesided::job_segments(job).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        onesided::job_segments(job).is_empty(),
        "left in /dev/shm: {:?}",
        onesided::job_segments(job)
    );
}

/// The job id rank 0 printed ("job ID").
fn job_of(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.split("job ").nth(1))
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("no job id printed:\n{stdout}"))
        .to_owned()
}

/// The ranks' part of the ring tests: one job of `N`, a window whose puts go around it.
pub(crate) fn ring_rank(nodes: usize) {
    const N: usize = 4;
    {
        let u = onesided::init().expect("join the hydra job");
        let w = u.world();
        assert_eq!(w.size(), N, "one job of {N} ranks");
        let mut seen: Vec<usize> = (0..N).map(|r| w.node_of(r).expect("node")).collect();
        seen.dedup();
        assert_eq!(seen.len(), nodes, "nodes of the ranks: {seen:?}");
        let ranks = w.allgather(&[w.rank() as u32]).expect("allgather");
        assert_eq!(ranks, (0..N as u32).collect::<Vec<_>>());
        // A window over the job: every rank puts its rank into the next one's.
        let win = Window::<u64>::allocate(w, 1).expect("allocate");
        win.fence(Assert::NONE).expect("fence");
        win.put(&[w.rank() as u64 + 100], (w.rank() + 1) % N, 0)
            .expect("put");
        win.fence(Assert::NONE).expect("fence");
        let mut got = [0u64];
        win.local_read(0, &mut got).expect("read");
        assert_eq!(got[0], ((w.rank() + N - 1) % N) as u64 + 100);
        win.free().expect("free");
        w.barrier().expect("barrier");
        if w.rank() == 0 {
            println!("job {} of {} ranks: ring ok", w.job_id(), w.size());
        }
    }
}

#[test]
fn hydra_starts_one_job_of_all_its_ranks() {
    const N: usize = 4;
    if std::env::var_os(CHILD).is_some() {
        // The hosts the launcher spreads the job over (`scripts/slurm.sh`: two).
        let hosts = pmi_hosts();
        ring_rank(hosts);
        return;
    }
    if launcher_missing() {
        return;
    }
    let (ok, stdout, stderr, _) = hydra("hydra_starts_one_job_of_all_its_ranks", N);
    assert!(ok, "the hydra job failed:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.matches("1 passed").count(),
        N,
        "not every rank passed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("of 4 ranks: ring ok"), "{stdout}");
    assert_swept(&job_of(&stdout));
}

/// `ONESIDED_NODES=2` splits a hydra job of one host into two virtual nodes, whose ranks
/// reach each other through the network (feature `ofi`).
#[cfg(feature = "ofi")]
#[test]
fn a_hydra_job_over_two_virtual_nodes_crosses_the_network() {
    const TEST: &str = "a_hydra_job_over_two_virtual_nodes_crosses_the_network";
    if std::env::var_os(CHILD).is_some() {
        ring_rank(2);
        assert!(onesided::network().is_some(), "no network endpoint");
        return;
    }
    if launcher_missing() {
        return;
    }
    let (ok, stdout, stderr, _) = hydra_with(TEST, 4, &[("ONESIDED_NODES", "2")]);
    assert!(ok, "the hydra job failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("of 4 ranks: ring ok"), "{stdout}");
    assert_swept(&job_of(&stdout));
}

#[test]
fn a_rank_that_panics_ends_the_hydra_job() {
    if std::env::var_os(CHILD).is_some() {
        let u = onesided::init().expect("join the hydra job");
        let w = u.world();
        if w.rank() == 0 {
            println!("job {}", w.job_id());
        }
        // Segments in /dev/shm the crash leaves behind for the node's reaper.
        let _win = Window::<u64>::allocate(w, 1024).expect("allocate");
        w.barrier().expect("barrier");
        if w.rank() == 1 {
            panic!("rank 1 gives up");
        }
        // The others wait for rank 1 in a collective it never enters: the launcher ends
        // them, or the hub tells them it left.
        let r = w.barrier();
        assert!(r.is_err(), "a barrier without rank 1 completed");
        std::thread::sleep(Duration::from_secs(30));
        return;
    }
    if launcher_missing() {
        return;
    }
    let (ok, stdout, stderr, took) = hydra("a_rank_that_panics_ends_the_hydra_job", 3);
    assert!(!ok, "the job succeeded:\n{stdout}\n{stderr}");
    assert!(
        took < Duration::from_secs(20),
        "the job took {took:?} to end:\n{stdout}\n{stderr}"
    );
    assert_swept(&job_of(&stdout));
}

/// What a rank of another PMI node sees of a peer's clean early exit and of a collective
/// deadlock (issue 53's items 11 and 12, under a PMI launcher): each rank relays to the
/// other nodes' rosters its own exit and the collective it is blocked in. The scenario
/// (`ONESIDED_PMI_SCENARIO`), with one rank per virtual node:
/// - `lock`: rank 1 holds an exclusive lock on itself and exits 0; rank 0's lock request
///   fails with `PeerExited`/`PeerGone` (before: both waited for each other for ever, rank
///   1 in the PMI barrier of its exit);
/// - `fence`: rank 1 exits 0; rank 0's fence fails the same way;
/// - `deadlock`: rank 0 fences while rank 1 waits in a barrier: both fail with
///   `CollectiveDeadlock`.
#[cfg(feature = "ofi")]
#[test]
fn waits_for_an_ended_or_deadlocked_peer_on_another_pmi_node_fail() {
    const TEST: &str = "waits_for_an_ended_or_deadlocked_peer_on_another_pmi_node_fail";
    if std::env::var_os(CHILD).is_some() {
        let scenario = std::env::var("ONESIDED_PMI_SCENARIO").expect("a scenario");
        let u = onesided::init().expect("join the hydra job");
        let w = u.world();
        assert_ne!(
            w.node_of(0).unwrap(),
            w.node_of(1).unwrap(),
            "one rank per node"
        );
        let win = Window::<u64>::allocate(w, 16).expect("allocate");
        if scenario == "lock" && w.rank() == 1 {
            win.lock(onesided::LockType::Exclusive, 1, Assert::NONE)
                .expect("lock");
        }
        w.barrier().expect("barrier");
        let started = Instant::now();
        let outcome = match (scenario.as_str(), w.rank()) {
            ("deadlock", 1) => w.barrier(),
            (_, 1) => {
                std::thread::sleep(Duration::from_millis(200));
                println!("rank 1 exits");
                std::process::exit(0);
            }
            ("lock", _) => win.lock(onesided::LockType::Exclusive, 1, Assert::NONE),
            _ => win.fence(Assert::NONE),
        };
        let waited = started.elapsed();
        match outcome {
            Err(Error::CollectiveDeadlock { .. }) if scenario == "deadlock" => {}
            Err(Error::PeerExited { .. } | Error::PeerGone { .. }) if scenario != "deadlock" => {}
            other => panic!("rank {}: {scenario}: {other:?} after {waited:?}", w.rank()),
        }
        println!(
            "rank {}: {scenario} failed as it should after {waited:?}",
            w.rank()
        );
        // The window's peer is gone or in a failed collective: leave without freeing.
        std::mem::forget(win);
        return;
    }
    if launcher_missing() {
        return;
    }
    // Two virtual nodes of this host, unless the launcher spreads the job over hosts
    // (`scripts/slurm.sh`: `srun -N 2`).
    let hosts = pmi_hosts();
    for scenario in ["lock", "fence", "deadlock"] {
        let mut env = vec![("ONESIDED_PMI_SCENARIO", scenario)];
        if hosts < 2 {
            env.push(("ONESIDED_NODES", "2"));
        }
        let (ok, stdout, stderr, took) = hydra_with(TEST, 2, &env);
        assert!(ok, "{scenario}: the job failed:\n{stdout}\n{stderr}");
        let failed = stdout.matches("failed as it should").count();
        let want = if scenario == "deadlock" { 2 } else { 1 };
        assert_eq!(failed, want, "{scenario}:\n{stdout}\n{stderr}");
        assert!(
            took < Duration::from_secs(10),
            "{scenario}: the job took {took:?}:\n{stdout}\n{stderr}"
        );
        let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("rank ")).collect();
        println!("{scenario}: the job took {took:.1?}: {lines:?}");
    }
}

/// A rank SIGKILLed while the others wait for it (a rank of another node in a flush after
/// a large get of its window, one in a barrier) ends the whole job within 5 s of the kill, and nothing of the
/// job stays in /dev/shm (each node's reaper). Over two virtual nodes here; over the two
/// Slurm hosts of `scripts/slurm.sh`.
#[cfg(feature = "ofi")]
#[test]
fn a_sigkilled_rank_ends_the_pmi_job_within_5_s() {
    const TEST: &str = "a_sigkilled_rank_ends_the_pmi_job_within_5_s";
    if std::env::var_os(CHILD).is_some() {
        let u = onesided::init().expect("join the job");
        let w = u.world();
        if w.rank() == 0 {
            println!("job {}", w.job_id());
        }
        let win = Window::<u64>::allocate(w, 1 << 20).expect("allocate");
        w.barrier().expect("barrier");
        // The last rank is alone on the second node (blocks of ranks per node).
        let victim = w.size() - 1;
        assert_ne!(w.node_of(victim).unwrap(), w.node_of(0).unwrap());
        if w.rank() == victim {
            let at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("a clock after 1970")
                .as_secs_f64();
            println!("the victim was killed at {at:.6}");
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let me = rustix::process::getpid();
            rustix::process::kill_process(me, rustix::process::Signal::KILL).expect("kill");
        }
        if w.rank() == 0 {
            // Reads the victim's window until the job is ended from outside.
            let mut big = vec![0u64; 1 << 20];
            win.lock_all(Assert::NONE).expect("lock_all");
            loop {
                if win
                    .get(&mut big, victim, 0)
                    .and_then(|()| win.flush(victim))
                    .is_err()
                {
                    break;
                }
            }
        }
        let _ = w.barrier();
        std::thread::sleep(Duration::from_secs(30));
        return;
    }
    if launcher_missing() {
        return;
    }
    let hosts = pmi_hosts();
    let env: &[(&str, &str)] = if hosts < 2 {
        &[("ONESIDED_NODES", "2")]
    } else {
        &[]
    };
    let (ok, stdout, stderr, _) = hydra_with(TEST, 3, env);
    let ended = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs_f64();
    assert!(!ok, "the job succeeded:\n{stdout}\n{stderr}");
    let killed: f64 = stdout
        .lines()
        .find_map(|l| l.split("the victim was killed at ").nth(1))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("the victim was not killed:\n{stdout}\n{stderr}"));
    assert!(
        ended - killed < 5.0,
        "the job ended {:.1} s after the kill:\n{stdout}\n{stderr}",
        ended - killed
    );
    println!("the job ended {:.2} s after the kill", ended - killed);
    if hosts < 2 {
        // The hosts' own /dev/shm is `scripts/slurm.sh`'s to check.
        assert_swept(&job_of(&stdout));
    }
}

/// A launcher environment that cannot be joined is an error, never a job of one.
#[test]
fn a_pmi_socket_that_cannot_be_joined_is_an_error() {
    if std::env::var_os(CHILD).is_some() {
        match onesided::init() {
            Err(Error::Bootstrap(msg)) => println!("refused: {msg}"),
            Err(e) => panic!("another error: {e}"),
            Ok(u) => panic!("joined as a job of {}", u.size()),
        }
        return;
    }
    // Descriptor 200 is not open in the child: no launcher behind it.
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "a_pmi_socket_that_cannot_be_joined_is_an_error",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("PMI_FD", "200")
        .env("PMI_RANK", "0")
        .env("PMI_SIZE", "2")
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("refused: PMI"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Open MPI's launcher (a PMIx server; Debian's `openmpi-bin`), for the PMIx tests.
const OPEN_MPI_LAUNCHER: [&str; 3] = ["mpiexec.openmpi", "--allow-run-as-root", "--oversubscribe"];

/// A PMIx launcher (Open MPI's `mpirun`; Slurm's `--mpi=pmix` in `scripts/slurm.sh`) starts
/// one job of all its ranks: they join through the system's PMIx client library.
#[test]
fn a_pmix_launcher_starts_one_job_of_all_its_ranks() {
    const TEST: &str = "a_pmix_launcher_starts_one_job_of_all_its_ranks";
    const N: usize = 4;
    if std::env::var_os(CHILD).is_some() {
        assert!(std::env::var_os("PMI_FD").is_none(), "a PMIx launcher");
        ring_rank(pmi_hosts());
        return;
    }
    if !installed(OPEN_MPI_LAUNCHER[0]) {
        eprintln!(
            "{} is not installed (apt-get install openmpi-bin): not run",
            OPEN_MPI_LAUNCHER[0]
        );
        return;
    }
    // One host, whatever the other tests of the run are told.
    let (ok, stdout, stderr, _) =
        run_job(&OPEN_MPI_LAUNCHER, TEST, N, &[("ONESIDED_PMI_HOSTS", "1")]);
    assert!(ok, "the job failed:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.matches("1 passed").count(),
        N,
        "not every rank passed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("of 4 ranks: ring ok"), "{stdout}");
    assert_swept(&job_of(&stdout));
}

/// A PMIx environment that cannot be joined — no server behind it, or no client library —
/// is an error that says what to do, never a job of one; `ONESIDED_BOOTSTRAP=singleton`
/// runs the process alone all the same.
#[test]
fn a_pmix_environment_that_cannot_be_joined_is_an_error() {
    const TEST: &str = "a_pmix_environment_that_cannot_be_joined_is_an_error";
    if std::env::var_os(CHILD).is_some() {
        match onesided::init() {
            Err(Error::Bootstrap(msg)) => println!("refused: {msg}"),
            Err(e) => panic!("another error: {e}"),
            Ok(u) => println!("joined as a job of {}", u.size()),
        }
        return;
    }
    let run = |env: &[(&str, &str)]| {
        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env_remove("PMI_FD")
            .envs(env.iter().copied())
            .output()
            .expect("run the test binary");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let pmix = [("PMIX_RANK", "1"), ("PMIX_NAMESPACE", "no-such-job")];
    let no_library = run(&[
        pmix[0],
        pmix[1],
        ("ONESIDED_PMIX_LIB", "/nonexistent/libpmix.so.2"),
    ]);
    assert!(
        no_library.contains("refused: PMIx") && no_library.contains("--mpi=pmi2"),
        "{no_library}"
    );
    let no_server = run(&pmix);
    assert!(no_server.contains("refused: PMIx"), "{no_server}");
    let alone = run(&[pmix[0], pmix[1], ("ONESIDED_BOOTSTRAP", "singleton")]);
    assert!(alone.contains("joined as a job of 1"), "{alone}");
}

/// Two hosts that share nothing but a veth pair (feature `ofi`, root): network namespaces
/// with a `/dev/shm` each, hydra's `manual` launcher in the first (its control address on
/// the veth), one hydra proxy per host. Rank 0's hub, the PMI key-value space and every
/// window cross the veth, whose byte counters must show it. The subnet is blackholed in the
/// root namespace while the test runs, so nothing leaves the machine.
#[cfg(feature = "ofi")]
mod two_hosts {
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::{ring_rank, CHILD};

    /// The hosts' /24 (`scripts/netns-pair.sh`).
    const PREFIX: &str = "10.231.8";
    /// Sets the two hosts up and runs commands on them.
    const NETNS_PAIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/netns-pair.sh");
    const TEST: &str = "two_hosts::a_hydra_job_over_two_namespaced_hosts_crosses_the_veth";

    fn sh(cmd: &str) -> String {
        let out = Command::new("sh").args(["-c", cmd]).output().expect("sh");
        assert!(
            out.status.success(),
            "`{cmd}` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The two namespaces, their veth ends and the blackhole route; removed on drop, with
    /// whatever still runs in them.
    struct Hosts {
        ns: [String; 2],
        veth: [String; 2],
        children: Vec<Child>,
    }

    impl Hosts {
        fn new() -> Hosts {
            let id = std::process::id();
            let hosts = Hosts {
                ns: [format!("pmi{id}a"), format!("pmi{id}b")],
                veth: [format!("vp{id}a"), format!("vp{id}b")],
                children: Vec::new(),
            };
            let [a, b] = &hosts.ns;
            let [va, vb] = &hosts.veth;
            sh(&format!("bash {NETNS_PAIR} up {a} {b} {va} {vb} {PREFIX}"));
            hosts
        }

        /// `cmd` (a shell command line) on host `k`, with a `/dev/shm` of the host's own.
        fn spawn_on(&mut self, k: usize, cmd: &str, stdout: Stdio) -> &mut Child {
            let child = Command::new("bash")
                .args([NETNS_PAIR, "run", &self.ns[k], "sh", "-c"])
                .arg(format!("exec {cmd}"))
                .stdout(stdout)
                .stderr(Stdio::inherit())
                .spawn()
                .expect("ip netns exec");
            self.children.push(child);
            self.children.last_mut().expect("just pushed")
        }

        /// Bytes host `k` received on its end of the veth.
        fn received(&self, k: usize) -> u64 {
            sh(&format!(
                "ip netns exec {} cat /sys/class/net/{}/statistics/rx_bytes",
                self.ns[k], self.veth[k]
            ))
            .trim()
            .parse()
            .expect("a byte count")
        }
    }

    impl Drop for Hosts {
        fn drop(&mut self) {
            for c in &mut self.children {
                let _ = c.kill();
                let _ = c.wait();
            }
            let _ = Command::new("bash")
                .args([NETNS_PAIR, "down", &self.ns[0], &self.ns[1], PREFIX])
                .output();
        }
    }

    #[test]
    fn a_hydra_job_over_two_namespaced_hosts_crosses_the_veth() {
        if std::env::var_os(CHILD).is_some() {
            ring_rank(2);
            return;
        }
        if !rustix::process::geteuid().is_root() || !super::have_hydra() {
            eprintln!("needs root and mpiexec.hydra: not run");
            return;
        }
        // libfabric's shm provider reaches only processes of one host.
        if std::env::var("ONESIDED_PROVIDER").is_ok_and(|p| p.starts_with("shm")) {
            eprintln!("the shm provider does not cross hosts: not run");
            return;
        }
        let mut hosts = Hosts::new();
        let exe = std::env::current_exe().expect("test binary");
        let mpiexec = format!(
            "env {CHILD}=1 mpiexec.hydra -launcher manual -iface {} -hosts h1,h2 -n 4 -ppn 2 \
             {} --exact {TEST} --nocapture --test-threads=1",
            hosts.veth[0],
            exe.display()
        );
        let launcher = hosts.spawn_on(0, &mpiexec, Stdio::piped());
        let stdout = launcher.stdout.take().expect("piped");
        // Its lines, as they come: first the proxies' command lines, then the job's output.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line.unwrap_or_default()).is_err() {
                    return;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let next = || {
            rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("mpiexec.hydra went quiet")
        };
        let mut proxies = Vec::new();
        loop {
            let line = next();
            if let Some(cmd) = line.strip_prefix("HYDRA_LAUNCH: ") {
                proxies.push(cmd.to_owned());
            } else if line.starts_with("HYDRA_LAUNCH_END") {
                break;
            }
        }
        assert_eq!(proxies.len(), 2, "{proxies:?}");
        let before = [hosts.received(0), hosts.received(1)];
        for (k, cmd) in proxies.iter().enumerate() {
            // Each proxy names its own end of the veth.
            let cmd = cmd.replace(&hosts.veth[0], &hosts.veth[k]);
            hosts.spawn_on(k, &cmd, Stdio::null());
        }
        let mut output = Vec::new();
        while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            output.push(line);
        }
        let output = output.join("\n");
        let status = hosts.children[0].wait().expect("mpiexec.hydra");
        assert!(status.success(), "the job failed:\n{output}");
        assert!(output.contains("of 4 ranks: ring ok"), "{output}");
        assert_eq!(output.matches("1 passed").count(), 4, "{output}");
        // The hub's collectives and the windows crossed the veth both ways.
        let after = [hosts.received(0), hosts.received(1)];
        for k in 0..2 {
            assert!(
                after[k] - before[k] > 4096,
                "host {k} received {} bytes on the veth",
                after[k] - before[k]
            );
        }
    }
}
