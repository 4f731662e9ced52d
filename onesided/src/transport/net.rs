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
use crate::transport::network::{
    AtomicKind, AtomicTable, DeliverGate, Fabric, NetOp, NetType, Network, Remote, LONG_PUT_MIN,
};
use crate::transport::nic_progress::{PollDuty, ProgressMode, Server};
use crate::transport::ofi::{Nic, PROVIDER_ENV};
use crate::transport::write_end::WriteEnd;

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
    /// `nic` as the network protocols hold it.
    fabric: Arc<dyn Fabric>,
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
        fabric: Arc::clone(&nic) as Arc<dyn Fabric>,
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

/// The element type and count per atomic that carry a put of `len` bytes to `to` as
/// atomic writes ([`Network::post_write_atomic`]): 8-byte words where the put is whole
/// words at a word address, else bytes. `None` where the provider has no such atomic, does
/// not keep one endpoint's atomics in order, or the put is longer than a copied one.
fn atomic_put_type(ep: &Endpoint, len: usize, to: Remote) -> Option<(NetType, usize)> {
    if len == 0 || len > COPY_MAX || !ep.nic.orders_atomics() {
        return None;
    }
    let ty = match crate::transport::wire::whole_words(to.addr, len) {
        true => NetType::U64,
        false => NetType::U8,
    };
    // The wire carries a copied put in one message; the provider's table bounds only its
    // own atomics (2036 words on tcp;ofi_rxm: a 16 KiB put cut in two took 26–27 µs +
    // flush here, in one message 17–18).
    if ep.nic.wire_reaches(to.peer) {
        return Some((ty, COPY_MAX / ty.size()));
    }
    ep.table
        .count(AtomicKind::Write, NetOp::Write, ty)
        .map(|max| (ty, max))
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

impl Network for Endpoint {
    fn fabric(&self) -> &Arc<dyn Fabric> {
        &self.fabric
    }

    fn peer(&self, name: &[u8]) -> Result<u64> {
        Endpoint::peer(self, name)
    }

    fn atomic_table(&self) -> &AtomicTable {
        &self.table
    }

    fn in_flight(&self) -> u64 {
        self.nic.in_flight()
    }

    fn description(&self) -> crate::NetworkEndpoint {
        crate::NetworkEndpoint {
            provider: self.nic.described().provider.clone(),
            progress: self.mode.name(),
            address: self.addr.clone(),
        }
    }

    /// [`Nic::orders_after_writes`].
    fn orders_after_writes(&self) -> bool {
        self.nic.orders_after_writes()
    }

    /// [`Nic::orders_rma_writes`].
    fn orders_rma_writes(&self) -> bool {
        self.nic.orders_rma_writes()
    }

    fn write_waited(&self, src: &[u8], to: Remote) -> Result<()> {
        self.nic.write_waited(src, to)
    }

    /// Short writes go out with a copy; long ones from `src`, the call returning once the
    /// provider is done with it.
    fn post_write(&self, src: &[u8], pieces: &[(usize, usize, usize)], to: Remote) -> Result<()> {
        let nic = &self.nic;
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

    /// Every piece posted, then one flush: complete at the target (delivery complete)
    /// when it returns.
    fn write_pieces_waited(
        &self,
        src: &[u8],
        pieces: &[(usize, usize, usize)],
        to: Remote,
    ) -> Result<()> {
        for &(o, t, len) in pieces {
            // SAFETY: `src` is borrowed until the flush below returns.
            unsafe {
                self.nic.write(
                    &src[o..o + len],
                    None,
                    Remote {
                        addr: to.addr + t as u64,
                        ..to
                    },
                )?
            };
        }
        self.nic.flush(|| Ok(()))
    }

    fn read_pieces_waited(
        &self,
        dst: &mut [u8],
        pieces: &[(usize, usize, usize)],
        from: Remote,
    ) -> Result<()> {
        if let [(0, 0, len)] = pieces {
            if *len == dst.len() {
                // Waited for on its own: a get does not wait for the writes in flight.
                return self.nic.read_waited(dst, from);
            }
        }
        for &(o, t, len) in pieces {
            // SAFETY: `dst` is borrowed, and not read, until the flush below.
            unsafe {
                self.nic.read(
                    &mut dst[o..o + len],
                    None,
                    Remote {
                        addr: from.addr + t as u64,
                        ..from
                    },
                )?
            };
        }
        self.nic.flush(|| Ok(()))
    }

    /// [`WIRE_PUT_MAX`], [`WIRE_PUT_MAX_WORDS`]. Such a put and an RMA write to the same
    /// peer land in either order (MPI orders puts only with `mpi_win_order`, which sends
    /// them as atomics all the same); a window whose puts must keep the provider's
    /// RMA-write order says so (`Flags::keeps_rma_order`).
    fn put_over_wire(&self, len: usize, to: Remote) -> Result<bool> {
        let max = if crate::transport::wire::whole_words(to.addr, len) {
            WIRE_PUT_MAX_WORDS
        } else {
            WIRE_PUT_MAX
        };
        Ok(len <= max && self.nic.wire_reaches(to.peer))
    }

    fn atomic_put_fits(&self, len: usize, to: Remote) -> Result<bool> {
        Ok(atomic_put_type(self, len, to).is_some())
    }

    /// As the provider's atomic writes (`FI_ATOMIC_WRITE`, each element replaced): the
    /// provider keeps them in order with the endpoint's other atomics to the same peer,
    /// which RMA writes are not (`tcp;ofi_rxm`), so a put of a window with
    /// `mpi_win_order` and the flag accumulate after it can both be in flight.
    fn post_write_atomic(&self, src: &[u8], to: Remote) -> Result<()> {
        let Some((ty, max)) = atomic_put_type(self, src.len(), to) else {
            return Err(Error::Unsupported(
                "puts as atomic writes on this provider".into(),
            ));
        };
        let nic = &self.nic;
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

    /// Over the wire where it reaches the target and outruns the provider's RMA
    /// ([`Nic::long_puts_reach`], [`Nic::put_on_wire`]): `osbench put-bw`
    /// across two virtual nodes here, three alternating pairs against `tcp;ofi_rxm`'s RMA
    /// writes — 64 KiB 4758–5841 against 2300–2975 MB/s, 1 MiB 6273–6676 against
    /// 4279–5610.
    fn post_long_put(&self, src: &[u8], to: Remote) -> Result<bool> {
        if src.len() < LONG_PUT_MIN || !self.nic.long_puts_reach(to.peer) {
            return Ok(false);
        }
        self.nic.put_on_wire(src, to)?;
        Ok(true)
    }

    /// [`Nic::write_shared`].
    unsafe fn post_write_shared(
        &self,
        src: &[u8],
        to: Remote,
        owner: Arc<dyn Send + Sync>,
        end: WriteEnd,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.nic.write_shared(src, to, owner, end) }
    }

    /// [`Nic::deliver`].
    ///
    /// [`Nic::deliver`]: crate::transport::ofi::Nic::deliver
    fn deliver(
        &self,
        block: &[u8],
        to: Remote,
        words: &[u64],
        flag: Remote,
        gate: Option<DeliverGate<'_>>,
    ) -> Result<bool> {
        self.nic.deliver(block, to, words, flag, gate)
    }

    /// [`Nic::flush_own`].
    fn flush_own(&self) -> Result<()> {
        self.nic.flush_own()
    }

    /// [`Nic::reap_own`].
    fn reap_own(&self) -> Result<()> {
        self.nic.reap_own()
    }
}
