//! A program built with default features (no MPI library), started by MPICH's hydra
//! (`mpiexec.hydra -n N`), joins its job through the `pmi` bootstrap: one job of N ranks,
//! not N jobs of one.
//!
//! Each test re-executes this test binary under `mpiexec.hydra` with a marker variable
//! set; the ranks then run the test body. `ONESIDED_PMI_LAUNCHER` names another launcher
//! command (`scripts/slurm.sh test` runs them under `srun -O -K --mpi=pmi2`). Without the
//! launcher (hydra: Debian's `mpich` package) the launcher tests say so and pass; CI
//! installs both.
#![cfg(not(feature = "mpi"))]

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
    Command::new(&launcher()[0])
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs the test `test` of this binary as the `n` ranks of a hydra job: whether the job
/// succeeded, its stdout and stderr, and how long it took.
fn hydra(test: &str, n: usize) -> (bool, String, String, Duration) {
    hydra_with(test, n, &[])
}

/// [`hydra`] with `env` set for the job.
fn hydra_with(test: &str, n: usize, env: &[(&str, &str)]) -> (bool, String, String, Duration) {
    let out_path = std::env::temp_dir().join(format!("pmi-{test}-{}.out", std::process::id()));
    let err_path = out_path.with_extension("err");
    let words = launcher();
    let mut child = Command::new(&words[0])
        .args(&words[1..])
        .args(["-n", &n.to_string()])
        .arg(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(env.iter().copied())
        // Files, not pipes: nobody reads a pipe while the parent waits.
        .stdout(Stdio::from(
            std::fs::File::create(&out_path).expect("stdout file"),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(&err_path).expect("stderr file"),
        ))
        .spawn()
        .expect("the launcher");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            panic!("{test}: the hydra job timed out:\n{stdout}\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = start.elapsed();
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    (status.success(), stdout, stderr, took)
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
fn ring_rank(nodes: usize) {
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
        ring_rank(1);
        return;
    }
    if !have_hydra() {
        eprintln!(
            "{} is not installed (hydra: apt-get install mpich): not run",
            launcher()[0]
        );
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
    let job = job_of(&stdout);
    assert!(
        onesided::job_segments(&job).is_empty(),
        "left in /dev/shm: {:?}",
        onesided::job_segments(&job)
    );
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
    if !have_hydra() {
        eprintln!(
            "{} is not installed (hydra: apt-get install mpich): not run",
            launcher()[0]
        );
        return;
    }
    let (ok, stdout, stderr, _) = hydra_with(TEST, 4, &[("ONESIDED_NODES", "2")]);
    assert!(ok, "the hydra job failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("of 4 ranks: ring ok"), "{stdout}");
    let job = job_of(&stdout);
    assert!(onesided::job_segments(&job).is_empty());
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
    if !have_hydra() {
        eprintln!(
            "{} is not installed (hydra: apt-get install mpich): not run",
            launcher()[0]
        );
        return;
    }
    let (ok, stdout, stderr, took) = hydra("a_rank_that_panics_ends_the_hydra_job", 3);
    assert!(!ok, "the job succeeded:\n{stdout}\n{stderr}");
    assert!(
        took < Duration::from_secs(20),
        "the job took {took:?} to end:\n{stdout}\n{stderr}"
    );
    // The reaper polls the node's processes every 0.2 s.
    let job = job_of(&stdout);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !onesided::job_segments(&job).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        onesided::job_segments(&job).is_empty(),
        "left in /dev/shm: {:?}",
        onesided::job_segments(&job)
    );
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
