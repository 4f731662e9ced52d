//! The progress engine: every synchronization is a request state machine.
//!
//! A synchronization call builds a [`SyncOp`] and hands it to its window's [`Engine`]. When
//! nothing is queued before it, the engine polls it once inline — most calls (flush,
//! unlock, post, complete, an uncontended lock) finish right there without allocating.
//! Otherwise the op is queued and the engine drives the queue front to back: ops activate in
//! the order they were started ([Zounmevo14] rule 4), so a blocked op holds back the ones behind
//! it. A blocking call is `start` + `wait`; a nonblocking call hands out the ticket.
//!
//! **Threads.** The engine is `Send + Sync`: its queue sits behind a mutex that is taken
//! only when something is queued, and its counters are atomics. The blocking fast path reads
//! one atomic of its own window: the count of its queued ops, whose top bit
//! ([`ATTENTION`]) says that some *other* engine of the process has ops queued — so a flush
//! on one window also advances the deferred epochs of the others, at no cost while nothing
//! is pending anywhere. Any thread may drive a queue — the window's own calls, a call on another window
//! ([`registry::progress_all`]), or the optional progress thread ([`thread`]) — so a
//! deferred epoch advances without further calls on its own window. An op polled by
//! another thread that fails parks its error for the window's next call that drives the
//! engine.

pub(crate) mod foreign;
/// The process's windows (below `progress`: every wait of the crate pokes it).
pub(crate) use crate::pending as registry;
pub(crate) mod shipping;
pub(crate) mod thread;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use crate::backoff::Backoff;
use crate::bootstrap::call::CallTag;
use crate::bootstrap::roster::{PeerWatch, CONFIRM};
use crate::error::{Error, Result};

/// What the engine needs from the object whose synchronizations it runs (a window).
pub(crate) trait Host {
    /// True when the job was aborted (waits give up).
    fn aborted(&self) -> bool;
    /// The members in the node's roster, watched while a collective waits.
    fn watch(&self) -> Option<&PeerWatch>;
    /// Whether `rank` is known to have entered the collective `tag` (`None`: this window's
    /// plane cannot tell).
    fn arrived(&self, tag: CallTag, rank: usize) -> Option<bool>;
    /// The reorder flags in force.
    fn reorder(&self) -> Reorder {
        Reorder::NONE
    }
    /// Completes at their targets the operations issued so far that `scope` covers (see
    /// [`SyncOp::completes`]): whatever route carried them, they have taken effect in the
    /// target's memory when this returns.
    fn complete_issued(&self, scope: Completes) -> Result<()> {
        let _ = scope;
        Ok(())
    }
    /// True when the job ends because it ran out of time and asks every waiting rank what
    /// it waits for (`crate::diag`).
    fn report_requested(&self) -> bool {
        false
    }
    /// The window's id, for events.
    #[cfg_attr(not(feature = "trace"), allow(dead_code))]
    fn id(&self) -> u64 {
        0
    }
    /// `waiting` in a hang report's words (the window, and the watched word's value now).
    fn describe(&self, waiting: &Waiting) -> String {
        waiting.to_string()
    }
}

/// What a blocked synchronization waits for: the subject of a hang report
/// (`crate::diag`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Waiting {
    /// The MPI call that waits (`"MPI_Win_start"`).
    pub call: &'static str,
    /// The rank (of the window) it waits for, when it waits for one.
    pub peer: Option<usize>,
    /// The control word it watches, and the value it needs there (when a count).
    pub word: Option<(crate::plane::CtrlWord, Option<u64>)>,
    /// What the peer has not done yet, in words.
    pub detail: String,
}

impl Waiting {
    /// A wait in `call` for what `detail` says.
    pub(crate) fn new(call: &'static str, detail: impl Into<String>) -> Self {
        Waiting {
            call,
            detail: detail.into(),
            ..Waiting::default()
        }
    }

    /// The same, for rank `peer`.
    pub(crate) fn on(mut self, peer: usize) -> Self {
        self.peer = Some(peer);
        self
    }

    /// The same, watching `word` (until it reaches `need`, for a count).
    pub(crate) fn watching(mut self, word: crate::plane::CtrlWord, need: Option<u64>) -> Self {
        self.word = Some((word, need));
        self
    }
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.call)?;
        if let Some(peer) = self.peer {
            write!(f, " waits for rank {peer}")?;
        } else {
            write!(f, " waits")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        if let Some((word, need)) = &self.word {
            write!(f, " ({word}")?;
            if let Some(need) = need {
                write!(f, ", needs {need}")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// Which operations issued before an op must be complete at their targets before the op
/// takes effect: the completion points of MPI's RMA (MPI-4.1 §12.5) — the calls that close
/// or flush epochs, window collectives, the count of a notified operation.
///
/// The engine asks the host for that completion ([`Host::complete_issued`]) right before an
/// op's first poll, wherever that poll happens (inline in the call, or later behind pending
/// synchronizations, on any thread). So an operation deferred behind a pending epoch —
/// handed to a target's request ring only when the engine reached it — is complete before
/// the call that closes its epoch signals anything: the guarantee lives here, once, not at
/// each closing call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completes {
    /// Nothing: the op opens an epoch, waits for peers, or is itself an operation.
    Nothing,
    /// Everything issued to this target.
    Target(usize),
    /// Everything issued to any target.
    All,
}

/// Result of polling an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The op has completed.
    Done,
    /// The op waits for another process.
    Blocked,
}

/// Polls of a waiting collective before it starts watching its peers.
const WATCH_AFTER_POLLS: u32 = 64;

/// A synchronization in progress on a `C` (a window).
pub(crate) trait SyncOp<C>: Send + 'static {
    /// Advances as far as possible without blocking.
    fn poll(&mut self, core: &C) -> Result<Step>;

    /// What must be complete at the targets before this op's first poll (see
    /// [`Completes`]).
    fn completes(&self) -> Completes {
        Completes::Nothing
    }

    /// The MPI call the op belongs to, for events (`crate::diag`).
    #[cfg_attr(not(feature = "trace"), allow(dead_code))]
    fn name(&self) -> &'static str {
        "a synchronization"
    }

    /// What this op waits for while it is blocked (for the hang report).
    fn waiting(&self, core: &C) -> Waiting {
        let _ = core;
        Waiting::new("a synchronization", "")
    }

    /// True once this op — an unlock waiting for the answer to its release — has put the
    /// release on its way ahead of anything this process issues to that target later
    /// (delivered in order): a later lock epoch of the same target may then pass it where
    /// the reorder flags let epochs pass ([`Order::may_pass_released`]), its lock request
    /// reaching the target behind the release instead of a round trip after it.
    fn released(&self) -> bool {
        false
    }

    /// True once this op — an unlock — sent a release that applies unless its epoch's
    /// lock turns out taken ([`shipping`]): where the reorder flags let a later epoch of
    /// the same target pass a released unlock ([`Order::may_pass_released`]), it may pass
    /// this one too (without the flags, epochs activate in order: only
    /// [`SyncOp::released`] counts). Never false again once true: an op that passed it
    /// may be half-way through a protocol (a ticket of a lock's queue) and must go on
    /// being polled.
    fn release_sent(&self) -> bool {
        self.released()
    }

    /// True while this op — a lock acquisition — waits to see its whole epoch before it
    /// asks for the lock ([`shipping`]).
    fn lazy(&self) -> bool {
        false
    }

    /// The lazy acquisition's epoch is not shipped: it asks for the lock as before.
    fn go_eager(&mut self) {}

    /// What this op is to the lazy epoch it belongs to ([`shipping::ShipRole`]).
    fn ship_role(&self, core: &C) -> shipping::ShipRole {
        let _ = core;
        shipping::ShipRole::Other
    }

    /// An update of a lazy epoch ([`shipping::ShipRole::Update`]): its request in the
    /// epoch's message, encoded; `None` when it cannot travel there after all.
    fn ship_request(&self, core: &C) -> Option<Vec<u8>> {
        let _ = core;
        None
    }

    /// The epoch ships ([`shipping`]): an acquisition takes what it needs first (false:
    /// it cannot, nothing changed); an update completes at its poll (it travels in the
    /// message); the unlock takes `payload` and sends the epoch.
    fn ship(&mut self, core: &C, payload: Option<Vec<u8>>) -> bool {
        let _ = (core, payload);
        false
    }
}

/// Identifies a queued op.
pub(crate) type Ticket = u64;

struct Queued<C> {
    ticket: Ticket,
    order: Order,
    op: Box<dyn SyncOp<C>>,
    /// The completion its [`SyncOp::completes`] asks for is done (before its first poll).
    settled: bool,
    /// The thread that started it.
    issuer: ThreadTag,
    /// Started by a blocking call, which waits for it before it returns ([`blocking_start`]):
    /// nothing its thread does later can be ordered after it yet, so it holds back no other
    /// thread's op (see [`Queued::holds_back`]).
    in_blocking_call: bool,
    /// A lock acquisition that ran early — behind released unlocks of its target only
    /// ([`Queued::lets_open_early`]) — and is done: it stays queued, unpolled, until the ops
    /// before it complete, so that requests still complete in order.
    done_early: bool,
}

impl<C: 'static> Queued<C> {
    /// True when this op, queued earlier, keeps an op of epoch `later` started by thread
    /// `by` from running (or an operation of that epoch from touching target memory).
    ///
    /// Serial activation orders one thread's epochs ([Zounmevo14] rule 4, and
    /// [`Order::may_pass`]). Across threads only happens-before orders them: an op of a
    /// blocking call that has not returned yet happens-before nothing another thread does,
    /// so it holds back no op of another thread — a thread waiting in `lock` does not make
    /// every other thread of its process wait with it (MPI-4.1 §11.6: a blocking call
    /// blocks the calling thread only). Ops of calls that returned (nonblocking ones) keep
    /// their place: the application may have ordered other threads after them.
    ///
    /// Except for its own epoch: an operation of the epoch a blocking call of another
    /// thread is still opening (a put to the target whose `lock` that thread waits for)
    /// cannot have been ordered after that call's return, so it is erroneous — and waits
    /// behind it, as before, rather than touch the target early.
    fn holds_back(&self, later: Order, by: ThreadTag, flags: Reorder) -> bool {
        let concurrent = self.in_blocking_call && self.issuer != by && self.order != later;
        !(concurrent
            || later.may_pass(self.order, flags)
            || self.op.release_sent() && later.may_pass_released(self.order, flags))
    }

    /// Polls the op, after the completion its [`SyncOp::completes`] asks for on its first
    /// poll.
    fn poll_settled(&mut self, core: &C) -> Result<Step>
    where
        C: Host,
    {
        if !self.settled {
            self.settled = true;
            settle_before_poll(core, &*self.op)?;
        }
        self.op.poll(core)
    }

    /// True when this op, queued earlier, holds back the lock acquisition `later` only
    /// until it completes, not from running: this op is an unlock of the same target whose
    /// release is on its way ([`SyncOp::released`]), so the acquisition's lock request
    /// reaches the target behind it and cannot take the lock before the release applies —
    /// what serial activation asks for — while it saves the round trip between the two.
    /// The acquisition completes only after this op does ([`Queued::done_early`]).
    fn lets_open_early(&self, later: Order) -> bool {
        later.opens
            && later.target != NO_TARGET
            && later.target == self.order.target
            && later.reorderable
            && self.order.reorderable
            && later.epoch > self.order.epoch
            && self.op.released()
    }
}

/// Which epochs may activate while an earlier epoch of the window is still pending: the
/// four flags of \[Zounmevo14\] §VI-B, set with the info keys
/// `MPI_WIN_ACCESS_AFTER_ACCESS_REORDER` & co. (all off by default: epochs activate one
/// after the other). Turning one on promises that the epochs it lets run concurrently touch
/// disjoint memory. The flags never apply next to fence or lock_all epochs, nor to
/// flushes and window collectives, which stay in order with everything.
///
/// ```
/// use onesided::{Reorder, WinInfo};
/// let info = WinInfo::new().reorder(Reorder { access_after_access: true, ..Reorder::NONE });
/// assert_eq!(info.get("MPI_WIN_ACCESS_AFTER_ACCESS_REORDER"), Some("1"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reorder {
    /// A_A_A_R: an access epoch may activate while an earlier access epoch is pending.
    pub access_after_access: bool,
    /// A_A_E_R: an access epoch may activate while an earlier exposure epoch is pending.
    pub access_after_exposure: bool,
    /// E_A_E_R: an exposure epoch may activate while an earlier exposure epoch is pending.
    pub exposure_after_exposure: bool,
    /// E_A_A_R: an exposure epoch may activate while an earlier access epoch is pending.
    pub exposure_after_access: bool,
}

impl Reorder {
    /// No reordering (the default).
    pub const NONE: Reorder = Reorder {
        access_after_access: false,
        access_after_exposure: false,
        exposure_after_exposure: false,
        exposure_after_access: false,
    };
    /// Every reordering.
    pub const ALL: Reorder = Reorder {
        access_after_access: true,
        access_after_exposure: true,
        exposure_after_exposure: true,
        exposure_after_access: true,
    };

    /// True when no flag is set.
    pub fn is_none(self) -> bool {
        self == Reorder::NONE
    }

    /// The flags as bits (for an atomic).
    pub(crate) fn bits(self) -> u8 {
        u8::from(self.access_after_access)
            | u8::from(self.access_after_exposure) << 1
            | u8::from(self.exposure_after_exposure) << 2
            | u8::from(self.exposure_after_access) << 3
    }

    /// The flags from [`Reorder::bits`].
    pub(crate) fn from_bits(bits: u8) -> Reorder {
        Reorder {
            access_after_access: bits & 1 != 0,
            access_after_exposure: bits & 2 != 0,
            exposure_after_exposure: bits & 4 != 0,
            exposure_after_access: bits & 8 != 0,
        }
    }

    fn allows(self, later: Side, earlier: Side) -> bool {
        match (later, earlier) {
            (Side::Access, Side::Access) => self.access_after_access,
            (Side::Access, Side::Exposure) => self.access_after_exposure,
            (Side::Exposure, Side::Exposure) => self.exposure_after_exposure,
            (Side::Exposure, Side::Access) => self.exposure_after_access,
        }
    }
}

/// The side of an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// Origin side (start/complete, lock/unlock).
    Access,
    /// Target side (post/wait).
    Exposure,
}

/// The epoch an op belongs to, for the reorder rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Order {
    epoch: u64,
    side: Side,
    /// False for fence and lock_all epochs, flushes and collectives: in order with all.
    reorderable: bool,
    /// The target of a lock epoch ([`NO_TARGET`] for every other epoch).
    target: usize,
    /// The op acquires the lock of its epoch ([`Order::opening`]).
    opens: bool,
}

/// [`Order::target`] of epochs that are not lock epochs.
const NO_TARGET: usize = usize::MAX;

impl Order {
    /// In order with every other op.
    pub(crate) const BARRIER: Order = Order {
        epoch: u64::MAX,
        side: Side::Access,
        reorderable: false,
        target: NO_TARGET,
        opens: false,
    };

    /// An op of PSCW access epoch number `epoch`.
    pub(crate) fn access(epoch: u64) -> Order {
        Order {
            epoch,
            side: Side::Access,
            reorderable: true,
            target: NO_TARGET,
            opens: false,
        }
    }

    /// An op of lock epoch number `epoch` on `target`.
    pub(crate) fn lock(epoch: u64, target: usize) -> Order {
        Order {
            target,
            ..Order::access(epoch)
        }
    }

    /// An op of exposure epoch number `epoch`.
    pub(crate) fn exposure(epoch: u64) -> Order {
        Order {
            epoch,
            side: Side::Exposure,
            reorderable: true,
            target: NO_TARGET,
            opens: false,
        }
    }

    /// This order for the op that acquires a lock epoch's lock: it may run behind released
    /// unlocks of its target ([`Queued::lets_open_early`]).
    pub(crate) fn opening(self) -> Order {
        Order {
            opens: self.target != NO_TARGET,
            ..self
        }
    }

    /// This order for an op that must not run early ([`Engine::passes_all`]).
    fn strict(self) -> Order {
        Order {
            opens: false,
            ..self
        }
    }

    /// True when `self` may run while `earlier`, queued before it, is still pending.
    ///
    /// Serial activation ([Zounmevo14] rule 4) orders the *activation* of epochs: an op of
    /// an epoch opened later waits for the pending ops of epochs opened before it, unless
    /// the reorder flags allow it. An op of an epoch opened *earlier* — the `unlock` or
    /// `flush` of a lock already held, queued behind the pending `lock` of another target —
    /// passes without flags: it activates nothing, and waiting there would couple
    /// independent epochs (two threads' locks on different targets) into a cycle across
    /// processes. Ops of one epoch stay in order; fence and lock_all epochs, flushes of
    /// everything and collectives pass nothing and are passed by nothing. A lock epoch
    /// never passes an earlier one on the same target (an `ilock` right after an `iunlock`
    /// of that target), flags or not: both want the same lock, so the later one would only
    /// take a second place in that lock's queue, and the other processes' epochs would wait
    /// behind two of ours (measured: with A_A_A_R, hot-spot transactions slower than without).
    /// Once the earlier unlock's release is on its way, the later lock's acquisition may
    /// run behind it even without flags (`Queued::lets_open_early`).
    fn may_pass(self, earlier: Order, flags: Reorder) -> bool {
        self.reorderable
            && earlier.reorderable
            && (self.epoch < earlier.epoch
                || self.epoch > earlier.epoch
                    && flags.allows(self.side, earlier.side)
                    && (self.target == NO_TARGET || self.target != earlier.target))
    }

    /// [`Order::may_pass`] for an `earlier` op whose release is already on its way
    /// ([`SyncOp::released`]): the same-target rule does not hold it back, since this
    /// epoch's lock request reaches the target behind that release and takes the lock
    /// as soon as the release lets it, not a second place in its queue.
    fn may_pass_released(self, earlier: Order, flags: Reorder) -> bool {
        self.reorderable
            && earlier.reorderable
            && self.epoch > earlier.epoch
            && flags.allows(self.side, earlier.side)
    }
}

thread_local! {
    /// True while the calling thread runs the starting half of a blocking call.
    static IN_BLOCKING_START: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `start`, the starting half of a blocking synchronization call (whose other half
/// waits for the op it starts): an op it queues is marked as one a blocking call waits
/// for, which holds back no other thread's ops ([`Queued::holds_back`]). Marking it when it
/// is queued costs one thread-local store, where marking it in the wait would take the
/// queue's lock once more.
#[inline]
pub(crate) fn blocking_start<R>(start: impl FnOnce() -> R) -> R {
    /// Clears the mark also when `start` unwinds.
    struct Started;
    impl Drop for Started {
        fn drop(&mut self) {
            IN_BLOCKING_START.with(|b| b.set(false));
        }
    }
    IN_BLOCKING_START.with(|b| b.set(true));
    let _started = Started;
    start()
}

/// True while the calling thread runs the starting half of a blocking call
/// ([`blocking_start`]).
pub(crate) fn in_blocking_start() -> bool {
    IN_BLOCKING_START.with(std::cell::Cell::get)
}

pub(crate) use crate::attention::{thread_tag, ThreadTag};

/// What a run of pending ops holds back when no reorder flag is set, summed up so that
/// [`Engine::drive`] decides in O(1) per op: with the flags off, an op passes an earlier
/// one only when both are reorderable and the earlier one belongs to a later epoch
/// ([`Order::may_pass`]), or when the earlier one is in a blocking call of another thread
/// ([`Queued::holds_back`]) — and such an op holds back only ops of its own epoch, since
/// its own thread issues nothing while it waits.
#[derive(Debug, Clone, Default)]
struct Pending {
    /// The least epoch of the ops that count (`None`: no op counts yet).
    min_epoch: Option<u64>,
    /// Some op that counts is not reorderable.
    any_unreorderable: bool,
    /// The epochs of the ops of blocking calls in the run: they hold back only ops of their
    /// own epoch (rare: another thread waits in a blocking call).
    blocking: Vec<Order>,
    /// Every op that counts is an unlock of this target whose release is on its way
    /// ([`Queued::lets_open_early`]); `Some(NO_TARGET)` once any is not.
    released_on: Option<usize>,
}

impl Pending {
    fn add<C: 'static>(&mut self, q: &Queued<C>) {
        if q.in_blocking_call {
            self.blocking.push(q.order);
            return;
        }
        self.any_unreorderable |= !q.order.reorderable;
        self.min_epoch = Some(
            self.min_epoch
                .map_or(q.order.epoch, |m| m.min(q.order.epoch)),
        );
        let target = q.order.target;
        self.released_on = Some(
            if q.order.reorderable
                && target != NO_TARGET
                && self.released_on.is_none_or(|t| t == target)
                && q.op.released()
            {
                target
            } else {
                NO_TARGET
            },
        );
    }

    /// True when the ops that count are released unlocks of one target (a lock
    /// acquisition of that target may run early).
    fn released_run(&self) -> bool {
        matches!(self.released_on, Some(t) if t != NO_TARGET)
    }

    /// True when the lock acquisition `later` may run early behind the run
    /// ([`Queued::lets_open_early`]; the run's epochs are all below `later`'s, as an op's
    /// earlier in the queue than an acquisition of a later epoch).
    fn lets_open_early(&self, later: Order) -> bool {
        later.opens
            && later.reorderable
            && self.released_on == Some(later.target)
            && self.min_epoch.is_some_and(|m| m < later.epoch)
            && !self.blocking.contains(&later)
    }

    /// True when some op of the run counts.
    fn counts_any(&self) -> bool {
        self.min_epoch.is_some()
    }

    /// True when an op of epoch `later` may pass every op of the run.
    fn lets_pass(&self, later: Order) -> bool {
        let by_counted = match self.min_epoch {
            None => true,
            Some(min) => later.reorderable && !self.any_unreorderable && later.epoch < min,
        };
        by_counted && !self.blocking.contains(&later)
    }

    /// True when no op at all may pass the run (it holds a fence, lock_all, flush or
    /// collective).
    fn holds_back_everything(&self) -> bool {
        self.any_unreorderable
    }
}

/// The queue and what its pollers leave for the owner.
struct Queue<C> {
    ops: VecDeque<Queued<C>>,
    /// The error of an op that another thread polled, for the owner's next call.
    parked: Option<Error>,
    /// Ops queued with an epoch below that of some reorderable op queued before them: the
    /// only ones that may ever pass a pending op without reorder flags ([`Order::may_pass`]).
    /// Counted at enqueue and reset when the queue empties; an op that was not one when
    /// queued never becomes one (the ops before it only go), so the count never falls
    /// short. With none, [`Engine::drive`] stops at the first op that stays pending.
    passers: usize,
    /// The greatest epoch of the reorderable ops queued since the queue was last empty.
    max_epoch: u64,
}

/// Bit of an engine's `queued` word: another engine of the process has ops queued. Set by
/// the registry when the process count leaves zero; cleared by the engine itself once it
/// sees the count at zero ([`Engine::settle`]).
pub(crate) const ATTENTION: usize = 1 << (usize::BITS - 1);

/// Bit of an engine's `queued` word: an op polled by another thread failed, and its error
/// waits in the queue's `parked` for the owner's next call.
const PARKED: usize = 1 << (usize::BITS - 2);

/// The op count in an engine's `queued` word.
const COUNT: usize = PARKED - 1;

/// Per-window queue of pending synchronizations.
pub(crate) struct Engine<C> {
    queue: Mutex<Queue<C>>,
    /// Ops in `queue` (readable without the lock), plus [`ATTENTION`] and [`PARKED`]: zero
    /// means nothing to do here or anywhere in the process, the fast paths' one load.
    queued: AtomicUsize,
    next_ticket: AtomicU64,
    /// Every ticket below this one has completed.
    done_below: AtomicU64,
    /// Some op completed while an earlier one was still queued (reorder flags): tickets at
    /// or above `done_below` may be complete too.
    reordered: AtomicBool,
    /// The host as the registry sees it (set when the host is put in its `Arc`).
    home: OnceLock<Weak<dyn registry::Pending>>,
}

impl<C> Default for Engine<C> {
    fn default() -> Self {
        Engine {
            queue: Mutex::new(Queue {
                ops: VecDeque::new(),
                parked: None,
                passers: 0,
                max_epoch: 0,
            }),
            queued: AtomicUsize::new(0),
            next_ticket: AtomicU64::new(0),
            done_below: AtomicU64::new(0),
            reordered: AtomicBool::new(false),
            home: OnceLock::new(),
        }
    }
}

impl<C> std::fmt::Debug for Engine<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish()
    }
}

impl<C> Drop for Engine<C> {
    /// Ops still queued (a window dropped without being freed) leave the process count.
    fn drop(&mut self) {
        let left = *self.queued.get_mut() & COUNT;
        if left > 0 {
            registry::note_queued(-(left as isize));
        }
    }
}

impl<C> Engine<C> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<C>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<C: Host + Send + Sync + 'static> Engine<C> {
    /// Tells the engine where its host lives, so that other threads can drive it once it
    /// queues work. Called once, when the host is put in its `Arc`.
    pub(crate) fn set_home(this: &Arc<C>, engine: impl Fn(&C) -> &Engine<C>)
    where
        C: registry::Pending,
    {
        let weak: Weak<dyn registry::Pending> = Arc::downgrade(this) as _;
        if engine(this).home.set(weak.clone()).is_ok() {
            registry::register(weak);
        }
    }

    /// True when no op of this engine is pending.
    #[inline]
    pub(crate) fn idle(&self) -> bool {
        // Acquire: pairs with the Release that publishes a drained queue, so whatever the
        // ops did (a lock acquired by another thread) is visible to the caller that goes on.
        // A plain load on x86 and arm64's ldar.
        self.queued.load(Ordering::Acquire) & COUNT == 0
    }

    /// True when nothing is pending here and no other engine of the process asked for
    /// attention: the fast paths' one load.
    #[inline(always)]
    pub(crate) fn quiet(&self) -> bool {
        // Acquire: as in `idle`.
        self.queued.load(Ordering::Acquire) == 0
    }

    /// Marks that another engine has ops queued (the registry calls it).
    pub(crate) fn set_attention(&self) {
        // SeqCst: pairs with `settle` (see there).
        self.queued.fetch_or(ATTENTION, Ordering::SeqCst);
    }

    /// Clears the attention bit once nothing is queued in the process any more. The bit is
    /// cleared first and set again if the process count is not zero after that: with the
    /// registry's increment-then-set (all SeqCst), a count that leaves zero concurrently is
    /// either seen here or sets the bit after our clear.
    fn settle(&self) {
        if self.queued.load(Ordering::Relaxed) & ATTENTION == 0 || registry::pending_now() {
            return;
        }
        self.queued.fetch_and(!ATTENTION, Ordering::SeqCst);
        if registry::pending_now() {
            self.queued.fetch_or(ATTENTION, Ordering::SeqCst);
        }
    }

    /// What every synchronization call does on entry: drive every window's queue if any
    /// has work, and drop this engine's attention bit once nothing is left.
    #[inline]
    pub(crate) fn catch_up(&self) {
        // Others have work when the process count exceeds our own ops.
        if registry::pending_beyond(self.queued.load(Ordering::Relaxed) & COUNT) {
            self.progress_others();
        }
        self.settle();
    }

    /// Drives every other engine of the process (our own queue is driven by the caller
    /// right after).
    #[cold]
    #[inline(never)]
    fn progress_others(&self) {
        let me = self
            .home
            .get()
            .map_or(std::ptr::null(), |w| w.as_ptr() as *const ());
        registry::progress_all_but(me);
    }

    /// Starts `op`: completes it inline when possible, queues it otherwise.
    /// Returns `None` when it completed, its ticket when it is pending.
    #[inline]
    pub(crate) fn start<O: SyncOp<C>>(&self, core: &C, op: O) -> Result<Option<Ticket>> {
        self.start_ordered(core, op, Order::BARRIER)
    }

    /// [`Engine::start`] for an op of the epoch `order`: with reorder flags it may run
    /// while earlier epochs are still pending.
    #[inline(always)]
    pub(crate) fn start_ordered<O: SyncOp<C>>(
        &self,
        core: &C,
        mut op: O,
        order: Order,
    ) -> Result<Option<Ticket>> {
        // Nothing queued here or elsewhere, no error parked: poll inline at once.
        // Nothing queued here or elsewhere, no error parked: poll inline at once. With
        // reorder flags, also when the op may pass every op still queued here (then it
        // costs no allocation and no queue scan when it completes at once).
        let inline = self.quiet() || {
            self.catch_up();
            self.take_parked()?;
            self.idle() || self.passes_all(core, order)
        };
        if inline {
            settle_before_poll(core, &op)?;
            if op.poll(core)? == Step::Done {
                return Ok(None);
            }
        }
        self.queue_op(core, Box::new(op), order, inline).map(Some)
    }

    /// The part of `start_ordered` for an op that must wait: out of line, so that the inline
    /// fast path stays small.
    #[cold]
    #[inline(never)]
    fn queue_op(
        &self,
        core: &C,
        op: Box<dyn SyncOp<C>>,
        order: Order,
        settled: bool,
    ) -> Result<Ticket> {
        crate::diag::event!(
            target: "onesided::sync",
            window = ?crate::diag::Hex(core.id()),
            op = op.name(),
            queued_before = self.queued.load(Ordering::Relaxed) & COUNT,
            "synchronization pending"
        );
        let ticket = self.enqueue(op, order, settled);
        if order.reorderable {
            // It may pass the pending epochs: give it its first poll now (and advance the
            // head meanwhile; without reorder flags the walk stops at the first op that
            // stays pending when nothing queued can pass it).
            self.drive(core, true)?;
        }
        Ok(ticket)
    }

    #[inline(never)]
    fn enqueue(&self, op: Box<dyn SyncOp<C>>, order: Order, settled: bool) -> Ticket {
        let ticket = {
            let mut q = self.lock();
            // Relaxed: tickets are handed out under the queue lock.
            let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
            if q.ops.is_empty() {
                q.passers = 0;
                q.max_epoch = 0;
            }
            if order.reorderable {
                if order.epoch < q.max_epoch {
                    q.passers += 1;
                }
                q.max_epoch = q.max_epoch.max(order.epoch);
            }
            q.ops.push_back(Queued {
                ticket,
                order,
                op,
                settled,
                issuer: thread_tag(),
                in_blocking_call: IN_BLOCKING_START.with(std::cell::Cell::get),
                done_early: false,
            });
            // Relaxed: only read as "nonzero"; the ops it counts are reached under the lock.
            self.queued.fetch_add(1, Ordering::Relaxed);
            ticket
        };
        registry::note_queued(1);
        ticket
    }

    /// Starts `op` and waits for it, as the window collective `tag`: while it waits, it watches the peers
    /// (an exited peer or one blocked in another of our collectives is an error, see
    /// `bootstrap::roster`).
    pub(crate) fn run_collective<O: SyncOp<C>>(&self, core: &C, op: O, tag: CallTag) -> Result<()> {
        match blocking_start(|| self.start(core, op))? {
            None => Ok(()),
            Some(t) => self.wait(core, t, Some(tag)),
        }
    }

    /// True when the op with `ticket` has completed (without reorder flags, every op before
    /// it has too).
    pub(crate) fn completed(&self, ticket: Ticket) -> bool {
        // Acquire: pairs with the Release that retires the op, so its effects are visible.
        if ticket < self.done_below.load(Ordering::Acquire) {
            return true;
        }
        // Relaxed: set under the queue lock, which the search below takes.
        self.reordered.load(Ordering::Relaxed)
            && ticket < self.next_ticket.load(Ordering::Relaxed)
            && !self.lock().ops.iter().any(|q| q.ticket == ticket)
    }

    /// True when the reorder flags let an op of epoch `order` pass every op queued now.
    fn passes_all(&self, core: &C, order: Order) -> bool {
        // Strict: an acquisition that may only run early is queued (and polled there), so
        // that it does not complete before the ops it runs behind.
        order.reorderable && !self.holds_back(order.strict(), core.reorder())
    }

    /// True when a queued op is one that an op of epoch `order`, started by the calling
    /// thread, may not pass.
    pub(crate) fn holds_back(&self, order: Order, flags: Reorder) -> bool {
        let me = thread_tag();
        self.lock()
            .ops
            .iter()
            .any(|q| q.holds_back(order, me, flags))
    }

    /// Lock acquisitions that wait to see their epoch whole ([`shipping`]) ask for their
    /// locks at once: a thread waits for an epoch to activate (an operation that needs a
    /// result, or finds no room to be deferred), which such a wait would only delay.
    pub(crate) fn end_lazy_locks(&self) {
        for q in self.lock().ops.iter_mut() {
            if q.op.lazy() {
                q.op.go_eager();
            }
        }
    }

    /// The error an op left when another thread polled it.
    fn take_parked(&self) -> Result<()> {
        // Relaxed: set under the queue lock, which we take before reading the error.
        if self.queued.load(Ordering::Relaxed) & PARKED == 0 {
            return Ok(());
        }
        let mut q = self.lock();
        self.queued.fetch_and(!PARKED, Ordering::Relaxed);
        q.parked.take().map_or(Ok(()), Err)
    }

    /// Polls queued ops in order; returns true when at least one completed. `owner` says
    /// whether the caller is the window's own call (which receives errors) or another
    /// thread (which parks them).
    fn drive(&self, core: &C, owner: bool) -> Result<bool> {
        let Ok(mut q) = self.queue.try_lock() else {
            // Another thread is driving this queue right now.
            return Ok(false);
        };
        if owner {
            if let Some(e) = q.parked.take() {
                self.queued.fetch_and(!PARKED, Ordering::Relaxed);
                return Err(e);
            }
        }
        let mut completed = 0usize;
        // An op runs when it may pass every op still queued before it (`Order::may_pass`:
        // serial activation, [Zounmevo14] rule 4, relaxed for older epochs and by the
        // reorder flags); the ops before index `i` are exactly those still pending.
        let flags = core.reorder();
        // Without reorder flags, what the ops before `i` hold back is summed up as it grows:
        // O(1) per op, and the walk stops where nothing later can run.
        let mut before = Pending::default();
        let mut i = 0;
        let result = loop {
            let Some((order, issuer)) = q.ops.get(i).map(|queued| (queued.order, queued.issuer))
            else {
                break Ok(());
            };
            let (may_run, early) = if flags.is_none() {
                if before.holds_back_everything()
                    || before.counts_any() && q.passers == 0 && !before.released_run()
                {
                    break Ok(());
                }
                let may_run = before.lets_pass(order);
                (may_run, !may_run && before.lets_open_early(order))
            } else {
                let ahead = q.ops.range(..i);
                let may_run = !ahead.clone().any(|p| p.holds_back(order, issuer, flags));
                let early = !may_run
                    && order.opens
                    && ahead
                        .filter(|p| p.holds_back(order, issuer, flags))
                        .all(|p| p.lets_open_early(order));
                (may_run, early)
            };
            if may_run && q.ops[i].done_early {
                // Done before; the ops it ran behind have completed now.
                q.ops.remove(i);
                completed += 1;
                if i > 0 {
                    self.reordered.store(true, Ordering::Relaxed);
                }
                continue;
            }
            if early && !q.ops[i].done_early {
                if q.ops[i].op.lazy() {
                    decide_shipping(&mut q.ops, i, core);
                }
                let polled = q.ops[i].poll_settled(core);
                match polled {
                    Ok(Step::Blocked) => {}
                    Ok(Step::Done) => q.ops[i].done_early = true,
                    Err(e) => {
                        q.ops.remove(i);
                        completed += 1;
                        break Err(e);
                    }
                }
            } else if may_run {
                if q.ops[i].op.lazy() {
                    decide_shipping(&mut q.ops, i, core);
                }
                let polled = q.ops[i].poll_settled(core);
                if !matches!(polled, Ok(Step::Blocked)) {
                    crate::diag::event!(
                        target: "onesided::sync",
                        window = ?crate::diag::Hex(core.id()),
                        op = q.ops[i].op.name(),
                        ok = polled.is_ok(),
                        "pending synchronization done"
                    );
                    q.ops.remove(i);
                    completed += 1;
                    if i > 0 {
                        self.reordered.store(true, Ordering::Relaxed);
                    }
                    match polled {
                        Err(e) => break Err(e),
                        _ => continue,
                    }
                }
            }
            before.add(&q.ops[i]);
            i += 1;
        };
        if completed > 0 {
            let done_below = q
                .ops
                .front()
                .map_or(self.next_ticket.load(Ordering::Relaxed), |f| f.ticket);
            // Release: what the completed ops did happens-before a caller that sees them
            // complete (`completed`, `idle`).
            self.done_below.store(done_below, Ordering::Release);
            self.queued.fetch_sub(completed, Ordering::Release);
            registry::note_queued(-(completed as isize));
        }
        match result {
            Ok(()) => Ok(completed > 0),
            Err(e) if owner => Err(e),
            Err(e) => {
                q.parked.get_or_insert(e);
                // Relaxed: the error itself is handed over under the queue lock.
                self.queued.fetch_or(PARKED, Ordering::Relaxed);
                Ok(true)
            }
        }
    }

    /// Polls queued ops in order (the window's own call); returns true when at least one
    /// completed.
    pub(crate) fn progress(&self, core: &C) -> Result<bool> {
        self.catch_up();
        if self.quiet() {
            // Nothing queued or parked here: skip the queue's lock (waits poll this often).
            return Ok(false);
        }
        self.drive(core, true)
    }

    /// Polls queued ops for another thread; errors are parked for the owner.
    pub(crate) fn progress_for_other(&self, core: &C) -> bool {
        if self.idle() {
            return false;
        }
        self.drive(core, false).unwrap_or(true)
    }

    /// Drives the queue until `ticket` completed, backing off while nothing moves; with
    /// `collective`, watches the peers of that window collective meanwhile.
    pub(crate) fn wait(&self, core: &C, ticket: Ticket, collective: Option<CallTag>) -> Result<()> {
        self.wait_until(
            core,
            || self.completed(ticket),
            collective,
            || self.describe_wait(core, Some(ticket)),
        )
    }

    /// What the op with `ticket` (or, without one, the queue) waits for, in a hang
    /// report's words: the op itself, and the first op still blocked before it.
    pub(crate) fn describe_wait(&self, core: &C, ticket: Option<Ticket>) -> String {
        let q = self.lock();
        let Some(first) = q.ops.front() else {
            return "nothing queued (the wait's condition is not met)".into();
        };
        let head = core.describe(&first.op.waiting(core));
        let awaited = ticket.and_then(|t| q.ops.iter().position(|o| o.ticket == t));
        match awaited {
            Some(0) | None => head,
            Some(i) => format!(
                "{}, queued behind {i} earlier synchronization(s) of the window; the first: {head}",
                core.describe(&q.ops[i].op.waiting(core))
            ),
        }
    }

    /// Drives the queue until `done()` holds, backing off while nothing moves; with
    /// `collective`, watches the peers of that window collective meanwhile. `describe` says
    /// what the wait waits for, should it last (see `crate::diag`).
    pub(crate) fn wait_until(
        &self,
        core: &C,
        done: impl Fn() -> bool,
        collective: Option<CallTag>,
        describe: impl Fn() -> String,
    ) -> Result<()> {
        let mut backoff = Backoff::new();
        let mut hang = crate::diag::HangClock::new();
        // The peer watch starts only once the wait is not short: a fence that completes
        // within a few polls pays no clock read and publishes no wait.
        let mut polls = 0u32;
        let mut vigil = None;
        // A member seen exited during a point-to-point wait, and since when the wait watched.
        let mut exit_seen: Option<ExitSeen> = None;
        loop {
            if self.progress(core)? {
                backoff.reset();
                // The wait moves: it is not stranded (yet), whoever exited.
                exit_seen = None;
            }
            if done() {
                return Ok(());
            }
            if core.aborted() {
                if core.report_requested() {
                    hang.timed_out(&describe);
                }
                return Err(Error::JobAborted);
            }
            hang.tick(&describe);
            if let Some(tag) = collective {
                polls += 1;
                if polls == WATCH_AFTER_POLLS {
                    vigil = core.watch().map(|w| w.vigil(tag));
                }
                if let Some(v) = vigil.as_mut() {
                    v.check(|r| core.arrived(tag, r))?;
                }
            } else if polls < WATCH_AFTER_POLLS {
                polls += 1;
            } else {
                check_exits(core, &mut exit_seen, &describe)?;
            }
            backoff.snooze();
        }
    }
}

/// A member seen exited while a point-to-point wait went on.
struct ExitSeen {
    rank: usize,
    /// Since when the wait has looked at its condition without progress.
    since: std::time::Instant,
    /// The wait's last look (each check follows a poll of its condition).
    last_look: std::time::Instant,
}

/// A gap between two looks of a wait longer than this means the process did not run
/// (an oversubscribed node; the wait's own longest sleep is 0.5 ms): the [`CONFIRM`] period
/// starts again, since a process that was not running did not watch its condition.
const STARVED: std::time::Duration = std::time::Duration::from_millis(250);

/// The peer check of a wait that is not a collective (a post, an origin's completion, a
/// lock, a notification): once a member of the window has exited and the wait has watched
/// its condition for [`CONFIRM`] since without progress, it never will end — the member
/// cannot post, complete, unlock or notify any more. (A wait the exited member had already
/// satisfied ends before that; one that depends on a slow member still alive moves, which
/// starts the period again, as does a gap in which this process did not run.)
fn check_exits<C: Host>(
    core: &C,
    exit_seen: &mut Option<ExitSeen>,
    describe: &impl Fn() -> String,
) -> Result<()> {
    match exit_seen {
        Some(seen) => {
            let now = std::time::Instant::now();
            if now.duration_since(seen.last_look) > STARVED {
                seen.since = now;
            }
            seen.last_look = now;
            if now.duration_since(seen.since) >= CONFIRM {
                crate::diag::event!(
                    target: "onesided::sync",
                    rank = seen.rank,
                    waited = %describe(),
                    "a wait gave up: a member exited and the wait stopped moving"
                );
                // Used by the event only (feature `trace`).
                let _ = describe;
                return Err(Error::PeerGone { rank: seen.rank });
            }
        }
        None => {
            if let Some(rank) = core.watch().and_then(PeerWatch::exited_member) {
                let now = std::time::Instant::now();
                *exit_seen = Some(ExitSeen {
                    rank,
                    since: now,
                    last_look: now,
                });
            }
        }
    }
    Ok(())
}

/// Decides for the lazy lock acquisition `ops[i]`, about to be polled ([`shipping`]):
/// ships its epoch when the whole epoch is queued and can travel in one message, makes it
/// ask for the lock as before when the epoch holds something that cannot, and otherwise
/// leaves it lazy.
fn decide_shipping<C: Host + 'static>(ops: &mut VecDeque<Queued<C>>, i: usize, core: &C) {
    let epoch = ops[i].order;
    let mut updates = Vec::new();
    let mut close = None;
    for (j, q) in ops.iter().enumerate().skip(i + 1).take(shipping::SCAN) {
        if !q.order.reorderable {
            // It completes or orders what the epoch issued: the epoch cannot wait for it.
            ops[i].op.go_eager();
            return;
        }
        if q.order.epoch != epoch.epoch || q.order.target != epoch.target {
            continue;
        }
        match q.op.ship_role(core) {
            shipping::ShipRole::Update => updates.push(j),
            shipping::ShipRole::Close => {
                close = Some(j);
                break;
            }
            shipping::ShipRole::Other => {
                ops[i].op.go_eager();
                return;
            }
        }
    }
    let Some(u) = close else {
        // The unlock may come yet (the lock's own poll ends the wait after a while).
        return;
    };
    // The whole epoch is queued: its requests, encoded once.
    let mut payload = Vec::new();
    for &j in &updates {
        match ops[j].op.ship_request(core) {
            Some(r) if payload.len() + r.len() <= shipping::MAX_PAYLOAD => {
                payload.extend_from_slice(&r)
            }
            _ => {
                ops[i].op.go_eager();
                return;
            }
        }
    }
    if !ops[i].op.ship(core, None) {
        ops[i].op.go_eager();
        return;
    }
    for j in updates {
        ops[j].op.ship(core, None);
    }
    crate::diag::event!(
        target: "onesided::sync",
        window = ?crate::diag::Hex(core.id()),
        target_rank = epoch.target,
        bytes = payload.len(),
        "epoch sent in one message"
    );
    ops[u].op.ship(core, Some(payload));
}

/// Completes what `op` needs complete before its first poll ([`SyncOp::completes`]).
#[inline]
fn settle_before_poll<C: Host, O: SyncOp<C> + ?Sized>(core: &C, op: &O) -> Result<()> {
    match op.completes() {
        Completes::Nothing => Ok(()),
        scope => core.complete_issued(scope),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// A host with nothing but an engine.
    #[derive(Default)]
    struct Fake {
        engine: Engine<Fake>,
        /// Ops completed, in order (each op writes its id).
        log: Mutex<Vec<u32>>,
        reorder: Mutex<Reorder>,
    }

    impl Host for Fake {
        fn aborted(&self) -> bool {
            false
        }
        fn watch(&self) -> Option<&PeerWatch> {
            None
        }
        fn arrived(&self, _: CallTag, _: usize) -> Option<bool> {
            Some(true)
        }
        fn reorder(&self) -> Reorder {
            *self.reorder.lock().unwrap()
        }
        /// Logs 1000 (everything) or 2000 + target.
        fn complete_issued(&self, scope: Completes) -> Result<()> {
            let code = match scope {
                Completes::Nothing => unreachable!("never asked for nothing"),
                Completes::Target(t) => 2000 + t as u32,
                Completes::All => 1000,
            };
            self.log.lock().unwrap().push(code);
            Ok(())
        }
    }

    impl registry::Pending for Fake {
        fn progress_for_other(&self) -> bool {
            self.engine.progress_for_other(self)
        }
        fn set_attention(&self) {
            self.engine.set_attention();
        }
    }

    /// Completes once `gate` reaches `at`; fails instead when `fail`.
    struct GateOp {
        id: u32,
        gate: Arc<AtomicU32>,
        at: u32,
        fail: bool,
    }

    impl SyncOp<Fake> for GateOp {
        fn poll(&mut self, host: &Fake) -> Result<Step> {
            if self.gate.load(Ordering::Acquire) < self.at {
                return Ok(Step::Blocked);
            }
            host.log.lock().unwrap().push(self.id);
            if self.fail {
                return Err(Error::InvalidArgument(format!("op {} failed", self.id)));
            }
            Ok(Step::Done)
        }
    }

    fn fake() -> Arc<Fake> {
        let f = Arc::new(Fake::default());
        Engine::set_home(&f, |c| &c.engine);
        f
    }

    fn op(id: u32, gate: &Arc<AtomicU32>, at: u32) -> GateOp {
        GateOp {
            id,
            gate: gate.clone(),
            at,
            fail: false,
        }
    }

    #[test]
    fn engine_types_are_shared_by_threads() {
        const fn shared<T: Send + Sync>() {}
        shared::<Engine<Fake>>();
    }

    #[test]
    fn ops_complete_in_start_order_and_a_blocked_op_holds_back_later_ones() {
        let f = fake();
        let gate = Arc::new(AtomicU32::new(0));
        assert_eq!(f.engine.start(&f, op(0, &gate, 0)).unwrap(), None, "inline");
        let t1 = f.engine.start(&f, op(1, &gate, 2)).unwrap().unwrap();
        // Ready at once, but behind op 1: queued, not polled inline.
        let t2 = f.engine.start(&f, op(2, &gate, 0)).unwrap().unwrap();
        f.engine.progress(&f).unwrap();
        assert!(!f.engine.completed(t1) && !f.engine.completed(t2));
        assert!(!f.engine.idle());
        gate.store(2, Ordering::Release);
        f.engine.wait(&f, t2, None).unwrap();
        assert!(f.engine.completed(t1) && f.engine.idle());
        assert_eq!(*f.log.lock().unwrap(), [0, 1, 2]);
    }

    #[test]
    fn another_thread_drives_the_queue_and_parks_errors_for_the_owner() {
        let f = fake();
        let gate = Arc::new(AtomicU32::new(0));
        let t1 = f.engine.start(&f, op(1, &gate, 1)).unwrap().unwrap();
        let failing = GateOp {
            id: 2,
            gate: gate.clone(),
            at: 1,
            fail: true,
        };
        let t2 = f.engine.start(&f, failing).unwrap().unwrap();
        assert!(registry::anything_pending());
        assert!(registry::registered() >= 1);
        assert!(!f.engine.quiet());
        gate.store(1, Ordering::Release);
        // Another thread, knowing nothing of `f`, completes both through the registry.
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut backoff = Backoff::new();
                while !f.engine.completed(t2) {
                    registry::progress_all();
                    backoff.snooze();
                }
            });
        });
        assert!(f.engine.completed(t1) && f.engine.idle());
        // The error reaches the owner's next call that drives the engine, once.
        let e = f.engine.start(&f, op(3, &gate, 0)).unwrap_err();
        assert!(e.to_string().contains("op 2 failed"), "{e}");
        assert_eq!(f.engine.start(&f, op(4, &gate, 0)).unwrap(), None);
        assert_eq!(*f.log.lock().unwrap(), [1, 2, 4]);
    }

    #[test]
    fn reorder_flags_let_a_later_epoch_pass_a_pending_one() {
        let f = fake();
        *f.reorder.lock().unwrap() = Reorder {
            access_after_access: true,
            ..Reorder::NONE
        };
        let late = Arc::new(AtomicU32::new(0));
        let now = Arc::new(AtomicU32::new(0));
        // Access epoch 1 waits (a late post); its second op waits behind it.
        let a1 = f
            .engine
            .start_ordered(&f, op(1, &late, 1), Order::access(1));
        let a1b = f.engine.start_ordered(&f, op(2, &now, 0), Order::access(1));
        // Access epoch 2 passes epoch 1: polled at once, never queued. An exposure epoch
        // and a barrier do not pass.
        let a2 = f.engine.start_ordered(&f, op(3, &now, 0), Order::access(2));
        assert_eq!(
            a2.unwrap(),
            None,
            "completed at once, past the pending epoch"
        );
        let e3 = f
            .engine
            .start_ordered(&f, op(4, &now, 0), Order::exposure(3));
        let bar = f.engine.start_ordered(&f, op(5, &now, 0), Order::BARRIER);
        let a4 = f.engine.start_ordered(&f, op(6, &now, 0), Order::access(4));
        let [a1, a1b, e3, bar, a4] = [a1, a1b, e3, bar, a4].map(|t| t.unwrap().expect("queued"));
        f.engine.progress(&f).unwrap();
        assert_eq!(
            *f.log.lock().unwrap(),
            [3],
            "only the later access epoch ran"
        );
        for t in [a1, a1b, e3, bar, a4] {
            assert!(!f.engine.completed(t), "ticket {t}");
        }
        late.store(1, Ordering::Release);
        f.engine.wait(&f, a4, None).unwrap();
        assert_eq!(*f.log.lock().unwrap(), [3, 1, 2, 4, 5, 6]);
        assert!(f.engine.idle());
    }

    /// An unlock waiting for the answer to its release: blocked until `answer` reaches 1;
    /// its release on its way (`released`) when `early`, else not (it has not issued it).
    struct ReleasingOp {
        id: u32,
        answer: Arc<AtomicU32>,
        early: bool,
    }

    impl SyncOp<Fake> for ReleasingOp {
        fn poll(&mut self, host: &Fake) -> Result<Step> {
            if self.answer.load(Ordering::Acquire) < 1 {
                return Ok(Step::Blocked);
            }
            host.log.lock().unwrap().push(self.id);
            Ok(Step::Done)
        }

        fn released(&self) -> bool {
            self.early
        }
    }

    /// Epoch 1 on target 7: its unlock, which waits for `late` (the answer to its release),
    /// released already when `early`.
    fn unlock_of_epoch_1(f: &Arc<Fake>, late: &Arc<AtomicU32>, early: bool) -> Option<Ticket> {
        let unlock = ReleasingOp {
            id: 1,
            answer: late.clone(),
            early,
        };
        f.engine
            .start_ordered(f, unlock, Order::lock(1, 7))
            .unwrap()
    }

    #[test]
    fn a_lock_epoch_passes_an_earlier_release_of_its_target_only_once_it_is_on_its_way() {
        let late = Arc::new(AtomicU32::new(0));
        let now = Arc::new(AtomicU32::new(0));
        for (flags, early, passes) in [
            (Reorder::NONE, true, false),
            (Reorder::ALL, false, false),
            (Reorder::ALL, true, true),
        ] {
            let f = fake();
            *f.reorder.lock().unwrap() = flags;
            late.store(0, Ordering::Release);
            let t1 = unlock_of_epoch_1(&f, &late, early);
            // An op of epoch 2 on the same target (not its lock acquisition).
            let t2 = f
                .engine
                .start_ordered(&f, op(2, &now, 0), Order::lock(2, 7))
                .unwrap();
            f.engine.progress(&f).unwrap();
            let log = f.log.lock().unwrap().clone();
            assert_eq!(
                log == [2],
                passes,
                "flags {flags:?}, released early {early}: {log:?}"
            );
            late.store(1, Ordering::Release);
            for t in [t1, t2].into_iter().flatten() {
                f.engine.wait(&f, t, None).unwrap();
            }
            assert!(f.engine.idle());
        }
    }

    /// Without reorder flags, the acquisition of a later lock epoch of the same target
    /// runs behind an unlock whose release is on its way, but completes only after that
    /// unlock (requests complete in order), and nothing else of its epoch runs early. An
    /// acquisition of another target, or one behind an unlock not yet released, waits as
    /// before. (With flags it passes outright: the test above.)
    #[test]
    fn a_lock_acquisition_runs_behind_a_released_unlock_of_its_target_and_completes_after_it() {
        for (target, early, runs) in [(7, true, true), (8, true, false), (7, false, false)] {
            let f = fake();
            assert!(f.reorder.lock().unwrap().is_none());
            let late = Arc::new(AtomicU32::new(0));
            let now = Arc::new(AtomicU32::new(0));
            let t1 = unlock_of_epoch_1(&f, &late, early).expect("waits for its answer");
            // Epoch 2: its lock acquisition, then an operation of the epoch.
            let t2 = f
                .engine
                .start_ordered(&f, op(2, &now, 0), Order::lock(2, target).opening())
                .unwrap()
                .expect("queued behind the unlock, never completed inline");
            let t3 = f
                .engine
                .start_ordered(&f, op(3, &now, 0), Order::lock(2, target))
                .unwrap()
                .expect("queued");
            f.engine.progress(&f).unwrap();
            let log = f.log.lock().unwrap().clone();
            let case = format!("target {target}, released {early}: {log:?}");
            assert_eq!(log == [2], runs, "{case}");
            // Done or not, the acquisition is not complete while the unlock is not.
            for t in [t1, t2, t3] {
                assert!(!f.engine.completed(t), "{case}");
            }
            late.store(1, Ordering::Release);
            f.engine.wait(&f, t3, None).unwrap();
            assert!(f.engine.completed(t1) && f.engine.completed(t2), "{case}");
            let expect: &[u32] = if runs { &[2, 1, 3] } else { &[1, 2, 3] };
            assert_eq!(*f.log.lock().unwrap(), expect, "{case}");
            assert!(f.engine.idle());
        }
    }

    #[test]
    fn waiting_for_idle_outlasts_an_op_that_passed_earlier_ones() {
        let f = fake();
        *f.reorder.lock().unwrap() = Reorder::ALL;
        let late = Arc::new(AtomicU32::new(0));
        let now = Arc::new(AtomicU32::new(0));
        let a1 = f
            .engine
            .start_ordered(&f, op(1, &late, 1), Order::access(1));
        let a1 = a1.unwrap().expect("queued");
        // Behind a1 in its own epoch: queued.
        let a1b = f.engine.start_ordered(&f, op(3, &now, 0), Order::access(1));
        let a1b = a1b.unwrap().expect("queued");
        // Epoch 2 passes both: completed at once, while epoch 1 is pending.
        let a2 = f.engine.start_ordered(&f, op(2, &now, 0), Order::access(2));
        assert_eq!(a2.unwrap(), None);
        // Epoch 3 passes too but must wait itself: queued, then completed out of order.
        let gate3 = Arc::new(AtomicU32::new(0));
        let a3 = f
            .engine
            .start_ordered(&f, op(4, &gate3, 1), Order::access(3));
        let a3 = a3.unwrap().expect("queued");
        gate3.store(1, Ordering::Release);
        // The engine is registered: another test's thread may be driving it right now (then
        // our drive skips), so drive for a while rather than once.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !f.engine.completed(a3) && std::time::Instant::now() < until {
            f.engine.progress(&f).unwrap();
            std::thread::yield_now();
        }
        assert!(
            f.engine.completed(a3),
            "a later ticket completes out of order"
        );
        assert!(!f.engine.completed(a1) && !f.engine.completed(a1b));
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                late.store(1, Ordering::Release);
            });
            f.engine
                .wait_until(&f, || f.engine.idle(), None, String::new)
                .unwrap();
            assert!(
                f.engine.completed(a1),
                "idle only once the passed op completed"
            );
        });
        assert!(f.engine.completed(a1b));
        assert_eq!(*f.log.lock().unwrap(), [2, 4, 1, 3]);
    }

    #[test]
    fn a_lock_epoch_passes_a_pending_one_on_another_target_only() {
        let f = fake();
        *f.reorder.lock().unwrap() = Reorder::ALL;
        let late = Arc::new(AtomicU32::new(0));
        let now = Arc::new(AtomicU32::new(0));
        // Lock epoch 1 on target 0 waits for its lock.
        let l1 = f
            .engine
            .start_ordered(&f, op(1, &late, 1), Order::lock(1, 0));
        // Epoch 2 on target 0 again stays behind it; epoch 3 on target 1 passes.
        let l2 = f
            .engine
            .start_ordered(&f, op(2, &now, 0), Order::lock(2, 0));
        let l3 = f
            .engine
            .start_ordered(&f, op(3, &now, 0), Order::lock(3, 1));
        assert_eq!(l3.unwrap(), None, "another target: completed at once");
        let [l1, l2] = [l1, l2].map(|t| t.unwrap().expect("queued"));
        f.engine.progress(&f).unwrap();
        assert!(!f.engine.completed(l1) && !f.engine.completed(l2));
        late.store(1, Ordering::Release);
        f.engine.wait(&f, l2, None).unwrap();
        assert_eq!(*f.log.lock().unwrap(), [3, 1, 2]);
    }

    #[test]
    fn without_reorder_flags_activation_is_serial() {
        let f = fake();
        let late = Arc::new(AtomicU32::new(0));
        let now = Arc::new(AtomicU32::new(0));
        let a1 = f
            .engine
            .start_ordered(&f, op(1, &late, 1), Order::access(1));
        let a2 = f.engine.start_ordered(&f, op(2, &now, 0), Order::access(2));
        let [a1, a2] = [a1, a2].map(|t| t.unwrap().expect("queued"));
        f.engine.progress(&f).unwrap();
        assert!(!f.engine.completed(a1) && !f.engine.completed(a2));
        late.store(1, Ordering::Release);
        f.engine.wait(&f, a2, None).unwrap();
        assert_eq!(*f.log.lock().unwrap(), [1, 2]);
    }

    #[test]
    fn a_dropped_host_leaves_the_registry() {
        let f = fake();
        let gate = Arc::new(AtomicU32::new(0));
        f.engine.start(&f, op(1, &gate, 1)).unwrap().unwrap();
        registry::unregister(&f);
        let weak = Arc::downgrade(&f);
        drop(f);
        assert!(weak.upgrade().is_none());
        // (Its queued op left the process count: other tests may have ops queued, so the
        // count itself is not checked here.)
        // Polling everything no longer reaches it (and does not crash).
        registry::progress_all();
    }

    /// An op that completes what was issued before it, as closing calls do.
    struct ClosingOp {
        id: u32,
        scope: Completes,
    }

    impl SyncOp<Fake> for ClosingOp {
        fn completes(&self) -> Completes {
            self.scope
        }
        fn poll(&mut self, host: &Fake) -> Result<Step> {
            host.log.lock().unwrap().push(self.id);
            Ok(Step::Done)
        }
    }

    /// The completion a closing op asks for happens right before its first poll — after the
    /// ops queued before it ran (a deferred accumulate handed to a ring), not when it was
    /// started — whether it is polled inline or from the queue, and only once.
    #[test]
    fn a_closing_op_completes_what_ran_before_it_right_before_its_first_poll() {
        let f = fake();
        let closing = |id, scope| ClosingOp { id, scope };
        // Inline: nothing pending.
        assert_eq!(
            f.engine.start(&f, closing(1, Completes::All)).unwrap(),
            None
        );
        assert_eq!(*f.log.lock().unwrap(), [1000, 1]);
        f.log.lock().unwrap().clear();
        // Queued behind a blocked op (the deferred operation of a pending epoch).
        let gate = Arc::new(AtomicU32::new(0));
        f.engine.start(&f, op(2, &gate, 1)).unwrap().unwrap();
        let t = f
            .engine
            .start(&f, closing(3, Completes::Target(5)))
            .unwrap()
            .unwrap();
        f.engine.progress(&f).unwrap();
        assert!(
            f.log.lock().unwrap().is_empty(),
            "nothing completes at start"
        );
        gate.store(1, Ordering::Release);
        f.engine.wait(&f, t, None).unwrap();
        assert_eq!(*f.log.lock().unwrap(), [2, 2005, 3]);
        // An op that completes nothing asks for nothing.
        f.log.lock().unwrap().clear();
        assert_eq!(
            f.engine.start(&f, closing(4, Completes::Nothing)).unwrap(),
            None
        );
        assert_eq!(*f.log.lock().unwrap(), [4]);
    }

    /// Without reorder flags, the summary `Engine::drive` keeps of the pending ops before
    /// an op decides exactly as asking every one of them (`Queued::holds_back`), for random
    /// queues of fence, lock and PSCW ops of random epochs, some in blocking calls of
    /// other threads.
    #[test]
    fn the_pending_summary_decides_as_the_ops_themselves() {
        let other = std::thread::spawn(thread_tag).join().unwrap();
        let me = thread_tag();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let len = (next() % 8) as usize;
            let queue: Vec<Queued<Fake>> = (0..len)
                .map(|i| {
                    let epoch = next() % 6;
                    let order = match next() % 4 {
                        0 => Order::BARRIER,
                        1 => Order::lock(epoch, (next() % 3) as usize),
                        2 => Order::access(epoch),
                        _ => Order::exposure(epoch),
                    };
                    let blocking = next() % 5 == 0;
                    // Unlocks waiting for their answers, released or not, among the rest.
                    let op: Box<dyn SyncOp<Fake>> = match next() % 3 {
                        0 => Box::new(ClosingOp {
                            id: 0,
                            scope: Completes::Nothing,
                        }),
                        n => Box::new(ReleasingOp {
                            id: 0,
                            answer: Arc::new(AtomicU32::new(0)),
                            early: n == 1,
                        }),
                    };
                    Queued {
                        ticket: i as u64,
                        order,
                        op,
                        settled: false,
                        issuer: if blocking { other } else { me },
                        in_blocking_call: blocking,
                        done_early: false,
                    }
                })
                .collect();
            let later = match next() % 3 {
                0 => Order::BARRIER,
                1 => Order::lock(next() % 6, (next() % 3) as usize),
                2 => Order::lock(next() % 7, (next() % 3) as usize).opening(),
                _ => Order::access(next() % 6),
            };
            let mut summary = Pending::default();
            for q in &queue {
                summary.add(q);
            }
            let asked = !queue.iter().any(|q| q.holds_back(later, me, Reorder::NONE));
            assert_eq!(summary.lets_pass(later), asked, "{later:?} after {:?}", {
                queue
                    .iter()
                    .map(|q| (q.order, q.in_blocking_call))
                    .collect::<Vec<_>>()
            });
            if summary.holds_back_everything() {
                assert!(!asked);
            }
            // Running early: the summary allows it only where every op that holds the
            // acquisition back lets it run early, and exactly so when the queue holds only
            // earlier epochs (as it does in use: an acquisition opens the newest epoch).
            let early = !summary.lets_pass(later) && summary.lets_open_early(later);
            let asked_early = !asked
                && queue
                    .iter()
                    .filter(|q| q.holds_back(later, me, Reorder::NONE))
                    .all(|q| q.lets_open_early(later));
            if early {
                assert!(asked_early, "{later:?} runs early");
            }
            if queue.iter().all(|q| q.order.epoch < later.epoch) {
                assert_eq!(early, asked_early, "{later:?}");
            }
        }
    }
}
