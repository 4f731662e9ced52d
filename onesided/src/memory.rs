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

use crate::bootstrap::identity::identity;
use crate::error::{Error, Result};
use crate::shm::segment::Segment;

/// A registered allocation: where it is and how peers can map it.
#[derive(Debug, Clone)]
struct Registered {
    base: usize,
    len: usize,
    tag: u64,
    /// Pages shared in place: every window over them holds the share (the last one's
    /// drop makes them private again).
    in_place: Option<std::sync::Weak<InPlacePages>>,
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

/// Pages of this process's own memory moved into a shared segment for a window's life
/// (info key `onesided_share_in_place`): peers map them like [`AllocMem`] memory. Every
/// window over them holds one (a second window inside the same pages shares the first
/// one's move); the last one dropped makes them private again, with their contents.
#[derive(Debug, Clone)]
pub(crate) struct SharedInPlace(#[allow(dead_code)] std::sync::Arc<InPlacePages>);

/// The moved pages (see [`SharedInPlace`]).
#[derive(Debug)]
pub(crate) struct InPlacePages {
    seg: Segment,
    /// Its object's inode: which pages of the range are still its mapping at the end.
    ino: u64,
    base: usize,
    len: usize,
    /// What a forked child does with the pages (given up before they move back).
    fork: Option<crate::shm::fork::ForkGuard>,
}

/// Shares the pages that hold `[addr, addr + len)` in place (see [`SharedInPlace`]), when
/// they are private, writable memory of the kinds a program computes in (anonymous, heap,
/// a private file mapping's copy; not the calling thread's stack) and /dev/shm has room; `None` otherwise (peers
/// then reach the memory by cross-memory attach). Pages partly outside the range are
/// shared whole only when `partial_pages`; without it only a range of whole pages is.
///
/// # Safety
/// No other thread of this process writes those pages while this runs, nor while the
/// result is dropped.
pub(crate) unsafe fn share_in_place(
    addr: usize,
    len: usize,
    partial_pages: bool,
) -> Result<Option<SharedInPlace>> {
    let page = rustix::param::page_size();
    let (Some(id), Some(end)) = (identity(), addr.checked_add(len)) else {
        return Ok(None);
    };
    let (lo, hi) = (addr & !(page - 1), end.next_multiple_of(page));
    if len == 0 || (!partial_pages && (lo != addr || hi != end)) {
        return Ok(None);
    }
    let mut reg = registry();
    // Pages another window (or an alloc_mem block) already shares: inside them, this window
    // shares that move (alloc_mem memory needs nothing: `lookup` finds it); overlapping them
    // only in part, the memory stays where it is (peers reach it by cross-memory attach,
    // which sees the same pages as this process).
    if let Some(r) = reg.iter().find(|r| lo < r.base + r.len && r.base < hi) {
        let inside = addr >= r.base && end <= r.base + r.len;
        return Ok(match (&r.in_place, inside) {
            (Some(w), true) => w.upgrade().map(SharedInPlace),
            _ => None,
        });
    }
    if near_this_stack(lo, hi) {
        return Ok(None);
    }
    let Some(anonymous) = private_writable(lo, hi) else {
        return Ok(None);
    };
    let seg = match Segment::create(&id.job, &id.rank.to_string(), hi - lo) {
        Ok(seg) => seg,
        Err(Error::SharedMemoryFull { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    // A forked child must get private pages again (`shm::fork`): a range its handler
    // cannot know of is not shared.
    let Some(fork) = crate::shm::fork::register(lo, hi - lo, None) else {
        return Ok(None);
    };
    // SAFETY: checked private and writable above; the caller keeps other threads away.
    let fd = unsafe { crate::shm::segment::share_pages(&seg, lo as *mut u8, hi - lo, anonymous)? };
    let ino = match crate::shm::segment::inode_of(&fd) {
        Ok(ino) => ino,
        Err(e) => {
            // SAFETY: the pages just shared, by this call; the caller's contract holds.
            unsafe { crate::shm::segment::unshare_pages(lo as *mut u8, hi - lo, None)? };
            return Err(e);
        }
    };
    // The child maps the segment privately through this descriptor (no copy at fork).
    let fork = fork.with_fd(fd);
    let tag = seg.tag();
    let pages = std::sync::Arc::new(InPlacePages {
        seg,
        ino,
        base: lo,
        len: hi - lo,
        fork: Some(fork),
    });
    reg.push(Registered {
        base: lo,
        len: hi - lo,
        tag,
        in_place: Some(std::sync::Arc::downgrade(&pages)),
    });
    Ok(Some(SharedInPlace(pages)))
}

impl Drop for InPlacePages {
    fn drop(&mut self) {
        registry().retain(|r| r.base != self.base || r.tag != self.seg.tag());
        // A child forked from now on keeps the pages as they are (private again below, or
        // shared for good): its handler must not map the segment over them. The segment's
        // descriptor tells which of its pages hold data (the rest moves back as zero pages).
        let object = self
            .fork
            .take()
            .and_then(crate::shm::fork::ForkGuard::into_fd);
        if near_this_stack(self.base, self.base + self.len) {
            // This call's own frames may live in those pages: they stay shared (still this
            // process's memory, with its contents).
            return;
        }
        // Only pages still mapped from the segment move back: a program may free window
        // memory before the window (MPICH's MTestFreeWin does), and what it mapped at
        // those addresses since is its own (moving a copy over a hole read unmapped
        // memory; over new memory it would replace it).
        let parts = crate::shm::segment::still_mapped_from(self.ino, self.base, self.len)
            .unwrap_or_else(|| vec![(self.base, self.len)]);
        for (at, len) in parts {
            // SAFETY: pages this value shared (`share_in_place`, whose caller keeps other
            // threads away now too), still mapped from its segment; the window that used
            // them is gone.
            let source = object
                .as_ref()
                .map(|fd| (rustix::fd::AsFd::as_fd(fd), (at - self.base) as u64));
            if let Err(e) =
                unsafe { crate::shm::segment::unshare_pages(at as *mut u8, len, source) }
            {
                // The pages stay shared: still this process's memory with its contents —
                // not the program's concern, so a diagnostic event rather than a line on
                // stderr.
                crate::diag::event!(
                    target: "onesided::window",
                    error = %e,
                    "window memory stays in shared memory"
                );
                let _ = e;
            }
        }
    }
}

/// Whether `[lo, hi)` may hold frames of the calling thread: pages that change while they
/// are copied. (The distance covers this library's frames below a caller's stack buffer.)
#[inline(never)]
fn near_this_stack(lo: usize, hi: usize) -> bool {
    const REACH: usize = 1 << 20;
    let here = 0u8;
    let sp = std::ptr::addr_of!(here) as usize;
    sp.saturating_add(REACH) >= lo && sp < hi.saturating_add(REACH)
}

/// Whether every mapping of `[lo, hi)` is private and writable memory of a kind that may be
/// moved: anonymous, `[heap]` or a regular file's private copy (a program's data
/// segment) — not shared mappings, huge pages or special kernel mappings. `Some(true)`
/// when all of it is anonymous or heap (pages never written there read as zero; in a
/// file's copy they read the file), `None` when it may not move.
fn private_writable(lo: usize, hi: usize) -> Option<bool> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let mut covered = lo;
    let mut anonymous = true;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        if end <= covered || start >= hi {
            continue;
        }
        let path = fields.nth(3).unwrap_or("");
        let kind_ok = path.is_empty()
            || path == "[heap]"
            || (path.starts_with('/') && !path.contains("hugepage"));
        if start > covered
            || !perms.starts_with("rw")
            || perms.as_bytes().get(3) != Some(&b'p')
            || !kind_ok
        {
            return None;
        }
        anonymous &= path.is_empty() || path == "[heap]";
        covered = end;
        if covered >= hi {
            return Some(anonymous);
        }
    }
    None
}

/// Memory from the node-local shared heap (MPI `MPI_Alloc_mem`).
///
/// Windows created over it (and regions of dynamic windows attached from it) are reached by
/// peers with direct loads and stores, which is much faster than cross-memory attach.
/// Contents start zeroed.
///
/// ```
/// # onesided::testing::run(2, |_| {
/// # let world = onesided::init()?.world().clone();
/// let mut mem = onesided::alloc_mem::<f64>(1024)?;
/// mem[0] = 1.5;
/// let win = onesided::Window::create(&world, mem)?; // peers use load/store
/// # onesided::init()?.world().barrier()?;
/// # Ok(())
/// # });
/// ```
#[derive(Debug)]
pub struct AllocMem<T: Pod> {
    seg: Segment,
    len: usize,
    /// A forked child maps it privately (`shm::fork`), as it would get `malloc`'s memory
    /// (`None` while the child handler's table is full: a child then shares it).
    _fork: Option<crate::shm::fork::ForkGuard>,
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
            in_place: None,
        });
        let fork = crate::shm::fork::register(seg.as_ptr() as usize, seg.len(), seg.reopen().ok());
        Ok(AllocMem {
            seg,
            len,
            _fork: fork,
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
