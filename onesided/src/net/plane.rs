//! The control plane over the network: every control word of a window whose ranks span
//! nodes is a u64 in the control area of the rank that holds it, registered with the
//! network endpoint, and every operation on it is a network atomic — the holder's
//! own included — unless the provider applies atomics with CPU atomics in the target's
//! software (`tcp`, `udp`, `shm`: [`Nic::atomics_mix_with_cpu`]): then the words held on
//! this node ([`Near`]) are changed with CPU atomics, and only words on other nodes cost a
//! network round trip. (NIC atomics are not in general coherent with CPU atomics on the
//! same word, so on those providers a window that spans nodes does not mix the two:
//! MPICH's and Open MPI's rule.)
//!
//! **Where a word is.** Rank `r`'s control area has the window's whole [`ControlLayout`];
//! a word lies at [`ControlLayout::offset_of`] in the area of the rank that holds it: the
//! rank named in the word, and rank 0 for the window-wide lock word (foMPI's "master").
//! Peers name it by that rank's address, the registration's remote base plus the offset,
//! and its key.
//!
//! **Answers.** A fetching atomic (`fetch_add`, `load` as an atomic read, `swap`,
//! `compare_swap`) answers [`Answer::Pending`]: its operand, compare and result words and
//! its completion context live in a slot of registered memory until the plane is polled
//! after the completion queue marked it done. Posted operations (`post_add`,
//! `post_store`) are injected atomics without a result, complete at the target once a
//! later flush of the endpoint returns (`FI_DELIVERY_COMPLETE`). A failed operation fails
//! the poll that asks for it, and every later poll: a plane whose peer is gone is gone.
//!
//! Every provider here progresses manually: a target's atomics are applied when the
//! target's endpoint is read. The plane's polls read its own endpoint; a process that
//! waits elsewhere needs its progress thread (`progress`) to read it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::plane::{Answer, ControlPlane, CtrlWord, LockAt, PendingOp};
use crate::transport::network::{Ack, NetOp, Remote};
use crate::transport::network::{Fabric, Registration, TrackedContext};
use crate::win::control::{BlockSlots, ControlLayout};
use crate::win::net_control::NetControl;
use crate::win::reach::{RankRoute, Remotes};

/// Slots per registered chunk.
const CHUNK: usize = 64;

/// `3 * CHUNK` u64 that the NIC writes while an operation is in flight: held as a raw
/// pointer (no Rust reference to them may exist meanwhile), freed on drop.
struct Words(*mut u64);

impl Words {
    fn new() -> Words {
        Words(Box::into_raw(vec![0u64; 3 * CHUNK].into_boxed_slice()).cast::<u64>())
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        // SAFETY: from Box::into_raw of a boxed slice of 3 * CHUNK u64 (`Words::new`); its
        // chunk's registration is closed and every operation on it completed (the plane
        // waits for them before its chunks go).
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.0, 3 * CHUNK)) });
    }
}

/// Registered memory for `CHUNK` fetching atomics in flight: three u64 each (operand,
/// compare, result) and their completion contexts. Fields drop in order: the registration
/// is closed before its memory is freed.
struct Chunk {
    reg: Registration,
    contexts: Box<[TrackedContext]>,
    /// When each slot's operation was posted (ms since the plane's start), for
    /// [`ANSWER_PATIENCE`].
    posted_ms: Box<[AtomicU64]>,
    words: Words,
}

/// How long an answer may take: an atomic on a live peer's word completes within network
/// round trips (its progress thread serves it whatever the application does), so an
/// operation unanswered this long is one whose peer is gone — an error, never a hang. A
/// peer that ended is told within a second by the job's roster (the endpoint's
/// `ExitVigil`); this bound is for one no roster tells of. It was 5 s, which live peers
/// overran now and then through the provider's atomics on 2 loaded cores (as
/// `POST_PATIENCE` in `transport::ofi`).
const ANSWER_PATIENCE: std::time::Duration = std::time::Duration::from_secs(20);

impl Chunk {
    fn new(nic: &dyn Fabric) -> Result<Chunk> {
        let words = Words::new();
        // SAFETY: the memory is the chunk's own and outlives the registration (field
        // order); only the NIC and the holder of a slot's pending operation touch it.
        let reg = unsafe { nic.register(words.0.cast(), 3 * CHUNK * 8) }?;
        Ok(Chunk {
            reg,
            contexts: (0..CHUNK).map(|_| TrackedContext::default()).collect(),
            posted_ms: (0..CHUNK).map(|_| AtomicU64::new(0)).collect(),
            words,
        })
    }
}

/// Slots of fetching atomics: chunks (never moved or freed while the plane lives) and the
/// free slot numbers.
struct Slots {
    /// Boxed: a slot's registration is used after the lock is released, while another
    /// thread may add a chunk and grow the vector.
    #[allow(clippy::vec_box)]
    chunks: Vec<Box<Chunk>>,
    free: Vec<u64>,
}

/// The words of this node's segment, where CPU atomics may change them (see [`Near`]).
#[derive(Debug)]
pub(crate) struct Near {
    /// This process's mapping of its node's window segment.
    base: *mut u8,
    /// Per rank (`here`): its control block (and, for rank 0, the window-wide lock word)
    /// lies in this node's segment.
    routes: Arc<Vec<RankRoute>>,
}

impl Near {
    /// The words of the ranks `routes` says are on this node, in the segment mapped at
    /// `base`.
    ///
    /// # Safety
    /// `base` must be this process's mapping of its node's segment, laid out as the
    /// plane's layout says, and stay mapped as long as the plane lives.
    pub(crate) unsafe fn new(base: *mut u8, routes: Arc<Vec<RankRoute>>) -> Near {
        Near { base, routes }
    }
}

/// One word of this node's segment, changed as the mapped plane changes words (CPU atomics,
/// `plane::MappedWords`): the near operations of [`NetPlane`] are those of the mapped plane.
struct NearWord<'a>(&'a AtomicU64);

impl crate::plane::MappedWords for NearWord<'_> {
    #[inline(always)]
    fn mapped(&self, _word: CtrlWord) -> &AtomicU64 {
        self.0
    }
}

/// The control plane of a window whose ranks span nodes.
pub(crate) struct NetPlane {
    nic: Arc<dyn Fabric>,
    layout: ControlLayout,
    /// Where each rank's block lies in its node's segment.
    blocks: BlockSlots,
    /// Every rank's address and its control area's remote base and key.
    areas: Remotes,
    /// Where the provider's atomics mix with CPU atomics: the words held on this node,
    /// changed with CPU atomics (a round trip through the network saved per operation).
    near: Option<Near>,
    slots: Mutex<Slots>,
    /// The first failure: every later poll reports it (a peer that ended as such, its
    /// rank; any other as text).
    failure: Mutex<Option<std::result::Result<usize, String>>>,
    /// The clock of the slots' post times.
    started: std::time::Instant,
}

// SAFETY: the chunks' raw words are reached only by the slot's owner (the holder of its
// pending operation) after the completion, or by the NIC; everything else is behind a
// mutex or atomic; Nic is Sync.
unsafe impl Send for NetPlane {}
// SAFETY: as for Send.
unsafe impl Sync for NetPlane {}

impl std::fmt::Debug for NetPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetPlane")
            .field("ranks", &self.areas.len())
            .finish_non_exhaustive()
    }
}

impl NetPlane {
    /// The plane of a window with `layout` whose rank `r`'s control area is `areas[r]`
    /// (its address in `nic`'s address vector, remote base and key).
    pub(crate) fn new(
        nic: Arc<dyn Fabric>,
        layout: ControlLayout,
        blocks: BlockSlots,
        areas: Remotes,
        near: Option<Near>,
    ) -> NetPlane {
        assert_eq!(areas.len(), layout.n, "one control area per rank");
        if let Some(near) = &near {
            assert_eq!(near.routes.len(), layout.n, "one node flag per rank");
        }
        NetPlane {
            nic,
            layout,
            blocks,
            areas,
            near,
            slots: Mutex::new(Slots {
                chunks: Vec::new(),
                free: Vec::new(),
            }),
            failure: Mutex::new(None),
            started: std::time::Instant::now(),
        }
    }

    /// The rank whose segment holds `word`.
    fn holder(word: CtrlWord) -> usize {
        match word {
            CtrlWord::Posts { at, .. }
            | CtrlWord::Completions { at }
            | CtrlWord::Parked { at }
            | CtrlWord::Stripe { at, .. }
            | CtrlWord::HandleReaders { at }
            | CtrlWord::HandleReleases { at }
            | CtrlWord::Agreement { at, .. }
            | CtrlWord::Signal { at, .. }
            | CtrlWord::Lock {
                lock: LockAt::Local(at),
                ..
            } => at,
            CtrlWord::Lock {
                lock: LockAt::Global,
                ..
            } => 0,
            CtrlWord::Notify { .. } => {
                unreachable!("notification counters are the notify tables' words")
            }
        }
    }

    /// `word` as this process maps it, when it lies on this node and CPU atomics may
    /// change it.
    ///
    /// Not once the endpoint has failed: a wait on such a word drives no network
    /// operation of its own that would report it, so the plane fails here, and every
    /// operation then answers with the failure (`poll`).
    #[inline]
    fn near(&self, word: CtrlWord) -> Option<NearWord<'_>> {
        let near = self.near.as_ref()?;
        if !near.routes[Self::holder(word)].here {
            return None;
        }
        if self.nic.has_failed() {
            self.fail(&Error::Network {
                call: "control plane",
                code: 0,
                text: "an operation of this process's network endpoint failed (a peer is \
                       gone or unreachable)"
                    .into(),
            });
            return None;
        }
        let offset = self.layout.offset_of(word, &self.blocks)?;
        // SAFETY: `Near::new`'s contract: the node segment is mapped at `base` with the
        // plane's layout, so an offset of the layout is an aligned u64 of it, shared with
        // the node's processes (and the provider's software) only through atomics.
        Some(NearWord(unsafe {
            &*near.base.add(offset).cast::<AtomicU64>()
        }))
    }

    /// Where `word` is: its holder's area plus its offset.
    fn remote(&self, word: CtrlWord) -> Remote {
        let holder = Self::holder(word);
        let offset = self
            .layout
            .offset_of(word, &self.blocks)
            .expect("every word but a notification counter has an offset");
        let area = self.area(holder);
        Remote {
            peer: area.peer,
            addr: area.addr + offset as u64,
            key: area.key,
        }
    }

    /// Records the first failure.
    fn fail(&self, e: &Error) {
        let mut f = self
            .failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f.get_or_insert_with(|| match e {
            Error::PeerGone { rank } => Ok(*rank),
            e => Err(e.to_string()),
        });
    }

    fn failed(&self) -> Result<()> {
        match &*self
            .failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            None => Ok(()),
            Some(Ok(rank)) => Err(Error::PeerGone { rank: *rank }),
            Some(Err(text)) => Err(Error::Network {
                call: "control plane",
                code: 0,
                text: text.clone(),
            }),
        }
    }

    /// A free slot: its number, words and context (a new chunk when all are taken).
    fn take_slot(&self) -> Result<(u64, *mut u64, *const TrackedContext, *const Registration)> {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slots.free.is_empty() {
            let chunk = Box::new(Chunk::new(&*self.nic)?);
            let first = (slots.chunks.len() * CHUNK) as u64;
            slots.chunks.push(chunk);
            slots.free.extend((first..first + CHUNK as u64).rev());
        }
        let id = slots.free.pop().expect("a chunk was added");
        let (chunk, i) = (&slots.chunks[id as usize / CHUNK], id as usize % CHUNK);
        // SAFETY: slot i's three words lie inside the chunk's 3 * CHUNK.
        let words = unsafe { chunk.words.0.add(3 * i) };
        Ok((id, words, &chunk.contexts[i], &chunk.reg))
    }

    fn slot(&self, id: u64) -> (*mut u64, *const TrackedContext, *const AtomicU64) {
        let slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (chunk, i) = (&slots.chunks[id as usize / CHUNK], id as usize % CHUNK);
        // SAFETY: as in take_slot.
        let words = unsafe { chunk.words.0.add(3 * i) };
        (words, &chunk.contexts[i], &chunk.posted_ms[i])
    }

    /// Milliseconds since the plane started.
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn release_slot(&self, id: u64) {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .free
            .push(id);
    }

    /// Posts a fetching atomic; a post that fails makes the plane fail (the answer is a
    /// pending operation whose poll reports it).
    fn fetch(&self, op: NetOp, word: CtrlWord, operand: u64, compare: u64) -> Answer {
        let at = self.remote(word);
        self.post_in_slot(operand, compare, |words, reg, ctx| {
            // SAFETY: the slot's words and context stay ours until the answer is collected
            // (`post_in_slot`); the registration lives as long as the plane.
            unsafe { self.nic.fetch_word(op, words, reg, at, ctx) }
        })
    }

    /// Takes a free slot, writes `operand` and `compare` to its first two words and clears
    /// the third (the answer's), and posts with `post` (the words, their registration, the
    /// slot's context): the answer to wait for. A post that fails makes the plane fail; so
    /// does a failed plane's answer (its poll reports the failure).
    fn post_in_slot(
        &self,
        operand: u64,
        compare: u64,
        post: impl FnOnce(*mut u64, &Registration, *mut TrackedContext) -> Result<()>,
    ) -> Answer {
        if self.failed().is_err() {
            return Answer::Pending(PendingOp(u64::MAX));
        }
        let posted = self.take_slot().and_then(|(id, words, ctx, reg)| {
            // SAFETY: the slot is ours until its answer is collected: nobody else reads or
            // writes its words; the chunk (and registration) live as long as the plane.
            unsafe {
                words.write(operand);
                words.add(1).write(compare);
                words.add(2).write(0);
                (*ctx).reset();
                // Relaxed: read by the slot's own poller (this thread, or one it handed
                // the answer to through a synchronizing queue).
                let (_, _, posted) = self.slot(id);
                (*posted).store(self.now_ms(), Ordering::Relaxed);
                post(words, &*reg, ctx.cast_mut())
                    .map(|()| id)
                    .inspect_err(|_| self.release_slot(id))
            }
        });
        match posted {
            Ok(id) => Answer::Pending(PendingOp(id)),
            Err(e) => {
                self.fail(&e);
                Answer::Pending(PendingOp(u64::MAX))
            }
        }
    }

    /// Stores (`Write`) or adds (`Sum`) `value` at `word` of another node in a message
    /// nobody answers where the network has one to its holder, else posts the atomic;
    /// `ack` says when the holder acknowledges an addition ([`Ack`]).
    fn post_unanswered(&self, op: NetOp, word: CtrlWord, value: u64, ack: Ack) {
        if self.failed().is_err() {
            return;
        }
        let at = self.remote(word);
        let sent = match op {
            NetOp::Sum => self.nic.add_unanswered(value, at, ack),
            _ => self.nic.store_unanswered(value, at),
        };
        match sent {
            Ok(true) => {}
            Ok(false) => self.post(op, word, value),
            Err(e) => self.fail(&e),
        }
    }

    /// Posts an atomic without a result.
    fn post(&self, op: NetOp, word: CtrlWord, value: u64) {
        // A failed plane posts nothing more (a peer that is gone would refuse each post for
        // the provider's patience again); its polls report the failure.
        if self.failed().is_err() {
            return;
        }
        if let Err(e) = self.nic.post_word(op, value, self.remote(word)) {
            self.fail(&e);
        }
    }
}

impl NetControl for NetPlane {
    fn peer(&self, rank: usize) -> u64 {
        self.area(rank).peer
    }

    #[inline]
    fn area(&self, rank: usize) -> Remote {
        self.areas.get(rank).expect("one control area per rank")
    }

    fn read_area(&self, rank: usize, offset: usize, dst: &mut [u8]) -> Result<()> {
        let area = self.area(rank);
        let at = Remote {
            addr: area.addr + offset as u64,
            ..area
        };
        self.nic.read_waited(dst, at).inspect_err(|e| self.fail(e))
    }

    fn mixes_with_cpu(&self) -> bool {
        self.near.is_some()
    }

    fn release_unanswered(&self, word: CtrlWord, value: u64) -> bool {
        let at = self.remote(word);
        if self.failed().is_err()
            || self.near(word).is_some()
            || !self.nic.ships_epochs_to(at.peer)
            || self.nic.answers_pending_to(at.peer)
        {
            return false;
        }
        // The next lock request to this process often follows at once: its answer should
        // not wait behind the acknowledgement of this release.
        self.post_unanswered(NetOp::Sum, word, value, Ack::AtOnce);
        true
    }

    fn ships_epochs(&self, rank: usize) -> bool {
        self.nic.ships_epochs_to(self.peer(rank))
    }

    fn ship_epoch(
        &self,
        word: CtrlWord,
        expected: u64,
        new: u64,
        held: bool,
        payload: &[u8],
    ) -> Option<Answer> {
        let at = self.remote(word);
        if !self.nic.ships_epochs_to(at.peer) {
            return None;
        }
        Some(self.post_in_slot(new, expected, |words, _, ctx| {
            // SAFETY: as in `fetch`.
            unsafe { self.nic.ship_epoch(words, at, held, payload, ctx) }
        }))
    }

    fn striped(
        &self,
        target: usize,
        stripes: &mut dyn Iterator<Item = usize>,
        payload: &[u8],
        result: &mut [u8],
    ) -> Result<bool> {
        self.failed()?;
        let words: Vec<Remote> = stripes
            .map(|index| self.remote(CtrlWord::Stripe { at: target, index }))
            .collect();
        self.nic
            .striped_waited(&words, payload, result)
            .inspect_err(|e| self.fail(e))
    }

    fn quiet(&self) -> Result<()> {
        self.nic.flush(&mut || Ok(())).inspect_err(|e| self.fail(e))
    }
}

impl ControlPlane for NetPlane {
    fn abandon(&self, op: PendingOp) {
        // Its slot stays taken (the NIC may still write it); flushes stop counting it.
        if op.0 != u64::MAX {
            self.nic.abandon(true);
        }
    }

    // A word on this node is changed as the mapped plane does (the CPU atomic and `order`
    // the protocol asks for); peers' network atomics on it are CPU atomics of the provider's
    // software in the holder's process (`Nic::atomics_mix_with_cpu`).
    fn fetch_add(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer {
        match self.near(word) {
            Some(w) => w.fetch_add(word, value, order),
            None => self.fetch(NetOp::Sum, word, value, 0),
        }
    }

    fn load(&self, word: CtrlWord, order: Ordering) -> Answer {
        match self.near(word) {
            Some(w) => w.load(word, order),
            None => self.fetch(NetOp::Read, word, 0, 0),
        }
    }

    fn swap(&self, word: CtrlWord, value: u64, order: Ordering) -> Answer {
        match self.near(word) {
            Some(w) => w.swap(word, value, order),
            None => self.fetch(NetOp::Write, word, value, 0),
        }
    }

    fn compare_swap(&self, word: CtrlWord, expected: u64, new: u64, order: Ordering) -> Answer {
        match self.near(word) {
            Some(w) => w.compare_swap(word, expected, new, order),
            None => self.fetch(NetOp::CompareSwap, word, new, expected),
        }
    }

    fn post_add(&self, word: CtrlWord, value: u64, order: Ordering) {
        match self.near(word) {
            Some(w) => w.post_add(word, value, order),
            None => self.post(NetOp::Sum, word, value),
        }
    }

    fn post_store(&self, word: CtrlWord, value: u64, order: Ordering) {
        match self.near(word) {
            Some(w) => w.post_store(word, value, order),
            None => self.post(NetOp::Write, word, value),
        }
    }

    /// Over the wire, a delivery of no bytes and the word (`Fabric::store_unanswered`):
    /// the fence's barrier then costs one message per round and no answer, and the next
    /// fence's completion (`quiet`) does not wait a round trip for the last one's signals.
    fn post_store_unawaited(&self, word: CtrlWord, value: u64, order: Ordering) {
        match self.near(word) {
            Some(w) => w.post_store(word, value, order),
            None => self.post_unanswered(NetOp::Write, word, value, Ack::WithReply),
        }
    }

    /// Over the wire, an unanswered delivery that adds (`Fabric::add_unanswered`).
    fn post_add_unawaited(&self, word: CtrlWord, value: u64, order: Ordering) {
        match self.near(word) {
            Some(w) => w.post_add(word, value, order),
            None => self.post_unanswered(NetOp::Sum, word, value, Ack::WithReply),
        }
    }

    fn order_posted(&self) -> Result<()> {
        self.quiet()
    }

    fn poll(&self, op: &PendingOp) -> Result<Option<u64>> {
        self.failed()?;
        let (words, ctx, posted) = self.slot(op.0);
        // SAFETY: the slot's context and post time live as long as the plane.
        let (ctx, posted) = unsafe { (&*ctx, &*posted) };
        if ctx.completed().is_none() {
            if let Err(e) = self.nic.progress() {
                self.fail(&e);
            }
        }
        match ctx.completed() {
            None => {
                self.failed()?;
                // Relaxed: see `fetch`.
                let waited = self.now_ms().saturating_sub(posted.load(Ordering::Relaxed));
                if waited > ANSWER_PATIENCE.as_millis() as u64 {
                    // The slot stays taken: the NIC may still write it.
                    self.nic.abandon(true);
                    let e = self.nic.blame(Error::Network {
                        call: "control-plane atomic",
                        code: 0,
                        text: format!(
                            "no answer for {} s: the peer is gone or unreachable",
                            ANSWER_PATIENCE.as_secs()
                        ),
                    });
                    self.fail(&e);
                    return Err(e);
                }
                Ok(None)
            }
            Some(true) => {
                let e = self.nic.blame(Error::Network {
                    call: "control-plane atomic",
                    code: 0,
                    text: "the operation completed in error".into(),
                });
                self.fail(&e);
                Err(e)
            }
            Some(false) => {
                // SAFETY: the operation completed (Acquire in `completed`): the NIC wrote
                // the result word and no longer touches the slot.
                let v = unsafe { words.add(2).read() };
                self.release_slot(op.0);
                Ok(Some(v))
            }
        }
    }
}

impl Drop for NetPlane {
    /// Waits for every fetching atomic still in flight (a pending answer nobody collected)
    /// before the slots' memory goes; gives up when the endpoint fails.
    fn drop(&mut self) {
        let slots = self
            .slots
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let free: std::collections::HashSet<u64> = slots.free.iter().copied().collect();
        let mut backoff = crate::backoff::Backoff::new();
        // A peer that is gone may never answer: after this long the memory is leaked
        // rather than freed under a NIC that might still write it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for (c, chunk) in slots.chunks.iter().enumerate() {
            for (i, ctx) in chunk.contexts.iter().enumerate() {
                if free.contains(&((c * CHUNK + i) as u64)) {
                    continue;
                }
                while ctx.completed().is_none() {
                    if self.nic.progress().is_err() || std::time::Instant::now() > deadline {
                        std::mem::forget(std::mem::take(&mut slots.chunks));
                        return;
                    }
                    backoff.snooze();
                }
            }
        }
    }
}

#[cfg(all(test, feature = "net"))]
mod tests {
    //! Two ranks of one process, each with its own endpoint and registered control area,
    //! run the lock and barrier protocols over the network plane on every network of the
    //! build (the socket network; libfabric's `tcp;ofi_rxm`): the same state machines as
    //! on shared memory, every word a network atomic (the holder's own included).

    use super::*;
    use crate::backoff::Backoff;
    use crate::plane::Awaited;
    use crate::shm::barrier::{Barrier, BarrierLayout};
    use crate::sync::lock::{poll_acquire, release, Acquisition, Mode};
    use crate::testing::Watchdog;
    use crate::transport::network::{test_endpoint, test_networks};
    use std::sync::atomic::{AtomicBool, AtomicU64};

    /// A rank's control area: raw memory the NIC writes (no Rust reference to it while
    /// registered).
    struct Area {
        words: *mut u64,
        len: usize,
    }

    impl Area {
        fn new(bytes: usize) -> Area {
            let len = bytes.div_ceil(8);
            let words = Box::into_raw(vec![0u64; len].into_boxed_slice()).cast::<u64>();
            Area { words, len }
        }

        /// The word at byte offset `offset`, read once every operation on it completed.
        fn read(&self, offset: usize) -> u64 {
            assert!(offset / 8 < self.len);
            // SAFETY: inside the area; read volatile, the NIC may have written it.
            unsafe { self.words.add(offset / 8).read_volatile() }
        }
    }

    impl Drop for Area {
        fn drop(&mut self) {
            // SAFETY: from Box::into_raw in `new`; its registration was dropped first.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.words, self.len))
            });
        }
    }

    // SAFETY: the area is only reached through raw pointers (the NIC, volatile reads).
    unsafe impl Send for Area {}
    // SAFETY: as for Send.
    unsafe impl Sync for Area {}

    /// `n` ranks on the network `which`: their planes, areas (kept alive) and
    /// registrations, with one progress thread per endpoint running `body(planes)`.
    fn with_ranks(which: &str, n: usize, body: impl Fn(usize, &NetPlane) + Sync) -> Vec<u64> {
        let layout = ControlLayout::new(n, 0, 0);
        let endpoints: Vec<_> = (0..n)
            .map(|_| test_endpoint(which).expect("open"))
            .collect();
        let nics: Vec<Arc<dyn Fabric>> = endpoints.iter().map(|e| Arc::clone(&e.fabric)).collect();
        let areas: Vec<Area> = (0..n).map(|_| Area::new(layout.data_off)).collect();
        // SAFETY: each area outlives its registration (dropped below, before the areas)
        // and is only reached through raw pointers meanwhile.
        let regs: Vec<crate::transport::network::Registration> = (0..n)
            .map(|r| unsafe { nics[r].register(areas[r].words.cast(), areas[r].len * 8) }.unwrap())
            .collect();
        let names: Vec<Vec<u8>> = nics.iter().map(|nic| nic.name().unwrap()).collect();
        let planes: Vec<NetPlane> = (0..n)
            .map(|r| {
                let remotes = (0..n)
                    .map(|q| Remote {
                        peer: (endpoints[r].insert)(&names[q]).unwrap(),
                        addr: regs[q].remote_base,
                        key: regs[q].key,
                    })
                    .collect();
                NetPlane::new(
                    Arc::clone(&nics[r]),
                    layout,
                    BlockSlots::default(),
                    Remotes::Table(remotes),
                    None,
                )
            })
            .collect();
        let stop = AtomicBool::new(false);
        /// Stops the progress threads however the scope ends (a failed rank included).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        std::thread::scope(|s| {
            for nic in &nics {
                let stop = &stop;
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        nic.progress().unwrap();
                        std::thread::yield_now();
                    }
                });
            }
            let _stop = Stop(&stop);
            let ranks: Vec<_> = planes
                .iter()
                .enumerate()
                .map(|(r, plane)| {
                    let body = &body;
                    s.spawn(move || {
                        body(r, plane);
                        plane.quiet().unwrap();
                    })
                })
                .collect();
            for r in ranks {
                r.join().unwrap();
            }
        });
        drop(planes);
        // Every word of the control areas, by rank, as the NIC left them.
        let words = (0..n)
            .flat_map(|r| (0..layout.data_off / 8).map(move |w| (r, w)))
            .map(|(r, w)| areas[r].read(w * 8))
            .collect();
        drop(regs);
        drop(nics);
        drop(endpoints);
        words
    }

    fn acquire(plane: &NetPlane, lock: LockAt, mode: Mode) {
        let mut acq = Acquisition::new();
        let mut backoff = Backoff::new();
        while !poll_acquire(plane, lock, mode, &mut acq).unwrap() {
            backoff.snooze();
        }
    }

    /// Readers and writers of rank 1's local lock, exclusive lockers and lock_all holders
    /// of the global word (at rank 0), from both ranks: exclusion holds, and the words end
    /// at rest in the holders' memory.
    #[test]
    fn locks_over_the_network_plane() {
        let _watchdog = Watchdog::new("locks_over_the_network_plane", 60);
        for which in test_networks() {
            locks_over(which);
        }
    }

    fn locks_over(which: &str) {
        let inside_local = AtomicU64::new(0);
        let inside_global = AtomicU64::new(0);
        const WRITER_IN: u64 = 1 << 32;
        let words = with_ranks(which, 2, |r, plane| {
            for k in 0..60u64 {
                let (lock, mode, inside, one) = match (k + r as u64) % 4 {
                    0 => (LockAt::Local(1), Mode::Writer, &inside_local, WRITER_IN),
                    1 => (LockAt::Local(1), Mode::Reader, &inside_local, 1),
                    2 => (LockAt::Global, Mode::EXCLUSIVE, &inside_global, 1),
                    _ => (LockAt::Global, Mode::LOCK_ALL, &inside_global, WRITER_IN),
                };
                acquire(plane, lock, mode);
                let before = inside.fetch_add(one, Ordering::SeqCst);
                match mode {
                    Mode::Writer => assert_eq!(before, 0, "a writer entered a held lock"),
                    Mode::Reader => assert_eq!(before / WRITER_IN, 0, "a reader met a writer"),
                    m if m == Mode::EXCLUSIVE => {
                        assert_eq!(before / WRITER_IN, 0, "exclusive met lock_all")
                    }
                    _ => assert_eq!(before % WRITER_IN, 0, "lock_all met exclusive"),
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
                inside.fetch_sub(one, Ordering::SeqCst);
                release(plane, lock, mode);
            }
        });
        let layout = ControlLayout::new(2, 0, 0);
        let at = |rank: usize, word| {
            words[rank * layout.data_off / 8
                + layout.offset_of(word, &BlockSlots::default()).unwrap() / 8]
        };
        for (rank, lock) in [(1, LockAt::Local(1)), (0, LockAt::Global)] {
            let word = |part| CtrlWord::Lock { lock, part };
            use crate::plane::LockPart;
            assert_eq!(at(rank, word(LockPart::Word)), 0, "{lock:?} at rest");
            assert_eq!(
                at(rank, word(LockPart::Next)),
                at(rank, word(LockPart::Serving)),
                "{lock:?} on {which}: every ticket served"
            );
        }
    }

    /// Writers of rank 1's local lock from both ranks, releasing without answers where the
    /// plane offers it (`release_unanswered`, an unlock's path when nothing of its epoch
    /// waits for an answer): exclusion holds, a lock that follows a release of its own
    /// process finds it applied, and the word ends at rest — on every network, those whose
    /// wire takes the release (the test checks it did) and those that refuse it (the
    /// release then waits for its answer, as before).
    #[test]
    fn releases_without_answers_keep_exclusion() {
        let _watchdog = Watchdog::new("releases_without_answers_keep_exclusion", 120);
        for which in crate::transport::network::test_atomic_networks() {
            releases_without_answers(which);
        }
    }

    fn releases_without_answers(which: &str) {
        let inside = AtomicU64::new(0);
        let unanswered = AtomicU64::new(0);
        let lock = LockAt::Local(1);
        let word = CtrlWord::Lock {
            lock,
            part: crate::plane::LockPart::Word,
        };
        let wire = AtomicBool::new(false);
        let words = with_ranks(which, 2, |_, plane| {
            if plane.nic.ships_epochs_to(plane.remote(word).peer) {
                wire.store(true, Ordering::Relaxed);
            }
            for _ in 0..40 {
                acquire(plane, lock, Mode::Writer);
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "{which}: two writers"
                );
                std::thread::sleep(std::time::Duration::from_micros(20));
                inside.fetch_sub(1, Ordering::SeqCst);
                if plane.release_unanswered(word, Mode::Writer.one().wrapping_neg()) {
                    unanswered.fetch_add(1, Ordering::Relaxed);
                } else {
                    Awaited::from(plane.fetch_add(
                        word,
                        Mode::Writer.one().wrapping_neg(),
                        Ordering::Release,
                    ))
                    .wait(plane)
                    .unwrap();
                }
            }
            // An answered read behind the last release: on the wire it applied before.
            Awaited::from(plane.load(word, Ordering::Acquire))
                .wait(plane)
                .unwrap();
        });
        assert_eq!(
            unanswered.load(Ordering::Relaxed) > 0,
            wire.load(Ordering::Relaxed),
            "{which}: releases went unanswered only where the wire reaches the holder"
        );
        let layout = ControlLayout::new(2, 0, 0);
        let at = layout.data_off / 8 + layout.offset_of(word, &BlockSlots::default()).unwrap() / 8;
        assert_eq!(words[at], 0, "{which}: rank 1's lock word at rest");
    }

    /// Thirty dissemination barriers among three ranks over the network plane, two of
    /// every three with unawaited signals (a fence's) and nothing ordering them before the
    /// next barrier's: nobody leaves one before everyone entered it — on every network,
    /// those that carry unawaited signals as unanswered deliveries (the wire) and those
    /// that post them as atomics (the provider's).
    #[test]
    fn barriers_over_the_network_plane() {
        let _watchdog = Watchdog::new("barriers_over_the_network_plane", 120);
        for which in crate::transport::network::test_atomic_networks() {
            barriers_over(which);
        }
    }

    fn barriers_over(which: &str) {
        const N: usize = 3;
        let entered: Vec<AtomicU64> = (0..N).map(|_| AtomicU64::new(0)).collect();
        with_ranks(which, N, |r, plane| {
            let layout = BarrierLayout::new(N);
            // The handle's own memory is unused: every signal goes through the plane.
            let mem: Vec<AtomicU64> = (0..layout.bytes() / 8).map(|_| AtomicU64::new(0)).collect();
            // SAFETY: `mem` outlives the handle and is large enough.
            let barrier = unsafe { Barrier::new(mem.as_ptr().cast(), layout, r) };
            let mut backoff = Backoff::new();
            for g in 1..=30u64 {
                entered[r].store(g, Ordering::SeqCst);
                let mut wait = match g % 3 {
                    0 => barrier.begin(g % 5),
                    _ => barrier.begin_unawaited(g % 5),
                };
                while !barrier.poll_on(plane, &mut wait).unwrap() {
                    backoff.snooze();
                }
                assert!(!wait.mismatched());
                for (q, e) in entered.iter().enumerate() {
                    assert!(
                        e.load(Ordering::SeqCst) >= g,
                        "{which}: rank {r} left barrier {g} before rank {q} entered"
                    );
                }
            }
        });
    }
}
