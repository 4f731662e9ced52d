//! Nonblocking synchronization (\[Zounmevo14\] §VIII-B): the five inefficiency patterns, each
//! run with blocking and with nonblocking epoch calls in the same job (`sync-patterns`),
//! and lock transactions (`transactions`, Fig. 12).
//!
//! Every epoch moves one 1 MiB put on an allocate window, checked byte for byte at its
//! target after every repetition. Delays are sleeps (2 ms unless said), not computation:
//! with 2 cores, a computing rank would steal the core of the rank it waits for. Each
//! pattern measures the process the paper measures, from a barrier-aligned start:
//!
//! | pattern | ranks | measured | blocking | nonblocking |
//! |---|---|---|---|---|
//! | late-post | target 0 (posts 2 ms late), 1, origin 2 | origin: start of its epoch to the end of the activity after it (a 1 MiB put + flush to rank 1 on a second window) | start, put, complete, activity | istart, put (copied), icomplete, activity, wait |
//! | late-complete | target 0, origin 1 | target: post to the end of its wait | origin: start, put, sleep, complete | start, put, icomplete, sleep, wait |
//! | early-fence | target 0, origin 1 | target: its epoch plus work after it (a sleep as long as one 1 MiB put) | fence, then work | ifence, work, wait |
//! | wait-at-fence | target 0, origin 1 | target: opening to closing fence | origin: put, sleep, fence | put, ifence, sleep, wait |
//! | late-unlock | target 0, O0 1, O1 2 | O1: its lock to its unlock | O0: lock, put, sleep, unlock | ilock, put, iunlock, sleep, wait |
//!
//! One more measurement for the close calls themselves (`*-close-call`, role target): the
//! target of late-complete calls `wait` / `iwait` while its origin is 50 ms late.

use std::time::{Duration, Instant};

use onesided::{Assert, Comm, Group, LockType, Request, Window};

use crate::backend::{BResult, BenchError};
use crate::bench::{median, Params};
use crate::report::Record;

/// Bytes of the put of every epoch.
const PUT_BYTES: usize = 1 << 20;
/// The delay of the late process.
const DELAY: Duration = Duration::from_millis(2);
/// The delay of the close-call measurement.
const LATE_PEER: Duration = Duration::from_millis(50);

/// Blocking or nonblocking epoch calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Blocking,
    Nonblocking,
}

impl Style {
    fn name(self) -> &'static str {
        match self {
            Style::Blocking => "blocking",
            Style::Nonblocking => "nonblocking",
        }
    }
}

/// The put data of repetition `rep` from `origin`: never all zeros, different every time.
fn payload(rep: u64, origin: usize) -> Vec<u8> {
    let salt = rep.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((origin as u64) << 40);
    (0..PUT_BYTES)
        .map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(salt) >> 13) as u8 | 1)
        .collect()
}

/// True when `win`'s local memory at `offset` holds `expected`.
fn holds(win: &Window<u8>, offset: usize, expected: &[u8]) -> BResult<bool> {
    let mut got = vec![0u8; expected.len()];
    win.local_read(offset, &mut got)?;
    Ok(got == expected)
}

/// Waits `d` without computing. Below 1 ms it sleeps for most of it, then yields until the
/// deadline (a sleep alone overshoots by the timer slack, ~50 µs, as long as a 1 MiB copy
/// here).
fn pause(d: Duration) {
    if d >= Duration::from_millis(1) {
        // A late process: its lateness needs no microsecond precision, and a yielding
        // tail would take a core from the processes being measured.
        std::thread::sleep(d);
        return;
    }
    let deadline = Instant::now() + d;
    if let Some(coarse) = d.checked_sub(Duration::from_micros(200)) {
        std::thread::sleep(coarse);
    }
    while Instant::now() < deadline {
        std::thread::yield_now();
    }
}

/// Finishes a nonblocking close (a no-op for a blocking one).
fn finish(r: Option<Request<'_>>) -> BResult<()> {
    if let Some(r) = r {
        r.wait()?;
    }
    Ok(())
}

/// `n` ranks of `comm` spread evenly over its nodes, as a communicator (`None` at the
/// others): the nodes' ranks taken in turn (node of rank 0 first), so that on one node
/// these are the first `n` ranks and across nodes each node holds its share — rank 0 stays
/// rank 0.
fn spread(comm: &Comm, n: usize) -> BResult<Option<Comm>> {
    let mut by_node: Vec<(usize, Vec<usize>)> = Vec::new();
    for r in 0..comm.size() {
        let node = comm.node_of(r)?;
        match by_node.iter_mut().find(|(k, _)| *k == node) {
            Some((_, ranks)) => ranks.push(r),
            None => by_node.push((node, vec![r])),
        }
    }
    let mut order: Vec<usize> = Vec::with_capacity(comm.size());
    for i in 0.. {
        let before = order.len();
        order.extend(by_node.iter().filter_map(|(_, ranks)| ranks.get(i)));
        if order.len() == before {
            break;
        }
    }
    let me = comm.rank();
    let at = order
        .iter()
        .position(|&r| r == me)
        .expect("every rank is on a node");
    Ok(comm.split((at < n).then_some(0), at)?)
}

/// The first `n` ranks of `comm` as a communicator (`None` at the others).
fn first(comm: &Comm, n: usize) -> BResult<Option<Comm>> {
    let me = comm.rank();
    Ok(comm.split((me < n).then_some(0), me)?)
}

/// Median over repetitions of the times `rank` measured; every rank of `comm` gets it. The
/// median, not the mean: on a shared 2-core machine one descheduled repetition in twenty
/// can move a mean of ~100 µs epochs by half (records say `stat` = `median`).
fn median_at(comm: &Comm, rank: usize, mine: &[f64]) -> BResult<f64> {
    let mut v = [median(&mut mine.to_vec())];
    comm.bcast(rank, &mut v)?;
    Ok(v[0])
}

fn check(comm: &Comm, ok: bool, what: &str) -> BResult<()> {
    if comm.agree(ok)? {
        Ok(())
    } else {
        Err(BenchError(format!(
            "sync-patterns {what}: data validation failed"
        )))
    }
}

/// What the repetitions of one pattern measured at this rank: times in µs (slot 0: the
/// measured epoch; slot 1, in the reorder scenarios: the origin's total), and whether every
/// data check passed.
struct Tally {
    times: [Vec<f64>; 2],
    ok: bool,
}

impl Tally {
    /// The median of slot `which` as measured at `rank`, known at every rank.
    fn median(&self, comm: &Comm, which: usize, rank: usize) -> BResult<f64> {
        median_at(comm, rank, &self.times[which])
    }
}

/// Runs `reps` repetitions of a pattern, each after a barrier; `rep` records its times and
/// checks in the tally. A failed check at any rank is an error at every rank. `prepare`
/// makes a repetition's data before the barriers: generating 1 MiB takes ~0.5 ms of CPU
/// here, and done after them by ranks that share cores, one rank's generation delayed
/// another's measured epoch (the reorder victims took 0.6–1.5 ms instead of 0.1).
fn repeat<D>(
    comm: &Comm,
    reps: u64,
    what: &str,
    mut prepare: impl FnMut(u64) -> D,
    mut rep: impl FnMut(u64, D, &mut Tally) -> BResult<()>,
) -> BResult<Tally> {
    let mut tally = Tally {
        times: Default::default(),
        ok: true,
    };
    for i in 0..reps {
        let data = prepare(i);
        // Twice: a rank that waited long in the first (for another's validation) may be
        // in a backoff sleep and leave it late; the second starts everyone together.
        comm.barrier()?;
        comm.barrier()?;
        rep(i, data, &mut tally)?;
    }
    check(comm, tally.ok, what)?;
    Ok(tally)
}

/// One pattern, one style: `reps` repetitions; returns the median of the measured process's
/// times in µs (at every rank of `comm`).
type PatternFn = fn(&Comm, &Window<u8>, &Window<u8>, Style, u64, Duration) -> BResult<f64>;

/// `sync-patterns`.
pub fn sync_patterns(comm: &Comm, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let reps = p.iters.unwrap_or(20).max(1);
    let patterns: [(&str, usize, &str, PatternFn); 5] = [
        ("late-post", 3, "origin", late_post),
        ("late-complete", 2, "target", late_complete),
        ("early-fence", 2, "target", early_fence),
        ("wait-at-fence", 2, "target", wait_at_fence),
        ("late-unlock", 3, "origin", late_unlock),
    ];
    for (name, ranks, role, run) in patterns {
        if comm.size() < ranks {
            if comm.rank() == 0 {
                eprintln!("sync-patterns: {name} needs {ranks} processes, skipped");
            }
            continue;
        }
        let Some(sub) = first(comm, ranks)? else {
            continue;
        };
        // Window A carries the epochs (two puts fit: late-unlock's origins write one MiB
        // each); window B the activity after them (late-post).
        let a = Window::<u8>::allocate(&sub, 2 * PUT_BYTES)?;
        let b = Window::<u8>::allocate(&sub, PUT_BYTES)?;
        let work = if name == "early-fence" {
            fence_put_time(&sub, &a, 12)?
        } else {
            Duration::ZERO
        };
        for style in [Style::Blocking, Style::Nonblocking] {
            // Warm-up: one untimed repetition.
            run(&sub, &a, &b, style, 1, work)?;
            let us = run(&sub, &a, &b, style, reps, work)?;
            if sub.rank() == 0 {
                out.push(
                    pattern_record(name, style.name(), ranks, us)
                        .with_role(role)
                        .with_delay_us(DELAY.as_secs_f64() * 1e6),
                );
            }
        }
        if name == "late-complete" {
            for style in [Style::Blocking, Style::Nonblocking] {
                let us = close_call(&sub, &a, style, reps.min(5))?;
                if sub.rank() == 0 {
                    out.push(
                        pattern_record(name, &format!("{}-close-call", style.name()), ranks, us)
                            .with_role("target")
                            .with_delay_us(LATE_PEER.as_secs_f64() * 1e6),
                    );
                }
            }
        }
        a.free()?;
        b.free()?;
    }
    reorder_scenarios(comm, reps, out)?;
    progress_thread(comm, reps, out)?;
    comm.barrier()?;
    Ok(())
}

/// How long the origin computes after closing its epoch, without calling the library.
const COMPUTE: Duration = Duration::from_millis(5);

/// What the progress thread buys (\[Zounmevo14\] §VII-D) when the origin computes without
/// calling in: target 0 posts 2 ms late; origin 1 opens its epoch (`istart`), puts 1 MiB
/// (deferred, copied), closes it (`icomplete`) and computes for 5 ms without a call. The
/// target's epoch (post to the end of its wait) ends when the deferred put lands and the
/// epoch completes: when the origin calls in again, or — with the progress thread — as soon
/// as the post arrives. Measured without the thread, then with it (started here and stopped
/// again, so later benchmarks of the job run as before; if `ONESIDED_PROGRESS_THREAD=1`
/// already started it, only `on` is measured). `sync` = `progress-thread`, metrics `off` /
/// `on`.
fn progress_thread(comm: &Comm, reps: u64, out: &mut Vec<Record>) -> BResult<()> {
    let Some(sub) = first(comm, 2)? else {
        return Ok(());
    };
    let win = Window::<u8>::allocate(&sub, PUT_BYTES)?;
    let started_here = !onesided::progress_thread_running();
    for metric in ["off", "on"] {
        let running = sub.allgather(&[u8::from(onesided::progress_thread_running())])?;
        if metric == "off" && running.contains(&1) {
            continue;
        }
        if metric == "on" {
            onesided::start_progress_thread();
        }
        // One untimed repetition first.
        let tally = repeat(
            &sub,
            reps + 1,
            "progress-thread",
            |rep| payload(rep + 2000, 1),
            |rep, data, t| {
                if sub.rank() == 0 {
                    pause(DELAY);
                    let t0 = Instant::now();
                    win.post(&Group::single(1), Assert::NONE)?;
                    settle(win.iwait()?)?;
                    if rep > 0 {
                        t.times[0].push(since(t0));
                    }
                    t.ok &= holds(&win, 0, &data)?;
                } else {
                    win.istart(&Group::single(0), Assert::NONE)?.wait()?;
                    win.put(&data, 0, 0)?;
                    let closing = win.icomplete()?;
                    std::thread::sleep(COMPUTE); // computing: no library call
                    closing.wait()?;
                }
                Ok(())
            },
        )?;
        let us = tally.median(&sub, 0, 0)?;
        if sub.rank() == 0 {
            out.push(
                pattern_record("progress-thread", metric, 2, us)
                    .with_role("target")
                    .with_delay_us(COMPUTE.as_secs_f64() * 1e6),
            );
        }
    }
    if started_here {
        onesided::stop_progress_thread();
    }
    win.free()?;
    Ok(())
}

fn pattern_record(sync: &str, metric: &str, ranks: usize, us: f64) -> Record {
    let mut r = Record::onesided(
        "sync-patterns",
        "allocate",
        sync,
        PUT_BYTES,
        ranks,
        metric,
        us,
        "us",
    );
    r.stat = Some("median".into());
    r
}

/// The early-fence work: the median duration of the origin's 1 MiB put inside the pattern
/// itself (fence epochs, the target validating in between), measured before the timed runs
/// after two untimed repetitions (the first touches of a new window fault its pages in).
fn fence_put_time(comm: &Comm, a: &Window<u8>, reps: u64) -> BResult<Duration> {
    let tally = repeat(
        comm,
        reps,
        "early-fence calibration",
        |rep| payload(rep, 1),
        |rep, data, t| {
            open_fence(a)?;
            if comm.rank() == 1 {
                let t0 = Instant::now();
                a.put(&data, 0, 0)?;
                if rep >= 2 {
                    t.times[0].push(since(t0));
                }
            }
            a.fence(Assert::NOSUCCEED)?;
            if comm.rank() == 0 {
                t.ok &= holds(a, 0, &data)?;
            }
            Ok(())
        },
    )?;
    Ok(Duration::from_secs_f64(tally.median(comm, 0, 1)? * 1e-6))
}

fn late_post(
    comm: &Comm,
    a: &Window<u8>,
    b: &Window<u8>,
    style: Style,
    reps: u64,
    _work: Duration,
) -> BResult<f64> {
    let me = comm.rank();
    let activity = payload(7, 2);
    b.lock_all(Assert::NONE)?;
    let tally = repeat(
        comm,
        reps,
        "late-post",
        |rep| payload(rep, 2),
        |_, data, t| {
            match me {
                0 => {
                    pause(DELAY);
                    a.post(&Group::single(2), Assert::NONE)?;
                    a.wait()?;
                    t.ok &= holds(a, 0, &data)?;
                }
                2 => {
                    let t0 = Instant::now();
                    let closing = match style {
                        Style::Blocking => {
                            a.start(&Group::single(0), Assert::NONE)?;
                            a.put(&data, 0, 0)?;
                            a.complete()?;
                            None
                        }
                        Style::Nonblocking => {
                            a.istart(&Group::single(0), Assert::NONE)?.wait()?;
                            a.put(&data, 0, 0)?; // deferred: copied
                            Some(a.icomplete()?)
                        }
                    };
                    b.put(&activity, 1, 0)?;
                    b.flush(1)?;
                    t.times[0].push(since(t0));
                    finish(closing)?;
                }
                _ => {}
            }
            Ok(())
        },
    )?;
    b.unlock_all()?;
    comm.barrier()?;
    let ok = me != 1 || holds(b, 0, &activity)?;
    check(comm, ok, "late-post activity")?;
    tally.median(comm, 0, 2)
}

fn late_complete(
    comm: &Comm,
    a: &Window<u8>,
    _b: &Window<u8>,
    style: Style,
    reps: u64,
    _work: Duration,
) -> BResult<f64> {
    let me = comm.rank();
    let tally = repeat(
        comm,
        reps,
        "late-complete",
        |rep| payload(rep, 1),
        |_, data, t| {
            if me == 0 {
                let t0 = Instant::now();
                a.post(&Group::single(1), Assert::NONE)?;
                match style {
                    Style::Blocking => a.wait()?,
                    Style::Nonblocking => a.iwait()?.wait()?,
                }
                t.times[0].push(t0.elapsed().as_secs_f64() * 1e6);
                t.ok &= holds(a, 0, &data)?;
            } else {
                a.start(&Group::single(0), Assert::NONE)?;
                a.put(&data, 0, 0)?;
                match style {
                    Style::Blocking => {
                        pause(DELAY);
                        a.complete()?;
                    }
                    Style::Nonblocking => {
                        let closing = a.icomplete()?;
                        pause(DELAY);
                        closing.wait()?;
                    }
                }
            }
            Ok(())
        },
    )?;
    tally.median(comm, 0, 0)
}

/// The close calls while the peer is [`LATE_PEER`] late: how long the target's `wait` /
/// `iwait` call itself takes (the request is completed afterwards).
fn close_call(comm: &Comm, a: &Window<u8>, style: Style, reps: u64) -> BResult<f64> {
    let me = comm.rank();
    let tally = repeat(
        comm,
        reps,
        "close-call",
        |rep| payload(rep + 1000, 1),
        |_, data, t| {
            if me == 0 {
                a.post(&Group::single(1), Assert::NONE)?;
                let t0 = Instant::now();
                let closing = match style {
                    Style::Blocking => {
                        a.wait()?;
                        None
                    }
                    Style::Nonblocking => Some(a.iwait()?),
                };
                t.times[0].push(t0.elapsed().as_secs_f64() * 1e6);
                finish(closing)?;
                t.ok &= holds(a, 0, &data)?;
            } else {
                pause(LATE_PEER);
                a.start(&Group::single(0), Assert::NONE)?;
                a.put(&data, 0, 0)?;
                a.complete()?;
            }
            Ok(())
        },
    )?;
    tally.median(comm, 0, 0)
}

/// Opens a fence epoch at every rank, aligned: a second barrier first (after the first,
/// where a rank may have waited for the target's validation long enough to be sleeping in
/// its backoff, every rank arrives promptly), then the target (rank 0) arrives last at the
/// fence, so that it leaves first and its clock starts no later than the origin's put. (An
/// origin arriving last would leave at once while the target may still be waking from a
/// backoff sleep, hiding part of the transfer from the target's measurement.)
fn open_fence(a: &Window<u8>) -> BResult<()> {
    a.comm().barrier()?;
    if a.rank() == 0 {
        pause(Duration::from_micros(50));
    }
    a.fence(Assert::NOPRECEDE)?;
    Ok(())
}

fn close_fence(a: &Window<u8>, style: Style) -> BResult<Option<Request<'_>>> {
    Ok(match style {
        Style::Blocking => {
            a.fence(Assert::NOSUCCEED)?;
            None
        }
        Style::Nonblocking => Some(a.ifence(Assert::NOSUCCEED)?),
    })
}

fn early_fence(
    comm: &Comm,
    a: &Window<u8>,
    _b: &Window<u8>,
    style: Style,
    reps: u64,
    work: Duration,
) -> BResult<f64> {
    let me = comm.rank();
    let tally = repeat(
        comm,
        reps,
        "early-fence",
        |rep| payload(rep, 1),
        |_, data, t| {
            open_fence(a)?;
            if me == 0 {
                let t0 = Instant::now();
                let closing = close_fence(a, style)?;
                pause(work);
                finish(closing)?;
                t.times[0].push(t0.elapsed().as_secs_f64() * 1e6);
                t.ok &= holds(a, 0, &data)?;
            } else {
                a.put(&data, 0, 0)?;
                finish(close_fence(a, style)?)?;
            }
            Ok(())
        },
    )?;
    tally.median(comm, 0, 0)
}

fn wait_at_fence(
    comm: &Comm,
    a: &Window<u8>,
    _b: &Window<u8>,
    style: Style,
    reps: u64,
    _work: Duration,
) -> BResult<f64> {
    let me = comm.rank();
    let tally = repeat(
        comm,
        reps,
        "wait-at-fence",
        |rep| payload(rep, 1),
        |_, data, t| {
            open_fence(a)?;
            if me == 0 {
                let t0 = Instant::now();
                finish(close_fence(a, style)?)?;
                t.times[0].push(t0.elapsed().as_secs_f64() * 1e6);
                t.ok &= holds(a, 0, &data)?;
            } else {
                a.put(&data, 0, 0)?;
                match style {
                    Style::Blocking => {
                        pause(DELAY);
                        a.fence(Assert::NOSUCCEED)?;
                    }
                    Style::Nonblocking => {
                        let closing = a.ifence(Assert::NOSUCCEED)?;
                        pause(DELAY);
                        closing.wait()?;
                    }
                }
            }
            Ok(())
        },
    )?;
    tally.median(comm, 0, 0)
}

fn late_unlock(
    comm: &Comm,
    a: &Window<u8>,
    _b: &Window<u8>,
    style: Style,
    reps: u64,
    _work: Duration,
) -> BResult<f64> {
    let me = comm.rank();
    let tally = repeat(
        comm,
        reps,
        "late-unlock",
        |rep| (payload(rep, 1), payload(rep, 2)),
        |_, (first, second), t| {
            match me {
                1 => {
                    // O0 holds the lock before O1 asks for it.
                    a.lock(LockType::Exclusive, 0, Assert::NONE)?;
                    comm.barrier()?;
                    a.put(&first, 0, 0)?;
                    match style {
                        Style::Blocking => {
                            pause(DELAY);
                            a.unlock(0)?;
                        }
                        Style::Nonblocking => {
                            let closing = a.iunlock(0)?;
                            pause(DELAY);
                            closing.wait()?;
                        }
                    }
                }
                2 => {
                    comm.barrier()?;
                    let t0 = Instant::now();
                    match style {
                        Style::Blocking => {
                            a.lock(LockType::Exclusive, 0, Assert::NONE)?;
                            a.put(&second, 0, PUT_BYTES)?;
                            a.unlock(0)?;
                        }
                        Style::Nonblocking => {
                            a.ilock(LockType::Exclusive, 0, Assert::NONE)?.wait()?;
                            a.put(&second, 0, PUT_BYTES)?;
                            a.iunlock(0)?.wait()?;
                        }
                    }
                    t.times[0].push(t0.elapsed().as_secs_f64() * 1e6);
                }
                _ => comm.barrier()?,
            }
            comm.barrier()?;
            if me == 0 {
                t.ok &= holds(a, 0, &first)? && holds(a, PUT_BYTES, &second)?;
            }
            Ok(())
        },
    )?;
    tally.median(comm, 0, 2)
}

/// `transactions` (\[Zounmevo14\] Fig. 12): every rank runs update transactions — random
/// target, random offset, one exclusive-lock epoch with one 8-byte accumulate each — for a
/// fixed time; throughput in transactions per second over all ranks. `uniform` picks
/// targets uniformly; `hotspot` also sends every origin's every other transaction to
/// rank 0. Blocking epochs wait for each lock; nonblocking ones (`ilock`, `iunlock`) are
/// issued back to back with at most 8 in flight (more let a rank hold tickets in many
/// lock queues at once, and with more ranks than cores a descheduled rank then stalls every
/// queue it heads), so an origin queues its next updates (their accumulates copied) while a
/// lock is held elsewhere, and any completed epoch frees its place (MPI_Waitany);
/// `nonblocking-aaar` does the same on a window with `MPI_WIN_ACCESS_AFTER_ACCESS_REORDER`,
/// so a transaction whose lock is free goes ahead of, and completes before, one waiting for
/// a busy lock ("some can even complete out of order", \[Zounmevo14\] §IV-B). The three
/// variants take turns in `--rounds` rounds of `--time-ms / rounds` each and the median
/// round is reported, so a slow phase of the machine moves one round, not one variant.
/// Every update adds 1: after every round the window sums to the number of transactions,
/// checked. Each rank count's ranks are spread evenly over the job's nodes (on two nodes,
/// the hot-spot rank 0 on one and the updaters on both).
pub fn transactions(comm: &Comm, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let rounds = p.rounds.max(1);
    let budget = (p.budget.max(Duration::from_millis(100)) / rounds).max(Duration::from_millis(20));
    for ranks in crate::bench::rank_counts(comm.size()) {
        if ranks < 2 {
            continue;
        }
        let Some(sub) = spread(comm, ranks)? else {
            continue;
        };
        let plain = Window::<u64>::allocate(&sub, TRANSACTION_SLOTS)?;
        let aaar = Window::<u64>::builder(&sub)
            .info(&onesided::WinInfo::new().reorder(onesided::Reorder {
                access_after_access: true,
                ..onesided::Reorder::NONE
            }))
            .allocate(TRANSACTION_SLOTS)?;
        let variants = [
            ("blocking", Style::Blocking, &plain),
            ("nonblocking", Style::Nonblocking, &plain),
            ("nonblocking-aaar", Style::Nonblocking, &aaar),
        ];
        for hotspot in [false, true] {
            let mut rates = vec![Vec::new(); variants.len()];
            for round in 0..rounds {
                for ((_, style, win), rates) in variants.iter().zip(&mut rates) {
                    let seed = u64::from(round) << 32 | sub.rank() as u64;
                    rates.push(transaction_round(&sub, win, *style, hotspot, seed, budget)?);
                }
            }
            if sub.rank() == 0 {
                for ((metric, ..), mut rates) in variants.iter().zip(rates) {
                    let pattern = if hotspot { "hotspot" } else { "uniform" };
                    let rate = crate::bench::median(&mut rates);
                    let mut r = pattern_record(pattern, metric, ranks, rate);
                    r.bench = "transactions".into();
                    r.bytes = 8;
                    r.unit = "tx/s".into();
                    out.push(r);
                }
            }
        }
        aaar.free()?;
        plain.free()?;
    }
    comm.barrier()?;
    Ok(())
}

/// Window length (u64 slots per rank) of `transactions`.
const TRANSACTION_SLOTS: usize = 1024;

/// One timed round of `transactions` on `win`: transactions per second over all ranks (all
/// transactions over the slowest rank's time), the same at every rank; the updates are
/// checked against the transaction count.
fn transaction_round(
    sub: &Comm,
    win: &Window<u64>,
    style: Style,
    hotspot: bool,
    seed: u64,
    budget: Duration,
) -> BResult<f64> {
    const IN_FLIGHT: usize = 8;
    let slots = TRANSACTION_SLOTS;
    let ranks = sub.size();
    win.fence(Assert::NOPRECEDE)?;
    win.local_write(0, &vec![0u64; slots])?;
    win.fence(Assert::NOSUCCEED)?;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((seed + 1) * 7919));
    let mut pending: Vec<Request<'_>> = Vec::with_capacity(IN_FLIGHT);
    let mut done = 0u64;
    sub.barrier()?;
    let t0 = Instant::now();
    while t0.elapsed() < budget {
        for _ in 0..16 {
            let target = if hotspot && done % 2 == 0 {
                0
            } else {
                (rng.next() % ranks as u64) as usize
            };
            let slot = (rng.next() % slots as u64) as usize;
            match style {
                Style::Blocking => {
                    win.lock(LockType::Exclusive, target, Assert::NONE)?;
                    win.accumulate(&[1u64], target, slot, onesided::Op::Sum)?;
                    win.unlock(target)?;
                }
                Style::Nonblocking => {
                    let opened = win.ilock(LockType::Exclusive, target, Assert::NONE)?;
                    drop(opened); // complete at once (opening calls never block)
                    win.accumulate(&[1u64], target, slot, onesided::Op::Sum)?;
                    pending.push(win.iunlock(target)?);
                    if pending.len() >= IN_FLIGHT {
                        // Any completed epoch frees its place (MPI_Waitany): with
                        // A_A_A_R they complete out of order.
                        let i = onesided::wait_any(&mut pending)?;
                        drop(pending.swap_remove(i));
                    }
                }
            }
            done += 1;
        }
    }
    onesided::wait_all(pending.drain(..))?;
    let secs = t0.elapsed().as_secs_f64();
    let counts = sub.allgather(&[done])?;
    let times = sub.allgather(&[secs])?;
    let total: u64 = counts.iter().sum();
    let slowest = times.iter().cloned().fold(0.0, f64::max);
    sub.barrier()?;
    let mut local = vec![0u64; slots];
    win.local_read(0, &mut local)?;
    let sums = sub.allgather(&[local.iter().sum::<u64>()])?;
    check(sub, sums.iter().sum::<u64>() == total, "transactions")?;
    Ok(total as f64 / slowest)
}

/// Queue lengths at which `nb-issue` measures.
const NB_ISSUE_PENDING: [u64; 3] = [10, 1000, 10_000];
/// Epochs issued (and timed) at each queue length.
const NB_ISSUE_TIMED: u64 = 200;

/// `nb-issue`: how fast nonblocking calls are issued while many epochs are queued. Rank 1
/// holds the exclusive lock of its own window; rank 0 queues `pending` epochs (`ilock` of
/// rank 1, an accumulate of 1 — copied and deferred — and `iunlock`), then times
/// [`NB_ISSUE_TIMED`] more of them: three calls each, metric `calls-per-s`, with the queue
/// length in `pending`. The rate should not depend on `pending` (a call that walks the
/// whole queue makes issuing quadratic). Then rank 1 unlocks, every request completes, and
/// its counter must equal the epochs issued (checked).
pub fn nb_issue(comm: &Comm, _p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let Some(sub) = first(comm, 2)? else {
        comm.barrier()?;
        return Ok(());
    };
    let win = Window::<u64>::allocate(&sub, 1)?;
    for pending in NB_ISSUE_PENDING {
        let mut requests: Vec<Request<'_>> = Vec::new();
        let mut rate = 0.0;
        if sub.rank() == 1 {
            win.lock(LockType::Exclusive, 1, Assert::NONE)?;
            sub.barrier()?; // rank 0 queues behind our lock
            sub.barrier()?; // and has measured
            win.unlock(1)?;
        } else {
            sub.barrier()?;
            for _ in 0..pending {
                nb_epoch(&win, &mut requests)?;
            }
            let t0 = Instant::now();
            for _ in 0..NB_ISSUE_TIMED {
                nb_epoch(&win, &mut requests)?;
            }
            rate = (3 * NB_ISSUE_TIMED) as f64 / t0.elapsed().as_secs_f64();
            sub.barrier()?;
            onesided::wait_all(requests.drain(..))?;
        }
        sub.barrier()?;
        let mut got = [0u64];
        win.local_read(0, &mut got)?;
        let issued = pending + NB_ISSUE_TIMED;
        // Rank 1's counter gains every epoch of this level; rank 0's stays 0.
        let before: u64 = NB_ISSUE_PENDING
            .iter()
            .take_while(|&&p| p != pending)
            .map(|p| p + NB_ISSUE_TIMED)
            .sum();
        let expect = if sub.rank() == 1 { before + issued } else { 0 };
        check(&sub, got[0] == expect, "nb-issue")?;
        if sub.rank() == 0 {
            let mut r = Record::onesided(
                "nb-issue",
                "allocate",
                "lock",
                8,
                2,
                "calls-per-s",
                rate,
                "calls/s",
            );
            r.pending = Some(pending);
            out.push(r);
        }
    }
    win.free()?;
    comm.barrier()?;
    Ok(())
}

/// One epoch of `nb-issue`: `ilock` of rank 1, an accumulate of 1, `iunlock`.
fn nb_epoch<'w>(win: &'w Window<u64>, requests: &mut Vec<Request<'w>>) -> BResult<()> {
    drop(win.ilock(LockType::Exclusive, 1, Assert::NONE)?);
    win.accumulate(&[1], 1, 0, onesided::Op::Sum)?;
    requests.push(win.iunlock(1)?);
    Ok(())
}

/// xorshift64: a reproducible stream of random numbers per rank.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A reorder scenario: runs `reps` repetitions on a window; returns (victim µs, origin µs)
/// medians, measured where \[Zounmevo14\] Figs. 7–11 measure them.
type ScenarioFn = fn(&Comm, &Window<u8>, u64) -> BResult<(f64, f64)>;

/// Seed 004 Figs. 7–11: nonblocking epochs only, one 1 MiB put per epoch, the late process
/// 2 ms late; each scenario once with its reorder flag off and once on (a second window
/// created with the flag). `victim` is the epoch the flag protects from the delay;
/// `origin` the cumulative time of the process that sets the flag.
fn reorder_scenarios(comm: &Comm, reps: u64, out: &mut Vec<Record>) -> BResult<()> {
    use onesided::{Reorder, WinInfo};
    let off = Reorder::NONE;
    let scenarios: [(&str, usize, Reorder, ScenarioFn); 5] = [
        (
            "reorder-aaar-pscw",
            3,
            Reorder {
                access_after_access: true,
                ..off
            },
            aaar_pscw,
        ),
        (
            "reorder-aaar-lock",
            4,
            Reorder {
                access_after_access: true,
                ..off
            },
            aaar_lock,
        ),
        (
            "reorder-aaer",
            3,
            Reorder {
                access_after_exposure: true,
                ..off
            },
            aaer,
        ),
        (
            "reorder-eaer",
            3,
            Reorder {
                exposure_after_exposure: true,
                ..off
            },
            eaer,
        ),
        (
            "reorder-eaar",
            3,
            Reorder {
                exposure_after_access: true,
                ..off
            },
            eaar,
        ),
    ];
    for (name, ranks, flag, run) in scenarios {
        if comm.size() < ranks {
            if comm.rank() == 0 {
                eprintln!("sync-patterns: {name} needs {ranks} processes, skipped");
            }
            continue;
        }
        let Some(sub) = first(comm, ranks)? else {
            continue;
        };
        for (metric, flags) in [("reorder-off", off), ("reorder-on", flag)] {
            let win = Window::<u8>::builder(&sub)
                .info(&WinInfo::new().reorder(flags))
                .allocate(2 * PUT_BYTES)?;
            run(&sub, &win, 1)?; // warm-up
            let (victim, origin) = run(&sub, &win, reps)?;
            if sub.rank() == 0 {
                let delay = DELAY.as_secs_f64() * 1e6;
                out.push(
                    pattern_record(name, metric, ranks, victim)
                        .with_role("victim")
                        .with_delay_us(delay),
                );
                out.push(
                    pattern_record(name, metric, ranks, origin)
                        .with_role("origin")
                        .with_delay_us(delay),
                );
            }
            win.free()?;
        }
    }
    Ok(())
}

/// Completes `r` by testing it between yields: the measured time is when its epoch
/// completes, not when a sleeping waiter wakes up (the library's waits back off to sleeps
/// of up to 0.5 ms when ranks share cores) — and the process that waits keeps driving its
/// engine, as an MPI library's polling wait does, so a later epoch the reorder flags let
/// pass makes progress meanwhile.
fn settle(mut r: Request<'_>) -> BResult<()> {
    while !r.test()? {
        std::thread::yield_now();
    }
    Ok(())
}

/// A nonblocking PSCW access epoch toward `target` that puts `data` at `disp`; returns its
/// closing request.
fn access<'w>(
    win: &'w Window<u8>,
    target: usize,
    data: &[u8],
    disp: usize,
) -> BResult<Request<'w>> {
    win.istart(&Group::single(target), Assert::NONE)?.wait()?;
    win.put(data, target, disp)?;
    Ok(win.icomplete()?)
}

/// A nonblocking exposure epoch for `origin`; returns its closing request.
fn expose(win: &Window<u8>, origin: usize) -> BResult<Request<'_>> {
    win.ipost(&Group::single(origin), Assert::NONE)?.wait()?;
    Ok(win.iwait()?)
}

fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Fig. 7: origin 0 opens access epochs toward target 1 (2 ms late) and then target 2.
/// Victim: target 2's exposure epoch; origin: both of rank 0's epochs.
fn aaar_pscw(comm: &Comm, win: &Window<u8>, reps: u64) -> BResult<(f64, f64)> {
    let tally = repeat(
        comm,
        reps,
        "reorder-aaar-pscw",
        |rep| (payload(rep, 1), payload(rep, 2)),
        |_, (d1, d2), t| {
            match comm.rank() {
                0 => {
                    let t0 = Instant::now();
                    let first = access(win, 1, &d1, 0)?;
                    let second = access(win, 2, &d2, 0)?;
                    settle(first)?;
                    settle(second)?;
                    t.times[1].push(since(t0));
                }
                1 => {
                    pause(DELAY);
                    expose(win, 0)?.wait()?;
                    t.ok &= holds(win, 0, &d1)?;
                }
                _ => {
                    let t0 = Instant::now();
                    settle(expose(win, 0)?)?;
                    t.times[0].push(since(t0));
                    t.ok &= holds(win, 0, &d2)?;
                }
            }
            Ok(())
        },
    )?;
    Ok((tally.median(comm, 0, 2)?, tally.median(comm, 1, 0)?))
}

/// Fig. 8: O0 (rank 0) holds target 2's lock for 2 ms; O1 (rank 1) asks for it right after,
/// then opens a second lock epoch toward target 3. Victim: O1's second epoch; origin: both
/// of O1's epochs.
fn aaar_lock(comm: &Comm, win: &Window<u8>, reps: u64) -> BResult<(f64, f64)> {
    let tally = repeat(
        comm,
        reps,
        "reorder-aaar-lock",
        |rep| (payload(rep, 0), payload(rep, 1)),
        |_, (d0, d1), t| {
            match comm.rank() {
                0 => {
                    win.lock(LockType::Exclusive, 2, Assert::NONE)?;
                    comm.barrier()?;
                    win.put(&d0, 2, 0)?;
                    pause(DELAY);
                    win.unlock(2)?;
                }
                1 => {
                    comm.barrier()?;
                    let t0 = Instant::now();
                    win.ilock(LockType::Exclusive, 2, Assert::NONE)?.wait()?;
                    win.put(&d1, 2, PUT_BYTES)?;
                    let first = win.iunlock(2)?;
                    let t1 = Instant::now();
                    win.ilock(LockType::Exclusive, 3, Assert::NONE)?.wait()?;
                    win.put(&d1, 3, 0)?;
                    settle(win.iunlock(3)?)?;
                    t.times[0].push(since(t1));
                    first.wait()?;
                    t.times[1].push(since(t0));
                }
                _ => comm.barrier()?,
            }
            comm.barrier()?;
            match comm.rank() {
                2 => t.ok &= holds(win, 0, &d0)? && holds(win, PUT_BYTES, &d1)?,
                3 => t.ok &= holds(win, 0, &d1)?,
                _ => {}
            }
            Ok(())
        },
    )?;
    Ok((tally.median(comm, 0, 1)?, tally.median(comm, 1, 1)?))
}

/// Fig. 9: rank 2 exposes to origin 0 (2 ms late), then opens an access epoch toward
/// target 1. Victim: target 1's exposure epoch; origin: rank 2's two epochs.
fn aaer(comm: &Comm, win: &Window<u8>, reps: u64) -> BResult<(f64, f64)> {
    let tally = repeat(
        comm,
        reps,
        "reorder-aaer",
        |rep| (payload(rep, 0), payload(rep, 2)),
        |_, (d0, d2), t| {
            match comm.rank() {
                0 => {
                    pause(DELAY);
                    access(win, 2, &d0, 0)?.wait()?;
                }
                1 => {
                    let t0 = Instant::now();
                    settle(expose(win, 2)?)?;
                    t.times[0].push(since(t0));
                    t.ok &= holds(win, 0, &d2)?;
                }
                _ => {
                    let t0 = Instant::now();
                    let exposed = expose(win, 0)?;
                    let accessed = access(win, 1, &d2, 0)?;
                    settle(exposed)?;
                    settle(accessed)?;
                    t.times[1].push(since(t0));
                    t.ok &= holds(win, 0, &d0)?;
                }
            }
            Ok(())
        },
    )?;
    Ok((tally.median(comm, 0, 1)?, tally.median(comm, 1, 2)?))
}

/// Fig. 10: target 0 exposes to origin 1 (2 ms late), then to origin 2. Victim: origin 2's
/// access epoch; origin: target 0's two epochs.
fn eaer(comm: &Comm, win: &Window<u8>, reps: u64) -> BResult<(f64, f64)> {
    let tally = repeat(
        comm,
        reps,
        "reorder-eaer",
        |rep| (payload(rep, 1), payload(rep, 2)),
        |_, (d1, d2), t| {
            match comm.rank() {
                0 => {
                    let t0 = Instant::now();
                    let first = expose(win, 1)?;
                    let second = expose(win, 2)?;
                    settle(first)?;
                    settle(second)?;
                    t.times[1].push(since(t0));
                    t.ok &= holds(win, 0, &d1)? && holds(win, PUT_BYTES, &d2)?;
                }
                1 => {
                    pause(DELAY);
                    access(win, 0, &d1, 0)?.wait()?;
                }
                _ => {
                    let t0 = Instant::now();
                    settle(access(win, 0, &d2, PUT_BYTES)?)?;
                    t.times[0].push(since(t0));
                }
            }
            Ok(())
        },
    )?;
    Ok((tally.median(comm, 0, 2)?, tally.median(comm, 1, 0)?))
}

/// Fig. 11: rank 2 accesses target 0 (2 ms late), then exposes to origin 1. Victim: origin
/// 1's access epoch; origin: rank 2's two epochs.
fn eaar(comm: &Comm, win: &Window<u8>, reps: u64) -> BResult<(f64, f64)> {
    let tally = repeat(
        comm,
        reps,
        "reorder-eaar",
        |rep| (payload(rep, 1), payload(rep, 2)),
        |_, (d1, d2), t| {
            match comm.rank() {
                0 => {
                    pause(DELAY);
                    expose(win, 2)?.wait()?;
                    t.ok &= holds(win, 0, &d2)?;
                }
                1 => {
                    let t0 = Instant::now();
                    settle(access(win, 2, &d1, 0)?)?;
                    t.times[0].push(since(t0));
                }
                _ => {
                    let t0 = Instant::now();
                    let accessed = access(win, 0, &d2, 0)?;
                    let exposed = expose(win, 1)?;
                    settle(accessed)?;
                    settle(exposed)?;
                    t.times[1].push(since(t0));
                    t.ok &= holds(win, 0, &d1)?;
                }
            }
            Ok(())
        },
    )?;
    Ok((tally.median(comm, 0, 1)?, tally.median(comm, 1, 2)?))
}
