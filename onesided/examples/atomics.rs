//! Latency of 8-byte atomics through onesided next to raw CPU atomics on the same memory,
//! measured in the same run (rank 0 operates on rank 1's window memory).
//!
//! * uncontended: rank 0 alone, back to back (the cost of the call around the atomic);
//! * round trip: ranks 0 and 1 increment a counter in turns, each waiting for the other's
//!   increment — every step moves the cache line between the two processes.
//!
//! Every counter is checked at the end.
//!
//! ```text
//! cargo build --release --examples
//! target/release/osrun -n 2 target/release/examples/atomics
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use onesided::{alloc_mem, Assert, Comm, Op, Window};

const N: u64 = 200_000;
const ROUNDS: u64 = 20_000;

fn ns(t: Instant, n: u64) -> f64 {
    t.elapsed().as_secs_f64() * 1e9 / n as f64
}

/// Rank 0's uncontended loops on `win` (element 0 of rank 1): (fetch_and_op, cas,
/// accumulate) in ns per call.
fn uncontended(win: &Window<u64>) -> onesided::Result<[f64; 3]> {
    win.local_write(0, &[0])?;
    win.comm().barrier()?; // every counter is reset before rank 0 starts
    let mut out = [0.0; 3];
    if win.rank() == 0 {
        win.lock_all(Assert::NONE)?;
        let t = Instant::now();
        for _ in 0..N {
            black_box(win.fetch_and_op(black_box(1), 1, 0, Op::Sum)?);
        }
        out[0] = ns(t, N);
        let t = Instant::now();
        for i in 0..N {
            let old = win.compare_and_swap(N + i + 1, N + i, 1, 0)?;
            assert_eq!(old, N + i, "compare_and_swap saw another value");
        }
        out[1] = ns(t, N);
        let t = Instant::now();
        for _ in 0..N {
            win.accumulate(&[black_box(1)], 1, 0, Op::Sum)?;
        }
        out[2] = ns(t, N);
        assert_eq!(
            win.fetch_and_op(0, 1, 0, Op::NoOp)?,
            3 * N,
            "counter after the loops"
        );
        win.unlock_all()?;
    }
    win.comm().barrier()?;
    Ok(out)
}

/// Ranks 0 and 1 take turns incrementing element 1 of rank 1: ns per round trip.
fn round_trip(win: &Window<u64>, raw: Option<&AtomicU64>) -> onesided::Result<f64> {
    let me = win.rank();
    win.comm().barrier()?;
    if me == 1 {
        win.local_write(1, &[0])?;
    }
    win.comm().barrier()?;
    win.lock_all(Assert::NONE)?;
    let t = Instant::now();
    if me < 2 {
        for r in 0..ROUNDS {
            let turn = 2 * r + me as u64;
            match raw {
                Some(a) => {
                    while a.load(Ordering::Acquire) != turn {
                        std::hint::spin_loop();
                    }
                    a.fetch_add(1, Ordering::AcqRel);
                }
                None => {
                    while win.fetch_and_op(0, 1, 1, Op::NoOp)? != turn {
                        std::hint::spin_loop();
                    }
                    win.fetch_and_op(1, 1, 1, Op::Sum)?;
                }
            }
        }
    }
    let per = ns(t, ROUNDS);
    win.unlock_all()?;
    win.comm().barrier()?;
    if me < 2 {
        let mut v = [0u64];
        win.lock_all(Assert::NONE)?;
        win.get(&mut v, 1, 1)?;
        win.unlock_all()?;
        assert_eq!(v[0], 2 * ROUNDS, "round-trip counter");
    }
    Ok(per)
}

fn report(w: &Comm, label: &str, raw: f64, ours: f64) {
    if w.rank() == 0 {
        println!("{label:<44} {raw:>10.1} {ours:>12.1} {:>8.2}x", ours / raw);
    }
}

fn main() -> onesided::Result<()> {
    let universe = onesided::init()?;
    let w = universe.world();
    if w.size() < 2 {
        eprintln!("atomics needs 2 ranks: osrun -n 2 target/release/examples/atomics");
        std::process::exit(2);
    }
    let alloc = Window::<u64>::allocate(w, 2)?;
    // Raw atomics on exactly the memory the window operations use.
    let shared = alloc
        .shared_query(1)?
        .expect("allocate windows are shared memory");
    // SAFETY: element 0 and 1 of rank 1's window: mapped, aligned, live as long as `alloc`,
    // and only accessed atomically in this program.
    let raw0 = unsafe { AtomicU64::from_ptr(shared.as_ptr()) };
    let raw1 = unsafe { AtomicU64::from_ptr(shared.as_ptr().add(1)) };

    let mut raw_ns = 0.0;
    if w.rank() == 0 {
        raw0.store(0, Ordering::Relaxed);
        let t = Instant::now();
        for _ in 0..N {
            black_box(raw0.fetch_add(black_box(1), Ordering::AcqRel));
        }
        raw_ns = ns(t, N);
        assert_eq!(raw0.load(Ordering::Relaxed), N);
    }
    w.barrier()?;
    let a = uncontended(&alloc)?;
    let create_shm = Window::create(w, alloc_mem::<u64>(2)?)?;
    let c = uncontended(&create_shm)?;
    let create_cma = Window::create(w, vec![0u64; 2])?;
    let v = uncontended(&create_cma)?;

    if w.rank() == 0 {
        println!("8-byte atomics, rank 0 on rank 1's memory (ns per operation; data verified)");
        println!(
            "{:<44} {:>10} {:>12} {:>9}",
            "uncontended", "raw atomic", "onesided", "ratio"
        );
    }
    report(w, "fetch_and_op(sum), allocate", raw_ns, a[0]);
    report(w, "compare_and_swap, allocate", raw_ns, a[1]);
    report(w, "accumulate(sum, 1 element), allocate", raw_ns, a[2]);
    report(w, "fetch_and_op(sum), create over alloc_mem", raw_ns, c[0]);
    report(w, "compare_and_swap, create over alloc_mem", raw_ns, c[1]);
    report(
        w,
        "fetch_and_op(sum), create over vec (lock+CMA)",
        raw_ns,
        v[0],
    );
    report(
        w,
        "compare_and_swap, create over vec (lock+CMA)",
        raw_ns,
        v[1],
    );

    let raw_rt = round_trip(&alloc, Some(raw1))?;
    let ours_rt = round_trip(&alloc, None)?;
    if w.rank() == 0 {
        println!(
            "{:<44} {:>10} {:>12} {:>9}",
            "round trip between ranks 0 and 1", "raw atomic", "onesided", "ratio"
        );
    }
    report(w, "wait + fetch-add, allocate", raw_rt, ours_rt);
    drop(create_cma.free()?);
    drop(create_shm.free()?);
    alloc.free()?;
    Ok(())
}
