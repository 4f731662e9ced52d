//! Dynamic-window region state of one process: the regions it attached, and its cache of
//! the targets' region tables ([Gerstenberger13] §2.2; protocol in `win::dynamic`, lookups
//! in `win::resolve`).

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::shm::segment::Segment;
use crate::transport::{Located, Route};

/// A region this process attached.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnedRegion {
    pub base: usize,
    pub len: usize,
    pub seg_tag: u64,
    pub seg_offset: usize,
    /// Its attach's number (see `RegionSlot::registration`).
    pub registration: u64,
    /// Its registration with the network endpoint (windows across nodes): key and the
    /// remote address of its first byte; (0, 0) otherwise.
    pub net_key: u64,
    pub net_base: u64,
}

/// A region of a target, as cached by an origin.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CachedRegion {
    pub base: usize,
    pub len: usize,
    pub route: Route,
    /// In the owner's shared heap (mapped by every accessor).
    pub shared: bool,
}

impl CachedRegion {
    /// Where `addr` (inside the region) is.
    #[inline]
    pub(crate) fn locate(&self, addr: usize) -> Located {
        Located {
            route: self.route.offset(addr - self.base),
            shared: self.shared,
            key: addr,
        }
    }

    #[inline]
    pub(crate) fn contains(&self, addr: usize, len: usize) -> bool {
        within(self.base, self.len, addr, len)
    }
}

/// True when `len` bytes at `addr` lie inside the region of `region_len` bytes at `base`,
/// computed without any sum that could overflow (region descriptors come from peers).
#[inline]
pub(crate) fn within(base: usize, region_len: usize, addr: usize, len: usize) -> bool {
    addr >= base && addr - base <= region_len && len <= region_len - (addr - base)
}

/// An origin's copy of one target's region table.
#[derive(Debug)]
pub(crate) struct TargetCache {
    /// Sequence number the copy was taken at (always even; u64::MAX = never loaded).
    pub seq: u64,
    /// Regions sorted by base address.
    pub regions: Vec<CachedRegion>,
    /// The target's shared-heap segments mapped here, by tag.
    pub segments: HashMap<u64, Segment>,
    /// For a target on another node: how many detaches this process had been told of
    /// (`CtrlWord::HandleReleases`) when the copy was last validated — while the count
    /// stays, no region of the copy went away, and an access needs no round trip.
    pub told: Option<u64>,
}

impl TargetCache {
    pub(crate) fn empty() -> Self {
        TargetCache {
            seq: u64::MAX,
            regions: Vec::new(),
            segments: HashMap::new(),
            told: None,
        }
    }

    /// The region holding `len` bytes at `addr`, else the error of `op` on `target`.
    pub(crate) fn attached(
        &self,
        op: &'static str,
        target: usize,
        addr: usize,
        len: usize,
    ) -> crate::error::Result<CachedRegion> {
        self.find(addr, len)
            .ok_or(crate::error::Error::NotAttached {
                op,
                target,
                addr,
                len,
            })
    }

    pub(crate) fn find(&self, addr: usize, len: usize) -> Option<CachedRegion> {
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
pub(crate) struct LastHit {
    pub target: usize,
    pub seq: u64,
    pub region: CachedRegion,
}

/// The last hit, readable by the inlined fast path without a lock: a seqlock over six
/// words. Writers hold the `caches` lock of [`DynamicState`] (one writer at a time); a
/// reader that sees the version change or odd retries nothing, it just takes the slow path.
#[derive(Debug, Default)]
pub(crate) struct LastHitSlot {
    version: AtomicU64,
    /// target, seq, region base, region len, route meta (kind | shared << 8 | pid << 32),
    /// route address. A meta kind of 0 means no hit was stored.
    words: [AtomicU64; 6],
}

const ROUTE_DIRECT: u64 = 1;
const ROUTE_CMA: u64 = 2;

impl LastHitSlot {
    /// The hit, unless none was stored or a writer is storing one now.
    #[inline(always)]
    pub(crate) fn get(&self) -> Option<LastHit> {
        // Acquire: the words read below are at least as new as this version.
        let v1 = self.version.load(Ordering::Acquire);
        // Relaxed loads: validated by the version check after the Acquire fence.
        let w: [u64; 6] = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        if v1 & 1 != 0 || self.version.load(Ordering::Relaxed) != v1 {
            return None;
        }
        let meta = w[4];
        let route = match meta & 0xff {
            ROUTE_DIRECT => Route::Direct(w[5] as usize as *mut u8),
            ROUTE_CMA => Route::Cma {
                pid: (meta >> 32) as u32 as i32,
                addr: w[5] as usize,
            },
            _ => return None,
        };
        Some(LastHit {
            target: w[0] as usize,
            seq: w[1],
            region: CachedRegion {
                base: w[2] as usize,
                len: w[3] as usize,
                route,
                shared: (meta >> 8) & 1 != 0,
            },
        })
    }

    /// Stores `hit`; the caller holds the lock that serializes writers.
    pub(crate) fn set(&self, hit: LastHit) {
        let (kind, pid, addr) = match hit.region.route {
            Route::Direct(p) => (ROUTE_DIRECT, 0u32, p as usize),
            Route::Cma { pid, addr } => (ROUTE_CMA, pid as u32, addr),
            // The inlined path never takes a network route: not kept.
            Route::Net(_) => return,
        };
        let meta = kind | u64::from(hit.region.shared) << 8 | u64::from(pid) << 32;
        // Relaxed: writers are serialized by the caller's lock.
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v + 1, Ordering::Relaxed);
        // Release fence: a reader that sees any word below also sees the odd version when
        // it re-reads it after its Acquire fence.
        fence(Ordering::Release);
        let words = [
            hit.target as u64,
            hit.seq,
            hit.region.base as u64,
            hit.region.len as u64,
            meta,
            addr as u64,
        ];
        for (slot, w) in self.words.iter().zip(words) {
            slot.store(w, Ordering::Relaxed);
        }
        // Release: the words happen-before a reader that sees the new even version.
        self.version.store(v + 2, Ordering::Release);
    }
}

/// Dynamic-window state of one process.
#[derive(Debug, Default)]
pub(crate) struct DynamicState {
    /// Regions this process attached, sorted by base.
    pub owned: Mutex<Vec<OwnedRegion>>,
    /// Cached tables of the targets this process accessed (also serializes writers of
    /// `last`).
    pub caches: Mutex<HashMap<usize, TargetCache>>,
    /// Last region hit (see [`LastHit`]).
    pub last: LastHitSlot,
    /// Attaches so far (the last registration number handed out).
    pub registrations: AtomicU64,
    /// This process's attached regions registered with its network endpoint (windows
    /// across nodes), by base address: kept until the window's end (see
    /// `WinCore::dynamic_detach`).
    pub net_registrations: Mutex<Vec<(usize, crate::transport::network::Registration)>>,
    /// Owners on other nodes whose readers' word holds this process's bit (windows from
    /// their memory handles, `rma::memhandle`): set once, so later windows skip it.
    pub handle_owners_read: Mutex<std::collections::HashSet<usize>>,
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
