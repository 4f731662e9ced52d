//! General active-target synchronization: post / start / complete / wait / test.
//!
//! Matching ([Gerstenberger13] §2.3, with the counters of [Zounmevo14] §VII-B): the control block of each
//! rank `j` holds one cumulative counter per peer `i`, "posts by `i` whose group contained
//! `j`". `post` bumps that counter at each member of its group; `start` at `j` counts locally
//! how many access epochs it has opened toward each `i` (`a`) and waits until `i`'s counter
//! reaches `a`. `complete` bumps a cumulative completion counter at each target; `wait` waits
//! until it reaches the sum of the sizes of all groups this process has posted.
//!
//! Costs: post and complete O(k) remote atomic adds, start O(k) local polls, wait one poll,
//! for a group of k ranks; no list management, no wait-free-storage scheme to get wrong, and
//! a counter is never reset — so a fast peer that posts its next epoch early can never be
//! confused with the current one, and deferred (nonblocking) epochs match in FIFO order for
//! free. The price is one 8-byte counter per peer per rank in the node segment (foMPI's
//! released code does the same).

use std::sync::atomic::Ordering;

use bytemuck::Pod;

use crate::error::Result;
use crate::group::Group;
use crate::progress::{blocking_start, Completes, Step, SyncOp, Ticket};
use crate::request::Request;
use crate::sync::Assert;
use crate::win::core::WinCore;
use crate::win::Window;

/// Announce an exposure epoch to every member of the group.
struct PostOp {
    group: Group,
}

impl SyncOp<WinCore> for PostOp {
    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        for &j in self.group.ranks() {
            // Release: local stores to our window before post are visible to the origin's
            // accesses after its start observed this increment (Acquire).
            core.ctrl
                .post_counter(j, core.rank)
                .fetch_add(1, Ordering::Release);
        }
        Ok(Step::Done)
    }
}

/// Wait until every member of the access group has posted.
struct StartOp {
    /// (peer, post count this epoch needs)
    needs: Vec<(usize, u64)>,
    next: usize,
}

impl SyncOp<WinCore> for StartOp {
    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        while let Some(&(peer, need)) = self.needs.get(self.next) {
            // Acquire: pairs with PostOp's Release increment.
            if core
                .ctrl
                .post_counter(core.rank, peer)
                .load(Ordering::Acquire)
                < need
            {
                return Ok(Step::Blocked);
            }
            self.next += 1;
        }
        Ok(Step::Done)
    }
}

/// Tell every member of the access group that our operations are complete.
struct CompleteOp {
    group: Group,
}

impl SyncOp<WinCore> for CompleteOp {
    /// The epoch's operations are in the targets' memory before any target is told.
    fn completes(&self) -> Completes {
        Completes::All
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        for &t in self.group.ranks() {
            // Release: every RMA operation of the epoch (stores into the target's memory, or
            // completed process_vm_writev calls) happens-before the target's wait returns.
            core.ctrl
                .rank(t)
                .completions
                .fetch_add(1, Ordering::Release);
        }
        Ok(Step::Done)
    }
}

/// Wait until the completions of the exposure epoch have arrived.
struct WaitOp {
    need: u64,
}

impl SyncOp<WinCore> for WaitOp {
    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        Ok(if core.exposure_complete(self.need) {
            Step::Done
        } else {
            Step::Blocked
        })
    }
}

impl WinCore {
    fn exposure_complete(&self, need: u64) -> bool {
        // Acquire: pairs with CompleteOp's Release increments.
        self.ctrl
            .rank(self.rank)
            .completions
            .load(Ordering::Acquire)
            >= need
    }

    pub(crate) fn post(&self, group: &Group, assert: Assert) -> Result<()> {
        match blocking_start(|| self.start_post(group, assert))? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None),
        }
    }

    /// Opens the exposure epoch and starts announcing it (blocking or not).
    pub(crate) fn start_post(&self, group: &Group, assert: Assert) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        assert.only("post", Assert::NOCHECK | Assert::NOSTORE | Assert::NOPUT)?;
        group.check_within(self.size)?;
        self.epoch.post(group.len())?;
        if assert.contains(Assert::NOCHECK) {
            return Ok(None);
        }
        let order = self.epoch.exposure_order();
        self.engine.start_ordered(
            self,
            PostOp {
                group: group.clone(),
            },
            order,
        )
    }

    pub(crate) fn start(&self, group: &Group, assert: Assert) -> Result<()> {
        match blocking_start(|| self.start_start(group, assert))? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None),
        }
    }

    /// Opens the PSCW access epoch and starts waiting for its targets' posts (blocking or
    /// not); while that is pending the epoch is deferred (RMA waits: resolve's gate).
    pub(crate) fn start_start(&self, group: &Group, assert: Assert) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        assert.only("start", Assert::NOCHECK)?;
        group.check_within(self.size)?;
        self.epoch.start(group)?;
        if assert.contains(Assert::NOCHECK) {
            return Ok(None);
        }
        let needs = {
            let mut opened = self
                .pscw_accesses
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            group
                .ranks()
                .iter()
                .map(|&peer| {
                    let n = opened.entry(peer).or_insert(0);
                    *n += 1;
                    (peer, *n)
                })
                .collect()
        };
        let order = self.epoch.pscw_access_order();
        let ticket = self
            .engine
            .start_ordered(self, StartOp { needs, next: 0 }, order)?;
        if ticket.is_some() {
            self.epoch.forget_access_cache();
        }
        Ok(ticket)
    }

    pub(crate) fn complete(&self) -> Result<()> {
        match blocking_start(|| self.start_complete())? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None),
        }
    }

    /// Closes the PSCW access epoch and starts signalling its targets (blocking or not).
    pub(crate) fn start_complete(&self) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        let order = self.epoch.pscw_access_order();
        let group = self.epoch.complete()?;
        self.engine.start_ordered(self, CompleteOp { group }, order)
    }

    pub(crate) fn wait(&self) -> Result<()> {
        let ticket = {
            // As in the start_* calls, but not held while waiting.
            let _calls = self.calls.lock();
            let need = self.epoch.exposure_target("wait")?;
            let order = self.epoch.exposure_order();
            blocking_start(|| self.engine.start_ordered(self, WaitOp { need }, order))?
        };
        if let Some(t) = ticket {
            self.engine.wait(self, t, None)?;
        }
        self.epoch.end_exposure();
        Ok(())
    }

    /// `iwait`: closes the exposure epoch now; the returned ticket completes when every
    /// origin of it has called `complete` (the completion count is cumulative, so a later
    /// `post` waits for its own origins on top).
    pub(crate) fn start_wait(&self) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        let need = self.epoch.exposure_target("iwait")?;
        let order = self.epoch.exposure_order();
        self.epoch.end_exposure();
        self.engine.start_ordered(self, WaitOp { need }, order)
    }

    pub(crate) fn test(&self) -> Result<bool> {
        let need = self.epoch.exposure_target("test")?;
        self.engine.progress(self)?;
        if self.engine.idle() && self.exposure_complete(need) {
            self.epoch.end_exposure();
            Ok(true)
        } else {
            Ok(false)
        }
    }
}

impl<T: Pod> Window<T> {
    /// Opens an exposure epoch for the ranks of `group` (MPI_Win_post). Does not block.
    ///
    /// Valid assertions: `NOCHECK` (the matching `start`s also pass it), `NOSTORE`, `NOPUT`.
    ///
    /// ```no_run
    /// # use onesided::{Assert, Group, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<f64>::allocate(&world, 8)?;
    /// let (me, n) = (world.rank(), world.size());
    /// let neighbours = Group::new([(me + 1) % n, (me + n - 1) % n])?;
    /// win.post(&neighbours, Assert::NONE)?;
    /// win.start(&neighbours, Assert::NONE)?;
    /// win.put(&[me as f64], (me + 1) % n, 0)?;
    /// win.complete()?;
    /// win.wait()?;
    /// # Ok::<(), onesided::Error>(())
    /// ```
    pub fn post(&self, group: &Group, assert: Assert) -> Result<()> {
        self.core.post(group, assert)
    }

    /// Opens an access epoch to the ranks of `group` (MPI_Win_start); waits until each of
    /// them has posted a matching exposure epoch. Valid assertion: `NOCHECK`.
    pub fn start(&self, group: &Group, assert: Assert) -> Result<()> {
        self.core.start(group, assert)
    }

    /// Ends the access epoch opened by [`Window::start`] (MPI_Win_complete): the operations
    /// are complete at the origin, and each target's `wait` may return once all its origins
    /// have completed.
    pub fn complete(&self) -> Result<()> {
        self.core.complete()
    }

    /// Ends the exposure epoch opened by [`Window::post`] (MPI_Win_wait): waits until every
    /// origin in the post group has called `complete`.
    pub fn wait(&self) -> Result<()> {
        self.core.wait()
    }

    /// Nonblocking [`Window::wait`] (MPI_Win_test): true, and the exposure epoch is closed,
    /// when every origin has completed; false otherwise.
    pub fn test(&self) -> Result<bool> {
        self.core.test()
    }

    /// Nonblocking [`Window::post`] (MPI_Win_ipost, \[Zounmevo14\]): never blocks; the request
    /// is complete at once. Behind a pending synchronization the exposure activates in call
    /// order.
    pub fn ipost(&self, group: &Group, assert: Assert) -> Result<Request<'_>> {
        self.core.start_post(group, assert)?;
        Ok(Request::done())
    }

    /// Nonblocking [`Window::start`] (MPI_Win_istart, \[Zounmevo14\]): never blocks; the
    /// request is complete at once. Until every target has posted, the access epoch is
    /// deferred: an RMA call waits for it instead of touching target memory early.
    pub fn istart(&self, group: &Group, assert: Assert) -> Result<Request<'_>> {
        self.core.start_start(group, assert)?;
        Ok(Request::done())
    }

    /// Nonblocking [`Window::complete`] (MPI_Win_icomplete, \[Zounmevo14\]): the access epoch
    /// is closed when the call returns; the request completes once its targets have been
    /// told (their `wait` may then return).
    pub fn icomplete(&self) -> Result<Request<'_>> {
        let ticket = self.core.start_complete()?;
        Ok(Request::started(&self.core, ticket))
    }

    /// Nonblocking [`Window::wait`] (MPI_Win_iwait, \[Zounmevo14\]): the exposure epoch is
    /// closed when the call returns (a new `post` may follow and activates after it); the
    /// request completes once every origin of the epoch has called `complete`, and only
    /// then may the exposed memory be read as the epoch's result.
    pub fn iwait(&self) -> Result<Request<'_>> {
        let ticket = self.core.start_wait()?;
        Ok(Request::started(&self.core, ticket))
    }
}
