//! The process's windows, so that any library call — and the optional progress thread —
//! advances the pending synchronizations of all of them ([Zounmevo14] §VII-D: a deferred
//! epoch must move without further calls on its own window).
//!
//! It sits low (below `backoff`, which every wait goes through and which pokes it, and
//! below `progress`, whose engines register here): it knows windows only as [`Pending`].
//!
//! A window enters the registry when it is created and leaves it when it is dropped. The
//! blocking fast paths never read the registry: when the process count of queued ops leaves
//! zero, the registry sets the attention bit in every engine's own counter (see
//! `progress::ATTENTION`), which those paths read anyway.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Something with an engine that any thread may drive (a window's core).
pub(crate) trait Pending: Send + Sync {
    /// Polls the queued ops without blocking; errors are kept for the owner. Returns true
    /// when at least one completed.
    fn progress_for_other(&self) -> bool;
    /// Another engine has ops queued: make the fast paths look.
    fn set_attention(&self);
}

/// Ops queued in all engines of this process.
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// The thread to wake when an op is queued (the progress thread, when it runs).
static WAKE: Mutex<Option<std::thread::Thread>> = Mutex::new(None);

/// Whether [`WAKE`] names a thread: only then does `note_queued` take its lock (two atomic
/// writes on every transition of the count out of zero otherwise). Relaxed: another
/// thread's transition racing with the naming may miss the new thread, exactly as it
/// would had it run just before the naming; the progress thread's park timeout bounds
/// that corner (progress::thread).
static WAKE_NAMED: AtomicBool = AtomicBool::new(false);

/// Names the thread that `note_queued` wakes (once per process).
pub(crate) fn wake_on_queue(thread: Option<std::thread::Thread>) {
    let mut wake = WAKE.lock().unwrap_or_else(PoisonError::into_inner);
    WAKE_NAMED.store(thread.is_some(), Ordering::Relaxed);
    *wake = thread;
}

/// The engine of every window of the process (registered at creation, removed at drop).
static ENGINES: Mutex<Vec<Weak<dyn Pending>>> = Mutex::new(Vec::new());

/// True when some engine of this process has an op queued.
#[inline(always)]
pub(crate) fn anything_pending() -> bool {
    // Relaxed: a hint that decides whether to look; the engines' own counters and locks
    // order what is found there.
    QUEUED.load(Ordering::Relaxed) != 0
}

/// Progresses every window if any has work queued: what every library call that is not a
/// fast path does on entry.
#[inline]
pub(crate) fn poke() {
    if anything_pending() {
        progress_all();
    }
}

/// True when more than `own` ops are queued in the process: some other engine has work.
#[inline]
pub(crate) fn pending_beyond(own: usize) -> bool {
    // Relaxed: as in anything_pending.
    QUEUED.load(Ordering::Relaxed) > own
}

/// The process count, read for `Engine::settle` (SeqCst: see there).
pub(crate) fn pending_now() -> bool {
    QUEUED.load(Ordering::SeqCst) != 0
}

/// Counts ops entering (`+n`) or leaving (`-n`) an engine's queue; when the count leaves
/// zero, every engine gets the attention bit.
pub(crate) fn note_queued(delta: isize) {
    if delta < 0 {
        // Relaxed: see anything_pending.
        QUEUED.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        return;
    }
    // SeqCst: ordered before the attention bits set below (see `Engine::settle`).
    if QUEUED.fetch_add(delta as usize, Ordering::SeqCst) == 0 {
        let all = ENGINES.lock().unwrap_or_else(PoisonError::into_inner);
        for e in all.iter() {
            if let Some(engine) = e.upgrade() {
                engine.set_attention();
            }
        }
        drop(all);
        // The progress thread parks only when nothing is queued: wake it now.
        if WAKE_NAMED.load(Ordering::Relaxed) {
            if let Some(t) = WAKE.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
                t.unpark();
            }
        }
    }
}

/// Adds an engine (once, when its window is created).
pub(crate) fn register(engine: Weak<dyn Pending>) {
    let mut all = ENGINES.lock().unwrap_or_else(PoisonError::into_inner);
    all.retain(|e| e.strong_count() > 0);
    // Ops queued elsewhere before this window existed: its fast paths must look too.
    // SeqCst: as in note_queued (a count leaving zero meanwhile waits for this lock).
    if QUEUED.load(Ordering::SeqCst) != 0 {
        if let Some(new) = engine.upgrade() {
            new.set_attention();
        }
    }
    all.push(engine);
}

/// Removes `engine` (its window is being dropped). Waits for a thread that is polling it
/// right now, so that no other thread holds the window's core after this returns.
pub(crate) fn unregister(engine: &Arc<impl Pending + 'static>) {
    let target = Arc::as_ptr(engine) as *const ();
    let mut all = ENGINES.lock().unwrap_or_else(PoisonError::into_inner);
    all.retain(|e| e.strong_count() > 0 && e.as_ptr() as *const () != target);
}

/// Polls every registered engine once. A thread that finds another one already doing it
/// returns at once (it would only poll the same queues again). Returns true when some op
/// completed.
pub(crate) fn progress_all() -> bool {
    progress_all_but(std::ptr::null())
}

/// [`progress_all`] without the engine whose host is at `skip` (the caller drives its own
/// queue next).
pub(crate) fn progress_all_but(skip: *const ()) -> bool {
    let all = match ENGINES.try_lock() {
        Ok(all) => all,
        Err(std::sync::TryLockError::WouldBlock) => return false,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
    };
    let mut any = false;
    for e in all.iter().filter(|e| e.as_ptr() as *const () != skip) {
        // The registry lock is held while the core is in use: `unregister` (the window's
        // drop) waits for it, so the last `Arc` is never dropped here.
        if let Some(core) = e.upgrade() {
            any |= core.progress_for_other();
        }
    }
    any
}

/// Number of live registered engines (tests).
#[cfg(test)]
pub(crate) fn registered() -> usize {
    ENGINES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|e| e.strong_count() > 0)
        .count()
}
