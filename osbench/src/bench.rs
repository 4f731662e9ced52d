//! The benchmarks, written once over [`Backend`] and monomorphized per implementation.
//!
//! Method (as OSU's micro-benchmarks): every measurement first runs a warm-up (`--warmup`
//! iterations, and at least 2 ms: [`WARMUP_MIN`]), then a timed
//! loop whose length rank 0 picks from the warm-up so that it lasts about `--time-ms` (or
//! exactly `--iters`), broadcast so that every process runs the same number of
//! synchronizations. Rank 0 is the origin and rank 1 the target unless said otherwise.
//! After every measurement the processes check the bytes that moved and agree on the
//! outcome; a mismatch ends the run with an error.

use std::hint::black_box;
use std::time::{Duration, Instant};

use onesided::{Comm, ReduceOp};

use crate::backend::{BResult, Backend, BenchError, BenchWin, Elem, SyncMode, WinKind};
use crate::report::Record;

/// Measurement parameters shared by all benchmarks.
#[derive(Debug, Clone)]
pub struct Params {
    /// Message sizes in bytes.
    pub sizes: Vec<usize>,
    /// Fixed timed iterations (instead of a time budget).
    pub iters: Option<u64>,
    /// Time budget of one timed loop.
    pub budget: Duration,
    /// Warm-up iterations.
    pub warmup: u64,
    /// Window kinds to run.
    pub windows: Vec<WinKind>,
    /// Synchronization modes to run.
    pub syncs: Vec<SyncMode>,
    /// Window size of the creation benchmark.
    pub create_bytes: usize,
    /// Thread counts of the thread-flush benchmark.
    pub threads: Vec<usize>,
    /// thread-flush measures the mix of one small-flush thread and streaming threads
    /// (`--mix`) instead.
    pub mix: bool,
    /// Streaming threads of the mix.
    pub streams: Vec<usize>,
    /// Busy time of the progress benchmark's target.
    pub busy: Duration,
    /// A Matrix Market file whose sparsity defines irregular alltoallv counts.
    pub matrix: Option<std::path::PathBuf>,
    /// Rounds of the latency and message-rate benchmarks (median reported).
    pub rounds: u32,
    /// The latency benchmarks also time operations one by one and report their median
    /// (`latency-p50`), and so do `sync-latency`'s passive-target calls and fences: loop
    /// averages swing with the machine's load, single-operation medians much less.
    pub p50: bool,
    /// The bandwidth benchmarks' puts go through [`BenchWin::put_shared`] (metric
    /// `bandwidth-shared`).
    pub shared_buffers: bool,
}

/// Communication calls of the latency and bandwidth benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommOp {
    /// MPI_Put.
    Put,
    /// MPI_Get.
    Get,
    /// MPI_Accumulate (sum, u64).
    Acc,
    /// MPI_Get_accumulate (sum, u64).
    GetAcc,
    /// MPI_Fetch_and_op (sum, u64).
    Fop,
    /// MPI_Compare_and_swap (u64).
    Cas,
}

impl CommOp {
    /// Benchmark name of the latency benchmark of this call.
    pub fn latency_bench(self) -> &'static str {
        match self {
            CommOp::Put => "put-latency",
            CommOp::Get => "get-latency",
            CommOp::Acc => "acc-latency",
            CommOp::GetAcc => "get-acc-latency",
            CommOp::Fop => "fop-latency",
            CommOp::Cas => "cas-latency",
        }
    }

    /// Sizes this call runs at: any for put/get, whole u64 elements for accumulates, one
    /// u64 for the single-element atomics.
    pub fn sizes(self, sizes: &[usize]) -> Vec<usize> {
        match self {
            CommOp::Put | CommOp::Get => sizes.to_vec(),
            CommOp::Acc | CommOp::GetAcc => {
                let mut v: Vec<usize> = sizes.iter().map(|&s| s.max(8) / 8 * 8).collect();
                v.dedup();
                v
            }
            CommOp::Fop | CommOp::Cas => vec![8],
        }
    }
}

/// What one process does in a transfer benchmark.
struct Role {
    /// The rank this process sends operations to.
    target: Option<usize>,
    /// The rank that sends operations to this process.
    exposed_to: Option<usize>,
}

fn role(me: usize, bidirectional: bool) -> Role {
    match (me, bidirectional) {
        (0, _) => Role {
            target: Some(1),
            exposed_to: bidirectional.then_some(1),
        },
        (1, _) => Role {
            target: bidirectional.then_some(0),
            exposed_to: Some(0),
        },
        _ => Role {
            target: None,
            exposed_to: None,
        },
    }
}

/// Runs `run(warmup)` untimed, then `run(n)` timed at rank 0, with `n` picked by rank 0
/// (see the module docs). Returns seconds per iteration at rank 0 (0 elsewhere) and the
/// total number of iterations every process ran.
pub(crate) fn measure<F>(comm: &Comm, p: &Params, mut run: F) -> BResult<(f64, u64)>
where
    F: FnMut(u64) -> BResult<()>,
{
    let warm = p.warmup.max(1);
    comm.barrier()?;
    let t = Instant::now();
    run(warm)?;
    let spent = t.elapsed();
    let per = spent.as_secs_f64() / warm as f64;
    // [more warm-up iterations, timed iterations]: the warm-up lasts at least WARMUP_MIN.
    let mut n = [
        ((WARMUP_MIN.saturating_sub(spent).as_secs_f64() / per.max(1e-9)).ceil() as u64)
            .min(2_000_000),
        match p.iters {
            Some(n) => n.max(1),
            None => ((p.budget.as_secs_f64() / per.max(1e-9)) as u64).clamp(5, 2_000_000),
        },
    ];
    comm.bcast(0, &mut n)?;
    let [more, timed] = n;
    if more > 0 {
        run(more)?;
    }
    comm.barrier()?;
    let t = Instant::now();
    run(timed)?;
    let secs = t.elapsed().as_secs_f64() / timed as f64;
    Ok((secs, warm + more + timed))
}

/// The shortest warm-up before a timed loop: what a process that waits on the network
/// needs to reach its steady state after other work (the endpoint's progress thread,
/// which served it meanwhile, stands aside only after a poller woke it and its naps grew:
/// 200 + 400 + 800 µs, `transport::nic_progress`). With `--warmup`'s 10 iterations alone,
/// onesided's 8-byte cells across two virtual nodes measured in rounds that alternate
/// with the raw libfabric baseline's took 8.6–11.2 µs (per-operation medians) against
/// 7.8–8.7 in jobs without it, and 7.7–8.5 either way without a progress thread.
const WARMUP_MIN: Duration = Duration::from_millis(2);

/// Most operations [`sample_median`] times one by one.
const P50_SAMPLES: u64 = 1000;

/// Runs `run(1)` as many times as a timed loop of `per` seconds an iteration fits in the
/// budget (5 to [`P50_SAMPLES`], picked by rank 0), timing each at rank 0: the median in
/// seconds (0 elsewhere) and the iterations run.
pub(crate) fn sample_median<F>(comm: &Comm, p: &Params, per: f64, mut run: F) -> BResult<(f64, u64)>
where
    F: FnMut(u64) -> BResult<()>,
{
    let mut k = [((p.budget.as_secs_f64() / per.max(1e-9)) as u64).clamp(5, P50_SAMPLES)];
    comm.bcast(0, &mut k)?;
    comm.barrier()?;
    let mut times = Vec::with_capacity(k[0] as usize);
    for _ in 0..k[0] {
        let t = Instant::now();
        run(1)?;
        times.push(t.elapsed().as_secs_f64());
    }
    Ok((median(&mut times), k[0]))
}

/// Every process states whether its checks passed; all learn whether all did.
fn agree_valid(comm: &Comm, ok: bool, what: &str) -> BResult<()> {
    if comm.agree(ok)? {
        Ok(())
    } else {
        Err(BenchError(format!("{what}: data validation failed")))
    }
}

/// Fills `buf` with a pattern that differs per size and position.
fn pattern<T: Elem>(buf: &mut [T], salt: u64) {
    for (i, v) in buf.iter_mut().enumerate() {
        *v = T::from_u64((i as u64).wrapping_mul(31).wrapping_add(salt * 7 + 1) % 251 + 1);
    }
}

/// One synchronization mode's loop for one process: `iters` times, `per_sync` operations
/// (`op(target)`) to `role.target` and the synchronization that completes them.
#[allow(clippy::too_many_arguments)]
fn sync_loop<T, W, F>(
    win: &W,
    sync: SyncMode,
    role: &Role,
    access: Option<&W::Group>,
    exposure: Option<&W::Group>,
    per_sync: usize,
    iters: u64,
    exclusive: bool,
    mut op: F,
) -> BResult<()>
where
    T: Elem,
    W: BenchWin<T>,
    F: FnMut(usize) -> BResult<()>,
{
    match (sync, role.target) {
        (SyncMode::Flush, Some(t)) => {
            for _ in 0..iters {
                for _ in 0..per_sync {
                    op(t)?;
                }
                win.flush(t)?;
            }
        }
        (SyncMode::Lock, Some(t)) => {
            for _ in 0..iters {
                win.lock(exclusive, t)?;
                for _ in 0..per_sync {
                    op(t)?;
                }
                win.unlock(t)?;
            }
        }
        (SyncMode::LockAll, Some(t)) => {
            for _ in 0..iters {
                win.lock_all()?;
                for _ in 0..per_sync {
                    op(t)?;
                }
                win.unlock_all()?;
            }
        }
        (SyncMode::Flush | SyncMode::Lock | SyncMode::LockAll, None) => {}
        (SyncMode::Fence, _) => {
            for _ in 0..iters {
                if let Some(t) = role.target {
                    for _ in 0..per_sync {
                        op(t)?;
                    }
                }
                win.fence()?;
            }
        }
        (SyncMode::Pscw, _) => {
            for _ in 0..iters {
                if let Some(g) = exposure {
                    win.post(g)?;
                }
                if let (Some(t), Some(g)) = (role.target, access) {
                    win.start(g)?;
                    for _ in 0..per_sync {
                        op(t)?;
                    }
                    win.complete()?;
                }
                if exposure.is_some() {
                    win.wait()?;
                }
            }
        }
    }
    Ok(())
}

/// A transfer measurement: `op` of `bytes` bytes, `per_sync` per synchronization, from
/// rank 0 to rank 1 (and back when `bidirectional`). Validates the moved data.
/// Returns seconds per synchronization at rank 0.
#[allow(clippy::too_many_arguments)]
fn transfer<B: Backend, T: Elem>(
    b: &B,
    win: &B::Win<T>,
    op: CommOp,
    sync: SyncMode,
    bytes: usize,
    per_sync: usize,
    bidirectional: bool,
    p: &Params,
) -> BResult<(f64, Option<f64>)> {
    let comm = b.comm();
    let me = comm.rank();
    let role = role(me, bidirectional);
    let n = (bytes / std::mem::size_of::<T>()).max(1);
    let salt = bytes as u64;
    // Initial target memory: the pattern for get, zeros for everything that writes.
    let mut init = vec![T::default(); n];
    if op == CommOp::Get {
        pattern(&mut init, salt);
    }
    if role.exposed_to.is_some() {
        win.write_local(0, &init)?;
    }
    let mut src = vec![T::default(); n];
    match op {
        CommOp::Put => pattern(&mut src, salt),
        _ => src.fill(T::from_u64(1)),
    }
    let shared: std::sync::Arc<[T]> = src.clone().into();
    let shared_puts = p.shared_buffers && op == CommOp::Put && per_sync > 1;
    let mut dst = vec![T::default(); n];
    let one = T::from_u64(1);
    let mut result = T::default();
    let mut compare = 0u64;
    let mut swap = [T::default(); 2];
    let access = match role.target {
        Some(t) => Some(win.group(&[t])?),
        None => None,
    };
    let exposure = match role.exposed_to {
        Some(o) => Some(win.group(&[o])?),
        None => None,
    };
    let exclusive = op != CommOp::Get;
    comm.barrier()?;
    if sync == SyncMode::Flush {
        if let Some(t) = role.target {
            win.lock(exclusive, t)?;
        }
    }
    if sync == SyncMode::Fence {
        win.fence()?;
    }
    let mut body = |iters: u64| {
        let w = win;
        let (ex, acc, exp) = (exclusive, access.as_ref(), exposure.as_ref());
        match op {
            CommOp::Put if shared_puts => {
                sync_loop(w, sync, &role, acc, exp, per_sync, iters, ex, |t| {
                    w.put_shared(&shared, t, 0)
                })
            }
            CommOp::Put => sync_loop(w, sync, &role, acc, exp, per_sync, iters, ex, |t| {
                w.put(&src, t, 0)
            }),
            CommOp::Get => sync_loop(w, sync, &role, acc, exp, per_sync, iters, ex, |t| {
                w.get(&mut dst, t, 0)
            }),
            CommOp::Acc => sync_loop(w, sync, &role, acc, exp, per_sync, iters, ex, |t| {
                w.acc_sum(&src, t, 0)
            }),
            CommOp::GetAcc => sync_loop(w, sync, &role, acc, exp, per_sync, iters, ex, |t| {
                w.get_acc_sum(&src, &mut dst, t, 0)
            }),
            CommOp::Fop => sync_loop(w, sync, &role, acc, exp, per_sync, iters, ex, |t| {
                w.fetch_add(&one, &mut result, t, 0)
            }),
            CommOp::Cas => sync_loop(w, sync, &role, acc, exp, per_sync, iters, ex, |t| {
                // Each CAS finds the count of the previous ones: compare c, swap in c + 1.
                swap = [T::from_u64(compare), T::from_u64(compare + 1)];
                compare += 1;
                w.cas(&swap[1], &swap[0], &mut result, t, 0)
            }),
        }
    };
    let (secs, mut total) = measure(comm, p, &mut body)?;
    let p50 = if p.p50 && per_sync == 1 {
        let (p50, k) = sample_median(comm, p, secs, &mut body)?;
        total += k;
        Some(p50)
    } else {
        None
    };
    if sync == SyncMode::Flush {
        if let Some(t) = role.target {
            win.unlock(t)?;
        }
    }
    comm.barrier()?;
    // Checks: what the target holds and what the origin fetched.
    let ops = total * per_sync as u64;
    let mut ok = true;
    if role.exposed_to.is_some() {
        let mut now = vec![T::default(); n];
        win.read_local(0, &mut now)?;
        let expect: Vec<T> = match op {
            CommOp::Put => {
                let mut v = vec![T::default(); n];
                pattern(&mut v, salt);
                v
            }
            CommOp::Get => init.clone(),
            CommOp::Acc | CommOp::GetAcc | CommOp::Fop | CommOp::Cas => {
                let mut v = vec![T::from_u64(ops); n];
                if matches!(op, CommOp::Fop | CommOp::Cas) {
                    v.truncate(1);
                    now.truncate(1);
                }
                v
            }
        };
        ok &= now == expect;
    }
    if role.target.is_some() {
        ok &= match op {
            CommOp::Get => {
                let mut v = vec![T::default(); n];
                pattern(&mut v, salt);
                dst == v
            }
            CommOp::GetAcc => dst.iter().all(|&v| v == T::from_u64(ops - 1)),
            CommOp::Fop | CommOp::Cas => result == T::from_u64(ops - 1),
            CommOp::Put | CommOp::Acc => true,
        };
    }
    if !ok {
        // What this process saw, for the error report.
        let mut now = vec![T::default(); n.min(4)];
        win.read_local(0, &mut now)?;
        eprintln!(
            "rank {me}: {} {}B: ops {ops} target {now:?} fetched {:?} result {result:?}",
            sync.name(),
            bytes,
            &dst[..n.min(4)]
        );
    }
    agree_valid(
        comm,
        ok,
        &format!("{} ({}, {} B)", op.latency_bench(), sync.name(), bytes),
    )?;
    Ok((secs, p50))
}

/// Whether `b` cannot run `bench` on `kind` windows (its known defect, said once by rank 0).
fn skips<B: Backend>(b: &B, bench: &str, kind: WinKind) -> bool {
    let Some(why) = b.known_defect(bench, kind) else {
        return false;
    };
    if b.comm().rank() == 0 {
        eprintln!(
            "osbench: skipping {bench} on {} windows of {}: {why}",
            kind.name(),
            b.name()
        );
    }
    true
}

/// Latency of `op` for every selected window kind, sync mode and size.
pub fn latency<B: Backend>(b: &B, op: CommOp, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    match op {
        CommOp::Put | CommOp::Get => latency_typed::<B, u8>(b, op, p, out),
        _ => latency_typed::<B, u64>(b, op, p, out),
    }
}

fn latency_typed<B: Backend, T: Elem>(
    b: &B,
    op: CommOp,
    p: &Params,
    out: &mut Vec<Record>,
) -> BResult<()> {
    let sizes = op.sizes(&p.sizes);
    let max = sizes.iter().copied().max().unwrap_or(8);
    for &kind in &p.windows {
        if skips(b, op.latency_bench(), kind) {
            continue;
        }
        let win = b.window::<T>(kind, max.div_ceil(std::mem::size_of::<T>()))?;
        for &sync in p.syncs.iter().filter(|&&s| b.supports_sync(s)) {
            for &bytes in &sizes {
                let (secs, p50) = transfer(b, &win, op, sync, bytes, 1, false, p)?;
                out.push(Record::new(
                    op.latency_bench(),
                    b,
                    kind.name(),
                    sync.name(),
                    bytes,
                    "latency",
                    secs * 1e6,
                    "us",
                ));
                if let Some(p50) = p50 {
                    out.push(Record::new(
                        op.latency_bench(),
                        b,
                        kind.name(),
                        sync.name(),
                        bytes,
                        "latency-p50",
                        p50 * 1e6,
                        "us",
                    ));
                }
            }
        }
        win.free()?;
    }
    Ok(())
}

/// Operations per synchronization in the bandwidth benchmarks.
pub const BW_WINDOW: usize = 64;

/// Bandwidth of put, get or bidirectional put: 64 operations per synchronization.
pub fn bandwidth<B: Backend>(b: &B, bench: &str, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let (op, bidir) = match bench {
        "put-bw" => (CommOp::Put, false),
        "get-bw" => (CommOp::Get, false),
        _ => (CommOp::Put, true),
    };
    let max = p.sizes.iter().copied().max().unwrap_or(8);
    for &kind in &p.windows {
        if skips(b, bench, kind) {
            continue;
        }
        let win = b.window::<u8>(kind, max)?;
        for &sync in p.syncs.iter().filter(|&&s| b.supports_sync(s)) {
            for &bytes in &p.sizes {
                let (secs, _) = transfer(b, &win, op, sync, bytes, BW_WINDOW, bidir, p)?;
                let moved = (bytes * BW_WINDOW * if bidir { 2 } else { 1 }) as f64;
                out.push(Record::new(
                    bench,
                    b,
                    kind.name(),
                    sync.name(),
                    bytes,
                    if p.shared_buffers && op == CommOp::Put {
                        "bandwidth-shared"
                    } else {
                        "bandwidth"
                    },
                    moved / secs / 1e6,
                    "MB/s",
                ));
            }
        }
        win.free()?;
    }
    Ok(())
}

/// Puts per message-rate iteration (\[Gerstenberger13\] §3.1.2).
pub const MSG_BATCH: usize = 1000;

/// Message rate: 1000 puts of 8 bytes to distinct slots, then one flush (under lock_all).
pub fn msg_rate<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let comm = b.comm();
    let me = comm.rank();
    for &kind in &p.windows {
        if skips(b, "msg-rate", kind) {
            continue;
        }
        let win = b.window::<u64>(kind, MSG_BATCH)?;
        let src: Vec<u64> = (0..MSG_BATCH as u64).map(|i| i * 3 + 7).collect();
        comm.barrier()?;
        win.lock_all()?;
        let (secs, _) = measure(comm, p, |iters| {
            if me == 0 {
                for _ in 0..iters {
                    for (j, v) in src.iter().enumerate() {
                        win.put(std::slice::from_ref(v), 1, j)?;
                    }
                    win.flush(1)?;
                }
            }
            Ok(())
        })?;
        win.unlock_all()?;
        comm.barrier()?;
        let mut ok = true;
        if me == 1 {
            let mut got = vec![0u64; MSG_BATCH];
            win.read_local(0, &mut got)?;
            ok = got == src;
        }
        agree_valid(comm, ok, "msg-rate")?;
        let per_msg = secs / MSG_BATCH as f64;
        out.push(Record::new(
            "msg-rate",
            b,
            kind.name(),
            "lock_all",
            8,
            "rate",
            1.0 / per_msg / 1e6,
            "Mmsg/s",
        ));
        out.push(Record::new(
            "msg-rate",
            b,
            kind.name(),
            "lock_all",
            8,
            "time_per_msg",
            per_msg * 1e9,
            "ns",
        ));
        win.free()?;
    }
    Ok(())
}

/// A dependent arithmetic chain the optimizer cannot remove: `n` steps of computation.
#[inline(never)]
fn compute(n: u64) -> u64 {
    let mut x = black_box(1u64);
    for i in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
    }
    black_box(x)
}

/// Overlap (\[Gerstenberger13\] §3.1.1): how much of a put's time (put + flush) computation placed
/// between the put and the flush can hide.
pub fn overlap<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let comm = b.comm();
    let me = comm.rank();
    // Nanoseconds per compute step, calibrated at rank 0 and shared.
    let mut ns_per_step = [0f64];
    if me == 0 {
        let t = Instant::now();
        compute(2_000_000);
        ns_per_step[0] = t.elapsed().as_nanos() as f64 / 2e6;
    }
    comm.bcast(0, &mut ns_per_step)?;
    let max = p.sizes.iter().copied().max().unwrap_or(8);
    for &kind in &p.windows {
        if skips(b, "overlap", kind) {
            continue;
        }
        let win = b.window::<u8>(kind, max)?;
        for &bytes in &p.sizes {
            let src = vec![0x5au8; bytes];
            comm.barrier()?;
            if me == 0 {
                win.lock(true, 1)?;
            }
            let (t_comm, _) = measure(comm, p, |iters| {
                if me == 0 {
                    for _ in 0..iters {
                        win.put(&src, 1, 0)?;
                        win.flush(1)?;
                    }
                }
                Ok(())
            })?;
            // Computation slightly longer than the communication (broadcast so that all
            // ranks agree on the step count).
            let mut steps = [((t_comm * 1e9 * 1.1) / ns_per_step[0]).ceil().max(1.0) as u64];
            comm.bcast(0, &mut steps)?;
            let (t_comp, _) = measure(comm, p, |iters| {
                if me == 0 {
                    for _ in 0..iters {
                        compute(steps[0]);
                    }
                }
                Ok(())
            })?;
            let (t_both, _) = measure(comm, p, |iters| {
                if me == 0 {
                    for _ in 0..iters {
                        win.put(&src, 1, 0)?;
                        compute(steps[0]);
                        win.flush(1)?;
                    }
                }
                Ok(())
            })?;
            if me == 0 {
                win.unlock(1)?;
            }
            comm.barrier()?;
            let ok = me != 1 || {
                let mut got = vec![0u8; bytes];
                win.read_local(0, &mut got)?;
                got == src
            };
            agree_valid(comm, ok, "overlap")?;
            let ratio = ((t_comm + t_comp - t_both) / t_comm).clamp(0.0, 1.0);
            out.push(Record::new(
                "overlap",
                b,
                kind.name(),
                "flush",
                bytes,
                "overlap",
                ratio * 100.0,
                "%",
            ));
            out.push(Record::new(
                "overlap",
                b,
                kind.name(),
                "flush",
                bytes,
                "comm_time",
                t_comm * 1e6,
                "us",
            ));
        }
        win.free()?;
    }
    Ok(())
}

/// Process counts for the benchmarks that vary them: powers of two up to the job size, and
/// the job size.
pub fn rank_counts(size: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (1..)
        .map(|k| 1usize << k)
        .take_while(|&p| p < size)
        .collect();
    if size >= 2 {
        v.push(size);
    }
    v
}

/// Cost of reading the clock, to subtract from per-call timings.
///
/// The median of 21 batches of 500 reads: one mean over all of them took in any preemption
/// that fell into it (a few ms over 10 000 reads is hundreds of ns per read), and then every
/// cell that subtracts it printed 0.
fn clock_overhead() -> f64 {
    const BATCHES: usize = 21;
    const READS: u32 = 500;
    let mut means: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let mut acc = Duration::ZERO;
            for _ in 0..READS {
                let a = Instant::now();
                acc += black_box(Instant::now()) - a;
            }
            acc.as_secs_f64() / f64::from(READS)
        })
        .collect();
    means.sort_by(f64::total_cmp);
    means[BATCHES / 2]
}

/// Most calls of a timed loop whose single times a `--p50` median is taken of.
const P50_CALLS: usize = 1 << 20;

/// Per-call times of one synchronization call: the loop's mean and, with `--p50`, the
/// median of its calls, in seconds, minus the clock's own cost.
#[derive(Debug, Clone, Copy)]
struct CallTimes {
    mean: f64,
    p50: Option<f64>,
}

/// Times `acquire` and `release`, called alternately at rank 0, call by call: the times of
/// each (meaningful at rank 0).
fn time_pair<A, R>(
    comm: &Comm,
    p: &Params,
    clock: f64,
    mut acquire: A,
    mut release: R,
) -> BResult<(CallTimes, CallTimes)>
where
    A: FnMut() -> BResult<()>,
    R: FnMut() -> BResult<()>,
{
    let (mut t_acquire, mut t_release, mut calls) = (0.0, 0.0, 1u64);
    let (mut each_a, mut each_r) = (Vec::new(), Vec::new());
    measure(comm, p, |iters| {
        if comm.rank() == 0 {
            let (mut a, mut r) = (Duration::ZERO, Duration::ZERO);
            // The last loop is the timed one: only its calls count.
            each_a.clear();
            each_r.clear();
            for _ in 0..iters {
                let t0 = Instant::now();
                acquire()?;
                let t1 = Instant::now();
                release()?;
                let t2 = Instant::now();
                a += t1 - t0;
                r += t2 - t1;
                if p.p50 && each_a.len() < P50_CALLS {
                    each_a.push((t1 - t0).as_secs_f64());
                    each_r.push((t2 - t1).as_secs_f64());
                }
            }
            t_acquire = a.as_secs_f64();
            t_release = r.as_secs_f64();
            calls = iters;
        }
        Ok(())
    })?;
    let times = |total: f64, each: &mut Vec<f64>| CallTimes {
        mean: total / calls as f64 - clock,
        p50: (p.p50 && comm.rank() == 0).then(|| median(each) - clock),
    };
    Ok((times(t_acquire, &mut each_a), times(t_release, &mut each_r)))
}

/// Synchronization latency (\[Gerstenberger13\] §3.2): passive-target calls between ranks 0 and 1,
/// fence versus process count, PSCW versus ring neighbours.
pub fn sync_latency<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let comm = b.comm();
    let me = comm.rank();
    let n = comm.size();
    let clock = clock_overhead();
    let sync_rec_as = |name: &str, metric: &str, secs: f64| {
        Record::new(
            "sync-latency",
            b,
            "allocate",
            name,
            0,
            metric,
            (secs * 1e6).max(0.0),
            "us",
        )
        .with_ranks(n)
    };
    let sync_rec = |name: &str, secs: f64| sync_rec_as(name, "latency", secs);
    // The loop's mean, and with `--p50` the median of the single calls.
    let sync_recs = |name: &str, t: CallTimes| {
        let mut v = vec![sync_rec(name, t.mean)];
        if let Some(p50) = t.p50 {
            v.push(sync_rec_as(name, "latency-p50", p50));
        }
        v
    };
    let win = b.window::<u64>(WinKind::Allocate, 8)?;
    // Passive target, timed call by call (minus the clock's own cost).
    for (name, exclusive) in [("lock_shared", false), ("lock_exclusive", true)] {
        let (lock, unlock) =
            time_pair(comm, p, clock, || win.lock(exclusive, 1), || win.unlock(1))?;
        if me == 0 {
            out.extend(sync_recs(name, lock));
            if exclusive {
                out.extend(sync_recs("unlock", unlock));
            }
        }
    }
    let (lock_all, unlock_all) = time_pair(comm, p, clock, || win.lock_all(), || win.unlock_all())?;
    if me == 0 {
        out.extend(sync_recs("lock_all", lock_all));
        out.extend(sync_recs("unlock_all", unlock_all));
    }
    // flush and sync inside a lock_all epoch, no operations pending: the calls' own cost.
    win.lock_all()?;
    let (t_flush, _) = measure(comm, p, |iters| {
        if me == 0 {
            for _ in 0..iters {
                win.flush(1)?;
            }
        }
        Ok(())
    })?;
    let (t_sync, _) = measure(comm, p, |iters| {
        if me == 0 {
            for i in 0..iters {
                win.sync()?;
                // Opaque to the optimizer, so that consecutive memory barriers are not
                // merged into one.
                black_box(i);
            }
        }
        Ok(())
    })?;
    win.unlock_all()?;
    if me == 0 {
        out.push(sync_rec("flush", t_flush));
        out.push(sync_rec("sync", t_sync));
    }
    // PSCW on a ring: each process accesses k neighbours (alternately right and left) and
    // exposes its memory to the processes that access it; one empty epoch each way.
    for k in 1..n.min(5) {
        let neighbours = |r: usize| -> Vec<usize> {
            let mut v: Vec<usize> = (1..=k)
                .map(|j| {
                    let d = j.div_ceil(2);
                    if j % 2 == 1 {
                        (r + d) % n
                    } else {
                        (r + n - d) % n
                    }
                })
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let accessed = neighbours(me);
        let accessors: Vec<usize> = (0..n).filter(|&r| neighbours(r).contains(&me)).collect();
        let access = win.group(&accessed)?;
        let exposure = win.group(&accessors)?;
        let (secs, _) = measure(comm, p, |iters| {
            for _ in 0..iters {
                win.post(&exposure)?;
                win.start(&access)?;
                win.complete()?;
                win.wait()?;
            }
            Ok(())
        })?;
        if me == 0 {
            out.push(
                Record::new(
                    "sync-latency",
                    b,
                    "allocate",
                    "pscw",
                    0,
                    "latency",
                    secs * 1e6,
                    "us",
                )
                .with_ranks(n)
                .with_neighbours(accessed.len()),
            );
        }
    }
    win.free()?;
    // Fence versus process count.
    for ranks in rank_counts(n) {
        let sub = b.prefix(ranks)?;
        if let Some(s) = &sub {
            let w = s.window::<u64>(WinKind::Allocate, 8)?;
            w.fence()?;
            let mut each = Vec::new();
            let (secs, _) = measure(s.comm(), p, |iters| {
                if !p.p50 {
                    for _ in 0..iters {
                        w.fence()?;
                    }
                    return Ok(());
                }
                // The last loop is the timed one: only its fences count.
                each.clear();
                for _ in 0..iters {
                    let t = Instant::now();
                    w.fence()?;
                    if each.len() < P50_CALLS {
                        each.push(t.elapsed().as_secs_f64());
                    }
                }
                Ok(())
            })?;
            w.free()?;
            if me == 0 {
                let fence_rec = |metric: &str, secs: f64| {
                    Record::new(
                        "sync-latency",
                        b,
                        "allocate",
                        "fence",
                        0,
                        metric,
                        secs * 1e6,
                        "us",
                    )
                    .with_ranks(ranks)
                };
                out.push(fence_rec("latency", secs));
                if p.p50 {
                    out.push(fence_rec(
                        "latency-p50",
                        (median(&mut each) - clock).max(0.0),
                    ));
                }
            }
        }
        comm.barrier()?;
    }
    Ok(())
}

/// What this process holds, in bytes: resident memory (from /proc/self/statm), the shared
/// memory among it (`RssShmem` of /proc/self/status) and the heap bytes allocated and not
/// freed (`mallinfo2`: what the allocator hands out, without the pages it keeps spare).
#[derive(Debug, Clone, Copy, Default)]
struct Footprint {
    rss: f64,
    shared: f64,
    heap: f64,
}

impl Footprint {
    fn now() -> Footprint {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: f64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0);
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let shared_kib: f64 = status
            .lines()
            .find(|l| l.starts_with("RssShmem:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let heap = unsafe { libc::mallinfo2() }.uordblks as f64;
        Footprint {
            rss: pages * 4096.0,
            shared: shared_kib * 1024.0,
            heap,
        }
    }

    /// `self - earlier`, each part, divided by `windows`.
    fn per(self, earlier: Footprint, windows: usize) -> [f64; 3] {
        let w = windows as f64;
        [
            (self.rss - earlier.rss) / w,
            (self.shared - earlier.shared) / w,
            (self.heap - earlier.heap) / w,
        ]
    }
}

/// Stays away from the library for `d`: sleeps, with no call into it, until the time is up
/// (a sleep may end early on a signal). A process doing this is the target that "computes
/// elsewhere" of seed 000's progress and thread-scope measurements.
pub(crate) fn sleep_outside_library(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
    }
}

/// The median of `v` (the upper middle for an even count; 0 when empty), which it sorts.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Windows `win-create` holds at once to measure memory per window.
const MEMORY_WINDOWS: usize = 64;
/// After how many of them it reads resident memory the first time.
const MEMORY_FIRST: usize = 16;

/// Window creation time and per-process memory versus process count, for every kind.
pub fn win_create<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let comm = b.comm();
    let me = comm.rank();
    let len = p.create_bytes;
    for ranks in rank_counts(comm.size()) {
        let sub = b.prefix(ranks)?;
        if let Some(s) = &sub {
            let c = s.comm();
            for &kind in &p.windows {
                // Memory: what creating one window makes resident (control structures,
                // tables, whatever the library touches), without the application memory
                // and without touching the window memory, which costs the same everywhere
                // once the application uses it.
                // One window first, so that one-time costs (lazy initialization, the
                // first segment mappings) are not charged to the measured ones. Then
                // MEMORY_WINDOWS windows held at once, the footprint read after the first
                // MEMORY_FIRST and after all: the metrics are the increments per window
                // between the two — one window's own delta moves by whole pages with the
                // heap's growth, and costs a process pays once (connections, address vector
                // entries, tables that windows over the same ranks share) would be charged
                // to it. `rss_delta`: resident memory; `shm_delta` the shared memory in it
                // (the window's segment pages this process touched); `heap_delta` the heap
                // bytes allocated and kept (resident heap grows by whole pages, and by less
                // where earlier frees left room: that part of `rss_delta` depends on what
                // the process did before); `rss_once` what the first windows cost beyond
                // their increments.
                s.window::<u8>(kind, len)?.free()?;
                let memories = (0..MEMORY_WINDOWS)
                    .map(|_| s.memory::<u8>(kind, len))
                    .collect::<BResult<Vec<_>>>()?;
                c.barrier()?;
                let before = Footprint::now();
                let mut first = before;
                let mut held = Vec::with_capacity(MEMORY_WINDOWS);
                for mem in memories {
                    held.push(s.window_over::<u8>(kind, len, mem)?);
                    if held.len() == MEMORY_FIRST {
                        first = Footprint::now();
                    }
                }
                let [rss, shm, heap] = Footprint::now().per(first, MEMORY_WINDOWS - MEMORY_FIRST);
                let once = (first.rss - before.rss - MEMORY_FIRST as f64 * rss).max(0.0);
                for w in held {
                    w.free()?;
                }
                let mut delta = [rss, shm, heap, once];
                c.allreduce(&mut delta, ReduceOp::Sum)?;
                // Time: the slowest process's creation (and free), the median over
                // repetitions. Not the mean: on a machine with as many cores as processes, a
                // process the scheduler parks in one repetition costs a time slice, a thousand
                // times the creation, and would decide the mean alone.
                let reps = match p.iters {
                    Some(n) => n.clamp(1, 100),
                    None => 60,
                };
                let (mut t_create, mut t_free) = (Vec::new(), Vec::new());
                for _ in 0..reps {
                    // The application's allocation is not part of window creation.
                    let mem = s.memory::<u8>(kind, len)?;
                    c.barrier()?;
                    let t = Instant::now();
                    let w = s.window_over::<u8>(kind, len, mem)?;
                    let mut created = [t.elapsed().as_secs_f64()];
                    c.barrier()?;
                    let t = Instant::now();
                    w.free()?;
                    let mut freed = [t.elapsed().as_secs_f64()];
                    c.allreduce(&mut created, ReduceOp::Max)?;
                    c.allreduce(&mut freed, ReduceOp::Max)?;
                    t_create.push(created[0]);
                    t_free.push(freed[0]);
                }
                if me == 0 {
                    let rec = |metric: &str, v: f64, unit: &str| {
                        Record::new("win-create", b, kind.name(), "none", len, metric, v, unit)
                            .with_ranks(ranks)
                    };
                    let mut timed = |metric: &str, v: &mut Vec<f64>| {
                        let mut r = rec(metric, median(v) * 1e6, "us");
                        r.stat = Some("median".into());
                        out.push(r);
                    };
                    timed("create_time", &mut t_create);
                    timed("free_time", &mut t_free);
                    let kib = |v: f64| v / ranks as f64 / 1024.0;
                    out.push(rec("rss_delta", kib(delta[0]), "KiB"));
                    out.push(rec("shm_delta", kib(delta[1]), "KiB"));
                    out.push(rec("heap_delta", kib(delta[2]), "KiB"));
                    out.push(rec("rss_once", kib(delta[3]), "KiB"));
                }
            }
        }
        comm.barrier()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_upper_middle_and_zero_when_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn rank_counts_are_powers_of_two_and_the_size() {
        assert_eq!(rank_counts(1), Vec::<usize>::new());
        assert_eq!(rank_counts(2), vec![2]);
        assert_eq!(rank_counts(6), vec![2, 4, 6]);
        assert_eq!(rank_counts(8), vec![2, 4, 8]);
    }

    #[test]
    fn accumulate_sizes_are_whole_words() {
        assert_eq!(CommOp::Acc.sizes(&[1, 4, 8, 16, 20]), vec![8, 16]);
        assert_eq!(CommOp::Cas.sizes(&[1, 4096]), vec![8]);
        assert_eq!(CommOp::Get.sizes(&[1, 3]), vec![1, 3]);
    }

    #[test]
    fn patterns_have_no_zero_bytes() {
        let mut v = vec![0u8; 1000];
        pattern(&mut v, 17);
        assert!(v.iter().all(|&b| b != 0));
    }
}
