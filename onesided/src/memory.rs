//! `alloc_mem`: memory from the node-local shared heap.
//!
//! The advice to implementors of [MPI-4.1], "Window Creation": windows over memory from `MPI_Alloc_mem` can be faster.
//! Here every [`AllocMem`] lives in a shared-memory segment of its own, and a process-wide
//! registry maps address ranges to segments. When a window is created over (or a dynamic
//! window attaches) such memory, peers map the segment and reach it with plain loads and
//! stores; any other memory is reached with cross-memory attach.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::shm::segment::Segment;
use crate::universe::identity;

/// A registered allocation: where it is and how peers can map it.
#[derive(Debug, Clone)]
struct Registered {
    base: usize,
    len: usize,
    tag: u64,
}

static REGISTRY: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

fn registry() -> std::sync::MutexGuard<'static, Vec<Registered>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where a byte range lies inside the shared heap. Peers name the segment from the owner's
/// job rank and this tag (`segment_name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedLocation {
    /// Random tag of the segment (last part of the name).
    pub tag: u64,
    /// Offset of the range inside the segment.
    pub offset: usize,
}

/// Finds the shared-heap segment containing `[addr, addr+len)`, if any.
pub(crate) fn lookup(addr: usize, len: usize) -> Option<SharedLocation> {
    registry()
        .iter()
        .find(|r| addr >= r.base && addr.saturating_add(len) <= r.base + r.len)
        .map(|r| SharedLocation {
            tag: r.tag,
            offset: addr - r.base,
        })
}

/// Memory from the node-local shared heap (MPI `MPI_Alloc_mem`).
///
/// Windows created over it (and regions of dynamic windows attached from it) are reached by
/// peers with direct loads and stores, which is much faster than cross-memory attach.
/// Contents start zeroed.
///
/// ```no_run
/// # let world = onesided::init()?.world().clone();
/// let mut mem = onesided::alloc_mem::<f64>(1024)?;
/// mem[0] = 1.5;
/// let win = onesided::Window::create(&world, mem)?; // peers use load/store
/// # Ok::<(), onesided::Error>(())
/// ```
#[derive(Debug)]
pub struct AllocMem<T: Pod> {
    seg: Segment,
    len: usize,
    _elem: PhantomData<T>,
}

// SAFETY: the allocation is plain memory of Pod elements owned by this value; moving it to
// another thread moves ownership like a Vec<T>.
unsafe impl<T: Pod + Send> Send for AllocMem<T> {}
// SAFETY: shared references only give shared access to Pod elements, like &[T].
unsafe impl<T: Pod + Sync> Sync for AllocMem<T> {}

/// Allocates `len` zeroed elements from the node-local shared heap.
///
/// Requires [`crate::init`] to have run (segment names carry the job id).
pub fn alloc_mem<T: Pod>(len: usize) -> Result<AllocMem<T>> {
    AllocMem::new(len)
}

impl<T: Pod> AllocMem<T> {
    /// Allocates `len` zeroed elements; see [`alloc_mem`].
    pub fn new(len: usize) -> Result<Self> {
        let id = identity().ok_or_else(|| {
            Error::Bootstrap("alloc_mem needs onesided::init() to have run".into())
        })?;
        if std::mem::align_of::<T>() > rustix::param::page_size() {
            return Err(Error::InvalidArgument(
                "alloc_mem: element alignment exceeds the page size".into(),
            ));
        }
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument("alloc_mem: size overflows".into()))?;
        let seg = Segment::create(&id.job, &id.rank.to_string(), bytes)?;
        registry().push(Registered {
            base: seg.as_ptr() as usize,
            len: seg.len(),
            tag: seg.tag(),
        });
        Ok(AllocMem {
            seg,
            len,
            _elem: PhantomData,
        })
    }

    /// Pointer to the first element.
    pub fn as_ptr(&self) -> *const T {
        self.seg.as_ptr().cast()
    }

    /// Mutable pointer to the first element.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.seg.as_ptr().cast()
    }
}

impl<T: Pod> Deref for AllocMem<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the segment holds at least len * size_of::<T>() zero-initialised bytes
        // (valid for Pod), page aligned; while this value owns it nobody else writes it
        // (windows take ownership of the AllocMem before peers can reach it).
        unsafe { std::slice::from_raw_parts(self.seg.as_ptr().cast(), self.len) }
    }
}

impl<T: Pod> DerefMut for AllocMem<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.seg.as_ptr().cast(), self.len) }
    }
}

impl<T: Pod> Drop for AllocMem<T> {
    fn drop(&mut self) {
        let base = self.seg.as_ptr() as usize;
        registry().retain(|r| r.base != base);
    }
}
