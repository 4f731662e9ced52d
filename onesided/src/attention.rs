//! Attention: which of this process's threads wait inside the library, and the work they
//! do for other processes meanwhile.
//!
//! Parts of the library that other processes hand work to (the request rings of
//! `transport::ring`) register a [`Served`] here. Every wait loop of the library (through
//! `backoff::Backoff`) calls [`serve_pending`] and holds an [`Attending`] while it polls,
//! which counts it in every registered attention word: origins read that word to decide
//! whether the target will pick their request up soon.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// Work other processes hand to this one.
pub(crate) trait Served: Send + Sync {
    /// The shared word origins read: how many threads of this process attend right now.
    fn attention(&self) -> &AtomicU64;
    /// Does the work handed over so far (must not block for long); true when there was
    /// some.
    fn serve(&self) -> bool;
}

/// Every server of this process.
static SERVERS: RwLock<Vec<Arc<dyn Served>>> = RwLock::new(Vec::new());
/// `SERVERS.len()`, read without the lock by every wait.
static SERVER_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Threads of this process inside an [`Attending`] wait.
static ATTENDING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// True while this thread serves (an executor's own waits must not serve again).
    static SERVING: Cell<bool> = const { Cell::new(false) };
}

/// Serves `server` from every wait of this process from now on.
pub(crate) fn register(server: &Arc<dyn Served>) {
    let mut list = SERVERS.write().unwrap_or_else(PoisonError::into_inner);
    // Relaxed: under the lock every attending thread takes to change the count.
    let attending = ATTENDING.load(Ordering::Relaxed) as u64;
    // Relaxed: the area is published to peers by the window creation's agreement.
    server.attention().store(attending, Ordering::Relaxed);
    list.push(Arc::clone(server));
    // Relaxed: a hint for the waits' fast check.
    SERVER_COUNT.store(list.len(), Ordering::Relaxed);
}

/// Stops serving `server`; returns once no thread serves it any more.
pub(crate) fn unregister(server: &Arc<dyn Served>) {
    let mut list = SERVERS.write().unwrap_or_else(PoisonError::into_inner);
    list.retain(|s| !Arc::ptr_eq(s, server));
    // Relaxed: see register.
    SERVER_COUNT.store(list.len(), Ordering::Relaxed);
}

/// Does the work handed to this process. Called by every wait of the library.
#[inline]
pub(crate) fn serve_pending() -> bool {
    // Relaxed: a window registered meanwhile is served by the next call.
    if SERVER_COUNT.load(Ordering::Relaxed) == 0 {
        return false;
    }
    serve_slow()
}

#[inline(never)]
fn serve_slow() -> bool {
    if SERVING.with(|s| s.replace(true)) {
        return false;
    }
    let mut served = false;
    {
        let list = SERVERS.read().unwrap_or_else(PoisonError::into_inner);
        for server in list.iter() {
            served |= server.serve();
        }
    }
    SERVING.with(|s| s.set(false));
    served
}

/// Marks this process attentive (a thread of it waits inside the library and serves)
/// while it lives. Waits create one when they start to wait and drop it when they go to
/// sleep or return.
#[derive(Debug)]
pub(crate) struct Attending(());

impl Attending {
    /// `None` inside an executor (which holds the registry's lock and must not take it
    /// again).
    pub(crate) fn begin() -> Option<Attending> {
        if SERVING.with(Cell::get) {
            return None;
        }
        let list = SERVERS.read().unwrap_or_else(PoisonError::into_inner);
        // Relaxed: changes under the lock (read side: every change of the words below is
        // one atomic RMW; register stores the count under the write side).
        ATTENDING.fetch_add(1, Ordering::Relaxed);
        for server in list.iter() {
            // Relaxed: a hint for origins.
            server.attention().fetch_add(1, Ordering::Relaxed);
        }
        Some(Attending(()))
    }
}

impl Drop for Attending {
    fn drop(&mut self) {
        let list = SERVERS.read().unwrap_or_else(PoisonError::into_inner);
        // Relaxed: see begin.
        ATTENDING.fetch_sub(1, Ordering::Relaxed);
        for server in list.iter() {
            // Relaxed: see begin. A server registered after our begin was initialised with
            // our count included, so every server sees one decrement per increment.
            server.attention().fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// True when something is registered (waits then serve and mark themselves attentive).
#[inline]
pub(crate) fn any_server() -> bool {
    // Relaxed: a hint.
    SERVER_COUNT.load(Ordering::Relaxed) != 0
}

/// Polls registered with [`add_wait_hook`].
static HOOKS: RwLock<Vec<(u64, Hook)>> = RwLock::new(Vec::new());
type Hook = Arc<dyn Fn() + Send + Sync>;
/// `HOOKS.len()`, read without the lock by every wait.
static HOOK_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Ids of hooks (to remove the right one).
static NEXT_HOOK: AtomicU64 = AtomicU64::new(1);

/// Registers `poll` to be called from every wait inside onesided (a barrier, a fence, a
/// flush, a lock…) until the returned [`WaitHook`] is dropped — the way to keep another
/// communication library progressing while a thread waits here, as an MPI library's
/// progress loop drives every channel it has. Waits call hooks while they poll; while
/// hooks are registered and every process of the machine has a core of its own, a wait
/// keeps polling (yielding now and then) instead of backing off to sleep, as an MPI
/// library's progress loop does; when processes share cores it backs off as always. `poll`
/// must not block and must not call onesided.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// let polls = Arc::new(AtomicU64::new(0));
/// let counted = Arc::clone(&polls);
/// let hook = onesided::add_wait_hook(Arc::new(move || {
///     counted.fetch_add(1, Ordering::Relaxed);
/// }));
/// drop(hook); // no longer called
/// ```
pub fn add_wait_hook(poll: Arc<dyn Fn() + Send + Sync>) -> WaitHook {
    // Relaxed: an id; uniqueness is all that matters.
    let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
    let mut hooks = HOOKS.write().unwrap_or_else(PoisonError::into_inner);
    hooks.push((id, poll));
    // Relaxed: a hint for the waits' fast check.
    HOOK_COUNT.store(hooks.len(), Ordering::Relaxed);
    WaitHook { id }
}

/// A registered wait hook ([`add_wait_hook`]); dropping it unregisters the hook.
#[derive(Debug)]
pub struct WaitHook {
    id: u64,
}

impl Drop for WaitHook {
    fn drop(&mut self) {
        let mut hooks = HOOKS.write().unwrap_or_else(PoisonError::into_inner);
        hooks.retain(|(id, _)| *id != self.id);
        // Relaxed: see add_wait_hook.
        HOOK_COUNT.store(hooks.len(), Ordering::Relaxed);
    }
}

/// True when a wait hook is registered.
#[inline]
pub(crate) fn any_wait_hook() -> bool {
    // Relaxed: a hint.
    HOOK_COUNT.load(Ordering::Relaxed) != 0
}

/// Calls the registered wait hooks; true when there are any.
#[inline]
pub(crate) fn call_wait_hooks() -> bool {
    // Relaxed: a hook registered meanwhile is called by the next wait.
    if HOOK_COUNT.load(Ordering::Relaxed) == 0 {
        return false;
    }
    for (_, hook) in HOOKS.read().unwrap_or_else(PoisonError::into_inner).iter() {
        hook();
    }
    true
}

/// Serves this process's peers once, as a wait does between two looks, without marking the
/// process attentive (the caller may go back to computing): the wait hooks (the network
/// endpoint's progress among them) and the requests handed to this process. What a
/// nonblocking test does besides looking at its own request.
#[inline]
pub(crate) fn progress_peers() {
    call_wait_hooks();
    serve_pending();
}

/// Set when nothing serves this process's peers unless one of its threads calls in: the
/// network endpoint runs without a progress thread (`ONESIDED_PROGRESS=none`).
static UNSERVED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registered by the network endpoint when it starts no progress thread: from then on the
/// calls that return without waiting and that a program polls with — a flush that finds
/// nothing of its own in flight, `MPI_Win_sync` — serve the process's peers once
/// ([`serve_if_unserved`]), as MPI's progress rule asks of a process that keeps calling in.
#[cfg_attr(not(feature = "net"), allow(dead_code))]
pub(crate) fn set_unserved() {
    // Relaxed: a flag read by later calls of this process; a call that misses it serves
    // nobody once, as before the endpoint opened.
    UNSERVED.store(true, Ordering::Relaxed);
}

/// True when nothing serves this process's peers but its own calls ([`set_unserved`]).
#[inline]
pub(crate) fn unserved() -> bool {
    // Relaxed: see set_unserved.
    UNSERVED.load(Ordering::Relaxed)
}

/// [`progress_peers`] when nothing else serves this process's peers ([`set_unserved`]).
#[inline]
pub(crate) fn serve_if_unserved() {
    if unserved() {
        progress_peers();
    }
}

/// How a wait that backs off sleeps: registered by the network endpoint ([`set_sleeper`]),
/// else a plain sleep.
static SLEEPER: RwLock<Option<Sleeper>> = RwLock::new(None);
type Sleeper = Arc<dyn Fn(std::time::Duration) + Send + Sync>;
/// A sleeper is registered (read without the lock by every sleep).
static HAS_SLEEPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every backed-off wait of the library sleep with `sleep` (for at most the time it
/// is given, earlier when what it waits on may have come): a process whose waits depend on
/// answers from the network wakes when they arrive, not a whole back-off sleep later.
#[cfg_attr(not(feature = "net"), allow(dead_code))]
pub(crate) fn set_sleeper(sleep: Sleeper) {
    *SLEEPER.write().unwrap_or_else(PoisonError::into_inner) = Some(sleep);
    // Release: pairs with the Acquire in `sleep`; the lock orders the rest.
    HAS_SLEEPER.store(true, Ordering::Release);
}

/// Sleeps for at most `d`: through the registered sleeper ([`set_sleeper`]), else plainly.
pub(crate) fn sleep(d: std::time::Duration) {
    // Acquire: see set_sleeper.
    if HAS_SLEEPER.load(Ordering::Acquire) {
        let sleeper = SLEEPER
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(sleep) = sleeper {
            sleep(d);
            return;
        }
    }
    std::thread::sleep(d);
}

/// Identifies a live thread of this process in one instruction: the address of its thread
/// control block, which the ELF TLS ABI keeps in the block's first word (`%fs:0` on
/// x86-64 Linux) or in a register (`tpidr_el0` on AArch64 Linux); elsewhere `pthread_self`. Unique
/// among the threads alive at one time, reused after a thread ends, never 0. For the
/// atomics' fast path ([`crate::plain_acc::PlainGate`]), which asks on every call: there a
/// [`thread_tag`] costs a call of `__tls_get_addr` when onesided is linked into a shared
/// library (the C ABI's), ~25 instructions per atomic.
#[inline(always)]
pub(crate) fn live_thread_id() -> u64 {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let tcb: u64;
        // SAFETY: reads the thread pointer's first word, which the x86-64 TLS ABI makes
        // the thread control block's own address (glibc and musl alike); no memory of ours.
        unsafe {
            std::arch::asm!(
                "mov {}, qword ptr fs:[0]",
                out(reg) tcb,
                options(nostack, readonly, preserves_flags, pure)
            )
        };
        tcb
    }
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    {
        let tp: u64;
        // SAFETY: reads the thread pointer register, set by the C library for each thread.
        unsafe {
            std::arch::asm!(
                "mrs {}, tpidr_el0",
                out(reg) tp,
                options(nostack, nomem, preserves_flags, pure)
            )
        };
        tp
    }
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        // SAFETY: pthread_self has no preconditions.
        unsafe { libc::pthread_self() as u64 }
    }
}

/// Identifies a thread of this process (never reused): for the progress engine, and for
/// the network operations a thread posts (`transport::network::track_own`). Cheaper than
/// `std::thread::current().id()`, which clones the thread handle (two atomics) on every
/// call — and the RMA gate asks on every operation behind a pending epoch.
pub(crate) type ThreadTag = u64;

/// The calling thread's [`ThreadTag`].
#[inline]
pub(crate) fn thread_tag() -> ThreadTag {
    // A plain thread-local word (no lazy initializer, no destructor): one load in an
    // executable, a call of `__tls_get_addr` in a shared library.
    thread_local! {
        static TAG: std::cell::Cell<ThreadTag> = const { std::cell::Cell::new(0) };
    }
    let tag = TAG.get();
    if tag != 0 {
        return tag;
    }
    first_thread_tag(&TAG)
}

/// Gives the calling thread its tag, on its first [`thread_tag`].
#[cold]
#[inline(never)]
fn first_thread_tag(slot: &'static std::thread::LocalKey<std::cell::Cell<ThreadTag>>) -> ThreadTag {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // Relaxed: only uniqueness matters.
    let tag = NEXT.fetch_add(1, Ordering::Relaxed);
    slot.set(tag);
    tag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_threads_have_distinct_ids_that_stay_put() {
        let here = live_thread_id();
        assert_ne!(here, 0);
        assert_eq!(here, live_thread_id());
        // Both threads alive at once (the barrier): their ids differ.
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let b = std::sync::Arc::clone(&barrier);
        let other = std::thread::spawn(move || {
            let id = live_thread_id();
            b.wait();
            id
        });
        barrier.wait();
        let there = other.join().unwrap();
        assert_ne!(there, 0);
        assert_ne!(here, there);
    }
}
