//! Moving bytes to and from target memory.
//!
//! A [`Route`] says how to reach one target address: directly (the memory is mapped in this
//! process: shared-memory segments, or this process's own memory) or by cross-memory attach
//! (`process_vm_readv/writev` into another process). The window layer resolves a
//! (target, displacement) pair to a route and never cares which transport moves the bytes.
//!
//! Routes are an enum rather than a trait object on purpose: the put/get fast path then
//! compiles to a compare and a copy, with no indirect call. The network is one more
//! variant, whose operations go to the process's network ([`network::network`]) through
//! a trait object: microseconds each, where the indirect call costs nothing.

pub(crate) mod address;
pub(crate) mod cma;
pub(crate) mod combine;
#[cfg(feature = "ofi")]
pub(crate) mod net;
pub(crate) mod network;
#[cfg(feature = "ofi")]
pub(crate) mod nic_progress;
#[cfg(feature = "ofi")]
pub(crate) mod ofi;
pub(crate) mod ring;
pub(crate) mod shm;
#[cfg(feature = "net")]
pub(crate) mod socket;
#[cfg(feature = "net")]
pub(crate) mod wire;
pub(crate) mod write_end;

use crate::error::Result;

/// How to reach a byte address at a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Mapped in this process (shared memory, or our own memory).
    Direct(*mut u8),
    /// In another process, reached with cross-memory attach.
    Cma {
        /// Process id of the target.
        pid: i32,
        /// Address in the target's address space.
        addr: usize,
    },
    /// On another node, reached through this process's network endpoint ([`network`]):
    /// the target's endpoint, the remote address of the byte and the registration key.
    /// Absent from a build without a network ([`network::Only`]).
    Net(network::Only<network::Remote>),
}

// SAFETY: a Route is an address (in this process, or in the target process for cross-memory
// attach); it is dereferenced only by the transport's copy routines, whose callers hold the
// window (and so the mapping) alive. Nothing about it is tied to a thread.
unsafe impl Send for Route {}
// SAFETY: as for Send.
unsafe impl Sync for Route {}

impl Route {
    /// The route to `offset` bytes further.
    #[inline]
    pub(crate) fn offset(self, offset: usize) -> Route {
        match self {
            // wrapping_add: the caller has bounds-checked offset against the region.
            Route::Direct(p) => Route::Direct(p.wrapping_add(offset)),
            Route::Cma { pid, addr } => Route::Cma {
                pid,
                addr: addr + offset,
            },
            // Without a network this arm cannot be reached (no `Only` exists).
            #[cfg_attr(not(feature = "net"), allow(unreachable_code))]
            Route::Net(ref to) => Route::Net(to.map(|to| network::Remote {
                addr: to.addr + offset as u64,
                ..*to
            })),
        }
    }

    /// The route to `to` on another node; `None` in a build without a network.
    #[inline]
    pub(crate) fn network(to: network::Remote) -> Option<Route> {
        network::Only::new(to).map(Route::Net)
    }

    /// Writes `src` at the route's address. Complete (remotely visible after a memory
    /// fence) when it returns.
    #[inline]
    pub(crate) fn write(self, src: &[u8]) -> Result<()> {
        match self {
            // SAFETY: routes are only built for bounds-checked ranges of live mappings
            // (window segments or attached memory kept alive by the window).
            Route::Direct(dst) => unsafe {
                shm::copy_bytes(src.as_ptr(), dst, src.len());
                Ok(())
            },
            Route::Cma { pid, addr } => cma::write(pid, addr, src),
            Route::Net(to) => network::network()?.write_waited(src, *to),
        }
    }

    /// Reads into `dst` from the route's address. Complete when it returns.
    #[inline]
    pub(crate) fn read(self, dst: &mut [u8]) -> Result<()> {
        match self {
            // SAFETY: as in `write`.
            Route::Direct(src) => unsafe {
                shm::copy_bytes(src, dst.as_mut_ptr(), dst.len());
                Ok(())
            },
            Route::Cma { pid, addr } => cma::read(pid, addr, dst),
            Route::Net(to) => {
                let whole = [(0, 0, dst.len())];
                network::network()?.read_pieces_waited(dst, &whole, *to)
            }
        }
    }

    /// Writes `src` at the route's address, *issued*: `src` is free when this returns, and
    /// the write is complete at the target by the window's next completion point (flush,
    /// unlock, complete, fence: the outbox, `rma::outbox`). Mapped memory and cross-memory
    /// attach complete it at once; the network completes it there.
    #[inline]
    pub(crate) fn post_write(self, src: &[u8]) -> Result<()> {
        match self {
            Route::Net(_) => self.post_write_pieces(src, &[(0, 0, src.len())]),
            _ => self.write(src),
        }
    }

    /// [`Route::write_pieces`], issued like [`Route::post_write`].
    pub(crate) fn post_write_pieces(
        self,
        src: &[u8],
        pieces: &[(usize, usize, usize)],
    ) -> Result<()> {
        match self {
            Route::Net(to) => network::network()?.post_write(src, pieces, *to),
            _ => self.write_pieces(src, pieces),
        }
    }

    /// Writes `pieces` — (offset in `src`, offset from the route, length) — in one go
    /// (one vectored system call per 1024 pieces for cross-memory attach).
    pub(crate) fn write_pieces(self, src: &[u8], pieces: &[(usize, usize, usize)]) -> Result<()> {
        match self {
            Route::Direct(_) => {
                for &(o, t, len) in pieces {
                    self.offset(t).write(&src[o..o + len])?;
                }
                Ok(())
            }
            Route::Cma { pid, addr } => cma::write_pieces(pid, addr, src, pieces),
            // Complete at the target when it returns, like every route's write.
            Route::Net(to) => network::network()?.write_pieces_waited(src, pieces, *to),
        }
    }

    /// Reads `pieces` — (offset in `dst`, offset from the route, length) — in one go.
    pub(crate) fn read_pieces(
        self,
        dst: &mut [u8],
        pieces: &[(usize, usize, usize)],
    ) -> Result<()> {
        match self {
            Route::Direct(_) => {
                for &(o, t, len) in pieces {
                    self.offset(t).read(&mut dst[o..o + len])?;
                }
                Ok(())
            }
            Route::Cma { pid, addr } => cma::read_pieces(pid, addr, dst, pieces),
            Route::Net(to) => network::network()?.read_pieces_waited(dst, pieces, *to),
        }
    }
}

/// Where an access lands: how to reach it, whether every process maps that memory, and a
/// key naming the location (byte offset in the target's window, or the address in a
/// dynamic window) for accumulate lock stripes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Located {
    pub route: Route,
    pub shared: bool,
    pub key: usize,
}

impl Located {
    /// Where a zero-count access lands: nowhere. MPI makes an operation that moves no data
    /// a no-op whatever its displacement, for every window flavor (a dynamic window with
    /// nothing attached included); a zero-length copy through a dangling pointer touches no
    /// memory.
    pub(crate) fn nowhere() -> Located {
        Located {
            route: Route::Direct(std::ptr::NonNull::dangling().as_ptr()),
            shared: true,
            key: 0,
        }
    }

    /// The location `offset` bytes further.
    #[inline]
    pub(crate) fn offset(self, offset: usize) -> Located {
        Located {
            route: self.route.offset(offset),
            shared: self.shared,
            key: self.key + offset,
        }
    }
}
