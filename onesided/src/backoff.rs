//! Exponential backoff for every wait loop in onesided.
//!
//! Ranks are often oversubscribed (8 ranks on 2 cores in CI), so a waiter must give its core
//! away quickly: a few rounds of `pause`, then `sched_yield`, then short sleeps that grow to a
//! cap. A waiter that makes progress calls [`Backoff::reset`].
//!
//! The yield phase is bounded in time, not in rounds: a yield that hands the core to another
//! rank takes a time slice, one that finds nobody else runnable returns at once, and only in
//! the second case is more polling cheap and useful. When every rank of the node has a core
//! of its own the budget is longer still, because a sleep of tens of microseconds would
//! dominate synchronizations that take a fraction of one (a fence of two ranks takes ~0.2 µs
//! here; sleeping after 16 yields made it 1–3 µs on average).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Rounds spent spinning with `pause` (1, 2, 4, ... 32 iterations).
const SPIN_ROUNDS: u32 = 6;
/// The same spin (63 `pause`s, ~1.6 µs here) for a wait on another process's service, one
/// `pause` per poll: nobody else polls the waiter's word, and the answer of a request ring
/// takes 0.3–1 µs, so the doubling rounds (an 800 ns round by then) would add half a
/// round to every request.
const SERVICE_SPIN_POLLS: u32 = (1 << SPIN_ROUNDS) - 1;
/// How long a waiter yields before it sleeps when ranks share cores, in microseconds. Each
/// yield hands the core to a runnable rank (then it takes a time slice and the budget is
/// soon spent) or returns at once (nobody else wants the core: keep polling). A sleeping
/// waiter wakes at the end of its nap (20 µs and up, plus the kernel's timer slack) or on
/// the network, never on a store of a peer of its node: with 100 µs, ranks of a collective
/// that takes longer than that overslept their peers' signals — a fence of 16 ranks on 2
/// cores took 1.1–1.8 ms instead of 94–95 µs, the notified alltoallv of 4 ranks over 2
/// virtual nodes 156–262 µs instead of 68–172, creating a window at 64 ranks 49 instead of
/// 21 ms (`osbench`, alternating builds; docs/performance.md).
const YIELD_MICROS_SHARED: u32 = 2000;
/// The same when every rank has a core of its own.
const YIELD_MICROS_DEDICATED: u32 = 1000;
/// Whether every rank of the node has a core of its own. Relaxed: a tuning knob set once at
/// start-up; a stale value only changes how one wait polls, yields and sleeps.
static DEDICATED_CORES: AtomicBool = AtomicBool::new(false);

/// True when every rank of the node has a core of its own.
fn dedicated_cores() -> bool {
    // Relaxed: see DEDICATED_CORES.
    DEDICATED_CORES.load(Ordering::Relaxed)
}

/// How long a waiter yields before it sleeps.
fn yield_budget() -> Duration {
    Duration::from_micros(u64::from(if dedicated_cores() {
        YIELD_MICROS_DEDICATED
    } else {
        YIELD_MICROS_SHARED
    }))
}
/// A serving waiter with a core of its own yields once per this many polls (every 15–25 µs
/// here).
const SERVING_POLLS_PER_YIELD: u32 = 256;
/// `pause` instructions between two polls of a serving waiter: ~50 ns here (a `pause` takes
/// 25 ns), half of which a request waits on average before it is picked up (with 8, put and
/// get on `create` windows took 0.07–0.08 µs longer).
const SERVING_SPIN: u32 = 2;
/// Serving polls between two polls of the host MPI in an attentive wait (a few µs apart:
/// one host poll can cost a µs).
const SERVES_PER_HOST_POLL: u32 = 64;
/// Polls of a network wait per pause ([`Backoff::for_network`]): each poll reads the
/// endpoint with a system call (~0.5 µs here), a pause of its own, and the answer takes
/// 8–12 µs. Pausing after every poll — the spin rounds, the wait hooks' second read of the
/// same endpoint — made a fetch-and-op + flush across virtual nodes 0.8–1.8 µs slower than
/// pausing after every 8th (a loop without pauses was no faster than every 8th).
#[cfg_attr(not(feature = "net"), allow(dead_code))]
const NETWORK_POLLS_PER_PAUSE: u32 = 8;
/// First sleep, doubled each round up to [`MAX_SLEEP`].
const FIRST_SLEEP: Duration = Duration::from_micros(20);
/// Longest sleep between two polls: bounds the latency a sleeping waiter adds.
const MAX_SLEEP: Duration = Duration::from_micros(500);

/// Whether the node has a second core per rank (for helper threads that poll).
static SPARE_CORES: AtomicBool = AtomicBool::new(false);

/// Tells whether the node has at least two cores per rank.
pub(crate) fn set_spare_cores(spare: bool) {
    // Relaxed: a tuning knob set once at start-up.
    SPARE_CORES.store(spare, Ordering::Relaxed);
}

/// True when the node has at least two cores per rank: a helper thread may poll.
pub(crate) fn spare_cores() -> bool {
    // Relaxed: see set_spare_cores.
    SPARE_CORES.load(Ordering::Relaxed)
}

/// Tells every later wait whether the ranks of this node share cores.
pub(crate) fn set_oversubscribed(oversubscribed: bool) {
    // Relaxed: see DEDICATED_CORES.
    DEDICATED_CORES.store(!oversubscribed, Ordering::Relaxed);
}

/// Lets a process that waits for this one on CPU `cpu` (the one this thread runs on) run.
/// When ranks share cores that is what a yield does. When every rank has a core of its own,
/// two ranks on one CPU are a placement accident the scheduler may not undo for a long
/// time while both stay runnable (each request then costs two context switches: 5–20 µs
/// instead of 0.5; a short sleep did not reliably help, the wake-up often lands on the same
/// CPU). The thread then moves itself: its affinity without `cpu` migrates it, and the
/// previous affinity is restored at once (the thread stays where it went).
pub(crate) fn make_way_on_this_cpu(cpu: usize) {
    if !(dedicated_cores() && move_off_cpu(cpu)) {
        rustix::thread::sched_yield();
    }
}

/// Migrates the calling thread off CPU `cpu` to another CPU it may run on, keeping its
/// affinity as it was. False when there is no other CPU for it.
fn move_off_cpu(cpu: usize) -> bool {
    let Ok(allowed) = rustix::thread::sched_getaffinity(None) else {
        return false;
    };
    if !allowed.is_set(cpu) || allowed.count() < 2 {
        return false;
    }
    let mut elsewhere = allowed;
    elsewhere.unset(cpu);
    if rustix::thread::sched_setaffinity(None, &elsewhere).is_err() {
        return false;
    }
    // Restoring cannot fail where setting a subset succeeded; were it to, the thread would
    // only stay off one CPU.
    let _ = rustix::thread::sched_setaffinity(None, &allowed);
    true
}

/// Exponential backoff state for one wait.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    round: u32,
    /// When the wait started yielding.
    yielding_since: Option<Instant>,
    /// Sleeps so far (each doubles the next, up to the cap).
    sleeps: u32,
    /// Marks this process attentive to request rings while the wait polls (not while it
    /// sleeps): origins then hand it requests rather than use system calls.
    attending: Option<crate::attention::Attending>,
    /// Polls while serving (every [`SERVING_POLLS_PER_YIELD`]th yields).
    polls: u32,
    /// Never poll without yielding: the wait is for another process's service, which
    /// needs a core (see [`Backoff::for_service`]).
    yields: bool,
    /// Never serve: the waiter holds a lock a served request may need (see
    /// [`Backoff::holding_a_lock`]).
    holds_lock: bool,
    /// Serve, but drive no pending synchronization (see [`Backoff::serving_only`]).
    serves_only: bool,
    /// Polls per pause (0 and 1: every poll pauses; see [`Backoff::for_network`]).
    polls_per_pause: u32,
    /// Polls since the last pause.
    unpaused: u32,
}

impl Backoff {
    /// A fresh backoff that starts by spinning.
    pub(crate) fn new() -> Self {
        Backoff::default()
    }

    /// A backoff for waiting on another process to serve us: it serves and yields but
    /// never keeps a core busy, since the process it waits for may need that core (threads
    /// of this process waiting alike would otherwise crowd the server out).
    pub(crate) fn for_service() -> Self {
        Backoff {
            yields: true,
            ..Backoff::default()
        }
    }

    /// A backoff for a thread that waits while it holds a lock that requests of other
    /// processes may need (accumulate lock stripes): it never serves, since the request it
    /// would serve could wait for that very lock, held further up its own stack.
    pub(crate) fn holding_a_lock() -> Self {
        Backoff {
            holds_lock: true,
            ..Backoff::default()
        }
    }

    /// A backoff for a wait that serves this process's peers (the network endpoint, request
    /// rings) but drives no pending synchronization of its windows: a poll of one can block
    /// until a peer makes progress (a fence's flush of its puts), and the wait is one that
    /// peers rely on this process to leave promptly (see `bootstrap::mpi`'s transfers).
    pub(crate) fn serving_only() -> Self {
        Backoff {
            serves_only: true,
            ..Backoff::default()
        }
    }

    /// A backoff for a thread that polls a network endpoint for its answers: it pauses
    /// (attends, spins, yields or sleeps as [`Backoff::snooze`] does) only after every
    /// [`NETWORK_POLLS_PER_PAUSE`]th poll, since each poll is a system call already.
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) fn for_network() -> Self {
        Backoff {
            polls_per_pause: NETWORK_POLLS_PER_PAUSE,
            ..Backoff::default()
        }
    }

    /// Start over after progress was made.
    pub(crate) fn reset(&mut self) {
        self.round = 0;
        self.yielding_since = None;
        self.sleeps = 0;
    }

    /// Advances the pending synchronizations of every window of the process, serves
    /// requests posted to this process (transport::ring) and marks it attentive until this
    /// wait ends or sleeps. Every wait loop calls it, through `snooze` or, if it waits
    /// otherwise, directly: a process blocked in any call of the library — a communicator
    /// barrier included — makes progress on its deferred epochs, which a peer it waits for
    /// may be waiting for in turn (MPI's progress rule). A thread holding accumulate
    /// stripes does neither: what it would run may need those stripes.
    #[inline]
    pub(crate) fn attend(&mut self) {
        if self.holds_lock {
            return;
        }
        if !self.serves_only {
            crate::pending::poke();
        }
        // The network endpoint's progress, among others (transport::net registers it).
        crate::attention::call_wait_hooks();
        if crate::attention::any_server() {
            if self.attending.is_none() {
                self.attending = crate::attention::Attending::begin();
            }
            if crate::attention::serve_pending() {
                // Origins are using us: serving is progress, so stay awake (and attentive)
                // as long as they do, as an MPI library's progress loop would; the wait
                // sleeps only once nobody has needed it for the yield budget.
                self.yielding_since = None;
                self.sleeps = 0;
            }
        }
    }

    /// With a core of its own, a process that serves other processes' requests keeps
    /// polling, as an MPI library's progress loop does: asleep it would serve nobody. So
    /// does one with wait hooks (the network endpoint's among them): its endpoint's
    /// progress thread stands aside while it polls (`transport::nic_progress`), and a
    /// polling waiter answers a peer in a third of the blocked thread's wake-up time.
    fn serving(&self) -> bool {
        !self.yields
            && dedicated_cores()
            && (self.attending.is_some() || crate::attention::any_wait_hook())
    }

    /// With a core of its own, a waiter of a process with a network endpoint polls at an
    /// even pace from the start, as one waiting for a service does: each poll reads the
    /// endpoint through its wait hook, and the doubling spin rounds (up to 32 `pause`s, ~1.5
    /// µs here) would leave an answer unread that long (nonblocking lock transactions
    /// across virtual nodes: 134k → 138k tx/s, means of five alternating runs). Ranks that
    /// share cores keep the doubling rounds: they yield sooner.
    fn polls_a_network(&self) -> bool {
        dedicated_cores() && crate::attention::any_wait_hook()
    }

    /// A yield costs a system call, and requests wait that long for the next poll: poll
    /// again after a short spin, and yield only now and then.
    fn serving_pause(&mut self) {
        self.polls = self.polls.wrapping_add(1);
        if self.polls % SERVING_POLLS_PER_YIELD == 0 {
            rustix::thread::sched_yield();
        } else {
            for _ in 0..SERVING_SPIN {
                std::hint::spin_loop();
            }
        }
    }

    /// The pause of a wait that must keep polling something else (the host MPI's
    /// progress): serves as [`Backoff::attend`] does, then yields — or, while serving with
    /// a core of its own, spins briefly.
    pub(crate) fn attentive_pause(&mut self) {
        self.attend();
        if self.serving() {
            if self.attending.is_some() {
                // The host MPI's progress call can cost a microsecond: serve request rings
                // several times between two of them.
                for _ in 0..SERVES_PER_HOST_POLL {
                    self.serving_pause();
                    self.attend();
                }
            } else {
                // Only wait hooks (a network endpoint): they cost what the host's poll
                // costs, so alternate one for one — polled 64 times as often, a host MPI
                // that needs its target's progress took 2–5× longer per operation.
                rustix::thread::sched_yield();
            }
        } else {
            rustix::thread::sched_yield();
        }
    }

    /// The pause of a wait that polls the host MPI only to learn when it ends (a
    /// bootstrap collective of onesided's own): like [`Backoff::snooze`], but a waiter that
    /// keeps polling (a core of its own, and request rings or wait hooks to serve) serves
    /// them several times between two host polls — one host poll can cost microseconds,
    /// and a peer's request waits for the next serve.
    pub(crate) fn host_snooze(&mut self) {
        if self.round >= SPIN_ROUNDS && self.serving() {
            for _ in 0..SERVES_PER_HOST_POLL {
                self.attend();
                self.serving_pause();
            }
        } else {
            self.snooze();
        }
    }

    /// Wait a little; each call waits at least as long as the previous one, up to a cap
    /// (a network wait's: every [`NETWORK_POLLS_PER_PAUSE`]th call does).
    pub(crate) fn snooze(&mut self) {
        if self.polls_per_pause > 1 {
            self.unpaused += 1;
            if self.unpaused < self.polls_per_pause {
                return;
            }
            self.unpaused = 0;
        }
        self.attend();
        if self.yields || self.polls_a_network() {
            if self.round < SERVICE_SPIN_POLLS {
                std::hint::spin_loop();
                self.round += 1;
                return;
            }
        } else if self.round < SPIN_ROUNDS {
            for _ in 0..(1u32 << self.round) {
                std::hint::spin_loop();
            }
            self.round += 1;
            return;
        }
        let since = *self.yielding_since.get_or_insert_with(Instant::now);
        if self.serving() {
            self.serving_pause();
        } else if since.elapsed() < yield_budget() {
            rustix::thread::sched_yield();
        } else {
            // Asleep, the process serves nobody: origins should not wait for it.
            self.attending = None;
            let nap = (FIRST_SLEEP * (1 << self.sleeps.min(8))).min(MAX_SLEEP);
            if self.holds_lock {
                std::thread::sleep(nap);
            } else {
                // Woken early by the network's answers where an endpoint is open.
                crate::attention::sleep(nap);
            }
            self.sleeps += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_wait_pauses_after_every_eighth_poll() {
        let mut b = Backoff::for_network();
        for poll in 1..=NETWORK_POLLS_PER_PAUSE * 3 {
            b.snooze();
            // Only the pauses advance the backoff.
            assert_eq!(
                b.round,
                poll / NETWORK_POLLS_PER_PAUSE,
                "after {poll} polls"
            );
        }
        let mut plain = Backoff::new();
        plain.snooze();
        assert_eq!(plain.round, 1, "a plain wait pauses at every poll");
    }

    #[test]
    fn sleeps_are_capped() {
        let mut b = Backoff::new();
        let start = Instant::now();
        // Spin, then yield until the budget is spent, then sleep a few times.
        while b.sleeps < 12 {
            b.snooze();
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "backoff never sleeps"
            );
        }
        let t = Instant::now();
        b.snooze();
        // One snooze at the cap sleeps MAX_SLEEP; allow generous scheduling slack.
        assert!(t.elapsed() < Duration::from_millis(50));
        assert!(t.elapsed() >= MAX_SLEEP);
    }

    #[test]
    fn a_thread_moved_off_its_cpu_keeps_its_affinity() {
        // A thread of its own: the affinity calls act on the calling thread only.
        std::thread::spawn(|| {
            let allowed = rustix::thread::sched_getaffinity(None).expect("affinity");
            let cpu = rustix::thread::sched_getcpu();
            let moved = move_off_cpu(cpu);
            assert_eq!(moved, allowed.count() > 1);
            if moved {
                // The scheduler may move us back at any time, but hardly this soon.
                assert_ne!(rustix::thread::sched_getcpu(), cpu, "still on the CPU");
            }
            let now = rustix::thread::sched_getaffinity(None).expect("affinity");
            assert!((0..1024).all(|c| now.is_set(c) == allowed.is_set(c)));
            // A CPU outside the affinity: nothing to move off.
            let outside = (0..1024)
                .find(|&c| !allowed.is_set(c))
                .expect("a CPU outside");
            assert!(!move_off_cpu(outside));
        })
        .join()
        .expect("no assertion failed");
    }

    #[test]
    fn reset_returns_to_spinning() {
        let mut b = Backoff::new();
        for _ in 0..40 {
            b.snooze();
        }
        b.reset();
        assert_eq!((b.round, b.sleeps, b.yielding_since), (0, 0, None));
    }
}
