//! Operations on `create` windows over ordinary memory, which origins hand to an attentive
//! target (request rings) and otherwise do with cross-memory attach: both paths in one
//! epoch, no lost or reordered update.
//!
//! Request rings serve memory reached by cross-memory attach, within one node; across
//! nodes the network reaches such memory (`create` over a `Vec` in tests/across_nodes.rs).
//! These jobs stay on one node whatever `ONESIDED_TEST_NODES` says.

use std::time::Duration;

use onesided::{testing, Assert, LockType, Op, WinInfo, Window};

const SLOTS: usize = 16;
const ROUNDS: u64 = 300;

/// Tries of the serving phase until rank 0 has served a request: with more ranks than
/// cores its wait may sleep through a whole phase (asleep it is not attentive).
const SERVING_TRIES: usize = 20;

/// Ranks 1.. update rank 0's counters with accumulate, fetch_and_op and compare_and_swap,
/// while rank 0 first waits inside the library (it serves them) and then sleeps outside it
/// (they fall back to cross-memory attach): every update counts exactly once.
#[test]
fn updates_count_once_whether_the_target_serves_or_sleeps() {
    testing::job(3)
        .nodes(1)
        .run(|u| {
            let w = u.world();
            let (me, n) = (w.rank(), w.size());
            let win = Window::<u64>::create(w, vec![0u64; SLOTS])?;
            let mut phases = 0;
            let mut served = false;
            let mut schedule = vec!["serving"; SERVING_TRIES];
            schedule.push("asleep");
            for phase in schedule {
                if phase == "serving" && served {
                    continue;
                }
                phases += 1;
                w.barrier()?;
                let served_before = testing::requests_served();
                if me == 0 {
                    if phase == "serving" {
                        // The others' epochs end in this barrier: wait inside the library.
                        w.barrier()?;
                    } else {
                        std::thread::sleep(Duration::from_millis(200));
                        w.barrier()?;
                    }
                } else {
                    win.lock_all(Assert::NONE)?;
                    for i in 0..ROUNDS {
                        let slot = (i as usize * 3 + me) % SLOTS;
                        win.accumulate(&[1, 2], 0, slot.min(SLOTS - 2), Op::Sum)?;
                        win.fetch_and_op(3, 0, 0, Op::Sum)?;
                        // A compare-and-swap increment of slot 1 (retried until it wins).
                        let mut seen = win.fetch_and_op(0, 0, 1, Op::NoOp)?;
                        loop {
                            let old = win.compare_and_swap(seen + 1, seen, 0, 1)?;
                            if old == seen {
                                break;
                            }
                            seen = old;
                        }
                        if i % 50 == 0 {
                            win.flush(0)?;
                        }
                    }
                    win.unlock_all()?;
                    w.barrier()?;
                }
                if phase == "serving" {
                    let mut flag = [u8::from(testing::requests_served() > served_before)];
                    w.bcast(0, &mut flag)?;
                    served = flag[0] == 1;
                }
            }
            assert!(
                served,
                "rank 0 served no request while it waited, in {SERVING_TRIES} tries"
            );
            w.barrier()?;
            if me == 0 {
                let mut got = vec![0u64; SLOTS];
                win.local_read(0, &mut got)?;
                let origins = (n - 1) as u64;
                let mut expect = vec![0u64; SLOTS];
                for o in 1..n {
                    for i in 0..ROUNDS {
                        let slot = ((i as usize * 3 + o) % SLOTS).min(SLOTS - 2);
                        expect[slot] += phases;
                        expect[slot + 1] += 2 * phases;
                    }
                }
                expect[0] += 3 * ROUNDS * origins * phases;
                expect[1] += ROUNDS * origins * phases;
                assert_eq!(got, expect);
            }
            win.free().map(drop)
        })
        .assert_success();
}

/// With `mpi_win_order`, a put and a later get of the same bytes need no flush between
/// them, whichever path each takes (the target alternates between serving and sleeping).
#[test]
fn ordered_put_then_get_sees_the_put() {
    testing::job(2)
        .nodes(1)
        .run(|u| {
            let w = u.world();
            let me = w.rank();
            let info = WinInfo::new().order(true);
            let win = Window::<u64>::builder(w)
                .info(&info)
                .create(vec![0u64; 4])?;
            const DONE: usize = 3;
            w.barrier()?;
            if me == 0 {
                // Alternately asleep outside the library, and inside it: waiting for an
                // exclusive lock of our own window while the origin's shared epoch lasts.
                let mut done = [0u64];
                while done[0] == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                    win.lock(LockType::Exclusive, 0, Assert::NONE)?;
                    win.unlock(0)?;
                    win.local_read(DONE, &mut done)?;
                }
                assert!(testing::requests_served() > 0, "rank 0 never served");
                w.barrier()?;
            } else {
                for chunk in 0..10u64 {
                    win.lock(LockType::Shared, 0, Assert::NONE)?;
                    for i in chunk * 2000 + 1..=(chunk + 1) * 2000 {
                        let slot = (i % 3) as usize;
                        win.put(&[i], 0, slot)?;
                        let mut back = [0u64];
                        win.get(&mut back, 0, slot)?;
                        assert_eq!(back[0], i, "get {i} overtook its put");
                        win.accumulate(&[i], 0, slot, Op::Replace)?;
                        assert_eq!(win.fetch_and_op(0, 0, slot, Op::NoOp)?, i);
                    }
                    if chunk == 9 {
                        win.accumulate(&[1], 0, DONE, Op::Replace)?;
                    }
                    win.unlock(0)?;
                }
                w.barrier()?;
            }
            win.free().map(drop)
        })
        .assert_success();
}
