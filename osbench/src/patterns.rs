//! Nonblocking synchronization ([Zounmevo14] §VIII-B): the five inefficiency patterns, each
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
use crate::bench::Params;
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

/// Waits `d` without computing: sleeps for most of it, then yields until the deadline (a
/// sleep alone overshoots by the timer slack, ~50 µs, as long as a 1 MiB copy here).
fn pause(d: Duration) {
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

/// The first `n` ranks of `comm` as a communicator (`None` at the others).
fn first(comm: &Comm, n: usize) -> BResult<Option<Comm>> {
    let me = comm.rank();
    Ok(comm.split((me < n).then_some(0), me)?)
}

/// Mean over repetitions of the time `rank` measured; every rank of `comm` gets it.
fn mean_at(comm: &Comm, rank: usize, mine: &[f64]) -> BResult<f64> {
    let mut v = [if mine.is_empty() {
        0.0
    } else {
        mine.iter().sum::<f64>() / mine.len() as f64
    }];
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

/// One pattern, one style: `reps` repetitions; returns the mean of the measured process's
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
    comm.barrier()?;
    Ok(())
}

fn pattern_record(sync: &str, metric: &str, ranks: usize, us: f64) -> Record {
    Record {
        bench: "sync-patterns".into(),
        imp: "onesided".into(),
        window: "allocate".into(),
        sync: sync.into(),
        bytes: PUT_BYTES as u64,
        ranks: ranks as u64,
        metric: metric.into(),
        value: us,
        unit: "us".into(),
        neighbours: None,
        role: None,
        delay_us: None,
    }
}

/// The early-fence work: the median duration of the origin's 1 MiB put inside the pattern
/// itself (fence epochs, the target validating in between), measured before the timed runs
/// after two untimed repetitions (the first touches of a new window fault its pages in).
fn fence_put_time(comm: &Comm, a: &Window<u8>, reps: u64) -> BResult<Duration> {
    let mut times = Vec::new();
    let mut ok = true;
    for rep in 0..reps {
        let data = payload(rep, 1);
        comm.barrier()?;
        open_fence(a)?;
        if comm.rank() == 1 {
            let t = Instant::now();
            a.put(&data, 0, 0)?;
            if rep >= 2 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        a.fence(Assert::NOSUCCEED)?;
        if comm.rank() == 0 {
            ok &= holds(a, 0, &data)?;
        }
    }
    check(comm, ok, "early-fence calibration")?;
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(0.0);
    let mut v = [median];
    comm.bcast(1, &mut v)?;
    Ok(Duration::from_secs_f64(v[0]))
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
    let mut times = Vec::new();
    let mut ok = true;
    let activity = payload(7, 2);
    b.lock_all(Assert::NONE)?;
    for rep in 0..reps {
        let data = payload(rep, 2);
        comm.barrier()?;
        match me {
            0 => {
                pause(DELAY);
                a.post(&Group::single(2), Assert::NONE)?;
                a.wait()?;
                ok &= holds(a, 0, &data)?;
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
                times.push(t0.elapsed().as_secs_f64() * 1e6);
                finish(closing)?;
            }
            _ => {}
        }
    }
    b.unlock_all()?;
    comm.barrier()?;
    if me == 1 {
        ok &= holds(b, 0, &activity)?;
    }
    check(comm, ok, "late-post")?;
    mean_at(comm, 2, &times)
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
    let mut times = Vec::new();
    let mut ok = true;
    for rep in 0..reps {
        let data = payload(rep, 1);
        comm.barrier()?;
        if me == 0 {
            let t0 = Instant::now();
            a.post(&Group::single(1), Assert::NONE)?;
            match style {
                Style::Blocking => a.wait()?,
                Style::Nonblocking => a.iwait()?.wait()?,
            }
            times.push(t0.elapsed().as_secs_f64() * 1e6);
            ok &= holds(a, 0, &data)?;
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
    }
    check(comm, ok, "late-complete")?;
    mean_at(comm, 0, &times)
}

/// The close calls while the peer is [`LATE_PEER`] late: how long the target's `wait` /
/// `iwait` call itself takes (the request is completed afterwards).
fn close_call(comm: &Comm, a: &Window<u8>, style: Style, reps: u64) -> BResult<f64> {
    let me = comm.rank();
    let mut times = Vec::new();
    let mut ok = true;
    for rep in 0..reps {
        let data = payload(rep + 1000, 1);
        comm.barrier()?;
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
            times.push(t0.elapsed().as_secs_f64() * 1e6);
            finish(closing)?;
            ok &= holds(a, 0, &data)?;
        } else {
            pause(LATE_PEER);
            a.start(&Group::single(0), Assert::NONE)?;
            a.put(&data, 0, 0)?;
            a.complete()?;
        }
    }
    check(comm, ok, "close-call")?;
    mean_at(comm, 0, &times)
}

/// Opens a fence epoch at every rank; the target (rank 0) arrives last, so that it leaves
/// the fence first and its clock starts no later than the origin's put (an origin that
/// arrives last would leave at once while the target may still be waking from a backoff
/// sleep, hiding part of the transfer from the target's measurement).
fn open_fence(a: &Window<u8>) -> BResult<()> {
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
    let mut times = Vec::new();
    let mut ok = true;
    for rep in 0..reps {
        let data = payload(rep, 1);
        comm.barrier()?;
        open_fence(a)?;
        if me == 0 {
            let t0 = Instant::now();
            let closing = close_fence(a, style)?;
            pause(work);
            finish(closing)?;
            times.push(t0.elapsed().as_secs_f64() * 1e6);
            ok &= holds(a, 0, &data)?;
        } else {
            a.put(&data, 0, 0)?;
            finish(close_fence(a, style)?)?;
        }
    }
    check(comm, ok, "early-fence")?;
    mean_at(comm, 0, &times)
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
    let mut times = Vec::new();
    let mut ok = true;
    for rep in 0..reps {
        let data = payload(rep, 1);
        comm.barrier()?;
        open_fence(a)?;
        if me == 0 {
            let t0 = Instant::now();
            finish(close_fence(a, style)?)?;
            times.push(t0.elapsed().as_secs_f64() * 1e6);
            ok &= holds(a, 0, &data)?;
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
    }
    check(comm, ok, "wait-at-fence")?;
    mean_at(comm, 0, &times)
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
    let mut times = Vec::new();
    let mut ok = true;
    for rep in 0..reps {
        let first = payload(rep, 1);
        let second = payload(rep, 2);
        comm.barrier()?;
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
                times.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            _ => comm.barrier()?,
        }
        comm.barrier()?;
        if me == 0 {
            ok &= holds(a, 0, &first)? && holds(a, PUT_BYTES, &second)?;
        }
    }
    check(comm, ok, "late-unlock")?;
    mean_at(comm, 2, &times)
}

/// `transactions` ([Zounmevo14] Fig. 12): every rank runs update transactions — random
/// target, random offset, one exclusive-lock epoch with one 8-byte accumulate each — for a
/// fixed time; throughput in transactions per second over all ranks. `uniform` picks
/// targets uniformly; `hotspot` also sends every origin's every other transaction to
/// rank 0. Blocking epochs wait for each lock; nonblocking ones (`ilock`, `iunlock`) are
/// issued back to back with at most 64 in flight, so an origin queues its next updates
/// while a lock is held elsewhere. Every update adds 1: at the end the window sums to the
/// number of transactions, checked.
pub fn transactions(comm: &Comm, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    const SLOTS: usize = 1024;
    const IN_FLIGHT: usize = 64;
    let budget = p.budget.max(Duration::from_millis(100));
    for ranks in crate::bench::rank_counts(comm.size()) {
        if ranks < 2 {
            continue;
        }
        let Some(sub) = first(comm, ranks)? else {
            continue;
        };
        let win = Window::<u64>::allocate(&sub, SLOTS)?;
        for pattern in ["uniform", "hotspot"] {
            for style in [Style::Blocking, Style::Nonblocking] {
                win.fence(Assert::NOPRECEDE)?;
                win.local_write(0, &[0u64; SLOTS])?;
                win.fence(Assert::NOSUCCEED)?;
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((sub.rank() as u64 + 1) * 7919));
                let mut pending: std::collections::VecDeque<Request<'_>> = Default::default();
                let mut done = 0u64;
                sub.barrier()?;
                let t0 = Instant::now();
                while t0.elapsed() < budget {
                    for _ in 0..16 {
                        let target = if pattern == "hotspot" && done % 2 == 0 {
                            0
                        } else {
                            (rng.next() % ranks as u64) as usize
                        };
                        let slot = (rng.next() % SLOTS as u64) as usize;
                        match style {
                            Style::Blocking => {
                                win.lock(LockType::Exclusive, target, Assert::NONE)?;
                                win.accumulate(&[1u64], target, slot, onesided::Op::Sum)?;
                                win.unlock(target)?;
                            }
                            Style::Nonblocking => {
                                let opened =
                                    win.ilock(LockType::Exclusive, target, Assert::NONE)?;
                                drop(opened); // complete at once (opening calls never block)
                                win.accumulate(&[1u64], target, slot, onesided::Op::Sum)?;
                                pending.push_back(win.iunlock(target)?);
                                while pending.len() >= IN_FLIGHT {
                                    let mut front = pending.pop_front().expect("non-empty");
                                    if !front.test()? {
                                        front.wait()?;
                                    }
                                }
                            }
                        }
                        done += 1;
                    }
                }
                onesided::wait_all(pending.drain(..))?;
                let secs = t0.elapsed().as_secs_f64();
                // Throughput: all transactions over the slowest rank's time.
                let counts = sub.allgather(&[done])?;
                let times = sub.allgather(&[secs])?;
                let total: u64 = counts.iter().sum();
                let slowest = times.iter().cloned().fold(0.0, f64::max);
                sub.barrier()?;
                let mut local = vec![0u64; SLOTS];
                win.local_read(0, &mut local)?;
                let sums = sub.allgather(&[local.iter().sum::<u64>()])?;
                check(&sub, sums.iter().sum::<u64>() == total, "transactions")?;
                if sub.rank() == 0 {
                    let mut r =
                        pattern_record(pattern, style.name(), ranks, total as f64 / slowest);
                    r.bench = "transactions".into();
                    r.bytes = 8;
                    r.unit = "tx/s".into();
                    out.push(r);
                }
            }
        }
        win.free()?;
    }
    comm.barrier()?;
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
