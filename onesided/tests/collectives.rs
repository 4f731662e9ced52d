//! Mismatched collective calls are errors at every rank, never a hang or a silent pairing;
//! a rank that exits while its peers wait for it in a collective ends the job.
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

/// `Comm::barrier` at rank 0 against `fence` elsewhere wait on different channels: every
/// rank returns an error instead of hanging. The ranks that see the deadlock first (after
/// about a second) report it; one that is left waiting for them once they returned learns
/// that they exited.
#[test]
fn barrier_against_fence_is_an_error_at_every_rank() {
    let report = testing::job(3).timeout(Duration::from_secs(60)).run(|u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 8)?;
        let r = if w.rank() == 0 {
            w.barrier()
        } else {
            win.fence(Assert::NONE)
        };
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
