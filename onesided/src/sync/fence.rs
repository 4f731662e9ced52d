//! Fence: complete this process's RMA, then a barrier ([Gerstenberger13] §2.3).
//!
//! Across nodes the barrier's signals are unanswered messages that nothing after the fence
//! waits for (`WinCore::enter_agreement`): a fence of two ranks costs one message each way.
//!
//! Assertions skip work: NOPRECEDE skips the flush (there is nothing to complete — checked),
//! NOPRECEDE together with NOSUCCEED skips the barrier too (no epoch ends and none begins).
//! NOSTORE and NOPUT are accepted hints; on a coherent shared-memory node they save nothing
//! beyond what the barrier's release/acquire ordering already costs.

use std::sync::atomic::{fence, Ordering};

use crate::bootstrap::call::CallTag;
use crate::bootstrap::Call;
use crate::error::Result;
use crate::progress::{blocking_start, Completes, Step, SyncOp, Ticket, Waiting};
use crate::request::Request;
use crate::sync::collective::Agreement;
use crate::sync::Assert;
use crate::win::core::WinCore;
use crate::win::RawWindow;

/// A fence in progress.
struct FenceOp {
    flush: bool,
    /// The barrier, a window collective agreement (none when the fence needs no barrier).
    agreement: Option<Agreement>,
}

impl SyncOp<WinCore> for FenceOp {
    fn name(&self) -> &'static str {
        "MPI_Win_fence"
    }

    /// The epoch it closes is complete at every target before anyone passes the barrier.
    fn completes(&self) -> Completes {
        Completes::All
    }

    fn waiting(&self, core: &WinCore) -> Waiting {
        match &self.agreement {
            Some(a) => core.waiting_in_collective("MPI_Win_fence", a),
            None => Waiting::new("MPI_Win_fence", ""),
        }
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        if std::mem::take(&mut self.flush) {
            // Completes our stores before anyone passes the barrier (the barrier's release
            // increments also order them; the full fence orders later loads as well).
            fence(Ordering::SeqCst);
        }
        let done = match &mut self.agreement {
            Some(a) => core.poll_agreement(a)?,
            None => true,
        };
        Ok(if done { Step::Done } else { Step::Blocked })
    }
}

impl WinCore {
    pub(crate) fn fence(&self, assert: Assert) -> Result<()> {
        match blocking_start(|| self.start_fence(assert))? {
            None => Ok(()),
            Some((t, tag)) => self.engine.wait(self, t, tag),
        }
    }

    /// Closes the fence epoch and opens the next (blocking or not): its barrier is a queued
    /// op with its collective tag while it is pending, and the epoch it opens is deferred
    /// until then (RMA waits: resolve's gate) — on shared memory a store must not reach a
    /// peer that has not entered the fence yet.
    pub(crate) fn start_fence(&self, assert: Assert) -> Result<Option<(Ticket, Option<CallTag>)>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        assert.only(
            "fence",
            Assert::NOSTORE | Assert::NOPUT | Assert::NOPRECEDE | Assert::NOSUCCEED,
        )?;
        let plan = self.epoch.fence(
            assert.contains(Assert::NOPRECEDE),
            assert.contains(Assert::NOSUCCEED),
        )?;
        let agreement = plan.barrier.then(|| self.enter_agreement(Call::Fence, 0));
        let tag = agreement.as_ref().map(|a| a.tag);
        let op = FenceOp {
            flush: plan.flush,
            agreement,
        };
        let started = self.engine.start(self, op);
        self.note_sync("MPI_Win_fence", None, &started);
        let ticket = started?;
        if ticket.is_some() {
            self.epoch.forget_access_cache();
        }
        Ok(ticket.map(|t| (t, tag)))
    }
}

impl RawWindow {
    /// Collective fence (MPI_Win_fence): completes every RMA operation of the epoch it ends
    /// (at origin and target) and opens a new access and exposure epoch on every rank,
    /// unless `assert` contains [`Assert::NOSUCCEED`].
    ///
    /// Valid assertions: `NOSTORE`, `NOPUT`, `NOPRECEDE`, `NOSUCCEED`. Errors: a lock,
    /// lock_all or PSCW epoch is open; `NOPRECEDE` after RMA was issued.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u64>::allocate(&world, 4)?;
    /// win.fence(Assert::NOPRECEDE)?;
    /// win.put(&[7], (world.rank() + 1) % world.size(), 0)?;
    /// win.fence(Assert::NOSUCCEED)?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn fence(&self, assert: Assert) -> Result<()> {
        self.core.fence(assert)
    }

    /// Nonblocking [`Window::fence`](crate::RawWindow::fence) (MPI_Win_ifence, \[Zounmevo14\]): never blocks. The
    /// request completes when the fence's barrier has: then the epoch it closes is complete
    /// everywhere. The epoch it opens is deferred until then — an RMA call waits for the
    /// barrier rather than store into a peer that has not entered the fence. Errors as
    /// `fence`; a mismatched collective is reported when the request completes.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u64>::allocate(&world, 4)?;
    /// win.ifence(Assert::NOPRECEDE)?; // returns at once
    /// win.put(&[7], (world.rank() + 1) % world.size(), 0)?; // waits for the barrier
    /// let closing = win.ifence(Assert::NOSUCCEED)?;
    /// closing.wait()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn ifence(&self, assert: Assert) -> Result<Request<'_>> {
        Ok(match self.core.start_fence(assert)? {
            None => Request::done(),
            Some((t, tag)) => Request::started_collective(&self.core, t, tag),
        })
    }
}
