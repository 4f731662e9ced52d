//! Address resolution, in one room: a (target, displacement, length) of any window flavor
//! becomes a [`Located`] route after every check — rank, epoch, bounds (symmetric and
//! per-rank windows) or attachment (dynamic windows, through the region-descriptor cache of
//! `win::regions`, refreshed one-sidedly under the target's seqlock).

use std::sync::atomic::{fence, Ordering};

use bytemuck::Pod;

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shm::segment::{segment_name, Segment};
use crate::transport::{Located, Route};
use crate::win::core::{TargetRegion, Targets, WinCore};
use crate::win::regions::{within, CachedRegion, LastHit, OwnedRegion, TargetCache};

/// Byte offset of `disp` units of `disp_unit` bytes, if `len` bytes from there fit in
/// `size` bytes.
#[inline]
pub(crate) fn checked_offset(
    op: &'static str,
    target: usize,
    disp: usize,
    disp_unit: usize,
    len: usize,
    size: usize,
) -> Result<usize> {
    match disp.checked_mul(disp_unit) {
        Some(off) if off <= size && len <= size - off => Ok(off),
        _ => Err(out_of_bounds(op, target, disp, disp_unit, len, size)),
    }
}

#[cold]
#[inline(never)]
fn out_of_bounds(
    op: &'static str,
    target: usize,
    disp: usize,
    disp_unit: usize,
    len: usize,
    size: usize,
) -> Error {
    Error::OutOfBounds {
        op,
        target,
        disp,
        disp_unit,
        len,
        size,
    }
}

/// Where a rank's region-table number lies in its control block.
pub(crate) const DYN_SEQ: usize = std::mem::offset_of!(crate::win::control::RankControl, dyn_seq);

impl WinCore {
    /// Where `len` bytes at `disp` in `target`'s window are, after every check (rank,
    /// epoch, bounds or attachment). A zero-length access is checked for rank and epoch
    /// only: it moves nothing, so no displacement is out of bounds (as in MPI).
    #[inline]
    pub(crate) fn resolve(
        &self,
        op: &'static str,
        target: usize,
        disp: usize,
        len: usize,
    ) -> Result<Located> {
        self.check_rank(target)?;
        crate::pending::poke();
        // The RMA ordering gate: behind a pending synchronization (a deferred epoch opened
        // by ilock, istart, ifence, …) an operation must not touch target memory early, so
        // it waits until nothing it may not pass is pending — the rules of
        // `Order::may_pass` (a put or accumulate that defers instead uses
        // `resolve_ungated` and queues itself). The fast paths never get here with work
        // pending: a deferred opening clears the access cache, and only a check with the
        // engine idle sets it again.
        self.pass_gate(target)?;
        self.resolve_ungated(op, target, disp, len)
    }

    /// Waits until an operation toward `target` may touch target memory (the RMA ordering
    /// gate, see [`WinCore::gated`]).
    #[inline]
    pub(crate) fn pass_gate(&self, target: usize) -> Result<()> {
        if self.gated(target) {
            // The operation waits for its epoch: a lock that waits to see its epoch whole
            // (`progress::shipping`) asks for the lock now instead of after its wait.
            self.engine.end_lazy_locks();
            self.engine.wait_until(
                self,
                || !self.gated(target),
                None,
                || {
                    format!(
                        "an operation to rank {target} waits for its epoch to activate; {}",
                        self.engine.describe_wait(self, None)
                    )
                },
            )?;
        }
        Ok(())
    }

    /// The RMA ordering gate: true when an operation toward `target` must not touch target
    /// memory yet because a pending synchronization it may not pass is queued: one of its
    /// own epoch, of an older epoch, or of an epoch the reorder flags do not let it pass
    /// (`Order::may_pass`). An operation of an epoch that passes everything pending moves
    /// its data at once, without a copy.
    pub(crate) fn gated(&self, target: usize) -> bool {
        if self.engine.idle() {
            return false;
        }
        let flags = crate::progress::Host::reorder(self);
        self.engine
            .holds_back(self.epoch.access_order(target), flags)
    }

    /// [`WinCore::resolve`] without waiting for pending synchronizations: every check, and
    /// the location, for an operation that is queued behind them or runs as part of them.
    pub(crate) fn resolve_ungated(
        &self,
        op: &'static str,
        target: usize,
        disp: usize,
        len: usize,
    ) -> Result<Located> {
        self.check_rank(target)?;
        self.epoch.check_access(target, op)?;
        if !self.engine.idle() {
            // The check above may have cached the target: keep later calls on the path
            // that respects the pending synchronization.
            self.epoch.forget_access_cache();
        }
        self.locate(op, target, disp, len)
    }

    /// Where `len` bytes at `disp` of `target` are (bounds or attachment checked), for an
    /// operation whose rank and epoch were checked when it was issued — a deferred put runs
    /// after later calls may have closed that epoch.
    pub(crate) fn locate(
        &self,
        op: &'static str,
        target: usize,
        disp: usize,
        len: usize,
    ) -> Result<Located> {
        if len == 0 {
            return Ok(Located::nowhere());
        }
        match &self.targets {
            Targets::Symmetric {
                base,
                stride,
                bytes,
                disp_unit,
            } => {
                let off = checked_offset(op, target, disp, *disp_unit, len, *bytes)?;
                // In bounds of the node segment: target < size and off + len <= bytes.
                Ok(Located {
                    route: Route::Direct(base.wrapping_add(target * stride + off)),
                    shared: true,
                    key: off,
                })
            }
            Targets::Spread(_) => {
                let t = self.targets.region(target).expect("a checked rank");
                let off = checked_offset(op, target, disp, t.disp_unit, len, t.bytes)?;
                Ok(Located {
                    route: t.route.offset(off),
                    shared: t.shared,
                    key: off,
                })
            }
            Targets::Table(table) => {
                let t = &table[target];
                let off = checked_offset(op, target, disp, t.disp_unit, len, t.bytes)?;
                let route = match t.lazy {
                    Some(i) => Route::Direct(self.peer_mappings[i as usize].map(t.bytes)?),
                    None => t.route,
                };
                Ok(Located {
                    route: route.offset(off),
                    shared: t.shared,
                    key: off,
                })
            }
            Targets::Dynamic => self.resolve_dynamic(op, target, disp, len),
        }
    }

    /// The address of `len` bytes at `disp` in `target`'s memory, and whether every process
    /// maps that memory, when the common case applies — memory reached by load/store
    /// (symmetric or per-rank window), target already checked in this epoch, in bounds —
    /// without constructing any error. `None` means "take the full path".
    #[inline(always)]
    pub(crate) fn direct_fast(
        &self,
        target: usize,
        disp: usize,
        len: usize,
    ) -> Option<(*mut u8, bool)> {
        if target >= self.size || !self.epoch.access_cached(target) {
            return None;
        }
        let (base, bytes, disp_unit, shared) = match &self.targets {
            Targets::Symmetric {
                base,
                stride,
                bytes,
                disp_unit,
            } => (base.wrapping_add(target * stride), *bytes, *disp_unit, true),
            Targets::Table(table) => match table[target] {
                TargetRegion {
                    route: Route::Direct(p),
                    bytes,
                    disp_unit,
                    shared,
                    lazy: None,
                } => (p, bytes, disp_unit, shared),
                TargetRegion {
                    lazy: Some(i),
                    bytes,
                    disp_unit,
                    shared,
                    ..
                } => (
                    self.peer_mappings[i as usize].mapped()?,
                    bytes,
                    disp_unit,
                    shared,
                ),
                _ => return None,
            },
            Targets::Spread(_) => match self.targets.region(target)? {
                TargetRegion {
                    route: Route::Direct(p),
                    bytes,
                    disp_unit,
                    shared,
                    ..
                } => (p, bytes, disp_unit, shared),
                _ => return None,
            },
            Targets::Dynamic => return self.dynamic_fast(target, disp, len),
        };
        let off = disp.checked_mul(disp_unit)?;
        (off <= bytes && len <= bytes - off).then(|| (base.wrapping_add(off), shared))
    }
}

impl WinCore {
    /// Where the target extent of `layout` at `disp` of `target` starts, after checking
    /// that the whole extent — and so, block by block, every byte the layout touches — lies
    /// in the target's window (or in one attached region).
    pub(crate) fn resolve_layout<T: Pod>(
        &self,
        op: &'static str,
        target: usize,
        disp: usize,
        layout: &Layout<T>,
    ) -> Result<Located> {
        let extent = layout.end();
        if !layout.fits_in(extent) {
            return Err(Error::InvalidArgument(format!(
                "{op}: a target layout block lies outside its extent of {extent} bytes"
            )));
        }
        self.resolve(op, target, disp, extent)
    }
}

impl WinCore {
    /// Where `[addr, addr+len)` is in this process's attached memory.
    pub(crate) fn resolve_own_dynamic(
        &self,
        op: &'static str,
        addr: usize,
        len: usize,
    ) -> Result<Located> {
        let owned = self
            .dynamic
            .owned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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
            Route::Net(_) => None,
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
        if let Some(net) = self.net_toward(target) {
            return self.resolve_dynamic_net(net, op, target, addr, len);
        }
        // Acquire: pairs with the owner's Release store of the sequence number, so a cache
        // refreshed at this number sees the table it guards.
        let seq = self.ctrl.rank(target).dyn_seq.load(Ordering::Acquire);
        if let Some(hit) = self.dynamic.last.get() {
            if hit.target == target && hit.seq == seq && hit.region.contains(addr, len) {
                return Ok(hit.region.locate(addr));
            }
        }
        let mut caches = self
            .dynamic
            .caches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let cache = caches.entry(target).or_insert_with(TargetCache::empty);
        if cache.seq != seq {
            self.refresh(target, cache);
        }
        let region = cache.attached(op, target, addr, len)?;
        self.dynamic.last.set(LastHit {
            target,
            seq: cache.seq,
            region,
        });
        Ok(region.locate(addr))
    }

    /// Runs `each` over the pieces of an access of `len` bytes at address `addr` of
    /// `target`'s dynamic window that runs from one attached region into the next — valid
    /// in MPI, which asks only that the bytes be attached (MPICH's `win_dynamic_rma_flush_get`
    /// test writes across two halves of one array attached apart), while a route reaches
    /// one region (the two may be a mapped segment and memory reached by cross-memory
    /// attach, or two network registrations). Each piece lies in one region and holds whole
    /// elements of `unit` bytes; `each` gets its byte range within the access and where it
    /// is. `not_attached` (the error of resolving the whole access) is returned when the
    /// window is not dynamic, no run of regions attached next to each other covers the
    /// bytes, or a region boundary splits an element. A slow path: the table is read anew.
    pub(crate) fn across_regions(
        &self,
        op: &'static str,
        not_attached: Error,
        target: usize,
        (addr, len, unit): (usize, usize, usize),
        mut each: impl FnMut(std::ops::Range<usize>, Located) -> Result<()>,
    ) -> Result<()> {
        let pieces = match (&self.targets, &not_attached) {
            (Targets::Dynamic, Error::NotAttached { .. }) => self
                .regions_now(target)
                .and_then(|regions| attached_pieces(regions, addr, len, unit)),
            _ => None,
        };
        let Some(pieces) = pieces else {
            return Err(not_attached);
        };
        for (at, n) in pieces {
            let loc = self.resolve_dynamic(op, target, at, n)?;
            each(at - addr..at - addr + n, loc)?;
        }
        Ok(())
    }

    /// The network control plane when `target` is on another node than this process (a
    /// window across nodes): its words and tables are read through it.
    pub(crate) fn net_toward(
        &self,
        target: usize,
    ) -> Option<&dyn crate::win::net_control::NetControl> {
        let net: &dyn crate::win::net_control::NetControl = &**self.net.as_deref()?;
        let (there, here) = (
            self.comm.node_of(target).ok()?,
            self.comm.node_of(self.rank).ok()?,
        );
        (there != here).then_some(net)
    }

    /// [`WinCore::resolve_dynamic`] toward a target on another node, its regions reached
    /// with their registrations' keys. The target tells this process of each of its
    /// detaches before the detach returns, as for memory handles (`rma::memhandle`, "After
    /// release": this process is one of its readers), so an access whose region is in the
    /// cached table and that was told of no detach since the table was validated needs no
    /// round trip — a load of this process's own count. Else (a detach told, or an address
    /// the copy does not hold: maybe a region attached since) it reads the table's sequence
    /// number through the network (one read; the table itself only when the number
    /// changed). A put + flush through a dynamic window took 33–34 µs with the number read
    /// at every access, 15 on an `allocate` window.
    fn resolve_dynamic_net(
        &self,
        net: &dyn crate::win::net_control::NetControl,
        op: &'static str,
        target: usize,
        addr: usize,
        len: usize,
    ) -> Result<Located> {
        // Read before the table: a detach after this read is told and moves it.
        let told = self.handle_releases_told()?;
        {
            let caches = self
                .dynamic
                .caches
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(cache) = caches.get(&target).filter(|c| c.told == Some(told)) {
                if let Ok(region) = cache.attached(op, target, addr, len) {
                    return Ok(region.locate(addr));
                }
            }
        }
        // A reader of the target's table from now on (once), before it reads the table.
        self.become_handle_reader(target)?;
        let seq = self.read_remote_word(net, target, DYN_SEQ)?;
        let mut caches = self
            .dynamic
            .caches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let cache = caches.entry(target).or_insert_with(TargetCache::empty);
        // Validated now: the number (and the table if it moved) was read after the count.
        cache.told = Some(told);
        if cache.seq != seq {
            let (seq, raw) = self.read_table_net(net, target)?;
            let peer = net.peer(target);
            *cache = TargetCache {
                seq,
                regions: raw
                    .iter()
                    .filter(|r| r.net_key != 0)
                    .filter_map(|r| {
                        Some(CachedRegion {
                            base: r.base,
                            len: r.len,
                            route: Route::network(crate::transport::network::Remote {
                                peer,
                                addr: r.net_base,
                                key: r.net_key,
                            })?,
                            shared: false,
                        })
                    })
                    .collect(),
                segments: Default::default(),
                told: Some(told),
            };
        }
        Ok(cache.attached(op, target, addr, len)?.locate(addr))
    }

    /// Reads the u64 at `field` bytes into `target`'s control block (`offset_of!` of a
    /// word of `RankControl`) from `target`'s own segment, through the network.
    pub(crate) fn read_remote_word(
        &self,
        net: &dyn crate::win::net_control::NetControl,
        target: usize,
        field: usize,
    ) -> Result<u64> {
        let mut v = [0u8; 8];
        net.read_area(target, self.ctrl.remote_offset(target, field), &mut v)?;
        Ok(u64::from_le_bytes(v))
    }

    /// [`WinCore::read_table`] of a target on another node: the same seqlock read, each
    /// step a read through the network (the provider keeps reads in order).
    pub(crate) fn read_table_net(
        &self,
        net: &dyn crate::win::net_control::NetControl,
        target: usize,
    ) -> Result<(u64, Vec<OwnedRegion>)> {
        use crate::win::control::{Ident, RankControl};
        use std::mem::offset_of;
        let cap = self.ctrl.layout().region_cap;
        const WORDS: usize = std::mem::size_of::<crate::win::control::RegionSlot>() / 8;
        const REGION_COUNT: usize =
            offset_of!(RankControl, ident) + offset_of!(Ident, region_count);
        let mut backoff = Backoff::new();
        loop {
            let s1 = self.read_remote_word(net, target, DYN_SEQ)?;
            if s1 & 1 == 0 {
                let count = (self.read_remote_word(net, target, REGION_COUNT)? as usize).min(cap);
                let mut raw = vec![0u8; count * WORDS * 8];
                if count > 0 {
                    let first = self
                        .ctrl
                        .remote_offset(target, self.ctrl.layout().region_slots().start);
                    net.read_area(target, first, &mut raw)?;
                }
                if self.read_remote_word(net, target, DYN_SEQ)? == s1 {
                    let word = |slot: &[u8], i: usize| {
                        u64::from_le_bytes(slot[8 * i..8 * i + 8].try_into().expect("8 bytes"))
                    };
                    // Field order of RegionSlot.
                    let regions = raw
                        .chunks_exact(WORDS * 8)
                        .map(|s| OwnedRegion {
                            base: word(s, 0) as usize,
                            len: word(s, 1) as usize,
                            seg_tag: word(s, 2),
                            seg_offset: word(s, 3) as usize,
                            registration: word(s, 4),
                            net_key: word(s, 5),
                            net_base: word(s, 6),
                        })
                        .collect();
                    return Ok((s1, regions));
                }
            }
            backoff.snooze();
        }
    }

    /// The registration of the region holding `addr` at `target` of a dynamic window
    /// across nodes, as the network reaches it: where accumulates CPU atomics cannot do go
    /// (every rank's, this node's included: one protocol per element).
    pub(crate) fn dynamic_net_remote(
        &self,
        target: usize,
        addr: usize,
    ) -> Option<crate::transport::network::Remote> {
        let net = self.net.as_deref()?;
        let regions = self.regions_now(target)?;
        let r = regions
            .iter()
            .find(|r| within(r.base, r.len, addr, 1) && r.net_key != 0)?;
        Some(crate::transport::network::Remote {
            peer: net.peer(target),
            addr: r.net_base + (addr - r.base) as u64,
            key: r.net_key,
        })
    }

    /// `target`'s region table as it is now, with its sequence number (seqlock read):
    /// through the network when it is on another node.
    fn read_table(&self, target: usize) -> Result<(u64, Vec<OwnedRegion>)> {
        if let Some(net) = self.net_toward(target) {
            return self.read_table_net(net, target);
        }
        Ok(self.read_table_mapped(target))
    }

    /// [`WinCore::read_table`] of a target on this node.
    fn read_table_mapped(&self, target: usize) -> (u64, Vec<OwnedRegion>) {
        let ctl = self.ctrl.rank(target);
        let cap = self.ctrl.layout().region_cap;
        let mut backoff = Backoff::new();
        loop {
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
                            registration: s.registration.load(Ordering::Relaxed),
                            net_key: s.net_key.load(Ordering::Relaxed),
                            net_base: s.net_base.load(Ordering::Relaxed),
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
        }
    }

    /// `target`'s attached regions as they are now: this process's own list, or the
    /// target's table read one-sidedly (`None`: the read failed).
    fn regions_now(&self, target: usize) -> Option<Vec<OwnedRegion>> {
        if target == self.rank {
            Some(
                self.dynamic
                    .owned
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone(),
            )
        } else {
            self.read_table(target).ok().map(|(_, regions)| regions)
        }
    }

    /// The registration number of the region of `bytes` bytes attached at `base` in
    /// `target`'s table now, if there is one.
    pub(crate) fn registration_at(&self, target: usize, base: usize, bytes: usize) -> Option<u64> {
        let regions = self.regions_now(target)?;
        regions
            .iter()
            .find(|r| r.base == base && r.len == bytes)
            .map(|r| r.registration)
    }

    /// Re-reads `target`'s region table one-sidedly (seqlock read).
    fn refresh(&self, target: usize, cache: &mut TargetCache) {
        let ctl = self.ctrl.rank(target);
        let (seq, raw) = self.read_table_mapped(target);
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
            told: None,
        };
    }
}

/// The pieces (address, bytes) of `len` bytes at `addr` over `regions` attached next to
/// each other, each inside one region and a whole number of `unit`-byte elements from
/// `addr`; `None` when no such run covers the bytes (see [`WinCore::across_regions`]).
fn attached_pieces(
    mut regions: Vec<OwnedRegion>,
    addr: usize,
    len: usize,
    unit: usize,
) -> Option<Vec<(usize, usize)>> {
    regions.sort_unstable_by_key(|r| r.base);
    let end = addr.checked_add(len)?;
    let first = regions.partition_point(|r| r.base <= addr).checked_sub(1)?;
    let mut pieces = Vec::new();
    let mut at = addr;
    for r in &regions[first..] {
        let region_end = r.base.checked_add(r.len)?;
        // The first region holds `addr`; each next one starts where the last piece ended.
        if (pieces.is_empty() && at >= region_end) || (!pieces.is_empty() && r.base != at) {
            return None;
        }
        let piece_end = end.min(region_end);
        if piece_end != end && (piece_end - addr) % unit != 0 {
            return None;
        }
        pieces.push((at, piece_end - at));
        at = piece_end;
        if at == end {
            return Some(pieces);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(base: usize, len: usize) -> OwnedRegion {
        OwnedRegion {
            base,
            len,
            seg_tag: 0,
            seg_offset: 0,
            registration: 0,
            net_key: 0,
            net_base: 0,
        }
    }

    #[test]
    fn an_access_splits_at_the_boundaries_of_adjacent_regions() {
        let halves = || vec![region(1000, 64), region(1064, 64)];
        assert_eq!(
            attached_pieces(halves(), 1000, 128, 4),
            Some(vec![(1000, 64), (1064, 64)])
        );
        assert_eq!(
            attached_pieces(halves(), 1060, 8, 4),
            Some(vec![(1060, 4), (1064, 4)])
        );
        // Three regions given out of order; the access ends inside the last.
        let thirds = vec![region(200, 10), region(100, 50), region(150, 50)];
        assert_eq!(
            attached_pieces(thirds, 120, 85, 1),
            Some(vec![(120, 30), (150, 50), (200, 5)])
        );
        // A gap, bytes past the last region, a start outside every region.
        assert_eq!(
            attached_pieces(vec![region(0, 8), region(9, 8)], 0, 12, 1),
            None
        );
        assert_eq!(attached_pieces(halves(), 1000, 129, 1), None);
        assert_eq!(attached_pieces(halves(), 999, 2, 1), None);
        assert_eq!(attached_pieces(halves(), 1128, 1, 1), None);
        // A boundary inside an element (8-byte elements from 1060: 1064 is not a multiple).
        assert_eq!(attached_pieces(halves(), 1060, 16, 8), None);
        // No overflow at the top of the address space.
        assert_eq!(attached_pieces(halves(), usize::MAX - 1, 4, 1), None);
    }

    #[test]
    fn offsets_scale_and_bound() {
        assert_eq!(checked_offset("put", 0, 3, 8, 8, 32).unwrap(), 24);
        assert!(checked_offset("put", 0, 3, 8, 9, 32).is_err());
        assert!(checked_offset("put", 0, 5, 8, 0, 32).is_err());
        assert_eq!(checked_offset("put", 0, 4, 8, 0, 32).unwrap(), 32);
        assert!(checked_offset("put", 0, usize::MAX, 2, 1, 32).is_err());
        match checked_offset("get", 7, 2, 4, 16, 20) {
            Err(Error::OutOfBounds {
                target: 7,
                disp: 2,
                disp_unit: 4,
                len: 16,
                size: 20,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }
}
