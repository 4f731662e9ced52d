//! `alltoallv`: seed 001's benchmarks of persistent RMA alltoallv.
//!
//! Benchmark 1 (`pattern` = `uniform`): every pair exchanges `bytes` (each size of
//! `--sizes` from 1 KiB to 2 MiB). Benchmark 2 (irregular counts at a mean of `bytes` per
//! pair, sizes up to 256 KiB): `powerlaw` (a seeded power law: a few pairs carry most of
//! the data), `laplace3d` (the halo exchange of a 3-D grid split over a process grid: faces
//! to up to six neighbours) and, with `--matrix FILE`, a Matrix Market matrix (contiguous
//! block rows per rank; the columns a rank's rows touch in another rank's block are the
//! elements it receives from it).
//!
//! Metrics, µs per exchange (new send data is written before each exchange, untimed), the
//! maximum over ranks, a barrier before every timed region:
//! `persistent-fence|persistent-hierarchical|persistent-lock|persistent-auto` (onesided's
//! plans, receive memory from `alloc_mem`), `rma-oneshot` (a window per exchange),
//! `two-sided` (the implementation's two-sided alltoallv: onesided's bootstrap, the host's
//! `MPI_Alltoallv`), `two-sided-persistent` (`MPI_Alltoallv_init` where the host has it).
//! Per plan also `init-<variant>` (µs to build and free it) and `breakeven-<variant>`
//! (cycles until it pays for itself against `two-sided`; unit `never`, value 0, when it
//! does not). Every variant's last exchange is checked element by element.

use std::path::Path;
use std::time::{Duration, Instant};

use onesided::{
    alloc_mem, alltoallv_rma_oneshot, Alltoallv, AlltoallvVariant, BreakEven, Comm, NodeSplit,
    ReduceOp, WinBuffer,
};

use crate::backend::{BResult, Backend, BenchError};
use crate::bench::{measure, Params};
use crate::report::Record;

/// Smallest and largest bytes per pair of benchmark 1 (seed 001 Fig. 2 goes to 2 MiB).
const UNIFORM_RANGE: (usize, usize) = (1 << 10, 2 << 20);
/// Largest mean bytes per pair of the irregular patterns.
const IRREGULAR_MAX: usize = 256 << 10;
/// Plan builds timed for T_init (seed 001 times init in a loop).
const INIT_REPS: usize = 5;

/// One rank's counts and displacements (elements of u64).
#[derive(Debug, Clone)]
pub struct Shape {
    pub sendcounts: Vec<usize>,
    pub sdispls: Vec<usize>,
    pub recvcounts: Vec<usize>,
    pub rdispls: Vec<usize>,
}

impl Shape {
    /// Packed displacements for a rank sending `send[p]` to and receiving `recv[p]` from
    /// each rank `p`.
    pub fn packed(sendcounts: Vec<usize>, recvcounts: Vec<usize>) -> Shape {
        let prefix = |c: &[usize]| {
            c.iter()
                .scan(0, |at, &n| {
                    let d = *at;
                    *at += n;
                    Some(d)
                })
                .collect()
        };
        Shape {
            sdispls: prefix(&sendcounts),
            rdispls: prefix(&recvcounts),
            sendcounts,
            recvcounts,
        }
    }

    fn send_len(&self) -> usize {
        self.sendcounts.iter().sum()
    }

    fn recv_len(&self) -> usize {
        self.recvcounts.iter().sum()
    }
}

/// The counts matrix (`m[src][dst]` elements) of a pattern, the same at every rank.
pub fn pattern_matrix(pattern: &str, n: usize, bytes: usize) -> BResult<Vec<Vec<usize>>> {
    let mean = (bytes / 8).max(1);
    Ok(match pattern {
        "uniform" => vec![vec![mean; n]; n],
        "powerlaw" => {
            // Weight of pair (i, j): 1 / k^1.5 for the pair's rank k in a seeded shuffle,
            // scaled so that the mean stays `mean`.
            let mut order: Vec<usize> = (0..n * n).collect();
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for i in (1..order.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let weight: Vec<f64> = (0..n * n)
                .map(|k| 1.0 / ((k + 1) as f64).powf(1.5))
                .collect();
            let total: f64 = weight.iter().sum();
            let mut m = vec![vec![0; n]; n];
            for (k, &pair) in order.iter().enumerate() {
                m[pair / n][pair % n] =
                    (weight[k] / total * (mean * n * n) as f64).round() as usize;
            }
            m
        }
        "laplace3d" => {
            // Process grid px*py*pz = n, local cube of side s with a face of ~mean elements.
            let dims = grid3(n);
            let side = (mean as f64).sqrt().round().max(1.0) as usize;
            let coord = |r: usize| {
                [
                    r % dims[0],
                    (r / dims[0]) % dims[1],
                    r / (dims[0] * dims[1]),
                ]
            };
            let mut m = vec![vec![0; n]; n];
            for (i, row) in m.iter_mut().enumerate() {
                let c = coord(i);
                for (j, cell) in row.iter_mut().enumerate() {
                    let d = coord(j);
                    let off: Vec<usize> = (0..3).map(|a| c[a].abs_diff(d[a])).collect();
                    // Face neighbours differ by one step along exactly one axis.
                    if off.iter().sum::<usize>() == 1 {
                        *cell = side * side;
                    }
                }
            }
            m
        }
        other => {
            return Err(BenchError(format!("alltoallv: unknown pattern {other}")));
        }
    })
}

/// A near-cubic process grid of `n` ranks.
fn grid3(n: usize) -> [usize; 3] {
    let mut best = [n, 1, 1];
    for a in 1..=n {
        for b in 1..=n / a {
            if n % (a * b) == 0 {
                let c = n / (a * b);
                let spread = |d: [usize; 3]| d.iter().max().unwrap() - d.iter().min().unwrap();
                if spread([a, b, c]) < spread(best) {
                    best = [a, b, c];
                }
            }
        }
    }
    best
}

/// The counts of a Matrix Market matrix (coordinate format): rows split into contiguous
/// blocks per rank; `m[q][r]` = distinct columns of rank `q`'s block that rank `r`'s rows
/// touch (what `q` sends `r` in a sparse matrix-vector product; none to itself).
pub fn matrix_market(path: &Path, n: usize) -> BResult<Vec<Vec<usize>>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BenchError(format!("alltoallv: {}: {e}", path.display())))?;
    let mut lines = text
        .lines()
        .filter(|l| !l.starts_with('%') && !l.trim().is_empty());
    let header = lines
        .next()
        .ok_or_else(|| BenchError(format!("{}: no size line", path.display())))?;
    let dims: Vec<usize> = header
        .split_whitespace()
        .map(|w| {
            w.parse()
                .map_err(|_| BenchError(format!("bad size line: {header}")))
        })
        .collect::<BResult<_>>()?;
    let [rows, cols, _nnz] = dims[..] else {
        return Err(BenchError(format!("bad size line: {header}")));
    };
    let owner = |i: usize, len: usize| (i * n / len.max(1)).min(n - 1);
    let mut needed = vec![std::collections::BTreeSet::new(); n];
    for line in lines {
        let mut w = line.split_whitespace();
        let (Some(i), Some(j)) = (w.next(), w.next()) else {
            continue;
        };
        let (i, j): (usize, usize) = (
            i.parse()
                .map_err(|_| BenchError(format!("bad entry: {line}")))?,
            j.parse()
                .map_err(|_| BenchError(format!("bad entry: {line}")))?,
        );
        if i == 0 || j == 0 || i > rows || j > cols {
            return Err(BenchError(format!("entry out of range: {line}")));
        }
        needed[owner(i - 1, rows)].insert(j - 1);
    }
    let mut m = vec![vec![0; n]; n];
    for (r, cols_needed) in needed.iter().enumerate() {
        for &j in cols_needed {
            let q = owner(j, cols);
            if q != r {
                m[q][r] += 1;
            }
        }
    }
    Ok(m)
}

/// What `src` sends `dst` as element `k` of exchange `round`.
fn stamp(round: u64, src: usize, dst: usize, k: usize) -> u64 {
    (round << 44) | ((src as u64) << 32) | ((dst as u64) << 24) | (k as u64 & 0xff_ffff)
}

fn fill(s: &Shape, send: &mut [u64], round: u64, me: usize) {
    for (p, (&c, &d)) in s.sendcounts.iter().zip(&s.sdispls).enumerate() {
        for (k, v) in send[d..d + c].iter_mut().enumerate() {
            *v = stamp(round, me, p, k);
        }
    }
}

fn valid(s: &Shape, recv: &[u64], round: u64, me: usize) -> bool {
    s.recvcounts
        .iter()
        .zip(&s.rdispls)
        .enumerate()
        .all(|(p, (&c, &d))| {
            recv[d..d + c]
                .iter()
                .enumerate()
                .all(|(k, &v)| v == stamp(round, p, me, k))
        })
}

/// The slowest rank's time, and whether every rank's data was right.
fn slowest(comm: &Comm, secs: f64, ok: bool) -> BResult<f64> {
    if !comm.agree(ok)? {
        return Err(BenchError("alltoallv: data validation failed".into()));
    }
    let mut t = [secs];
    comm.allreduce(&mut t, ReduceOp::Max)?;
    Ok(t[0])
}

/// Mean seconds of the exchange in one call of `round` ([`measure`]: warm-up, then a barrier
/// before the timed loop). A round writes new send data untimed, then returns how long its
/// exchange took ([`lap`]), so that every variant times the exchange alone.
fn timed(comm: &Comm, p: &Params, mut round: impl FnMut() -> BResult<Duration>) -> BResult<f64> {
    // Overwritten by each call of the loop: measure's warm-up, then its timed run.
    let mut last = (Duration::ZERO, 0u64);
    measure(comm, p, |iters| {
        let mut spent = Duration::ZERO;
        for _ in 0..iters {
            spent += round()?;
        }
        last = (spent, iters);
        Ok(())
    })?;
    Ok(last.0.as_secs_f64() / last.1.max(1) as f64)
}

/// How long `exchange` took.
fn lap(exchange: impl FnOnce() -> BResult<()>) -> BResult<Duration> {
    let t = Instant::now();
    exchange()?;
    Ok(t.elapsed())
}

pub fn alltoallv<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let matrix = p.matrix.as_deref();
    let comm = b.comm();
    let n = comm.size();
    let mut cases: Vec<(String, usize, Vec<Vec<usize>>)> = Vec::new();
    for &bytes in &p.sizes {
        if (UNIFORM_RANGE.0..=UNIFORM_RANGE.1).contains(&bytes) {
            cases.push((
                "uniform".into(),
                bytes,
                pattern_matrix("uniform", n, bytes)?,
            ));
        }
    }
    for &bytes in &p.sizes {
        if (UNIFORM_RANGE.0..=IRREGULAR_MAX).contains(&bytes) {
            for pattern in ["powerlaw", "laplace3d"] {
                cases.push((pattern.into(), bytes, pattern_matrix(pattern, n, bytes)?));
            }
        }
    }
    if let Some(path) = matrix {
        let m = matrix_market(path, n)?;
        let total: usize = m.iter().flatten().sum();
        let name = path
            .file_name()
            .map_or("matrix".into(), |f| f.to_string_lossy().into_owned());
        cases.push((name, total * 8 / (n * n).max(1), m));
    }
    for (pattern, bytes, m) in cases {
        let me = comm.rank();
        let s = Shape::packed(
            (0..n).map(|q| m[me][q]).collect(),
            (0..n).map(|q| m[q][me]).collect(),
        );
        run_case(b, p, &pattern, bytes, &s, out)?;
    }
    Ok(())
}

fn run_case<B: Backend>(
    b: &B,
    p: &Params,
    pattern: &str,
    bytes: usize,
    s: &Shape,
    out: &mut Vec<Record>,
) -> BResult<()> {
    let comm = b.comm();
    let me = comm.rank();
    let mut record = |window: &str, sync: &str, metric: String, value: f64, unit: &str| {
        if me == 0 {
            let mut r = Record::new("alltoallv", b, window, sync, bytes, &metric, value, unit);
            r.pattern = Some(pattern.to_owned());
            out.push(r);
        }
    };
    // The implementation's two-sided exchange: the baseline of every break-even.
    let mut send = vec![0u64; s.send_len()];
    let mut recv = vec![0u64; s.recv_len()];
    let mut round = 0u64;
    let secs = timed(comm, p, || {
        round += 1;
        fill(s, &mut send, round, me);
        lap(|| {
            b.alltoallv(
                &send,
                &s.sendcounts,
                &s.sdispls,
                &mut recv,
                &s.recvcounts,
                &s.rdispls,
            )
        })
    })?;
    let baseline = slowest(comm, secs, valid(s, &recv, round, me))?;
    record("none", "none", "two-sided".into(), baseline * 1e6, "us");
    if let Some(secs) = b.alltoallv_persistent(
        &mut send,
        &s.sendcounts,
        &s.sdispls,
        &mut recv,
        &s.recvcounts,
        &s.rdispls,
        &mut |send: &mut [u64], start: &mut dyn FnMut() -> BResult<()>| {
            // The request's buffers are fixed; their contents may change between cycles.
            timed(comm, p, || {
                round += 1;
                fill(s, send, round, me);
                lap(&mut *start)
            })
        },
    )? {
        let t = slowest(comm, secs, valid(s, &recv, round, me))?;
        record("none", "none", "two-sided-persistent".into(), t * 1e6, "us");
    }
    if b.name() != "onesided" {
        return Ok(());
    }
    // onesided's plans over alloc_mem receive memory.
    for variant in [
        AlltoallvVariant::Fence,
        AlltoallvVariant::FenceHierarchical,
        AlltoallvVariant::Lock,
        AlltoallvVariant::Notify,
        AlltoallvVariant::Auto,
    ] {
        let build = || -> BResult<Alltoallv<u64>> {
            Ok(Alltoallv::new(
                comm,
                variant,
                NodeSplit::Hosts,
                vec![0u64; s.send_len()],
                &s.sendcounts,
                &s.sdispls,
                alloc_mem::<u64>(s.recv_len().max(1))?,
                &s.recvcounts,
                &s.rdispls,
            )?)
        };
        // T_init: build + free, in a loop.
        comm.barrier()?;
        let t = Instant::now();
        for _ in 0..INIT_REPS {
            build()?.free()?;
        }
        let init = slowest(comm, t.elapsed().as_secs_f64() / INIT_REPS as f64, true)?;
        let mut plan = build()?;
        let mut round = 0u64;
        let secs = timed(comm, p, || {
            round += 1;
            fill(s, plan.send_mut()?, round, me);
            lap(|| Ok(plan.start()?.wait()?))
        })?;
        let ok = valid(s, plan.recv()?, round, me);
        plan.free()?;
        let persist = slowest(comm, secs, ok)?;
        let name = variant.name();
        let sync = match variant {
            AlltoallvVariant::Lock => "lock_all",
            AlltoallvVariant::Notify | AlltoallvVariant::Auto => "notify",
            _ => "fence",
        };
        record(
            "create-allocmem",
            sync,
            format!("persistent-{name}"),
            persist * 1e6,
            "us",
        );
        record(
            "create-allocmem",
            sync,
            format!("init-{name}"),
            init * 1e6,
            "us",
        );
        let model = BreakEven {
            t_init: Duration::from_secs_f64(init),
            t_persist: Duration::from_secs_f64(persist),
            t_baseline: Duration::from_secs_f64(baseline),
        };
        match model.iterations() {
            Some(k) => record(
                "create-allocmem",
                sync,
                format!("breakeven-{name}"),
                k as f64,
                "iterations",
            ),
            None => record(
                "create-allocmem",
                sync,
                format!("breakeven-{name}"),
                0.0,
                "never",
            ),
        }
    }
    // A window per exchange.
    let mut send = vec![0u64; s.send_len()];
    let mut recv = Some(WinBuffer::from(alloc_mem::<u64>(s.recv_len().max(1))?));
    let mut round = 0u64;
    let secs = timed(comm, p, || {
        round += 1;
        fill(s, &mut send, round, me);
        let buf = recv.take().expect("receive buffer");
        lap(|| {
            recv = Some(alltoallv_rma_oneshot(
                comm,
                &send,
                &s.sendcounts,
                &s.sdispls,
                buf,
                &s.recvcounts,
                &s.rdispls,
            )?);
            Ok(())
        })
    })?;
    let ok = match recv.as_ref() {
        Some(WinBuffer::AllocMem(m)) => valid(s, m, round, me),
        _ => false,
    };
    let t = slowest(comm, secs, ok)?;
    record(
        "create-allocmem",
        "fence",
        "rma-oneshot".into(),
        t * 1e6,
        "us",
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_have_the_requested_mean_and_laplace_faces() {
        let m = pattern_matrix("uniform", 3, 4096).unwrap();
        assert!(m.iter().flatten().all(|&c| c == 512));
        let p = pattern_matrix("powerlaw", 4, 8192).unwrap();
        let total: usize = p.iter().flatten().sum();
        assert!((total as f64 - 1024.0 * 16.0).abs() < 64.0, "{total}");
        assert!(p.iter().flatten().max() > Some(&(4 * 1024)), "{p:?}");
        // 8 ranks: a 2x2x2 grid, every rank has 3 face neighbours.
        let l = pattern_matrix("laplace3d", 8, 8 * 100).unwrap();
        for row in &l {
            assert_eq!(row.iter().filter(|&&c| c > 0).count(), 3, "{row:?}");
        }
        assert_eq!(grid3(12), [2, 2, 3]);
    }

    #[test]
    fn matrix_market_counts_the_columns_each_block_needs() {
        let dir = std::env::temp_dir().join(format!("osbench-mm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.mtx");
        // 4x4, two ranks own rows/cols {0,1} and {2,3}.
        std::fs::write(
            &path,
            "%%MatrixMarket matrix coordinate real general\n4 4 5\n1 1 1\n1 3 1\n2 4 1\n3 1 1\n4 4 1\n",
        )
        .unwrap();
        let m = matrix_market(&path, 2).unwrap();
        // Rank 0's rows touch columns 2 and 3 (rank 1's): rank 1 sends 2; rank 1's rows
        // touch column 0: rank 0 sends 1.
        assert_eq!(m, vec![vec![0, 1], vec![2, 0]]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
