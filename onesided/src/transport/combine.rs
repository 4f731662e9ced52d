//! Write combining for small puts reached by cross-memory attach.
//!
//! One `process_vm_writev` costs ~0.4 µs here whatever it moves, while one call carrying
//! 1000 eight-byte pieces costs ~0.12 µs per piece. Small puts to memory that is not in
//! shared memory are therefore copied into a staging buffer (which makes them locally
//! complete, as MPI requires when `put` returns) and leave in vectored calls at the next
//! point that must complete them remotely — flush, unlock, fence, complete — or when the
//! buffer fills. Pieces to one process go out in issue order, so a later put to the same
//! bytes still wins.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::error::Result;
use crate::transport::cma;

/// Largest put that is staged; larger ones cost far more than a system call anyway.
pub(crate) const STAGE_MAX_PUT: usize = 256;
/// Pieces per drain: IOV_MAX, the most one vectored call takes.
const STAGE_MAX_PIECES: usize = 1024;
/// Staged bytes that trigger a drain.
const STAGE_MAX_BYTES: usize = 64 << 10;

/// Puts waiting to be written (one window).
#[derive(Debug, Default)]
pub(crate) struct StagedPuts {
    /// True when `puts` is not empty (checked at every completion point without a borrow).
    pending: AtomicBool,
    inner: Mutex<Staged>,
}

#[derive(Debug, Default)]
struct Staged {
    data: Vec<u8>,
    /// (target pid, remote address, offset in `data`, length), in issue order.
    puts: Vec<(i32, usize, usize, usize)>,
}

impl StagedPuts {
    /// Stages `src` for `addr` in process `pid`; drains when the stage is full.
    pub(crate) fn stage(&self, pid: i32, addr: usize, src: &[u8]) -> Result<()> {
        let full = {
            let mut s = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let offset = s.data.len();
            s.data.extend_from_slice(src);
            s.puts.push((pid, addr, offset, src.len()));
            // Relaxed: a hint for the completion points of the thread that staged (set
            // under the mutex, so a concurrent drain cannot clear it after our put).
            self.pending.store(true, Ordering::Relaxed);
            s.puts.len() >= STAGE_MAX_PIECES || s.data.len() >= STAGE_MAX_BYTES
        };
        if full {
            self.drain()
        } else {
            Ok(())
        }
    }

    /// Writes every staged put to its target. Every remote-completion point calls it
    /// before it signals completion.
    #[inline]
    pub(crate) fn drain(&self) -> Result<()> {
        // Relaxed: see `stage`.
        if !self.pending.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.drain_slow()
    }

    #[inline(never)]
    fn drain_slow(&self) -> Result<()> {
        let mut s = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // Cleared under the mutex, so a put staged by another thread is either drained here
        // or sets the flag again after we release the lock.
        self.pending.store(false, Ordering::Relaxed);
        let Staged { data, puts } = &mut *s;
        if let [(pid, addr, offset, len)] = puts[..] {
            // One put (put + flush in a loop): the plain call, no iovec arrays.
            let result = cma::write(pid, addr, &data[offset..offset + len]);
            data.clear();
            puts.clear();
            return result;
        }
        let mut result = Ok(());
        let mut pieces: Vec<(usize, usize, usize)> = Vec::with_capacity(puts.len());
        let mut i = 0;
        while i < puts.len() {
            let pid = puts[i].0;
            pieces.clear();
            while i < puts.len() && puts[i].0 == pid {
                let (_, addr, offset, len) = puts[i];
                pieces.push((offset, addr, len));
                i += 1;
            }
            // Remote offsets are absolute addresses (base 0). After an error the remaining
            // puts are dropped: the error reports that the epoch's data did not arrive.
            if result.is_ok() {
                result = cma::write_pieces(pid, 0, data, &pieces);
            }
        }
        data.clear();
        puts.clear();
        result
    }
}
