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

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{fence, Ordering};

use bytemuck::Pod;

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::memory;
use crate::rma::Located;
use crate::shm::segment::{segment_name, Segment};
use crate::transport::Route;
use crate::win::{Flavor, WinBuffer, WinCore, Window};

/// A region this process attached.
#[derive(Debug, Clone, Copy)]
struct OwnedRegion {
    base: usize,
    len: usize,
    seg_tag: u64,
    seg_offset: usize,
}

/// A region of a target, as cached by an origin.
#[derive(Debug, Clone, Copy)]
struct CachedRegion {
    base: usize,
    len: usize,
    route: Route,
    /// In the owner's shared heap (mapped by every accessor).
    shared: bool,
}

impl CachedRegion {
    /// Where `addr` (inside the region) is.
    #[inline]
    fn locate(&self, addr: usize) -> Located {
        Located {
            route: self.route.offset(addr - self.base),
            shared: self.shared,
            key: addr,
        }
    }

    #[inline]
    fn contains(&self, addr: usize, len: usize) -> bool {
        within(self.base, self.len, addr, len)
    }
}

/// True when `len` bytes at `addr` lie inside the region of `region_len` bytes at `base`,
/// computed without any sum that could overflow (region descriptors come from peers).
#[inline]
fn within(base: usize, region_len: usize, addr: usize, len: usize) -> bool {
    addr >= base && addr - base <= region_len && len <= region_len - (addr - base)
}

/// An origin's copy of one target's region table.
#[derive(Debug)]
struct TargetCache {
    /// Sequence number the copy was taken at (always even; u64::MAX = never loaded).
    seq: u64,
    /// Regions sorted by base address.
    regions: Vec<CachedRegion>,
    /// The target's shared-heap segments mapped here, by tag.
    segments: HashMap<u64, Segment>,
}

impl TargetCache {
    fn empty() -> Self {
        TargetCache {
            seq: u64::MAX,
            regions: Vec::new(),
            segments: HashMap::new(),
        }
    }

    fn find(&self, addr: usize, len: usize) -> Option<CachedRegion> {
        let i = self
            .regions
            .partition_point(|r| r.base <= addr)
            .checked_sub(1)?;
        let r = self.regions[i];
        r.contains(addr, len).then_some(r)
    }
}

/// The region of the last successful remote access, with the sequence number it is valid
/// for: repeated accesses to one region skip the table lookup.
#[derive(Debug, Clone, Copy)]
struct LastHit {
    target: usize,
    seq: u64,
    region: CachedRegion,
}

/// Dynamic-window state of one process.
#[derive(Debug, Default)]
pub(crate) struct DynamicState {
    /// Regions this process attached, sorted by base.
    owned: RefCell<Vec<OwnedRegion>>,
    /// Cached tables of the targets this process accessed.
    caches: RefCell<HashMap<usize, TargetCache>>,
    /// Last region hit (see [`LastHit`]).
    last: Cell<Option<LastHit>>,
}

/// A region attached with [`Window::attach`]: its address is the displacement peers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttachedRegion {
    /// Address of the first element in the attaching process (MPI_Get_address).
    pub addr: usize,
    /// Number of elements.
    pub len: usize,
}

impl WinCore {
    fn dynamic_attach(&self, base: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Err(Error::InvalidArgument("attach of zero bytes".into()));
        }
        let cap = self.ctrl.layout().region_cap;
        {
            let mut owned = self.dynamic.owned.borrow_mut();
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
            let at = owned.partition_point(|r| r.base < base);
            owned.insert(
                at,
                OwnedRegion {
                    base,
                    len,
                    seg_tag,
                    seg_offset,
                },
            );
        }
        self.publish_regions();
        Ok(())
    }

    fn dynamic_detach(&self, base: usize) -> Result<()> {
        {
            let mut owned = self.dynamic.owned.borrow_mut();
            let pos = owned
                .iter()
                .position(|r| r.base == base)
                .ok_or(Error::DetachUnknown { addr: base })?;
            owned.remove(pos);
        }
        self.publish_regions();
        Ok(())
    }

    /// Rewrites this process's region table under the seqlock.
    fn publish_regions(&self) {
        let ctl = self.ctrl.rank(self.rank);
        let owned = self.dynamic.owned.borrow();
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
        }
        ctl.ident
            .region_count
            .store(owned.len() as u64, Ordering::Relaxed);
        // Release: the new table happens-before any reader that observes the even number.
        ctl.dyn_seq.store(seq + 2, Ordering::Release);
    }

    /// Where `[addr, addr+len)` is in this process's attached memory.
    pub(crate) fn resolve_own_dynamic(
        &self,
        op: &'static str,
        addr: usize,
        len: usize,
    ) -> Result<Located> {
        let owned = self.dynamic.owned.borrow();
        let i = owned.partition_point(|r| r.base <= addr);
        match i.checked_sub(1).map(|i| owned[i]) {
            Some(r) if within(r.base, r.len, addr, len) => Ok(Located {
                route: Route::Direct(addr as *mut u8),
                shared: r.seg_tag != 0,
                key: addr,
            }),
            _ => Err(Error::NotAttached {
                op,
                target: self.rank,
                addr,
                len,
            }),
        }
    }

    /// Where `[addr, addr+len)` is at `target`, through the descriptor cache.
    /// The common case of a dynamic-window access, inlined into put/get/accumulate: the same
    /// region of the same target as last time, whose table has not changed since, mapped
    /// here. Returns the address and whether every process maps it; `None` means "take
    /// [`WinCore::resolve_dynamic`]".
    #[inline(always)]
    pub(crate) fn dynamic_fast(
        &self,
        target: usize,
        addr: usize,
        len: usize,
    ) -> Option<(*mut u8, bool)> {
        let hit = self.dynamic.last.get()?;
        if hit.target != target || !hit.region.contains(addr, len) {
            return None;
        }
        // Acquire: as in resolve_dynamic; an odd or newer number (a detach or attach since
        // the hit) takes the full path.
        if self.ctrl.rank(target).dyn_seq.load(Ordering::Acquire) != hit.seq {
            return None;
        }
        match hit.region.route {
            Route::Direct(p) => Some((p.wrapping_add(addr - hit.region.base), hit.region.shared)),
            Route::Cma { .. } => None,
        }
    }

    pub(crate) fn resolve_dynamic(
        &self,
        op: &'static str,
        target: usize,
        addr: usize,
        len: usize,
    ) -> Result<Located> {
        if target == self.rank {
            return self.resolve_own_dynamic(op, addr, len);
        }
        // Acquire: pairs with the owner's Release store of the sequence number, so a cache
        // refreshed at this number sees the table it guards.
        let seq = self.ctrl.rank(target).dyn_seq.load(Ordering::Acquire);
        if let Some(hit) = self.dynamic.last.get() {
            if hit.target == target && hit.seq == seq && hit.region.contains(addr, len) {
                return Ok(hit.region.locate(addr));
            }
        }
        let mut caches = self.dynamic.caches.borrow_mut();
        let cache = caches.entry(target).or_insert_with(TargetCache::empty);
        if cache.seq != seq {
            self.refresh(target, cache);
        }
        match cache.find(addr, len) {
            Some(region) => {
                self.dynamic.last.set(Some(LastHit {
                    target,
                    seq: cache.seq,
                    region,
                }));
                Ok(region.locate(addr))
            }
            None => Err(Error::NotAttached {
                op,
                target,
                addr,
                len,
            }),
        }
    }

    /// Re-reads `target`'s region table one-sidedly (seqlock read).
    fn refresh(&self, target: usize, cache: &mut TargetCache) {
        let ctl = self.ctrl.rank(target);
        let cap = self.ctrl.layout().region_cap;
        let mut backoff = Backoff::new();
        let (seq, raw) = loop {
            let s1 = ctl.dyn_seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let count = (ctl.ident.region_count.load(Ordering::Relaxed) as usize).min(cap);
                let raw: Vec<OwnedRegion> = (0..count)
                    .map(|i| {
                        let s = self.ctrl.region(target, i);
                        OwnedRegion {
                            base: s.base.load(Ordering::Relaxed) as usize,
                            len: s.len.load(Ordering::Relaxed) as usize,
                            seg_tag: s.seg_tag.load(Ordering::Relaxed),
                            seg_offset: s.seg_offset.load(Ordering::Relaxed) as usize,
                        }
                    })
                    .collect();
                // Acquire fence: if any entry above came from a newer write, the sequence
                // number read below is newer too (see publish_regions).
                fence(Ordering::Acquire);
                if ctl.dyn_seq.load(Ordering::Relaxed) == s1 {
                    break (s1, raw);
                }
            }
            backoff.snooze();
        };
        let pid = ctl.ident.pid.load(Ordering::Relaxed) as i32;
        let owner = ctl.ident.job_rank.load(Ordering::Relaxed).to_string();
        let mut segments = std::mem::take(&mut cache.segments);
        segments.retain(|tag, _| raw.iter().any(|r| r.seg_tag == *tag));
        let mut regions = Vec::with_capacity(raw.len());
        for r in &raw {
            let route = if r.seg_tag == 0 {
                Route::Cma { pid, addr: r.base }
            } else {
                let seg = match segments.entry(r.seg_tag) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        match Segment::open(&segment_name(self.comm.job_id(), &owner, r.seg_tag)) {
                            Ok(s) => e.insert(s),
                            // Freed since we read the table: the region is gone.
                            Err(_) => continue,
                        }
                    }
                };
                if r.seg_offset
                    .checked_add(r.len)
                    .is_none_or(|end| end > seg.len())
                {
                    continue;
                }
                Route::Direct(seg.as_ptr().wrapping_add(r.seg_offset))
            };
            regions.push(CachedRegion {
                base: r.base,
                len: r.len,
                route,
                shared: r.seg_tag != 0,
            });
        }
        *cache = TargetCache {
            seq,
            regions,
            segments,
        };
    }
}

impl<T: Pod> Window<T> {
    fn require_dynamic(&self, call: &'static str) -> Result<()> {
        if self.core.flavor == Flavor::Dynamic {
            Ok(())
        } else {
            Err(Error::WrongFlavor {
                call,
                flavor: self.core.flavor.as_str(),
            })
        }
    }

    /// Attaches memory to a dynamic window (MPI_Win_attach); the window owns it until
    /// [`Window::detach`]. Not collective. Peers address it by the returned
    /// [`AttachedRegion::addr`] (plus a byte offset).
    ///
    /// Errors: not a dynamic window; zero bytes; overlaps an attached region; the region
    /// table (info `onesided_max_attached_regions`) is full.
    ///
    /// ```no_run
    /// # use onesided::{Assert, Window};
    /// # let world = onesided::init()?.world().clone();
    /// let win = Window::<u64>::create_dynamic(&world)?;
    /// let region = win.attach(onesided::alloc_mem::<u64>(16)?)?;
    /// let addrs = world.allgather(&[region.addr as u64])?; // tell the peers
    /// win.lock_all(Assert::NONE)?;
    /// win.put(&[1, 2], 1, addrs[1] as usize + 8)?; // elements 1 and 2 of rank 1's region
    /// win.unlock_all()?;
    /// # Ok::<(), onesided::Error>(())
    /// ```
    pub fn attach(&self, buffer: impl Into<WinBuffer<T>>) -> Result<AttachedRegion> {
        self.require_dynamic("attach")?;
        let mut buffer = buffer.into();
        let (ptr, bytes) = buffer.raw_bytes();
        self.core.dynamic_attach(ptr as usize, bytes)?;
        let region = AttachedRegion {
            addr: ptr as usize,
            len: buffer.len(),
        };
        self.attached.borrow_mut().push((region.addr, buffer));
        Ok(region)
    }

    /// Detaches the region attached at `addr` and gives its memory back (MPI_Win_detach).
    /// Errors: not a dynamic window; nothing is attached at `addr`.
    pub fn detach(&self, addr: usize) -> Result<WinBuffer<T>> {
        self.require_dynamic("detach")?;
        self.core.dynamic_detach(addr)?;
        let mut attached = self.attached.borrow_mut();
        let pos = attached
            .iter()
            .position(|(a, _)| *a == addr)
            .expect("window and core track the same regions");
        Ok(attached.swap_remove(pos).1)
    }

    /// Regions this process has attached, by address.
    pub fn attached_regions(&self) -> Vec<AttachedRegion> {
        let mut v: Vec<AttachedRegion> = self
            .attached
            .borrow()
            .iter()
            .map(|(addr, b)| AttachedRegion {
                addr: *addr,
                len: b.len(),
            })
            .collect();
        v.sort_by_key(|r| r.addr);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::within;

    #[test]
    fn region_containment_never_overflows() {
        assert!(within(100, 50, 100, 50));
        assert!(within(100, 50, 149, 1));
        assert!(within(100, 50, 150, 0));
        assert!(!within(100, 50, 149, 2));
        assert!(!within(100, 50, 99, 1));
        assert!(!within(100, 50, 151, 0));
        // A descriptor reaching the top of the address space, and a huge length.
        assert!(within(usize::MAX - 10, 10, usize::MAX - 1, 1));
        assert!(!within(usize::MAX - 10, 10, usize::MAX - 1, usize::MAX));
        assert!(!within(0, usize::MAX, 1, usize::MAX));
    }
}
