//! The network as the rest of the library sees it — the seam between the library and the
//! implementations of the network (docs/architecture.md, "The network seam"):
//!
//! - its terms (`terms`): where an operation goes ([`Remote`]), what an atomic is
//!   ([`NetOp`], [`NetType`], [`AtomicKind`], [`AtomicTable`]), a delivery's second place
//!   ([`DeliverGate`]), a tracked operation's context ([`TrackedContext`]), what a window
//!   counts of what it issued ([`NetWrites`]);
//! - the process's network as one trait and its endpoint's operations as another
//!   (`fabric`: [`Network`], [`Fabric`], and the [`Registration`]s it hands out): the
//!   routes' puts and gets call the first, the network's protocol code — the control
//!   plane over the network (`net::plane`), window creation across nodes
//!   (`net::across`), network atomics (`net::atomics`), notification counters — holds
//!   the second as `Arc<dyn Fabric>`;
//! - the process-wide calls below (this file): the registration point, the one place that
//!   knows the implementations and chooses one per process ([`NETWORK_ENV`]): libfabric
//!   with our messages over TCP (`ofi`, `wire`, the endpoint in `net`, its progress thread
//!   in `nic_progress`; feature `ofi`), or our messages over TCP alone (`socket` over
//!   `wire`; feature `net`, which `ofi` includes).
//!
//! Outside `transport/` no module names those implementation modules
//! (`tests/module_graph.rs`). Every call here answers in every build — without the feature
//! `net`, "no network" — and what only a network can hold is an [`Only`], which then has
//! no value: the network's protocol code compiles everywhere and costs a node-local path
//! nothing.
//!
//! ```text
//! ONESIDED_NETWORK=socket osrun -n 4 --nodes 2 ./app   # no libfabric: our messages alone
//! ```

// What only an implementation of the network uses (none without the feature `net`).
#![cfg_attr(not(feature = "net"), allow(dead_code, unused_imports))]

mod fabric;
mod terms;

pub(crate) use fabric::{Fabric, Network, Registration};
#[cfg(feature = "ofi")]
pub(crate) use terms::PROVIDER_SPACE_WORDS;
pub(crate) use terms::{
    Ack, AtomicKind, AtomicTable, DeliverGate, NetOp, NetType, NetWrites, Only, PeerEnded, Remote,
    TrackedContext, COPY_MAX, HELD_MAX, LONG_PUT_MIN, NETWORK_ENV,
};

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ops::{ElemType, Op};
#[cfg(feature = "ofi")]
use crate::transport::{net, ofi};
#[cfg(feature = "net")]
use crate::transport::{socket, wire};

/// The error of a call that needs the network where this build has none (windows across
/// nodes need the feature `net` or `ofi`; nothing else reaches the calls that return it).
pub(crate) fn absent() -> Error {
    Error::Unsupported(
        "windows across nodes: this build has no network (feature `net` or `ofi`)".into(),
    )
}

/// The process's network once chosen and opened.
#[cfg(feature = "net")]
static CHOSEN: std::sync::OnceLock<&'static dyn Network> = std::sync::OnceLock::new();

/// The process's network, chosen ([`NETWORK_ENV`]) and opened at the first call.
pub(crate) fn network() -> Result<&'static dyn Network> {
    #[cfg(feature = "net")]
    {
        if let Some(n) = CHOSEN.get() {
            return Ok(*n);
        }
        // Set but empty (`ONESIDED_NETWORK=${NET:-}` in a script) is the default, as unset.
        let chosen = std::env::var(NETWORK_ENV).ok().filter(|v| !v.is_empty());
        let opened: &'static dyn Network = match chosen.as_deref().unwrap_or(DEFAULT_NETWORK) {
            #[cfg(feature = "ofi")]
            "ofi" => net::endpoint()?,
            "socket" => socket::endpoint()?,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "{NETWORK_ENV}={other}: this build has the networks {}",
                    NETWORKS.join(", ")
                )))
            }
        };
        // Each implementation opens once (its own lock); a thread that raced this one
        // found the same.
        Ok(*CHOSEN.get_or_init(|| opened))
    }
    #[cfg(not(feature = "net"))]
    Err(absent())
}

/// The networks this build has, the default first.
#[cfg(feature = "ofi")]
const NETWORKS: [&str; 2] = ["ofi", "socket"];
#[cfg(all(feature = "net", not(feature = "ofi")))]
const NETWORKS: [&str; 1] = ["socket"];
#[cfg(feature = "net")]
const DEFAULT_NETWORK: &str = NETWORKS[0];

/// The process's endpoint (opened at the first call): what the network protocols hold.
pub(crate) fn endpoint() -> Result<Arc<dyn Fabric>> {
    Ok(Arc::clone(network()?.fabric()))
}

/// The endpoint's entry of the peer whose address is `name` (what the peer's
/// [`Fabric::name`] gave), inserted at its first use.
pub(crate) fn peer(name: &[u8]) -> Result<u64> {
    network()?.peer(name)
}

/// What the endpoint does natively.
pub(crate) fn atomic_table() -> Result<&'static AtomicTable> {
    Ok(network()?.atomic_table())
}

/// Tells the network which job and rank this process is (once, at start-up): endpoints
/// that leave a named object on the node are named so that the job's cleanup removes them.
pub(crate) fn set_job_of_process(job: &str, rank: usize) {
    #[cfg(feature = "ofi")]
    ofi::set_job_of_process(job, rank);
    let _ = (job, rank);
}

/// The network, if it is open.
fn opened() -> Option<&'static dyn Network> {
    #[cfg(feature = "net")]
    return CHOSEN.get().copied();
    #[cfg(not(feature = "net"))]
    None
}

/// True once the process's endpoint is open.
pub(crate) fn is_open() -> bool {
    opened().is_some()
}

/// Operations posted on the endpoint not yet seen complete (0 when none is open).
pub(crate) fn in_flight() -> u64 {
    opened().map_or(0, |n| n.in_flight())
}

/// What [`crate::network`] reports: the endpoint, once open.
#[cfg(feature = "net")]
pub(crate) fn description() -> Option<crate::NetworkEndpoint> {
    opened().map(|n| n.description())
}

/// Runs `post`; every operation it posts gets a completion of its own, so that the calling
/// thread's flush of thread scope ([`complete_own`]) waits for its own operations only,
/// not for every thread's (seed 000 §2.1). (A network that cannot tell threads apart
/// completes every operation in that flush.)
pub(crate) fn track_own<R>(post: impl FnOnce() -> R) -> R {
    #[cfg(feature = "ofi")]
    return ofi::track_own(post);
    #[cfg(not(feature = "ofi"))]
    post()
}

/// Runs `post`, which posts operations on behalf of thread `issuer` (the engine running an
/// operation another thread deferred): they count as that thread's, so that its flush of
/// thread scope completes them too.
pub(crate) fn post_for<R>(issuer: u64, post: impl FnOnce() -> R) -> R {
    #[cfg(feature = "ofi")]
    return ofi::post_for(issuer, post);
    #[cfg(not(feature = "ofi"))]
    {
        let _ = issuer;
        post()
    }
}

/// Completes the network operations the calling thread posted under [`track_own`] (a flush
/// of thread scope).
pub(crate) fn complete_own() -> Result<()> {
    match opened() {
        Some(n) => n.flush_own(),
        None => Ok(()),
    }
}

/// Lets go of what completed operations posted under [`track_own`] hold.
pub(crate) fn reap_own() -> Result<()> {
    match opened() {
        Some(n) => n.reap_own(),
        None => Ok(()),
    }
}

/// True when the endpoint delivers operations to a peer in issue order where a write or a
/// read follows a write.
pub(crate) fn ordered() -> Result<bool> {
    Ok(network()?.orders_after_writes())
}

/// True when the endpoint delivers atomics to a peer in issue order.
pub(crate) fn orders_atomics() -> Result<bool> {
    Ok(network()?.fabric().orders_atomics())
}

/// True when the endpoint places RMA writes to a peer in issue order.
pub(crate) fn orders_rma_writes() -> Result<bool> {
    Ok(network()?.orders_rma_writes())
}

/// True when a put of `len` bytes to `to` goes as a message of our own rather than an RMA
/// write (short puts where the wire reaches the target).
pub(crate) fn put_over_wire(len: usize, to: Remote) -> Result<bool> {
    network()?.put_over_wire(len, to)
}

/// True when a put of `len` bytes to `to` can go as atomic writes ([`post_write_atomic`]).
pub(crate) fn atomic_put_fits(len: usize, to: Remote) -> Result<bool> {
    network()?.atomic_put_fits(len, to)
}

/// Writes `src` to `to` as atomic writes, issued with a copy: kept in order with the
/// endpoint's other atomics to the same peer. Only where [`atomic_put_fits`].
pub(crate) fn post_write_atomic(src: &[u8], to: Remote) -> Result<()> {
    network()?.post_write_atomic(src, to)
}

/// Posts a long put over our own connection to the target ([`Network::post_long_put`]):
/// false, with nothing posted, where it does not go so.
pub(crate) fn post_long_put(src: &[u8], to: Remote) -> Result<bool> {
    network()?.post_long_put(src, to)
}

/// Writes `src` to `to` from where it is: complete at the caller's next completion point
/// (as `end` says), `owner` (which owns `src` and keeps it unchanged) held until then.
///
/// # Safety
/// `src` stays valid and unchanged while `owner` is held.
pub(crate) unsafe fn post_write_shared(
    src: &[u8],
    to: Remote,
    owner: std::sync::Arc<dyn Send + Sync>,
    end: crate::transport::write_end::WriteEnd,
) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe { network()?.post_write_shared(src, to, owner, end) }
}

/// Sends `block` to `to` and then `words` to `flag` in one message that nobody answers,
/// with its second place `gate` if any, where the wire reaches the peer: false, with
/// nothing sent, elsewhere.
pub(crate) fn deliver(
    block: &[u8],
    to: Remote,
    words: &[u64],
    flag: Remote,
    gate: Option<DeliverGate<'_>>,
) -> Result<bool> {
    network()?.deliver(block, to, words, flag, gate)
}

/// Appends a non-fetching accumulate — `op` on `count` elements of `ty` at `addr` under
/// registration `key`, `operand` the origin's bytes — to `out`, as one element of an
/// exclusive epoch shipped to its target in one message (`progress::shipping`). Fails for
/// an element type the message does not carry.
pub(crate) fn encode_accumulate(
    out: &mut Vec<u8>,
    op: Op,
    ty: ElemType,
    count: usize,
    (addr, key): (u64, u64),
    operand: &[u8],
) -> Result<()> {
    #[cfg(feature = "net")]
    {
        let request = wire::Request {
            kind: wire::Kind::Write,
            op,
            ty,
            count,
            key,
            addr,
        };
        wire::encode(out, &request, operand, &[])
    }
    #[cfg(not(feature = "net"))]
    {
        let _ = (out, op, ty, count, addr, key, operand);
        Err(absent())
    }
}

/// Appends an update (`fetch`: with the previous values answered) of `count` elements of
/// any type at `addr` of registration `key` to `out`: an element of the payload of
/// [`Fabric::striped_waited`].
pub(crate) fn encode_striped(
    out: &mut Vec<u8>,
    fetch: bool,
    op: Op,
    ty: ElemType,
    count: usize,
    (addr, key): (u64, u64),
    operand: &[u8],
) -> Result<()> {
    #[cfg(feature = "net")]
    {
        let request = wire::Request {
            kind: match fetch {
                true => wire::Kind::Fetch,
                false => wire::Kind::Write,
            },
            op,
            ty,
            count,
            key,
            addr,
        };
        wire::encode_striped(out, &request, operand);
        Ok(())
    }
    #[cfg(not(feature = "net"))]
    {
        let _ = (out, fetch, op, ty, count, addr, key, operand);
        Err(absent())
    }
}

/// An endpoint of this process for the unit tests of the network protocols: its operations
/// and how it inserts a peer's name.
#[cfg(all(test, feature = "net"))]
pub(crate) struct TestEndpoint {
    pub fabric: Arc<dyn Fabric>,
    pub insert: Box<InsertPeer>,
}

/// How a [`TestEndpoint`] inserts a peer's name.
#[cfg(all(test, feature = "net"))]
pub(crate) type InsertPeer = dyn Fn(&[u8]) -> Result<u64> + Send + Sync;

/// The networks a unit test of the network protocols runs over: the socket network, and
/// libfabric's `tcp;ofi_rxm` where built.
#[cfg(all(test, feature = "net"))]
pub(crate) fn test_networks() -> &'static [&'static str] {
    #[cfg(feature = "ofi")]
    return &["socket", "tcp;ofi_rxm"];
    #[cfg(not(feature = "ofi"))]
    &["socket"]
}

/// The networks a unit test of network atomics runs over: [`test_networks`], and where
/// libfabric is built its other providers that run here and `tcp;ofi_rxm` with the
/// provider's own atomics (`/provider`: `ONESIDED_NET_ATOMICS=provider`).
#[cfg(all(test, feature = "net"))]
pub(crate) fn test_atomic_networks() -> &'static [&'static str] {
    #[cfg(feature = "ofi")]
    return &[
        "socket",
        "tcp;ofi_rxm",
        "tcp;ofi_rxm/provider",
        "udp;ofi_rxd",
        "shm",
    ];
    #[cfg(not(feature = "ofi"))]
    &["socket"]
}

/// A new endpoint of the network `which` (`socket`, or a libfabric provider, followed by
/// `/provider` for its own atomics instead of the wire's) on the loopback, separate from
/// the process's network; nothing serves it but its [`Fabric::progress`].
#[cfg(all(test, feature = "net"))]
pub(crate) fn test_endpoint(which: &str) -> Result<TestEndpoint> {
    if which == "socket" {
        let sockets = Arc::new(socket::Sockets::open("127.0.0.1")?);
        let inserting = Arc::clone(&sockets);
        return Ok(TestEndpoint {
            fabric: sockets,
            insert: Box::new(move |name| inserting.peer(name)),
        });
    }
    #[cfg(feature = "ofi")]
    {
        let (provider, atomics) = match which.split_once('/') {
            Some((p, a)) => (p, a),
            None => (which, "socket"),
        };
        let nic = Arc::new(ofi::Nic::open_as(
            provider,
            "127.0.0.1",
            false,
            Some(atomics),
        )?);
        let inserting = Arc::clone(&nic);
        Ok(TestEndpoint {
            fabric: nic,
            insert: Box::new(move |name| inserting.insert(name)),
        })
    }
    #[cfg(not(feature = "ofi"))]
    Err(Error::Unsupported(format!(
        "the network {which} in this build"
    )))
}

/// The atomic table of the network `which` ([`test_endpoint`]).
#[cfg(all(test, feature = "net"))]
pub(crate) fn test_atomic_table(which: &str) -> Result<AtomicTable> {
    if which == "socket" {
        return Ok(socket::table());
    }
    #[cfg(feature = "ofi")]
    {
        let provider = which.split_once('/').map_or(which, |(p, _)| p);
        Ok(ofi::Nic::open(provider, "127.0.0.1")?.atomic_table())
    }
    #[cfg(not(feature = "ofi"))]
    Err(Error::Unsupported(format!(
        "the network {which} in this build"
    )))
}
