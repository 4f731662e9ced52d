//! General active-target synchronization: post / start / complete / wait / test.
//!
//! Matching ([Gerstenberger13] §2.3, with the counters of [Zounmevo14] §VII-B): the control block of each
//! rank `j` holds one cumulative counter per peer `i`, "posts by `i` whose group contained
//! `j`". `post` bumps that counter at each member of its group; `start` at `j` counts locally
//! how many access epochs it has opened toward each `i` (`a`) and waits until `i`'s counter
//! reaches `a`. `complete` bumps a cumulative completion counter at each target; `wait` waits
//! until it reaches the sum of the sizes of all groups this process has posted.
//!
//! Costs: post and complete O(k) remote atomic adds, which they do not wait for (across
//! nodes unanswered messages: the peer's `start` or `wait` is what needs them), start O(k)
//! local polls, wait one poll, for a group of k ranks; no list management, no
//! wait-free-storage scheme to get wrong, and a counter is never reset — so a fast peer
//! that posts its next epoch early can never be confused with the current one, and
//! deferred (nonblocking) epochs match in FIFO order for free. The price is one 8-byte
//! counter per peer per rank in the node segment (foMPI's released code does the same).

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::group::Group;
use crate::plane::{count_reached, Awaited, ControlPlane, CtrlWord};
use crate::progress::{blocking_start, Completes, Step, SyncOp, Ticket, Waiting};
use crate::request::Request;
use crate::sync::Assert;
use crate::win::core::WinCore;
use crate::win::RawWindow;

/// Bumps one counter at each of `ranks` (`word(rank)`) through the plane, unawaited
/// ([`ControlPlane::post_add_unawaited`]): `post` and `complete`. Done at once: the
/// holder's next steps tell the caller that its increment arrived (a `start` waits for the
/// post, a `wait` for the completion), and on the network a round trip per call was the
/// largest part of a PSCW epoch across nodes (see `Announce::poll`).
#[derive(Debug)]
struct Announce {
    ranks: Vec<usize>,
    /// Increments posted (all of them, at the first poll).
    issued: bool,
}

impl Announce {
    fn new(ranks: Vec<usize>) -> Announce {
        Announce {
            ranks,
            issued: false,
        }
    }

    /// Posts the increments. Across two virtual nodes (`osbench sync-latency`, k = 1) a
    /// PSCW epoch that waited for each increment's answer took 28.7–38.1 µs, one that does
    /// not 17.6–24.8 (eight alternating pairs of builds).
    fn poll<P: ControlPlane + ?Sized>(
        &mut self,
        plane: &P,
        word: impl Fn(usize) -> CtrlWord,
    ) -> Result<Step> {
        if !std::mem::replace(&mut self.issued, true) {
            for &r in &self.ranks {
                // Release: see PostOp and CompleteOp.
                plane.post_add_unawaited(word(r), 1, Ordering::Release);
            }
        }
        Ok(Step::Done)
    }
}

/// Waits until counter `word(peer)` of this process reaches `need`, for every (peer, need),
/// in order: `start` (the posts of each target).
#[derive(Debug)]
struct AwaitCounts {
    needs: Vec<(usize, u64)>,
    next: usize,
    /// The read of the counter `next` waits for, while the plane has not answered it.
    reading: Option<Awaited>,
}

impl AwaitCounts {
    fn new(needs: Vec<(usize, u64)>) -> AwaitCounts {
        AwaitCounts {
            needs,
            next: 0,
            reading: None,
        }
    }

    fn poll<P: ControlPlane + ?Sized>(
        &mut self,
        plane: &P,
        word: impl Fn(usize) -> CtrlWord,
    ) -> Result<Step> {
        while let Some(&(peer, need)) = self.needs.get(self.next) {
            if count_reached(plane, word(peer), need, &mut self.reading)? != Some(true) {
                return Ok(Step::Blocked);
            }
            self.next += 1;
        }
        Ok(Step::Done)
    }
}

/// Announce an exposure epoch to every member of the group: bump "posts by us" at each.
/// Release: local stores to our window before post are visible to the origin's accesses
/// after its start observed the increment (Acquire).
struct PostOp {
    announce: Announce,
}

impl SyncOp<WinCore> for PostOp {
    fn name(&self) -> &'static str {
        "MPI_Win_post"
    }

    fn waiting(&self, _core: &WinCore) -> Waiting {
        Waiting::new(
            "MPI_Win_post",
            "its turn after the window's earlier synchronizations",
        )
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        let me = core.rank;
        self.announce
            .poll(&core.plane(), |j| CtrlWord::Posts { at: j, from: me })
    }
}

/// Wait until every member of the access group has posted (our counter of its posts
/// reaches the access epochs we opened toward it).
struct StartOp {
    counts: AwaitCounts,
}

impl SyncOp<WinCore> for StartOp {
    fn name(&self) -> &'static str {
        "MPI_Win_start"
    }

    fn waiting(&self, core: &WinCore) -> Waiting {
        match self.counts.needs.get(self.counts.next) {
            Some(&(peer, need)) => Waiting::new("MPI_Win_start", "its MPI_Win_post")
                .on(peer)
                .watching(
                    CtrlWord::Posts {
                        at: core.rank,
                        from: peer,
                    },
                    Some(need),
                ),
            None => Waiting::new("MPI_Win_start", ""),
        }
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        let me = core.rank;
        self.counts
            .poll(&core.plane(), |peer| CtrlWord::Posts { at: me, from: peer })
    }
}

/// Tell every member of the access group that our operations are complete. Release: every
/// RMA operation of the epoch (stores into the target's memory, or completed
/// process_vm_writev calls) happens-before the target's wait returns.
struct CompleteOp {
    announce: Announce,
}

impl SyncOp<WinCore> for CompleteOp {
    fn name(&self) -> &'static str {
        "MPI_Win_complete"
    }

    /// The epoch's operations are in the targets' memory before any target is told.
    fn completes(&self) -> Completes {
        Completes::All
    }

    fn waiting(&self, _core: &WinCore) -> Waiting {
        Waiting::new(
            "MPI_Win_complete",
            "the epoch's operations to complete at the targets",
        )
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        self.announce
            .poll(&core.plane(), |t| CtrlWord::Completions { at: t })
    }
}

/// Wait until the completions of the exposure epoch have arrived (our completion counter
/// reaches the sizes of every group we posted to).
struct WaitOp {
    need: u64,
    reading: Option<Awaited>,
}

impl WaitOp {
    /// Waits for `need` completions.
    fn new(need: u64) -> WaitOp {
        WaitOp {
            need,
            reading: None,
        }
    }

    #[inline]
    fn poll_on<P: ControlPlane + ?Sized>(&mut self, plane: &P, me: usize) -> Result<Step> {
        Ok(
            match count_reached(
                plane,
                CtrlWord::Completions { at: me },
                self.need,
                &mut self.reading,
            )? {
                Some(true) => Step::Done,
                _ => Step::Blocked,
            },
        )
    }
}

impl SyncOp<WinCore> for WaitOp {
    fn name(&self) -> &'static str {
        "MPI_Win_wait"
    }

    fn waiting(&self, core: &WinCore) -> Waiting {
        Waiting::new(
            "MPI_Win_wait",
            "the MPI_Win_complete of every origin of the exposure epoch",
        )
        .watching(CtrlWord::Completions { at: core.rank }, Some(self.need))
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        let plane = core.plane();
        let step = self.poll_on(&plane, core.rank)?;
        if step == Step::Done && !plane.is_mapped() {
            // What `test` may take as known (see `exposure_complete`).
            let mut known = core
                .pscw_test_read
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            known.0 = known.0.max(self.need);
        }
        Ok(step)
    }
}

impl WinCore {
    /// Whether the completions of the exposure epoch have arrived: one look (a read that
    /// answers at once on the mapped blocks); on the network the read stays pending across
    /// calls, so that `test` in a loop sees its answer instead of asking anew each time.
    fn exposure_complete(&self, need: u64) -> Result<bool> {
        let plane = self.plane();
        if plane.is_mapped() {
            return Ok(matches!(
                WaitOp::new(need).poll_on(&plane, self.rank),
                Ok(Step::Done)
            ));
        }
        let mut reading = self
            .pscw_test_read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The counter only grows: a count already seen answers without a read (an empty
        // exposure epoch is complete at once).
        if need <= reading.0 {
            return Ok(true);
        }
        let word = CtrlWord::Completions { at: self.rank };
        let (seen, read) = &mut *reading;
        let reached = count_reached(&plane, word, need, read)? == Some(true);
        if reached {
            *seen = need;
        }
        Ok(reached)
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
        let started = self.engine.start_ordered(
            self,
            PostOp {
                announce: Announce::new(group.ranks().to_vec()),
            },
            order,
        );
        self.note_sync("MPI_Win_post", None, &started);
        started
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
        let started = self.engine.start_ordered(
            self,
            StartOp {
                counts: AwaitCounts::new(needs),
            },
            order,
        );
        self.note_sync("MPI_Win_start", None, &started);
        let ticket = started?;
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
        let announce = Announce::new(group.into_ranks());
        let started = self
            .engine
            .start_ordered(self, CompleteOp { announce }, order);
        self.note_sync("MPI_Win_complete", None, &started);
        started
    }

    pub(crate) fn wait(&self) -> Result<()> {
        let ticket = {
            // As in the start_* calls, but not held while waiting.
            let _calls = self.calls.lock();
            let need = self.epoch.exposure_target("wait")?;
            let order = self.epoch.exposure_order();
            let started =
                blocking_start(|| self.engine.start_ordered(self, WaitOp::new(need), order));
            self.note_sync("MPI_Win_wait", None, &started);
            started?
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
        let started = self.engine.start_ordered(self, WaitOp::new(need), order);
        self.note_sync("MPI_Win_wait", None, &started);
        started
    }

    pub(crate) fn test(&self) -> Result<bool> {
        let need = self.epoch.exposure_target("test")?;
        self.engine.progress(self)?;
        if self.engine.idle() && self.exposure_complete(need)? {
            self.epoch.end_exposure();
            Ok(true)
        } else {
            Ok(false)
        }
    }
}

impl RawWindow {
    /// Opens an exposure epoch for the ranks of `group` (MPI_Win_post). Does not block.
    ///
    /// Valid assertions: `NOCHECK` (the matching `start`s also pass it), `NOSTORE`, `NOPUT`.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, Group, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<f64>::allocate(&world, 8)?;
    /// let (me, n) = (world.rank(), world.size());
    /// let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    /// // A group names each rank once: on 2 ranks both neighbours are one.
    /// let neighbours = Group::new(if left == right { vec![left] } else { vec![left, right] })?;
    /// win.post(&neighbours, Assert::NONE)?;
    /// win.start(&neighbours, Assert::NONE)?;
    /// win.put(&[me as f64], (me + 1) % n, 0)?;
    /// win.complete()?;
    /// win.wait()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn post(&self, group: &Group, assert: Assert) -> Result<()> {
        self.core.post(group, assert)
    }

    /// Opens an access epoch to the ranks of `group` (MPI_Win_start); waits until each of
    /// them has posted a matching exposure epoch. Valid assertion: `NOCHECK`.
    pub fn start(&self, group: &Group, assert: Assert) -> Result<()> {
        self.core.start(group, assert)
    }

    /// Ends the access epoch opened by [`Window::start`](crate::RawWindow::start) (MPI_Win_complete): the operations
    /// are complete at the origin, and each target's `wait` may return once all its origins
    /// have completed.
    pub fn complete(&self) -> Result<()> {
        self.core.complete()
    }

    /// Ends the exposure epoch opened by [`Window::post`](crate::RawWindow::post) (MPI_Win_wait): waits until every
    /// origin in the post group has called `complete`.
    pub fn wait(&self) -> Result<()> {
        self.core.wait()
    }

    /// Nonblocking [`Window::wait`](crate::RawWindow::wait) (MPI_Win_test): true, and the exposure epoch is closed,
    /// when every origin has completed; false otherwise.
    pub fn test(&self) -> Result<bool> {
        self.core.test()
    }

    /// Nonblocking [`Window::post`](crate::RawWindow::post) (MPI_Win_ipost, \[Zounmevo14\]): never blocks; the request
    /// is complete at once. Behind a pending synchronization the exposure activates in call
    /// order.
    pub fn ipost(&self, group: &Group, assert: Assert) -> Result<Request<'_>> {
        self.core.start_post(group, assert)?;
        Ok(Request::done())
    }

    /// Nonblocking [`Window::start`](crate::RawWindow::start) (MPI_Win_istart, \[Zounmevo14\]): never blocks; the
    /// request is complete at once. Until every target has posted, the access epoch is
    /// deferred: an RMA call waits for it instead of touching target memory early.
    pub fn istart(&self, group: &Group, assert: Assert) -> Result<Request<'_>> {
        self.core.start_start(group, assert)?;
        Ok(Request::done())
    }

    /// Nonblocking [`Window::complete`](crate::RawWindow::complete) (MPI_Win_icomplete, \[Zounmevo14\]): the access epoch
    /// is closed when the call returns; the request completes once its targets have been
    /// told (their `wait` may then return).
    pub fn icomplete(&self) -> Result<Request<'_>> {
        let ticket = self.core.start_complete()?;
        Ok(Request::started(&self.core, ticket))
    }

    /// Nonblocking [`Window::wait`](crate::RawWindow::wait) (MPI_Win_iwait, \[Zounmevo14\]): the exposure epoch is
    /// closed when the call returns (a new `post` may follow and activates after it); the
    /// request completes once every origin of the epoch has called `complete`, and only
    /// then may the exposed memory be read as the epoch's result.
    pub fn iwait(&self) -> Result<Request<'_>> {
        let ticket = self.core.start_wait()?;
        Ok(Request::started(&self.core, ticket))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::fake::LatePlane;

    /// The PSCW protocol against a plane that answers every operation late and applies
    /// them in a shuffled order, for many seeds: target 1 posts three exposure epochs to
    /// origins 0 and 2; each origin starts three access epochs toward 1 and completes them;
    /// the target waits for each epoch's two completions. A start never finishes before
    /// its post has landed (FIFO matching by cumulative counts), a wait never before both
    /// completions have, and every operation is answered in the end.
    #[test]
    fn pscw_matches_epochs_over_a_late_reordering_plane() {
        const EPOCHS: u64 = 3;
        for seed in 1..=300u64 {
            let plane = LatePlane::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let posts_at = |origin: usize| CtrlWord::Posts {
                at: origin,
                from: 1,
            };
            let completions = CtrlWord::Completions { at: 1 };
            // Target 1: post, wait; three times. Origins: start, complete; three times.
            let mut posts: Vec<Announce> = (0..EPOCHS).map(|_| Announce::new(vec![0, 2])).collect();
            let mut waits: Vec<WaitOp> = (1..=EPOCHS).map(|e| WaitOp::new(2 * e)).collect();
            let mut starts: [Vec<AwaitCounts>; 2] = std::array::from_fn(|_| {
                (1..=EPOCHS)
                    .map(|e| AwaitCounts::new(vec![(1, e)]))
                    .collect()
            });
            let mut completes: [Vec<Announce>; 2] =
                std::array::from_fn(|_| (0..EPOCHS).map(|_| Announce::new(vec![1])).collect());
            // Each process runs its calls in order; a process advances only its first
            // unfinished call (as its engine would), the processes interleaved at random.
            let mut target_at = 0usize; // 2 calls per epoch: post, wait
            let mut origin_at = [0usize; 2]; // 2 calls per epoch: start, complete
            let mut rng = seed | 1;
            let mut steps = 0;
            while target_at < 2 * EPOCHS as usize
                || origin_at.iter().any(|&a| a < 2 * EPOCHS as usize)
            {
                steps += 1;
                assert!(steps < 100_000, "seed {seed}: no progress");
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                match rng % 3 {
                    0 if target_at < 2 * EPOCHS as usize => {
                        let e = target_at / 2;
                        let done = if target_at % 2 == 0 {
                            posts[e].poll(&plane, posts_at).unwrap()
                        } else {
                            let done = waits[e].poll_on(&plane, 1).unwrap();
                            if done == Step::Done {
                                assert!(
                                    plane.peek(completions) >= 2 * (e as u64 + 1),
                                    "seed {seed}: wait {e} finished before its completions landed"
                                );
                            }
                            done
                        };
                        if done == Step::Done {
                            target_at += 1;
                        }
                    }
                    k @ (1 | 2) => {
                        let o = (k - 1) as usize;
                        let at = origin_at[o];
                        if at >= 2 * EPOCHS as usize {
                            continue;
                        }
                        let e = at / 2;
                        let origin = 2 * o; // ranks 0 and 2
                        let done = if at % 2 == 0 {
                            let done = starts[o][e].poll(&plane, |_| posts_at(origin)).unwrap();
                            if done == Step::Done {
                                assert!(
                                    plane.peek(posts_at(origin)) > e as u64,
                                    "seed {seed}: start {e} of {origin} finished before its post"
                                );
                            }
                            done
                        } else {
                            completes[o][e]
                                .poll(&plane, |t| CtrlWord::Completions { at: t })
                                .unwrap()
                        };
                        if done == Step::Done {
                            origin_at[o] += 1;
                        }
                    }
                    _ => {}
                }
            }
            assert_eq!(plane.peek(completions), 2 * EPOCHS, "seed {seed}");
            assert_eq!(plane.peek(posts_at(0)), EPOCHS, "seed {seed}");
            assert_eq!(plane.peek(posts_at(2)), EPOCHS, "seed {seed}");
            assert_eq!(
                plane.in_flight(),
                0,
                "seed {seed}: an operation was never answered"
            );
        }
    }
}
