//! The control plane: the words other processes read and write to synchronize with this
//! one, named transport-neutrally, behind one small interface.
//!
//! A protocol (PSCW and the passive-target locks so far; fence, collective agreement,
//! stripes, dynamic regions and notifications follow) names a word by where it lives — the rank whose control block
//! holds it, and which word — never by an address, and asks the plane to `fetch_add` or
//! `load` it. Every answer is [`Answer::Ready`] or [`Answer::Pending`]: on one node the
//! shared-memory plane (`win::control::Control`, the mapped control blocks) answers at once with a CPU
//! atomic, while a network plane answers later (a libfabric atomic completes when the
//! target's progress has applied it). A protocol written against this interface keeps a
//! pending answer and polls it ([`ControlPlane::poll`]) — so it assumes nothing about
//! where a word is, which the unit tests check by running it against a plane that answers
//! every operation late and applies them in a shuffled order.
//!
//! Besides operations with an answer the plane takes *posted* ones
//! ([`ControlPlane::post_add`]): applied eventually, with nothing to wait for — a network
//! plane sends them without a completion to track (a lock's release, a counter's bump).
//!
//! Orderings are the shared-memory plane's; a network plane provides the same guarantees
//! with its own means (delivery-complete atomics, a fence before a release).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Result;

/// A control word, named by the rank that holds it and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CtrlWord {
    /// PSCW: the posts by `from` whose group contained `at`, counted at `at` (cumulative).
    Posts {
        /// The rank whose control block holds the counter.
        at: usize,
        /// The rank whose posts it counts.
        from: usize,
    },
    /// PSCW: the completions `at` received from its origins (cumulative).
    Completions {
        /// The rank whose control block holds the counter.
        at: usize,
    },
    /// A dissemination barrier's signal word (`shm::barrier`): written by the one partner
    /// that signals `at` in `round`, for barriers of `parity`.
    Signal {
        /// The rank that waits for the signal.
        at: usize,
        /// The barrier's round.
        round: u32,
        /// The parity of the barrier's number (two words alternate).
        parity: u8,
    },
    /// A notification counter (`rma::notify`): counter `idx` of rank `at`, in the table
    /// of the latest `set_num_notify`.
    Notify {
        /// The rank that owns the counter.
        at: usize,
        /// Which of its counters.
        idx: usize,
    },
    /// A window collective's published words (`sync::collective`): rank `at`'s call tag
    /// or payload word for the agreements of sequence parity `parity`.
    Agreement {
        /// The rank that publishes them.
        at: usize,
        /// Parity of the agreement's sequence number (two copies alternate).
        parity: u64,
        /// Tag or payload.
        part: AgreementPart,
    },
    /// Rank `at`'s parked membership of the exclusive class (`sync::lock`, parked
    /// memberships).
    Parked {
        /// The rank that owns it.
        at: usize,
    },
    /// Lock stripe `index` of rank `at`'s window memory (`ops::lock_stripes`): 0 free, 1
    /// held by an accumulate that cannot use CPU atomics on its elements.
    Stripe {
        /// The rank whose window memory it guards.
        at: usize,
        /// Which of its stripes (below `win::control::ACC_STRIPES`).
        index: usize,
    },
    /// The processes on other nodes that made windows from rank `at`'s memory handles or
    /// read its dynamic window's region table, as a set of bits `rank % 64`
    /// (`rma::memhandle`, "After release").
    HandleReaders {
        /// The rank whose handles they read.
        at: usize,
    },
    /// How many detaches by owners on other nodes rank `at` was told of, owners of whose
    /// handles it made windows or whose region tables it read (`rma::memhandle`).
    HandleReleases {
        /// The rank told.
        at: usize,
    },
    /// A passive-target lock's words (`sync::lock`).
    Lock {
        /// Which lock.
        lock: LockAt,
        /// Which of its words.
        part: LockPart,
    },
}

impl std::fmt::Display for CtrlWord {
    /// The word in a hang report's words.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            CtrlWord::Posts { at, from } => {
                write!(f, "rank {at}'s count of the posts of rank {from}")
            }
            CtrlWord::Completions { at } => write!(f, "rank {at}'s count of completions"),
            CtrlWord::Parked { at } => write!(f, "rank {at}'s parked exclusive membership"),
            CtrlWord::Stripe { at, index } => {
                write!(f, "rank {at}'s accumulate lock stripe {index}")
            }
            CtrlWord::HandleReaders { at } => write!(f, "rank {at}'s memory-handle readers"),
            CtrlWord::HandleReleases { at } => {
                write!(f, "rank {at}'s count of memory-handle releases")
            }
            CtrlWord::Signal { at, round, .. } => {
                write!(f, "rank {at}'s barrier signal of round {round}")
            }
            CtrlWord::Notify { at, idx } => write!(f, "notification counter {idx} of rank {at}"),
            CtrlWord::Agreement { at, part, .. } => match part {
                AgreementPart::Tag => write!(f, "rank {at}'s published collective call"),
                AgreementPart::Word => write!(f, "rank {at}'s published collective word"),
            },
            CtrlWord::Lock { lock, part } => {
                let which = match lock {
                    LockAt::Global => "the window-wide lock".to_owned(),
                    LockAt::Local(r) => format!("rank {r}'s lock"),
                };
                match part {
                    LockPart::Word => write!(f, "{which} word"),
                    LockPart::Next => write!(f, "{which}'s next ticket"),
                    LockPart::Serving => write!(f, "{which}'s ticket served"),
                }
            }
        }
    }
}

/// Which lock of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LockAt {
    /// The window-wide word (exclusive class vs lock_all); on one node in the window's
    /// header, across nodes at rank 0 (foMPI's "master").
    Global,
    /// The reader-writer lock of this rank.
    Local(usize),
}

/// The two words a rank publishes for a window collective. Word-wide, like [`LockPart`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u64)]
pub(crate) enum AgreementPart {
    /// The packed call tag (which collective, which sequence number).
    Tag,
    /// The payload word.
    Word,
}

/// One of a lock's three words.
///
/// A full word wide (`repr(u64)`): the lock builds its [`CtrlWord`] on the stack, and with a
/// one-byte `part` the compiler stored a byte and loaded the word around it back as eight —
/// a store-forwarding stall that made an uncontended lock 1.14–1.28× slower in the same-run
/// A/B (9 rounds, `sync-latency`) at an equal instruction count; word-wide, 0.98–1.02.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u64)]
pub(crate) enum LockPart {
    /// The lock word: holders and the queue head's mark.
    Word,
    /// The next ticket of the FIFO slow path.
    Next,
    /// The ticket now served.
    Serving,
}

/// An operation the plane has not answered yet.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PendingOp(pub u64);

/// What the plane answers to an operation: the word's previous (or current) value now, or
/// later through [`ControlPlane::poll`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Done: the value.
    Ready(u64),
    /// Issued; poll for the value. (The shared-memory plane never answers so; a network
    /// plane and the tests' late plane do.)
    #[cfg_attr(not(test), allow(dead_code))]
    Pending(PendingOp),
}

/// The operations on control words every protocol is written against.
pub(crate) trait ControlPlane {
    /// Adds `value` to `word` with `order` (a read-modify-write), answering the value
    /// before.
    fn fetch_add(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer;
    /// Reads `word` with `order`.
    fn load(&self, word: CtrlWord, order: Ordering) -> Answer;
    /// Replaces `word` by `value` with `order`, answering the value before.
    fn swap(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer;
    /// Replaces `word` by `new` if it holds `expected` (`order` on success, relaxed on
    /// failure), answering the value before either way.
    fn compare_swap(&self, word: CtrlWord, expected: u64, new: u64, order: Ordering) -> Answer;
    /// Adds `value` (wrapping: a "subtraction" adds the two's complement) to `word` with
    /// `order`, without an answer: the plane applies it eventually, and a [`Answer`] of a
    /// later operation of this process on the same word does not imply it was applied.
    /// Protocols post only what commutes with everything that may overtake it (a counter's
    /// increments; giving a lock back).
    fn post_add(&self, word: CtrlWord, value: u64, order: Ordering);
    /// Stores `value` into `word` with `order`, posted as [`ControlPlane::post_add`]:
    /// for a word only one process writes (a barrier's signal).
    fn post_store(&self, word: CtrlWord, value: u64, order: Ordering);
    /// [`ControlPlane::post_store`] that no later [`ControlPlane::order_posted`] waits
    /// for: applied after everything this process posted to the word's holder before, its
    /// arrival known to the caller only from what the holder does next. For a signal the
    /// holder answers with one of its own that the caller waits for, where nothing after
    /// needs the signal delivered (a fence's barrier). Planes without such a store post it
    /// as [`ControlPlane::post_store`].
    fn post_store_unawaited(&self, word: CtrlWord, value: u64, order: Ordering) {
        self.post_store(word, value, order);
    }
    /// [`ControlPlane::post_add`] that no later [`ControlPlane::order_posted`] waits for,
    /// as [`ControlPlane::post_store_unawaited`] stores: for a counter whose holder's next
    /// steps tell the caller it arrived (PSCW's posts and completions). Planes without
    /// such an add post it as [`ControlPlane::post_add`].
    fn post_add_unawaited(&self, word: CtrlWord, value: u64, order: Ordering) {
        self.post_add(word, value, order);
    }
    /// Orders this process's posted operations before its later ones: when it returns,
    /// every operation it posted before is applied at its target. (Shared memory: nothing
    /// to wait for, a later Release operation orders them; a network plane waits for
    /// their delivery.)
    fn order_posted(&self) -> Result<()>;
    /// The answer to `op` once it has arrived (`None`: not yet). An error: the operation
    /// failed (a network plane's peer is gone, say) — a protocol then fails its call.
    fn poll(&self, op: &PendingOp) -> Result<Option<u64>>;
    /// Gives up on `op`, whose answer is no longer wanted (it may never come: its holder
    /// may be gone): later completions (a flush) no longer wait for it. Nothing to do
    /// where every answer is immediate.
    fn abandon(&self, op: PendingOp) {
        let _ = op;
    }
}

/// Words in memory this process maps (a node segment, a notify table): every operation
/// is a CPU atomic on the word, answered at once, and posted operations are ordered by the
/// Release of a later one — nothing to wait for.
pub(crate) trait MappedWords {
    /// The atomic behind `word` (a word the memory does not hold is a bug of the caller).
    fn mapped(&self, word: CtrlWord) -> &AtomicU64;
}

impl<M: MappedWords + ?Sized> ControlPlane for M {
    #[inline(always)]
    fn fetch_add(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer {
        Answer::Ready(self.mapped(word).fetch_add(value, order))
    }

    #[inline(always)]
    fn load(&self, word: CtrlWord, order: Ordering) -> Answer {
        Answer::Ready(self.mapped(word).load(order))
    }

    #[inline(always)]
    fn swap(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer {
        Answer::Ready(self.mapped(word).swap(value, order))
    }

    #[inline(always)]
    fn compare_swap(&self, word: CtrlWord, expected: u64, new: u64, order: Ordering) -> Answer {
        Answer::Ready(
            match self
                .mapped(word)
                .compare_exchange(expected, new, order, Ordering::Relaxed)
            {
                Ok(v) | Err(v) => v,
            },
        )
    }

    #[inline(always)]
    fn post_add(&self, word: CtrlWord, value: u64, order: Ordering) {
        self.mapped(word).fetch_add(value, order);
    }

    #[inline(always)]
    fn post_store(&self, word: CtrlWord, value: u64, order: Ordering) {
        self.mapped(word).store(value, order);
    }

    #[inline(always)]
    fn order_posted(&self) -> Result<()> {
        Ok(())
    }

    fn poll(&self, _op: &PendingOp) -> Result<Option<u64>> {
        unreachable!("mapped words answer every operation at once")
    }
}

/// An operation's answer as it stands: its value, or still pending.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Awaited {
    /// Answered.
    Value(u64),
    /// Waiting for this.
    Pending(PendingOp),
}

/// Whether counter `word` has reached `need`: `Some(true)` or `Some(false)` once the plane
/// answered the read kept in `reading` (issued here if there is none), `None` while it has
/// not. Acquire: pairs with the Release increments that count (PSCW's posts and
/// completions, notified operations' arrivals).
#[inline]
pub(crate) fn count_reached<P: ControlPlane + ?Sized>(
    plane: &P,
    word: CtrlWord,
    need: u64,
    reading: &mut Option<Awaited>,
) -> Result<Option<bool>> {
    // A ready answer stays in registers; only a pending read is kept.
    let count = match reading.take() {
        None => match plane.load(word, Ordering::Acquire) {
            Answer::Ready(v) => v,
            Answer::Pending(op) => {
                *reading = Some(Awaited::Pending(op));
                return Ok(None);
            }
        },
        Some(mut read) => match read.value(plane)? {
            Some(v) => v,
            None => {
                *reading = Some(read);
                return Ok(None);
            }
        },
    };
    Ok(Some(count >= need))
}

impl Awaited {
    /// Starts waiting for `answer`.
    #[inline]
    pub(crate) fn from(answer: Answer) -> Awaited {
        match answer {
            Answer::Ready(v) => Awaited::Value(v),
            Answer::Pending(op) => Awaited::Pending(op),
        }
    }

    /// The value, waiting for `plane` to answer (backing off between polls): for calls
    /// that return a word's value.
    pub(crate) fn wait<P: ControlPlane + ?Sized>(mut self, plane: &P) -> Result<u64> {
        let mut backoff = crate::backoff::Backoff::new();
        loop {
            if let Some(v) = self.value(plane)? {
                return Ok(v);
            }
            backoff.snooze();
        }
    }

    /// [`Awaited::wait`] for at most `patience`: `None` when the plane has not answered by
    /// then (the operation is abandoned: a caller that only wants to name something).
    pub(crate) fn wait_at_most<P: ControlPlane + ?Sized>(
        mut self,
        plane: &P,
        patience: std::time::Duration,
    ) -> Result<Option<u64>> {
        let give_up = std::time::Instant::now() + patience;
        let mut backoff = crate::backoff::Backoff::new();
        loop {
            if let Some(v) = self.value(plane)? {
                return Ok(Some(v));
            }
            if std::time::Instant::now() > give_up {
                if let Awaited::Pending(op) = self {
                    plane.abandon(op);
                }
                return Ok(None);
            }
            backoff.snooze();
        }
    }

    /// The value, once `plane` has answered (an error: the operation failed).
    #[inline]
    pub(crate) fn value<P: ControlPlane + ?Sized>(&mut self, plane: &P) -> Result<Option<u64>> {
        if let Awaited::Pending(op) = self {
            match plane.poll(op)? {
                Some(v) => *self = Awaited::Value(v),
                None => return Ok(None),
            }
        }
        Ok(match self {
            Awaited::Value(v) => Some(*v),
            Awaited::Pending(_) => None,
        })
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A control plane that answers every operation late and applies them in a shuffled
    //! order: protocols that assume a word is local, or that operations land in the order
    //! they were issued, fail against it.

    use std::collections::HashMap;
    use std::sync::atomic::Ordering;

    use std::sync::Mutex;

    use super::{Answer, ControlPlane, CtrlWord, PendingOp};

    /// An issued operation not applied yet.
    #[derive(Debug)]
    enum Op {
        Add(CtrlWord, u64),
        Load(CtrlWord),
        CompareSwap(CtrlWord, u64, u64),
        Store(CtrlWord, u64),
        Swap(CtrlWord, u64),
    }

    #[derive(Debug, Default)]
    struct State {
        words: HashMap<CtrlWord, u64>,
        /// Issued, not applied: (token, op).
        issued: Vec<(u64, Op)>,
        /// Applied, answer not collected: token → value.
        answered: HashMap<u64, u64>,
        next_token: u64,
        rng: u64,
    }

    /// The fake plane: every operation is pending; every other poll (at random) applies one
    /// randomly chosen issued operation — any operation's, not necessarily the polled one —
    /// and a poll answers its operation once that has been applied.
    #[derive(Debug)]
    pub(crate) struct LatePlane {
        state: Mutex<State>,
    }

    impl LatePlane {
        pub(crate) fn new(seed: u64) -> LatePlane {
            LatePlane {
                state: Mutex::new(State {
                    rng: seed | 1,
                    ..State::default()
                }),
            }
        }

        /// A word's value as the plane holds it (for checks).
        pub(crate) fn peek(&self, word: CtrlWord) -> u64 {
            let s = self.state.lock().unwrap();
            s.words.get(&word).copied().unwrap_or(0)
        }

        /// Operations issued and not applied yet.
        pub(crate) fn in_flight(&self) -> usize {
            self.state.lock().unwrap().issued.len()
        }

        /// Applies every operation still in flight (in a random order), so that the words
        /// can be checked after the protocol under test has stopped polling.
        pub(crate) fn settle(&self) {
            let mut s = self.state.lock().unwrap();
            while !s.issued.is_empty() {
                s.apply_one();
            }
        }

        fn issue(&self, op: Op) -> Answer {
            let mut s = self.state.lock().unwrap();
            s.next_token += 1;
            let token = s.next_token;
            s.issued.push((token, op));
            Answer::Pending(PendingOp(token))
        }
    }

    impl State {
        fn random(&mut self) -> u64 {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.rng
        }

        /// Applies one issued operation, chosen at random.
        fn apply_one(&mut self) {
            if self.issued.is_empty() {
                return;
            }
            let i = (self.random() % self.issued.len() as u64) as usize;
            let (token, op) = self.issued.swap_remove(i);
            let value = match op {
                Op::Add(w, v) => {
                    let slot = self.words.entry(w).or_insert(0);
                    let old = *slot;
                    *slot = slot.wrapping_add(v);
                    old
                }
                Op::Load(w) => self.words.get(&w).copied().unwrap_or(0),
                Op::Store(w, v) => {
                    self.words.insert(w, v);
                    0
                }
                Op::Swap(w, v) => self.words.insert(w, v).unwrap_or(0),
                Op::CompareSwap(w, expected, new) => {
                    let slot = self.words.entry(w).or_insert(0);
                    let old = *slot;
                    if old == expected {
                        *slot = new;
                    }
                    old
                }
            };
            // Token 0: a posted operation, nobody collects its answer.
            if token != 0 {
                self.answered.insert(token, value);
            }
        }
    }

    impl ControlPlane for LatePlane {
        fn fetch_add(&self, word: CtrlWord, value: u64, _order: Ordering) -> Answer {
            self.issue(Op::Add(word, value))
        }

        fn load(&self, word: CtrlWord, _order: Ordering) -> Answer {
            self.issue(Op::Load(word))
        }

        fn swap(&self, word: CtrlWord, value: u64, _order: Ordering) -> Answer {
            self.issue(Op::Swap(word, value))
        }

        fn compare_swap(
            &self,
            word: CtrlWord,
            expected: u64,
            new: u64,
            _order: Ordering,
        ) -> Answer {
            self.issue(Op::CompareSwap(word, expected, new))
        }

        fn post_add(&self, word: CtrlWord, value: u64, _order: Ordering) {
            self.state
                .lock()
                .unwrap()
                .issued
                .push((0, Op::Add(word, value)));
        }

        fn post_store(&self, word: CtrlWord, value: u64, _order: Ordering) {
            let mut s = self.state.lock().unwrap();
            s.issued.push((0, Op::Store(word, value)));
        }

        /// Applies every posted operation still in flight (in a random order).
        fn order_posted(&self) -> crate::error::Result<()> {
            let mut s = self.state.lock().unwrap();
            while s.issued.iter().any(|(token, _)| *token == 0) {
                s.apply_one();
            }
            Ok(())
        }

        fn poll(&self, op: &PendingOp) -> crate::error::Result<Option<u64>> {
            let mut s = self.state.lock().unwrap();
            // Half the polls move nothing: an answer is late even when its operation is
            // the only one in flight.
            if s.random() % 2 == 0 {
                s.apply_one();
            }
            Ok(s.answered.remove(&op.0))
        }
    }
}
