//! # onesided — MPI-4.1 one-sided communication (RMA) in Rust
//!
//! Windows of the four MPI flavors, `put`/`get`, and every synchronization mode of the
//! MPI-4.1 RMA chapter — fence, post/start/complete/wait, lock/lock_all, flush — for ranks
//! on one node. Peers' window memory is reached with plain loads and stores on shared memory
//! (and CPU atomics for synchronization), or with cross-memory attach for user memory that
//! is not in shared memory. Ranks are started by the `osrun` launcher:
//!
//! ```text
//! osrun -n 4 target/release/examples/ring
//! ```
//!
//! ```
//! # onesided::testing::run(2, |_| {
//! use onesided::{Assert, LockType, Window};
//!
//! let universe = onesided::init()?;
//! let world = universe.world();
//! let (me, n) = (world.rank(), world.size());
//!
//! // Every rank exposes 8 u64; rank r writes its rank into slot r of rank 0.
//! let win = Window::<u64>::allocate(world, 8)?;
//! win.lock(LockType::Shared, 0, Assert::NONE)?;
//! win.put(&[me as u64], 0, me)?;
//! win.unlock(0)?;
//! world.barrier()?;
//! if me == 0 {
//!     let mut seen = vec![0u64; n];
//!     win.local_read(0, &mut seen)?;
//!     assert_eq!(seen, (0..n as u64).collect::<Vec<_>>());
//! }
//! win.free()?;
//! # onesided::init()?.world().barrier()?;
//! # Ok(())
//! # });
//! ```
//!
//! Layers (`docs/architecture.md` describes each room and protocol, and the README's
//! "References" section the papers cited by key in these docs): [`bootstrap`] (who is who, out-of-band collectives) →
//! transports (shared memory, cross-memory attach) → windows ([`Window`]), communication
//! (`put`/`get`) and synchronization, every synchronization a request state machine driven
//! by one progress engine.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod attention;
mod backoff;
pub mod bootstrap;
mod coll;
mod diag;
pub mod elements;
mod error;
mod group;
pub mod launch;
mod layout;
mod memory;
mod net;
mod ops;
mod pending;
mod plain_acc;
mod plane;
mod progress;
mod request;
mod rma;
mod shm;
mod spin;
mod sync;
pub mod testing;
mod transport;
mod typed;
mod universe;
mod win;

pub use attention::{add_wait_hook, WaitHook};
pub use bootstrap::{Bootstrap, Call, CallTag, Comm, ReduceOp, Reducible, ThreadLevel};

/// This process's network endpoint (feature `net`), as [`network`] reports it.
#[cfg(feature = "net")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkEndpoint {
    /// The libfabric provider (`tcp;ofi_rxm`, …): `ONESIDED_PROVIDER`, else the best one
    /// this machine offers; `socket` for the socket network (`ONESIDED_NETWORK=socket`).
    pub provider: String,
    /// How the progress thread serves it (`ONESIDED_PROGRESS`: `spin`, `yield`, `block`).
    pub progress: &'static str,
    /// The address it is bound to: `ONESIDED_NET_ADDR`, else the address of the interface
    /// `ONESIDED_IFACE` names, else that of the first interface that is up and not the
    /// loopback (virtual nodes of `osrun --nodes` without node agents: the loopback).
    pub address: String,
}

/// The network endpoint windows across nodes use in this process (feature `net`); `None`
/// until the first such window opened it.
///
/// ```
/// # onesided::testing::run(2, |_| {
/// # let world = onesided::init()?.world().clone();
/// let win = onesided::Window::<u64>::allocate(&world, 8)?;
/// if let Some(net) = onesided::network() {
///     println!("{} ({} progress) at {}", net.provider, net.progress, net.address);
/// }
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
#[cfg(feature = "net")]
pub fn network() -> Option<NetworkEndpoint> {
    transport::network::description()
}
pub use bytemuck::{Pod, Zeroable};
pub use coll::alltoallv::{
    alltoallv_rma_oneshot, alltoallv_two_sided, Alltoallv, AlltoallvVariant, AutoChoice, BreakEven,
    NodeSplit, AUTO_PROBES,
};
pub use elements::{
    Complex32, Complex64, DoubleInt, FloatInt, LongDouble, LongDoubleComplex, LongDoubleInt,
    LongInt, ShortInt, TwoDouble, TwoFloat, TwoInt, ValueIndex,
};
pub use error::{Error, ErrorClass, Result};
pub use group::Group;
pub use layout::Layout;
pub use memory::{alloc_mem, AllocMem};
/// The host-MPI crate this build binds to (feature `mpi`), re-exported so that applications
/// use the same version.
#[cfg(feature = "mpi")]
pub use mpi;
pub use ops::{AccElement, ElemType, Op};
pub use progress::foreign::{network_open, progress_once, ForeignWait};
pub use progress::thread::{
    running as progress_thread_running, start as start_progress_thread,
    stop as stop_progress_thread,
};
pub use progress::Reorder;
pub use request::{test_all, test_any, wait_all, wait_any, Request};
pub use rma::memhandle::{MemHandle, RawMemWindow, MAX_MEMORY_HANDLE_SIZE};
pub use rma::notify::MAX_NOTIFY;
pub use shm::liveness::sweep_dead_jobs;
pub use shm::segment::{job_segments, sweep_job};
pub use sync::{Assert, LockType};
pub use typed::{MemWindow, Window, WindowBuilder, WindowDup};
#[cfg(feature = "mpi")]
pub use universe::init_mpi;
pub use universe::{init, init_thread, init_with, Universe, ENV_BOOTSTRAP, ENV_CORES};
pub use win::dynamic::AttachedRegion;
pub use win::info::{
    keys as info_keys, AccumulateOps, AccumulateOrdering, MemoryAllocKind, ShareInPlace, WinHints,
    WinInfo, WinScope,
};
pub use win::{Flavor, MemoryModel, RawWindow, SharedRegion, WinBuffer, WindowLayout};
