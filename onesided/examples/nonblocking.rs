//! Nonblocking synchronization and deferred epochs (seed 004): a fence that overlaps
//! computation, a PSCW epoch whose target posts late, and lock epochs that pass each other
//! with a reorder key. `docs/guide-nonblocking.md` walks through it.
//!
//! ```text
//! cargo build --release --examples
//! target/release/osrun -n 2 target/release/examples/nonblocking
//! ```

use std::time::{Duration, Instant};

use onesided::{Assert, Group, LockType, Reorder, WinInfo, Window};

/// How late the target of the PSCW part posts.
const LATE: Duration = Duration::from_millis(50);

fn main() -> onesided::Result<()> {
    let universe = onesided::init()?;
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    assert!(n >= 2, "run with 2 or more ranks");
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);

    // 1. A fence that overlaps computation. `ifence` returns at once; the put is queued
    //    (with a copy of its data) until the opening fence's barrier is through; the
    //    closing `ifence` hands out a request that completes when every rank's puts of
    //    the epoch are in place.
    let win = Window::<u64>::allocate(world, 4)?;
    drop(win.ifence(Assert::NOPRECEDE)?); // an opening call's request may go: the epoch opens
    win.put(&[100 + me as u64], right, 0)?;
    let closing = win.ifence(Assert::NOSUCCEED)?;
    let busy: u64 = (0..1_000_000u64).map(|i| i % 7).sum(); // work meanwhile
    closing.wait()?;
    let mut got = [0u64];
    win.local_read(0, &mut got)?;
    assert_eq!(got[0], 100 + left as u64);
    if me == 0 {
        println!(
            "fence: computed {busy} while the epoch completed; slot 0 = {}",
            got[0]
        );
    }

    // 2. Late Post. Rank 0's access epoch to rank 1 opens before rank 1 exposes its
    //    window: `istart`, the put and `icomplete` return at once, and the epoch completes
    //    behind the application's back once the post arrives.
    if me == 0 {
        let t = Instant::now();
        drop(win.istart(&Group::new([1])?, Assert::NONE)?);
        win.put(&[42], 1, 1)?;
        let completed = win.icomplete()?;
        let issued = t.elapsed();
        completed.wait()?;
        println!(
            "late post: istart + put + icomplete returned after {:.1} µs; \
             the epoch completed after {:.1} ms (rank 1 posted {} ms late)",
            issued.as_secs_f64() * 1e6,
            t.elapsed().as_secs_f64() * 1e3,
            LATE.as_millis()
        );
        assert!(
            issued < LATE,
            "the nonblocking calls must not wait for the post"
        );
    } else if me == 1 {
        std::thread::sleep(LATE);
        win.post(&Group::new([0])?, Assert::NONE)?;
        win.wait()?;
        win.local_read(1, &mut got)?;
        assert_eq!(got[0], 42);
    }
    win.free()?;

    // 3. Deferred lock epochs and the reorder key A_A_A_R. Rank 1 holds an exclusive lock
    //    on itself; rank 0 opens an epoch to rank 1 (it must wait for that lock), then a
    //    second epoch to itself. In order (the default) the second waits behind the
    //    first; with MPI_WIN_ACCESS_AFTER_ACCESS_REORDER it completes while the first
    //    still waits.
    let in_order = Window::<u64>::allocate(world, 2)?;
    let reordered = Window::<u64>::builder(world)
        .info(&WinInfo::new().reorder(Reorder {
            access_after_access: true,
            ..Reorder::NONE
        }))
        .allocate(2)?;
    for (win, may_pass) in [(&in_order, false), (&reordered, true)] {
        if me == 1 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
        }
        world.barrier()?; // rank 1 holds its lock now
        let mut first = None;
        if me == 0 {
            drop(win.ilock(LockType::Exclusive, 1, Assert::NONE)?);
            win.put(&[7], 1, 0)?;
            first = Some(win.iunlock(1)?);
            drop(win.ilock(LockType::Shared, 0, Assert::NONE)?);
            win.put(&[8], 0, 1)?;
            let mut second = win.iunlock(0)?;
            if may_pass {
                second.wait()?;
            } else {
                let t = Instant::now();
                while t.elapsed() < LATE {
                    assert!(
                        !second.test()?,
                        "an epoch passed an earlier one without the key"
                    );
                    std::thread::yield_now();
                }
            }
            let first_done = first.as_mut().map_or(Ok(false), |r| r.test())?;
            assert!(!first_done, "rank 1 still holds its lock");
            println!(
                "{}: the epoch to rank 0 {} while the epoch to rank 1 waited for its lock",
                if may_pass { "A_A_A_R" } else { "in order" },
                if may_pass {
                    "completed"
                } else {
                    "stayed pending"
                },
            );
        }
        world.barrier()?; // rank 0 has looked
        if me == 1 {
            win.unlock(1)?;
        }
        if let Some(first) = first {
            first.wait()?; // granted once rank 1 unlocked
        }
        world.barrier()?;
        let mut mine = [0u64; 2];
        win.local_read(0, &mut mine)?;
        match me {
            0 => assert_eq!(mine[1], 8),
            1 => assert_eq!(mine[0], 7),
            _ => {}
        }
    }
    reordered.free()?;
    in_order.free()?;
    Ok(())
}
