//! Progress ([Zounmevo14] §VII-D): a deferred epoch advances without further calls on its own
//! window — through calls on any other window of the process, or through the optional
//! progress thread (`ONESIDED_PROGRESS_THREAD=1`) while the application makes no call at all.
//!
//! In both tests rank 1 holds an exclusive lock on its memory of window A when rank 0 opens
//! `ilock` on it, puts behind it (deferred) and closes with `iunlock`; rank 1 releases the
//! lock 20 ms later. Rank 0 then watches the request with `is_complete` (which drives
//! nothing) and never touches window A.

use std::time::{Duration, Instant};

use onesided::{testing, Assert, LockType, Request, Window};

/// The part both tests share: rank 1 blocks rank 0's `ilock` for 20 ms; rank 0 puts `value`
/// behind it. Rank 0 gets back the pending `iunlock` request.
fn contended_epoch<'a>(
    w: &onesided::Comm,
    a: &'a Window<u64>,
    value: u64,
) -> onesided::Result<Option<Request<'a>>> {
    if w.rank() == 1 {
        a.lock(LockType::Exclusive, 1, Assert::NONE)?;
        w.barrier()?; // rank 0 may ilock now
        w.barrier()?; // rank 0's epoch is queued
        std::thread::sleep(Duration::from_millis(20));
        a.unlock(1)?;
        Ok(None)
    } else {
        w.barrier()?;
        let opened = a.ilock(LockType::Exclusive, 1, Assert::NONE)?;
        assert!(opened.is_complete());
        a.put(&[value], 1, 0)?; // deferred: copied and queued
        let closing = a.iunlock(1)?;
        w.barrier()?;
        Ok(Some(closing))
    }
}

/// Waits (sleeping, making no library call) until `done` holds, for at most 20 s.
fn until(mut done: impl FnMut() -> onesided::Result<bool>) -> onesided::Result<Duration> {
    let start = Instant::now();
    while !done()? {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no progress in 20 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(start.elapsed())
}

fn check_landed(w: &onesided::Comm, a: &Window<u64>, value: u64) -> onesided::Result<()> {
    w.barrier()?;
    if w.rank() == 1 {
        let mut got = [0u64];
        a.local_read(0, &mut got)?;
        assert_eq!(got, [value], "the deferred put reached the target");
    }
    Ok(())
}

#[test]
fn calls_on_another_window_advance_a_deferred_epoch() {
    let report = testing::job(2).timeout(Duration::from_secs(60)).run(|u| {
        let w = u.world();
        let a = Window::<u64>::allocate(w, 1)?;
        let b = Window::<u64>::allocate(w, 1)?;
        b.lock_all(Assert::NONE)?;
        if let Some(closing) = contended_epoch(w, &a, 42)? {
            // Only window B is used: its flushes drive A's queue.
            until(|| {
                b.flush(1)?;
                Ok(closing.is_complete())
            })?;
            closing.wait()?;
        }
        b.unlock_all()?;
        check_landed(w, &a, 42)?;
        b.free()?;
        a.free()?;
        Ok(())
    });
    report.assert_success();
}

#[test]
fn the_progress_thread_advances_a_deferred_epoch_while_the_origin_sleeps() {
    let report = testing::job(2)
        .timeout(Duration::from_secs(60))
        .env("ONESIDED_PROGRESS_THREAD", "1")
        .run(|u| {
            let w = u.world();
            let a = Window::<u64>::allocate(w, 1)?;
            if let Some(closing) = contended_epoch(w, &a, 42)? {
                // No library call at all: only the progress thread can complete it.
                let took = until(|| Ok(closing.is_complete()))?;
                println!(
                    "completed {} ms after the origin went to sleep",
                    took.as_millis()
                );
                closing.wait()?;
            }
            check_landed(w, &a, 42)?;
            // Stopped and started again, it still serves: a second contended epoch.
            assert!(onesided::progress_thread_running());
            onesided::stop_progress_thread();
            assert!(!onesided::progress_thread_running());
            onesided::start_progress_thread();
            if let Some(closing) = contended_epoch(w, &a, 43)? {
                until(|| Ok(closing.is_complete()))?;
                closing.wait()?;
            }
            check_landed(w, &a, 43)?;
            onesided::stop_progress_thread();
            a.free()?;
            Ok(())
        });
    report.assert_success();
}
