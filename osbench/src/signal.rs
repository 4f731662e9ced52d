//! Signalling that data has arrived — the ways seed 000 proposes against the flush MPI
//! needs today.
//!
//! `order-flag` (seed 000 Figs. 10–11): the origin puts `bytes` and then raises a flag at
//! the target (an accumulate), in one exclusive-lock epoch, over and over. Metrics (mean µs
//! per put+flag at the origin; without a flush in between, one flush per 1024 pairs bounds
//! what is in flight): `put-flush-flag` (a flush in between: what makes the flag
//! a valid signal in MPI), `put-flag-ordered` (`mpi_win_order`: issue order is enough;
//! onesided only) and `put-flag-unordered` (neither: the cost floor, not a valid signal).
//! The target checks the flag count and the last data after every measurement.
//! Origin buffers stay untouched until their put completes, as MPI requires.
//!
//! `notify-latency`: ping-pong between ranks 0 and 1, each side sending `bytes` once the
//! other's have arrived; the value is half a round trip in µs. Metrics: `flush-flag` (put,
//! flush, accumulate of a flag word, flush; the receiver polls its flag with an atomic
//! fetch-and-add of 0 + flush on itself)
//! and `notify` (`put_notify`; the receiver waits on a `wait_notify` request; onesided
//! only — no host MPI has notified RMA yet). Every receive checks the first and last word.

use crate::backend::{BResult, Backend, BenchError, BenchWin};
use crate::bench::{measure, Params};
use crate::report::Record;

/// Largest message of these benchmarks (the paper's figures stop at 1 MiB).
const MAX_BYTES: usize = 1 << 20;

/// Message sizes in whole u64 words, at most [`MAX_BYTES`].
fn word_sizes(p: &Params) -> Vec<usize> {
    let mut v: Vec<usize> = p
        .sizes
        .iter()
        .filter(|&&s| s <= MAX_BYTES)
        .map(|&s| s.max(8) / 8)
        .collect();
    v.dedup();
    v
}

/// The flag increment (a static: MPI may read an origin buffer as late as the flush).
static ONE: [u64; 1] = [1];

/// Put+flag pairs between two flushes where no flush is asked for: the seed's benchmark
/// completes "the specified number of operations" at the unlock; unbounded, MPICH 4.0.2
/// runs out of requests (an assertion in MPI_Accumulate) after a few 100 ms.
const IN_FLIGHT_MAX: u64 = 1024;

const ORDER_METRICS: [&str; 3] = ["put-flush-flag", "put-flag-unordered", "put-flag-ordered"];

pub fn order_flag<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let Some(pair) = b.prefix(2)? else {
        return Ok(());
    };
    let comm = pair.comm();
    let origin = comm.rank() == 0;
    let sizes = word_sizes(p);
    let max_words = sizes.iter().copied().max().unwrap_or(1);
    let flag = max_words;
    for &kind in &p.windows {
        let win = pair.window::<u64>(kind, max_words + 1)?;
        for metric in ORDER_METRICS {
            let ordered = metric == "put-flag-ordered";
            if !win.set_order(ordered)? {
                continue;
            }
            for &words in &sizes {
                // MPI lets no origin buffer change before its put completes, and without
                // a flush puts complete only at the unlock: each call of the measurement
                // (warm-up, its extension, timed) puts its own buffer, filled with its
                // call number.
                let srcs = [vec![1u64; words], vec![2u64; words], vec![3u64; words]];
                let mut calls = 0usize;
                win.write_local(flag, &[0])?;
                comm.barrier()?;
                if origin {
                    win.lock(true, 1)?;
                }
                let (secs, total) = measure(comm, p, |iters| {
                    let src = srcs.get(calls).ok_or_else(|| {
                        BenchError("order-flag: a fourth measurement call".into())
                    })?;
                    calls += 1;
                    if origin {
                        for i in 1..=iters {
                            win.put(src, 1, 0)?;
                            if metric == "put-flush-flag" {
                                win.flush(1)?;
                            }
                            win.acc_sum(&ONE, 1, flag)?;
                            if i % IN_FLIGHT_MAX == 0 && metric != "put-flush-flag" {
                                win.flush(1)?;
                            }
                        }
                    }
                    Ok(())
                })?;
                let last = calls as u64;
                if origin {
                    win.unlock(1)?;
                }
                // The target waits inside the library during the timed run (see
                // Backend::library_barrier).
                pair.library_barrier()?;
                let mut ok = true;
                if !origin {
                    let mut got = vec![0u64; words + 1];
                    win.read_local(0, &mut got[..words])?;
                    win.read_local(flag, &mut got[words..])?;
                    ok = got[0] == last && got[words - 1] == last && got[words] == total;
                    if !ok {
                        eprintln!(
                            "osbench: order-flag {metric} {} B: data {} .. {} (expected {last}), \
                             flag {} (expected {total})",
                            words * 8,
                            got[0],
                            got[words - 1],
                            got[words]
                        );
                    }
                }
                if !comm.agree(ok)? {
                    return Err(BenchError(format!(
                        "order-flag {metric}: data validation failed"
                    )));
                }
                if origin {
                    out.push(Record::new(
                        "order-flag",
                        &pair,
                        kind.name(),
                        "flush",
                        words * 8,
                        metric,
                        secs * 1e6,
                        "us",
                    ));
                }
            }
        }
        win.set_order(false)?;
        win.free()?;
    }
    Ok(())
}

pub fn notify_latency<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let Some(pair) = b.prefix(2)? else {
        return Ok(());
    };
    let comm = pair.comm();
    let me = comm.rank();
    let peer = 1 - me;
    let sizes = word_sizes(p);
    let max_words = sizes.iter().copied().max().unwrap_or(1);
    let flag = max_words;
    for &kind in &p.windows {
        let win = pair.window::<u64>(kind, max_words + 1)?;
        let notified = win.set_num_notify(1)?;
        // Flags and counts only grow over the whole run, so no round is mistaken for
        // another.
        let mut seq = 0u64;
        let mut counted = 0u64;
        let mut flagged = 0u64;
        for metric in ["flush-flag", "notify"] {
            let notify = metric == "notify";
            if notify && !notified {
                continue;
            }
            for &words in &sizes {
                let mut src = vec![0u64; words];
                win.lock_all()?;
                let mut send = |s: u64| -> BResult<()> {
                    src[0] = s;
                    src[words - 1] = s;
                    if notify {
                        win.put_notify(&src, peer, 0, 0)
                    } else {
                        win.put(&src, peer, 0)?;
                        win.flush(peer)?;

                        // An accumulate, read back atomically: a put and a get of the flag
                        // would be conflicting accesses, with an undefined result in MPI.
                        win.acc_sum(&ONE, peer, flag)?;
                        win.flush(peer)
                    }
                };
                let mut receive = |s: u64| -> BResult<()> {
                    if notify {
                        counted += 1;
                        win.wait_notify(0, counted)?;
                    } else {
                        flagged += 1;
                        let mut spins = 0u32;
                        loop {
                            let mut f = 0u64;
                            win.fetch_add(&0, &mut f, me, flag)?;
                            win.flush(me)?;
                            if f >= flagged {
                                break;
                            }
                            spins += 1;
                            if spins % 64 == 0 {
                                std::thread::yield_now();
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                    }
                    let mut ends = [0u64; 2];
                    win.get(&mut ends[..1], me, 0)?;
                    win.get(&mut ends[1..], me, words - 1)?;
                    win.flush(me)?;
                    if ends != [s, s] {
                        return Err(BenchError(format!(
                            "notify-latency {metric}: round {s} shows data {ends:?}"
                        )));
                    }
                    Ok(())
                };
                let (secs, _) = measure(comm, p, |iters| {
                    for _ in 0..iters {
                        seq += 1;
                        if me == 0 {
                            send(seq)?;
                            receive(seq)?;
                        } else {
                            receive(seq)?;
                            send(seq)?;
                        }
                    }
                    Ok(())
                })?;
                win.unlock_all()?;
                if me == 0 {
                    out.push(Record::new(
                        "notify-latency",
                        &pair,
                        kind.name(),
                        "lock_all",
                        words * 8,
                        metric,
                        secs / 2.0 * 1e6,
                        "us",
                    ));
                }
            }
        }
        comm.barrier()?;
        win.free()?;
    }
    Ok(())
}
