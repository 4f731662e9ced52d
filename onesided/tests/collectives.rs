//! Mismatched collective calls are errors at every rank, never a hang or a silent pairing;
//! a rank that exits while its peers wait for it — in a collective, or point to point — is
//! an error at those peers, never a wait until the launcher's timeout.
//!
//! The same scenarios run under a host `mpiexec` in `mpi_bootstrap.rs`.

use std::time::Duration;

mod common;

use onesided::{testing, Assert, Error, Window};

/// Windows: `set_info` and `fence` against `free` (see `common::window_collectives_mismatch`).
#[test]
fn mismatched_window_collectives_fail_at_every_rank() {
    testing::job(3)
        .timeout(Duration::from_secs(60))
        .run(|u| common::window_collectives_mismatch(u.world()))
        .assert_success();
}

/// Rank 0 waits in `Comm::barrier`, the others in `fence` of `win` (erroneous).
fn barrier_against_fence(w: &onesided::Comm, win: &Window<u64>) -> onesided::Result<()> {
    if w.rank() == 0 {
        w.barrier()
    } else {
        win.fence(Assert::NONE)
    }
}

/// `Comm::barrier` at rank 0 against `fence` elsewhere wait on different channels: every
/// rank returns an error instead of hanging. The ranks that see the deadlock first (after
/// about a second) report it; one that is left waiting for them once they returned learns
/// that they exited.
#[test]
fn barrier_against_fence_is_an_error_at_every_rank() {
    let report = testing::job(3).timeout(Duration::from_secs(60)).run(|u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 8)?;
        let r = barrier_against_fence(w, &win);
        assert!(
            matches!(
                r,
                Err(Error::CollectiveDeadlock { .. } | Error::PeerExited { .. })
            ),
            "rank {}: {r:?}",
            w.rank()
        );
        println!("rank {}: {}", w.rank(), r.unwrap_err());
        // The communicator is unusable now (its barrier is out of step): leave.
        std::mem::forget(win);
        Ok(())
    });
    report.assert_success();
    let out = report.outputs_for_humans();
    assert!(
        out.contains("waits for this process in `fence`")
            || out.contains("waits for this process in `barrier`"),
        "{out}"
    );
}

/// A rank that exits with status 0 while its peers wait for it in a collective (a window
/// fence, or a communicator barrier): the peers get `PeerExited` naming it, and the job
/// ends (with the peers' failure) within 5 s instead of hanging until the timeout.
#[test]
fn a_rank_exiting_inside_a_collective_ends_the_job() {
    for in_window in [true, false] {
        let report = testing::job(3).timeout(Duration::from_secs(60)).run(|u| {
            let w = u.world();
            let win = Window::<u64>::allocate(w, 8)?;
            w.barrier()?;
            if w.rank() == 1 {
                std::process::exit(0);
            }
            if in_window {
                win.fence(Assert::NONE)
            } else {
                w.barrier()
            }
        });
        if report.statuses.is_empty() {
            continue; // a rank of the other job of this test
        }
        assert!(!report.success(), "the job should fail");
        assert!(
            report.elapsed < Duration::from_secs(5),
            "took {:?}",
            report.elapsed
        );
        let out = report.outputs_for_humans();
        assert!(
            out.contains("rank 1 exited without entering this collective call"),
            "{out}"
        );
    }
}

/// After `barrier` against `fence` failed everywhere (as above), every rank frees the
/// window and leaves. The ranks whose failed fence took a window sequence number free
/// under the next one, and exit; rank 0's `free` takes the number of their fence. Before,
/// that `free` waited forever: peers whose fence had the same number counted as arrived
/// even after they exited. Every rank must be back within a few seconds (an error is fine:
/// the job is erroneous).
#[test]
fn free_after_a_failed_collective_notices_peers_that_left() {
    let report = testing::job(3).timeout(Duration::from_secs(60)).run(|u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 8)?;
        let r = barrier_against_fence(w, &win);
        assert!(r.is_err(), "rank {}: {r:?}", w.rank());
        let started = std::time::Instant::now();
        let freed = win.free();
        println!("rank {}: free gave {:?}", w.rank(), freed.as_ref().err());
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "rank {}: free took {:?}",
            w.rank(),
            started.elapsed()
        );
        Ok(())
    });
    report.assert_success();
}

/// A rank that exits with status 0 while a peer waits on it point to point — for its
/// origin's completion (`iwait`), its post (an `istart` epoch's `icomplete`), a
/// notification (`wait_notify`), or
/// the lock it holds — makes that wait fail with `PeerGone` naming it within a few
/// seconds, as collective waits do. Before, each waited until the launcher's timeout.
#[test]
fn a_rank_exiting_leaves_no_peer_waiting_on_it_point_to_point() {
    for scenario in ["iwait", "istart", "wait_notify", "lock"] {
        let report = testing::job(2).timeout(Duration::from_secs(20)).run(|u| {
            let w = u.world();
            let win = Window::<u64>::allocate(w, 8)?;
            win.set_num_notify(1)?;
            let peer = onesided::Group::new([1 - w.rank()])?;
            if w.rank() == 1 {
                if scenario == "lock" {
                    win.lock(onesided::LockType::Exclusive, 1, Assert::NONE)?;
                }
                w.barrier()?;
                std::process::exit(0);
            }
            w.barrier()?;
            let started = std::time::Instant::now();
            let r = match scenario {
                "iwait" => win
                    .post(&peer, Assert::NONE)
                    .and_then(|()| win.iwait()?.wait()),
                // The opening request completes at once; the epoch waits for the post.
                "istart" => win.istart(&peer, Assert::NONE).and_then(|_| {
                    win.put(&[1], 1, 0)?;
                    win.icomplete()?.wait()
                }),
                "wait_notify" => win.wait_notify(0, 1).and_then(|r| r.wait()),
                _ => win.lock(onesided::LockType::Exclusive, 1, Assert::NONE),
            };
            assert!(
                matches!(r, Err(Error::PeerGone { rank: 1 })),
                "{scenario}: {r:?}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{scenario}: took {:?}",
                started.elapsed()
            );
            println!("{scenario}: {}", r.unwrap_err());
            std::mem::forget(win);
            Ok(())
        });
        if report.statuses.is_empty() {
            continue; // a rank of another job of this test
        }
        report.assert_success();
    }
}
