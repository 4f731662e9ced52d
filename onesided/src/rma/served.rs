//! Which path an operation on memory reached by cross-memory attach takes: a request the
//! target serves (transport::ring) or a system call of the origin's own.
//!
//! An operation goes through the target's ring when the target waits inside the library
//! right now, or when earlier requests to it are still in its ring (so that it lands after
//! them: rings execute in order). Otherwise — and for operations too large for a ring — it
//! first waits until the ring toward that target is empty (the *ring gate*), then uses
//! cross-memory attach. Both paths take the target's accumulate lock stripes, so
//! accumulates stay element-wise atomic whichever path each one takes, and every ordering
//! MPI promises (accumulates to the same location; everything with `mpi_win_order`) holds
//! across them.

use std::sync::atomic::AtomicU64;

use crate::error::Result;
use crate::transport::ring::{Fallback, Request, Rings, MAX_PAYLOAD};
use crate::transport::Route;
use crate::win::core::{Flags, Targets, WinCore};

impl WinCore {
    /// The rings, if `target` should get the next request of `bytes` payload (issued
    /// through a handle with `flags`) through its ring: when the calling thread's earlier
    /// requests to it may still be there (the new one must land after them; with
    /// `mpi_win_order` and process scope, any thread's), or when the target waits inside
    /// the library.
    #[inline]
    pub(crate) fn ring_toward(&self, target: usize, bytes: usize, flags: Flags) -> Option<&Rings> {
        let rings = self.rings.as_ref()?;
        if bytes > MAX_PAYLOAD {
            return None;
        }
        let behind = if flags.order() && !flags.thread_scope() {
            rings.outstanding(target)
        } else {
            rings.own_outstanding(target)
        };
        (behind || rings.attentive(target)).then_some(rings)
    }

    /// Runs `f` with what this process needs to execute requests to `target` itself.
    pub(crate) fn with_fallback<R>(
        &self,
        target: usize,
        f: impl FnOnce(&Fallback<'_>) -> R,
    ) -> Option<R> {
        let pid = match &self.targets {
            Targets::Table(t) => match t.get(target)?.route {
                Route::Cma { pid, .. } => pid,
                Route::Direct(_) => return None,
                Route::Net(_) => return None,
            },
            _ => return None,
        };
        let stripe = |i: usize| -> &AtomicU64 {
            self.ctrl
                .stripe(target, i % crate::win::control::ACC_STRIPES)
        };
        let aborted = || self.comm.aborted();
        Some(f(&Fallback {
            pid,
            stripe: &stripe,
            stripe_count: crate::win::control::ACC_STRIPES,
            aborted: &aborted,
        }))
    }

    /// Posts a request without result (put, accumulate) to `target`'s ring.
    pub(crate) fn ring_post(
        &self,
        rings: &Rings,
        target: usize,
        req: &Request,
        data: &[u8],
        flags: Flags,
    ) -> Result<()> {
        // This thread's staged puts were issued first.
        self.drain_before_op(flags)?;
        self.with_fallback(target, |fb| rings.post(target, req, data, fb))
            .unwrap_or_else(|| Err(not_ringed()))?;
        // The inlined flush goes straight to its fence: make it take the path that waits
        // for rings.
        self.epoch.forget_flush_cache();
        self.epoch.note_rma();
        Ok(())
    }

    /// Sends a request with result (get, fetching accumulate, compare-and-swap) through
    /// `target`'s ring and waits for it.
    pub(crate) fn ring_call(
        &self,
        rings: &Rings,
        target: usize,
        req: &Request,
        data: &[u8],
        out: &mut [u8],
        flags: Flags,
    ) -> Result<()> {
        self.drain_before_op(flags)?;
        self.with_fallback(target, |fb| rings.call(target, req, data, out, fb))
            .unwrap_or_else(|| Err(not_ringed()))?;
        self.epoch.note_rma();
        Ok(())
    }
}

#[cold]
fn not_ringed() -> crate::error::Error {
    crate::error::Error::InvalidArgument("target has no request ring".into())
}
