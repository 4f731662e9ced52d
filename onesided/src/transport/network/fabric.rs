//! A network as the library calls it: the process's network ([`Network`]: its endpoint
//! as a whole — peers, what it orders, the routes' puts and gets) and the endpoint's
//! operations that the network protocols hold ([`Fabric`]), which each network implements
//! — libfabric with our messages over TCP (`net::Endpoint`, `ofi::Nic`) and our messages
//! alone (`socket::Endpoint`, `socket::Sockets`) — and the registrations it hands out
//! ([`Registration`]).

// What only an implementation of the network uses (none without the feature `net`).
#![cfg_attr(not(feature = "net"), allow(dead_code))]

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::transport::network::terms::{
    Ack, AtomicKind, AtomicTable, DeliverGate, NetOp, NetType, PeerEnded, Remote, TrackedContext,
};
use crate::transport::write_end::WriteEnd;

/// Memory registered with the process's endpoint: peers on other nodes name its first byte
/// `remote_base` under `key`. What the implementation keeps of it is held until this is
/// dropped (deregistered then).
pub(crate) struct Registration {
    /// The key peers name it with.
    pub key: u64,
    /// The address a peer puts in its operations for the first byte.
    pub remote_base: u64,
    /// Kept until the registration is dropped (some implementations only need its drop).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    held: Box<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("key", &self.key)
            .field("remote_base", &self.remote_base)
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// A registration under `key` at `remote_base` whose implementation's part is `held`.
    pub(crate) fn new(key: u64, remote_base: u64, held: impl std::any::Any + Send + Sync) -> Self {
        Registration {
            key,
            remote_base,
            held: Box::new(held),
        }
    }

    /// The implementation's part, if it is a `T` (an implementation reads its own).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn held<T: 'static>(&self) -> Option<&T> {
        self.held.downcast_ref()
    }
}

/// What the process's network endpoint does for the library's network protocols (the
/// control plane over the network, window creation across nodes, network atomics,
/// notification counters): one implementation per network — libfabric with our messages
/// over TCP (`ofi::Nic`) and our messages alone (`socket::Sockets`). Dynamic dispatch: every call is a network operation of
/// microseconds; nothing on a node-local path calls it.
///
/// Completion: operations are counted when posted and complete by the next [`Fabric::flush`]
/// (at the target: `FI_DELIVERY_COMPLETE`), except those posted with a
/// [`TrackedContext`], which the completion reader marks.
pub(crate) trait Fabric: Send + Sync + std::fmt::Debug {
    /// This endpoint's address, to hand to the peers (what [`peer`] takes).
    fn name(&self) -> Result<Vec<u8>>;

    /// Registers `len` bytes at `base` for peers' operations.
    ///
    /// # Safety
    /// The memory stays valid until the registration is dropped.
    unsafe fn register(&self, base: *mut u8, len: usize) -> Result<Registration>;

    /// [`Fabric::register`] under the key `wanted` where the implementation lets every
    /// process choose (peers then need no table of keys and bases); under a key of its own
    /// otherwise.
    ///
    /// # Safety
    /// As for [`Fabric::register`].
    unsafe fn register_as(
        &self,
        base: *mut u8,
        len: usize,
        wanted: Option<u64>,
    ) -> Result<Registration>;

    /// True when the endpoint's atomics on this node's memory mix with CPU atomics on the
    /// same words (then words held on this node may be changed with CPU atomics).
    fn atomics_mix_with_cpu(&self) -> bool;

    /// True when atomics reach one peer in issue order.
    fn orders_atomics(&self) -> bool;

    /// True when a whole exclusive epoch to `peer` can go in one message
    /// ([`Fabric::ship_epoch`]).
    fn ships_epochs_to(&self, peer: u64) -> bool;

    /// True while operations of ours sent to `peer` over the wire wait for their answers
    /// (false where the wire does not reach it): while false, a message to `peer` sent
    /// unanswered ([`Fabric::add_unanswered`]) applies after everything of ours that
    /// reached it, and nothing of ours is on its way there but such messages.
    fn answers_pending_to(&self, peer: u64) -> bool;

    /// Bytes held in operations not yet seen complete (copied operands and bookkeeping).
    fn held_bytes(&self) -> usize;

    /// Reads `dst.len()` bytes at `from` into `dst`; complete when it returns.
    fn read_waited(&self, dst: &mut [u8], from: Remote) -> Result<()>;

    /// Posts an atomic of `kind` with `op` on `count` elements of `ty` at `at`, `operand`
    /// (and for a compare, `compare`) the origin's elements, `result` receiving the
    /// previous ones; `local` the registration of the origin's buffers, if any. Complete
    /// once a later flush returns.
    ///
    /// # Safety
    /// The buffers hold `count` elements of `ty` and stay valid until that flush.
    #[allow(clippy::too_many_arguments)]
    unsafe fn atomic(
        &self,
        kind: AtomicKind,
        op: NetOp,
        ty: NetType,
        count: usize,
        operand: *const u8,
        compare: *const u8,
        result: *mut u8,
        local: Option<&Registration>,
        at: Remote,
    ) -> Result<()>;

    /// Posts a non-fetching atomic whose operand is copied first (`operand` free at once).
    fn atomic_copied(&self, op: NetOp, ty: NetType, operand: &[u8], at: Remote) -> Result<()>;

    /// Posts a fetching atomic on the 8-byte word at `at` with operands in `words`
    /// (registered under `reg`; the previous value lands in it), tracked by `tracked`.
    ///
    /// # Safety
    /// `words` (three words) and `tracked` stay valid until `tracked` says the operation
    /// completed.
    unsafe fn fetch_word(
        &self,
        op: NetOp,
        words: *mut u64,
        reg: &Registration,
        at: Remote,
        tracked: *mut TrackedContext,
    ) -> Result<()>;

    /// Posts an injected atomic (`Sum` or `Write`) of `value` on the word at `at`.
    fn post_word(&self, op: NetOp, value: u64, at: Remote) -> Result<()>;

    /// Stores `value` into the word at `at` (Release at the target) in a message nobody
    /// answers, applied after everything this process posted to that peer before: no
    /// flush waits for it, and its sender learns of its arrival only from the peer (a
    /// barrier's signal, answered by the peer's own). False, with nothing sent, where the
    /// network has no such message to that peer (the caller then posts an atomic).
    fn store_unanswered(&self, value: u64, at: Remote) -> Result<bool>;

    /// Adds `value` to the word at `at` as [`Fabric::store_unanswered`] stores: a
    /// counter's increment in a message nobody answers (false, with nothing sent, where
    /// the network has none to that peer); `ack` says when its receiver acknowledges it
    /// ([`Ack`]: at once for a lock's release, which the next lock request often follows).
    fn add_unanswered(&self, value: u64, at: Remote, ack: Ack) -> Result<bool>;

    /// Sends a whole exclusive lock epoch to the lock word at `at` in one message: a
    /// compare-and-swap from `words[1]` to `words[0]` (the previous value into
    /// `words[2]`), and when it took the lock (or with `held`) the updates of `payload`
    /// and the release.
    ///
    /// # Safety
    /// As for [`Fabric::fetch_word`].
    unsafe fn ship_epoch(
        &self,
        words: *mut u64,
        at: Remote,
        held: bool,
        payload: &[u8],
        tracked: *mut TrackedContext,
    ) -> Result<()>;

    /// Updates of any element type under the target's lock stripes in one message,
    /// waited for: the target takes the stripe words `stripes` (one peer and registration;
    /// each from free, 0, to held, 1; all or none), applies `payload` (requests as
    /// `wire::encode_striped` writes them), releases the stripes and answers. `Ok(true)`:
    /// applied, the fetching requests' previous values in `result`; `Ok(false)`: a stripe
    /// was held, nothing applied (try again). An error where the wire does not reach the
    /// peer ([`Fabric::ships_epochs_to`]).
    fn striped_waited(&self, stripes: &[Remote], payload: &[u8], result: &mut [u8])
        -> Result<bool>;

    /// Waits until every operation posted so far completed, calling `meanwhile` between
    /// looks.
    fn flush(&self, meanwhile: &mut dyn FnMut() -> Result<()>) -> Result<()>;

    /// Drives the endpoint's progress once (peers' operations on this process included).
    fn progress(&self) -> Result<()>;

    /// Gives up on one tracked operation that will never be waited for (`read`: a
    /// fetching one), so that flushes do not wait for it.
    fn abandon(&self, read: bool);

    /// Watches `peer` (rank `rank`), which `ended` says has ended: operations to it then
    /// fail as the peer's, not as the network's.
    fn watch_peer(&self, peer: u64, rank: usize, ended: PeerEnded);

    /// `e` as the failure of a watched peer that ended, where it is one.
    fn blame(&self, e: Error) -> Error;

    /// True once an operation failed (every later wait reports it).
    fn has_failed(&self) -> bool;
}

/// The process's network: one per process, chosen and opened by the registration point
/// (`transport::network::endpoint`) at the first window across nodes, and kept for the
/// life of the process. Its endpoint's operations are a [`Fabric`] ([`Network::fabric`]);
/// what this adds is the process-wide part: peers, what the network orders, and the
/// routes' puts and gets (`Route::Net`). Dynamic dispatch, as for [`Fabric`].
pub(crate) trait Network: Send + Sync {
    /// The endpoint's operations.
    fn fabric(&self) -> &Arc<dyn Fabric>;

    /// The endpoint's entry for the peer whose address is `name` (what the peer's
    /// [`Fabric::name`] gave), inserted at its first use.
    fn peer(&self, name: &[u8]) -> Result<u64>;

    /// What the endpoint does natively.
    fn atomic_table(&self) -> &AtomicTable;

    /// Operations posted on the endpoint not yet seen complete.
    fn in_flight(&self) -> u64;

    /// What `onesided::network()` reports.
    #[cfg(feature = "net")]
    fn description(&self) -> crate::NetworkEndpoint;

    /// True when operations to a peer arrive in issue order where a write or a read
    /// follows a write.
    fn orders_after_writes(&self) -> bool;

    /// True when writes to a peer are placed in issue order.
    fn orders_rma_writes(&self) -> bool;

    /// Writes `src` to `to`; complete at the target when it returns.
    fn write_waited(&self, src: &[u8], to: Remote) -> Result<()>;

    /// Writes `pieces` — (offset in `src`, offset from `to`, length) — of `src` to `to`,
    /// issued: complete at the target by the next flush, `src` free when this returns.
    fn post_write(&self, src: &[u8], pieces: &[(usize, usize, usize)], to: Remote) -> Result<()>;

    /// Writes `pieces` of `src` to `to`; complete at the target when it returns.
    fn write_pieces_waited(
        &self,
        src: &[u8],
        pieces: &[(usize, usize, usize)],
        to: Remote,
    ) -> Result<()>;

    /// Reads `pieces` — (offset in `dst`, offset from `from`, length) — into `dst`;
    /// complete when it returns.
    fn read_pieces_waited(
        &self,
        dst: &mut [u8],
        pieces: &[(usize, usize, usize)],
        from: Remote,
    ) -> Result<()>;

    /// True when a put of `len` bytes to `to` goes as a message that completes in one
    /// round trip rather than as a write that a flush completes.
    fn put_over_wire(&self, len: usize, to: Remote) -> Result<bool>;

    /// True when a put of `len` bytes to `to` can go as atomic writes
    /// ([`Network::post_write_atomic`]).
    fn atomic_put_fits(&self, len: usize, to: Remote) -> Result<bool>;

    /// Writes `src` to `to` as atomic writes, issued with a copy: kept in order with the
    /// endpoint's other atomics to the same peer.
    fn post_write_atomic(&self, src: &[u8], to: Remote) -> Result<()>;

    /// Posts a long put of `src` to `to` (at least [`LONG_PUT_MIN`] bytes) as messages of
    /// our own over our connection to the target, where this network sends puts so and
    /// the connection reaches it: sent from `src` as far as the kernel takes them (the
    /// rest copied), read at the target straight into place, complete at the target when
    /// the answer comes — a flush waits for it. True when posted; false with nothing
    /// posted elsewhere.
    ///
    /// [`LONG_PUT_MIN`]: crate::transport::network::LONG_PUT_MIN
    fn post_long_put(&self, src: &[u8], to: Remote) -> Result<bool>;

    /// Writes `src` to `to` from where it is: complete at the caller's next completion
    /// point (as `end` says), `owner` held until then.
    ///
    /// # Safety
    /// `src` stays valid and unchanged while `owner` is held.
    unsafe fn post_write_shared(
        &self,
        src: &[u8],
        to: Remote,
        owner: Arc<dyn Send + Sync>,
        end: WriteEnd,
    ) -> Result<()>;

    /// Sends `block` to `to` and then `words` to `flag` in one message that nobody
    /// answers, with its second place `gate` if any: false, with nothing sent, where the
    /// network cannot.
    fn deliver(
        &self,
        block: &[u8],
        to: Remote,
        words: &[u64],
        flag: Remote,
        gate: Option<DeliverGate<'_>>,
    ) -> Result<bool>;

    /// Completes the operations the calling thread posted under `track_own` (a flush of
    /// thread scope; a network that cannot tell threads apart completes every one).
    fn flush_own(&self) -> Result<()>;

    /// Lets go of what completed operations posted under `track_own` hold.
    fn reap_own(&self) -> Result<()>;
}
