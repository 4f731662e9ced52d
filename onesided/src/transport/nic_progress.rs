//! Progress of a network endpoint (feature `ofi`). Every provider here progresses
//! manually: a target's atomics and RMA are applied, and an origin's completions arrive,
//! only while someone reads the endpoint — a process that computes without calling in
//! would stall every peer that targets it (and `FI_OFI_RXM_DATA_AUTO_PROGRESS` does not
//! work with atomics in libfabric 1.17). So a process whose windows span nodes has its
//! endpoint served by a thread, in the mode `ONESIDED_PROGRESS` names:
//!
//! | mode    | how it waits                                   | per remote op here | idle cost |
//! |---------|------------------------------------------------|--------------------|-----------|
//! | `spin`  | reads the completion queue in a loop           | ~8 µs              | a core    |
//! | `yield` | reads it, yields the CPU between reads          | between            | a core when nothing else runs |
//! | `block` | waits in the queue's wait object, which wakes on the provider's sockets; after a wake-up reads it as `yield` does for [`BLOCK_GRACE`] | ~50 µs after a quiet spell, as `yield` within a burst | none |
//! | `none`  | no thread: only waiting application threads read it | as a polling waiter | none; a computing process stalls its peers |
//!
//! `block` is the default: correct on any number of cores and free while idle; `spin`
//! buys latency with a core (measured in `../shared/notes/internode-notes.md`). A `block`
//! server waits on the wait object's file descriptor itself (`Nic::wait_activity`), so it
//! knows when peers' operations woke it — they make no completion entry, and
//! `fi_cq_sread` would go back to sleep after serving each — and keeps reading for the
//! grace period: operations come in bursts (a release and the next lock request behind
//! it), and each wake-up from the blocking wait costs 30–50 µs here. Nonblocking lock
//! epochs across nodes (seed 004's transactions) went from 0.73–0.77× to 1.16–1.21× the
//! blocking ones with it.
//!
//! The thread stands aside while an application thread of the process waits inside the
//! library and reads the endpoint itself (every wait does, through a wait hook that marks
//! its [`PollDuty`]): it then naps instead of reading too. Two readers of one endpoint only
//! pass its lock back and forth, and a blocked reader's wake-up (~30 µs here) lost the race
//! to the poller anyway; alone, a polling waiter answers a peer in ~10 µs, as an MPI
//! library's progress loop does. Its naps grow from [`HANDOVER`] to [`LONGEST_NAP`] while
//! the pollers keep polling (each wake-up takes a core from one). Once no thread has
//! polled for [`HANDOVER`], the thread takes the duty back at its next wake-up: a process
//! that computes outside the library is still served.
//!
//! ```text
//! ONESIDED_PROGRESS=spin osrun -n 4 --nodes 2 ./app
//! ```

// Windows across nodes start it; until they exist its own tests are its only users.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::transport::ofi::Nic;

/// The environment variable that names the mode.
pub(crate) const ENV: &str = "ONESIDED_PROGRESS";

/// How long a blocked server waits before it looks at its stop flag again (a stop also
/// wakes it at once).
const BLOCK_MS: u64 = 100;

/// How long after an application thread's last read of the endpoint the progress thread
/// stands aside, and its first nap meanwhile (the later ones grow: [`LONGEST_NAP`]).
pub(crate) const HANDOVER: Duration = Duration::from_micros(200);

/// The longest nap of the progress thread while application threads keep polling: its naps
/// double from [`HANDOVER`] up to this while every wake-up finds a poller, and start at
/// [`HANDOVER`] again once one finds none. A wake-up takes a core from a poller when every
/// core polls: 8-byte put, accumulate, fetch_and_op and compare_and_swap + flush across two
/// virtual nodes of this 2-vCPU machine took medians of 18.3–22.8 µs with 200 µs naps
/// throughout, 17.0–17.5 µs with naps growing to 1.6 ms (five alternating rounds); in a
/// slower hour 22.5–27.9 µs, 20.7–22.7 with 1.6 ms and 21.4–22.1 with 800 µs (four
/// rounds). The price is the service a process that stops polling leaves its peers: up to
/// this long plus [`HANDOVER`] after a long polling spell (`flush_reaches.c` under the
/// preload, the target leaving MPI right after a barrier: 1.7 ms with 1.6 ms naps, 0.2–0.8
/// ms with these).
pub(crate) const LONGEST_NAP: Duration = Duration::from_micros(800);

/// How long a `block` server keeps reading the endpoint (yielding the CPU between reads)
/// after something woke it, before it blocks again: a peer's operations come in bursts — a
/// release and the next lock request, an epoch's accumulates — and each wake-up from a
/// blocking wait costs 30–50 µs here, a read of a polled endpoint a few.
pub(crate) const BLOCK_GRACE: Duration = Duration::from_micros(200);

/// Two reads by waiting application threads this close together make a steady poller,
/// which takes the endpoint over from a blocked progress thread. A waiter that sleeps
/// between looks (processes share cores) reads less often and leaves it blocked: waking it
/// for each look would only add context switches.
const STEADY_POLL: Duration = Duration::from_micros(10);

/// Who reads the endpoint right now: application threads waiting inside the library mark
/// it each time they read it; the progress thread reads it only when none did lately.
#[derive(Debug)]
pub(crate) struct PollDuty {
    start: Instant,
    /// Nanoseconds from `start` to the last read by a waiting application thread (0:
    /// never).
    polled_at: AtomicU64,
    /// Naps the progress thread took because a waiter polled (for tests and diagnostics).
    naps: AtomicU64,
    /// The progress thread is in (or about to enter) a blocking read: a poller wakes it
    /// out of it, since a blocking read does not return while only peers' operations
    /// arrive (they make no entry) — for up to [`BLOCK_MS`] it would wake on each of them
    /// and race the poller for the endpoint.
    blocked: AtomicBool,
}

impl Default for PollDuty {
    fn default() -> Self {
        PollDuty {
            start: Instant::now(),
            polled_at: AtomicU64::new(0),
            naps: AtomicU64::new(0),
            blocked: AtomicBool::new(false),
        }
    }
}

impl PollDuty {
    /// Marks that a waiting application thread reads `nic` now, and wakes the progress
    /// thread out of a blocking read of it once the reads come in quick succession (a
    /// waiter that polls, not one that looks in between sleeps).
    #[inline]
    pub(crate) fn app_polled(&self, nic: &Nic) {
        let now = (self.start.elapsed().as_nanos() as u64).max(1);
        // SeqCst, with the load of `blocked` after it and the progress thread's store of
        // `blocked` before its check of `polled_at` (SeqCst both): one of the two sees the
        // other, so the thread never stays blocked through a poller's turn unseen.
        let before = self.polled_at.swap(now, Ordering::SeqCst);
        if now.saturating_sub(before) < STEADY_POLL.as_nanos() as u64
            && self.blocked.load(Ordering::SeqCst)
            && self.blocked.swap(false, Ordering::SeqCst)
        {
            nic.wake();
        }
    }

    /// Whether an application thread read the endpoint within the last [`HANDOVER`].
    fn app_polls(&self) -> bool {
        // SeqCst: see app_polled.
        let at = self.polled_at.load(Ordering::SeqCst);
        at != 0 && self.start.elapsed().as_nanos() as u64 <= at + HANDOVER.as_nanos() as u64
    }

    /// Naps the progress thread took so far.
    pub(crate) fn naps(&self) -> u64 {
        // Relaxed: a statistic.
        self.naps.load(Ordering::Relaxed)
    }
}

/// How the thread that serves an endpoint waits (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProgressMode {
    /// Reads the completion queue in a loop.
    Spin,
    /// Reads it, yielding the CPU between reads.
    Yield,
    /// Blocks in the queue's wait object.
    Block,
    /// No thread: the endpoint is read only while a thread of the process waits inside
    /// onesided, tests a request, flushes or calls `sync` (or waits in a host MPI call
    /// the C ABI keeps progressing), as an MPI library without asynchronous progress
    /// does. A process that computes outside stalls its peers' operations on it
    /// meanwhile.
    None,
}

impl ProgressMode {
    /// The mode `value` names (`spin`, `yield`, `block`, `none`).
    pub(crate) fn parse(value: &str) -> Result<ProgressMode> {
        match value {
            "spin" => Ok(ProgressMode::Spin),
            "yield" => Ok(ProgressMode::Yield),
            "block" => Ok(ProgressMode::Block),
            "none" => Ok(ProgressMode::None),
            other => Err(Error::InvalidArgument(format!(
                "{ENV}={other:?}: expected spin, yield, block or none"
            ))),
        }
    }

    /// The mode `ONESIDED_PROGRESS` names, else `block`.
    pub(crate) fn from_env() -> Result<ProgressMode> {
        match std::env::var(ENV) {
            Ok(v) => Self::parse(&v),
            Err(_) => Ok(ProgressMode::Block),
        }
    }

    /// The name osbench prints.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ProgressMode::Spin => "spin",
            ProgressMode::Yield => "yield",
            ProgressMode::Block => "block",
            ProgressMode::None => "none",
        }
    }

    /// Whether the endpoint needs a completion queue with a wait object.
    pub(crate) fn needs_waitable(self) -> bool {
        self == ProgressMode::Block
    }
}

/// A thread serving one endpoint until dropped.
#[derive(Debug)]
pub(crate) struct Server {
    nic: Arc<Nic>,
    stop: Arc<AtomicBool>,
    /// The thread's id in the system (0 until it runs): for diagnostics and CPU checks.
    tid: Arc<AtomicI32>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Server {
    /// Starts serving `nic` in `mode` (a `block` server needs an endpoint opened
    /// waitable: [`Nic::open_with`]), standing aside while application threads poll it
    /// (they mark `duty`).
    pub(crate) fn start(nic: Arc<Nic>, mode: ProgressMode, duty: Arc<PollDuty>) -> Result<Server> {
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicI32::new(0));
        let thread = {
            let (nic, stop, id) = (Arc::clone(&nic), Arc::clone(&stop), Arc::clone(&tid));
            std::thread::Builder::new()
                .name("onesided-nic".into())
                .spawn(move || {
                    // Relaxed: read by diagnostics, which tolerate 0.
                    id.store(
                        rustix::thread::gettid().as_raw_nonzero().get(),
                        Ordering::Relaxed,
                    );
                    serve(&nic, mode, &duty, &stop)
                })
                .map_err(|e| {
                    Error::Bootstrap(format!("cannot start the network progress thread: {e}"))
                })?
        };
        Ok(Server {
            nic,
            stop,
            tid,
            thread: Some(thread),
        })
    }

    /// The serving thread's system id (0 until it has started).
    pub(crate) fn tid(&self) -> i32 {
        // Relaxed: see `start`.
        self.tid.load(Ordering::Relaxed)
    }

    /// Stops the thread; its error, if the endpoint failed.
    pub(crate) fn stop(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        // Relaxed: the join below orders everything the thread did.
        self.stop.store(true, Ordering::Relaxed);
        self.nic.wake();
        match self.thread.take().map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(Error::Bootstrap(
                "the network progress thread panicked".into(),
            )),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The thread: reads the endpoint until `stop`, except while application threads do. A
/// failed read (a peer gone) ends it with the error; the operations that need the
/// endpoint then fail on their own reads.
fn serve(nic: &Nic, mode: ProgressMode, duty: &PollDuty, stop: &AtomicBool) -> Result<()> {
    // A `block` server reads the endpoint without blocking until then ([`BLOCK_GRACE`]).
    let mut busy_until: Option<Instant> = None;
    let mut nap = HANDOVER;
    // Relaxed: a request to end, nothing else is published through it.
    while !stop.load(Ordering::Relaxed) {
        if duty.app_polls() {
            // Relaxed: a statistic.
            duty.naps.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(nap);
            nap = (nap * 2).min(LONGEST_NAP);
            continue;
        }
        nap = HANDOVER;
        match mode {
            ProgressMode::Spin => nic.progress()?,
            ProgressMode::Yield => {
                nic.progress()?;
                std::thread::yield_now();
            }
            ProgressMode::Block if busy_until.is_some_and(|until| Instant::now() < until) => {
                nic.progress()?;
                std::thread::yield_now();
            }
            ProgressMode::Block => {
                busy_until = None;
                // SeqCst: see PollDuty::app_polled.
                duty.blocked.store(true, Ordering::SeqCst);
                if !duty.app_polls() && nic.wait_activity(Duration::from_millis(BLOCK_MS))? {
                    busy_until = Some(Instant::now() + BLOCK_GRACE);
                }
                // Relaxed: only this thread sets it; a poller's wake meanwhile, if any,
                // ended the wait early (a spurious early return is harmless).
                duty.blocked.store(false, Ordering::Relaxed);
            }
            // Never started in this mode (`transport::net`).
            ProgressMode::None => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::network::Remote;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn modes_parse_and_name() {
        for mode in [
            ProgressMode::Spin,
            ProgressMode::Yield,
            ProgressMode::Block,
            ProgressMode::None,
        ] {
            assert_eq!(ProgressMode::parse(mode.name()).unwrap(), mode);
        }
        assert!(matches!(
            ProgressMode::parse("busy"),
            Err(Error::InvalidArgument(_))
        ));
    }

    /// CPU time (user + system, clock ticks) of thread `tid` of this process.
    fn cpu_ticks(tid: i32) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        // Fields after the command name (which may hold spaces) in parentheses.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line: 12 and 13 after the name.
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }

    /// Passive progress: the target's application thread sleeps outside onesided (parked,
    /// never calling libfabric) while an origin does 1000 fetch-adds and 1000 writes, each
    /// completed (the writes at the target), against its memory. The server alone applies
    /// them: the origin finishes and only then wakes the target, which finds the flag the
    /// origin set — without a server the origin would wait for ever (the target's park
    /// times out after 60 s and the test fails). Then, idle, a `block` server costs no CPU.
    fn passive_progress(mode: ProgressMode) {
        let _watchdog = crate::testing::Watchdog::new("passive_progress", 90);
        let target =
            Arc::new(Nic::open_with("tcp;ofi_rxm", "127.0.0.1", mode.needs_waitable()).unwrap());
        let origin = Nic::open("tcp;ofi_rxm", "127.0.0.1").unwrap();
        let peer = origin.insert(&target.name().unwrap()).unwrap();
        let memory: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
        let mut scratch = vec![0u64; 4];
        let mut source = vec![0u64; 1];
        // SAFETY: the vectors outlive the registrations (dropped at the end) and are only
        // touched atomically or after completions.
        let (t_reg, s_reg, src_reg) = unsafe {
            (
                target
                    .register(memory.as_ptr().cast_mut().cast(), 64)
                    .unwrap(),
                origin.register(scratch.as_mut_ptr().cast(), 32).unwrap(),
                origin.register(source.as_mut_ptr().cast(), 8).unwrap(),
            )
        };
        let at = |word: u64| Remote {
            peer,
            addr: t_reg.remote_base + 8 * word,
            key: t_reg.key,
        };
        let server = Server::start(Arc::clone(&target), mode, Arc::default()).unwrap();
        let origin_done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let sleeper = s.spawn(|| {
                // The target's application: asleep outside onesided until woken.
                std::thread::park_timeout(std::time::Duration::from_secs(60));
                // Acquire: pairs with the origin's Release store.
                assert!(
                    origin_done.load(Ordering::Acquire),
                    "{mode:?}: the origin's operations did not complete while the target slept"
                );
            });
            for i in 0..1000u64 {
                assert_eq!(origin.fetch_add_u64(1, at(0), &s_reg).unwrap(), i);
            }
            for i in 0..1000u64 {
                let src = source.as_mut_ptr();
                // SAFETY: `source` is registered and untouched until the flush.
                unsafe {
                    src.write(i);
                    origin
                        .write(
                            std::slice::from_raw_parts(src.cast::<u8>(), 8),
                            Some(&src_reg),
                            at(1),
                        )
                        .unwrap();
                }
                origin.flush(|| Ok(())).unwrap();
                // Delivery complete: the bytes are in the target's memory.
                assert_eq!(memory[1].load(Ordering::Relaxed), i);
            }
            origin_done.store(true, Ordering::Release);
            sleeper.thread().unpark();
        });
        assert_eq!(memory[0].load(Ordering::Relaxed), 1000);
        if mode == ProgressMode::Block {
            let tid = server.tid();
            assert_ne!(tid, 0, "the server runs");
            let before = cpu_ticks(tid);
            std::thread::sleep(std::time::Duration::from_millis(500));
            let used = cpu_ticks(tid) - before;
            assert!(
                used <= 5,
                "an idle blocked server used {used} ticks of CPU in 0.5 s"
            );
        }
        server.stop().unwrap();
        drop((t_reg, s_reg, src_reg));
    }

    /// A waitable target endpoint with one registered word, and an origin that reaches it
    /// (fields in drop order: the registrations before the memory they cover).
    struct OneWord {
        t_reg: crate::transport::ofi::Registration,
        s_reg: crate::transport::ofi::Registration,
        at: Remote,
        memory: Vec<AtomicU64>,
        _scratch: Vec<u64>,
        origin: Nic,
        target: Arc<Nic>,
    }

    fn one_word() -> OneWord {
        let target = Arc::new(Nic::open_with("tcp;ofi_rxm", "127.0.0.1", true).unwrap());
        let origin = Nic::open("tcp;ofi_rxm", "127.0.0.1").unwrap();
        let peer = origin.insert(&target.name().unwrap()).unwrap();
        let memory: Vec<AtomicU64> = (0..1).map(|_| AtomicU64::new(0)).collect();
        let mut scratch = vec![0u64; 4];
        // SAFETY: the vectors' heap buffers outlive the registrations (dropped first, see
        // the struct) and do not move with them; the target word is only touched
        // atomically.
        let (t_reg, s_reg) = unsafe {
            (
                target
                    .register(memory.as_ptr().cast_mut().cast(), 8)
                    .unwrap(),
                origin.register(scratch.as_mut_ptr().cast(), 32).unwrap(),
            )
        };
        let at = Remote {
            peer,
            addr: t_reg.remote_base,
            key: t_reg.key,
        };
        OneWord {
            t_reg,
            s_reg,
            at,
            memory,
            _scratch: scratch,
            origin,
            target,
        }
    }

    /// A blocking wait on a quiet endpoint times out and says nothing woke it; a peer's
    /// operation wakes it, is served by it (the origin's fetch-adds complete with nothing
    /// else reading the target), and is reported as activity — what lets a `block` server
    /// keep reading for [`BLOCK_GRACE`] after a wake-up.
    #[test]
    fn a_wait_reports_the_activity_that_woke_it() {
        let _watchdog = crate::testing::Watchdog::new("wait_activity", 90);
        let word = one_word();
        let (target, origin, at, s_reg, memory) = (
            &word.target,
            &word.origin,
            word.at,
            &word.s_reg,
            &word.memory,
        );
        let started = Instant::now();
        assert!(
            !target.wait_activity(Duration::from_millis(50)).unwrap(),
            "a quiet endpoint woke"
        );
        assert!(started.elapsed() >= Duration::from_millis(40), "no wait");
        let done = AtomicBool::new(false);
        let mut woken = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..20u64 {
                    assert_eq!(origin.fetch_add_u64(1, at, s_reg).unwrap(), i);
                }
                // Release: the scope's join orders the rest; a flag for the loop below.
                done.store(true, Ordering::Release);
            });
            // Acquire: pairs with the store above.
            while !done.load(Ordering::Acquire) {
                woken += usize::from(target.wait_activity(Duration::from_secs(1)).unwrap());
            }
        });
        assert!(woken > 0, "the peer's operations never woke the wait");
        assert_eq!(memory[0].load(Ordering::Relaxed), 20);
    }

    #[test]
    fn a_blocked_server_progresses_a_sleeping_target() {
        passive_progress(ProgressMode::Block);
    }

    #[test]
    fn a_yielding_server_progresses_a_sleeping_target() {
        passive_progress(ProgressMode::Yield);
    }

    #[test]
    fn a_spinning_server_progresses_a_sleeping_target() {
        passive_progress(ProgressMode::Spin);
    }

    /// While an application thread polls the endpoint, the server naps and the poller
    /// answers the origin; once it stops, the server takes the duty back and answers alone
    /// (else the origin's second batch would never complete), and naps no more.
    #[test]
    fn a_server_stands_aside_while_the_application_polls() {
        let _watchdog = crate::testing::Watchdog::new("stands_aside", 90);
        let word = one_word();
        let (target, origin, at, s_reg) = (&word.target, &word.origin, word.at, &word.s_reg);
        let duty = Arc::new(PollDuty::default());
        let server =
            Server::start(Arc::clone(target), ProgressMode::Block, Arc::clone(&duty)).unwrap();
        let polling = AtomicBool::new(true);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Relaxed: a request to stop; the scope's join orders the rest.
                while polling.load(Ordering::Relaxed) {
                    duty.app_polled(target);
                    target.progress().unwrap();
                    std::thread::yield_now();
                }
            });
            for i in 0..200u64 {
                assert_eq!(origin.fetch_add_u64(1, at, s_reg).unwrap(), i);
            }
            std::thread::sleep(Duration::from_millis(20));
            polling.store(false, Ordering::Relaxed);
        });
        assert!(duty.naps() > 0, "the server never stood aside");
        for i in 200..400u64 {
            assert_eq!(origin.fetch_add_u64(1, at, s_reg).unwrap(), i);
        }
        let naps = duty.naps();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            duty.naps(),
            naps,
            "the server still naps with nobody polling"
        );
        server.stop().unwrap();
    }
}
