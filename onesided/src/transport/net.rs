//! This process's network endpoint (feature `ofi`): opened at the first window that spans
//! nodes, on the provider `ONESIDED_PROVIDER` names (else the best one offered), served by
//! its progress thread in the mode `ONESIDED_PROGRESS` names, and kept for the life of the
//! process — every window across nodes shares it, with one address-vector entry per peer.
//!
//! The endpoint binds to the address [`super::address`] chooses (`ONESIDED_NET_ADDR`,
//! `ONESIDED_IFACE`, else the first external interface).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::transport::network::{AtomicKind, AtomicTable, NetOp, NetType, Remote};
use crate::transport::nic_progress::{PollDuty, ProgressMode, Server};
use crate::transport::ofi::{Nic, PROVIDER_ENV};

/// Writes up to this many bytes are posted with a copy of their data and complete at the
/// next completion point (the call returns at once); longer ones are posted from the
/// caller's buffer and the call returns once the provider is done with it
/// ([`Nic::write_sent`]): a copy cost as much as the transfer (a stream of 1 MiB puts
/// copied in 256 KiB pieces ran at 0.34–0.42× the raw bandwidth).
pub(crate) use crate::transport::network::COPY_MAX;

/// Bytes the endpoint may hold in operations not yet seen complete ([`Nic::held_bytes`]).
pub(crate) use crate::transport::network::HELD_MAX;

/// The endpoint, its server and what the provider offers.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) nic: Arc<Nic>,
    pub(crate) table: AtomicTable,
    /// Peers' addresses in the address vector, by their endpoint names.
    peers: Mutex<HashMap<Vec<u8>, u64>>,
    /// How the progress thread serves it, and the address it is bound to.
    mode: ProgressMode,
    addr: String,
    _polled_while_waiting: crate::attention::WaitHook,
    /// None in the mode `none`.
    _server: Option<Server>,
}

static ENDPOINT: OnceLock<Endpoint> = OnceLock::new();
/// Serializes the first opening (OnceLock cannot fail its initializer).
static OPENING: Mutex<()> = Mutex::new(());

/// Whether the endpoint was opened (it stays open for the life of the process).
#[inline]
pub(crate) fn is_open() -> bool {
    ENDPOINT.get().is_some()
}

/// The endpoint, opened now if it is not yet.
pub(crate) fn endpoint() -> Result<&'static Endpoint> {
    if let Some(e) = ENDPOINT.get() {
        return Ok(e);
    }
    let _opening = OPENING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(e) = ENDPOINT.get() {
        return Ok(e);
    }
    let mode = ProgressMode::from_env()?;
    let addr = crate::transport::address::endpoint_address()?;
    let requested = std::env::var(PROVIDER_ENV).ok();
    let nic = Arc::new(Nic::open_chosen_with(
        requested.as_deref(),
        &addr,
        mode.needs_waitable(),
    )?);
    let table = nic.atomic_table();
    let duty = Arc::new(PollDuty::default());
    let server = match mode {
        ProgressMode::None => {
            crate::attention::set_unserved();
            None
        }
        _ => Some(Server::start(Arc::clone(&nic), mode, Arc::clone(&duty))?),
    };
    // Every wait inside the library drives the endpoint's progress while it polls: the
    // provider answers peers' operations inside `fi_cq_read`, so a process that waits (in
    // a barrier, a fence, a flush) answers without the progress thread's wake-up, as an
    // MPI library's progress loop does — and the progress thread stands aside meanwhile
    // (`PollDuty`). What it reads is recorded in the operations' contexts and counters,
    // whoever reads it.
    let polled = Arc::clone(&nic);
    let polled_while_waiting = crate::attention::add_wait_hook(Arc::new(move || {
        duty.app_polled(&polled);
        let _ = polled.progress();
    }));
    // A wait that backs off sleeps on the endpoint (a `block` one's descriptor): the answer
    // it waits for ends the sleep, where a plain sleep (up to 500 µs) would outlast it.
    if nic.waits_on_fd() {
        let woken = Arc::clone(&nic);
        crate::attention::set_sleeper(Arc::new(move |nap| {
            if woken.wait_activity(nap).is_err() {
                // The endpoint failed: every operation that needs it reports it.
                std::thread::sleep(nap);
            }
        }));
    }
    let endpoint = Endpoint {
        nic,
        table,
        peers: Mutex::default(),
        mode,
        addr,
        _polled_while_waiting: polled_while_waiting,
        _server: server,
    };
    ENDPOINT
        .set(endpoint)
        .map_err(|_| Error::Bootstrap("the network endpoint was opened twice".into()))?;
    Ok(ENDPOINT.get().expect("just set"))
}

impl Endpoint {
    /// The address of the peer endpoint `name` (inserted at its first use).
    pub(crate) fn peer(&self, name: &[u8]) -> Result<u64> {
        let mut peers = self
            .peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&a) = peers.get(name) {
            return Ok(a);
        }
        let a = self.nic.insert(name)?;
        peers.insert(name.to_vec(), a);
        Ok(a)
    }
}

/// Writes `pieces` — (offset in `src`, offset from `to`, length) — of `src` to `to`,
/// issued: complete at the target at the caller's next completion point (a flush of the
/// endpoint), `src` free at once. Short writes go out with a copy; long ones from `src`,
/// the call returning once the provider is done with it.
pub(crate) fn post_write(src: &[u8], pieces: &[(usize, usize, usize)], to: Remote) -> Result<()> {
    let nic = &endpoint()?.nic;
    let total: usize = pieces.iter().map(|p| p.2).sum();
    if total > COPY_MAX {
        for &(o, t, len) in pieces {
            let here = Remote {
                addr: to.addr + t as u64,
                ..to
            };
            nic.write_sent(&src[o..o + len], here)?;
        }
        return Ok(());
    }
    if nic.held_bytes() + total > HELD_MAX {
        nic.flush(|| Ok(()))?;
    }
    nic.write_copied_pieces(src, pieces, to)
}

/// The element type and count per atomic that carry a put of `len` bytes to `to` as
/// atomic writes ([`post_write_atomic`]): 8-byte words where the put is whole words at a
/// word address, else bytes. `None` where the provider has no such atomic, does not keep
/// one endpoint's atomics in order, or the put is longer than a copied one.
fn atomic_put_type(len: usize, to: Remote) -> Result<Option<(NetType, usize)>> {
    let ep = endpoint()?;
    if len == 0 || len > COPY_MAX || !ep.nic.orders_atomics() {
        return Ok(None);
    }
    let ty = match crate::transport::wire::whole_words(to.addr, len) {
        true => NetType::U64,
        false => NetType::U8,
    };
    // The wire carries a copied put in one message; the provider's table bounds only its
    // own atomics (2036 words on tcp;ofi_rxm: a 16 KiB put cut in two took 26–27 µs +
    // flush here, in one message 17–18).
    if ep.nic.wire_reaches(to.peer) {
        return Ok(Some((ty, COPY_MAX / ty.size())));
    }
    Ok(ep
        .table
        .count(AtomicKind::Write, NetOp::Write, ty)
        .map(|max| (ty, max)))
}

/// True when a put of `len` bytes to `to` can go as atomic writes ([`post_write_atomic`]).
pub(crate) fn atomic_put_fits(len: usize, to: Remote) -> Result<bool> {
    Ok(atomic_put_type(len, to)?.is_some())
}

/// The longest put to another node that goes as atomic writes over the wire even without
/// `mpi_win_order`, where the wire reaches the target: up to here its round trip is the
/// wire's, shorter than an RMA write's with delivery completion (8 B to 4 KiB + flush:
/// 13.6–14.1 µs against 15.5–16.1 in one run here). Whole words at an aligned address go
/// further ([`WIRE_PUT_MAX_WORDS`]); bytes are applied one at a time at the target.
pub(crate) const WIRE_PUT_MAX: usize = 4 << 10;

/// The longest put of whole, aligned words that goes over the wire: since a link reads
/// straight into its buffer, 8–32 KiB + flush took 16.5–17.0, 18.8–19.4 and 23.1–23.6 µs
/// over the wire against 20.8–21.6, 22.2–23.9 and 24.1–25.3 as RMA writes (three
/// alternating runs, 2 ranks over 2 nodes); at 64 KiB the RMA write is faster (34–35
/// against 38–39 µs).
pub(crate) const WIRE_PUT_MAX_WORDS: usize = 32 << 10;

/// True when a put of `len` bytes to `to` goes over the wire ([`WIRE_PUT_MAX`],
/// [`WIRE_PUT_MAX_WORDS`]). Such a put and an RMA write to the same peer land in either
/// order (MPI orders puts only with `mpi_win_order`, which sends them as atomics all the
/// same); a window whose puts must keep the provider's RMA-write order says so
/// (`Flags::keeps_rma_order`).
pub(crate) fn put_over_wire(len: usize, to: Remote) -> Result<bool> {
    let max = if crate::transport::wire::whole_words(to.addr, len) {
        WIRE_PUT_MAX_WORDS
    } else {
        WIRE_PUT_MAX
    };
    Ok(len <= max && endpoint()?.nic.wire_reaches(to.peer))
}

/// Writes `src` to `to` as the provider's atomic writes (`FI_ATOMIC_WRITE`, each element
/// replaced), issued with a copy as a non-fetching accumulate is: the provider keeps them
/// in order with the endpoint's other atomics to the same peer, which RMA writes are not
/// (`tcp;ofi_rxm`), so a put of a window with `mpi_win_order` and the flag accumulate
/// after it can both be in flight. Only where [`atomic_put_fits`].
pub(crate) fn post_write_atomic(src: &[u8], to: Remote) -> Result<()> {
    let Some((ty, max)) = atomic_put_type(src.len(), to)? else {
        return Err(Error::Unsupported(
            "puts as atomic writes on this provider".into(),
        ));
    };
    let nic = &endpoint()?.nic;
    if nic.held_bytes() + src.len() > HELD_MAX {
        nic.flush(|| Ok(()))?;
    }
    let chunk = max * ty.size();
    for (i, run) in src.chunks(chunk).enumerate() {
        let here = Remote {
            addr: to.addr + (i * chunk) as u64,
            ..to
        };
        nic.atomic_copied(NetOp::Write, ty, run, here)?;
    }
    Ok(())
}

/// Writes `src` to `to` from where it is: complete at the caller's next completion point
/// (as `end` says), `owner` (which owns `src` and keeps it unchanged) held until then.
///
/// # Safety
/// As [`Nic::write_shared`].
pub(crate) unsafe fn post_write_shared(
    src: &[u8],
    to: Remote,
    owner: std::sync::Arc<dyn Send + Sync>,
    end: crate::transport::write_end::WriteEnd,
) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe { endpoint()?.nic.write_shared(src, to, owner, end) }
}

/// Sends `block` to `to` and then `words` to `flag` in one message that nobody answers,
/// with its second place `gate` if any, where the wire reaches the peer
/// ([`Nic::deliver`]): false, with nothing sent, elsewhere.
///
/// [`Nic::deliver`]: crate::transport::ofi::Nic::deliver
pub(crate) fn deliver(
    block: &[u8],
    to: Remote,
    words: &[u64],
    flag: Remote,
    gate: Option<crate::transport::network::DeliverGate<'_>>,
) -> Result<bool> {
    endpoint()?.nic.deliver(block, to, words, flag, gate)
}

/// Lets go of what completed operations posted under
/// [`ofi::track_own`](crate::transport::network::track_own) hold ([`Nic::reap_own`]).
pub(crate) fn reap_own() -> Result<()> {
    endpoint()?.nic.reap_own()
}

/// Completes the network operations the calling thread posted under
/// [`ofi::track_own`](crate::transport::network::track_own) (a flush of thread scope).
pub(crate) fn complete_own() -> Result<()> {
    endpoint()?.nic.flush_own()
}

/// True when the endpoint's provider delivers operations to a peer in issue order where
/// a write or a read follows a write ([`Nic::orders_after_writes`]).
pub(crate) fn ordered() -> Result<bool> {
    Ok(endpoint()?.nic.orders_after_writes())
}

/// True when the endpoint's provider delivers atomics to a peer in issue order
/// ([`Nic::orders_atomics`]).
pub(crate) fn orders_atomics() -> Result<bool> {
    Ok(endpoint()?.nic.orders_atomics())
}

/// True when the endpoint's provider places RMA writes to a peer in issue order
/// ([`Nic::orders_rma_writes`]).
pub(crate) fn orders_rma_writes() -> Result<bool> {
    Ok(endpoint()?.nic.orders_rma_writes())
}

/// Operations posted on the endpoint not yet seen complete (0 when none is open).
pub(crate) fn in_flight() -> u64 {
    ENDPOINT.get().map_or(0, |e| e.nic.in_flight())
}

/// What [`crate::network`] reports.
pub(crate) fn description() -> Option<crate::NetworkEndpoint> {
    ENDPOINT.get().map(|e| crate::NetworkEndpoint {
        provider: e.nic.described().provider.clone(),
        progress: e.mode.name(),
        address: e.addr.clone(),
    })
}
