//! The progress engine: every synchronization is a request state machine.
//!
//! A synchronization call builds a [`SyncOp`] and hands it to its window's [`Engine`]. When
//! nothing is queued before it, the engine polls it once inline — most calls (flush,
//! unlock, post, complete, an uncontended lock) finish right there without allocating.
//! Otherwise the op is queued and the engine drives the queue front to back: ops activate in
//! the order they were started ([Zounmevo14], rule 4), so a blocked op holds back the ones behind
//! it. A blocking call is `start` + `wait`; the nonblocking API ([Zounmevo14]) will hand out the
//! ticket instead of waiting, without changing any op.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use crate::backoff::Backoff;
use crate::bootstrap::call::CallTag;
use crate::bootstrap::roster::PeerWatch;
use crate::error::{Error, Result};

/// What the engine needs from the object whose synchronizations it runs (a window).
pub(crate) trait Host {
    /// True when the job was aborted (waits give up).
    fn aborted(&self) -> bool;
    /// The members in the node's roster, watched while a collective waits.
    fn watch(&self) -> Option<&PeerWatch>;
    /// True when `rank` is known to have entered the collective `tag`.
    fn arrived(&self, tag: CallTag, rank: usize) -> bool;
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
pub(crate) trait SyncOp<C>: 'static {
    /// Advances as far as possible without blocking.
    fn poll(&mut self, core: &C) -> Result<Step>;
}

/// Identifies a queued op.
pub(crate) type Ticket = u64;

struct Queued<C> {
    ticket: Ticket,
    op: Box<dyn SyncOp<C>>,
}

/// Per-window queue of pending synchronizations.
pub(crate) struct Engine<C> {
    queue: RefCell<VecDeque<Queued<C>>>,
    /// Length of `queue`, readable without a RefCell borrow on the fast path.
    queued: Cell<usize>,
    next_ticket: Cell<Ticket>,
}

impl<C> Default for Engine<C> {
    fn default() -> Self {
        Engine {
            queue: RefCell::default(),
            queued: Cell::default(),
            next_ticket: Cell::default(),
        }
    }
}

impl<C> std::fmt::Debug for Engine<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("queued", &self.queue.borrow().len())
            .finish()
    }
}

impl<C: Host + 'static> Engine<C> {
    /// True when no op is pending.
    #[inline]
    pub(crate) fn idle(&self) -> bool {
        self.queued.get() == 0
    }

    /// Drives the queue until every op started so far has completed.
    pub(crate) fn wait_idle(&self, core: &C) -> Result<()> {
        if self.idle() {
            return Ok(());
        }
        let last = self.next_ticket.get() - 1;
        self.wait(core, last, None)
    }

    /// Starts `op`: completes it inline when possible, queues it otherwise.
    /// Returns `None` when it completed, its ticket when it is pending.
    #[inline]
    pub(crate) fn start<O: SyncOp<C>>(&self, core: &C, mut op: O) -> Result<Option<Ticket>> {
        if self.idle() && op.poll(core)? == Step::Done {
            return Ok(None);
        }
        let ticket = self.next_ticket.get();
        self.next_ticket.set(ticket + 1);
        self.queue.borrow_mut().push_back(Queued {
            ticket,
            op: Box::new(op),
        });
        self.queued.set(self.queued.get() + 1);
        Ok(Some(ticket))
    }

    /// Blocking form: start `op` and wait until it completed.
    #[inline]
    pub(crate) fn run<O: SyncOp<C>>(&self, core: &C, op: O) -> Result<()> {
        match self.start(core, op)? {
            None => Ok(()),
            Some(t) => self.wait(core, t, None),
        }
    }

    /// [`Engine::run`] for the window collective `tag`: while it waits, it watches the peers
    /// (an exited peer or one blocked in another of our collectives is an error, see
    /// `bootstrap::roster`).
    pub(crate) fn run_collective<O: SyncOp<C>>(&self, core: &C, op: O, tag: CallTag) -> Result<()> {
        match self.start(core, op)? {
            None => Ok(()),
            Some(t) => self.wait(core, t, Some(tag)),
        }
    }

    /// True when the op with `ticket` (and every op before it) has completed.
    pub(crate) fn completed(&self, ticket: Ticket) -> bool {
        self.queue
            .borrow()
            .front()
            .is_none_or(|q| q.ticket > ticket)
    }

    /// Polls queued ops in order; returns true when at least one completed.
    pub(crate) fn progress(&self, core: &C) -> Result<bool> {
        let mut any = false;
        let mut queue = self.queue.borrow_mut();
        let result = loop {
            let Some(front) = queue.front_mut() else {
                break Ok(any);
            };
            match front.op.poll(core) {
                Ok(Step::Done) => {
                    queue.pop_front();
                    any = true;
                }
                Ok(Step::Blocked) => break Ok(any),
                Err(e) => {
                    queue.pop_front();
                    break Err(e);
                }
            }
        };
        self.queued.set(queue.len());
        result
    }

    /// Drives the queue until `ticket` completed, backing off while nothing moves; with
    /// `collective`, watches the peers of that window collective meanwhile.
    pub(crate) fn wait(&self, core: &C, ticket: Ticket, collective: Option<CallTag>) -> Result<()> {
        let mut backoff = Backoff::new();
        // The peer watch starts only once the wait is not short: a fence that completes
        // within a few polls pays no clock read and publishes no wait.
        let mut polls = 0u32;
        let mut vigil = None;
        loop {
            if self.progress(core)? {
                backoff.reset();
            }
            if self.completed(ticket) {
                return Ok(());
            }
            if core.aborted() {
                return Err(Error::JobAborted);
            }
            if let Some(tag) = collective {
                polls += 1;
                if polls == WATCH_AFTER_POLLS {
                    vigil = core.watch().map(|w| w.vigil(tag));
                }
                if let Some(v) = vigil.as_mut() {
                    v.check(|r| Some(core.arrived(tag, r)))?;
                }
            }
            backoff.snooze();
        }
    }
}
