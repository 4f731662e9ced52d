//! `progress`: seed 000 Fig. 5 (after \[30\] there) — does an origin complete RMA while its
//! target computes outside the library?
//!
//! The origin (rank 0) does `n` one-byte put+flush operations in one exclusive-lock epoch;
//! the target (rank 1) either waits inside the library at once (`delay_us` = 0, the
//! attentive target) or is busy outside it for `--busy-ms` first (`delay_us` = that time)
//! and only then enters the library's barrier. `n` is chosen so that an origin that can
//! only finish once the target enters the library shows an average latency above
//! busy / n = 10 µs. Records: `bench` = `progress`, `metric` = `latency` (mean µs of one
//! put+flush at the origin), `sync` = `flush`, `bytes` = 1, `delay_us`.
//! After each measurement the target checks that the last byte arrived. On `create`
//! windows onesided adds `metric` = `cma-latency`: the attentive loop on a window whose
//! operations never go through the target (`onesided_target_service=false`), the plain
//! cross-memory-attach put+flush a busy target's latency is held against.

use std::time::{Duration, Instant};

use crate::backend::{BResult, Backend, BenchError, BenchWin};
use crate::bench::Params;
use crate::report::Record;

/// The stall threshold of the paper: busy time / operations (3 s / 100 000 there ≈ 30 µs;
/// 1 s / 100 000 here).
const PER_OP: Duration = Duration::from_micros(10);

pub fn progress<B: Backend>(b: &B, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let Some(pair) = b.prefix(2)? else {
        return Ok(());
    };
    let n = p
        .iters
        .unwrap_or_else(|| (p.busy.as_nanos() / PER_OP.as_nanos()).max(1) as u64);
    for &kind in &p.windows {
        if let Some(why) = pair.known_defect("progress", kind) {
            if pair.comm().rank() == 0 {
                eprintln!("osbench: progress {}: skipped: {why}", kind.name());
            }
            continue;
        }
        let record = |out: &mut Vec<Record>, metric: &str, us: f64, busy: Duration| {
            if pair.comm().rank() == 0 {
                let mut r =
                    Record::new("progress", &pair, kind.name(), "flush", 1, metric, us, "us");
                r.delay_us = Some(busy.as_secs_f64() * 1e6);
                out.push(r);
            }
        };
        let win = pair.window::<u8>(kind, 8)?;
        for busy in [Duration::ZERO, p.busy] {
            let us = measure(&pair, &win, n, busy)?;
            record(out, "latency", us, busy);
        }
        win.free()?;
        // The reference of [Zounmevo14]-style progress on memory reached by cross-memory
        // attach: the same loop with every operation the origin's own system call.
        if kind == crate::backend::WinKind::Create {
            if let Some(plain) = pair.plain_cma_window::<u8>(8)? {
                let us = measure(&pair, &plain, n, Duration::ZERO)?;
                record(out, "cma-latency", us, Duration::ZERO);
                plain.free()?;
            }
        }
    }
    Ok(())
}

/// One run: returns the origin's mean µs per put+flush (0 at the target).
fn measure<B: Backend>(b: &B, win: &B::Win<u8>, n: u64, busy: Duration) -> BResult<f64> {
    b.comm().barrier()?;
    let mut us = 0.0;
    if b.comm().rank() == 0 {
        win.lock(true, 1)?;
        let start = Instant::now();
        for i in 0..n {
            // Named: MPI may read the origin buffer as late as the flush.
            let byte = [i as u8];
            win.put(&byte, 1, 0)?;
            win.flush(1)?;
        }
        us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
        win.unlock(1)?;
        b.library_barrier()?;
    } else {
        crate::bench::sleep_outside_library(busy);
        b.library_barrier()?;
        let mut got = [0u8];
        win.read_local(0, &mut got)?;
        if got[0] != (n - 1) as u8 {
            return Err(BenchError(format!(
                "progress: the target holds {}, the last put was {}",
                got[0],
                (n - 1) as u8
            )));
        }
    }
    b.comm().barrier()?;
    Ok(us)
}
