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

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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

/// The first two processes of `b`, where both may run threads in the library (`None`
/// elsewhere, and said once when the MPI was not initialized for threads): the pair the
/// thread benchmarks run on.
fn thread_pair<B: Backend>(b: &B, bench: &str) -> BResult<Option<B>> {
    if !b.threads_supported() {
        if b.comm().rank() == 0 {
            eprintln!(
                "osbench: {bench}: {} was not initialized with MPI_THREAD_MULTIPLE; skipped",
                b.name()
            );
        }
        return Ok(None);
    }
    b.prefix(2)
}

pub fn thread_flush<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()>
where
    B::Win<u64>: Sync,
{
    let Some(pair) = thread_pair(b, "thread-flush")? else {
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

/// Words of one streamed put of `thread-flush --mix` (1 MiB).
const STREAM_WORDS: usize = (1 << 20) / 8;

/// Puts each streaming thread of `--mix` keeps in flight; it flushes after every
/// `STREAM_DEPTH` of them.
const STREAM_DEPTH: usize = 4;

/// Ways of sharing the window in `--mix` (the small-flush thread's point of view):
/// alone, then beside the streams with each scope.
const MIX_MODES: [&str; 3] = ["no-streams", "process-scope", "thread-scope"];

/// Where put `i` of streaming thread `s` lands (after the small thread's slot).
fn stream_region(s: usize, i: usize) -> usize {
    STRIDE + (s * STREAM_DEPTH + i) * STREAM_WORDS
}

/// Word `w` of put `i` of streaming thread `s`: every word says whose and where it is, so
/// that a misplaced or torn block is seen by the check.
fn stream_word(s: usize, i: usize, w: usize) -> u64 {
    ((s as u64 + 1) << 56) | ((i as u64) << 48) | w as u64
}

/// `thread-flush --mix` (seed 000's thread-scope claim, where it pays): one thread does
/// 8-byte put + flush over and over while `streams` other threads (`--streams`, 1–3 by
/// default) stream 1 MiB puts to the same target, each keeping [`STREAM_DEPTH`] puts in
/// flight (`BenchWin::put_shared`: neither copied nor waited for) and flushing after every
/// [`STREAM_DEPTH`]. Reported, per window kind: the small-flush thread's mean time per
/// put and flush (metric `no-streams`, `process-scope`, `thread-scope`; `pattern` says the
/// streams), its median and 99th percentile (`role` = `p50`, `p99`: every
/// [`SAMPLE_EVERY`]th operation timed alone) and the streams' bandwidth (`role` =
/// `streams`, MB/s). A flush of process scope
/// waits for every thread's operations, so the small thread waits behind megabytes; one of
/// thread scope waits for its own. The modes take turns, [`ROUNDS`] times, medians
/// reported; after every measurement the origin reads the small slot and every streamed
/// block back and checks them.
pub fn thread_flush_mix<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()>
where
    B::Win<u64>: Sync,
{
    let Some(pair) = thread_pair(b, "thread-flush --mix")? else {
        return Ok(());
    };
    let Some(max_streams) = p.streams.iter().copied().max() else {
        return Ok(());
    };
    // A process-scope flush may wait for megabytes: a longer loop than the other cells'.
    let budget = p.budget.max(Duration::from_millis(300)) / ROUNDS as u32;
    let len = stream_region(max_streams, 0);
    // The streamed blocks, made once: every put of a round sends the same ones.
    let blocks: Vec<Vec<Arc<[u64]>>> = (0..max_streams)
        .map(|s| {
            (0..STREAM_DEPTH)
                .map(|i| (0..STREAM_WORDS).map(|w| stream_word(s, i, w)).collect())
                .collect()
        })
        .collect();
    let zeros = vec![0u64; len];
    for &kind in &p.windows {
        if let Some(why) = pair.known_defect("thread-flush", kind) {
            if pair.comm().rank() == 0 {
                eprintln!(
                    "osbench: thread-flush --mix {}: skipped: {why}",
                    kind.name()
                );
            }
            continue;
        }
        let win = pair.window::<u64>(kind, len)?;
        // (streams, mode) → what every round found.
        let mut cells: Vec<(usize, &str, Vec<MixResult>)> = Vec::new();
        for _ in 0..ROUNDS {
            for &streams in std::iter::once(&0).chain(&p.streams) {
                for mode in MIX_MODES {
                    if (streams == 0) != (mode == "no-streams") {
                        continue;
                    }
                    if !win.set_thread_scope(mode == "thread-scope")? {
                        continue;
                    }
                    let mix = Mix {
                        streams,
                        budget,
                        blocks: &blocks,
                        zeros: &zeros,
                    };
                    let found = measure_mix(&pair, &win, mix)?;
                    match cells.iter_mut().find(|c| c.0 == streams && c.1 == mode) {
                        Some(c) => c.2.push(found),
                        None => cells.push((streams, mode, vec![found])),
                    }
                }
            }
        }
        win.set_thread_scope(false)?;
        win.free()?;
        if pair.comm().rank() != 0 {
            continue;
        }
        for (streams, mode, rounds) in cells {
            let pattern = if streams == 0 {
                "no streams".to_string()
            } else {
                format!(
                    "{streams} stream{} of {STREAM_DEPTH} x 1 MiB in flight",
                    if streams == 1 { "" } else { "s" }
                )
            };
            let median_of = |f: fn(&MixResult) -> f64| {
                let mut v: Vec<f64> = rounds.iter().map(f).collect();
                median(&mut v)
            };
            let record = |bytes: usize, value: f64, unit: &str, role: Option<&str>| {
                let mut r = Record::new(
                    "thread-flush",
                    &pair,
                    kind.name(),
                    "mix",
                    bytes,
                    mode,
                    value,
                    unit,
                );
                r.stat = Some("median".into());
                r.pattern = Some(pattern.clone());
                r.role = role.map(Into::into);
                r
            };
            // The small thread's mean (what it sees over its loop), then its typical and
            // its rare operation.
            out.push(record(8, median_of(|r| r.mean_us), "us", None));
            out.push(record(8, median_of(|r| r.p50_us), "us", Some("p50")));
            out.push(record(8, median_of(|r| r.p99_us), "us", Some("p99")));
            if streams > 0 {
                out.push(record(
                    1 << 20,
                    median_of(|r| r.streams_mbps),
                    "MB/s",
                    Some("streams"),
                ));
            }
        }
    }
    Ok(())
}

/// One `--mix` measurement's settings.
struct Mix<'a> {
    /// Streaming threads beside the small-flush thread.
    streams: usize,
    /// How long the small-flush thread goes on.
    budget: Duration,
    /// Each streaming thread's blocks.
    blocks: &'a [Vec<Arc<[u64]>>],
    /// A whole window of zeros: the target clears its memory before every measurement, so
    /// that the check after it sees this measurement's data.
    zeros: &'a [u64],
}

/// Tells the other threads of a `--mix` measurement to stop when dropped — by a thread
/// that failed too, so that none waits for ever.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        // Release: the stopping thread's operations come before the others' last flush.
        self.0.store(true, Ordering::Release);
    }
}

/// What one `--mix` measurement found at rank 0.
#[derive(Clone, Copy, Default)]
struct MixResult {
    /// The small-flush thread's mean time per put + flush.
    mean_us: f64,
    /// Its median and 99th percentile over the operations timed alone.
    p50_us: f64,
    p99_us: f64,
    /// What the streams moved per second, over the longest-running stream's time.
    streams_mbps: f64,
}

/// Every this many put + flush of the small thread one is timed alone (two clock reads
/// cost about as much as a put + flush on an `allocate` window of this node).
const SAMPLE_EVERY: u64 = 16;

/// The `q` quantile of `v` (sorted here; 0 when empty).
fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// One `--mix` measurement (rank 1 returns zeros and only waits, inside the library).
fn measure_mix<B: Backend>(b: &B, win: &B::Win<u64>, mix: Mix<'_>) -> BResult<MixResult>
where
    B::Win<u64>: Sync,
{
    let origin = b.comm().rank() == 0;
    if !origin {
        win.write_local(0, mix.zeros)?;
    }
    b.comm().barrier()?;
    let mut result = MixResult::default();
    if origin {
        win.lock_all()?;
        let stop = AtomicBool::new(false);
        let started = AtomicUsize::new(0);
        let (small, streams) = std::thread::scope(|s| {
            let (stop, started) = (&stop, &started);
            let streams: Vec<_> = (0..mix.streams)
                .map(|t| {
                    let blocks = &mix.blocks[t];
                    s.spawn(move || -> BResult<(u64, Duration)> {
                        let _stop = StopOnDrop(stop);
                        let begin = Instant::now();
                        let mut rounds = 0u64;
                        loop {
                            for (i, block) in blocks.iter().enumerate() {
                                win.put_shared(block, 1, stream_region(t, i))?;
                            }
                            if rounds == 0 {
                                // Relaxed: a count the small thread only waits on.
                                started.fetch_add(1, Ordering::Relaxed);
                            }
                            win.flush(1)?;
                            rounds += 1;
                            // Acquire: pairs with StopOnDrop's Release.
                            if stop.load(Ordering::Acquire) {
                                return Ok((rounds, begin.elapsed()));
                            }
                        }
                    })
                })
                .collect();
            let small = s.spawn(move || -> BResult<(u64, Duration, Vec<f64>)> {
                let _stop = StopOnDrop(stop);
                // The loop starts once every stream has its first puts in flight.
                while started.load(Ordering::Relaxed) < mix.streams {
                    if stop.load(Ordering::Acquire) {
                        return Err(BenchError("thread-flush --mix: a stream failed".into()));
                    }
                    std::thread::yield_now();
                }
                let begin = Instant::now();
                let deadline = begin + mix.budget;
                let mut n = 0u64;
                let mut sampled = Vec::new();
                while n == 0 || Instant::now() < deadline {
                    n += 1;
                    // Named: the put may read it as late as the flush.
                    let value = [(1u64 << 63) | n];
                    // Every SAMPLE_EVERY-th put + flush is timed alone, for the
                    // percentiles: the mean is dominated by the few long waits.
                    let timed = (n % SAMPLE_EVERY == 1).then(Instant::now);
                    win.put(&value, 1, 0)?;
                    win.flush(1)?;
                    if let Some(t) = timed {
                        sampled.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                Ok((n, begin.elapsed(), sampled))
            });
            let small = small
                .join()
                .unwrap_or_else(|_| Err(BenchError("a thread panicked".into())));
            let streams: Vec<_> = streams
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(BenchError("a thread panicked".into())))
                })
                .collect();
            (small, streams)
        });
        let (n, took, mut sampled) = small?;
        let mut moved = 0u64;
        let mut longest = Duration::ZERO;
        for run in streams {
            let (rounds, t) = run?;
            moved += rounds * (STREAM_DEPTH * STREAM_WORDS * 8) as u64;
            longest = longest.max(t);
        }
        // The data check: the small slot holds the last value, every streamed block
        // arrived whole in its place.
        let mut got = [0u64];
        win.get(&mut got, 1, 0)?;
        win.flush(1)?;
        if got[0] != (1u64 << 63) | n {
            return Err(BenchError(format!(
                "thread-flush --mix: the small slot holds {:#x}, its last put was {:#x}",
                got[0],
                (1u64 << 63) | n
            )));
        }
        let mut block = vec![0u64; STREAM_WORDS];
        for (t, blocks) in mix.blocks.iter().take(mix.streams).enumerate() {
            for (i, want) in blocks.iter().enumerate() {
                win.get(&mut block, 1, stream_region(t, i))?;
                win.flush(1)?;
                if let Some(w) = (0..STREAM_WORDS).find(|&w| block[w] != want[w]) {
                    return Err(BenchError(format!(
                        "thread-flush --mix: stream {t}'s block {i} holds {:#x} at word {w}, not {:#x}",
                        block[w], want[w]
                    )));
                }
            }
        }
        win.unlock_all()?;
        result = MixResult {
            mean_us: took.as_secs_f64() * 1e6 / n as f64,
            p50_us: percentile(&mut sampled, 0.50),
            p99_us: percentile(&mut sampled, 0.99),
            streams_mbps: moved as f64 / longest.as_secs_f64().max(1e-9) / 1e6,
        };
    }
    // The target waits inside the library, as in `measure`.
    b.library_barrier()?;
    Ok(result)
}
