//! Communication calls of the untyped window ([`RawWindow`]): bytes, and element types
//! and ops chosen at run time ([`ElemType`], [`Op`]) — what a C binding's `MPI_Put`,
//! `MPI_Accumulate` & co. call once they have flattened the datatype.
//!
//! These calls hold the protocols' entry points: an element type chosen at run time picks
//! the generic (`*_elems`) path for that element once per call, and the typed
//! [`Window<T>`](crate::Window) calls the same generic paths with its `T` (`win::typed`).
//! Origin buffers that are not aligned for the element type (a C program may hand any
//! address) are copied to aligned ones first.

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::{ElemType, Op};
use crate::request::Request;
use crate::win::RawWindow;

/// Runs `$body` with `$E` bound to the Rust type of the element type `$ty`.
macro_rules! with_elem {
    ($($t:tt)*) => {
        crate::with_elem_type!($($t)*)
    };
}

/// `bytes` as elements of `E`: borrowed where aligned, else copied. Errors when the length
/// is not a whole number of elements.
fn elems<'b, E: Pod>(call: &'static str, bytes: &'b [u8]) -> Result<std::borrow::Cow<'b, [E]>> {
    whole::<E>(call, bytes.len())?;
    Ok(match bytemuck::try_cast_slice(bytes) {
        Ok(e) => std::borrow::Cow::Borrowed(e),
        Err(_) => std::borrow::Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    })
}

/// Runs `f` on `out` as elements of `E` (through an aligned copy where it is not aligned).
fn with_elems_mut<E: Pod, R>(
    call: &'static str,
    out: &mut [u8],
    f: impl FnOnce(&mut [E]) -> Result<R>,
) -> Result<R> {
    whole::<E>(call, out.len())?;
    match bytemuck::try_cast_slice_mut(out) {
        Ok(e) => f(e),
        Err(_) => {
            let mut copy: Vec<E> = bytemuck::pod_collect_to_vec(out);
            let r = f(&mut copy)?;
            out.copy_from_slice(bytemuck::cast_slice(&copy));
            Ok(r)
        }
    }
}

fn whole<E>(call: &'static str, len: usize) -> Result<()> {
    let size = std::mem::size_of::<E>();
    if len % size == 0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{call}: {len} bytes are not a whole number of {size}-byte elements"
        )))
    }
}

/// One element of `E` from `bytes` (exactly its size).
fn one<E: Pod>(call: &'static str, bytes: &[u8]) -> Result<E> {
    if bytes.len() != std::mem::size_of::<E>() {
        return Err(Error::InvalidArgument(format!(
            "{call}: {} bytes given for one {}-byte element",
            bytes.len(),
            std::mem::size_of::<E>()
        )));
    }
    Ok(bytemuck::pod_read_unaligned(bytes))
}

impl RawWindow {
    /// Writes `src` to `target`'s window at `disp` (in the target's displacement unit)
    /// (MPI_Put with a contiguous datatype). Locally complete on return.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u8>::builder(&world).disp_unit(1).allocate(64)?;
    /// let raw: &onesided::RawWindow = &win;
    /// raw.fence(Assert::NONE)?;
    /// raw.put(b"hello", 1, 0)?;
    /// raw.fence(Assert::NONE)?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    #[inline]
    pub fn put(&self, src: &[u8], target: usize, disp: usize) -> Result<()> {
        self.core.put_bytes(src, target, disp, &self.flags)
    }

    /// Reads `dst.len()` bytes of `target`'s window at `disp` (MPI_Get with a contiguous
    /// datatype); they are in `dst` on return.
    #[inline]
    pub fn get(&self, dst: &mut [u8], target: usize, disp: usize) -> Result<()> {
        self.core.get_bytes(dst, target, disp, &self.flags)
    }

    /// [`RawWindow::put`] with byte layouts for origin and target (derived datatypes).
    pub fn put_layout(
        &self,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        target: usize,
        disp: usize,
        target_layout: &Layout<u8>,
    ) -> Result<()> {
        self.put_layout_elems(origin, origin_layout, target, disp, target_layout)
    }

    /// [`RawWindow::get`] with byte layouts for origin and target.
    pub fn get_layout(
        &self,
        origin: &mut [u8],
        origin_layout: &Layout<u8>,
        target: usize,
        disp: usize,
        target_layout: &Layout<u8>,
    ) -> Result<()> {
        self.get_layout_elems(origin, origin_layout, target, disp, target_layout)
    }

    /// Combines `origin`, elements of type `ty`, into `target`'s window at `disp` with `op`
    /// (MPI_Accumulate). Errors: `op` not defined for `ty`; `origin` not a whole number of
    /// elements; those of [`RawWindow::put`].
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, ElemType, Op, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u64>::allocate(&world, 4)?;
    /// let raw: &onesided::RawWindow = &win;
    /// raw.lock_all(Assert::NONE)?;
    /// raw.accumulate(&7u64.to_ne_bytes(), ElemType::U64, 0, 2, Op::Sum)?;
    /// raw.unlock_all()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn accumulate(
        &self,
        origin: &[u8],
        ty: ElemType,
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<()> {
        with_elem!(ty, E => {
            let origin = elems::<E>("accumulate", origin)?;
            self.accumulate_elems::<E>(&origin, target, disp, op)
        })
    }

    /// [`RawWindow::accumulate`] returning the previous target values in `result` (as
    /// many bytes as `origin`) (MPI_Get_accumulate); `op` may be [`Op::NoOp`].
    pub fn get_accumulate(
        &self,
        origin: &[u8],
        result: &mut [u8],
        ty: ElemType,
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<()> {
        with_elem!(ty, E => {
            let origin = elems::<E>("get_accumulate", origin)?;
            with_elems_mut::<E, ()>("get_accumulate", result, |result| {
                self.get_accumulate_elems::<E>(&origin, result, target, disp, op)
            })
        })
    }

    /// One element of `ty`: applies `op` with `value` at `disp` of `target` and writes the
    /// previous value to `result` (MPI_Fetch_and_op). `value` and `result` are one element
    /// each.
    pub fn fetch_and_op(
        &self,
        value: &[u8],
        result: &mut [u8],
        ty: ElemType,
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<()> {
        with_elem!(ty, E => {
            let v = one::<E>("fetch_and_op", value)?;
            whole::<E>("fetch_and_op", result.len())?;
            let old = self.fetch_and_op_elems::<E>(v, target, disp, op)?;
            result.copy_from_slice(bytemuck::bytes_of(&old));
            Ok(())
        })
    }

    /// One element of `ty` (an integer type): replaces the element at `disp` of `target`
    /// with `value` if it equals `compare`, and writes the previous value to `result`
    /// (MPI_Compare_and_swap).
    pub fn compare_and_swap(
        &self,
        value: &[u8],
        compare: &[u8],
        result: &mut [u8],
        ty: ElemType,
        target: usize,
        disp: usize,
    ) -> Result<()> {
        with_elem!(ty, E => {
            let v = one::<E>("compare_and_swap", value)?;
            let c = one::<E>("compare_and_swap", compare)?;
            whole::<E>("compare_and_swap", result.len())?;
            let old = self.compare_and_swap_elems::<E>(v, c, target, disp)?;
            result.copy_from_slice(bytemuck::bytes_of(&old));
            Ok(())
        })
    }

    /// [`RawWindow::accumulate`] with byte layouts (which select whole elements of `ty`).
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate_layout(
        &self,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        ty: ElemType,
        target: usize,
        disp: usize,
        target_layout: &Layout<u8>,
        op: Op,
    ) -> Result<()> {
        with_elem!(ty, E => {
            let origin = elems::<E>("accumulate", origin)?;
            self.accumulate_layout_elems::<E>(
                &origin,
                &origin_layout.retyped::<E>(),
                target,
                disp,
                &target_layout.retyped::<E>(),
                op,
            )
        })
    }

    /// [`RawWindow::get_accumulate`] with byte layouts for origin, result and target (whole
    /// elements of `ty`, the same number in each).
    #[allow(clippy::too_many_arguments)]
    pub fn get_accumulate_layout(
        &self,
        origin: &[u8],
        origin_layout: &Layout<u8>,
        result: &mut [u8],
        result_layout: &Layout<u8>,
        ty: ElemType,
        target: usize,
        disp: usize,
        target_layout: &Layout<u8>,
        op: Op,
    ) -> Result<()> {
        with_elem!(ty, E => {
            let origin = elems::<E>("get_accumulate", origin)?;
            with_elems_mut::<E, ()>("get_accumulate", result, |result| {
                self.get_accumulate_layout_elems::<E>(
                    &origin,
                    &origin_layout.retyped::<E>(),
                    result,
                    &result_layout.retyped::<E>(),
                    target,
                    disp,
                    &target_layout.retyped::<E>(),
                    op,
                )
            })
        })
    }

    /// `request`, made through this window, as one that keeps the window alive itself and
    /// borrows nothing: what a C binding hands out as `MPI_Request`, which lives until the
    /// program completes or frees it. Errors: the request was made through another window,
    /// or it is a deferred read that still fills a borrowed buffer (use
    /// [`RawWindow::rget`], whose destination is the caller's to keep valid).
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Request, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u64>::allocate(&world, 4)?;
    /// let pending: Request<'static> = win.own_request(win.ifence(Assert::NONE)?)?;
    /// pending.wait()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn own_request(&self, request: Request<'_>) -> Result<Request<'static>> {
        if request.fills() {
            return Err(Error::InvalidArgument(
                "own_request: a deferred read still fills a borrowed buffer".into(),
            ));
        }
        if request
            .refers_to()
            .is_some_and(|c| !std::ptr::eq(c, &*self.core))
        {
            return Err(Error::InvalidArgument(
                "own_request: the request belongs to another window".into(),
            ));
        }
        // SAFETY: the request refers to this window's core (checked) and borrows no buffer.
        Ok(unsafe { request.into_static(self.core.clone_handle()) })
    }

    /// Request-based [`RawWindow::put`] (MPI_Rput); the data was taken when it returns.
    pub fn rput(&self, src: &[u8], target: usize, disp: usize) -> Result<Request<'static>> {
        let r = self.rput_elems::<u8>(src, target, disp)?;
        self.own_request(r)
    }

    /// Remote-completing put (`MPI_Rrput`, seed 000): complete once the bytes are in the
    /// target's memory.
    pub fn rrput(&self, src: &[u8], target: usize, disp: usize) -> Result<Request<'static>> {
        let r = self.rrput_elems::<u8>(src, target, disp)?;
        self.own_request(r)
    }

    /// Request-based [`RawWindow::accumulate`] (MPI_Raccumulate).
    pub fn raccumulate(
        &self,
        origin: &[u8],
        ty: ElemType,
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'static>> {
        with_elem!(ty, E => {
            let origin = elems::<E>("raccumulate", origin)?;
            let r = self.raccumulate_elems::<E>(&origin, target, disp, op)?;
            self.own_request(r)
        })
    }

    /// Remote-completing accumulate (`MPI_Rraccumulate`, seed 000).
    pub fn rraccumulate(
        &self,
        origin: &[u8],
        ty: ElemType,
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'static>> {
        with_elem!(ty, E => {
            let origin = elems::<E>("rraccumulate", origin)?;
            let r = self.rraccumulate_elems::<E>(&origin, target, disp, op)?;
            self.own_request(r)
        })
    }

    /// Accumulate of elements of `ty` counted by notification counter `idx` of `target`
    /// ([`Window::accumulate_notify`](crate::Window::accumulate_notify), MPI_Accumulate_notify).
    pub fn accumulate_notify(
        &self,
        origin: &[u8],
        ty: ElemType,
        target: usize,
        disp: usize,
        op: Op,
        idx: usize,
    ) -> Result<()> {
        with_elem!(ty, E => {
            let origin = elems::<E>("accumulate_notify", origin)?;
            self.accumulate_notify_elems::<E>(&origin, target, disp, op, idx)
        })
    }

    /// [`RawWindow::wait_notify`] as a request that owns what it needs (for bindings).
    pub fn wait_notify_owned(&self, idx: usize, value: u64) -> Result<Request<'static>> {
        let r = self.wait_notify(idx, value)?;
        self.own_request(r)
    }

    /// Request-based get (MPI_Rget) into `len` bytes at `dst`, filled once the request is
    /// seen complete.
    ///
    /// # Safety
    /// `dst` is valid for writes of `len` bytes, and nothing else reads or writes them,
    /// until the request completes or is dropped (dropped early, it leaves them as they
    /// were).
    pub unsafe fn rget(
        &self,
        dst: *mut u8,
        len: usize,
        target: usize,
        disp: usize,
    ) -> Result<Request<'static>> {
        // SAFETY: the caller's promise, for as long as the request may write.
        let dst: &'static mut [u8] = unsafe { raw_slice("rget", dst, len)? };
        let r = self.rget_elems::<u8>(dst, target, disp)?;
        // SAFETY: the request refers to this window's core; `dst` is valid as promised.
        Ok(unsafe { r.into_static(self.core.clone_handle()) })
    }

    /// Request-based get_accumulate (MPI_Rget_accumulate): the previous target values, as
    /// many bytes as `origin`, land at `result` (aligned for `ty`) once the request is seen
    /// complete.
    ///
    /// # Safety
    /// As for [`RawWindow::rget`], for `origin.len()` bytes at `result`.
    pub unsafe fn rget_accumulate(
        &self,
        origin: &[u8],
        result: *mut u8,
        ty: ElemType,
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'static>> {
        // SAFETY: the caller's promise.
        let out: &'static mut [u8] = unsafe { raw_slice("rget_accumulate", result, origin.len())? };
        with_elem!(ty, E => {
            let origin = elems::<E>("rget_accumulate", origin)?;
            whole::<E>("rget_accumulate", out.len())?;
            let out: &'static mut [E] = bytemuck::try_cast_slice_mut(out).map_err(|_| {
                Error::InvalidArgument(format!(
                    "rget_accumulate: the result buffer is not aligned for {}",
                    ty.name()
                ))
            })?;
            let r = self.rget_accumulate_elems::<E>(&origin, out, target, disp, op)?;
            // SAFETY: as in rget.
            Ok(unsafe { r.into_static(self.core.clone_handle()) })
        })
    }
}

/// `len` bytes at `ptr` as a slice (empty for zero bytes); a null buffer of some bytes is
/// an error.
///
/// # Safety
/// `ptr` is valid for reads and writes of `len` bytes for `'a`, and unaliased.
unsafe fn raw_slice<'a>(call: &'static str, ptr: *mut u8, len: usize) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Error::InvalidArgument(format!(
            "{call}: a null buffer of {len} bytes"
        )));
    }
    // SAFETY: the caller's promise; not null.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_bytes_are_copied_to_elements() {
        let mut buf = [0u8; 17];
        buf[1..9].copy_from_slice(&5u64.to_ne_bytes());
        buf[9..17].copy_from_slice(&6u64.to_ne_bytes());
        let e = elems::<u64>("t", &buf[1..]).unwrap();
        assert_eq!(&e[..], &[5, 6]);
        assert!(elems::<u64>("t", &buf[1..8]).is_err());
        with_elems_mut::<u64, ()>("t", &mut buf[1..], |e| {
            e[1] = 9;
            Ok(())
        })
        .unwrap();
        assert_eq!(&buf[9..17], &9u64.to_ne_bytes());
        assert_eq!(one::<u32>("t", &7u32.to_ne_bytes()).unwrap(), 7);
        assert!(one::<u32>("t", &[1, 2]).is_err());
    }
}
