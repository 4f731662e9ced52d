//! Nonblocking closing synchronization ([Zounmevo14]): `iwait`, `icomplete`, `iunlock`,
//! `iunlock_all`, `iflush*`, and the one request type they share with `rput` & co.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use onesided::{test_all, test_any, testing, wait_all, wait_any, Assert, Group, LockType, Window};

/// Polls a future to completion on this thread (the requests need no reactor).
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

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
