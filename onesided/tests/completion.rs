//! Completion at the target of operations deferred behind pending synchronizations
//! (MPI-4.1 §12.5): an accumulate issued behind a pending `ifence`, `istart` or `ilock` is
//! applied at the target before the call that closes its epoch completes — and before the
//! request of a remote-completing `rraccumulate` does — whatever route it takes (on windows
//! over ordinary memory: the target's request ring while the target waits in the library,
//! or cross-memory attach); `free` right after the closing call loses nothing.
//!
//! Every round counts: each rank adds 1 to its right neighbour's counter behind a pending
//! synchronization, closes the epoch, and (after a barrier that the closing call must have
//! made unnecessary for visibility) reads its own counter, which must equal the rounds so
//! far. A stale read is an update not yet applied; a final value short of the rounds is a
//! lost one.

use std::time::Duration;

mod common;

use common::{Fixture, Kind};
use onesided::{testing, Assert, Comm, Group, LockType, Op};

/// Rounds per form, kind and job size.
const ROUNDS: u64 = 200;

/// The synchronization the deferred accumulate hides behind.
#[derive(Debug, Clone, Copy)]
enum Form {
    /// `ifence` left pending, accumulate, closing `ifence().wait()`.
    Fence,
    /// `istart` before the target posted, accumulate, `icomplete`; the target `wait`s.
    Pscw,
    /// `ilock` of a target that holds its own lock, accumulate, `iunlock().wait()`.
    Lock,
    /// As `Lock`, with `rraccumulate` whose request must complete at the target.
    RemoteCompleting,
    /// As `Lock` on a fresh window each round, freed right after `iunlock().wait()`.
    LockThenFree,
}

const FORMS: [Form; 5] = [
    Form::Fence,
    Form::Pscw,
    Form::Lock,
    Form::RemoteCompleting,
    Form::LockThenFree,
];

/// This rank's counter after round `r` of `form` (rounds count from 1).
fn expected(w: &Comm, form: Form, r: u64) -> u64 {
    match form {
        Form::Pscw => {
            let (n, me) = (w.size() as u64, w.rank() as u64);
            (1..=r).filter(|k| k % n == me).count() as u64 * (n - 1)
        }
        _ => r,
    }
}

/// The value of this rank's counter after `rounds` rounds.
fn read_counter(f: &Fixture<u64>) -> onesided::Result<u64> {
    let mut got = [0u64];
    f.read_local(0, &mut got)?;
    Ok(got[0])
}

/// One round of `form` on `f`: adds 1 to the right neighbour's counter.
fn round(w: &Comm, f: &Fixture<u64>, form: Form, round_no: u64) -> onesided::Result<()> {
    let right = (w.rank() + 1) % w.size();
    let win = &f.win;
    match form {
        Form::Fence => {
            // Pending until every rank entered it: the accumulate is queued behind it.
            drop(win.ifence(Assert::NONE)?);
            win.accumulate(&[1], right, f.disp(right, 0), Op::Sum)?;
            win.ifence(Assert::NONE)?.wait()?;
        }
        Form::Pscw => {
            // One target per round, every other rank its origin: the origins' `istart` is
            // pending until the target posts, after a barrier they wait in.
            let n = w.size();
            let target = round_no as usize % n;
            if w.rank() == target {
                let origins = Group::new((0..n).filter(|&r| r != target))?;
                w.barrier()?;
                win.post(&origins, Assert::NONE)?;
                win.wait()?;
            } else {
                drop(win.istart(&Group::new([target])?, Assert::NONE)?);
                win.accumulate(&[1], target, f.disp(target, 0), Op::Sum)?;
                let closing = win.icomplete()?;
                w.barrier()?;
                closing.wait()?;
            }
        }
        Form::Lock | Form::RemoteCompleting | Form::LockThenFree => {
            let me = w.rank();
            // Each rank holds its own lock, so the left neighbour's `ilock` is pending.
            win.lock(LockType::Exclusive, me, Assert::NONE)?;
            w.barrier()?;
            drop(win.ilock(LockType::Exclusive, right, Assert::NONE)?);
            let remote = if matches!(form, Form::RemoteCompleting) {
                Some(win.rraccumulate(&[1], right, f.disp(right, 0), Op::Sum)?)
            } else {
                win.accumulate(&[1], right, f.disp(right, 0), Op::Sum)?;
                None
            };
            win.unlock(me)?;
            if let Some(r) = remote {
                // Complete at the target: visible once the target synchronizes with us.
                r.wait()?;
                w.barrier()?;
                let seen = read_counter(f)?;
                w.barrier()?;
                win.iunlock(right)?.wait()?;
                return check_seen(seen);
            }
            win.iunlock(right)?.wait()?;
        }
    }
    Ok(())
}

thread_local! {
    /// Rounds whose read was short, and what the current round's read must reach.
    static STALE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static EXPECTED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn check_seen(seen: u64) -> onesided::Result<()> {
    let expected = EXPECTED.with(|e| e.get());
    if seen < expected {
        STALE.with(|s| s.set(s.get() + 1));
    }
    Ok(())
}

/// Runs every form on every window over ordinary memory; panics with the counts of stale
/// and lost updates unless both are zero.
fn every_form(w: &Comm) -> onesided::Result<()> {
    let mut failures = Vec::new();
    for kind in [Kind::CreateVec, Kind::DynamicVec] {
        for form in FORMS {
            STALE.with(|s| s.set(0));
            if matches!(form, Form::LockThenFree) {
                let mut lost = 0;
                for _ in 0..ROUNDS {
                    let f = Fixture::<u64>::new(w, kind, 1)?;
                    EXPECTED.with(|e| e.set(1));
                    round(w, &f, form, 1)?;
                    // `create`'s buffer and a dynamic window's attached region come back.
                    let buffers = f.win.free()?;
                    let value = buffers
                        .into_iter()
                        .next()
                        .and_then(|b| b.into_vec())
                        .map_or(0, |v| v[0]);
                    if value != 1 {
                        lost += 1;
                    }
                    w.barrier()?;
                }
                if lost > 0 {
                    failures.push(format!("{kind:?} {form:?}: lost in {lost} of {ROUNDS}"));
                }
                continue;
            }
            let f = Fixture::<u64>::new(w, kind, 1)?;
            if matches!(form, Form::Fence) {
                f.win.fence(Assert::NOPRECEDE)?;
            }
            for r in 1..=ROUNDS {
                EXPECTED.with(|e| e.set(expected(w, form, r)));
                round(w, &f, form, r)?;
                if !matches!(form, Form::RemoteCompleting) {
                    // The closing call completed the epoch everywhere (fence) or at this
                    // rank's origin (PSCW, lock): after a barrier the update is there.
                    w.barrier()?;
                    check_seen(read_counter(&f)?)?;
                    w.barrier()?;
                }
            }
            if matches!(form, Form::Fence) {
                f.win.fence(Assert::NOSUCCEED)?;
            }
            w.barrier()?;
            let final_value = read_counter(&f)?;
            let stale = STALE.with(|s| s.get());
            if stale > 0 || final_value != expected(w, form, ROUNDS) {
                failures.push(format!(
                    "{kind:?} {form:?}: stale in {stale} of {ROUNDS} rounds, final {final_value}"
                ));
            }
            f.free()?;
        }
    }
    assert!(
        failures.is_empty(),
        "rank {} of {}: {}",
        w.rank(),
        w.size(),
        failures.join("; ")
    );
    Ok(())
}

/// Deferred accumulates are complete at the target when the closing call (and a
/// remote-completing request) completes, at 2 ranks.
#[test]
fn deferred_updates_are_complete_at_the_target_when_their_epoch_closes_2_ranks() {
    testing::job(2)
        .timeout(Duration::from_secs(120))
        .run(|u| every_form(u.world()))
        .assert_success();
}

/// The same at 3 ranks (oversubscribed: a target is often descheduled while its origins
/// hand it requests).
#[test]
fn deferred_updates_are_complete_at_the_target_when_their_epoch_closes_3_ranks() {
    testing::job(3)
        .timeout(Duration::from_secs(120))
        .run(|u| every_form(u.world()))
        .assert_success();
}
