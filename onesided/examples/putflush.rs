//! Critical-path instruction count of an 8-byte put followed by a flush on an allocate
//! window (the comparison of [Gerstenberger13] §2.3–2.4: foMPI needs 173 instructions for the put and
//! 78 for the flush), and of the 8-byte atomics fetch_and_op(sum), compare_and_swap and
//! accumulate(sum).
//!
//! Rank 0 holds an exclusive lock on rank 1 and runs loops of `ITERS` iterations, each in
//! its own non-inlined function so that `callgrind_annotate --inclusive=yes` reports them
//! separately: put+flush, put alone, flush alone, the three atomics, an uncontended
//! shared lock + unlock, and an empty loop (the
//! loop's own cost).
//! `scripts/instr-count.sh` runs rank 0 under callgrind and divides by `ITERS`.
//!
//! ```text
//! target/release/osrun -n 2 target/release/examples/putflush   # also checks the data
//! ```

use std::hint::black_box;

use onesided::{Assert, Group, LockType, Op, Window};

/// Iterations of every loop.
pub const ITERS: u64 = 100_000;
/// PSCW epochs (both ranks take part in each).
pub const PSCW_ITERS: u64 = 10_000;

#[no_mangle]
#[inline(never)]
fn onesided_bench_put_flush(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for i in 0..iters {
        win.put(&[black_box(i)], 1, 0)?;
        win.flush(1)?;
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_put(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for i in 0..iters {
        win.put(&[black_box(i)], 1, 0)?;
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_flush(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for _ in 0..iters {
        win.flush(black_box(1))?;
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_fetch_and_op(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for i in 0..iters {
        black_box(win.fetch_and_op(black_box(i), 1, 0, Op::Sum)?);
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_compare_and_swap(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for i in 0..iters {
        black_box(win.compare_and_swap(black_box(i), black_box(i), 1, 0)?);
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_accumulate(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for i in 0..iters {
        win.accumulate(&[black_box(i)], 1, 0, Op::Sum)?;
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_lock_unlock(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for _ in 0..iters {
        win.lock(LockType::Shared, black_box(1), Assert::NONE)?;
        win.unlock(black_box(1))?;
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_lock_unlock_exclusive(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for _ in 0..iters {
        win.lock(LockType::Exclusive, black_box(1), Assert::NONE)?;
        win.unlock(black_box(1))?;
    }
    Ok(())
}

/// The same loop once the window has seen a lock_all: every exclusive lock is then a
/// member of the exclusive class (sync::lock), whose membership parks between epochs.
#[no_mangle]
#[inline(never)]
fn onesided_bench_lock_unlock_classed(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    // Outside the loop, so that the body differs from `onesided_bench_lock_unlock_exclusive`
    // (identical functions are merged into one, which callgrind then counts once).
    if iters == u64::MAX {
        return Ok(());
    }
    for _ in 0..iters {
        win.lock(LockType::Exclusive, black_box(1), Assert::NONE)?;
        win.unlock(black_box(1))?;
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_lock_all_unlock_all(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for _ in 0..iters {
        win.lock_all(Assert::NONE)?;
        win.unlock_all()?;
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_pscw(win: &Window<u64>, peer: &Group, iters: u64) -> onesided::Result<()> {
    for _ in 0..iters {
        win.post(peer, Assert::NONE)?;
        win.start(peer, Assert::NONE)?;
        win.complete()?;
        win.wait()?;
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_fence(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for _ in 0..iters {
        win.fence(Assert::NONE)?;
    }
    Ok(())
}

#[no_mangle]
#[inline(never)]
fn onesided_bench_empty(win: &Window<u64>, iters: u64) -> onesided::Result<()> {
    for i in 0..iters {
        black_box((win, i));
    }
    Ok(())
}

fn main() -> onesided::Result<()> {
    let universe = onesided::init()?;
    let world = universe.world();
    if world.size() != 2 {
        eprintln!("putflush needs exactly 2 ranks: osrun -n 2 ...");
        std::process::exit(2);
    }
    let win = Window::<u64>::allocate(world, 1)?;
    if world.rank() == 0 {
        win.lock(LockType::Exclusive, 1, Assert::NONE)?;
        onesided_bench_put_flush(&win, ITERS)?;
        onesided_bench_put(&win, ITERS)?;
        onesided_bench_flush(&win, ITERS)?;
        onesided_bench_empty(&win, ITERS)?;
        // The atomics work on element 0 after the puts left ITERS - 1 there.
        onesided_bench_fetch_and_op(&win, ITERS)?;
        onesided_bench_compare_and_swap(&win, ITERS)?;
        onesided_bench_accumulate(&win, ITERS)?;
        // fetch_and_op added 0+1+..+(ITERS-1); compare_and_swap(i, i) writes back the value
        // it compared against, so it changes nothing; accumulate added the sum again.
        let sum = ITERS * (ITERS - 1) / 2;
        let now = win.fetch_and_op(0, 1, 0, Op::NoOp)?;
        assert_eq!(now, ITERS - 1 + 2 * sum, "atomics on rank 1 lost an update");
        win.put(&[ITERS - 1], 1, 0)?;
        win.unlock(1)?;
        onesided_bench_lock_unlock(&win, ITERS)?;
        onesided_bench_lock_unlock_exclusive(&win, ITERS)?;
        onesided_bench_lock_all_unlock_all(&win, ITERS)?;
        onesided_bench_lock_unlock_classed(&win, ITERS)?;
    }
    // PSCW epochs between ranks 0 and 1 (rank 1 runs the same loop, not counted).
    world.barrier()?;
    if world.rank() < 2 {
        let peer = Group::new([1 - world.rank()])?;
        onesided_bench_pscw(&win, &peer, PSCW_ITERS)?;
    }
    world.barrier()?;
    // Fences (collective: rank 1 runs the same loop, not counted).
    onesided_bench_fence(&win, PSCW_ITERS)?;
    win.fence(Assert::NOSUCCEED)?;
    world.barrier()?;
    if world.rank() == 1 {
        // The last value written by rank 0's put loops is ITERS - 1.
        let mut v = [0u64];
        win.local_read(0, &mut v)?;
        assert_eq!(v[0], ITERS - 1, "rank 1 holds the last value put");
        println!(
            "putflush: {} iterations per loop, data verified; {} PSCW epochs and fences",
            ITERS, PSCW_ITERS
        );
    }
    win.free()?;
    Ok(())
}
