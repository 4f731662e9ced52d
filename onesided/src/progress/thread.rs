//! The optional progress thread: one per process, for everything that wants asynchronous
//! progress, switched on with `ONESIDED_PROGRESS_THREAD=1` (off by default).
//!
//! It drives the queued synchronizations of every window ([`super::registry`]) while the
//! application computes without calling in — a deferred lock is acquired, an `ifence`
//! barrier passes, a deferred put lands — so the nonblocking close that follows finds its
//! work done. With nothing queued it parks; the first op queued anywhere wakes it. While ops
//! wait on other processes it backs off like every wait in onesided (spin, yield, then
//! sleeps up to 0.5 ms), so on a machine with fewer cores than ranks it costs little.
//!
//! ```text
//! ONESIDED_PROGRESS_THREAD=1 osrun -n 4 ./app
//! ```

use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use crate::backoff::Backoff;

use super::registry;

/// The environment variable that switches the thread on ("1").
pub(crate) const ENV: &str = "ONESIDED_PROGRESS_THREAD";

static THREAD: OnceLock<()> = OnceLock::new();

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
/// [`crate::init`]; a second call does nothing. The thread runs until the process exits.
///
/// ```no_run
/// onesided::start_progress_thread();
/// assert!(onesided::progress_thread_running());
/// ```
pub fn start() {
    THREAD.get_or_init(|| {
        let handle = thread::Builder::new()
            .name("onesided-progress".into())
            .spawn(run)
            .expect("spawning the progress thread");
        registry::wake_on_queue(handle.thread().clone());
    });
}

/// True when this process's progress thread runs.
pub fn running() -> bool {
    THREAD.get().is_some()
}

fn run() {
    let mut backoff = Backoff::new();
    loop {
        if !registry::anything_pending() {
            // A wake-up between the check and the park is not lost: unpark before park
            // makes park return at once. The timeout only bounds a missed corner.
            thread::park_timeout(Duration::from_millis(50));
            backoff.reset();
            continue;
        }
        if registry::progress_all() {
            backoff.reset();
        } else {
            backoff.snooze();
        }
    }
}
