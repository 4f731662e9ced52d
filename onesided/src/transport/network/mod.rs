//! The network as the rest of the library sees it — the seam between the library and the
//! implementations of the network (docs/architecture.md, "The network seam"):
//!
//! - its terms (`terms`): where an operation goes ([`Remote`]), what an atomic is
//!   ([`NetOp`], [`NetType`], [`AtomicKind`], [`AtomicTable`]), a delivery's second place
//!   ([`DeliverGate`]), a tracked operation's context ([`TrackedContext`]), what a window
//!   counts of what it issued ([`NetWrites`]);
//! - the endpoint's operations as one trait (`fabric`: [`Fabric`], and the
//!   [`Registration`]s it hands out), which the network's protocol code — the control
//!   plane over the network (`win::netplane`), window creation across nodes
//!   (`win::across`), network atomics (`rma::net_atomic`), notification counters — calls
//!   through `Arc<dyn Fabric>`;
//! - the process-wide calls below (this file): the registration point, the one place that
//!   knows which implementation serves — libfabric with our messages over TCP (`ofi`,
//!   `wire`, the endpoint in `net`, its progress thread in `nic_progress`) under the
//!   feature `ofi`.
//!
//! Outside `transport/` no module names those implementation modules
//! (`tests/module_graph.rs`). Every call here answers in every build — without the feature
//! `ofi`, "no network" — and what only a network can hold is an [`Only`], which then has
//! no value: the network's protocol code compiles everywhere and costs a node-local path
//! nothing. Still to come (issue 57): a second implementation written against [`Fabric`]
//! alone.

// What only an implementation of the network uses (none without the feature `ofi`).
#![cfg_attr(not(feature = "ofi"), allow(dead_code, unused_imports))]

mod fabric;
mod terms;

pub(crate) use fabric::{Fabric, Registration};
pub(crate) use terms::{
    AtomicKind, AtomicTable, DeliverGate, NetOp, NetType, NetWrites, Only, PeerEnded, Remote,
    TrackedContext, COPY_MAX, HELD_MAX, PROVIDER_SPACE_WORDS,
};

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ops::{ElemType, Op};
#[cfg(feature = "ofi")]
use crate::transport::{net, ofi};

/// The error of a call that needs the network where this build has none (windows across
/// nodes need the feature `ofi`; nothing else reaches the calls that return it).
pub(crate) fn absent() -> Error {
    Error::Unsupported("windows across nodes: this build has no network (feature `ofi`)".into())
}

/// The process's endpoint (opened at the first call): what the network protocols call.
pub(crate) fn endpoint() -> Result<Arc<dyn Fabric>> {
    #[cfg(feature = "ofi")]
    return Ok(net::endpoint()?.nic.clone() as Arc<dyn Fabric>);
    #[cfg(not(feature = "ofi"))]
    Err(absent())
}

/// The endpoint's address-vector entry of the peer whose address is `name` (what the
/// peer's [`Fabric::name`] gave), inserted at its first use.
pub(crate) fn peer(name: &[u8]) -> Result<u64> {
    #[cfg(feature = "ofi")]
    return net::endpoint()?.peer(name);
    #[cfg(not(feature = "ofi"))]
    {
        let _ = name;
        Err(absent())
    }
}

/// What the endpoint does natively.
pub(crate) fn atomic_table() -> Result<&'static AtomicTable> {
    #[cfg(feature = "ofi")]
    return Ok(&net::endpoint()?.table);
    #[cfg(not(feature = "ofi"))]
    Err(absent())
}

/// Tells the network which job and rank this process is (once, at start-up): endpoints
/// that leave a named object on the node are named so that the job's cleanup removes them.
pub(crate) fn set_job_of_process(job: &str, rank: usize) {
    #[cfg(feature = "ofi")]
    ofi::set_job_of_process(job, rank);
    let _ = (job, rank);
}

/// True once the process's endpoint is open.
pub(crate) fn is_open() -> bool {
    #[cfg(feature = "ofi")]
    return net::is_open();
    #[cfg(not(feature = "ofi"))]
    false
}

/// Operations posted on the endpoint not yet seen complete (0 when none is open).
pub(crate) fn in_flight() -> u64 {
    #[cfg(feature = "ofi")]
    return net::in_flight();
    #[cfg(not(feature = "ofi"))]
    0
}

/// What [`crate::network`] reports: the endpoint, once open.
#[cfg(feature = "ofi")]
pub(crate) fn description() -> Option<crate::NetworkEndpoint> {
    net::description()
}

/// Runs `post`; every operation it posts gets a completion of its own, so that the calling
/// thread's flush of thread scope ([`complete_own`]) waits for its own operations only,
/// not for every thread's (seed 000 §2.1).
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
    #[cfg(feature = "ofi")]
    return net::complete_own();
    #[cfg(not(feature = "ofi"))]
    Ok(())
}

/// Lets go of what completed operations posted under [`track_own`] hold.
pub(crate) fn reap_own() -> Result<()> {
    #[cfg(feature = "ofi")]
    return net::reap_own();
    #[cfg(not(feature = "ofi"))]
    Ok(())
}

/// True when the endpoint delivers operations to a peer in issue order where a write or a
/// read follows a write.
pub(crate) fn ordered() -> Result<bool> {
    #[cfg(feature = "ofi")]
    return net::ordered();
    #[cfg(not(feature = "ofi"))]
    Err(absent())
}

/// True when the endpoint delivers atomics to a peer in issue order.
pub(crate) fn orders_atomics() -> Result<bool> {
    #[cfg(feature = "ofi")]
    return net::orders_atomics();
    #[cfg(not(feature = "ofi"))]
    Err(absent())
}

/// True when the endpoint places RMA writes to a peer in issue order.
pub(crate) fn orders_rma_writes() -> Result<bool> {
    #[cfg(feature = "ofi")]
    return net::orders_rma_writes();
    #[cfg(not(feature = "ofi"))]
    Err(absent())
}

/// True when a put of `len` bytes to `to` goes as a message of our own rather than an RMA
/// write (short puts where the wire reaches the target).
pub(crate) fn put_over_wire(len: usize, to: Remote) -> Result<bool> {
    #[cfg(feature = "ofi")]
    return net::put_over_wire(len, to);
    #[cfg(not(feature = "ofi"))]
    {
        let _ = (len, to);
        Ok(false)
    }
}

/// True when a put of `len` bytes to `to` can go as atomic writes ([`post_write_atomic`]).
pub(crate) fn atomic_put_fits(len: usize, to: Remote) -> Result<bool> {
    #[cfg(feature = "ofi")]
    return net::atomic_put_fits(len, to);
    #[cfg(not(feature = "ofi"))]
    {
        let _ = (len, to);
        Ok(false)
    }
}

/// Writes `src` to `to` as atomic writes, issued with a copy: kept in order with the
/// endpoint's other atomics to the same peer. Only where [`atomic_put_fits`].
pub(crate) fn post_write_atomic(src: &[u8], to: Remote) -> Result<()> {
    #[cfg(feature = "ofi")]
    return net::post_write_atomic(src, to);
    #[cfg(not(feature = "ofi"))]
    {
        let _ = (src, to);
        Err(absent())
    }
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
    #[cfg(feature = "ofi")]
    return unsafe { net::post_write_shared(src, to, owner, end) };
    #[cfg(not(feature = "ofi"))]
    {
        let _ = (src, to, owner, end);
        Err(absent())
    }
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
    #[cfg(feature = "ofi")]
    return net::deliver(block, to, words, flag, gate);
    #[cfg(not(feature = "ofi"))]
    {
        let _ = (block, to, words, flag, gate);
        Ok(false)
    }
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
    #[cfg(feature = "ofi")]
    {
        let request = crate::transport::wire::Request {
            kind: crate::transport::wire::Kind::Write,
            op,
            ty,
            count,
            key,
            addr,
        };
        crate::transport::wire::encode(out, &request, operand, &[])
    }
    #[cfg(not(feature = "ofi"))]
    {
        let _ = (out, op, ty, count, addr, key, operand);
        Err(absent())
    }
}
