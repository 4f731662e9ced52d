//! Dynamic-window region state of one process: the regions it attached, and its cache of
//! the targets' region tables ([Gerstenberger13] §2.2; protocol in `win::dynamic`, lookups
//! in `win::resolve`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use crate::shm::segment::Segment;
use crate::transport::{Located, Route};

/// A region this process attached.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnedRegion {
    pub base: usize,
    pub len: usize,
    pub seg_tag: u64,
    pub seg_offset: usize,
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
}

impl TargetCache {
    pub(crate) fn empty() -> Self {
        TargetCache {
            seq: u64::MAX,
            regions: Vec::new(),
            segments: HashMap::new(),
        }
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

/// Dynamic-window state of one process.
#[derive(Debug, Default)]
pub(crate) struct DynamicState {
    /// Regions this process attached, sorted by base.
    pub owned: RefCell<Vec<OwnedRegion>>,
    /// Cached tables of the targets this process accessed.
    pub caches: RefCell<HashMap<usize, TargetCache>>,
    /// Last region hit (see [`LastHit`]).
    pub last: Cell<Option<LastHit>>,
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
