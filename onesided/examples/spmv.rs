//! Distributed sparse matrix-vector products with a persistent alltoallv plan (seed 001).
//!
//! A sparse n×n matrix (a 1-D Laplacian plus long-range couplings, so that every rank
//! needs entries of several others) is split into contiguous block rows. Each iteration of
//! a power method computes y = A·x: every rank first receives the entries of x its rows
//! touch in other ranks' blocks — the same counts every time, so one plan serves all
//! iterations — then multiplies locally and normalises. The result is checked against the
//! serial computation at every rank.
//!
//! ```sh
//! cargo build --release --examples
//! target/release/osrun -n 4 target/release/examples/spmv 4000 50 lock
//! ```
//! Arguments: n (default 2000), iterations (default 30), variant `fence` (default),
//! `hierarchical`, `lock` or `auto`.

use std::collections::BTreeSet;
use std::time::Instant;

use onesided::{alloc_mem, Alltoallv, AlltoallvVariant, NodeSplit, ReduceOp};

/// Column indices of row `i` (the same matrix at every rank).
fn row(i: usize, n: usize) -> Vec<(usize, f64)> {
    let mut cols = vec![(i, 4.0)];
    for j in [i.wrapping_sub(1), i + 1] {
        if j < n {
            cols.push((j, -1.0));
        }
    }
    // Long-range couplings: every 7th row talks to the mirrored row.
    if i % 7 == 0 && n - 1 - i != i {
        cols.push((n - 1 - i, -0.5));
    }
    cols
}

/// First row of rank `r`'s block.
fn first_row(r: usize, ranks: usize, n: usize) -> usize {
    r * n / ranks
}

fn owner(i: usize, ranks: usize, n: usize) -> usize {
    (0..ranks)
        .rev()
        .find(|&r| first_row(r, ranks, n) <= i)
        .unwrap_or(0)
}

fn main() -> onesided::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let iters: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(30);
    let variant = match args.get(3).map(String::as_str) {
        None | Some("fence") => AlltoallvVariant::Fence,
        Some("hierarchical") => AlltoallvVariant::FenceHierarchical,
        Some("lock") => AlltoallvVariant::Lock,
        Some("auto") => AlltoallvVariant::Auto,
        Some(other) => {
            return Err(onesided::Error::InvalidArgument(format!(
                "unknown variant {other}"
            )))
        }
    };
    let universe = onesided::init()?;
    let world = universe.world();
    let (me, ranks) = (world.rank(), world.size());
    let (lo, hi) = (first_row(me, ranks, n), first_row(me + 1, ranks, n));

    // Which remote x entries my rows need, per owner (sorted: the order they arrive in).
    let mut needed = vec![BTreeSet::new(); ranks];
    for i in lo..hi {
        for (j, _) in row(i, n) {
            let q = owner(j, ranks, n);
            if q != me {
                needed[q].insert(j);
            }
        }
    }
    // Tell every owner which of its entries I need (a one-time exchange).
    let requests: Vec<Vec<u64>> = needed
        .iter()
        .map(|s| s.iter().map(|&j| j as u64).collect())
        .collect();
    let views: Vec<&[u64]> = requests.iter().map(Vec::as_slice).collect();
    let wanted = world.alltoallv(&views)?; // wanted[q]: my entries rank q needs
    let sendcounts: Vec<usize> = wanted.iter().map(Vec::len).collect();
    let recvcounts: Vec<usize> = needed.iter().map(BTreeSet::len).collect();
    let prefix = |c: &[usize]| -> Vec<usize> {
        c.iter()
            .scan(0, |at, &k| {
                let d = *at;
                *at += k;
                Some(d)
            })
            .collect()
    };
    let (sdispls, rdispls) = (prefix(&sendcounts), prefix(&recvcounts));
    let send_len: usize = sendcounts.iter().sum();
    let recv_len: usize = recvcounts.iter().sum();

    let started = Instant::now();
    let mut plan = Alltoallv::new(
        world,
        variant,
        NodeSplit::Hosts,
        vec![0.0f64; send_len],
        &sendcounts,
        &sdispls,
        alloc_mem::<f64>(recv_len.max(1))?,
        &recvcounts,
        &rdispls,
    )?;
    let init = started.elapsed();

    // Where each needed remote entry lands in the receive buffer.
    let mut slot = std::collections::HashMap::new();
    for (q, cols) in needed.iter().enumerate() {
        for (k, &j) in cols.iter().enumerate() {
            slot.insert(j, rdispls[q] + k);
        }
    }
    let mut x: Vec<f64> = (lo..hi).map(|i| 1.0 + (i % 10) as f64 / 10.0).collect();
    let started = Instant::now();
    for _ in 0..iters {
        // Pack the entries each rank asked for, exchange, multiply, normalise.
        let send = plan.send_mut()?;
        for (q, cols) in wanted.iter().enumerate() {
            for (k, &j) in cols.iter().enumerate() {
                send[sdispls[q] + k] = x[j as usize - lo];
            }
        }
        plan.start()?.wait()?;
        let halo = plan.recv()?;
        let y: Vec<f64> = (lo..hi)
            .map(|i| {
                row(i, n)
                    .iter()
                    .map(|&(j, a)| {
                        a * if (lo..hi).contains(&j) {
                            x[j - lo]
                        } else {
                            halo[slot[&j]]
                        }
                    })
                    .sum()
            })
            .collect();
        let mut norm = [y.iter().map(|v| v * v).sum::<f64>()];
        world.allreduce(&mut norm, ReduceOp::Sum)?;
        let norm = norm[0].sqrt();
        x = y.iter().map(|v| v / norm).collect();
    }
    let elapsed = started.elapsed();
    plan.free()?;

    // The same iterations serially, at every rank, for the check.
    let mut xs: Vec<f64> = (0..n).map(|i| 1.0 + (i % 10) as f64 / 10.0).collect();
    for _ in 0..iters {
        let y: Vec<f64> = (0..n)
            .map(|i| row(i, n).iter().map(|&(j, a)| a * xs[j]).sum())
            .collect();
        let norm = y.iter().map(|v| v * v).sum::<f64>().sqrt();
        xs = y.iter().map(|v| v / norm).collect();
    }
    let err = x
        .iter()
        .zip(&xs[lo..hi])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let mut worst = [err];
    world.allreduce(&mut worst, ReduceOp::Max)?;
    if me == 0 {
        println!(
            "spmv: n = {n}, {ranks} ranks, {iters} iterations, {} plan: init {:.1} us, \
             {:.2} us per iteration; max |x - x_serial| = {:.2e}",
            variant.name(),
            init.as_secs_f64() * 1e6,
            elapsed.as_secs_f64() * 1e6 / iters as f64,
            worst[0]
        );
    }
    if worst[0] > 1e-12 {
        return Err(onesided::Error::InvalidArgument(format!(
            "spmv: result differs from the serial one by {:.3e}",
            worst[0]
        )));
    }
    Ok(())
}
