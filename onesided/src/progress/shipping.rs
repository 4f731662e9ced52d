//! Shipped epochs: an exclusive lock epoch to another node sent as one message.
//!
//! On a window across nodes an exclusive epoch of accumulates costs its origin a round trip
//! for the lock, an atomic per accumulate and a round trip for the release, and holds the
//! target's lock from the first arrival to the last: in seed 004's hot-spot transactions
//! the owner of the hot lock waits for its own lock while another node's epoch travels.
//! Where the whole epoch is known before its lock is asked for — a nonblocking `ilock`
//! waits to be driven ([`SyncOp::lazy`]) and the epoch's accumulates and its `iunlock`
//! are queued behind it — the origin sends it as one message instead (a `wire` epoch):
//! the target takes the lock with a compare-and-swap, applies the accumulates and releases
//! the lock in one step of its progress, and answers with the word's previous value. When
//! the lock was not free nothing was applied: the unlock then acquires the lock the usual
//! way (queueing, so that no one starves) and sends the accumulates in a second message
//! that applies them and releases (`sync::lock`, `UnlockOp::InOrder`).
//!
//! An epoch is shipped only when it holds nothing but accumulates that can travel in the
//! message ([`ShipRole::Update`]: no fetching or remote-completing operation, no put, no
//! flush) and nothing queued between its lock and its unlock completes or orders what it
//! issued (a flush of every target, a fence or lock_all, a collective). A lazy lock that
//! sees anything else, or no unlock within [`lazy_for`] (20 µs unless [`ENV`] says
//! otherwise), asks for its lock as before.
//!
//! [`SyncOp::lazy`]: super::SyncOp::lazy

use std::time::Duration;

/// The environment variable that sets how long, in microseconds, a lazy lock waits for its
/// epoch's unlock ([`lazy_for`]); `0` or `off` ships no epoch.
pub(crate) const ENV: &str = "ONESIDED_SHIP_EPOCHS";

/// How long a lazy lock waits for its epoch's unlock by default: what an epoch issued back
/// to back takes in an optimized build, below a round trip to another node here.
const LAZY_FOR: Duration = Duration::from_micros(20);

/// How long a lazy lock waits for its epoch's unlock before it asks for the lock
/// ([`ENV`], read once); `None`: epochs are not shipped.
pub(crate) fn lazy_for() -> Option<Duration> {
    static LAZY: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    *LAZY.get_or_init(|| match std::env::var(ENV) {
        Err(_) => Some(LAZY_FOR),
        Ok(v) if v == "off" => None,
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(0) => None,
            Ok(us) => Some(Duration::from_micros(us)),
            Err(_) => {
                crate::diag::say(format_args!(
                    "onesided: {ENV}={v:?} is not a number of microseconds or `off`; using {} µs",
                    LAZY_FOR.as_micros()
                ));
                Some(LAZY_FOR)
            }
        },
    })
}

/// The most bytes of accumulates one shipped epoch carries (more: the epoch goes as
/// before).
pub(crate) const MAX_PAYLOAD: usize = 16 << 10;

/// Ops of the queue looked at for the epoch's operations and unlock.
pub(crate) const SCAN: usize = 64;

/// What a queued op is to a lazy epoch it belongs to ([`SyncOp::ship_role`]).
///
/// [`SyncOp::ship_role`]: super::SyncOp::ship_role
#[derive(Debug)]
pub(crate) enum ShipRole {
    /// An accumulate that may travel in the message (its request: [`SyncOp::ship_request`]).
    ///
    /// [`SyncOp::ship_request`]: super::SyncOp::ship_request
    Update,
    /// The epoch's unlock, which can carry the epoch.
    Close,
    /// Neither: the epoch cannot be shipped.
    Other,
}
