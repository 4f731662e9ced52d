//! Request rings: operations on memory reached by cross-memory attach, carried out by the
//! target itself while it is inside the library.
//!
//! One `process_vm_writev` costs 0.5–2.4 µs depending on the machine, and an accumulate on
//! such memory needs two of them under a lock stripe. A target that waits inside onesided
//! (in a flush, a barrier, a lock: where latency benchmarks and most applications wait) can
//! do the same work with plain loads and stores in a tenth of the time, as MPICH's
//! shared-memory active messages do. Unlike those, an origin never depends on it: a
//! request the target does not pick up within [`PICKUP_WAIT`] is claimed back and done by
//! cross-memory attach, and a target that is not waiting is not asked at all.
//!
//! **Layout.** Every rank of a window with rings owns, in its control block, one *area*: an
//! attention word (how many of its threads wait inside the library right now) and one
//! ring per origin. A ring is three counters on lines of their own — `tail` (slots
//! reserved by the origin's threads), `head` (slots claimed for execution), `served` (slots
//! executed, in order) — and [`SLOTS`] slots of 64 bytes. A request fills 1–[`MAX_SLOTS`]
//! consecutive slots: a 40-byte header in the first (state, kind, address, stripe key,
//! granule) and its payload (put data, get result, accumulate operands and results) after
//! it. A request never wraps around the end; the slots before the end are then filled by a
//! padding request.
//!
//! **Slot states** (`lap << 2 | phase`, lap = position / [`SLOTS`]): free for this lap (0),
//! published (1), done with a result to collect (2). Whoever executes a request without
//! result frees its slots at once (next lap); a request with a result is freed by the thread
//! that waits for it, after copying the result out.
//!
//! **Exactly once, in order.** Requests are claimed by advancing `head` with a
//! compare-and-swap, by the target (serving) or by the origin (taking over); whoever wins a
//! batch waits until `served` reaches the batch's start, executes it, and stores `served =`
//! its end. So every request runs exactly once, in the order it was posted, whichever side
//! runs it — which keeps MPI's accumulate ordering and `mpi_win_order` across both paths.
//! Both sides update accumulate elements under the same lock stripes of the target, so
//! accumulates stay element-wise atomic against ones done by cross-memory attach directly.
//!
//! **Lines per request.** Each line that crosses between the two cores is a serial step of
//! a request (65 ns here, 330 ns in the VM's slow phases), so the common path moves two:
//! the target polls the state word of the slot at its head (header and a small payload
//! share that line), and an origin waiting for a result polls its own slot's state (the
//! result shares that line). `served` is read only when those do not tell: by flushes, and
//! not even then once an origin saw its requests executed (a local bound per target).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::ops::{AccElement, ElemType, Op};
use crate::transport::Route;

/// Slots per ring (a power of two).
pub(crate) const SLOTS: usize = 32;
/// Bytes per slot (one cache line).
const SLOT_BYTES: usize = 64;
/// Header bytes in a request's first slot.
const HEADER_BYTES: usize = 40;
/// Most slots one request fills.
pub(crate) const MAX_SLOTS: usize = SLOTS / 2;
/// Largest payload of one request.
pub(crate) const MAX_PAYLOAD: usize = MAX_SLOTS * SLOT_BYTES - HEADER_BYTES;
/// Spacing of the ring's counters (two lines: the adjacent-line prefetcher pairs lines).
const COUNTER_STRIDE: usize = 128;
/// Bytes of one ring.
const RING_BYTES: usize = 3 * COUNTER_STRIDE + SLOTS * SLOT_BYTES;
/// Bytes of the attention word's line at the start of an area.
const ATTENTION_BYTES: usize = COUNTER_STRIDE;
/// Largest accumulate granule a request carries (32 bits of a header word; the rest holds
/// the origin's CPU).
pub(crate) const MAX_GRANULE: usize = 1 << 31;
/// Windows with more ranks get no rings (n² rings would cost too much memory to create).
pub(crate) const MAX_RANKS: usize = 16;
/// How long an origin waits for the target to pick its requests up before it takes them
/// back. Ten cross-memory-attach calls' worth: long enough for an attentive target on a
/// core of its own, short enough that a target that just left the library costs little.
const PICKUP_WAIT: Duration = Duration::from_micros(50);
/// How long an origin bypasses the ring of a target that left its requests unserved, the
/// first time: a hypervisor or the scheduler parking the target for a moment should cost
/// little (the bypassed operations take system calls, 3–4× a ring's cost).
const SNUB: Duration = Duration::from_micros(100);
/// Each further take-back in a row doubles the bypass, up to 100 µs × 2^5 = 3.2 ms: a target
/// that stays away costs its origins at most a pickup wait per 3.2 ms.
const MAX_SNUB_DOUBLINGS: u32 = 5;

/// Source of [`Rings`] ids.
static NEXT_RINGS_ID: AtomicU64 = AtomicU64::new(1);
/// Records of own requests beyond which a thread drops those of freed windows.
const OWN_POSTS_PRUNE_AT: usize = 64;
/// Ids of the rings of live windows.
static LIVE_RINGS: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

thread_local! {
    /// Where the calling thread's requests end, per rings and target.
    static OWN_POSTS: std::cell::RefCell<Vec<(u64, usize, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Nanoseconds since the first call in this process (never 0 after it).
fn clock_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
}

const PHASE_FREE: u64 = 0;
const PHASE_PUBLISHED: u64 = 1;
const PHASE_DONE: u64 = 2;
/// Executed with an error (the requester reports it).
const PHASE_FAILED: u64 = 3;

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// Fills the slots before the ring's end; does nothing.
    Pad = 1,
    /// Writes the payload to the address.
    Put = 2,
    /// Reads `len` bytes at the address into the payload.
    Get = 3,
    /// Combines the payload into the elements at the address.
    Acc = 4,
    /// Like `Acc`, and returns the previous elements in the payload.
    FetchAcc = 5,
    /// Compare-and-swap of one element: payload = compare, value; returns the previous.
    Cas = 6,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Pad,
            2 => Kind::Put,
            3 => Kind::Get,
            4 => Kind::Acc,
            5 => Kind::FetchAcc,
            6 => Kind::Cas,
            _ => return None,
        })
    }

    /// The requester collects a result (and frees the slots itself).
    fn has_result(self) -> bool {
        matches!(self, Kind::Get | Kind::FetchAcc | Kind::Cas)
    }
}

fn elem_code(ty: ElemType) -> u8 {
    ElemType::ALL
        .iter()
        .position(|&t| t == ty)
        .expect("every element type is listed") as u8
}

fn op_code(op: Op) -> u8 {
    Op::ALL
        .iter()
        .position(|&o| o == op)
        .expect("every op is listed") as u8
}

/// Bytes of the ring area of one rank of a window of `n` ranks.
pub(crate) fn area_bytes(n: usize) -> usize {
    ATTENTION_BYTES + n * RING_BYTES
}

/// The header of a request as posted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    kind: Kind,
    /// Element type (accumulates); ignored otherwise.
    pub elem: ElemType,
    /// Operation (accumulates); ignored otherwise.
    pub op: Op,
    /// Target address (in the target's address space).
    pub addr: usize,
    /// Payload bytes (put data, get length, operands).
    pub len: usize,
    /// Stripe key of the first byte (see `transport::Located::key`).
    pub key: usize,
    /// Bytes per lock stripe granule (accumulates).
    pub granule: usize,
}

impl Request {
    /// A put of `len` bytes (the payload) at `addr`.
    pub(crate) fn put(addr: usize, len: usize) -> Request {
        Request::bytes(Kind::Put, addr, len)
    }

    /// A get of `len` bytes at `addr` (returned in the payload).
    pub(crate) fn get(addr: usize, len: usize) -> Request {
        Request::bytes(Kind::Get, addr, len)
    }

    fn bytes(kind: Kind, addr: usize, len: usize) -> Request {
        Request {
            kind,
            elem: ElemType::U8,
            op: Op::Replace,
            addr,
            len,
            key: 0,
            granule: 0,
        }
    }

    /// An accumulate of `op` on the `len` bytes of `elem` elements at `addr` (stripe key
    /// `key`, lock stripes of `granule` bytes); with `fetching`, it returns the previous
    /// elements in the payload.
    pub(crate) fn accumulate(
        elem: ElemType,
        op: Op,
        (addr, key): (usize, usize),
        len: usize,
        granule: usize,
        fetching: bool,
    ) -> Request {
        Request {
            kind: if fetching { Kind::FetchAcc } else { Kind::Acc },
            elem,
            op,
            addr,
            len,
            key,
            granule,
        }
    }

    /// A compare-and-swap of one `elem` element at `addr` (stripe key `key`, lock stripes
    /// of `granule` bytes): the payload is the compare value and the new one (`len` bytes
    /// in all), and returns the previous element.
    pub(crate) fn compare_swap(
        elem: ElemType,
        (addr, key): (usize, usize),
        len: usize,
        granule: usize,
    ) -> Request {
        Request {
            kind: Kind::Cas,
            elem,
            op: Op::Replace,
            addr,
            len,
            key,
            granule,
        }
    }
}

/// One ring: the words of one (origin, target) pair.
#[derive(Clone, Copy)]
struct Ring {
    base: *mut u8,
}

impl Ring {
    fn counter(&self, i: usize) -> &AtomicU64 {
        // SAFETY: three counters at 128-byte spacing at the start of a live ring (8-aligned:
        // areas are 64-byte aligned); every access is atomic.
        unsafe { &*self.base.add(i * COUNTER_STRIDE).cast::<AtomicU64>() }
    }
    fn tail(&self) -> &AtomicU64 {
        self.counter(0)
    }
    fn head(&self) -> &AtomicU64 {
        self.counter(1)
    }
    fn served(&self) -> &AtomicU64 {
        self.counter(2)
    }
    fn slot(&self, pos: u64) -> *mut u8 {
        let i = (pos as usize) % SLOTS;
        // SAFETY: slot i lies inside the ring.
        unsafe { self.base.add(3 * COUNTER_STRIDE + i * SLOT_BYTES) }
    }
    /// Word `w` of the slot at `pos` (0 = state, 1 = meta, 2 = address, 3 = key, 4 =
    /// granule).
    fn word(&self, pos: u64, w: usize) -> &AtomicU64 {
        // SAFETY: words 0..5 of a 64-byte, 8-aligned slot.
        unsafe { &*self.slot(pos).add(w * 8).cast::<AtomicU64>() }
    }
    fn state(&self, pos: u64) -> &AtomicU64 {
        self.word(pos, 0)
    }
    fn payload(&self, pos: u64) -> *mut u8 {
        // SAFETY: the payload follows the header inside the request's slots (a request
        // never wraps).
        unsafe { self.slot(pos).add(HEADER_BYTES) }
    }
}

fn lap(pos: u64) -> u64 {
    pos / SLOTS as u64
}

fn state_of(pos: u64, phase: u64) -> u64 {
    lap(pos) << 2 | phase
}

/// Slots a request of `len` payload bytes fills.
fn slots_for(len: usize) -> usize {
    (HEADER_BYTES + len).div_ceil(SLOT_BYTES).max(1)
}

/// A request read back from its slots.
struct Posted {
    kind: Kind,
    elem: u8,
    op: u8,
    slots: u64,
    len: usize,
    addr: usize,
    key: usize,
    granule: usize,
    /// The CPU the origin thread ran on when it posted, plus one (0: unknown).
    origin_cpu: u32,
}

fn read_posted(ring: &Ring, pos: u64) -> Option<Posted> {
    // Relaxed: written before the Release store of the published state, which the caller
    // loaded with Acquire.
    let meta = ring.word(pos, 1).load(Ordering::Relaxed);
    let kind = Kind::from_u8(meta as u8)?;
    Some(Posted {
        kind,
        elem: (meta >> 8) as u8,
        op: (meta >> 16) as u8,
        slots: (meta >> 24) as u8 as u64,
        len: (meta >> 32) as usize,
        addr: ring.word(pos, 2).load(Ordering::Relaxed) as usize,
        key: ring.word(pos, 3).load(Ordering::Relaxed) as usize,
        granule: ring.word(pos, 4).load(Ordering::Relaxed) as u32 as usize,
        origin_cpu: (ring.word(pos, 4).load(Ordering::Relaxed) >> 32) as u32,
    })
}

/// How a request's target memory is reached and locked by whoever executes it.
pub(crate) struct Executor<'a> {
    /// `Direct` for the target itself (after checking the address lies in its window), or
    /// `Cma` for an origin taking a request back (address 0: requests carry absolute ones).
    pub route_base: Route,
    /// The target's accumulate lock stripe for a granule number (reduced as the target's
    /// stripes are counted).
    pub stripe: &'a dyn Fn(usize) -> &'a AtomicU64,
    /// How many stripes the target has.
    pub stripe_count: usize,
    /// Bounds every address must fall in (the target's own window memory), for `Direct`.
    pub bounds: Option<(usize, usize)>,
    /// True once the job was aborted (a dead rank may hold a stripe).
    pub aborted: &'a dyn Fn() -> bool,
    /// The rank whose memory the requests update (named by a hang report).
    pub target: usize,
}

impl<'x> Executor<'x> {
    fn run(&self, ring: &Ring, pos: u64, req: &Posted) -> Result<()> {
        if req.kind == Kind::Pad || req.len == 0 {
            return Ok(());
        }
        // Target bytes touched: a compare-and-swap's payload holds two elements.
        let touched = if req.kind == Kind::Cas {
            req.len / 2
        } else {
            req.len
        };
        if let Some((lo, hi)) = self.bounds {
            if req.addr < lo || req.addr.checked_add(touched).is_none_or(|end| end > hi) {
                return Err(Error::InvalidArgument(format!(
                    "ring request for {touched} bytes at {:#x} outside the window",
                    req.addr
                )));
            }
        }
        let route = self.route_base.offset(req.addr);
        // SAFETY: the payload of a request this executor claimed (head CAS) lies inside its
        // slots, and nobody else touches them until it marks them done or free.
        let payload = unsafe { std::slice::from_raw_parts_mut(ring.payload(pos), req.len) };
        match req.kind {
            Kind::Pad => Ok(()),
            Kind::Put => route.write(payload),
            Kind::Get => route.read(payload),
            Kind::Acc | Kind::FetchAcc | Kind::Cas => {
                let ty = *ElemType::ALL
                    .get(req.elem as usize)
                    .ok_or_else(bad_request)?;
                let op = *Op::ALL.get(req.op as usize).ok_or_else(bad_request)?;
                crate::with_elem_type!(ty, E => self.typed::<E>(route, req, op, payload))
            }
        }
    }

    fn lock<S: Iterator<Item = usize> + Clone + 'x>(&self, stripes: S) -> Result<impl Drop + 'x> {
        crate::ops::lock_stripes(stripes.map(self.stripe), self.aborted, self.target)
    }

    fn typed<E: AccElement>(
        &self,
        route: Route,
        req: &Posted,
        op: Op,
        payload: &mut [u8],
    ) -> Result<()> {
        let size = std::mem::size_of::<E>();
        let data: &mut [E] = bytemuck::try_cast_slice_mut(payload).map_err(|_| bad_request())?;
        let granule = req.granule.max(size);
        if req.kind == Kind::Cas {
            let [compare, value] = data else {
                return Err(bad_request());
            };
            let _held = self.lock(std::iter::once(req.key / granule))?;
            let mut current = [E::zeroed()];
            route.read(bytemuck::cast_slice_mut(&mut current))?;
            if bytemuck::bytes_of(&current[0]) == bytemuck::bytes_of(compare) {
                route.write(bytemuck::bytes_of(value))?;
            }
            *compare = current[0];
            return Ok(());
        }
        // At most MAX_PAYLOAD bytes (one chunk, see rma::accumulate): a stack buffer for
        // the current elements, read and written at once under every stripe they need.
        let mut buf = [0u64; MAX_PAYLOAD.div_ceil(8)];
        let mut i = 0;
        while i < data.len() {
            let (j, first, last) = crate::ops::acc_chunk(req.key, i, data.len(), size, granule);
            let here = route.offset(i * size);
            let current: &mut [E] = bytemuck::cast_slice_mut(
                &mut bytemuck::cast_slice_mut::<u64, u8>(&mut buf)[..(j - i) * size],
            );
            let _held = self.lock(crate::ops::stripes_for(first, last, self.stripe_count))?;
            here.read(bytemuck::cast_slice_mut(current))?;
            for (c, d) in current.iter_mut().zip(&mut data[i..j]) {
                let old = *c;
                if op != Op::NoOp {
                    *c = E::combine(op, old, *d);
                }
                if req.kind == Kind::FetchAcc {
                    *d = old;
                }
            }
            if op != Op::NoOp {
                here.write(bytemuck::cast_slice(current))?;
            }
            i = j;
        }
        Ok(())
    }
}

#[cold]
fn bad_request() -> Error {
    Error::InvalidArgument("malformed ring request".into())
}

/// What one claim executed.
struct Claimed {
    /// Slots executed (0: nothing published, or another executor claimed them first).
    slots: u64,
    /// The CPU (plus one; 0: unknown) the origin of the batch's last request posted from.
    origin_cpu: u32,
}

/// Claims and executes the published requests of `ring` from its head on.
fn claim_and_run(ring: &Ring, exec: &Executor<'_>, limit: Option<u64>) -> Result<Claimed> {
    // Acquire: pairs with the Release of the previous claimer's head update.
    let h = ring.head().load(Ordering::Acquire);
    let mut e = h;
    let mut origin_cpu = 0;
    while e < h + SLOTS as u64 && limit.is_none_or(|l| e < l) {
        // Acquire: the header and payload written before the publication are visible.
        if ring.state(e).load(Ordering::Acquire) != state_of(e, PHASE_PUBLISHED) {
            break;
        }
        let Some(req) = read_posted(ring, e) else {
            return Err(bad_request());
        };
        e += req.slots.max(1);
        origin_cpu = req.origin_cpu;
    }
    let nothing = Claimed {
        slots: 0,
        origin_cpu: 0,
    };
    if e == h {
        return Ok(nothing);
    }
    // AcqRel: a claim is a handover of the slots' contents to us.
    if ring
        .head()
        .compare_exchange(h, e, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return Ok(nothing);
    }
    // The batch before ours may still be running on the other side.
    let mut backoff = Backoff::new();
    // Acquire: the previous batch's effects happen before ours.
    while ring.served().load(Ordering::Acquire) != h {
        if (exec.aborted)() {
            return Err(Error::JobAborted);
        }
        backoff.snooze();
    }
    let mut result = Ok(());
    let mut pos = h;
    while pos < e {
        let req = read_posted(ring, pos).ok_or_else(bad_request)?;
        let slots = req.slots.max(1);
        let ran = if result.is_ok() {
            exec.run(ring, pos, &req)
        } else {
            Err(bad_request())
        };
        if req.kind.has_result() {
            let phase = if ran.is_ok() {
                PHASE_DONE
            } else {
                PHASE_FAILED
            };
            // Release: the result in the payload is visible to the waiting requester.
            ring.state(pos)
                .store(state_of(pos, phase), Ordering::Release);
        } else {
            free_slots(ring, pos, slots);
            if result.is_ok() {
                result = ran;
            }
        }
        pos += slots;
    }
    // Release: everything executed is visible to whoever sees the new count.
    ring.served().store(e, Ordering::Release);
    result.map(|()| Claimed {
        slots: e - h,
        origin_cpu,
    })
}

fn free_slots(ring: &Ring, pos: u64, slots: u64) {
    for p in pos..pos + slots {
        // Release: our reads of the slot happen before the next lap's writes to it.
        ring.state(p)
            .store(state_of(p + SLOTS as u64, PHASE_FREE), Ordering::Release);
    }
}

/// The rings of one window as seen by one process: it posts into the areas of its targets
/// and serves the rings in its own area.
pub(crate) struct Rings {
    /// Names these rings in the threads' records of their own requests.
    id: u64,
    /// Start of rank 0's area; rank r's at `base + r * stride`.
    base: *mut u8,
    stride: usize,
    n: usize,
    me: usize,
    /// Per target: until when (ns on [`clock_ns`]) to bypass its ring because it left
    /// requests of ours unserved (it may look attentive and still be descheduled).
    snubbed_until: Vec<AtomicU64>,
    /// Per target: take-backs in a row (reset by a request it executed in time).
    snubs: Vec<AtomicU32>,
    /// Per target: a position up to which this process saw its requests executed — a
    /// local lower bound of the ring's `served`, so checks whether requests are still
    /// outstanding need not pull the line the target writes for every batch.
    executed: Vec<AtomicU64>,
    server: Option<Arc<dyn crate::attention::Served>>,
}

// SAFETY: `base` points into the window's control memory, which outlives the Rings (a
// WinCore field dropped before the memory); every word other threads or processes share
// is reached as an atomic, and slot payloads are handed over by the state protocol.
unsafe impl Send for Rings {}
// SAFETY: as for Send.
unsafe impl Sync for Rings {}

impl std::fmt::Debug for Rings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rings")
            .field("n", &self.n)
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

/// Batches of requests this process served as a target.
static SERVED_BATCHES: AtomicU64 = AtomicU64::new(0);

/// Batches of requests this process has served as a target so far.
pub(crate) fn served_batches() -> u64 {
    // Relaxed: a statistic.
    SERVED_BATCHES.load(Ordering::Relaxed)
}

/// What a process needs to serve the requests to its window memory.
pub(crate) struct ServeSpec {
    /// Start address and length of the window memory requests may touch.
    pub memory: (usize, usize),
    /// The lock stripes of that memory, and how many there are.
    pub stripes: (*const AtomicU64, usize),
    /// True once the job is aborted.
    pub aborted: Box<dyn Fn() -> bool + Send + Sync>,
}

/// What an origin needs to execute requests itself.
pub(crate) struct Fallback<'a> {
    /// The target's process id.
    pub pid: i32,
    /// The target's accumulate lock stripes.
    pub stripe: &'a dyn Fn(usize) -> &'a AtomicU64,
    /// How many stripes the target has.
    pub stripe_count: usize,
    /// True once the job was aborted.
    pub aborted: &'a dyn Fn() -> bool,
}

impl Rings {
    /// The rings of a window of `n` ranks whose areas start at `base` and lie `stride`
    /// bytes apart; this process is rank `me`. `serve` registers this process as the
    /// server of its own area (its window memory is reached by cross-memory attach).
    ///
    /// # Safety
    /// The areas must be zero-initialised (or left by a finished window), 64-byte aligned,
    /// `area_bytes(n)` long and stay mapped, like the window memory and stripes passed in
    /// `serve`, until the returned value is dropped.
    pub(crate) unsafe fn new(
        base: *mut u8,
        stride: usize,
        n: usize,
        me: usize,
        serve: Option<ServeSpec>,
    ) -> Rings {
        let server = serve.map(|spec| {
            let ServeSpec {
                memory: (lo, bytes),
                stripes,
                aborted,
            } = spec;
            let server: Arc<dyn crate::attention::Served> = Arc::new(Server {
                area: base.wrapping_add(me * stride),
                n,
                me,
                bounds: (lo, lo + bytes),
                stripes,
                aborted,
            });
            crate::attention::register(&server);
            server
        });
        // Relaxed: only uniqueness matters.
        let id = NEXT_RINGS_ID.fetch_add(1, Ordering::Relaxed);
        LIVE_RINGS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(id);
        Rings {
            id,
            base,
            stride,
            n,
            me,
            snubbed_until: (0..n).map(|_| AtomicU64::new(0)).collect(),
            snubs: (0..n).map(|_| AtomicU32::new(0)).collect(),
            executed: (0..n).map(|_| AtomicU64::new(0)).collect(),
            server,
        }
    }

    fn area(&self, rank: usize) -> *mut u8 {
        self.base.wrapping_add(rank * self.stride)
    }

    fn ring(&self, target: usize) -> Ring {
        Ring {
            base: self
                .area(target)
                .wrapping_add(ATTENTION_BYTES + self.me * RING_BYTES),
        }
    }

    fn attention(&self, target: usize) -> &AtomicU64 {
        // SAFETY: the first word of a live area.
        unsafe { &*self.area(target).cast::<AtomicU64>() }
    }

    /// True when `target` has a thread waiting inside the library (it will serve soon).
    #[inline]
    pub(crate) fn attentive(&self, target: usize) -> bool {
        // Relaxed: a hint; a stale answer costs one pickup wait or one system call.
        target != self.me
            && self.attention(target).load(Ordering::Relaxed) != 0
            && !self.snubbed(target)
    }

    fn snubbed(&self, target: usize) -> bool {
        // Relaxed: a hint owned by this process.
        let until = self.snubbed_until[target].load(Ordering::Relaxed);
        until != 0 && clock_ns() < until
    }

    /// True while requests of ours to `target` are not executed yet.
    #[inline]
    pub(crate) fn outstanding(&self, target: usize) -> bool {
        let ring = self.ring(target);
        // Relaxed: only decides whether to wait, and the wait loads `served` with Acquire.
        let tail = ring.tail().load(Ordering::Relaxed);
        // Acquire (on `executed`): a caller that skips the wait sees the effects of what
        // was executed, as the wait's Acquire load of `served` would have made visible.
        tail > self.executed[target].load(Ordering::Acquire)
            && tail != ring.served().load(Ordering::Relaxed)
    }

    /// Records that requests to `target` before `upto` are executed, as seen by a thread
    /// whose Acquire load observed it.
    fn saw_executed(&self, target: usize, upto: u64) {
        // Release: passes the executor's effects on to threads that skip waiting after an
        // Acquire load of the bound (see outstanding).
        self.executed[target].fetch_max(upto, Ordering::Release);
    }

    /// Posts a request to `target`: payload `data` (for a get: `len` zero bytes are
    /// reserved). Returns its position. With `fb`, a full ring is made room in by taking
    /// requests back when the target does not serve them.
    pub(crate) fn post(
        &self,
        target: usize,
        req: &Request,
        data: &[u8],
        fb: &Fallback<'_>,
    ) -> Result<u64> {
        debug_assert!(req.len <= MAX_PAYLOAD && target != self.me);
        let ring = self.ring(target);
        let n = slots_for(req.len) as u64;
        // Reserve [t, t + pad + n): pad fills the slots before the end when n would wrap.
        let (t, pad) = loop {
            // Relaxed: the CAS below orders nothing but the reservation itself.
            let t = ring.tail().load(Ordering::Relaxed);
            let room = SLOTS as u64 - t % SLOTS as u64;
            let pad = if room < n { room } else { 0 };
            if ring
                .tail()
                .compare_exchange_weak(t, t + pad + n, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                break (t, pad);
            }
        };
        let pos = t + pad;
        // Wait until the slots' previous lap is over, executing old requests ourselves
        // when the target does not.
        self.wait_free(target, &ring, t, pos + n, fb)?;
        if pad > 0 {
            write_header(
                &ring,
                t,
                &Request {
                    kind: Kind::Pad,
                    elem: ElemType::U8,
                    op: Op::Sum,
                    addr: 0,
                    len: 0,
                    key: 0,
                    granule: 0,
                },
                pad,
            );
            // Release: publishes the header.
            ring.state(t)
                .store(state_of(t, PHASE_PUBLISHED), Ordering::Release);
        }
        write_header(&ring, pos, req, n);
        if req.kind != Kind::Get {
            // SAFETY: the reserved slots are ours until published; the payload fits them.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ring.payload(pos), req.len) };
        }
        // Release: publishes header and payload to the executor.
        ring.state(pos)
            .store(state_of(pos, PHASE_PUBLISHED), Ordering::Release);
        self.note_own(target, pos + n);
        Ok(pos)
    }

    fn wait_free(
        &self,
        target: usize,
        ring: &Ring,
        from: u64,
        to: u64,
        fb: &Fallback<'_>,
    ) -> Result<()> {
        for p in from..to {
            let mut backoff = Backoff::for_service();
            let since = Instant::now();
            // Acquire: the previous lap's readers are done with the slot.
            while ring.state(p).load(Ordering::Acquire) != state_of(p, PHASE_FREE) {
                if since.elapsed() > PICKUP_WAIT {
                    // The target does not serve: take back everything before us.
                    self.take_back(target, ring, from, fb)?;
                }
                if (fb.aborted)() {
                    return Err(Error::JobAborted);
                }
                backoff.snooze();
            }
        }
        Ok(())
    }

    /// Executes ourselves, by cross-memory attach, the requests before position `upto`
    /// nobody claimed yet; waits for the ones claimed by the target.
    fn take_back(&self, target: usize, ring: &Ring, upto: u64, fb: &Fallback<'_>) -> Result<()> {
        let exec = Executor {
            route_base: Route::Cma {
                pid: fb.pid,
                addr: 0,
            },
            stripe: fb.stripe,
            stripe_count: fb.stripe_count,
            bounds: None,
            aborted: fb.aborted,
            target,
        };
        // Acquire: see claim_and_run.
        while ring.head().load(Ordering::Acquire) < upto {
            let taken = claim_and_run(ring, &exec, Some(upto))?.slots;
            if taken > 0 {
                crate::diag::event!(
                    target: "onesided::ring",
                    target_rank = target,
                    requests = taken,
                    "requests taken back from a target that did not serve them (done by \
                     cross-memory attach)"
                );
                // Relaxed: hints owned by this process (see snubbed).
                let doublings = self.snubs[target]
                    .fetch_add(1, Ordering::Relaxed)
                    .min(MAX_SNUB_DOUBLINGS);
                let snub = SNUB.as_nanos() as u64 * (1 << doublings);
                self.snubbed_until[target].store(clock_ns() + snub, Ordering::Relaxed);
            } else {
                // Another thread of ours is still writing the request at the head, or the
                // target claimed it meanwhile.
                std::thread::yield_now();
                if (fb.aborted)() {
                    return Err(Error::JobAborted);
                }
            }
        }
        Ok(())
    }

    /// Waits until the requests to `target` before position `upto` are executed, taking
    /// them back when the target does not pick them up within [`PICKUP_WAIT`].
    pub(crate) fn complete(&self, target: usize, upto: u64, fb: &Fallback<'_>) -> Result<()> {
        let ring = self.ring(target);
        let mut backoff = Backoff::for_service();
        let since = Instant::now();
        let mut took_back = false;
        loop {
            // Acquire: the executed requests' effects are visible (and complete at the
            // target).
            let served = ring.served().load(Ordering::Acquire);
            if served >= upto {
                self.saw_executed(target, served);
                break;
            }
            if (fb.aborted)() {
                return Err(Error::JobAborted);
            }
            if since.elapsed() > PICKUP_WAIT {
                self.take_back(target, &ring, upto, fb)?;
                took_back = true;
            }
            backoff.snooze();
        }
        if !took_back {
            self.served_in_time(target);
        }
        Ok(())
    }

    /// `target` served our requests in time: its next absence is a first one again.
    fn served_in_time(&self, target: usize) {
        // Relaxed: a hint owned by this process; loaded first so the common case writes
        // nothing.
        if self.snubs[target].load(Ordering::Relaxed) != 0 {
            self.snubs[target].store(0, Ordering::Relaxed);
        }
    }

    /// Waits until the request at `pos` (`n` slots, with a result) is executed. Its own
    /// state word says so, on the line that also holds the result: one line comes back
    /// from the target instead of two (`served`, then the slot). A request the target does
    /// not pick up in time is taken back as in [`Rings::complete`].
    fn await_result(
        &self,
        target: usize,
        ring: &Ring,
        pos: u64,
        n: u64,
        fb: &Fallback<'_>,
    ) -> Result<()> {
        let mut backoff = Backoff::for_service();
        let since = Instant::now();
        loop {
            // Acquire: the executor's effects (ours and, executed in order before it, every
            // earlier request's) happen before its done state.
            let state = ring.state(pos).load(Ordering::Acquire);
            if state == state_of(pos, PHASE_DONE) || state == state_of(pos, PHASE_FAILED) {
                self.saw_executed(target, pos + n);
                self.served_in_time(target);
                return Ok(());
            }
            if (fb.aborted)() {
                return Err(Error::JobAborted);
            }
            if since.elapsed() > PICKUP_WAIT {
                return self.complete(target, pos + n, fb);
            }
            backoff.snooze();
        }
    }

    /// Everything posted to `target` so far is executed when this returns.
    pub(crate) fn complete_all_to(&self, target: usize, fb: &Fallback<'_>) -> Result<()> {
        // Relaxed: our own threads' reservations; a request published after this load is
        // not ours to wait for.
        let upto = self.ring(target).tail().load(Ordering::Relaxed);
        self.complete(target, upto, fb)
    }

    /// Every request posted so far to any target is executed when this returns, provided
    /// `complete(target)` completes everything posted to `target` (see
    /// [`Rings::complete_all_to`]); it is called for every target with requests in its
    /// ring.
    pub(crate) fn complete_everything(&self, mut complete: impl FnMut(usize)) {
        for target in (0..self.n).filter(|&t| t != self.me) {
            if self.outstanding(target) {
                complete(target);
            }
        }
        // Everything of ours is complete: our records of these rings are done with.
        OWN_POSTS.with(|own| own.borrow_mut().retain(|e| e.0 != self.id));
    }

    /// Records that the calling thread's requests to `target` end at `end` (for
    /// [`Rings::complete_own`]).
    fn note_own(&self, target: usize, end: u64) {
        OWN_POSTS.with(|own| {
            let mut own = own.borrow_mut();
            if let Some(e) = own.iter_mut().find(|e| e.0 == self.id && e.1 == target) {
                e.2 = e.2.max(end);
                return;
            }
            if own.len() >= OWN_POSTS_PRUNE_AT {
                // Records of freed windows go (those of live ones must stay: a thread-scope
                // flush relies on them).
                let live = LIVE_RINGS.lock().unwrap_or_else(PoisonError::into_inner);
                own.retain(|e| live.contains(&e.0));
            }
            own.push((self.id, target, end));
        });
    }

    /// Waits until every request the calling thread posted to `target` is executed, and
    /// not for the other threads' later ones (a thread-scope flush, seed 000 §2.1). The
    /// ring runs in order, so other threads' requests from before ours run first.
    pub(crate) fn complete_own(&self, target: usize, fb: &Fallback<'_>) -> Result<()> {
        let end = OWN_POSTS.with(|own| {
            let mut own = own.borrow_mut();
            let i = own.iter().position(|e| e.0 == self.id && e.1 == target)?;
            Some(own.remove(i).2)
        });
        match end {
            Some(end) => self.complete(target, end, fb),
            None => Ok(()),
        }
    }

    /// True while requests the calling thread posted to `target` may not be executed yet.
    #[inline]
    pub(crate) fn own_outstanding(&self, target: usize) -> bool {
        let Some(end) = OWN_POSTS.with(|own| {
            own.borrow()
                .iter()
                .find(|e| e.0 == self.id && e.1 == target)
                .map(|e| e.2)
        }) else {
            return false;
        };
        // Acquire: as in outstanding. Relaxed (served): only decides whether to queue behind
        // them; the wait loads with Acquire.
        end > self.executed[target].load(Ordering::Acquire)
            && self.ring(target).served().load(Ordering::Relaxed) < end
    }

    /// The targets the calling thread has requests of record to.
    pub(crate) fn own_targets(&self) -> Vec<usize> {
        OWN_POSTS.with(|own| {
            own.borrow()
                .iter()
                .filter(|e| e.0 == self.id)
                .map(|e| e.1)
                .collect()
        })
    }

    /// Posts a request with a result and waits for it: the result (`out.len()` bytes of the
    /// payload) is copied into `out`.
    pub(crate) fn call(
        &self,
        target: usize,
        req: &Request,
        data: &[u8],
        out: &mut [u8],
        fb: &Fallback<'_>,
    ) -> Result<()> {
        debug_assert!(req.kind.has_result() && out.len() <= req.len);
        let pos = self.post(target, req, data, fb)?;
        let ring = self.ring(target);
        let n = slots_for(req.len) as u64;
        let done = self.await_result(target, &ring, pos, n, fb);
        // Acquire: the executor's result stores happen before its done state.
        let state = ring.state(pos).load(Ordering::Acquire);
        let ok = state == state_of(pos, PHASE_DONE);
        if ok {
            // SAFETY: our request is done and its slots are ours until we free them.
            unsafe {
                std::ptr::copy_nonoverlapping(ring.payload(pos), out.as_mut_ptr(), out.len())
            };
        }
        if done.is_ok() || ok || state == state_of(pos, PHASE_FAILED) {
            free_slots(&ring, pos, n);
        }
        done?;
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidArgument(
                "a request the target executed for us failed (address outside its window)".into(),
            ))
        }
    }
}

fn write_header(ring: &Ring, pos: u64, req: &Request, slots: u64) {
    let meta = req.kind as u64
        | (elem_code(req.elem) as u64) << 8
        | (op_code(req.op) as u64) << 16
        | slots << 24
        | (req.len as u64) << 32;
    // Relaxed: published by the Release store of the state.
    ring.word(pos, 1).store(meta, Ordering::Relaxed);
    ring.word(pos, 2).store(req.addr as u64, Ordering::Relaxed);
    ring.word(pos, 3).store(req.key as u64, Ordering::Relaxed);
    // The origin's CPU: a target that serves from the same one yields right away.
    debug_assert!(req.granule <= MAX_GRANULE);
    let cpu = rustix::thread::sched_getcpu() as u64 + 1;
    ring.word(pos, 4)
        .store(req.granule as u64 | cpu << 32, Ordering::Relaxed);
}

impl Drop for Rings {
    fn drop(&mut self) {
        LIVE_RINGS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|&id| id != self.id);
        if let Some(server) = self.server.take() {
            crate::attention::unregister(&server);
        }
    }
}

/// This process's side of one window's rings: the area it serves.
struct Server {
    area: *mut u8,
    n: usize,
    me: usize,
    /// The window memory requests may touch.
    bounds: (usize, usize),
    /// The lock stripes of this process's window memory, and how many there are.
    stripes: (*const AtomicU64, usize),
    /// True once the job is aborted (an executor then stops waiting).
    aborted: Box<dyn Fn() -> bool + Send + Sync>,
}

// SAFETY: the pointers point into the window's control memory and the process's window
// memory, which stay mapped until the server is unregistered (Rings::drop), which waits for
// every serve in progress (the registry's lock).
unsafe impl Send for Server {}
// SAFETY: as for Send.
unsafe impl Sync for Server {}

impl crate::attention::Served for Server {
    fn attention(&self) -> &AtomicU64 {
        // SAFETY: the first word of our live area.
        unsafe { &*self.area.cast::<AtomicU64>() }
    }

    fn serve(&self) -> bool {
        let mut served = false;
        let mut origin_shares_our_cpu = None;
        let stripe = |i: usize| -> &AtomicU64 {
            // SAFETY: `stripe_count` words of our control block (i is reduced modulo it).
            unsafe { &*self.stripes.0.add(i % self.stripes.1) }
        };
        let aborted = || (self.aborted)();
        let exec = Executor {
            route_base: Route::Direct(std::ptr::null_mut()),
            stripe: &stripe,
            stripe_count: self.stripes.1,
            bounds: Some(self.bounds),
            aborted: &aborted,
            target: self.me,
        };
        for origin in (0..self.n).filter(|&o| o != self.me) {
            let ring = Ring {
                base: self
                    .area
                    .wrapping_add(ATTENTION_BYTES + origin * RING_BYTES),
            };
            // The state of the slot at the head, not the origin's tail: the line that says a
            // request is there also holds it (one line to fetch per request, not two), and
            // the tail stays on the origin's core for its next reservation. Relaxed: a
            // hint; claim_and_run checks properly.
            let head = ring.head().load(Ordering::Relaxed);
            if ring.state(head).load(Ordering::Relaxed) == state_of(head, PHASE_PUBLISHED) {
                // An error (a request outside our window) is the origin's: it finds its
                // request executed without effect. Nothing to report here.
                if let Ok(claimed) = claim_and_run(&ring, &exec, None) {
                    if claimed.slots > 0 {
                        // Relaxed: a statistic.
                        SERVED_BATCHES.fetch_add(1, Ordering::Relaxed);
                        served = true;
                        let cpu = rustix::thread::sched_getcpu();
                        if claimed.origin_cpu == cpu as u32 + 1 {
                            origin_shares_our_cpu = Some(cpu);
                        }
                    }
                }
            }
        }
        if let Some(cpu) = origin_shares_our_cpu {
            // The origin waits for its request on our CPU: it runs only once we give the
            // CPU up, and our wait would poll on for a while first (serving_pause).
            crate::backoff::make_way_on_this_cpu(cpu);
        }
        served
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::Served;

    /// Two ranks' ring areas in this process's memory: rank 0 the origin, rank 1 the
    /// target, whose window memory is `memory` (reached by the origin with cross-memory
    /// attach to itself, by the server directly).
    struct Pair {
        _areas: Vec<u64>,
        origin: Rings,
        server: Arc<Server>,
        memory: Vec<u64>,
        stripes: Vec<AtomicU64>,
    }

    impl Pair {
        fn new(words: usize) -> Box<Pair> {
            let stride = area_bytes(2).next_multiple_of(64);
            // u64s, 64-byte aligned by over-allocating and rounding the start up.
            let mut areas = vec![0u64; (2 * stride + 64) / 8];
            let base = (areas.as_mut_ptr() as usize).next_multiple_of(64) as *mut u8;
            // Room behind the window: a request past its end must not hit other heap data
            // whichever side runs it.
            let mut memory = vec![0u64; words + 8];
            let stripes: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
            let server = Arc::new(Server {
                area: base.wrapping_add(stride),
                n: 2,
                me: 1,
                bounds: (
                    memory.as_mut_ptr() as usize,
                    memory.as_ptr() as usize + words * 8,
                ),
                stripes: (stripes.as_ptr(), stripes.len()),
                aborted: Box::new(|| false),
            });
            // SAFETY: zeroed, aligned areas that the Pair keeps alive with the Rings.
            let origin = unsafe { Rings::new(base, stride, 2, 0, None) };
            Box::new(Pair {
                _areas: areas,
                origin,
                server,
                memory,
                stripes,
            })
        }

        fn addr(&self, i: usize) -> usize {
            self.memory.as_ptr() as usize + i * 8
        }

        fn with_fb<R>(&self, f: impl FnOnce(&Fallback<'_>) -> R) -> R {
            let stripe = |i: usize| -> &AtomicU64 { &self.stripes[i % self.stripes.len()] };
            let aborted = || false;
            f(&Fallback {
                pid: std::process::id() as i32,
                stripe: &stripe,
                stripe_count: self.stripes.len(),
                aborted: &aborted,
            })
        }

        fn acc(&self, at: usize, data: &[u64], op: Op, kind: Kind) -> Request {
            Request {
                kind,
                elem: ElemType::U64,
                op,
                addr: self.addr(at),
                len: data.len() * 8,
                key: at * 8,
                granule: 64,
            }
        }
    }

    /// Serves until told to stop, pausing now and then longer than the pickup wait (so the
    /// origin takes requests back meanwhile).
    fn serve_until(server: &Server, stop: &std::sync::atomic::AtomicBool) {
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            server.serve();
            i += 1;
            if i % 1000 == 0 {
                std::thread::sleep(PICKUP_WAIT * 3);
            } else {
                std::hint::spin_loop();
            }
        }
    }

    #[test]
    fn every_request_runs_once_in_issue_order_on_either_side() {
        let pair = Pair::new(64);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut expect = vec![0u64; 64];
        std::thread::scope(|s| {
            s.spawn(|| serve_until(&pair.server, &stop));
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            for step in 0..20_000u64 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // 1..=60 elements: one to eight slots, so requests wrap and get padded.
                let len = 1 + (rng % 60) as usize;
                let at = (rng >> 8) as usize % (64 - len + 1);
                let data: Vec<u64> = (0..len as u64).map(|k| step + k).collect();
                match step % 4 {
                    0 | 1 => {
                        let req = pair.acc(at, &data, Op::Sum, Kind::Acc);
                        pair.with_fb(|fb| {
                            pair.origin.post(1, &req, bytemuck::cast_slice(&data), fb)
                        })
                        .unwrap();
                        for (e, d) in expect[at..at + len].iter_mut().zip(&data) {
                            *e += d;
                        }
                    }
                    2 => {
                        // Fetching: the result shows every earlier request applied.
                        let req = pair.acc(at, &data, Op::Sum, Kind::FetchAcc);
                        let mut out = vec![0u64; len];
                        pair.with_fb(|fb| {
                            pair.origin.call(
                                1,
                                &req,
                                bytemuck::cast_slice(&data),
                                bytemuck::cast_slice_mut(&mut out),
                                fb,
                            )
                        })
                        .unwrap();
                        assert_eq!(out, expect[at..at + len], "step {step}");
                        for (e, d) in expect[at..at + len].iter_mut().zip(&data) {
                            *e += d;
                        }
                    }
                    _ => {
                        // A put, then a compare-and-swap that must see it.
                        let v = [step * 3 + 1];
                        let req = Request {
                            kind: Kind::Put,
                            elem: ElemType::U8,
                            op: Op::Replace,
                            addr: pair.addr(at),
                            len: 8,
                            key: 0,
                            granule: 0,
                        };
                        pair.with_fb(|fb| pair.origin.post(1, &req, bytemuck::cast_slice(&v), fb))
                            .unwrap();
                        let req = pair.acc(at, &[0, 0], Op::Replace, Kind::Cas);
                        let cas = [v[0], v[0] + 1];
                        let mut old = [0u64];
                        pair.with_fb(|fb| {
                            pair.origin.call(
                                1,
                                &req,
                                bytemuck::cast_slice(&cas),
                                bytemuck::cast_slice_mut(&mut old),
                                fb,
                            )
                        })
                        .unwrap();
                        assert_eq!(old[0], v[0], "step {step}: the put landed first");
                        expect[at] = v[0] + 1;
                    }
                }
            }
            pair.with_fb(|fb| pair.origin.complete_all_to(1, fb))
                .unwrap();
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(pair.memory[..64], expect);
        assert!(!pair.server_ran_last(), "some requests were taken back");
        assert!(served_batches() > 0, "some were served");
        assert!(pair.stripes.iter().all(|s| s.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn the_local_bound_of_executed_requests_never_covers_a_pending_one() {
        // No server: every request is taken back after the pickup wait.
        let pair = Pair::new(8);
        let put = |i: usize, v: u64| {
            let req = Request {
                kind: Kind::Put,
                elem: ElemType::U8,
                op: Op::Replace,
                addr: pair.addr(i),
                len: 8,
                key: 0,
                granule: 0,
            };
            pair.with_fb(|fb| pair.origin.post(1, &req, &v.to_ne_bytes(), fb))
                .unwrap();
        };
        put(0, 7);
        assert!(pair.origin.outstanding(1));
        let req = pair.acc(0, &[1], Op::Sum, Kind::FetchAcc);
        let mut old = [0u64];
        pair.with_fb(|fb| {
            pair.origin.call(
                1,
                &req,
                bytemuck::bytes_of(&1u64),
                bytemuck::cast_slice_mut(&mut old),
                fb,
            )
        })
        .unwrap();
        assert_eq!(old[0], 7, "the put ran before the fetch");
        assert!(!pair.origin.outstanding(1), "everything up to the call ran");
        put(1, 9);
        assert!(pair.origin.outstanding(1), "a later put is still pending");
        assert!(pair.origin.own_outstanding(1), "and it is this thread's");
        pair.with_fb(|fb| pair.origin.complete_all_to(1, fb))
            .unwrap();
        assert!(!pair.origin.outstanding(1));
        assert_eq!(pair.memory[..2], [8, 9]);
    }

    #[test]
    fn a_request_names_the_cpu_it_was_posted_from_and_keeps_its_granule() {
        let pair = Pair::new(8);
        let req = pair.acc(0, &[1], Op::Sum, Kind::Acc);
        let (pos, cpu) = loop {
            let before = rustix::thread::sched_getcpu();
            let pos = pair
                .with_fb(|fb| pair.origin.post(1, &req, bytemuck::bytes_of(&1u64), fb))
                .unwrap();
            let after = rustix::thread::sched_getcpu();
            if before == after {
                break (pos, before);
            }
            // Migrated while posting: the CPU in the header is either; post again.
        };
        let posted = read_posted(&pair.origin.ring(1), pos).expect("a request");
        assert_eq!(posted.origin_cpu, cpu as u32 + 1);
        assert_eq!(posted.granule, 64);
        pair.with_fb(|fb| pair.origin.complete_all_to(1, fb))
            .unwrap();
    }

    #[test]
    fn threads_of_one_origin_share_a_ring_without_losing_updates() {
        let pair = Pair::new(8);
        let stop = std::sync::atomic::AtomicBool::new(false);
        const PER_THREAD: u64 = 5_000;
        std::thread::scope(|s| {
            let server = s.spawn(|| serve_until(&pair.server, &stop));
            let workers: Vec<_> = (0..4u64)
                .map(|t| {
                    let pair = &pair;
                    s.spawn(move || {
                        for i in 0..PER_THREAD {
                            let data = [1u64, t];
                            let req = pair.acc(0, &data, Op::Sum, Kind::Acc);
                            if i % 7 == 0 {
                                let mut out = [0u64; 2];
                                let req = pair.acc(2 + t as usize, &[1], Op::Sum, Kind::FetchAcc);
                                pair.with_fb(|fb| {
                                    pair.origin.call(
                                        1,
                                        &req,
                                        bytemuck::cast_slice(&[1u64]),
                                        bytemuck::cast_slice_mut(&mut out[..1]),
                                        fb,
                                    )
                                })
                                .unwrap();
                            } else {
                                pair.with_fb(|fb| {
                                    pair.origin.post(1, &req, bytemuck::cast_slice(&data), fb)
                                })
                                .unwrap();
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            pair.with_fb(|fb| pair.origin.complete_all_to(1, fb))
                .unwrap();
            stop.store(true, Ordering::Relaxed);
            server.join().unwrap();
        });
        let fetches = PER_THREAD.div_ceil(7);
        let posts = PER_THREAD - fetches;
        assert_eq!(pair.memory[0], 4 * posts);
        assert_eq!(pair.memory[1], (0..4).map(|t| t * posts).sum::<u64>());
        for t in 0..4 {
            assert_eq!(pair.memory[2 + t], fetches);
        }
    }

    #[test]
    fn a_request_outside_the_window_fails_and_the_requester_hears_of_it() {
        let pair = Pair::new(4);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| serve_until(&pair.server, &stop));
            let mut req = pair.acc(0, &[1], Op::Sum, Kind::FetchAcc);
            req.addr = pair.addr(4); // one past the end
            let mut out = [0u64];
            // Either side may run it: the server refuses it; a takeover (the origin checks
            // bounds before it posts, not here) writes into the room behind the window.
            let r = pair.with_fb(|fb| {
                pair.origin.call(
                    1,
                    &req,
                    bytemuck::cast_slice(&[1u64]),
                    bytemuck::cast_slice_mut(&mut out),
                    fb,
                )
            });
            stop.store(true, Ordering::Relaxed);
            if pair.server_ran_last() {
                assert!(r.is_err());
            }
        });
    }

    impl Pair {
        /// Whether the last request was executed by the server (no snub recorded).
        fn server_ran_last(&self) -> bool {
            self.origin.snubbed_until[1].load(Ordering::Relaxed) == 0
        }
    }
}
