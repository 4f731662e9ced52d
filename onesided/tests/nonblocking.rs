//! Nonblocking synchronization ([Zounmevo14]): the opening calls (`ifence`, `ipost`,
//! `istart`, `ilock`, `ilock_all`) and deferred epochs, the closing calls (`iwait`,
//! `icomplete`, `iunlock`, `iunlock_all`, `iflush*`), and the one request type they share
//! with `rput` & co.

use std::time::Duration;

mod common;

use common::block_on;
use onesided::{test_all, test_any, testing, wait_all, wait_any, Assert, Group, LockType, Window};

/// `iwait` returns at once and its request stays incomplete until the origin completes:
/// the origin only starts after the target has tested its request (a communicator barrier
/// tells it to go), so the first test is false for sure; the data is there once the request
/// completes. Then the same with `icomplete` at the origin and `.await` at the target, and
/// several back-to-back epochs closed nonblockingly without waiting in between.
#[test]
fn iwait_completes_when_the_origin_completes() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 8)?;
        let peer = Group::new([1 - w.rank()])?;
        if w.rank() == 1 {
            win.post(&peer, Assert::NONE)?;
            let mut closing = win.iwait()?;
            assert!(!closing.test()?, "no origin has completed yet");
            assert!(!closing.is_complete());
            w.barrier()?; // go
            closing.wait()?;
            let mut got = [0u64; 1];
            win.local_read(0, &mut got)?;
            assert_eq!(got, [7]);
            // Exposure closed by iwait: a new post may follow at once.
            win.post(&peer, Assert::NONE)?;
            block_on(win.iwait()?)?;
            win.local_read(1, &mut got)?;
            assert_eq!(got, [8]);
        } else {
            w.barrier()?;
            win.start(&peer, Assert::NONE)?;
            win.put(&[7], 1, 0)?;
            win.complete()?;
            win.start(&peer, Assert::NONE)?;
            win.put(&[8], 1, 1)?;
            let done = win.icomplete()?;
            done.wait()?;
        }
        // 64 epochs, each closed without waiting; all requests waited for at the end.
        let mut requests = Vec::new();
        for i in 0..64u64 {
            if w.rank() == 1 {
                win.post(&peer, Assert::NONE)?;
                requests.push(win.iwait()?);
            } else {
                win.start(&peer, Assert::NONE)?;
                win.put(&[100 + i], 1, 2 + (i % 6) as usize)?;
                requests.push(win.icomplete()?);
            }
        }
        wait_all(requests)?;
        if w.rank() == 1 {
            let mut got = [0u64; 6];
            win.local_read(2, &mut got)?;
            assert_eq!(got, [160, 161, 162, 163, 158, 159]);
        }
        win.free()?;
        Ok(())
    });
}

/// `iunlock`, `iunlock_all` and `iflush*`: data is at the target once the request
/// completes; a lock of the same target right after `iunlock` is legal; the helpers
/// `test_all`, `test_any` and `wait_any` report completion.
#[test]
fn iunlock_and_iflush_complete_at_the_target() {
    testing::run(3, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let win = Window::<u64>::allocate(w, n)?;
        let right = (me + 1) % n;
        win.lock(LockType::Exclusive, right, Assert::NONE)?;
        win.put(&[10 + me as u64], right, me)?;
        let flushed = win.iflush(right)?;
        let local = win.iflush_local(right)?;
        let mut reqs = [flushed, local];
        assert!(test_all(&mut reqs)?);
        assert!(test_any(&mut reqs)?.is_some());
        assert!(wait_any(&mut reqs)? < 2);
        win.iunlock(right)?.wait()?;
        // Same target again at once: the new epoch activates after the closed one.
        win.lock(LockType::Shared, right, Assert::NONE)?;
        let mut got = [0u64];
        win.get(&mut got, right, me)?;
        assert_eq!(got, [10 + me as u64]);
        win.iunlock(right)?.wait()?;
        w.barrier()?;

        win.lock_all(Assert::NONE)?;
        for t in 0..n {
            win.put(&[100 * t as u64 + me as u64], t, me)?;
        }
        win.iflush_all()?.wait()?;
        win.iflush_local_all()?.wait()?;
        block_on(win.iunlock_all()?)?;
        w.barrier()?;
        let mut mine = vec![0u64; n];
        win.local_read(0, &mut mine)?;
        let want: Vec<u64> = (0..n).map(|o| 100 * me as u64 + o as u64).collect();
        assert_eq!(mine, want);
        win.free()?;
        Ok(())
    });
}

/// Misuse is an error at call time, as for the blocking calls: `iwait` without `post`,
/// `icomplete` without `start`, `iunlock` of a target not locked, `iflush` outside a
/// passive epoch.
#[test]
fn nonblocking_misuse_is_an_error() {
    testing::job(2)
        .timeout(Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let win = Window::<u64>::allocate(w, 1)?;
            assert!(win.iwait().is_err());
            assert!(win.icomplete().is_err());
            assert!(win.iunlock(1 - w.rank()).is_err());
            assert!(win.iunlock_all().is_err());
            assert!(win.iflush(0).is_err());
            assert!(win.iflush_all().is_err());
            assert!(win.iunlock(7).is_err());
            win.free()?;
            Ok(())
        })
        .assert_success();
}

/// Deferred epochs: `ilock` returns at once even though rank 1 holds the exclusive lock, and
/// so does the `put` behind it (its data is copied and queued): rank 0 reaches a barrier
/// while rank 1 still holds the lock (a put that waited would deadlock here). The data does
/// not land early — rank 1 reads 0 while it holds the lock — and is there once rank 1 has
/// released the lock and rank 0's `iunlock` completed. A `get` behind a deferred epoch
/// waits for it and reads what the deferred put wrote.
#[test]
fn ilock_defers_rma_until_the_lock_is_held() {
    let report = testing::job(2).timeout(Duration::from_secs(30)).run(|u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        if w.rank() == 1 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            w.barrier()?; // rank 0 may ilock now
            w.barrier()?; // rank 0's put has returned, the lock is still ours
            std::thread::sleep(Duration::from_millis(20));
            let mut got = [9u64];
            win.local_read(0, &mut got)?;
            assert_eq!(got, [0], "the put landed before the lock was granted");
            win.unlock(1)?;
            w.barrier()?;
            win.local_read(0, &mut got)?;
            assert_eq!(got, [7]);
            w.barrier()?; // read before rank 0 writes again
        } else {
            w.barrier()?;
            let opened = win.ilock(LockType::Exclusive, 1, Assert::NONE)?;
            assert!(
                opened.is_complete(),
                "an opening call's request is complete at once"
            );
            win.put(&[7], 1, 0)?; // deferred: returns at once
            w.barrier()?;
            let mut back = [0u64];
            win.get(&mut back, 1, 0)?; // waits for the lock, after the deferred put
            assert_eq!(back, [7]);
            win.iunlock(1)?.wait()?;
            w.barrier()?;
            w.barrier()?;
        }
        // ilock_all behind nothing activates at once; RMA then takes the fast path.
        win.ilock_all(Assert::NONE)?.wait()?;
        win.put(&[w.rank() as u64 + 1], 1 - w.rank(), 0)?;
        win.iunlock_all()?.wait()?;
        w.barrier()?;
        let mut got = [0u64];
        win.local_read(0, &mut got)?;
        assert_eq!(got, [2 - w.rank() as u64]);
        win.free()?;
        Ok(())
    });
    report.assert_success();
}

/// Every mix of blocking and nonblocking open and close ([Zounmevo14] rule 1) for fence and
/// PSCW, with data checked after each epoch. Rank 0 posts late, so its left neighbour's
/// `istart` is deferred and the `put` behind it waits. (Each rank posts before it starts:
/// under serial activation, rule 4, a post behind a pending start of a ring would wait for
/// it, and every start for a post — the reorder keys relax exactly that.)
#[test]
fn blocking_and_nonblocking_open_and_close_mix() {
    testing::run(3, |u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let win = Window::<u64>::allocate(w, 4 * n)?;
        let right = (me + 1) % n;
        let mut value = 1u64;
        for (nb_open, nb_close) in [(false, false), (false, true), (true, false), (true, true)] {
            // Fence epoch.
            value += 1;
            if nb_open {
                win.ifence(Assert::NONE)?.wait()?;
            } else {
                win.fence(Assert::NONE)?;
            }
            win.put(&[value * 10 + me as u64], right, me)?;
            if nb_close {
                win.ifence(Assert::NONE)?.wait()?;
            } else {
                win.fence(Assert::NONE)?;
            }
            let left = (me + n - 1) % n;
            let mut got = [0u64];
            win.local_read(left, &mut got)?;
            assert_eq!(
                got,
                [value * 10 + left as u64],
                "fence {nb_open} {nb_close}"
            );
            win.fence(Assert::NOSUCCEED)?;
        }
        // PSCW ring: everyone exposes to its left neighbour and accesses its right one.
        let left = (me + n - 1) % n;
        for (nb_open, nb_close) in [(false, false), (false, true), (true, false), (true, true)] {
            value += 1;
            let from = Group::new([left])?;
            let to = Group::new([right])?;
            if me == 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
            if nb_open {
                win.ipost(&from, Assert::NONE)?.wait()?;
                win.istart(&to, Assert::NONE)?.wait()?;
            } else {
                win.post(&from, Assert::NONE)?;
                win.start(&to, Assert::NONE)?;
            }
            win.put(&[value * 100 + me as u64], right, n + me)?;
            if nb_close {
                let done = win.icomplete()?;
                let exposed = win.iwait()?;
                wait_all([done, exposed])?;
            } else {
                win.complete()?;
                win.wait()?;
            }
            let mut got = [0u64];
            win.local_read(n + left, &mut got)?;
            assert_eq!(
                got,
                [value * 100 + left as u64],
                "pscw {nb_open} {nb_close}"
            );
        }
        // Lock and lock_all epochs toward the right neighbour, every open/close mix; each
        // round ends with a barrier, after which the left neighbour's value is checked.
        for (nb_open, nb_close) in [(false, false), (false, true), (true, false), (true, true)] {
            value += 1;
            if nb_open {
                win.ilock(LockType::Exclusive, right, Assert::NONE)?
                    .wait()?;
            } else {
                win.lock(LockType::Exclusive, right, Assert::NONE)?;
            }
            win.put(&[value * 1000 + me as u64], right, 2 * n + me)?;
            if nb_close {
                win.iunlock(right)?.wait()?;
            } else {
                win.unlock(right)?;
            }
            value += 1;
            if nb_open {
                win.ilock_all(Assert::NONE)?.wait()?;
            } else {
                win.lock_all(Assert::NONE)?;
            }
            win.put(&[value * 1000 + me as u64], right, 3 * n + me)?;
            if nb_close {
                win.iunlock_all()?.wait()?;
            } else {
                win.unlock_all()?;
            }
            w.barrier()?;
            let mut got = [0u64; 2];
            win.local_read(2 * n + left, &mut got[..1])?;
            win.local_read(3 * n + left, &mut got[1..])?;
            assert_eq!(
                got,
                [(value - 1) * 1000 + left as u64, value * 1000 + left as u64],
                "lock {nb_open} {nb_close}"
            );
            w.barrier()?;
        }
        win.free()?;
        Ok(())
    });
}

/// iflush age ([Zounmevo14] item 5): an `iflush` covers the operations issued before it,
/// not the synchronizations issued after it — its request completes while a later `ilock`
/// still waits for a lock held elsewhere.
#[test]
fn iflush_covers_only_what_was_issued_before_it() {
    let report = testing::job(3).timeout(Duration::from_secs(30)).run(|u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        match w.rank() {
            0 => {
                w.barrier()?; // rank 1 holds its lock
                win.lock(LockType::Exclusive, 2, Assert::NONE)?;
                win.put(&[5], 2, 0)?;
                let mut flushed = win.iflush(2)?;
                let later = win.ilock(LockType::Exclusive, 1, Assert::NONE)?;
                drop(later); // opening requests are complete at once
                let start = std::time::Instant::now();
                while !flushed.test()? {
                    assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "the iflush waited for the later ilock"
                    );
                    std::thread::yield_now();
                }
                w.barrier()?; // rank 1 may release its lock now
                win.unlock(1)?;
                win.unlock(2)?;
            }
            1 => {
                win.lock(LockType::Exclusive, 1, Assert::NONE)?;
                w.barrier()?;
                w.barrier()?; // rank 0's iflush completed while we held the lock
                win.unlock(1)?;
            }
            _ => {
                w.barrier()?;
                w.barrier()?;
            }
        }
        w.barrier()?;
        if w.rank() == 2 {
            let mut got = [0u64];
            win.local_read(0, &mut got)?;
            assert_eq!(got, [5]);
        }
        win.free()?;
        Ok(())
    });
    report.assert_success();
}

/// FIFO matching of access and exposure epochs (rules 3 and 4) over 64 back-to-back PSCW
/// epochs with random delays at the target: the origin opens every epoch with `istart`
/// (deferred: it returns before the target posts), its put waits for the matching post, and
/// it closes with `icomplete` without waiting. Matching uses the cumulative counters of
/// [Zounmevo14] §VII-B; each epoch's put must land in its own exposure epoch, which the
/// target checks before it posts the next one.
#[test]
fn fifo_matching_over_64_epochs_with_a_late_target() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 1)?;
        let peer = Group::new([1 - w.rank()])?;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut requests = Vec::new();
        for epoch in 1..=64u64 {
            if w.rank() == 1 {
                // xorshift: a delay of 0-3 ms before every post.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                std::thread::sleep(Duration::from_micros(state % 3000));
                win.post(&peer, Assert::NONE)?;
                win.wait()?;
                let mut got = [0u64];
                win.local_read(0, &mut got)?;
                assert_eq!(got, [epoch], "epoch {epoch} received another epoch's data");
            } else {
                win.istart(&peer, Assert::NONE)?.wait()?;
                win.put(&[epoch], 1, 0)?; // waits for this epoch's post
                requests.push(win.icomplete()?);
            }
        }
        wait_all(requests)?;
        win.free()?;
        Ok(())
    });
}

/// `MPI_WIN_ACCESS_AFTER_ACCESS_REORDER` ([Zounmevo14] §VI-B, Fig. 7): rank 0 opens an
/// access epoch toward rank 1, which posts late, then one toward rank 2. With the flag the
/// second epoch activates, moves its data and completes while the first still waits for its
/// post; the first completes once rank 1 posts (its data arrives too). Without the flag the
/// second epoch would wait for the first: rank 1 only posts after rank 0 saw the second
/// complete, so this would hang (the job timeout fails it). `get_info` reports the flag.
#[test]
fn access_after_access_reorder_lets_a_later_epoch_pass_a_late_post() {
    let report = testing::job(3).timeout(Duration::from_secs(30)).run(|u| {
        let w = u.world();
        let info = onesided::WinInfo::new().reorder(onesided::Reorder {
            access_after_access: true,
            ..onesided::Reorder::NONE
        });
        let win = Window::<u64>::builder(w).info(&info).allocate(4)?;
        assert_eq!(
            win.get_info().get("MPI_WIN_ACCESS_AFTER_ACCESS_REORDER"),
            Some("1")
        );
        let origin = Group::single(0);
        match w.rank() {
            0 => {
                w.barrier()?;
                win.istart(&Group::single(1), Assert::NONE)?.wait()?;
                win.put(&[11], 1, 0)?; // deferred behind the late post
                let first = win.icomplete()?;
                win.istart(&Group::single(2), Assert::NONE)?.wait()?;
                win.put(&[22], 2, 0)?;
                let second = win.icomplete()?;
                block_on(second)?;
                assert!(
                    !first.is_complete(),
                    "the first epoch cannot complete before rank 1 posts"
                );
                w.barrier()?; // rank 1 may post now
                first.wait()?;
            }
            1 => {
                w.barrier()?;
                w.barrier()?; // rank 0 saw the second epoch complete
                win.post(&origin, Assert::NONE)?;
                win.wait()?;
                let mut got = [0u64];
                win.local_read(0, &mut got)?;
                assert_eq!(got, [11]);
            }
            _ => {
                win.post(&origin, Assert::NONE)?;
                w.barrier()?;
                win.wait()?;
                let mut got = [0u64];
                win.local_read(0, &mut got)?;
                assert_eq!(got, [22]);
                w.barrier()?;
            }
        }
        win.free()?;
        Ok(())
    });
    report.assert_success();
}

/// Accumulates behind a pending lock are copied and deferred like puts (item 4): with the
/// lock held elsewhere, `accumulate` returns at once, and the update lands after the lock
/// is granted, in order with a put issued before it.
#[test]
fn accumulate_behind_a_pending_lock_is_deferred_in_order() {
    let report = testing::job(2).timeout(Duration::from_secs(30)).run(|u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 2)?;
        if w.rank() == 1 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            w.barrier()?; // rank 0 may ilock now
            w.barrier()?; // its put and accumulate returned while we hold the lock
            let mut got = [9u64; 2];
            win.local_read(0, &mut got)?;
            assert_eq!(got, [0, 0], "nothing landed before the lock was granted");
            win.unlock(1)?;
            w.barrier()?;
            win.local_read(0, &mut got)?;
            assert_eq!(got, [5, 3], "put then accumulate, in issue order");
        } else {
            w.barrier()?;
            win.ilock(LockType::Exclusive, 1, Assert::NONE)?.wait()?;
            win.put(&[2, 3], 1, 0)?;
            win.accumulate(&[3], 1, 0, onesided::Op::Sum)?; // deferred, returns at once
            w.barrier()?;
            win.iunlock(1)?.wait()?;
            w.barrier()?;
        }
        win.free()?;
        Ok(())
    });
    report.assert_success();
}

/// Every request form returns at once behind a pending lock (item 4): `rput` and
/// `raccumulate` copy their data, `rget` and `rget_accumulate` queue reads whose requests
/// complete once the lock is granted. All apply in issue order: the `rget` sees the `rput`,
/// the `rget_accumulate` sees the `raccumulate` before it. A read request that is forgotten
/// never writes its buffer afterwards.
#[test]
fn request_forms_return_at_once_behind_a_pending_lock() {
    let report = testing::job(2).timeout(Duration::from_secs(30)).run(|u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 2)?;
        if w.rank() == 1 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            w.barrier()?; // rank 0 may ilock now
            w.barrier()?; // all its requests returned while we hold the lock
            win.unlock(1)?;
            w.barrier()?;
            let mut got = [0u64; 2];
            win.local_read(0, &mut got)?;
            assert_eq!(got, [5, 13]);
        } else {
            w.barrier()?;
            win.ilock(LockType::Exclusive, 1, Assert::NONE)?.wait()?;
            let data = [2u64, 3];
            let put = win.rput(&data, 1, 0)?;
            let mut seen = [0u64; 2];
            let mut read = win.rget(&mut seen, 1, 0)?;
            let acc = win.raccumulate(&[3], 1, 0, onesided::Op::Sum)?;
            let mut before = [0u64];
            let fetch = win.rget_accumulate(&[10], &mut before, 1, 1, onesided::Op::Sum)?;
            let mut forgotten = [77u64; 2];
            std::mem::forget(win.rget(&mut forgotten, 1, 0)?);
            assert!(!read.test()?, "the lock is still held by rank 1");
            w.barrier()?;
            onesided::wait_all([put, read, acc, fetch])?;
            assert_eq!(seen, [2, 3], "rget after rput, in issue order");
            assert_eq!(
                before,
                [3],
                "rget_accumulate saw the put, not yet its own add"
            );
            win.iunlock(1)?.wait()?;
            assert_eq!(
                forgotten,
                [77, 77],
                "a forgotten read never writes its buffer"
            );
            w.barrier()?;
        }
        win.free()?;
        Ok(())
    });
    report.assert_success();
}

/// Serial activation orders the *activation* of epochs, not the closing of one already
/// active: each of 3 ranks holds the lock on itself and asks (`ilock`) for its right
/// neighbour's, which that neighbour holds; then it releases its own lock (`iunlock`). The
/// release is queued after the pending `ilock` but belongs to the older epoch, so it goes
/// first — otherwise every rank would wait for its neighbour's release, which waits behind
/// that neighbour's own pending lock: a cycle. Every rank's put then lands.
#[test]
fn releasing_a_held_lock_does_not_wait_for_a_later_pending_one() {
    let report = testing::job(3).timeout(Duration::from_secs(30)).run(|u| {
        let w = u.world();
        let (me, n) = (w.rank(), w.size());
        let right = (me + 1) % n;
        let win = Window::<u64>::allocate(w, 1)?;
        win.lock(LockType::Exclusive, me, Assert::NONE)?;
        w.barrier()?; // every rank holds its own lock
        win.ilock(LockType::Exclusive, right, Assert::NONE)?
            .wait()?;
        win.put(&[100 + me as u64], right, 0)?; // deferred behind the pending lock
        let released = win.iunlock(me)?;
        let done = win.iunlock(right)?;
        wait_all([released, done])?;
        w.barrier()?;
        let mut got = [0u64];
        win.local_read(0, &mut got)?;
        assert_eq!(got, [100 + ((me + n - 1) % n) as u64]);
        win.free()?;
        Ok(())
    });
    report.assert_success();
}

/// A deferred epoch advances while its process waits in a communicator collective (MPI's
/// progress rule: a process blocked in a library call makes progress on its pending
/// communication). Rank 0's `ilock` waits behind rank 1's shared lock; rank 0 puts, closes
/// with `iunlock` and enters a barrier without testing its request. Rank 1 then unlocks and
/// reads its window under shared locks until the put shows: only rank 0's library, from
/// inside its barrier, can take, use and release that lock, so without progress in the
/// barrier rank 1 never sees it (10 s, then the test fails).
#[test]
fn a_deferred_epoch_advances_while_its_process_waits_in_a_barrier() {
    testing::job(2)
        .timeout(Duration::from_secs(30))
        .run(|u| {
            let w = u.world();
            let win = Window::<u64>::allocate(w, 1)?;
            if w.rank() == 1 {
                win.lock(LockType::Shared, 1, Assert::NONE)?;
                w.barrier()?; // rank 0 may ilock now
                w.barrier()?; // rank 0's lock waits
                win.unlock(1)?;
                let until = std::time::Instant::now() + Duration::from_secs(10);
                let mut got = [0u64];
                while got != [42] && std::time::Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                    win.lock(LockType::Shared, 1, Assert::NONE)?;
                    win.get(&mut got, 1, 0)?;
                    win.unlock(1)?;
                }
                assert_eq!(
                    got,
                    [42],
                    "rank 0's epoch ran while rank 0 was in the barrier"
                );
                w.barrier()?;
            } else {
                w.barrier()?;
                drop(win.ilock(LockType::Exclusive, 1, Assert::NONE)?);
                win.put(&[42], 1, 0)?; // deferred: copied
                let closing = win.iunlock(1)?;
                assert!(!closing.is_complete(), "rank 1 still holds its shared lock");
                w.barrier()?;
                w.barrier()?; // rank 1 arrives only after rank 0's epoch ran
                              // Rank 1 saw the put, so the epoch ran inside the barrier; its request may
                              // still wait for the answer to the release (across nodes the release is a
                              // network atomic whose answer can arrive with the barrier's last message).
                closing.wait()?;
            }
            win.free()?;
            Ok(())
        })
        .assert_success();
}
