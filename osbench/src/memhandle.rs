//! `memhandle`: seed 000 Figs. 4 and 12 — put, get and accumulate latency through a window
//! made from a memory handle, next to the `allocate` and `dynamic` windows of the same run,
//! and the cost of a whole memory-handle cycle per operation.
//!
//! Records use the latency benchmarks' names with window kind `memhandle`
//! (`put-latency`, `get-latency`, `acc-latency`; sync `flush` or `lock`, as the paper
//! allows), so they sit in the same tables and plots as the other kinds. Rank 1 owns the
//! memory (from `alloc_mem`, mapped by rank 0) and sends the handle bytes; rank 0 measures.
//! The cycle (`put-latency`, metric `create-put-free`, 8 bytes): build the window from the
//! handle, put, flush, drop the window — per iteration. Beside it the cycle of today's
//! dynamic windows that it replaces (window `dynamic`, metric `attach-put-detach`): rank 1
//! attaches 8 bytes and sends their address, rank 0 puts and flushes, both meet, rank 1
//! detaches. Data is validated after every measurement.

use onesided::{Assert, Comm, LockType, MemHandle, Op, Window};

use crate::backend::{BResult, BenchError, SyncMode};
use crate::bench::{measure, CommOp, Params};
use crate::report::Record;

fn record(bench: &str, sync: &str, bytes: usize, metric: &str, us: f64) -> Record {
    Record::onesided(bench, "memhandle", sync, bytes, 2, metric, us, "us")
}

pub fn memhandle(comm: &Comm, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let me = comm.rank();
    let Some(pair) = comm.split((me < 2).then_some(0), me)? else {
        comm.barrier()?;
        return Ok(());
    };
    let result = run(&pair, p, out);
    comm.barrier()?;
    result
}

fn run(pair: &Comm, p: &Params, out: &mut Vec<Record>) -> BResult<()> {
    let origin = pair.rank() == 0;
    let max = p.sizes.iter().copied().max().unwrap_or(8).max(8);
    let bytes = Exposed::<u8>::new(pair, max)?;
    let words = Exposed::<u64>::new(pair, max / 8)?;
    for op in [CommOp::Put, CommOp::Get, CommOp::Acc] {
        for sync in [SyncMode::Flush, SyncMode::Lock] {
            for &size in &op.sizes(&p.sizes) {
                let us = match op {
                    CommOp::Acc => latency(pair, &words, op, sync, size / 8, p)?,
                    _ => latency(pair, &bytes, op, sync, size, p)?,
                };
                if origin {
                    out.push(record(op.latency_bench(), sync.name(), size, "latency", us));
                }
            }
        }
    }
    let us = cycle(pair, &words, p)?;
    if origin {
        out.push(record("put-latency", "flush", 8, "create-put-free", us));
    }
    let us = dynamic_cycle(pair, p)?;
    if origin {
        let mut r = record("put-latency", "flush", 8, "attach-put-detach", us);
        r.window = "dynamic".into();
        out.push(r);
    }
    bytes.free(pair)?;
    words.free(pair)
}

/// A dynamic window whose rank 1 registered `len` elements of `alloc_mem` memory, and the
/// handle every rank received.
struct Exposed<T: onesided::Pod> {
    win: Window<T>,
    handle: MemHandle,
}

impl<T: onesided::AccElement> Exposed<T> {
    fn new(pair: &Comm, len: usize) -> BResult<Self> {
        let win = Window::<T>::create_dynamic(pair)?;
        let mut bytes = vec![0u8; MemHandle::SIZE];
        if pair.rank() == 1 {
            let h = win.memhandle_create(onesided::alloc_mem::<T>(len.max(1))?)?;
            bytes.copy_from_slice(h.as_bytes());
        }
        pair.bcast(1, &mut bytes)?;
        let handle = MemHandle::from_bytes(&bytes)?;
        Ok(Exposed { win, handle })
    }

    fn free(self, pair: &Comm) -> BResult<()> {
        pair.barrier()?;
        if pair.rank() == 1 {
            drop(self.win.memhandle_release(&self.handle)?);
        }
        drop(self.win.free()?);
        Ok(())
    }
}

/// µs per operation of `len` elements (with its flush, or inside its own lock epoch) at
/// rank 0; the data is checked afterwards.
fn latency<T: onesided::AccElement + From<u8> + PartialEq>(
    pair: &Comm,
    e: &Exposed<T>,
    op: CommOp,
    sync: SyncMode,
    len: usize,
    p: &Params,
) -> BResult<f64> {
    let origin = pair.rank() == 0;
    let win = &e.win;
    let remote = win.window_from_memhandle(&e.handle)?;
    let payload: Vec<T> = (0..len).map(|i| T::from((i * 7 + len) as u8)).collect();
    let ones: Vec<T> = vec![T::from(1); len];
    let mut back = vec![T::from(0); len];
    if origin && op == CommOp::Acc {
        win.lock(LockType::Exclusive, 1, Assert::NONE)?;
        remote.put(&vec![T::from(0); len], 0)?;
        win.unlock(1)?;
    }
    if origin && sync == SyncMode::Flush {
        win.lock(LockType::Shared, 1, Assert::NONE)?;
    }
    let (secs, _) = measure(pair, p, |n| {
        if !origin {
            return Ok(());
        }
        for _ in 0..n {
            if sync == SyncMode::Lock {
                win.lock(LockType::Shared, 1, Assert::NONE)?;
            }
            match op {
                CommOp::Put => remote.put(&payload, 0)?,
                CommOp::Get => remote.get(&mut back, 0)?,
                _ => remote.accumulate(&ones, 0, Op::Sum)?,
            }
            if sync == SyncMode::Lock {
                win.unlock(1)?;
            } else {
                remote.flush()?;
            }
        }
        Ok(())
    })?;
    let mut ok = true;
    if origin {
        if sync == SyncMode::Lock {
            win.lock(LockType::Shared, 1, Assert::NONE)?;
        }
        let mut got = vec![T::from(0); len];
        remote.get(&mut got, 0)?;
        win.unlock(1)?;
        ok = match op {
            CommOp::Put => got == payload,
            // The timed gets read what is there now (nobody wrote it meanwhile).
            CommOp::Get => got == back,
            // Every accumulate added 1 to each element (u64: no wrap in any run).
            _ => got.windows(2).all(|w| w[0] == w[1]) && (len == 0 || got[0] != T::from(0)),
        };
    }
    if !pair.agree(ok)? {
        return Err(BenchError(format!(
            "memhandle {} {}: data validation failed",
            op.latency_bench(),
            sync.name()
        )));
    }
    Ok(secs * 1e6)
}

/// µs per whole cycle at rank 0: window from the handle, 8-byte put, flush, drop.
fn cycle(pair: &Comm, e: &Exposed<u64>, p: &Params) -> BResult<f64> {
    let origin = pair.rank() == 0;
    if origin {
        e.win.lock(LockType::Shared, 1, Assert::NONE)?;
    }
    let mut last = 0;
    let (secs, _) = measure(pair, p, |n| {
        if !origin {
            return Ok(());
        }
        for _ in 0..n {
            last += 1;
            let remote = e.win.window_from_memhandle(&e.handle)?;
            remote.put(&[last], 0)?;
            remote.flush()?;
        }
        Ok(())
    })?;
    let mut ok = true;
    if origin {
        let mut got = [0u64];
        e.win.window_from_memhandle(&e.handle)?.get(&mut got, 0)?;
        ok = got[0] == last;
        e.win.unlock(1)?;
    }
    if !pair.agree(ok)? {
        return Err(BenchError("memhandle cycle: data validation failed".into()));
    }
    Ok(secs * 1e6)
}

/// µs per whole cycle of a dynamic window at rank 0, what a memory handle spares
/// (seed 000 §4): rank 1 attaches 8 bytes of `alloc_mem` memory and sends their address
/// (a broadcast), rank 0 puts 8 bytes and flushes, both meet (a barrier: rank 0 is done
/// with the region), rank 1 detaches it. Rank 1 checks every put's value before it
/// detaches.
fn dynamic_cycle(pair: &Comm, p: &Params) -> BResult<f64> {
    let origin = pair.rank() == 0;
    let win = Window::<u64>::create_dynamic(pair)?;
    let mut memory: Option<onesided::WinBuffer<u64>> = if origin {
        None
    } else {
        Some(onesided::alloc_mem::<u64>(1)?.into())
    };
    if origin {
        win.lock(LockType::Shared, 1, Assert::NONE)?;
    }
    let (mut last, mut ok) = (0u64, true);
    let (secs, _) = measure(pair, p, |n| {
        for _ in 0..n {
            last += 1;
            let mut addr = [0u8; 8];
            let mut attached = None;
            if let Some(buffer) = memory.take() {
                let region = win.attach(buffer)?;
                addr = (region.addr as u64).to_le_bytes();
                attached = Some(region.addr);
            }
            pair.bcast(1, &mut addr)?;
            if origin {
                win.put(&[last], 1, u64::from_le_bytes(addr) as usize)?;
                win.flush(1)?;
            }
            pair.barrier()?;
            if let Some(at) = attached {
                let buffer = win.detach(at)?;
                ok &= buffer.as_slice().first() == Some(&last);
                memory = Some(buffer);
            }
        }
        Ok(())
    })?;
    if origin {
        win.unlock(1)?;
    }
    if !pair.agree(ok)? {
        return Err(BenchError(
            "dynamic attach-put-detach cycle: data validation failed".into(),
        ));
    }
    win.free()?;
    Ok(secs * 1e6)
}
