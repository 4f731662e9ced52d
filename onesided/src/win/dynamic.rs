//! Dynamic windows: attach/detach and the one-sided region-descriptor cache
//! ([Gerstenberger13] §2.2).
//!
//! Each process publishes its attached regions in a table in its control block, guarded by
//! a sequence number (a seqlock: odd while the owner rewrites the table, bumped by two per
//! attach/detach — foMPI's [Gerstenberger13] "id counter"). An origin keeps a cache of every target's table
//! it has used; before each access it reads the target's sequence number (one load) and only
//! re-reads the table when the number changed. Regions from `alloc_mem` are mapped by the
//! origin and reached with load/store; other regions with cross-memory attach.
//!
//! Accessing a region concurrently with its detach is erroneous in MPI (the program must
//! synchronise); onesided then either completes the access or reports
//! [`Error::NotAttached`], and a mapped shared-heap region stays valid memory either way.

use std::sync::atomic::{fence, Ordering};

use crate::error::{Error, Result};
use crate::memory;
use crate::win::core::WinCore;
use crate::win::raw::Kept;
use crate::win::regions::OwnedRegion;
use crate::win::RawWindow;

/// A region attached with [`Window::attach`](crate::Window::attach): its address is the displacement peers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttachedRegion {
    /// Address of the first element in the attaching process (MPI_Get_address).
    pub addr: usize,
    /// Number of elements.
    pub len: usize,
}

impl WinCore {
    /// Attaches `len` bytes at `base`; returns the attach's registration number.
    pub(crate) fn dynamic_attach(&self, base: usize, len: usize) -> Result<u64> {
        let registration;
        if len == 0 {
            return Err(Error::InvalidArgument("attach of zero bytes".into()));
        }
        let cap = self.ctrl.layout().region_cap;
        {
            let mut owned = self
                .dynamic
                .owned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if owned
                .iter()
                .any(|r| base < r.base + r.len && r.base < base + len)
            {
                return Err(Error::AttachOverlap { addr: base, len });
            }
            if owned.len() >= cap {
                return Err(Error::TooManyRegions { capacity: cap });
            }
            let (seg_tag, seg_offset) =
                memory::lookup(base, len).map_or((0, 0), |l| (l.tag, l.offset));
            let (net_key, net_base) = self.register_region(base, len)?;
            let at = owned.partition_point(|r| r.base < base);
            // Relaxed: only uniqueness matters (the table's seqlock publishes it).
            registration = self.dynamic.registrations.fetch_add(1, Ordering::Relaxed) + 1;
            owned.insert(
                at,
                OwnedRegion {
                    base,
                    len,
                    seg_tag,
                    seg_offset,
                    registration,
                    net_key,
                    net_base,
                },
            );
        }
        self.publish_regions();
        Ok(registration)
    }

    /// Registers an attached region with the network endpoint when the window spans
    /// nodes (peers on other nodes reach it there): its key and remote base, else (0, 0).
    fn register_region(&self, base: usize, len: usize) -> Result<(u64, u64)> {
        if self.net.is_some() {
            let ep = crate::transport::network::endpoint()?;
            // SAFETY: the registration lives until the window's end (the core, which holds
            // it, drops before the window's buffers); a buffer detached before then may
            // still be written by an erroneous racing access, as on one node.
            let reg = unsafe { ep.register(base as *mut u8, len) }?;
            let out = (reg.key, reg.remote_base);
            self.dynamic
                .net_registrations
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((base, reg));
            return Ok(out);
        }
        Ok((0, 0))
    }

    pub(crate) fn dynamic_detach(&self, base: usize) -> Result<()> {
        {
            let mut owned = self
                .dynamic
                .owned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let pos = owned
                .iter()
                .position(|r| r.base == base)
                .ok_or(Error::DetachUnknown { addr: base })?;
            owned.remove(pos);
        }
        // Its network registration stays until the window ends: an origin on another node
        // that read the table before this detach may still access the region (erroneous
        // without synchronization, as on one node, where cross-memory attach reaches a
        // detached buffer too), and the tcp provider answers a key it does not know by
        // closing the connection to that origin — every later operation between the two
        // processes would fail.
        self.publish_regions();
        self.tell_handle_readers()?;
        Ok(())
    }

    /// Tells every process on another node that made a window from one of this process's
    /// memory handles, or read its region table through this dynamic window, that a region
    /// went (`rma::memhandle`, "After release"; `WinCore::resolve_dynamic_net`): each of
    /// them then checks its regions at its next operation instead of at every one.
    /// Returns once every notice is applied, so that an operation issued after anything
    /// that follows this detach sees it.
    fn tell_handle_readers(&self) -> Result<()> {
        use crate::plane::{Awaited, ControlPlane, CtrlWord};
        if self.net.is_none() {
            return Ok(());
        }
        let plane = self.plane();
        // SeqCst: the new table number (stored by publish_regions) is ordered before this
        // read of the readers' bits, as each reader's compare-and-swap of its bit completes
        // before it reads the table: of the two, one sees the other — a reader whose bit is
        // not seen here read the table after this detach.
        fence(Ordering::SeqCst);
        let readers =
            Awaited::from(plane.load(CtrlWord::HandleReaders { at: self.rank }, Ordering::Acquire))
                .wait(&plane)?;
        if readers == 0 {
            return Ok(());
        }
        let here = self.comm.node_of(self.rank)?;
        let mut told = Vec::new();
        for r in 0..self.size {
            if readers & (1 << (r % 64)) != 0 && self.comm.node_of(r)? != here {
                // Release: the detach's table happens-before the reader's check that sees
                // the notice.
                told.push(Awaited::from(plane.fetch_add(
                    CtrlWord::HandleReleases { at: r },
                    1,
                    Ordering::Release,
                )));
            }
        }
        for notice in told {
            notice.wait(&plane)?;
        }
        Ok(())
    }

    /// Rewrites this process's region table under the seqlock.
    fn publish_regions(&self) {
        let ctl = self.ctrl.rank(self.rank);
        let owned = self
            .dynamic
            .owned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Relaxed: only this process writes the sequence number.
        let seq = ctl.dyn_seq.load(Ordering::Relaxed);
        ctl.dyn_seq.store(seq + 1, Ordering::Relaxed);
        // Release fence: a reader that sees any entry written below also sees the odd
        // number when it re-reads the sequence after its Acquire fence, and retries.
        fence(Ordering::Release);
        for (i, r) in owned.iter().enumerate() {
            let slot = self.ctrl.region(self.rank, i);
            slot.base.store(r.base as u64, Ordering::Relaxed);
            slot.len.store(r.len as u64, Ordering::Relaxed);
            slot.seg_tag.store(r.seg_tag, Ordering::Relaxed);
            slot.seg_offset
                .store(r.seg_offset as u64, Ordering::Relaxed);
            slot.registration.store(r.registration, Ordering::Relaxed);
            slot.net_key.store(r.net_key, Ordering::Relaxed);
            slot.net_base.store(r.net_base, Ordering::Relaxed);
        }
        ctl.ident
            .region_count
            .store(owned.len() as u64, Ordering::Relaxed);
        // Release: the new table happens-before any reader that observes the even number.
        ctl.dyn_seq.store(seq + 2, Ordering::Release);
    }
}

impl RawWindow {
    /// Attaches `bytes` at `base` to this dynamic window, memory the window keeps as `kept`
    /// until [`RawWindow::detach_kept`] (a typed handle's buffer); returns the attach's
    /// registration number.
    pub(crate) fn attach_kept(&self, base: *mut u8, bytes: usize, kept: Kept) -> Result<u64> {
        self.require_dynamic("attach")?;
        let registration = self.core.dynamic_attach(base as usize, bytes)?;
        self.attached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((base as usize, bytes, Some(kept)));
        Ok(registration)
    }

    /// Detaches the region attached at `addr` with [`RawWindow::attach_kept`] and gives
    /// back the memory it kept. Errors: not a dynamic window; nothing is attached at
    /// `addr`; the region was attached by [`RawWindow::attach`] (memory the caller keeps).
    pub(crate) fn detach_kept(&self, addr: usize) -> Result<Kept> {
        self.require_dynamic("detach")?;
        // The window's own list is held across the detach, so that the region checked
        // here is the one detached.
        let mut attached = self
            .attached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let pos = attached.iter().position(|(a, _, _)| *a == addr);
        if let Some(p) = pos {
            if attached[p].2.is_none() {
                return Err(Error::InvalidArgument(format!(
                    "detach: the region at {addr:#x} was attached through the untyped window \
                     (RawWindow::attach): detach it there"
                )));
            }
        }
        self.core.dynamic_detach(addr)?;
        let pos = pos.expect("window and core track the same regions");
        Ok(attached.swap_remove(pos).2.expect("checked above"))
    }

    /// Regions this process has attached, as (address, bytes), by address.
    pub(crate) fn attached_bytes(&self) -> Vec<(usize, usize)> {
        let mut v: Vec<(usize, usize)> = self
            .attached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(addr, bytes, _)| (*addr, *bytes))
            .collect();
        v.sort_unstable();
        v
    }
}
