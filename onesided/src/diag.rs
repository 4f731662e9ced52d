//! Diagnostics: structured events and the hang report.
//!
//! **Events.** Windows created and freed; fence and PSCW calls (done at once, pending or
//! failed); every synchronization that had to wait, when it starts waiting and when it is
//! done (a lock granted after waiting among them); requests taken back from a target's ring:
//! `debug` events of the `tracing` crate under targets `onesided::window`,
//! `onesided::epoch`, `onesided::sync` and `onesided::ring` (feature `trace`, on by
//! default; without it they compile to nothing). An application's own `tracing`
//! subscriber sees them; without one, `ONESIDED_LOG=debug` (or `info`, `trace`, ...)
//! prints them on stderr, one line each, prefixed with the rank. The fast paths — put, get,
//! accumulate, flush, and lock/unlock/lock_all/unlock_all that need not wait — emit nothing
//! (events there made unlock and unlock_all 1.8–2.1× slower in a same-run A/B).
//!
//! A wait inside the library that lasts longer than `ONESIDED_HANG_REPORT` seconds (unset:
//! never) prints once, on this rank's stderr, what it waits for: the MPI call, the window,
//! the peer, the control word it watches with its value now and the value it needs (a
//! wait for the network endpoint: the operations it waits for and how many completed). And
//! when `osrun --timeout` ends a job, it first asks every rank for that report (the abort
//! word of the node's boot segment says why the job ends), so a timed-out job says where
//! each rank was stuck. Under `mpiexec` or `srun` the timer alone applies.
//!
//! The report is built only when it is printed; a wait pays one load per poll while the
//! timer is off, and one clock read per poll while it is on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The environment variable that sets the report's delay, in seconds.
pub(crate) const ENV_HANG_REPORT: &str = "ONESIDED_HANG_REPORT";

/// This process's rank in its job, for the report's prefix (`usize::MAX`: not known yet).
/// Relaxed: set once at start-up, read only to label a report.
static RANK: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Records this process's rank in its job (labels its reports).
pub(crate) fn set_rank(rank: usize) {
    RANK.store(rank, Ordering::Relaxed);
}

/// What the job of this process says about its end ([`job_ending`]), for waits that
/// serve no window and so watch no abort word of their own (the network endpoint's: a
/// flush, a read). Set by the bootstrap's owner, a layer above.
type JobProbe = Box<dyn Fn() -> Option<bool> + Send + Sync>;
static JOB: OnceLock<JobProbe> = OnceLock::new();

/// Records how to ask the job of this process whether its launcher ended it (see
/// [`job_ending`]; the first call wins).
pub(crate) fn set_job_probe(probe: impl Fn() -> Option<bool> + Send + Sync + 'static) {
    let _ = JOB.set(Box::new(probe));
}

/// `None` while the job runs; once its launcher aborted it, `Some(true)` when the
/// launcher asks every wait what it waits for (`osrun --timeout`), else `Some(false)`.
#[cfg_attr(not(feature = "net"), allow(dead_code))]
pub(crate) fn job_ending() -> Option<bool> {
    JOB.get().and_then(|probe| probe())
}

/// Prints a line of the library's own on stderr, whatever became of stderr: `eprintln!`
/// panics when it cannot write (a closed pipe), and a warning must not end the program.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `[onesided rank N]`, or `[onesided pid P]` before the rank is known.
pub(crate) fn prefix() -> String {
    match RANK.load(Ordering::Relaxed) {
        usize::MAX => format!("[onesided pid {}]", std::process::id()),
        rank => format!("[onesided rank {rank}]"),
    }
}

/// The delay after which a wait reports itself, from [`ENV_HANG_REPORT`] (read once). An
/// invalid value is reported once and leaves the timer off.
fn threshold() -> Option<Duration> {
    static AFTER: OnceLock<Option<Duration>> = OnceLock::new();
    *AFTER.get_or_init(|| {
        let value = std::env::var(ENV_HANG_REPORT).ok()?;
        match parse_seconds(&value) {
            Ok(after) => after,
            Err(why) => {
                say(format_args!(
                    "{} {ENV_HANG_REPORT}={value:?} ignored: {why}",
                    prefix()
                ));
                None
            }
        }
    })
}

/// A delay in seconds: a positive number; `0`, `off` or empty turn the timer off.
fn parse_seconds(value: &str) -> Result<Option<Duration>, String> {
    let v = value.trim();
    if v.is_empty() || v == "0" || v.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let secs: f64 = v
        .parse()
        .map_err(|_| "expected a number of seconds".to_owned())?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .map(Some)
        .ok_or_else(|| "expected a positive number of seconds".to_owned())
}

/// The environment variable that prints the library's events on stderr (a level:
/// `error`, `warn`, `info`, `debug`, `trace`; `off` or unset: nothing).
#[cfg_attr(not(feature = "trace"), allow(dead_code))]
pub(crate) const ENV_LOG: &str = "ONESIDED_LOG";

/// A number shown in hex in events (window ids).
pub(crate) struct Hex(pub u64);

impl std::fmt::Debug for Hex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Emits a `debug` event (feature `trace`; nothing without it). Same syntax as
/// `tracing::debug!`.
///
/// While no subscriber exists (no `ONESIDED_LOG`, none of the application's) an event costs
/// one relaxed load and a branch: `tracing`'s own level and callsite checks, and the
/// event's fields, live out of line in [`cold`].
macro_rules! event {
    ($($arg:tt)*) => {{
        #[cfg(feature = "trace")]
        if ::tracing::dispatcher::has_been_set() {
            $crate::diag::cold(|| ::tracing::debug!($($arg)*));
        }
    }};
}
pub(crate) use event;

/// Runs `f` out of line (the body of an enabled [`event!`]).
#[cfg(feature = "trace")]
#[cold]
#[inline(never)]
pub(crate) fn cold(f: impl FnOnce()) {
    f()
}

/// Prints the library's events on stderr as [`ENV_LOG`] asks, unless the application
/// installed a `tracing` subscriber of its own (which then sees them). Once per process.
pub(crate) fn install_logger() {
    #[cfg(feature = "trace")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let Ok(value) = std::env::var(ENV_LOG) else {
                return;
            };
            match log::parse_level(&value) {
                Ok(Some(max)) => {
                    // Fails when the application has its own subscriber: it gets the events.
                    let _ =
                        tracing::subscriber::set_global_default(log::Logger { max, sink: None });
                }
                Ok(None) => {}
                Err(why) => say(format_args!(
                    "{} {ENV_LOG}={value:?} ignored: {why}",
                    prefix()
                )),
            }
        });
    }
}

#[cfg(feature = "trace")]
mod log {
    //! The stderr printer of `ONESIDED_LOG`: one line per event, no spans.

    use std::fmt::Write as _;
    use std::io::Write as _;

    use tracing::field::{Field, Visit};
    use tracing::level_filters::LevelFilter;
    use tracing::{span, Event, Level, Metadata, Subscriber};

    /// A level name; `off` (or empty) is none.
    pub(super) fn parse_level(value: &str) -> Result<Option<Level>, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "0" => Ok(None),
            "error" => Ok(Some(Level::ERROR)),
            "warn" => Ok(Some(Level::WARN)),
            "info" => Ok(Some(Level::INFO)),
            "debug" | "1" => Ok(Some(Level::DEBUG)),
            "trace" => Ok(Some(Level::TRACE)),
            _ => Err("expected error, warn, info, debug, trace or off".into()),
        }
    }

    /// Prints onesided's events up to `max` (on stderr; into `sink` in tests).
    pub(super) struct Logger {
        pub(super) max: Level,
        pub(super) sink: Option<std::sync::Arc<std::sync::Mutex<Vec<u8>>>>,
    }

    /// An event's fields as ` key=value` (the message bare).
    struct Line(String);

    impl Visit for Line {
        fn record_str(&mut self, field: &Field, value: &str) {
            if field.name() == "message" {
                let _ = write!(self.0, " {value}");
            } else {
                let _ = write!(self.0, " {}={value}", field.name());
            }
        }

        fn record_u64(&mut self, field: &Field, value: u64) {
            let _ = write!(self.0, " {}={value}", field.name());
        }

        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                let _ = write!(self.0, " {value:?}");
            } else {
                let _ = write!(self.0, " {}={value:?}", field.name());
            }
        }
    }

    impl Subscriber for Logger {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            *metadata.level() <= self.max && metadata.target().starts_with("onesided")
        }

        fn max_level_hint(&self) -> Option<LevelFilter> {
            Some(LevelFilter::from_level(self.max))
        }

        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }

        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

        fn event(&self, event: &Event<'_>) {
            let m = event.metadata();
            let mut line = Line(format!("{} {} {}:", super::prefix(), m.level(), m.target()));
            event.record(&mut line);
            line.0.push('\n');
            match &self.sink {
                Some(sink) => sink
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend_from_slice(line.0.as_bytes()),
                // One write per line: ranks share the launcher's stderr.
                None => {
                    let _ = std::io::stderr().lock().write_all(line.0.as_bytes());
                }
            }
        }

        fn enter(&self, _: &span::Id) {}

        fn exit(&self, _: &span::Id) {}
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn levels_parse() {
            assert_eq!(parse_level("debug"), Ok(Some(Level::DEBUG)));
            assert_eq!(parse_level(" TRACE "), Ok(Some(Level::TRACE)));
            assert_eq!(parse_level("off"), Ok(None));
            assert!(parse_level("loud").is_err());
        }

        #[test]
        fn events_print_as_one_line_with_fields() {
            let sink = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let logger = Logger {
                max: Level::DEBUG,
                sink: Some(std::sync::Arc::clone(&sink)),
            };
            tracing::subscriber::with_default(logger, || {
                tracing::debug!(target: "onesided::window", window = 7u64, flavor = "allocate", "created");
                tracing::trace!(target: "onesided::window", "too verbose");
                tracing::debug!(target: "other", "not ours");
            });
            let out = String::from_utf8(sink.lock().unwrap().clone()).unwrap();
            assert!(
                out.ends_with(" DEBUG onesided::window: created window=7 flavor=allocate\n"),
                "{out:?}"
            );
            assert_eq!(out.lines().count(), 1, "{out:?}");
        }
    }
}

/// The hang-report state of one wait: when it began, and whether it has reported.
#[derive(Debug, Default)]
pub(crate) struct HangClock {
    since: Option<Instant>,
    reported: bool,
    /// Polls seen by [`HangClock::tick_job`].
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    polls: u64,
}

impl HangClock {
    /// A wait that begins now (the clock starts at its first poll).
    pub(crate) fn new() -> Self {
        HangClock::default()
    }

    /// One poll of a wait that has not ended: past the delay of [`ENV_HANG_REPORT`], prints
    /// (once) what `describe` says the wait waits for.
    #[inline]
    pub(crate) fn tick(&mut self, describe: impl FnOnce() -> String) {
        let Some(after) = threshold() else {
            return;
        };
        if self.reported {
            return;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        let waited = since.elapsed();
        if waited >= after {
            self.reported = true;
            print_report(Some(waited), &describe());
        }
    }

    /// One poll of a wait that watches the job itself ([`job_ending`]; a wait with a window
    /// watches its window's communicator instead): [`HangClock::tick`], and every
    /// [`JOB_CHECK_POLLS`] polls a look at the job — true when it was aborted, after the
    /// report its launcher asked for, if it asked.
    #[inline]
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) fn tick_job(&mut self, describe: impl Fn() -> String) -> bool {
        self.tick(&describe);
        self.polls += 1;
        if self.polls % JOB_CHECK_POLLS != 0 {
            return false;
        }
        match job_ending() {
            None => false,
            Some(report) => {
                if report {
                    self.timed_out(describe);
                }
                true
            }
        }
    }

    /// The job ends because it ran out of time (`osrun --timeout`): prints what this wait
    /// waits for, unless it reported already.
    pub(crate) fn timed_out(&mut self, describe: impl FnOnce() -> String) {
        if !self.reported {
            self.reported = true;
            print_report(self.since.map(|s| s.elapsed()), &describe());
        }
    }
}

/// How often [`HangClock::tick_job`] looks at the job's abort word: a look costs a few
/// loads behind an indirect call, a poll of the network a system call.
#[cfg_attr(not(feature = "net"), allow(dead_code))]
pub(crate) const JOB_CHECK_POLLS: u64 = 64;

fn print_report(waited: Option<Duration>, what: &str) {
    use std::io::Write;
    let how_long = match waited {
        Some(w) => format!(" after {:.1} s", w.as_secs_f64()),
        None => String::new(),
    };
    // One write: the ranks share the launcher's stderr, and a line written in pieces
    // interleaves with theirs.
    let line = format!("{} hang report{how_long}: {what}\n", prefix());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_parse_as_seconds() {
        assert_eq!(parse_seconds("10"), Ok(Some(Duration::from_secs(10))));
        assert_eq!(parse_seconds(" 0.5 "), Ok(Some(Duration::from_millis(500))));
        assert_eq!(parse_seconds("0"), Ok(None));
        assert_eq!(parse_seconds("off"), Ok(None));
        assert_eq!(parse_seconds(""), Ok(None));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("ten").is_err());
        assert!(parse_seconds("inf").is_err());
    }

    #[test]
    fn a_clock_reports_once() {
        let mut clock = HangClock::new();
        let mut asked = 0;
        clock.timed_out(|| {
            asked += 1;
            "first".into()
        });
        clock.timed_out(|| {
            asked += 1;
            "second".into()
        });
        assert_eq!(asked, 1);
    }
}
