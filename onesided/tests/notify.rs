//! Notified RMA (seed 000 §5.1, MPI 5's notified operations): counters, `put_notify`,
//! `accumulate_notify`, `get_notify` and the `wait_notify` request.

use std::time::Duration;

use onesided::{testing, Assert, Error, LockType, Op, WinBuffer, Window, MAX_NOTIFY};

const ROUNDS: u64 = 20_000;
const WORDS: usize = 8;

/// Ping-pong of notified puts without any flush: each side waits for the count of the
/// other's put and must then see all its bytes — on an allocate window (direct stores) and
/// a window over a Vec (cross-memory attach, where plain small puts would be staged).
fn ping_pong(w: &onesided::Comm, win: &Window<u64>) -> onesided::Result<()> {
    win.set_num_notify(1)?;
    assert_eq!(win.num_notify(), 1);
    let me = w.rank();
    let peer = 1 - me;
    win.lock_all(Assert::NONE)?;
    for i in 1..=ROUNDS {
        if (i % 2 == 1) == (me == 0) {
            // A plain (stageable) put first: a notified put must not overtake it in
            // issue order from this thread, and it has to be there by the next round.
            win.put(&[i], peer, WORDS)?;
            win.put_notify(&[i; WORDS], peer, 0, 0)?;
        } else {
            win.wait_notify(0, i.div_ceil(2))?.wait()?;
            let mut got = [0u64; WORDS];
            win.local_read(0, &mut got)?;
            assert_eq!(got, [i; WORDS], "round {i}: data behind the count");
        }
    }
    win.unlock_all()?;
    w.barrier()?;
    // Every notified put counted exactly once.
    assert_eq!(win.reset_notify_value(0)?, ROUNDS / 2);
    assert_eq!(win.notify_value(0)?, 0);
    Ok(())
}

#[test]
fn notified_puts_carry_their_data_without_flush() {
    testing::job(2)
        .timeout(Duration::from_secs(240))
        .run(|u| {
            let w = u.world();
            let windows = [
                Window::<u64>::allocate(w, WORDS + 1)?,
                Window::<u64>::create(w, WinBuffer::from(vec![0u64; WORDS + 1]))?,
            ];
            for win in windows {
                ping_pong(w, &win)?;
                win.free()?;
            }
            Ok(())
        })
        .assert_success();
}

/// Every rank adds to one element of rank 0 with accumulate_notify, from two threads each;
/// rank 0's wait_notify for the total sees the full sum. Counters may differ per rank.
#[test]
fn notified_accumulates_from_many_origins_add_up() {
    const EACH: u64 = 2_000;
    testing::job(3)
        .timeout(Duration::from_secs(120))
        .run(|u| {
            let w = u.world();
            let n = w.size() as u64;
            for win in [
                Window::<u64>::allocate(w, 2)?,
                Window::<u64>::create(w, WinBuffer::from(vec![0u64; 2]))?,
            ] {
                // Rank r has r + 1 counters; rank 0 uses index 0, rank 2's index 2 exists.
                win.set_num_notify(w.rank() + 1)?;
                assert_eq!(win.num_notify(), w.rank() + 1);
                win.lock_all(Assert::NONE)?;
                let done = win.wait_notify(0, 2 * EACH * n)?;
                std::thread::scope(|s| {
                    let threads: Vec<_> = (0..2)
                        .map(|_| {
                            s.spawn(|| -> onesided::Result<()> {
                                for _ in 0..EACH {
                                    win.accumulate_notify(&[1], 0, 0, Op::Sum, 0)?;
                                }
                                Ok(())
                            })
                        })
                        .collect();
                    threads
                        .into_iter()
                        .try_for_each(|t| t.join().expect("thread panicked"))
                })?;
                if w.rank() == 0 {
                    done.wait()?;
                    let mut got = [0u64];
                    win.local_read(0, &mut got)?;
                    assert_eq!(got[0], 2 * EACH * n, "every counted update is visible");
                    assert_eq!(win.notify_value(0)?, 2 * EACH * n);
                } else {
                    drop(done);
                }
                // The highest index of the highest rank is usable; one past it is not.
                let last = w.size() - 1;
                win.put_notify(&[7], last, 1, last)?;
                assert!(matches!(
                    win.put_notify(&[7], last, 1, last + 1),
                    Err(Error::InvalidNotification { count, .. }) if count == last + 1
                ));
                win.unlock_all()?;
                w.barrier()?;
                if w.rank() == last {
                    assert_eq!(win.notify_value(last)?, n);
                }
                win.free()?;
            }
            Ok(())
        })
        .assert_success();
}

/// get_notify tells the target its bytes were read: it may overwrite them at once.
#[test]
fn get_notify_tells_the_target_its_data_was_read() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::create(w, WinBuffer::from(vec![0u64; 4]))?;
        win.set_num_notify(1)?;
        win.lock_all(Assert::NONE)?;
        for i in 1..=500u64 {
            if w.rank() == 1 {
                win.local_write(0, &[i; 4])?;
                // Hand the round over, then wait until rank 0 read it.
                win.put_notify(&[i], 0, 0, 0)?;
                win.wait_notify(0, i)?.wait()?;
            } else {
                win.wait_notify(0, i)?.wait()?;
                let mut got = [0u64; 4];
                win.get_notify(&mut got, 1, 0, 0)?;
                assert_eq!(got, [i; 4]);
            }
        }
        win.unlock_all()?;
        w.barrier()?;
        win.free()?;
        Ok(())
    });
}

/// A notified put behind a deferred lock neither lands nor counts before the epoch
/// activates; then it does both.
#[test]
fn deferred_notified_put_counts_when_it_lands() {
    testing::job(2)
        .timeout(Duration::from_secs(60))
        .run(|u| {
            let w = u.world();
            let win = Window::<u64>::allocate(w, 4)?;
            win.set_num_notify(1)?;
            if w.rank() == 1 {
                win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            }
            w.barrier()?;
            if w.rank() == 0 {
                win.ilock(LockType::Exclusive, 1, Assert::NONE)?.wait()?;
                win.put_notify(&[42, 43], 1, 0, 0)?;
                win.accumulate_notify(&[5], 1, 2, Op::Sum, 0)?;
                let closing = win.iunlock(1)?;
                w.barrier()?;
                closing.wait()?;
            } else {
                w.barrier()?;
                std::thread::sleep(Duration::from_millis(20));
                assert_eq!(win.notify_value(0)?, 0, "counted before the epoch began");
                let mut got = [0u64; 3];
                win.local_read(0, &mut got)?;
                assert_eq!(got, [0, 0, 0], "landed before the epoch began");
                win.unlock(1)?;
                let mut reqs = [win.wait_notify(0, 2)?];
                onesided::wait_any(&mut reqs)?;
                win.local_read(0, &mut got)?;
                assert_eq!(got, [42, 43, 5]);
            }
            w.barrier()?;
            win.free()?;
            Ok(())
        })
        .assert_success();
}

/// Counters that do not exist, and a count beyond the limit at one rank, are errors at
/// every rank; resetting the count gives fresh counters.
#[test]
fn notification_errors_and_recount() {
    testing::run(2, |u| {
        let w = u.world();
        let win = Window::<u64>::allocate(w, 2)?;
        assert_eq!(win.num_notify(), 0);
        assert!(matches!(
            win.notify_value(0),
            Err(Error::InvalidNotification { count: 0, .. })
        ));
        win.lock_all(Assert::NONE)?;
        assert!(matches!(
            win.put_notify(&[1], 1 - w.rank(), 0, 0),
            Err(Error::InvalidNotification { .. })
        ));
        win.unlock_all()?;
        let n = if w.rank() == 1 { MAX_NOTIFY + 1 } else { 4 };
        let err = win.set_num_notify(n).unwrap_err();
        if w.rank() == 1 {
            assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        } else {
            assert!(matches!(err, Error::PeerFailed { .. }), "{err}");
        }
        assert_eq!(win.num_notify(), 0, "a failed call changes nothing");
        win.set_num_notify(3)?;
        win.lock_all(Assert::NONE)?;
        win.put_notify(&[9], 1 - w.rank(), 0, 2)?;
        win.unlock_all()?;
        w.barrier()?;
        assert_eq!(win.notify_value(2)?, 1);
        assert!(win.wait_notify(3, 1).is_err());
        // Fresh counters: the old count is gone.
        win.set_num_notify(3)?;
        assert_eq!(win.notify_value(2)?, 0);
        let mut pending = win.wait_notify(2, 1)?;
        assert!(!pending.test()?);
        win.set_num_notify(0)?;
        assert_eq!(win.num_notify(), 0);
        drop(pending);
        win.free()?;
        Ok(())
    });
}
