//! `osrun` end to end: exit codes, failure propagation, timeouts, output, and a clean
//! /dev/shm whatever happened.
//!
//! The ranks are this test binary itself: each test launches `osrun -n N <this binary>
//! --exact <the same test>` with `OSRUN_TEST_ROLE` set, and the test function plays the rank
//! when it sees that variable.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use onesided::{alloc_mem, Assert, LockType, Window};

const ROLE: &str = "OSRUN_TEST_ROLE";

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// Runs osrun with this binary as the program, playing `test` with role `role`.
fn osrun(ranks: usize, extra: &[&str], test: &str, role: &str) -> (Output, Duration) {
    osrun_with(ranks, extra, test, role, &[])
}

/// [`osrun`] with `env` set for the job.
fn osrun_with(
    ranks: usize,
    extra: &[&str],
    test: &str,
    role: &str,
    env: &[(&str, &str)],
) -> (Output, Duration) {
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_osrun"))
        .arg("-n")
        .arg(ranks.to_string())
        .args(extra)
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .envs(env.iter().copied())
        .output()
        .expect("run osrun");
    (out, started.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The job id the ranks printed ("job <id>").
fn job_id(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.split("job ").nth(1))
        .map(|s| s.split_whitespace().next().unwrap().to_owned())
        .expect("a rank printed the job id")
}

/// A rank body that leaves segments of every kind in /dev/shm while it runs: a window
/// (unlinked after creation), a dynamic window, and shared-heap memory (kept linked).
fn rank_with_segments() -> onesided::Result<(Window<u64>, Window<u64>)> {
    let u = onesided::init()?;
    let w = u.world();
    if w.rank() == 0 {
        println!("job {} ", w.job_id());
    }
    let a = Window::<u64>::allocate(w, 1024)?;
    let d = Window::<u64>::create_dynamic(w)?;
    d.attach(alloc_mem::<u64>(1024)?)?;
    w.barrier()?;
    Ok((a, d))
}

#[test]
fn all_ranks_succeed() {
    if role().is_some() {
        let (a, d) = rank_with_segments().unwrap();
        let me = a.rank();
        a.lock(LockType::Exclusive, 0, Assert::NONE).unwrap();
        a.unlock(0).unwrap();
        println!("rank {me} done");
        drop(d.free().unwrap());
        a.free().unwrap();
        return;
    }
    let (out, _) = osrun(3, &[], "all_ranks_succeed", "ok");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for r in 0..3 {
        assert!(stdout.contains(&format!("rank {r} done")), "{stdout}");
    }
    assert!(onesided::job_segments(&job_id(&stdout)).is_empty());
}

/// The acceptance scenario: 8 ranks, one SIGKILLed while the others wait in a barrier;
/// the job ends within 5 s, non-zero, naming the rank, with nothing left in /dev/shm.
#[test]
fn sigkilled_rank_takes_the_job_down() {
    if role().is_some() {
        let (_a, _d) = rank_with_segments().unwrap();
        let u = onesided::init().unwrap();
        if u.rank() == 3 {
            std::thread::sleep(Duration::from_millis(100));
            let me = rustix::process::getpid();
            rustix::process::kill_process(me, rustix::process::Signal::KILL).unwrap();
        }
        // Everybody else blocks forever in a barrier rank 3 never reaches.
        u.world().barrier().ok();
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let (out, elapsed) = osrun(8, &[], "sigkilled_rank_takes_the_job_down", "kill");
    let stderr = text(&out.stderr);
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_eq!(out.status.code(), Some(128 + 9), "{stderr}");
    assert!(
        stderr.contains("rank 3") && stderr.contains("SIGKILL"),
        "{stderr}"
    );
    let job = job_id(&text(&out.stdout));
    assert!(
        onesided::job_segments(&job).is_empty(),
        "left behind: {:?}",
        onesided::job_segments(&job)
    );
}

/// The same across two virtual nodes (feature `ofi`: the windows span the nodes, their
/// control words and the other node's memory go through the network): a rank SIGKILLed on
/// node 1 ends the job within 5 s, naming it, with nothing of the job left in /dev/shm.
#[cfg(feature = "ofi")]
#[test]
fn sigkilled_rank_takes_the_job_down_across_nodes() {
    if role().is_some() {
        let (_a, _d) = rank_with_segments().unwrap();
        let u = onesided::init().unwrap();
        assert_eq!(u.world().node_size(), 4, "two virtual nodes of four ranks");
        if u.rank() == 6 {
            std::thread::sleep(Duration::from_millis(100));
            let me = rustix::process::getpid();
            rustix::process::kill_process(me, rustix::process::Signal::KILL).unwrap();
        }
        u.world().barrier().ok();
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let (out, elapsed) = osrun(
        8,
        &["--nodes", "2"],
        "sigkilled_rank_takes_the_job_down_across_nodes",
        "kill",
    );
    let stderr = text(&out.stderr);
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_eq!(out.status.code(), Some(128 + 9), "{stderr}");
    assert!(
        stderr.contains("rank 6") && stderr.contains("SIGKILL"),
        "{stderr}"
    );
    let job = job_id(&text(&out.stdout));
    assert!(
        onesided::job_segments(&job).is_empty(),
        "left behind: {:?}",
        onesided::job_segments(&job)
    );
}

#[test]
fn panicking_rank_fails_the_job() {
    if role().is_some() {
        let (_a, _d) = rank_with_segments().unwrap();
        let u = onesided::init().unwrap();
        if u.rank() == 1 {
            panic!("rank 1 gives up");
        }
        u.world().barrier().ok();
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let (out, elapsed) = osrun(4, &[], "panicking_rank_fails_the_job", "panic");
    let stderr = text(&out.stderr);
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_eq!(out.status.code(), Some(101), "{stderr}");
    assert!(
        stderr.contains("rank 1") && stderr.contains("panic"),
        "{stderr}"
    );
    assert!(onesided::job_segments(&job_id(&text(&out.stdout))).is_empty());
}

/// A launcher whose stderr is a pipe nobody reads any more (`osrun … 2>&1 | head -1`)
/// still ends the job and removes its segments: telling of the failure must not kill it
/// (`eprintln!` panics on a closed pipe, and a launcher dead halfway left the segments of
/// its killed ranks behind).
#[test]
fn a_launcher_with_a_closed_stderr_still_cleans_up() {
    if role().is_some() {
        let (_a, _d) = rank_with_segments().unwrap();
        let u = onesided::init().unwrap();
        if u.rank() == 1 {
            std::process::exit(3);
        }
        u.world().barrier().ok();
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_osrun"))
        .args(["-n", "2"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_launcher_with_a_closed_stderr_still_cleans_up",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "closed")
        .stderr(writer)
        .output()
        .expect("run osrun");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(3));
    let job = job_id(&text(&out.stdout));
    assert!(
        onesided::job_segments(&job).is_empty(),
        "left behind: {:?}",
        onesided::job_segments(&job)
    );
}

#[test]
fn nonzero_exit_is_propagated() {
    if role().is_some() {
        let u = onesided::init().unwrap();
        if u.rank() == 0 {
            println!("job {} ", u.world().job_id());
        }
        u.world().barrier().unwrap();
        if u.rank() == 2 {
            std::process::exit(3);
        }
        u.world().barrier().ok();
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let (out, elapsed) = osrun(3, &[], "nonzero_exit_is_propagated", "exit");
    assert!(elapsed < Duration::from_secs(5));
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("rank 2"));
}

/// A rank that exits with status 0 while the others wait for it in a fence: they fail with
/// an error naming it, and osrun ends the job within 5 s (before: it waited forever, or
/// until --timeout).
#[test]
fn clean_exit_inside_a_collective_ends_the_job() {
    if role().is_some() {
        let u = onesided::init().unwrap();
        let w = u.world();
        let win = Window::<u64>::allocate(w, 8).unwrap();
        w.barrier().unwrap();
        if w.rank() == 1 {
            std::process::exit(0);
        }
        if let Err(e) = win.fence(Assert::NONE) {
            // One write: the two waiting ranks share stderr, and `eprintln!` writes its
            // pieces one by one (they interleaved: "rank rank 02: : fencefence: …").
            use std::io::Write;
            let line = format!("rank {}: {e}\n", w.rank());
            let _ = std::io::stderr().write_all(line.as_bytes());
            std::process::exit(4);
        }
        return;
    }
    let (out, elapsed) = osrun(3, &[], "clean_exit_inside_a_collective_ends_the_job", "x");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_eq!(out.status.code(), Some(4));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("fence: rank 1 exited without entering this collective call"),
        "{stderr}"
    );
}

/// Every rank fails at once: the job still fails and says which rank failed.
#[test]
fn all_ranks_failing_together_is_reported() {
    if role().is_some() {
        std::process::exit(7);
    }
    let (out, _) = osrun(2, &[], "all_ranks_failing_together_is_reported", "all-fail");
    assert_eq!(out.status.code(), Some(7));
    assert!(
        text(&out.stderr).contains("exited with status 7"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn timeout_kills_a_hung_job() {
    if role().is_some() {
        let (_a, _d) = rank_with_segments().unwrap();
        // A deadlock: everyone waits for a post that never comes.
        let u = onesided::init().unwrap();
        let win = Window::<u8>::allocate(u.world(), 1).unwrap();
        win.start(&onesided::Group::single(0), Assert::NONE)
            .unwrap();
        return;
    }
    let (out, elapsed) = osrun(2, &["--timeout", "1"], "timeout_kills_a_hung_job", "hang");
    assert_eq!(out.status.code(), Some(124));
    assert!(elapsed < Duration::from_secs(4), "took {elapsed:?}");
    assert!(text(&out.stderr).contains("timed out"));
    assert!(onesided::job_segments(&job_id(&text(&out.stdout))).is_empty());
}

/// A deadlock — ranks 0 and 1 each wait in `start` for the other's post, rank 2 in a
/// barrier neither of them reaches: when the timeout ends the job, every rank first says
/// what it waits for (the hang report), naming the call and the peer.
#[test]
fn timeout_asks_every_rank_for_its_hang_report() {
    if role().is_some() {
        let u = onesided::init().unwrap();
        let w = u.world();
        let win = Window::<u8>::allocate(w, 1).unwrap();
        w.barrier().unwrap();
        match w.rank() {
            me @ (0 | 1) => {
                let other = onesided::Group::single(1 - me);
                let _ = win.start(&other, Assert::NONE);
            }
            _ => {
                let _ = w.barrier();
            }
        }
        std::process::exit(5);
    }
    let test = "timeout_asks_every_rank_for_its_hang_report";
    let (out, elapsed) = osrun(3, &["--timeout", "2"], test, "deadlock");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{stderr}");
    assert!(elapsed < Duration::from_secs(6), "took {elapsed:?}");
    let report = |rank: usize| {
        stderr
            .lines()
            .find(|l| l.starts_with(&format!("[onesided rank {rank}] hang report")))
            .unwrap_or_else(|| panic!("no report from rank {rank}: {stderr}"))
            .to_owned()
    };
    for (me, other) in [(0, 1), (1, 0)] {
        let r = report(me);
        assert!(
            r.contains(&format!(
                "MPI_Win_start waits for rank {other}: its MPI_Win_post"
            )),
            "{r}"
        );
        assert!(
            r.contains("needs 1") && r.contains("the count is 0 now"),
            "{r}"
        );
    }
    let r = report(2);
    assert!(
        r.contains("MPI_Barrier") && r.contains("waits for ranks [0, 1]"),
        "{r}"
    );
}

/// With `ONESIDED_HANG_REPORT`, a wait reports itself once it has lasted that long — the
/// timer alone, as under mpiexec: the job then finishes normally.
#[test]
fn a_long_wait_reports_itself() {
    if role().is_some() {
        let u = onesided::init().unwrap();
        let w = u.world();
        let win = Window::<u8>::allocate(w, 1).unwrap();
        w.barrier().unwrap();
        if w.rank() == 0 {
            let mut req = win.ilock(LockType::Exclusive, 1, Assert::NONE).unwrap();
            // Holds the lock while rank 1 waits for it for over a second.
            while !req.test().unwrap() {
                std::thread::yield_now();
            }
            drop(req);
            w.barrier().unwrap();
            std::thread::sleep(Duration::from_millis(1500));
            win.unlock(1).unwrap();
        } else {
            w.barrier().unwrap();
            win.lock(LockType::Shared, 1, Assert::NONE).unwrap();
            win.unlock(1).unwrap();
        }
        w.barrier().unwrap();
        win.free().unwrap();
        return;
    }
    let (out, _) = osrun_with(
        2,
        &["--timeout", "60"],
        "a_long_wait_reports_itself",
        "long-wait",
        &[("ONESIDED_HANG_REPORT", "0.5")],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let reports: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("hang report"))
        .collect();
    assert_eq!(reports.len(), 1, "{stderr}");
    let r = reports[0];
    assert!(
        r.starts_with("[onesided rank 1] hang report after 0.")
            && r.contains("MPI_Win_lock waits for rank 1: its shared lock"),
        "{r}"
    );
}

/// `ONESIDED_LOG=debug` prints the library's events with the rank: windows created and
/// freed, synchronizations (fence here; lock calls report only when they had to wait).
#[test]
fn onesided_log_prints_events() {
    if role().is_some() {
        let u = onesided::init().unwrap();
        let w = u.world();
        let win = Window::<u64>::allocate(w, 4).unwrap();
        win.lock(LockType::Exclusive, 1 - w.rank(), Assert::NONE)
            .unwrap();
        win.unlock(1 - w.rank()).unwrap();
        win.fence(Assert::NONE).unwrap();
        win.free().unwrap();
        return;
    }
    let (out, _) = osrun_with(
        2,
        &["--timeout", "60"],
        "onesided_log_prints_events",
        "log",
        &[("ONESIDED_LOG", "debug")],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for rank in 0..2 {
        let has = |what: &str| {
            stderr.lines().any(|l| {
                l.starts_with(&format!("[onesided rank {rank}] DEBUG ")) && l.contains(what)
            })
        };
        assert!(has("onesided::window: window created"), "{stderr}");
        assert!(has("flavor=allocate"), "{stderr}");
        assert!(has("onesided::epoch: MPI_Win_fence"), "{stderr}");
        assert!(has("onesided::window: window freed"), "{stderr}");
    }
}

#[test]
fn prefixed_output() {
    if role().is_some() {
        let u = onesided::init().unwrap();
        println!("hello from {}", u.rank());
        eprintln!("warning from {}", u.rank());
        return;
    }
    let (out, _) = osrun(2, &["--prefix"], "prefixed_output", "hello");
    assert!(out.status.success());
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    // libtest writes "test prefixed_output ... " on the same line before the rank's text.
    let has = |out: &str, r: usize, what: &str| {
        out.lines()
            .any(|l| l.starts_with(&format!("[{r}] ")) && l.ends_with(&format!("{what} from {r}")))
    };
    for r in 0..2 {
        assert!(has(&so, r, "hello"), "{so}");
        assert!(has(&se, r, "warning"), "{se}");
    }
}

#[test]
fn bad_invocations() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_osrun"))
            .args(args)
            .output()
            .unwrap()
    };
    assert!(!run(&["-n", "0", "true"]).status.success());
    assert!(!run(&["-n", "2"]).status.success());
    assert!(!run(&["-n", "2", "--timeout", "-1", "true"])
        .status
        .success());
    // Absurd numbers are refused with a message, never a panic (exit status 101).
    let huge_timeout = run(&["-n", "2", "--timeout", "1e300", "true"]);
    assert_eq!(huge_timeout.status.code(), Some(2), "{huge_timeout:?}");
    assert!(text(&huge_timeout.stderr).contains("--timeout"));
    let huge_n = run(&["-n", "18446744073709551615", "true"]);
    assert_eq!(huge_n.status.code(), Some(1), "{huge_n:?}");
    assert!(
        text(&huge_n.stderr).contains("maximum of 256"),
        "{huge_n:?}"
    );
    let over = run(&["-n", "3", "--max-ranks", "2", "true"]);
    assert_eq!(over.status.code(), Some(1), "{over:?}");
    assert!(text(&over.stderr).contains("--max-ranks"));
    assert!(run(&["-n", "3", "--max-ranks", "3", "true"])
        .status
        .success());
    let missing = run(&["-n", "2", "/no/such/program"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("cannot start rank 0"));
    assert!(run(&["-n", "2", "true"]).status.success());
}

/// `kill -9` of osrun: its ranks die with it, and the next start of any job removes the
/// segments the dead job left in /dev/shm (before: `alloc_mem` segments stayed forever).
#[test]
fn killed_launcher_leaves_nothing_after_the_next_start() {
    use std::io::{BufRead, BufReader};
    if role().is_some() {
        let (_a, _d) = rank_with_segments().unwrap();
        let _heap = alloc_mem::<u64>(4096).unwrap();
        onesided::init().unwrap().world().barrier().unwrap();
        println!("ready");
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let test = "killed_launcher_leaves_nothing_after_the_next_start";
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_osrun"))
        .args(["-n", "2", "--timeout", "60"])
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, "killed-launcher")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(launcher.stdout.take().unwrap()).lines();
    let mut job = None;
    let mut ready = 0;
    while ready < 2 {
        let line = lines.next().expect("osrun output").unwrap();
        if line.contains("job ") {
            job = Some(job_id(&line));
        }
        ready += usize::from(line.contains("ready"));
    }
    let job = job.expect("rank 0 printed the job id");
    assert!(!onesided::job_segments(&job).is_empty());
    launcher.kill().unwrap(); // SIGKILL
    launcher.wait().unwrap();
    // The ranks die with their launcher; the next job's start sweeps what they left.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let next = Command::new(env!("CARGO_BIN_EXE_osrun"))
            .args(["-n", "1", "true"])
            .output()
            .unwrap();
        assert!(next.status.success());
        let left = onesided::job_segments(&job);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still in /dev/shm: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
