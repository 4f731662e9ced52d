//! # onesided-mpi — the MPI C ABI of onesided
//!
//! A shared library (`target/release/libonesided_mpi.so`, feature `mpich`) that takes over
//! the RMA chapter of an unchanged MPI program when preloaded:
//!
//! ```text
//! LD_PRELOAD=target/release/libonesided_mpi.so mpiexec.mpich -n 2 ./osu_put_latency
//! ```
//!
//! It exports the chapter's `MPI_*` functions and their `PMPI_*` twins, and runs them on
//! onesided's untyped windows ([`onesided::RawWindow`]); communicators, groups, datatypes,
//! two-sided communication and collectives stay the host MPI's. `MPI_Init` and
//! `MPI_Finalize` are intercepted: onesided joins the job in `MPI_Init`, and `MPI_Finalize`
//! frees what the program left before the host finalizes. The library links no MPI (and no
//! libfabric): `host` finds the program's MPI library in the process and looks up every
//! function it calls there, so one build serves every MPICH-ABI MPI.
//!
//! A window whose communicator spans several nodes stays the host MPI's, and every call on
//! it goes to the host's function (`forward`): the program never gets an error the native
//! MPI would not give it.
//!
//! Rooms: [`abi`] (the MPICH ABI: handles, constants, error codes), `host` (the host MPI
//! library and its functions), `job` (onesided's bootstrap over them), `forward` (windows
//! left to the host), `state` (the window table and the universe), `exports` (the one table
//! of exported functions) and `calls` (what each call does).
//!
//! Without the feature `mpich` (a default) the library exports nothing.

#![cfg_attr(not(feature = "mpich"), allow(dead_code))]

pub mod abi;
#[cfg(feature = "mpich")]
mod calls;
#[cfg(feature = "mpich")]
mod datatypes;
#[cfg(feature = "mpich")]
mod exports;
#[cfg(feature = "mpich")]
mod extensions;
#[cfg(feature = "mpich")]
mod fast;
#[cfg(feature = "mpich")]
mod forward;
#[cfg(feature = "mpich")]
mod host;
#[cfg(feature = "mpich")]
mod interpose;
#[cfg(feature = "mpich")]
mod job;
#[cfg(feature = "mpich")]
mod plans;
#[cfg(feature = "mpich")]
mod requests;
#[cfg(feature = "mpich")]
mod state;
