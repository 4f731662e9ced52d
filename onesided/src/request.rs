//! The one completion type: every operation that can finish after its call returns — RMA
//! requests (`rput` & co.) and nonblocking synchronization (`iunlock`, `iwait`, `iflush`,
//! …) — hands out a [`Request`], completed with [`Request::wait`], [`Request::test`],
//! `.await`, or the helpers [`wait_all`], [`test_all`], [`test_any`] and [`wait_any`].
//!
//! A request keeps what its operation borrows (buffers, and the window) until it completes.
//! A synchronization request is a ticket in its window's progress engine: testing or
//! waiting drives the engine, which completes synchronizations in the order they were
//! started ([Zounmevo14] rule 4). A request dropped before completion is not cancelled: its
//! synchronization still completes when the engine next runs (as `MPI_Request_free`), and
//! `Window::free` drives every pending one to completion first. A deferred read (`rget`,
//! `rget_accumulate` behind a pending epoch) fills the caller's buffer when its request is
//! seen complete — by `wait`, `test`, `is_complete` or `.await`; dropped (or forgotten)
//! before that, it leaves the buffer as it was.
//!
//! ```
//! # onesided::testing::run(2, |_| {
//! # use onesided::{Assert, Group, Window};
//! # let world = onesided::init()?.world().clone();
//! let win = Window::<u64>::allocate(&world, 8)?;
//! if world.rank() == 0 {
//!     win.post(&Group::new([1])?, Assert::NONE)?;
//!     let mut closing = win.iwait()?; // the exposure epoch ends when rank 1 completes
//!     while !closing.test()? {
//!         // compute while rank 1 accesses our memory
//!     }
//! } else if world.rank() == 1 {
//!     win.start(&Group::new([0])?, Assert::NONE)?;
//!     win.put(&[7], 0, 0)?;
//!     win.complete()?;
//! }
//! # onesided::init()?.world().barrier()?;
//! # Ok(())
//! # });
//! ```

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::backoff::Backoff;
use crate::bootstrap::call::CallTag;
use crate::error::Result;
use crate::plane::{count_reached, Awaited, ControlPlane, CtrlWord};
use crate::progress::Ticket;
use crate::win::core::{SharedCore, WinCore};

/// An operation in flight (MPI_Request).
///
/// Complete it with [`Request::wait`], [`Request::test`] or `.await`; until then it keeps
/// the operation's buffers (and the window) borrowed.
#[derive(Debug)]
#[must_use = "the operation may not be complete: wait for the request"]
pub struct Request<'a> {
    state: State<'a>,
    /// A deferred read (`rget`, `rget_accumulate` behind a pending epoch): where its bytes
    /// go once it completes (behind a lock so that `is_complete(&self)` can deliver too).
    fill: Mutex<Option<Fill<'a>>>,
    _borrows: PhantomData<&'a mut [u8]>,
    /// The window's core, for a request that keeps its window alive itself (see
    /// `RawWindow::own_request`): the references in `state` point into it.
    _owner: Option<SharedCore>,
}

#[derive(Debug)]
enum State<'a> {
    Done,
    /// A synchronization queued in `core`'s progress engine.
    Sync {
        core: &'a WinCore,
        ticket: Ticket,
        /// The window collective it is (its waits watch the peers).
        collective: Option<CallTag>,
    },
    /// `wait_notify`: a notification counter of `core`'s window, `word` of `plane`,
    /// reaching `value`.
    Notify {
        core: &'a WinCore,
        plane: PlaneRef<'a>,
        word: CtrlWord,
        value: u64,
        /// The read of the counter while the plane has not answered it.
        reading: Option<Awaited>,
    },
}

/// The control plane of a notification counter (a window's notify table).
#[derive(Clone, Copy)]
struct PlaneRef<'a>(&'a (dyn ControlPlane + Sync));

impl std::fmt::Debug for PlaneRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlaneRef")
    }
}

/// Where a deferred read leaves its bytes: its op fills the slot when it runs; the request
/// copies them into the caller's buffer when it sees the op complete. The op never writes
/// the caller's memory itself, so a request that is forgotten (`mem::forget`) or dropped
/// early leaves the buffer untouched — never written after its borrow ended.
pub(crate) type Delivery = Arc<Mutex<Option<Vec<u8>>>>;

#[derive(Debug)]
struct Fill<'a> {
    dst: &'a mut [u8],
    slot: Delivery,
}

impl Fill<'_> {
    fn deliver(self) {
        let bytes = self
            .slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(bytes) = bytes {
            self.dst.copy_from_slice(&bytes);
        }
    }
}

impl Request<'static> {
    /// A request that is complete already: what a binding hands out for an operation it
    /// finished before its call returned.
    pub fn completed() -> Request<'static> {
        Request::done()
    }
}

impl<'a> Request<'a> {
    /// A request for an operation that completed before its call returned.
    pub(crate) fn done() -> Self {
        Request {
            state: State::Done,
            fill: Mutex::new(None),
            _borrows: PhantomData,
            _owner: None,
        }
    }

    /// The request for a synchronization started in `core`'s engine: `None` when it
    /// completed at once, its ticket otherwise.
    pub(crate) fn started(core: &'a WinCore, ticket: Option<Ticket>) -> Self {
        match ticket {
            None => Self::done(),
            Some(ticket) => Self::started_collective(core, ticket, None),
        }
    }

    /// The request for a pending window collective (`ifence`) with tag `collective`.
    pub(crate) fn started_collective(
        core: &'a WinCore,
        ticket: Ticket,
        collective: Option<CallTag>,
    ) -> Self {
        Request {
            state: State::Sync {
                core,
                ticket,
                collective,
            },
            fill: Mutex::new(None),
            _borrows: PhantomData,
            _owner: None,
        }
    }

    /// The request of `wait_notify`: complete once counter `word` of `plane` is at least
    /// `value`.
    pub(crate) fn notified(
        core: &'a WinCore,
        plane: &'a (dyn ControlPlane + Sync),
        word: CtrlWord,
        value: u64,
    ) -> Self {
        Request {
            state: State::Notify {
                core,
                plane: PlaneRef(plane),
                word,
                value,
                reading: None,
            },
            fill: Mutex::new(None),
            _borrows: PhantomData,
            _owner: None,
        }
    }

    /// The request for a deferred read queued as `ticket`, whose op leaves its bytes in
    /// `slot`: they are copied into `dst` when the request sees it complete.
    pub(crate) fn deferred_read(
        core: &'a WinCore,
        ticket: Ticket,
        dst: &'a mut [u8],
        slot: Delivery,
    ) -> Self {
        let r = Self::started_collective(core, ticket, None);
        *r.fill
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Fill { dst, slot });
        r
    }

    /// The window core this request refers to, if any.
    pub(crate) fn refers_to(&self) -> Option<&WinCore> {
        match &self.state {
            State::Done => None,
            State::Sync { core, .. } | State::Notify { core, .. } => Some(core),
        }
    }

    /// True while a deferred read still has a caller's buffer to fill.
    pub(crate) fn fills(&self) -> bool {
        self.fill
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    /// This request with every borrow extended to `'static`, keeping `owner` (its window's
    /// core) alive itself.
    ///
    /// # Safety
    /// `owner` is the core the request refers to (if any), and a deferred read's
    /// destination stays valid for writes, and untouched otherwise, until the request
    /// completes or is dropped.
    pub(crate) unsafe fn into_static(self, owner: SharedCore) -> Request<'static> {
        debug_assert!(self.refers_to().is_none_or(|c| std::ptr::eq(c, &*owner)));
        let mut owned: Request<'static> =
            // SAFETY: Request<'a> and Request<'static> differ only in lifetimes. The core
            // references point into `owner`'s heap value, which the request now keeps
            // alive (a move of the request does not move it); the destination's validity
            // is the caller's promise.
            unsafe { std::mem::transmute::<Request<'a>, Request<'static>>(self) };
        owned._owner = Some(owner);
        owned
    }

    /// Copies a completed deferred read's bytes into the caller's buffer (once).
    fn deliver(&self) {
        let fill = self
            .fill
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(fill) = fill {
            fill.deliver();
        }
    }

    fn finish(&mut self) {
        self.state = State::Done;
        self.deliver();
    }

    /// True when the operation completed; drives progress but never blocks (MPI_Test).
    ///
    /// An error of a synchronization queued before this one is returned by whichever call
    /// drives the engine when it happens.
    pub fn test(&mut self) -> Result<bool> {
        if !matches!(self.state, State::Done) {
            // MPI's progress rule: a process that only tests must still complete what can
            // complete — its peers' operations on its memory included, which arrive through
            // the network endpoint (without a progress thread, `ONESIDED_PROGRESS=none`,
            // nothing else reads it) or its request rings.
            crate::attention::progress_peers();
        }
        match &mut self.state {
            State::Done => Ok(true),
            &mut State::Sync { core, ticket, .. } => {
                core.engine.progress(core)?;
                if core.engine.completed(ticket) {
                    self.finish();
                    Ok(true)
                } else {
                    Ok(false)
                }
            }
            State::Notify {
                core,
                plane,
                word,
                value,
                reading,
            } => {
                core.engine.progress(*core)?;
                if count_reached(plane.0, *word, *value, reading)? == Some(true) {
                    self.finish();
                    Ok(true)
                } else {
                    Ok(false)
                }
            }
        }
    }

    /// True when the operation is known to be complete, without driving progress.
    pub fn is_complete(&self) -> bool {
        let done = match self.state {
            State::Done => true,
            State::Sync { core, ticket, .. } => core.engine.completed(ticket),
            // A fresh read (`&self` keeps no pending one): a process's own counters
            // answer at once on every plane; a late answer only delays this look, and a
            // failed one is reported by `test` or `wait`.
            State::Notify {
                plane, word, value, ..
            } => matches!(
                count_reached(plane.0, word, value, &mut None),
                Ok(Some(true))
            ),
        };
        if done {
            self.deliver();
        }
        done
    }

    /// Blocks until the operation completed, then releases the borrows (MPI_Wait).
    pub fn wait(mut self) -> Result<()> {
        match &mut self.state {
            State::Done => {}
            &mut State::Sync {
                core,
                ticket,
                collective,
            } => core.engine.wait(core, ticket, collective)?,
            State::Notify {
                core,
                plane,
                word,
                value,
                reading,
            } => {
                let (core, plane, word, value) = (*core, plane.0, *word, *value);
                let reading = std::cell::RefCell::new(reading);
                // A failed read ends the wait with its error.
                let failed = std::cell::RefCell::new(None);
                let reached = || match count_reached(plane, word, value, &mut reading.borrow_mut())
                {
                    Ok(r) => r == Some(true),
                    Err(e) => {
                        *failed.borrow_mut() = Some(e);
                        true
                    }
                };
                // Already there (the common case of a late waiter): no engine pass.
                if !reached() {
                    let waiting = crate::progress::Waiting::new(
                        "MPI_Win_wait_notify",
                        "notifications of this process's counter",
                    )
                    .watching(word, Some(value));
                    core.engine.wait_until(core, reached, None, || {
                        crate::progress::Host::describe(core, &waiting)
                    })?;
                }
                if let Some(e) = failed.into_inner() {
                    return Err(e);
                }
            }
        }
        self.finish();
        Ok(())
    }
}

impl Future for Request<'_> {
    type Output = Result<()>;

    /// Tests the request. Shared-memory completion raises no event an executor could wait
    /// on, so a pending request asks to be polled again at once: awaiting it spins the
    /// executor (interleaved with its other tasks) until the operation completes.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match self.test() {
            Ok(true) => Poll::Ready(Ok(())),
            Ok(false) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

// Requests may be handed to other threads and tested from several (the engine behind them
// is thread-safe).
const _: () = {
    const fn shared_by_threads<T: Send + Sync>() {}
    shared_by_threads::<Request<'static>>();
};

/// Waits for every request (MPI_Waitall); returns the first error after all were waited for.
pub fn wait_all<'a>(requests: impl IntoIterator<Item = Request<'a>>) -> Result<()> {
    let mut first_error = None;
    for r in requests {
        if let Err(e) = r.wait() {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// True when every request completed (MPI_Testall); tests them all.
pub fn test_all(requests: &mut [Request<'_>]) -> Result<bool> {
    let mut all = true;
    for r in requests.iter_mut() {
        all &= r.test()?;
    }
    Ok(all)
}

/// The index of a completed request, if any (MPI_Testany); `None` when none has completed.
pub fn test_any(requests: &mut [Request<'_>]) -> Result<Option<usize>> {
    for (i, r) in requests.iter_mut().enumerate() {
        if r.test()? {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Blocks until one request completed and returns its index (MPI_Waitany). Errors for an
/// empty slice.
pub fn wait_any(requests: &mut [Request<'_>]) -> Result<usize> {
    if requests.is_empty() {
        return Err(crate::error::Error::InvalidArgument(
            "wait_any of no requests".into(),
        ));
    }
    let mut backoff = Backoff::new();
    loop {
        if let Some(i) = test_any(requests)? {
            return Ok(i);
        }
        backoff.snooze();
    }
}
