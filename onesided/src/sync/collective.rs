//! Collective agreements of a window: fence, free and set_info meet in one barrier of the
//! window's node segment and check each other's [`CallTag`] there.
//!
//! A window numbers its collective calls itself, like the communicator MPI creates inside
//! every window: collectives on the window and on the communicator it was created from are
//! independent, and a mismatch on either is an error at every process (see
//! `bootstrap::roster` for the waits that never meet). The barrier's own signals carry the
//! tags (`shm::barrier`), so matching costs nothing on the fast path; each rank also
//! publishes its tag (read only to name a mismatch, and by waiters checking arrivals) and
//! one payload word before the barrier, and reads the payload words after it. Two copies alternate by
//! sequence parity: a rank can be at most one collective ahead, so it never overwrites a
//! word a slower rank has still to read.

use std::sync::atomic::Ordering;

use crate::bootstrap::roster::PeerWatch;
use crate::bootstrap::{Call, CallTag};
use crate::error::{Error, Result};
use crate::plane::{AgreementPart, Awaited, ControlPlane, CtrlWord};
use crate::progress::{Completes, Host, Step, SyncOp, Waiting};
use crate::shm::barrier::BarrierWait;
use crate::win::core::WinCore;

/// One window collective in progress at this rank.
#[derive(Debug)]
pub(crate) struct Agreement {
    pub(crate) tag: CallTag,
    /// The published tag and word are applied (the plane ordered them before the barrier's
    /// signals).
    published: bool,
    wait: BarrierWait,
}

impl Agreement {
    fn parity(&self) -> u64 {
        self.tag.seq & 1
    }
}

/// Rank `at`'s published `part` for agreements of `parity`.
fn published(at: usize, parity: u64, part: AgreementPart) -> CtrlWord {
    CtrlWord::Agreement { at, parity, part }
}

impl WinCore {
    /// Enters the collective `call` with this rank's payload `word`: numbers the call and
    /// publishes tag and word. Poll the result with [`WinCore::poll_agreement`].
    #[inline]
    pub(crate) fn enter_agreement(&self, call: Call, word: u64) -> Agreement {
        // Relaxed: numbers this window's collectives, which its caller makes one at a time.
        let seq = self.collectives.fetch_add(1, Ordering::Relaxed);
        let tag = CallTag { call, seq };
        if let Some(w) = &self.watch {
            w.note_entered(tag);
        }
        let parity = seq & 1;
        // Relaxed: both are published by the barrier's release signals (ordered before
        // them by `order_posted` in the first poll).
        let me = self.rank;
        let plane = &self.plane();
        plane.post_store(
            published(me, parity, AgreementPart::Word),
            word,
            Ordering::Relaxed,
        );
        plane.post_store(
            published(me, parity, AgreementPart::Tag),
            tag.pack(),
            Ordering::Relaxed,
        );
        // A fence's barrier signals unawaited: nothing after a fence needs this rank's
        // signals delivered (every partner's own signals tell it got ours far enough; a
        // window's free is an agreement of its own that delivers its signals, which travel
        // behind these), so the next completion does not wait a round trip for them.
        let wait = match call {
            Call::Fence => self.barrier.begin_unawaited(tag.pack()),
            _ => self.barrier.begin(tag.pack()),
        };
        Agreement {
            tag,
            published: false,
            wait,
        }
    }

    /// Advances `a`; true once every rank has entered the same call (an error at every rank
    /// when any rank entered another).
    pub(crate) fn poll_agreement(&self, a: &mut Agreement) -> Result<bool> {
        if !a.published {
            self.plane().order_posted()?;
            a.published = true;
        }
        if !self.barrier.poll_on(&self.plane(), &mut a.wait)? {
            return Ok(false);
        }
        // Our last signals are posted: delivered before we leave the collective (a process
        // that frees the window and exits could take them along; nothing to wait for on
        // shared memory) — unless they go unawaited (a fence's; see `enter_agreement`).
        if !a.wait.unawaited() {
            self.plane().order_posted()?;
        }
        if !a.wait.mismatched() {
            return Ok(true);
        }
        // The barrier's signals carried the tags and found a difference: name it.
        let parity = a.parity();
        for r in 0..self.size {
            // Relaxed: ordered by the barrier's acquire. Through the plane: a rank on
            // another node published its tag in its own node's words — and may have left
            // since (its failed call returned): the naming gives up on a read that stays
            // unanswered, or fails.
            let plane = self.plane();
            let read = plane.load(published(r, parity, AgreementPart::Tag), Ordering::Relaxed);
            let patience = std::time::Duration::from_secs(1);
            if let Ok(Some(theirs)) = Awaited::from(read).wait_at_most(&plane, patience) {
                a.tag.check(r, theirs)?;
            }
        }
        Err(Error::CollectiveMismatch {
            call: a.tag.call.name(),
            seq: a.tag.seq,
            rank: self.rank,
            other: "a different collective call",
            other_seq: a.tag.seq,
        })
    }

    /// Rank `rank`'s payload word of the completed agreement `a`.
    pub(crate) fn agreed_word(&self, a: &Agreement, rank: usize) -> Result<u64> {
        // Relaxed: ordered by the barrier's acquire (the agreement completed).
        let word = published(rank, a.parity(), AgreementPart::Word);
        Awaited::from(self.plane().load(word, Ordering::Relaxed)).wait(&self.plane())
    }

    /// Blocking agreement: every rank's payload word, by rank.
    pub(crate) fn agree_words(&self, call: Call, word: u64) -> Result<Vec<u64>> {
        let agreement = self.enter_agreement(call, word);
        let tag = agreement.tag;
        let op = AgreeOp {
            agreement: Some(agreement),
            trailing: None,
            result: std::sync::Arc::default(),
        };
        let result = std::sync::Arc::clone(&op.result);
        self.engine.run_collective(self, op, tag)?;
        let words = std::mem::take(
            &mut *result
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        Ok(words)
    }
}

impl WinCore {
    /// What agreement `a` (of the collective `call`) waits for: the members that have not
    /// entered it yet, as their published tags tell (on the mapped blocks; across nodes the
    /// words are not read for a report).
    pub(crate) fn waiting_in_collective(&self, call: &'static str, a: &Agreement) -> Waiting {
        let plane = self.plane();
        if !plane.is_mapped() {
            return Waiting::new(call, format!("collective #{} of the window", a.tag.seq));
        }
        let mut behind = Vec::new();
        let mut elsewhere = Vec::new();
        for r in (0..self.size).filter(|&r| r != self.rank) {
            let word = published(r, a.parity(), AgreementPart::Tag);
            let Ok(theirs) = Awaited::from(plane.load(word, Ordering::Relaxed)).wait(&plane) else {
                continue;
            };
            match CallTag::unpack(theirs) {
                Some(t) if t.seq == a.tag.seq && t.call == a.tag.call => {}
                Some(t) if t.seq == a.tag.seq => elsewhere.push(format!(
                    "rank {r} entered {} instead (erroneous)",
                    t.call.mpi_name()
                )),
                _ => behind.push(r),
            }
        }
        let mut w = Waiting::new(
            call,
            format!(
                "collective #{} of the window: ranks {behind:?} have not entered it{}",
                a.tag.seq,
                elsewhere
                    .iter()
                    .map(|e| format!("; {e}"))
                    .collect::<String>()
            ),
        );
        if let [peer] = behind[..] {
            w = w.on(peer);
        }
        w
    }
}

impl Host for WinCore {
    fn aborted(&self) -> bool {
        self.comm.aborted()
    }

    fn report_requested(&self) -> bool {
        self.comm.report_requested()
    }

    fn id(&self) -> u64 {
        self.window_id()
    }

    fn describe(&self, waiting: &Waiting) -> String {
        let plane = self.plane();
        let value = match (&waiting.word, plane.is_mapped()) {
            (Some((word, need)), true) => match plane.load(*word, Ordering::Relaxed) {
                // A count in decimal, a lock word's bits in hex.
                crate::plane::Answer::Ready(v) if need.is_some() => {
                    format!("; the count is {v} now")
                }
                crate::plane::Answer::Ready(v) => format!("; the word holds {v:#x} now"),
                crate::plane::Answer::Pending(_) => String::new(),
            },
            _ => String::new(),
        };
        format!(
            "window {:#x} (this process is rank {} of {}): {waiting}{value}",
            self.window_id(),
            self.rank,
            self.size
        )
    }

    fn reorder(&self) -> crate::progress::Reorder {
        // Relaxed: see `WinCore::reorder`.
        crate::progress::Reorder::from_bits(self.reorder.load(Ordering::Relaxed))
    }

    fn watch(&self) -> Option<&PeerWatch> {
        self.watch.as_ref()
    }

    #[inline]
    fn complete_issued(&self, scope: Completes) -> Result<()> {
        WinCore::complete_issued(self, scope)
    }

    /// Asked about a member that exited: it counts as arrived only if it entered this very
    /// call under this sequence number. A different call under the same number (a fence
    /// that failed against our `free`, say) is not an arrival: its agreement ended without
    /// ours, and the member is gone, so waiting for it would never end.
    fn arrived(&self, tag: CallTag, rank: usize) -> Option<bool> {
        // Across nodes the member's words went with it (its endpoint is closed): no
        // arrival can be told. A member that finished the collective and exited while our
        // last poll had not yet seen its final signals looks the same as one that never
        // entered, so the waiter reports the exit only once it persists (`CONFIRM`).
        if !self.plane().is_mapped() {
            return None;
        }
        // Relaxed: a hint for a waiter, read after the roster's Acquire of an exit mark. A
        // read that fails is no arrival.
        let word = published(rank, tag.seq & 1, AgreementPart::Tag);
        Some(
            Awaited::from(self.plane().load(word, Ordering::Relaxed))
                .wait(&self.plane())
                .ok()
                .and_then(CallTag::unpack)
                .is_some_and(|t| t.seq == tag.seq && t.call == tag.call),
        )
    }
}

/// The blocking agreement as a queued op (it activates after earlier synchronizations).
struct AgreeOp {
    agreement: Option<Agreement>,
    /// On the network plane, a second barrier after the words were read: a process that
    /// leaves the collective (and frees the window, and exits) must not take its words
    /// away while another still reads them. The mapped blocks stay mapped by every reader.
    trailing: Option<BarrierWait>,
    result: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
}

impl SyncOp<WinCore> for AgreeOp {
    fn name(&self) -> &'static str {
        "a window collective"
    }

    /// Window collectives (free, set_info, …) run after everything issued before them.
    fn completes(&self) -> Completes {
        Completes::All
    }

    fn waiting(&self, core: &WinCore) -> Waiting {
        match &self.agreement {
            Some(a) => core.waiting_in_collective(a.tag.call.mpi_name(), a),
            None => Waiting::new(
                "a window collective",
                "the closing barrier after the words were read",
            ),
        }
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        if let Some(wait) = self.trailing.as_mut() {
            if !core.barrier.poll_on(&core.plane(), wait)? {
                return Ok(Step::Blocked);
            }
            // Our closing signals are delivered before we leave (a peer must not lose one
            // to our exit). A member that ended cleanly since — it passed this barrier too —
            // needs nothing more from us, but over a datagram provider the acknowledgement
            // of our signal to it can be lost as its endpoint closes, and the wait would
            // then end in `PeerGone` (its exit vigil: no completion for a grace period, in
            // which the running members' acknowledgements had time to come). The
            // collective is complete.
            match core.plane().order_posted() {
                Ok(()) | Err(Error::PeerGone { .. }) => {}
                Err(e) => return Err(e),
            }
            self.trailing = None;
            return Ok(Step::Done);
        }
        let Some(a) = self.agreement.as_mut() else {
            return Ok(Step::Done);
        };
        if !core.poll_agreement(a)? {
            return Ok(Step::Blocked);
        }
        let words = (0..core.size)
            .map(|r| core.agreed_word(a, r))
            .collect::<Result<_>>()?;
        *self
            .result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = words;
        let tag = a.tag;
        self.agreement = None;
        if core.plane().is_mapped() {
            return Ok(Step::Done);
        }
        self.trailing = Some(core.barrier.begin(tag.pack()));
        self.poll(core)
    }
}

#[cfg(test)]
mod tests {
    //! The agreement protocol — publish tag and word (posted), order them, barrier, read
    //! every rank's word — against a plane that answers late and reorders.

    use super::*;
    use crate::plane::fake::LatePlane;
    use crate::shm::barrier::{Barrier, BarrierLayout};
    use std::sync::atomic::AtomicU64;

    #[test]
    fn agreed_words_over_a_late_reordering_plane() {
        const N: usize = 3;
        const ROUNDS: u64 = 8;
        for seed in 1..60u64 {
            let plane = LatePlane::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let layout = BarrierLayout::new(N);
            let mem: Vec<AtomicU64> = (0..layout.bytes() / 8).map(|_| AtomicU64::new(0)).collect();
            // SAFETY: `mem` outlives the handles (their own memory is unused here).
            let barriers: Vec<Barrier> = (0..N)
                .map(|me| unsafe { Barrier::new(mem.as_ptr().cast(), layout, me) })
                .collect();
            let payload = |rank: usize, g: u64| 1000 * g + rank as u64;
            // Each rank: its round, and its agreement in progress (published yet?).
            let mut round = [0u64; N];
            let mut waits: Vec<Option<(bool, BarrierWait)>> = (0..N).map(|_| None).collect();
            let mut rng = seed;
            let mut steps = 0;
            while round.iter().any(|&g| g < ROUNDS) {
                steps += 1;
                assert!(steps < 1_000_000, "seed {seed}: agreements do not end");
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let me = (rng % N as u64) as usize;
                let g = round[me];
                if g == ROUNDS {
                    continue;
                }
                let parity = g & 1;
                let Some((ordered, wait)) = &mut waits[me] else {
                    let word = published(me, parity, AgreementPart::Word);
                    plane.post_store(word, payload(me, g), Ordering::Relaxed);
                    waits[me] = Some((false, barriers[me].begin(g)));
                    continue;
                };
                if !*ordered {
                    plane.order_posted().unwrap();
                    *ordered = true;
                }
                if barriers[me].poll_on(&plane, wait).unwrap() {
                    for r in 0..N {
                        let read = plane
                            .load(published(r, parity, AgreementPart::Word), Ordering::Relaxed);
                        let got = Awaited::from(read).wait(&plane).unwrap();
                        assert_eq!(
                            got,
                            payload(r, g),
                            "seed {seed}: rank {me} read rank {r}'s word of agreement {g}"
                        );
                    }
                    waits[me] = None;
                    round[me] += 1;
                }
            }
        }
    }
}
