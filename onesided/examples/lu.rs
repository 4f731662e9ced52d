//! LU decomposition with one-sided row broadcasts ([Zounmevo14] §VIII, Fig. 13), blocking
//! and nonblocking epochs side by side.
//!
//! An n × n diagonally dominant matrix (no pivoting needed) is distributed by rows, cyclically:
//! row i lives at rank i mod P. At step k the owner of row k — final by then — broadcasts its
//! entries k..n one-sidedly: a PSCW access epoch toward every other rank, one put each into a
//! two-slot receive window (slot k mod 2, so the broadcast of step k+1 never overwrites a
//! row still in use). Every rank then eliminates column k from its rows below k.
//!
//! The owner also has rows to update at step k, and does that work inside its epoch,
//! after the puts — the overlap any programmer writes. With blocking `complete` that work
//! delays every other rank: they wait for the epoch to close ("Late Complete"). With
//! `icomplete` the epoch closes right after the puts and the work overlaps the other ranks'
//! updates; the owner waits for its requests at the end.
//!
//! Both variants factor the same matrix in the same run, three times each, alternating (the
//! median is reported); every result is checked against a serial factorization (relative
//! difference < 1e-10) and, up to n = 512, L·U against the matrix.
//!
//! ```text
//! cargo build --release --examples
//! target/release/osrun -n 2 target/release/examples/lu [N (768)]
//! ```

use std::time::Instant;

use onesided::{Assert, Comm, Group, Request, Window};

/// The test matrix: uniform entries in [0, 1) from a fixed seed, `n` added to the diagonal.
fn entry(n: usize, i: usize, j: usize) -> f64 {
    let mut x = ((i * n + j) as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    let u = (x >> 11) as f64 / (1u64 << 53) as f64;
    if i == j {
        u + n as f64
    } else {
        u
    }
}

/// Eliminates column `k` from `row` (entries k..n) with the pivot row's entries k..n:
/// stores the multiplier in place of the eliminated entry (L below the diagonal).
#[inline]
fn eliminate(row: &mut [f64], pivot: &[f64], k: usize) {
    let l = row[k] / pivot[0];
    row[k] = l;
    for (a, &p) in row[k + 1..].iter_mut().zip(&pivot[1..]) {
        *a -= l * p;
    }
}

/// In-place serial LU of the full matrix (the reference).
fn serial_lu(n: usize) -> Vec<f64> {
    let mut a: Vec<f64> = (0..n * n).map(|x| entry(n, x / n, x % n)).collect();
    for k in 0..n {
        let pivot = a[k * n + k..(k + 1) * n].to_vec();
        for i in k + 1..n {
            eliminate(&mut a[i * n..(i + 1) * n], &pivot, k);
        }
    }
    a
}

/// Blocking or nonblocking closes of the broadcast epochs.
#[derive(Clone, Copy, PartialEq)]
enum Style {
    Blocking,
    Nonblocking,
}

/// The rows of this rank (global row i = me + r * p at local r).
struct Rows {
    n: usize,
    me: usize,
    p: usize,
    data: Vec<f64>,
}

impl Rows {
    fn new(n: usize, me: usize, p: usize) -> Rows {
        let data = (me..n)
            .step_by(p)
            .flat_map(|i| (0..n).map(move |j| entry(n, i, j)))
            .collect();
        Rows { n, me, p, data }
    }

    fn row(&self, i: usize) -> &[f64] {
        let r = (i - self.me) / self.p;
        &self.data[r * self.n..(r + 1) * self.n]
    }

    /// Eliminates column k from every local row below k.
    fn update(&mut self, k: usize, pivot: &[f64]) {
        let n = self.n;
        let first = if k < self.me {
            0
        } else {
            (k + 1 - self.me).div_ceil(self.p)
        };
        for row in self.data.chunks_exact_mut(n).skip(first) {
            eliminate(row, pivot, k);
        }
    }
}

/// Factors the matrix; returns this rank's rows and the time.
fn factor(comm: &Comm, n: usize, style: Style) -> onesided::Result<(Rows, f64)> {
    let (me, p) = (comm.rank(), comm.size());
    let mut rows = Rows::new(n, me, p);
    // Two receive slots of n entries.
    let win = Window::<f64>::allocate(comm, 2 * n)?;
    let others = Group::new((0..p).filter(|&r| r != me))?;
    let mut closing: Vec<Request<'_>> = Vec::new();
    let mut pivot = vec![0.0; n];
    comm.barrier()?;
    let t0 = Instant::now();
    for k in 0..n {
        let owner = k % p;
        let slot = (k % 2) * n;
        if me == owner {
            pivot[k..].copy_from_slice(&rows.row(k)[k..]);
            if p > 1 {
                match style {
                    Style::Blocking => win.start(&others, Assert::NONE)?,
                    Style::Nonblocking => win.istart(&others, Assert::NONE)?.wait()?,
                }
                for &t in others.ranks() {
                    win.put(&pivot[k..], t, slot + k)?;
                }
            }
            match style {
                Style::Blocking => {
                    // The owner's own work inside the epoch: every other rank waits for it.
                    rows.update(k, &pivot[k..]);
                    if p > 1 {
                        win.complete()?;
                    }
                }
                Style::Nonblocking => {
                    if p > 1 {
                        closing.push(win.icomplete()?);
                    }
                    rows.update(k, &pivot[k..]);
                }
            }
        } else {
            win.post(&Group::single(owner), Assert::NONE)?;
            match style {
                Style::Blocking => win.wait()?,
                Style::Nonblocking => win.iwait()?.wait()?,
            }
            win.local_read(slot + k, &mut pivot[k..])?;
            rows.update(k, &pivot[k..]);
        }
    }
    onesided::wait_all(closing)?;
    let secs = t0.elapsed().as_secs_f64();
    comm.barrier()?;
    win.free()?;
    Ok((rows, secs))
}

/// The whole factored matrix at every rank (rows gathered by rank, then unshuffled).
fn gather(comm: &Comm, rows: &Rows) -> onesided::Result<Vec<f64>> {
    let (n, p) = (rows.n, comm.size());
    let mut all = vec![0.0; n * n];
    // Ranks hold ceil or floor of n/p rows: pad to the same length for allgather.
    let per = n.div_ceil(p) * n;
    let mut mine = rows.data.clone();
    mine.resize(per, 0.0);
    let gathered = comm.allgather(&mine)?;
    for i in 0..n {
        let (r, local) = (i % p, i / p);
        let src = &gathered[r * per + local * n..r * per + (local + 1) * n];
        all[i * n..(i + 1) * n].copy_from_slice(src);
    }
    Ok(all)
}

/// Factorizations of each variant.
const REPS: usize = 3;

/// Checks a distributed result against the serial factorization (and, up to n = 512, L·U
/// against A).
fn check(n: usize, all: &[f64], reference: &[f64]) {
    let scale = reference.iter().fold(0f64, |m, v| m.max(v.abs()));
    let diff = all
        .iter()
        .zip(reference)
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()))
        / scale;
    assert!(diff < 1e-10, "differs from the serial LU by {diff:e}");
    if n <= 512 {
        // O(n³): checked for the smaller sizes.
        let res = residual(n, all);
        assert!(res < 1e-12, "L·U differs from A by {res:e}");
    }
}

/// max |L·U − A| / max |A| for the packed factors `lu`.
fn residual(n: usize, lu: &[f64]) -> f64 {
    let (mut worst, mut scale) = (0f64, 0f64);
    for i in 0..n {
        for j in 0..n {
            // (L·U)_ij = sum_{m <= min(i, j)} L_im U_mj, with L_ii = 1.
            let mut s = 0.0;
            for m in 0..=i.min(j) {
                let l = if m == i { 1.0 } else { lu[i * n + m] };
                s += l * lu[m * n + j];
            }
            let a = entry(n, i, j);
            worst = worst.max((s - a).abs());
            scale = scale.max(a.abs());
        }
    }
    worst / scale
}

fn main() -> onesided::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("N must be a positive integer"))
        .unwrap_or(768);
    assert!(n >= 2, "N must be at least 2");
    let universe = onesided::init()?;
    let world = universe.world();
    let (me, p) = (world.rank(), world.size());
    let reference = (me == 0).then(|| serial_lu(n));
    // Each variant factors the matrix REPS times, alternating, so that both see the same
    // machine; the median of the slowest rank's times is reported.
    let styles = [Style::Blocking, Style::Nonblocking];
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..REPS {
        for (s, &style) in styles.iter().enumerate() {
            let (rows, secs) = factor(world, n, style)?;
            let all = gather(world, &rows)?;
            let slowest = world.allgather(&[secs])?.into_iter().fold(0f64, f64::max);
            times[s].push(slowest);
            if let Some(reference) = &reference {
                check(n, &all, reference);
            }
        }
    }
    if me == 0 {
        let median = |t: &mut Vec<f64>| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        };
        let (b, nb) = (median(&mut times[0]), median(&mut times[1]));
        println!(
            "lu: n={n} ranks={p} blocking    {:8.2} ms (median of {REPS})",
            b * 1e3
        );
        println!(
            "lu: n={n} ranks={p} nonblocking {:8.2} ms (median of {REPS})",
            nb * 1e3
        );
        println!(
            "lu: nonblocking/blocking = {:.2}; every factorization matched the serial LU",
            nb / b.max(f64::MIN_POSITIVE)
        );
    }
    Ok(())
}
