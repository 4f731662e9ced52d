//! The socket network (feature `net`; `ONESIDED_NETWORK=socket`): every operation to
//! another node as a message of our own over TCP ([`Wire`]) — puts and gets as plain
//! copies, accumulates and atomics applied with CPU atomics, lock epochs and deliveries
//! in one message each — with no libfabric. The second implementation of the network
//! interface (`transport::network`, [`Network`] and [`Fabric`]), written against it
//! alone: windows across nodes in a build without libfabric, and the network protocols
//! tested on a transport with other timings than libfabric's.
//!
//! One connection per origin and target process carries every operation in issue order,
//! and the target applies them in that order: writes, reads and atomics to one peer are
//! ordered (MPI's accumulate ordering and `mpi_win_order` hold without more). A thread
//! serves the process's connections — it sleeps on them until a message comes — and every
//! wait inside the library serves them too while it polls; with `ONESIDED_PROGRESS=none`
//! only the waits do.
//!
//! ```text
//! ONESIDED_NETWORK=socket osrun -n 4 --nodes 2 ./app
//! ```

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::ops::{ElemType, Op};
use crate::transport::network::{
    Ack, AtomicKind, AtomicTable, DeliverGate, Fabric, NetOp, NetType, Network, PeerEnded,
    Registration, Remote, TrackedContext, COPY_MAX, HELD_MAX, NETWORK_ENV,
};
use crate::transport::wire::{self, Kind, Request, Wire};
use crate::transport::write_end::WriteEnd;

/// The progress variable (the libfabric endpoint's too): `none` starts no serving thread;
/// `spin`, `yield` and `block` all serve with a thread that sleeps on the connections
/// until a message comes (a thread that spins would take the core a rank needs: the
/// socket network's answers cost a system call whatever the thread does).
const PROGRESS_ENV: &str = "ONESIDED_PROGRESS";

/// Whether `ONESIDED_PROGRESS` asks for a serving thread (unset: yes).
fn served_by_a_thread() -> Result<bool> {
    match std::env::var(PROGRESS_ENV).as_deref() {
        Err(_) | Ok("spin" | "yield" | "block") => Ok(true),
        Ok("none") => Ok(false),
        Ok(other) => Err(Error::InvalidArgument(format!(
            "{PROGRESS_ENV}={other:?}: expected spin, yield, block or none"
        ))),
    }
}

/// The longest put or get one message carries; longer ones go as several.
const MESSAGE_MAX: usize = 4 << 20;

/// How long a failure waits for the job's roster to name a peer that ended
/// ([`Fabric::blame`]).
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// How long the serving thread sleeps on the connections at most between two looks.
const SERVE_NAP: Duration = Duration::from_millis(100);

/// Marks a tracked operation's context (null for the counted ones, which a flush
/// completes): the wire's completion.
///
/// # Safety
/// `ctx` is null or a [`TrackedContext`] valid until marked (the posting contract).
unsafe fn mark(ctx: *mut c_void, failed: bool) {
    // SAFETY: the caller's contract.
    if let Some(t) = unsafe { ctx.cast::<TrackedContext>().as_ref() } {
        t.mark(failed);
    }
}

/// A peer this endpoint watches ([`Fabric::watch_peer`]).
struct Watched {
    rank: usize,
    ended: PeerEnded,
}

/// The endpoint's operations: the wire and what the endpoint keeps of its peers.
pub(crate) struct Sockets {
    wire: Arc<Wire>,
    /// Registration keys of our own choosing (a wanted key that is free is taken as is).
    next_key: AtomicU64,
    /// Serializes the choice of keys.
    registering: Mutex<()>,
    watched: RwLock<HashMap<u64, Watched>>,
    /// Peers' entries, by their endpoint names.
    peers: Mutex<HashMap<Vec<u8>, u64>>,
}

impl std::fmt::Debug for Sockets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sockets")
            .field("wire", &self.wire)
            .finish_non_exhaustive()
    }
}

/// The wire's part of a registration: peers' access ends when it is dropped.
struct Region {
    wire: Arc<Wire>,
    key: u64,
}

impl Drop for Region {
    fn drop(&mut self) {
        self.wire.remove_region(self.key);
    }
}

/// `op` as the wire's operation and the kind of request that carries it.
fn request(kind: AtomicKind, op: NetOp, ty: NetType, count: usize, at: Remote) -> Request {
    Request {
        kind: match kind {
            AtomicKind::Write => Kind::Write,
            AtomicKind::Fetch => Kind::Fetch,
            AtomicKind::Compare => Kind::Compare,
        },
        op: op.mpi(),
        ty: ty.elem(),
        count,
        key: at.key,
        addr: at.addr,
    }
}

/// A put (`Kind::Put`) or get (`Kind::Get`) of `len` bytes at `at`.
fn copy_request(kind: Kind, len: usize, at: Remote) -> Request {
    Request {
        kind,
        op: Op::Replace,
        ty: ElemType::U8,
        count: len,
        key: at.key,
        addr: at.addr,
    }
}

/// `at` moved `offset` bytes on.
fn beyond(at: Remote, offset: usize) -> Remote {
    Remote {
        addr: at.addr + offset as u64,
        ..at
    }
}

impl Sockets {
    /// An endpoint listening on `addr` (an IP address), any port; nothing serves it until
    /// someone calls [`Fabric::progress`].
    pub(crate) fn open(addr: &str) -> Result<Sockets> {
        Ok(Sockets {
            wire: Arc::new(Wire::open(addr, mark)?),
            next_key: AtomicU64::new(1 << 48),
            registering: Mutex::new(()),
            watched: RwLock::default(),
            peers: Mutex::default(),
        })
    }

    /// The peer whose wire address is `name` (its [`Fabric::name`]), numbered at its first
    /// use.
    pub(crate) fn peer(&self, name: &[u8]) -> Result<u64> {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&p) = peers.get(name) {
            return Ok(p);
        }
        let at: std::net::SocketAddr = std::str::from_utf8(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                Error::Bootstrap(format!(
                    "a peer's socket network address is not one ({} bytes): do all processes \
                     use the same network ({NETWORK_ENV})?",
                    name.len(),
                ))
            })?;
        let p = peers.len() as u64;
        self.wire.add_peer(p, at);
        peers.insert(name.to_vec(), p);
        Ok(p)
    }

    /// Posts `request` with its operands to `at.peer`; the answer's values go to `result`
    /// and mark `ctx` (null: counted only, completed by a flush).
    ///
    /// # Safety
    /// `result` (the answer's bytes) and `ctx` stay valid until the operation is marked
    /// complete or a flush returns, or until this returns an error.
    unsafe fn post(
        &self,
        at: Remote,
        request: &Request,
        operand: &[u8],
        compare: &[u8],
        result: *mut u8,
        ctx: *mut TrackedContext,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe {
            self.wire
                .post(at.peer, request, operand, compare, result, ctx.cast())
        }
        .map_err(|e| self.blame(e))
    }

    /// Posts `request` and waits for its answer (values into `result`).
    ///
    /// # Safety
    /// `result` holds the answer's bytes.
    unsafe fn post_waited(
        &self,
        at: Remote,
        request: &Request,
        operand: &[u8],
        result: *mut u8,
    ) -> Result<()> {
        let tracked = TrackedContext::default();
        tracked.reset();
        let ctx = (&tracked as *const TrackedContext).cast_mut();
        // SAFETY: `result` per the caller's contract; `tracked` lives until it is marked
        // (waited for below, or the post failed).
        unsafe { self.post(at, request, operand, &[], result, ctx) }?;
        self.wait_answer(&tracked, at.peer)
    }

    /// Waits until `tracked`, an operation posted to `peer`, is marked.
    fn wait_answer(&self, tracked: &TrackedContext, peer: u64) -> Result<()> {
        let mut backoff = crate::backoff::Backoff::for_network();
        let mut hang = crate::diag::HangClock::new();
        loop {
            if let Some(failed) = tracked.completed() {
                return match failed {
                    false => Ok(()),
                    true => Err(self.blame(Error::Network {
                        call: "socket",
                        code: 0,
                        text: "the target refused the operation or its process is gone".into(),
                    })),
                };
            }
            // A progress error is an operation of this process that failed: this one is
            // marked then, and reported above.
            let _ = self.wire.progress();
            backoff.snooze();
            // Reported, not abandoned: the answer will write the result and the context.
            hang.tick_job(|| {
                format!(
                    "a network operation waited for alone: an answer from endpoint {} over the \
                     socket network",
                    peer
                )
            });
        }
    }
}

impl Fabric for Sockets {
    /// The wire's address, as text.
    fn name(&self) -> Result<Vec<u8>> {
        Ok(self.wire.address().to_string().into_bytes())
    }

    unsafe fn register(&self, base: *mut u8, len: usize) -> Result<Registration> {
        // SAFETY: the caller's contract.
        unsafe { self.register_as(base, len, None) }
    }

    /// Under `wanted` where this process has no registration of that key, else under a key
    /// of its own (peers learn the key and the base with the window's exchange).
    unsafe fn register_as(
        &self,
        base: *mut u8,
        len: usize,
        wanted: Option<u64>,
    ) -> Result<Registration> {
        let _choosing = self
            .registering
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Under the wanted key, peers name the bytes by their offset: every process's
        // registration of a window then looks the same (one key, base 0), and a window of
        // symmetric sizes needs no table of them. Under a key of our own, by their address
        // in this process.
        let (key, remote_base) = match wanted.filter(|k| !self.wire.has_region(*k)) {
            Some(k) => (k, 0),
            None => loop {
                // Relaxed: under the lock above; uniqueness is all that matters.
                let k = self.next_key.fetch_add(1, Ordering::Relaxed);
                if !self.wire.has_region(k) {
                    break (k, base as u64);
                }
            },
        };
        self.wire.add_region(key, base as usize, len, remote_base);
        let region = Region {
            wire: Arc::clone(&self.wire),
            key,
        };
        Ok(Registration::new(key, remote_base, region))
    }

    /// The wire applies atomics with the CPU's.
    fn atomics_mix_with_cpu(&self) -> bool {
        true
    }

    /// One connection per peer, applied in order.
    fn orders_atomics(&self) -> bool {
        true
    }

    fn ships_epochs_to(&self, _peer: u64) -> bool {
        true
    }

    fn answers_pending_to(&self, peer: u64) -> bool {
        self.wire.pending_to(peer)
    }

    /// Bytes in the connections' queues that the kernel has not taken yet (a target that
    /// does not read lets them grow: a flush bounds them, [`HELD_MAX`]).
    fn held_bytes(&self) -> usize {
        self.wire.queued_bytes()
    }

    fn read_waited(&self, dst: &mut [u8], from: Remote) -> Result<()> {
        for (i, part) in dst.chunks_mut(MESSAGE_MAX).enumerate() {
            let at = beyond(from, i * MESSAGE_MAX);
            let request = copy_request(Kind::Get, part.len(), at);
            // SAFETY: the answer's bytes go to `part`, which is borrowed until it came.
            unsafe { self.post_waited(at, &request, &[], part.as_mut_ptr()) }?;
        }
        Ok(())
    }

    unsafe fn atomic(
        &self,
        kind: AtomicKind,
        op: NetOp,
        ty: NetType,
        count: usize,
        operand: *const u8,
        compare: *const u8,
        result: *mut u8,
        _local: Option<&Registration>,
        at: Remote,
    ) -> Result<()> {
        let bytes = count * ty.size();
        // SAFETY: `count` elements each (the caller's contract); the wire copies them.
        let (operand, compare) = unsafe {
            (
                std::slice::from_raw_parts(operand, bytes),
                match kind {
                    AtomicKind::Compare => std::slice::from_raw_parts(compare, bytes),
                    _ => &[][..],
                },
            )
        };
        let request = request(kind, op, ty, count, at);
        // SAFETY: `result` stays valid until the flush (the caller's contract).
        unsafe { self.post(at, &request, operand, compare, result, std::ptr::null_mut()) }
    }

    fn atomic_copied(&self, op: NetOp, ty: NetType, operand: &[u8], at: Remote) -> Result<()> {
        let request = request(AtomicKind::Write, op, ty, operand.len() / ty.size(), at);
        // SAFETY: no result; the wire copies the operand.
        unsafe {
            self.post(
                at,
                &request,
                operand,
                &[],
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }
    }

    unsafe fn fetch_word(
        &self,
        op: NetOp,
        words: *mut u64,
        _reg: &Registration,
        at: Remote,
        tracked: *mut TrackedContext,
    ) -> Result<()> {
        let kind = match op {
            NetOp::CompareSwap => AtomicKind::Compare,
            _ => AtomicKind::Fetch,
        };
        // SAFETY: three valid words (the caller's contract).
        let (operand, compare) = unsafe { (words.read(), words.add(1).read()) };
        // SAFETY: `tracked` is valid (the caller's contract).
        unsafe { &*tracked }.reset();
        let request = request(kind, op, NetType::U64, 1, at);
        let compare = compare.to_le_bytes();
        let compare = match kind {
            AtomicKind::Compare => &compare[..],
            _ => &[][..],
        };
        // SAFETY: the result word and `tracked` stay valid until it is marked (the
        // caller's contract).
        unsafe {
            self.post(
                at,
                &request,
                &operand.to_le_bytes(),
                compare,
                words.add(2).cast(),
                tracked,
            )
        }
    }

    fn post_word(&self, op: NetOp, value: u64, at: Remote) -> Result<()> {
        self.atomic_copied(op, NetType::U64, &value.to_le_bytes(), at)
    }

    /// A delivery of no bytes and one flag word ([`wire::Wire::deliver`]).
    fn store_unanswered(&self, value: u64, at: Remote) -> Result<bool> {
        self.wire
            .deliver(&[], at, &[value], at, None)
            .map_err(|e| self.blame(e))
    }

    /// [`wire::Wire::add_unanswered`].
    fn add_unanswered(&self, value: u64, at: Remote, ack: Ack) -> Result<bool> {
        self.wire
            .add_unanswered(value, at, ack)
            .map(|()| true)
            .map_err(|e| self.blame(e))
    }

    unsafe fn ship_epoch(
        &self,
        words: *mut u64,
        at: Remote,
        held: bool,
        payload: &[u8],
        tracked: *mut TrackedContext,
    ) -> Result<()> {
        // SAFETY: three valid words and a valid context (the caller's contract).
        let (new, expected) = unsafe { (words.read(), words.add(1).read()) };
        // SAFETY: as above.
        unsafe { &*tracked }.reset();
        // SAFETY: the result word and the context stay valid until it is marked.
        unsafe {
            self.wire.post_epoch(
                at.peer,
                (at.key, at.addr),
                expected,
                new,
                held,
                payload,
                words.add(2).cast(),
                tracked.cast(),
            )
        }
        .map_err(|e| self.blame(e))
    }

    fn striped_waited(
        &self,
        stripes: &[Remote],
        payload: &[u8],
        result: &mut [u8],
    ) -> Result<bool> {
        let tracked = TrackedContext::default();
        tracked.reset();
        let ctx = (&tracked as *const TrackedContext).cast_mut();
        Wire::striped_waited(
            stripes,
            result,
            |peer, key, addrs, answer, len| {
                // SAFETY: the answer's buffer and `tracked` live until the wait below saw
                // the answer (or the post failed).
                unsafe {
                    self.wire
                        .post_striped(peer, key, addrs, payload, answer, len, ctx.cast())
                }
                .map_err(|e| self.blame(e))
            },
            || self.wait_answer(&tracked, stripes[0].peer),
        )
    }

    /// Waits until every operation posted before the call is answered: one look at each
    /// connection's count ([`Wire::marks`]), whatever other threads post meanwhile.
    fn flush(&self, meanwhile: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let marks = self.wire.marks();
        let mut backoff = crate::backoff::Backoff::for_network();
        let mut hang = crate::diag::HangClock::new();
        while !self.wire.reached(&marks) {
            self.progress()?;
            meanwhile()?;
            backoff.snooze();
            // Giving up on an aborted job is safe: the contexts of counted operations are
            // null, and their buffers the wire's.
            if hang.tick_job(|| {
                format!(
                    "a network flush: {} operations over the socket network to be answered",
                    self.wire.in_flight()
                )
            }) {
                return Err(Error::JobAborted);
            }
        }
        if self.wire.has_failed() {
            return Err(self.blame(Error::Network {
                call: "flush",
                code: 0,
                text: "an operation over the socket network failed".into(),
            }));
        }
        Ok(())
    }

    fn progress(&self) -> Result<()> {
        self.wire.progress().map_err(|e| self.blame(e))
    }

    /// Nothing to give up: a flush waits for what was posted before it, and the answer of
    /// an abandoned operation only marks its context.
    fn abandon(&self, _read: bool) {}

    fn watch_peer(&self, peer: u64, rank: usize, ended: PeerEnded) {
        self.watched
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(peer, Watched { rank, ended });
    }

    /// `PeerGone` when a watched peer has ended (a connection closes before or after the
    /// job's roster records the end: a failure waits up to [`EXIT_GRACE`] for it).
    fn blame(&self, e: Error) -> Error {
        if !matches!(e, Error::Network { .. }) {
            return e;
        }
        let until = Instant::now() + EXIT_GRACE;
        loop {
            let ended = self
                .watched
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .find(|w| (w.ended)())
                .map(|w| w.rank);
            if let Some(rank) = ended {
                return Error::PeerGone { rank };
            }
            if Instant::now() >= until {
                return e;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn has_failed(&self) -> bool {
        self.wire.has_failed()
    }
}

/// The process's socket network: its endpoint's operations, its peers and its server.
pub(crate) struct Endpoint {
    sockets: Arc<Sockets>,
    /// `sockets` as the network protocols hold it.
    fabric: Arc<dyn Fabric>,
    table: AtomicTable,
    /// The serving thread's mode (`none`: no thread).
    progress: &'static str,
    _polled_while_waiting: crate::attention::WaitHook,
}

static ENDPOINT: OnceLock<Endpoint> = OnceLock::new();
/// Serializes the first opening (OnceLock cannot fail its initializer).
static OPENING: Mutex<()> = Mutex::new(());

/// The socket network, opened now if it is not yet: listening on the address
/// `transport::address` chooses, served by a thread unless `ONESIDED_PROGRESS=none`.
pub(crate) fn endpoint() -> Result<&'static Endpoint> {
    if let Some(e) = ENDPOINT.get() {
        return Ok(e);
    }
    let _opening = OPENING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(e) = ENDPOINT.get() {
        return Ok(e);
    }
    let addr = crate::transport::address::endpoint_address()?;
    let sockets = Arc::new(Sockets::open(&addr)?);
    let served = served_by_a_thread()?;
    if served {
        let serving = Arc::clone(&sockets);
        std::thread::Builder::new()
            .name("onesided-socket".into())
            .spawn(move || serve(&serving))
            .map_err(|source| Error::Os {
                call: "spawn(socket network server)",
                source,
            })?;
    } else {
        crate::attention::set_unserved();
    }
    // A wait that backs off sleeps on the connections: the answer it waits for ends the
    // sleep, where a plain sleep (up to 500 µs) would outlast it.
    let woken = Arc::clone(&sockets);
    crate::attention::set_sleeper(Arc::new(move |nap| {
        let fd = woken.wire.fd();
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let nap = rustix::event::Timespec {
            tv_sec: nap.as_secs() as i64,
            tv_nsec: i64::from(nap.subsec_nanos()),
        };
        let _ = rustix::event::poll(&mut fds, Some(&nap));
    }));
    // Every wait inside the library serves the connections while it polls.
    let polled = Arc::clone(&sockets);
    let polled_while_waiting = crate::attention::add_wait_hook(Arc::new(move || {
        let _ = polled.wire.progress();
    }));
    let endpoint = Endpoint {
        fabric: Arc::clone(&sockets) as Arc<dyn Fabric>,
        sockets,
        table: table(),
        progress: if served { "block" } else { "none" },
        _polled_while_waiting: polled_while_waiting,
    };
    ENDPOINT
        .set(endpoint)
        .map_err(|_| Error::Bootstrap("the socket network was opened twice".into()))?;
    Ok(ENDPOINT.get().expect("just set"))
}

/// The serving thread: sleeps on the connections until a message comes, then serves them;
/// for the life of the process.
fn serve(sockets: &Sockets) {
    let nap = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: SERVE_NAP.as_nanos() as i64,
    };
    loop {
        let fd = sockets.wire.fd();
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let _ = rustix::event::poll(&mut fds, Some(&nap));
        // A failed operation is reported to whoever waits for it.
        let _ = sockets.wire.progress();
        // A waiting thread may hold the connections (its progress call skips ours): let
        // it finish before the next look.
        std::thread::yield_now();
    }
}

/// What the socket network carries in one atomic: every operation on every type, up to
/// [`COPY_MAX`] bytes (the fetching ones' answers come back in one message too).
pub(crate) fn table() -> AtomicTable {
    let mut table = AtomicTable::default();
    for kind in [AtomicKind::Write, AtomicKind::Fetch, AtomicKind::Compare] {
        for op in NetOp::ALL {
            let fits = match kind {
                AtomicKind::Compare => op == NetOp::CompareSwap,
                AtomicKind::Fetch => op != NetOp::CompareSwap,
                AtomicKind::Write => !matches!(op, NetOp::CompareSwap | NetOp::Read),
            };
            if fits {
                for ty in NetType::ALL {
                    table.insert(kind, op, ty, COPY_MAX / ty.size());
                }
            }
        }
    }
    table
}

impl Network for Endpoint {
    fn fabric(&self) -> &Arc<dyn Fabric> {
        &self.fabric
    }

    fn peer(&self, name: &[u8]) -> Result<u64> {
        self.sockets.peer(name)
    }

    fn atomic_table(&self) -> &AtomicTable {
        &self.table
    }

    fn in_flight(&self) -> u64 {
        self.sockets.wire.in_flight()
    }

    fn description(&self) -> crate::NetworkEndpoint {
        crate::NetworkEndpoint {
            provider: "socket".into(),
            progress: self.progress,
            address: self.sockets.wire.address().to_string(),
        }
    }

    /// One connection per peer, applied in order.
    fn orders_after_writes(&self) -> bool {
        true
    }

    fn orders_rma_writes(&self) -> bool {
        true
    }

    fn write_waited(&self, src: &[u8], to: Remote) -> Result<()> {
        self.write_pieces_waited(src, &[(0, 0, src.len())], to)
    }

    /// Every piece as put messages, copied into the connection's queue.
    fn post_write(&self, src: &[u8], pieces: &[(usize, usize, usize)], to: Remote) -> Result<()> {
        let total: usize = pieces.iter().map(|p| p.2).sum();
        if self.sockets.held_bytes() + total > HELD_MAX {
            self.sockets.flush(&mut || Ok(()))?;
        }
        for &(o, t, len) in pieces {
            for start in (0..len).step_by(MESSAGE_MAX) {
                let part = &src[o + start..o + len.min(start + MESSAGE_MAX)];
                let at = beyond(to, t + start);
                let request = copy_request(Kind::Put, part.len(), at);
                // SAFETY: no result; the wire copies the bytes.
                unsafe {
                    self.sockets.post(
                        at,
                        &request,
                        part,
                        &[],
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                }?;
            }
        }
        Ok(())
    }

    fn write_pieces_waited(
        &self,
        src: &[u8],
        pieces: &[(usize, usize, usize)],
        to: Remote,
    ) -> Result<()> {
        self.post_write(src, pieces, to)?;
        self.sockets.flush(&mut || Ok(()))
    }

    fn read_pieces_waited(
        &self,
        dst: &mut [u8],
        pieces: &[(usize, usize, usize)],
        from: Remote,
    ) -> Result<()> {
        for &(o, t, len) in pieces {
            self.sockets
                .read_waited(&mut dst[o..o + len], beyond(from, t))?;
        }
        Ok(())
    }

    /// A put is a message whose answer a flush waits for, as every put here.
    fn put_over_wire(&self, _len: usize, _to: Remote) -> Result<bool> {
        Ok(false)
    }

    /// Puts are in order with atomics already ([`Network::orders_after_writes`]); a put
    /// as atomic writes goes as well, up to what one atomic carries.
    fn atomic_put_fits(&self, len: usize, _to: Remote) -> Result<bool> {
        Ok(len > 0 && len <= COPY_MAX)
    }

    fn post_write_atomic(&self, src: &[u8], to: Remote) -> Result<()> {
        let ty = match wire::whole_words(to.addr, src.len()) {
            true => NetType::U64,
            false => NetType::U8,
        };
        self.sockets.atomic_copied(NetOp::Write, ty, src, to)
    }

    /// Every put goes over the connection already ([`Network::post_write`]: a long one
    /// from the caller's bytes, landed in place), as one path.
    fn post_long_put(&self, _src: &[u8], _to: Remote) -> Result<bool> {
        Ok(false)
    }

    /// Copied into the connection's queue at once: `owner` is let go, and the write
    /// completes at the next flush whatever `end` says.
    unsafe fn post_write_shared(
        &self,
        src: &[u8],
        to: Remote,
        owner: Arc<dyn Send + Sync>,
        _end: WriteEnd,
    ) -> Result<()> {
        self.post_write(src, &[(0, 0, src.len())], to)?;
        drop(owner);
        Ok(())
    }

    fn deliver(
        &self,
        block: &[u8],
        to: Remote,
        words: &[u64],
        flag: Remote,
        gate: Option<DeliverGate<'_>>,
    ) -> Result<bool> {
        self.sockets
            .wire
            .deliver(block, to, words, flag, gate)
            .map_err(|e| self.sockets.blame(e))
    }

    /// Every operation: the socket network does not tell threads apart.
    fn flush_own(&self) -> Result<()> {
        self.sockets.flush(&mut || Ok(()))
    }

    fn reap_own(&self) -> Result<()> {
        Ok(())
    }
}
