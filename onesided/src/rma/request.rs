//! Request-based RMA: `rput`, `rget`, `raccumulate`, `rget_accumulate` (MPI-4.1 §12.3.6).
//!
//! A [`Request`] (the one completion type, `crate::request`) holds the borrows of the buffers its operation uses — and of the window —
//! until it is waited for (or tested complete, or awaited): the origin buffer of `rput`
//! cannot be changed, and the buffer `rget` fills cannot be read, before completion. The
//! request completes *locally*, like MPI's; remote completion comes with `flush` or
//! `unlock`. MPI allows request-based operations only in passive-target epochs, and so
//! does onesided.
//!
//! Node-local transports move the data before the call returns, so the requests they hand
//! out are already complete; with a transport that completes later the same code keeps its
//! meaning and its borrow rules.
//!
//! ```compile_fail
//! # use onesided::{Assert, Window};
//! # let world = onesided::init()?.world().clone();
//! # let win = Window::<u64>::allocate(&world, 4)?;
//! # win.lock_all(Assert::NONE)?;
//! let mut buf = [0u64; 4];
//! let req = win.rget(&mut buf, 1, 0)?;
//! println!("{}", buf[0]); // error: `buf` is still borrowed by the request
//! req.wait()?;
//! # Ok::<(), onesided::Error>(())
//! ```

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::request::Request;
use crate::rma::atomic::{AccElement, Op};
use crate::win::Window;

impl<T: Pod> Window<T> {
    fn check_passive(&self, op: &'static str, target: usize) -> Result<()> {
        self.core.check_rank(target)?;
        if self.core.epoch.in_passive_epoch(target) {
            Ok(())
        } else {
            Err(Error::RequestOutsidePassiveEpoch { op, target })
        }
    }

    /// Request-based [`Window::put`] (MPI_Rput): `origin` stays borrowed until the request
    /// completes. Only inside a passive-target epoch that includes `target`.
    pub fn rput<'a>(&'a self, origin: &'a [T], target: usize, disp: usize) -> Result<Request<'a>> {
        self.check_passive("rput", target)?;
        self.put(origin, target, disp)?;
        Ok(Request::done())
    }

    /// Request-based [`Window::get`] (MPI_Rget): `origin` is filled, and may be read, once
    /// the request completes.
    ///
    /// ```no_run
    /// # use onesided::{Assert, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<u64>::allocate(&world, 4)?;
    /// win.lock_all(Assert::NONE)?;
    /// let mut buf = [0u64; 4];
    /// let req = win.rget(&mut buf, 1, 0)?;
    /// req.wait()?;
    /// println!("{buf:?}");
    /// win.unlock_all()?;
    /// # Ok::<(), onesided::Error>(())
    /// ```
    pub fn rget<'a>(
        &'a self,
        origin: &'a mut [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'a>> {
        self.check_passive("rget", target)?;
        self.get(origin, target, disp)?;
        Ok(Request::done())
    }
}

impl<T: AccElement> Window<T> {
    /// Request-based [`Window::accumulate`] (MPI_Raccumulate).
    pub fn raccumulate<'a>(
        &'a self,
        origin: &'a [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        self.check_passive("raccumulate", target)?;
        self.accumulate(origin, target, disp, op)?;
        Ok(Request::done())
    }

    /// Request-based [`Window::get_accumulate`] (MPI_Rget_accumulate): `result` may be read
    /// once the request completes.
    pub fn rget_accumulate<'a>(
        &'a self,
        origin: &'a [T],
        result: &'a mut [T],
        target: usize,
        disp: usize,
        op: Op,
    ) -> Result<Request<'a>> {
        self.check_passive("rget_accumulate", target)?;
        self.get_accumulate(origin, result, target, disp, op)?;
        Ok(Request::done())
    }
}
