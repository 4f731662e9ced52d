//! Passive-target locks: the two-level protocol of [Gerstenberger13] §2.3, made starvation free.
//!
//! **Words.** A *global* word (in the window header, the "master" of [Gerstenberger13]) counts
//! `lock_all` holders and processes holding exclusive locks; the two classes exclude each
//! other. A *local* word per rank is a reader-writer lock: a reader count and a writer bit.
//!
//! ```text
//! local word   bits 0..31 readers · bit 32 writer · bit 33 unclassed · bits 48..63 queue head
//! global word  bits 0..23 exclusive holders · bits 24..47 lock_all holders · bits 48..63 head
//! ```
//!
//! **Fast path** (no contention), as in [Gerstenberger13]: shared lock = one fetch-add on the local
//! word; exclusive lock = one fetch-add on the global word (first exclusive lock of this
//! process only) + one compare-and-swap on the local word; lock_all = one fetch-add on the
//! global word; unlock = one atomic (+1 on the global word for the last exclusive lock).
//!
//! **Slow path.** foMPI's protocol lets a writer retry forever while readers keep arriving.
//! Here a request that fails its fast attempt retries it on its next [`PATIENCE`] polls
//! (looking at the word first, so that a retry bound to fail does not take the line from the
//! holder), then takes a ticket of a FIFO queue beside the
//! word (an MCS-like queue, as [Gerstenberger13] suggests, in two counters: `next`, `serving`).
//! The request at the head sets a *head* mark in the word; every later fast attempt sees the
//! mark and queues instead, so the head only waits for the holders already inside. The head
//! then acquires, clears its mark in the same atomic step, and serves the next ticket. Readers
//! behind a reader head enter back to back. Every waiter is bounded by the requests ahead of
//! it (and by at most [`PATIENCE`] retries before it queues): no writer (or lock_all)
//! starves under a stream of shared lockers, and vice versa.
//! Waiting is polling with exponential backoff (`backoff`).
//!
//! **Control plane.** The acquisition and the release are written against
//! [`ControlPlane`]: a word is named ([`LockAt`], [`LockPart`]), never an address, and every
//! step that needs an answer (an attempt's previous value, a ticket, a look at `serving` or
//! the word) keeps it in the [`Acquisition`] until the plane gives it. On shared memory
//! every answer is ready at once and the machine costs what the direct atomics did
//! (`scripts/instr-count.sh`); the unit tests run it against a plane that answers late and
//! applies operations in a shuffled order (exclusion, and no writer starvation). What
//! needs no answer is *posted*: backing out of a failed attempt, handing `serving` on, the
//! release — increments that commute with whatever may overtake them.
//! Parked memberships (below) read the mapped global word and the owners'
//! `parked_exclusive` words directly on one node; across nodes they go through the plane
//! (`CtrlWord::Parked`) and never read the global word.
//!
//! The retries matter under contention: a ticket costs four more atomics on the contended
//! line and hands the lock strictly in turn, while a lock held for ~100 ns is usually free
//! again a poll later, often still in the cache of the process that just released it
//! (hot-spot `transactions`: blocking up to 1.5× faster, see docs/performance.md).
//!
//! **Parked memberships.** In the protocol above every exclusive lock of a process that held
//! none writes the global word twice (join the exclusive class, leave it), and every process
//! doing exclusive epochs to anyone writes that one line: under a stream of exclusive
//! epochs it is the hottest line of the window although lock_all, the only thing it guards
//! against, never comes. So the last exclusive unlock of a process *parks* its membership
//! instead of leaving: it stays counted in the global word and the process sets its own
//! `parked_exclusive` word (its own cache line) to 1. Its next first exclusive lock takes the
//! membership back with one swap of that word and one plain load of the global word — no
//! write to a shared line. A lock_all that finds exclusive members takes parked ones back on
//! their owners' behalf (swap the owner's word 1 → 0, then leave the class for it); the
//! swap decides who owns a parked membership, so it is used exactly once. A process that
//! takes its membership back while a lock_all waits or holds (the global word shows a head
//! mark or lock_all holders) gives it up and queues as before, so lock_all is not starved:
//! per process, the global word counts the exclusive locks that joined the class plus the
//! parked membership.
//!
//! **Parked memberships across nodes.** On a window across nodes the global word is at
//! rank 0, a round trip away from the other nodes, and each first exclusive lock of a
//! process there paid one to join the class (in `transactions` on 2 ranks over 2 nodes,
//! skipping the join made every variant 1.2–1.4× faster). Where the words of this node
//! mix with the network's atomics (`NetPlane::mixes_with_cpu`), a process parks as above,
//! but never looks at the global word: its `parked_exclusive` word holds 0 (nothing
//! parked), 1 (parked) or 2 (a lock_all asked for the class). Parking is one CAS 0 → 1
//! on its own word, taking back one CAS 1 → 0 — both CPU atomics. A lock_all that finds
//! exclusive members swaps every rank's word to 2 (through the network for other nodes)
//! and leaves the class on behalf of each that held 1; an owner whose word is 2 cannot
//! park (it leaves the class at its last unlock) nor take back (it joins through the global
//! word, where the lock_all's head mark queues it), and clears the 2 once such a join
//! succeeds. So a lock_all waits for at most one epoch of each exclusive member after its
//! first round of marks.
//!
//! **Exclusive locks before the first lock_all** (one node). The exclusive class exists only
//! to exclude lock_all, and most programs that lock exclusively never call it. So until a
//! lock_all is first asked for on a window (the header's `lock_all_used` word, 0), an
//! uncontended exclusive lock of a window of one node skips the class: it sets the writer bit
//! together with an *unclassed* mark (one compare-and-swap, SeqCst), then reads
//! `lock_all_used` again (SeqCst); if a lock_all was asked for meanwhile it gives the word
//! back and locks the usual way. Its unlock clears both bits, and neither parks nor leaves a
//! membership: the pair costs two locked instructions instead of four. A lock_all first
//! sets `lock_all_used` to 1 (SeqCst), then reads every rank's local word (SeqCst) until it
//! has seen each without the mark once — in the total order of SeqCst operations, a locker
//! either read the 1 (and backed out) or set its mark before the lock_all's read of that
//! word — and sets 2: no unclassed holder is left, and none can come, since every later
//! locker reads a non-zero word. The lock_all waits for that drain before it asks for the
//! global word, holding nothing meanwhile: a process that holds an unclassed lock and asks
//! for another exclusive lock (through the class now) is never waited for by a lock_all it
//! waits for. Across nodes every exclusive lock joins the class, as before.
//!
//! **Releases without answers.** Across nodes, where our wire reaches the target, an unlock
//! whose epoch has nothing waiting for an answer there (no atomic, or all answered; its RMA
//! writes completed first) releases with a message nobody answers and returns: the target
//! applies it behind everything this process sent it, a later lock of this process to it
//! behind the release, and another process's lock waits for it as for any holder's. An
//! empty exclusive lock/unlock pair across two nodes then costs one round trip, not two
//! (`osbench sync-latency`: unlock 14.7–22.5 → 6.1–8.5 µs, alternating builds).
//!
//! **Memberships in transit.** Otherwise an unlock across nodes waits for the answer to its
//! release ([`UnlockOp::InOrder`]), and a nonblocking lock of the same target may already run
//! behind it (`progress::Queued::lets_open_early`). When that unlock was the last exclusive
//! one, the membership it would park is still counted in the global word while the answer
//! travels: the later lock takes it over ([`InTransit`](crate::win::core::InTransit)) instead of finding nothing parked
//! and joining through rank 0's word (a round trip) — unless a lock_all asked for the class
//! (the parked word holds 2): then it joins and queues as above. The unlock whose
//! membership was taken leaves nothing when its answer comes; every membership still has
//! exactly one holder — an open epoch, an unlock in transit, or the parked word.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::plane::{Answer, Awaited, ControlPlane, CtrlWord, LockAt, LockPart, MappedWords};
use crate::progress::{blocking_start, Completes, Order, Step, SyncOp, Ticket, Waiting};
use crate::request::Request;
use crate::sync::{Assert, LockType};
use crate::transport::network::Only;
use crate::win::core::WinCore;
use crate::win::epoch::{HeldLock, Release, Transition};
use crate::win::RawWindow;

const READER: u64 = 1;
const READERS: u64 = 0xFFFF_FFFF;
const WRITER: u64 = 1 << 32;
/// Beside [`WRITER`]: an exclusive holder outside the exclusive class (module docs).
const UNCLASSED: u64 = 1 << 33;
/// `lock_all_used`: no lock_all was asked for on the window yet.
const ALL_NEVER: u64 = 0;
/// `lock_all_used`: a lock_all was asked for; unclassed holders may still be inside.
const ALL_ASKED: u64 = 1;
/// `lock_all_used`: no unclassed holder is left, and none can come.
const ALL_DRAINED: u64 = 2;
const HEAD: u64 = 1 << 48;
const HEAD_MASK: u64 = 0xFFFF << 48;
const EXCLUSIVE_ONE: u64 = 1;
const EXCLUSIVE_MASK: u64 = 0xFF_FFFF;
const LOCK_ALL_ONE: u64 = 1 << 24;
const LOCK_ALL_MASK: u64 = 0xFF_FFFF << 24;
/// A parked word across nodes: a membership is parked.
const PARKED: u64 = 1;
/// A parked word across nodes: a lock_all asked for the exclusive class.
const LOCK_ALL_ASKS: u64 = 2;

/// How a request uses a lock word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Shared holder of a local word.
    Reader,
    /// Exclusive holder of a local word.
    Writer,
    /// One member of a class of the global word; classes exclude each other.
    Class { one: u64, other: u64 },
}

impl Mode {
    /// Exclusive lockers at the global word.
    pub(crate) const EXCLUSIVE: Mode = Mode::Class {
        one: EXCLUSIVE_ONE,
        other: LOCK_ALL_MASK,
    };
    /// lock_all holders at the global word.
    pub(crate) const LOCK_ALL: Mode = Mode::Class {
        one: LOCK_ALL_ONE,
        other: EXCLUSIVE_MASK,
    };

    fn local(kind: LockType) -> Mode {
        match kind {
            LockType::Shared => Mode::Reader,
            LockType::Exclusive => Mode::Writer,
        }
    }

    /// What a holder in this mode adds to the word.
    #[inline(always)]
    pub(crate) fn one(self) -> u64 {
        match self {
            Mode::Reader => READER,
            Mode::Writer => WRITER,
            Mode::Class { one, .. } => one,
        }
    }

    /// The bits of the word that make an attempt without queueing fail (a writer needs the
    /// word empty).
    #[inline(always)]
    fn blockers(self) -> u64 {
        match self {
            Mode::Reader => WRITER | HEAD_MASK,
            Mode::Writer => u64::MAX,
            Mode::Class { other, .. } => other | HEAD_MASK,
        }
    }

    /// Issues one attempt without queueing. Acquire: the lock's previous holders' writes
    /// (released by their unlock) are visible to us.
    #[inline(always)]
    fn attempt<P: ControlPlane + ?Sized>(self, plane: &P, word: CtrlWord) -> Answer {
        match self {
            Mode::Writer => plane.compare_swap(word, 0, WRITER, Ordering::Acquire),
            Mode::Reader | Mode::Class { .. } => {
                plane.fetch_add(word, self.one(), Ordering::Acquire)
            }
        }
    }

    /// Whether the attempt that found the word at `before` acquired. A reader's or class
    /// member's failed attempt counted itself in: it backs out (posted — we neither hold
    /// the lock nor block anyone for long, and the decrement commutes with everything).
    #[inline(always)]
    fn attempted<P: ControlPlane + ?Sized>(self, plane: &P, word: CtrlWord, before: u64) -> bool {
        if before & self.blockers() == 0 {
            return true;
        }
        self.back_out(plane, word);
        false
    }

    #[cold]
    #[inline(never)]
    fn back_out<P: ControlPlane + ?Sized>(self, plane: &P, word: CtrlWord) {
        if self != Mode::Writer {
            plane.post_add(word, self.one().wrapping_neg(), Ordering::Relaxed);
        }
    }

    /// Whether the head of the queue may acquire with the word at `v`: only the holders
    /// already inside are in its way (its mark keeps every later attempt out).
    fn head_may_take(self, v: u64) -> bool {
        match self {
            Mode::Reader => v & WRITER == 0,
            Mode::Writer => v & (WRITER | READERS) == 0,
            Mode::Class { other, .. } => v & other == 0,
        }
    }

    /// Issues the head's acquisition from `v`: it takes the lock and clears its mark in one
    /// atomic step, so the check and the update cannot be separated by a conflicting
    /// acquisition. A writer's compare-and-swap may find the word changed (a reader's
    /// failed attempt coming or going): see [`Mode::head_took`].
    fn head_take<P: ControlPlane + ?Sized>(self, plane: &P, word: CtrlWord, v: u64) -> Answer {
        match self {
            Mode::Writer => plane.compare_swap(word, v, v - HEAD + WRITER, Ordering::Acquire),
            Mode::Reader | Mode::Class { .. } => {
                plane.fetch_add(word, self.one().wrapping_sub(HEAD), Ordering::Acquire)
            }
        }
    }

    /// Whether the head's acquisition issued from `v`, which found the word at `before`,
    /// took the lock.
    fn head_took(self, v: u64, before: u64) -> bool {
        self != Mode::Writer || before == v
    }
}

/// Polls after a failed fast attempt that retry it before the acquisition takes a ticket
/// (see the module docs). Same-run A/B, hot-spot `transactions`, 2 ranks: 4, 8, 16 and 32
/// all gain about equally over no retry; 8 bounds how often a waiter can be passed.
const PATIENCE: u32 = 8;

/// Where an acquisition stands. A phase that waits for the plane's answer to an operation
/// it issued keeps that answer in [`Acquisition`] (on shared memory every answer is ready
/// at once, and those phases are passed within one poll).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not tried yet.
    Fast,
    /// An attempt without queueing issued; `left`: the retries left when it fails, plus one
    /// (at 1 a failure takes a ticket).
    Trying { left: u32 },
    /// The fast attempt failed; this many more polls retry it before queueing.
    Retry(u32),
    /// The look at the word before a retry issued (`left` as in `Trying`).
    Looking { left: u32 },
    /// Taking a ticket.
    Ticketing,
    /// Waiting for our ticket to be served (reading `serving`).
    Queued(u64),
    /// Our ticket is served: setting the head mark.
    Marking,
    /// Head of the queue, waiting for the holders inside to leave (reading the word).
    Head,
    /// The head's acquisition issued, with the word at `seen`.
    Taking { seen: u64 },
    /// Held.
    Acquired,
}

/// One acquisition in progress: its phase and the answer the phase waits for.
///
/// (The answer lives beside the phase, not inside its variants: with it inside, rustc
/// 1.95 at opt-level 3 kept a stale register for the ticket across the Ticketing → Queued
/// step of a writer, and the acquisition stopped at Queued for ever — `queued_after_ticket`
/// below catches it in a release build.)
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Acquisition {
    phase: Phase,
    /// The plane's answer to the operation the phase issued; `None`: nothing asked.
    asked: Option<Awaited>,
}

impl Acquisition {
    /// Not tried yet.
    pub(crate) const fn new() -> Acquisition {
        Acquisition {
            phase: Phase::Fast,
            asked: None,
        }
    }

    /// True before the first attempt.
    #[inline]
    pub(crate) fn is_fresh(&self) -> bool {
        self.phase == Phase::Fast
    }

    /// True once the lock is held.
    pub(crate) fn is_acquired(&self) -> bool {
        self.phase == Phase::Acquired
    }

    /// Marks the lock held without asking the plane (a parked membership taken back).
    pub(crate) fn set_acquired(&mut self) {
        self.phase = Phase::Acquired;
    }

    /// The phase (tests).
    #[cfg(test)]
    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// Records the operation the next phase waits for.
    #[inline]
    fn ask(&mut self, phase: Phase, answer: Answer) {
        self.phase = phase;
        self.asked = Some(Awaited::from(answer));
    }

    /// The answer the phase waits for, once the plane gave it (it is consumed).
    #[inline]
    fn answer<P: ControlPlane + ?Sized>(&mut self, plane: &P) -> Result<Option<u64>> {
        let Some(asked) = self.asked.as_mut() else {
            return Ok(None);
        };
        let Some(v) = asked.value(plane)? else {
            return Ok(None);
        };
        self.asked = None;
        Ok(Some(v))
    }
}

/// The word of `lock` that holds its holders.
#[inline]
fn lock_word(lock: LockAt) -> CtrlWord {
    CtrlWord::Lock {
        lock,
        part: LockPart::Word,
    }
}

/// Advances an acquisition of `lock` through `plane`; true once the lock is held (an error:
/// the plane failed an operation). Always
/// inlined: the uncontended attempt is the whole of an uncontended lock (out of line it
/// cost lock + unlock 20 instructions more).
#[inline(always)]
pub(crate) fn poll_acquire<P: ControlPlane + ?Sized>(
    plane: &P,
    lock: LockAt,
    mode: Mode,
    acq: &mut Acquisition,
) -> Result<bool> {
    if acq.phase == Phase::Fast {
        let word = lock_word(lock);
        return match mode.attempt(plane, word) {
            Answer::Ready(before) => {
                let acquired = mode.attempted(plane, word, before);
                acq.phase = if acquired {
                    Phase::Acquired
                } else {
                    Phase::Retry(PATIENCE)
                };
                Ok(acquired)
            }
            pending => {
                acq.ask(Phase::Trying { left: PATIENCE + 1 }, pending);
                Ok(false)
            }
        };
    }
    poll_contended(plane, lock, mode, acq)
}

/// [`poll_acquire`] after a failed (or unanswered) fast attempt: out of line, so that an
/// uncontended lock costs what it did before the retries existed.
#[inline(never)]
fn poll_contended<P: ControlPlane + ?Sized>(
    plane: &P,
    lock: LockAt,
    mode: Mode,
    acq: &mut Acquisition,
) -> Result<bool> {
    let word = lock_word(lock);
    let serving = CtrlWord::Lock {
        lock,
        part: LockPart::Serving,
    };
    loop {
        match acq.phase {
            // The first attempt is poll_acquire's own.
            Phase::Fast => return poll_acquire(plane, lock, mode, acq),
            Phase::Trying { left } => {
                let Some(before) = acq.answer(plane)? else {
                    return Ok(false);
                };
                if mode.attempted(plane, word, before) {
                    acq.phase = Phase::Acquired;
                } else if attempt_failed(plane, lock, left, acq) {
                    return Ok(false);
                }
            }
            // Relaxed: a look, so that a retry bound to fail leaves the holder's line
            // alone; the attempt itself acquires.
            Phase::Retry(left) => {
                acq.ask(Phase::Looking { left }, plane.load(word, Ordering::Relaxed));
            }
            Phase::Looking { left } => {
                let Some(v) = acq.answer(plane)? else {
                    return Ok(false);
                };
                if v & mode.blockers() == 0 {
                    acq.ask(Phase::Trying { left }, mode.attempt(plane, word));
                } else if attempt_failed(plane, lock, left, acq) {
                    return Ok(false);
                }
            }
            Phase::Ticketing => {
                let Some(ticket) = acq.answer(plane)? else {
                    return Ok(false);
                };
                acq.phase = Phase::Queued(ticket);
            }
            Phase::Queued(ticket) => {
                // Acquire: pairs with the previous head's Release of `serving`.
                if acq.asked.is_none() {
                    acq.ask(
                        Phase::Queued(ticket),
                        plane.load(serving, Ordering::Acquire),
                    );
                }
                let Some(now) = acq.answer(plane)? else {
                    return Ok(false);
                };
                if now != ticket {
                    return Ok(false);
                }
                // Relaxed: all updates of the word are RMWs, totally ordered; every fast
                // attempt after this one sees the mark.
                acq.ask(
                    Phase::Marking,
                    plane.fetch_add(word, HEAD, Ordering::Relaxed),
                );
            }
            Phase::Marking => {
                if acq.answer(plane)?.is_none() {
                    return Ok(false);
                }
                acq.phase = Phase::Head;
            }
            Phase::Head => {
                if acq.asked.is_none() {
                    acq.ask(Phase::Head, plane.load(word, Ordering::Acquire));
                }
                let Some(v) = acq.answer(plane)? else {
                    return Ok(false);
                };
                if !mode.head_may_take(v) {
                    return Ok(false);
                }
                acq.ask(Phase::Taking { seen: v }, mode.head_take(plane, word, v));
            }
            Phase::Taking { seen } => {
                let Some(before) = acq.answer(plane)? else {
                    return Ok(false);
                };
                if !mode.head_took(seen, before) {
                    acq.phase = Phase::Head;
                    return Ok(false);
                }
                // Release: hands the head on after our acquisition was applied (it was
                // answered), so the next head's mark cannot meet ours.
                plane.post_add(serving, 1, Ordering::Release);
                acq.phase = Phase::Acquired;
            }
            Phase::Acquired => return Ok(true),
        }
    }
}

/// After a failed attempt with `left` retries (plus one) left: either waits for the next
/// poll to retry (true: stop polling) or takes a ticket (false: go on).
fn attempt_failed<P: ControlPlane + ?Sized>(
    plane: &P,
    lock: LockAt,
    left: u32,
    acq: &mut Acquisition,
) -> bool {
    if left > 1 {
        acq.phase = Phase::Retry(left - 1);
        return true;
    }
    // Relaxed: the ticket only orders us among waiters; the hand-over of the head is
    // ordered by `serving` (Release/Acquire).
    let next = CtrlWord::Lock {
        lock,
        part: LockPart::Next,
    };
    acq.ask(
        Phase::Ticketing,
        plane.fetch_add(next, 1, Ordering::Relaxed),
    );
    false
}

/// Releases `lock`, held in `mode`. Release: our writes under the lock are visible to the
/// next holder (the epoch's RMA completed before: the unlock's completion point). Posted:
/// the lock is given back, whenever the plane applies it.
#[inline(always)]
pub(crate) fn release<P: ControlPlane + ?Sized>(plane: &P, lock: LockAt, mode: Mode) {
    plane.post_add(
        lock_word(lock),
        mode.one().wrapping_neg(),
        Ordering::Release,
    );
}

/// Releases the local word of `lock` (nothing for a NOCHECK lock; an unclassed one clears
/// its mark too), as [`release`].
#[inline(always)]
fn release_held<P: ControlPlane + ?Sized>(plane: &P, lock: &HeldLock) {
    if lock.nocheck {
        return;
    }
    let held = match lock.unclassed {
        true => WRITER | UNCLASSED,
        false => Mode::local(lock.kind).one(),
    };
    plane.post_add(
        lock_word(LockAt::Local(lock.target)),
        held.wrapping_neg(),
        Ordering::Release,
    );
}

/// lock(kind, target): the global word first (first exclusive lock only), then the local.
struct LockOp {
    target: usize,
    mode: Mode,
    global: Option<Acquisition>,
    local: Acquisition,
    /// An `ilock` of a rank on another node that waits, from this instant on, to see its
    /// whole epoch before it asks for the lock: the epoch may go as one message
    /// (`progress::shipping`).
    lazy: Option<std::time::Instant>,
}

/// Joins the exclusive class for an exclusive lock (the first of this process): takes the
/// parked membership back, or acquires the global word; true once a member.
fn join_class(core: &WinCore, g: &mut Acquisition) -> Result<bool> {
    if g.is_fresh() && core.unpark_exclusive() {
        g.set_acquired();
    }
    if !g.is_acquired() {
        if !poll_acquire(&core.plane(), LockAt::Global, Mode::EXCLUSIVE, g)? {
            return Ok(false);
        }
        if !core.plane().is_mapped() {
            core.joined_exclusive();
        }
    }
    Ok(true)
}

impl SyncOp<WinCore> for LockOp {
    fn name(&self) -> &'static str {
        "MPI_Win_lock"
    }

    fn waiting(&self, _core: &WinCore) -> Waiting {
        let kind = if self.mode == Mode::Writer {
            "exclusive"
        } else {
            "shared"
        };
        if self.lazy.is_some() {
            return Waiting::new(
                "MPI_Win_lock",
                "its epoch's unlock, to send the whole epoch in one message (briefly)",
            )
            .on(self.target);
        }
        match &self.global {
            Some(g) if !g.is_acquired() => Waiting::new(
                "MPI_Win_lock",
                format!(
                    "the window-wide lock word before its {kind} lock of rank {}: another \
                     process holds lock_all",
                    self.target
                ),
            )
            .watching(lock_word(LockAt::Global), None),
            _ => Waiting::new(
                "MPI_Win_lock",
                format!("its {kind} lock: another process holds a conflicting lock"),
            )
            .on(self.target)
            .watching(lock_word(LockAt::Local(self.target)), None),
        }
    }

    fn lazy(&self) -> bool {
        self.lazy.is_some()
    }

    fn go_eager(&mut self) {
        self.lazy = None;
    }

    /// The epoch ships: this lock is taken by the message at the target, or by the unlock
    /// should the lock be busy there. The exclusive-class membership is taken here, where
    /// it can be without a round trip (parked, or in transit); else the epoch goes as
    /// before.
    fn ship(&mut self, core: &WinCore, _payload: Option<Vec<u8>>) -> bool {
        if !self.local.is_fresh() {
            return false;
        }
        if let Some(g) = &mut self.global {
            if !(g.is_fresh() && core.unpark_exclusive()) {
                return false;
            }
            g.set_acquired();
        }
        self.lazy = None;
        self.local.set_acquired();
        true
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        if let Some(since) = self.lazy {
            if crate::progress::shipping::lazy_for().is_some_and(|d| since.elapsed() < d) {
                return Ok(Step::Blocked);
            }
            self.lazy = None;
        }
        if let Some(g) = &mut self.global {
            if !join_class(core, g)? {
                return Ok(Step::Blocked);
            }
        }
        Ok(
            if poll_acquire(
                &core.plane(),
                LockAt::Local(self.target),
                self.mode,
                &mut self.local,
            )? {
                Step::Done
            } else {
                Step::Blocked
            },
        )
    }
}

struct LockAllOp {
    phase: Acquisition,
    /// Across nodes: the answers of a round of marks on the parked words (module docs),
    /// while a round is out. In a build without a network it has no value at all, so a
    /// lock_all on one node carries no vector to check or drop.
    marks: Option<Only<Vec<Option<Awaited>>>>,
}

impl SyncOp<WinCore> for LockAllOp {
    fn name(&self) -> &'static str {
        "MPI_Win_lock_all"
    }

    fn waiting(&self, core: &WinCore) -> Waiting {
        // Relaxed: a diagnostic's look.
        if self.phase.is_fresh()
            && core.plane().is_mapped()
            && core.lock_all_used().load(Ordering::Relaxed) != ALL_DRAINED
        {
            return Waiting::new(
                "MPI_Win_lock_all",
                "the exclusive locks taken before the window's first lock_all to end",
            );
        }
        Waiting::new(
            "MPI_Win_lock_all",
            "the window-wide lock word: a process holds an exclusive lock",
        )
        .watching(lock_word(LockAt::Global), None)
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        // On one node, exclusive locks taken outside the class leave first (module docs);
        // nothing is held while they do.
        if self.phase.is_fresh() && core.plane().is_mapped() && !core.unclassed_drained() {
            return Ok(Step::Blocked);
        }
        if poll_acquire(
            &core.plane(),
            LockAt::Global,
            Mode::LOCK_ALL,
            &mut self.phase,
        )? {
            // A round of marks still in flight is answered before the op ends (its answers
            // own plane slots; none can be a parked membership: that one would still be
            // counted, and the class could not have been ours).
            if self.marks.is_some() {
                core.mark_parked(&mut self.marks, false)?;
                if self.marks.is_some() {
                    return Ok(Step::Blocked);
                }
            }
            return Ok(Step::Done);
        }
        // Exclusive members are in the way: some may only be parked.
        let took = if core.plane().is_mapped() {
            core.take_parked_exclusive()
        } else {
            core.mark_parked(&mut self.marks, true)?
        };
        if took
            && poll_acquire(
                &core.plane(),
                LockAt::Global,
                Mode::LOCK_ALL,
                &mut self.phase,
            )?
        {
            return Ok(Step::Done);
        }
        Ok(Step::Blocked)
    }
}

/// unlock(target) / unlock_all: never waits, but goes through the engine so that it stays
/// ordered after requests started before it, and completes what they issued first.
enum UnlockOp {
    One(Release),
    /// The unlock of a target on another node whose provider delivers this process's
    /// atomics to it in issue order (`transport::network::orders_atomics`). When the epoch
    /// left no network write (RMA, not an atomic) in flight, the release — an atomic — is
    /// issued behind the epoch's accumulates without waiting for them: the target applies
    /// it after them. It is a fetching atomic, whose answer says that they are complete
    /// there; the op waits for that answer, not for a flush of the whole endpoint. Until
    /// then it lets a later lock epoch of the same target pass it ([`SyncOp::released`]):
    /// that epoch's lock request reaches the target behind the release. With a write in
    /// flight (whose order against an atomic the provider does not promise) the endpoint
    /// is flushed first, as [`UnlockOp::One`] does. The window-wide word, when this was
    /// the last exclusive lock, is released once the answer came. When no atomic of the
    /// epoch waits for its answer, the release goes unanswered and the op is done at once
    /// (`NetPlane::release_unanswered`; the module docs, "Releases without answers").
    InOrder(crate::transport::network::Only<Box<InOrderRelease>>),
    /// unlock_all; `nocheck`: the epoch took no global lock (`lock_all(NOCHECK)`).
    All {
        nocheck: bool,
    },
}

/// The state of an [`UnlockOp::InOrder`] (boxed: the unlock of a target on this node moves
/// no more than it did without it).
struct InOrderRelease {
    release: Release,
    /// The release's answer, once it is issued.
    answer: Option<Awaited>,
    /// The exclusive-class membership it holds from the release until the answer comes
    /// (the last exclusive unlock), as listed in [`InTransit`](crate::win::core::InTransit).
    transit: Option<u64>,
    /// The whole epoch goes in one message (`progress::shipping`).
    shipped: Option<Shipped>,
}

/// An epoch that goes to its target in one message (`progress::shipping`).
struct Shipped {
    /// The epoch's accumulates, encoded (`transport::wire::encode`).
    payload: Vec<u8>,
    phase: ShipPhase,
}

/// Where a shipped epoch stands; the message's answer waits in the unlock's `answer`.
enum ShipPhase {
    /// Not sent yet.
    Unsent,
    /// Sent: the answer says whether the lock was free (then all is done).
    Sent,
    /// The lock was not free and a later lock took the exclusive-class membership over
    /// meanwhile: joining the class again before the lock is acquired.
    Rejoin(Acquisition),
    /// The lock was not free: acquiring it the usual way.
    Acquiring(Acquisition),
    /// The lock held, the accumulates and the release sent: waiting for the answer.
    Applying,
}

impl InOrderRelease {
    /// True while its release is on its way and applies for certain.
    fn release_certain(&self) -> bool {
        match &self.shipped {
            Some(s) => matches!(s.phase, ShipPhase::Applying),
            None => self.answer.is_some(),
        }
    }

    /// [`SyncOp::poll`] of an unlock that carries its whole epoch (`progress::shipping`).
    fn poll_shipped(&mut self, core: &WinCore) -> Result<Step> {
        let r = self.release;
        let target = r.lock.target;
        let Some(ship) = self.shipped.as_mut() else {
            return Ok(Step::Done);
        };
        loop {
            match &mut ship.phase {
                ShipPhase::Unsent => {
                    // As for a release: writes of this process in flight (whose order
                    // against atomics the provider does not promise) complete first.
                    if core.net_writes_pending() {
                        core.complete_net()?;
                    }
                    self.answer = Some(send_epoch(core, target, false, &ship.payload)?);
                    // Takeable from now on, as for a release: should the lock be busy, the
                    // membership is joined again (below).
                    if r.global {
                        self.transit = Some(core.memberships_in_transit.hold());
                    }
                    ship.phase = ShipPhase::Sent;
                }
                ShipPhase::Sent => {
                    let asked = self.answer.as_mut().expect("sent above");
                    let Some(before) = asked.value(&core.plane())? else {
                        return Ok(Step::Blocked);
                    };
                    self.answer = None;
                    let ours = self
                        .transit
                        .take()
                        .is_none_or(|id| core.memberships_in_transit.settle(id));
                    if before == 0 {
                        // Taken, applied and released at the target.
                        if r.global && ours {
                            core.park_exclusive();
                        }
                        return Ok(Step::Done);
                    }
                    crate::diag::event!(
                        target: "onesided::sync",
                        window = ?crate::diag::Hex(core.window_id()),
                        target_rank = target,
                        "an epoch sent in one message found the lock busy: acquiring it"
                    );
                    // Busy: nothing was applied. The epoch needs its membership back when
                    // a later lock took it over.
                    ship.phase = if r.global && !ours {
                        ShipPhase::Rejoin(Acquisition::new())
                    } else {
                        ShipPhase::Acquiring(Acquisition::new())
                    };
                }
                ShipPhase::Rejoin(g) => {
                    if !join_class(core, g)? {
                        return Ok(Step::Blocked);
                    }
                    ship.phase = ShipPhase::Acquiring(Acquisition::new());
                }
                ShipPhase::Acquiring(acq) => {
                    if !poll_acquire(&core.plane(), LockAt::Local(target), Mode::Writer, acq)? {
                        return Ok(Step::Blocked);
                    }
                    self.answer = Some(send_epoch(core, target, true, &ship.payload)?);
                    ship.phase = ShipPhase::Applying;
                }
                ShipPhase::Applying => {
                    let asked = self.answer.as_mut().expect("sent above");
                    if asked.value(&core.plane())?.is_none() {
                        return Ok(Step::Blocked);
                    }
                    if r.global {
                        core.park_exclusive();
                    }
                    return Ok(Step::Done);
                }
            }
        }
    }
}

/// Sends the epoch `payload` to `target`'s lock word in one message (`held`: the lock is
/// ours already): its answer.
fn send_epoch(core: &WinCore, target: usize, held: bool, payload: &[u8]) -> Result<Awaited> {
    let word = lock_word(LockAt::Local(target));
    core.net_toward(target)
        .and_then(|net| net.ship_epoch(word, 0, WRITER, held, payload))
        .map(Awaited::from)
        .ok_or_else(|| Error::Network {
            call: "MPI_Win_unlock",
            code: 0,
            text: format!("rank {target}'s lock words no longer take a whole epoch"),
        })
}

impl SyncOp<WinCore> for UnlockOp {
    fn name(&self) -> &'static str {
        "MPI_Win_unlock"
    }

    /// The epoch's operations are in the target's memory before its lock is released.
    fn completes(&self) -> Completes {
        match *self {
            UnlockOp::One(r) => Completes::Target(r.lock.target),
            // What the epoch issued completes before the release's answer (see the variant).
            UnlockOp::InOrder(_) => Completes::Nothing,
            UnlockOp::All { .. } => Completes::All,
        }
    }

    fn released(&self) -> bool {
        if let UnlockOp::InOrder(state) = self {
            return state.release_certain();
        }
        false
    }

    fn release_sent(&self) -> bool {
        if let UnlockOp::InOrder(state) = self {
            // Once sent, for good: a later epoch that passed it may have started to
            // acquire the lock (holding a ticket of its queue); should this one then find
            // the lock busy and queue too, that epoch must not be held back behind it.
            return state.release_certain()
                || state
                    .shipped
                    .as_ref()
                    .is_some_and(|s| !matches!(s.phase, ShipPhase::Unsent));
        }
        false
    }

    fn ship_role(&self, _core: &WinCore) -> crate::progress::shipping::ShipRole {
        match self {
            UnlockOp::InOrder(state)
                if state.answer.is_none()
                    && state.shipped.is_none()
                    && state.release.lock.kind == LockType::Exclusive =>
            {
                crate::progress::shipping::ShipRole::Close
            }
            _ => crate::progress::shipping::ShipRole::Other,
        }
    }

    fn ship(&mut self, _core: &WinCore, payload: Option<Vec<u8>>) -> bool {
        let (UnlockOp::InOrder(state), Some(payload)) = (self, payload) else {
            return false;
        };
        state.shipped = Some(Shipped {
            payload,
            phase: ShipPhase::Unsent,
        });
        true
    }

    fn waiting(&self, _core: &WinCore) -> Waiting {
        if let UnlockOp::InOrder(state) = self {
            if let Some(s) = &state.shipped {
                let detail = match s.phase {
                    ShipPhase::Unsent | ShipPhase::Sent => {
                        "the answer to its epoch, sent in one message"
                    }
                    ShipPhase::Rejoin(_) => {
                        "the window-wide lock word before its exclusive lock (its epoch found \
                         the lock busy): another process holds lock_all"
                    }
                    ShipPhase::Acquiring(_) => {
                        "its exclusive lock (its epoch found it busy): another process holds \
                         a conflicting lock"
                    }
                    ShipPhase::Applying => "the answer to its epoch's accumulates and release",
                };
                return Waiting::new("MPI_Win_unlock", detail).on(state.release.lock.target);
            }
            return Waiting::new(
                "MPI_Win_unlock",
                "the answer to its release of the lock, which follows the epoch's accumulates",
            )
            .on(state.release.lock.target);
        }
        Waiting::new("MPI_Win_unlock", "")
    }

    fn poll(&mut self, core: &WinCore) -> Result<Step> {
        if let UnlockOp::InOrder(state) = self {
            if state.shipped.is_some() {
                return state.poll_shipped(core);
            }
            let InOrderRelease {
                release: r,
                answer,
                transit,
                ..
            } = &mut ***state;
            if answer.is_none() {
                if core.net_writes_pending() {
                    core.complete_net()?;
                }
                // Nothing of the epoch waits for an answer (it issued no atomic, or a flush
                // saw them answered): the release needs none either. It applies behind
                // everything of ours at the target, and a later lock of ours to it behind
                // the release; another process's lock waits for it as for any holder's.
                let word = lock_word(LockAt::Local(r.lock.target));
                let one = Mode::local(r.lock.kind).one();
                if core
                    .net_toward(r.lock.target)
                    .is_some_and(|net| net.release_unanswered(word, one.wrapping_neg()))
                {
                    if r.global {
                        core.park_exclusive();
                    }
                    return Ok(Step::Done);
                }
                // Release: as `release`. Issued after the epoch's operations, which the
                // provider applies first (atomics in order; writes completed above).
                *answer = Some(Awaited::from(core.plane().fetch_add(
                    word,
                    one.wrapping_neg(),
                    Ordering::Release,
                )));
                // Takeable from now on, and only by a lock that runs after this point: one
                // of a later epoch (its own epoch's lock has completed already).
                if r.global {
                    *transit = Some(core.memberships_in_transit.hold());
                }
            }
            let asked = answer.as_mut().expect("issued above");
            if asked.value(&core.plane())?.is_none() {
                return Ok(Step::Blocked);
            }
            let ours = transit.is_none_or(|id| core.memberships_in_transit.settle(id));
            if r.global && ours {
                core.park_exclusive();
            }
            return Ok(Step::Done);
        }
        match *self {
            UnlockOp::One(r) => {
                release_held(&core.plane(), &r.lock);
                if r.global {
                    core.park_exclusive();
                }
            }
            UnlockOp::InOrder(_) => unreachable!("polled above"),
            UnlockOp::All { nocheck: false } => {
                release(&core.plane(), LockAt::Global, Mode::LOCK_ALL);
            }
            // Our stores are ordered before any later load or store of ours (as a flush).
            UnlockOp::All { nocheck: true } => std::sync::atomic::fence(Ordering::SeqCst),
        }
        Ok(Step::Done)
    }
}

impl WinCore {
    /// The global lock word as mapped: parking reads it directly (see the module docs).
    fn mapped_global_word(&self) -> &AtomicU64 {
        &self.ctrl.header().global_lock.word
    }

    /// This process's parked exclusive-class membership (see the module docs).
    fn parked_exclusive(&self) -> &AtomicU64 {
        &self.ctrl.rank(self.rank).parked_exclusive
    }

    /// Takes this process's parked membership of the exclusive class back; true when it
    /// now holds the class without touching the global word. False when nothing was parked
    /// (a lock_all took it) or when a lock_all waits or holds: then the membership is given
    /// up and the caller queues as any exclusive locker does.
    #[inline(never)]
    fn unpark_exclusive(&self) -> bool {
        if !self.plane().is_mapped() {
            if !self.parks_across_nodes() {
                return false;
            }
            return match self.own_parked_cas(PARKED, 0) {
                PARKED => true,
                // Nothing parked, no lock_all asks: an unlock in transit may still hold one.
                0 => self.memberships_in_transit.take(),
                _ => false,
            };
        }
        let parked = self.parked_exclusive();
        // Relaxed: a look at our own line first, then the swap that decides who owns the
        // membership. No data is ordered by it: exclusive epochs order each other through
        // the local words, and a lock_all epoch that ran since we parked must have taken
        // the membership back (then the swap finds 0 and we join through the global word).
        if parked.load(Ordering::Relaxed) == 0 || parked.swap(0, Ordering::Relaxed) == 0 {
            return false;
        }
        // Relaxed: a lock_all that joins after this load waits for our membership to leave,
        // as it would for any exclusive holder; this look only keeps us from starving one.
        if self.mapped_global_word().load(Ordering::Relaxed) & (LOCK_ALL_MASK | HEAD_MASK) == 0 {
            return true;
        }
        release(&self.plane(), LockAt::Global, Mode::EXCLUSIVE);
        false
    }

    /// The last exclusive unlock of this process: keeps the exclusive-class membership,
    /// parked, unless a lock_all is waiting for the class to empty. A membership parked
    /// before (the unlock of an earlier epoch that ran after this epoch joined) leaves.
    #[inline(never)]
    fn park_exclusive(&self) {
        if !self.plane().is_mapped() {
            // Parked when the word held 0; 1 (a membership parked already) or 2 (a
            // lock_all asks for the class): leave.
            if !(self.parks_across_nodes() && self.own_parked_cas(0, PARKED) == 0) {
                release(&self.plane(), LockAt::Global, Mode::EXCLUSIVE);
            }
            return;
        }
        // Relaxed: a hint; a lock_all that comes later takes the parked membership back.
        if self.mapped_global_word().load(Ordering::Relaxed) & (LOCK_ALL_MASK | HEAD_MASK) != 0 {
            release(&self.plane(), LockAt::Global, Mode::EXCLUSIVE);
            return;
        }
        // Release: the epoch's RMA is complete before a lock_all that takes the membership
        // (Acquire swap) goes on — the local word's release orders it for exclusive lockers.
        if self.parked_exclusive().swap(1, Ordering::Release) == 1 {
            release(&self.plane(), LockAt::Global, Mode::EXCLUSIVE);
        }
    }

    /// A lock_all waiting for the exclusive class to empty takes every parked membership
    /// back on its owner's behalf; true when it took any.
    #[inline(never)]
    fn take_parked_exclusive(&self) -> bool {
        if !self.plane().is_mapped() {
            return false;
        }
        let mut took = false;
        for rank in 0..self.size {
            let parked = &self.ctrl.rank(rank).parked_exclusive;
            // Relaxed load: skip the swap (a write to the owner's line) when nothing is
            // parked. Acquire swap: pairs with the owner's Release park, so its epochs'
            // writes happen before our lock_all epoch.
            if parked.load(Ordering::Relaxed) == 1 && parked.swap(0, Ordering::Acquire) == 1 {
                release(&self.plane(), LockAt::Global, Mode::EXCLUSIVE);
                took = true;
            }
        }
        took
    }

    /// True when exclusive memberships park on a window across nodes (module docs): the
    /// words of this node change with CPU atomics, so this process's own parked word is
    /// answered at once.
    #[inline]
    fn parks_across_nodes(&self) -> bool {
        if let Some(net) = &self.net {
            return net.mixes_with_cpu();
        }
        false
    }

    /// Compare-and-swap of this process's own parked word (across nodes, where
    /// [`WinCore::parks_across_nodes`]): the value before.
    fn own_parked_cas(&self, expected: u64, new: u64) -> u64 {
        // AcqRel: parking (0 → 1) releases the epoch's effects to a lock_all that takes
        // the membership (its Acquire swap); taking one back needs no more than Relaxed
        // (no lock_all held the class meanwhile: it would have left the mark 2), and one
        // ordering for both keeps the call simple.
        match self.plane().compare_swap(
            CtrlWord::Parked { at: self.rank },
            expected,
            new,
            Ordering::AcqRel,
        ) {
            Answer::Ready(before) => before,
            // A word of this node goes through the network only once the endpoint failed
            // (`NetPlane::near`): every later operation reports the failure. Neither 0 nor
            // 1, so the caller joins or leaves through the global word, as without parking.
            Answer::Pending(op) => {
                self.plane().abandon(op);
                u64::MAX
            }
        }
    }

    /// After this process joined the exclusive class through the global word across
    /// nodes: a lock_all's mark (2) on its parked word is stale now (the join succeeded, so
    /// no lock_all holds or heads the queue), and parking may resume.
    fn joined_exclusive(&self) {
        if self.parks_across_nodes() {
            self.own_parked_cas(LOCK_ALL_ASKS, 0);
        }
    }

    /// A lock_all across nodes that waits for the exclusive class: one round of marks —
    /// every rank's parked word swapped to 2, and the class left on behalf of each that
    /// held a parked membership (1). `marks` holds the round's answers while it is out (a
    /// new round starts when none is and `new_round`); true when a membership was taken.
    fn mark_parked(
        &self,
        marks: &mut Option<Only<Vec<Option<Awaited>>>>,
        new_round: bool,
    ) -> Result<bool> {
        if !self.parks_across_nodes() {
            return Ok(false);
        }
        let plane = self.plane();
        if marks.is_none() && new_round {
            // A new round. Acquire: pairs with the owner's parking (AcqRel CAS), so its
            // epochs' effects happen before this lock_all's.
            *marks = Only::new(
                (0..self.size)
                    .map(|at| {
                        Some(Awaited::from(plane.swap(
                            CtrlWord::Parked { at },
                            LOCK_ALL_ASKS,
                            Ordering::Acquire,
                        )))
                    })
                    .collect(),
            );
        }
        let Some(round) = marks.as_deref_mut() else {
            return Ok(false);
        };
        let mut took = false;
        for mark in round.iter_mut() {
            if let Some(answer) = mark {
                if let Some(before) = answer.value(&plane)? {
                    if before == PARKED {
                        release(&plane, LockAt::Global, Mode::EXCLUSIVE);
                        took = true;
                    }
                    *mark = None;
                }
            }
        }
        if round.iter().all(Option::is_none) {
            *marks = None;
        }
        Ok(took)
    }

    /// True when an exclusive epoch to `target` may go as one message
    /// (`progress::shipping`): `target` is on another node, reached by the wire, which
    /// delivers this process's atomics in issue order ([`UnlockOp::InOrder`]).
    #[inline]
    fn ships_epochs_to(&self, target: usize) -> Result<bool> {
        if self.releases_in_order(target)? {
            return Ok(self
                .net_toward(target)
                .is_some_and(|net| net.ships_epochs(target)));
        }
        Ok(false)
    }

    /// True when `target` is on another node and the provider delivers atomics to it in
    /// issue order ([`UnlockOp::InOrder`]).
    #[inline]
    fn releases_in_order(&self, target: usize) -> Result<bool> {
        if self.net_toward(target).is_some() {
            return crate::transport::network::orders_atomics();
        }
        Ok(false)
    }

    fn check_locks_allowed(&self, call: &'static str) -> Result<()> {
        if self.no_locks.load(std::sync::atomic::Ordering::Relaxed) {
            Err(Error::LocksDisabled { call })
        } else {
            Ok(())
        }
    }

    #[inline]
    pub(crate) fn lock(&self, kind: LockType, target: usize, assert: Assert) -> Result<()> {
        if assert == Assert::NONE && self.net.is_none() && self.lock_on_node(kind, target) {
            return Ok(());
        }
        self.lock_general(kind, target, assert)
    }

    /// [`WinCore::lock`] through the engine: out of line, so that the one-node path saves
    /// no registers for it.
    #[inline(never)]
    fn lock_general(&self, kind: LockType, target: usize, assert: Assert) -> Result<()> {
        let ticket = blocking_start(|| self.start_lock(kind, target, assert))?;
        match ticket {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None).inspect_err(|_| {
                // The lock was not taken: forget it again (cannot fail, it was just
                // recorded).
                let _ = self.epoch.unlock(target);
            }),
        }
    }

    /// Opens the epoch to `target` and starts acquiring its lock (blocking or not). When
    /// the lock is still pending the epoch is deferred: RMA to it waits (resolve's gate).
    pub(crate) fn start_lock(
        &self,
        kind: LockType,
        target: usize,
        assert: Assert,
    ) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        assert.only("lock", Assert::NOCHECK)?;
        self.check_locks_allowed("lock")?;
        self.check_rank(target)?;
        let nocheck = assert.contains(Assert::NOCHECK);
        let (global, order) = self.epoch.lock_epoch(target, kind, nocheck)?;
        if nocheck {
            return Ok(None);
        }
        let op = LockOp {
            target,
            mode: Mode::local(kind),
            global: global.then(Acquisition::new),
            local: Acquisition::new(),
            lazy: (kind == LockType::Exclusive
                && !crate::progress::in_blocking_start()
                && crate::progress::shipping::lazy_for().is_some()
                && self.ships_epochs_to(target)?)
            .then(std::time::Instant::now),
        };
        self.start_opening(self.engine.start_ordered(self, op, order.opening()), || {
            let _ = self.epoch.unlock(target);
        })
    }

    /// Event: the synchronization `call` (toward `peer`) started; done at once, pending, or
    /// failed as `started` says.
    #[inline]
    #[cfg_attr(not(feature = "trace"), allow(unused_variables))]
    pub(crate) fn note_sync(
        &self,
        call: &'static str,
        peer: Option<usize>,
        started: &Result<Option<Ticket>>,
    ) {
        // Evaluated only when the event is enabled (the macro's fields are lazy).
        let state = || match started {
            Ok(None) => "done",
            Ok(Some(_)) => "pending",
            Err(_) => "failed",
        };
        let window = || crate::diag::Hex(self.window_id());
        if let Some(peer) = peer {
            crate::diag::event!(
                target: "onesided::epoch",
                window = ?window(),
                target_rank = peer,
                state = state(),
                "{call}"
            );
        } else {
            crate::diag::event!(
                target: "onesided::epoch",
                window = ?window(),
                state = state(),
                "{call}"
            );
        }
    }

    /// The outcome of starting an opening op: on error the epoch is forgotten again
    /// (`undo`); when the op is pending the access cache is cleared so that RMA takes the
    /// path that waits for it.
    fn start_opening(
        &self,
        started: Result<Option<Ticket>>,
        undo: impl FnOnce(),
    ) -> Result<Option<Ticket>> {
        match started {
            Err(e) => {
                undo();
                Err(e)
            }
            Ok(Some(t)) => {
                self.epoch.forget_access_cache();
                Ok(Some(t))
            }
            Ok(None) => Ok(None),
        }
    }

    /// The uncontended lock of a rank on a window of one node, whole under the epoch
    /// record's lock: the transition, the exclusive class's parked membership taken back,
    /// and one attempt at the target's word; true when it holds the lock. False leaves
    /// nothing changed (a failed attempt is undone) for the general path, which reports
    /// every error. No call lock is taken: with the record held, a synchronization call
    /// of another thread either holds `calls` now (it may be between its transition and
    /// its op's start: we step aside) or makes its transition after ours — as if it had
    /// come after this whole call. Two spin locks per lock + unlock were four of the
    /// exclusive pair's eight locked instructions (docs/performance.md).
    #[inline]
    fn lock_on_node(&self, kind: LockType, target: usize) -> bool {
        let mut record = self.epoch.transition();
        // `is_locked` is Acquire: a call that released `calls` had started its op, which
        // `quiet` (Acquire) then sees.
        if self.calls.is_locked()
            || !self.engine.quiet()
            || target >= self.size
            || self.no_locks.load(Ordering::Relaxed)
        {
            return false;
        }
        if kind == LockType::Exclusive
            // Relaxed: a look; the locker reads it again, SeqCst, once its mark is set.
            && self.lock_all_used().load(Ordering::Relaxed) == ALL_NEVER
        {
            return self.lock_unclassed(record, target);
        }
        let Ok(global) = record.lock(target, kind, false) else {
            return false;
        };
        if !global || self.unpark_exclusive() {
            let mode = Mode::local(kind);
            let word = lock_word(LockAt::Local(target));
            // The mapped plane answers at once.
            if let Answer::Ready(before) = mode.attempt(&self.ctrl, word) {
                if mode.attempted(&self.ctrl, word, before) {
                    return true;
                }
            }
            if global {
                self.park_exclusive();
            }
        }
        record.undo_lock(target);
        false
    }

    /// An exclusive lock of `target` outside the class, before the window's first lock_all
    /// (module docs), its transition to be made in `record`; true when it holds the lock.
    #[inline(always)]
    fn lock_unclassed(&self, mut record: Transition<'_>, target: usize) -> bool {
        if record.lock(target, LockType::Exclusive, true).is_err() {
            return false;
        }
        let word = self.ctrl.mapped(lock_word(LockAt::Local(target)));
        // SeqCst: one total order with lock_all's announcement and its reads of the local
        // words (module docs); Acquire within it, for the previous holder's writes.
        if word
            .compare_exchange(0, WRITER | UNCLASSED, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            // SeqCst: see above.
            if self.lock_all_used().load(Ordering::SeqCst) == ALL_NEVER {
                return true;
            }
            // A lock_all was asked for meanwhile: we never held the lock.
            word.fetch_sub(WRITER | UNCLASSED, Ordering::Relaxed);
        }
        record.undo_lock(target);
        false
    }

    /// The header word that says whether a lock_all was ever asked for (module docs).
    #[inline(always)]
    fn lock_all_used(&self) -> &AtomicU64 {
        &self.ctrl.header().lock_all_used
    }

    /// Announces a lock_all on a window of one node and waits, poll by poll, for the
    /// unclassed exclusive holders to leave (module docs); true once none is left.
    fn unclassed_drained(&self) -> bool {
        let used = self.lock_all_used();
        // Acquire: pairs with the Release of the drain that set it, which saw every
        // unclassed holder's release.
        let now = used.load(Ordering::Acquire);
        if now == ALL_DRAINED {
            return true;
        }
        if now == ALL_NEVER {
            // SeqCst: see the module docs; a failure means another lock_all announced.
            let _ =
                used.compare_exchange(ALL_NEVER, ALL_ASKED, Ordering::SeqCst, Ordering::Relaxed);
        }
        for rank in 0..self.size {
            // SeqCst: see the module docs (also Acquire: the holder's epoch happens before).
            let v = self
                .ctrl
                .mapped(lock_word(LockAt::Local(rank)))
                .load(Ordering::SeqCst);
            if v & UNCLASSED != 0 {
                return false;
            }
        }
        // Release: for the next lock_all's Acquire above. A failure: another drain set it.
        let _ = used.compare_exchange(ALL_ASKED, ALL_DRAINED, Ordering::Release, Ordering::Relaxed);
        true
    }

    /// The unlock of a rank on a window of one node with nothing in flight, whole under
    /// the epoch record's lock (as [`WinCore::lock_on_node`]); false leaves nothing
    /// changed for the general path.
    #[inline]
    fn unlock_on_node(&self, target: usize) -> bool {
        let mut record = self.epoch.transition();
        // Acquire: as in lock_on_node.
        if self.calls.is_locked() || !self.engine.quiet() || !self.nothing_in_flight() {
            return false;
        }
        let Ok(r) = record.unlock(target) else {
            return false;
        };
        release_held(&self.ctrl, &r.lock);
        if r.global {
            self.park_exclusive();
        }
        true
    }

    #[inline]
    pub(crate) fn unlock(&self, target: usize) -> Result<()> {
        if self.net.is_none() && self.unlock_on_node(target) {
            return Ok(());
        }
        self.unlock_general(target)
    }

    /// [`WinCore::unlock`] through the engine (out of line, as `lock_general`).
    #[inline(never)]
    fn unlock_general(&self, target: usize) -> Result<()> {
        match blocking_start(|| self.start_unlock(target))? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None),
        }
    }

    /// Closes the epoch to `target` and starts releasing its lock (blocking or not).
    pub(crate) fn start_unlock(&self, target: usize) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        self.check_rank(target)?;
        let release = self.epoch.unlock(target)?;
        let order = Order::lock(release.lock.epoch, target);
        if !release.lock.nocheck && self.releases_in_order(target)? {
            let op = Only::new(Box::new(InOrderRelease {
                release,
                answer: None,
                transit: None,
                shipped: None,
            }))
            .map(UnlockOp::InOrder)
            .expect("releases in order only across nodes, which need a network");
            return self.engine.start_ordered(self, op, order);
        }
        self.engine
            .start_ordered(self, UnlockOp::One(release), order)
    }

    #[inline]
    pub(crate) fn lock_all(&self, assert: Assert) -> Result<()> {
        if assert == Assert::NONE && self.net.is_none() && self.lock_all_on_node() {
            return Ok(());
        }
        self.lock_all_general(assert)
    }

    /// The uncontended lock_all of a window of one node, whole under the epoch record's
    /// lock (as [`WinCore::lock_on_node`]): one attempt at the global word; false leaves
    /// nothing changed for the general path (which also takes parked exclusive
    /// memberships back).
    #[inline]
    fn lock_all_on_node(&self) -> bool {
        let mut record = self.epoch.transition();
        // Acquire: as in lock_on_node.
        if self.calls.is_locked()
            || !self.engine.quiet()
            || self.no_locks.load(Ordering::Relaxed)
            // Acquire: as in `unclassed_drained` (which the general path runs).
            || self.lock_all_used().load(Ordering::Acquire) != ALL_DRAINED
        {
            return false;
        }
        if record.lock_all().is_err() {
            return false;
        }
        let word = lock_word(LockAt::Global);
        if let Answer::Ready(before) = Mode::LOCK_ALL.attempt(&self.ctrl, word) {
            if Mode::LOCK_ALL.attempted(&self.ctrl, word, before) {
                return true;
            }
        }
        record.undo_lock_all();
        false
    }

    /// [`WinCore::lock_all`] through the engine (out of line, as `lock_general`).
    #[inline(never)]
    fn lock_all_general(&self, assert: Assert) -> Result<()> {
        match blocking_start(|| self.start_lock_all(assert))? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None).inspect_err(|_| {
                let _ = self.epoch.unlock_all();
            }),
        }
    }

    /// Opens the lock_all epoch and starts acquiring the global lock (blocking or not).
    pub(crate) fn start_lock_all(&self, assert: Assert) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        assert.only("lock_all", Assert::NOCHECK)?;
        self.check_locks_allowed("lock_all")?;
        let nocheck = assert.contains(Assert::NOCHECK);
        self.epoch.lock_all(nocheck)?;
        if nocheck {
            return Ok(None);
        }
        self.start_opening(
            self.engine.start(
                self,
                LockAllOp {
                    phase: Acquisition::new(),
                    marks: None,
                },
            ),
            || {
                let _ = self.epoch.unlock_all();
            },
        )
    }

    #[inline]
    pub(crate) fn unlock_all(&self) -> Result<()> {
        if self.net.is_none() && self.unlock_all_on_node() {
            return Ok(());
        }
        self.unlock_all_general()
    }

    /// The unlock_all of a window of one node with nothing in flight, whole under the
    /// epoch record's lock (as [`WinCore::unlock_on_node`]).
    #[inline]
    fn unlock_all_on_node(&self) -> bool {
        let mut record = self.epoch.transition();
        // Acquire: as in lock_on_node.
        if self.calls.is_locked() || !self.engine.quiet() || !self.nothing_in_flight() {
            return false;
        }
        match record.unlock_all() {
            Ok(false) => release(&self.ctrl, LockAt::Global, Mode::LOCK_ALL),
            // Our stores are ordered before any later load or store of ours (as a flush).
            Ok(true) => std::sync::atomic::fence(Ordering::SeqCst),
            Err(_) => return false,
        }
        true
    }

    /// [`WinCore::unlock_all`] through the engine (out of line, as `lock_general`).
    #[inline(never)]
    fn unlock_all_general(&self) -> Result<()> {
        match blocking_start(|| self.start_unlock_all())? {
            None => Ok(()),
            Some(t) => self.engine.wait(self, t, None),
        }
    }

    /// Closes the lock_all epoch and starts releasing the global lock (blocking or not).
    pub(crate) fn start_unlock_all(&self) -> Result<Option<Ticket>> {
        // One synchronization call of this window at a time: its epoch transition and the
        // start of its op happen together (see `WinCore::calls`).
        let _calls = self.calls.lock();
        let nocheck = self.epoch.unlock_all()?;
        self.engine.start(self, UnlockOp::All { nocheck })
    }
}

impl RawWindow {
    /// Starts a passive-target access epoch to `target` (MPI_Win_lock); blocks until the
    /// lock is held.
    ///
    /// Valid assertion: `NOCHECK` (no other process holds or will request a conflicting
    /// lock; nothing is acquired). Errors: the window has `no_locks=true`; `target` is
    /// already locked by this process; a lock_all, PSCW or used fence epoch is open.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, LockType, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let counter = Window::<u64>::allocate(&world, 1)?;
    /// counter.lock(LockType::Exclusive, 0, Assert::NONE)?;
    /// let mut v = [0u64];
    /// counter.get(&mut v, 0, 0)?;
    /// counter.put(&[v[0] + 1], 0, 0)?;
    /// counter.unlock(0)?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn lock(&self, kind: LockType, target: usize, assert: Assert) -> Result<()> {
        self.core.lock(kind, target, assert)
    }

    /// Ends the passive-target epoch to `target` (MPI_Win_unlock): all operations to it are
    /// complete at origin and target, then the lock is released.
    pub fn unlock(&self, target: usize) -> Result<()> {
        self.core.unlock(target)
    }

    /// Starts a shared passive-target epoch to every rank (MPI_Win_lock_all).
    /// Valid assertion: `NOCHECK`.
    pub fn lock_all(&self, assert: Assert) -> Result<()> {
        self.core.lock_all(assert)
    }

    /// Ends the epoch opened by [`Window::lock_all`](crate::RawWindow::lock_all) (MPI_Win_unlock_all).
    pub fn unlock_all(&self) -> Result<()> {
        self.core.unlock_all()
    }

    /// Nonblocking [`Window::lock`](crate::RawWindow::lock) (MPI_Win_ilock, \[Zounmevo14\]): never blocks. The epoch
    /// is open when the call returns and its request is complete at once; when the lock is
    /// not free the epoch is *deferred*: it activates in call order as the engine is driven
    /// (any later call on the window, or `test`/`wait` of any request of it). Until then
    /// an RMA call to the window waits for the activation instead of touching target memory
    /// early. Errors as `lock`.
    ///
    /// ```
    /// # onesided::testing::run(2, |_| {
    /// # use onesided::{Assert, LockType, Window};
    /// # let world = onesided::init()?.world().clone();
    /// # let win = Window::<u64>::allocate(&world, 1)?;
    /// win.ilock(LockType::Exclusive, 1, Assert::NONE)?.wait()?; // returns at once
    /// win.put(&[1], 1, 0)?; // waits until the lock is held
    /// win.iunlock(1)?.wait()?;
    /// # onesided::init()?.world().barrier()?;
    /// # Ok(())
    /// # });
    /// ```
    pub fn ilock(&self, kind: LockType, target: usize, assert: Assert) -> Result<Request<'_>> {
        self.core.start_lock(kind, target, assert)?;
        Ok(Request::done())
    }

    /// Nonblocking [`Window::lock_all`](crate::RawWindow::lock_all) (MPI_Win_ilock_all): never blocks; the epoch may be
    /// deferred as with [`Window::ilock`](crate::RawWindow::ilock).
    pub fn ilock_all(&self, assert: Assert) -> Result<Request<'_>> {
        self.core.start_lock_all(assert)?;
        Ok(Request::done())
    }

    /// Nonblocking [`Window::unlock`](crate::RawWindow::unlock) (MPI_Win_iunlock, \[Zounmevo14\]): the epoch to
    /// `target` is closed when the call returns (a new `lock` of `target` may follow at
    /// once and activates after it); the request completes when its operations are
    /// complete at origin and target and the lock is released. Errors as `unlock`.
    pub fn iunlock(&self, target: usize) -> Result<Request<'_>> {
        let ticket = self.core.start_unlock(target)?;
        Ok(Request::started(&self.core, ticket))
    }

    /// Nonblocking [`Window::unlock_all`](crate::RawWindow::unlock_all) (MPI_Win_iunlock_all).
    pub fn iunlock_all(&self) -> Result<Request<'_>> {
        let ticket = self.core.start_unlock_all()?;
        Ok(Request::started(&self.core, ticket))
    }
}

#[cfg(test)]
mod tests {

    /// A membership in transit goes to exactly one party: a lock that takes it over, or
    /// else the unlock that holds it, when its answer comes.
    #[test]
    fn a_membership_in_transit_has_one_holder() {
        let transit = crate::win::core::InTransit::default();
        assert!(!transit.take(), "nothing in transit");
        let (a, b) = (transit.hold(), transit.hold());
        assert_ne!(a, b);
        assert!(transit.take(), "a lock takes one over");
        // One of the two unlocks finds its membership taken, the other keeps its own.
        assert_eq!(
            [transit.settle(a), transit.settle(b)]
                .iter()
                .filter(|&&own| own)
                .count(),
            1
        );
        assert!(!transit.take(), "both are accounted for");
        let c = transit.hold();
        assert!(transit.settle(c) && !transit.settle(c), "settled once");
    }
    use super::*;
    use crate::backoff::Backoff;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// One lock's words as CPU atomics: the shared-memory plane of a single lock.
    #[derive(Default)]
    struct Words {
        word: AtomicU64,
        next: AtomicU64,
        serving: AtomicU64,
    }

    /// The lock the tests use (any lock: `Words` holds one).
    const L: LockAt = LockAt::Local(0);

    impl Words {
        fn atomic(&self, word: CtrlWord) -> &AtomicU64 {
            match word {
                CtrlWord::Lock {
                    part: LockPart::Word,
                    ..
                } => &self.word,
                CtrlWord::Lock {
                    part: LockPart::Next,
                    ..
                } => &self.next,
                CtrlWord::Lock {
                    part: LockPart::Serving,
                    ..
                } => &self.serving,
                other => panic!("not a lock word: {other:?}"),
            }
        }

        fn acquire(&self, mode: Mode) {
            let mut phase = Acquisition::new();
            let mut b = Backoff::new();
            while !poll_acquire(self, L, mode, &mut phase).unwrap() {
                b.snooze();
            }
        }
    }

    impl crate::plane::MappedWords for Words {
        fn mapped(&self, word: CtrlWord) -> &AtomicU64 {
            self.atomic(word)
        }
    }

    /// A writer that just took ticket 0 while readers hold the lock is served at once and
    /// becomes head in the same poll (a release build of rustc 1.95 once lost the ticket
    /// on this step: see [`Acquisition`]).
    #[test]
    fn queued_after_ticket() {
        for mode in [Mode::Writer, Mode::Reader, Mode::EXCLUSIVE] {
            let w = Words::default();
            // Holders in the way of each mode: two readers for the writer; for the others
            // bit 32, a writer of a local word and lock_all holders of the global one.
            let holders = if mode == Mode::Writer { 2 } else { WRITER };
            w.word.store(holders, Ordering::Relaxed);
            w.next.store(1, Ordering::Relaxed);
            let mut acq = Acquisition {
                phase: Phase::Ticketing,
                asked: Some(Awaited::Value(0)),
            };
            assert!(!poll_acquire(&w, L, mode, &mut acq).unwrap());
            assert_eq!(acq.phase(), Phase::Head, "{mode:?}");
            assert_eq!(w.word.load(Ordering::Relaxed) & HEAD_MASK, HEAD, "{mode:?}");
        }
    }

    #[test]
    fn fast_paths_cost_one_atomic() {
        let w = Words::default();
        let mut p = Acquisition::new();
        assert!(poll_acquire(&w, L, Mode::Reader, &mut p).unwrap());
        assert!(poll_acquire(&w, L, Mode::Reader, &mut Acquisition::new()).unwrap());
        assert_eq!(w.word.load(Ordering::Relaxed), 2);
        let mut wp = Acquisition::new();
        assert!(!poll_acquire(&w, L, Mode::Writer, &mut wp).unwrap());
        assert_eq!(
            wp.phase(),
            Phase::Retry(PATIENCE),
            "a failed attempt retries first"
        );
        assert!(
            poll_acquire(&w, L, Mode::Reader, &mut Acquisition::new()).unwrap(),
            "a retrying writer does not hold readers back"
        );
        release(&w, L, Mode::Reader);
        for _ in 0..PATIENCE {
            assert!(!poll_acquire(&w, L, Mode::Writer, &mut wp).unwrap());
        }
        assert_eq!(
            wp.phase(),
            Phase::Head,
            "after its retries it queues; first in the queue is head"
        );
        assert!(
            !poll_acquire(&w, L, Mode::Reader, &mut Acquisition::new()).unwrap(),
            "head blocks new readers"
        );
        release(&w, L, Mode::Reader);
        release(&w, L, Mode::Reader);
        assert!(poll_acquire(&w, L, Mode::Writer, &mut wp).unwrap());
        assert_eq!(w.word.load(Ordering::Relaxed), WRITER);
    }

    #[test]
    fn classes_exclude_each_other_but_not_themselves() {
        let w = Words::default();
        assert!(poll_acquire(&w, L, Mode::LOCK_ALL, &mut Acquisition::new()).unwrap());
        assert!(poll_acquire(&w, L, Mode::LOCK_ALL, &mut Acquisition::new()).unwrap());
        let mut x = Acquisition::new();
        assert!(!poll_acquire(&w, L, Mode::EXCLUSIVE, &mut x).unwrap());
        release(&w, L, Mode::LOCK_ALL);
        assert!(!poll_acquire(&w, L, Mode::EXCLUSIVE, &mut x).unwrap());
        release(&w, L, Mode::LOCK_ALL);
        assert!(poll_acquire(&w, L, Mode::EXCLUSIVE, &mut x).unwrap());
        assert!(
            poll_acquire(&w, L, Mode::EXCLUSIVE, &mut Acquisition::new()).unwrap(),
            "exclusive holders share the global word"
        );
    }

    /// Threads stand in for processes: the words are plain atomics either way.
    #[test]
    fn mutual_exclusion_under_contention() {
        let w = Arc::new(Words::default());
        let inside = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let (w, inside) = (Arc::clone(&w), Arc::clone(&inside));
                std::thread::spawn(move || {
                    for k in 0..2000 {
                        let mode = if (i + k) % 3 == 0 {
                            Mode::Writer
                        } else {
                            Mode::Reader
                        };
                        w.acquire(mode);
                        let v = inside.fetch_add(
                            if mode == Mode::Writer { 1 << 32 } else { 1 },
                            Ordering::SeqCst,
                        );
                        if mode == Mode::Writer {
                            assert_eq!(v, 0, "writer entered while someone was inside");
                        } else {
                            assert_eq!(v >> 32, 0, "reader entered while a writer was inside");
                        }
                        std::hint::spin_loop();
                        inside.fetch_sub(
                            if mode == Mode::Writer { 1 << 32 } else { 1 },
                            Ordering::SeqCst,
                        );
                        release(&*w, L, mode);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(w.word.load(Ordering::Relaxed), 0);
    }

    /// Readers hold the lock continuously (overlapping) until the writer got in: with the
    /// head mark the writer gets in although the readers never stop.
    #[test]
    fn writer_progress_under_a_reader_stream() {
        for writer_mode in [Mode::Writer, Mode::EXCLUSIVE] {
            let reader_mode = if writer_mode == Mode::Writer {
                Mode::Reader
            } else {
                Mode::LOCK_ALL
            };
            let w = Arc::new(Words::default());
            let done = Arc::new(AtomicBool::new(false));
            let readers: Vec<_> = (0..4)
                .map(|_| {
                    let (w, done) = (Arc::clone(&w), Arc::clone(&done));
                    std::thread::spawn(move || {
                        while !done.load(Ordering::Relaxed) {
                            w.acquire(reader_mode);
                            std::thread::sleep(std::time::Duration::from_micros(50));
                            release(&*w, L, reader_mode);
                        }
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(20));
            for _ in 0..20 {
                w.acquire(writer_mode);
                release(&*w, L, writer_mode);
            }
            done.store(true, Ordering::Relaxed);
            for r in readers {
                r.join().unwrap();
            }
        }
    }
}

#[cfg(test)]
mod late_plane_tests {
    //! The lock protocol against a control plane that answers every operation late and
    //! applies them in a shuffled order (`win::plane::fake`): processes are simulated in one
    //! thread, a random one moving at each step, so a failure replays from its seed.

    use super::*;
    use crate::plane::fake::LatePlane;

    /// One simulated process: acquires `lock` in `mode`, holds it for a few of its steps,
    /// releases it, `rounds` times (or for ever, for a stream of readers).
    struct Process {
        lock: LockAt,
        mode: Mode,
        phase: Acquisition,
        /// Steps left to hold the lock (`None`: not holding).
        holding: Option<u32>,
        acquired: u32,
        rounds: Option<u32>,
        /// Holds for up to this many of its steps.
        hold: u64,
    }

    impl Process {
        fn new(lock: LockAt, mode: Mode, rounds: Option<u32>) -> Process {
            Process {
                lock,
                mode,
                phase: Acquisition::new(),
                holding: None,
                acquired: 0,
                rounds,
                hold: 4,
            }
        }

        /// A process of a stream: holds long (its peers overlap it).
        fn holding_long(mut self) -> Process {
            self.hold = 32;
            self
        }

        fn finished(&self) -> bool {
            self.holding.is_none() && self.rounds.is_some_and(|r| self.acquired == r)
        }
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Who is inside, by mode, checked for exclusion at every entry.
    #[derive(Default)]
    struct Inside {
        readers: u32,
        writers: u32,
        exclusive: u32,
        lock_all: u32,
    }

    impl Inside {
        fn count(&mut self, mode: Mode) -> &mut u32 {
            match mode {
                Mode::Reader => &mut self.readers,
                Mode::Writer => &mut self.writers,
                m if m == Mode::EXCLUSIVE => &mut self.exclusive,
                _ => &mut self.lock_all,
            }
        }

        fn check(&self, seed: u64) {
            assert!(
                self.writers == 0 || (self.writers == 1 && self.readers == 0),
                "seed {seed}: {} writers and {} readers inside",
                self.writers,
                self.readers
            );
            assert!(
                self.exclusive == 0 || self.lock_all == 0,
                "seed {seed}: exclusive class and lock_all inside together"
            );
        }
    }

    /// Runs `procs` until every finite one finished; the steps it took. Panics on a
    /// violation of exclusion or when `max_steps` pass first.
    fn run(plane: &LatePlane, procs: &mut [Process], seed: u64, max_steps: u64) -> u64 {
        let mut rng = Rng(seed | 1);
        let mut inside = Inside::default();
        for step in 0..max_steps {
            if procs.iter().all(|p| p.rounds.is_none() || p.finished()) {
                return step;
            }
            let i = (rng.next() % procs.len() as u64) as usize;
            let p = &mut procs[i];
            match p.holding {
                Some(0) => {
                    *inside.count(p.mode) -= 1;
                    release(plane, p.lock, p.mode);
                    p.holding = None;
                    p.phase = Acquisition::new();
                }
                Some(left) => p.holding = Some(left - 1),
                None if p.finished() => {}
                None => {
                    if poll_acquire(plane, p.lock, p.mode, &mut p.phase).unwrap() {
                        *inside.count(p.mode) += 1;
                        inside.check(seed);
                        p.acquired += 1;
                        p.holding = Some((rng.next() % p.hold) as u32);
                    }
                }
            }
        }
        panic!("seed {seed}: not finished after {max_steps} steps");
    }

    fn word(lock: LockAt, part: LockPart) -> CtrlWord {
        CtrlWord::Lock { lock, part }
    }

    /// Readers and writers of a local lock, exclusive lockers and lock_all holders of the
    /// global word: exclusion holds at every step, everyone gets in, and the words end at
    /// rest (no holder, every ticket served).
    #[test]
    fn lock_excludes_over_a_late_reordering_plane() {
        for seed in 0..300u64 {
            let plane = LatePlane::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let local = LockAt::Local(1);
            let mut procs = vec![
                Process::new(local, Mode::Writer, Some(6)),
                Process::new(local, Mode::Writer, Some(6)),
                Process::new(local, Mode::Reader, Some(6)),
                Process::new(local, Mode::Reader, Some(6)),
                Process::new(LockAt::Global, Mode::EXCLUSIVE, Some(6)),
                Process::new(LockAt::Global, Mode::EXCLUSIVE, Some(6)),
                Process::new(LockAt::Global, Mode::LOCK_ALL, Some(6)),
            ];
            run(&plane, &mut procs, seed, 1_000_000);
            plane.settle();
            for lock in [local, LockAt::Global] {
                assert_eq!(plane.peek(word(lock, LockPart::Word)), 0, "seed {seed}");
                assert_eq!(
                    plane.peek(word(lock, LockPart::Next)),
                    plane.peek(word(lock, LockPart::Serving)),
                    "seed {seed}: a ticket was never served"
                );
            }
        }
    }

    /// A stream of shared holders that never all leave at once, and one writer (or
    /// lock_all against exclusive holders): the writer gets in, every time, within a
    /// bounded number of steps. (Without the queue's head mark it waits for a moment when
    /// no reader is inside, which the stream does not leave.)
    #[test]
    fn no_writer_starvation_over_a_late_reordering_plane() {
        let mut worst = 0;
        for seed in 0..100u64 {
            for (lock, stream, writer) in [
                (LockAt::Local(0), Mode::Reader, Mode::Writer),
                (LockAt::Global, Mode::EXCLUSIVE, Mode::LOCK_ALL),
                (LockAt::Global, Mode::LOCK_ALL, Mode::EXCLUSIVE),
            ] {
                let plane = LatePlane::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) + 7);
                let mut procs = vec![
                    Process::new(lock, stream, None).holding_long(),
                    Process::new(lock, stream, None).holding_long(),
                    Process::new(lock, stream, None).holding_long(),
                    Process::new(lock, writer, Some(10)),
                ];
                let steps = run(&plane, &mut procs, seed, 100_000);
                worst = worst.max(steps);
            }
        }
        eprintln!("writer in 10 times within {worst} steps at worst");
    }
}
