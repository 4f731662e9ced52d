//! The network endpoint's operations as one interface ([`Fabric`]), which each network
//! implements (libfabric with our messages over TCP: `ofi::Nic`), and the registrations it
//! hands out ([`Registration`]).

// What only an implementation of the network uses (none without the feature `ofi`).
#![cfg_attr(not(feature = "ofi"), allow(dead_code))]

use crate::error::{Error, Result};
use crate::transport::network::terms::{
    AtomicKind, NetOp, NetType, PeerEnded, Remote, TrackedContext,
};

/// Memory registered with the process's endpoint: peers on other nodes name its first byte
/// `remote_base` under `key`. What the implementation keeps of it is held until this is
/// dropped (deregistered then).
pub(crate) struct Registration {
    /// The key peers name it with.
    pub key: u64,
    /// The address a peer puts in its operations for the first byte.
    pub remote_base: u64,
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
    pub(crate) fn held<T: 'static>(&self) -> Option<&T> {
        self.held.downcast_ref()
    }
}

/// What the process's network endpoint does for the library's network protocols (the
/// control plane over the network, window creation across nodes, network atomics,
/// notification counters): one implementation per network — libfabric with our messages
/// over TCP (`ofi::Nic`) today. Dynamic dispatch: every call is a network operation of
/// microseconds; nothing on a node-local path calls it.
///
/// Completion: operations are counted when posted and complete by the next [`Fabric::flush`]
/// (at the target: `FI_DELIVERY_COMPLETE`), except those posted with a
/// [`TrackedContext`], which the completion reader marks.
pub(crate) trait Fabric: Send + Sync {
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
