//! A guided tour of onesided with numbers measured in this run.
//!
//! 1. put + flush and get latency from rank 0 to rank 1, for every window kind and a range
//!    of sizes (every transfer is read back and compared);
//! 2. the cost of every synchronization mode;
//! 3. window creation time per kind.
//!
//! ```text
//! cargo build --release --workspace --examples
//! target/release/osrun -n 4 target/release/examples/tour
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use onesided::{alloc_mem, Assert, Comm, Group, LockType, Window};

const SIZES: [usize; 7] = [8, 64, 512, 4096, 32768, 262_144, 1_048_576];
const MAX: usize = 1_048_576;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Allocate,
    CreateAllocMem,
    CreateCma,
    DynamicAllocMem,
    DynamicCma,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Allocate,
        Kind::CreateAllocMem,
        Kind::CreateCma,
        Kind::DynamicAllocMem,
        Kind::DynamicCma,
    ];

    fn label(self) -> &'static str {
        match self {
            Kind::Allocate => "allocate",
            Kind::CreateAllocMem => "create/alloc_mem",
            Kind::CreateCma => "create/vec(CMA)",
            Kind::DynamicAllocMem => "dynamic/alloc_mem",
            Kind::DynamicCma => "dynamic/vec(CMA)",
        }
    }

    /// A window of `len` bytes per rank and the displacement of byte 0 at every rank.
    fn make(self, w: &Comm, len: usize) -> onesided::Result<(Window<u8>, Vec<usize>)> {
        let zero = vec![0; w.size()];
        Ok(match self {
            Kind::Allocate => (Window::allocate(w, len)?, zero),
            Kind::CreateAllocMem => (Window::create(w, alloc_mem::<u8>(len)?)?, zero),
            Kind::CreateCma => (Window::create(w, vec![0u8; len])?, zero),
            Kind::DynamicAllocMem | Kind::DynamicCma => {
                let win = Window::create_dynamic(w)?;
                let r = match self {
                    Kind::DynamicAllocMem => win.attach(alloc_mem::<u8>(len)?)?,
                    _ => win.attach(vec![0u8; len])?,
                };
                let addrs = w.allgather(&[r.addr as u64])?;
                (win, addrs.iter().map(|&a| a as usize).collect())
            }
        })
    }
}

fn iterations(size: usize) -> usize {
    (64 * MAX / size.max(64)).clamp(20, 20_000)
}

fn micros(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

/// Mean time of `f` over `n` calls after `n / 10` warm-up calls.
fn time(n: usize, mut f: impl FnMut() -> onesided::Result<()>) -> onesided::Result<f64> {
    for _ in 0..n / 10 {
        f()?;
    }
    let t = Instant::now();
    for i in 0..n {
        // An opaque value between calls keeps the compiler from merging consecutive calls
        // (two fences with nothing between them are one fence).
        black_box(i);
        f()?;
    }
    Ok(micros(t.elapsed(), n))
}

fn latency_tables(w: &Comm) -> onesided::Result<()> {
    let me = w.rank();
    let mut put = vec![vec![0.0; Kind::ALL.len()]; SIZES.len()];
    let mut get = put.clone();
    for (k, kind) in Kind::ALL.iter().enumerate() {
        let (win, base) = kind.make(w, MAX)?;
        if me == 0 {
            win.lock_all(Assert::NONE)?;
            let mut back = vec![0u8; MAX];
            for (s, &size) in SIZES.iter().enumerate() {
                let src: Vec<u8> = (0..size).map(|i| (i * 31 + s + k) as u8).collect();
                let n = iterations(size);
                put[s][k] = time(n, || {
                    win.put(black_box(&src), 1, base[1])?;
                    win.flush(1)
                })?;
                get[s][k] = time(n, || win.get(black_box(&mut back[..size]), 1, base[1]))?;
                assert_eq!(
                    &back[..size],
                    &src[..],
                    "{} {size} B: data read back differs",
                    kind.label()
                );
            }
            win.unlock_all()?;
        }
        w.barrier()?;
        drop(win.free()?);
    }
    if me == 0 {
        let header: String = Kind::ALL
            .iter()
            .map(|k| format!("{:>19}", k.label()))
            .collect();
        for (title, table) in [("put + flush", &put), ("get", &get)] {
            println!("\n{title} latency, rank 0 -> rank 1 (µs per operation, data verified)");
            println!("{:>9}{header}", "bytes");
            for (s, row) in table.iter().enumerate() {
                let cells: String = row.iter().map(|v| format!("{v:>19.3}")).collect();
                println!("{:>9}{cells}", SIZES[s]);
            }
        }
        let last = SIZES.len() - 1;
        let bw: String = put[last]
            .iter()
            .map(|us| format!("{:>19.2}", MAX as f64 / us / 1e3))
            .collect();
        println!("{:>9}{bw}", "GB/s 1MiB");
    }
    Ok(())
}

fn sync_table(w: &Comm) -> onesided::Result<()> {
    let (me, n) = (w.rank(), w.size());
    let win = Window::<u64>::allocate(w, 1)?;
    let mut rows: Vec<(String, f64)> = Vec::new();
    const N: usize = 2000;

    w.barrier()?;
    rows.push((
        format!("fence ({n} ranks)"),
        time(N, || win.fence(Assert::NONE))?,
    ));
    win.fence(Assert::NOSUCCEED)?;

    let ring = Group::new(
        [(me + 1) % n, (me + n - 1) % n]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>(),
    )?;
    w.barrier()?;
    rows.push((
        format!("post/start/complete/wait, ring of {n}"),
        time(N, || {
            win.post(&ring, Assert::NONE)?;
            win.start(&ring, Assert::NONE)?;
            win.complete()?;
            win.wait()
        })?,
    ));

    w.barrier()?;
    if me == 0 {
        for (label, kind) in [
            ("lock + unlock exclusive", LockType::Exclusive),
            ("lock + unlock shared", LockType::Shared),
        ] {
            rows.push((
                label.into(),
                time(N, || {
                    win.lock(kind, 1, Assert::NONE)?;
                    win.unlock(1)
                })?,
            ));
        }
        rows.push((
            "lock_all + unlock_all".into(),
            time(N, || {
                win.lock_all(Assert::NONE)?;
                win.unlock_all()
            })?,
        ));
        win.lock_all(Assert::NONE)?;
        rows.push(("flush".into(), time(100 * N, || win.flush(1))?));
        rows.push(("flush_local".into(), time(100 * N, || win.flush_local(1))?));
        rows.push(("sync".into(), time(100 * N, || win.sync())?));
        win.unlock_all()?;
    }
    w.barrier()?;
    win.free()?;

    for (label, kind) in [
        ("create: allocate 1 MiB", Kind::Allocate),
        ("create: create over alloc_mem 1 MiB", Kind::CreateAllocMem),
        ("create: create over vec 1 MiB", Kind::CreateCma),
        ("create: dynamic + attach 1 MiB", Kind::DynamicAllocMem),
    ] {
        w.barrier()?;
        let t = time(20, || {
            let (win, _) = kind.make(w, MAX)?;
            drop(win.free()?);
            Ok(())
        })?;
        rows.push((format!("{label} + free ({n} ranks)"), t));
    }

    if me == 0 {
        println!("\nsynchronization, measured at rank 0 (µs per call)");
        for (label, us) in rows {
            println!("{label:>54} {us:>10.3}");
        }
    }
    Ok(())
}

fn main() -> onesided::Result<()> {
    let universe = onesided::init()?;
    let w = universe.world();
    if w.size() < 2 {
        eprintln!("the tour needs at least 2 ranks: osrun -n 4 target/release/examples/tour");
        std::process::exit(2);
    }
    if w.rank() == 0 {
        println!("onesided tour: {} ranks on one node", w.size());
    }
    latency_tables(w)?;
    sync_table(w)?;
    Ok(())
}
