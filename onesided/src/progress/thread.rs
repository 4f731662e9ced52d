//! The optional progress thread: one per process, for everything that wants asynchronous
//! progress, switched on with `ONESIDED_PROGRESS_THREAD=1` (off by default).
//!
//! It drives the queued synchronizations of every window ([`super::registry`]) while the
//! application computes without calling in — a deferred lock is acquired, an `ifence`
//! barrier passes, a deferred put lands — so the nonblocking close that follows finds its
//! work done. With nothing queued it parks; the first op queued anywhere wakes it. While ops
//! wait on other processes it backs off like every wait in onesided (spin, yield, then
//! sleeps up to 0.5 ms), so on a machine with fewer cores than ranks it costs little.
//! While the process has windows over ordinary memory (request rings, `transport::ring`)
//! and the node has two cores per rank, it never parks: it serves the operations origins
//! hand over, so they find the process attentive even while the application computes, on
//! the second core. With fewer cores it would take the application's core: it parks.
//!
//! ```text
//! ONESIDED_PROGRESS_THREAD=1 osrun -n 4 ./app
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::backoff::Backoff;

use super::registry;

/// The environment variable that switches the thread on ("1").
pub(crate) const ENV: &str = "ONESIDED_PROGRESS_THREAD";

/// The running thread, if any.
static THREAD: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

/// Asks the running thread to end.
static STOP: AtomicBool = AtomicBool::new(false);

/// True when `ONESIDED_PROGRESS_THREAD` asks for the thread.
pub(crate) fn enabled_by_env() -> bool {
    std::env::var(ENV).is_ok_and(|v| v == "1")
}

/// Starts the thread (once per process) if the environment asks for it.
pub(crate) fn start_if_enabled() {
    if enabled_by_env() {
        start();
    }
}

/// Starts the progress thread of this process, as `ONESIDED_PROGRESS_THREAD=1` does at
/// [`crate::init`]; a call while it runs does nothing. It runs until
/// [`crate::stop_progress_thread`] or the end of the process.
///
/// ```
/// onesided::start_progress_thread();
/// assert!(onesided::progress_thread_running());
/// onesided::stop_progress_thread();
/// ```
pub fn start() {
    let mut slot = THREAD.lock().unwrap_or_else(PoisonError::into_inner);
    if slot.is_some() {
        return;
    }
    // Relaxed: read by the new thread, which the spawn below orders after this store.
    STOP.store(false, Ordering::Relaxed);
    let handle = thread::Builder::new()
        .name("onesided-progress".into())
        .spawn(run)
        .expect("spawning the progress thread");
    registry::wake_on_queue(Some(handle.thread().clone()));
    *slot = Some(handle);
}

/// Ends the progress thread, if it runs, and waits for it: pending synchronizations are
/// then driven by the application's calls only, as before the thread started.
pub fn stop() {
    let mut slot = THREAD.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(handle) = slot.take() {
        // Relaxed: the unpark below wakes the thread, which then sees the flag.
        STOP.store(true, Ordering::Relaxed);
        registry::wake_on_queue(None);
        handle.thread().unpark();
        let _ = handle.join();
    }
}

/// True when this process's progress thread runs.
pub fn running() -> bool {
    THREAD
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_some()
}

fn run() {
    let mut backoff = Backoff::new();
    // Relaxed: see `stop`.
    while !STOP.load(Ordering::Relaxed) {
        if !registry::anything_pending() {
            if crate::attention::any_server() && crate::backoff::spare_cores() {
                // Requests of other processes may come at any time (request rings): poll
                // for them, which also marks the process attentive to its origins.
                backoff.snooze();
                continue;
            }
            // A wake-up between the check and the park is not lost: unpark before park
            // makes park return at once. The timeout only bounds a missed corner. A fresh
            // backoff: parked, the process serves nobody.
            thread::park_timeout(Duration::from_millis(50));
            backoff = Backoff::new();
            continue;
        }
        if registry::progress_all() {
            backoff.reset();
        } else {
            backoff.snooze();
        }
    }
}
