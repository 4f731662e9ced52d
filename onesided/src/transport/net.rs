//! This process's network endpoint (feature `ofi`): opened at the first window that spans
//! nodes, on the provider `ONESIDED_PROVIDER` names (else the best one offered), served by
//! its progress thread in the mode `ONESIDED_PROGRESS` names, and kept for the life of the
//! process — every window across nodes shares it, with one address-vector entry per peer.
//!
//! The endpoint binds to `ONESIDED_NET_ADDR` (an address of this host), else to the
//! loopback: virtual nodes of one machine (`osrun --nodes`) reach each other there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::transport::nic_progress::{ProgressMode, Server};
use crate::transport::ofi::{AtomicTable, Nic, PROVIDER_ENV};

/// The environment variable naming the address the endpoint binds to.
pub(crate) const ADDR_ENV: &str = "ONESIDED_NET_ADDR";

/// The endpoint, its server and what the provider offers.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) nic: Arc<Nic>,
    pub(crate) table: AtomicTable,
    /// Peers' addresses in the address vector, by their endpoint names.
    peers: Mutex<HashMap<Vec<u8>, u64>>,
    _server: Server,
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
    let addr = std::env::var(ADDR_ENV).unwrap_or_else(|_| "127.0.0.1".into());
    let requested = std::env::var(PROVIDER_ENV).ok();
    let nic = Arc::new(Nic::open_chosen_with(
        requested.as_deref(),
        &addr,
        mode.needs_waitable(),
    )?);
    let table = nic.atomic_table();
    let server = Server::start(Arc::clone(&nic), mode)?;
    let endpoint = Endpoint {
        nic,
        table,
        peers: Mutex::default(),
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
