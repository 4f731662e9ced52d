//! The control plane of a window whose ranks span nodes, as the window layer holds it
//! (`WinCore::net`) and the layers above use it: an interface, since its protocol lives in
//! the network layer above (`net::plane`).

use crate::error::Result;
use crate::plane::{Answer, ControlPlane, CtrlWord};
use crate::transport::network::Remote;

/// The control plane of a window whose ranks span nodes, as the layers that hold and use
/// it see it: its protocol lives in the network layer (`net::plane::NetPlane`), above the
/// window layer, which builds it when it creates a window across nodes. One virtual call
/// per operation, each a network round trip or a CPU atomic on a word of this node.
pub(crate) trait NetControl: ControlPlane + Send + Sync + std::fmt::Debug {
    /// Rank `rank`'s endpoint in the address vector.
    fn peer(&self, rank: usize) -> u64;

    /// Rank `rank`'s control area (its address, remote base and key).
    fn area(&self, rank: usize) -> Remote;

    /// Reads `dst.len()` bytes at `offset` of rank `rank`'s control area (a bulk read of
    /// words it publishes, like its dynamic-region table), waited for.
    fn read_area(&self, rank: usize, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// True when the words this node holds are changed with CPU atomics, which mix with
    /// the network's atomics on them: an operation on a word of this node is answered at
    /// once.
    fn mixes_with_cpu(&self) -> bool;

    /// Releases a lock with `value` added to `word` (a lock word) in a message nobody
    /// answers, where the wire reaches its holder and nothing of ours sent to it waits for
    /// an answer — the release then applies after everything of ours the holder applied,
    /// and the caller has nothing of its own left to wait for there. False, with nothing
    /// sent, otherwise.
    fn release_unanswered(&self, word: CtrlWord, value: u64) -> bool;

    /// True when the lock words of rank `rank` take whole epochs in one message
    /// ([`NetControl::ship_epoch`]).
    fn ships_epochs(&self, rank: usize) -> bool;

    /// A whole exclusive lock epoch on `word` (a lock word) in one message: a
    /// compare-and-swap from `expected` to `new` answered with the previous value; when it
    /// took the lock (or with `held`), the target applies the updates of `payload` and
    /// releases the lock before it answers. `None` where the wire does not reach the
    /// holder ([`NetControl::ships_epochs`]): nothing was sent.
    fn ship_epoch(
        &self,
        word: CtrlWord,
        expected: u64,
        new: u64,
        held: bool,
        payload: &[u8],
    ) -> Option<Answer>;

    /// Updates under lock stripes `stripes` of `target` (a rank the wire reaches,
    /// [`NetControl::ships_epochs`]) in one message, waited for: `Ok(true)` when applied
    /// (the fetching requests' previous values in `result`), `Ok(false)` when a stripe was
    /// held and nothing was applied.
    fn striped(
        &self,
        target: usize,
        stripes: &mut dyn Iterator<Item = usize>,
        payload: &[u8],
        result: &mut [u8],
    ) -> Result<bool>;

    /// Waits until every posted operation is complete at its target (a release before a
    /// word a peer reads: the window's flush and unlock use it).
    fn quiet(&self) -> Result<()>;
}
