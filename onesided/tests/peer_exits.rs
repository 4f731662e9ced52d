//! A peer on the other node ends while a rank waits for it (feature `ofi`): every wait
//! ends within 5 s of the peer's end, whatever the peer's end (status 0, status 3, a panic,
//! SIGKILL) and the path of the wait (atomics over the wire, the default, or through the
//! provider with `ONESIDED_NET_ATOMICS=provider`), and the job leaves nothing in /dev/shm.
//! A peer that exits with status 0 does not end the job: the waiter's call fails with
//! `PeerGone` (or `PeerExited`), as on one node. The other ends take the job down.
//!
//! 2 ranks, one per virtual node. Rank 1 ends; rank 0 waits: in a flush after a large get
//! and after a large put, in an 8-byte get, put (+ flush) and `fetch_and_op`, in a lock rank
//! 1 holds, in a fence, a PSCW epoch and a `wait_notify` rank 1 never serves, in a barrier
//! and in `free`. For the large transfers rank 0 stops rank 1 (SIGSTOP) before it issues
//! them, so that nothing answers, and lets it continue (SIGCONT) into its end; the 8-byte
//! operations (which any thread of a running peer serves at once) it issues once rank 1
//! has ended, before anything told it so.
#![cfg(feature = "net")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use onesided::{testing, Assert, Error, Group, LockType, Op, Window};

mod common;
use common::stop;

/// How a peer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// `exit(0)`: the job goes on; waits for the peer fail.
    Clean,
    /// `exit(3)`.
    Failure,
    Panic,
    /// SIGKILL.
    Kill,
}

/// What rank 0 waits in when rank 1 ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    LargeGet,
    LargePut,
    Get8,
    Put8,
    FetchAndOp,
    Lock,
    Fence,
    Pscw,
    Notification,
    Barrier,
    Free,
}

const WAITS: [Wait; 11] = [
    Wait::LargeGet,
    Wait::LargePut,
    Wait::Get8,
    Wait::Put8,
    Wait::FetchAndOp,
    Wait::Lock,
    Wait::Fence,
    Wait::Pscw,
    Wait::Notification,
    Wait::Barrier,
    Wait::Free,
];

impl Wait {
    /// Large transfers: rank 0 stops rank 1 before it issues them, so that they are in
    /// flight when rank 1 ends (served only after it continues, they take longer than its
    /// end).
    fn in_flight(self) -> bool {
        matches!(self, Wait::LargeGet | Wait::LargePut)
    }

    /// Small operations: served within microseconds by any thread of a running peer, so
    /// rank 0 issues them once rank 1 has ended (before anything told rank 0 of it).
    fn after_the_end(self) -> bool {
        matches!(self, Wait::Get8 | Wait::Put8 | Wait::FetchAndOp)
    }
}

/// Waits until process `pid` has ended (it no longer runs: gone, or a zombie).
fn wait_gone(pid: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match std::fs::read_to_string(format!("/proc/{pid}/status")) {
            Err(_) => return,
            Ok(status)
                if status
                    .lines()
                    .any(|l| l.starts_with("State:") && l.contains('Z')) =>
            {
                return
            }
            Ok(_) => {}
        }
        assert!(std::time::Instant::now() < deadline, "{pid} never ended");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What rank 0 prints when rank 1 served an in-flight transfer before it ended.
const SERVED: &str = "rank 1 served the transfer before its end";

/// Jobs run for one case at most, while rank 1 wins the race of its end against its
/// service of the transfer (its progress thread runs first after SIGCONT).
const ATTEMPTS: usize = 4;

/// Elements (u64) of each rank's window: 8 MiB, a transfer that takes a while.
const LARGE: usize = 1 << 20;

/// Seconds since the epoch, as a rank prints them (the parent compares wall clocks).
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs_f64()
}

fn signal(pid: u64, sig: rustix::process::Signal) {
    let id = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
    rustix::process::kill_process(id, sig).expect("signal the peer");
}

/// Rank 1's end, announced on stdout with the time.
fn end(how: End) -> ! {
    println!("rank 1 ends at {:.6}", now());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    match how {
        End::Clean => std::process::exit(0),
        End::Failure => std::process::exit(3),
        End::Panic => panic!("rank 1 gives up"),
        End::Kill => {
            signal(u64::from(std::process::id()), rustix::process::Signal::KILL);
            unreachable!("SIGKILL returned")
        }
    }
}

/// The file whose existence tells rank 1 to end (data-moving waits).
fn flag_of(job: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("onesided-peer-exit-{job}"))
}

/// Is `e` what a wait for a peer that exited cleanly may say?
fn peer_ended(e: &Error) -> bool {
    matches!(e, Error::PeerGone { .. } | Error::PeerExited { .. })
}

/// One job: rank 1 ends `how` while rank 0 waits in `wait`; atomics through `atomics`.
fn one(how: End, wait: Wait, atomics: &str) {
    let report = testing::job(2)
        .nodes(2)
        .timeout(Duration::from_secs(30))
        .env("ONESIDED_NET_ATOMICS", atomics)
        .run_until(
            ATTEMPTS,
            |r| {
                let _ = std::fs::remove_file(flag_of(&r.job_id));
                !r.stdout_of(0).contains(SERVED)
            },
            move |u| {
                let w = u.world();
                let me = w.rank();
                // Rank 0 creates it when rank 1 is to end (the job's id: both ranks know it).
                let flag_for_ranks = flag_of(w.job_id());
                let win = Window::<u64>::allocate(w, LARGE)?;
                win.set_num_notify(1)?;
                let pids = w.allgather(&[std::process::id() as u64])?;
                // Connections up, in both directions.
                win.lock_all(Assert::NONE)?;
                let mut v = [0u64];
                win.get(&mut v, 1 - me, 0)?;
                win.flush(1 - me)?;
                win.unlock_all()?;
                // Rank 1's exclusive lock below must not meet rank 0's lock_all above (rank
                // 0 would wait for it while rank 1 waits in the barrier).
                w.barrier()?;
                if wait == Wait::Lock && me == 1 {
                    win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                }
                w.barrier()?;
                if me == 1 {
                    if wait.in_flight() {
                        // Rank 0 stops us, issues, creates the flag and lets us continue.
                        while !flag_for_ranks.exists() {
                            std::thread::yield_now();
                        }
                    } else if !wait.after_the_end() {
                        std::thread::sleep(Duration::from_millis(300));
                    }
                    end(how);
                }
                let mut big = vec![0u64; LARGE];
                if wait.after_the_end() {
                    wait_gone(pids[1]);
                }
                let started = now();
                let waker = wait.in_flight().then(|| {
                    stop(pids[1]);
                    let (flag, peer) = (flag_for_ranks.clone(), pids[1]);
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(300));
                        std::fs::write(&flag, b"end").expect("write the flag");
                        signal(peer, rustix::process::Signal::CONT);
                    })
                });
                let outcome: onesided::Result<()> = if wait == Wait::Free {
                    win.free().map(drop)
                } else {
                    (|| match wait {
                        Wait::LargeGet => {
                            win.lock(LockType::Shared, 1, Assert::NONE)?;
                            win.get(&mut big, 1, 0)?;
                            win.flush(1)
                        }
                        Wait::LargePut => {
                            win.lock(LockType::Shared, 1, Assert::NONE)?;
                            win.put(&big, 1, 0)?;
                            win.flush(1)
                        }
                        Wait::Get8 => {
                            win.lock(LockType::Shared, 1, Assert::NONE)?;
                            win.get(&mut v, 1, 1)?;
                            win.flush(1)
                        }
                        Wait::Put8 => {
                            win.lock(LockType::Shared, 1, Assert::NONE)?;
                            win.put(&[7], 1, 1)?;
                            win.flush(1)
                        }
                        Wait::FetchAndOp => {
                            win.lock(LockType::Shared, 1, Assert::NONE)?;
                            win.fetch_and_op(1, 1, 1, Op::Sum).map(drop)
                        }
                        Wait::Lock => win.lock(LockType::Exclusive, 1, Assert::NONE),
                        Wait::Fence => win.fence(Assert::NONE),
                        Wait::Pscw => {
                            win.start(&Group::new([1])?, Assert::NONE)?;
                            win.put(&[1], 1, 0)?;
                            win.complete()
                        }
                        Wait::Notification => win.wait_notify(0, 1)?.wait(),
                        Wait::Barrier => w.barrier(),
                        Wait::Free => unreachable!("freed above"),
                    })()
                };
                if let Some(waker) = waker {
                    waker.join().expect("the waker");
                }
                let waited = now() - started;
                match outcome {
                    Err(e) if peer_ended(&e) => {
                        println!("rank 0 waited {waited:.3} s: {e}");
                        Ok(())
                    }
                    Err(e) => panic!("rank 0: {wait:?} failed otherwise after {waited:.3} s: {e}"),
                    // Rank 1's progress thread may run before its main thread after SIGCONT and
                    // serve the whole transfer: a correct completion, the case not reached.
                    Ok(()) if wait.in_flight() && how == End::Clean => {
                        println!("rank 0: {SERVED} after {waited:.3} s");
                        Ok(())
                    }
                    Ok(()) => panic!("rank 0: {wait:?} completed after {waited:.3} s"),
                }
            },
        );
    let ended = now();
    if report.job_id.is_empty() {
        // A rank of another job of this test: that job's parent checks it.
        return;
    }
    let _ = std::fs::remove_file(flag_of(&report.job_id));
    let what = format!("{how:?} end of rank 1 while rank 0 waits in {wait:?} ({atomics})");
    assert!(
        !report.stdout_of(0).contains(SERVED),
        "{what}: rank 1 served the transfer before its end in {ATTEMPTS} attempts\n{}",
        report.outputs_for_humans()
    );
    let out = report.stdout_of(1);
    let at: f64 = out
        .lines()
        .find_map(|l| l.split("rank 1 ends at ").nth(1))
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "{what}: rank 1 never ended\n{}",
                report.outputs_for_humans()
            )
        });
    assert!(
        ended - at < 5.0,
        "{what}: the job ended {:.1} s after the peer\n{}",
        ended - at,
        report.outputs_for_humans()
    );
    if how == End::Clean {
        report.assert_success();
    } else {
        assert!(!report.success(), "{what}: the job succeeded");
    }
    let job = &report.job_id;
    assert!(
        onesided::job_segments(job).is_empty(),
        "{what}: left in /dev/shm: {:?}",
        onesided::job_segments(job)
    );
    println!("{what}: ended {:.2} s after the peer", ended - at);
}

/// Every wait, over the wire and through the provider — where the provider's atomics work
/// between processes: tcp;ofi_rxm, the default (udp;ofi_rxd and shm refuse
/// `ONESIDED_NET_ATOMICS=provider`).
fn matrix(how: End) {
    let provider_atomics =
        std::env::var("ONESIDED_PROVIDER").map_or(true, |p| p.starts_with("tcp"));
    let modes: &[&str] = if provider_atomics {
        &["socket", "provider"]
    } else {
        &["socket"]
    };
    for &atomics in modes {
        for wait in WAITS {
            one(how, wait, atomics);
        }
    }
}

#[test]
fn a_peer_that_exits_cleanly_fails_the_waits_for_it_within_5_s() {
    matrix(End::Clean);
}

#[test]
fn a_peer_that_exits_non_zero_ends_the_job_within_5_s() {
    matrix(End::Failure);
}

#[test]
fn a_peer_that_panics_ends_the_job_within_5_s() {
    matrix(End::Panic);
}

#[test]
fn a_sigkilled_peer_ends_the_job_within_5_s() {
    matrix(End::Kill);
}
