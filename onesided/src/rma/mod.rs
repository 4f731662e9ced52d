//! Communication calls (MPI-4.1 §12.3): put and get on contiguous data.
//!
//! A call resolves (target, displacement) to a transport route — checking the rank, the
//! epoch and the bounds of the target's window — and moves the bytes. Displacements are
//! scaled by the *target's* displacement unit.
//!
//! **Completion and borrows.** `put` and `get` are locally complete when they return: the
//! origin buffer may be reused (put) or read (get) at once, so they borrow it only for the
//! call. Remote completion of a put — the data being visible to other processes — comes with
//! the epoch's synchronization (`flush`, `unlock`, `complete`, `fence`). Request-based calls
//! (`rput`/`rget`, next issue) will keep the borrow until the request completes instead.

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::transport::{self, Route};
use crate::win::{Targets, WinCore, Window};

/// Byte offset of `disp` units of `disp_unit` bytes, if `len` bytes from there fit in
/// `size` bytes.
#[inline]
pub(crate) fn checked_offset(
    op: &'static str,
    target: usize,
    disp: usize,
    disp_unit: usize,
    len: usize,
    size: usize,
) -> Result<usize> {
    match disp.checked_mul(disp_unit) {
        Some(off) if off <= size && len <= size - off => Ok(off),
        _ => Err(out_of_bounds(op, target, disp, disp_unit, len, size)),
    }
}

#[cold]
#[inline(never)]
fn out_of_bounds(
    op: &'static str,
    target: usize,
    disp: usize,
    disp_unit: usize,
    len: usize,
    size: usize,
) -> Error {
    Error::OutOfBounds {
        op,
        target,
        disp,
        disp_unit,
        len,
        size,
    }
}

impl WinCore {
    /// The route to `len` bytes at `disp` in `target`'s window, after every check.
    #[inline]
    pub(crate) fn resolve(
        &self,
        op: &'static str,
        target: usize,
        disp: usize,
        len: usize,
    ) -> Result<Route> {
        self.check_rank(target)?;
        self.epoch.check_access(target, op)?;
        match &self.targets {
            Targets::Symmetric {
                base,
                stride,
                bytes,
                disp_unit,
            } => {
                let off = checked_offset(op, target, disp, *disp_unit, len, *bytes)?;
                // In bounds of the node segment: target < size and off + len <= bytes.
                Ok(Route::Direct(base.wrapping_add(target * stride + off)))
            }
            Targets::Table(table) => {
                let t = &table[target];
                let off = checked_offset(op, target, disp, t.disp_unit, len, t.bytes)?;
                Ok(t.route.offset(off))
            }
            Targets::Dynamic => self.resolve_dynamic(op, target, disp, len),
        }
    }

    /// The address of `len` bytes at `disp` in `target`'s memory when the common case
    /// applies — symmetric node-local window, target already checked in this epoch, in
    /// bounds — without constructing any error. `None` means "take the full path".
    #[inline(always)]
    fn symmetric_fast(&self, target: usize, disp: usize, len: usize) -> Option<*mut u8> {
        if let Targets::Symmetric {
            base,
            stride,
            bytes,
            disp_unit,
        } = self.targets
        {
            if target < self.size && self.epoch.access_cached(target) {
                if let Some(off) = disp.checked_mul(disp_unit) {
                    if off <= bytes && len <= bytes - off {
                        return Some(base.wrapping_add(target * stride + off));
                    }
                }
            }
        }
        None
    }

    /// Put: inlined fast path, everything else out of line.
    #[inline(always)]
    pub(crate) fn put_bytes(&self, src: &[u8], target: usize, disp: usize) -> Result<()> {
        if let Some(dst) = self.symmetric_fast(target, disp, src.len()) {
            // SAFETY: dst..dst+len lies inside the window segment (bounds checked above),
            // which outlives self; src is a distinct Rust slice.
            unsafe { transport::shm::copy_bytes(src.as_ptr(), dst, src.len()) };
            self.epoch.note_rma();
            return Ok(());
        }
        self.put_bytes_slow(src, target, disp)
    }

    #[inline(never)]
    fn put_bytes_slow(&self, src: &[u8], target: usize, disp: usize) -> Result<()> {
        self.resolve("put", target, disp, src.len())?.write(src)?;
        self.epoch.note_rma();
        Ok(())
    }

    /// Get: inlined fast path, everything else out of line.
    #[inline(always)]
    pub(crate) fn get_bytes(&self, dst: &mut [u8], target: usize, disp: usize) -> Result<()> {
        if let Some(src) = self.symmetric_fast(target, disp, dst.len()) {
            // SAFETY: as in put_bytes.
            unsafe { transport::shm::copy_bytes(src, dst.as_mut_ptr(), dst.len()) };
            self.epoch.note_rma();
            return Ok(());
        }
        self.get_bytes_slow(dst, target, disp)
    }

    #[inline(never)]
    fn get_bytes_slow(&self, dst: &mut [u8], target: usize, disp: usize) -> Result<()> {
        self.resolve("get", target, disp, dst.len())?.read(dst)?;
        self.epoch.note_rma();
        Ok(())
    }
}

impl<T: Pod> Window<T> {
    /// Writes `src` into `target`'s window at displacement `disp` (MPI_Put).
    ///
    /// `disp` is in units of the target's displacement unit (for dynamic windows: an address
    /// in the target). `src` may be reused when `put` returns; the data is visible at the
    /// target after the epoch's next completing synchronization.
    ///
    /// Errors: `target` out of range; no access epoch includes `target`; the range does not
    /// fit the target's window (or, for dynamic windows, is not attached).
    #[inline(always)]
    pub fn put(&self, src: &[T], target: usize, disp: usize) -> Result<()> {
        self.core.put_bytes(bytemuck::cast_slice(src), target, disp)
    }

    /// Reads `dst.len()` elements from `target`'s window at displacement `disp` into `dst`
    /// (MPI_Get). The data is in `dst` when `get` returns. Errors as for [`Window::put`].
    #[inline(always)]
    pub fn get(&self, dst: &mut [T], target: usize, disp: usize) -> Result<()> {
        self.core
            .get_bytes(bytemuck::cast_slice_mut(dst), target, disp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_scale_and_bound() {
        assert_eq!(checked_offset("put", 0, 3, 8, 8, 32).unwrap(), 24);
        assert!(checked_offset("put", 0, 3, 8, 9, 32).is_err());
        assert!(checked_offset("put", 0, 5, 8, 0, 32).is_err());
        assert_eq!(checked_offset("put", 0, 4, 8, 0, 32).unwrap(), 32);
        assert!(checked_offset("put", 0, usize::MAX, 2, 1, 32).is_err());
        match checked_offset("get", 7, 2, 4, 16, 20) {
            Err(Error::OutOfBounds {
                target: 7,
                disp: 2,
                disp_unit: 4,
                len: 16,
                size: 20,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }
}
