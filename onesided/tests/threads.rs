//! Windows shared by threads (`MPI_THREAD_MULTIPLE`, seed 000 §3): several threads of each
//! rank call RMA and synchronization on one window at once, and no update is lost.

use std::time::Duration;

use onesided::{testing, Assert, Comm, Error, LockType, Op, WinBuffer, Window};

const THREADS: usize = 4;
const ITERS: u64 = 2000;

/// 2 ranks x 4 threads inside one lock_all epoch: every thread puts to its own slots and
/// flushes, and increments one counter with fetch_and_op and another with accumulate, all
/// at the other rank. Afterwards each rank holds both counters at 4 x ITERS and every
/// thread's last put. Once on an allocate window (CPU atomics, direct stores) and once on a
/// window over ordinary memory (cross-memory attach: staged puts, lock stripes).
#[test]
fn threads_hammer_one_window_and_lose_no_update() {
    let report = testing::job(2).timeout(Duration::from_secs(120)).run(|u| {
        let w = u.world();
        let peer = 1 - w.rank();
        // [fetch_and_op counter, accumulate counter, one slot per thread]
        let len = 2 + THREADS;
        let windows = [
            Window::<u64>::allocate(w, len)?,
            Window::<u64>::create(w, WinBuffer::from(vec![0u64; len]))?,
        ];
        for win in &windows {
            win.lock_all(Assert::NONE)?;
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|t| {
                        s.spawn(move || -> onesided::Result<()> {
                            for i in 0..ITERS {
                                win.put(&[i * 10 + t as u64], peer, 2 + t)?;
                                win.flush(peer)?;
                                win.fetch_and_op(1, peer, 0, Op::Sum)?;
                                win.accumulate(&[1], peer, 1, Op::Sum)?;
                            }
                            win.flush_all()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .try_for_each(|h| h.join().expect("thread panicked"))
            })?;
            win.unlock_all()?;
            w.barrier()?;
            let mut got = vec![0u64; len];
            win.local_read(0, &mut got)?;
            let total = THREADS as u64 * ITERS;
            assert_eq!(
                got[..2],
                [total, total],
                "lost updates ({:?})",
                win.flavor()
            );
            for t in 0..THREADS {
                assert_eq!(
                    got[2 + t],
                    (ITERS - 1) * 10 + t as u64,
                    "slot of thread {t}"
                );
            }
        }
        for win in windows {
            win.free()?;
        }
        Ok(())
    });
    report.assert_success();
}

/// 3 ranks x 3 threads: thread t of every rank repeatedly takes an exclusive lock on rank t,
/// reads, increments and writes back one word, and unlocks — lock and unlock calls of one
/// process run concurrently on different targets, and exclusive locks of different
/// processes on the same target exclude each other. Every target ends at 3 x 200.
#[test]
fn threads_lock_different_targets_at_once() {
    const ROUNDS: u64 = 200;
    let report = testing::job(3).timeout(Duration::from_secs(120)).run(|u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        thread_per_target(w, &win, ROUNDS, |target, _| {
            win.lock(LockType::Exclusive, target, Assert::NONE)?;
            let mut v = [0u64];
            win.get(&mut v, target, 0)?;
            win.flush(target)?;
            win.put(&[v[0] + 1], target, 0)?;
            win.unlock(target)
        })?;
        win.free()?;
        Ok(())
    });
    report.assert_success();
}

/// Runs one thread per rank of the job at every rank, thread `target` calling
/// `increment(target, round)` for `rounds` rounds (each adds one to the word at `target`),
/// then checks that this rank's word was incremented by every process's thread every round.
fn thread_per_target(
    w: &Comm,
    win: &Window<u64>,
    rounds: u64,
    increment: impl Fn(usize, u64) -> onesided::Result<()> + Sync,
) -> onesided::Result<()> {
    let n = w.size();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|target| {
                let increment = &increment;
                s.spawn(move || (0..rounds).try_for_each(|round| increment(target, round)))
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("thread panicked"))
    })?;
    w.barrier()?;
    let mut got = [0u64];
    win.local_read(0, &mut got)?;
    assert_eq!(
        got,
        [n as u64 * rounds],
        "an exclusive read-modify-write was lost"
    );
    Ok(())
}

/// The one-node lock and unlock (done whole under the epoch record's lock, no call lock)
/// beside the engine's path in other threads: 3 ranks x 3 threads, thread t of every rank
/// increments a word at rank t under exclusive locks, alternating blocking epochs (the
/// one-node path, undone and retried the general way when another rank holds the lock)
/// with nonblocking ones (`ilock`/`iunlock`, queued in the engine). Every word ends at
/// 3 x ROUNDS, read by every rank under shared locks and under lock_all.
#[test]
fn one_node_locks_and_queued_epochs_of_other_threads_lose_no_update() {
    const ROUNDS: u64 = 300;
    let report = testing::job(3).timeout(Duration::from_secs(60)).run(|u| {
        let w = u.world();
        let n = w.size();
        let win = Window::<u64>::allocate(w, 1)?;
        thread_per_target(w, &win, ROUNDS, |target, round| {
            let mut v = [0u64];
            if round % 2 == 0 {
                win.lock(LockType::Exclusive, target, Assert::NONE)?;
                win.get(&mut v, target, 0)?;
                win.flush(target)?;
                // Held a while: the other threads' attempts meet it.
                std::thread::yield_now();
                win.put(&[v[0] + 1], target, 0)?;
                win.unlock(target)?;
            } else {
                win.ilock(LockType::Exclusive, target, Assert::NONE)?
                    .wait()?;
                win.get(&mut v, target, 0)?;
                win.flush(target)?;
                win.put(&[v[0] + 1], target, 0)?;
                win.iunlock(target)?.wait()?;
            }
            assert!(v[0] < n as u64 * ROUNDS, "word {target} overshot");
            Ok(())
        })?;
        // Shared locks, then lock_all: it waits for every exclusive-class membership to
        // leave, so a membership an undone lock left counted would hang it.
        for target in 0..n {
            win.lock(LockType::Shared, target, Assert::NONE)?;
            let mut v = [0u64];
            win.get(&mut v, target, 0)?;
            win.unlock(target)?;
            assert_eq!(v, [n as u64 * ROUNDS]);
        }
        win.lock_all(Assert::NONE)?;
        let mut v = [0u64];
        win.get(&mut v, (w.rank() + 1) % n, 0)?;
        win.unlock_all()?;
        assert_eq!(v, [n as u64 * ROUNDS]);
        w.barrier()?;
        win.free()?;
        Ok(())
    });
    report.assert_success();
}

/// Epochs belong to the process: a lock taken by one thread is held for every thread, so a
/// second thread locking the same target gets `AlreadyLocked`, and may use the epoch.
#[test]
fn a_lock_taken_by_one_thread_is_the_process_lock() {
    let report = testing::job(2).timeout(Duration::from_secs(60)).run(|u| {
        // Under osrun the universe supports every thread level.
        assert_eq!(u.thread_level(), onesided::ThreadLevel::Multiple);
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        if w.rank() == 0 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            std::thread::scope(|s| {
                s.spawn(|| {
                    assert!(matches!(
                        win.lock(LockType::Shared, 1, Assert::NONE),
                        Err(Error::AlreadyLocked { target: 1 })
                    ));
                    win.put(&[7], 1, 0).expect("inside the process's epoch");
                    win.flush(1).expect("flush from another thread");
                });
            });
            win.unlock(1)?;
        }
        w.barrier()?;
        if w.rank() == 1 {
            let mut got = [0u64];
            win.local_read(0, &mut got)?;
            assert_eq!(got, [7]);
        }
        win.free()?;
        Ok(())
    });
    report.assert_success();
}

/// A blocking call blocks the calling thread only (MPI-4.1 §11.6): while thread T1 of rank
/// 0 waits in `lock(Exclusive, 1)` — rank 1 holds that lock until a barrier — the main
/// thread locks a free target, puts, unlocks, and joins a window collective (`set_info`)
/// that rank 1 enters while still holding the lock. Serial activation of epochs is a rule
/// of one thread's epochs: before, the main thread's lock and `set_info` queued behind
/// T1's pending lock and the job deadlocked.
#[test]
fn a_pending_blocking_lock_of_one_thread_holds_back_no_other_thread() {
    let report = testing::job(2).timeout(Duration::from_secs(30)).run(|u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 4)?;
        let mut info = onesided::WinInfo::new();
        info.set("mpi_accumulate_granularity", "16");
        if w.rank() == 1 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            w.barrier()?; // rank 0's T1 may ask for our lock now
            win.set_info(&info)?;
            w.barrier()?; // rank 0's main thread got through
            win.unlock(1)?;
        } else {
            w.barrier()?;
            std::thread::scope(|s| -> onesided::Result<()> {
                let t1 = s.spawn(|| -> onesided::Result<()> {
                    win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                    win.put(&[5], 1, 0)?;
                    win.unlock(1)
                });
                // Let T1's lock request queue first.
                std::thread::sleep(Duration::from_millis(50));
                win.lock(LockType::Exclusive, 0, Assert::NONE)?;
                win.put(&[7], 0, 1)?;
                win.unlock(0)?;
                win.set_info(&info)?;
                w.barrier()?;
                t1.join().expect("T1 panicked")
            })?;
        }
        w.barrier()?;
        let mut got = [0u64; 2];
        win.local_read(0, &mut got)?;
        assert_eq!(got, if w.rank() == 1 { [5, 0] } else { [0, 7] });
        win.free()?;
        Ok(())
    });
    report.assert_success();
}
