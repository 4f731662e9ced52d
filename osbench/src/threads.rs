//! `thread-flush`: seed 000 Figs. 8–9 in the style of RMA-MT — several threads of one
//! process each put 8 bytes to their own slot at another process and flush, over and over.
//!
//! Three ways to share the window: `process-scope` (MPI's flush: every thread's operations
//! complete), `thread-scope` (`mpi_win_scope=thread`: a flush completes the calling
//! thread's operations only) and `mutex` (process scope, each put+flush under one mutex: what
//! an application does when its MPI cannot be trusted with concurrent calls). The value is
//! the mean time of one put+flush as each thread sees it, in µs, with `threads` set (the
//! median of three measurements, the modes taking turns): the
//! threads' busy time over all their operations, so that a thread the mutex starves (it is
//! not fair) weighs by the few operations it did rather than as much as the others. After
//! every measurement the origin reads each thread's slot back and checks it holds that
//! thread's last value. Seed 000 Fig. 11 adds `process-scope-ordered` (process scope with
//! `mpi_win_order`: every thread's operations land in issue order; onesided only). On
//! `create` windows every mode is measured a second time with the target asleep outside
//! the library for the whole loop (records with `delay_us`): there nothing serves the
//! origin's requests, small puts are staged per thread and flushes write them by
//! cross-memory attach.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::backend::{BResult, Backend, BenchError, BenchWin};
use crate::bench::{median, Params};
use crate::report::Record;

/// Words between two threads' slots (a cache line each).
const STRIDE: usize = 8;

/// Measurements of every mode at every thread count (the median is reported).
const ROUNDS: usize = 3;

/// The ways of sharing (see the module docs).
const MODES: [&str; 4] = [
    "process-scope",
    "thread-scope",
    "mutex",
    "process-scope-ordered",
];

pub fn thread_flush<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()>
where
    B::Win<u64>: Sync,
{
    if !b.threads_supported() {
        if b.comm().rank() == 0 {
            eprintln!(
                "osbench: thread-flush: {} was not initialized with MPI_THREAD_MULTIPLE; skipped",
                b.name()
            );
        }
        return Ok(());
    }
    let Some(pair) = b.prefix(2)? else {
        return Ok(());
    };
    let budget = p.budget.max(Duration::from_millis(50)) / ROUNDS as u32;
    let max_threads = p.threads.iter().copied().max().unwrap_or(1);
    for &kind in &p.windows {
        if let Some(why) = pair.known_defect("thread-flush", kind) {
            if pair.comm().rank() == 0 {
                eprintln!("osbench: thread-flush {}: skipped: {why}", kind.name());
            }
            continue;
        }
        let win = pair.window::<u64>(kind, max_threads * STRIDE)?;
        // Over ordinary memory (`create`), where the target is matters: inside the library
        // it can serve the origin's requests; away from it (asleep, as in `progress`), small
        // puts are staged and a flush writes them with cross-memory attach — the windows
        // "where operations are staged" of seed 000's thread-scope claim.
        let aways: &[Option<Duration>] = if kind.name() == "create" {
            &[None, Some(budget)]
        } else {
            &[None]
        };
        for &away in aways {
            for &threads in &p.threads {
                // The modes take turns, ROUNDS times, and each reports its median: a machine
                // whose speed drifts during the run (a shared 2-core VM does) then skews no
                // mode against another.
                let mut times: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
                for _ in 0..ROUNDS {
                    for (m, mode) in MODES.iter().enumerate() {
                        let in_force = win.set_thread_scope(*mode == "thread-scope")?
                            && win.set_order(*mode == "process-scope-ordered")?;
                        if in_force {
                            let serialize = *mode == "mutex";
                            let run = Run {
                                threads,
                                serialize,
                                budget,
                                away,
                            };
                            times[m].push(measure(&pair, &win, run)?);
                        }
                    }
                }
                for (mode, mut t) in MODES.iter().zip(times) {
                    if pair.comm().rank() != 0 || t.is_empty() {
                        continue;
                    }
                    let mut r = Record::new(
                        "thread-flush",
                        &pair,
                        kind.name(),
                        "flush",
                        8,
                        mode,
                        median(&mut t),
                        "us",
                    );
                    r.threads = Some(threads as u64);
                    r.stat = Some("median".into());
                    r.delay_us = away.map(|d| d.as_secs_f64() * 1e6);
                    out.push(r);
                }
            }
        }
        win.set_thread_scope(false)?;
        win.set_order(false)?;
        win.free()?;
    }
    Ok(())
}

/// One measurement's settings.
#[derive(Clone, Copy)]
struct Run {
    /// Threads at the origin.
    threads: usize,
    /// Each put+flush under one mutex.
    serialize: bool,
    /// How long the threads go on.
    budget: Duration,
    /// The target stays out of the library this long (asleep) instead of waiting in it.
    away: Option<Duration>,
}

/// One measurement: rank 0 runs `threads` threads for `budget`; returns the mean µs per
/// put+flush over the threads (rank 1 returns 0 and only waits).
fn measure<B: Backend>(b: &B, win: &B::Win<u64>, run: Run) -> BResult<f64>
where
    B::Win<u64>: Sync,
{
    let Run {
        threads,
        serialize,
        budget,
        away,
    } = run;
    let origin = b.comm().rank() == 0;
    b.comm().barrier()?;
    let mut us = 0.0;
    if origin {
        win.lock_all()?;
        let gate = Mutex::new(());
        let deadline = Instant::now() + budget;
        let runs: Vec<BResult<(u64, Duration)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let gate = &gate;
                    s.spawn(move || -> BResult<(u64, Duration)> {
                        let start = Instant::now();
                        let mut n = 0u64;
                        // At least one put each: a thread the scheduler starts after the
                        // deadline must still leave its mark for the check below.
                        while n == 0 || Instant::now() < deadline {
                            n += 1;
                            let value = ((t as u64) << 48) | n;
                            let _held =
                                serialize.then(|| gate.lock().unwrap_or_else(|e| e.into_inner()));
                            // Named: MPI may read it as late as the flush.
                            let value = [value];
                            win.put(&value, 1, t * STRIDE)?;
                            win.flush(1)?;
                        }
                        Ok((n, start.elapsed()))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(BenchError("a thread panicked".into())))
                })
                .collect()
        });
        let (mut ops, mut busy) = (0u64, 0.0f64);
        for (t, run) in runs.into_iter().enumerate() {
            let (n, took) = run?;
            let mut got = [0u64];
            win.get(&mut got, 1, t * STRIDE)?;
            win.flush(1)?;
            let want = ((t as u64) << 48) | n;
            if got[0] != want {
                return Err(BenchError(format!(
                    "thread-flush: thread {t}'s slot holds {:#x}, its last put was {want:#x}",
                    got[0]
                )));
            }
            ops += n;
            busy += took.as_secs_f64() * 1e6;
        }
        win.unlock_all()?;
        us = busy / ops.max(1) as f64;
    }
    if let (false, Some(away)) = (origin, away) {
        // Away until the origin's loop is over.
        crate::bench::sleep_outside_library(away);
    }
    // Otherwise the target waits inside the library, as OSU's does in its next
    // synchronization: an implementation that needs the target's CPU to serve RMA gets it.
    b.library_barrier()?;
    Ok(us)
}
