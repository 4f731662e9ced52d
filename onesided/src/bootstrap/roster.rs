//! The roster of a node's processes: who has exited, and which collective each one is blocked
//! in, so that a collective never waits forever for a process that cannot come.
//!
//! Every collective agreement carries a [`CallTag`] (what the call is, and its sequence number
//! on its communicator or window, counted at call time). Mismatched calls *on one* communicator
//! or window meet in the same agreement and see each other's tag there (exact). Two other
//! situations never meet, so a waiter watches the roster instead:
//!
//! * **A peer exited** (status 0, so the launcher did not abort the job) without entering the
//!   collective: its record says so. Where the channel records arrivals (boot slots, window
//!   control blocks) the check is exact; over a host MPI it is confirmed after
//!   [`CONFIRM`] (a peer that completed the collective and then exited lets ours complete
//!   within that time).
//! * **A peer is blocked in another collective that waits for us**: both wait forever. A
//!   waiter publishes the collective it is blocked in; when a member of our collective has
//!   been blocked for [`CONFIRM`] in a collective of a channel this process belongs to and
//!   has not entered (so it waits for us, and we cannot come: we are blocked here), both
//!   report it. Cycles through three or more channels are not detected.
//!
//! Under a host MPI a process that exits cleanly while a peer already waits for it in a
//! collective it never entered aborts the job itself (`mpi::mark_exit_at_exit`), so that no
//! peer aborts while it sits in `MPI_Finalize` (which can hang Open MPI 4.1's mpirun).
//!
//! Records live in shared memory: in the job's boot segment under `osrun` (indexed by job
//! rank, exits marked by the launcher), in a node segment under a host MPI (indexed by rank on
//! the node, exits marked by an exit handler).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bootstrap::call::CallTag;
use crate::error::{Error, Result};
use crate::shm::segment::Segment;

/// Bytes of one process's record (one cache line: records are written by their owner only).
pub(crate) const RECORD_BYTES: usize = 64;

/// How long a suspicion must hold before a waiter reports it.
pub(crate) const CONFIRM: Duration = Duration::from_secs(1);

/// How long a collective waits before it starts watching its peers.
const WATCH_AFTER: Duration = Duration::from_millis(5);

/// `exited` word: the process has ended.
const EXITED: u64 = 1;

/// The records of one node, in a mapped segment.
#[derive(Debug)]
pub(crate) struct Roster {
    seg: Arc<Segment>,
    offset: usize,
    len: usize,
}

impl Roster {
    /// Records for `len` processes at byte `offset` of `seg` (zero-initialised).
    pub(crate) fn new(seg: Arc<Segment>, offset: usize, len: usize) -> Result<Roster> {
        let end = len
            .checked_mul(RECORD_BYTES)
            .and_then(|b| b.checked_add(offset))
            .filter(|&e| e <= seg.len() && offset % 8 == 0);
        if end.is_none() {
            return Err(Error::Bootstrap(format!(
                "roster of {len} processes does not fit its {}-byte segment",
                seg.len()
            )));
        }
        Ok(Roster { seg, offset, len })
    }

    /// How many records it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes needed for `len` records.
    pub(crate) fn bytes(len: usize) -> Option<usize> {
        len.checked_mul(RECORD_BYTES)
    }

    fn word(&self, index: usize, word: usize) -> &AtomicU64 {
        assert!(index < self.len && word < RECORD_BYTES / 8);
        // SAFETY: inside the segment (checked in `new`), 8-byte aligned (offset and record
        // size are multiples of 8); the segment lives as long as `self`; AtomicU64 may alias
        // memory other processes access atomically.
        unsafe {
            &*self
                .seg
                .as_ptr()
                .add(self.offset + index * RECORD_BYTES + word * 8)
                .cast::<AtomicU64>()
        }
    }

    /// Marks process `index` as ended.
    pub(crate) fn mark_exited(&self, index: usize) {
        // Release: whatever the process published before it ended (its arrivals in
        // collectives) is visible to a waiter that sees the mark with Acquire.
        self.word(index, 0).store(EXITED, Ordering::Release);
    }

    fn exited(&self, index: usize) -> bool {
        // Acquire: pairs with mark_exited.
        self.word(index, 0).load(Ordering::Acquire) == EXITED
    }

    /// Publishes the collective process `index` is blocked in (0: none). The process writes
    /// its own record; a launcher copies it into the rosters of the other nodes
    /// ([`crate::launch`]), so that a wait on any node sees every member's.
    pub(crate) fn set_waiting(&self, index: usize, value: u64) {
        // Relaxed: a hint read by other waiters, confirmed over time; it publishes nothing.
        self.word(index, 1).store(value, Ordering::Relaxed);
    }

    /// The collective process `index` is blocked in, as last published (0: none).
    pub(crate) fn waiting(&self, index: usize) -> u64 {
        // Relaxed: see set_waiting.
        self.word(index, 1).load(Ordering::Relaxed)
    }

    /// Records the job rank of process `index` (for messages; the index is the rank where
    /// this is never called).
    pub(crate) fn set_rank(&self, index: usize, rank: usize) {
        // Relaxed: read only for messages, after the roster was shared by a collective.
        self.word(index, 2)
            .store(rank as u64 + 1, Ordering::Relaxed);
    }

    fn rank_of(&self, index: usize) -> usize {
        // Relaxed: see set_rank.
        match self.word(index, 2).load(Ordering::Relaxed) {
            0 => index,
            r => r as usize - 1,
        }
    }

    /// For a process `me` that is exiting cleanly: a peer blocked in a collective of a
    /// communicator or window this process belongs to (it waits for us, and we will never
    /// come), as its job rank and the call. Looks for up to `patience` — peers publish
    /// their wait when they block — and stops early once every other process has exited.
    pub(crate) fn stranded_peer(
        &self,
        me: usize,
        patience: Duration,
    ) -> Option<(usize, &'static str)> {
        let deadline = Instant::now() + patience;
        loop {
            let mut all_exited = true;
            for i in (0..self.len).filter(|&i| i != me) {
                if self.exited(i) {
                    continue;
                }
                all_exited = false;
                let theirs = self.waiting(i);
                if waits_for_us(theirs) {
                    return Some((self.rank_of(i), waiting_call(theirs)));
                }
            }
            if all_exited || Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Channels (communicators and windows) this process belongs to, by id, each with the
/// number of collectives this process has entered on it.
static MEMBERSHIPS: Mutex<Vec<(u32, Arc<AtomicU64>)>> = Mutex::new(Vec::new());

/// Collectives this process entered on `channel`, if it belongs to it.
fn entered(channel: u32) -> Option<u64> {
    MEMBERSHIPS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(c, _)| *c == channel)
        // Relaxed: written by this process only.
        .map(|(_, n)| n.load(Ordering::Relaxed))
}

/// This process's membership of a channel, registered while the value lives.
#[derive(Debug)]
pub(crate) struct Membership {
    channel: u32,
    entered: Arc<AtomicU64>,
}

impl Membership {
    /// Registers membership of `channel`.
    pub(crate) fn new(channel: u32) -> Membership {
        let entered = Arc::new(AtomicU64::new(0));
        MEMBERSHIPS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((channel, Arc::clone(&entered)));
        Membership { channel, entered }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        let mut m = MEMBERSHIPS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = m
            .iter()
            .position(|(c, n)| *c == self.channel && Arc::ptr_eq(n, &self.entered))
        {
            m.swap_remove(i);
        }
    }
}

/// The waiting word of a process blocked in collective `tag` of `channel`: the channel, the
/// low 24 bits of the sequence number and the call.
fn waiting_word(channel: u32, tag: CallTag) -> u64 {
    (u64::from(channel) << 32) | ((tag.seq & 0xff_ffff) << 8) | (tag.call.code() & CALL_BITS)
}

/// The bits of a waiting word that name the call.
const CALL_BITS: u64 = 0x7f;

/// Set in a waiting word by a process that found its collective deadlocked with a peer's
/// (see `Vigil::check`); the rest of the word stays what it was.
const DEADLOCK_SEEN: u64 = 0x80;

/// True when a peer's waiting word names a collective of one of our channels that this
/// process has not entered: the peer waits for us. (A peer still finishing a collective we
/// completed is not waiting for us, nor is one blocked in the collective we wait in.)
fn waits_for_us(word: u64) -> bool {
    word != 0
        && entered((word >> 32) as u32).is_some_and(|n| n & 0xff_ffff == (word >> 8) & 0xff_ffff)
}

/// The call a waiting word names.
fn waiting_call(word: u64) -> &'static str {
    crate::bootstrap::call::Call::from_code(word & CALL_BITS).map_or("a collective", |c| c.name())
}

/// A channel id from 64 random-ish bits shared by every member (never 0).
pub(crate) fn channel_id(seed: u64) -> u32 {
    let folded = (seed ^ (seed >> 32)) as u32;
    folded.max(1)
}

/// How the members of one communicator (or window) appear in the node's roster.
///
/// Public only because [`crate::Bootstrap::watch`] returns it; it has no public API.
#[derive(Debug, Clone)]
pub struct PeerWatch {
    roster: Arc<Roster>,
    /// Roster index of each member, by rank; `None` for members on other nodes.
    members: Arc<[Option<usize>]>,
    /// This process's rank in the channel.
    me: usize,
    /// Id of the channel (shared by every member).
    channel: u32,
    /// Registers the channel (and counts the collectives entered) while any copy lives.
    membership: Arc<Membership>,
}

impl PeerWatch {
    /// A watch over `members` (roster indices by rank) for channel `channel`.
    pub(crate) fn new(
        roster: Arc<Roster>,
        members: Vec<Option<usize>>,
        me: usize,
        channel: u32,
    ) -> PeerWatch {
        PeerWatch {
            roster,
            members: members.into(),
            me,
            channel,
            membership: Arc::new(Membership::new(channel)),
        }
    }

    /// The same members on another channel (a window over this communicator).
    pub(crate) fn for_channel(&self, channel: u32) -> PeerWatch {
        PeerWatch {
            roster: Arc::clone(&self.roster),
            members: Arc::clone(&self.members),
            me: self.me,
            channel,
            membership: Arc::new(Membership::new(channel)),
        }
    }

    /// The members `ranks` (ranks in this channel) as a new channel, with this process at
    /// position `me` of `ranks`.
    pub(crate) fn subgroup(&self, ranks: &[usize], me: usize, channel: u32) -> PeerWatch {
        let members: Vec<Option<usize>> = ranks.iter().map(|&r| self.members[r]).collect();
        PeerWatch::new(Arc::clone(&self.roster), members, me, channel)
    }

    /// The roster and this process's index in it (a process on a node of its own has no
    /// other members there; index 0 of a roster of one is never shared).
    pub(crate) fn roster(&self) -> (Arc<Roster>, usize) {
        (Arc::clone(&self.roster), self.my_index().unwrap_or(0))
    }

    /// Notes that this process entered the collective `tag` on this channel.
    #[inline]
    pub(crate) fn note_entered(&self, tag: CallTag) {
        // Relaxed: read by this process only (its exit handler).
        self.membership
            .entered
            .store(tag.seq + 1, Ordering::Relaxed);
    }

    /// A member other than this process that has exited, if any (by rank in the channel).
    pub(crate) fn exited_member(&self) -> Option<usize> {
        self.members
            .iter()
            .enumerate()
            .find(|&(rank, index)| rank != self.me && index.is_some_and(|i| self.roster.exited(i)))
            .map(|(rank, _)| rank)
    }

    /// A probe of whether member `rank` has ended, for a wait that knows no window (the
    /// network endpoint's); `None` when the roster does not record that member.
    pub(crate) fn end_probe(&self, rank: usize) -> Option<Arc<dyn Fn() -> bool + Send + Sync>> {
        let index = (*self.members.get(rank)?)?;
        let roster = Arc::clone(&self.roster);
        Some(Arc::new(move || roster.exited(index)))
    }

    /// The roster index of this process.
    fn my_index(&self) -> Option<usize> {
        self.members[self.me]
    }

    /// Starts watching the peers of the collective `tag` while it waits, and publishes the
    /// wait (a peer exiting cleanly looks for waits it strands).
    pub(crate) fn vigil(&self, tag: CallTag) -> Vigil<'_> {
        let published = self.my_index().is_some_and(|i| {
            self.roster.set_waiting(i, waiting_word(self.channel, tag));
            true
        });
        Vigil {
            watch: self,
            tag,
            started: Instant::now(),
            published,
            exit_seen: None,
            suspect: None,
            confirmed: None,
        }
    }
}

/// What one waiting collective knows about its peers.
#[derive(Debug)]
pub(crate) struct Vigil<'a> {
    watch: &'a PeerWatch,
    tag: CallTag,
    started: Instant,
    published: bool,
    /// A member seen exited before it was known to have arrived, and since when.
    exit_seen: Option<(usize, Instant)>,
    /// A member seen blocked on another channel of ours, its record, and since when.
    suspect: Option<(usize, u64, Instant)>,
    /// The deadlock found with a member (its record), and since when: told once the member
    /// has found it too (see `check`).
    confirmed: Option<(usize, u64, Instant)>,
}

impl Vigil<'_> {
    /// Called while the collective has not completed. `arrived(rank)` says whether a member
    /// is known to have entered this collective (`None`: the channel cannot tell).
    pub(crate) fn check(&mut self, arrived: impl Fn(usize) -> Option<bool>) -> Result<()> {
        if self.started.elapsed() < WATCH_AFTER {
            return Ok(());
        }
        let w = self.watch;
        let call = self.tag.call.name();
        if let Some((rank, theirs, since)) = self.confirmed {
            // This process's record shows the deadlock found (DEADLOCK_SEEN) and stays
            // published until the peer has found it too: across nodes each sees the other's
            // record a relay later, and a process that left its wait at once would look to a
            // peer still confirming like one that moved on — it would see the process's
            // exit instead. Told when the peer's record shows the deadlock too, or changed
            // (it left its wait), or after another CONFIRM.
            let now = w.members[rank].map_or(0, |i| w.roster.waiting(i));
            if now & DEADLOCK_SEEN != 0
                || now & !DEADLOCK_SEEN != theirs
                || since.elapsed() >= CONFIRM
            {
                let other = waiting_call(theirs);
                return Err(Error::CollectiveDeadlock { call, rank, other });
            }
            return Ok(());
        }
        for (rank, index) in w.members.iter().enumerate() {
            let Some(index) = *index else { continue };
            if rank == w.me {
                continue;
            }
            if w.roster.exited(index) {
                match arrived(rank) {
                    Some(true) => {}
                    Some(false) => return Err(Error::PeerExited { call, rank }),
                    None => {
                        let (r, since) = *self.exit_seen.get_or_insert((rank, Instant::now()));
                        if r == rank && since.elapsed() >= CONFIRM {
                            return Err(Error::PeerExited { call, rank });
                        }
                    }
                }
                continue;
            }
            // Blocked elsewhere in a collective of ours we have not entered (we cannot: we
            // are blocked here), while we wait for it: a deadlock once it persists. Not when
            // it is the next collective of this very channel: the peer entered it because the
            // one we wait in completed for it, and so completes for us too (across nodes our
            // wait may see that well after the peer moved on).
            let theirs = w.roster.waiting(index) & !DEADLOCK_SEEN;
            if !waits_for_us(theirs) || (theirs >> 32) as u32 == w.channel {
                if matches!(self.suspect, Some((r, _, _)) if r == rank) {
                    self.suspect = None;
                }
                continue;
            }
            match self.suspect {
                Some((r, v, since)) if r == rank && v == theirs => {
                    if since.elapsed() >= CONFIRM {
                        match w.my_index().filter(|_| self.published) {
                            Some(i) => {
                                let mine = waiting_word(w.channel, self.tag);
                                w.roster.set_waiting(i, mine | DEADLOCK_SEEN);
                                self.confirmed = Some((rank, theirs, Instant::now()));
                                return Ok(());
                            }
                            None => {
                                let other = waiting_call(theirs);
                                return Err(Error::CollectiveDeadlock { call, rank, other });
                            }
                        }
                    }
                }
                Some((r, _, _)) if r != rank => {}
                _ => self.suspect = Some((rank, theirs, Instant::now())),
            }
        }
        Ok(())
    }
}

impl Drop for Vigil<'_> {
    fn drop(&mut self) {
        if self.published {
            if let Some(i) = self.watch.my_index() {
                self.watch.roster.set_waiting(i, 0);
            }
        }
    }
}
