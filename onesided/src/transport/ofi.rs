//! libfabric, safely: the resources of one network interface of this process (fabric,
//! domain, reliable-datagram endpoint, address vector, completion queue, completion
//! counters) and memory registrations, with one-sided writes, reads and atomics whose
//! completion a flush waits for (feature `ofi`; raw bindings in `onesided-ofi-sys`).
//!
//! **What the provider asks for is honoured, not assumed** (`fi_getinfo` answers with mode
//! and registration bits): with `FI_CONTEXT`/`FI_CONTEXT2` every operation carries a
//! context that lives until its completion (here: until the flush that completes it); with
//! `FI_MR_ENDPOINT` a registration is bound to the endpoint and enabled; with
//! `FI_MR_PROV_KEY` the provider picks the key, otherwise we request one; with
//! `FI_MR_VIRT_ADDR` a remote address is the target's virtual address, otherwise an offset
//! into the registration; with `FI_MR_LOCAL` local buffers need a descriptor, which
//! [`Nic::write`] and friends take from a registration of the caller's or register on the
//! fly.
//!
//! **Completion.** Writes are posted with `FI_DELIVERY_COMPLETE`: a write's default
//! completion is only local (the data may still sit in a socket buffer), and a flush must
//! mean *visible at the target*. Every posted operation counts one in `issued`; the
//! endpoint's counters (bound for `FI_WRITE | FI_READ`) count the completions, and
//! [`Nic::flush`] waits until they catch up, reading the completion queue meanwhile —
//! every provider here progresses manually, so an endpoint that is not read moves nothing
//! (its peers included: a target that never calls in blocks its origins). Failed
//! operations surface as `Error::Network` from the queue's error entries.
//!
//! **Which interface.** A provider lists every interface of the machine; the endpoint is
//! opened for the node address the caller names (`FI_SOURCE`), never the first entry.

// The window layer does not route through it yet (the ofi transport of "Windows across
// nodes" builds on this layer); until then its own tests are its only users.
#![allow(dead_code)]

use std::ffi::{CStr, CString};
use std::os::raw::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use onesided_ofi_sys as sys;

use crate::error::{Error, Result};
use crate::transport::network::{
    Ack, AtomicKind, AtomicTable, DeliverGate, Fabric, NetOp, NetType, PeerEnded,
    Registration as NetRegistration, Remote, TrackedContext, HELD_MAX, PROVIDER_SPACE_WORDS,
};
use crate::transport::wire::{self, Wire};
use crate::transport::write_end::WriteEnd;

/// The libfabric API version we program against.
const API_VERSION: u32 = sys::FI_VERSION(1, 17);

/// Completion-queue entries read per call.
const CQ_BATCH: usize = 16;

/// The longest put request [`Nic::put_on_wire`] sends: a long put is several, each
/// answered, so the target's answers flow while the rest is still on its way.
const WIRE_PUT_PART: usize = 4 << 20;

/// While a wait awaits the wire's answers, its poll reads the provider's queue this often
/// ([`Nic::progress`]).
const PROVIDER_POLL_EVERY: u64 = 4;

/// How long a post may be refused with "again" before it fails (see `Nic::post_in`). A
/// peer that ended is told by the job's roster within a second ([`ExitVigil`]); this bound
/// is for one no roster tells of (under a host MPI) — a collective's wait for it then fails
/// within this bound plus the answer's (see `net::plane`). It was 5 s: on 2 cores with
/// four ranks and their progress threads, a control-plane atomic through the provider was
/// refused that long now and then while every peer lived (tests across nodes failed so,
/// about one run in three of `across_nodes` with `ONESIDED_NET_ATOMICS=provider`).
const POST_PATIENCE: std::time::Duration = std::time::Duration::from_secs(20);

/// Providers that advertise RMA but cannot serve it here: `sockets` never completes an
/// origin's operations, bare `net` has no atomics.
const REFUSED: [&str; 2] = ["sockets", "net"];

/// The providers tried when none is named, best first: HPE Slingshot, InfiniBand/RoCE
/// (verbs under the reliable-datagram utility), AWS EFA, then TCP.
pub(crate) const PREFERRED: [&str; 4] = ["cxi", "verbs;ofi_rxm", "efa", "tcp;ofi_rxm"];

/// The environment variable that names the provider (`ONESIDED_PROVIDER=tcp;ofi_rxm`).
pub(crate) const PROVIDER_ENV: &str = "ONESIDED_PROVIDER";

/// A libfabric return code as an error (`fi_strerror`).
fn check(call: &'static str, rc: impl Into<i64>) -> Result<()> {
    let rc = rc.into();
    if rc >= 0 {
        return Ok(());
    }
    Err(network_error(call, rc))
}

#[cold]
fn network_error(call: &'static str, rc: i64) -> Error {
    let code = rc.unsigned_abs() as c_int;
    // SAFETY: fi_strerror returns a static NUL-terminated string for any code.
    let text = unsafe { CStr::from_ptr(sys::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned();
    Error::Network { call, code, text }
}

/// Opens libfabric if nothing did yet (the process's own, else the system's: ofi-sys never
/// links it), or says why it cannot be used.
fn libfabric_loaded() -> Result<()> {
    // SAFETY: no arguments; returns null or a static NUL-terminated text.
    let failure = unsafe { sys::onesided_fi_load_failure() };
    if failure.is_null() {
        return Ok(());
    }
    // SAFETY: non-null: a NUL-terminated text that lives as long as the process.
    let text = unsafe { CStr::from_ptr(failure) }.to_string_lossy();
    Err(Error::Unsupported(format!(
        "onesided's network transport: {text}"
    )))
}

/// True for the "try again" answer of a post or a queue read.
fn again(rc: isize) -> bool {
    rc == -(sys::FI_EAGAIN as isize)
}

/// True for a provider name (`core` or `core;utility`) whose core provider applies atomics
/// in the target's software: the wire may carry the atomics instead (a NIC's atomics are
/// not coherent with the CPU atomics the wire applies).
fn software_atomics(provider: &str) -> bool {
    let core = provider.split(';').next().unwrap_or_default();
    matches!(core, "tcp" | "udp" | "shm")
}

/// True for a provider name whose RMA writes the wire's TCP connection outruns for long
/// puts (`tcp`, `udp`: 1 MiB put-bw across two virtual nodes 4279–5610 and 306 MB/s
/// through the provider, 6273–6676 and 5073 over the wire); not `shm`, whose write is one
/// copy between the two processes' memory (12062 MB/s against the wire's 4818).
fn long_puts_on_wire(provider: &str) -> bool {
    matches!(
        provider.split(';').next().unwrap_or_default(),
        "tcp" | "udp"
    )
}

/// True for a provider name whose own atomics are atomic with the target's CPU atomics
/// (see [`Nic::atomics_mix_with_cpu`]): `tcp;ofi_rxm` (and bare `tcp`), whose target
/// applies them with CPU atomics — measured by `cpu_and_provider_atomics_mix_on_one_word_tcp`
/// and the 2-node suite under `ONESIDED_NET_ATOMICS=provider`.
fn provider_atomics_mix_with_cpu(provider: &str) -> bool {
    let mut names = provider.split(';');
    names.next() == Some("tcp") && names.next().is_none_or(|u| u == "ofi_rxm")
}

/// How atomics reach other nodes, as [`wire::ENV`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NetAtomics {
    /// Our own messages over TCP ([`wire`]), applied with CPU atomics.
    Socket,
    /// The provider's atomics to other nodes; this node's words keep CPU atomics where
    /// the provider's mix with them.
    Provider,
    /// The provider's atomics for every atomic word of a window across nodes, this
    /// node's included: what a NIC's atomics need, on a provider whose atomics would mix
    /// (tests of that path without such a NIC).
    ProviderEverywhere,
}

/// The way [`wire::ENV`] (`atomics`) chooses for `provider`: by default the wire where
/// the provider's atomics are software (they are messages the target applies with CPU
/// atomics either way, and ours cost half the round trip), never where they are the
/// NIC's (not coherent with the CPU atomics the wire applies).
fn net_atomics(provider: &str, atomics: Option<&str>) -> Result<NetAtomics> {
    let chosen = match atomics {
        None | Some("") if software_atomics(provider) => return Ok(NetAtomics::Socket),
        None | Some("") => return Ok(NetAtomics::Provider),
        Some("socket") if software_atomics(provider) => return Ok(NetAtomics::Socket),
        Some("socket") => {
            return Err(Error::InvalidArgument(format!(
                "{}=socket: provider {provider} applies atomics in the NIC, which the \
                 CPU atomics of the socket path would not be atomic with",
                wire::ENV
            )))
        }
        Some("provider") => NetAtomics::Provider,
        Some("provider-everywhere") => NetAtomics::ProviderEverywhere,
        Some(other) => {
            return Err(Error::InvalidArgument(format!(
                "{}={other}: expected socket, provider or provider-everywhere",
                wire::ENV
            )))
        }
    };
    // libfabric 1.17's own atomics between processes of udp;ofi_rxd lost updates against
    // CPU atomics and crashed the target (SIGSEGV in fi_cq_read) once this node's words
    // went through them too; shm's hung a lock across processes and crashed alike. The
    // wire serves both.
    let core = provider.split(';').next().unwrap_or_default();
    if matches!(core, "udp" | "shm") {
        return Err(Error::Unsupported(format!(
            "{}={}: the {provider} provider's own atomics between processes lose updates \
             or crash here (libfabric 1.17); leave {} unset (socket)",
            wire::ENV,
            atomics.unwrap_or_default(),
            wire::ENV
        )));
    }
    Ok(chosen)
}

/// The wire, where `atomics` chose it.
fn open_wire(node: &str, atomics: NetAtomics) -> Result<Option<Arc<Wire>>> {
    if atomics != NetAtomics::Socket || node.parse::<std::net::IpAddr>().is_err() {
        return Ok(None);
    }
    // SAFETY (of the function handed over): `mark` takes a context the wire holds until
    // it marks it, which is what `mark` requires.
    Ok(Some(Arc::new(Wire::open(node, mark)?)))
}

/// The provider and interface a [`Nic`] runs on, as `fi_getinfo` described them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Described {
    /// Provider name (`tcp;ofi_rxm`, `shm`, …).
    pub provider: String,
    /// Registration-mode bits (`FI_MR_*`).
    pub mr_mode: u64,
    /// Mode bits the application must honour (`FI_CONTEXT`, …).
    pub mode: u64,
    /// True when the provider progresses data transfers only inside calls into it.
    pub manual_progress: bool,
    /// The orderings the provider keeps between operations of one endpoint to one peer
    /// (`FI_ORDER_*` of its transmit attributes).
    pub msg_order: u64,
}

/// An owned `fi_info` list (freed on drop) and the entry chosen from it.
struct InfoList {
    head: NonNull<sys::fi_info>,
    chosen: NonNull<sys::fi_info>,
}

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: the list fi_getinfo returned, freed once.
        unsafe { sys::fi_freeinfo(self.head.as_ptr()) };
    }
}

/// The entries of provider `provider` for RMA and atomics on a reliable-datagram endpoint
/// at node address `node`, the first chosen.
fn getinfo(provider: &str, node: &str) -> Result<InfoList> {
    if REFUSED.contains(&provider) {
        return Err(Error::Unsupported(format!(
            "libfabric provider {provider:?}: cannot serve one-sided communication here \
             (use tcp;ofi_rxm, udp;ofi_rxd or shm)"
        )));
    }
    let prov = CString::new(provider).map_err(|_| bad_name("provider", provider))?;
    // shm names an endpoint's region in /dev/shm after its source address
    // (`fi_shm://<node>` gives `<node>:<uid>:<index>`): bound to the node's address, every
    // process of the node would create the same region (libfabric 1.17 then crashes in
    // fi_enable), and unbound it is named after the process id — guessable, and left
    // behind when the process exits without closing the endpoint (every rank keeps it to
    // the end). So it is named like the job's own segments: unguessable, and removed with
    // them when a rank or the job ends (`segment::sweep_job`).
    let shm_region = (provider == "shm").then(shm_region_name);
    let node = shm_region.as_deref().unwrap_or(node);
    let node_c = CString::new(node).map_err(|_| bad_name("node", node))?;
    libfabric_loaded()?;
    // SAFETY: fi_allocinfo returns a zeroed fi_info with its attribute structs allocated
    // (or null); it is freed below whatever happens.
    let hints = unsafe { sys::fi_allocinfo() };
    let Some(hints) = NonNull::new(hints) else {
        return Err(Error::Network {
            call: "fi_allocinfo",
            code: 0,
            text: "out of memory".into(),
        });
    };
    let mut info: *mut sys::fi_info = ptr::null_mut();
    // SAFETY: hints is a valid fi_info from fi_allocinfo; its attribute pointers are valid.
    // The provider name is strdup'ed so that fi_freeinfo can free it.
    let rc = unsafe {
        let h = hints.as_ptr();
        (*h).caps = u64::from(sys::FI_RMA | sys::FI_ATOMIC)
            | u64::from(sys::FI_READ | sys::FI_WRITE)
            | u64::from(sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE);
        (*h).mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
        (*(*h).ep_attr).type_ = sys::fi_ep_type_FI_EP_RDM;
        (*(*h).tx_attr).op_flags = u64::from(sys::FI_DELIVERY_COMPLETE);
        let d = (*h).domain_attr;
        (*d).mr_mode = (sys::FI_MR_LOCAL
            | sys::FI_MR_VIRT_ADDR
            | sys::FI_MR_ALLOCATED
            | sys::FI_MR_PROV_KEY
            | sys::FI_MR_ENDPOINT) as c_int;
        (*d).threading = sys::fi_threading_FI_THREAD_SAFE;
        (*(*h).fabric_attr).prov_name = libc_strdup(&prov);
        let rc = sys::fi_getinfo(
            API_VERSION,
            node_c.as_ptr(),
            ptr::null(),
            sys::FI_SOURCE,
            h,
            &mut info,
        );
        sys::fi_freeinfo(h);
        rc
    };
    if rc == -(sys::FI_ENODATA as c_int) || (rc >= 0 && info.is_null()) {
        // shm declines when /dev/shm has less room than its regions may take (libfabric
        // 1.17: about 32 MiB here); say so, or the refusal reads like a missing feature.
        let room = match shm_region {
            Some(_) => format!(
                " (shm declines when /dev/shm lacks room for its regions: {} MiB free)",
                crate::shm::segment::shm_free_bytes() >> 20
            ),
            None => String::new(),
        };
        return Err(Error::Unsupported(format!(
            "libfabric provider {provider:?} offers no RMA + atomics endpoint at {node}{room}"
        )));
    }
    check("fi_getinfo", rc)?;
    let head = NonNull::new(info).expect("fi_getinfo succeeded with an entry");
    Ok(InfoList { head, chosen: head })
}

/// The longest nap of a `block` progress thread between reads of an endpoint that has no
/// wait descriptor (`shm`): what a peer's operation may wait at an idle target.
const NAP_WITHOUT_WAIT_FD: std::time::Duration = std::time::Duration::from_micros(500);

/// The name of this process's `shm` endpoint: under the job's segment prefix where the
/// process belongs to a job (`onesided.<job>.ofi<rank>.<random>`), else under the
/// library's prefix with this process's id.
fn shm_region_name() -> String {
    use crate::shm::segment::{random_u64, NAME_PREFIX};
    let tag = random_u64();
    match JOB_OF_PROCESS.get() {
        Some((job, rank)) => format!("{NAME_PREFIX}{job}.ofi{rank}.{tag:016x}"),
        None => format!("{NAME_PREFIX}pid{}.ofi.{tag:016x}", std::process::id()),
    }
}

/// The job and rank of this process, for naming what the provider creates on the node
/// ([`shm_region_name`]).
static JOB_OF_PROCESS: std::sync::OnceLock<(String, usize)> = std::sync::OnceLock::new();

/// Tells the transport which job and rank this process is (once, at start-up): endpoints
/// that leave a named object on the node are named so that the job's cleanup removes them.
pub(crate) fn set_job_of_process(job: &str, rank: usize) {
    let _ = JOB_OF_PROCESS.set((job.to_owned(), rank));
}

/// `strdup` through libfabric's allocator's libc: the string fi_freeinfo will free.
///
/// # Safety
/// The caller hands the result to a structure that fi_freeinfo frees.
unsafe fn libc_strdup(s: &CStr) -> *mut std::os::raw::c_char {
    extern "C" {
        fn strdup(s: *const std::os::raw::c_char) -> *mut std::os::raw::c_char;
    }
    // SAFETY: s is NUL-terminated.
    unsafe { strdup(s.as_ptr()) }
}

#[cold]
fn bad_name(what: &str, name: &str) -> Error {
    Error::InvalidArgument(format!("libfabric {what} {name:?} contains a NUL byte"))
}

/// A libfabric object closed on drop (`fi_close` on its `fid`).
#[derive(Debug)]
struct Fid<T> {
    ptr: NonNull<T>,
}

impl<T> Fid<T> {
    /// Takes ownership of `ptr`, a libfabric object whose first member is its `fid`.
    ///
    /// # Safety
    /// `ptr` must be a live object created by libfabric, closed by nobody else.
    unsafe fn own(call: &'static str, ptr: *mut T) -> Result<Fid<T>> {
        NonNull::new(ptr)
            .map(|ptr| Fid { ptr })
            .ok_or(Error::Network {
                call,
                code: 0,
                text: "no object returned".into(),
            })
    }

    fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    fn fid(&self) -> *mut sys::fid {
        // Every libfabric object (fid_fabric, fid_domain, fid_ep, …) starts with its fid.
        self.ptr.as_ptr().cast()
    }
}

impl<T> Drop for Fid<T> {
    fn drop(&mut self) {
        // SAFETY: a live object we own; closed once. Objects are dropped in the reverse
        // order of their creation (field order of Nic), as libfabric requires.
        unsafe { sys::fi_close(self.fid()) };
    }
}

/// Creates a libfabric object with `make` (which gets the out-pointer) and owns it.
///
/// # Safety
/// `make` must store a new object (whose first member is its `fid`) or fail.
unsafe fn create<T>(call: &'static str, make: impl FnOnce(*mut *mut T) -> c_int) -> Result<Fid<T>> {
    let mut out: *mut T = ptr::null_mut();
    check(call, make(&mut out))?;
    // SAFETY: a new object, owned by nobody else (the caller's contract).
    unsafe { Fid::own(call, out) }
}

// The tracked context's scratch space is the provider's `fi_context2`.
const _: () = assert!(
    std::mem::size_of::<sys::fi_context2>() == std::mem::size_of::<[usize; PROVIDER_SPACE_WORDS]>()
);

/// The per-operation context that `FI_CONTEXT`/`FI_CONTEXT2` providers write into until
/// the operation completes, with the operation's place among those its counter counts.
struct OpContext {
    /// Completed by the read counter (reads, fetching atomics) or the write counter.
    read: bool,
    /// Operations of its kind issued before it.
    ticket: u64,
    /// Boxed: the provider holds its address.
    ctx: Box<TrackedContext>,
    /// The origin bytes of a copied operation ([`Nic::write_copied`]): the provider reads
    /// them until the operation completes (a `Vec`'s heap buffer does not move with it).
    kept: Vec<u8>,
    /// The owner of the origin bytes of a shared-buffer write ([`Nic::write_shared`]),
    /// held until the operation completes.
    _shared: Option<Arc<dyn Send + Sync>>,
    /// The thread it counts for: the poster (`attention::thread_tag`), or the issuer a
    /// [`post_for`] names.
    thread: u64,
    /// Posted under [`track_own`]: it makes a queue entry, which marks `ctx` done, and the
    /// context is freed only once it did (the counters may count the operation before
    /// anyone read the entry).
    own: bool,
}

impl OpContext {
    /// What this context keeps alive, for [`Nic::held_bytes`]: the copy of the origin
    /// bytes and its own bookkeeping (without the latter, 8-byte writes that no flush
    /// completes would keep ~150 bytes each while the budget counted 8).
    fn held(&self) -> usize {
        self.kept.len() + CONTEXT_BYTES
    }
}

/// The bookkeeping of one posted operation of ours: its [`OpContext`] and the boxed
/// [`TrackedContext`] the provider holds.
const CONTEXT_BYTES: usize =
    std::mem::size_of::<OpContext>() + std::mem::size_of::<TrackedContext>();

thread_local! {
    /// While the calling thread posts operations for a flush of thread scope: the tag of
    /// the thread they belong to (0: the calling thread's own) and whether each makes its
    /// own queue entry ([`track_own`], [`post_for`]).
    static OWN_POSTS: std::cell::Cell<(u64, bool)> = const { std::cell::Cell::new((0, false)) };
}

/// Runs `post` with the posting state `state` in force (restored after, also when `post`
/// unwinds).
fn posting_as<R>(state: (u64, bool), post: impl FnOnce() -> R) -> R {
    /// Restores the previous state.
    struct Restore((u64, bool));
    impl Drop for Restore {
        fn drop(&mut self) {
            OWN_POSTS.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(OWN_POSTS.with(|c| c.replace(state)));
    post()
}

/// Runs `post`; every operation it posts makes its own queue entry, so that the calling
/// thread's flush of thread scope ([`Nic::flush_own`]) waits for its own operations only,
/// not for every thread's (seed 000 §2.1). The endpoint's counters count them as any other.
pub(crate) fn track_own<R>(post: impl FnOnce() -> R) -> R {
    // Inside a `post_for`: the operations stay the issuer's.
    if OWN_POSTS.with(std::cell::Cell::get).0 != 0 {
        return post();
    }
    posting_as((crate::attention::thread_tag(), true), post)
}

/// Runs `post`, which posts operations on behalf of thread `issuer` (the engine running an
/// operation another thread deferred): they count as that thread's, without their own
/// queue entries, so that its flush of thread scope completes them too ([`Nic::flush_own`]
/// then completes everything).
pub(crate) fn post_for<R>(issuer: u64, post: impl FnOnce() -> R) -> R {
    posting_as((issuer, false), post)
}

/// The queue-entry flag of an operation of ours posted now ([`track_own`]).
fn own_completion() -> u64 {
    if OWN_POSTS.with(std::cell::Cell::get).1 {
        u64::from(sys::FI_COMPLETION)
    } else {
        0
    }
}

/// The turn of the one thread that polls the endpoint ([`Nic::progress`]), given back
/// when dropped — by a poll that panicked too, so that the others do not yield for ever.
struct PollToken<'a>(&'a AtomicBool);

impl Drop for PollToken<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the next poller's `compare_exchange`.
        self.0.store(false, Ordering::Release);
    }
}

/// libfabric's name of an atomic operation.
fn fi_op(op: NetOp) -> sys::fi_op {
    match op {
        NetOp::Min => sys::fi_op_FI_MIN,
        NetOp::Max => sys::fi_op_FI_MAX,
        NetOp::Sum => sys::fi_op_FI_SUM,
        NetOp::Prod => sys::fi_op_FI_PROD,
        NetOp::Lor => sys::fi_op_FI_LOR,
        NetOp::Land => sys::fi_op_FI_LAND,
        NetOp::Bor => sys::fi_op_FI_BOR,
        NetOp::Band => sys::fi_op_FI_BAND,
        NetOp::Lxor => sys::fi_op_FI_LXOR,
        NetOp::Bxor => sys::fi_op_FI_BXOR,
        NetOp::Read => sys::fi_op_FI_ATOMIC_READ,
        NetOp::Write => sys::fi_op_FI_ATOMIC_WRITE,
        NetOp::CompareSwap => sys::fi_op_FI_CSWAP,
    }
}

/// libfabric's name of an element type.
fn fi_datatype(ty: NetType) -> sys::fi_datatype {
    match ty {
        NetType::I8 => sys::fi_datatype_FI_INT8,
        NetType::U8 => sys::fi_datatype_FI_UINT8,
        NetType::I16 => sys::fi_datatype_FI_INT16,
        NetType::U16 => sys::fi_datatype_FI_UINT16,
        NetType::I32 => sys::fi_datatype_FI_INT32,
        NetType::U32 => sys::fi_datatype_FI_UINT32,
        NetType::I64 => sys::fi_datatype_FI_INT64,
        NetType::U64 => sys::fi_datatype_FI_UINT64,
        NetType::F32 => sys::fi_datatype_FI_FLOAT,
        NetType::F64 => sys::fi_datatype_FI_DOUBLE,
    }
}

/// How a posted atomic completes (every one is also counted by its completion counter).
#[derive(Debug)]
enum Completion {
    /// By a later flush; the caller's buffers stay valid until then.
    Counted,
    /// By a later flush; the operand is copied by the post (`FI_INJECT`, no result).
    Injected,
    /// By a later flush; the operand lies in this buffer, which the operation's context
    /// keeps until then (no result).
    Kept(Vec<u8>),
    /// By a completion-queue entry that marks this context (`FI_COMPLETION`).
    Tracked(*mut TrackedContext),
}

/// The context an operation is posted with ([`Nic::post_in`]).
enum Context {
    /// One of ours, freed by the flush that sees the operation complete, with the origin
    /// bytes it keeps until then (empty when the caller keeps them).
    Ours(Vec<u8>),
    /// One of ours that holds the owner of the origin bytes until the flush frees it.
    Shared(Arc<dyn Send + Sync>),
    /// The caller's, alive until it says the operation completed.
    Tracked(*mut TrackedContext),
}

/// Operations of one kind (counted by one completion counter).
#[derive(Default)]
struct Issued {
    /// Posted, or being posted (a ticket is taken before the post).
    posted: AtomicU64,
    /// Taken tickets whose post failed: they will never complete.
    failed: AtomicU64,
    /// Tickets of operations posted over the wire (completed by its answers, not by the
    /// provider's counter).
    wire: AtomicU64,
    /// The highest value read from the provider's counter: while it covers every ticket
    /// the provider serves, a wait need not read the counter (each read of a
    /// manual-progress provider's counter drives its progress: system calls).
    seen: AtomicU64,
}

impl Issued {
    /// Tickets the provider completes (not the wire's, nor failed posts).
    fn served_by_provider(&self) -> u64 {
        // Relaxed: counts that only grow; callers only choose between reading the
        // provider once more or once less.
        self.posted
            .load(Ordering::Relaxed)
            .saturating_sub(self.wire.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed))
    }

    /// True when operations the provider serves may be in flight (its counter's last
    /// value read does not cover them).
    fn provider_in_flight(&self) -> bool {
        // Relaxed: as above.
        self.seen.load(Ordering::Relaxed) < self.served_by_provider()
    }
}

/// One network interface of this process: an RDM endpoint with its address vector,
/// completion queue and completion counters. `Sync`: the domain is opened
/// `FI_THREAD_SAFE`, and our own bookkeeping is atomic or behind a mutex.
pub(crate) struct Nic {
    // Field order is drop order: the endpoint before what it is bound to, the domain and
    // fabric last.
    ep: Fid<sys::fid_ep>,
    cq: Fid<sys::fid_cq>,
    /// Completed writes and atomics (`FI_WRITE`).
    write_cntr: Fid<sys::fid_cntr>,
    /// Completed reads and fetching atomics (`FI_READ`).
    read_cntr: Fid<sys::fid_cntr>,
    av: Fid<sys::fid_av>,
    domain: Fid<sys::fid_domain>,
    _fabric: Fid<sys::fid_fabric>,
    info: InfoList,
    described: Described,
    /// Operations `write_cntr` and `read_cntr` count.
    writes: Issued,
    reads: Issued,
    /// Contexts of posted operations, freed by the flush that sees them complete.
    contexts: Mutex<Vec<OpContext>>,
    /// Bytes the contexts keep (copies of origin data and their own), for
    /// [`Nic::held_bytes`].
    held: AtomicUsize,
    /// An operation completed in error (or the queue failed), whoever read the entry:
    /// [`Nic::has_failed`].
    failed: std::sync::atomic::AtomicBool,
    /// Requested keys of our registrations (providers without FI_MR_PROV_KEY).
    next_key: AtomicU64,
    /// The completion queue has a wait object ([`Nic::open_with`]).
    waitable: bool,
    /// The wait object's file descriptor (owned by libfabric, open while the queue is),
    /// when the provider gives one: [`Nic::wait_activity`] polls it itself.
    wait_fd: Option<std::os::raw::c_int>,
    /// Atomics to other nodes as messages of ours ([`wire`]), where the provider's
    /// atomics are software too and [`wire::ENV`] does not say `provider`.
    wire: Option<Arc<Wire>>,
    /// [`NetAtomics::ProviderEverywhere`]: this node's atomic words go through the
    /// provider too ([`Nic::atomics_mix_with_cpu`] is false).
    cpu_atomics_apart: bool,
    /// Polls of [`Nic::progress`] so far.
    polls: AtomicU64,
    /// The wire's look also tells whether the queue's descriptor is readable
    /// ([`Wire::watch_also`]).
    queue_watched: bool,
    /// A thread is reading the endpoint in [`Nic::progress`] (see there).
    polling: AtomicBool,
    /// Peers whose end the job records ([`Nic::watch_peer`]): a wait of the endpoint that
    /// stalls after one of them ended, with operations to it possibly in flight, fails
    /// instead of waiting for ever ([`ExitVigil`]).
    watched: std::sync::RwLock<Watched>,
    /// Some peer is watched (the posts' fast path skips the table otherwise).
    watching: AtomicBool,
    /// Numbers the posts to watched peers ([`WatchedPeer::last_post`]).
    post_seq: AtomicU64,
    /// Every post numbered below this has completed (a flush saw all complete).
    quiet_seq: AtomicU64,
}

/// The watched peers, and where each is in the list.
#[derive(Default)]
struct Watched {
    peers: Vec<WatchedPeer>,
    index: std::collections::HashMap<sys::fi_addr_t, usize>,
}

/// A peer of the endpoint whose end can be known.
struct WatchedPeer {
    /// Its rank, as the error reports it (in the window that registered it).
    rank: usize,
    ended: PeerEnded,
    /// The number of the last post to it, plus one (0: none yet): an operation to it may
    /// be in flight while this is at least `Nic::quiet_seq`.
    last_post: AtomicU64,
}

/// How long a wait of the endpoint goes on without any completion after it saw a peer
/// end before it fails: an operation the peer completed before it ended has its completion
/// read by then (the progress of the wait reads it), one it never served never completes.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Polls of a wait between two looks at the watched peers.
const EXIT_LOOK_EVERY: u32 = 32;

/// What one wait of the endpoint knows about ended peers: the first seen, and since when
/// nothing completed.
#[derive(Default)]
struct ExitVigil {
    /// The one peer the wait is for (a post), else any with operations in flight.
    only: Option<sys::fi_addr_t>,
    polls: u32,
    /// A peer seen ended, and when the wait last saw progress (or the end) after that.
    seen: Option<(usize, std::time::Instant)>,
    /// Completions counted at the last look.
    mark: Option<u64>,
}

impl ExitVigil {
    /// Fails with `PeerGone` once a watched peer has ended and `EXIT_GRACE` went by
    /// without completions (`completed`, read at most every [`EXIT_LOOK_EVERY`] polls, says
    /// how many there were so far).
    fn check(&mut self, nic: &Nic, completed: impl FnOnce() -> u64) -> Result<()> {
        self.polls += 1;
        if self.polls % EXIT_LOOK_EVERY != 0 || !nic.watches_peers() {
            return Ok(());
        }
        let now = completed();
        let moved = self.mark.is_some_and(|m| m != now);
        self.mark = Some(now);
        match &mut self.seen {
            Some((_, since)) if moved => *since = std::time::Instant::now(),
            Some((rank, since)) if since.elapsed() >= EXIT_GRACE => {
                return Err(Error::PeerGone { rank: *rank });
            }
            Some(_) => {}
            None => {
                if let Some(rank) = nic.ended_peer(self.only) {
                    self.seen = Some((rank, std::time::Instant::now()));
                }
            }
        }
        Ok(())
    }
}

// SAFETY: the domain is FI_THREAD_SAFE (libfabric serializes inside); every field of ours
// is atomic or behind a mutex; the raw pointers are owned handles.
unsafe impl Send for Nic {}
// SAFETY: as for Send.
unsafe impl Sync for Nic {}

impl std::fmt::Debug for Nic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nic")
            .field("described", &self.described)
            .finish_non_exhaustive()
    }
}

/// A registered memory region: its key and local descriptor, and how peers address it.
#[derive(Debug)]
pub(crate) struct Registration {
    mr: Fid<sys::fid_mr>,
    /// The key peers name it with.
    pub key: u64,
    /// The address a peer puts in its operations for the first byte (the virtual address
    /// with FI_MR_VIRT_ADDR, else 0).
    pub remote_base: u64,
    base: usize,
    len: usize,
    /// The wire that lets peers address it, told when it goes.
    wire: Option<Arc<Wire>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Before the registration closes: no atomic of the wire touches the memory after.
        if let Some(w) = &self.wire {
            w.remove_region(self.key);
        }
    }
}

// SAFETY: a registration is an owned handle; libfabric's domain is thread-safe.
unsafe impl Send for Registration {}
// SAFETY: as for Send.
unsafe impl Sync for Registration {}

impl Registration {
    fn desc(&self) -> *mut c_void {
        // SAFETY: a live registration.
        unsafe { sys::fi_mr_desc(self.mr.as_ptr()) }
    }

    /// True when `len` bytes at `ptr` lie inside the registered memory.
    fn covers(&self, ptr: usize, len: usize) -> bool {
        ptr >= self.base && ptr - self.base <= self.len && len <= self.len - (ptr - self.base)
    }
}

/// Marks the operation whose context is `ctx` done (`failed`: in error).
///
/// # Safety
/// `ctx` is null or a live [`TrackedContext`].
unsafe fn mark(ctx: *mut c_void, failed: bool) {
    // SAFETY: the caller's contract.
    if let Some(t) = unsafe { ctx.cast::<TrackedContext>().as_ref() } {
        t.mark(failed);
    }
}

impl Nic {
    /// Opens provider `provider` on the interface with node address `node` (for instance
    /// `127.0.0.1`): `Error::Unsupported` when the provider cannot serve one-sided
    /// communication there.
    pub(crate) fn open(provider: &str, node: &str) -> Result<Nic> {
        Self::open_with(provider, node, false)
    }

    /// [`Nic::open`]; `waitable`: the completion queue gets a wait object, so that a
    /// thread can block in [`Nic::wait_activity`] (the `block` progress mode).
    pub(crate) fn open_with(provider: &str, node: &str, waitable: bool) -> Result<Nic> {
        let atomics = std::env::var(wire::ENV).ok();
        Self::open_as(provider, node, waitable, atomics.as_deref())
    }

    /// [`Nic::open_with`], with atomics to other nodes as `atomics` says (the values of
    /// [`wire::ENV`]; `None`: the default).
    pub(crate) fn open_as(
        provider: &str,
        node: &str,
        waitable: bool,
        atomics: Option<&str>,
    ) -> Result<Nic> {
        let info = getinfo(provider, node)?;
        let i = info.chosen.as_ptr();
        // SAFETY: `i` is a valid entry of the list `info` owns; every call gets valid
        // out-pointers, and each object is owned by a Fid right after it is created.
        unsafe {
            let fabric = create("fi_fabric", |out| {
                sys::fi_fabric((*i).fabric_attr, out, ptr::null_mut())
            })?;
            let domain = create("fi_domain", |out| {
                sys::fi_domain(fabric.as_ptr(), i, out, ptr::null_mut())
            })?;
            let mut av_attr = sys::fi_av_attr {
                type_: sys::fi_av_type_FI_AV_TABLE,
                ..Default::default()
            };
            let av = create("fi_av_open", |out| {
                sys::fi_av_open(domain.as_ptr(), &mut av_attr, out, ptr::null_mut())
            })?;
            let open_cq = |wait_obj| {
                let mut cq_attr = sys::fi_cq_attr {
                    format: sys::fi_cq_format_FI_CQ_FORMAT_CONTEXT,
                    wait_obj,
                    ..Default::default()
                };
                create("fi_cq_open", |out| {
                    sys::fi_cq_open(domain.as_ptr(), &mut cq_attr, out, ptr::null_mut())
                })
            };
            // A waitable queue: a file descriptor where the provider has one (the server
            // then learns when peers' operations woke it), else its own kind of wait.
            let (cq, wait_fd) = if waitable {
                match open_cq(sys::fi_wait_obj_FI_WAIT_FD) {
                    Ok(cq) => {
                        let mut fd: std::os::raw::c_int = -1;
                        let rc = sys::fi_control(
                            cq.fid(),
                            sys::FI_GETWAIT as std::os::raw::c_int,
                            (&mut fd as *mut std::os::raw::c_int).cast(),
                        );
                        (cq, (rc == 0 && fd >= 0).then_some(fd))
                    }
                    Err(_) => (open_cq(sys::fi_wait_obj_FI_WAIT_UNSPEC)?, None),
                }
            } else {
                (open_cq(sys::fi_wait_obj_FI_WAIT_NONE)?, None)
            };
            let open_cntr = || {
                let mut attr = sys::fi_cntr_attr {
                    events: sys::fi_cntr_events_FI_CNTR_EVENTS_COMP,
                    wait_obj: sys::fi_wait_obj_FI_WAIT_NONE,
                    ..Default::default()
                };
                create("fi_cntr_open", |out| {
                    sys::fi_cntr_open(domain.as_ptr(), &mut attr, out, ptr::null_mut())
                })
            };
            let write_cntr = open_cntr()?;
            let read_cntr = open_cntr()?;
            let ep = create("fi_endpoint", |out| {
                sys::fi_endpoint(domain.as_ptr(), i, out, ptr::null_mut())
            })?;
            check("fi_ep_bind(av)", sys::fi_ep_bind(ep.as_ptr(), av.fid(), 0))?;
            // Successful operations complete through the counters; the queue carries
            // errors (and is what drives a manual-progress provider).
            check(
                "fi_ep_bind(cq)",
                sys::fi_ep_bind(
                    ep.as_ptr(),
                    cq.fid(),
                    u64::from(sys::FI_TRANSMIT | sys::FI_RECV) | sys::FI_SELECTIVE_COMPLETION,
                ),
            )?;
            check(
                "fi_ep_bind(cntr)",
                sys::fi_ep_bind(ep.as_ptr(), write_cntr.fid(), u64::from(sys::FI_WRITE)),
            )?;
            check(
                "fi_ep_bind(cntr)",
                sys::fi_ep_bind(ep.as_ptr(), read_cntr.fid(), u64::from(sys::FI_READ)),
            )?;
            check("fi_enable", sys::fi_enable(ep.as_ptr()))?;
            let described = Described {
                provider: CStr::from_ptr((*(*i).fabric_attr).prov_name)
                    .to_string_lossy()
                    .into_owned(),
                mr_mode: (*(*i).domain_attr).mr_mode as u64,
                mode: (*i).mode,
                manual_progress: (*(*i).domain_attr).data_progress
                    == sys::fi_progress_FI_PROGRESS_MANUAL,
                msg_order: (*(*i).tx_attr).msg_order,
            };
            let atomics = net_atomics(&described.provider, atomics)?;
            let wire = open_wire(node, atomics)?;
            // SAFETY: the queue's descriptor, open now and borrowed only for the
            // registration; the kernel drops the entry when libfabric closes it.
            let queue_watched = match (&wire, wait_fd) {
                (Some(w), Some(fd)) => w
                    .watch_also(std::os::fd::BorrowedFd::borrow_raw(fd))
                    .is_ok(),
                _ => false,
            };
            Ok(Nic {
                ep,
                cq,
                write_cntr,
                read_cntr,
                av,
                domain,
                _fabric: fabric,
                info,
                described,
                writes: Issued::default(),
                reads: Issued::default(),
                contexts: Mutex::new(Vec::new()),
                held: AtomicUsize::new(0),
                failed: std::sync::atomic::AtomicBool::new(false),
                next_key: AtomicU64::new(1),
                waitable,
                wait_fd,
                wire,
                cpu_atomics_apart: atomics == NetAtomics::ProviderEverywhere,
                polls: AtomicU64::new(0),
                queue_watched,
                polling: AtomicBool::new(false),
                watched: std::sync::RwLock::default(),
                watching: AtomicBool::new(false),
                post_seq: AtomicU64::new(0),
                quiet_seq: AtomicU64::new(0),
            })
        }
    }

    /// Opens the provider named by `requested` (the value of [`PROVIDER_ENV`]), or else the
    /// first of [`PREFERRED`] this machine offers at `node`. A named provider that cannot
    /// serve is an error, never a silent fallback.
    pub(crate) fn open_chosen(requested: Option<&str>, node: &str) -> Result<Nic> {
        Self::open_chosen_with(requested, node, false)
    }

    /// [`Nic::open_chosen`]; `waitable` as for [`Nic::open_with`].
    pub(crate) fn open_chosen_with(
        requested: Option<&str>,
        node: &str,
        waitable: bool,
    ) -> Result<Nic> {
        if let Some(name) = requested.filter(|n| !n.is_empty()) {
            return Nic::open_with(name, node, waitable);
        }
        let mut tried = Vec::new();
        for name in PREFERRED {
            match Nic::open_with(name, node, waitable) {
                Ok(nic) => return Ok(nic),
                Err(Error::Unsupported(why)) => tried.push(why),
                Err(e) => return Err(e),
            }
        }
        Err(Error::Unsupported(format!(
            "no libfabric provider for one-sided communication at {node}: {}",
            tried.join("; ")
        )))
    }

    /// [`Nic::open_chosen`] with the provider named by [`PROVIDER_ENV`], if set.
    pub(crate) fn open_from_env(node: &str) -> Result<Nic> {
        let requested = std::env::var(PROVIDER_ENV).ok();
        Nic::open_chosen(requested.as_deref(), node)
    }

    /// What the provider is and asks for.
    pub(crate) fn described(&self) -> &Described {
        &self.described
    }

    /// True when the network's atomics are applied at the target with CPU atomics: a word
    /// that peers change with network atomics may then be changed on its own node with CPU
    /// atomics too, and both are atomic with respect to each other. So with the wire (its
    /// atomics are CPU atomics), and with the provider's own atomics on `tcp;ofi_rxm`
    /// ([`provider_atomics_mix_with_cpu`]) unless `provider-everywhere` was asked for.
    /// NIC atomics (`verbs`, `cxi`, `efa`, …) are not coherent with the CPU's in general.
    pub(crate) fn atomics_mix_with_cpu(&self) -> bool {
        self.wire.is_some()
            || (!self.cpu_atomics_apart && provider_atomics_mix_with_cpu(&self.described.provider))
    }

    /// This endpoint's address, to hand to the peers: the length of the provider's
    /// address (`fi_getname`, two bytes, little-endian), that address, and where the
    /// wire listens (text; empty without a wire).
    pub(crate) fn name(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: buf is valid for len bytes; len is updated to the name's length.
        let rc = unsafe { sys::fi_getname(self.ep.fid(), buf.as_mut_ptr().cast(), &mut len) };
        check("fi_getname", rc)?;
        buf.truncate(len);
        let mut name = (len as u16).to_le_bytes().to_vec();
        name.extend_from_slice(&buf);
        if let Some(w) = &self.wire {
            name.extend_from_slice(w.address().to_string().as_bytes());
        }
        Ok(name)
    }

    /// Inserts a peer's address (from its [`Nic::name`]) into the address vector (and
    /// its wire's, if it has one and so do we).
    pub(crate) fn insert(&self, name: &[u8]) -> Result<sys::fi_addr_t> {
        let malformed = || Error::InvalidArgument("a malformed endpoint name".into());
        let (len, rest) = name.split_first_chunk::<2>().ok_or_else(malformed)?;
        let len = usize::from(u16::from_le_bytes(*len));
        if rest.len() < len {
            return Err(malformed());
        }
        let (name, wire_at) = rest.split_at(len);
        let addr = self.insert_provider(name)?;
        if let Some(w) = &self.wire {
            if !wire_at.is_empty() {
                let at = std::str::from_utf8(wire_at)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(malformed)?;
                w.add_peer(addr, at);
            }
        }
        Ok(addr)
    }

    /// Waits until the atomics (puts as atomic writes among them) sent to `peer` over the
    /// wire are answered: a read through the provider after them must see them, as it sees
    /// the RMA writes issued before it (the provider orders a read behind them; the wire's
    /// connection is another stream). Nothing to wait for in the common case.
    fn settle_wire(&self, peer: sys::fi_addr_t) -> Result<()> {
        let Some(w) = &self.wire else {
            return Ok(());
        };
        let mut backoff = crate::backoff::Backoff::for_network();
        let mut hang = crate::diag::HangClock::new();
        while w.pending_to(peer) {
            self.progress().map_err(|e| self.blame(e))?;
            backoff.snooze();
            // Reported, not abandoned: the answers write into the callers' buffers.
            hang.tick_job(|| {
                format!("the answers of atomics sent over the wire to endpoint {peer}")
            });
        }
        Ok(())
    }

    /// True when atomics to `peer` go over the wire ([`wire`]).
    pub(crate) fn wire_reaches(&self, peer: sys::fi_addr_t) -> bool {
        self.wire.as_ref().is_some_and(|w| w.reaches(peer))
    }

    /// True when long puts to `peer` go over the wire ([`Nic::put_on_wire`]): it reaches
    /// the peer, and the provider's RMA is slower there (`long_puts_on_wire`).
    pub(crate) fn long_puts_reach(&self, peer: sys::fi_addr_t) -> bool {
        self.wire_reaches(peer) && long_puts_on_wire(&self.described.provider)
    }

    /// Inserts a provider address into the address vector.
    ///
    /// An insert that inserted nothing without an error code is tried again, twice: on
    /// `udp;ofi_rxd` one came back empty once in CI (a rank's window creation failed with
    /// `fi_av_insert: Operation not permitted`, not reproduced in 6 runs since). rxd adds a
    /// peer's address itself when a packet from it arrives first; our reading is that an
    /// insert raced that one, and that an insert after it finds the entry.
    fn insert_provider(&self, name: &[u8]) -> Result<sys::fi_addr_t> {
        let mut rc = 0;
        for _ in 0..3 {
            let mut addr: sys::fi_addr_t = sys::FI_ADDR_UNSPEC;
            // SAFETY: name holds one address in the provider's format (from fi_getname);
            // addr receives one entry.
            rc = unsafe {
                sys::fi_av_insert(
                    self.av.as_ptr(),
                    name.as_ptr().cast(),
                    1,
                    &mut addr,
                    0,
                    ptr::null_mut(),
                )
            };
            if rc == 1 {
                return Ok(addr);
            }
            if rc < 0 {
                break;
            }
            std::thread::yield_now();
        }
        Err(network_error("fi_av_insert", i64::from(rc.min(-1))))
    }

    /// Registers `len` bytes at `base` for remote reads, writes and atomics (and as a
    /// local source or result buffer).
    ///
    /// # Safety
    /// The memory must stay valid until the registration is dropped; peers may then write
    /// it at any time, so nothing else may hold a Rust reference to it meanwhile.
    pub(crate) unsafe fn register(&self, base: *mut u8, len: usize) -> Result<Registration> {
        // SAFETY: the caller's contract.
        unsafe { self.register_as(base, len, None) }
    }

    /// [`Nic::register`], under the key `wanted` where the provider lets us choose keys and
    /// addresses by offset (every process can then name the same key for its own memory:
    /// peers need no table of keys and bases); under a key of its own otherwise, or when
    /// the provider refuses `wanted` (already taken in this domain).
    ///
    /// # Safety
    /// As for [`Nic::register`].
    pub(crate) unsafe fn register_as(
        &self,
        base: *mut u8,
        len: usize,
        wanted: Option<u64>,
    ) -> Result<Registration> {
        let access =
            u64::from(sys::FI_READ | sys::FI_WRITE | sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE);
        let ours = u64::from(sys::FI_MR_PROV_KEY | sys::FI_MR_VIRT_ADDR);
        let wanted = wanted.filter(|_| self.described.mr_mode & ours == 0);
        let reg = |requested: u64| {
            // SAFETY: the caller's contract covers the memory; the registration is owned
            // at once.
            unsafe {
                create("fi_mr_reg", |out| {
                    sys::fi_mr_reg(
                        self.domain.as_ptr(),
                        base.cast(),
                        len,
                        access,
                        0,
                        requested,
                        0,
                        out,
                        ptr::null_mut(),
                    )
                })
            }
        };
        let mr = match wanted.map(reg) {
            Some(Ok(mr)) => mr,
            // Relaxed: a counter of unique keys, nothing published through it.
            _ => reg(self.next_key.fetch_add(1, Ordering::Relaxed))?,
        };
        if self.described.mr_mode & u64::from(sys::FI_MR_ENDPOINT) != 0 {
            // SAFETY: live registration and endpoint.
            unsafe {
                check("fi_mr_bind", sys::fi_mr_bind(mr.as_ptr(), self.ep.fid(), 0))?;
                check("fi_mr_enable", sys::fi_mr_enable(mr.as_ptr()))?;
            }
        }
        // SAFETY: a live registration.
        let key = unsafe { sys::fi_mr_key(mr.as_ptr()) };
        let remote_base = if self.described.mr_mode & u64::from(sys::FI_MR_VIRT_ADDR) != 0 {
            base as u64
        } else {
            0
        };
        if let Some(w) = &self.wire {
            w.add_region(key, base as usize, len, remote_base);
        }
        Ok(Registration {
            mr,
            key,
            remote_base,
            base: base as usize,
            len,
            wire: self.wire.clone(),
        })
    }

    fn issued(&self, read: bool) -> &Issued {
        if read {
            &self.reads
        } else {
            &self.writes
        }
    }

    /// Posts one operation to `peer` with `post(context)` until the provider takes it (it
    /// answers "again" while it connects or its queues are full), driving progress in
    /// between. The operation's ticket and context are taken first, under the contexts'
    /// lock, so a flush that frees the contexts of completed tickets never frees one still
    /// in flight. The context is as `context` says: one of ours (keeping
    /// the operation's copied origin bytes until a flush sees it complete), or a tracked
    /// one its owner keeps alive until the operation completed.
    fn post_in(
        &self,
        call: &'static str,
        read: bool,
        peer: sys::fi_addr_t,
        context: Context,
        mut post: impl FnMut(*mut c_void) -> isize,
    ) -> Result<()> {
        let ctx: *mut c_void = 'ctx: {
            let mut contexts = self
                .contexts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Relaxed: tickets are taken under the contexts' lock; the flush reads the
            // count before it waits and frees only contexts below it. A tracked operation
            // takes one too: the counters count it like any other.
            let ticket = self.issued(read).posted.fetch_add(1, Ordering::Relaxed);
            let (issuer, own) = OWN_POSTS.with(std::cell::Cell::get);
            let thread = if issuer != 0 {
                issuer
            } else {
                crate::attention::thread_tag()
            };
            let (kept, shared) = match context {
                Context::Tracked(t) => break 'ctx t.cast(),
                Context::Ours(kept) => (kept, None),
                Context::Shared(owner) => (Vec::new(), Some(owner)),
            };
            let mut op = OpContext {
                read,
                ticket,
                ctx: Box::default(),
                kept,
                _shared: shared,
                thread,
                own,
            };
            let p: *mut TrackedContext = &mut *op.ctx;
            // Relaxed: a budget (see held_bytes), not a synchronization.
            self.held.fetch_add(op.held(), Ordering::Relaxed);
            contexts.push(op);
            p.cast()
        };
        // "Again" while the provider connects or its queues drain; for this long at most:
        // a peer that is gone can keep answering it (tcp;ofi_rxm reconnecting to a closed
        // endpoint), and a post must fail then, not spin for ever.
        self.note_post(peer);
        let give_up = std::time::Instant::now() + POST_PATIENCE;
        let mut vigil = ExitVigil {
            only: Some(peer),
            ..ExitVigil::default()
        };
        loop {
            let rc = post(ctx);
            if rc >= 0 {
                return Ok(());
            }
            let failure = if !again(rc) {
                Some(network_error(call, rc as i64))
            } else if let Err(e) = self.progress() {
                Some(e)
            } else if let Err(e) = vigil.check(self, || self.all_completions()) {
                // A peer ended while its queue stayed full.
                Some(e)
            } else if std::time::Instant::now() > give_up {
                Some(Error::Network {
                    call,
                    code: sys::FI_EAGAIN as i32,
                    text: format!(
                        "the provider refused the operation for {} s (is the peer gone?)",
                        POST_PATIENCE.as_secs()
                    ),
                })
            } else {
                None
            };
            if let Some(e) = failure {
                // Relaxed: read by flushes with the completion counters. The ticket will
                // never complete: counted as failed, so that flushes do not wait for it.
                self.issued(read).failed.fetch_add(1, Ordering::Relaxed);
                return Err(self.blame(e));
            }
            std::thread::yield_now();
        }
    }

    /// The descriptor of `len` bytes at `ptr` in `local` (a registration of the caller's),
    /// or null when the provider needs none.
    fn local_desc(
        &self,
        local: Option<&Registration>,
        ptr: usize,
        len: usize,
    ) -> Result<*mut c_void> {
        match local {
            Some(r) if r.covers(ptr, len) => Ok(r.desc()),
            Some(_) => Err(Error::InvalidArgument(
                "a local buffer lies outside the registration given for it".into(),
            )),
            None if self.described.mr_mode & u64::from(sys::FI_MR_LOCAL) != 0 => {
                Err(Error::InvalidArgument(format!(
                    "provider {} needs registered local buffers",
                    self.described.provider
                )))
            }
            None => Ok(ptr::null_mut()),
        }
    }

    /// Writes `src` to `to`; complete at the target once a later [`Nic::flush`] returns
    /// (`FI_DELIVERY_COMPLETE`).
    ///
    /// # Safety
    /// `src` must stay valid and unchanged until the next flush returns.
    pub(crate) unsafe fn write(
        &self,
        src: &[u8],
        local: Option<&Registration>,
        to: Remote,
    ) -> Result<()> {
        let desc = self.local_desc(local, src.as_ptr() as usize, src.len())?;
        // SAFETY: the caller's contract.
        unsafe { self.post_write(src.as_ptr(), src.len(), desc, to, Context::Ours(Vec::new())) }
    }

    /// Writes a copy of `src` to `to`: `src` is free when this returns, and the write is
    /// complete at the target once a later [`Nic::flush`] returns. The copy lives in the
    /// operation's context until then ([`Nic::held_bytes`]).
    pub(crate) fn write_copied(&self, src: &[u8], to: Remote) -> Result<()> {
        self.write_copied_pieces(src, &[(0, 0, src.len())], to)
    }

    /// [`Nic::write_copied`] of `pieces` — (offset in `src`, offset from `to`, length):
    /// one copy of them all, one write per piece.
    pub(crate) fn write_copied_pieces(
        &self,
        src: &[u8],
        pieces: &[(usize, usize, usize)],
        to: Remote,
    ) -> Result<()> {
        // The copy is not registered: an error for providers that need registered buffers.
        self.local_desc(None, 0, 0)?;
        let pieces: Vec<_> = pieces.iter().filter(|p| p.2 > 0).collect();
        let mut kept = Vec::with_capacity(pieces.iter().map(|p| p.2).sum());
        for &&(o, _, len) in &pieces {
            kept.extend_from_slice(&src[o..o + len]);
        }
        let base = kept.as_ptr();
        let mut kept = Some(kept);
        let mut at = 0;
        for (i, &&(_, t, len)) in pieces.iter().enumerate() {
            // The last piece's context keeps the copy: a flush frees a context only once
            // every operation posted before it completed, the earlier pieces included.
            let context = match i + 1 == pieces.len() {
                true => Context::Ours(kept.take().unwrap_or_default()),
                false => Context::Ours(Vec::new()),
            };
            let here = Remote {
                addr: to.addr + t as u64,
                ..to
            };
            // SAFETY: `at..at + len` lies inside the copy (the pieces' lengths sum to
            // its length), whose heap buffer stays put and alive until a flush sees the
            // last piece complete.
            let posted =
                unsafe { self.post_write(base.add(at), len, ptr::null_mut(), here, context) };
            if let Err(e) = posted {
                // Earlier pieces may still read the copy, and no context keeps it: it
                // outlives them by never being freed (a failing network only).
                std::mem::forget(kept);
                return Err(e);
            }
            at += len;
        }
        Ok(())
    }

    /// Writes `src` to `to` from where it is, neither copied nor waited for: `owner`
    /// (which owns `src`) is held until the write completes — once delivered (complete at
    /// the target once a later [`Nic::flush`] returns), or once the provider is done with
    /// `src` where the caller proves its delivery otherwise: [`WriteEnd::Followed`] on a
    /// provider that places a peer's writes in issue order (the caller's next write to
    /// the peer), [`WriteEnd::Answered`] (the target's answer).
    ///
    /// # Safety
    /// `src` lies in memory that `owner` keeps alive and that nobody changes while `owner`
    /// is alive (an `Arc<[T]>` of plain data).
    pub(crate) unsafe fn write_shared(
        &self,
        src: &[u8],
        to: Remote,
        owner: Arc<dyn Send + Sync>,
        end: WriteEnd,
    ) -> Result<()> {
        let desc = self.local_desc(None, src.as_ptr() as usize, src.len())?;
        let delivered = match end {
            WriteEnd::Delivered => true,
            WriteEnd::Followed => !self.orders_rma_writes(),
            WriteEnd::Answered => false,
        };
        let (buf, len, ctx) = (src.as_ptr().cast_mut(), src.len(), Context::Shared(owner));
        // SAFETY: the caller's contract: `src` stays valid and unchanged while `owner`
        // lives, and the context holds `owner` until the write completed.
        unsafe { self.post_rma(false, buf, len, desc, to, ctx, delivered) }
    }

    /// Writes `src` to `to` and waits until the write is complete at the target (only
    /// this one: other operations in flight are not waited for).
    pub(crate) fn write_waited(&self, src: &[u8], to: Remote) -> Result<()> {
        let desc = self.local_desc(None, src.as_ptr() as usize, src.len())?;
        let tracked = Box::new(TrackedContext::default());
        let ctx = Context::Tracked(&*tracked as *const TrackedContext as *mut TrackedContext);
        // SAFETY: `src` is borrowed, and `tracked` alive, until the wait below saw the
        // operation complete (it returns only then, or when the post failed).
        unsafe { self.post_write(src.as_ptr(), src.len(), desc, to, ctx)? };
        self.wait_tracked(tracked)
    }

    /// Writes `src` to `to` from where it is and returns once the provider is done with
    /// `src`: complete at the target once a later [`Nic::flush`] returns, as a copied write
    /// is. Where the provider places RMA writes to a peer in issue order, the write goes
    /// out with local completion only, followed by a copy of its last byte with delivery
    /// completion, which the flush waits for and which lands after it: the next write
    /// leaves while this one is still being received (a stream of 1 MiB puts ran at
    /// 0.85–0.93× the raw one's bandwidth when each write waited for its delivery, 0.92–1.04×
    /// so, in alternating runs). Elsewhere it waits for the delivery ([`Nic::write_waited`]).
    pub(crate) fn write_sent(&self, src: &[u8], to: Remote) -> Result<()> {
        if src.is_empty() || !self.orders_rma_writes() {
            return self.write_waited(src, to);
        }
        let desc = self.local_desc(None, src.as_ptr() as usize, src.len())?;
        let tracked = Box::new(TrackedContext::default());
        let ctx = Context::Tracked(&*tracked as *const TrackedContext as *mut TrackedContext);
        // SAFETY: `src` is borrowed, and `tracked` alive, until the wait below saw the
        // operation complete (it returns only then, or when the post failed).
        unsafe {
            self.post_rma(
                false,
                src.as_ptr().cast_mut(),
                src.len(),
                desc,
                to,
                ctx,
                false,
            )?
        };
        let last = src.len() - 1;
        let marker = Remote {
            addr: to.addr + last as u64,
            ..to
        };
        // The same byte to the same place: whichever lands last, the target holds it.
        let marked = self.write_copied(&src[last..], marker);
        // Waited for even when the marker failed: `src` must outlive the provider's use.
        self.wait_tracked(tracked).and(marked)
    }

    /// Writes `src` to `to` (a peer the wire reaches, [`Nic::wire_reaches`]) as put
    /// requests over the wire of at most [`WIRE_PUT_PART`] bytes each: sent from `src` as
    /// far as the kernel takes them, the rest copied into the link's queue (a flush first
    /// when [`HELD_MAX`] bytes wait there), read by the target straight into place and
    /// answered; a flush waits for the answers.
    pub(crate) fn put_on_wire(&self, src: &[u8], to: Remote) -> Result<()> {
        let Some(w) = self.wire.as_ref().filter(|w| w.reaches(to.peer)) else {
            return Err(Error::Unsupported(
                "a put over the wire to a peer it does not reach".into(),
            ));
        };
        for (i, part) in src.chunks(WIRE_PUT_PART).enumerate() {
            if w.queued_bytes() + part.len() > HELD_MAX {
                self.flush(|| Ok(()))?;
            }
            let request = wire::Request {
                kind: wire::Kind::Put,
                op: crate::ops::Op::Replace,
                ty: crate::ops::ElemType::U8,
                count: part.len(),
                key: to.key,
                addr: to.addr + (i * WIRE_PUT_PART) as u64,
            };
            self.post_on_wire("put", false, to.peer, Context::Ours(Vec::new()), |ctx| {
                // SAFETY: no result; the wire has sent or copied `part` when it returns.
                unsafe { w.post(to.peer, &request, part, &[], ptr::null_mut(), ctx) }
            })?;
        }
        Ok(())
    }

    /// Posts one write of `len` bytes at `src` with descriptor `desc` to `to`, with
    /// `context`: delivery complete, and with a queue entry when the context is tracked.
    ///
    /// # Safety
    /// `len` bytes at `src` stay valid and unchanged until the operation completed.
    unsafe fn post_write(
        &self,
        src: *const u8,
        len: usize,
        desc: *mut c_void,
        to: Remote,
        context: Context,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.post_rma(false, src.cast_mut(), len, desc, to, context, true) }
    }

    /// Posts one write (`read` false) of `len` bytes at `buf` to `at`, or one read into
    /// them from `at`, with `context` (a queue entry when tracked). A write completes once
    /// delivered at the target when `delivered` says so, else once the provider is done
    /// with `buf` (`fi_writemsg`'s default completion: only local).
    ///
    /// # Safety
    /// `len` bytes at `buf` stay valid — unchanged for a write, unread for a read — until
    /// the operation completed.
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_rma(
        &self,
        read: bool,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        at: Remote,
        context: Context,
        delivered: bool,
    ) -> Result<()> {
        if read {
            self.settle_wire(at.peer)?;
        }
        let mut desc_arr = [desc];
        let iov = sys::iovec {
            iov_base: buf.cast(),
            iov_len: len,
        };
        let rma = sys::fi_rma_iov {
            addr: at.addr,
            len,
            key: at.key,
        };
        let completion = match context {
            Context::Tracked(_) => u64::from(sys::FI_COMPLETION),
            Context::Ours(_) | Context::Shared(_) => own_completion(),
        };
        let call = if read { "fi_readmsg" } else { "fi_writemsg" };
        self.post_in(call, read, at.peer, context, |ctx| {
            let msg = sys::fi_msg_rma {
                msg_iov: &iov,
                desc: desc_arr.as_mut_ptr(),
                iov_count: 1,
                addr: at.peer,
                rma_iov: &rma,
                rma_iov_count: 1,
                context: ctx,
                data: 0,
            };
            // SAFETY: msg and what it points to live across the call; the caller keeps the
            // buffer valid until the operation completed.
            unsafe {
                if read {
                    sys::fi_readmsg(self.ep.as_ptr(), &msg, completion)
                } else {
                    let flags = match delivered {
                        true => u64::from(sys::FI_DELIVERY_COMPLETE) | completion,
                        false => completion,
                    };
                    sys::fi_writemsg(self.ep.as_ptr(), &msg, flags)
                }
            }
        })
    }

    /// Reads into `dst` from `from`; the bytes are there once a later flush returns.
    ///
    /// # Safety
    /// `dst` must stay valid, and not be read, until the next flush returns.
    pub(crate) unsafe fn read(
        &self,
        dst: &mut [u8],
        local: Option<&Registration>,
        from: Remote,
    ) -> Result<()> {
        let desc = self.local_desc(local, dst.as_ptr() as usize, dst.len())?;
        // SAFETY: the caller's contract.
        unsafe {
            self.post_read(
                dst.as_mut_ptr(),
                dst.len(),
                desc,
                from,
                Context::Ours(Vec::new()),
            )
        }
    }

    /// Reads into `dst` from `from` and waits for the bytes: for the reads in flight, not
    /// for the writes. Completed by the read counter, not by a queue entry: an entry would
    /// also wake a `block` progress thread sleeping on the queue, a context switch on every
    /// get (a get then took ~1.3× the raw one here).
    pub(crate) fn read_waited(&self, dst: &mut [u8], from: Remote) -> Result<()> {
        if self.read_over_wire(dst, from)? {
            return Ok(());
        }
        let desc = self.local_desc(None, dst.as_ptr() as usize, dst.len())?;
        // SAFETY: `dst` is borrowed until the wait below saw every read posted by then
        // complete, this one included (on an error too: see wait_reads).
        unsafe {
            self.post_read(
                dst.as_mut_ptr(),
                dst.len(),
                desc,
                from,
                Context::Ours(Vec::new()),
            )?
        };
        self.wait_reads()
    }

    /// [`Nic::read_waited`] as one request over the wire, answered with the bytes, where
    /// the wire reaches the peer, the read is short ([`wire::READ_MAX`],
    /// [`wire::READ_MAX_WORDS`]) and none of the provider's writes may be in flight (the
    /// read would not wait for them, where the provider's own read does): false, with
    /// nothing posted, elsewhere. The wire's round trip is the shorter one: 8 B 10.7–11.0 µs
    /// against 15.0–15.7 through the provider, in alternating runs.
    fn read_over_wire(&self, dst: &mut [u8], from: Remote) -> Result<bool> {
        let Some(w) = self.wire.as_ref().filter(|w| w.reaches(from.peer)) else {
            return Ok(false);
        };
        let words = wire::whole_words(from.addr, dst.len());
        let max = if words {
            wire::READ_MAX_WORDS
        } else {
            wire::READ_MAX
        };
        if dst.is_empty() || dst.len() > max || self.writes.provider_in_flight() {
            return Ok(false);
        }
        let (ty, size) = match words {
            true => (crate::ops::ElemType::U64, 8),
            false => (crate::ops::ElemType::U8, 1),
        };
        let request = wire::Request {
            kind: wire::Kind::Read,
            op: crate::ops::Op::NoOp,
            ty,
            count: dst.len() / size,
            key: from.key,
            addr: from.addr,
        };
        let tracked = Box::new(TrackedContext::default());
        let context = Context::Tracked(&*tracked as *const TrackedContext as *mut TrackedContext);
        let result = dst.as_mut_ptr();
        self.post_on_wire("read", true, from.peer, context, |ctx| {
            // SAFETY: `dst` is borrowed, and `tracked` alive, until the wait below saw the
            // answer (or the post failed).
            unsafe { w.post(from.peer, &request, &[], &[], result, ctx) }
        })?;
        self.wait_tracked(tracked)?;
        Ok(true)
    }

    /// Posts one operation over the wire through [`Nic::post_in`] (its ticket and
    /// context), counted as the wire's: `post` sends it with the context.
    fn post_on_wire(
        &self,
        call: &'static str,
        read: bool,
        peer: sys::fi_addr_t,
        context: Context,
        mut post: impl FnMut(*mut c_void) -> Result<()>,
    ) -> Result<()> {
        let mut refused = None;
        let posted = self.post_in(call, read, peer, context, |ctx| match post(ctx) {
            Ok(()) => 0,
            Err(e) => {
                refused = Some(e);
                -(sys::FI_EIO as isize)
            }
        });
        if posted.is_ok() {
            // Relaxed: after the ticket; `completions` reads it only to decide whether to
            // read the provider's counter (see there).
            self.issued(read).wire.fetch_add(1, Ordering::Relaxed);
        }
        // What the wire refused is told as the peer's end where the roster knows of one
        // (`Nic::blame`), as a refusal of the provider is.
        posted.map_err(|e| refused.take().map_or(e, |r| self.blame(r)))
    }

    /// Waits until every read (and fetching atomic) posted so far has completed, as
    /// [`Nic::flush`] does for both kinds. A failure ends the wait only once no read is in
    /// flight any more (a buffer of one may still be written until then).
    fn wait_reads(&self) -> Result<()> {
        let mut backoff = crate::backoff::Backoff::for_network();
        let mut failure = Ok(());
        // Errors count for the whole life of the endpoint: only those from now on fail
        // this wait.
        let errors_before = self.read_completions().1;
        let mut hang = crate::diag::HangClock::new();
        let mut vigil = ExitVigil::default();
        loop {
            let (done, errors) = self.read_completions();
            // As in flush: the posted count read after the counter.
            std::sync::atomic::fence(Ordering::SeqCst);
            // Relaxed: ordered by the fence; the counts only grow.
            let posted = self.reads.posted.load(Ordering::Relaxed);
            let failed = self.reads.failed.load(Ordering::Relaxed);
            if done + errors + failed >= posted {
                if errors > errors_before && failure.is_ok() {
                    // The queue's error entry says what failed.
                    failure = self.progress_all().and(Err(Error::Network {
                        call: "read",
                        code: 0,
                        text: format!("{} reads completed in error", errors - errors_before),
                    }));
                }
                return failure.map_err(|e| self.blame(e));
            }
            if let Err(e) = self.progress() {
                failure = failure.and(Err(e));
            }
            // A read whose target ended never completes: after a second without any
            // completion the wait gives up (nothing will write the buffers any more).
            vigil.check(self, || done + errors + failed)?;
            backoff.snooze();
            // Reported, not abandoned: the reads write into the callers' buffers.
            hang.tick_job(|| {
                format!(
                    "network reads to complete: {} of {posted} done, {} failed",
                    done + errors,
                    failed
                )
            });
        }
    }

    /// Reads and fetching atomics completed, and failed, so far (the provider's counter
    /// plus the wire's answers).
    fn read_completions(&self) -> (u64, u64) {
        let (done, errors) = self.provider_completions(true);
        let (wire_done, wire_failed) = self.wire.as_ref().map_or((0, 0), |w| w.counts(true));
        (done + wire_done, errors + wire_failed)
    }

    /// Posts one read of `len` bytes into `dst` (descriptor `desc`) from `from`, with
    /// `context`.
    ///
    /// # Safety
    /// `len` bytes at `dst` stay valid, and unread, until the operation completed.
    unsafe fn post_read(
        &self,
        dst: *mut u8,
        len: usize,
        desc: *mut c_void,
        from: Remote,
        context: Context,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.post_rma(true, dst, len, desc, from, context, false) }
    }

    /// Atomically adds `value` to the u64 at `at` and returns the previous value (a
    /// fetching atomic, complete when it returns).
    pub(crate) fn fetch_add_u64(
        &self,
        value: u64,
        at: Remote,
        scratch: &Registration,
    ) -> Result<u64> {
        self.fetching_u64(NetOp::Sum, value, None, at, scratch)
    }

    /// Atomically replaces the u64 at `at` with `value` if it equals `compare`; returns the
    /// previous value.
    pub(crate) fn compare_swap_u64(
        &self,
        compare: u64,
        value: u64,
        at: Remote,
        scratch: &Registration,
    ) -> Result<u64> {
        self.fetching_u64(NetOp::CompareSwap, value, Some(compare), at, scratch)
    }

    /// A fetching atomic on one u64, through three words of `scratch` (operand, compare,
    /// result: registered, as FI_MR_LOCAL providers require), waited for.
    fn fetching_u64(
        &self,
        op: NetOp,
        value: u64,
        compare: Option<u64>,
        at: Remote,
        scratch: &Registration,
    ) -> Result<u64> {
        if scratch.len < 24 {
            return Err(Error::InvalidArgument(
                "an atomic's scratch registration needs 24 bytes".into(),
            ));
        }
        let words = scratch.base as *mut u64;
        let kind = if compare.is_some() {
            AtomicKind::Compare
        } else {
            AtomicKind::Fetch
        };
        // SAFETY: three u64 inside the scratch registration, which the caller gave to this
        // one operation (it is not used concurrently), untouched until the flush.
        unsafe {
            words.write(value);
            words.add(1).write(compare.unwrap_or(0));
            words.add(2).write(0);
            let ptrs = (
                words.cast_const().cast(),
                words.add(1).cast_const().cast(),
                words.add(2).cast(),
            );
            self.post_atomic(
                kind,
                op,
                NetType::U64,
                1,
                ptrs,
                Some(scratch),
                at,
                Completion::Counted,
            )?;
        }
        self.flush(|| Ok(()))?;
        // SAFETY: the operation completed (flush): the result word is written.
        Ok(unsafe { words.add(2).read() })
    }

    /// What the provider does natively, by `fi_query_atomic` on the domain, for every
    /// kind, operation and type onesided uses.
    pub(crate) fn atomic_table(&self) -> AtomicTable {
        let mut table = AtomicTable::default();
        for kind in [AtomicKind::Write, AtomicKind::Fetch, AtomicKind::Compare] {
            let flags = match kind {
                AtomicKind::Write => 0,
                AtomicKind::Fetch => sys::FI_FETCH_ATOMIC,
                AtomicKind::Compare => sys::FI_COMPARE_ATOMIC,
            };
            for op in NetOp::ALL {
                for ty in NetType::ALL {
                    let mut attr = sys::fi_atomic_attr::default();
                    // SAFETY: a live domain and a valid out-pointer.
                    let rc = unsafe {
                        sys::fi_query_atomic(
                            self.domain.as_ptr(),
                            fi_datatype(ty),
                            fi_op(op),
                            &mut attr,
                            flags,
                        )
                    };
                    if rc == 0 && attr.count > 0 {
                        table.insert(kind, op, ty, attr.count);
                    }
                }
            }
        }
        table
    }

    /// Posts an atomic of `kind` with `op` on `count` elements of `ty` at `at`: `operand`
    /// (and for a compare, `compare`) holds the origin's elements, `result` receives the
    /// previous ones (fetch and compare). Complete — at the target, and with the results
    /// in place — once a later [`Nic::flush`] returns (`FI_DELIVERY_COMPLETE`).
    ///
    /// # Safety
    /// `operand`, `compare` and `result` must hold `count` elements of `ty`, lie in
    /// `local` when it is given, and stay valid (and `result` unread) until the flush.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn atomic(
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
    ) -> Result<()> {
        let ptrs = (operand, compare, result);
        // SAFETY: the caller's contract.
        unsafe { self.post_atomic(kind, op, ty, count, ptrs, local, at, Completion::Counted) }
    }

    /// A non-fetching atomic of `op` on the elements of `ty` in `operand` at `at`, posted
    /// with a copy of them: `operand` is free when this returns, and the update is
    /// complete at the target once a later [`Nic::flush`] returns.
    pub(crate) fn atomic_copied(
        &self,
        op: NetOp,
        ty: NetType,
        operand: &[u8],
        at: Remote,
    ) -> Result<()> {
        let kept = operand.to_vec();
        let ptrs = (kept.as_ptr(), ptr::null(), ptr::null_mut());
        let count = operand.len() / ty.size();
        // SAFETY: the operand lies in `kept`, which the operation's context keeps (its heap
        // buffer unmoved) until a flush sees the operation complete.
        unsafe {
            self.post_atomic(
                AtomicKind::Write,
                op,
                ty,
                count,
                ptrs,
                None,
                at,
                Completion::Kept(kept),
            )
        }
    }

    /// [`Nic::atomic`] with the buffers `(operand, compare, result)`, completed as
    /// `completion` says (every operation is counted by its counter too).
    ///
    /// # Safety
    /// As for [`Nic::atomic`] (the operand only during the call when injected); a tracked
    /// context must stay valid until it says the operation completed.
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_atomic(
        &self,
        kind: AtomicKind,
        op: NetOp,
        ty: NetType,
        count: usize,
        (operand, compare, result): (*const u8, *const u8, *mut u8),
        local: Option<&Registration>,
        at: Remote,
        completion: Completion,
    ) -> Result<()> {
        let bytes = count * ty.size();
        if let Some(w) = self.wire.as_ref().filter(|w| w.reaches(at.peer)) {
            let request = wire::Request {
                kind: match kind {
                    AtomicKind::Write => wire::Kind::Write,
                    AtomicKind::Fetch => wire::Kind::Fetch,
                    AtomicKind::Compare => wire::Kind::Compare,
                },
                op: op.mpi(),
                ty: ty.elem(),
                count,
                key: at.key,
                addr: at.addr,
            };
            // SAFETY: the operand (and a compare's compare values) are `bytes` long and
            // valid during the call (the caller's contract); the wire copies them.
            let (operand, compare) = unsafe {
                (
                    std::slice::from_raw_parts(operand, bytes),
                    if kind == AtomicKind::Compare {
                        std::slice::from_raw_parts(compare, bytes)
                    } else {
                        &[][..]
                    },
                )
            };
            let context = match completion {
                Completion::Counted | Completion::Injected => Context::Ours(Vec::new()),
                Completion::Kept(kept) => Context::Ours(kept),
                Completion::Tracked(t) => Context::Tracked(t),
            };
            return self.post_on_wire(
                "atomic",
                kind != AtomicKind::Write,
                at.peer,
                context,
                |ctx| {
                    // SAFETY: the result buffer and the context stay valid until the
                    // operation completes (the caller's contract; ours live in the contexts
                    // until a flush counts it).
                    unsafe { w.post(at.peer, &request, operand, compare, result, ctx) }
                },
            );
        }
        let desc = |p: *const u8| self.local_desc(local, p as usize, bytes);
        let mut operand_desc = [desc(operand)?];
        let mut compare_desc = [if kind == AtomicKind::Compare {
            desc(compare)?
        } else {
            ptr::null_mut()
        }];
        let mut result_desc = [if kind == AtomicKind::Write {
            ptr::null_mut()
        } else {
            desc(result)?
        }];
        let operand = sys::fi_ioc {
            addr: operand.cast_mut().cast(),
            count,
        };
        let compare = sys::fi_ioc {
            addr: compare.cast_mut().cast(),
            count,
        };
        let mut result = sys::fi_ioc {
            addr: result.cast(),
            count,
        };
        let rma = sys::fi_rma_ioc {
            addr: at.addr,
            count,
            key: at.key,
        };
        let read = kind != AtomicKind::Write;
        let own = own_completion();
        let (context, completion, inject) = match completion {
            Completion::Counted => (Context::Ours(Vec::new()), own, 0),
            Completion::Injected => (Context::Ours(Vec::new()), own, u64::from(sys::FI_INJECT)),
            Completion::Kept(kept) => (Context::Ours(kept), own, 0),
            Completion::Tracked(t) => (Context::Tracked(t), u64::from(sys::FI_COMPLETION), 0),
        };
        self.post_in("fi_atomicmsg", read, at.peer, context, |ctx| {
            let msg = sys::fi_msg_atomic {
                msg_iov: &operand,
                desc: operand_desc.as_mut_ptr(),
                iov_count: 1,
                addr: at.peer,
                rma_iov: &rma,
                rma_iov_count: 1,
                datatype: fi_datatype(ty),
                op: fi_op(op),
                context: ctx,
                data: 0,
            };
            let flags = u64::from(sys::FI_DELIVERY_COMPLETE) | completion | inject;
            // SAFETY: msg and the buffers it names live across the call and, by the
            // caller's contract, until the flush.
            unsafe {
                match kind {
                    AtomicKind::Write => sys::fi_atomicmsg(self.ep.as_ptr(), &msg, flags),
                    AtomicKind::Fetch => sys::fi_fetch_atomicmsg(
                        self.ep.as_ptr(),
                        &msg,
                        &mut result,
                        result_desc.as_mut_ptr(),
                        1,
                        completion,
                    ),
                    AtomicKind::Compare => sys::fi_compare_atomicmsg(
                        self.ep.as_ptr(),
                        &msg,
                        &compare,
                        compare_desc.as_mut_ptr(),
                        1,
                        &mut result,
                        result_desc.as_mut_ptr(),
                        1,
                        completion,
                    ),
                }
            }
        })
    }

    /// Posts a fetching atomic on the u64 at `at`: `words` holds the operand, the compare
    /// value and the result (three u64 inside `reg`); `tracked` is marked done once the
    /// result is there (a later [`Nic::progress`], by any thread, reads the entry).
    ///
    /// # Safety
    /// `words` (three u64 inside `reg`) and `tracked` must stay valid, and the result
    /// word unread, until `tracked` says the operation completed; `tracked` is reset.
    pub(crate) unsafe fn fetch_word(
        &self,
        op: NetOp,
        words: *mut u64,
        reg: &Registration,
        at: Remote,
        tracked: *mut TrackedContext,
    ) -> Result<()> {
        let kind = if op == NetOp::CompareSwap {
            AtomicKind::Compare
        } else {
            AtomicKind::Fetch
        };
        // SAFETY: three u64 inside `reg`, valid until completion (the caller's contract;
        // the descriptors check they lie in `reg`).
        unsafe {
            let ptrs = (
                words.cast_const().cast(),
                words.add(1).cast_const().cast(),
                words.add(2).cast(),
            );
            self.post_atomic(
                kind,
                op,
                NetType::U64,
                1,
                ptrs,
                Some(reg),
                at,
                Completion::Tracked(tracked),
            )
        }
    }

    /// True when a whole lock epoch can go to `peer` as one message ([`Nic::ship_epoch`]):
    /// our atomics to it travel over the wire.
    pub(crate) fn ships_epochs_to(&self, peer: u64) -> bool {
        self.wire.as_ref().is_some_and(|w| w.reaches(peer))
    }

    /// Sends a whole exclusive lock epoch over the wire ([`Wire::post_epoch`]): a
    /// compare-and-swap of the lock word at `at` from `words[1]` to `words[0]`, the
    /// previous value into `words[2]` as for [`Nic::fetch_word`], and when it took the lock
    /// (or with `held`), the updates of `payload` ([`wire::encode`]) and the release.
    /// Counted as a fetching atomic. Fails where the wire does not reach the peer.
    ///
    /// # Safety
    /// As for [`Nic::fetch_word`].
    pub(crate) unsafe fn ship_epoch(
        &self,
        words: *mut u64,
        at: Remote,
        held: bool,
        payload: &[u8],
        tracked: *mut TrackedContext,
    ) -> Result<()> {
        let Some(w) = self.wire.as_ref().filter(|w| w.reaches(at.peer)) else {
            return Err(Error::Unsupported(
                "a lock epoch in one message to a peer the wire does not reach".into(),
            ));
        };
        // SAFETY: three valid u64 (the caller's contract).
        let (new, expected) = unsafe { (words.read(), words.add(1).read()) };
        self.post_on_wire("atomic", true, at.peer, Context::Tracked(tracked), |ctx| {
            // SAFETY: the result word and the context stay valid until the operation
            // completes (the caller's contract).
            unsafe {
                w.post_epoch(
                    at.peer,
                    (at.key, at.addr),
                    expected,
                    new,
                    held,
                    payload,
                    words.add(2).cast(),
                    ctx,
                )
            }
        })
    }

    /// [`Fabric::striped_waited`]: one [`Wire::post_striped`], waited for.
    pub(crate) fn striped_waited(
        &self,
        stripes: &[Remote],
        payload: &[u8],
        result: &mut [u8],
    ) -> Result<bool> {
        let Some(w) = self
            .wire
            .as_ref()
            .filter(|w| stripes.first().is_some_and(|s| w.reaches(s.peer)))
        else {
            return Err(Error::Unsupported(
                "an update under lock stripes in one message to a peer the wire does not reach"
                    .into(),
            ));
        };
        let tracked = Box::new(TrackedContext::default());
        let context = Context::Tracked(&*tracked as *const TrackedContext as *mut TrackedContext);
        Wire::striped_waited(
            stripes,
            result,
            |peer, key, addrs, answer, len| {
                self.post_on_wire("atomic", true, peer, context, |ctx| {
                    // SAFETY: the answer's buffer is borrowed, and `tracked` alive, until
                    // the wait below saw the answer (or the post failed).
                    unsafe { w.post_striped(peer, key, addrs, payload, answer, len, ctx) }
                })
            },
            || self.wait_tracked(tracked),
        )
    }

    /// Sends `block` to `to` and then `words` to `flag` (the same peer), each word stored
    /// with Release order, in one message over the wire that nobody answers
    /// ([`Wire::deliver`]), with its second place `gate` if any (dropped unless on the
    /// same peer): false, with nothing sent, where the wire does not reach the peer or the
    /// block is longer than a delivery carries. Nothing of it is counted for a flush: the
    /// caller learns of its delivery from the receiver.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub(crate) fn deliver(
        &self,
        block: &[u8],
        to: Remote,
        words: &[u64],
        flag: Remote,
        gate: Option<DeliverGate<'_>>,
    ) -> Result<bool> {
        let Some(w) = self.wire.as_ref().filter(|w| w.reaches(to.peer)) else {
            return Ok(false);
        };
        w.deliver(block, to, words, flag, gate)
    }

    /// Posts an atomic without a result (`Sum` or `Write` of `value`) on the u64 at `at`:
    /// injected (nothing of ours stays referenced), complete at the target once a later
    /// [`Nic::flush`] returns (`FI_DELIVERY_COMPLETE`).
    pub(crate) fn post_word(&self, op: NetOp, value: u64, at: Remote) -> Result<()> {
        debug_assert!(matches!(op, NetOp::Sum | NetOp::Write));
        let ptrs = ((&value as *const u64).cast(), ptr::null(), ptr::null_mut());
        // SAFETY: injected: the provider copied the operand when the post returns.
        unsafe {
            self.post_atomic(
                AtomicKind::Write,
                op,
                NetType::U64,
                1,
                ptrs,
                None,
                at,
                Completion::Injected,
            )
        }
    }

    /// Drives the endpoint, then blocks until something arrives on it — a peer's
    /// operation, an answer, a [`Nic::wake`] — or `timeout_ms` passed, and drives it again:
    /// true when the wait ended because something arrived (the caller may expect more
    /// soon). Without a file descriptor to wait on, a nap of at most
    /// [`NAP_WITHOUT_WAIT_FD`] between two reads.
    pub(crate) fn wait_activity(&self, timeout: std::time::Duration) -> Result<bool> {
        self.progress_all()?;
        // Without a descriptor (`shm`), no blocking read of the queue: libfabric 1.17's
        // shm queue wait overran a 1 ms timeout by up to 4.5 s here while peers'
        // operations (which make no entry) and the wire's requests waited for it. The
        // endpoint is driven between naps instead, on the wire's descriptor if any.
        let (queue, timeout) = match self.wait_fd {
            Some(fd) => {
                let mut fids = [self.cq.fid()];
                // SAFETY: a live fabric and a live queue of it.
                let rc = unsafe { sys::fi_trywait(self._fabric.as_ptr(), fids.as_mut_ptr(), 1) };
                if rc != 0 {
                    // Work is waiting (-FI_EAGAIN): no sleep.
                    self.progress_all()?;
                    return Ok(true);
                }
                // SAFETY: the wait object's descriptor, which libfabric keeps open while
                // the queue (owned by self) lives; only polled here.
                (
                    Some(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }),
                    timeout,
                )
            }
            None => (None, timeout.min(NAP_WITHOUT_WAIT_FD)),
        };
        let wire = self.wire.as_ref().map(|w| w.fd());
        let mut polled: Vec<_> = queue
            .iter()
            .chain(wire.as_ref())
            .map(|fd| rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN))
            .collect();
        let timeout = rustix::event::Timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // Nothing to poll (no descriptor, no wire): a plain nap.
        let ready = match rustix::event::poll(&mut polled, Some(&timeout)) {
            Ok(n) => n > 0,
            Err(rustix::io::Errno::INTR) => true,
            Err(e) => {
                return Err(Error::Os {
                    call: "poll(completion queue wait descriptor)",
                    source: e.into(),
                })
            }
        };
        self.progress_all()?;
        Ok(ready)
    }

    /// True when [`Nic::wait_activity`] waits on a file descriptor (else it naps).
    pub(crate) fn waits_on_fd(&self) -> bool {
        self.wait_fd.is_some()
    }

    /// Ends a [`Nic::wait_activity`] in another thread now (nothing to do without a wait
    /// object: no thread can be waiting, and signalling such a queue crashes the tcp
    /// provider; a nap ends on its own).
    pub(crate) fn wake(&self) {
        if self.waitable {
            // SAFETY: a live queue with a wait object.
            unsafe { sys::fi_cq_signal(self.cq.as_ptr()) };
        }
    }

    /// Marks the tracked operations of the `rc` entries a queue read returned, and turns
    /// the read's failure (an error entry) into an error.
    fn completed(&self, rc: isize, entries: &[sys::fi_cq_entry]) -> Result<()> {
        if rc > 0 {
            // Only tracked operations ask for entries (selective completion).
            for entry in &entries[..rc as usize] {
                // SAFETY: the context of a tracked operation, which its owner keeps alive
                // until it sees `done`.
                unsafe { mark(entry.op_context, false) };
            }
        }
        if rc >= 0 || again(rc) || rc == -(sys::FI_ETIMEDOUT as isize) {
            return Ok(());
        }
        // Relaxed: a flag for later polls (`has_failed`), not a synchronization.
        self.failed.store(true, Ordering::Relaxed);
        if rc == -(sys::FI_EAVAIL as isize) {
            let mut err = sys::fi_cq_err_entry::default();
            // SAFETY: one error entry.
            unsafe { sys::fi_cq_readerr(self.cq.as_ptr(), &mut err, 0) };
            // SAFETY: every context we post is a live TrackedContext until its operation
            // completed (ours are freed by the flush that counts them).
            unsafe { mark(err.op_context, true) };
            return Err(network_error("operation", -i64::from(err.err)));
        }
        Err(network_error("fi_cq_read", rc as i64))
    }

    /// True once an operation of this endpoint completed in error, whichever call read the
    /// error (a progress thread's or a wait's poll discards it): a wait that no network
    /// operation of its own drives — a control word on this node — learns that a peer is
    /// gone from this.
    pub(crate) fn has_failed(&self) -> bool {
        // Relaxed: see `completed`.
        self.failed.load(Ordering::Relaxed) || self.wire.as_ref().is_some_and(|w| w.has_failed())
    }

    /// One poll of a wait. While answers to our operations over the wire are awaited
    /// (and none of the provider's own are in flight), the provider's queue is read only
    /// every [`PROVIDER_POLL_EVERY`]th time, the wire's sockets every time: a read of a
    /// manual-progress provider's queue is its progress — system calls on its own sockets
    /// — and an answer that arrives meanwhile waits for it. Otherwise both, every time
    /// (a process that only serves does not know which its peers will use) — except
    /// where the queue has a descriptor the wire's look watches too (`block`): with none
    /// of our own operations in the provider, the queue is read when that look found it
    /// readable (a peer's operation arrived) and every [`PROVIDER_POLL_EVERY`]th time.
    /// 8-byte put, get and fetch_and_op + flush across two virtual nodes took 8.5–9.2
    /// µs (p50) with that against 8.7–10.3 without in three of four alternating runs, level in
    /// the fourth.
    ///
    /// One thread polls at a time; another that calls meanwhile yields its core instead
    /// (what the poller reads completes its operations too). Threads that polled side by
    /// side only took turns at the provider's locks and the cores the target needs: 4
    /// threads doing put + flush across virtual nodes took 78–154 µs per operation
    /// (process scope) and 104–128 µs (thread scope); yielding, 55–56 and 51–54 µs (a mutex
    /// around each put + flush: 54–60 µs).
    pub(crate) fn progress(&self) -> Result<()> {
        // Acquire: pairs with the Release below; what the last poller read is complete
        // for us (its marks have their own orderings: this only keeps one reader).
        if self
            .polling
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
            return Ok(());
        }
        let _token = PollToken(&self.polling);
        self.poll_once()
    }

    /// [`Nic::progress`] by the one polling thread.
    fn poll_once(&self) -> Result<()> {
        let Some(wire) = &self.wire else {
            return self.progress_all();
        };
        if self.queue_watched && !self.provider_in_flight() {
            // Nothing of ours in the provider: its queue is read when its descriptor is
            // readable (a peer's operation arrived), which the wire's look tells, and
            // every PROVIDER_POLL_EVERYth poll (work it defers without a descriptor's
            // readiness) — not every poll, a system call or two each (its sockets).
            let wired = wire.progress();
            // Relaxed: see below.
            let due = self.polls.fetch_add(1, Ordering::Relaxed) % PROVIDER_POLL_EVERY == 0;
            if wire.take_also_ready() || due {
                return self.read_queue().and(wired);
            }
            return wired;
        }
        if !self.wire_in_flight(wire) || self.provider_in_flight() {
            return self.progress_all();
        }
        // Relaxed: a poll count; any interleaving of threads' polls is fine.
        if self.polls.fetch_add(1, Ordering::Relaxed) % PROVIDER_POLL_EVERY == 0 {
            return self.progress_all();
        }
        wire.progress()
    }

    /// True when operations posted over the wire may still wait for their answers.
    fn wire_in_flight(&self, wire: &Wire) -> bool {
        // Relaxed: counts that only grow; a stale value only reads the provider once more
        // or once less. (An answer may be counted before its post is: then this is false
        // for a moment, which reads the provider.)
        let posted =
            self.writes.wire.load(Ordering::Relaxed) + self.reads.wire.load(Ordering::Relaxed);
        let ((written, write_failed), (read, read_failed)) =
            (wire.counts(false), wire.counts(true));
        written + write_failed + read + read_failed < posted
    }

    /// True when operations the provider serves (not the wire) may be in flight.
    fn provider_in_flight(&self) -> bool {
        self.writes.provider_in_flight() || self.reads.provider_in_flight()
    }

    /// Reads the completion queue once: drives a manual-progress provider (its peers'
    /// operations on our memory included) and reports failed operations; and the wire.
    pub(crate) fn progress_all(&self) -> Result<()> {
        let provider = self.read_queue();
        let wire = self.wire.as_ref().map_or(Ok(()), |w| w.progress());
        provider.and(wire)
    }

    /// Reads the completion queue once (the provider's progress).
    fn read_queue(&self) -> Result<()> {
        let mut entries = [sys::fi_cq_entry::default(); CQ_BATCH];
        // SAFETY: the buffer holds CQ_BATCH entries of the queue's format (context).
        let rc =
            unsafe { sys::fi_cq_read(self.cq.as_ptr(), entries.as_mut_ptr().cast(), CQ_BATCH) };
        self.completed(rc, &entries)
    }

    /// Completions and failures counted so far: (writes, reads, failures) — the
    /// provider's counters plus the wire's answers.
    fn completions(&self) -> (u64, u64, u64) {
        let (w, we) = self.provider_completions(false);
        let (r, re) = self.provider_completions(true);
        match &self.wire {
            None => (w, r, we + re),
            Some(wire) => {
                let ((ww, wf), (rw, rf)) = (wire.counts(false), wire.counts(true));
                (w + ww, r + rw, we + re + wf + rf)
            }
        }
    }

    /// The provider's completions (and errors) of reads (`read`) or writes: a lower bound
    /// of them — the counter's last value while it covers every ticket the provider may
    /// still complete, else the counter read now. Every wait compares completions with
    /// the posted count read after them, so a lower bound only ever waits longer; and
    /// while only the wire has operations in flight, a wait reads no counter.
    fn provider_completions(&self, read: bool) -> (u64, u64) {
        let issued = self.issued(read);
        // Relaxed: the decision below only chooses between a lower bound and a fresh read.
        if !issued.provider_in_flight() && !self.failed.load(Ordering::Relaxed) {
            return (issued.seen.load(Ordering::Relaxed), 0);
        }
        let cntr = if read {
            &self.read_cntr
        } else {
            &self.write_cntr
        };
        // SAFETY: a live counter.
        let (done, errors) = unsafe {
            (
                sys::fi_cntr_read(cntr.as_ptr()),
                sys::fi_cntr_readerr(cntr.as_ptr()),
            )
        };
        // Relaxed: see above.
        issued.seen.fetch_max(done, Ordering::Relaxed);
        (done, errors)
    }

    /// Waits until every operation posted so far has completed — at the target, for
    /// writes (`FI_DELIVERY_COMPLETE`) — driving progress, and calling `meanwhile` between
    /// polls (a caller that also serves another endpoint, or watches its peers).
    ///
    /// A counter counts completions of any operation, those posted after the flush began
    /// (by other threads) included, so "the counter reached the count posted before" would
    /// not mean that those operations completed. The flush waits instead until the
    /// counters equal the posted counts read *after* them: completions never exceed posts,
    /// so then every operation posted by that moment — ours among them — has completed.
    pub(crate) fn flush(&self, mut meanwhile: impl FnMut() -> Result<()>) -> Result<()> {
        let mut backoff = crate::backoff::Backoff::for_network();
        let mut hang = crate::diag::HangClock::new();
        let mut vigil = ExitVigil::default();
        let (writes, reads) = loop {
            // Read before the counters: every post numbered below it has its ticket among
            // those the counts below cover.
            let seq = self.post_seq.load(Ordering::SeqCst);
            let (w, r, errors) = self.completions();
            if errors > 0 {
                // The queue's error entry says what failed.
                self.progress_all().map_err(|e| self.blame(e))?;
                return Err(self.blame(Error::Network {
                    call: "flush",
                    code: 0,
                    text: format!("{errors} operations completed in error"),
                }));
            }
            // The posted counts after the counters (SeqCst fence: this load is not done
            // before the counters were read). A ticket is taken before its post, so at
            // any moment completions + failures <= posts.
            std::sync::atomic::fence(Ordering::SeqCst);
            // Relaxed: ordered by the fence; every count only grows.
            let (writes, reads) = (
                self.writes.posted.load(Ordering::Relaxed),
                self.reads.posted.load(Ordering::Relaxed),
            );
            let w = w + self.writes.failed.load(Ordering::Relaxed);
            let r = r + self.reads.failed.load(Ordering::Relaxed);
            if w >= writes && r >= reads {
                // Relaxed: see note_post.
                self.quiet_seq.fetch_max(seq, Ordering::Relaxed);
                break (writes, reads);
            }
            // A failed completion read here is most often an operation the provider
            // cancelled as a peer's connection closed: named after the peer once its end
            // is on record (as the counted errors above are).
            self.progress().map_err(|e| self.blame(e))?;
            meanwhile()?;
            // The contexts stay with the endpoint: giving up when a peer ended is safe.
            vigil.check(self, || w + r + errors)?;
            backoff.snooze();
            // The contexts stay with the endpoint: giving up on an aborted job is safe.
            let describe = || {
                format!("a network flush: {w} of {writes} writes and {r} of {reads} reads complete")
            };
            if hang.tick_job(describe) {
                return Err(Error::JobAborted);
            }
        };
        // Every operation with a ticket below the counts read first has completed: its
        // context is free.
        let mut freed = 0;
        self.contexts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|op| {
                // `completed` acquires (pairs with `mark`'s Release; nothing is read
                // through it: a context whose entry is still unread must simply stay).
                let pending = op.ticket >= if op.read { reads } else { writes }
                    || op.own && op.ctx.completed().is_none();
                if !pending {
                    freed += op.held();
                }
                pending
            });
        // Relaxed: see held_bytes.
        self.held.fetch_sub(freed, Ordering::Relaxed);
        Ok(())
    }

    /// Frees the contexts of operations posted under [`track_own`] whose queue entries were
    /// read (reading what is there first), without waiting for anything: what they hold
    /// (a shared write's owner) is let go. Failed ones stay, for a flush to report, but
    /// let go of their owners too.
    pub(crate) fn reap_own(&self) -> Result<()> {
        self.progress_all()?;
        let mut freed = 0;
        self.contexts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain_mut(|op| {
                let Some(failed) = op.ctx.completed().filter(|_| op.own) else {
                    return true;
                };
                if failed {
                    // Done with the origin bytes all the same.
                    op._shared = None;
                    return true;
                }
                freed += op.held();
                false
            });
        // Relaxed: see held_bytes.
        self.held.fetch_sub(freed, Ordering::Relaxed);
        Ok(())
    }

    /// Completes the operations the calling thread posted under [`track_own`], at their
    /// targets, without waiting for other threads' (a flush of thread scope). Should the
    /// thread have others of its own in flight (posted without it), a [`Nic::flush`]
    /// completes everything instead.
    pub(crate) fn flush_own(&self) -> Result<()> {
        let me = crate::attention::thread_tag();
        let mut backoff = crate::backoff::Backoff::for_network();
        let mut hang = crate::diag::HangClock::new();
        loop {
            let (mut pending, mut untracked, mut failed, mut freed) = (false, false, false, 0);
            self.contexts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|op| {
                    if op.thread != me {
                        return true;
                    }
                    if !op.own {
                        untracked = true;
                        return true;
                    }
                    let Some(op_failed) = op.ctx.completed() else {
                        pending = true;
                        return true;
                    };
                    // Its entry was read: the provider is done with it.
                    failed |= op_failed;
                    freed += op.held();
                    false
                });
            // Relaxed: see held_bytes.
            self.held.fetch_sub(freed, Ordering::Relaxed);
            if failed {
                // The queue's error entry was read already (it marked the context).
                return Err(self.blame(Error::Network {
                    call: "flush",
                    code: 0,
                    text: "an operation of this thread completed in error".into(),
                }));
            }
            if untracked {
                return self.flush(|| Ok(()));
            }
            if !pending {
                return Ok(());
            }
            self.progress().map_err(|e| self.blame(e))?;
            backoff.snooze();
            // As in flush: the contexts stay with the endpoint.
            if hang.tick_job(|| "this thread's network operations to complete".into()) {
                return Err(Error::JobAborted);
            }
        }
    }

    /// Gives up on one posted read or fetching atomic (`read`), or write or atomic, whose
    /// completion may never come (its target is gone): counted as failed, so that flushes
    /// no longer wait for it. Should it complete after all, the counters only run ahead of
    /// the posted counts, which flushes allow.
    pub(crate) fn abandon(&self, read: bool) {
        // Relaxed: read by flushes with the completion counters.
        self.issued(read).failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Operations posted and not yet counted complete (nor failed) by the counters.
    pub(crate) fn in_flight(&self) -> u64 {
        let (w, r, _) = self.completions();
        // Relaxed: a snapshot for tests; counts only grow.
        let done = w
            + r
            + self.writes.failed.load(Ordering::Relaxed)
            + self.reads.failed.load(Ordering::Relaxed);
        let posted =
            self.writes.posted.load(Ordering::Relaxed) + self.reads.posted.load(Ordering::Relaxed);
        posted.saturating_sub(done)
    }

    /// Bytes that posted operations keep until a flush sees them complete — copies of
    /// origin data ([`Nic::write_copied`], [`Nic::atomic_copied`]) and each operation's
    /// bookkeeping: a caller bounds it by flushing.
    pub(crate) fn held_bytes(&self) -> usize {
        // Relaxed: a budget; a stale value only moves one flush earlier or later.
        self.held.load(Ordering::Relaxed)
    }

    /// True when this endpoint's operations reach one peer in issue order where a write
    /// follows a write or a read follows a write (RMA and atomics): then operations that
    /// must land in order (MPI's accumulate ordering, `mpi_win_order`) can stay in flight
    /// together. Never with a wire: its atomics and short puts travel beside the
    /// provider's RMA, and neither channel waits for the other.
    pub(crate) fn orders_after_writes(&self) -> bool {
        self.wire.is_none() && self.provider_orders_after_writes()
    }

    /// The provider's own promise behind [`Nic::orders_after_writes`] (`FI_ORDER_RAW`
    /// and `FI_ORDER_WAW`), for its RMA among themselves and its atomics among themselves.
    fn provider_orders_after_writes(&self) -> bool {
        let need = u64::from(sys::FI_ORDER_RAW | sys::FI_ORDER_WAW);
        self.described.msg_order & need == need
    }

    /// True when the provider places this endpoint's RMA writes to one peer in issue order
    /// (`FI_ORDER_RMA_WAW`, or the older `FI_ORDER_WAW` that covers RMA and atomics): a
    /// write that signals "the data before me is there" may follow the data without a
    /// flush. `tcp;ofi_rxm` promises it.
    pub(crate) fn orders_rma_writes(&self) -> bool {
        let need = sys::FI_ORDER_RMA_WAW;
        self.provider_orders_after_writes() || self.described.msg_order & need == need
    }

    /// True when the provider delivers this endpoint's *atomics* to one peer in issue
    /// order where an atomic write or read follows an atomic write (`FI_ORDER_ATOMIC_WAW`
    /// and `_RAW`, or the older bits that cover RMA and atomics together): accumulates may
    /// stay in flight together (MPI's accumulate ordering: a fetching atomic is waited for,
    /// so nothing overtakes a read), and an atomic that releases a lock lands after the
    /// epoch's accumulates. `tcp;ofi_rxm` promises these but not the order of an atomic
    /// after an RMA write. The wire keeps its atomics in order too (one FIFO connection
    /// per peer); every atomic to a peer takes one channel.
    pub(crate) fn orders_atomics(&self) -> bool {
        let need = sys::FI_ORDER_ATOMIC_RAW | sys::FI_ORDER_ATOMIC_WAW;
        self.provider_orders_after_writes() || self.described.msg_order & need == need
    }

    /// Waits until the tracked operation with context `tracked` completed, driving
    /// progress: `Ok` when it succeeded. A failure of another operation that a progress
    /// call reports meanwhile does not end the wait (the context must outlive the
    /// operation); it is returned after it.
    fn wait_tracked(&self, tracked: Box<TrackedContext>) -> Result<()> {
        let mut backoff = crate::backoff::Backoff::for_network();
        let mut hang = crate::diag::HangClock::new();
        let mut vigil = ExitVigil::default();
        let mut other = Ok(());
        loop {
            match tracked.completed() {
                Some(false) => return other.map_err(|e| self.blame(e)),
                Some(true) => {
                    return Err(self.blame(other.err().unwrap_or(Error::Network {
                        call: "operation",
                        code: 0,
                        text: "the operation completed in error".into(),
                    })))
                }
                None => {}
            }
            if let Err(e) = self.progress() {
                other = other.and(Err(e));
            }
            backoff.snooze();
            if let Err(e) = vigil.check(self, || self.all_completions()) {
                // Its target ended: nothing will complete it. The provider (or the wire,
                // failing what its closed link had) may still write the context: it stays
                // allocated for good.
                Box::leak(tracked);
                return Err(e);
            }
            // Reported, not abandoned: the provider still holds the context and the buffer.
            hang.tick_job(|| "a network operation waited for alone to complete".into());
        }
    }

    /// Watches peer `peer` (reported as `rank`): once `ended` says it has ended, a wait of
    /// this endpoint that stalls while an operation to it may be in flight fails with
    /// `PeerGone` ([`ExitVigil`]). The first registration of a peer counts.
    pub(crate) fn watch_peer(&self, peer: sys::fi_addr_t, rank: usize, ended: PeerEnded) {
        let mut w = self
            .watched
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.index.contains_key(&peer) {
            return;
        }
        let at = w.peers.len();
        w.peers.push(WatchedPeer {
            rank,
            ended,
            last_post: AtomicU64::new(0),
        });
        w.index.insert(peer, at);
        // Relaxed: a hint for the posts' fast path; the table is under its lock.
        self.watching.store(true, Ordering::Relaxed);
    }

    /// Whether any peer is watched.
    fn watches_peers(&self) -> bool {
        // Relaxed: see watch_peer.
        self.watching.load(Ordering::Relaxed)
    }

    /// Numbers a post to `peer` (after its ticket was taken: a flush that saw its ticket
    /// complete read the sequence before this number was drawn, or counts it in flight).
    fn note_post(&self, peer: sys::fi_addr_t) {
        if !self.watches_peers() {
            return;
        }
        let w = self
            .watched
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&i) = w.index.get(&peer) {
            // Relaxed: numbers compared with `quiet_seq` by this process's waits, which
            // read them after their own posts (program order) or after a flush.
            let n = self.post_seq.fetch_add(1, Ordering::Relaxed);
            w.peers[i].last_post.store(n + 1, Ordering::Relaxed);
        }
    }

    /// A watched peer that has ended while an operation to it may still be in flight (its
    /// rank); `only`: that peer alone.
    fn ended_peer(&self, only: Option<sys::fi_addr_t>) -> Option<usize> {
        let w = self
            .watched
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Relaxed: see note_post.
        let quiet = self.quiet_seq.load(Ordering::Relaxed);
        let in_flight = |p: &WatchedPeer| p.last_post.load(Ordering::Relaxed) > quiet;
        match only {
            Some(peer) => w
                .index
                .get(&peer)
                .map(|&i| &w.peers[i])
                .filter(|p| (p.ended)())
                .map(|p| p.rank),
            None => w
                .peers
                .iter()
                .find(|p| in_flight(p) && (p.ended)())
                .map(|p| p.rank),
        }
    }

    /// The error to report for `e`, a failure of the network: `PeerGone` when a watched
    /// peer has ended (the provider cancels what was in flight to it as its connection
    /// closes, before or after the job's roster records the end: a failure waits up to
    /// [`EXIT_GRACE`] for the record), else `e` itself.
    pub(crate) fn blame(&self, e: Error) -> Error {
        if !matches!(e, Error::Network { .. }) || !self.watches_peers() {
            return e;
        }
        let until = std::time::Instant::now() + EXIT_GRACE;
        loop {
            if let Some(rank) = self.ended_peer(None) {
                return Error::PeerGone { rank };
            }
            if std::time::Instant::now() >= until {
                return e;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Every completion so far, reads and writes, in error or not (a measure of progress).
    fn all_completions(&self) -> u64 {
        let (w, r, e) = self.completions();
        w + r + e
    }

    /// The `fi_info` entry the endpoint was opened from (for the transport's capability
    /// queries).
    #[allow(dead_code)]
    pub(crate) fn info(&self) -> *const sys::fi_info {
        self.info.chosen.as_ptr()
    }
}

/// This implementation's part of a registration the interface hands out.
fn own_registration(reg: &NetRegistration) -> Result<&Registration> {
    reg.held::<Registration>().ok_or_else(|| {
        Error::Bootstrap(
            "a registration of another network implementation was passed to libfabric's".into(),
        )
    })
}

impl Fabric for Nic {
    fn name(&self) -> Result<Vec<u8>> {
        Nic::name(self)
    }

    unsafe fn register(&self, base: *mut u8, len: usize) -> Result<NetRegistration> {
        // SAFETY: the caller's contract (the trait's).
        let reg = unsafe { Nic::register(self, base, len) }?;
        Ok(NetRegistration::new(reg.key, reg.remote_base, reg))
    }

    unsafe fn register_as(
        &self,
        base: *mut u8,
        len: usize,
        wanted: Option<u64>,
    ) -> Result<NetRegistration> {
        // SAFETY: the caller's contract (the trait's).
        let reg = unsafe { Nic::register_as(self, base, len, wanted) }?;
        Ok(NetRegistration::new(reg.key, reg.remote_base, reg))
    }

    fn atomics_mix_with_cpu(&self) -> bool {
        Nic::atomics_mix_with_cpu(self)
    }

    fn orders_atomics(&self) -> bool {
        Nic::orders_atomics(self)
    }

    fn ships_epochs_to(&self, peer: u64) -> bool {
        Nic::ships_epochs_to(self, peer)
    }

    fn answers_pending_to(&self, peer: u64) -> bool {
        self.wire.as_ref().is_some_and(|w| w.pending_to(peer))
    }

    fn held_bytes(&self) -> usize {
        Nic::held_bytes(self)
    }

    fn read_waited(&self, dst: &mut [u8], from: Remote) -> Result<()> {
        Nic::read_waited(self, dst, from)
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
        local: Option<&NetRegistration>,
        at: Remote,
    ) -> Result<()> {
        let local = local.map(own_registration).transpose()?;
        // SAFETY: the caller's contract (the trait's).
        unsafe {
            Nic::atomic(
                self, kind, op, ty, count, operand, compare, result, local, at,
            )
        }
    }

    fn atomic_copied(&self, op: NetOp, ty: NetType, operand: &[u8], at: Remote) -> Result<()> {
        Nic::atomic_copied(self, op, ty, operand, at)
    }

    unsafe fn fetch_word(
        &self,
        op: NetOp,
        words: *mut u64,
        reg: &NetRegistration,
        at: Remote,
        tracked: *mut TrackedContext,
    ) -> Result<()> {
        let reg = own_registration(reg)?;
        // SAFETY: the caller's contract (the trait's).
        unsafe { Nic::fetch_word(self, op, words, reg, at, tracked) }
    }

    fn post_word(&self, op: NetOp, value: u64, at: Remote) -> Result<()> {
        Nic::post_word(self, op, value, at)
    }

    /// A delivery of no bytes and one flag word over the wire ([`Nic::deliver`]).
    fn store_unanswered(&self, value: u64, at: Remote) -> Result<bool> {
        Nic::deliver(self, &[], at, &[value], at, None)
    }

    /// [`Wire::add_unanswered`] where the wire reaches the peer.
    fn add_unanswered(&self, value: u64, at: Remote, ack: Ack) -> Result<bool> {
        match self.wire.as_ref().filter(|w| w.reaches(at.peer)) {
            Some(w) => w.add_unanswered(value, at, ack).map(|()| true),
            None => Ok(false),
        }
    }

    unsafe fn ship_epoch(
        &self,
        words: *mut u64,
        at: Remote,
        held: bool,
        payload: &[u8],
        tracked: *mut TrackedContext,
    ) -> Result<()> {
        // SAFETY: the caller's contract (the trait's).
        unsafe { Nic::ship_epoch(self, words, at, held, payload, tracked) }
    }

    fn striped_waited(
        &self,
        stripes: &[Remote],
        payload: &[u8],
        result: &mut [u8],
    ) -> Result<bool> {
        Nic::striped_waited(self, stripes, payload, result)
    }

    fn flush(&self, meanwhile: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        Nic::flush(self, meanwhile)
    }

    fn progress(&self) -> Result<()> {
        Nic::progress(self)
    }

    fn abandon(&self, read: bool) {
        Nic::abandon(self, read)
    }

    fn watch_peer(&self, peer: u64, rank: usize, ended: PeerEnded) {
        Nic::watch_peer(self, peer, rank, ended)
    }

    fn blame(&self, e: Error) -> Error {
        Nic::blame(self, e)
    }

    fn has_failed(&self) -> bool {
        Nic::has_failed(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory a test registers: boxed u64s (8-aligned), handed out as a raw pointer.
    struct Words(Box<[u64]>);

    impl Words {
        fn new(n: usize) -> Words {
            Words(vec![0u64; n].into_boxed_slice())
        }
        fn ptr(&mut self) -> *mut u8 {
            self.0.as_mut_ptr().cast()
        }
    }

    /// A target endpoint's progress that a test can pause: [`PausableTarget::serve`] runs on
    /// a thread of its own and drives the endpoint while it is not paused (so that the
    /// target answers nothing meanwhile), until [`PausableTarget::stop`].
    #[derive(Default)]
    struct PausableTarget {
        paused_wanted: std::sync::atomic::AtomicBool,
        paused: std::sync::atomic::AtomicBool,
        done: std::sync::atomic::AtomicBool,
    }

    impl PausableTarget {
        fn serve(&self, nic: &Nic) {
            // Relaxed `done`: only ends the loop. Acquire/Release: the pause is seen by
            // the test only once the endpoint is no longer driven.
            while !self.done.load(Ordering::Relaxed) {
                if self.paused_wanted.load(Ordering::Acquire) {
                    self.paused.store(true, Ordering::Release);
                } else {
                    nic.progress().unwrap();
                }
                std::thread::yield_now();
            }
        }

        /// Returns once the target no longer progresses.
        fn pause(&self) {
            self.paused_wanted.store(true, Ordering::Release);
            while !self.paused.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }

        fn resume(&self) {
            self.paused_wanted.store(false, Ordering::Release);
        }

        fn stop(&self) {
            self.done.store(true, Ordering::Relaxed);
        }
    }

    /// Two endpoints of one process on `provider` at 127.0.0.1: A writes, reads and does
    /// atomics on B's registered memory while a thread of B's progresses it (every
    /// provider here progresses manually: a target nobody reads moves nothing, the
    /// connection handshake included).
    fn rma_and_atomics_between_two_endpoints(provider: &str, atomics: &str) {
        let a = Nic::open_as(provider, "127.0.0.1", false, Some(atomics)).expect("open A");
        let b = Nic::open_as(provider, "127.0.0.1", false, Some(atomics)).expect("open B");
        assert_eq!(a.described().provider, provider);
        let b_at_a = a.insert(&b.name().unwrap()).unwrap();
        let mut target = Words::new(8);
        let mut local = Words::new(8);
        let mut scratch = Words::new(3);
        // SAFETY: the boxes outlive the registrations (dropped at the end of the test) and
        // are only touched through raw reads after flushes.
        let (t_reg, l_reg, s_reg) = unsafe {
            (
                b.register(target.ptr(), 64).unwrap(),
                a.register(local.ptr(), 64).unwrap(),
                a.register(scratch.ptr(), 24).unwrap(),
            )
        };
        let at = |word: u64| Remote {
            peer: b_at_a,
            addr: t_reg.remote_base + 8 * word,
            key: t_reg.key,
        };
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    b.progress().unwrap();
                    std::thread::yield_now();
                }
            });
            // Write words 0..4, remote-complete, then check them in B's memory.
            let data: [u64; 4] = [11, 22, 33, 44];
            let src: &[u8] = bytemuck::cast_slice(&data);
            // SAFETY: `local` stays untouched until the flush.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), local.ptr(), 32);
                let staged = std::slice::from_raw_parts(local.ptr(), 32);
                a.write(staged, Some(&l_reg), at(0)).unwrap();
            }
            a.flush(|| Ok(())).unwrap();
            // SAFETY: the write completed at the target (delivery complete).
            let seen: Vec<u64> = (0..4)
                .map(|i| unsafe { target.0.as_ptr().add(i).read_volatile() })
                .collect();
            assert_eq!(seen, data);
            // Read them back into words 4..8 of `local`.
            // SAFETY: the destination lies in `local`'s registration, unread until the flush.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(local.ptr().add(32), 32);
                a.read(dst, Some(&l_reg), at(0)).unwrap();
            }
            a.flush(|| Ok(())).unwrap();
            assert_eq!(local.0[4..8], data);
            // Atomics: 100 fetch-adds of 1 on word 5, then compare-and-swaps.
            let before: Vec<u64> = (0..100)
                .map(|_| a.fetch_add_u64(1, at(5), &s_reg).unwrap())
                .collect();
            assert_eq!(before, (0..100).collect::<Vec<u64>>());
            assert_eq!(a.compare_swap_u64(100, 7, at(5), &s_reg).unwrap(), 100);
            assert_eq!(
                a.compare_swap_u64(100, 9, at(5), &s_reg).unwrap(),
                7,
                "no swap"
            );
            done.store(true, Ordering::Relaxed);
        });
        // SAFETY: every operation completed.
        assert_eq!(unsafe { target.0.as_ptr().add(5).read_volatile() }, 7);
        drop((t_reg, l_reg, s_reg));
    }

    /// Copied writes and atomics stay in flight after their calls returned — the caller's
    /// buffer is reused at once — until a flush; nothing can complete while the target
    /// does not progress, and the flush returns only once every one is at the target.
    /// Waited writes and reads complete on their own; copies held return to zero.
    fn copied_operations_complete_at_the_flush(provider: &str, atomics: &str) {
        let _watchdog = crate::testing::Watchdog::new("copied operations", 60);
        let a = Nic::open_as(provider, "127.0.0.1", false, Some(atomics)).expect("open A");
        let b = Nic::open_as(provider, "127.0.0.1", false, Some(atomics)).expect("open B");
        let b_at_a = a.insert(&b.name().unwrap()).unwrap();
        // Well below what a peer's queues hold: posts to a target that does not progress
        // are accepted only up to there (shm's command queue stops short of 400).
        const N: usize = 1000;
        let mut target = Words::new(N + 16);
        // SAFETY: the box outlives the registration; it is read only after flushes.
        let t_reg = unsafe { b.register(target.ptr(), (N + 16) * 8).unwrap() };
        let at = |word: usize| Remote {
            peer: b_at_a,
            addr: t_reg.remote_base + 8 * word as u64,
            key: t_reg.key,
        };
        // B progresses (the connection is made then) until paused.
        let target_progress = PausableTarget::default();
        std::thread::scope(|s| {
            s.spawn(|| target_progress.serve(&b));
            let mut src = [0u64];
            a.write_waited(bytemuck::cast_slice(&src), at(N + 8))
                .unwrap();
            target_progress.pause();
            // One while B does not progress (shm refuses a second delivery-complete write
            // until the peer answered the first), the rest while it does: the caller's
            // buffer is reused after each call.
            const PAUSED: usize = 1;
            for i in 0..N {
                if i == PAUSED {
                    assert!(
                        a.held_bytes() >= PAUSED * (8 + CONTEXT_BYTES),
                        "copies and their contexts held"
                    );
                    assert!(
                        a.in_flight() > 0,
                        "completed while the target did not progress"
                    );
                    target_progress.resume();
                }
                src[0] = i as u64 + 1;
                a.write_copied(bytemuck::cast_slice(&src), at(i))
                    .unwrap_or_else(|e| panic!("write {i}: {e}"));
            }
            let ones = [1u64; 2];
            for _ in 0..50 {
                a.atomic_copied(NetOp::Sum, NetType::U64, bytemuck::cast_slice(&ones), at(N))
                    .unwrap();
            }
            // Pieces (offset in source, offset at the target, length): words 2 and 0.
            let pair = [70u64, 80];
            let pieces = [(0, 8 * (N + 4), 8), (8, 8 * (N + 6), 8)];
            a.write_copied_pieces(bytemuck::cast_slice(&pair), &pieces, at(0))
                .unwrap();
            a.flush(|| Ok(())).unwrap();
            assert_eq!(a.in_flight(), 0);
            assert_eq!(a.held_bytes(), 0, "copies freed by the flush");
            // SAFETY: every write completed at the target (delivery complete).
            let seen: Vec<u64> = (0..N + 8)
                .map(|i| unsafe { target.0.as_ptr().add(i).read_volatile() })
                .collect();
            for (i, &v) in seen[..N].iter().enumerate() {
                assert_eq!(v, i as u64 + 1, "copied write {i}");
            }
            assert_eq!(seen[N..N + 2], [50, 50], "copied atomics");
            assert_eq!((seen[N + 4], seen[N + 6]), (70, 80), "copied pieces");
            // Waited: complete when they return, each on its own.
            let long: Vec<u64> = (0..8).map(|i| i * 3).collect();
            a.write_waited(bytemuck::cast_slice(&long), at(8)).unwrap();
            let mut back = [0u64; 8];
            a.read_waited(bytemuck::cast_slice_mut(&mut back), at(8))
                .unwrap();
            assert_eq!(back.to_vec(), long);
            target_progress.stop();
        });
        drop(t_reg);
    }

    /// A long write sent from the caller's buffer ([`Nic::write_sent`]) returns once the
    /// provider is done with the buffer — it is overwritten at once, and the target gets
    /// what it held at the call — and is complete at the target only at the next flush:
    /// while the target does not progress the write stays in flight.
    #[test]
    fn tcp_rxm_sent_writes_complete_at_the_flush() {
        require("tcp;ofi_rxm");
        let _watchdog = crate::testing::Watchdog::new("sent writes", 60);
        let a = Nic::open("tcp;ofi_rxm", "127.0.0.1").expect("open A");
        let b = Nic::open("tcp;ofi_rxm", "127.0.0.1").expect("open B");
        assert!(
            a.orders_rma_writes(),
            "the ordered path is the one under test"
        );
        let b_at_a = a.insert(&b.name().unwrap()).unwrap();
        // Two writes of 40 KiB while B does not progress (what the loopback's socket
        // buffers take without a reader), then eight of 64 KiB while it does.
        const PAUSED_WORDS: usize = 5 << 10;
        const WORDS: usize = 8 << 10;
        const N: usize = 2 + 8;
        let mut target = Words::new(2 * PAUSED_WORDS + 8 * WORDS);
        // SAFETY: the box outlives the registration; it is read only after the flush.
        let t_reg = unsafe { b.register(target.ptr(), target.0.len() * 8).unwrap() };
        let at = |word: usize| Remote {
            peer: b_at_a,
            addr: t_reg.remote_base + 8 * word as u64,
            key: t_reg.key,
        };
        let target_progress = PausableTarget::default();
        std::thread::scope(|s| {
            s.spawn(|| target_progress.serve(&b));
            // Connected first.
            a.write_waited(bytemuck::cast_slice(&[0u64]), at(0))
                .unwrap();
            target_progress.pause();
            let mut src = vec![0u64; WORDS];
            let mut word = 0;
            for i in 0..N {
                let len = if i < 2 { PAUSED_WORDS } else { WORDS };
                if i == 2 {
                    assert!(
                        a.in_flight() > 0,
                        "complete while the target did not progress"
                    );
                    target_progress.resume();
                }
                for (k, w) in src[..len].iter_mut().enumerate() {
                    *w = (i as u64 + 1) << 32 | k as u64;
                }
                a.write_sent(bytemuck::cast_slice(&src[..len]), at(word))
                    .unwrap_or_else(|e| panic!("write {i}: {e}"));
                // The provider is done with the buffer: reuse it at once.
                src.fill(u64::MAX);
                word += len;
            }
            a.flush(|| Ok(())).unwrap();
            assert_eq!(a.in_flight(), 0);
            let mut word = 0;
            for i in 0..N {
                let len = if i < 2 { PAUSED_WORDS } else { WORDS };
                for k in [0, len / 2, len - 1] {
                    // SAFETY: every write completed at the target (the flush).
                    let v = unsafe { target.0.as_ptr().add(word + k).read_volatile() };
                    assert_eq!(v, (i as u64 + 1) << 32 | k as u64, "write {i}, word {k}");
                }
                word += len;
            }
            target_progress.stop();
        });
        drop(t_reg);
    }

    #[test]
    fn tcp_rxm_copied_operations_complete_at_the_flush() {
        require("tcp;ofi_rxm");
        copied_operations_complete_at_the_flush("tcp;ofi_rxm", "socket");
        copied_operations_complete_at_the_flush("tcp;ofi_rxm", "provider");
    }

    #[test]
    fn shm_copied_operations_complete_at_the_flush() {
        require("shm");
        copied_operations_complete_at_the_flush("shm", "socket");
    }

    /// tcp;ofi_rxm promises atomics in issue order to a peer (what lets an unlock release
    /// behind its epoch's accumulates, `sync::lock`) and RMA writes in issue order (what
    /// lets the notified alltoallv plan signal behind its data), but not an atomic after an
    /// RMA write.
    #[test]
    fn tcp_rxm_keeps_atomics_in_order() {
        require("tcp;ofi_rxm");
        let nic = Nic::open_chosen(Some("tcp;ofi_rxm"), "127.0.0.1").unwrap();
        assert!(nic.orders_atomics(), "{:#x}", nic.described().msg_order);
        assert!(nic.orders_rma_writes(), "{:#x}", nic.described().msg_order);
    }

    /// Software providers apply atomics with the CPU's; NIC providers do not, whatever
    /// utility provider sits on them.
    #[test]
    fn only_software_providers_mix_atomics_with_the_cpu() {
        for name in ["tcp;ofi_rxm", "udp;ofi_rxd", "shm", "tcp"] {
            assert!(software_atomics(name), "{name}");
        }
        for name in [
            "verbs;ofi_rxm",
            "cxi",
            "efa",
            "psm2",
            "sockets",
            "net;ofi_rxm",
            "",
        ] {
            assert!(!software_atomics(name), "{name}");
            assert!(!provider_atomics_mix_with_cpu(name), "{name}");
        }
        for name in ["tcp;ofi_rxm", "tcp"] {
            assert!(provider_atomics_mix_with_cpu(name), "{name}");
        }
        for name in ["udp;ofi_rxd", "shm", "tcp;ofi_rxd"] {
            assert!(!provider_atomics_mix_with_cpu(name), "{name}");
        }
        // Long puts over the wire where the provider's RMA crosses the network stack.
        for name in ["tcp;ofi_rxm", "tcp", "udp;ofi_rxd"] {
            assert!(long_puts_on_wire(name), "{name}");
        }
        for name in ["shm", "verbs;ofi_rxm", "cxi", "efa", ""] {
            assert!(!long_puts_on_wire(name), "{name}");
        }
    }

    /// `ONESIDED_NET_ATOMICS`: the wire by default on software providers; the provider's
    /// atomics on request where they work between processes, mixing with CPU atomics on
    /// this node's words unless `provider-everywhere`; refused where they do not work.
    #[test]
    fn net_atomics_follow_the_environment_and_the_provider() {
        let _watchdog = crate::testing::Watchdog::new("net atomics", 60);
        let tcp = |atomics| Nic::open_as("tcp;ofi_rxm", "127.0.0.1", false, Some(atomics));
        let socket = tcp("socket").unwrap();
        assert!(socket.wire.is_some() && socket.atomics_mix_with_cpu());
        let provider = tcp("provider").unwrap();
        assert!(provider.wire.is_none() && provider.atomics_mix_with_cpu());
        let everywhere = tcp("provider-everywhere").unwrap();
        assert!(everywhere.wire.is_none() && !everywhere.atomics_mix_with_cpu());
        assert!(matches!(tcp("nic"), Err(Error::InvalidArgument(_))));
        for name in ["udp;ofi_rxd", "shm"] {
            for atomics in ["provider", "provider-everywhere"] {
                let refused = Nic::open_as(name, "127.0.0.1", false, Some(atomics));
                assert!(
                    matches!(refused, Err(Error::Unsupported(_))),
                    "{name} {atomics}"
                );
            }
            let socket = Nic::open_as(name, "127.0.0.1", false, None).unwrap();
            assert!(
                socket.wire.is_some() && socket.atomics_mix_with_cpu(),
                "{name}"
            );
        }
        assert!(matches!(
            net_atomics("verbs;ofi_rxm", Some("socket")),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(
            net_atomics("verbs;ofi_rxm", None).unwrap(),
            NetAtomics::Provider
        );
    }

    /// Whether this machine has libfabric's provider `name` (tests skip nothing silently:
    /// CI installs libfabric, so a missing provider fails there).
    fn require(name: &str) {
        let out = std::process::Command::new("fi_info")
            .args(["-l"])
            .output()
            .expect("fi_info (libfabric-bin) is installed");
        let list = String::from_utf8_lossy(&out.stdout);
        let base = name.split(';').next_back().unwrap();
        assert!(list.contains(base), "provider {name} missing:\n{list}");
    }

    #[test]
    fn tcp_rxm_endpoints_write_read_and_do_atomics() {
        require("tcp;ofi_rxm");
        rma_and_atomics_between_two_endpoints("tcp;ofi_rxm", "socket");
        rma_and_atomics_between_two_endpoints("tcp;ofi_rxm", "provider");
    }

    #[test]
    fn shm_endpoints_write_read_and_do_atomics() {
        require("shm");
        rma_and_atomics_between_two_endpoints("shm", "socket");
    }

    /// Without a name, the best provider this machine has: here (no cxi, verbs or efa
    /// device) tcp;ofi_rxm. A named one is taken as named.
    #[test]
    fn the_provider_is_the_named_one_or_the_best_available() {
        require("tcp;ofi_rxm");
        let best = Nic::open_chosen(None, "127.0.0.1").unwrap();
        assert_eq!(best.described().provider, "tcp;ofi_rxm");
        let named = Nic::open_chosen(Some("shm"), "127.0.0.1").unwrap();
        assert_eq!(named.described().provider, "shm");
        assert!(matches!(
            Nic::open_chosen(Some("sockets"), "127.0.0.1"),
            Err(Error::Unsupported(_))
        ));
    }

    #[test]
    fn providers_that_cannot_serve_are_unsupported() {
        for name in ["sockets", "net"] {
            match Nic::open(name, "127.0.0.1") {
                Err(Error::Unsupported(msg)) => assert!(msg.contains(name), "{msg}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        match Nic::open("no-such-provider", "127.0.0.1") {
            Err(Error::Unsupported(_)) => {}
            other => panic!("{other:?}"),
        }
    }
}
