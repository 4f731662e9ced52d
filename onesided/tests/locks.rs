//! Passive-target locks across processes: mutual exclusion, sharing, and freedom from
//! starvation.

use std::time::{Duration, Instant};

use onesided::{testing, Assert, LockType, Window};

/// Every rank increments counters at every target under an exclusive lock
/// (get, add one, put, unlock): no update may be lost.
#[test]
fn exclusive_lock_counter_has_no_lost_update() {
    for n in [2, 5, 8] {
        testing::run(n, move |u| {
            let w = u.world();
            let n = w.size();
            const ITERS: u64 = 150;
            let win = Window::<u64>::allocate(w, 1)?;
            for i in 0..ITERS {
                for k in 0..n {
                    let t = (w.rank() + k + i as usize) % n;
                    win.lock(LockType::Exclusive, t, Assert::NONE)?;
                    let mut v = [0u64];
                    win.get(&mut v, t, 0)?;
                    win.put(&[v[0] + 1], t, 0)?;
                    win.unlock(t)?;
                }
            }
            w.barrier()?;
            let mut v = [0u64];
            win.local_read(0, &mut v)?;
            assert_eq!(v[0], ITERS * n as u64, "lost updates at rank {}", w.rank());
            win.free()?;
            Ok(())
        });
    }
}

/// Shared locks are shared: every rank holds a shared lock on rank 0 (and a lock_all) while
/// it waits in a barrier for all the others — impossible if they excluded each other.
#[test]
fn shared_locks_and_lock_all_coexist() {
    testing::run(4, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        win.lock(LockType::Shared, 0, Assert::NONE)?;
        w.barrier()?;
        win.unlock(0)?;
        win.lock_all(Assert::NONE)?;
        w.barrier()?;
        win.unlock_all()?;
        // Exclusive locks on different targets are held at the same time (the global word
        // counts exclusive holders; it does not exclude them from each other).
        let me = w.rank();
        win.lock(LockType::Exclusive, me, Assert::NONE)?;
        w.barrier()?;
        win.unlock(me)?;
        // Shared locks on two targets at once, both also shared by a neighbour.
        let other = (me + 1) % w.size();
        win.lock(LockType::Shared, other, Assert::NONE)?;
        win.lock(LockType::Shared, me, Assert::NONE)?;
        w.barrier()?;
        win.unlock(other)?;
        win.unlock(me)?;
        win.free()?;
        Ok(())
    });
}

/// The writer (rank 1) must get the exclusive lock on rank 0 repeatedly while every other
/// rank keeps rank 0 shared-locked with overlapping holds and never lets go on its own:
/// readers stop only when the writer has finished. A writer that starved would time out.
fn writer_progress(reader_uses_lock_all: bool) {
    testing::job(6)
        .timeout(Duration::from_secs(90))
        .run(move |u| {
            let w = u.world();
            let me = w.rank();
            // word 0: writer rounds done; words 1, 2: a pair the writer keeps equal; word 3:
            // readers that have read once.
            let win = Window::<u64>::allocate(w, 4)?;
            w.barrier()?;
            const WRITES: u64 = 30;
            let readers = w.size() as u64 - 2;
            if me == 1 {
                // Let the readers build up a continuous stream first: every reader has
                // read once (a reader on another node may take a while for its first
                // network operation), then a while more.
                loop {
                    win.lock(LockType::Shared, 0, Assert::NONE)?;
                    let started = win.fetch_and_op(0, 0, 3, onesided::Op::NoOp)?;
                    win.unlock(0)?;
                    if started == readers {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(20));
                let mut worst = Duration::ZERO;
                for k in 1..=WRITES {
                    let t0 = Instant::now();
                    win.lock(LockType::Exclusive, 0, Assert::NONE)?;
                    worst = worst.max(t0.elapsed());
                    // Write the pair non-atomically: readers must never see it torn.
                    win.put(&[k], 0, 1)?;
                    win.flush(0)?;
                    std::thread::sleep(Duration::from_micros(100));
                    win.put(&[k], 0, 2)?;
                    win.put(&[k], 0, 0)?;
                    win.unlock(0)?;
                }
                println!("writer: {WRITES} exclusive locks, longest wait {worst:?}");
            } else if me != 0 {
                let mut reads = 0u64;
                loop {
                    let mut v = [0u64; 3];
                    if reader_uses_lock_all {
                        win.lock_all(Assert::NONE)?;
                    } else {
                        win.lock(LockType::Shared, 0, Assert::NONE)?;
                    }
                    win.get(&mut v, 0, 0)?;
                    if reads == 0 {
                        win.accumulate(&[1], 0, 3, onesided::Op::Sum)?;
                    }
                    // Hold the lock a while so that holds of different readers overlap.
                    std::thread::sleep(Duration::from_micros(300));
                    if reader_uses_lock_all {
                        win.unlock_all()?;
                    } else {
                        win.unlock(0)?;
                    }
                    assert_eq!(v[1], v[2], "a reader saw a torn write: {v:?}");
                    reads += 1;
                    if v[0] == WRITES {
                        break;
                    }
                }
                assert!(reads > 1);
            }
            w.barrier()?;
            win.free()?;
            Ok(())
        })
        .assert_success();
}

#[test]
fn writer_progress_under_shared_lockers() {
    writer_progress(false);
}

#[test]
fn writer_progress_under_lock_all_holders() {
    writer_progress(true);
}

/// lock_all and exclusive locks exclude each other through the global word.
#[test]
fn lock_all_excludes_exclusive() {
    testing::run(3, |u| {
        let w = u.world();
        let me = w.rank();
        let win = Window::<u64>::allocate(w, 2)?;
        for round in 1..=40u64 {
            if me == 0 {
                // Exclusive writer of a pair at rank 2.
                win.lock(LockType::Exclusive, 2, Assert::NONE)?;
                win.put(&[round], 2, 0)?;
                win.flush(2)?;
                win.put(&[round], 2, 1)?;
                win.unlock(2)?;
            } else if me == 1 {
                win.lock_all(Assert::NONE)?;
                let mut v = [0u64; 2];
                win.get(&mut v, 2, 0)?;
                win.unlock_all()?;
                assert_eq!(v[0], v[1], "lock_all saw a half-done exclusive epoch");
            }
        }
        w.barrier()?;
        win.free()?;
        Ok(())
    });
}

/// Exclusive locks taken before a window's first lock_all skip the exclusive class on one
/// node (sync::lock): the lock_all waits for them to end, and one process that holds such
/// a lock and then asks for another exclusive lock (through the class, once the lock_all
/// was asked for) is not deadlocked against the lock_all. Rank 0 locks rank 1 (outside the
/// class), rank 1 asks for lock_all, rank 0 then locks rank 2 too, writes both and unlocks
/// both; rank 1's lock_all must see both writes (it was granted after them), on a fresh
/// window each round.
#[test]
fn exclusive_locks_before_the_first_lock_all_exclude_it() {
    testing::job(3)
        .timeout(Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            for round in 1..=5u64 {
                let win = Window::<u64>::allocate(w, 1)?;
                if me == 0 {
                    win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                }
                w.barrier()?;
                if me == 0 {
                    // Rank 1 asks for lock_all meanwhile.
                    std::thread::sleep(Duration::from_millis(30));
                    win.lock(LockType::Exclusive, 2, Assert::NONE)?;
                    win.put(&[round], 2, 0)?;
                    win.put(&[round], 1, 0)?;
                    std::thread::sleep(Duration::from_millis(30));
                    win.unlock(2)?;
                    win.unlock(1)?;
                } else if me == 1 {
                    let asked = Instant::now();
                    win.lock_all(Assert::NONE)?;
                    let mut at = [[0u64]; 2];
                    win.get(&mut at[0], 1, 0)?;
                    win.get(&mut at[1], 2, 0)?;
                    win.unlock_all()?;
                    assert_eq!(
                        at,
                        [[round], [round]],
                        "lock_all was granted inside an exclusive epoch (after {:?})",
                        asked.elapsed()
                    );
                }
                w.barrier()?;
                win.free()?;
            }
            Ok(())
        })
        .assert_success();
}

/// A process's last exclusive unlock parks its membership of the global word (see
/// sync::lock); a lock_all of another process must take it back on its own while the owner
/// sleeps outside the library, not wait for the owner's next call.
#[test]
fn lock_all_takes_back_a_parked_exclusive_membership() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 2)?;
        // A lock_all first: from then on exclusive locks join the class (before it, one
        // node's skip it: `exclusive_locks_before_the_first_lock_all_exclude_it`).
        win.lock_all(Assert::NONE)?;
        win.unlock_all()?;
        w.barrier()?;
        if w.rank() == 0 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            win.put(&[7], 1, 0)?;
            win.unlock(1)?;
        }
        w.barrier()?;
        if w.rank() == 0 {
            // Outside the library: nothing here can release a parked membership.
            std::thread::sleep(Duration::from_millis(1000));
            win.local_write(1, &[1])?;
        } else {
            win.lock_all(Assert::NONE)?;
            let mut awake = [9u64];
            win.get(&mut awake, 0, 1)?;
            let mut put = [0u64];
            win.get(&mut put, 1, 0)?;
            win.unlock_all()?;
            assert_eq!(
                awake[0], 0,
                "lock_all waited for the sleeping exclusive locker"
            );
            assert_eq!(
                put[0], 7,
                "the exclusive epoch's put is visible to lock_all"
            );
        }
        w.barrier()?;
        // The membership is back in the class's hands: exclusive locks work as before.
        win.lock(LockType::Exclusive, 1 - w.rank(), Assert::NONE)?;
        win.unlock(1 - w.rank())?;
        w.barrier()?;
        win.lock_all(Assert::NONE)?;
        win.unlock_all()?;
        win.free()?;
        Ok(())
    });
}

/// A process that takes and releases exclusive locks back to back (its membership of the
/// exclusive class parks and is taken back between epochs, on its own node's words) does
/// not starve another process's lock_all, on one node or across two: 20 lock_all epochs
/// of rank 0 complete while rank 1 (whose class word, at rank 0, is on the other node when
/// there are two) locks itself in a loop, and each sees rank 1's epochs whole.
#[test]
fn lock_all_is_not_starved_by_back_to_back_exclusive_epochs() {
    testing::job(2)
        .timeout(Duration::from_secs(120))
        .run(|u| {
            let w = u.world();
            let win = Window::<u64>::allocate(w, 3)?;
            w.barrier()?;
            if w.rank() == 1 {
                let mut k = 0u64;
                loop {
                    k += 1;
                    win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                    win.put(&[k], 1, 0)?;
                    win.flush(1)?;
                    win.put(&[k], 1, 2)?;
                    let mut stop = [0u64];
                    win.get(&mut stop, 1, 1)?;
                    win.unlock(1)?;
                    if stop[0] == 1 {
                        break;
                    }
                }
            } else {
                for _ in 0..20 {
                    win.lock_all(Assert::NONE)?;
                    let mut v = [0u64; 3];
                    win.get(&mut v, 1, 0)?;
                    win.flush(1)?;
                    win.unlock_all()?;
                    assert_eq!(v[0], v[2], "lock_all saw a half-done exclusive epoch");
                }
                win.lock_all(Assert::NONE)?;
                win.put(&[1], 1, 1)?;
                win.unlock_all()?;
            }
            w.barrier()?;
            win.free()?;
            Ok(())
        })
        .assert_success();
}

/// Nonblocking exclusive epochs pipelined to one target — each lock request issued behind
/// the previous epoch's release, the exclusive-class membership handed from one epoch to
/// the next while the release is in transit — keep lock_all out until each epoch is whole:
/// rank 1 runs epochs of two accumulates on rank 0 (the other node when there are two),
/// up to 8 in flight and never a gap between them, while rank 0's 20 lock_all epochs each
/// see both words equal (and are not starved: a membership handed on regardless of a
/// waiting lock_all would keep it out for ever); at the end both words count every epoch.
/// With and without A_A_A_R.
#[test]
fn lock_all_sees_pipelined_nonblocking_exclusive_epochs_whole() {
    testing::job(2)
        .timeout(Duration::from_secs(120))
        .run(|u| {
            let w = u.world();
            for aaar in [false, true] {
                let info = onesided::WinInfo::new().reorder(onesided::Reorder {
                    access_after_access: aaar,
                    ..onesided::Reorder::NONE
                });
                let win = Window::<u64>::builder(w).info(&info).allocate(3)?;
                w.barrier()?;
                if w.rank() == 1 {
                    let mut pending = Vec::new();
                    let mut epochs = 0u64;
                    loop {
                        for _ in 0..16 {
                            drop(win.ilock(LockType::Exclusive, 0, Assert::NONE)?);
                            win.accumulate(&[1u64], 0, 0, onesided::Op::Sum)?;
                            win.accumulate(&[1u64], 0, 2, onesided::Op::Sum)?;
                            pending.push(win.iunlock(0)?);
                            epochs += 1;
                            if pending.len() >= 8 {
                                let i = onesided::wait_any(&mut pending)?;
                                drop(pending.swap_remove(i));
                            }
                        }
                        // Rank 0 says stop in our own memory: no epoch of ours in between.
                        let mut stop = [0u64];
                        win.local_read(1, &mut stop)?;
                        if stop[0] == 1 {
                            break;
                        }
                    }
                    onesided::wait_all(pending.drain(..))?;
                    w.barrier()?;
                    win.lock(LockType::Shared, 0, Assert::NONE)?;
                    let mut v = [0u64; 3];
                    win.get(&mut v, 0, 0)?;
                    win.unlock(0)?;
                    assert_eq!((v[0], v[2]), (epochs, epochs), "aaar {aaar}");
                } else {
                    // Rank 1's epochs first run alone for a while (memberships handed from
                    // epoch to epoch), then the lock_all epochs come.
                    std::thread::sleep(Duration::from_millis(100));
                    for _ in 0..20 {
                        win.lock_all(Assert::NONE)?;
                        let mut v = [0u64; 3];
                        win.get(&mut v, 0, 0)?;
                        win.flush(0)?;
                        win.unlock_all()?;
                        assert_eq!(v[0], v[2], "aaar {aaar}: lock_all saw half an epoch");
                    }
                    win.lock_all(Assert::NONE)?;
                    win.put(&[1], 1, 1)?;
                    win.unlock_all()?;
                    w.barrier()?;
                }
                w.barrier()?;
                win.free()?;
            }
            Ok(())
        })
        .assert_success();
}

/// NOCHECK locks touch no lock word but still open the epoch.
#[test]
fn nocheck_locks() {
    testing::run(2, |u| {
        let w = u.world();
        let me = w.rank();
        let win = Window::<u64>::allocate(w, 1)?;
        win.lock(LockType::Exclusive, me, Assert::NOCHECK)?;
        win.put(&[7 + me as u64], me, 0)?;
        win.unlock(me)?;
        win.lock_all(Assert::NOCHECK)?;
        let mut v = [0u64];
        win.get(&mut v, me, 0)?;
        assert_eq!(v[0], 7 + me as u64);
        win.unlock_all()?;
        // A regular exclusive lock still works afterwards (no word was left dirty).
        win.lock(LockType::Exclusive, 0, Assert::NONE)?;
        win.unlock(0)?;
        win.free()?;
        Ok(())
    });
}
