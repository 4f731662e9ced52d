//! Atomics across nodes as messages of our own over TCP, applied by the target's progress
//! with CPU atomics (feature `net`: the libfabric endpoint's `socket` path of [`ENV`], and
//! every operation of the socket network, `transport::socket`).
//!
//! On `tcp;ofi_rxm` a network atomic is already a message that the target's software
//! applies with CPU atomics: rxm sends the request over its TCP connection, the target's
//! progress applies it and sends the answer. Measured here (loopback, both sides polling,
//! 8 bytes): an rxm message round trip takes 14.8 µs (`fi_pingpong`), the same exchange
//! over a plain TCP socket 6.9 µs — rxm's and the tcp provider's layers cost as much as
//! the kernel's transfer. So where the provider's atomics are software anyway (`tcp`),
//! every atomic to another node goes over a TCP connection of ours instead: a request
//! (operation, type, count, key, address, operands), applied by whoever drives the
//! target's progress (a waiting thread or the progress thread, as for the provider's own
//! operations), and an answer (the previous values, or an acknowledgement) — one
//! request/answer pair per operation, as the provider's. Applied with the same CPU atomics
//! as node-local accumulates, they mix with those and with the provider's atomics on one
//! word.
//!
//! One connection per pair of processes, opened by whichever needs it first, carries every
//! atomic of each to the other in issue order, with the answers to the other's, and each
//! applies the other's in that order: the accumulate ordering MPI asks for, and the
//! provider's `FI_ORDER_ATOMIC_RAW/WAW` that the library relies on (an atomic that releases
//! a lock lands after the epoch's accumulates) hold as before. (Two processes that connect
//! at the same moment move to one of the two connections with their order kept, [`Link`];
//! signals both ways — a fence's, PSCW's — then share one TCP stream, each side's data
//! acknowledging the other's.) Between atomics and RMA there is no order, as between
//! rxm's.
//!
//! Beyond what a provider offers, one message may carry an update under the target's lock
//! stripes ([`Kind::Striped`]): the target takes the stripe words without waiting (all or
//! none), applies the update — of any element type, also those no CPU atomic updates
//! (complex, `long double`, the MINLOC/MAXLOC pairs), with plain reads and writes under the
//! stripes — releases them and answers, or answers "held" and applies nothing.
//!
//! Puts go over the same connection where it beats the provider's RMA: short ones as
//! atomic writes, long ones ([`LAND_MIN`] and more; `Nic::put_on_wire`) as [`Kind::Put`]
//! requests sent from the caller's bytes as far as the kernel takes them and read by the
//! target straight into their place, each answered once it is there — the path of the
//! loopback's stream floor, which rxm's large-message protocol kept puts well below.
//!
//! ```text
//! ONESIDED_NET_ATOMICS=provider osrun -n 4 --nodes 2 ./app   # the provider's atomics
//! ```

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::io::{ErrorKind, Read, Write};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustix::event::epoll;

use crate::error::{Error, Result};
use crate::ops::{AccElement, ElemType, Op};
use crate::transport::network::{Ack, DeliverGate, Remote};

/// The environment variable that chooses how atomics reach another node: `socket` (our
/// messages, the default where the provider's atomics are software) or `provider`.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub(crate) const ENV: &str = "ONESIDED_NET_ATOMICS";

/// How long the first connection to a peer may take before the atomic fails.
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);

/// How long a post waits for the answer to a move's ping ([`Wire::move_requests`]) before
/// it gives the move up: a peer that serves nothing for that long keeps two connections.
const MOVE_PATIENCE: Duration = Duration::from_millis(50);

/// The epoll token of the listening socket (links use their index).
const LISTENER: u64 = u64::MAX;

/// The epoll token of the descriptor the wire watches for its owner ([`Wire::watch_also`]).
const ALSO: u64 = u64::MAX - 1;

/// How long atomics whose target closed its connection stay pending before they fail: a
/// target process that exited is then reported as gone by the job's roster first
/// (`Error::PeerGone`, which says more than a failed operation), as when the provider's
/// operations to it go unanswered.
const LOST_AFTER: Duration = Duration::from_secs(2);

/// Set in the length word of an answer: one connection carries requests and deliveries
/// of both processes and the answers to each (every message is shorter than 2 GiB).
const ANSWER: u32 = 1 << 31;

/// Bytes of a request's header after its length word.
const REQUEST_HEADER: usize = 24;

/// Room a read of a link has at least; a link's input buffer grows to hold its longest
/// message whole (a delivered block then arrives in one read, not through a bounce
/// buffer), and shrinks back once it held more than [`INPUT_KEPT`] and is empty.
const READ_ROOM: usize = 16 << 10;

/// Deliveries with blocks at least this long, and puts ([`Kind::Put`]) as long, are read
/// from the socket straight into their place ([`Wire::land`]), not through the link's
/// input buffer: a copy less, for a system call more. Their senders send them from the
/// caller's bytes as far as the kernel takes them.
const LAND_MIN: usize = 64 << 10;

/// A wire with one link that carries messages reads it directly and looks through its
/// poller once per this many polls ([`Wire::progress`]). OSU's 8-byte get + flush across two virtual nodes under the
/// C ABI (MPICH 5.0.2, 12 alternating rounds, medians): 12.10 µs with a look on every
/// poll, 10.89 with one in 4, 10.51 with one in 16 (MPICH's own network path 11.19).
const LOOK_EVERY: u64 = 16;

/// The longest input buffer a link keeps between messages.
const INPUT_KEPT: usize = 1 << 20;

/// True when `len` bytes at `addr` are whole u64 words at an aligned address: the wire
/// carries them as words (one atomic each at the target), else byte by byte.
pub(crate) fn whole_words(addr: u64, len: usize) -> bool {
    addr % 8 == 0 && len % 8 == 0
}

/// The longest read of bytes ([`Kind::Read`]) that goes over the wire: each is read at the
/// target one at a time.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub(crate) const READ_MAX: usize = 4 << 10;

/// The longest read of whole, aligned words that goes over the wire.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub(crate) const READ_MAX_WORDS: usize = 32 << 10;

/// The longest block [`Wire::post_deliver`] carries.
pub(crate) const DELIVER_MAX: usize = 1 << 20;

/// How an atomic answers: nothing (an acknowledgement), the previous values, or the
/// previous values of a compare-and-swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Write = 0,
    Fetch = 1,
    Compare = 2,
    /// A whole lock epoch in one message ([`Wire::post_epoch`]): a compare-and-swap of a
    /// lock word, answered with its previous value, and when it took the lock, the
    /// requests it carries applied and the lock released.
    Epoch = 3,
    /// Bytes written and then words stored (Release), neither answered
    /// ([`Wire::post_deliver`]): a block and the flag that tells its receiver it is in
    /// place, in one message.
    Deliver = 4,
    /// The current values, no operands: a read (a get), answered with them.
    Read = 5,
    /// Bytes written with plain copies (a put), answered with an acknowledgement: MPI
    /// leaves concurrent conflicting accesses undefined, so no atomic is needed
    /// (`transport::socket`, where every put goes over the wire).
    Put = 6,
    /// Bytes read with a plain copy (a get), answered with them.
    Get = 7,
    /// Updates under the target's lock stripes in one message ([`Wire::post_striped`]):
    /// every stripe taken (all or none), the requests it carries applied — of any element
    /// type, also those no CPU atomic updates —, the stripes released, and an answer that
    /// says whether it took them, with the previous values of its fetching requests.
    Striped = 8,
    /// Nothing applied, answered ([`Wire::move_requests`]): its answer says that
    /// everything sent before it on its connection was applied.
    Ping = 9,
    /// The first message on a connection, unanswered: the connecting process's listening
    /// address, so that the accepting one can send its own requests on it too.
    Hello = 10,
    /// Unanswered: the sender's requests do not go on this connection (any more), and it
    /// sends nothing more on it unless the receiver's requests do ([`Wire::retire`]).
    Retired = 11,
}

impl Kind {
    /// True when the answer carries values (counted with the reads).
    fn fetching(self) -> bool {
        !matches!(self, Kind::Write | Kind::Put | Kind::Ping)
    }
}

/// The flag byte of an [`Kind::Epoch`] request: the origin holds the lock already (it
/// acquired it the usual way after a first attempt failed): apply and release, no
/// compare-and-swap.
const HELD: u8 = 1;

/// The code of element type `ty` on the wire; an error for a type it does not carry.
fn type_code(ty: ElemType) -> Result<usize> {
    TYPES
        .iter()
        .position(|t| *t == ty)
        .ok_or_else(|| Error::Unsupported(format!("atomics on {ty:?} across nodes")))
}

/// Codes from here on name the element types no CPU atomic updates (`STRIPED_TYPES` plus
/// their place in [`ElemType::ALL`]): only a [`Kind::Striped`] request carries them.
const STRIPED_TYPES: usize = 32;

/// The code of any element type on the wire: its [`TYPES`] code, else past
/// [`STRIPED_TYPES`].
fn any_type_code(ty: ElemType) -> usize {
    type_code(ty).unwrap_or_else(|_| {
        STRIPED_TYPES
            + ElemType::ALL
                .iter()
                .position(|t| *t == ty)
                .expect("every element type is in ElemType::ALL")
    })
}

/// The element type of wire code `code`, and whether CPU atomics update it (a [`TYPES`]
/// code).
fn type_of(code: u8) -> Option<(ElemType, bool)> {
    let code = usize::from(code);
    match TYPES.get(code) {
        Some(&ty) => Some((ty, true)),
        None => ElemType::ALL
            .get(code.checked_sub(STRIPED_TYPES)?)
            .map(|&ty| (ty, false)),
    }
}

/// The longest answer a [`Kind::Striped`] request may ask for.
const STRIPED_ANSWER_MAX: usize = 1 << 20;

/// The most lock stripes one [`Kind::Striped`] request takes.
const STRIPED_WORDS_MAX: usize = 64;

/// Appends `request` with its `operand` (and `compare`) bytes to `out` as one message: its
/// length, the header, the operands — what [`Wire::post`] sends, and an element of the
/// payload of [`Wire::post_epoch`]. Fails for an element type the wire does not carry.
pub(crate) fn encode(
    out: &mut Vec<u8>,
    request: &Request,
    operand: &[u8],
    compare: &[u8],
) -> Result<()> {
    type_code(request.ty)?;
    encode_any(out, request, operand, compare);
    Ok(())
}

/// Appends an update or read of `request.count` elements of any type (`Write`, `Fetch` or
/// `Read` of `request.kind`) with its `operand` to `out`: an element of the payload of
/// [`Wire::post_striped`], which applies types no CPU atomic updates under the target's
/// lock stripes.
pub(crate) fn encode_striped(out: &mut Vec<u8>, request: &Request, operand: &[u8]) {
    debug_assert!(matches!(
        request.kind,
        Kind::Write | Kind::Fetch | Kind::Read
    ));
    encode_any(out, request, operand, &[]);
}

/// [`encode`] for any element type.
fn encode_any(out: &mut Vec<u8>, request: &Request, operand: &[u8], compare: &[u8]) {
    encode_header(out, request, operand.len() + compare.len());
    out.extend_from_slice(operand);
    out.extend_from_slice(compare);
}

/// Appends the length word and header of `request` to `out`, for `payload` bytes that
/// follow it.
fn encode_header(out: &mut Vec<u8>, request: &Request, payload: usize) {
    let code = any_type_code(request.ty);
    let op = Op::ALL.iter().position(|o| *o == request.op).unwrap_or(0);
    let body = REQUEST_HEADER + payload;
    out.extend_from_slice(&(body as u32).to_le_bytes());
    out.extend_from_slice(&[request.kind as u8, op as u8, code as u8, 0]);
    out.extend_from_slice(&(request.count as u32).to_le_bytes());
    out.extend_from_slice(&request.key.to_le_bytes());
    out.extend_from_slice(&request.addr.to_le_bytes());
}

/// The element types the wire carries (libfabric's), by their code on the wire.
const TYPES: [ElemType; 10] = [
    ElemType::I8,
    ElemType::U8,
    ElemType::I16,
    ElemType::U16,
    ElemType::I32,
    ElemType::U32,
    ElemType::I64,
    ElemType::U64,
    ElemType::F32,
    ElemType::F64,
];

/// One atomic: `kind` of `op` on `count` elements of `ty` at `addr` of the target's
/// registration `key`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    pub kind: Kind,
    pub op: Op,
    pub ty: ElemType,
    pub count: usize,
    pub key: u64,
    pub addr: u64,
}

/// What an answer says (its first byte).
const OK: u8 = 0;
const NO_REGION: u8 = 1;
const OUT_OF_RANGE: u8 = 2;
const BAD_REQUEST: u8 = 3;

/// A registered region of this process as peers address it.
#[derive(Debug, Clone, Copy)]
struct Region {
    base: usize,
    len: usize,
    /// The address peers name the first byte with.
    remote_base: u64,
}

/// An atomic of ours waiting for its answer.
struct Pending {
    /// The operation's context, marked when the answer comes.
    ctx: *mut c_void,
    /// Where the previous values go (fetching atomics), `len` bytes.
    result: *mut u8,
    len: usize,
    /// Counted with the reads (fetching) or the writes.
    read: bool,
    /// A [`Kind::Ping`] of a move: nobody's operation, not counted.
    ping: bool,
}

impl Pending {
    /// A [`Kind::Ping`] of our own.
    fn ping() -> Pending {
        Pending {
            ctx: std::ptr::null_mut(),
            result: std::ptr::null_mut(),
            len: 0,
            read: false,
            ping: true,
        }
    }
}

/// One connection between two processes, used both ways: each sends its requests and
/// deliveries on it and answers the other's (answers are marked, [`ANSWER`]). Whoever
/// needs it first connects and says who it is ([`Kind::Hello`]); should both connect at
/// once, the connection of the process with the lower address carries both ways from the
/// first moment the other can move to it with order kept ([`Wire::move_requests`]): a
/// barrier's signals each way then travel as data on one TCP connection, each side's
/// acknowledging the other's, not as two one-way streams. The connection left behind is
/// then quiet at both ends, unless the other's requests go on it ([`Wire::retire`]).
struct Link {
    stream: TcpStream,
    /// A peer's connection (we accepted it), not ours.
    accepted: bool,
    /// Our requests to the peer are to go on another link ([`LinkState::move_to`]); read
    /// without the state's lock on every post.
    moving: AtomicBool,
    /// Nothing but its end is to come on it: neither side's requests go on it — ours go
    /// elsewhere and the peer said so of its own ([`Kind::Retired`], [`Wire::retire`]). A
    /// hint for [`Wire::progress`], which then reads the other link directly (anything that
    /// still came on it is read at the next look).
    quiet: AtomicBool,
    state: Mutex<LinkState>,
}

#[derive(Default)]
struct LinkState {
    /// Bytes to send, from `sent` on.
    out: Vec<u8>,
    sent: usize,
    /// Bytes received and not yet parsed: the first `filled` of it (the rest is room
    /// for the next read, zeroed once when it grew).
    input: Vec<u8>,
    filled: usize,
    /// A delivery whose block is being read into its place: the link's next bytes.
    landing: Option<Landing>,
    /// Our atomics on this link, in issue order (answers come in that order).
    pending: VecDeque<Pending>,
    /// Operations posted on this link so far, and those answered or failed: both only
    /// grow, and an operation is finished once `finished` reaches its number
    /// ([`Wire::marks`]).
    issued: u64,
    finished: u64,
    /// The connection failed or closed.
    broken: bool,
    /// Counted in [`Wire::backlog`]: bytes wait that the kernel did not take.
    backlogged: bool,
    /// When the target closed the connection ([`LOST_AFTER`]).
    closed_at: Option<std::time::Instant>,
    /// The peer's connection that our requests move to ([`Wire::move_requests`]).
    move_to: Option<Arc<Link>>,
    /// A ping went out on it for a move: our requests no longer go on it.
    retired: bool,
    /// We sent [`Kind::Retired`] on it.
    told_retired: bool,
    /// The peer sent [`Kind::Retired`] on it: its requests go elsewhere.
    peer_retired: bool,
    /// A peer's connection that carries our requests too.
    ours: bool,
}

// SAFETY: the raw pointers of `Pending` name buffers whose owners keep them valid until
// the operation is marked complete (the posting contract), whichever thread marks it.
unsafe impl Send for LinkState {}

/// The rest of a long delivery's block, read from the socket into its place
/// ([`Wire::land`]).
struct Landing {
    /// The block's registration and the address of its next byte to read.
    key: u64,
    addr: u64,
    /// Bytes of the block still in the socket.
    left: usize,
    /// The flag words' registration and address, and the words.
    flag: (u64, u64),
    words: Vec<u64>,
    /// [`OK`], or why the delivery has no place here: its bytes are then read and dropped.
    status: u8,
    /// A long [`Kind::Put`]: answered with its status once in place (no flag words).
    answered: bool,
}

/// How a [`Wire::land`] ended.
enum Landed {
    /// The block is in place and its flag stored: the link's next message follows.
    Done,
    /// The socket has no more for now.
    Blocked,
    /// The connection closed or failed.
    Closed,
}

/// Where the links of a process stood ([`Wire::marks`]).
pub(crate) struct Marks(Vec<(Arc<Link>, u64)>);

/// Marks an operation's context complete (`true`: in error); the endpoint's own marking.
pub(crate) type Complete = unsafe fn(*mut c_void, bool);

/// This process's atomics over TCP: its listening socket, its links, the regions peers
/// may address, and counts of completed operations.
pub(crate) struct Wire {
    listener: TcpListener,
    address: SocketAddr,
    /// Every link's socket and the listener, level-triggered.
    poller: OwnedFd,
    regions: RwLock<HashMap<u64, Region>>,
    /// Peers' wire addresses, by their address-vector entry.
    peers: RwLock<HashMap<u64, SocketAddr>>,
    /// Our links to targets, by address-vector entry.
    targets: RwLock<HashMap<u64, Arc<Link>>>,
    /// Every link, its index its epoll token.
    links: RwLock<Vec<Arc<Link>>>,
    /// Peers' connections whose hello named an address no peer has yet ([`Wire::add_peer`]
    /// takes them).
    unnamed: Mutex<HashMap<SocketAddr, Arc<Link>>>,
    /// Links with bytes the kernel did not take yet.
    backlog: AtomicUsize,
    /// Links closed by their targets, failed (with their atomics) after [`LOST_AFTER`].
    closing: Mutex<Vec<Arc<Link>>>,
    /// `closing.len()`, read without the lock.
    closing_count: AtomicUsize,
    /// One thread reads the links at a time; others skip.
    reading: Mutex<()>,
    /// Calls of [`Wire::progress`] so far (which of them look through the poller).
    polls: AtomicU64,
    /// Operations answered, by counter (0: writes, 1: reads).
    done: [AtomicU64; 2],
    /// Operations failed, by counter.
    failed: [AtomicU64; 2],
    /// Set once any operation failed.
    broken: AtomicBool,
    /// Deliveries received that had no place here ([`Wire::refused`]).
    refused: AtomicU64,
    /// The owner's descriptor ([`Wire::watch_also`]) was seen readable and not yet told.
    also_ready: AtomicBool,
    complete: Complete,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

fn os(call: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Os { call, source }
}

fn lost(text: String) -> Error {
    Error::Network {
        call: "atomic",
        code: 0,
        text,
    }
}

impl Wire {
    /// Listens on `node` (the endpoint's address), any port; `complete` marks contexts.
    pub(crate) fn open(node: &str, complete: Complete) -> Result<Wire> {
        let ip: std::net::IpAddr = node.parse().map_err(|_| {
            Error::InvalidArgument(format!("the endpoint address {node} is not an IP address"))
        })?;
        let listener = TcpListener::bind((ip, 0)).map_err(os("bind(atomics socket)"))?;
        listener
            .set_nonblocking(true)
            .map_err(os("fcntl(atomics socket)"))?;
        let address = listener
            .local_addr()
            .map_err(os("getsockname(atomics socket)"))?;
        let poller = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| Error::Os {
            call: "epoll_create",
            source: e.into(),
        })?;
        epoll::add(
            &poller,
            &listener,
            epoll::EventData::new_u64(LISTENER),
            epoll::EventFlags::IN,
        )
        .map_err(|e| Error::Os {
            call: "epoll_ctl",
            source: e.into(),
        })?;
        Ok(Wire {
            listener,
            address,
            poller,
            regions: RwLock::default(),
            peers: RwLock::default(),
            targets: RwLock::default(),
            links: RwLock::default(),
            unnamed: Mutex::default(),
            backlog: AtomicUsize::new(0),
            closing: Mutex::default(),
            closing_count: AtomicUsize::new(0),
            reading: Mutex::new(()),
            polls: AtomicU64::new(0),
            done: [AtomicU64::new(0), AtomicU64::new(0)],
            failed: [AtomicU64::new(0), AtomicU64::new(0)],
            broken: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            also_ready: AtomicBool::new(false),
            complete,
        })
    }

    /// Watches `fd` (level-triggered) with the links, so that one look tells whether it is
    /// readable too ([`Wire::take_also_ready`]): the endpoint's provider queue, whose read
    /// costs system calls of its own. (The kernel drops the entry when `fd` is closed.)
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn watch_also(&self, fd: BorrowedFd<'_>) -> Result<()> {
        epoll::add(
            &self.poller,
            fd,
            epoll::EventData::new_u64(ALSO),
            epoll::EventFlags::IN,
        )
        .map_err(|e| Error::Os {
            call: "epoll_ctl",
            source: e.into(),
        })
    }

    /// True when a look of [`Wire::progress`] found the descriptor of [`Wire::watch_also`]
    /// readable since the last call.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn take_also_ready(&self) -> bool {
        // Relaxed: a hint to read the provider's queue, which orders what it reads itself.
        self.also_ready.load(Ordering::Relaxed) && self.also_ready.swap(false, Ordering::Relaxed)
    }

    /// Where peers connect.
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// A descriptor that is readable while something waits on a link or the listener.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.poller.as_fd()
    }

    /// Learns where peer `peer` (its address-vector entry) listens.
    pub(crate) fn add_peer(&self, peer: u64, at: SocketAddr) {
        write(&self.peers).insert(peer, at);
        let waiting = lock(&self.unnamed).remove(&at);
        if let Some(link) = waiting {
            self.offer(peer, &link, at);
        }
    }

    /// A connection `peer` opened to us (its hello said `at`): ours for our requests to it
    /// when we have none yet; when we connected to it too and its address is the lower,
    /// ours move to it ([`Wire::move_requests`]).
    fn offer(&self, peer: u64, link: &Arc<Link>, at: SocketAddr) {
        let mut targets = write(&self.targets);
        match targets.get(&peer) {
            None => {
                lock(&link.state).ours = true;
                targets.insert(peer, Arc::clone(link));
            }
            Some(own) if !own.accepted && !Arc::ptr_eq(own, link) && at < self.address => {
                lock(&own.state).move_to = Some(Arc::clone(link));
                // Relaxed: the next post's look; the move itself is under the state lock.
                own.moving.store(true, Ordering::Relaxed);
            }
            Some(_) => {}
        }
    }

    /// The peer that listens at `at`, once known.
    fn peer_at(&self, at: SocketAddr) -> Option<u64> {
        read(&self.peers)
            .iter()
            .find(|(_, a)| **a == at)
            .map(|(p, _)| *p)
    }

    /// A hello on `link` named `at`: the peer listening there, once known.
    fn name_link(&self, link: &Arc<Link>, at: SocketAddr) {
        if let Some(p) = self.peer_at(at) {
            return self.offer(p, link, at);
        }
        lock(&self.unnamed).insert(at, Arc::clone(link));
        // Learnt meanwhile (`add_peer` found nothing waiting): take it back and offer it.
        if let Some(p) = self.peer_at(at) {
            if let Some(link) = lock(&self.unnamed).remove(&at) {
                self.offer(p, &link, at);
            }
        }
    }

    /// True while atomics of ours to `peer` wait for their answers.
    pub(crate) fn pending_to(&self, peer: u64) -> bool {
        let link = read(&self.targets).get(&peer).cloned();
        link.is_some_and(|l| !lock(&l.state).pending.is_empty())
    }

    /// True when atomics to `peer` go over the wire (it listens on one).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn reaches(&self, peer: u64) -> bool {
        read(&self.peers).contains_key(&peer)
    }

    /// Lets peers address `len` bytes at `base` as registration `key`, first byte at
    /// `remote_base`.
    pub(crate) fn add_region(&self, key: u64, base: usize, len: usize, remote_base: u64) {
        write(&self.regions).insert(
            key,
            Region {
                base,
                len,
                remote_base,
            },
        );
    }

    /// True when this process has a registration `key`.
    pub(crate) fn has_region(&self, key: u64) -> bool {
        read(&self.regions).contains_key(&key)
    }

    /// Bytes of our links' queues that the kernel has not taken yet.
    pub(crate) fn queued_bytes(&self) -> usize {
        read(&self.targets)
            .values()
            .map(|l| {
                let state = lock(&l.state);
                state.out.len() - state.sent
            })
            .sum()
    }

    /// Operations of ours posted and not yet answered or failed.
    pub(crate) fn in_flight(&self) -> u64 {
        read(&self.targets)
            .values()
            .map(|l| {
                let state = lock(&l.state);
                state.issued - state.finished
            })
            .sum()
    }

    /// Ends peers' access to registration `key`: once this returns no atomic touches it.
    pub(crate) fn remove_region(&self, key: u64) {
        // The write lock waits for every atomic being applied (they hold the read lock).
        write(&self.regions).remove(&key);
    }

    /// Operations answered (`read`: fetching ones) and failed.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn counts(&self, read: bool) -> (u64, u64) {
        let i = usize::from(read);
        // Acquire: pairs with the Release of `finish`; a flush that sees the count frees
        // the contexts the answers marked before.
        (
            self.done[i].load(Ordering::Acquire),
            self.failed[i].load(Ordering::Acquire),
        )
    }

    /// How far each of our links is: the operations posted on it so far. Every operation
    /// posted before this call is finished (answered or failed) once [`Wire::reached`]
    /// says so — a flush that waits for its own operations only, whatever other threads
    /// post meanwhile and in whichever order the targets answer.
    pub(crate) fn marks(&self) -> Marks {
        Marks(
            read(&self.targets)
                .values()
                .map(|l| (Arc::clone(l), lock(&l.state).issued))
                .collect(),
        )
    }

    /// True once every operation counted in `marks` is finished.
    pub(crate) fn reached(&self, marks: &Marks) -> bool {
        marks.0.iter().all(|(l, n)| lock(&l.state).finished >= *n)
    }

    /// True once an operation failed.
    pub(crate) fn has_failed(&self) -> bool {
        // Relaxed: a flag for later polls.
        self.broken.load(Ordering::Relaxed)
    }

    /// Sends `request` with its `operand` (and `compare`) bytes to `peer`; the answer
    /// writes the previous values to `result` and marks `ctx`.
    ///
    /// # Safety
    /// `result` (for a fetching request, `count` elements) and `ctx` stay valid until the
    /// operation is marked complete, or until this returns an error.
    pub(crate) unsafe fn post(
        &self,
        peer: u64,
        request: &Request,
        operand: &[u8],
        compare: &[u8],
        result: *mut u8,
        ctx: *mut c_void,
    ) -> Result<()> {
        // Refused before anything is queued (`encode` below would refuse it too late).
        type_code(request.ty)?;
        self.with_link(peer, |link, state| {
            if state.broken {
                return Err(lost(
                    "the connection to the target's process is gone".into(),
                ));
            }
            let fetching = request.kind.fetching();
            state.issued += 1;
            state.pending.push_back(Pending {
                ctx,
                result,
                len: if fetching {
                    request.count * request.ty.size()
                } else {
                    0
                },
                read: fetching,
                ping: false,
            });
            if state.closed_at.is_some() {
                // The target closed the connection lately: the atomic stays pending,
                // unsent, and fails with the link's others ([`LOST_AFTER`]).
                return Ok(());
            }
            if request.kind == Kind::Put && operand.len() >= LAND_MIN {
                // A long put leaves from the caller's bytes as far as the kernel takes
                // them (the target reads it straight into place: `start_landing`); a
                // link that fails meanwhile fails it with the link's others.
                let mut head = Vec::with_capacity(4 + REQUEST_HEADER);
                encode_header(&mut head, request, operand.len());
                self.send_slices(link, state, &head, operand);
                return Ok(());
            }
            encode(&mut state.out, request, operand, compare)?;
            self.send(link, state);
            Ok(())
        })
    }

    /// Sends a whole exclusive lock epoch to `peer` as one message: a compare-and-swap of
    /// the lock word at `word` (key and address) from `expected` to `new`, whose previous
    /// value the answer writes to `result` (8 bytes) before it marks `ctx`. When it found
    /// `expected` — it took the lock — the target applies `payload` (non-fetching requests
    /// as [`encode`] writes them, in order) and then releases the lock, subtracting `new`
    /// (Release), before it answers. With `held` the origin holds the lock already: no
    /// compare-and-swap (the answer says `expected`), the rest as before.
    ///
    /// # Safety
    /// As for [`Wire::post`]: `result` (8 bytes) and `ctx` stay valid until the operation
    /// is marked complete, or until this returns an error.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn post_epoch(
        &self,
        peer: u64,
        word: (u64, u64),
        expected: u64,
        new: u64,
        held: bool,
        payload: &[u8],
        result: *mut u8,
        ctx: *mut c_void,
    ) -> Result<()> {
        let request = Request {
            kind: Kind::Epoch,
            op: Op::Replace,
            ty: ElemType::U64,
            count: 1,
            key: word.0,
            addr: word.1,
        };
        let header = [new.to_le_bytes(), expected.to_le_bytes()].concat();
        let flag = if held { HELD } else { 0 };
        // SAFETY: the caller's contract.
        unsafe { self.post_carrying(peer, &request, &header, flag, payload, (result, 8), ctx) }
    }

    /// Sends updates under `peer`'s lock stripes as one message: the target takes every
    /// stripe word of `stripes` (addresses in its registration `key`, each from free, 0, to
    /// held, 1; all or none), applies `payload` (requests as [`encode_striped`] writes
    /// them, in order), releases the stripes (Release) and answers: 8 bytes into `result`,
    /// 0 when it took the stripes and applied the payload, else 1 (a stripe was held:
    /// nothing applied), then `result_len` bytes, the fetching requests' previous values.
    /// A target never waits for a stripe: its progress serves the stripes' holders too.
    ///
    /// # Safety
    /// As for [`Wire::post`]: `result` (`8 + result_len` bytes) and `ctx` stay valid until
    /// the operation is marked complete, or until this returns an error.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn post_striped(
        &self,
        peer: u64,
        key: u64,
        stripes: &[u64],
        payload: &[u8],
        result: *mut u8,
        result_len: usize,
        ctx: *mut c_void,
    ) -> Result<()> {
        if stripes.is_empty()
            || stripes.len() > STRIPED_WORDS_MAX
            || result_len > STRIPED_ANSWER_MAX
        {
            return Err(Error::InvalidArgument(format!(
                "an update under {} lock stripes answered with {result_len} bytes",
                stripes.len()
            )));
        }
        let request = Request {
            kind: Kind::Striped,
            op: Op::Replace,
            ty: ElemType::U64,
            count: stripes.len(),
            key,
            addr: result_len as u64,
        };
        let words: Vec<u8> = stripes.iter().flat_map(|a| a.to_le_bytes()).collect();
        // SAFETY: the caller's contract.
        unsafe {
            self.post_carrying(
                peer,
                &request,
                &words,
                0,
                payload,
                (result, 8 + result_len),
                ctx,
            )
        }
    }

    /// Sends `request` with `operand` in its header (its flag byte `flag`) and `payload`
    /// after it, as one message whose answer writes `answer.1` bytes to `answer.0` and
    /// marks `ctx`: what [`Wire::post_epoch`] and [`Wire::post_striped`] send.
    ///
    /// # Safety
    /// As for [`Wire::post`]: the answer's buffer and `ctx` stay valid until the operation
    /// is marked complete, or until this returns an error.
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_carrying(
        &self,
        peer: u64,
        request: &Request,
        operand: &[u8],
        flag: u8,
        payload: &[u8],
        (result, len): (*mut u8, usize),
        ctx: *mut c_void,
    ) -> Result<()> {
        self.with_link(peer, |link, state| {
            if state.broken {
                return Err(lost(
                    "the connection to the target's process is gone".into(),
                ));
            }
            state.issued += 1;
            state.pending.push_back(Pending {
                ctx,
                result,
                len,
                read: true,
                ping: false,
            });
            if state.closed_at.is_some() {
                // As in `post`: pending, unsent, failed with the link's others.
                return Ok(());
            }
            let start = state.out.len();
            encode_any(&mut state.out, request, operand, &[]);
            state.out[start + 7] = flag;
            state.out.extend_from_slice(payload);
            let body = (state.out.len() - start - 4) as u32;
            state.out[start..start + 4].copy_from_slice(&body.to_le_bytes());
            self.send(link, state);
            Ok(())
        })
    }

    /// [`Wire::post_striped`] of `payload` under the stripe words `stripes` (one peer and
    /// registration), with `post` sending it (the peer, the registration, the words'
    /// addresses, the answer's buffer and its length beyond the first 8 bytes) and
    /// `wait` waiting for its answer: `Fabric::striped_waited` for both networks.
    pub(crate) fn striped_waited(
        stripes: &[Remote],
        result: &mut [u8],
        post: impl FnOnce(u64, u64, &[u64], *mut u8, usize) -> Result<()>,
        wait: impl FnOnce() -> Result<()>,
    ) -> Result<bool> {
        let Some(first) = stripes.first() else {
            return Err(Error::InvalidArgument(
                "an update under no lock stripe".into(),
            ));
        };
        if stripes
            .iter()
            .any(|s| s.peer != first.peer || s.key != first.key)
        {
            return Err(Error::InvalidArgument(
                "lock stripes of one update on two peers or registrations".into(),
            ));
        }
        let addrs: Vec<u64> = stripes.iter().map(|s| s.addr).collect();
        let mut answer = vec![0u8; 8 + result.len()];
        post(
            first.peer,
            first.key,
            &addrs,
            answer.as_mut_ptr(),
            result.len(),
        )?;
        wait()?;
        let (taken, values) = answer.split_at(8);
        if taken != [0u8; 8] {
            return Ok(false);
        }
        result.copy_from_slice(values);
        Ok(true)
    }

    /// A delivery as the network's callers ask for it ([`Network::deliver`]): posted as one
    /// message ([`Wire::post_deliver`]) when one message can carry it — the flag on the
    /// block's peer, the block at most [`DELIVER_MAX`] bytes — else not posted (`false`:
    /// the caller sends block and flag as operations of their own). A gate whose word or
    /// place is on another peer than the block is not carried ([`Gate::on`]).
    ///
    /// [`Network::deliver`]: crate::transport::network::Network::deliver
    pub(crate) fn deliver(
        &self,
        block: &[u8],
        to: Remote,
        words: &[u64],
        flag: Remote,
        gate: Option<DeliverGate<'_>>,
    ) -> Result<bool> {
        if flag.peer != to.peer || block.len() > DELIVER_MAX {
            return Ok(false);
        }
        let gate = gate.and_then(|g| Gate::on(to.peer, g));
        let flag = FlagWords::stored((flag.key, flag.addr), words);
        self.post_deliver(
            to.peer,
            (to.key, to.addr),
            block,
            flag,
            gate,
            Ack::WithReply,
        )?;
        Ok(true)
    }

    /// Adds `value` (wrapping, Release) to the word at `at` in one message nobody answers,
    /// applied after everything this process posted to that peer before: a counter's
    /// increment whose sender learns of its arrival only from what the peer does next (a
    /// PSCW `post` or `complete`), or a lock's release. With `ack` [`Ack::AtOnce`] the
    /// peer acknowledges the message to TCP as soon as it read it (see [`Ack`]).
    pub(crate) fn add_unanswered(&self, value: u64, at: Remote, ack: Ack) -> Result<()> {
        let flag = FlagWords {
            at: (at.key, at.addr),
            words: &[value],
            added: true,
        };
        self.post_deliver(at.peer, (at.key, at.addr), &[], flag, None, ack)
    }

    /// Sends `block` to `peer`, to be written at `to` (registration key, address), and then
    /// `flag.words` to be stored at `flag.at` (key, address of the first, 8-byte aligned;
    /// added instead with `flag.added`, which carries no block and no gate), each with
    /// Release order — one message that nobody answers: its receiver learns of the
    /// block from the flag, its sender of its delivery only from the receiver. It goes out
    /// from the caller's slices as far as the kernel takes them, and only the rest is
    /// copied: `block` is free when this returns. Messages to one peer land in the order
    /// they were posted, behind the atomics posted before them.
    ///
    /// With a `gate`, the receiver writes the block to the gate's place instead, and stores
    /// the gate's words, when the gate's word holds at least its value as the block
    /// arrives (and that place is registered there).
    ///
    /// The receiver writes the block with plain copies: the caller's protocol hands those
    /// bytes (both places, with a gate) to this message alone — nobody reads or writes
    /// them until the flag says where it landed. A receiver that cannot place the block or
    /// the flag drops the message and counts it ([`Wire::refused`]).
    fn post_deliver(
        &self,
        peer: u64,
        to: (u64, u64),
        block: &[u8],
        flag: FlagWords<'_>,
        gate: Option<Gate<'_>>,
        ack: Ack,
    ) -> Result<()> {
        let words = flag.words;
        if block.len() > DELIVER_MAX
            || words.is_empty()
            || words.len() > u8::MAX as usize
            || gate.is_some_and(|g| g.words.len() != words.len())
            || flag.added && (gate.is_some() || !block.is_empty())
        {
            return Err(Error::InvalidArgument(format!(
                "a delivery of {} bytes and {} flag words",
                block.len(),
                words.len()
            )));
        }
        let gated = gate.map_or(0, |_| 40 + 8 * words.len());
        let fixed = REQUEST_HEADER + 16 + 8 * words.len() + gated;
        let mut head = Vec::with_capacity(4 + fixed);
        head.extend_from_slice(&((fixed + block.len()) as u32).to_le_bytes());
        let flags = match (gate.is_some(), flag.added) {
            (true, _) => GATED,
            (false, true) => ADDED,
            (false, false) => 0,
        } | match ack {
            Ack::AtOnce => ACK_AT_ONCE,
            Ack::WithReply => 0,
        };
        head.extend_from_slice(&[Kind::Deliver as u8, flags, 0, words.len() as u8]);
        head.extend_from_slice(&(block.len() as u32).to_le_bytes());
        let mut fields = vec![to.0, to.1, flag.at.0, flag.at.1];
        fields.extend_from_slice(words);
        if let Some(g) = gate {
            fields.extend_from_slice(&[g.word.0, g.word.1, g.at_least, g.to.0, g.to.1]);
            fields.extend_from_slice(g.words);
        }
        for v in fields {
            head.extend_from_slice(&v.to_le_bytes());
        }
        self.with_link(peer, |link, state| {
            if state.broken
                || state.closed_at.is_some()
                || !self.send_slices(link, state, &head, block)
            {
                return Err(lost(
                    "the connection to the target's process is gone".into(),
                ));
            }
            Ok(())
        })
    }

    /// Deliveries this process received and could not place (a registration unknown or
    /// too short): their flags were not stored.
    #[cfg(test)]
    pub(crate) fn refused(&self) -> u64 {
        // Relaxed: a statistic.
        self.refused.load(Ordering::Relaxed)
    }

    /// Runs `post` on the link our requests to `peer` go on, its state locked: never on
    /// one a move retired after `link_to` returned it (the move's ping went out on it).
    fn with_link<R>(
        &self,
        peer: u64,
        post: impl FnOnce(&Arc<Link>, &mut LinkState) -> Result<R>,
    ) -> Result<R> {
        loop {
            let link = self.link_to(peer)?;
            let mut state = lock(&link.state);
            if state.retired {
                // `link_to` completes the move (or waits for the thread that does).
                continue;
            }
            return post(&link, &mut state);
        }
    }

    /// The link our requests to `peer` go on: ours or the peer's connection, connected
    /// now if there is none yet.
    fn link_to(&self, peer: u64) -> Result<Arc<Link>> {
        let mut looked = false;
        loop {
            let found = read(&self.targets).get(&peer).cloned();
            if let Some(link) = found {
                // Relaxed: set once with `move_to`, which is read under the state lock.
                if !link.moving.load(Ordering::Relaxed) {
                    return Ok(link);
                }
                let to = lock(&link.state).move_to.clone();
                match to {
                    Some(to) => self.move_requests(peer, &link, &to),
                    None => return Ok(link),
                }
                continue;
            }
            if looked {
                break;
            }
            // The peer may have connected to us already: its hello names it.
            looked = true;
            // A failure it reports is another operation's, reported by its own flush.
            let _ = self.progress();
        }
        self.connect_to(peer)
    }

    /// Connects to `peer`: the link our requests to it go on from now — unless one is
    /// known meanwhile (a second thread's, or the peer's connection): that one stays, and
    /// ours carries the peer's requests only.
    fn connect_to(&self, peer: u64) -> Result<Arc<Link>> {
        let at = *read(&self.peers)
            .get(&peer)
            .ok_or_else(|| lost("no atomics address for this peer".into()))?;
        // Connected outside the map's lock (a connection may take a while).
        let stream = TcpStream::connect_timeout(&at, CONNECT_PATIENCE)
            .map_err(|e| lost(format!("connecting to {at}: {e}")))?;
        let link = self.adopt(stream, false)?;
        let mut targets = write(&self.targets);
        let route = Arc::clone(targets.entry(peer).or_insert_with(|| Arc::clone(&link)));
        if route.accepted && self.address < at {
            // Crossed: the peer's hello came first and its connection took our requests,
            // but ours is the one that carries both ways (the lower address's), and the
            // peer moves its requests to it: ours follow (`move_requests`), else both
            // connections carried at both ends and neither end could read one directly.
            lock(&route.state).move_to = Some(link);
            // Relaxed: as in `offer`.
            route.moving.store(true, Ordering::Relaxed);
        }
        Ok(route)
    }

    /// Moves our requests to `peer` from `old` to `to`, the connection of the lower
    /// address (both processes connected at once: the peer's when its address is the
    /// lower, ours when the peer's took our requests first): a ping goes out on
    /// `old`, and once it is answered — everything sent on `old` before it was applied —
    /// `to` carries them. Posts meanwhile wait ([`Wire::with_link`]), for at most
    /// [`MOVE_PATIENCE`]: then the move is given up. Once per pair of processes at most.
    fn move_requests(&self, peer: u64, old: &Arc<Link>, to: &Arc<Link>) {
        {
            let mut state = lock(&old.state);
            if !state.retired && !state.broken && state.closed_at.is_none() {
                state.retired = true;
                state.issued += 1;
                state.pending.push_back(Pending::ping());
                self.send_bare(old, &mut state, Kind::Ping);
            }
        }
        let give_up = std::time::Instant::now() + MOVE_PATIENCE;
        loop {
            {
                let state = lock(&old.state);
                if state.pending.is_empty() || state.broken {
                    break;
                }
            }
            // As in `link_to`: failures are the operations' own to report.
            let _ = self.progress();
            if std::time::Instant::now() > give_up {
                // A peer that serves nothing for now: our requests stay on our connection
                // (behind the ping, whose answer is dropped when it comes), for good.
                let mut state = lock(&old.state);
                state.retired = false;
                state.move_to = None;
                // Relaxed: as where it is set.
                old.moving.store(false, Ordering::Relaxed);
                return;
            }
            std::thread::yield_now();
        }
        {
            let mut targets = write(&self.targets);
            if !targets.get(&peer).is_some_and(|l| Arc::ptr_eq(l, old)) {
                return;
            }
            lock(&to.state).ours = true;
            targets.insert(peer, Arc::clone(to));
        }
        // Our requests no longer go on `old`: the peer is told, and answers whether its own
        // do (`retire`) — unless it told us first, while we still sent on it: then it is
        // quiet at both ends now.
        self.tell_retired(old);
        if lock(&old.state).peer_retired {
            // Relaxed: a hint (see `Link::quiet`).
            old.quiet.store(true, Ordering::Relaxed);
        }
    }

    /// Sends [`Kind::Retired`] on `link` (once).
    fn tell_retired(&self, link: &Link) {
        let mut state = lock(&link.state);
        if state.told_retired || state.broken || state.closed_at.is_some() {
            return;
        }
        state.told_retired = true;
        self.send_bare(link, &mut state, Kind::Retired);
    }

    /// Sends a message of `kind` that is its header alone (no address, no operands).
    fn send_bare(&self, link: &Link, state: &mut LinkState, kind: Kind) {
        let start = state.out.len();
        state
            .out
            .extend_from_slice(&(REQUEST_HEADER as u32).to_le_bytes());
        state.out.resize(start + 4 + REQUEST_HEADER, 0);
        state.out[start + 4] = kind as u8;
        self.send(link, state);
    }

    /// The peer said its requests do not go on `link` ([`Kind::Retired`]). Where ours do
    /// not either, nothing but the link's end is to come on it: it is quiet here, and the
    /// peer is told the same (unless we told it first), which makes it quiet there. Where
    /// ours still go on it, it becomes quiet when they move ([`Wire::move_requests`]: the
    /// lower address took the peer's connection from its hello before its own was up).
    fn retire(&self, link: &Arc<Link>) {
        lock(&link.state).peer_retired = true;
        if read(&self.targets).values().any(|l| Arc::ptr_eq(l, link)) {
            // Ours still go on it: quiet once they move (`move_requests`).
            return;
        }
        // Relaxed: a hint (see `Link::quiet`).
        link.quiet.store(true, Ordering::Relaxed);
        self.tell_retired(link);
    }

    /// Makes `stream` a link (nonblocking, no Nagle delay) and watches it; on a connection
    /// of ours, the hello goes first.
    fn adopt(&self, stream: TcpStream, accepted: bool) -> Result<Arc<Link>> {
        stream
            .set_nodelay(true)
            .map_err(os("setsockopt(TCP_NODELAY)"))?;
        stream
            .set_nonblocking(true)
            .map_err(os("fcntl(O_NONBLOCK)"))?;
        let link = Arc::new(Link {
            stream,
            accepted,
            moving: AtomicBool::new(false),
            quiet: AtomicBool::new(false),
            state: Mutex::default(),
        });
        if !accepted {
            let name = self.address.to_string();
            let mut state = lock(&link.state);
            state
                .out
                .extend_from_slice(&(4 + name.len() as u32).to_le_bytes());
            state.out.extend_from_slice(&[Kind::Hello as u8, 0, 0, 0]);
            state.out.extend_from_slice(name.as_bytes());
            self.send(&link, &mut state);
        }
        let mut links = write(&self.links);
        epoll::add(
            &self.poller,
            &link.stream,
            epoll::EventData::new_u64(links.len() as u64),
            epoll::EventFlags::IN,
        )
        .map_err(|e| Error::Os {
            call: "epoll_ctl",
            source: e.into(),
        })?;
        links.push(Arc::clone(&link));
        Ok(link)
    }

    /// Sends `head` and then `block` on `link`: straight from the slices as far as the
    /// kernel takes them when nothing is queued before them, the rest copied into the
    /// link's queue — `block` is free when this returns. False when the link failed (its
    /// pending operations failed with it).
    fn send_slices(&self, link: &Link, state: &mut LinkState, head: &[u8], block: &[u8]) -> bool {
        let mut taken = 0;
        if state.out.is_empty() {
            let slices = [std::io::IoSlice::new(head), std::io::IoSlice::new(block)];
            loop {
                match rustix::net::sendmsg(
                    &link.stream,
                    &slices,
                    &mut rustix::net::SendAncillaryBuffer::default(),
                    rustix::net::SendFlags::NOSIGNAL,
                ) {
                    Ok(n) => taken = n,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(rustix::io::Errno::AGAIN) => {}
                    Err(_) => {
                        self.fail(state);
                        return false;
                    }
                }
                break;
            }
        }
        if taken < head.len() {
            state.out.extend_from_slice(&head[taken..]);
            state.out.extend_from_slice(block);
        } else if taken < head.len() + block.len() {
            state.out.extend_from_slice(&block[taken - head.len()..]);
        }
        self.send(link, state);
        true
    }

    /// Sends what `state` holds as far as the kernel takes it; the rest waits for a later
    /// progress call.
    fn send(&self, link: &Link, state: &mut LinkState) {
        while state.sent < state.out.len() {
            match (&link.stream).write(&state.out[state.sent..]) {
                Ok(0) => break,
                Ok(n) => state.sent += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.fail(state);
                    return;
                }
            }
        }
        if state.sent == state.out.len() {
            state.out.clear();
            state.sent = 0;
        }
        self.set_backlogged(state, state.sent < state.out.len());
    }

    /// Records whether `state` has bytes waiting for the kernel.
    fn set_backlogged(&self, state: &mut LinkState, backlogged: bool) {
        if state.backlogged != backlogged {
            state.backlogged = backlogged;
            // Relaxed: a hint for progress calls, which then look at every link's state
            // under its lock.
            if backlogged {
                self.backlog.fetch_add(1, Ordering::Relaxed);
            } else {
                self.backlog.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// The link is gone: every atomic waiting on it fails.
    fn fail(&self, state: &mut LinkState) {
        state.broken = true;
        self.set_backlogged(state, false);
        state.out.clear();
        state.sent = 0;
        if !state.pending.is_empty() {
            // Relaxed: see `has_failed`. Only an operation lost makes the endpoint failed:
            // a connection closed with nothing in flight is a peer that left (later posts
            // to it fail).
            self.broken.store(true, Ordering::Relaxed);
        }
        while let Some(p) = state.pending.pop_front() {
            state.finished += 1;
            self.finish(&p, true);
        }
    }

    /// Marks `p` complete and counts it.
    fn finish(&self, p: &Pending, failed: bool) {
        if p.ping {
            return;
        }
        // SAFETY: the context is valid until marked (the posting contract).
        unsafe { (self.complete)(p.ctx, failed) };
        let i = usize::from(p.read);
        // Release, after the mark: a flush that acquires the count may free the context.
        if failed {
            self.failed[i].fetch_add(1, Ordering::Release);
        } else {
            self.done[i].fetch_add(1, Ordering::Release);
        }
    }

    /// Reads what arrived — peers' requests (applied and answered) and answers to ours —
    /// and sends what waits; skipped while another thread does it. An error reports
    /// atomics of ours that failed in this call.
    pub(crate) fn progress(&self) -> Result<()> {
        let Ok(_reading) = self.reading.try_lock() else {
            return Ok(());
        };
        let failed_before =
            self.failed[0].load(Ordering::Relaxed) + self.failed[1].load(Ordering::Relaxed);
        match self.sole_link_between_looks() {
            Some(link) => self.receive(&link),
            None => self.look()?,
        }
        // Relaxed: a hint (see `receive`).
        if self.closing_count.load(Ordering::Relaxed) > 0 {
            self.fail_lost();
        }
        // Relaxed: a hint (see `send`).
        if self.backlog.load(Ordering::Relaxed) > 0 {
            let links: Vec<Arc<Link>> = read(&self.links).clone();
            for link in links {
                let mut state = lock(&link.state);
                if state.backlogged {
                    self.send(&link, &mut state);
                }
            }
        }
        let failed_now =
            self.failed[0].load(Ordering::Relaxed) + self.failed[1].load(Ordering::Relaxed);
        if failed_now > failed_before {
            return Err(lost(format!(
                "{} atomics failed: the target's process is gone",
                failed_now - failed_before
            )));
        }
        Ok(())
    }

    /// The wire's one link that carries messages (the others quiet: [`Link::quiet`]), when
    /// it has exactly one and this poll is not one of every [`LOOK_EVERY`] that look
    /// through the poller: that link is then read directly, one system call where the
    /// poller's look and the read are two on every message. The looks between accept new
    /// connections, tell of the owner's descriptor and read the quiet links' ends.
    fn sole_link_between_looks(&self) -> Option<Arc<Link>> {
        // Relaxed: a poll count, read by the one reading thread.
        if self.polls.fetch_add(1, Ordering::Relaxed) % LOOK_EVERY == 0 {
            return None;
        }
        let links = read(&self.links);
        // Relaxed: a hint (see `Link::quiet`).
        let mut carrying = links.iter().filter(|l| !l.quiet.load(Ordering::Relaxed));
        match (carrying.next(), carrying.next()) {
            (Some(only), None) => Some(Arc::clone(only)),
            _ => None,
        }
    }

    /// Asks the poller which sockets are readable and reads them: accepts connections,
    /// notes the owner's descriptor, receives on links.
    fn look(&self) -> Result<()> {
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); 32];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let (ready, _) = match epoll::wait(&self.poller, &mut events, Some(&zero)) {
            Ok(r) => r,
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => {
                return Err(Error::Os {
                    call: "epoll_wait",
                    source: e.into(),
                })
            }
        };
        for token in ready.iter().map(|e| e.data.u64()) {
            if token == LISTENER {
                self.accept();
                continue;
            }
            if token == ALSO {
                // Relaxed: see take_also_ready.
                self.also_ready.store(true, Ordering::Relaxed);
                continue;
            }
            let link = read(&self.links).get(token as usize).cloned();
            if let Some(link) = link {
                self.receive(&link);
            }
        }
        Ok(())
    }

    /// Accepts the connections peers opened to us.
    fn accept(&self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    // A link we cannot watch is dropped: the peer's atomics then fail.
                    let _ = self.adopt(stream, true);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// Reads what `link` has, then handles every whole message; the block of a long
    /// delivery is read from the socket straight into its place ([`LAND_MIN`]).
    fn receive(&self, link: &Arc<Link>) {
        let mut state = lock(&link.state);
        if state.broken {
            return;
        }
        let mut closed = false;
        let mut hello: Option<SocketAddr> = None;
        let mut retired = false;
        let mut input = std::mem::take(&mut state.input);
        let mut filled = state.filled;
        // The last message read asks for its acknowledgement at once ([`Ack::AtOnce`]).
        let mut ack_at_once = false;
        loop {
            if state.landing.is_some() {
                match self.land(link, &mut state) {
                    Landed::Done => {}
                    Landed::Blocked => break,
                    Landed::Closed => {
                        closed = true;
                        break;
                    }
                }
            }
            // One read, into all the room there is and more than the rest of the message
            // in front (a read that fills its room leaves the kernel holding more) — but for
            // a long delivery whose header is not all here yet: its block stays in the
            // socket for `land`.
            let (first, need) = match filled >= 4 {
                true => {
                    let word = u32::from_le_bytes(input[..4].try_into().expect("4 bytes"));
                    (word, 4 + (word & !ANSWER) as usize)
                }
                false => (0, 0),
            };
            let landable = first & ANSWER == 0
                && filled > 4
                && (input[4] == Kind::Deliver as u8 || input[4] == Kind::Put as u8);
            let room = match landable && need > LAND_MIN {
                true => READ_ROOM,
                false => (need.saturating_sub(filled) + READ_ROOM).max(input.len() - filled),
            };
            if input.len() < filled + room {
                input.resize(filled + room, 0);
            }
            let drained = match (&link.stream).read(&mut input[filled..filled + room]) {
                Ok(0) => {
                    closed = true;
                    true
                }
                Ok(n) => {
                    filled += n;
                    n < room
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => false,
                Err(e) if e.kind() == ErrorKind::WouldBlock => true,
                Err(_) => {
                    closed = true;
                    true
                }
            };
            let mut at = 0;
            let mut landing = false;
            while filled - at >= 4 {
                let word = u32::from_le_bytes(input[at..at + 4].try_into().expect("4 bytes"));
                let answered = word & ANSWER != 0;
                let body = (word & !ANSWER) as usize;
                if filled - at - 4 < body {
                    if !answered {
                        if let Some(l) = self.start_landing(&input[at + 4..filled], body) {
                            state.landing = Some(l);
                            at = filled;
                            landing = true;
                        }
                    }
                    break;
                }
                let message = &input[at + 4..at + 4 + body];
                at += 4 + body;
                let delivery = !answered && message.first() == Some(&(Kind::Deliver as u8));
                ack_at_once = delivery && message.get(1).is_some_and(|f| f & ACK_AT_ONCE != 0);
                if delivery {
                    self.apply_delivery(message);
                } else if !answered && message.first() == Some(&(Kind::Retired as u8)) {
                    retired = true;
                } else if !answered && message.first() == Some(&(Kind::Hello as u8)) {
                    hello = std::str::from_utf8(&message[4.min(message.len())..])
                        .ok()
                        .and_then(|a| a.parse().ok());
                } else if !answered {
                    let mut answer = std::mem::take(&mut state.out);
                    let start = answer.len();
                    answer.extend_from_slice(&[0u8; 8]);
                    let status = match message.first() {
                        Some(&k) if k == Kind::Ping as u8 => OK,
                        _ => self.apply(message, &mut answer),
                    };
                    let len = (answer.len() - start - 4) as u32;
                    answer[start..start + 4].copy_from_slice(&(len | ANSWER).to_le_bytes());
                    answer[start + 4] = status;
                    state.out = answer;
                } else if let Some(p) = state.pending.pop_front() {
                    state.finished += 1;
                    // An answer: status, three bytes of padding, the previous values.
                    let ok = message.first() == Some(&OK) && message.len() == 4 + p.len;
                    if ok && p.len > 0 {
                        // SAFETY: the result buffer holds `len` bytes until the operation is
                        // marked (the posting contract).
                        unsafe {
                            std::ptr::copy_nonoverlapping(message[4..].as_ptr(), p.result, p.len)
                        };
                    }
                    self.finish(&p, !ok);
                    if !ok {
                        // Relaxed: see `has_failed`.
                        self.broken.store(true, Ordering::Relaxed);
                    }
                }
            }
            // What is left of a message moves to the front.
            input.copy_within(at..filled, 0);
            filled -= at;
            if closed || (drained && !landing) {
                break;
            }
        }
        state.filled = filled;
        if state.filled == 0 && input.len() > INPUT_KEPT {
            // A burst of long messages is over: the room shrinks back.
            input = Vec::new();
        }
        state.input = input;
        if ack_at_once && !closed && state.out.is_empty() {
            acknowledge_now(&link.stream);
        }
        if !state.out.is_empty() {
            self.send(link, &mut state);
        }
        if closed && state.closed_at.is_none() {
            // Nothing more goes out on it. A target's link still takes posts for
            // LOST_AFTER, even idle: an atomic posted meanwhile (the process has not learnt
            // of the exit yet) waits too, so that the roster's `PeerGone` comes first.
            self.set_backlogged(&mut state, false);
            state.out.clear();
            state.sent = 0;
            if link.accepted && !state.ours {
                state.broken = true;
            } else {
                state.closed_at = Some(std::time::Instant::now());
                lock(&self.closing).push(Arc::clone(link));
                // Relaxed: a hint for progress calls (the list is under its lock).
                self.closing_count.fetch_add(1, Ordering::Relaxed);
            }
            // The peer is gone: stop watching its socket (else it stays readable).
            let _ = epoll::delete(&self.poller, &link.stream);
        }
        drop(state);
        if let Some(at) = hello {
            self.name_link(link, at);
        }
        // Outside the link's lock: `retire` reads the routes, whose writers lock links
        // after them.
        if retired {
            self.retire(link);
        }
    }

    /// Fails the atomics of links closed [`LOST_AFTER`] ago.
    fn fail_lost(&self) {
        let mut closing = lock(&self.closing);
        closing.retain(|link| {
            let mut state = lock(&link.state);
            if state.closed_at.is_some_and(|t| t.elapsed() < LOST_AFTER) {
                return true;
            }
            self.fail(&mut state);
            // Relaxed: see above.
            self.closing_count.fetch_sub(1, Ordering::Relaxed);
            false
        });
    }

    /// Applies one request and appends the previous values to `answer`: its status.
    fn apply(&self, message: &[u8], answer: &mut Vec<u8>) -> u8 {
        if message.len() < REQUEST_HEADER {
            return BAD_REQUEST;
        }
        let kind = match message[0] {
            0 => Kind::Write,
            1 => Kind::Fetch,
            2 => Kind::Compare,
            3 => return self.apply_epoch(message, answer),
            5 => Kind::Read,
            6 | 7 => return self.apply_copy(message, answer),
            8 => return self.apply_striped(message, answer),
            _ => return BAD_REQUEST,
        };
        self.apply_elements(kind, message, answer, false)
    }

    /// Applies a request of `kind` on elements (an update, a fetch, a compare or a read),
    /// appending the previous values to `answer`: its status. Element types no CPU atomic
    /// updates only `under_stripes` (inside a [`Kind::Striped`] request: their stripes
    /// held), with plain reads and writes.
    fn apply_elements(
        &self,
        kind: Kind,
        message: &[u8],
        answer: &mut Vec<u8>,
        under_stripes: bool,
    ) -> u8 {
        let (Some(&op), Some((ty, atomic))) =
            (Op::ALL.get(usize::from(message[1])), type_of(message[2]))
        else {
            return BAD_REQUEST;
        };
        if !atomic && (!under_stripes || kind == Kind::Compare) {
            return BAD_REQUEST;
        }
        let count = u32::from_le_bytes(message[4..8].try_into().expect("4 bytes")) as usize;
        let key = u64::from_le_bytes(message[8..16].try_into().expect("8 bytes"));
        let addr = u64::from_le_bytes(message[16..24].try_into().expect("8 bytes"));
        let bytes = count * ty.size();
        let operands = &message[REQUEST_HEADER..];
        let want = match kind {
            Kind::Compare => 2 * bytes,
            Kind::Read => 0,
            _ => bytes,
        };
        if operands.len() != want {
            return BAD_REQUEST;
        }
        // A read has neither.
        let (operand, compare) = operands.split_at(bytes.min(operands.len()));
        // Held while the atomic is applied: a registration removed meanwhile waits.
        let regions = read(&self.regions);
        let target = match place(&regions, key, addr, bytes) {
            Ok(p) => p as *mut u8,
            Err(status) => return status,
        };
        let apply = Apply {
            kind,
            op,
            target,
            count,
            operand,
            compare,
        };
        if !atomic {
            // SAFETY: registered memory, valid while the read lock holds the registration;
            // its elements' lock stripes are held (the caller's), so no other update of
            // them runs meanwhile.
            crate::with_elem_type!(ty, E => unsafe { apply.run_plain::<E>(answer) });
            return OK;
        }
        // SAFETY: the region is registered memory, valid while registered (the read lock
        // holds it), which peers may change at any time: accessed with atomics only.
        unsafe {
            match ty {
                ElemType::I8 => apply.run::<i8>(answer),
                ElemType::U8 => apply.run::<u8>(answer),
                ElemType::I16 => apply.run::<i16>(answer),
                ElemType::U16 => apply.run::<u16>(answer),
                ElemType::I32 => apply.run::<i32>(answer),
                ElemType::U32 => apply.run::<u32>(answer),
                ElemType::I64 => apply.run::<i64>(answer),
                ElemType::U64 => apply.run::<u64>(answer),
                ElemType::F32 => apply.run::<f32>(answer),
                ElemType::F64 => apply.run::<f64>(answer),
                _ => return BAD_REQUEST,
            }
        }
        OK
    }

    /// Applies a [`Kind::Put`] or [`Kind::Get`] request: `count` bytes copied to or from
    /// their place (a get's appended to `answer`).
    fn apply_copy(&self, message: &[u8], answer: &mut Vec<u8>) -> u8 {
        let put = message[0] == Kind::Put as u8;
        let count = u32::from_le_bytes(message[4..8].try_into().expect("4 bytes")) as usize;
        let key = u64::from_le_bytes(message[8..16].try_into().expect("8 bytes"));
        let addr = u64::from_le_bytes(message[16..24].try_into().expect("8 bytes"));
        let operand = &message[REQUEST_HEADER..];
        if operand.len() != if put { count } else { 0 } {
            return BAD_REQUEST;
        }
        // Held while the bytes are copied: a registration removed meanwhile waits.
        let regions = read(&self.regions);
        let at = match place(&regions, key, addr, count) {
            Ok(p) => p as *mut u8,
            Err(status) => return status,
        };
        if put {
            // SAFETY: `count` bytes of registered memory, valid while registered (the read
            // lock holds it); window memory is only accessed through raw pointers, and MPI
            // leaves the outcome of conflicting accesses undefined, not the program.
            unsafe { crate::transport::shm::copy_bytes(operand.as_ptr(), at, count) };
        } else {
            let start = answer.len();
            answer.resize(start + count, 0);
            // SAFETY: as for a put; the answer has room for `count` bytes.
            unsafe { crate::transport::shm::copy_bytes(at, answer[start..].as_mut_ptr(), count) };
        }
        OK
    }

    /// Applies a [`Kind::Epoch`] request ([`Wire::post_epoch`]): appends the lock word's
    /// previous value to `answer`; its status is the worst of the carried requests'.
    fn apply_epoch(&self, message: &[u8], answer: &mut Vec<u8>) -> u8 {
        // Header, then the new value and the expected one (u64 each), then the payload.
        if message.len() < REQUEST_HEADER + 16 {
            return BAD_REQUEST;
        }
        let held = message[3] & HELD != 0;
        let key = u64::from_le_bytes(message[8..16].try_into().expect("8 bytes"));
        let addr = u64::from_le_bytes(message[16..24].try_into().expect("8 bytes"));
        let new = u64::from_le_bytes(message[24..32].try_into().expect("8 bytes"));
        let expected = u64::from_le_bytes(message[32..40].try_into().expect("8 bytes"));
        let payload = &message[REQUEST_HEADER + 16..];
        let word = match place(&read(&self.regions), key, addr, 8) {
            Ok(p) if p % 8 == 0 => p as *const AtomicU64,
            Ok(_) => return BAD_REQUEST,
            Err(status) => return status,
        };
        // SAFETY: an aligned word of a registered region (a window's control words, which
        // live as long as the window: an origin sends epochs only inside one, and the
        // segment is unregistered after every rank freed it), accessed atomically only.
        let word = unsafe { &*word };
        let before = if held {
            expected
        } else {
            // Acquire: the previous holder's updates (released by its unlock) come first.
            match word.compare_exchange(expected, new, Ordering::Acquire, Ordering::Relaxed) {
                Ok(v) | Err(v) => v,
            }
        };
        answer.extend_from_slice(&before.to_le_bytes());
        if before != expected {
            return OK;
        }
        let mut status = OK;
        let mut at = 0;
        let mut scratch = Vec::new();
        while at < payload.len() {
            let Some(len) = payload
                .get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
                .filter(|&len| payload.len() - at - 4 >= len)
            else {
                status = BAD_REQUEST;
                break;
            };
            let request = &payload[at + 4..at + 4 + len];
            at += 4 + len;
            // Only updates: their answers would have nowhere to go.
            let s = if request.first() == Some(&(Kind::Write as u8)) {
                scratch.clear();
                self.apply(request, &mut scratch)
            } else {
                BAD_REQUEST
            };
            status = status.max(s);
        }
        // Release: the epoch's updates are visible to the lock's next holder (its Acquire).
        word.fetch_sub(new, Ordering::Release);
        status
    }

    /// Applies a [`Kind::Striped`] request ([`Wire::post_striped`]): takes its stripe words
    /// without waiting (all or none), applies its requests, releases the words; appends 0
    /// and the previous values to `answer` — or 1 and as many zero bytes when a stripe was
    /// held. Its status is the worst of the carried requests'.
    fn apply_striped(&self, message: &[u8], answer: &mut Vec<u8>) -> u8 {
        let n = u32::from_le_bytes(message[4..8].try_into().expect("4 bytes")) as usize;
        let key = u64::from_le_bytes(message[8..16].try_into().expect("8 bytes"));
        let result_len = u64::from_le_bytes(message[16..24].try_into().expect("8 bytes"));
        if n == 0
            || n > STRIPED_WORDS_MAX
            || result_len > STRIPED_ANSWER_MAX as u64
            || message.len() < REQUEST_HEADER + 8 * n
        {
            return BAD_REQUEST;
        }
        let (addrs, payload) = message[REQUEST_HEADER..].split_at(8 * n);
        let mut words: Vec<&AtomicU64> = Vec::with_capacity(n);
        {
            let regions = read(&self.regions);
            for addr in addrs.chunks_exact(8) {
                let addr = u64::from_le_bytes(addr.try_into().expect("8 bytes"));
                match place(&regions, key, addr, 8) {
                    // SAFETY: an aligned word of a registered region: a window's control
                    // words, which live as long as the window (an origin sends these only
                    // inside an epoch of it; the segment is unregistered after every rank
                    // freed it), accessed atomically only.
                    Ok(p) if p % 8 == 0 => words.push(unsafe { &*(p as *const AtomicU64) }),
                    Ok(_) => return BAD_REQUEST,
                    Err(status) => return status,
                }
            }
        }
        // Acquire: the previous holder's element updates come first. The target never
        // waits for a stripe: a holder on another node may need this very progress to
        // finish and release it.
        let taken = words
            .iter()
            .take_while(|w| {
                w.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            })
            .count();
        if taken < words.len() {
            for w in &words[..taken] {
                // Relaxed: nothing was done under it.
                w.store(0, Ordering::Relaxed);
            }
            answer.extend_from_slice(&1u64.to_le_bytes());
            answer.resize(answer.len() + result_len as usize, 0);
            return OK;
        }
        answer.extend_from_slice(&0u64.to_le_bytes());
        let mut status = OK;
        let mut at = 0;
        while at < payload.len() {
            let Some(len) = payload
                .get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
                .filter(|&len| payload.len() - at - 4 >= len && len >= REQUEST_HEADER)
            else {
                status = BAD_REQUEST;
                break;
            };
            let request = &payload[at + 4..at + 4 + len];
            at += 4 + len;
            let kind = match request[0] {
                0 => Kind::Write,
                1 => Kind::Fetch,
                5 => Kind::Read,
                _ => {
                    status = BAD_REQUEST;
                    continue;
                }
            };
            status = status.max(self.apply_elements(kind, request, answer, true));
        }
        for w in &words {
            // Release: the updates made under the stripes are visible to their next holder.
            w.store(0, Ordering::Release);
        }
        status
    }
}

impl Wire {
    /// Places a [`Kind::Deliver`] message ([`Wire::post_deliver`]): the block, then the
    /// flag words; nothing of it when either part has no place here.
    fn apply_delivery(&self, message: &[u8]) {
        let status = self.place_delivery(message);
        self.count_refusal(status);
    }

    /// Counts and tells a delivery that had no place here (`status` not [`OK`]).
    fn count_refusal(&self, status: u8) {
        if status != OK {
            // Relaxed: a statistic.
            self.refused.fetch_add(1, Ordering::Relaxed);
            // Its receiver waits for a flag that never comes: the event says why.
            crate::diag::event!(
                target: "onesided::net",
                status,
                "a delivery from a peer had no place here (1: unknown registration, 2: out of its range, 3: malformed)"
            );
        }
    }

    fn place_delivery(&self, message: &[u8]) -> u8 {
        let header = match parse_delivery(message) {
            Some(Ok(h)) if message.len() == h.block_at + h.count => h,
            Some(Err(status)) => return status,
            _ => return BAD_REQUEST,
        };
        // Held while the delivery is placed: a registration removed meanwhile waits.
        let regions = read(&self.regions);
        let (to, words) = match header.destination(&regions) {
            Ok(d) => d,
            Err(status) => return status,
        };
        let Ok(block) = place(&regions, to.0, to.1, header.count) else {
            return OUT_OF_RANGE;
        };
        // SAFETY: `count` bytes of a registered region (valid while the read lock holds
        // it), which the sender's protocol hands to this message alone (`post_deliver`'s
        // contract): no other access while it lands.
        unsafe {
            std::ptr::copy_nonoverlapping(
                message[header.block_at..].as_ptr(),
                block as *mut u8,
                header.count,
            )
        };
        drop(regions);
        self.apply_words(header.flag, &words, header.added)
    }
}

impl Wire {
    /// Starts reading a long delivery's block into its place, given the first bytes of its
    /// message (`body` bytes in all): `None` when it is not one, or when its header is not
    /// all here yet. The block's bytes already here are copied into place.
    fn start_landing(&self, have: &[u8], body: usize) -> Option<Landing> {
        if body < LAND_MIN {
            return None;
        }
        if have.first() == Some(&(Kind::Put as u8)) {
            return self.start_put_landing(have, body);
        }
        if have.first() != Some(&(Kind::Deliver as u8)) {
            return None;
        }
        let header = match parse_delivery(have)? {
            Ok(h) if body == h.block_at + h.count => h,
            // Malformed: its bytes are dropped as far as its length says.
            _ => {
                return Some(Landing {
                    key: 0,
                    addr: 0,
                    left: body - have.len(),
                    flag: (0, 0),
                    words: Vec::new(),
                    status: BAD_REQUEST,
                    answered: false,
                })
            }
        };
        let regions = read(&self.regions);
        let (status, to, words) = match header.destination(&regions) {
            Ok((to, words)) => (OK, to, words),
            Err(status) => (status, (0, 0), Vec::new()),
        };
        let mut landing = Landing {
            key: to.0,
            addr: to.1,
            left: header.count,
            flag: header.flag,
            words,
            status,
            answered: false,
        };
        let here = &have[header.block_at..];
        if landing.status == OK {
            match place(&regions, to.0, to.1, header.count) {
                // SAFETY: inside the block's place, which the sender's protocol hands to
                // this message alone (`post_deliver`'s contract).
                Ok(at) => unsafe {
                    std::ptr::copy_nonoverlapping(here.as_ptr(), at as *mut u8, here.len())
                },
                Err(status) => landing.status = status,
            }
        }
        landing.addr += here.len() as u64;
        landing.left -= here.len();
        Some(landing)
    }

    /// [`Wire::start_landing`] of a long [`Kind::Put`] (`body` bytes: its header, then the
    /// bytes to write): `None` until its header is here.
    fn start_put_landing(&self, have: &[u8], body: usize) -> Option<Landing> {
        if have.len() < REQUEST_HEADER {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(have[i..i + 8].try_into().expect("8 bytes"));
        let count = u32::from_le_bytes(have[4..8].try_into().expect("4 bytes")) as usize;
        let (key, addr) = (word(8), word(16));
        let here = &have[REQUEST_HEADER..];
        let mut landing = Landing {
            key,
            addr,
            left: body - REQUEST_HEADER,
            flag: (0, 0),
            words: Vec::new(),
            status: OK,
            answered: true,
        };
        if count != body - REQUEST_HEADER {
            // Malformed: its bytes are dropped as far as its length says, and refused.
            landing.status = BAD_REQUEST;
        } else {
            match place(&read(&self.regions), key, addr, count) {
                // SAFETY: `count` bytes of registered memory (a window's, whose outcome under
                // conflicting accesses MPI leaves undefined, as `apply_copy`).
                Ok(at) => unsafe {
                    crate::transport::shm::copy_bytes(here.as_ptr(), at as *mut u8, here.len())
                },
                Err(status) => landing.status = status,
            }
        }
        landing.addr += here.len() as u64;
        landing.left -= here.len();
        Some(landing)
    }

    /// Reads the rest of the landing block from the socket into its place, then stores its
    /// flag words (a long put: answers it).
    fn land(&self, link: &Link, state: &mut LinkState) -> Landed {
        let Some(l) = state.landing.as_mut() else {
            return Landed::Done;
        };
        let mut scratch = [0u8; 4096];
        while l.left > 0 {
            // Placed again for each read: the read lock is held only while one lasts.
            let regions = read(&self.regions);
            let place = match l.status {
                OK => place(&regions, l.key, l.addr, l.left).ok(),
                _ => None,
            };
            let got = match place {
                // SAFETY: `left` bytes of a registered region (valid while the read lock
                // holds it), which the sender's protocol hands to this message alone.
                Some(at) => (&link.stream)
                    .read(unsafe { std::slice::from_raw_parts_mut(at as *mut u8, l.left) }),
                None => {
                    if l.status == OK {
                        // Its registration went away under it.
                        l.status = NO_REGION;
                    }
                    let len = l.left.min(scratch.len());
                    (&link.stream).read(&mut scratch[..len])
                }
            };
            drop(regions);
            match got {
                Ok(0) => return Landed::Closed,
                Ok(n) => {
                    l.left -= n;
                    l.addr += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Landed::Blocked,
                Err(_) => return Landed::Closed,
            }
        }
        if l.answered {
            let status = l.status;
            state.landing = None;
            state.out.extend_from_slice(&(4 | ANSWER).to_le_bytes());
            state.out.extend_from_slice(&[status, 0, 0, 0]);
            return Landed::Done;
        }
        let status = match l.status {
            OK => self.store_words(l.flag, &l.words),
            refused => refused,
        };
        state.landing = None;
        self.count_refusal(status);
        Landed::Done
    }

    /// Stores `words` (Release each) from `flag` (key, address) on: the status.
    fn store_words(&self, flag: (u64, u64), words: &[u64]) -> u8 {
        self.apply_words(flag, words, false)
    }

    /// Stores `words` from `flag` (key, address) on, or adds them (wrapping) to the words
    /// there with `added`, Release each: the status.
    fn apply_words(&self, flag: (u64, u64), words: &[u64], added: bool) -> u8 {
        let regions = read(&self.regions);
        let at = match place(&regions, flag.0, flag.1, 8 * words.len()) {
            Ok(p) if p % 8 == 0 => p as *const AtomicU64,
            Ok(_) => return BAD_REQUEST,
            Err(status) => return status,
        };
        for (i, &v) in words.iter().enumerate() {
            // SAFETY: aligned words of a registered region, accessed atomically only.
            let w = unsafe { &*at.add(i) };
            // Release: the block (and the words before) are visible to whoever acquires
            // this word (or the sum: what the sender did before the addition).
            if added {
                w.fetch_add(v, Ordering::Release);
            } else {
                w.store(v, Ordering::Release);
            }
        }
        OK
    }
}

/// The flag byte of a [`Kind::Deliver`] request: it carries a [`Gate`].
const GATED: u8 = 1;
/// The flag byte of a [`Kind::Deliver`] request: its flag words are added to the words
/// there, not stored ([`Wire::add_unanswered`]; no block, no gate).
const ADDED: u8 = 2;
/// The flag byte of a [`Kind::Deliver`] request: its receiver acknowledges it to TCP at
/// once ([`Ack::AtOnce`]).
const ACK_AT_ONCE: u8 = 4;

/// Sends the acknowledgement TCP holds back for what was read from `stream`, and keeps
/// later ones delayed ([`Ack::AtOnce`]): `TCP_QUICKACK` 2 — an odd value would leave the
/// socket acknowledging every segment at once for a while. Best effort: a failure only
/// leaves the acknowledgement to the kernel.
fn acknowledge_now(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let two: libc::c_int = 2;
    // SAFETY: a socket this link owns; the option's value is one c_int, passed by address
    // with its size, and only read during the call.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&two as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Where a delivery's flag words go ([`Wire::post_deliver`]).
#[derive(Debug, Clone, Copy)]
struct FlagWords<'a> {
    /// The first word (registration key, address, 8-byte aligned).
    at: (u64, u64),
    words: &'a [u64],
    /// Added to the words there rather than stored.
    added: bool,
}

impl<'a> FlagWords<'a> {
    /// `words` stored from `at` on.
    fn stored(at: (u64, u64), words: &'a [u64]) -> FlagWords<'a> {
        FlagWords {
            at,
            words,
            added: false,
        }
    }
}

/// A delivery's second place ([`Wire::post_deliver`]): where its block goes instead, with
/// other flag words, when a word of the receiver's memory holds at least a value by the
/// time the block arrives (its receiver is ready for it there).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gate<'a> {
    /// The word (registration key, address) and the value it must reach.
    pub word: (u64, u64),
    pub at_least: u64,
    /// Where the block goes then (key, address), and the flag words stored then.
    pub to: (u64, u64),
    pub words: &'a [u64],
}

impl<'a> Gate<'a> {
    /// The gate of a delivery to `peer`, where its word and its place are that peer's too
    /// (a delivery carries no other).
    pub(crate) fn on(peer: u64, g: DeliverGate<'a>) -> Option<Gate<'a>> {
        (g.word.peer == peer && g.to.peer == peer).then_some(Gate {
            word: (g.word.key, g.word.addr),
            at_least: g.at_least,
            to: (g.to.key, g.to.addr),
            words: g.words,
        })
    }
}

/// A [`Gate`] as a message carries it: its words still bytes.
struct GateOnWire<'m> {
    word: (u64, u64),
    at_least: u64,
    to: (u64, u64),
    words: &'m [u8],
}

/// A [`Kind::Deliver`] message's header, read from its first bytes.
struct Delivery<'m> {
    to: (u64, u64),
    flag: (u64, u64),
    words: &'m [u8],
    gate: Option<GateOnWire<'m>>,
    count: usize,
    /// The flag words are added, not stored ([`ADDED`]).
    added: bool,
    /// Where the block starts in the message (after the length word).
    block_at: usize,
}

/// The header of the delivery `have` begins: `None` while not all of it is here, an error
/// status when it is malformed.
fn parse_delivery(have: &[u8]) -> Option<std::result::Result<Delivery<'_>, u8>> {
    if have.len() < REQUEST_HEADER + 16 {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(have[i..i + 8].try_into().expect("8 bytes"));
    let n = usize::from(have[3]);
    let gated = have[1] & GATED != 0;
    let words_at = REQUEST_HEADER + 16;
    let gate_at = words_at + 8 * n;
    let block_at = gate_at + if gated { 40 + 8 * n } else { 0 };
    if have.len() < block_at {
        return None;
    }
    let added = have[1] & ADDED != 0;
    let count = u32::from_le_bytes(have[4..8].try_into().expect("4 bytes")) as usize;
    if n == 0 || have[1] & !(GATED | ADDED | ACK_AT_ONCE) != 0 || added && (gated || count != 0) {
        return Some(Err(BAD_REQUEST));
    }
    Some(Ok(Delivery {
        to: (word(8), word(16)),
        flag: (word(24), word(32)),
        words: &have[words_at..gate_at],
        gate: gated.then(|| GateOnWire {
            word: (word(gate_at), word(gate_at + 8)),
            at_least: word(gate_at + 16),
            to: (word(gate_at + 24), word(gate_at + 32)),
            words: &have[gate_at + 40..block_at],
        }),
        count,
        added,
        block_at,
    }))
}

impl Delivery<'_> {
    /// Where the block goes (key, address) and the flag words stored after it: the gate's
    /// place when its word holds enough and that place is here, else the first — an error
    /// status when the block or the flag has no place here.
    fn destination(
        &self,
        regions: &HashMap<u64, Region>,
    ) -> std::result::Result<((u64, u64), Vec<u64>), u8> {
        let words = |bytes: &[u8]| -> Vec<u64> {
            bytes
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
                .collect()
        };
        match place(regions, self.flag.0, self.flag.1, self.words.len()) {
            Ok(f) if f % 8 == 0 => {}
            Ok(_) => return Err(BAD_REQUEST),
            Err(status) => return Err(status),
        }
        if let Some(GateOnWire {
            word,
            at_least,
            to,
            words: alt_words,
        }) = self.gate
        {
            let open = match place(regions, word.0, word.1, 8) {
                // SAFETY: an aligned word of a registered region, accessed atomically only.
                // Acquire: the receiver let go of the place before it raised the word.
                Ok(p) if p % 8 == 0 => {
                    unsafe { &*(p as *const AtomicU64) }.load(Ordering::Acquire) >= at_least
                }
                _ => false,
            };
            if open && place(regions, to.0, to.1, self.count).is_ok() {
                return Ok((to, words(alt_words)));
            }
        }
        place(regions, self.to.0, self.to.1, self.count)?;
        Ok((self.to, words(self.words)))
    }
}

/// Where `bytes` bytes at `addr` of registration `key` lie in this process, or the status
/// that answers a request for them (unknown registration, out of its range).
fn place(
    regions: &HashMap<u64, Region>,
    key: u64,
    addr: u64,
    bytes: usize,
) -> std::result::Result<usize, u8> {
    let region = regions.get(&key).ok_or(NO_REGION)?;
    let offset = addr
        .checked_sub(region.remote_base)
        .map(|o| o as usize)
        .filter(|&o| o <= region.len && bytes <= region.len - o)
        .ok_or(OUT_OF_RANGE)?;
    Ok(region.base + offset)
}

/// Elements misaligned for their type cannot take CPU atomics: they are updated under
/// this lock (atomic among the wire's own updates, as the provider's software does).
static MISALIGNED: Mutex<()> = Mutex::new(());

/// One request being applied.
struct Apply<'a> {
    kind: Kind,
    op: Op,
    target: *mut u8,
    count: usize,
    operand: &'a [u8],
    compare: &'a [u8],
}

impl Apply<'_> {
    /// Applies the request element by element, each one atomic, appending previous values.
    ///
    /// # Safety
    /// `count` elements of `T` at `target` are valid memory that is only accessed
    /// atomically.
    unsafe fn run<T: AccElement>(&self, answer: &mut Vec<u8>) {
        let size = std::mem::size_of::<T>();
        let aligned = (self.target as usize) % std::mem::align_of::<T>() == 0;
        if aligned
            && size < 8
            && self.count >= WIDE_RUN
            && matches!(self.kind, Kind::Write | Kind::Fetch)
        {
            // SAFETY: the caller's contract.
            return unsafe { self.run_wide::<T>(answer) };
        }
        let _misaligned = (!aligned).then(|| lock(&MISALIGNED));
        for i in 0..self.count {
            let origin: T = match self.kind {
                Kind::Read => T::zeroed(),
                _ => bytemuck::pod_read_unaligned(&self.operand[i * size..][..size]),
            };
            // SAFETY: inside the request's elements (the caller's contract).
            let p = unsafe { self.target.add(i * size) }.cast::<T>();
            let previous = if aligned {
                // SAFETY: aligned, valid, accessed atomically only (the caller's contract).
                unsafe {
                    match self.kind {
                        Kind::Write => {
                            T::apply_op(p, self.op, origin);
                            None
                        }
                        Kind::Fetch => Some(T::fetch_op(p, self.op, origin)),
                        Kind::Read => Some(T::fetch_op(p, Op::NoOp, origin)),
                        Kind::Compare => {
                            let c: T =
                                bytemuck::pod_read_unaligned(&self.compare[i * size..][..size]);
                            Some(T::compare_swap(p, c, origin))
                        }
                        Kind::Epoch
                        | Kind::Deliver
                        | Kind::Put
                        | Kind::Get
                        | Kind::Striped
                        | Kind::Ping
                        | Kind::Hello
                        | Kind::Retired => {
                            unreachable!("not applied on elements")
                        }
                    }
                }
            } else {
                // SAFETY: valid (the caller's contract); misaligned updates are serialized
                // by the lock held.
                let current = unsafe { p.read_unaligned() };
                let new = match self.kind {
                    Kind::Compare => {
                        let c = &self.compare[i * size..][..size];
                        (bytemuck::bytes_of(&current) == c).then_some(origin)
                    }
                    Kind::Read => None,
                    _ if self.op == Op::NoOp => None,
                    _ => Some(T::combine(self.op, current, origin)),
                };
                if let Some(v) = new {
                    // SAFETY: as for the read.
                    unsafe { p.write_unaligned(v) };
                }
                (self.kind != Kind::Write).then_some(current)
            };
            if let Some(v) = previous {
                answer.extend_from_slice(bytemuck::bytes_of(&v));
            }
        }
    }
}

/// Runs of elements narrower than 8 bytes at least this long are applied eight bytes at a
/// time ([`Apply::run_wide`]).
const WIDE_RUN: usize = 64;

impl Apply<'_> {
    /// [`Apply::run`] for a long run of aligned narrow elements: `ops::apply_run`, which
    /// updates a whole 64-bit word with one compare-and-swap (each element still one atomic
    /// step, as on this node), an eighth of the locked instructions of one per byte: a
    /// 2 MiB `MPI_CHAR` sum from another node took 25.9 ms one element at a time, 3.6 ms so.
    ///
    /// # Safety
    /// As for [`Apply::run`], the elements aligned for `T`.
    unsafe fn run_wide<T: AccElement>(&self, answer: &mut Vec<u8>) {
        let bytes = self.count * std::mem::size_of::<T>();
        let origin: Vec<T> = bytemuck::pod_collect_to_vec(&self.operand[..bytes]);
        let mut previous = match self.kind {
            Kind::Fetch => vec![T::zeroed(); self.count],
            _ => Vec::new(),
        };
        let out = (self.kind == Kind::Fetch).then_some(&mut previous[..]);
        // SAFETY: `count` aligned elements of `T` at `target`, accessed atomically only
        // (the caller's contract); `out` has as many as `origin`.
        unsafe { crate::ops::apply_run(self.target.cast::<T>(), &origin, out, self.op) };
        answer.extend_from_slice(bytemuck::cast_slice(&previous));
    }

    /// Applies the request element by element with plain reads and writes, appending
    /// previous values: for element types no CPU atomic updates, under their lock stripes.
    ///
    /// # Safety
    /// `count` elements of `T` at `target` are valid memory, and no other update of them
    /// runs meanwhile (their stripes are held).
    unsafe fn run_plain<T: AccElement>(&self, answer: &mut Vec<u8>) {
        let size = std::mem::size_of::<T>();
        for i in 0..self.count {
            // SAFETY: inside the request's elements (the caller's contract).
            let p = unsafe { self.target.add(i * size) }.cast::<T>();
            // SAFETY: valid (the caller's contract); maybe misaligned.
            let current = unsafe { p.read_unaligned() };
            if self.kind != Kind::Read && self.op != Op::NoOp {
                let origin: T = bytemuck::pod_read_unaligned(&self.operand[i * size..][..size]);
                // SAFETY: as for the read; no other update runs (the caller's contract).
                unsafe { p.write_unaligned(T::combine(self.op, current, origin)) };
            }
            if self.kind != Kind::Write {
                answer.extend_from_slice(bytemuck::bytes_of(&current));
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU8;

    /// A context the tests' `complete` marks: 1 done, 2 failed.
    #[derive(Default)]
    struct Flag(AtomicU8);

    /// SAFETY (for the wire): `ctx` is a live `Flag`.
    unsafe fn complete(ctx: *mut c_void, failed: bool) {
        // SAFETY: the tests post live flags.
        let flag = unsafe { &*ctx.cast::<Flag>() };
        flag.0.store(if failed { 2 } else { 1 }, Ordering::Release);
    }

    /// An origin and a target wire, the target known to the origin as peer 7.
    fn pair() -> (Wire, Arc<Wire>) {
        let origin = Wire::open("127.0.0.1", complete).unwrap();
        let target = Arc::new(Wire::open("127.0.0.1", complete).unwrap());
        origin.add_peer(7, target.address());
        (origin, target)
    }

    /// Drives both until `flag` is marked: its mark.
    /// Serves `w`'s peers (its progress) until `stop`.
    fn serve_until(w: &Wire, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let _ = w.progress();
            std::thread::yield_now();
        }
    }

    fn wait(origin: &Wire, target: &Wire, flag: &Flag) -> u8 {
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let _ = origin.progress();
            let _ = target.progress();
            let f = flag.0.load(Ordering::Acquire);
            if f != 0 {
                return f;
            }
            assert!(std::time::Instant::now() < give_up, "no answer in 10 s");
            std::thread::yield_now();
        }
    }

    fn request(kind: Kind, op: Op, ty: ElemType, count: usize, addr: u64) -> Request {
        Request {
            kind,
            op,
            ty,
            count,
            key: 42,
            addr,
        }
    }

    /// Posts `r` with its operands to the target, previous values into `result`, and
    /// waits for the answer: its mark (1 done, 2 failed).
    fn exchange(
        origin: &Wire,
        target: &Wire,
        r: Request,
        operands: (&[u8], &[u8]),
        result: &mut [u8],
    ) -> u8 {
        let flag = Flag::default();
        let out = if result.is_empty() {
            std::ptr::null_mut()
        } else {
            result.as_mut_ptr()
        };
        // SAFETY: `result` and the flag outlive the operation: waited for below.
        unsafe { origin.post(7, &r, operands.0, operands.1, out, flag_ptr(&flag)) }.unwrap();
        wait(origin, target, &flag)
    }

    /// Posts `request` with the operand 1 from `from` to `peer`, no result; `flag` marks
    /// its answer (the caller waits for it).
    fn post_one(from: &Wire, peer: u64, request: &Request, flag: &Flag) {
        // SAFETY: no result; the flag outlives the operation (the caller waits for it).
        unsafe {
            from.post(
                peer,
                request,
                &words_of(1),
                &[],
                std::ptr::null_mut(),
                flag_ptr(flag),
            )
        }
        .unwrap();
    }

    fn flag_ptr(flag: &Flag) -> *mut c_void {
        (flag as *const Flag).cast_mut().cast()
    }

    fn words(values: &[u64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn atomics_apply_in_issue_order_and_answer_previous_values() {
        let (origin, target) = pair();
        let mut memory = vec![0u64; 4];
        target.add_region(42, memory.as_mut_ptr() as usize, 32, 1000);
        // 100 sums in flight together, then a fetching read behind them: it sees them all.
        let flags: Vec<Flag> = (0..100).map(|_| Flag::default()).collect();
        let sum = request(Kind::Write, Op::Sum, ElemType::U64, 1, 1008);
        for f in &flags {
            // SAFETY: no result; the flags outlive the operations (the read below is
            // answered after them).
            unsafe {
                origin.post(
                    7,
                    &sum,
                    &words(&[1]),
                    &[],
                    std::ptr::null_mut(),
                    flag_ptr(f),
                )
            }
            .unwrap();
        }
        let mut seen = [0u8; 8];
        let read = request(Kind::Fetch, Op::NoOp, ElemType::U64, 1, 1008);
        assert_eq!(
            exchange(&origin, &target, read, (&words(&[0]), &[]), &mut seen),
            1
        );
        assert_eq!(u64::from_le_bytes(seen), 100);
        assert!(flags.iter().all(|f| f.0.load(Ordering::Acquire) == 1));
        assert_eq!(origin.counts(false), (100, 0));
        assert_eq!(origin.counts(true), (1, 0));
        // A compare-and-swap that matches, one that does not.
        let mut previous = [0u8; 16];
        let cas = request(Kind::Compare, Op::Replace, ElemType::U64, 2, 1008);
        let (values, compare) = (words(&[5, 6]), words(&[100, 9]));
        assert_eq!(
            exchange(&origin, &target, cas, (&values, &compare), &mut previous),
            1
        );
        assert_eq!(previous[..], words(&[100, 0])[..]);
        assert_eq!(memory[1..3], [5, 0]);
    }

    #[test]
    fn a_wire_with_one_link_reads_it_directly_and_still_accepts_and_answers_others() {
        let (first, target) = pair();
        let second = Wire::open("127.0.0.1", complete).unwrap();
        second.add_peer(7, target.address());
        let mut memory = vec![0u64; 1];
        target.add_region(42, memory.as_mut_ptr() as usize, 8, 0);
        let sum = request(Kind::Fetch, Op::Sum, ElemType::U64, 1, 0);
        let mut seen = [0u8; 8];
        // Many polls of a target with one link: most read it directly.
        for n in 0..3 * LOOK_EVERY {
            assert_eq!(
                exchange(&first, &target, sum, (&words(&[1]), &[]), &mut seen),
                1
            );
            assert_eq!(u64::from_le_bytes(seen), n);
        }
        assert_eq!(read(&target.links).len(), 1);
        // A second peer connects: only a look through the poller accepts it; then each
        // link is answered in turn, both ways round.
        for n in 0..LOOK_EVERY {
            let (origin, base) = match n % 2 {
                0 => (&second, 3 * LOOK_EVERY + n),
                _ => (&first, 3 * LOOK_EVERY + n),
            };
            assert_eq!(
                exchange(origin, &target, sum, (&words(&[1]), &[]), &mut seen),
                1
            );
            assert_eq!(u64::from_le_bytes(seen), base);
        }
        assert_eq!(read(&target.links).len(), 2);
        assert_eq!(memory[0], 4 * LOOK_EVERY);
    }

    /// Posts a striped update of `payload` under the stripe words at `stripes` (region 43)
    /// and waits: its mark and the answer (taken word, previous values).
    fn striped(
        origin: &Wire,
        target: &Wire,
        stripes: &[u64],
        payload: &[u8],
        result_len: usize,
    ) -> (u8, Vec<u8>) {
        let flag = Flag::default();
        let mut answer = vec![0xAAu8; 8 + result_len];
        // SAFETY: the answer and the flag outlive the operation: waited for below.
        unsafe {
            origin.post_striped(
                7,
                43,
                stripes,
                payload,
                answer.as_mut_ptr(),
                result_len,
                flag_ptr(&flag),
            )
        }
        .unwrap();
        (wait(origin, target, &flag), answer)
    }

    #[test]
    fn striped_updates_take_every_stripe_or_none_and_carry_pair_types() {
        use crate::DoubleInt;
        let (origin, target) = pair();
        let mut stripes = vec![0u64; 4];
        target.add_region(43, stripes.as_mut_ptr() as usize, 32, 0);
        let mut memory = vec![DoubleInt::new(1.0, 1); 3];
        target.add_region(42, memory.as_mut_ptr() as usize, 48, 0);
        let pairs = |v: &[DoubleInt]| bytemuck::cast_slice::<DoubleInt, u8>(v).to_vec();
        // MAXLOC of three pairs, fetching, under stripes 1 and 3.
        let mut payload = Vec::new();
        let maxloc = request(Kind::Fetch, Op::MaxLoc, ElemType::DoubleInt, 3, 0);
        let operand = pairs(&[
            DoubleInt::new(2.0, 7),
            DoubleInt::new(0.5, 7),
            DoubleInt::new(1.0, 0),
        ]);
        encode_striped(&mut payload, &maxloc, &operand);
        let (mark, answer) = striped(&origin, &target, &[8, 24], &payload, 48);
        assert_eq!(mark, 1);
        assert_eq!(answer[..8], [0; 8], "taken");
        assert_eq!(answer[8..], pairs(&[DoubleInt::new(1.0, 1); 3])[..]);
        assert_eq!(
            memory,
            [
                DoubleInt::new(2.0, 7),
                DoubleInt::new(1.0, 1),
                DoubleInt::new(1.0, 0)
            ]
        );
        assert_eq!(stripes, [0; 4], "released");
        // Stripe 3 held: nothing applied, stripe 1 left free, the answer padded.
        stripes[3] = 1;
        let (mark, answer) = striped(&origin, &target, &[8, 24], &payload, 48);
        assert_eq!(mark, 1);
        assert_eq!(answer[..8], 1u64.to_le_bytes(), "busy");
        assert_eq!(answer.len(), 56);
        assert_eq!(memory[0], DoubleInt::new(2.0, 7));
        assert_eq!(stripes, [0, 0, 0, 1]);
        // Outside a striped request a pair type is refused: no stripe protects it.
        let mut previous = [0u8; 16];
        let alone = request(Kind::Fetch, Op::MaxLoc, ElemType::DoubleInt, 1, 0);
        let mut message = Vec::new();
        encode_striped(&mut message, &alone, &operand[..16]);
        assert_eq!(target.apply(&message[4..], &mut Vec::new()), BAD_REQUEST);
        assert!(
            // SAFETY: refused before anything is posted.
            unsafe {
                origin.post(
                    7,
                    &alone,
                    &operand[..16],
                    &[],
                    previous.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
            .is_err()
        );
        // A fetch of pairs that are not registered fails the operation.
        payload.clear();
        let far = request(Kind::Fetch, Op::NoOp, ElemType::DoubleInt, 1, 4096);
        encode_striped(&mut payload, &far, &operand[..16]);
        let (mark, _) = striped(&origin, &target, &[0], &payload, 16);
        assert_eq!(mark, 2);
        assert_eq!(stripes, [0, 0, 0, 1], "released after a failed request");
    }

    #[test]
    fn long_runs_of_narrow_elements_apply_a_word_at_a_time() {
        let (origin, target) = pair();
        let mut memory = vec![0u8; 512];
        target.add_region(42, memory.as_mut_ptr() as usize, 512, 0);
        // 100 bytes from byte 3: a head before the first 8-byte word, words, a tail.
        let values: Vec<u8> = (0..100).map(|i| i as u8).collect();
        let sum = request(Kind::Write, Op::Sum, ElemType::U8, 100, 3);
        assert_eq!(exchange(&origin, &target, sum, (&values, &[]), &mut []), 1);
        let mut previous = vec![0u8; 100];
        let fetch = request(Kind::Fetch, Op::Sum, ElemType::U8, 100, 3);
        let ones = vec![255u8; 100];
        assert_eq!(
            exchange(&origin, &target, fetch, (&ones, &[]), &mut previous),
            1
        );
        assert_eq!(previous, values);
        let after: Vec<u8> = values.iter().map(|v| v.wrapping_add(255)).collect();
        assert_eq!(memory[3..103], after[..]);
        assert_eq!((memory[2], memory[103]), (0, 0), "neighbours untouched");
        // 70 u16 from byte 130: replace, then a fetching no_op reads them back.
        let words: Vec<u8> = (0..70u16).flat_map(|i| (i * 900).to_le_bytes()).collect();
        let replace = request(Kind::Write, Op::Replace, ElemType::U16, 70, 130);
        assert_eq!(
            exchange(&origin, &target, replace, (&words, &[]), &mut []),
            1
        );
        let mut seen = vec![0u8; 140];
        let read = request(Kind::Fetch, Op::NoOp, ElemType::U16, 70, 130);
        let zeros = vec![0u8; 140];
        assert_eq!(
            exchange(&origin, &target, read, (&zeros, &[]), &mut seen),
            1
        );
        assert_eq!(seen, words);
        assert_eq!(memory[130..270], words[..]);
    }

    #[test]
    fn misaligned_elements_and_every_type_apply() {
        let (origin, target) = pair();
        let mut memory = vec![0u8; 64];
        target.add_region(42, memory.as_mut_ptr() as usize, 64, 0);
        // Three f64 at byte 3 (misaligned): written, then max with 2.5, fetched.
        let f64s = |v: &[f64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let write = request(Kind::Write, Op::Replace, ElemType::F64, 3, 3);
        let values = f64s(&[1.0, 2.5, -7.0]);
        assert_eq!(
            exchange(&origin, &target, write, (&values, &[]), &mut []),
            1
        );
        let mut previous = [0u8; 24];
        let max = request(Kind::Fetch, Op::Max, ElemType::F64, 3, 3);
        assert_eq!(
            exchange(
                &origin,
                &target,
                max,
                (&f64s(&[2.5; 3]), &[]),
                &mut previous
            ),
            1
        );
        assert_eq!(previous[..], values[..]);
        assert_eq!(memory[3..27], f64s(&[2.5; 3])[..]);
        // Every type once: a sum of 1 into an aligned element, fetched.
        for (i, ty) in TYPES.iter().enumerate() {
            let size = ty.size();
            let at = 32 + (i % 4) * 8;
            let mut one = vec![0u8; size];
            match ty {
                ElemType::F32 => one.copy_from_slice(&1f32.to_le_bytes()),
                ElemType::F64 => one.copy_from_slice(&1f64.to_le_bytes()),
                _ => one[0] = 1,
            }
            memory[at..at + 8].fill(0);
            let mut previous = vec![0xAAu8; size];
            let add = request(Kind::Fetch, Op::Sum, *ty, 1, at as u64);
            assert_eq!(
                exchange(&origin, &target, add, (&one, &[]), &mut previous),
                1,
                "{ty:?}"
            );
            assert!(previous.iter().all(|&b| b == 0), "{ty:?}");
            assert_eq!(memory[at..at + size], one[..], "{ty:?}");
        }
    }

    /// Reads carry no operands and answer the current values, changing nothing: words at
    /// an aligned address, bytes at a misaligned one, and a read past the region fails.
    #[test]
    fn reads_answer_the_current_values_and_change_nothing() {
        let (origin, target) = pair();
        let mut memory: Vec<u8> = (0..64u8).collect();
        target.add_region(42, memory.as_mut_ptr() as usize, 64, 0);
        let mut words = [0u8; 32];
        let read = request(Kind::Read, Op::NoOp, ElemType::U64, 4, 8);
        assert_eq!(exchange(&origin, &target, read, (&[], &[]), &mut words), 1);
        assert_eq!(words[..], (8..40u8).collect::<Vec<_>>()[..]);
        let mut bytes = [0u8; 5];
        let read = request(Kind::Read, Op::NoOp, ElemType::U8, 5, 61 - 2);
        assert_eq!(exchange(&origin, &target, read, (&[], &[]), &mut bytes), 1);
        assert_eq!(bytes, [59, 60, 61, 62, 63]);
        assert_eq!(
            memory,
            (0..64u8).collect::<Vec<_>>(),
            "a read changes nothing"
        );
        let read = request(Kind::Read, Op::NoOp, ElemType::U8, 5, 62);
        assert_eq!(exchange(&origin, &target, read, (&[], &[]), &mut bytes), 2);
    }

    /// Puts and gets copy bytes at any address and length, land in issue order with the
    /// atomics on the same connection, and are counted as writes and reads; one past the
    /// region fails and changes nothing; the marks taken before a post are reached once
    /// it is answered.
    #[test]
    fn puts_and_gets_copy_bytes_in_issue_order() {
        let (origin, target) = pair();
        let mut memory = vec![0u8; 4096];
        target.add_region(5, memory.as_mut_ptr() as usize, 4096, 1 << 20);
        let bytes: Vec<u8> = (0..3001u32).map(|i| (i * 7 % 251) as u8).collect();
        let put = Request {
            count: bytes.len(),
            key: 5,
            ..request(Kind::Put, Op::Replace, ElemType::U8, 0, (1 << 20) + 3)
        };
        let before = origin.marks();
        assert_eq!(exchange(&origin, &target, put, (&bytes, &[]), &mut []), 1);
        assert!(origin.reached(&before));
        assert_eq!(&memory[3..3004], &bytes[..]);
        assert_eq!(origin.counts(false).0, 1, "a put is a write");
        // A sum on a word the put wrote, then a get of it: in issue order.
        let sum = Request {
            key: 5,
            ..request(Kind::Write, Op::Sum, ElemType::U64, 1, (1 << 20) + 8)
        };
        let expected = u64::from_le_bytes(memory[8..16].try_into().unwrap()).wrapping_add(9);
        let flag = Flag::default();
        // SAFETY: no result; the flag outlives the operation (waited for below).
        unsafe {
            origin.post(
                7,
                &sum,
                &9u64.to_le_bytes(),
                &[],
                std::ptr::null_mut(),
                flag_ptr(&flag),
            )
        }
        .unwrap();
        let get = Request {
            count: 8,
            key: 5,
            ..request(Kind::Get, Op::Replace, ElemType::U8, 0, (1 << 20) + 8)
        };
        let mut got = [0u8; 8];
        assert_eq!(exchange(&origin, &target, get, (&[], &[]), &mut got), 1);
        assert_eq!(
            u64::from_le_bytes(got),
            expected,
            "the get sees the sum before it"
        );
        assert_eq!(origin.counts(true).0, 1, "a get is a read");
        let past = Request {
            count: 2,
            key: 5,
            ..request(Kind::Put, Op::Replace, ElemType::U8, 0, (1 << 20) + 4095)
        };
        let snapshot = memory.clone();
        assert_eq!(exchange(&origin, &target, past, (&[1, 2], &[]), &mut []), 2);
        assert_eq!(memory, snapshot, "a refused put changes nothing");
        assert_eq!(origin.in_flight(), 0);
    }

    /// Long puts ([`LAND_MIN`] and more) leave from the caller's bytes and are read at the
    /// target straight into place: several in flight land in issue order with the short
    /// ones between them, each answered; one whose place is unknown is answered with a
    /// failure and its bytes dropped, and the link goes on.
    #[test]
    fn long_puts_land_in_place_in_issue_order_and_are_answered() {
        let (origin, target) = pair();
        let len = 6 << 20;
        let mut memory = vec![0u8; len];
        target.add_region(5, memory.as_mut_ptr() as usize, len, 1 << 30);
        let pattern = |seed: u32, n: usize| -> Vec<u8> {
            (0..n as u32)
                .map(|i| (i.wrapping_mul(seed) % 251) as u8)
                .collect()
        };
        let long = pattern(7, (3 << 20) + 5);
        let short = pattern(11, 100);
        let unplaced = pattern(13, LAND_MIN + 17);
        let second = pattern(17, 1 << 20);
        let put = |key: u64, offset: usize, n: usize| Request {
            count: n,
            key,
            ..request(
                Kind::Put,
                Op::Replace,
                ElemType::U8,
                0,
                (1 << 30) + offset as u64,
            )
        };
        let posts: [(Request, &[u8]); 4] = [
            (put(5, 1, long.len()), &long),
            // Over the end of the first: applied after it.
            (put(5, long.len() - 50, short.len()), &short),
            (put(99, 0, unplaced.len()), &unplaced),
            (put(5, 4 << 20, second.len()), &second),
        ];
        let flags: Vec<Flag> = posts.iter().map(|_| Flag::default()).collect();
        for ((r, bytes), flag) in posts.iter().zip(&flags) {
            // SAFETY: no result; the flags outlive the operations (waited for below).
            unsafe { origin.post(7, r, bytes, &[], std::ptr::null_mut(), flag_ptr(flag)) }.unwrap();
        }
        let marks: Vec<u8> = flags.iter().map(|f| wait(&origin, &target, f)).collect();
        assert_eq!(
            marks,
            [1, 1, 2, 1],
            "answered in order; the unplaced one failed"
        );
        let mut expected = vec![0u8; len];
        expected[1..1 + long.len()].copy_from_slice(&long);
        expected[long.len() - 50..long.len() + 50].copy_from_slice(&short);
        expected[4 << 20..(4 << 20) + second.len()].copy_from_slice(&second);
        assert!(
            memory == expected,
            "the bytes landed where and in the order they were put"
        );
        assert_eq!(origin.in_flight(), 0);
        // The link carries on: a short put and a get behind them.
        let tail = put(5, 0, 3);
        assert_eq!(
            exchange(&origin, &target, tail, (&[9, 8, 7], &[]), &mut []),
            1
        );
        let get = Request {
            count: 4,
            key: 5,
            ..request(Kind::Get, Op::Replace, ElemType::U8, 0, 1 << 30)
        };
        let mut got = [0u8; 4];
        assert_eq!(exchange(&origin, &target, get, (&[], &[]), &mut got), 1);
        assert_eq!(got, [9, 8, 7, long[2]]);
    }

    #[test]
    fn unknown_regions_out_of_range_and_lost_targets_fail() {
        let (origin, target) = pair();
        let mut memory = vec![0u64; 2];
        target.add_region(42, memory.as_mut_ptr() as usize, 16, 0);
        let one = words(&[1]);
        for (addr, key) in [(8u64, 43u64), (16, 42), (9, 42)] {
            let r = Request {
                key,
                ..request(Kind::Write, Op::Sum, ElemType::U64, 1, addr)
            };
            assert_eq!(
                exchange(&origin, &target, r, (&one, &[]), &mut []),
                2,
                "key {key} at {addr}"
            );
        }
        assert_eq!(memory, [0, 0]);
        assert!(origin.has_failed());
        // A removed region is unknown.
        target.remove_region(42);
        let sum = request(Kind::Write, Op::Sum, ElemType::U64, 1, 0);
        assert_eq!(exchange(&origin, &target, sum, (&one, &[]), &mut []), 2);
        assert_eq!(memory, [0, 0]);
        // The target's process gone: what waits fails (after LOST_AFTER), later posts are
        // refused.
        let flag = Flag::default();
        // SAFETY: no result; the flag outlives the operation (waited for below).
        unsafe { origin.post(7, &sum, &one, &[], std::ptr::null_mut(), flag_ptr(&flag)) }.unwrap();
        drop(target);
        // Once the origin saw the connection close, a post is taken (the exit may not be
        // known to the caller yet) and fails with the others.
        let closed_seen = std::time::Instant::now() + Duration::from_millis(200);
        while std::time::Instant::now() < closed_seen {
            let _ = origin.progress();
            std::thread::yield_now();
        }
        let late = Flag::default();
        // SAFETY: as above.
        unsafe { origin.post(7, &sum, &one, &[], std::ptr::null_mut(), flag_ptr(&late)) }.unwrap();
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while flag.0.load(Ordering::Acquire) == 0 || late.0.load(Ordering::Acquire) == 0 {
            let _ = origin.progress();
            assert!(
                std::time::Instant::now() < give_up,
                "the loss went unnoticed"
            );
            std::thread::yield_now();
        }
        assert_eq!(flag.0.load(Ordering::Acquire), 2);
        assert_eq!(late.0.load(Ordering::Acquire), 2);
        let flag = Flag::default();
        // SAFETY: as above (refused: nothing is posted).
        let refused =
            unsafe { origin.post(7, &sum, &one, &[], std::ptr::null_mut(), flag_ptr(&flag)) };
        assert!(matches!(refused, Err(Error::Network { .. })), "{refused:?}");
    }

    /// Posts a lock epoch of `payload` at word 0 of region 42 (previous value into the
    /// returned word) and waits for its answer: (mark, previous value).
    fn epoch(origin: &Wire, target: &Wire, held: bool, payload: &[u8]) -> (u8, u64) {
        let flag = Flag::default();
        let mut before = [0u8; 8];
        // SAFETY: `before` and the flag outlive the operation: waited for below.
        unsafe {
            origin.post_epoch(
                7,
                (42, 1000),
                0,
                1 << 32,
                held,
                payload,
                before.as_mut_ptr(),
                flag_ptr(&flag),
            )
        }
        .unwrap();
        (wait(origin, target, &flag), u64::from_le_bytes(before))
    }

    #[test]
    fn an_epoch_applies_its_updates_only_when_it_takes_the_lock_and_releases_it() {
        let (origin, target) = pair();
        // Word 0: the lock; words 1 and 2: data.
        let memory: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(0)).collect();
        target.add_region(42, memory.as_ptr() as usize, 24, 1000);
        let mut payload = Vec::new();
        let sum = |addr| request(Kind::Write, Op::Sum, ElemType::U64, 1, addr);
        encode(&mut payload, &sum(1008), &words(&[5]), &[]).unwrap();
        encode(&mut payload, &sum(1016), &words(&[7]), &[]).unwrap();
        // Free: taken, applied, released.
        assert_eq!(epoch(&origin, &target, false, &payload), (1, 0));
        let now = |i: usize| memory[i].load(Ordering::Relaxed);
        assert_eq!((now(0), now(1), now(2)), (0, 5, 7));
        // Held by someone else: nothing applied, the holder's word untouched.
        memory[0].store(1 << 32, Ordering::Relaxed);
        assert_eq!(epoch(&origin, &target, false, &payload), (1, 1 << 32));
        assert_eq!((now(0), now(1), now(2)), (1 << 32, 5, 7));
        // Held by us (acquired the usual way): applied and released without an attempt.
        assert_eq!(epoch(&origin, &target, true, &payload), (1, 0));
        assert_eq!((now(0), now(1), now(2)), (0, 10, 14));
        // A fetching request has nowhere to answer: the epoch fails, the lock is released.
        let mut fetching = payload.clone();
        let fetch = request(Kind::Fetch, Op::Sum, ElemType::U64, 1, 1008);
        encode(&mut fetching, &fetch, &words(&[1]), &[]).unwrap();
        assert_eq!(epoch(&origin, &target, false, &fetching).0, 2);
        assert_eq!(now(0), 0);
    }

    /// Unanswered additions ([`Wire::add_unanswered`]) add, in issue order with the
    /// stores and answered atomics around them, and a word that has no place is refused
    /// (counted); an addition with a block or a gate is not sent.
    #[test]
    fn unanswered_additions_add_in_order_with_the_rest() {
        let (origin, target) = pair();
        let words: Vec<AtomicU64> = (0..2).map(|_| AtomicU64::new(0)).collect();
        target.add_region(43, words.as_ptr() as usize, 16, 1000);
        let at = |addr| Remote {
            peer: 7,
            addr,
            key: 43,
        };
        for _ in 0..5 {
            origin.add_unanswered(3, at(1000), Ack::WithReply).unwrap();
        }
        // A store, then additions on top of it: applied in this order.
        origin
            .deliver(&[], at(1008), &[100], at(1008), None)
            .unwrap();
        origin
            .add_unanswered(u64::MAX, at(1008), Ack::AtOnce)
            .unwrap();
        origin.add_unanswered(7, at(1008), Ack::AtOnce).unwrap();
        // Past the region: refused.
        origin.add_unanswered(1, at(1016), Ack::AtOnce).unwrap();
        let sum = Request {
            key: 43,
            ..request(Kind::Write, Op::Sum, ElemType::U64, 1, 1000)
        };
        assert_eq!(
            exchange(&origin, &target, sum, (&words_of(1), &[]), &mut []),
            1
        );
        let now = |i: usize| words[i].load(Ordering::Acquire);
        assert_eq!((now(0), now(1)), (16, 106));
        assert_eq!(target.refused(), 1);
        let with_block = FlagWords {
            at: (43, 1000),
            words: &[1],
            added: true,
        };
        assert!(matches!(
            origin.post_deliver(7, (43, 1000), &[1], with_block, None, Ack::WithReply),
            Err(Error::InvalidArgument(_))
        ));
    }

    /// Two processes that reach each other talk over one connection: the second to need
    /// the other takes the first's. Two that connect at once end on the connection of the
    /// lower address, and stores sent before and after the move land in order.
    #[test]
    fn one_connection_carries_both_ways_and_a_move_keeps_order() {
        let wires = || {
            let x = Arc::new(Wire::open("127.0.0.1", complete).unwrap());
            let y = Arc::new(Wire::open("127.0.0.1", complete).unwrap());
            let (lo, hi) = if x.address() < y.address() {
                (x, y)
            } else {
                (y, x)
            };
            // Peer 0 is `lo`, peer 1 is `hi`, at both.
            lo.add_peer(1, hi.address());
            hi.add_peer(0, lo.address());
            (lo, hi)
        };
        let word = AtomicU64::new(0);
        let at = |peer| Remote {
            peer,
            addr: 0,
            key: 43,
        };
        let sum = Request {
            key: 43,
            ..request(Kind::Write, Op::Sum, ElemType::U64, 1, 0)
        };
        let links = |w: &Wire| read(&w.links).len();
        // One after the other: one connection, requests both ways.
        let (lo, hi) = wires();
        lo.add_region(43, word.as_ptr() as usize, 8, 0);
        hi.add_region(43, word.as_ptr() as usize, 8, 0);
        for (from, to, peer) in [(&hi, &lo, 0), (&lo, &hi, 1), (&hi, &lo, 0)] {
            let flag = Flag::default();
            post_one(from, peer, &sum, &flag);
            assert_eq!(wait(from, to, &flag), 1);
        }
        assert_eq!(word.load(Ordering::Acquire), 3);
        assert_eq!((links(&lo), links(&hi)), (1, 1), "one connection");
        // At once: both connect before either reads; `hi` sends 50 stores on its own
        // connection, learns of `lo`'s, and sends 50 more, which move to that one.
        let (lo, hi) = wires();
        let last = AtomicU64::new(0);
        lo.add_region(43, last.as_ptr() as usize, 8, 0);
        lo.connect_to(1).unwrap();
        hi.connect_to(0).unwrap();
        let stop = AtomicBool::new(false);
        let backwards = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut seen = 0;
                while !stop.load(Ordering::Relaxed) {
                    let _ = lo.progress();
                    let now = last.load(Ordering::Acquire);
                    if now < seen {
                        backwards.store(true, Ordering::Relaxed);
                    }
                    seen = now;
                    std::thread::yield_now();
                }
            });
            for v in 1..=100u64 {
                if v == 51 {
                    // Reads `lo`'s hello: `lo`'s address is the lower, ours move.
                    let give_up = std::time::Instant::now() + Duration::from_secs(10);
                    while !read(&hi.targets)[&0].moving.load(Ordering::Relaxed) {
                        let _ = hi.progress();
                        assert!(std::time::Instant::now() < give_up, "no hello in 10 s");
                        std::thread::yield_now();
                    }
                }
                hi.deliver(&[], at(0), &[v], at(0), None).unwrap();
            }
            let give_up = std::time::Instant::now() + Duration::from_secs(10);
            while last.load(Ordering::Acquire) != 100 {
                let _ = hi.progress();
                assert!(std::time::Instant::now() < give_up, "stores lost");
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(
            !backwards.load(Ordering::Relaxed),
            "a store overtook an earlier one"
        );
        // `hi`'s requests now go on `lo`'s connection, which `lo`'s own go on too.
        let theirs = Arc::clone(&read(&hi.targets)[&0]);
        let ours = Arc::clone(&read(&lo.targets)[&1]);
        assert!(theirs.accepted && !ours.accepted);
        assert_eq!(
            theirs.stream.peer_addr().unwrap(),
            ours.stream.local_addr().unwrap()
        );
        // The other connection is quiet at both ends: each reads the one left directly.
        let carrying = |w: &Wire| -> Vec<Arc<Link>> {
            read(&w.links)
                .iter()
                .filter(|l| !l.quiet.load(Ordering::Relaxed))
                .map(Arc::clone)
                .collect()
        };
        // (Each learns it from the other's `Retired`.)
        assert_eq!((links(&lo), links(&hi)), (2, 2));
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while carrying(&lo).len() + carrying(&hi).len() > 2 {
            let _ = lo.progress();
            let _ = hi.progress();
            assert!(std::time::Instant::now() < give_up, "no retirement in 10 s");
            std::thread::yield_now();
        }
        assert!(matches!(carrying(&hi).as_slice(), [l] if Arc::ptr_eq(l, &theirs)));
        assert!(matches!(carrying(&lo).as_slice(), [l] if Arc::ptr_eq(l, &ours)));
        // Crossed: `lo` reads `hi`'s hello before its own connection is up, so `hi`'s
        // connection carries `lo`'s requests first; `hi` moves to `lo`'s connection, and
        // `lo`'s requests follow there: one connection carries at both ends again.
        let (lo, hi) = wires();
        let (at_lo, at_hi) = (AtomicU64::new(0), AtomicU64::new(0));
        lo.add_region(43, at_lo.as_ptr() as usize, 8, 0);
        hi.add_region(43, at_hi.as_ptr() as usize, 8, 0);
        hi.connect_to(0).unwrap();
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while !read(&lo.targets).contains_key(&1) {
            let _ = lo.progress();
            assert!(std::time::Instant::now() < give_up, "no hello in 10 s");
            std::thread::yield_now();
        }
        lo.connect_to(1).unwrap();
        assert!(
            read(&lo.targets)[&1].accepted,
            "lo routes on hi's connection"
        );
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| serve_until(&lo, &stop));
            while !read(&hi.targets)[&0].moving.load(Ordering::Relaxed) {
                let _ = hi.progress();
                assert!(std::time::Instant::now() < give_up, "no hello in 10 s");
                std::thread::yield_now();
            }
            for _ in 0..10 {
                let flag = Flag::default();
                post_one(&hi, 0, &sum, &flag);
                while flag.0.load(Ordering::Acquire) == 0 {
                    let _ = hi.progress();
                    assert!(std::time::Instant::now() < give_up, "no answer in 10 s");
                    std::thread::yield_now();
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(
            read(&hi.targets)[&0].accepted,
            "hi moved to lo's connection"
        );
        // `hi` serves while `lo` posts: `lo`'s first post moves its requests (the move's
        // ping is answered on `hi`'s connection).
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| serve_until(&hi, &stop));
            for _ in 0..10 {
                let flag = Flag::default();
                post_one(&lo, 1, &sum, &flag);
                assert_eq!(wait(&lo, &hi, &flag), 1);
            }
            stop.store(true, Ordering::Relaxed);
        });
        for _ in 0..200 {
            let _ = lo.progress();
            let _ = hi.progress();
        }
        assert_eq!(
            (at_lo.load(Ordering::Acquire), at_hi.load(Ordering::Acquire)),
            (10, 10)
        );
        assert!(!read(&lo.targets)[&1].accepted, "lo moved to its own");
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while carrying(&lo).len() + carrying(&hi).len() > 2 {
            let _ = lo.progress();
            let _ = hi.progress();
            assert!(std::time::Instant::now() < give_up, "no retirement in 10 s");
            std::thread::yield_now();
        }
        let (theirs, ours) = (&read(&hi.targets)[&0], &read(&lo.targets)[&1]);
        assert!(matches!(carrying(&hi).as_slice(), [l] if Arc::ptr_eq(l, theirs)));
        assert!(matches!(carrying(&lo).as_slice(), [l] if Arc::ptr_eq(l, ours)));
        // At once again, but `lo` serves nothing while `hi` moves: the move is given up
        // after its patience, and the stores stay on `hi`'s connection, in order.
        let (lo, hi) = wires();
        let last = AtomicU64::new(0);
        lo.add_region(43, last.as_ptr() as usize, 8, 0);
        lo.connect_to(1).unwrap();
        hi.connect_to(0).unwrap();
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while !read(&hi.targets)[&0].moving.load(Ordering::Relaxed) {
            let _ = hi.progress();
            assert!(std::time::Instant::now() < give_up, "no hello in 10 s");
            std::thread::yield_now();
        }
        let started = std::time::Instant::now();
        for v in 1..=10u64 {
            hi.deliver(&[], at(0), &[v], at(0), None).unwrap();
        }
        assert!(
            started.elapsed() >= MOVE_PATIENCE,
            "the move waited for its ping"
        );
        assert!(!read(&hi.targets)[&0].accepted, "the move was given up");
        while last.load(Ordering::Acquire) != 10 {
            let _ = lo.progress();
            let _ = hi.progress();
            assert!(std::time::Instant::now() < give_up, "stores lost");
            std::thread::yield_now();
        }
        // Later posts go on `hi`'s own connection, without waiting again.
        let started = std::time::Instant::now();
        hi.deliver(&[], at(0), &[11], at(0), None).unwrap();
        assert!(started.elapsed() < MOVE_PATIENCE);
        while last.load(Ordering::Acquire) != 11 {
            let _ = lo.progress();
            assert!(std::time::Instant::now() < give_up, "a store lost");
            std::thread::yield_now();
        }
        // The ping came, but no retirement: both connections still carry, at both ends.
        assert_eq!((carrying(&lo).len(), carrying(&hi).len()), (2, 2));
    }

    /// Deliveries land block first, flag words after, in issue order with the atomics
    /// around them, unanswered: long blocks, more than the sockets hold (the rest waits in
    /// the link's queue, arrives in pieces and grows the receiver's buffer), a short one,
    /// and deliveries the target cannot place (counted, nothing stored).
    #[test]
    fn deliveries_place_the_block_then_the_flag_and_refuse_what_has_no_place() {
        let (origin, target) = pair();
        let mut blocks = vec![0u8; 400 << 10];
        let flags: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(0)).collect();
        target.add_region(42, blocks.as_mut_ptr() as usize, blocks.len(), 1 << 20);
        target.add_region(43, flags.as_ptr() as usize, 24, 1000);
        // Twenty long ones before the target reads anything: more than the sockets hold.
        let long =
            |k: usize| -> Vec<u8> { (0..300 << 10).map(|i| ((i + k) % 251) as u8).collect() };
        for k in 0..20 {
            origin
                .post_deliver(
                    7,
                    (42, 1 << 20),
                    &long(k),
                    FlagWords::stored((43, 1000), &[1, 11]),
                    None,
                    Ack::WithReply,
                )
                .unwrap();
        }
        let short = [7u8; 100];
        origin
            .post_deliver(
                7,
                (42, (1 << 20) + (350 << 10)),
                &short,
                FlagWords::stored((43, 1008), &[2, 22]),
                None,
                Ack::WithReply,
            )
            .unwrap();
        // Deliveries to an unknown registration (a long one, whose bytes are read and
        // dropped, and a short one) and one past the end of its region.
        origin
            .post_deliver(
                7,
                (44, 0),
                &long(0),
                FlagWords::stored((43, 1000), &[9]),
                None,
                Ack::WithReply,
            )
            .unwrap();
        origin
            .post_deliver(
                7,
                (44, 0),
                &short,
                FlagWords::stored((43, 1000), &[9]),
                None,
                Ack::WithReply,
            )
            .unwrap();
        origin
            .post_deliver(
                7,
                (42, (1 << 20) + (400 << 10) - 50),
                &short,
                FlagWords::stored((43, 1000), &[9]),
                None,
                Ack::WithReply,
            )
            .unwrap();
        // An answered atomic behind them: its answer comes after all four were handled.
        let sum = Request {
            key: 43,
            ..request(Kind::Write, Op::Sum, ElemType::U64, 1, 1016)
        };
        assert_eq!(
            exchange(&origin, &target, sum, (&words(&[5]), &[]), &mut []),
            1
        );
        let now = |i: usize| flags[i].load(Ordering::Acquire);
        // Word 1: the second delivery's first word over the first's second; word 2: its
        // second word, then the sum behind it (22 + 5: stored before the sum applied).
        assert_eq!((now(0), now(1), now(2)), (1, 2, 27));
        assert!(blocks[..300 << 10] == long(19)[..], "the last long block");
        assert_eq!(blocks[350 << 10..(350 << 10) + 100], short);
        assert!(
            blocks[(400 << 10) - 50..].iter().all(|&b| b == 0),
            "past the end"
        );
        assert_eq!(target.refused(), 3);
        assert!(matches!(
            origin.post_deliver(
                7,
                (42, 0),
                &vec![0; DELIVER_MAX + 1],
                FlagWords::stored((43, 1000), &[1]),
                None,
                Ack::WithReply
            ),
            Err(Error::InvalidArgument(_))
        ));
    }

    /// A gated delivery goes to its second place, with the second words, only while the
    /// receiver's gate word holds enough — short blocks and long ones (read into place):
    /// gate closed, open, open with a second place that is not registered.
    #[test]
    fn a_gated_delivery_takes_its_second_place_only_through_an_open_gate() {
        let (origin, target) = pair();
        for len in [1000usize, 200 << 10] {
            let mut staging = vec![0u8; len];
            let mut direct = vec![0u8; len];
            let words: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(0)).collect();
            target.add_region(42, staging.as_mut_ptr() as usize, len, 1 << 20);
            target.add_region(43, words.as_ptr() as usize, 24, 1000);
            target.add_region(44, direct.as_mut_ptr() as usize, len, 1 << 30);
            let gate = |to: (u64, u64)| Gate {
                word: (43, 1016),
                at_least: 5,
                to,
                words: &[105, 205],
            };
            let block = |k: u8| vec![k; len];
            let send = |k: u8, to: (u64, u64)| {
                origin
                    .post_deliver(
                        7,
                        (42, 1 << 20),
                        &block(k),
                        FlagWords::stored((43, 1000), &[k.into(), 7]),
                        Some(gate(to)),
                        Ack::WithReply,
                    )
                    .unwrap();
                // An answered atomic behind it: the delivery was handled when it answers.
                let sum = Request {
                    key: 43,
                    ..request(Kind::Write, Op::Sum, ElemType::U64, 1, 1016)
                };
                assert_eq!(
                    exchange(&origin, &target, sum, (&words_of(0), &[]), &mut []),
                    1
                );
            };
            let now = |i: usize| words[i].load(Ordering::Acquire);
            // Closed (the word holds 4): the first place, the first words.
            words[2].store(4, Ordering::Release);
            send(1, (44, 1 << 30));
            assert_eq!((now(0), now(1)), (1, 7), "{len}: closed gate");
            assert!(staging == block(1) && direct.iter().all(|&b| b == 0));
            // Open (5): the second place and words; the first place untouched.
            words[2].store(5, Ordering::Release);
            send(2, (44, 1 << 30));
            assert_eq!((now(0), now(1)), (105, 205), "{len}: open gate");
            assert!(staging == block(1) && direct == block(2));
            // Open, but the second place is not registered: the first place after all.
            send(3, (45, 0));
            assert_eq!((now(0), now(1)), (3, 7), "{len}: no second place");
            assert!(staging == block(3) && direct == block(2));
            assert_eq!(target.refused(), 0);
            for key in [42, 43, 44] {
                target.remove_region(key);
            }
        }
    }

    fn words_of(v: u64) -> Vec<u8> {
        v.to_le_bytes().to_vec()
    }
}
